"""AT2PO companion library: every stage of "AT2PO: Agentic Turn-based Policy Optimization
via Tree Search" (arXiv 2601.04767) as small, tested modules.

The method itself is one package, :mod:`at2po_lib.method` (the tree type, entropy-guided
expansion, turn-wise credit, the ATPO loss, the presets of Tables 1-3), which imports none of
the others. Around it, in the paper's order:

- configuration: :mod:`at2po_lib.config` (profiles, ``--set``, the checks of every value and
  the names they are chosen from)
- the agent's protocol: :mod:`at2po_lib.protocol` (prompts, actions, rewards, the QA datasets
  and their preflight); the toy world: :mod:`at2po_lib.tinyworld`
- retrieval: :mod:`at2po_lib.retrieval`
- policy and rollout: :mod:`at2po_lib.policy`, :mod:`at2po_lib.rollout` (the engine: backends,
  the agent loop, growing trees)
- the run record: :mod:`at2po_lib.record` (run folders written, recognised and read back;
  outcome and tree files); before a GPU hour: :mod:`at2po_lib.plan` (``at2po plan``, the GPU
  environment, the CPU rehearsal)
- training: :mod:`at2po_lib.trainer` (the TRL glue and the training loop),
  :mod:`at2po_lib.warmstart` (the supervised warm start), :mod:`at2po_lib.study` (one run with
  its records, ``train``; the runs of Tables 1-3 and the study's blocks)
- evaluation, analysis and reporting: :mod:`at2po_lib.evaluation` (greedy per-question
  outcomes, the statistics over seeds and questions, the paper's numbers),
  :mod:`at2po_lib.analysis` (expansion and credit measured at toy scale),
  :mod:`at2po_lib.reporting` (Tables 1-3, Figures 3-4, tree drawings, read from the records)
- what the notebooks run: :mod:`at2po_lib.lab` (a live run, two runs side by side, the regime
  pilot, the tree inspector, the notebook runner)
- the ``at2po`` command: :mod:`at2po_lib.cli` (one module per subcommand; the stage modules
  above have no command line of their own)
- plumbing: :mod:`at2po_lib.util` (paths, staging, provenance, output writing, quiet, timings)

No module imports a package on a floor above its own, none imports one that imports it back,
and every name is imported from the module that defines it (``tests/test_architecture.py``).

Heavy dependencies (torch, transformers, trl, faiss) are imported by the modules that need
them, never here, so ``import at2po_lib`` stays fast.
"""

__version__ = "0.1.0"
