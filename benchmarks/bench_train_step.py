"""One tiny RL step: the old log-prob path against the new default, alternating in one run.

    python benchmarks/bench_train_step.py                       # tiny warm start, ~2 min
    python benchmarks/bench_train_step.py --repeats 5 --method grpo
    python benchmarks/bench_train_step.py --threads-study   # torch threads per stage

A *step* is one rollout batch of the profile (tiny: 8 prompts, 8 leaves each, two optimizer
updates): rollout, credit, and both updates (forward, backward, optimizer). Two variants of
:class:`at2po_lib.trainer.trainer.AT2POTrainer`, same seed, same rollout:

- ``old``: the path before issue #16 — TRL's fused LM head over every completion position
  (prompt, search results, padding included on a CPU) in one padded batch, and the old
  log-probs recomputed by an extra no-grad forward (``loss_logp_positions="all"``,
  ``loss_old_logps="recompute"``, ``loss_chunk_rows=0``);
- ``new``: the profile's defaults — log-probs only at the policy's own tokens, on
  length-sorted chunks of ``train.loss_chunk_rows`` rows, and the rollout's recorded old
  log-probs (``"auto"``, ``"auto"``: see ``at2po_lib.trainer.trainer``).

Runs alternate old/new/new/old/... so a change of machine load hits both alike; each run is
timed from the trainer's first to its last step (model loading and setup excluded). Printed:
loss, gradient norm and entropy of both (they must agree: same rollout, same maths), the
largest parameter difference after the step, each variant's best and median time, the load
average and, on the last line, the speed-up of the new default (old time / new time, best of
the repeats; goal >= 2.5).

The policy is ``--policy DIR``, else the profile's warm start (``artifacts/<profile>/policy/
warmstart``), else the committed one (``results/<profile>/warmstart``), else the newest
``warmstart_checkpoints/step-*`` (while it trains). World and
index are copied from ``artifacts/<profile>`` into a temporary folder (nothing in the checkout
is written). ``--profile smoke`` builds its own artefacts in the temporary folder (seconds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = {"loss_logp_positions": "all", "loss_old_logps": "recompute"}  # + train.loss_chunk_rows 0
NEW: dict[str, str] = {}
ONE_STEP_TRAIN = {
    "max_steps": 1,
    "eval_every": 0,
    "final_eval": False,
    "progress_bar": False,
    "save_every": 0,
    "report_to": [],
}
"""``train`` overrides of a one-step benchmark run: no validation, evaluation, checkpoint or log."""


def find_policy(profile: str, given: str | None) -> str | None:
    if given:
        return given
    base = ROOT / "artifacts" / profile / "policy"
    if (base / "warmstart" / "config.json").exists():
        return str(base / "warmstart")
    shipped = ROOT / "results" / profile / "warmstart"  # the committed warm start
    if (shipped / "config.json").exists():
        return str(shipped)
    steps = sorted((base / "warmstart_checkpoints").glob("step-*"))
    steps = [s for s in steps if (s / "model.safetensors").exists()]
    return str(steps[-1]) if steps else None


def prepare_artifacts(profile: str, scratch: Path) -> None:
    """Copy the profile's world and index (read only here) into the scratch artefacts."""
    source = ROOT / "artifacts" / profile
    for part in ("world", "index"):
        if (source / part).exists():
            shutil.copytree(source / part, scratch / "artifacts" / profile / part)


class _StepClock:
    """Wall and CPU time from the first step's start to the end of training."""

    def __init__(self):
        from transformers import TrainerCallback

        clock = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.start = (time.perf_counter(), time.process_time())

            def on_train_end(self, args, state, control, **kwargs):
                clock.end = (time.perf_counter(), time.process_time())

        self.callback = _Callback()
        self.start = self.end = (0.0, 0.0)

    @property
    def wall(self) -> float:
        return self.end[0] - self.start[0]

    @property
    def cpu(self) -> float:
        return self.end[1] - self.start[1]


def run_once(cfg, method: str, overrides: dict, name: str, update_threads: int):
    import torch

    from at2po_lib.record import run_folder
    from at2po_lib.study.run import build_trainer

    run = run_folder.run_dir(cfg.name, name, 0)
    run_folder.clear_run(run)
    trainer = build_trainer(cfg, method, 0, run, overrides or None)
    clock = _StepClock()
    trainer.add_callback(clock.callback)
    previous = torch.get_num_threads()
    if update_threads:
        torch.set_num_threads(update_threads)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(previous)
    row = run_folder.read_jsonl(run.metrics)[0]
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return clock, row, params, (trainer.logp_positions, trainer.old_logps_source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--method", default="at2po")
    parser.add_argument("--policy", default=None, help="policy folder (default: see above)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument(
        "--rollout-threads",
        type=int,
        default=None,
        help="torch threads of the rollout (default: the profile's)",
    )
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        help="train.loss_chunk_rows of the new default (default: the profile's)",
    )
    parser.add_argument(
        "--update-threads",
        type=int,
        default=0,
        help="torch threads of the updates (default 0: torch's, one per core)",
    )
    parser.add_argument(
        "--threads-study",
        action="store_true",
        help="instead of old vs new: the new default with the profile's threads "
        "vs one update thread vs two rollout threads (last line: ratios)",
    )
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    scratch = Path(tempfile.mkdtemp(prefix="bench_train_step_"))
    os.environ["AT2PO_ARTIFACTS"] = str(scratch / "artifacts")
    os.environ["AT2PO_RESULTS"] = str(scratch / "results")
    os.environ["AT2PO_FIGURES"] = str(scratch / "figures")
    import torch

    from at2po_lib.config.profile import load_profile

    overrides: dict = {"train": dict(ONE_STEP_TRAIN)}
    policy = find_policy(args.profile, args.policy) if args.profile != "smoke" else None
    if args.profile != "smoke":
        if policy is None:
            raise SystemExit(
                f"no policy for profile {args.profile!r}: train its warm start, "
                "pass --policy DIR, or use --profile smoke"
            )
        prepare_artifacts(args.profile, scratch)
        overrides["policy"] = {"model": policy}
    if args.chunk_rows is not None:
        overrides["train"]["loss_chunk_rows"] = args.chunk_rows
    if args.rollout_threads is not None:
        overrides["rollout"] = {"num_threads": args.rollout_threads}
    cfg = load_profile(args.profile, overrides)
    old_cfg = load_profile(
        args.profile, {**overrides, "train": {**overrides["train"], "loss_chunk_rows": 0}}
    )
    print(
        f"profile {args.profile}, method {args.method}, policy {policy or '(smoke warm start)'}; "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, rollout threads "
        f"{cfg.rollout.num_threads or torch.get_num_threads()}, update threads "
        f"{args.update_threads or torch.get_num_threads()}, new default's loss_chunk_rows "
        f"{cfg.train.loss_chunk_rows}"
    )
    if args.threads_study:
        two = load_profile(args.profile, {**overrides, "rollout": {"num_threads": 2}})
        variants = {
            "new": (cfg, NEW, 0),
            "update-1-thread": (cfg, NEW, 1),
            "rollout-2-threads": (two, NEW, 0),
        }
    else:
        variants = {
            "old": (old_cfg, OLD, args.update_threads),
            "new": (cfg, NEW, args.update_threads),
        }
    run_once(cfg, args.method, NEW, "warmup", args.update_threads)  # caches, lazy imports

    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    rows, params = {}, {}
    for i in range(args.repeats):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))
        for variant in order:
            run_cfg, trainer_overrides, threads = variants[variant]
            clock, row, p, resolved = run_once(
                run_cfg, args.method, trainer_overrides, f"bench_{variant}", threads
            )
            times[variant].append((clock.wall, clock.cpu))
            rows[variant], params[variant] = row, p
            print(
                f"  run {i + 1} {variant} ({resolved[0]} positions, {resolved[1]} old "
                f"log-probs): {clock.wall:.2f} s wall, {clock.cpu:.2f} s CPU; loss "
                f"{row['loss']:.6f}, grad norm {row['grad_norm']:.6f}, entropy "
                f"{row['entropy']:.6f}; rollout {row['rollout/seconds']:.2f} s"
            )
    base, other = list(variants)[:2]
    a, b = rows[base], rows[other]
    param_diff = max(float((params[base][n] - params[other][n]).abs().max()) for n in params[base])
    print(
        f"equality ({base} vs {other}): |loss diff| {abs(a['loss'] - b['loss']):.2e}, "
        f"|grad-norm diff| {abs(a['grad_norm'] - b['grad_norm']):.2e}, |entropy diff| "
        f"{abs(a['entropy'] - b['entropy']):.2e}, max |parameter diff| {param_diff:.2e}"
    )
    for variant, values in times.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        print(
            f"{variant}: wall best {min(walls):.2f} s, median {statistics.median(walls):.2f} s; "
            f"CPU best {min(cpus):.2f} s"
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    shutil.rmtree(scratch, ignore_errors=True)
    best = {k: min(w for w, _ in v) for k, v in times.items()}
    if args.threads_study:
        print(
            "time relative to the profile's threads (wall, best; > 1 = slower): "
            + ", ".join(f"{k} {best[k] / best['new']:.2f}" for k in variants if k != "new")
        )
        return
    print(
        f"tiny step speed-up of the new default (old/new wall time, best of {args.repeats}): "
        f"{best['old'] / best['new']:.2f}"
    )


if __name__ == "__main__":
    main()
