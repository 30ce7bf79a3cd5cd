"""Tree files (issue 13 item 5, issue 37 item 2): ``save_trees`` writes a ``.npz`` archive that
cannot run code; a pickle is never read; round trips are exact (hypothesis on random trees);
bad files fail with an error naming the file."""

from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.method.examples import example_tree, random_tree
from at2po_lib.method.tree import TreeArrays
from at2po_lib.record.tree_files import (
    UntrustedPickleError,
    load_trees,
    load_trees_meta,
    save_trees,
)


class _RunsCode:
    """Unpickling this calls os.system: a stand-in for a hostile trees.pkl."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_pickle_is_refused_unread(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "trees.pkl"
    path.write_bytes(pickle.dumps({"trees": [_RunsCode(str(marker))]}))
    with pytest.raises(UntrustedPickleError, match=f"{path} is a pickle.*refused"):
        load_trees(path)
    assert not marker.exists()
    # the same file under an innocent name: still refused (recognised by its bytes)
    disguised = tmp_path / "trees.bin"
    disguised.write_bytes(path.read_bytes())
    with pytest.raises(UntrustedPickleError, match="trees.bin"):
        load_trees(disguised)
    assert not marker.exists()
    # a plain list of trees, as old files held, is refused as well: pickles are never read
    t = example_tree()
    plain = tmp_path / "list.pkl"
    plain.write_bytes(pickle.dumps([(t.parent, t.entropy, t.leaf_reward)]))
    with pytest.raises(UntrustedPickleError, match="list.pkl"):
        load_trees(plain)
    with pytest.raises(FileNotFoundError, match="missing.pkl"):
        load_trees(tmp_path / "missing.pkl")


def test_an_archive_holding_a_pickled_object_array_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "trees.npz"
    save_trees([example_tree()], path)
    members = dict(np.load(path, allow_pickle=False))
    members["parent"] = np.array([_RunsCode(str(marker))], dtype=object)
    with path.open("wb") as fh:
        np.savez(fh, **members)  # allow_pickle is on by default when saving
    with pytest.raises(ValueError, match=f"{path}: cannot read the trees archive"):
        load_trees(path)
    assert not marker.exists()


# --------------------------------------------------------------------------------- round trip
_TEXT = st.text(max_size=12)
_JSON_SCALAR = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _TEXT


@st.composite
def rollout_like_trees(draw):
    """Random trees with every optional part: prompt id, node arrays of several dtypes, text
    records and info, NaN leaf rewards on inner nodes."""
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    base = random_tree(
        rng, num_chains=draw(st.integers(1, 4)), num_expansions=draw(st.integers(0, 5)), max_turns=4
    )
    n = base.num_nodes
    with_extras = draw(st.booleans())
    node_arrays = (
        {
            "turn_start": rng.integers(0, 100, n),
            "expansion_round": rng.integers(0, 3, n),
            "entropy_exact": rng.normal(size=n),
            "flag": rng.random(n) < 0.5,
        }
        if with_extras
        else {}
    )
    records = (
        [
            {
                "text": draw(_TEXT),
                "action": draw(st.sampled_from(["search", "answer", None])),
                "query": draw(_JSON_SCALAR),
            }
            for _ in range(n)
        ]
        if with_extras
        else []
    )
    info = (
        {"question": draw(_TEXT), "golden_answers": draw(st.lists(_TEXT, max_size=3))}
        if with_extras
        else {}
    )
    return TreeArrays(
        base.parent,
        base.entropy,
        base.leaf_reward,
        prompt_id=draw(st.integers(0, 10**9)),
        node_arrays=node_arrays,
        records=records,
        info=info,
    )


@settings(max_examples=40, deadline=None)
@given(data=st.data(), num_trees=st.integers(1, 4))
def test_save_load_round_trip_is_exact(tmp_path_factory, data, num_trees):
    with_extras = data.draw(st.booleans())
    trees = []
    for _ in range(num_trees):
        t = data.draw(rollout_like_trees())
        if not with_extras:  # one file: every tree carries the same node arrays
            t = TreeArrays(t.parent, t.entropy, t.leaf_reward, prompt_id=t.prompt_id)
        elif not t.node_arrays:
            n = t.num_nodes
            t = TreeArrays(
                t.parent,
                t.entropy,
                t.leaf_reward,
                prompt_id=t.prompt_id,
                node_arrays={
                    "turn_start": np.zeros(n, np.int64),
                    "expansion_round": np.zeros(n, np.int64),
                    "entropy_exact": np.zeros(n),
                    "flag": np.zeros(n, bool),
                },
            )
        trees.append(t)
    path = tmp_path_factory.mktemp("trees") / "trees.npz"
    meta = {"profile": "smoke", "seed": 3, "note": data.draw(_TEXT)}
    save_trees(trees, path, meta=meta)
    loaded = load_trees(path)
    assert len(loaded) == len(trees)
    for a, b in zip(trees, loaded):
        assert a.equals(b)
    assert load_trees_meta(path) == meta


def test_equals_sees_a_changed_value():
    a = example_tree()
    b = TreeArrays(a.parent, a.entropy.copy(), a.leaf_reward)
    assert a.equals(b)
    b.entropy[3] += 1e-12
    assert not a.equals(b)


# --------------------------------------------------------------------------------- bad files
def test_bad_files_fail_with_the_file_name(tmp_path):
    good = save_trees([example_tree(), example_tree()], tmp_path / "good.npz")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated.npz"):
        load_trees(truncated)
    text = tmp_path / "notes.txt"
    text.write_text("parent,entropy\n")
    with pytest.raises(ValueError, match="notes.txt: not a trees file"):
        load_trees(text)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.arange(3))
    with pytest.raises(ValueError, match="foreign.npz: not a trees archive"):
        load_trees(foreign)
    # a member missing from the zip
    broken = tmp_path / "broken.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if item.filename != "tree_offsets.npy":
                dst.writestr(item, src.read(item))
    with pytest.raises(ValueError, match="broken.npz: .*tree_offsets"):
        load_trees(broken)


def test_save_refuses_what_it_cannot_store(tmp_path):
    t = example_tree()
    with pytest.raises(ValueError, match=r"\.npz"):
        save_trees([t], tmp_path / "trees.pkl")
    with pytest.raises(ValueError, match="no trees"):
        save_trees([], tmp_path / "trees.npz")
    texts = TreeArrays(
        t.parent, t.entropy, t.leaf_reward, node_arrays={"text": np.array(["a"] * t.num_nodes)}
    )
    with pytest.raises(ValueError, match="'text' has dtype"):
        save_trees([texts], tmp_path / "trees.npz")
    mixed = TreeArrays(
        t.parent, t.entropy, t.leaf_reward, node_arrays={"depth": np.zeros(t.num_nodes, np.int64)}
    )
    with pytest.raises(ValueError, match="tree 1 has node arrays"):
        save_trees([mixed, t], tmp_path / "trees.npz")
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        save_trees([t], tmp_path / "trees.npz", meta={"when": object()})
    assert not (tmp_path / "trees.npz").exists()
    assert not list(tmp_path.glob("*.tmp"))  # no half-written file left behind


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("trees", {"a": 1}, "trees should be a list"),
        ("node_arrays", [1, 2], "node_arrays should be a list of names"),
        ("entry", "x", r"trees\[0\] should be an object"),
        ("records", "x", r"trees\[0\].records should be a list of objects"),
        ("info", [1], r"trees\[0\].info should be an object"),
    ],
)
def test_a_json_member_of_the_wrong_types_is_named(tmp_path, field, value, message):
    """A hand-edited archive: one error naming the file and the field, not a bare TypeError."""
    import json

    good = save_trees([example_tree()], tmp_path / "good.npz")
    with np.load(good, allow_pickle=False) as archive:
        members = {name: archive[name] for name in archive.files}
    document = json.loads(members["json"].tobytes().decode("utf-8"))
    if field in ("trees", "node_arrays"):
        document[field] = value
    elif field == "entry":
        document["trees"][0] = value
    else:
        document["trees"][0][field] = value
    members["json"] = np.frombuffer(json.dumps(document).encode("utf-8"), dtype=np.uint8)
    bad = tmp_path / "edited.npz"
    np.savez(bad, **members)
    with pytest.raises(ValueError, match=f"edited.npz: the archive's json member: {message}"):
        load_trees(bad)
