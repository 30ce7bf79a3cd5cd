"""TinyWorld: a procedurally generated toy encyclopedia in the real formats.

Why it exists: the paper trains search agents on wiki-18 (21M passages) and seven QA
benchmarks. TinyWorld is a world small enough that the *whole* pipeline (retriever, agent,
warm start, tree rollouts, RL, evaluation) runs on a laptop CPU in minutes, yet it is written in
the exact file formats of the real data, so every stage serves it unchanged:

- ``corpus.jsonl``: wiki-18 rows ``{"id": "0", "contents": "\\"Title\\"\\ntext"}``;
- ``datasets/<name>/<split>.jsonl``: FlashRAG rows ``{"id", "question", "golden_answers",
  "metadata"}`` for seven datasets mirroring the paper's benchmarks
  (:data:`at2po_lib.config.choices.DATASETS`).

What it holds (``WorldConfig`` sets the sizes): countries, cities, universities, people,
companies and films with invented, pronounceable, multi-word names and twenty functional
relations (born in, located in, capital of, founded by, directed by, CEO of, …); short passages
stating several facts each; near-miss names and shared attributes as distractors
(:mod:`.names`, :mod:`.entities`, :mod:`.passages`); single-hop, bridge, compositional (3-4
hops) and comparison questions in per-benchmark styles (:mod:`.questions`,
:mod:`.templates`, :mod:`.datasets`). Each row's ``metadata`` holds the full solution plan
(``supporting_ids``, ``hop_queries``, ``hop_answers``, …; see :mod:`.questions`).

Why test facts are unseen: entities live in disjoint ``train``/``dev``/``test`` pools and
relations never cross pools, so a test question's passages support no training question; a
policy trained on TinyWorld can answer test questions only by searching (docs/toy_scale.md).

API::

    files = build_world(cfg.world, out_dir, force=False)   # -> WorldFiles (skips if current)
    files = ensure_world(load_profile("tiny"))             # artifacts/tiny/world
    world_stats(files)                                     # DataFrame per dataset and split
    entity_stats(files)                                    # DataFrame per entity type and pool
    bm25_recall(files, k=3)                                # can BM25 find the supporting passages?
    load_world(files), read_rows(files, name, split), read_corpus(files)
    generate(cfg.world)                                    # everything in memory, no files
    DATASETS           # name -> "multihop" | "singlehop" (at2po_lib.config.choices)

Each name is imported from the module that defines it (``from at2po_lib.tinyworld.build import
build_world``). The command line is ``at2po world`` (:mod:`at2po_lib.cli.world`). With
``at2po_lib.protocol.qa_data.load_flashrag(name, split, local_dir=files.datasets_dir)`` the datasets
load like the real FlashRAG ones.
"""
