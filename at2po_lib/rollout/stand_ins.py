"""Stand-ins for tests, benchmarks and smoke checks of the rollout stage.

- :func:`tag_biased_policy`: a randomly initialised tiny ``Qwen3ForCausalLM`` whose output
  layer gets a bias towards the agent's tags, so that even an untrained model opens and
  closes ``<search>``/``<answer>`` often enough to produce multi-turn trees. It is a real
  model: sampling, caches and log-probabilities are exercised for real.
- :class:`ScriptedBackend`: a :class:`~.backends.TurnBackend` that "generates" turns from a
  script (a function of the context) instead of a model: it exercises the agent loop's rules
  (tool limit, invalid actions, length limits) with exactly chosen actions, and lets
  hypothesis explore many tree shapes quickly. Its log-probabilities are synthetic.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import torch

from ..config.profile import PolicyConfig, load_profile
from ..policy.model import build_policy
from ..policy.tokenizer import train_tokenizer
from ..protocol.prompts import get_template, template_texts
from ..retrieval.indexes import build_retriever
from ..tinyworld.build import ensure_world, read_corpus, read_rows
from .agent import Sampler, SearchEnv
from .turns import BackendStats, TurnBackend, TurnRequest, TurnResult

DEFAULT_TAG_BIAS = {"<search>": 4.5, "</search>": 4.0, "<answer>": 3.0, "</answer>": 3.0}


def tag_biased_policy(
    tokenizer, policy_cfg=None, seed: int = 0, tag_bias: dict[str, float] | None = None
):
    """A random tiny Qwen3 (``build_policy``) with ``lm_head`` given a bias on tag tokens."""
    cfg = policy_cfg or PolicyConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    )
    model = build_policy(cfg, tokenizer, seed=seed).eval()
    head = model.lm_head
    biased = torch.nn.Linear(
        head.in_features, head.out_features, bias=True, dtype=head.weight.dtype
    )
    biased.weight = head.weight  # keep the tie with the input embedding
    with torch.no_grad():
        biased.bias.zero_()
        for text, value in (tag_bias or DEFAULT_TAG_BIAS).items():
            biased.bias[tokenizer.convert_tokens_to_ids(text)] = value
    model.lm_head = biased
    return model


Script = Callable[[list[int], random.Random], str]


class ScriptedBackend:
    """Turns from ``script(context_ids, rng) -> text`` (encoded, cut to the call's budget).

    ``stopped`` is True when the whole text fit and ends with a stop sequence (``</search>``
    or EOS by default, the authors' stops); a text that ends otherwise behaves like a call
    cut by its token budget (the rollout goes on in the same node and calls the script again).
    A final answer is therefore scripted as ``<answer> x </answer><|im_end|>``. Log-probs are
    drawn from the rng in [-3, -0.01]; exact entropies likewise.
    """

    keeps_cache = False

    def __init__(
        self,
        tokenizer,
        script: Script,
        seed: int = 0,
        stop_sequences: Sequence[str] = ("</search>",),
    ) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.rng = random.Random(seed)
        # A turn also stops at EOS (a script ends an invalid turn with the eos token's text).
        self.stop_sequences = tuple(stop_sequences) + tuple(
            [tokenizer.eos_token] if tokenizer.eos_token else []
        )
        self.stats = BackendStats()
        self.requests: list[TurnRequest] = []
        self.results: list[TurnResult] = []

    def prefill(self, contexts):
        return [None] * len(contexts)

    def generate_turns(self, requests: Sequence[TurnRequest]) -> list[TurnResult]:
        out = []
        for request in requests:
            self.requests.append(request)
            text = self.script(list(request.context), self.rng)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            if not ids:
                raise ValueError(f"script produced no tokens for a turn: {text!r}")
            cut = ids[: request.max_new_tokens]
            stopped = len(cut) == len(ids) and text.rstrip().endswith(self.stop_sequences)
            logps = [-self.rng.uniform(0.01, 3.0) for _ in cut]
            ents = [self.rng.uniform(0.01, 3.0) for _ in cut]
            out.append(
                TurnResult(
                    token_ids=cut,
                    logps=logps,
                    entropies=ents,
                    topk_entropies=list(ents),
                    stopped=stopped,
                )
            )
            self.results.append(out[-1])
            self.stats.generated_tokens += len(cut)
        self.stats.turns += len(requests)
        return out


def random_action_script(
    p_search: float = 0.5,
    p_answer: float = 0.3,
    words: Sequence[str] = ("capital", "city", "born", "film", "who"),
    eos: str = "<|im_end|>",
) -> Script:
    """A script choosing search / answer / invalid at random (for property tests)."""

    def script(context: list[int], rng: random.Random) -> str:
        draw = rng.random()
        word = " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
        if draw < p_search:
            return f"<search> {word} </search>"
        if draw < p_search + p_answer:
            return f"<answer> {word} </answer>{eos}"
        return f" {word} .{eos}"  # no tag, then EOS: an invalid action

    return script


class ToySetup:
    """A TinyWorld, its BM25 retriever, a tokenizer trained on it and a tag-biased random
    policy: everything a rollout needs, built in seconds (profile ``smoke`` by default)."""

    def __init__(
        self,
        profile: str = "smoke",
        seed: int = 0,
        vocab_size: int = 700,
        dataset: str = "tiny_hotpotqa",
        policy_cfg=None,
        tag_bias: dict[str, float] | None = None,
    ) -> None:
        self.cfg = load_profile(profile)
        self.world = ensure_world(self.cfg)
        self.retriever = build_retriever(self.cfg)
        self.rows = read_rows(self.world, dataset, "train")
        template = get_template(self.cfg.policy.template)
        texts = list(read_corpus(self.world).values()) + [r["question"] for r in self.rows]
        texts += template_texts(template)
        self.tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
        self.model = tag_biased_policy(self.tokenizer, policy_cfg, seed=seed, tag_bias=tag_bias)
        self.template = template

    def questions(self, n: int) -> tuple[list[str], list[list[str]]]:
        rows = self.rows[:n]
        return [r["question"] for r in rows], [list(r["golden_answers"]) for r in rows]

    def sampler(
        self,
        rollout_cfg=None,
        backend: TurnBackend | None = None,
        seed: int = 0,
        greedy: bool = False,
        retriever=None,
    ) -> Sampler:
        """A sampler over this setup's environment (the profile's ``rollout`` section unless
        ``rollout_cfg`` is given; its retriever unless ``retriever`` is): ``backend`` as given,
        else the tag-biased policy's."""
        env = SearchEnv(
            self.tokenizer,
            self.template,
            retriever or self.retriever,
            rollout_cfg or self.cfg.rollout,
        )
        if backend is not None:
            return Sampler(env, backend, seed)
        return Sampler.from_model(self.model, env, seed, greedy)
