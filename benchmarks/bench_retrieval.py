"""Retrieval speed, measured in one run on this machine (ratios, not absolute claims).

1. ``/retrieve`` throughput with 16 concurrent clients sending single-query requests (the
   shape of a rollout's search calls), against the same server with ``--no-batching``.
2. faiss ``IndexFlatIP`` search against NumPy brute force (``Q @ E.T`` + top-k) on the same
   embeddings (the fixture's MiniLM vectors, tiled with small noise to 50,000 rows), for a batch
   of 64 queries and for a single query.

The server runs in a subprocess (as in deployment) over a Flat index of the first 300 fixture
wiki-18 passages (MiniLM, max length 64), cached under ``artifacts/bench``. The last line
printed holds the batching ratio.

    python benchmarks/bench_retrieval.py [--seconds 8] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from at2po_lib.paths import artifacts_dir, repo_root  # noqa: E402
from at2po_lib.retrieval.corpus import Corpus  # noqa: E402
from at2po_lib.retrieval.dense import DenseIndex, build_dense_index  # noqa: E402
from at2po_lib.retrieval.encoders import EncoderSpec  # noqa: E402
from at2po_lib.retrieval.server import start_server_process  # noqa: E402

PASSAGES = 300
ROWS = 50_000
SPEC = EncoderSpec(max_length=64)


def bench_index() -> tuple[Path, Path]:
    """A Flat MiniLM index over the first PASSAGES fixture passages (built once, then reused)."""
    root = artifacts_dir("bench")
    corpus = root / f"wiki18_{PASSAGES}.jsonl"
    if not corpus.is_file():
        lines = (repo_root() / "tests" / "fixtures" / "wiki18_sample.jsonl").read_text().splitlines(keepends=True)
        corpus.write_text("".join(lines[:PASSAGES]))
    index = root / "index_flat"
    try:
        DenseIndex.load(index)
    except Exception:  # missing or stale: build it (about 10-30 s on 2 cores)
        build_dense_index(corpus, index, SPEC, index_type="Flat", progress=False)
    return corpus, index


def queries_from(corpus: Path, n: int) -> list[str]:
    """Short natural queries: the titles of the passages (plus a word of their text)."""
    out = []
    for _, chunk in Corpus(corpus).iter_chunks(n):
        for p in chunk:
            title, _, text = p["contents"].partition("\n")
            out.append(f"{title.strip(chr(34))} {text.split(' ')[-1]}")
        break
    return out


async def _throughput(url: str, queries: list[str], clients: int, seconds: float) -> tuple[float, int]:
    import httpx

    done = 0
    stop_at = 0.0

    async def client(worker: int, http: httpx.AsyncClient) -> None:
        nonlocal done
        i = worker
        while time.monotonic() < stop_at:
            payload = {"queries": [queries[i % len(queries)]], "topk": 3, "return_scores": True}
            response = await http.post(url, json=payload)
            response.raise_for_status()
            done += 1
            i += clients

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        await http.post(url, json={"queries": queries[:4], "topk": 3})  # warm-up
        start = time.monotonic()
        stop_at = start + seconds
        await asyncio.gather(*(client(w, http) for w in range(clients)))
        elapsed = time.monotonic() - start
    return done / elapsed, done


def server_throughput(corpus: Path, index: Path, batching: bool, queries: list[str],
                      clients: int, seconds: float) -> tuple[float, int]:
    args = ["--index", str(index), "--corpus", str(corpus), "--log-level", "warning"]
    if not batching:
        args.append("--no-batching")
    with start_server_process(args) as handle:
        return asyncio.run(_throughput(handle.retrieve_url, queries, clients, seconds))


def faiss_vs_numpy(index: Path, rows: int = ROWS, batch: int = 64, k: int = 10) -> dict[str, float]:
    """Seconds per search for a batch of ``batch`` queries and for one query, faiss vs NumPy."""
    import faiss

    base = DenseIndex.load(index, use_gpu=False).index
    vectors = base.reconstruct_n(0, base.ntotal)  # (PASSAGES, 384): the real MiniLM embeddings
    rng = np.random.default_rng(0)
    tiled = np.resize(vectors, (rows, vectors.shape[1])) + rng.normal(0, 0.02, (rows, vectors.shape[1]))
    tiled = (tiled / np.linalg.norm(tiled, axis=1, keepdims=True)).astype(np.float32)
    q = tiled[rng.choice(rows, batch, replace=False)] + rng.normal(0, 0.05, (batch, tiled.shape[1]))
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    flat = faiss.IndexFlatIP(tiled.shape[1])
    flat.add(tiled)

    def numpy_search(queries: np.ndarray) -> np.ndarray:
        scores = queries @ tiled.T  # (n_queries, rows)
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    def best_of(fn, repeats: int) -> tuple[float, object]:
        times, out = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return min(times), out

    t_faiss, (_, ids_faiss) = best_of(lambda: flat.search(q, k), 2)
    t_numpy, ids_numpy = best_of(lambda: numpy_search(q), 2)
    t_faiss_1, _ = best_of(lambda: flat.search(q[:1], k), 10)
    t_numpy_1, _ = best_of(lambda: numpy_search(q[:1]), 10)
    return {"faiss": t_faiss, "numpy": t_numpy, "faiss_1": t_faiss_1, "numpy_1": t_numpy_1,
            "agree": float(np.mean(ids_faiss == ids_numpy))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per server mode")
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()

    started = time.monotonic()
    corpus, index = bench_index()
    queries = queries_from(corpus, 200)
    print(f"index: Flat over {PASSAGES} wiki-18 passages, MiniLM (max length {SPEC.max_length}), CPU threads: {os.cpu_count()}")

    t = faiss_vs_numpy(index)
    print(f"exact top-10 over {ROWS:,} x 384 embeddings: 64 queries: faiss IndexFlatIP {t['faiss'] * 1000:.0f} ms, "
          f"NumPy brute force {t['numpy'] * 1000:.0f} ms; 1 query: faiss {t['faiss_1'] * 1000:.1f} ms, "
          f"NumPy {t['numpy_1'] * 1000:.1f} ms; identical top-10 ids: {t['agree']:.3f}")
    print(f"faiss speed-up over NumPy brute force: {t['numpy'] / t['faiss']:.2f}x (64 queries), "
          f"{t['numpy_1'] / t['faiss_1']:.2f}x (1 query)")

    plain, n_plain = server_throughput(corpus, index, False, queries, args.clients, args.seconds)
    batched, n_batched = server_throughput(corpus, index, True, queries, args.clients, args.seconds)
    print(f"/retrieve, {args.clients} concurrent clients, single-query requests, {args.seconds:.0f} s each: "
          f"no batching {plain:.1f} req/s ({n_plain} requests), micro-batching {batched:.1f} req/s ({n_batched} requests)")
    print(f"total benchmark time: {time.monotonic() - started:.0f} s")
    print(f"batching speed-up (/retrieve throughput, {args.clients} clients, batched / unbatched): {batched / plain:.2f}x")


if __name__ == "__main__":
    main()
