"""The TRL glue: RL training of AT2PO and its baselines on TRL's ``GRPOTrainer``
(docs/method.md §5–§9). The method itself (credit, loss, presets) is :mod:`at2po_lib.method`.

Modules: :mod:`.at2po_config` (``AT2POConfig``, a ``GRPOConfig`` subclass), :mod:`.trainer`
(``AT2POTrainer``, a ``GRPOTrainer`` subclass: the training loop), :mod:`.batch` (training rows
and their per-token advantages), :mod:`.search_agent` (tree rollouts as training rows),
:mod:`.callbacks` (records and progress), :mod:`.rank_record` (each rank's record of a
multi-process run), :mod:`.resolve` (profile + preset → one :class:`RunSpec`). One run with its
records is :func:`at2po_lib.study.run.train`; the run record is :mod:`at2po_lib.record`.

``import at2po_lib.trainer`` loads neither torch nor trl.
"""
