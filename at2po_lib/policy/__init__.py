"""The policy: a tiny Qwen3 trained from scratch (toy scale) or a hub model (paper scale).

Modules:

- :mod:`.tokenizer`: byte-level BPE trained on TinyWorld text, ChatML template, tags as single
  tokens, loaded with ``AutoTokenizer.from_pretrained`` (``train_tokenizer``, ``load_tokenizer``).
- :mod:`.model`: ``Qwen3ForCausalLM`` from ``PolicyConfig``; ``load_policy(path_or_name)``
  through ``AutoModelForCausalLM.from_pretrained`` — the call that loads ``Qwen/Qwen3-4B``.
- :mod:`.demos`: scripted demonstrations with real retriever observations, tokenised turn by
  turn with a loss mask (prompt and observations 0, model turns 1).
- :mod:`.sft_data`: which worlds and questions feed the warm start, validation rows,
  pretraining text.

The warm start trained from these parts is :mod:`at2po_lib.warmstart`.

Heavy imports (torch, transformers, trl) happen inside the functions that need them.
"""
