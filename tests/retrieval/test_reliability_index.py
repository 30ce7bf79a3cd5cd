"""No stale or damaged index is ever used (issue 13): every index carries its identity (corpus
checksum, encoder with pooling, passage count, file sizes) checked on every load; truncated or
corrupt files are refused naming the file; a failed rebuild leaves the previous index intact
and nothing loadable-looking; a prebuilt index is an explicit choice, never a fallback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.retrieval.base import IndexMismatchError, RetrievalError
from at2po_lib.retrieval.bm25 import BM25Retriever, build_bm25_index
from at2po_lib.retrieval.indexes import ensure_index
from at2po_lib.retrieval.dense import DenseIndex, DenseRetriever, build_dense_index
from at2po_lib.retrieval.encoders import EncoderSpec
from at2po_lib.util.staging import staging_path

SPEC = EncoderSpec(max_length=32)


# corpus20 and dense_dir (the 20-passage corpus and its dense index): tests/conftest.py


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory, corpus20) -> Path:
    folder = tmp_path_factory.mktemp("bm25") / "index"
    build_bm25_index(corpus20, folder, progress=False)
    return folder


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / folder.name
    shutil.copytree(folder, target)
    return target


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _scramble(path: Path) -> None:
    """Same size, garbage content: only the reader can notice."""
    path.write_bytes(bytes((b * 7 + 13) % 256 for b in path.read_bytes()))


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_the_identity_is_recorded(dense_dir, bm25_dir, corpus20):
    from at2po_lib.retrieval.corpus import Corpus

    dense = json.loads((dense_dir / "meta.json").read_text())
    assert dense["encoder"] == SPEC.to_dict() and dense["encoder"]["pooling"] == "mean"
    assert dense["passages"] == 20 and dense["corpus_checksum"] == Corpus(corpus20).checksum()
    assert dense["files"] == {"index.faiss": (dense_dir / "index.faiss").stat().st_size}
    bm25 = json.loads((bm25_dir / "meta.json").read_text())
    assert bm25["passages"] == 20 and "data.csc.index.npy" in bm25["files"]
    assert not staging_path(dense_dir).exists() and not staging_path(bm25_dir).exists()


# -- truncated and corrupt files are refused, naming the file --------------------------------


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_truncated_faiss_file_is_refused_naming_it(dense_dir, corpus20, tmp_path):
    folder = _copy(dense_dir, tmp_path)
    _truncate(folder / "index.faiss")
    with pytest.raises(
        IndexMismatchError, match=r"index\.faiss: \d+ bytes, but the index was built with"
    ):
        DenseRetriever(folder, corpus20)


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_corrupt_faiss_file_of_the_right_size_is_refused_naming_it(dense_dir, corpus20, tmp_path):
    folder = _copy(dense_dir, tmp_path)
    _scramble(folder / "index.faiss")
    with pytest.raises(RetrievalError, match=r"index\.faiss: not a readable faiss index"):
        DenseRetriever(folder, corpus20)


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_corrupt_meta_json_is_refused_naming_it(dense_dir, corpus20, tmp_path):
    folder = _copy(dense_dir, tmp_path)
    _truncate(folder / "meta.json")
    with pytest.raises(RetrievalError, match=r"meta\.json: not valid JSON"):
        DenseRetriever(folder, corpus20)


@pytest.mark.parametrize("name", ["data.csc.index.npy", "vocab.index.json", "params.index.json"])
def test_truncated_bm25_files_are_refused_naming_them(bm25_dir, corpus20, tmp_path, name):
    folder = _copy(bm25_dir, tmp_path)
    _truncate(folder / name)
    with pytest.raises(IndexMismatchError, match=rf"{name.replace('.', '[.]')}: \d+ bytes"):
        BM25Retriever(folder, corpus20)


def test_a_corrupt_bm25_file_of_the_right_size_is_refused_naming_the_index(
    bm25_dir, corpus20, tmp_path
):
    folder = _copy(bm25_dir, tmp_path)
    _scramble(folder / "params.index.json")
    with pytest.raises(RetrievalError, match="cannot read the BM25 index") as caught:
        BM25Retriever(folder, corpus20)
    assert str(folder) in str(caught.value)


def test_a_missing_bm25_file_is_named(bm25_dir, corpus20, tmp_path):
    folder = _copy(bm25_dir, tmp_path)
    (folder / "indptr.csc.index.npy").unlink()
    with pytest.raises(RetrievalError, match=r"indptr\.csc\.index\.npy: missing"):
        BM25Retriever(folder, corpus20)


# -- failed rebuilds and prebuilt indexes ------------------------------------------------------


class Killed(Exception):
    pass


def _die(shard: int) -> None:
    raise Killed


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_failed_rebuild_keeps_the_previous_index_whole(dense_dir, corpus20, tmp_path):
    folder = _copy(dense_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with pytest.raises(Killed):  # a rebuild with another encoder dies half-way
        build_dense_index(
            corpus20,
            folder,
            EncoderSpec(max_length=16),
            shard_size=10,
            on_shard_done=_die,
            progress=False,
        )
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert DenseRetriever(folder, corpus20).search(["anything"], 2)  # the old index, checked
    assert not (staging_path(folder) / "meta.json").exists()  # the attempt is not loadable


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_faiss_file_without_meta_json_is_never_used_silently(dense_dir, corpus20, tmp_path):
    """What a failed rebuild used to leave: index.faiss without meta.json."""
    folder = _copy(dense_dir, tmp_path)
    (folder / "meta.json").unlink()
    with pytest.raises(RetrievalError, match="without meta.json"):
        DenseRetriever(folder, corpus20, SPEC)
    with pytest.raises(RetrievalError, match="without meta.json"):
        DenseIndex.load(folder, fallback_spec=SPEC)


def _profile(corpus: Path, index_dir: Path, **retrieval):
    return load_profile(
        "smoke",
        {
            "retrieval": {
                "method": "dense",
                "corpus": str(corpus),
                "index_dir": str(index_dir),
                "max_length": 32,
                **retrieval,
            }
        },
    )


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_ensure_index_rebuilds_an_index_whose_identity_is_missing(
    corpus20, tmp_path, isolated_outputs
):
    cfg = _profile(corpus20, tmp_path / "index")
    dense = ensure_index(cfg, ("dense",), progress=False)["dense"]
    (dense / "meta.json").unlink()  # the stale state of a rebuild that died (old code)
    assert (dense / "index.faiss").is_file()
    ensure_index(cfg, ("dense",), progress=False)
    meta = json.loads((dense / "meta.json").read_text())
    assert meta["passages"] == 20 and meta["encoder"]["max_length"] == 32
    # An unreadable identity is a file changed since the build: the build does not own it any
    # more, so it refuses to delete it (issue #50 item 1) and says what to do.
    (dense / "meta.json").write_text("{not json")
    with pytest.raises(RetrievalError, match=r"meta.json: changed since the build.*remove"):
        ensure_index(cfg, ("dense",), progress=False)
    assert (dense / "meta.json").read_text() == "{not json"


@pytest.mark.slow  # builds a dense index (encoder load): ~20 s on 2 cores
def test_a_prebuilt_index_is_an_explicit_choice_and_is_checked(
    dense_dir, corpus20, tmp_path, isolated_outputs
):
    download = tmp_path / "download"
    download.mkdir()
    shutil.copy(dense_dir / "index.faiss", download / "e5_Flat.index")
    explicit = _profile(corpus20, download, prebuilt=True)
    folders = ensure_index(explicit, ("dense",), progress=False)
    assert folders["dense"] == download
    assert (
        not (download / "meta.json").exists() and not (download / "dense").exists()
    )  # nothing built
    from at2po_lib.retrieval.indexes import build_retriever

    retriever = build_retriever(explicit)
    assert retriever.describe()["passages"] == 20
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus20.read_text().splitlines(keepends=True)[:12]))
    with pytest.raises(IndexMismatchError, match="20 vectors"):
        ensure_index(_profile(short, download, prebuilt=True), ("dense",), progress=False)
    with pytest.raises(RetrievalError, match="holds no index.faiss"):
        ensure_index(
            _profile(corpus20, tmp_path / "empty", prebuilt=True), ("dense",), progress=False
        )
    # Without the flag the download is not the index: a fresh one is built under dense/.
    implicit = ensure_index(_profile(corpus20, download), ("dense",), progress=False)
    assert implicit["dense"] == download / "dense" and (download / "dense" / "meta.json").is_file()


# ------------------------------------------------ the destination an index build may replace
def _user_folder(root: Path) -> Path:
    folder = root / "mine"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.txt").write_text("two years of work\n")
    (folder / "sub" / "notes.txt").write_text("notes\n")
    return folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_a_build_never_replaces_a_users_folder(kind, corpus20, tmp_path):
    folder = _user_folder(tmp_path)
    before = _tree(folder)
    with pytest.raises(
        RetrievalError, match=r"mine: holds files no index build wrote \(sub, thesis.txt\)"
    ):
        if kind == "bm25":
            build_bm25_index(corpus20, folder, progress=False)
        else:
            build_dense_index(corpus20, folder, EncoderSpec("no-encoder-needed"), progress=False)
    assert _tree(folder) == before  # every file kept, byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging left beside it


def test_a_build_into_the_corpus_folder_is_refused(corpus20, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    corpus = folder / "corpus.jsonl"
    shutil.copy(corpus20, corpus)
    with pytest.raises(RetrievalError, match="corpus.jsonl"):
        build_bm25_index(corpus, folder, progress=False)
    assert corpus.read_bytes() == Path(corpus20).read_bytes()


def test_a_link_or_a_file_as_destination_is_refused_before_the_build(corpus20, tmp_path):
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(RetrievalError, match="a symbolic link"):
        build_bm25_index(corpus20, link, progress=False)
    assert link.is_symlink() and link.resolve() == target.resolve()
    file = tmp_path / "file.txt"
    file.write_text("keep me\n")
    with pytest.raises(RetrievalError, match="a file, not a folder"):
        build_bm25_index(corpus20, file, progress=False)
    assert file.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "link", "real"]


def test_an_index_is_marked_and_rebuilt_in_place(bm25_dir, corpus20, tmp_path):
    from at2po_lib.retrieval.ownership import LEGACY_MARKER_TEXT, MANIFEST

    index = _copy(bm25_dir, tmp_path)
    assert (index / MANIFEST).is_file()
    build_bm25_index(corpus20, index, progress=False)  # its own index: replaced
    assert (index / MANIFEST).is_file() and (index / "meta.json").is_file()
    # an index from before the manifest (meta.json, its seven files, the old text marker or
    # none) is recognised too
    (index / MANIFEST).write_text(LEGACY_MARKER_TEXT)
    build_bm25_index(corpus20, index, progress=False)
    (index / MANIFEST).unlink()
    build_bm25_index(corpus20, index, progress=False)
    assert json.loads((index / MANIFEST).read_text())["format"] == 2
    # ...but not once a stranger's file sits in it
    (index / MANIFEST).unlink()
    (index / "thesis.txt").write_text("x\n")
    with pytest.raises(RetrievalError, match="thesis.txt"):
        build_bm25_index(corpus20, index, progress=False)


def test_the_index_command_refuses_a_users_folder_in_one_line(corpus20, tmp_path, capsys):
    from at2po_lib.cli import main

    folder = _user_folder(tmp_path)
    before = _tree(folder)
    assert main(["index", "--corpus", str(corpus20), "--out", str(folder), "--bm25"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds files no index build wrote" in err and str(folder) in err
    assert _tree(folder) == before


# ------------------------------------- an index build owns what it wrote and nothing else (#50)
def _index_tree(folder: Path) -> dict[str, bytes]:
    """Every file and folder below ``folder`` (folders as b"<dir>"), for before/after checks."""
    return {
        str(p.relative_to(folder)): (b"<dir>" if p.is_dir() else p.read_bytes())
        for p in folder.rglob("*")
    }


def _index_cli(corpus: Path, out: Path | str, *extra: str) -> int:
    from at2po_lib.cli import main

    return main(["index", "--bm25", "--corpus", str(corpus), "--out", str(out), *extra])


def test_the_manifest_lists_every_file_written_with_its_sha256(bm25_dir):
    from at2po_lib.retrieval.ownership import MANIFEST
    from at2po_lib.util.digests import file_sha256

    manifest = json.loads((bm25_dir / MANIFEST).read_text())
    on_disk = {p.name for p in bm25_dir.iterdir() if p.name != MANIFEST}
    assert set(manifest["files"]) == on_disk and "meta.json" in on_disk
    for name, entry in manifest["files"].items():
        assert entry == {
            "size": (bm25_dir / name).stat().st_size,
            "sha256": file_sha256(bm25_dir / name),
        }


@pytest.mark.parametrize("added", ["NOTES.txt", "mydata/", "mydata/x.csv", "corpus_offsets_mine"])
def test_a_forced_rebuild_never_deletes_what_a_user_added_to_an_index(
    bm25_dir, corpus20, tmp_path, added, capsys
):
    """b8f2d3f: exit 0 and the added file or folder gone (issue #50 item 1)."""
    index = _copy(bm25_dir, tmp_path)
    target = index / added.rstrip("/")
    if added.endswith("/"):
        target.mkdir()
    else:
        target.parent.mkdir(exist_ok=True)
        target.write_text("mine\n")
    before = _index_tree(index)
    assert _index_cli(corpus20, index, "--force") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and added.split("/")[0] in err and "nothing was changed" in err
    assert _index_tree(index) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # no staging, no lock


def test_lookalike_indexes_are_refused_and_left_whole(corpus20, tmp_path):
    """The marker alone, a meta.json listing a user's file, an index file changed since the
    build: none proves the folder is the build's to delete."""
    from at2po_lib.retrieval.ownership import MANIFEST

    empty_marker = tmp_path / "a"
    empty_marker.mkdir()
    (empty_marker / MANIFEST).write_text("")
    (empty_marker / "thesis.txt").write_text("work\n")
    listed = tmp_path / "b"
    listed.mkdir()
    (listed / "thesis.txt").write_text("work\n")
    (listed / "meta.json").write_text(
        json.dumps({"kind": "bm25", "corpus_checksum": "v1:1:1:x", "files": {"thesis.txt": 5}})
    )
    marker_only = tmp_path / "c"
    marker_only.mkdir()
    (marker_only / MANIFEST).write_text("")
    forged = tmp_path / "d"  # a manifest whose listed hash is not the file's
    forged.mkdir()
    (forged / "thesis.txt").write_text("work\n")
    (forged / MANIFEST).write_text(
        json.dumps({"format": 2, "files": {"thesis.txt": {"size": 5, "sha256": "0" * 64}}})
    )
    for folder, named in (
        (empty_marker, "thesis.txt"),
        (listed, "thesis.txt"),
        (marker_only, MANIFEST),
        (forged, "thesis.txt: changed"),
    ):
        before = _index_tree(folder)
        with pytest.raises(RetrievalError, match=re.escape(named)):
            build_bm25_index(corpus20, folder, progress=False)
        assert _index_tree(folder) == before


def test_an_index_file_changed_since_the_build_is_not_deleted(bm25_dir, corpus20, tmp_path):
    index = _copy(bm25_dir, tmp_path)
    with open(index / "vocab.index.json", "a") as handle:
        handle.write(" ")
    before = _index_tree(index)
    with pytest.raises(RetrievalError, match=r"vocab.index.json: changed since the build"):
        build_bm25_index(corpus20, index, progress=False)
    assert _index_tree(index) == before


def test_a_rebuild_into_the_folder_holding_its_corpus_is_refused(
    bm25_dir, corpus20, tmp_path, capsys
):
    """b8f2d3f: ``--corpus X/corpus.jsonl --out X --force`` deleted the corpus it read."""
    index = _copy(bm25_dir, tmp_path)
    shutil.copy(corpus20, index / "corpus.jsonl")
    before = _index_tree(index)
    assert _index_cli(index / "corpus.jsonl", index, "--force") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds the corpus this build reads" in err
    assert _index_tree(index) == before


@pytest.mark.parametrize("out", [".", "/", "..", "./"])
def test_dot_and_root_as_destination_are_one_line_naming_the_argument(
    corpus20, tmp_path, out, monkeypatch, capsys
):
    """b8f2d3f: ``ValueError: PosixPath('.') has an empty name`` (a traceback), also in an
    empty folder."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert _index_cli(corpus20, out) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--out {out!r}" in err and "Traceback" not in err
    assert list(empty.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_file_added_during_the_build_stops_the_swap(bm25_dir, corpus20, tmp_path, monkeypatch):
    """The destination is checked again just before the swap (the build may take hours)."""
    import at2po_lib.retrieval.bm25 as bm25

    index = _copy(bm25_dir, tmp_path)
    real = bm25.write_manifest

    def manifest_then_user_writes(folder):
        path = real(folder)
        (index / "added-meanwhile.txt").write_text("mine\n")
        return path

    monkeypatch.setattr(bm25, "write_manifest", manifest_then_user_writes)
    with pytest.raises(RetrievalError, match="added-meanwhile.txt"):
        build_bm25_index(corpus20, index, progress=False)
    assert (index / "added-meanwhile.txt").read_text() == "mine\n"


def test_an_offsets_cache_rewritten_by_a_load_does_not_block_a_rebuild(
    bm25_dir, corpus20, tmp_path
):
    """Loads rewrite ``corpus_offsets.*`` when the corpus changes: recognised by form."""
    import os

    index = _copy(bm25_dir, tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(corpus20, corpus)
    os.utime(corpus, ns=(1, 1))  # another mtime: the cache is rewritten on the next load
    before = (index / "corpus_offsets.json").read_bytes()
    BM25Retriever(index, corpus).close()
    assert (index / "corpus_offsets.json").read_bytes() != before
    build_bm25_index(corpus, index, progress=False)
    assert BM25Retriever(index, corpus).search(["anything"], 2)


def test_a_meta_json_with_a_bad_file_table_is_refused_naming_it(bm25_dir, corpus20, tmp_path):
    """b8f2d3f: ``"files": 5`` raised a bare TypeError."""
    index = _copy(bm25_dir, tmp_path)
    meta = json.loads((index / "meta.json").read_text())
    for files in (5, ["x"], {"params.index.json": "big"}):
        (index / "meta.json").write_text(json.dumps({**meta, "files": files}))
        with pytest.raises(IndexMismatchError, match=r"meta.json: 'files' is not a table"):
            BM25Retriever(index, corpus20)
    (index / "meta.json").write_text("[1, 2]")
    with pytest.raises(IndexMismatchError, match="expected a JSON object"):
        BM25Retriever(index, corpus20)
