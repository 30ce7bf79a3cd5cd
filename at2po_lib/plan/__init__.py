"""Before a paper-scale run: its cost in GPU hours and memory (:mod:`.cost_estimate`, ``at2po
plan``), the GPU environment's pins checked (:mod:`.gpu_env`, ``at2po gpu-env``) and the
rehearsal's files, the paper path at CPU size (:mod:`.rehearsal`, ``at2po rehearsal``)."""
