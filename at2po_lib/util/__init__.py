"""Plumbing every stage shares and none of them is about: where files live (:mod:`.paths`),
folders swapped in only when complete (:mod:`.staging`), where a result came from
(:mod:`.provenance`), byte-stable writing of committed outputs (:mod:`.writing`), quiet library
progress bars (:mod:`.quiet`), the measured notebook times (:mod:`.timings`), one writer per run
folder or index (:mod:`.locks`), storage failures named (:mod:`.storage`), notebook kernels
without a TCP port (:mod:`.unix_kernel`) and the transformers releases' differences
(:mod:`.hf_compat`)."""
