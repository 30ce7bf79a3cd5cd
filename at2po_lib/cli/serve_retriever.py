"""``at2po serve-retriever``: the retrieval server (:mod:`at2po_lib.retrieval.server`).

    at2po serve-retriever --profile tiny --port 8000
    at2po serve-retriever --corpus wiki-18.jsonl --index data/e5_Flat_index \\
        --encoder intfloat/e5-base-v2 --query-prefix "query: " --passage-prefix "passage: " --fp16
    at2po serve-retriever --corpus corpus.jsonl --index index/bm25 --bm25

It binds 127.0.0.1 unless ``--host`` says otherwise; a non-loopback address needs an API key.
:func:`at2po_lib.retrieval.server.start_server_process` runs this command in a subprocess.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..config.profile import load_profile
from ..retrieval.base import DEFAULT_TOPK, Retriever
from ..retrieval.bm25 import BM25Retriever
from ..retrieval.dense import DenseRetriever
from ..retrieval.encoders import EncoderSpec
from ..retrieval.indexes import build_retriever
from ..retrieval.server import (
    API_KEY_ENV,
    API_KEY_HEADER,
    ServerLimits,
    check_binding,
    create_app,
    uvicorn_options,
)
from .options import (
    CommandParser,
    add_profile_options,
    bounded_float,
    bounded_int,
    parse_set,
    run_guarded,
)

# Imported inside the functions that use them: uvicorn; the server's stack loads only when it
# serves.

PROG = "at2po serve-retriever"
COUNT = bounded_int(1, 1 << 24)
"""Queries and characters per request or queue."""
BYTES = bounded_int(1, 1 << 34)
"""Bytes (or characters) of one request, at most 16 GiB."""
SECONDS = bounded_float(0, 86_400, open_low=True)


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog=PROG,
        description="Serve POST /retrieve (Search-R1's "
        "contract) and GET /health over a profile's or a given index.",
    )
    add_profile_options(
        p,
        default=None,
        example="retrieval.topk=5",
        profile_help=("serve the profile's retriever (index built if missing)"),
    )
    p.add_argument(
        "--corpus", help="wiki-18-format JSONL (default: the path recorded in the index)"
    )
    p.add_argument("--index", help="index folder (dense, or BM25 with --bm25)")
    p.add_argument("--bm25", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=bounded_int(0, 65_535), default=8000)
    p.add_argument(
        "--topk",
        type=bounded_int(1, 1000),
        default=DEFAULT_TOPK,
        help="default when a request sends topk null",
    )
    p.add_argument("--no-batching", action="store_true", help="one search call per request")
    p.add_argument("--max-wait-ms", type=bounded_float(0, 60_000), default=3.0)
    p.add_argument("--max-batch-queries", type=COUNT, default=256)
    d = ServerLimits()
    p.add_argument("--max-queries", type=COUNT, default=d.max_queries)
    p.add_argument("--max-topk", type=bounded_int(1, 1000), default=d.max_topk)
    p.add_argument("--max-query-chars", type=COUNT, default=d.max_query_chars)
    p.add_argument("--max-request-chars", type=BYTES, default=d.max_request_chars)
    p.add_argument("--max-body-bytes", type=BYTES, default=d.max_body_bytes)
    p.add_argument(
        "--max-queued-queries",
        type=COUNT,
        default=d.max_queued_queries,
        help="queue bound; beyond it requests get 503 with Retry-After",
    )
    p.add_argument(
        "--request-timeout",
        type=SECONDS,
        default=d.request_timeout_s,
        help="seconds before a request is answered 504 and its work dropped",
    )
    p.add_argument(
        "--header-timeout",
        type=SECONDS,
        default=d.header_timeout_s,
        help="seconds a connection has for a request's headers (slow clients are cut)",
    )
    p.add_argument(
        "--body-timeout",
        type=SECONDS,
        default=d.body_timeout_s,
        help="seconds a request's body may take to arrive (408 beyond)",
    )
    p.add_argument(
        "--max-connections",
        type=bounded_int(1, 65_536),
        default=d.max_connections,
        help="open connections at most; beyond, the longest-idle one is closed (or "
        "the new one, unread, when all are busy)",
    )
    p.add_argument(
        "--max-connections-per-client",
        type=bounded_int(1, 65_536),
        default=d.max_connections_per_client,
        help="open connections from one address at most (its idle ones shed first)",
    )
    p.add_argument(
        "--api-key-file",
        help=f"file holding the API key (default: ${API_KEY_ENV}); "
        "required when --host is not a loopback address",
    )
    p.add_argument(
        "--prebuilt",
        action="store_true",
        help="--index is a downloaded faiss file without meta.json (needs --encoder)",
    )
    p.add_argument(
        "--encoder",
        help="query encoder (default: the one recorded in the index); "
        "required for a prebuilt index without meta.json",
    )
    p.add_argument("--pooling", default="mean", choices=["mean", "cls"])
    p.add_argument("--query-prefix", default="")
    p.add_argument("--passage-prefix", default="")
    p.add_argument("--max-length", type=bounded_int(1, 1 << 20), default=256)
    p.add_argument(
        "--device",
        default=None,
        help="the query encoder's device (default: cpu with --no-gpu-index, else cuda when "
        "visible)",
    )
    p.add_argument("--fp16", action="store_true")
    p.add_argument(
        "--no-gpu-index",
        action="store_true",
        help="keep the faiss index and the query encoder on CPU (by default the index is "
        "sharded over the GPUs when the shards fit their free memory)",
    )
    p.add_argument("--log-level", default="info")
    p.add_argument("--access-log", action="store_true")
    return p


def _retriever_from_args(args: argparse.Namespace) -> Retriever:
    if args.index:
        if args.bm25:
            return BM25Retriever(args.index, args.corpus)

        spec = (
            EncoderSpec(
                args.encoder, args.pooling, args.query_prefix, args.passage_prefix, args.max_length
            )
            if args.encoder
            else None
        )
        return DenseRetriever(
            args.index,
            args.corpus,
            spec,
            device=encoder_device(args),
            fp16=args.fp16,
            use_gpu=False if args.no_gpu_index else "auto",
            prebuilt=args.prebuilt,
        )
    if not args.profile:
        raise SystemExit("at2po serve-retriever: give --profile or --index")

    overrides = parse_set(args.overrides)
    overrides.setdefault("retrieval", {})["url"] = None  # serve in-process, never proxy
    if args.prebuilt:
        overrides["retrieval"]["prebuilt"] = True
    if encoder_device(args) is not None:
        overrides["retrieval"]["device"] = encoder_device(args)
    cfg = load_profile(args.profile, overrides)
    return build_retriever(
        cfg, method="bm25" if args.bm25 else None, use_gpu=False if args.no_gpu_index else "auto"
    )


def encoder_device(args: argparse.Namespace) -> str | None:
    """``--device``, else the CPU with ``--no-gpu-index`` (the 1-GPU layout: nothing of the
    server on the card the trainer fills; ``at2po plan`` counts it there), else None (the
    profile's ``retrieval.device``, or cuda when visible)."""
    if args.device:
        return args.device
    return "cpu" if args.no_gpu_index else None


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file:
        key = Path(args.api_key_file).read_text().strip()
        if not key:
            raise SystemExit(f"at2po serve-retriever: {args.api_key_file} is empty")
        return key
    return os.environ.get(API_KEY_ENV) or None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(PROG, lambda: _serve(args))


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    api_key = _api_key(args)
    try:
        check_binding(args.host, api_key)
        limits = ServerLimits(
            args.max_queries,
            args.max_topk,
            args.max_query_chars,
            args.max_request_chars,
            args.max_body_bytes,
            args.max_queued_queries,
            args.request_timeout,
            args.header_timeout,
            args.body_timeout,
            args.max_connections,
            args.max_connections_per_client,
        )
    except ValueError as exc:
        raise SystemExit(f"at2po serve-retriever: {exc}") from None
    retriever = _retriever_from_args(args)
    app = create_app(
        retriever,
        default_topk=args.topk,
        batching=not args.no_batching,
        max_wait_ms=args.max_wait_ms,
        max_batch_queries=args.max_batch_queries,
        limits=limits,
        api_key=api_key,
    )
    print(f"serving {retriever.describe()} on http://{args.host}:{args.port}/retrieve", flush=True)
    if api_key:
        print(
            f"API key required: clients send it in the {API_KEY_HEADER} header "
            f"(HTTPRetriever reads ${API_KEY_ENV})",
            flush=True,
        )
    else:
        print(f"no API key: reachable from this machine only ({args.host})", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        **uvicorn_options(limits),
    )
    return 0
