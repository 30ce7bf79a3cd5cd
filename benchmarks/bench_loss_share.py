"""The share of a tiny RL step the policy loss takes.

    python benchmarks/bench_loss_share.py                    # tiny, at2po, 2 steps, ~2 min
    python benchmarks/bench_loss_share.py --steps 3 --method grpo

Trains ``--steps`` rollout steps of ``--method`` on the profile (tiny: 16 prompts x 8 leaves,
8 optimizer updates a step) from the shipped warm start, in a scratch results folder, with the
trainer as it is. At every call of the trainer's loss (``loss_and_diagnostics``:
:func:`at2po_lib.method.loss.policy_loss` and :func:`~at2po_lib.method.loss.loss_diagnostics`,
on one CPU thread) it also times the same call, forward + backward, on a detached copy of the
same inputs.

Printed: the step's wall time (the trainer's first to last step, over the steps), the
milliseconds the loss takes a step and its share of the step. Issue #49 measured a fused form
(a hand-written backward, removed then) the same way, against the definition: both under 1% of
a step (benchmarks/README.md). Torch threads are the trainer's (``train.update_num_threads``,
tiny: 1); the load average is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train_step import _StepClock, find_policy, prepare_artifacts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--method", default="at2po")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--policy", default=None)
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    scratch = Path(tempfile.mkdtemp(prefix="bench_loss_share_"))
    os.environ["AT2PO_ARTIFACTS"] = str(scratch / "artifacts")
    os.environ["AT2PO_RESULTS"] = str(scratch / "results")
    os.environ["AT2PO_FIGURES"] = str(scratch / "figures")
    import torch

    import at2po_lib.trainer.trainer as trainer_module
    from at2po_lib.config.profile import load_profile
    from at2po_lib.record import run_folder
    from at2po_lib.study.run import build_trainer

    overrides: dict = {
        "train": {
            "max_steps": args.steps,
            "eval_every": 0,
            "final_eval": False,
            "progress_bar": False,
            "save_every": 0,
            "report_to": [],
        }
    }
    policy = find_policy(args.profile, args.policy) if args.profile != "smoke" else None
    if policy is not None:
        prepare_artifacts(args.profile, scratch)
        overrides["policy"] = {"model": policy}
    cfg = load_profile(args.profile, overrides)
    seconds: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)

    def timed(name, fn):
        start = time.perf_counter()
        out = fn()
        seconds[name] += time.perf_counter() - start
        calls[name] += 1
        return out

    def forward_backward(loss_fn, batch, *rest):
        x = batch.logp.detach().clone().requires_grad_(True)
        out = loss_fn(dataclasses.replace(batch, logp=x), *rest)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        return out

    real = trainer_module.loss_and_diagnostics

    def wrapper(batch, *rest):
        if torch.is_grad_enabled() and batch.logp.requires_grad:  # the loss of an update
            timed("loss", lambda: forward_backward(real, batch, *rest))
        return real(batch, *rest)

    trainer_module.loss_and_diagnostics = wrapper
    run = run_folder.run_dir(cfg.name, "bench_loss_share", 0)
    trainer = build_trainer(cfg, args.method, 0, run)
    clock = _StepClock()
    trainer.add_callback(clock.callback)
    print(
        f"profile {args.profile}, method {args.method}, {args.steps} steps; torch "
        f"{torch.__version__}, {os.cpu_count()} CPUs, update threads "
        f"{trainer.args.update_num_threads or torch.get_num_threads()}"
    )
    load_before = os.getloadavg()[0]
    trainer.train()
    load_after = os.getloadavg()[0]
    rows = run_folder.read_jsonl(run.metrics)
    step = clock.wall / len(rows)
    rollout = sum(r["rollout/seconds"] for r in rows) / len(rows)
    print(
        f"step: {step:.2f} s wall on average, first to last step ({rollout:.2f} s of it "
        f"rollout), {len(rows)} steps; load average {load_before:.1f} before, "
        f"{load_after:.1f} after"
    )
    per_step = seconds["loss"] / len(rows)
    print(
        f"loss (policy_loss + loss_diagnostics, forward + backward): {per_step * 1000:.1f} ms "
        f"a step ({calls['loss'] // len(rows)} calls), {100 * per_step / step:.2f}% of a step"
    )
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
