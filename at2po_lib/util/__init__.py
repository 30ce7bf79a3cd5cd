"""Plumbing every stage shares and none of them is about: where files live (:mod:`.paths`),
folders swapped in only when complete (:mod:`.staging`), where a result came from
(:mod:`.provenance`), byte-stable writing of committed outputs (:mod:`.writing`), quiet library
progress bars (:mod:`.quiet`) and the measured notebook times (:mod:`.timings`)."""
