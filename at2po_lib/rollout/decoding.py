r"""How the Hugging Face rollout decodes on a device: in which dtype, and how rows are grouped
into decode calls (``rollout.decode_dtype``, ``rollout.decode_grouping``).

**Dtype.** Training without DeepSpeed keeps fp32 master weights (``run.master_weights_dtype``);
run as they are, generation reads 4 bytes a weight and keeps an fp32 KV cache, and under
accelerate's bf16 autocast every matmul casts its weight again (~450 extra kernels a decode
step at Qwen3's 28 layers). ``auto`` decodes in bf16 on a GPU with bf16 support when the weights
are fp32: the rollout runs on a bf16 copy of the weights (made at the start of a decode call,
freed at its end, the master weights untouched) with a bf16 KV cache. On a CPU, and for weights
already in half precision, ``auto`` is the weights' own dtype: the toy's fp32 rollouts stay
fp32 and reproduce. ``model`` always runs the weights as they are (the earlier
behaviour). Sampling (log-softmax, entropies, the draw) stays in fp32 whatever the dtype: the
recorded log-probabilities are the importance ratio's denominator, and bf16's 8-bit mantissa
would put ~0.02 nats of error on a log-probability of -5.

Why a copy and not the model cast for the rollout and back: casting fp32 weights to bf16 and
back loses their low 16 bits (the point of master weights), so a cast needs the fp32 values kept
somewhere anyway; a copy costs ``2P`` bytes during the rollout only, where the update phase
already holds ``4P`` of gradients and a ``2P`` autocast copy (``at2po plan``'s two phases).

**Grouping.** ``turn``: one decode call per turn depth: every chain's next turn starts
together, and the call lasts until its slowest row stops (the earlier behaviour).
``round``: one decode call per expansion round holds every node of the round (all prompts, all
chains, all turns): a row whose turn stops gets its observation and goes on in the same call
while the others keep decoding. Both sample every row each step from one generator, so the
same seed draws other numbers once rows are grouped differently; ``auto`` is ``turn`` on a CPU
(the toy's records reproduce) and ``round`` on a GPU. AEPO branches between turn depths and
always runs ``turn``.

**Capture.** ``rollout.decode_capture``: ``auto`` records a round session's decode step once as
a CUDA graph on a GPU and replays it (:mod:`.capture`: ~1,900 kernel launches from Python
become one) and runs it eagerly on a CPU; ``on`` also runs the static-shape step on a CPU (what
a graph records, eagerly: the tests compare it with the eager step); ``off`` never.
"""

from __future__ import annotations

from ..config.choices import DECODE_CAPTURES, DECODE_DTYPES, DECODE_GROUPINGS

HALF_DTYPES = ("bfloat16", "float16")


def decode_dtype(
    choice: str, weights_dtype: str, device_type: str, bf16_supported: bool = True
) -> str:
    """The dtype generation runs in, by name, for ``rollout.decode_dtype = choice`` and weights
    of ``weights_dtype`` on a ``device_type`` device (``cpu``, ``cuda``)."""
    if choice not in DECODE_DTYPES:
        raise ValueError(
            f"rollout.decode_dtype={choice!r}; expected one of {', '.join(DECODE_DTYPES)}"
        )
    if choice == "model":
        return weights_dtype
    if choice != "auto":
        return choice
    if device_type == "cuda" and weights_dtype == "float32" and bf16_supported:
        return "bfloat16"
    return weights_dtype


def decode_grouping(choice: str, device_type: str) -> str:
    """``turn`` or ``round`` for ``rollout.decode_grouping = choice`` on a ``device_type``
    device."""
    if choice not in DECODE_GROUPINGS:
        raise ValueError(
            f"rollout.decode_grouping={choice!r}; expected one of {', '.join(DECODE_GROUPINGS)}"
        )
    if choice == "auto":
        return "turn" if device_type == "cpu" else "round"
    return choice


def decode_capture(choice: str, device_type: str) -> bool:
    """Whether a round session's decode step runs captured (:mod:`.capture`) for
    ``rollout.decode_capture = choice`` on a ``device_type`` device."""
    if choice not in DECODE_CAPTURES:
        raise ValueError(
            f"rollout.decode_capture={choice!r}; expected one of {', '.join(DECODE_CAPTURES)}"
        )
    return choice == "on" or (choice == "auto" and device_type == "cuda")
