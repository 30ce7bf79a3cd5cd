r"""A captured decode step: the width-1 forward of a round session recorded once as a CUDA graph
and replayed (``rollout.decode_capture``, :mod:`.decoding`).

Why: an eager decode step of Qwen3's 28 layers launches ~1,900 kernels from Python, ~25 µs
each, so a step costs ~50 ms whatever the rows (the H200 record: 0.6% of the bandwidth bound);
a replayed graph launches them all at once.

What makes the step capturable: every tensor it reads or writes keeps its shape and address
between steps. The :class:`~.kvcache.RowCache` buffers are preallocated; each row writes its
token at its own column (``columns``, B x 1), and the attention reads all ``capacity`` columns
with the additive mask hiding those past a row's position, so neither the width nor the rows
change from step to step. The step's inputs (``ids``, ``columns``) are copied into static
tensors before each replay; its output (the logits) is a static tensor the next replay
overwrites. When the buffers change (a row dropped, the buffer grown) the step is recorded
again.

Recording: the first call runs the step eagerly once on a side stream (PyTorch's advice: lazy
set-up happens outside the recording; the session's prefill has already run the model), then
records it; the recorded kernels are then replayed for that same step. Running a step again
with the same inputs writes the same keys and values, so the warm-up changes nothing. A
recording costs about two eager steps, paid at the first decode step of a session and after
each reallocation of its buffers.

:class:`StaticStep` is the same step with the same static inputs and full-width attention,
run eagerly: what a CPU runs (``decode_capture=on`` on a CPU, where CUDA graphs do not exist),
so the numbers a graph would record are tested on a CPU against the eager step.
"""

from __future__ import annotations

from typing import Callable

import torch

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``step(ids (B, 1), columns (B, 1)) -> logits (B, V)`` over the cache's full width."""

WARMUP_RUNS = 1
"""Eager runs on a side stream before recording."""


class StaticStep:
    """The decode step with static inputs, run eagerly (module docstring)."""

    def __init__(self, step: Step, batch: int, device: torch.device) -> None:
        self.step = step
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.columns = torch.zeros(batch, 1, dtype=torch.long, device=device)

    def __call__(self, ids: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(ids)
        self.columns.copy_(columns)
        return self.step(self.ids, self.columns)


class GraphStep(StaticStep):
    """The decode step recorded as a CUDA graph at its first call, then replayed."""

    def __init__(self, step: Step, batch: int, device: torch.device) -> None:
        super().__init__(step, batch, device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def __call__(self, ids: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(ids)
        self.columns.copy_(columns)
        if self.graph is None:
            self._record()
        self.graph.replay()
        return self.logits

    def _record(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self.step(self.ids, self.columns)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.step(self.ids, self.columns)


def captured_step(step: Step, batch: int, device: torch.device) -> StaticStep:
    """A :class:`GraphStep` on CUDA, else a :class:`StaticStep`."""
    if device.type == "cuda":
        return GraphStep(step, batch, device)
    return StaticStep(step, batch, device)
