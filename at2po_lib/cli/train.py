"""``at2po train``: RL training of one method on one profile and seed
(:func:`at2po_lib.study.run.train`).

Overrides go through ``--set`` only: ``--set SECTION.KEY=VALUE`` for a profile value and
``--set trainer.FIELD=VALUE`` for an ``AT2POConfig`` field the profile does not set (applied
after the method preset, e.g. ``trainer.beta``; a field the run derives from the profile, such
as ``trainer.learning_rate``, is refused with the profile key to use). ``--max-steps N`` and
``--arg FIELD=VALUE`` are kept as shorthands for ``--set train.max_steps=N`` and
``--set trainer.FIELD=VALUE`` and go through the same parser.
"""

from __future__ import annotations

import argparse

from ..config.profile import load_profile
from .options import (
    CommandParser,
    SEED,
    UsageError,
    add_profile_options,
    bounded_int,
    check_engine,
    check_methods,
    parse_set,
    quiet_openmp,
    run_guarded,
)

PROG = "at2po train"
TRAINER_SECTION = "trainer"

EXAMPLES = """\
examples:
  at2po train --list-methods
  at2po train --profile tiny --method at2po --seed 0
  at2po train --profile tiny --method grpo --seed 1 --set train.max_steps=20 \\
      --set train.learning_rate=1e-4
  at2po train --profile tiny --method at2po --set trainer.epsilon_high=0.005
  at2po train --profile tiny --method at2po --seed 0 --resume     # continue a killed run
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one method (AT2PO or a baseline) on one profile and seed; records "
        "go to results/runs/<profile>/<method>/seed<S>/.",
    )
    add_profile_options(
        parser,
        example="train.learning_rate=1e-4, or trainer.beta=0 for an "
        "AT2POConfig field after the method preset",
    )
    parser.add_argument("--method", help="a preset name (see --list-methods)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument(
        "--resume", action="store_true", help="continue from the run's last complete checkpoint"
    )
    parser.add_argument("--force", action="store_true", help="re-run a finished run")
    parser.add_argument("--list-methods", action="store_true")
    parser.add_argument(
        "--max-steps",
        type=bounded_int(1, 1_000_000),
        default=None,
        help="shorthand for --set train.max_steps=N",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="FlashRAG files on disk, DIR/<dataset>/<split>.jsonl (shorthand "
        "for --set data.local_dir=DIR)",
    )
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="shorthand for --set trainer.FIELD=VALUE",
    )
    return parser


def override_texts(args: argparse.Namespace) -> list[str]:
    """Every override as ``--set`` text: the ``--set`` values, then the shorthands."""
    texts = list(args.overrides)
    given = {t.split("=", 1)[0].strip() for t in texts}
    for option, key, value in (
        ("--max-steps", "train.max_steps", args.max_steps),
        ("--data-dir", "data.local_dir", getattr(args, "data_dir", None)),
    ):
        if value is None:
            continue
        if key in given:  # one of the two would be dropped without a word
            raise UsageError(f"{option} {value} and --set {key}=... both given; give one")
        texts.append(f"{key}={value}")
    for text in args.arg:
        if "=" not in text:
            raise UsageError(f"--arg {text!r} is not FIELD=VALUE")
        texts.append(f"{TRAINER_SECTION}.{text}")
    return texts


def split_overrides(texts: list[str]) -> tuple[dict, dict]:
    """(profile overrides, ``AT2POConfig`` overrides), every key and value checked up front;
    ``trainer.*`` keys are checked against ``AT2POConfig`` (which loads trl) only when given."""
    extra = None
    keys = [t.split("=", 1)[0].strip().split(".", 1) for t in texts]
    if any(key[0] == TRAINER_SECTION for key in keys):
        # lazy: the stage pulls torch, trl; `at2po train --help` stays instant
        from ..trainer.at2po_config import AT2POConfig
        from ..trainer.resolve import check_trainer_overrides

        # Rollout knobs first: they are not AT2POConfig fields, and the error names their home.
        check_trainer_overrides(
            {key[1]: None for key in keys if key[0] == TRAINER_SECTION and len(key) == 2}
        )
        extra = {TRAINER_SECTION: AT2POConfig}
    merged = parse_set(texts, extra)
    trainer = merged.pop(TRAINER_SECTION, {})
    if trainer:
        check_trainer_overrides(trainer)
    return merged, trainer


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_methods:
        # lazy: the stage pulls torch; `at2po train --help` stays instant
        from ..method.presets import format_methods

        print(format_methods())
        return 0
    if not args.method:
        parser.error("--method is required (see --list-methods)")
    quiet_openmp()
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    check_methods([args.method])
    profile_overrides, trainer_overrides = split_overrides(override_texts(args))
    check_engine(load_profile(args.profile, profile_overrides or None), trainer_overrides)
    # lazy: the stage pulls pandas, torch, transformers; `at2po train --help` stays instant
    from ..study.run import train

    result = train(
        args.profile,
        args.method,
        args.seed,
        resume=args.resume,
        force=args.force,
        profile_overrides=profile_overrides,
        trainer_overrides=trainer_overrides,
    )
    print(f"{result.status}: {result.run.root} ({result.wall_time:.1f} s)")
    if result.final_eval is not None:
        print(result.final_eval.to_string(index=False))
    return 0
