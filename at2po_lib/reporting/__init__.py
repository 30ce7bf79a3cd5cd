r"""Reporting: the paper's tables and figures regenerated from stored run records.

One module per table or figure; notebooks (04, 05) and ``at2po report`` only call them. The
run folders are read by :mod:`at2po_lib.record.reading`; what trains or grows trees for a
notebook is :mod:`at2po_lib.lab`.

- :mod:`.curves`: training curves over steps (reward, entropy, clip fractions, ...).
- :mod:`.table1`, :mod:`.table2`, :mod:`.table3`: the paper's Tables 1–3 (toy or paper scale)
  with 95% intervals (:mod:`at2po_lib.evaluation.stats`) beside the published numbers.
- :mod:`.figure3`, :mod:`.figure4`: policy entropy and HotpotQA EM over steps; turns per sample.
- :mod:`.output`: writers (CSV + Markdown + LaTeX tables, PNG + PDF figures), each with a
  ``.meta.json`` naming the run folders, seeds and git revision it came from.
- :mod:`.readme`: the result tables of the README and ``docs/toy_study.md``, generated from the
  written Markdown files.
- :mod:`.report`: :func:`write_report`, everything above for one profile (``at2po report``).
"""
