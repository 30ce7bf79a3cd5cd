"""``at2po plan``: what one training step of a profile will cost on N GPUs (no GPU needed).

    at2po plan --profile paper-qwen3-4b --gpus 8
    at2po plan --profile paper-qwen3-8b --gpus 8 --zero 2 --gpu-memory-gib 80 --json
    at2po plan --profile paper-qwen3-1.7b-1gpu --gpus 1 --cards 24,48,80,141
    at2po plan --profile paper-qwen3-1.7b-1gpu --gpus 1 --method grpo   # + its reference model

Memory per GPU with a verdict (fits, tight, does not fit), generated tokens and retrieval
queries per step, the query rate the retrieval server must sustain and whether CPU faiss can:
the formulas are in :mod:`at2po_lib.plan.cost_estimate`. ``--cards`` gives the verdict for several card
sizes, as configured and with LoRA.
"""

from __future__ import annotations

import argparse
import json

from ..method.presets import get_method
from ..plan.cost_estimate import (
    DEFAULT_PLAN_METHOD,
    ZERO_STAGES,
    Hardware,
    PlanError,
    card_table,
    format_cards,
    format_plan,
    plan,
)
from .options import (
    CommandParser,
    UsageError,
    add_profile_options,
    bounded_float,
    bounded_int,
    comma_list,
    load_profile_args,
    run_guarded,
)

PROG = "at2po plan"


def build_parser() -> argparse.ArgumentParser:
    d = Hardware(gpus=1)
    parser = CommandParser(
        prog=PROG,
        description="Estimate memory per GPU and the "
        "rollout and retrieval load of one training step.",
    )
    add_profile_options(parser, default=None, example="train.micro_batch_rows=1")
    parser.add_argument(
        "--gpus", type=bounded_int(1, 65_536), required=True, help="GPUs, one process each"
    )
    parser.add_argument(
        "--method",
        type=trained_method,
        default=DEFAULT_PLAN_METHOD,
        help="the method trained: a KL coefficient beta > 0 (grpo, tree_grpo) loads a "
        f"reference model (default {DEFAULT_PLAN_METHOD})",
    )
    parser.add_argument(
        "--zero",
        choices=ZERO_STAGES,
        default=None,
        help="DeepSpeed ZeRO stage; none: no DeepSpeed (fp32 master weights in "
        "the trainer). Default: 3 with more than one GPU, else none",
    )
    parser.add_argument(
        "--offload-optimizer",
        action="store_true",
        help="optimizer states on the CPU (zero3_offload_8gpu.yaml)",
    )
    parser.add_argument(
        "--gpu-memory-gib",
        type=bounded_float(0, 1e6, open_low=True),
        default=d.gpu_memory_gib,
        help=f"memory of one GPU (default {d.gpu_memory_gib:g}: the paper's H20)",
    )
    parser.add_argument(
        "--no-fused-lm-head",
        action="store_true",
        help="count the fp32 log-softmax over the vocabulary (no chunked LM head)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--retriever-on-cpu",
        action="store_true",
        help="the retrieval server's faiss index and encoder on the CPU (nothing "
        "of it on the GPUs). Default with one GPU (a 1-GPU profile's server "
        "runs with --no-gpu-index)",
    )
    where.add_argument(
        "--retriever-on-gpu",
        action="store_true",
        help="the index sharded over the GPUs in fp16 and the encoder on GPU 0 "
        "(Search-R1's layout). Default with more than one GPU",
    )
    parser.add_argument(
        "--cards",
        default=None,
        metavar="GIB,GIB,...",
        help="verdicts for these card sizes (e.g. 24,48,80,141), as configured "
        "and with LoRA, instead of one plan",
    )
    parser.add_argument(
        "--cpu-gflops",
        type=bounded_float(0, 1e9, open_low=True),
        default=d.cpu_gflops,
        help=f"sustained CPU sgemm GFLOP/s of the server (default {d.cpu_gflops:g})",
    )
    parser.add_argument(
        "--gpu-tflops",
        type=bounded_float(0, 1e6, open_low=True),
        default=d.gpu_tflops,
        help=f"sustained fp32 TFLOP/s of one GPU (default {d.gpu_tflops:g})",
    )
    parser.add_argument(
        "--mean-searches",
        type=bounded_float(0, 1024),
        default=d.mean_searches,
        help=f"searches per trajectory (default {d.mean_searches:g})",
    )
    parser.add_argument(
        "--passages",
        type=bounded_int(1, 10**12),
        default=d.passages,
        help=f"passages in the index (default {d.passages:,}: wiki-18)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.profile is None:
        raise UsageError("--profile is required (e.g. --profile paper-qwen3-4b)")
    cfg = load_profile_args(args)
    zero = args.zero or ("3" if args.gpus > 1 else "none")
    hw = Hardware(
        gpus=args.gpus,
        gpu_memory_gib=args.gpu_memory_gib,
        zero_stage=zero,
        offload_optimizer=args.offload_optimizer,
        fused_lm_head=not args.no_fused_lm_head,
        retriever_on_gpu=retriever_on_gpu(args),
        cpu_gflops=args.cpu_gflops,
        gpu_tflops=args.gpu_tflops,
        mean_searches=args.mean_searches,
        passages=args.passages,
    )
    try:
        if args.cards is not None:
            rows = card_table(cfg, hw, _card_sizes(args.cards), method=args.method)
            text = format_cards(rows, cfg.name, hw, args.method)
            print(json.dumps(rows, indent=2) if args.json else text)
            return 0
        result = plan(cfg, hw, args.method)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    print(
        json.dumps(result, indent=2, default=float) if args.json else format_plan(result, cfg.name)
    )
    return 0


def retriever_on_gpu(args: argparse.Namespace) -> bool:
    """Where the plan puts the retrieval server: as asked, else on the GPUs only when there
    are several (one card has no room for a 32 GB index beside training)."""
    if args.retriever_on_cpu or args.retriever_on_gpu:
        return args.retriever_on_gpu
    return args.gpus > 1


def trained_method(name: str) -> str:
    """A method preset that trains (``react`` only evaluates: it has no step to plan)."""
    try:
        method = get_method(name)
    except KeyError as exc:  # the message names the closest presets
        raise argparse.ArgumentTypeError(str(exc).strip("'\"")) from None
    if not method.trains:
        raise argparse.ArgumentTypeError(f"{name!r} trains nothing; plan a trained method")
    return name


def _card_sizes(text: str) -> list[float]:
    """``--cards 24,48,80,141`` -> [24.0, 48.0, 80.0, 141.0]; anything else names the value."""
    try:
        sizes = [float(part) for part in comma_list(text, "--cards") or []]
    except ValueError:
        raise UsageError(
            f"--cards {text!r}: expected GiB sizes separated by commas, e.g. 24,48,80,141"
        ) from None
    if not sizes or any(not size > 0 for size in sizes):
        raise UsageError(f"--cards {text!r}: expected positive GiB sizes, e.g. 24,48,80,141")
    return sizes
