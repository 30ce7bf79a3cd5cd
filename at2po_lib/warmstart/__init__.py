"""The warm start: the supervised policy every RL run starts from.

- :mod:`.sft`: training it (SFT with TRL's ``SFTTrainer``, checkpoint selection on validation
  greedy EM; ``ensure_warmstart(profile)``, ``at2po warmstart``).
- :mod:`.cache`: where it lives, its cache key and record, and the check of its files.

    from at2po_lib.config.profile import load_profile
    from at2po_lib.warmstart.sft import ensure_warmstart
    from at2po_lib.policy.model import load_policy

    model, tokenizer = load_policy(ensure_warmstart(load_profile("tiny")))
"""
