"""The GPU environments' lists of pins and what derives from them.

``requirements-gpu.txt`` (repository root) holds the GPU pins of the training processes.
pyproject.toml's ``gpu`` extra repeats it line for line, and environment.yml's pip section reads
it with ``-r`` and adds the project's other dependencies except those the GPU list replaces
(``torch``, ``transformers``). tests/plan/test_gpu_env.py checks both; ``scripts/check_gpu_env.sh``
resolves the result with pip's resolver (``at2po gpu-env requirements`` writes its input and
``at2po gpu-env summarize`` reads pip's ``--report``).

``requirements-retriever-gpu.txt`` is the GPU retrieval server's own environment: one process
loads one CUDA runtime, and faiss-gpu 1.15.1 is built for CUDA 12 while the
training torch is CUDA 13. :func:`cuda_majors` reads the CUDA majors of a resolution and
:func:`summarize_report` refuses one that mixes them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

GPU_LIST = "requirements-gpu.txt"
RETRIEVER_LIST = "requirements-retriever-gpu.txt"
LISTS = {"training": GPU_LIST, "retriever": RETRIEVER_LIST}
"""The GPU environments by name (``at2po gpu-env requirements --list NAME``)."""
# Base dependencies the GPU list replaces: the CUDA torch vLLM requires and the transformers
# inside vLLM's range.
REPLACED_BY_GPU_LIST = frozenset({"torch", "transformers"})
CUDA_SUFFIX = re.compile(r"^nvidia-.+-cu(\d+)$")
SIDE_BY_SIDE = re.compile(r"^nvidia-cutlass-dsl-libs-cu\d+$")
"""Packages that ship a build for every CUDA major side by side (the CUTLASS DSL's libraries,
which nvidia-cutlass-dsl installs for CUDA 12 and 13 alike): not a runtime the process loads."""
SUMMARY_PACKAGES = (
    "vllm",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "peft",
    "deepspeed",
    "faiss-gpu",
    "flashinfer-python",
    "tokenizers",
    "numpy",
)


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (PEP 503: lower case, '-')."""
    name = re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip().replace(" ", "")


def gpu_pins(root: Path, name: str = GPU_LIST) -> list[str]:
    """The requirement lines of ``requirements-gpu.txt`` (or another list), comments and
    blanks dropped."""
    path = root / name
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
        raise ValueError(
            f"{root / 'environment.yml'}: expected one pip section, found {len(sections)}"
        )
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


def cuda_majors(versions: dict[str, str]) -> dict[int, list[str]]:
    """CUDA major → the packages of a resolution that bring that CUDA's libraries:
    ``nvidia-<lib>-cu<N>`` wheels (CUDA 12's naming), and ``nvidia-cuda-runtime`` itself
    (CUDA 13 dropped the suffix; its version's major is the CUDA major). Libraries shipped for
    every major side by side (:data:`SIDE_BY_SIDE`) are left out."""
    out: dict[int, list[str]] = {}
    for name, version in sorted(versions.items()):
        match = CUDA_SUFFIX.match(name)
        if match and not SIDE_BY_SIDE.match(name):
            out.setdefault(int(match.group(1)), []).append(name)
        elif name == "nvidia-cuda-runtime":
            out.setdefault(int(version.split(".")[0]), []).append(name)
    return out


def summarize_report(report: dict) -> list[tuple[str, str]]:
    """(name, version) of the key packages in a pip ``--report``, and its CUDA major; raises
    when the resolution would install faiss-cpu next to faiss-gpu (two builds of one `faiss`
    module) or the libraries of two CUDA majors (one process loads one runtime)."""
    versions = {
        requirement_name(i["metadata"]["name"]): i["metadata"]["version"]
        for i in report.get("install", [])
    }
    if "faiss-cpu" in versions and "faiss-gpu" in versions:
        raise ValueError("the resolution installs both faiss-cpu and faiss-gpu: one `faiss` module")
    majors = cuda_majors(versions)
    if len(majors) > 1:
        raise ValueError(
            "the resolution mixes CUDA majors in one environment: "
            + "; ".join(
                f"CUDA {major}: {', '.join(names)}" for major, names in sorted(majors.items())
            )
            + " (one process loads one CUDA runtime)"
        )
    return [(name, versions.get(name, "-")) for name in SUMMARY_PACKAGES] + [
        ("(CUDA major)", ", ".join(str(m) for m in majors) or "-"),
        ("(packages in all)", str(len(versions))),
    ]
