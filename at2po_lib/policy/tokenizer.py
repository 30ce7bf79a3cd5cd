"""The tiny policy's tokenizer: a byte-level BPE trained on TinyWorld text, wrapped as a
``PreTrainedTokenizerFast`` that loads through ``AutoTokenizer.from_pretrained`` exactly like
Qwen3's tokenizer does at paper scale.

Design (why each choice):

- **Byte-level BPE, no normalisation** (as Qwen's): every string encodes, and
  ``decode(encode(x)) == x`` exactly — no lower-casing, no unknown token. docs/method.md §1 stresses
  that re-tokenisation drift breaks training; an exact round trip keeps the tiny tokenizer from
  hiding that class of bug. Names may span several tokens (docs/toy_scale.md asks for that).
- **Tags are single tokens**: ``<think>``, ``<search>``, ``<result>``, ``<answer>`` (and closing
  forms), plus Search-R1's ``<information>`` pair, are added tokens that are *not* special, so
  ``decode(..., skip_special_tokens=True)`` keeps them (Qwen3 treats ``<think>`` the same way).
- **ChatML** special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``; eos is
  ``<|im_end|>`` (ends an assistant turn, as in Qwen3's instruct generation config) and pad is
  ``<|endoftext|>``.
- The chat template is Qwen's ChatML without Qwen3's thinking switches: system/user/assistant
  messages as ``<|im_start|>role\\ncontent<|im_end|>\\n``, and ``add_generation_prompt`` appends
  ``<|im_start|>assistant\\n``.

    >>> tok = train_tokenizer(["The capital of Avaria is Belmont."], vocab_size=400)
    >>> tok.decode(tok("<search> capital of Avaria </search>")["input_ids"])
    '<search> capital of Avaria </search>'
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .checkpoint_files import check_json_files

# Imported inside the functions that use them: tokenizers, transformers; transformers (~2 s) loads
# only when a tokenizer is trained or loaded.

if TYPE_CHECKING:  # heavy import only for type checkers
    from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
"""ChatML control tokens (ids 0, 1, 2 in a freshly trained tokenizer)."""

TAG_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<result>",
    "</result>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
)
"""Agent tags (docs/method.md §1); each must encode as exactly one token."""

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)
"""Qwen-style ChatML (no tools block, no thinking switch): the tiny policy's chat format."""


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 2000, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it for ``transformers``.

    Args:
        texts: training text (TinyWorld corpus, questions, prompt templates, demonstrations).
        vocab_size: upper bound on the vocabulary *including* the 256 byte symbols and the
            special and tag tokens; the result is smaller when the text has fewer merges.
        min_frequency: a pair is merged only if it occurs at least this often.

    Returns:
        A ``PreTrainedTokenizerFast`` with the ChatML template, eos ``<|im_end|>``,
        pad ``<|endoftext|>`` and every tag in :data:`TAG_TOKENS` as one token.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    reserved = len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    if vocab_size < 256 + reserved:
        raise ValueError(
            f"vocab_size={vocab_size} is below the 256 byte symbols + {reserved} special/tag tokens"
        )
    core = Tokenizer(models.BPE())
    # ByteLevel without a prefix space: "Paris" at the start and " Paris" inside a sentence are
    # different tokens, as in Qwen/GPT-2; the decoder maps the bytes back exactly.
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Tags are matched before pre-tokenisation, so they never merge with neighbouring text.
    core.train_from_iterator(_without_tags(texts), trainer=trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return wrap_tokenizer(core)


def _without_tags(texts: Iterable[str]) -> Iterable[str]:
    """Replace tag and special strings by a newline: they are added whole afterwards, and
    letting BPE see them would waste merges on ``<``, ``/`` and ``>`` fragments. A newline (not
    a space) keeps the word after ``<|im_start|>`` (``user``, ``assistant``) space-less, as it
    is in the chat template."""
    markers = SPECIAL_TOKENS + TAG_TOKENS
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"tokenizer training text must be str, got {type(text).__name__}")
        for marker in markers:
            text = text.replace(marker, "\n")
        yield text


def wrap_tokenizer(core) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` as a ChatML ``PreTrainedTokenizerFast``."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
        padding_side="left",  # generation pads on the left, as Qwen's tokenizer does
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    check_tokenizer(tokenizer)
    return tokenizer


def check_tokenizer(tokenizer) -> None:
    """Raise if a tag or a ChatML token does not encode as exactly one token."""
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"tokenizer splits {token!r} into {len(ids)} tokens: {ids}")


def save_tokenizer(tokenizer, path: str | Path) -> Path:
    """``save_pretrained`` into ``path`` (tokenizer.json + tokenizer_config.json + template)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    return path


def load_tokenizer(path_or_name: str | Path):
    """``AutoTokenizer.from_pretrained``: the same call that loads ``Qwen/Qwen3-4B``'s tokenizer."""
    from transformers import AutoTokenizer

    if Path(str(path_or_name)).expanduser().is_dir():  # a damaged file is named, not a bare error
        check_json_files(Path(str(path_or_name)).expanduser())
    tokenizer = AutoTokenizer.from_pretrained(str(path_or_name))
    if tokenizer.pad_token is None:  # some hub tokenizers ship without one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
