"""BM25 top-k with tied scores: the same passages, in the same order, on every machine.

numpy's argpartition/argsort pick SIMD kernels per CPU and order ties differently on AVX2 and
AVX-512 machines; notebook 01's BM25 recall@1 moved by up to 0.035 between two machines.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from at2po_lib.retrieval.bm25 import top_k_rows


def _reference(scores: np.ndarray, k: int) -> list[int]:
    return sorted(range(len(scores)), key=lambda row: (-scores[row], row))[:k]


def test_ties_go_to_the_lower_row():
    scores = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 0.0], dtype=np.float32)
    values, rows = top_k_rows(scores, 4)
    assert rows.tolist() == [1, 3, 2, 4]
    assert values.tolist() == [3.0, 3.0, 2.0, 2.0]


def test_k_larger_than_the_corpus_and_zero():
    scores = np.zeros(3, dtype=np.float32)  # a query with no known word: every score 0
    assert top_k_rows(scores, 10)[1].tolist() == [0, 1, 2]
    assert top_k_rows(scores, 0)[1].tolist() == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=200), st.integers(1, 20))
def test_matches_a_sort_by_score_then_row(levels, k):
    scores = np.asarray(levels, dtype=np.float32) / 4  # few distinct values: many ties
    assert top_k_rows(scores, k)[1].tolist() == _reference(scores, k)


def test_same_rows_with_numpy_simd_kernels_disabled():
    """On an AVX-512 machine this compares two kernel sets; elsewhere both runs are alike."""
    code = (
        "import numpy as np; from at2po_lib.retrieval.bm25 import top_k_rows; "
        "rng = np.random.default_rng(0); "
        "s = rng.integers(0, 3, 5000).astype(np.float32); "
        "print(top_k_rows(s, 50)[1].tolist())"
    )
    runs = []
    for disabled in ("", "AVX512_ICL X86_V4"):
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": disabled}
        runs.append(
            subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
    assert runs[0] == runs[1]
