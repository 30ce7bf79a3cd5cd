r"""Next-token sampling with the numbers the rollout records for every sampled token.

For logits :math:`z \in \mathbb{R}^{B \times V}` and temperature :math:`T > 0` the policy
samples from :math:`\pi_T = \mathrm{softmax}(z / T)` (restricted to the top-p nucleus when
``top_p < 1``) and records, per row:

- ``logp``: :math:`\log \pi_T(y)` of the sampled token, i.e. ``log_softmax(z / T)[y]``.
  **The trainer must recompute log-probabilities with the same temperature** (docs/toy_scale.md: a
  mismatch corrupts the importance ratio). With ``top_p < 1`` the recorded value is still the
  un-truncated tempered log-probability, which is what a trainer recomputes from the logits
  (vLLM's ``processed_logprobs`` behave the same way).
- ``entropy``: the exact entropy of the tempered distribution,
  :math:`H = -\sum_v \pi_T(v) \log \pi_T(v)` (the paper's :math:`-\sum p \log p`).
- ``topk_entropy``: AEPO's truncated entropy, :math:`-\sum_{v \in \mathrm{top}_k} \pi_T(v)
  \log \pi_T(v)` over the ``k`` most likely tokens (no renormalisation), as the AEPO code
  computes it from vLLM's top-``k`` log-probabilities.

Greedy decoding (``temperature == 0``) takes the arg-max; its ``logp``/``entropy`` are those
of :math:`T = 1` (the distribution has no other natural temperature).

The mean of ``-logp`` over a turn is the authors' Monte-Carlo entropy estimate (docs/method.md §5);
its expectation is the mean of ``entropy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingSpec:
    """How tokens are drawn: temperature (0 = greedy), nucleus ``top_p``, AEPO's top-k."""

    temperature: float = 1.0
    top_p: float = 1.0
    topk_entropy_k: int = 10
    """``k`` of AEPO's truncated entropy (the AEPO code asks vLLM for 10 log-probabilities)."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.topk_entropy_k < 1:
            raise ValueError(f"topk_entropy_k must be >= 1, got {self.topk_entropy_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def logit_scale(self) -> float:
        """Divide logits by this before the softmax (1 for greedy)."""
        return 1.0 if self.greedy else float(self.temperature)


@dataclass
class StepSample:
    """One sampled token per row; every field has shape (B,)."""

    token_ids: torch.Tensor
    logp: torch.Tensor
    entropy: torch.Tensor
    topk_entropy: torch.Tensor


def tempered_log_probs(logits: torch.Tensor, spec: SamplingSpec) -> torch.Tensor:
    """``log_softmax(logits / T)`` in float32; (B, V) -> (B, V)."""
    return torch.log_softmax(logits.float() / spec.logit_scale, dim=-1)


def nucleus_filter(log_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set log-probs outside the top-p nucleus to -inf (the token that crosses p is kept).

    (B, V) -> (B, V). The kept set is the smallest prefix of the sorted distribution whose
    mass reaches ``top_p``; ``top_p = 1`` returns the input unchanged.
    """
    if top_p >= 1.0:
        return log_probs
    sorted_lp, order = torch.sort(log_probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_lp.exp(), dim=-1) - sorted_lp.exp()
    drop_sorted = mass_before >= top_p  # mass already reached before this token
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return log_probs.masked_fill(drop, float("-inf"))


def sample_step(
    logits: torch.Tensor, spec: SamplingSpec, generator: torch.Generator | None = None
) -> StepSample:
    """Draw one token per row from (B, V) logits and record logp / entropies (module doc)."""
    log_probs = tempered_log_probs(logits, spec)  # (B, V)
    probs = log_probs.exp()
    # H = -sum_v p_v log p_v; 0 * -inf would be NaN, so zero-probability terms are masked.
    plogp = torch.where(probs > 0, probs * log_probs, torch.zeros((), device=probs.device))
    entropy = -plogp.sum(dim=-1)
    k = min(spec.topk_entropy_k, log_probs.shape[-1])
    top_lp = torch.topk(log_probs, k, dim=-1).values
    topk_entropy = -(top_lp.exp() * top_lp).sum(dim=-1)
    if spec.greedy:
        token_ids = log_probs.argmax(dim=-1)
    else:
        filtered = nucleus_filter(log_probs, spec.top_p)
        token_ids = torch.multinomial(filtered.exp(), 1, generator=generator).squeeze(-1)
    logp = log_probs.gather(-1, token_ids[:, None]).squeeze(-1)
    return StepSample(token_ids=token_ids, logp=logp, entropy=entropy, topk_entropy=topk_entropy)
