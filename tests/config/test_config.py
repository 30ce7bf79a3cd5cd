from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from at2po_lib.config.profile import ProfileError, known_profiles, load_profile, tree_leaves
from at2po_lib.config.overrides import parse_override, parse_overrides, parse_value


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


def test_a_moved_key_names_its_new_home(tmp_path):
    """train.chain_leaves became rollout.chains (the rollout owns every leaf count)."""
    old = tmp_path / "old.yaml"
    old.write_text("train:\n  chain_leaves: 6\n")
    with pytest.raises(ProfileError, match="moved to rollout.chains"):
        load_profile(str(old))
    with pytest.raises(ProfileError, match="moved to rollout.chains"):
        parse_override("train.chain_leaves=6")
    assert (
        load_profile("smoke", parse_override("rollout.chains=5")).rollout.leaves_per_prompt("chain")
        == 5
    )


def test_overrides_apply_last():
    cfg = load_profile("smoke", parse_override("train.max_steps=7"))
    assert cfg.train.max_steps == 7
    with pytest.raises(ProfileError):
        parse_override("train.max_steps")


def test_several_overrides_merge_per_section():
    merged = parse_overrides(
        ["train.max_steps=7", "train.eval_every=2", "rollout.tree_m=3", "train.max_steps=9"]
    )
    assert merged == {"train": {"max_steps": 9, "eval_every": 2}, "rollout": {"tree_m": 3}}
    assert parse_overrides([]) is None
    cfg = load_profile("smoke", merged)
    assert (cfg.train.max_steps, cfg.rollout.tree_m) == (9, 3)


# ------------------------------------------------------------- command-line values (--set)
def test_scientific_notation_is_a_float_as_in_yaml_1_2():
    # PyYAML (YAML 1.1) reads "1e-4" as the string "1e-4": the --help example used to fail
    assert parse_overrides(["train.learning_rate=1e-4"]) == {"train": {"learning_rate": 1e-4}}
    assert parse_value("3E+2", float) == 300.0 and parse_value("2", float) == 2.0
    assert parse_value("[1e-3, 2]", list[float]) == [1e-3, 2.0]


def test_ints_bools_lists_and_null_parse_by_field_type():
    merged = parse_overrides(
        [
            "train.max_steps=12",
            "train.final_eval=false",
            "train.methods=[grpo, at2po]",
            "train.val_questions=null",
            "retrieval.url=null",
            "retrieval.query_prefix=query: ",
        ]
    )
    assert merged == {
        "train": {
            "max_steps": 12,
            "final_eval": False,
            "methods": ["grpo", "at2po"],
            "val_questions": None,
        },
        "retrieval": {"url": None, "query_prefix": "query: "},
    }
    # a str field keeps the text verbatim, even when it looks like a number
    assert parse_override("policy.model=1e-4") == {"policy": {"model": "1e-4"}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("train.learnin_rate=1e-4", "did you mean train.learning_rate"),
        ("train.max_steps=abc", "--set train.max_steps: expected int, got 'abc'"),
        ("train.max_steps=1.5", "train.max_steps: expected int"),
        ("train.final_eval=3", "train.final_eval: expected bool"),
        ("train.methods=grpo", "train.methods: expected a list"),
        ("rollout=3", "'rollout' is a section"),
        ("rollout.tree_m.x=3", "'rollout.tree_m' is a value"),
        ("nope.key=1", "unknown key 'nope.key'"),
        ("train.max_steps", "not of the form"),
    ],
)
def test_bad_overrides_name_the_key_before_anything_runs(text, message):
    with pytest.raises(ProfileError, match=re.escape(message)):
        parse_overrides([text])


def test_extra_sections_are_checked_against_their_dataclass():
    import dataclasses as dc

    @dc.dataclass
    class Extra:
        beta: float = 0.0
        name: str = "x"

    assert parse_overrides(["extra.beta=1e-3"], {"extra": Extra}) == {"extra": {"beta": 1e-3}}
    with pytest.raises(ProfileError, match="unknown key 'bta'.*did you mean beta"):
        parse_overrides(["extra.bta=1"], {"extra": Extra})
    with pytest.raises(ProfileError, match="extra.beta: expected float"):
        parse_overrides(["extra.beta=[1]"], {"extra": Extra})


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_float_round_trips_through_its_repr(x):
    assert parse_value(repr(x), float) == x


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_any_int_round_trips_and_is_a_float_where_floats_are_expected(n):
    assert parse_value(str(n), int) == n
    value = parse_value(str(n), float)
    assert isinstance(value, float) and value == n


@given(st.lists(st.integers(-1000, 1000), max_size=6), st.booleans())
def test_lists_and_bools_round_trip(items, flag):
    assert parse_value("[" + ", ".join(map(str, items)) + "]", list[int]) == items
    assert parse_value(str(flag).lower(), bool) is flag


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_text_fields_take_any_text_verbatim(text):
    if text.strip() in ("null", "~"):
        assert parse_value(text, str | None) is None
    else:
        assert parse_value(text, str | None) == text


def test_profile_files_read_scientific_notation_too(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("extends: smoke\ntrain:\n  learning_rate: 3e-4\n")
    assert math.isclose(load_profile(str(path)).train.learning_rate, 3e-4)


def test_leaf_budgets_come_from_one_place():
    cfg = load_profile("paper-qwen3-4b").rollout
    assert tree_leaves(10, 2, 6) == 22 == cfg.leaves_per_prompt("entropy")
    assert cfg.leaves_per_prompt("aepo") == cfg.aepo_budget == 16
    with pytest.raises(ProfileError, match="expansion='beam'"):
        cfg.leaves_per_prompt("beam")


def test_shipped_profiles_give_aepo_the_chain_budget():
    """docs/method.md §8: AEPO samples as many leaves as the chain baselines (16 vs 16)."""
    for name in known_profiles():
        cfg = load_profile(name)
        assert cfg.rollout.aepo_budget == cfg.rollout.chains, name
        assert cfg.rollout.aepo_initial <= cfg.rollout.aepo_budget, name
