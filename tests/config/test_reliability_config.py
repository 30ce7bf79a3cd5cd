"""Profiles and ``--set`` values: bounded parsing, YAML 1.2 numbers, names confined to their
folders, and every value's range checked before any work (issue #24, items 2-5)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from at2po_lib.config.profile import ProfileConfig, ProfileError, load_profile
from at2po_lib.config.overrides import parse_overrides
from at2po_lib.config.checks import RULES
from at2po_lib.protocol.qa_data import DataError, load_flashrag, read_flashrag_jsonl

ROOT = Path(__file__).resolve().parents[2]

BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(9)
    ]
)


def _bounded(call, seconds: float = 60.0) -> ProfileError:
    # A generous bound: the refusal takes well under a second on a quiet machine, 8 s was seen
    # beside two trainings on 2 cores; an expanded billion-laughs value would take far longer
    # (and its memory), so the bound still tells a refusal from an expansion.
    start = time.perf_counter()
    with pytest.raises(ProfileError) as err:
        call()
    assert time.perf_counter() - start < seconds
    assert len(str(err.value)) < 2_000, "the message must not render the expanded value"
    return err.value


def test_billion_laughs_in_a_profile_file_is_refused_quickly(tmp_path):
    profile = tmp_path / "bomb.yaml"
    profile.write_text(f"world:\n  seed: &s 1\n{BOMB}\n".replace("a: &a", "description: &a", 1))
    err = _bounded(lambda: load_profile(str(profile)))
    assert "alias" in str(err) and str(profile) in str(err)


def test_billion_laughs_in_a_set_value_is_refused_quickly():
    flow = (
        "[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], "
        "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], "
        "&e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e], "
        "&g [*f,*f,*f,*f,*f,*f,*f,*f,*f], [*g,*g,*g,*g,*g,*g,*g,*g,*g]]"
    )
    err = _bounded(lambda: parse_overrides([f"world.seed={flow}"]))
    assert "world.seed" in str(err)


def test_a_huge_value_is_never_rendered_whole():
    err = _bounded(lambda: parse_overrides(["world.seed=" + "x" * 500_000]))
    assert "world.seed" in str(err)
    err = _bounded(lambda: parse_overrides(["train.seeds=[" + "1," * 20_000 + "a]"]))
    assert "train.seeds" in str(err)


@pytest.mark.parametrize(
    "raw, expected", [("010", 10), ("0o17", 15), ("0x1f", 31), ("-7", -7), ("+3", 3)]
)
def test_integers_read_as_yaml_1_2(raw, expected):
    assert parse_overrides([f"rollout.tree_alpha={raw}"])["rollout"]["tree_alpha"] == expected
    if expected >= 0:
        assert load_profile("tiny", parse_overrides([f"world.seed={raw}"])).world.seed == expected


@pytest.mark.parametrize("raw", ["1:20", "1_000", "0b11"])
def test_yaml_1_1_only_integers_are_not_numbers(raw):
    with pytest.raises(ProfileError, match="world.seed"):
        parse_overrides([f"world.seed={raw}"])


def test_floats_read_as_yaml_1_2(tmp_path):
    assert parse_overrides(["train.learning_rate=1e-4"])["train"]["learning_rate"] == 1e-4
    assert parse_overrides(["train.learning_rate=.5"])["train"]["learning_rate"] == 0.5
    with pytest.raises(ProfileError, match="train.learning_rate"):
        parse_overrides(["train.learning_rate=1:30"])  # YAML 1.1: sexagesimal 90.0
    profile = tmp_path / "numbers.yaml"
    profile.write_text("extends: tiny\nworld:\n  seed: 010\ntrain:\n  learning_rate: 1e-5\n")
    cfg = load_profile(str(profile))
    assert cfg.world.seed == 10 and cfg.train.learning_rate == 1e-5


def test_a_name_cannot_leave_its_folder(tmp_path):
    with pytest.raises(ProfileError, match="name"):
        load_profile("tiny", parse_overrides(["name=../../x"]))
    dots = tmp_path / "...yaml"
    dots.write_text("extends: tiny\n")
    with pytest.raises(ProfileError, match="profile name"):
        load_profile(str(dots))
    with pytest.raises(ProfileError, match="dataset name"):
        load_profile("tiny", parse_overrides(["eval.datasets=[../../etc]"]))


def test_a_dataset_name_cannot_leave_local_dir(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "test.jsonl").write_text(
        '{"id": "1", "question": "q?", "golden_answers": ["a"]}\n'
    )
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(DataError, match="dataset name"):
        load_flashrag("../outside", "test", local_dir=local)
    with pytest.raises(DataError, match="dataset name"):
        load_flashrag("..", "outside/test", local_dir=local)


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.max_questions=-1", "eval.max_questions"),
        ("train.max_steps=-1", "train.max_steps"),
        ("train.max_steps=0", "train.max_steps"),
        ("rollout.tree_m=-2", "rollout.tree_m"),
        ("rollout.tree_m=0", "rollout.tree_m"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("retrieval.topk=0", "retrieval.topk"),
        ("train.learning_rate=.nan", "train.learning_rate"),
        ("train.learning_rate=.inf", "train.learning_rate"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ("world.dev_fraction=0.7", "world.dev_fraction"),
        ("rollout.aepo_initial=99", "rollout.aepo_initial"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_key(override, key):
    with pytest.raises(ProfileError, match=key.replace(".", r"\.")):
        load_profile("tiny", parse_overrides([override]))


def test_every_profile_field_has_a_range_rule():
    keys = set()
    for f in dataclasses.fields(ProfileConfig):
        if dataclasses.is_dataclass(f.type) or isinstance(f.default_factory, type):
            keys |= {f"{f.name}.{sub.name}" for sub in dataclasses.fields(f.default_factory)}
        else:
            keys.add(f.name)
    assert keys == set(RULES)


def test_run_all_refuses_a_bad_set_before_notebook_00(tmp_path):
    env = {
        **os.environ,
        "AT2PO_SKIP_INSTALL": "1",
        "AT2PO_VENV": str(Path(sys.executable).parent.parent),
        "AT2PO_RESULTS": str(tmp_path / "results"),
        "AT2PO_ARTIFACTS": str(tmp_path / "art"),
        "AT2PO_GIT_FILTER": "0",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "run_all.sh"), "--set", "rollout.tree_m=0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "rollout.tree_m=0" in proc.stderr
    assert "00_tinyworld" not in proc.stdout + proc.stderr
    assert not (tmp_path / "results" / "executed").exists()


def test_dataset_files_name_the_file_on_bad_bytes_and_repeated_ids(tmp_path):
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        '{"id": "1", "question": "Caf\u00e9?", "golden_answers": ["a"]}\n'.encode("latin-1")
    )
    with pytest.raises(DataError, match=r"latin\.jsonl:1: not UTF-8"):
        read_flashrag_jsonl(latin)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        '{"id": "7", "question": "q?", "golden_answers": ["a"]}\n'
        '{"id": "7", "question": "r?", "golden_answers": ["b"]}\n'
    )
    with pytest.raises(DataError, match=r"dup\.jsonl:2: id '7' repeats the id of line 1"):
        read_flashrag_jsonl(dup)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep\.jsonl:1"):
        read_flashrag_jsonl(deep)


# --------------------------------------------- bounds, depth, duplicates, extends (issue #39)
@pytest.mark.parametrize(
    "key, value",
    [
        ("train.prompts_per_step", "1000000000"),
        ("world.n_people", "1000000000"),
        ("policy.vocab_size", "1000000000000"),
        ("rollout.tree_m", "1000000"),
        ("policy.hidden_size", "1000000000"),
        ("rollout.max_response_tokens", "1000000000"),
        ("retrieval.topk", "1000000000"),
        ("train.learning_rate", "1e300"),
    ],
)
def test_absurd_sizes_are_refused_naming_the_key(key, value):
    from at2po_lib.config.profile import ProfileError, load_profile
    from at2po_lib.config.overrides import parse_overrides

    with pytest.raises(ProfileError, match=key.replace(".", r"\.")):
        load_profile("smoke", parse_overrides([f"{key}={value}"]))


def _accepts(check, value) -> bool:
    try:
        return bool(check(value))
    except ValueError:  # a rule naming what is wrong
        return False


def test_every_number_of_the_range_tables_has_an_upper_bound():
    """Walks both tables: a rule that takes a number must refuse 10^30 and 1e300 (and a list
    of numbers, a list holding 10^30). b8f2d3f had 37 keys without one (issue #50 item 6)."""
    from at2po_lib.config.checks import TRAINER_RULES

    unbounded = []
    for table, rules in (("", RULES), ("trainer.", TRAINER_RULES)):
        for key, (check, _) in rules.items():
            if any(_accepts(check, v) for v in (0, 1, 0.5)) and any(
                _accepts(check, v) for v in (10**30, 1e300, -(10**30), -1e300)
            ):
                unbounded.append(table + key)
            if any(_accepts(check, v) for v in ([0], [1])) and _accepts(check, [10**30]):
                unbounded.append(table + key)
    assert unbounded == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("sft.max_steps", "1000000000000"),
        ("sft.batch_size", "1000000000"),
        ("rollout.max_tool_calls", "1000000000"),
        ("policy.hidden_size", "1000000"),
        ("world.train_per_dataset", "1000000000"),
        ("retrieval.timeout_s", "1e300"),
        ("retrieval.retries", "1000000000"),
        ("rollout.num_threads", "100000"),
        ("train.micro_batch_rows", "1000000000"),
    ],
)
def test_the_issue_50_sizes_are_refused_naming_the_key(key, value):
    """b8f2d3f accepted each (``world.train_per_dataset=1e9`` hung ``at2po world``; a
    10^6-wide policy failed allocating 4.7 GB at the warm start)."""
    from at2po_lib.config.profile import ProfileError, load_profile
    from at2po_lib.config.overrides import parse_overrides

    with pytest.raises(ProfileError, match=key.replace(".", r"\.")):
        load_profile("smoke", parse_overrides([f"{key}={value}"]))


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_iterations", 0),
        ("epsilon", float("nan")),
        ("epsilon_high", -5.0),
        ("beta", float("inf")),
        ("warmup_steps", 1e12),
        ("top_k", -7),
        ("max_prompt_length", 10**12),
    ],
)
def test_trainer_overrides_out_of_range_are_refused_before_any_work(field, value):
    from at2po_lib.config.profile import ProfileError
    from at2po_lib.trainer.resolve import check_trainer_overrides

    with pytest.raises(ProfileError, match=f"trainer\\.{field}="):
        check_trainer_overrides({field: value})
    check_trainer_overrides({"beta": 0.0, "epsilon": 0.2})  # in range: accepted


def test_deep_nesting_and_long_integers_are_one_line_errors(tmp_path):
    from at2po_lib.config.profile import ProfileError, load_profile
    from at2po_lib.config.overrides import parse_overrides

    with pytest.raises(ProfileError, match="nested more than") as deep:
        load_profile("smoke", parse_overrides(["train.report_to=" + "[" * 1000 + "]" * 1000]))
    assert len(str(deep.value)) < 2000
    deep_file = tmp_path / "deep.yaml"
    deep_file.write_text("train:\n  report_to: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ProfileError, match="deep.yaml.*nested more than"):
        load_profile(str(deep_file))
    with pytest.raises(ProfileError, match="integer of more than"):
        load_profile("smoke", parse_overrides(["world.seed=0x" + "f" * 20_000]))


def test_duplicate_keys_and_bad_extends_are_refused_naming_the_file(tmp_path):
    from at2po_lib.config.profile import ProfileError, load_profile

    twice = tmp_path / "twice.yaml"
    twice.write_text("extends: smoke\ntrain:\n  max_steps: 2\n  max_steps: 3\n")
    with pytest.raises(ProfileError, match="twice.yaml.*duplicate key 'max_steps'"):
        load_profile(str(twice))
    evil = tmp_path / "evil.yaml"
    evil.write_text("train:\n  max_steps: 7\n")
    # b8f2d3f loaded the last two, files outside configs/ (issue #50 item 6)
    for bad in (
        "[smoke]",
        "5",
        "{a: 1}",
        "../" * 8 + str(evil.with_suffix(""))[1:],
        str(evil),
        "smoke.yaml",
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(f"extends: {bad}\n")
        with pytest.raises(ProfileError, match="bad.yaml: extends: .*expected one profile name"):
            load_profile(str(path))
    path.write_text("extends: no_such_profile\n")
    with pytest.raises(ProfileError, match="bad.yaml: extends: unknown profile 'no_such_profile'"):
        load_profile(str(path))


def test_a_shorthand_and_its_set_key_together_are_refused():
    """`--max-steps 2 --set train.max_steps=-1` used to drop the -1 without a word."""
    from at2po_lib.cli.options import UsageError
    from at2po_lib.cli.train import build_parser, override_texts

    args = build_parser().parse_args(["--max-steps", "2", "--set", "train.max_steps=-1"])
    with pytest.raises(UsageError, match="--max-steps 2 and --set train.max_steps"):
        override_texts(args)
    assert override_texts(build_parser().parse_args(["--max-steps", "2"])) == ["train.max_steps=2"]


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        (5, None, "profile 5: expected a profile name"),
        ("smoke", "train.max_steps=2", "expected a mapping of sections"),
    ],
)
def test_notebook_parameters_of_the_wrong_type_are_named(name, overrides, message):
    """A papermill run with `-p profile 5` or `-p overrides "..."`: a ProfileError, not a bare
    TypeError or AttributeError from inside the loader."""
    from at2po_lib.config.profile import ProfileError, load_profile

    with pytest.raises(ProfileError, match=message):
        load_profile(name, overrides)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("policy.template=nope", "policy.template='nope': expected a built-in template"),
        ("retrieval.url=file:///etc/passwd", "retrieval.url=.*expected null or an http"),
    ],
)
def test_template_and_server_address_are_checked_before_any_work(setting, message):
    from at2po_lib.config.profile import ProfileError, load_profile
    from at2po_lib.config.overrides import parse_overrides

    with pytest.raises(ProfileError, match=message):
        load_profile("smoke", parse_overrides([setting]))


# ------------------------------ issue #50 item 6: names and loggers resolved before any work
@pytest.mark.parametrize(
    "override, named",
    [
        ("eval.datasets=[nonexistent_ds]", "eval.datasets: nonexistent_ds: cannot load"),
        ("eval.sampled_datasets=[nonexistent_ds]", "eval.sampled_datasets: nonexistent_ds"),
        ("train.val_datasets=[nonexistent_ds]", "train.val_datasets: nonexistent_ds"),
        ("train.report_to=[no_such_logger]", "train.report_to: 'no_such_logger' is no logger"),
        ("eval.datasets=[tiny_nope]", "eval.datasets: 'tiny_nope' is no TinyWorld dataset"),
        ("train.train_datasets=[tiny_bamboogle]", "tiny_bamboogle has no train split"),
    ],
)
def test_train_refuses_a_dataset_or_logger_it_cannot_use_before_any_work(
    override, named, isolated_outputs, capsys
):
    """b8f2d3f trained ``eval.datasets=[nonexistent_ds]`` to the end, then failed at the final
    evaluation (a traceback), and the run was lost; the sampled metric's name was ignored; a
    bad validation set was a traceback at start."""
    from at2po_lib.cli import main

    assert main(["train", "--profile", "smoke", "--method", "grpo", "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err and "Traceback" not in err
    written = [p for p in isolated_outputs.rglob("*") if p.is_file()]
    assert written == []  # no run record, no world, index or warm start (the lock is gone)


def test_a_logger_that_is_not_installed_is_one_line_at_the_start(
    isolated_outputs, capsys, monkeypatch
):
    """b8f2d3f: ``train.report_to=[wandb]`` without wandb: a traceback."""
    import importlib.util

    from at2po_lib.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    assert (
        main(
            ["train", "--profile", "smoke", "--method", "grpo", "--set", "train.report_to=[wandb]"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "train.report_to: wandb is not installed" in err


@pytest.mark.parametrize(
    "checkpoint, named",
    [
        ("", "--checkpoint '': empty"),
        ("EMPTY", "holds no model"),
        ("../../etc", "holds no model"),
        ("RUN", "a run folder"),
        ("no/such/thing/here", "not a hub name"),
    ],
)
def test_evaluate_refuses_a_checkpoint_that_is_no_model_in_one_line(
    checkpoint, named, isolated_outputs, capsys, monkeypatch
):
    """b8f2d3f: ``--checkpoint ''`` evaluated the warm start; an empty folder, ``../../etc`` or a
    run folder ended in ``ValueError: Unrecognized model``."""
    import os

    from at2po_lib.cli import main

    empty = isolated_outputs / "empty"
    empty.mkdir()
    run = isolated_outputs / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "DONE.json").write_text("{}")
    monkeypatch.chdir(empty)
    etc = os.path.relpath("/etc")  # ../../../etc from here
    value = {"EMPTY": str(empty), "RUN": str(run), "../../etc": etc}.get(checkpoint, checkpoint)
    assert main(["evaluate", "--profile", "smoke", "--checkpoint", value]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err and "Traceback" not in err
    assert main(["evaluate", "--profile", "smoke", "--datasets", "nonexistent_ds"]) == 2
    assert "--datasets: nonexistent_ds: cannot load" in capsys.readouterr().err
