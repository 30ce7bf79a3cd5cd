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

from at2po_lib.gpu_env import (GPU_LIST, REPLACED_BY_GPU_LIST, environment_requirements,
                               gpu_pins, pyproject, requirement_name, summarize_report)

ROOT = Path(__file__).resolve().parent.parent


def _by_name(reqs: list[str]) -> dict[str, Requirement]:
    return {requirement_name(r): Requirement(r) for r in reqs}


def test_every_gpu_pin_is_exact():
    for req in gpu_pins(ROOT):
        spec = list(Requirement(req).specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"{GPU_LIST}: {req} is not pinned with =="


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
        assert env[name].specifier == req.specifier, f"{name}: {env[name]} against pyproject's {req}"
    assert "faiss-cpu" not in env  # faiss-gpu installs the same `faiss` module


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


def test_summarize_refuses_faiss_cpu_beside_faiss_gpu():
    report = {"install": [{"metadata": {"name": "faiss-cpu", "version": "1.15.1"}},
                          {"metadata": {"name": "faiss_gpu", "version": "1.15.1"}}]}
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
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "check_gpu_env.sh"), str(report)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    versions = {requirement_name(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    for name, req in _by_name(gpu_pins(ROOT)).items():
        assert versions[name] in req.specifier, f"{name} resolved to {versions[name]}"
    assert "faiss-cpu" not in versions
    assert "resolvable in" in proc.stdout
