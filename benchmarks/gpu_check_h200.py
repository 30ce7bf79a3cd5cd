r"""The GPU check sized for the machine that can be lent (issue #36): one H200, Python 3.12 and
torch (CUDA 13) preinstalled, no vLLM, trl, deepspeed, faiss, datasets or bm25s, no network, at
most 64 MiB of carried files, 10 minutes a command. One command, <= 8 minutes there:

    bash benchmarks/gpu_check_h200.sh            # carries benchmarks/wheels (gpu_check_wheels.sh)
    python benchmarks/gpu_check_h200.py --dry-run --out /tmp/check   # CPU, tiny shapes: the tests

Sub-checks, each reported ``ok``, ``FAILED: <why>`` or ``SKIPPED: <why>`` (never ``ok`` when a
part of it failed; the exit status is 1 when any failed):

- ``env``: Python, torch and CUDA, the GPU; every package the training path imports (an import
  that fails is a failure, named);
- ``model``: a randomly initialised Qwen3 at a real shape (Qwen3-0.6B's, ``--size 1.7b`` for
  Qwen3-1.7B's: vocabulary 151,936, head_dim 128), its tokenizer padded to the vocabulary,
  saved with ``save_pretrained``; its parameter count must be the plan's;
- ``loss``: ATPO's turn-level loss on the GPU at the paper's batch size (176 rows x 4,096
  tokens, 6 turns a row): the trainer's ``method.loss.policy_loss`` against the same loss
  written as the authors' per-row, per-turn loop (``bench_losses.authors_turn_loss``: value and
  gradient equal), forward + backward times of both, of the token-level loss and of
  ``loss_diagnostics`` (best of 5, synchronised);
- ``rollout`` (issue #47): the HF rollout's decode speed at ``--rows`` (16, 64, 256) rows of
  the saved model: ``before`` (fp32 master weights under bf16 autocast, one call per turn:
  the path before issue #47), ``after`` (a bf16 copy of the weights, one call per round: a
  GPU's defaults) and Hugging Face ``generate`` on bf16 weights, same rows and prompts
  (benchmarks/bench_decode.py), and ``after_eager`` (``after`` without the CUDA graph of the
  decode step); tokens/s, kernels a decode step and the GPU-busy share
  (torch.profiler), and the share of the memory-bandwidth bound (weights + KV read once a
  step at :data:`BANDWIDTH_BYTES_S`);
- ``train``: ``--steps`` AT2PO steps on one GPU with the HF rollout backend (the smoke
  profile's TinyWorld and BM25, a reward that varies across leaves so the gradient is not 0;
  ``rollout.max_prompt_tokens`` = the longest training prompt, so the plan's lengths are the
  run's): step time and each step's rollout time, generated tokens/s, the peak allocated
  memory inside the rollout and in the updates apart, device memory outside torch's
  allocator (the CUDA context and libraries) after the steps;
- ``plan``: ``at2po plan``'s two phases for the same setting (one GPU, no DeepSpeed, no vLLM,
  the same rows and lengths) against the measured peaks of the same phases (torch's allocated
  peak + the memory outside torch measured after the steps, for the plan's 1 GiB context
  allowance); ``ok`` when both are within 10%, else ``FAILED``;
- ``vllm``: only where vLLM imports (``SKIPPED`` otherwise): one engine from the saved model,
  greedy turns through the project's backend, tokens/s.

``env`` also measures the CUDA context: ``torch.cuda.mem_get_info`` right after CUDA starts,
against ``nvidia-smi``'s used memory before it.

It ends with a Markdown table for benchmarks/README.md and a JSON line, also written to
``--out`` (``$OUT`` on the device machine) after every sub-check, so a run stopped by its time
limit still leaves what it measured. Every record says how it was made (``provenance``): the
git revision (or ``AT2PO_CHECK_REVISION`` where the copy has no git) and a digest of the
sources (``--source-digest`` prints it here for comparison), the command, the settings, the
packages and carried wheels, the date and the device seconds since the wrapper started.
``--only`` runs some of the sub-checks (``env`` and ``model`` always run: the others need them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import re
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qwen3_shapes import QWEN3_VOCAB, SHAPES  # noqa: E402

DRY_RUN_VOCAB = 4_096
REQUIRED = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "trl",
    "accelerate",
    "peft",
    "datasets",
    "bm25s",
    "numpy",
    "yaml",
    "at2po_lib",
)
"""What the training path imports (an import failure fails ``env``)."""
PLAN_TOLERANCE = 0.10
ROLLOUT_ROWS = (16, 64, 256)
ROLLOUT_NEW_TOKENS = 64
ROLLOUT_PROMPT_TOKENS = 64
COMPILER_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
"""Where torch's compiler keeps its caches: in the run's scratch folder, removed with it."""
MAX_ROWS = 512
"""``--rows``: rows of one rollout measurement, twice the default's largest (256)."""
MAX_NEW_TOKENS = 1024
"""``--new-tokens``: a row's generated tokens, 16 times the default (64). At both bounds the
Qwen3 shapes' bf16 KV cache (28 layers x 8 KV heads x 128 x 2 x 2 bytes, 112 KiB a token) is
512 x (64 + 1,024) tokens, about 60 GiB: it fits the H200; ``1e9`` asked for 256 GB."""
BANDWIDTH_BYTES_S = 4.8e12
"""The H200's HBM3e bandwidth (its data sheet's 4.8 TB/s): a decode step must read every
weight and the rows' KV cache once, so ``rows / ((weights + KV) / bandwidth)`` tokens/s bound
a decode step's speed."""
SOURCES = (
    "at2po_lib/**/*.py",
    "at2po_lib/**/*.yaml",
    "benchmarks/*.py",
    "benchmarks/*.sh",
    "benchmarks/*.txt",
    "configs/**/*.yaml",
    "pyproject.toml",
)
"""The files whose bytes make :func:`source_digest`."""


@dataclasses.dataclass
class Check:
    name: str
    state: str = "not run"
    seconds: float = 0.0
    result: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.state.startswith("FAILED") or self.state == "not run"


def run_check(check: Check, body: Callable[[Check], str]) -> Check:
    """``body`` fills ``check.result`` and returns the state; an exception is a failure."""
    start = time.perf_counter()
    try:
        check.state = body(check)
    except Exception as exc:  # any failure is reported, never swallowed as "ok"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        check.state = f"FAILED: {type(exc).__name__}: {first[:200]}"
        traceback.print_exc()
    check.seconds = round(time.perf_counter() - start, 1)
    print(
        f"[{check.name}] {check.state} ({check.seconds} s) {json.dumps(check.result)}", flush=True
    )
    return check


# -------------------------------------------------------------------- provenance
def source_digest(root: Path = ROOT) -> str:
    """SHA-256 over the paths and bytes of the files in :data:`SOURCES` (sorted): the same
    number here and on the device machine when the code is the same."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in SOURCES for p in root.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def provenance(argv: list[str], settings: dict, packages: dict) -> dict:
    """How this record was made: revision, sources, command, settings, packages, carried
    wheels, date and device seconds (since the wrapper started, its set-up included)."""
    from at2po_lib.util.provenance import git_revision

    started = float(os.environ.get("AT2PO_CHECK_STARTED", _PROCESS_START))
    revision = git_revision()
    if revision == "unknown":
        revision = os.environ.get("AT2PO_CHECK_REVISION", "unknown")
    wheels = os.environ.get("AT2PO_CHECK_CARRIED", "")
    return {
        "git_revision": revision,
        "source_digest": source_digest(),
        "command": os.environ.get("AT2PO_CHECK_COMMAND", ""),
        "python_command": " ".join([sys.executable, *sys.argv[:1], *argv]),
        "settings": settings,
        "packages": packages,
        "carried_wheels": [w for w in wheels.split(",") if w],
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device_seconds": round(time.time() - started, 1),
    }


_PROCESS_START = time.time()


# --------------------------------------------------------------------------- env
def nvidia_smi_used_mib() -> float | None:
    """GPU 0's used memory by ``nvidia-smi`` (no CUDA context of ours), None without it."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return float(out.stdout.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def cuda_context_gib(before: float | None) -> dict[str, Any]:
    """The CUDA context this process costs: used device memory right after CUDA starts
    (``torch.cuda.mem_get_info``) minus ``before`` (``nvidia-smi``'s used MiB before it), minus
    what torch's allocator holds (nothing yet)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    used = (total - free) / 2**30
    out = {
        "device_used_after_init_gib": round(used, 3),
        "nvidia_smi_used_before_gib": None if before is None else round(before / 1024, 3),
    }
    out["context_gib"] = round(
        used - (before or 0) / 1024 - torch.cuda.memory_reserved() / 2**30, 3
    )
    return out


def env_check(check: Check, dry_run: bool, required: tuple[str, ...] = REQUIRED) -> str:
    before = nvidia_smi_used_mib()  # before any import can start CUDA
    check.result["python"] = platform.python_version()
    missing = []
    for name in required:
        try:
            module = importlib.import_module(name)
            check.result[name] = getattr(module, "__version__", "ok")
        except Exception as exc:
            check.result[name] = f"import failed: {type(exc).__name__}"
            missing.append(name)
    import torch

    check.result["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        check.result.update(cuda_context_gib(before))
        check.result["gpu"] = torch.cuda.get_device_name(0)
        check.result["gpu_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    if missing:
        return f"FAILED: cannot import {', '.join(missing)}"
    if not dry_run and not torch.cuda.is_available():
        return "FAILED: CUDA is not available"
    return "ok"


# ------------------------------------------------------------------------- model
def padded_tokenizer(folder: Path, size: int):
    """The tokenizer saved in ``folder`` with its BPE vocabulary padded to ``size`` entries
    (``x<id>`` tokens no merge produces: a random model's samples decode to something), saved
    back and reloaded: a vocabulary of Qwen3's size without Qwen3's files."""
    from at2po_lib.policy.tokenizer import load_tokenizer

    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    added = data.get("added_tokens", [])
    # the added (special) tokens enter the model's vocabulary at their ids: otherwise the
    # tokenizers library gives them new ids after the largest one
    vocab.update({token["content"]: token["id"] for token in added})
    used = max(vocab.values()) + 1
    vocab.update({f"x{i}": i for i in range(used, size)})
    path.write_text(json.dumps(data))
    tokenizer = load_tokenizer(folder)
    if len(tokenizer) != size:
        raise ValueError(f"padded tokenizer has {len(tokenizer)} entries, expected {size}")
    return tokenizer


def build_qwen3(profile_cfg, shape: dict, vocab: int, dtype: str, out: Path):
    """A randomly initialised Qwen3 of ``shape`` (tied embeddings, as Qwen3-0.6B/1.7B) with a
    tokenizer trained on the profile's TinyWorld text and padded to ``vocab``, saved to
    ``out`` with ``save_pretrained``. Returns the model (in memory) and its folder."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from at2po_lib.policy.model import neutral_generation_config, save_policy, torch_dtype
    from at2po_lib.policy.tokenizer import train_tokenizer
    from at2po_lib.tinyworld.build import ensure_world, read_corpus

    texts = list(read_corpus(ensure_world(profile_cfg)).values())
    train_tokenizer(texts, vocab_size=profile_cfg.policy.vocab_size).save_pretrained(out)
    tokenizer = padded_tokenizer(out, vocab)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    model = Qwen3ForCausalLM(config).to(torch_dtype(dtype))
    model.generation_config = neutral_generation_config(tokenizer)
    return model, save_policy(model, tokenizer, out)


def model_check(check: Check, profile_cfg, shape: dict, vocab: int, dtype: str, out: Path) -> str:
    """A random Qwen3 of ``shape`` saved with save_pretrained; its size against the plan's."""
    from at2po_lib.plan.cost_estimate import architecture_of

    model, folder = build_qwen3(profile_cfg, shape, vocab, dtype, out / "policy")
    params = sum(p.numel() for p in model.parameters())
    cfg = dataclasses.replace(
        profile_cfg, policy=dataclasses.replace(profile_cfg.policy, model=str(folder))
    )
    planned = architecture_of(cfg).parameters()
    check.result.update(
        parameters=params,
        planned_parameters=planned,
        vocab=model.config.vocab_size,
        head_dim=model.config.head_dim,
        dtype=dtype,
        disk_mib=round(sum(f.stat().st_size for f in folder.iterdir()) / 2**20, 1),
    )
    check.result["path"] = str(folder)
    if params != planned:
        return f"FAILED: {params:,} parameters, the plan counts {planned:,}"
    return "ok"


# -------------------------------------------------------------------------- loss
def loss_check(check: Check, dry_run: bool, repeats: int = 5) -> str:
    """The trainer's turn-level loss against the authors'-style loop on this machine's device:
    equal value and gradient, then forward + backward times (best of ``repeats``,
    synchronised), with the token-level loss and the diagnostics beside them."""
    import torch
    from bench_losses import authors_turn_loss, multi_turn_mask

    from at2po_lib.method.loss import LossBatch, LossOptions, loss_diagnostics, policy_loss

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, tokens, turns = (8, 256, 3) if dry_run else (176, 4096, 6)
    g = torch.Generator().manual_seed(0)
    mask = multi_turn_mask(rows, tokens, turns, g).to(device)
    logp = (-torch.rand(rows, tokens, generator=g) * 3).to(device)
    old = logp + 3e-3 * torch.randn(rows, tokens, generator=g).to(device)
    adv = torch.randn(rows, generator=g).to(device)
    runs = {
        "turn": lambda x: policy_loss(LossBatch(x, old, adv, mask), LossOptions(level="turn")),
        "authors loop turn": lambda x: authors_turn_loss(x, old, adv, mask)[0],
        "token": lambda x: policy_loss(LossBatch(x, old, adv, mask), LossOptions(level="token")),
    }

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def once(fn) -> tuple[float, float, torch.Tensor]:
        x = logp.clone().requires_grad_(True)
        sync()
        start = time.perf_counter()
        loss = fn(x)
        loss.backward()
        sync()
        return time.perf_counter() - start, float(loss.detach()), x.grad

    def diagnostics_once() -> float:
        sync()
        start = time.perf_counter()
        loss_diagnostics(LossBatch(logp, old, adv, mask), LossOptions(level="turn"))
        sync()
        return time.perf_counter() - start

    results = {name: once(fn) for name, fn in runs.items()}  # warm-up, and the values compared
    loss_diff = abs(results["turn"][1] - results["authors loop turn"][1])
    grad_diff = float((results["turn"][2] - results["authors loop turn"][2]).abs().max())
    best = {name: min(once(fn)[0] for _ in range(repeats)) for name, fn in runs.items()}
    best["diagnostics"] = min(diagnostics_once() for _ in range(repeats))
    check.result.update(
        device=device,
        batch_rows=rows,
        tokens=tokens,
        model_tokens=int(mask.sum()),
        loss_diff=f"{loss_diff:.1e}",
        grad_diff=f"{grad_diff:.1e}",
        **{f"{k.replace(' ', '_')}_ms": round(v * 1e3, 2) for k, v in best.items()},
    )
    if loss_diff > 1e-5 or grad_diff > 1e-6:
        return (
            f"FAILED: the loss and the authors' loop differ (loss {loss_diff:.1e}, grad "
            f"{grad_diff:.1e})"
        )
    return "ok"


# ------------------------------------------------------------------------- train
def parity_reward(response: str, golden) -> float:
    """A reward that differs between leaves (a random policy answers nothing right)."""
    return float(len(response) % 2)


def check_overrides(
    policy: str, dtype: str, steps: int, dry_run: bool, prompt_tokens: int | None = None
) -> dict:
    """The profile overrides of the training check (smoke's world, the check's model).
    ``prompt_tokens``: ``rollout.max_prompt_tokens`` (the longest training prompt: the plan
    then counts the run's lengths). The dry run decodes in one call per round, so that the
    CPU runs the GPU's grouping too."""
    rollout: dict[str, Any] = {"max_response_tokens": 96 if dry_run else 320}
    if prompt_tokens:
        rollout["max_prompt_tokens"] = prompt_tokens
    if dry_run:
        rollout["decode_grouping"] = "round"
    return {
        "policy": {"model": policy, "dtype": dtype},
        "rollout": rollout,
        "train": {
            "max_steps": steps,
            "prompts_per_step": 2 if dry_run else 8,
            "mini_batch_prompts": 1 if dry_run else 4,
            "micro_batch_rows": 2,
            "bf16": not dry_run,
            "activation_checkpointing": not dry_run,
            "eval_every": 0,
            "final_eval": False,
            "save_every": 0,
            "report_to": [],
            "progress_bar": False,
        },
    }


def longest_prompt(profile: str, overrides: dict) -> int:
    """Tokens of the longest training prompt of the profile (with the check's tokenizer)."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.tokenizer import load_tokenizer
    from at2po_lib.protocol.prompts import build_messages, get_template, prompt_ids
    from at2po_lib.study.run import training_prompts

    cfg = load_profile(profile, overrides)
    tokenizer = load_tokenizer(cfg.policy.model)
    template = get_template(cfg.policy.template)
    return max(
        len(prompt_ids(tokenizer, build_messages(template, row["question"])))
        for row in training_prompts(cfg)
    )


@dataclasses.dataclass
class GenerationMeter:
    """Tokens the HF backends of each rollout generated and the seconds each rollout took; on
    CUDA the peak allocated bytes inside the rollouts and outside them (the updates), apart:
    the plan's phases."""

    tokens: int = 0
    seconds: float = 0.0
    rollouts: list[float] = dataclasses.field(default_factory=list)
    generation_peak: int = 0
    other_peak: int = 0
    reserved_peak: int = 0

    def close_phase(self, generating: bool) -> None:
        """Book the peak since the last phase change to the phase that just ended."""
        import torch

        if not torch.cuda.is_available():
            return
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        self.reserved_peak = max(self.reserved_peak, torch.cuda.max_memory_reserved())
        if generating:
            self.generation_peak = max(self.generation_peak, peak)
        else:
            self.other_peak = max(self.other_peak, peak)
        torch.cuda.reset_peak_memory_stats()


def metered_generation(meter: GenerationMeter) -> Callable[[], None]:
    """Meter every rollout of the trainer (``SearchAgent.sample``: prompt prefill, every
    decode call, the searches): its time, the tokens its HF backends generated and its peak
    memory; returns the function that undoes it."""
    from at2po_lib.rollout.backends import HFBackend
    from at2po_lib.trainer.search_agent import SearchAgent

    sample, init = SearchAgent.sample, HFBackend.__init__
    made: list[HFBackend] = []

    def counted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    def metered_sample(self, *args, **kwargs):
        meter.close_phase(generating=False)
        start = time.perf_counter()
        batch = sample(self, *args, **kwargs)
        meter.close_phase(generating=True)
        seconds = time.perf_counter() - start
        meter.seconds += seconds
        meter.rollouts.append(round(seconds, 2))
        meter.tokens += sum(b.stats.generated_tokens for b in made)
        made.clear()
        return batch

    HFBackend.__init__, SearchAgent.sample = counted_init, metered_sample

    def undo() -> None:
        HFBackend.__init__, SearchAgent.sample = init, sample

    return undo


def outside_allocator_gib() -> float | None:
    """Device memory in use that torch's allocator does not hold (the CUDA context, library
    handles and their kernels), now."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return round((total - free - torch.cuda.memory_reserved()) / 2**30, 3)


def train_check(check: Check, profile: str, overrides: dict, steps: int) -> str:
    import torch

    from at2po_lib.record import run_folder
    from at2po_lib.study.run import train

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    meter = GenerationMeter()
    undo = metered_generation(meter)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            result = train(
                profile,
                "at2po",
                0,
                force=True,
                profile_overrides=overrides,
                reward_fn=parity_reward,
            )
    finally:
        undo()
    captures = [str(w.message) for w in caught if "could not be captured" in str(w.message)]
    if captures:  # the rollout went on eagerly: say so
        check.result["capture_failed"] = captures[0][:300]
    rows = run_folder.read_jsonl(result.run.metrics)
    if len(rows) != steps:
        return f"FAILED: {len(rows)} of {steps} steps recorded"
    walls = [rows[0]["wall_time"]] + [
        b["wall_time"] - a["wall_time"] for a, b in zip(rows, rows[1:])
    ]
    rollout_s = sum(r.get("rollout/seconds", 0.0) for r in rows)
    check.result.update(
        steps=len(rows),
        first_step_s=round(walls[0], 1),
        step_s_after_first=round(sum(walls[1:]) / max(len(walls) - 1, 1), 1) if steps > 1 else None,
        step_s=[round(w, 1) for w in walls],
        rollout_s_each=[round(r.get("rollout/seconds", 0.0), 1) for r in rows],
        rollout_s=round(rollout_s, 1),
        generated_tokens=meter.tokens,
        generated_tokens_per_s=round(meter.tokens / meter.seconds, 1) if meter.seconds else None,
        max_prompt_tokens=overrides["rollout"].get("max_prompt_tokens"),
        losses_finite=all(r.get("loss") is not None and r["loss"] == r["loss"] for r in rows),
    )
    if torch.cuda.is_available():
        meter.close_phase(generating=False)
        check.result["peak_allocated_gib"] = round(
            max(meter.generation_peak, meter.other_peak) / 2**30, 2
        )
        check.result["generation_peak_gib"] = round(meter.generation_peak / 2**30, 2)
        check.result["update_peak_gib"] = round(meter.other_peak / 2**30, 2)
        check.result["peak_reserved_gib"] = round(meter.reserved_peak / 2**30, 2)
        check.result["outside_allocator_gib"] = outside_allocator_gib()
    if not check.result["losses_finite"]:
        return "FAILED: a loss is not finite"
    if not meter.tokens:
        return "FAILED: the rollout generated no tokens"
    return "ok"


# ----------------------------------------------------------------------- rollout
def decode_bound(model, rows: int, context: int) -> float:
    """Tokens/s a decode step cannot beat at :data:`BANDWIDTH_BYTES_S`: ``rows`` tokens a step,
    a step reading the bf16 weights ``2P`` and the rows' bf16 KV ``rows·context·k`` once."""
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2
    return rows * BANDWIDTH_BYTES_S / (2.0 * params + rows * context * kv)


def rollout_check(
    check: Check,
    folder: str,
    rows_list: tuple[int, ...],
    new_tokens: int,
    prompt_tokens: int,
    dry_run: bool,
) -> str:
    """Tokens/s, kernels a step and GPU-busy share before / after / HF generate (module
    docstring), each row count in turn."""
    import torch
    from bench_decode import (
        Variant,
        autocast_forward,
        hf_generate,
        per_step,
        prompts,
        rollout_round,
        rollout_turns,
        tokens_per_second,
    )

    from at2po_lib.policy.model import load_policy
    from at2po_lib.rollout.backends import HFBackend, decode_weights
    from at2po_lib.rollout.sampling import SamplingSpec

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_policy(folder, "float32")  # the trainer's fp32 master weights
    model = model.to(device).eval()
    stops = ("</search>", "a tag never sampled")
    spec = SamplingSpec(temperature=1.0)
    before_backend = HFBackend(model, tokenizer, spec, stops, grouping="turn", dtype="model")
    after_backend = HFBackend(model, tokenizer, spec, stops, grouping="round", dtype="auto")
    eager_backend = HFBackend(
        model, tokenizer, spec, stops, grouping="round", dtype="auto", capture="off"
    )
    half = torch.bfloat16 if device == "cuda" else torch.float32
    before_run, after_run = rollout_turns(before_backend), rollout_round(after_backend)
    hf_run = hf_generate(model, tokenizer)

    def before(contexts, new):
        with autocast_forward(model, device, enabled=True):  # noqa: F821 (deleted after use)
            return before_run(contexts, new)

    def hf(contexts, new):
        with decode_weights(model, half):  # noqa: F821 (deleted after use)
            return hf_run(contexts, new)

    # the captured path last: a recording that fails cannot spoil the others' numbers
    paths = [
        Variant("before", before),
        Variant("after_eager", rollout_round(eager_backend)),
        Variant("hf_generate", hf),
        Variant("after", after_run),
    ]
    check.result.update(
        device=device,
        new_tokens=new_tokens,
        prompt_tokens=prompt_tokens,
        after_dtype=str(after_backend.dtype),
        before_dtype=str(before_backend.dtype),
        after_captured=after_backend.capture,
        bandwidth_tb_s=BANDWIDTH_BYTES_S / 1e12,
    )
    failed: dict[str, str] = {}
    for rows in rows_list:
        contexts = prompts(rows, prompt_tokens, model.config.vocab_size)
        cell: dict[str, Any] = {}
        for path in (p for p in paths if p.name not in failed):
            try:
                path.run(contexts[:2], 2)  # warm-up
                speed = tokens_per_second(path, contexts, new_tokens, device, 1)[0]
                steps = per_step(path, contexts, 2, 2 + (4 if dry_run else 8), device, 1)
            except Exception as exc:  # kept, named; the other paths still run
                failed[path.name] = f"{rows} rows: {type(exc).__name__}: {str(exc)[:160]}"
                traceback.print_exc()
                continue
            cell[path.name] = {
                "tokens_per_s": round(speed, 1),
                **{k.replace(" ", "_"): round(v, 4) for k, v in steps.items()},
            }
        bound = decode_bound(model, rows, prompt_tokens + new_tokens // 2)
        cell["bound_tokens_per_s"] = round(bound, 1)
        speeds = {k: v["tokens_per_s"] for k, v in cell.items() if isinstance(v, dict)}
        for name, speed in speeds.items():
            cell[f"{name}_share_of_bound"] = round(speed / bound, 4)
        if "after" in speeds:
            for other in ("before", "hf_generate"):
                if other in speeds:
                    cell[f"after_over_{other}"] = round(speeds["after"] / speeds[other], 2)
        check.result[f"rows_{rows}"] = cell
        print(f"[rollout] {rows} rows: {json.dumps(cell)}", flush=True)
    check.result["after_captured"] = after_backend.capture  # False if a recording failed
    last = check.result[f"rows_{rows_list[-1]}"]
    if "after_share_of_bound" in last:
        check.result["goal_30pct_of_bound_at_most_rows"] = last["after_share_of_bound"] >= 0.30
    # the closures above are not called again: their model goes with them
    del model, before_backend, after_backend, eager_backend, paths
    if device == "cuda":  # the train check's memory starts from an empty allocator
        import gc

        gc.collect()
        torch.cuda.empty_cache()
    if failed:
        check.result["failed_paths"] = failed
        return "FAILED: " + "; ".join(f"{k} ({v})" for k, v in failed.items())
    return "ok"


# -------------------------------------------------------------------------- plan
def plan_check(
    check: Check, profile: str, overrides: dict, measured: dict, gpu_gib: float | None
) -> str:
    """The plan's two phases of the same setting against the measured peaks of the same
    phases: torch's peak allocated memory inside the rollouts (``generation_peak_gib``) and in
    the updates (``update_peak_gib``), each plus the memory outside torch's allocator measured
    after the steps, where the plan has its 1 GiB context allowance."""
    from at2po_lib.config.profile import load_profile
    from at2po_lib.plan.cost_estimate import GIB, Hardware, plan

    cfg = load_profile(profile, overrides)
    result = plan(
        cfg,
        Hardware(gpus=1, gpu_memory_gib=gpu_gib or 80.0, zero_stage="none", retriever_on_gpu=False),
    )
    allowance = result["memory"].get("CUDA context (+ NCCL)", 0.0) / GIB
    totals = {k: v / GIB for k, v in result["phase_totals"].items()}
    check.result.update(
        predicted_gib=round(result["total_bytes"] / GIB, 2),
        peak_phase=result["peak_phase"],
        phases_gib={k: round(v, 2) for k, v in totals.items()},
        rows={
            phase: {k: round(v / GIB, 3) for k, v in rows.items()}
            for phase, rows in result["phases"].items()
        },
    )
    if "generation_peak_gib" not in measured:
        return "SKIPPED: no GPU memory measured (CPU)"
    outside = measured.get("outside_allocator_gib") or allowance
    errors = {}
    for phase, key in (("rollout", "generation_peak_gib"), ("update", "update_peak_gib")):
        actual = measured[key] + outside
        predicted = totals[phase] - allowance + outside
        errors[phase] = (predicted - actual) / actual
        check.result[f"{phase}_measured_gib"] = round(actual, 2)
        check.result[f"{phase}_plan_error"] = round(errors[phase], 3)
    check.result["context_allowance_gib"] = allowance
    check.result["outside_allocator_gib"] = outside
    off = {k: v for k, v in errors.items() if abs(v) > PLAN_TOLERANCE}
    if off:
        return (
            "FAILED: the plan is off by "
            + ", ".join(f"{v:+.0%} in the {k} phase" for k, v in off.items())
            + f" (more than {PLAN_TOLERANCE:.0%})"
        )
    return "ok"


# -------------------------------------------------------------------------- vLLM
def vllm_check(check: Check, profile: str, overrides: dict, contexts: int = 32) -> str:
    try:
        import vllm  # noqa: F401 - only to know whether this machine has it
    except Exception as exc:
        return f"SKIPPED: vllm does not import here ({type(exc).__name__})"
    from at2po_lib.config.profile import load_profile
    from at2po_lib.policy.tokenizer import load_tokenizer
    from at2po_lib.protocol.prompts import build_messages, get_template, prompt_ids
    from at2po_lib.rollout.agent import turn_stops
    from at2po_lib.rollout.sampling import SamplingSpec
    from at2po_lib.rollout.turns import TurnRequest
    from at2po_lib.rollout.vllm_backend import VLLMBackend, build_engine

    cfg = load_profile(profile, overrides)
    tokenizer = load_tokenizer(cfg.policy.model)
    engine = build_engine(
        cfg.policy.model,
        cfg,
        gpu_memory_utilization=0.3,
        max_model_len=2048,
        disable_log_stats=False,
    )
    template = get_template(cfg.policy.template)
    backend = VLLMBackend(engine, tokenizer, SamplingSpec(0.0), turn_stops(template))
    requests = [
        TurnRequest(prompt_ids(tokenizer, build_messages(template, f"question {i}?")), 128)
        for i in range(contexts)
    ]
    start = time.perf_counter()
    results = backend.generate_turns(requests)
    seconds = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in results)
    check.result.update(
        contexts=contexts, generated_tokens=tokens, tokens_per_s=round(tokens / seconds, 1)
    )
    return "ok" if tokens else "FAILED: no tokens generated"


# ------------------------------------------------------------------------- table
def cell(check: Check) -> str:
    keep = {
        k: v
        for k, v in check.result.items()
        if k not in ("path", "rows") and not isinstance(v, dict)
    }
    return ", ".join(f"{k}={v}" for k, v in keep.items())


def rollout_table(check: Check) -> list[str]:
    """The rollout sub-check's numbers, one line per row count and path."""
    cells = {k: v for k, v in check.result.items() if k.startswith("rows_")}
    if not cells:
        return []
    lines = [
        "",
        "| rows | path | tokens/s | kernels a step | compute ops a step | GPU busy | "
        "share of the bandwidth bound |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, cell_ in cells.items():
        rows = key.removeprefix("rows_")
        for path in ("before", "after", "after_eager", "hf_generate"):
            if path not in cell_:
                lines.append(f"| {rows} | {path} | failed | | | | |")
                continue
            v = cell_[path]
            share = cell_[f"{path}_share_of_bound"]
            lines.append(
                f"| {rows} | {path} | {v['tokens_per_s']:,.1f} | {v['kernels']:,.0f} | "
                f"{v['compute_ops']:,.0f} | {v.get('gpu_busy_share', float('nan')):.2f} | "
                f"{share:.3f} |"
            )
    return lines


def markdown(checks: list[Check], header: str) -> str:
    lines = [header, "", "| check | state | seconds | result |", "| --- | --- | ---: | --- |"]
    lines += [f"| {c.name} | {c.state} | {c.seconds} | {cell(c)} |" for c in checks]
    for c in checks:
        if c.name == "rollout":
            lines += rollout_table(c)
    return "\n".join(lines)


SUB_CHECKS = ("env", "model", "loss", "rollout", "train", "plan", "vllm")


def write_results(
    checks: list[Check], header: str, out: Path | None, made: dict | None = None
) -> dict:
    """The table and the summary so far, with how they were made (``made``: :func:`provenance`),
    written to ``out`` (after every sub-check)."""
    summary = {
        "check": "gpu_check_h200",
        "failed": [c.name for c in checks if c.failed],
        **({"provenance": made} if made else {}),
        **{c.name: {"state": c.state, "seconds": c.seconds, **c.result} for c in checks},
    }
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.txt").write_text(markdown(checks, header) + "\n")
        (out / "checks.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


class _OneLineParser(argparse.ArgumentParser):
    """A bad argument is one line naming it (exit 2), before any sub-check; ``--help`` shows
    the usage."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU, tiny shapes, one step: what the test suite runs",
    )
    parser.add_argument("--size", choices=("0.6b", "1.7b"), default="0.6b")
    parser.add_argument(
        "--steps", type=_steps, default=None, help="training steps, 1 to 1000 (default 3; 1 dry)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for table.txt and checks.json"
    )
    parser.add_argument("--profile", default="smoke", help="world, retriever and tree shape")
    parser.add_argument(
        "--only",
        default=",".join(SUB_CHECKS),
        help="comma-separated sub-checks to run (env and model always run)",
    )
    parser.add_argument(
        "--rows",
        type=_rows,
        default=None,
        help=f"rollout: comma-separated row counts, each 1 to {MAX_ROWS:,} (default "
        f"{','.join(map(str, ROLLOUT_ROWS))}; 2,4 dry)",
    )
    parser.add_argument(
        "--new-tokens",
        type=_new_tokens,
        default=None,
        help=f"rollout: tokens a row generates, 1 to {MAX_NEW_TOKENS:,} (default "
        f"{ROLLOUT_NEW_TOKENS}; 6 dry)",
    )
    parser.add_argument(
        "--also-require",
        action="append",
        default=[],
        metavar="MODULE",
        help="one more module env must import (the tests check that a failed "
        "import fails the check)",
    )
    parser.add_argument(
        "--source-digest",
        action="store_true",
        help="print the digest of the sources a record names, and stop",
    )
    args = parser.parse_args(argv)
    if args.source_digest:
        print(source_digest())
        return 0
    wanted = {"env", "model", *args.only.split(",")}
    if wanted - set(SUB_CHECKS):
        parser.error(
            f"--only: unknown sub-checks {sorted(wanted - set(SUB_CHECKS))}; "
            f"choose from {', '.join(SUB_CHECKS)}"
        )
    steps = args.steps if args.steps is not None else (1 if args.dry_run else 3)
    if args.out is not None:  # before any check: results that cannot be written are lost
        problem = _unwritable(args.out)
        if problem:
            parser.error(f"--out {str(args.out)!r}: {problem}")
    rows = args.rows or ((2, 4) if args.dry_run else ROLLOUT_ROWS)
    new_tokens = args.new_tokens or (6 if args.dry_run else ROLLOUT_NEW_TOKENS)
    prompt_tokens = 16 if args.dry_run else ROLLOUT_PROMPT_TOKENS
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    work = Path(tempfile.mkdtemp(prefix="at2po-gpu-check-"))
    rollout = RolloutGeometry(rows, new_tokens, prompt_tokens)
    # torch's compiler caches (TMPDIR/torchinductor_<user> by default) go to the scratch
    # folder too, unless the caller chose a place for them
    chosen = {var: os.environ.get(var) for var in COMPILER_CACHES}
    for var in COMPILER_CACHES:
        os.environ.setdefault(var, str(work / var.lower()))
    try:
        return _run(args, argv, wanted, steps, rollout, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the scratch run: nothing kept in /tmp
        for var, value in chosen.items():
            if value is None:
                os.environ.pop(var, None)


def _count(text: str, high: int) -> int:
    """A count typed as ASCII digits, 1 to ``high``; else one line naming the value."""
    if not re.fullmatch(r"[0-9]{1,10}", text) or not 1 <= int(text) <= high:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected an integer in [1, {high:,}]")
    return int(text)


def _rows(text: str) -> tuple[int, ...]:
    """``--rows``: comma-separated row counts, each 1 to :data:`MAX_ROWS`."""
    return tuple(_count(item.strip(), MAX_ROWS) for item in text.split(","))


def _new_tokens(text: str) -> int:
    """``--new-tokens``: 1 to :data:`MAX_NEW_TOKENS` (0 measured nothing and passed)."""
    return _count(text, MAX_NEW_TOKENS)


def _steps(text: str) -> int:
    """``--steps``: 1 to 1000 (``0`` used to run one step)."""
    return _count(text, 1000)


def _unwritable(out: Path) -> str | None:
    """Why no file can be written in ``out`` (None when one can)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None


@dataclasses.dataclass(frozen=True)
class RolloutGeometry:
    """The rollout sub-check's rows (one measurement each), new tokens and prompt length."""

    rows: tuple[int, ...]
    new_tokens: int
    prompt_tokens: int


def _run(
    args: argparse.Namespace,
    argv: list[str],
    wanted: set[str],
    steps: int,
    rollout: RolloutGeometry,
    work: Path,
) -> int:
    """The sub-checks of :func:`main` with their scratch folder ``work``."""
    rows, new_tokens, prompt_tokens = rollout.rows, rollout.new_tokens, rollout.prompt_tokens
    for var, sub in (
        ("AT2PO_RESULTS", "results"),
        ("AT2PO_ARTIFACTS", "artifacts"),
        ("AT2PO_FIGURES", "figures"),
    ):
        os.environ[var] = str(work / sub)  # nothing lands in the repository copy
    checks = [Check(n) for n in SUB_CHECKS if n in wanted]
    by_name = {c.name: c for c in checks}
    shape = SHAPES["dry-run" if args.dry_run else args.size]
    vocab = DRY_RUN_VOCAB if args.dry_run else QWEN3_VOCAB
    dtype = "float32" if args.dry_run else "bfloat16"

    def header() -> str:
        env = by_name["env"].result
        return (
            f"GPU check (benchmarks/gpu_check_h200.py{' --dry-run' if args.dry_run else ''}, "
            f"Qwen3-{args.size} shape{' (tiny: dry run)' if args.dry_run else ''}, "
            f"{env.get('gpu', 'CPU')}, Python {env.get('python')}, "
            f"torch {env.get('torch')}):"
        )

    def build(check: Check) -> str:
        from at2po_lib.config.profile import load_profile

        return model_check(check, load_profile(args.profile), shape, vocab, dtype, work)

    lengths: dict[str, int] = {}

    def overrides() -> dict:
        policy = by_name["model"].result.get("path", "")
        base = check_overrides(policy, dtype, steps, args.dry_run)
        if "prompt" not in lengths:
            lengths["prompt"] = longest_prompt(args.profile, base)
        return check_overrides(policy, dtype, steps, args.dry_run, lengths["prompt"])

    def made() -> dict:
        settings = {
            **vars(args),
            "out": str(args.out),
            "steps": steps,
            "rollout_rows": rows,
            "rollout_new_tokens": new_tokens,
            "rollout_prompt_tokens": prompt_tokens,
            "profile_overrides": overrides()
            if not by_name["model"].failed and "path" in by_name["model"].result
            else None,
        }
        packages = {
            k: v
            for k, v in by_name["env"].result.items()
            if k in REQUIRED or k in ("python", "cuda")
        }
        return provenance(argv, settings, packages)

    bodies: dict[str, Callable[[Check], str]] = {
        "env": lambda c: env_check(c, args.dry_run, REQUIRED + tuple(args.also_require)),
        "model": build,
        "loss": lambda c: loss_check(c, args.dry_run),
        "rollout": lambda c: rollout_check(
            c, by_name["model"].result["path"], rows, new_tokens, prompt_tokens, args.dry_run
        ),
        "train": lambda c: train_check(c, args.profile, overrides(), steps),
        "plan": lambda c: plan_check(
            c,
            args.profile,
            overrides(),
            by_name.get("train", Check("train")).result,
            by_name["env"].result.get("gpu_gib"),
        ),
        "vllm": lambda c: vllm_check(c, args.profile, overrides()),
    }
    needs_model = {"rollout", "train", "plan", "vllm"}
    for check in checks:
        if check.name in needs_model and by_name["model"].failed:
            check.state = "FAILED: no model (see model)"
        elif check.name == "vllm" and args.dry_run:
            check.state = "SKIPPED: --dry-run (CPU)"
        else:
            run_check(check, bodies[check.name])
        # the last one is the final record
        summary = write_results(checks, header(), args.out, made())
    print(markdown(checks, header()))
    print(json.dumps(summary, default=str))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
