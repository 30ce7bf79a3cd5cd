"""``at2po index``: build a dense (faiss) or BM25 index (:mod:`at2po_lib.retrieval.indexes`).

    at2po index --profile tiny --method both            # the profile's indexes
    at2po index --corpus wiki-18.jsonl --out index/e5 --encoder intfloat/e5-base-v2 \\
        --query-prefix "query: " --passage-prefix "passage: " --fp16 --index-type Flat
    at2po index --corpus wiki-18.jsonl --out index/bm25 --bm25
"""

from __future__ import annotations

import argparse
import dataclasses

from ..retrieval.bm25 import build_bm25_index
from ..retrieval.dense import build_dense_index
from ..retrieval.encoders import EncoderSpec
from ..retrieval.indexes import METHODS, ensure_index
from ..retrieval.ownership import check_destination_name
from ..util.locks import folder_lock
from .options import CommandParser, add_profile_options, bounded_int, load_profile_args, run_guarded

PROG = "at2po index"


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog=PROG, description="Build a dense (faiss) or BM25 index.")
    add_profile_options(
        p,
        default=None,
        example="retrieval.index_type=HNSW",
        profile_help=("build the profile's index(es) (corpus and settings from it)"),
    )
    p.add_argument(
        "--method",
        choices=[*METHODS, "both"],
        help="with --profile: which index (default: retrieval.method)",
    )
    p.add_argument("--corpus", help="wiki-18-format JSONL (.gz streams) when not using --profile")
    p.add_argument("--out", help="index folder when not using --profile")
    p.add_argument("--bm25", action="store_true", help="build BM25 instead of dense")
    d = EncoderSpec()
    p.add_argument("--encoder", default=d.name, help="minilm-offline, a hub name or a local folder")
    p.add_argument("--pooling", default=d.pooling, choices=["mean", "cls"])
    p.add_argument("--query-prefix", default=d.query_prefix)
    p.add_argument("--passage-prefix", default=d.passage_prefix)
    p.add_argument("--max-length", type=bounded_int(1, 1 << 20), default=d.max_length)
    p.add_argument("--index-type", default="Flat", help="Flat, HNSW (=HNSW64) or HNSW<M>")
    p.add_argument("--shard-size", type=bounded_int(1, 1 << 24), default=100_000)
    p.add_argument("--batch-size", type=bounded_int(1, 65_536), default=64)
    p.add_argument("--device", default=None)
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--keep-embeddings", action="store_true")
    p.add_argument(
        "--force", action="store_true", help="rebuild even if an up-to-date index exists"
    )
    p.add_argument(
        "--prebuilt",
        action="store_true",
        help="with --profile: the dense index in "
        "retrieval.index_dir is a downloaded faiss file (retrieval.prebuilt=true): "
        "check it against the corpus, build nothing",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.profile and not (args.corpus and args.out):
        parser.error("give --profile, or both --corpus and --out")
    return run_guarded(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.profile:
        cfg = load_profile_args(args)
        if args.prebuilt:  # an explicit choice, never a fallback (retrieval.indexes)
            cfg = dataclasses.replace(
                cfg, retrieval=dataclasses.replace(cfg.retrieval, prebuilt=True)
            )
        methods = METHODS if args.method == "both" else (args.method or cfg.retrieval.method,)
        for method, folder in ensure_index(cfg, methods, force=args.force).items():
            print(f"{method}: {folder}")
        return 0

    out = check_destination_name(args.out, "--out ")  # '.', '/': one line, before the lock
    # One writer per index folder: a second build of the same --out stops naming the first's PID.
    with folder_lock(out, "index build"):
        report = _build_explicit(args)
    print(f"{report.meta['kind']} index ({report.meta['passages']} passages): {report.index_dir}")
    return 0


def _build_explicit(args: argparse.Namespace):
    """``--corpus`` / ``--out``: one index built as the options say."""
    if args.bm25:
        report = build_bm25_index(args.corpus, args.out)
    else:
        spec = EncoderSpec(
            args.encoder, args.pooling, args.query_prefix, args.passage_prefix, args.max_length
        )
        report = build_dense_index(
            args.corpus,
            args.out,
            spec,
            index_type=args.index_type,
            shard_size=args.shard_size,
            batch_size=args.batch_size,
            device=args.device,
            fp16=args.fp16,
            keep_embeddings=args.keep_embeddings,
            force=args.force,
        )
    return report
