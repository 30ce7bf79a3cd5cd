from __future__ import annotations

import pytest

from at2po_lib.config import (ProfileError, known_profiles, load_profile, parse_override,
                              parse_overrides)


def test_all_shipped_profiles_resolve():
    names = known_profiles()
    assert {"smoke", "tiny", "paper-qwen3-4b", "paper-qwen3-8b", "paper-qwen25-7b"} <= set(names)
    for name in names:
        cfg = load_profile(name)
        assert cfg.name == name


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ProfileError) as err:
        load_profile("no-such-profile")
    assert "smoke" in str(err.value) and "tiny" in str(err.value)


def test_paper_profiles_follow_method_section_9():
    cfg = load_profile("paper-qwen3-8b")  # extends paper-qwen3-4b
    assert cfg.policy.model == "Qwen/Qwen3-8B"
    assert (cfg.rollout.tree_m, cfg.rollout.tree_l, cfg.rollout.tree_k) == (10, 2, 6)
    assert cfg.rollout.tree_alpha == pytest.approx(0.05)
    assert cfg.train.learning_rate == pytest.approx(1e-6)
    assert cfg.retrieval.encoder == "intfloat/e5-base-v2"


def test_unknown_key_and_wrong_type_are_errors(tmp_path):
    bad_key = tmp_path / "bad.yaml"
    bad_key.write_text("rollout:\n  tree_mm: 3\n")
    with pytest.raises(ProfileError, match="tree_mm"):
        load_profile(str(bad_key))
    bad_type = tmp_path / "bad2.yaml"
    bad_type.write_text("rollout:\n  tree_m: three\n")
    with pytest.raises(ProfileError, match="tree_m"):
        load_profile(str(bad_type))


def test_overrides_apply_last():
    cfg = load_profile("smoke", parse_override("train.max_steps=7"))
    assert cfg.train.max_steps == 7
    with pytest.raises(ProfileError):
        parse_override("train.max_steps")


def test_several_overrides_merge_per_section():
    merged = parse_overrides(["train.max_steps=7", "train.eval_every=2", "rollout.tree_m=3",
                              "train.max_steps=9"])
    assert merged == {"train": {"max_steps": 9, "eval_every": 2}, "rollout": {"tree_m": 3}}
    assert parse_overrides([]) is None
    cfg = load_profile("smoke", merged)
    assert (cfg.train.max_steps, cfg.rollout.tree_m) == (9, 3)
