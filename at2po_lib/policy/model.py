"""The policy model: a tiny ``Qwen3ForCausalLM`` built from :class:`PolicyConfig` (toy scale), or
any hub causal LM (``Qwen/Qwen3-4B`` at paper scale), loaded through the same
``AutoModelForCausalLM.from_pretrained`` call.

Generation defaults and the sampling temperature
------------------------------------------------
RL methods compare log-probabilities recorded at sampling time with those the trainer
recomputes (the importance ratio, docs/method.md §7). Both must be taken from the *same*
distribution: the rollout samples from ``softmax(logits / T)`` and the trainer recomputes
``log_softmax(logits / T)`` with the same ``T`` (``rollout.temperature``); docs/toy_scale.md measured
that a mismatch corrupts the ratio. ``transformers`` fills unset generation fields from global
defaults — notably ``top_k=50`` — which would silently truncate the sampling distribution while
the trainer's log-probs stay untruncated. :func:`neutral_generation_config` therefore saves an
explicit, neutral generation config with every tiny model: ``temperature=1.0``, ``top_k=0``
(off), ``top_p=1.0`` (off), no repetition penalty, eos ``<|im_end|>``; sampling from it draws
from exactly ``softmax(logits)``. ``do_sample`` is stored as ``True`` (as in Qwen3's own
generation config) because ``transformers`` refuses to save ``top_k=0`` beside
``do_sample=False`` — and leaving ``top_k`` unset would bring back the hidden ``top_k=50``.
Greedy decoding (evaluation, docs/method.md §4) therefore passes ``do_sample=False`` explicitly, and
sampling callers pass the temperature they train with. Qwen3-4B's shipped config (temperature
0.6, top-k 20, top-p 0.95) is *not* neutral: the rollout overrides it at paper scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..util.quiet import hf_progress_bars_off
from .checkpoint_files import CheckpointError, check_json_files
from .tokenizer import load_tokenizer

# Imported inside the functions that use them: transformers, safetensors; reporting imports this
# module through evaluation, and transformers (~2 s) loads only when a policy is built, checked or
# loaded.

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel

    from ..config.profile import PolicyConfig

_DTYPES = ("float32", "bfloat16", "float16")


def build_qwen3_config(policy_cfg: PolicyConfig, tokenizer) -> Any:
    """A ``Qwen3Config`` of the profile's size; vocabulary from ``tokenizer``.

    ``head_dim`` is ``policy.head_dim``, by default ``hidden_size // num_attention_heads``
    (Qwen3Config's default of 128 would make a 128-wide model's attention 4x wider than its
    residual stream). Embeddings are tied,
    which roughly halves the parameter count of a model this small.
    """
    from transformers import Qwen3Config

    if not policy_cfg.head_dim and policy_cfg.hidden_size % policy_cfg.num_attention_heads:
        raise ValueError(
            f"policy.hidden_size={policy_cfg.hidden_size} is not divisible by "
            f"policy.num_attention_heads={policy_cfg.num_attention_heads}"
        )
    if policy_cfg.num_attention_heads % policy_cfg.num_key_value_heads:
        raise ValueError(
            f"policy.num_attention_heads={policy_cfg.num_attention_heads} is not a "
            f"multiple of policy.num_key_value_heads={policy_cfg.num_key_value_heads}"
        )
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=policy_cfg.hidden_size,
        intermediate_size=policy_cfg.intermediate_size,
        num_hidden_layers=policy_cfg.num_hidden_layers,
        num_attention_heads=policy_cfg.num_attention_heads,
        num_key_value_heads=policy_cfg.num_key_value_heads,
        head_dim=policy_cfg.attention_head_dim(),
        max_position_embeddings=policy_cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def neutral_generation_config(tokenizer, max_new_tokens: int = 64) -> GenerationConfig:
    """Explicit generation defaults that change no probability (see the module docstring)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=True,  # see the module docstring: top_k=0 may only be saved with sampling on
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        repetition_penalty=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )


def build_policy(policy_cfg: PolicyConfig, tokenizer, seed: int = 0) -> PreTrainedModel:
    """A freshly initialised tiny ``Qwen3ForCausalLM`` (weights drawn with ``seed``)."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(build_qwen3_config(policy_cfg, tokenizer))
    model.generation_config = neutral_generation_config(tokenizer)
    return model.to(torch_dtype(policy_cfg.dtype))


def count_parameters(model) -> int:
    """Distinct trainable parameters (tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def save_policy(model, tokenizer, path: str | Path) -> Path:
    """``save_pretrained`` the model (safetensors + config + generation config) and tokenizer."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    with hf_progress_bars_off():  # a "Writing model shards" bar per save of a 1-shard model
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path


def torch_dtype(name: str):
    if name not in _DTYPES:
        raise ValueError(f"policy.dtype={name!r}; expected one of {', '.join(_DTYPES)}")
    return getattr(torch, name)


def check_weight_files(folder: Path) -> None:
    """Open the header of every ``*.safetensors`` file in ``folder``: a truncated or corrupt
    file raises :class:`CheckpointError` naming it (``from_pretrained``'s own error does not).
    Reading a header is cheap (the tensors are not loaded)."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(
                f"{path}: not a readable safetensors file (truncated or corrupt? "
                f"{exc}); re-save or re-download the checkpoint"
            ) from None


def load_policy(
    path_or_name: str | Path, dtype: str = "float32", device: str = "cpu"
) -> tuple[PreTrainedModel, Any]:
    """Load ``(model, tokenizer)`` with ``AutoModelForCausalLM`` / ``AutoTokenizer``.

    The same call loads a tiny local checkpoint and ``Qwen/Qwen3-4B`` (set
    ``HF_HUB_OFFLINE=1`` to forbid network access; a hub name then needs a local cache).
    The model is returned in eval mode on ``device``.
    """
    from transformers import AutoModelForCausalLM

    text = str(path_or_name)
    if (isinstance(path_or_name, Path) or text.startswith((".", "/", "~"))) and not Path(
        text
    ).expanduser().is_dir():
        # A path, not a hub name: say so instead of the hub's "repo id must be ..." error.
        raise FileNotFoundError(f"policy checkpoint {text!r}: no such folder")

    if Path(text).expanduser().is_dir():
        check_weight_files(Path(text).expanduser())
        check_json_files(Path(text).expanduser())
    with hf_progress_bars_off():  # a "Loading weights" bar per load, milliseconds at toy scale
        model = AutoModelForCausalLM.from_pretrained(text, dtype=torch_dtype(dtype))
    tokenizer = load_tokenizer(path_or_name)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer
