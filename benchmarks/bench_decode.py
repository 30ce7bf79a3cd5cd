"""The HF rollout's decode speed against Hugging Face ``generate`` on the same rows and model,
and the kernels (operators) a decode step launches.

    python benchmarks/bench_decode.py                     # CPU: 16 rows, Qwen3-0.6B's 28 layers at toy width
    python benchmarks/bench_decode.py --rows 16,64 --new-tokens 48 --shape kernels
    python benchmarks/bench_decode.py --device cuda --shape 0.6b --rows 16,64,256   # a GPU

One model (a random Qwen3; ``--shape kernels`` keeps Qwen3-0.6B's 28 layers, heads, head size
and 151,936-word vocabulary at a toy hidden width, so a step launches the real model's
operators while a CPU can run it), the same prompts (``--rows`` rows of ``--prompt-tokens``
random ids), ``--new-tokens`` tokens sampled at temperature 1, in one run, alternating:

- ``hf-generate``: ``model.generate`` (its own cache and sampling; ``min_new_tokens`` keeps
  every row to the end);
- ``turn``: :meth:`HFBackend.generate_turns` (one call for the turn; the toy's grouping);
- ``round``: a :class:`~at2po_lib.rollout.session.RoundSession` (a GPU's default grouping),
  rows closed as their turns end, its decode step captured as a CUDA graph on a GPU
  (``rollout.decode_capture = auto``); ``round-eager``: the same without the capture.

Both rollout variants run with a multi-token stop string (matched on the device every step), as
Qwen's ``</search>`` is. Tokens/s is generated tokens over wall time, best of ``--repeats``;
the LAST line holds the ratio turn / hf-generate. Kernels a step: the profiler's operators for
``n2`` tokens minus those for ``n1`` tokens over ``n2 - n1`` (prefill and set-up cancel):
``aten ops`` every ATen operator called, ``compute ops`` those that are not views or metadata
(on a CPU what would be a kernel on a GPU), and on CUDA the device kernels themselves with the
GPU-busy share (kernel time over the unprofiled wall time of the same steps).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from at2po_lib.policy.tokenizer import train_tokenizer  # noqa: E402
from at2po_lib.rollout.backends import HFBackend  # noqa: E402
from at2po_lib.rollout.sampling import SamplingSpec  # noqa: E402
from at2po_lib.rollout.turns import TurnRequest  # noqa: E402
from qwen3_shapes import QWEN3_VOCAB  # noqa: E402
from qwen3_shapes import SHAPES as REAL_SHAPES  # noqa: E402

SHAPES = {  # Qwen3's published shapes; "kernels": Qwen3-0.6B's structure at a toy width
    "kernels": dict(REAL_SHAPES["0.6b"], hidden_size=64, head_dim=8, intermediate_size=192),
    "0.6b": REAL_SHAPES["0.6b"],
    "1.7b": REAL_SHAPES["1.7b"],
}
STOPS = ("</search>", "a tag never sampled")
"""The second is several tokens in any vocabulary: the device-side stop automaton runs."""
METADATA_OPS = frozenset(
    {
        "aten::view",
        "aten::reshape",
        "aten::_unsafe_view",
        "aten::as_strided",
        "aten::expand",
        "aten::transpose",
        "aten::t",
        "aten::permute",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::slice",
        "aten::select",
        "aten::detach",
        "aten::alias",
        "aten::empty",
        "aten::empty_strided",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::lift_fresh",
        "aten::numpy_T",
        "aten::split",
        "aten::chunk",
        "aten::unbind",
        "aten::contiguous",
        "aten::result_type",
        "aten::is_nonzero",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::to",
        "aten::_to_copy",
        "aten::empty_like",
        "aten::narrow",
        "aten::unflatten",
        "aten::flatten",
        "aten::view_as",
        "aten::expand_as",
        "aten::broadcast_tensors",
        "aten::_reshape_alias",
        "aten::dropout",
        "aten::lift",
        "aten::zeros_like_meta",
    }
)
"""ATen operators that launch no kernel of their own (views, metadata, dispatch wrappers)."""


def random_qwen3(shape: str, vocab: int, dtype: torch.dtype, device: str, tokenizer, seed: int = 0):
    """A randomly initialised Qwen3 of ``SHAPES[shape]`` (tied embeddings), in eval mode."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SHAPES[shape],
    )
    return Qwen3ForCausalLM(config).to(device=device, dtype=dtype).eval()


def bench_tokenizer():
    words = "the search answer result question city country person film company a of in".split()
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 20
    return train_tokenizer(texts, vocab_size=400)


def prompts(rows: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(300, vocab, (rows, length), generator=g).tolist()


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextlib.contextmanager
def autocast_forward(model, device: str, enabled: bool) -> Iterator[None]:
    """The model's forward under bf16 autocast (as accelerate wraps a model trained with
    ``bf16``), restored afterwards; nothing when not ``enabled``."""
    if not enabled:
        yield
        return
    original = model.forward
    model.forward = torch.autocast(device.split(":")[0], dtype=torch.bfloat16)(original)
    try:
        yield
    finally:
        model.forward = original


@dataclass
class Variant:
    """One way of decoding the same rows: a name and a function of (contexts, new tokens)
    returning the tokens it generated."""

    name: str
    run: Callable[[list[list[int]], int], int]


def hf_generate(model, tokenizer) -> Callable[[list[list[int]], int], int]:
    def run(contexts: list[list[int]], new: int) -> int:
        ids = torch.tensor(contexts, device=model.device)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        return int((out.shape[1] - ids.shape[1]) * ids.shape[0])

    return run


def rollout_turns(backend: HFBackend) -> Callable[[list[list[int]], int], int]:
    def run(contexts: list[list[int]], new: int) -> int:
        results = backend.generate_turns([TurnRequest(c, new) for c in contexts])
        return sum(len(r.token_ids) for r in results)

    return run


def rollout_round(backend: HFBackend) -> Callable[[list[list[int]], int], int]:
    def run(contexts: list[list[int]], new: int) -> int:
        tokens = 0
        capacity = max(map(len, contexts)) + new + 1
        with backend.open_session([TurnRequest(c, new) for c in contexts], capacity) as session:
            while ended := session.next_turns():
                for row, result in ended:
                    tokens += len(result.token_ids)
                    session.close(row)
        return tokens

    return run


def variants(model, tokenizer, which: list[str], autocast: bool, device: str) -> list[Variant]:
    """The decode paths to compare (module docstring); ``autocast``: the rollout variants run
    the weights as they are under bf16 autocast (the path before issue #47 on a GPU)."""
    out = []
    for name in which:
        if name == "hf-generate":
            out.append(Variant(name, hf_generate(model, tokenizer)))
            continue
        grouping = name.split("-")[0]
        dtype = "model" if autocast else "auto"
        backend = HFBackend(
            model,
            tokenizer,
            SamplingSpec(temperature=1.0),
            STOPS,
            grouping=grouping,
            dtype=dtype,
            compact_below=0.5,
            capture="off" if name.endswith("-eager") else "auto",
        )
        run = rollout_turns(backend) if grouping == "turn" else rollout_round(backend)

        def wrapped(contexts, new, run=run):
            with autocast_forward(model, device, autocast):
                return run(contexts, new)

        out.append(Variant(name, wrapped))
    return out


def tokens_per_second(
    variant: Variant, contexts: list[list[int]], new: int, device: str, repeats: int
) -> tuple[float, float, float]:
    """(best tokens/s, its wall seconds, tokens per second of this process's CPU time) over
    ``repeats`` calls; on a loaded CPU the CPU time varies much less than the wall time."""
    best = (0.0, 0.0, 0.0)
    for _ in range(repeats):
        synchronize(device)
        start, cpu = time.perf_counter(), time.process_time()
        tokens = variant.run(contexts, new)
        synchronize(device)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        best = max(best, (tokens / seconds, seconds, tokens / max(cpu, 1e-9)))
    return best


def profiled_ops(
    variant: Variant, contexts: list[list[int]], new: int, device: str
) -> dict[str, float]:
    """Operator counts and device-kernel time of one call (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities) as prof:
        variant.run(contexts, new)
        synchronize(device)
    events = prof.events()
    aten = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]
    compute = [
        e
        for e in aten
        if e.name not in METADATA_OPS
        and not any(
            c.name.startswith("aten::") and c.name not in METADATA_OPS for c in e.cpu_children
        )
    ]
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    return {
        "aten ops": len(aten),
        "compute ops": len(compute),
        "kernels": len(kernels),
        "kernel seconds": sum(e.self_device_time_total for e in kernels) / 1e6,
    }


def per_step(
    variant: Variant, contexts: list[list[int]], n1: int, n2: int, device: str, repeats: int
) -> dict[str, float]:
    """Kernels and operators a decode step, and the GPU-busy share: (counts for ``n2`` tokens
    - counts for ``n1``) / (n2 - n1); busy = kernel seconds a step / unprofiled wall a step."""
    low, high = (profiled_ops(variant, contexts, n, device) for n in (n1, n2))
    steps = n2 - n1
    out = {k: (high[k] - low[k]) / steps for k in low}
    wall = [tokens_per_second(variant, contexts, n, device, repeats)[1] for n in (n1, n2)]
    out["wall seconds a step"] = (wall[1] - wall[0]) / steps
    if device.startswith("cuda") and out["wall seconds a step"] > 0:
        out["gpu busy share"] = out["kernel seconds"] / out["wall seconds a step"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="kernels")
    parser.add_argument(
        "--vocab",
        type=int,
        default=QWEN3_VOCAB,
        help="vocabulary (Qwen3's by default; on a CPU drawing a token from 151,936 "
        "words takes most of a step at the toy width)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", default="16", help="comma-separated row counts")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    parser.add_argument("--variants", default="hf-generate,turn,round")
    parser.add_argument(
        "--autocast",
        action="store_true",
        help="rollout variants: fp32 weights under bf16 autocast (a GPU's path before issue #47)",
    )
    parser.add_argument("--no-kernels", action="store_true", help="skip the profiler")
    args = parser.parse_args(argv)
    if args.device == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = bench_tokenizer()
    dtype = torch.float32
    model = random_qwen3(args.shape, args.vocab, dtype, args.device, tokenizer)
    which = args.variants.split(",")
    paths = variants(model, tokenizer, which, args.autocast, args.device)
    print(
        f"bench_decode: shape {args.shape} ({sum(p.numel() for p in model.parameters()):,} "
        f"parameters, {dtype}, vocabulary {args.vocab:,}), device {args.device}, "
        f"{args.prompt_tokens} prompt tokens, "
        f"{args.new_tokens} new tokens, torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    ratios = []
    for rows in (int(r) for r in args.rows.split(",")):
        contexts = prompts(rows, args.prompt_tokens, args.vocab)
        for variant in paths:  # warm-up: first calls pay one-off costs
            variant.run(contexts[:2], 2)
        measured = {
            v.name: tokens_per_second(v, contexts, args.new_tokens, args.device, args.repeats)
            for v in paths
        }
        print(
            f"rows {rows}: "
            + ", ".join(
                f"{k} {v[0]:,.1f} tokens/s ({v[2]:,.1f} a CPU second)" for k, v in measured.items()
            )
        )
        if not args.no_kernels:
            for variant in paths:
                steps = per_step(variant, contexts, 4, 4 + args.new_tokens // 2, args.device, 1)
                print(
                    f"  {variant.name}: "
                    + ", ".join(
                        f"{k} {v:,.4f}"
                        if k.endswith(("seconds", "share", "a step"))
                        else f"{k} {v:,.0f}"
                        for k, v in steps.items()
                    )
                    + " (a decode step)"
                )
        if "hf-generate" in measured and "turn" in measured:
            base = measured["hf-generate"]
            ratios.append(
                (
                    rows,
                    *(
                        measured.get(name, (float("nan"),) * 3)[i] / base[i]
                        for name in ("turn", "round")
                        for i in (0, 2)
                    ),
                )
            )
    print("load average after", f"{os.getloadavg()[0]:.1f}")
    print(
        "tokens/s over hf-generate, wall (CPU time) for turn; round: "
        + "; ".join(
            f"{rows} rows {tw:.2f} ({tc:.2f}); {rw:.2f} ({rc:.2f})"
            for rows, tw, tc, rw, rc in ratios
        )
    )


if __name__ == "__main__":
    main()
