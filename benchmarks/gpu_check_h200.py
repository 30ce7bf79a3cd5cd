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
- ``train``: ``--steps`` AT2PO steps on one GPU with the HF rollout backend (the smoke
  profile's TinyWorld and BM25, a reward that varies across leaves so the gradient is not 0):
  step time, rollout time, generated tokens/s, peak GPU memory;
- ``plan``: ``at2po plan``'s memory for the same setting (one GPU, no DeepSpeed, no vLLM, the
  same rows and lengths) against the measured peak (torch's reserved memory + the plan's CUDA
  context); ``ok`` within 10%, else ``FAILED``;
- ``vllm``: only where vLLM imports (``SKIPPED`` otherwise): one engine from the saved model,
  greedy turns through the project's backend, tokens/s.

It ends with a Markdown table for benchmarks/README.md and a JSON line, also written to
``--out`` (``$OUT`` on the device machine) after every sub-check, so a run stopped by its time
limit still leaves what it measured. ``--only`` runs some of the sub-checks (``env`` and
``model`` always run: the others need them).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QWEN3_VOCAB = 151_936
SHAPES = {  # Qwen3's published config.json values (vocabulary padded as theirs)
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072),
    "1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=6144),
    "dry-run": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, intermediate_size=128),
}
DRY_RUN_VOCAB = 4_096
REQUIRED = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "trl",
            "accelerate", "peft", "datasets", "bm25s", "numpy", "yaml", "at2po_lib")
"""What the training path imports (an import failure fails ``env``)."""
PLAN_TOLERANCE = 0.10


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
    print(f"[{check.name}] {check.state} ({check.seconds} s) {json.dumps(check.result)}",
          flush=True)
    return check


# --------------------------------------------------------------------------- env
def env_check(check: Check, dry_run: bool, required: tuple[str, ...] = REQUIRED) -> str:
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
    config = Qwen3Config(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    model = Qwen3ForCausalLM(config).to(torch_dtype(dtype))
    model.generation_config = neutral_generation_config(tokenizer)
    return model, save_policy(model, tokenizer, out)


def model_check(check: Check, profile_cfg, shape: dict, vocab: int, dtype: str,
                out: Path) -> str:
    """A random Qwen3 of ``shape`` saved with save_pretrained; its size against the plan's."""
    from at2po_lib.cost_estimate import architecture_of

    model, folder = build_qwen3(profile_cfg, shape, vocab, dtype, out / "policy")
    params = sum(p.numel() for p in model.parameters())
    cfg = dataclasses.replace(profile_cfg, policy=dataclasses.replace(
        profile_cfg.policy, model=str(folder)))
    planned = architecture_of(cfg).parameters()
    check.result.update(parameters=params, planned_parameters=planned,
                        vocab=model.config.vocab_size, head_dim=model.config.head_dim,
                        dtype=dtype, disk_mib=round(sum(f.stat().st_size for f in folder.iterdir())
                                                    / 2**20, 1))
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

    from at2po_lib.method.loss import loss_diagnostics, policy_loss

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, tokens, turns = (8, 256, 3) if dry_run else (176, 4096, 6)
    g = torch.Generator().manual_seed(0)
    mask = multi_turn_mask(rows, tokens, turns, g).to(device)
    logp = (-torch.rand(rows, tokens, generator=g) * 3).to(device)
    old = logp + 3e-3 * torch.randn(rows, tokens, generator=g).to(device)
    adv = torch.randn(rows, generator=g).to(device)
    runs = {"turn": lambda x: policy_loss(x, old, adv, mask, level="turn"),
            "authors loop turn": lambda x: authors_turn_loss(x, old, adv, mask)[0],
            "token": lambda x: policy_loss(x, old, adv, mask, level="token")}

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
        loss_diagnostics(logp, old, adv, mask, level="turn")
        sync()
        return time.perf_counter() - start

    results = {name: once(fn) for name, fn in runs.items()}  # warm-up, and the values compared
    loss_diff = abs(results["turn"][1] - results["authors loop turn"][1])
    grad_diff = float((results["turn"][2] - results["authors loop turn"][2]).abs().max())
    best = {name: min(once(fn)[0] for _ in range(repeats)) for name, fn in runs.items()}
    best["diagnostics"] = min(diagnostics_once() for _ in range(repeats))
    check.result.update(device=device, batch_rows=rows, tokens=tokens,
                        model_tokens=int(mask.sum()), loss_diff=f"{loss_diff:.1e}",
                        grad_diff=f"{grad_diff:.1e}",
                        **{f"{k.replace(' ', '_')}_ms": round(v * 1e3, 2) for k, v in best.items()})
    if loss_diff > 1e-5 or grad_diff > 1e-6:
        return (f"FAILED: the loss and the authors' loop differ (loss {loss_diff:.1e}, grad "
                f"{grad_diff:.1e})")
    return "ok"


# ------------------------------------------------------------------------- train
def parity_reward(response: str, golden) -> float:
    """A reward that differs between leaves (a random policy answers nothing right)."""
    return float(len(response) % 2)


def check_overrides(policy: str, dtype: str, steps: int, dry_run: bool) -> dict:
    """The profile overrides of the training check (smoke's world, the check's model)."""
    return {
        "policy": {"model": policy, "dtype": dtype},
        "rollout": {"max_response_tokens": 96 if dry_run else 320},
        "train": {"max_steps": steps, "prompts_per_step": 2 if dry_run else 8,
                  "mini_batch_prompts": 1 if dry_run else 4, "micro_batch_rows": 2,
                  "bf16": not dry_run, "activation_checkpointing": not dry_run,
                  "eval_every": 0, "final_eval": False, "save_every": 0, "report_to": [],
                  "progress_bar": False},
    }


@dataclasses.dataclass
class GenerationMeter:
    """Tokens the HF backend generated and the seconds it spent generating them; on CUDA the
    peak allocated bytes inside generation and outside it (the updates), apart: the plan's
    rows belong to one phase or the other."""

    tokens: int = 0
    seconds: float = 0.0
    generation_peak: int = 0
    other_peak: int = 0
    reserved_peak: int = 0

    def close_phase(self, generating: bool) -> None:
        """Book the peak since the last phase change to the phase that just ended."""
        import torch

        if not torch.cuda.is_available():
            return
        peak = torch.cuda.max_memory_allocated()
        self.reserved_peak = max(self.reserved_peak, torch.cuda.max_memory_reserved())
        if generating:
            self.generation_peak = max(self.generation_peak, peak)
        else:
            self.other_peak = max(self.other_peak, peak)
        torch.cuda.reset_peak_memory_stats()


def metered_generation(meter: GenerationMeter) -> Callable[[], None]:
    """Count every ``HFBackend.generate_turns`` call's generated tokens, time and peak memory
    (the rollout's own generation, inside ``train``); returns the function that undoes it."""
    from at2po_lib.rollout.backends import HFBackend

    original = HFBackend.generate_turns

    def generate_turns(self, requests):
        meter.close_phase(generating=False)
        start = time.perf_counter()
        results = original(self, requests)
        meter.seconds += time.perf_counter() - start
        meter.tokens += sum(len(r.token_ids) for r in results)
        meter.close_phase(generating=True)
        return results

    HFBackend.generate_turns = generate_turns

    def undo() -> None:
        HFBackend.generate_turns = original

    return undo


def train_check(check: Check, profile: str, overrides: dict, steps: int) -> str:
    import torch

    from at2po_lib.trainer import run_folder
    from at2po_lib.trainer.run import train

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    meter = GenerationMeter()
    undo = metered_generation(meter)
    try:
        result = train(profile, "at2po", 0, force=True, profile_overrides=overrides,
                       reward_fn=parity_reward)
    finally:
        undo()
    rows = run_folder.read_jsonl(result.run.metrics)
    if len(rows) != steps:
        return f"FAILED: {len(rows)} of {steps} steps recorded"
    walls = [rows[0]["wall_time"]] + [b["wall_time"] - a["wall_time"] for a, b in zip(rows, rows[1:])]
    rollout_s = sum(r.get("rollout/seconds", 0.0) for r in rows)
    check.result.update(
        steps=len(rows), first_step_s=round(walls[0], 1),
        step_s_after_first=round(sum(walls[1:]) / max(len(walls) - 1, 1), 1) if steps > 1 else None,
        rollout_s=round(rollout_s, 1),
        generated_tokens=meter.tokens,
        generated_tokens_per_s=round(meter.tokens / meter.seconds, 1) if meter.seconds else None,
        losses_finite=all(r.get("loss") is not None and r["loss"] == r["loss"] for r in rows))
    if torch.cuda.is_available():
        meter.close_phase(generating=False)
        check.result["peak_allocated_gib"] = round(
            max(meter.generation_peak, meter.other_peak) / 2**30, 2)
        check.result["generation_peak_gib"] = round(meter.generation_peak / 2**30, 2)
        check.result["update_peak_gib"] = round(meter.other_peak / 2**30, 2)
        check.result["peak_reserved_gib"] = round(meter.reserved_peak / 2**30, 2)
    if not check.result["losses_finite"]:
        return "FAILED: a loss is not finite"
    if not meter.tokens:
        return "FAILED: the rollout generated no tokens"
    return "ok"


# -------------------------------------------------------------------------- plan
def plan_check(check: Check, profile: str, overrides: dict, measured: dict,
               gpu_gib: float | None) -> str:
    """The plan of the same setting against the measured peak: reserved memory (what torch
    holds) plus the plan's CUDA context (torch's allocator does not see it)."""
    from at2po_lib.config import load_profile
    from at2po_lib.cost_estimate import GIB, Hardware, plan

    cfg = load_profile(profile, overrides)
    result = plan(cfg, Hardware(gpus=1, gpu_memory_gib=gpu_gib or 80.0, zero_stage="none",
                                retriever_on_gpu=False))
    predicted = result["total_bytes"] / GIB
    check.result.update(predicted_gib=round(predicted, 2),
                        rows={k: round(v / GIB, 3) for k, v in result["memory"].items()})
    if "peak_reserved_gib" not in measured:
        return "SKIPPED: no GPU memory measured (CPU)"
    context = result["memory"].get("CUDA context (+ NCCL)", 0.0) / GIB
    actual = measured["peak_reserved_gib"] + context
    error = (predicted - actual) / actual
    check.result.update(measured_gib=round(actual, 2), plan_error=round(error, 3))
    if abs(error) > PLAN_TOLERANCE:
        return f"FAILED: the plan is off by {error:+.0%} (more than {PLAN_TOLERANCE:.0%})"
    return "ok"


# -------------------------------------------------------------------------- vLLM
def vllm_check(check: Check, profile: str, overrides: dict, contexts: int = 32) -> str:
    try:
        import vllm  # noqa: F401 - only to know whether this machine has it
    except Exception as exc:
        return f"SKIPPED: vllm does not import here ({type(exc).__name__})"
    from at2po_lib.config import load_profile
    from at2po_lib.policy.tokenizer import load_tokenizer
    from at2po_lib.prompts import build_messages, get_template, prompt_ids
    from at2po_lib.rollout.agent import turn_stops
    from at2po_lib.rollout.sampling import SamplingSpec
    from at2po_lib.rollout.turns import TurnRequest
    from at2po_lib.rollout.vllm_backend import VLLMBackend, build_engine

    cfg = load_profile(profile, overrides)
    tokenizer = load_tokenizer(cfg.policy.model)
    engine = build_engine(cfg.policy.model, cfg, gpu_memory_utilization=0.3, max_model_len=2048,
                          disable_log_stats=False)
    template = get_template(cfg.policy.template)
    backend = VLLMBackend(engine, tokenizer, SamplingSpec(0.0), turn_stops(template))
    requests = [TurnRequest(prompt_ids(tokenizer, build_messages(template, f"question {i}?")), 128)
                for i in range(contexts)]
    start = time.perf_counter()
    results = backend.generate_turns(requests)
    seconds = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in results)
    check.result.update(contexts=contexts, generated_tokens=tokens,
                        tokens_per_s=round(tokens / seconds, 1))
    return "ok" if tokens else "FAILED: no tokens generated"


# ------------------------------------------------------------------------- table
def cell(check: Check) -> str:
    keep = {k: v for k, v in check.result.items() if k not in ("path", "rows")}
    return ", ".join(f"{k}={v}" for k, v in keep.items())


def markdown(checks: list[Check], header: str) -> str:
    lines = [header, "", "| check | state | seconds | result |", "| --- | --- | ---: | --- |"]
    lines += [f"| {c.name} | {c.state} | {c.seconds} | {cell(c)} |" for c in checks]
    return "\n".join(lines)


SUB_CHECKS = ("env", "model", "loss", "train", "plan", "vllm")


def write_results(checks: list[Check], header: str, out: Path | None) -> dict:
    """The table and the summary so far, written to ``out`` (after every sub-check)."""
    summary = {"check": "gpu_check_h200", "failed": [c.name for c in checks if c.failed],
               **{c.name: {"state": c.state, "seconds": c.seconds, **c.result} for c in checks}}
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.txt").write_text(markdown(checks, header) + "\n")
        (out / "checks.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny shapes, one step: what the test suite runs")
    parser.add_argument("--size", choices=("0.6b", "1.7b"), default="0.6b")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 3; 1 dry)")
    parser.add_argument("--out", type=Path, default=None, help="folder for table.txt and checks.json")
    parser.add_argument("--profile", default="smoke", help="world, retriever and tree shape")
    parser.add_argument("--only", default=",".join(SUB_CHECKS),
                        help="comma-separated sub-checks to run (env and model always run)")
    parser.add_argument("--also-require", action="append", default=[], metavar="MODULE",
                        help="one more module env must import (the tests check that a failed "
                             "import fails the check)")
    args = parser.parse_args(argv)
    wanted = {"env", "model", *args.only.split(",")}
    if wanted - set(SUB_CHECKS):
        parser.error(f"--only: unknown sub-checks {sorted(wanted - set(SUB_CHECKS))}; "
                     f"choose from {', '.join(SUB_CHECKS)}")
    steps = args.steps or (1 if args.dry_run else 3)
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    work = Path(tempfile.mkdtemp(prefix="at2po-gpu-check-"))
    for var, sub in (("AT2PO_RESULTS", "results"), ("AT2PO_ARTIFACTS", "artifacts"),
                     ("AT2PO_FIGURES", "figures")):
        os.environ[var] = str(work / sub)  # nothing lands in the repository copy
    checks = [Check(n) for n in SUB_CHECKS if n in wanted]
    by_name = {c.name: c for c in checks}
    shape = SHAPES["dry-run" if args.dry_run else args.size]
    vocab = DRY_RUN_VOCAB if args.dry_run else QWEN3_VOCAB
    dtype = "float32" if args.dry_run else "bfloat16"

    def header() -> str:
        env = by_name["env"].result
        return (f"GPU check (benchmarks/gpu_check_h200.py{' --dry-run' if args.dry_run else ''}, "
                f"Qwen3-{args.size} shape{' (tiny: dry run)' if args.dry_run else ''}, "
                f"{env.get('gpu', 'CPU')}, Python {env.get('python')}, "
                f"torch {env.get('torch')}):")

    def build(check: Check) -> str:
        from at2po_lib.config import load_profile

        return model_check(check, load_profile(args.profile), shape, vocab, dtype, work)

    def overrides() -> dict:
        return check_overrides(by_name["model"].result.get("path", ""), dtype, steps,
                               args.dry_run)

    bodies: dict[str, Callable[[Check], str]] = {
        "env": lambda c: env_check(c, args.dry_run, REQUIRED + tuple(args.also_require)),
        "model": build,
        "loss": lambda c: loss_check(c, args.dry_run),
        "train": lambda c: train_check(c, args.profile, overrides(), steps),
        "plan": lambda c: plan_check(c, args.profile, overrides(),
                                     by_name.get("train", Check("train")).result,
                                     by_name["env"].result.get("gpu_gib")),
        "vllm": lambda c: vllm_check(c, args.profile, overrides()),
    }
    needs_model = {"train", "plan", "vllm"}
    for check in checks:
        if check.name in needs_model and by_name["model"].failed:
            check.state = "FAILED: no model (see model)"
        elif check.name == "vllm" and args.dry_run:
            check.state = "SKIPPED: --dry-run (CPU)"
        else:
            run_check(check, bodies[check.name])
        summary = write_results(checks, header(), args.out)  # the last one is the final record
    print(markdown(checks, header()))
    print(json.dumps(summary, default=str))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
