"""The GPU environment's one list of pins and what derives from it.

``requirements-gpu.txt`` (repository root) holds the GPU pins. pyproject.toml's ``gpu`` extra
repeats it line for line, and environment.yml's pip section reads it with ``-r`` and adds the
project's other dependencies except those the GPU list replaces (``torch``, ``transformers``,
``faiss-cpu``). tests/test_gpu_env.py checks both; ``scripts/check_gpu_env.sh`` resolves the
result with pip's resolver (``at2po gpu-env requirements`` writes its input and ``at2po gpu-env
summarize`` reads pip's ``--report``).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

GPU_LIST = "requirements-gpu.txt"
# Base dependencies the GPU list replaces: the CUDA torch vLLM requires, the transformers inside
# vLLM's range, and faiss-gpu instead of faiss-cpu (both install the same `faiss` module).
REPLACED_BY_GPU_LIST = frozenset({"torch", "transformers", "faiss-cpu"})
SUMMARY_PACKAGES = ("vllm", "torch", "transformers", "trl", "accelerate", "peft", "deepspeed",
                    "faiss-gpu", "flashinfer-python", "tokenizers", "numpy")


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (PEP 503: lower case, '-')."""
    name = re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip().replace(" ", "")


def gpu_pins(root: Path) -> list[str]:
    """The requirement lines of ``requirements-gpu.txt``, comments and blanks dropped."""
    path = root / GPU_LIST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the GPU pin list is missing")
    return [req for line in path.read_text().splitlines() if (req := _strip(line))]


def pyproject(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def environment_pip_section(root: Path) -> list[str]:
    """environment.yml's pip entries, as written (``-r`` lines included)."""
    env = yaml.safe_load((root / "environment.yml").read_text())
    sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    if len(sections) != 1:
        raise ValueError(f"{root / 'environment.yml'}: expected one pip section, found {len(sections)}")
    return [str(r).strip() for r in sections[0]]


def environment_requirements(root: Path) -> list[str]:
    """environment.yml's pip section with its ``-r FILE`` lines expanded (paths from ``root``,
    which is environment.yml's folder: conda runs pip there)."""
    out: list[str] = []
    for entry in environment_pip_section(root):
        if entry.startswith("-r"):
            target = root / entry[2:].strip()
            if target.resolve() != (root / GPU_LIST).resolve():
                raise ValueError(f"environment.yml: -r {target} is not {GPU_LIST}")
            out += gpu_pins(root)
        else:
            out.append(_strip(entry))
    return out


def summarize_report(report: dict) -> list[tuple[str, str]]:
    """(name, version) of the key packages in a pip ``--report``; raises when the resolution
    would install faiss-cpu next to faiss-gpu (two builds of one `faiss` module)."""
    versions = {requirement_name(i["metadata"]["name"]): i["metadata"]["version"]
                for i in report.get("install", [])}
    if "faiss-cpu" in versions and "faiss-gpu" in versions:
        raise ValueError("the resolution installs both faiss-cpu and faiss-gpu: one `faiss` module")
    return [(name, versions.get(name, "-")) for name in SUMMARY_PACKAGES] + [
        ("(packages in all)", str(len(versions)))]
