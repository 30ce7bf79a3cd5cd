"""The run record: what a run writes, how a recorded run is recognised, and how it is read back.

- :mod:`.run_folder`: run folders (``results/runs/<profile>/<method>/seed<S>/``): their files,
  metrics, checkpoints, resume and the ``DONE.json`` that marks a finished run.
- :mod:`.identity`: what a run records of its configuration, and which recorded run is the same
  configuration.
- :mod:`.outcomes`: the per-question outcome file (``outcomes.csv``) written and read.
- :mod:`.tree_files`: saved rollout trees, one ``.npz`` archive per batch.
- :mod:`.reading`: run folders read back as tidy frames, checked as the report checks them.
"""
