"""The study: one training run with its records (:mod:`.run`, ``train``), the runs of Tables
1–3 over seeds (:mod:`.tables`) and the paired blocks of the toy study (:mod:`.blocks`, with the
block folders' names and bounds in :mod:`.block_records`). Their command lines are ``at2po
train`` and ``at2po study``.

    from at2po_lib.study.run import train
    result = train("tiny", "at2po", seed=0)      # records in result.run.root
"""
