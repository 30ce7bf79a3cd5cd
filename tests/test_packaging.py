"""environment.yml (GPU users) and pyproject.toml (everyone) must agree on the shared pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return {_name(r): r.split("#")[0].strip().replace(" ", "") for r in reqs}


def _conda_pip_requirements() -> dict[str, str]:
    """environment.yml's pip section, its ``-r requirements-gpu.txt`` expanded."""
    from at2po_lib.plan.gpu_env import environment_requirements

    return {_name(r): r.replace(" ", "") for r in environment_requirements(ROOT)}


def _exact(spec: str) -> str | None:
    match = re.search(r"==([^,;\s]+)", spec)
    return match.group(1) if match else None


def test_exact_pins_agree():
    py, conda = _pyproject_requirements(), _conda_pip_requirements()
    shared = sorted(set(py) & set(conda))
    assert {"trl", "transformers", "peft"} <= set(shared)
    for name in shared:
        a, b = _exact(py[name]), _exact(conda[name])
        if a and b:
            assert a == b, f"{name}: pyproject pins {a}, environment.yml pins {b}"
        elif a or b:
            # one side pins exactly: the other must at least admit that version
            pinned = a or b
            other = conda[name] if a else py[name]
            from packaging.specifiers import SpecifierSet

            spec = other[len(name) :]
            assert not spec or pinned in SpecifierSet(spec), f"{name}: {other} excludes {pinned}"


def test_trl_pinned_exactly_and_vllm_in_its_range():
    py, conda = _pyproject_requirements(), _conda_pip_requirements()
    assert _exact(py["trl"]) == _exact(conda["trl"]) is not None
    from packaging.specifiers import SpecifierSet

    vllm_range = SpecifierSet(py["vllm"][len("vllm") :])
    assert _exact(conda["vllm"]) in vllm_range


def test_environment_yml_is_python_311_with_the_gpu_list_and_faiss_cpu():
    """The training environment: the GPU list's torch, and faiss-cpu (the GPU faiss is the
    retrieval server's, requirements-retriever-gpu.txt: another CUDA major, issue #36)."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("python=3.11") for d in deps)
    conda = _conda_pip_requirements()
    assert _exact(conda["torch"]) and _exact(conda["faiss-cpu"]) and "faiss-gpu" not in conda
