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
- :mod:`.warmstart_cache`: where the warm start lives, its cache key and record, and the check
  of its files. Training it (SFT with TRL's ``SFTTrainer`` and checkpoint selection on
  validation greedy EM; ``ensure_warmstart(profile)``, ``at2po warmstart``) is
  :mod:`at2po_lib.trainer.warmstart`.

    from at2po_lib.config.profile import load_profile
    from at2po_lib.trainer.warmstart import ensure_warmstart
    from at2po_lib.policy.model import load_policy

    model, tokenizer = load_policy(ensure_warmstart(load_profile("tiny")))

Heavy imports (torch, transformers, trl) happen inside the functions that need them.
"""
