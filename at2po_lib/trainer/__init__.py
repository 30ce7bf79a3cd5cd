"""The TRL glue: RL training of AT2PO and its baselines on TRL's ``GRPOTrainer``
(docs/method.md §5–§9). The method itself (credit, loss, presets) is :mod:`at2po_lib.method`.

Modules: :mod:`.at2po_config` (``AT2POConfig``, a ``GRPOConfig`` subclass), :mod:`.trainer`
(``AT2POTrainer``, a ``GRPOTrainer`` subclass), :mod:`.batch` (training rows and
their per-token advantages), :mod:`.search_agent` (tree rollouts as training rows),
:mod:`.run_folder` (run folders, metrics, resume), :mod:`.callbacks` (records and progress),
:mod:`.resolve` (profile + preset → one :class:`RunSpec`), :mod:`.identity` (what a run
records, and which recorded run is the same configuration), :mod:`.run` (``train``: one run with
its records), :mod:`.study` (the runs of Tables 1–3 over seeds). Their command lines are in
:mod:`at2po_lib.cli`.

    from at2po_lib.trainer.run import train
    result = train("tiny", "at2po", seed=0)      # records in result.run.root

``import at2po_lib.trainer`` loads neither torch nor trl.
"""
