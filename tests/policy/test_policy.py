"""The tiny policy: tokenizer, Qwen3 model, save/load through ``from_pretrained``, SFT, warm
start selection. Everything runs offline on the smoke profile's TinyWorld."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.config.profile import load_profile
from at2po_lib.policy.tokenizer import (
    CHATML_TEMPLATE,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

CORPUS = [
    '"Fusi Motors"\nFusi Motors is an automobile company based in Nibebre. Fusi was founded by '
    "Drukretrir Talen. Fusi was established in 2013.",
    '"Nibebre"\nNibebre is a city in Boshuria. The city was founded in 843.',
    "Who founded Fusi Motors? Where was O'Brien-Smith born?",
] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400)


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """The smoke profile with artefacts in a temporary folder (module scope: built once)."""
    root = tmp_path_factory.mktemp("policy")
    old = {k: os.environ.get(k) for k in ("AT2PO_ARTIFACTS", "AT2PO_RESULTS")}
    os.environ["AT2PO_ARTIFACTS"] = str(root / "artifacts")
    os.environ["AT2PO_RESULTS"] = str(root / "results")
    yield load_profile("smoke")
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# ----------------------------------------------------------------------------- tokenizer


def test_tags_and_chat_tokens_are_single_tokens(tokenizer):
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    text = "<search> Fusi Motors founder </search> <result> x </result>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[0] == "<search>" and "</search>" in pieces and "<result>" in pieces


def test_eos_pad_and_tags_survive_skip_special_tokens(tokenizer):
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer.encode("<answer> Nibebre </answer>", add_special_tokens=False)
    ids = ids + [tokenizer.eos_token_id]
    # Tags are not special: a decoded response keeps them (the reward parses them).
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<answer> Nibebre </answer>"


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(
            list(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:?!'\"-()\n<>/éü"
            )
        ),
        max_size=80,
    )
)
def test_decode_encode_round_trips_exactly(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_round_trip_of_tagged_trajectory(tokenizer):
    text = (
        "<search> Fusi Motors founder </search> <result> Fusi Motors : Fusi was founded by "
        "Drukretrir Talen. </result> <answer> Drukretrir Talen </answer>"
    )
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_chat_template_is_chatml(tokenizer):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"{IM_START}system\nbe brief{IM_END}\n{IM_START}user\nq?{IM_END}\n{IM_START}assistant\n"
    )
    no_prompt = tokenizer.apply_chat_template(messages, tokenize=False)
    assert not no_prompt.endswith("assistant\n")


def test_tokenizer_saves_and_loads_with_autotokenizer(tokenizer, tmp_path):
    save_tokenizer(tokenizer, tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    text = "<search> Nibebre country </search>"
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(
        text, add_special_tokens=False
    )
    assert loaded.chat_template == CHATML_TEMPLATE
    assert (loaded.eos_token_id, loaded.pad_token_id) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    assert loaded.padding_side == "left"


def test_too_small_vocabulary_is_an_error():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(CORPUS, vocab_size=100)


# ----------------------------------------------------------------------------- model


def test_model_builds_saves_and_loads_offline(tokenizer, tmp_path):
    import torch

    from at2po_lib.policy.model import build_policy, count_parameters, load_policy, save_policy

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    cfg = load_profile("smoke").policy
    model = build_policy(cfg, tokenizer, seed=0)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.head_dim == cfg.hidden_size // cfg.num_attention_heads
    assert model.config.vocab_size == len(tokenizer)
    # Tied embeddings: the output projection is the input embedding.
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    n = count_parameters(model)
    assert n < 200_000
    save_policy(model, tokenizer, tmp_path / "m")
    loaded, loaded_tok = load_policy(tmp_path / "m")
    assert type(loaded).__name__ == "Qwen3ForCausalLM" and not loaded.training
    ids = torch.tensor([tokenizer.encode("Fusi Motors founder", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits, atol=1e-6)
    assert loaded_tok.encode("Nibebre") == tokenizer.encode("Nibebre")
    # A missing local folder is named as such (not the hub's "repo id must be ..." error).
    with pytest.raises(FileNotFoundError, match="step-00700"):
        load_policy(tmp_path / "step-00700")


def test_saved_generation_config_changes_no_probability(tokenizer, tmp_path):
    from at2po_lib.policy.model import build_policy, load_policy, save_policy

    save_policy(build_policy(load_profile("smoke").policy, tokenizer), tokenizer, tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "generation_config.json").read_text())
    # top_k must be explicitly 0: unset, transformers would apply top_k=50 when sampling.
    assert saved["top_k"] == 0 and saved["top_p"] == 1.0 and saved["temperature"] == 1.0
    assert saved["eos_token_id"] == tokenizer.eos_token_id
    model, _ = load_policy(tmp_path / "m")
    assert model.generation_config.top_k == 0


def test_bad_head_count_is_an_error(tokenizer):
    from at2po_lib.policy.model import build_policy

    cfg = load_profile("smoke").policy
    cfg.num_attention_heads = 3
    with pytest.raises(ValueError, match="num_attention_heads"):
        build_policy(cfg, tokenizer)


# ----------------------------------------------------------------------------- SFT


@pytest.mark.slow  # trains the tiny policy (SFT steps)
def test_a_few_sft_steps_decrease_the_masked_loss(smoke_env, tmp_path):
    from at2po_lib.policy.demos import build_sft_examples, script_demos
    from at2po_lib.policy.model import build_policy
    from at2po_lib.policy.sft_data import (
        corpus_texts,
        demo_source_rows,
        tokenizer_texts,
        world_sources,
    )
    from at2po_lib.warmstart.sft import make_trainer, masked_loss

    cfg = smoke_env
    aux = world_sources(cfg)[1]  # smoke: one auxiliary world
    demos = script_demos(demo_source_rows(cfg, aux)[:24], cfg.policy.template, aux.retriever)
    tok = train_tokenizer(tokenizer_texts(corpus_texts([aux], include_main=False), demos), 600)
    examples, _ = build_sft_examples(demos, tok, cfg.policy.max_position_embeddings)
    model = build_policy(cfg.policy, tok, seed=0)
    before = masked_loss(model, examples)
    cfg.sft.learning_rate, cfg.sft.warmup_steps = 3e-3, 0
    make_trainer(
        model,
        tok,
        examples,
        cfg.sft,
        tmp_path / "trainer",
        cfg.policy.max_position_embeddings,
        max_steps=12,
    ).train()
    after = masked_loss(model, examples)
    # A fresh model predicts ~uniformly: loss ≈ ln(vocab) = ln(600) ≈ 6.4; 12 steps at lr 3e-3
    # cut it clearly (about 1.3 nats measured; the tags alone are easy to learn).
    assert before > 5.0
    assert after < before - 0.5


def test_targets_only_loss_equals_the_full_logits_loss_and_its_gradient(tokenizer):
    """The LM head applied at labelled positions only gives the loss (and gradient) of the
    model's own full-logits loss, and the metrics TRL logs."""
    import torch

    from at2po_lib.config.profile import PolicyConfig
    from at2po_lib.policy.model import build_policy
    from at2po_lib.warmstart.sft import targets_only_loss

    model = build_policy(
        PolicyConfig(hidden_size=32, num_hidden_layers=1, intermediate_size=64), tokenizer, seed=0
    )
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, len(tokenizer), (3, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0  # a padded row
    labels = ids.clone()
    labels[:, :5] = -100  # prompt / observation positions
    labels[mask == 0] = -100

    loss, n_valid, entropy_sum, n_correct = targets_only_loss(model, ids, mask, labels)
    (grad,) = torch.autograd.grad(loss, [model.get_output_embeddings().weight])
    reference = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    (ref_grad,) = torch.autograd.grad(reference, [model.get_output_embeddings().weight])
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(grad, ref_grad)
    assert int(n_valid) == int((labels[:, 1:] != -100).sum()) == 3 * 7 - 3

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1][labels[:, 1:] != -100]
    log_p = torch.log_softmax(logits, -1)
    torch.testing.assert_close(entropy_sum, -(log_p.exp() * log_p).sum())
    assert int(n_correct) == int((logits.argmax(-1) == labels[:, 1:][labels[:, 1:] != -100]).sum())


@given(
    st.lists(st.integers(1, 500), min_size=1, max_size=120),
    st.integers(1, 9),
    st.integers(1, 5),
    st.integers(0, 3),
)
@settings(max_examples=60, deadline=None)
def test_shuffled_length_batches_cover_every_example_once(lengths, batch_size, group, seed):
    from at2po_lib.warmstart.sft import ShuffledLengthBatches

    sampler = ShuffledLengthBatches(lengths, batch_size, group, seed)
    for epoch in range(2):
        batches = sampler.batches(epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(1 <= len(b) <= batch_size for b in batches)
        # Within a batch, longest first (sorted inside its group of batches).
        assert all(
            [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)
            for b in batches
        )
    assert list(sampler) == [i for b in sampler.batches(0) for i in b]


def test_shuffled_length_batches_do_not_run_from_long_to_short():
    """The failure it replaces: runs of long batches, then runs of short ones."""
    from at2po_lib.warmstart.sft import ShuffledLengthBatches

    lengths = [100] * 400 + [300] * 400  # single-hop-like and multi-hop-like demonstrations
    batches = ShuffledLengthBatches(lengths, 16, 4, seed=0).batches(0)
    kinds = [lengths[b[0]] for b in batches]
    assert all(len({lengths[i] for i in b}) <= 2 for b in batches)
    # Runs of equal kind stay short: 50 batches in a random order change kind ~25 times.
    changes = sum(a != b for a, b in zip(kinds, kinds[1:]))
    assert changes > 15


def test_choose_checkpoint_prefers_the_middle_of_the_band():
    from at2po_lib.warmstart.sft import choose_checkpoint

    # Band [0.25, 0.75], middle 0.5 (dyadic numbers: exact in floating point).
    table = [
        {"step": 100, "em": 0.125},
        {"step": 200, "em": 0.375},
        {"step": 300, "em": 0.5625},
        {"step": 400, "em": 0.625},
        {"step": 500, "em": 0.875},
    ]
    # Distances to 0.5: 0.125, 0.0625, 0.125 -> step 300.
    assert choose_checkpoint(table, 0.25, 0.75) == (table[2], True)
    # Tie (0.375 and 0.625 are both 0.125 away): the earlier step.
    assert choose_checkpoint([table[3], table[1]], 0.25, 0.75) == (table[1], True)
    # Nothing in the band: the closest to it (0.125 is 0.125 below, 0.875 is 0.125 above ->
    # tie -> earlier step); 0.9375 is farther than 0.125.
    assert choose_checkpoint([table[0], table[4]], 0.25, 0.75) == (table[0], False)
    far = {"step": 50, "em": 0.0}
    assert choose_checkpoint([far, table[4]], 0.25, 0.75) == (table[4], False)
    with pytest.raises(ValueError):
        choose_checkpoint([], 0.25, 0.75)


@pytest.mark.slow  # trains the smoke warm start
def test_warmstart_on_smoke_profile_is_cached(smoke_env):
    from at2po_lib.policy.model import load_policy
    from at2po_lib.warmstart.cache import cache_key, read_warmstart_record, warmstart_dir
    from at2po_lib.warmstart.sft import ensure_warmstart

    cfg = smoke_env
    path = ensure_warmstart(cfg)
    assert path == warmstart_dir(cfg.name)
    record = read_warmstart_record(cfg.name)
    assert record["cache_key"] == cache_key(cfg)
    assert record["chosen_step"] in [row["step"] for row in record["selection"]]
    assert record["sft_seconds"] > 0 and record["parameters"] > 0
    assert record["config"]["sft"] == json.loads(json.dumps(record["config"]["sft"]))
    model, tok = load_policy(path)
    assert type(model).__name__ == "Qwen3ForCausalLM" and len(tok) == record["vocab_size"]
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert ensure_warmstart(cfg) == path  # cached: not retrained
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime


def test_lm_mix_adds_fully_supervised_chunks_in_the_asked_share(tokenizer):
    from at2po_lib.config.profile import WarmStartConfig
    from at2po_lib.warmstart.sft import lm_examples

    sft = WarmStartConfig(lm_mix=0.25, pretrain_seq_len=8)
    chunks = lm_examples(CORPUS, tokenizer, sft, n_demos=30)
    assert len(chunks) == 10  # 10 / (30 + 10) = 0.25
    for chunk in chunks:
        assert len(chunk["input_ids"]) == 8
        assert chunk["assistant_masks"] == [1] * 8  # every token is a target, as in pretraining
    assert lm_examples(CORPUS, tokenizer, WarmStartConfig(lm_mix=0.0), n_demos=30) == []
    with pytest.raises(ValueError, match="lm_mix"):
        lm_examples(CORPUS, tokenizer, WarmStartConfig(lm_mix=1.0), n_demos=30)


def test_target_ranks_match_a_direct_sort_of_the_logits(tokenizer):
    import pandas as pd
    import torch

    from at2po_lib.config.profile import PolicyConfig
    from at2po_lib.policy.token_ranks import rank_table, summarise_ranks, target_ranks
    from at2po_lib.policy.model import build_policy

    model = build_policy(
        PolicyConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        ),
        tokenizer,
    )
    ids = tokenizer.encode("Who founded Fusi Motors? Drukretrir Talen.", add_special_tokens=False)
    mask = [0] * 5 + [1] * (len(ids) - 5)
    positions, ranks = target_ranks(model, {"input_ids": ids, "assistant_masks": mask})
    assert positions == list(range(5, len(ids)))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    for position, rank in zip(positions, ranks):
        order = torch.argsort(logits[position - 1], descending=True).tolist()
        assert order.index(ids[position]) == rank  # random logits: no ties

    table = rank_table(model, tokenizer, [{"input_ids": ids, "assistant_masks": mask}], "w")
    assert table["rank"].tolist() == ranks
    summary = summarise_ranks(
        pd.DataFrame(
            {"label": ["a"] * 4, "is_name": [True, True, True, False], "rank": [0, 4, 10, 0]}
        )
    )
    names = summary[summary["kind"] == "name"].iloc[0]
    assert (names["tokens"], names["top1"], names["median_rank"]) == (3, 1 / 3, 4)
