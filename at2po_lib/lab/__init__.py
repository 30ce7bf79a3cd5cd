"""What the notebooks run beside reading records: a live training run with redrawn curves
(:mod:`.live`), two runs trained side by side (:mod:`.side_by_side`), the regime pilot's trees
grown and scored (:mod:`.regime_pilot`, ``at2po regime-pilot``), the tree inspector that grows
trees on demand (:mod:`.inspector`) and the notebooks executed
(:mod:`.notebook_runner`, ``at2po run-notebooks``). Reading records and drawing stays in
:mod:`at2po_lib.reporting`."""
