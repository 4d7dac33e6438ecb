"""The `chunkeval` command. Bad input ends with one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

from chunkeval import __version__
from chunkeval.errors import InputError
from chunkeval.experiment import Experiment, cache_dir, parse_ints, split_list

log = logging.getLogger("chunkeval")


# --------------------------------------------------------------------------- experiment flags


def add_experiment_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment_file", nargs="?", metavar="experiment.yaml",
                   help="an experiment file; flags given as well override its settings")
    g = p.add_argument_group("experiment settings")
    g.add_argument("--name", help="experiment name (default: the file's stem, or 'adhoc')")
    g.add_argument("--corpus-dir", help="folder of <corpus_id>.md|.txt files (default: the demo corpora)")
    g.add_argument("--questions", help="span gold set: CSV with question, references, corpus_id (default: the demo questions)")
    g.add_argument("--corpus", action="extend", nargs="+", metavar="ID", help="only these corpora (default: every corpus in the folder)")
    g.add_argument("--chunker", help="comma-separated chunkers: fixed_token, fixed_char, recursive_token or module:function")
    g.add_argument("--chunk-sizes", help="comma-separated chunk sizes (tokens; characters for fixed_char), e.g. 100,200")
    g.add_argument("--overlaps", help="comma-separated overlaps: a number of tokens, or a share of the chunk size like 10%% (rounded down)")
    g.add_argument("--k", help="comma-separated retrieval depths, e.g. 1,3,5")
    g.add_argument("--model", help="embedding model: all-MiniLM-L6-v2 (default, bundled) or a local sentence-transformers folder")
    g.add_argument("--own-corpus", action="store_true", default=None,
                   help="retrieve each question from its own corpus only (default: from all corpora pooled, as Chroma does)")
    g.add_argument("--skip-empty-gold", action="store_true", default=None,
                   help="leave questions without references out of the averages (default: they score recall 0)")
    p.add_argument("--batch-size", type=int, default=32, help="texts per embedding batch (default 32)")


def experiment_from_args(args: argparse.Namespace, default: Experiment | None = None) -> Experiment:
    exp = Experiment.from_yaml(Path(args.experiment_file)) if args.experiment_file else (default or Experiment())
    return exp.with_overrides(
        name=args.name, corpus_dir=args.corpus_dir, questions=args.questions,
        corpus=tuple(split_list(args.corpus)), chunker=tuple(split_list(args.chunker)),
        chunk_sizes=parse_ints(args.chunk_sizes, "--chunk-sizes"), overlaps=tuple(split_list(args.overlaps)),
        k=parse_ints(args.k, "--k"),
        model=args.model, own_corpus=args.own_corpus, skip_empty_gold=args.skip_empty_gold,
    )


# --------------------------------------------------------------------------- commands


def cmd_sweep(args: argparse.Namespace) -> int:
    from chunkeval.embedding import Embedder
    from chunkeval.report import beside, check_table_path, format_summary, write_tables
    from chunkeval.sweep import CONFIG_KEYS, run_sweep

    out = check_table_path(args.out)
    exp = experiment_from_args(args)
    result = run_sweep(exp, Embedder(exp.model, cache_dir(), args.batch_size))
    write_tables({out: result.summary, beside(out, "per_query"): result.per_query, beside(out, "by_corpus"): result.by_corpus})
    print(format_summary(result.summary, CONFIG_KEYS))
    truncated = sum(result.summary["truncated_chunks"].to_pylist()) // max(len(exp.k), 1)
    print(f"\n{result.texts_embedded} text(s) embedded; {truncated} chunk(s) longer than the model's input were "
          f"embedded from their beginning; results in {out} and {beside(out, 'per_query').name}, {beside(out, 'by_corpus').name}")
    return 0


def _clean(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    from chunkeval.ingest import load_gold_and_run
    from chunkeval.metrics import RANK_METRICS, score_run
    from chunkeval.report import format_macro_micro, format_rows

    if args.k < 1:
        raise InputError(f"--k must be at least 1, got {args.k}")
    gold, run = load_gold_and_run(Path(args.gold), Path(args.run), args.format)
    per_query, summary = score_run(gold, run, args.k, args.skip_empty_gold)
    rec = summary.to_pylist()[0]
    if args.json:
        doc = {
            "k": args.k, "n_queries": rec["n_queries"],
            "macro": {m: _clean(rec[f"{m}_mean"]) for m in RANK_METRICS},
            "macro_std": {m: _clean(rec[f"{m}_std"]) for m in RANK_METRICS},
            "micro": {m: _clean(rec[f"{m}_micro"]) for m in RANK_METRICS if f"{m}_micro" in rec},
        }
        if args.per_query:
            doc["per_query"] = [{k: _clean(v) for k, v in row.items()} for row in per_query.to_pylist()]
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"{rec['n_queries']} queries, k = {args.k}\n")
    print(format_macro_micro(summary, list(RANK_METRICS)))
    if args.per_query:
        cols = ["query_id", "tp", "fp", "fn"] + list(RANK_METRICS)
        rows = [[str(r[c]) if not isinstance(r[c], float) else f"{r[c]:.3f}" for c in cols] for r in per_query.to_pylist()]
        print("\n" + format_rows(cols, rows))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from chunkeval.embedding import Embedder
    from chunkeval.report import format_summary
    from chunkeval.sweep import CONFIG_KEYS, run_sweep

    exp = experiment_from_args(args, Experiment.demo())
    result = run_sweep(exp, Embedder(exp.model, cache_dir(), args.batch_size))
    print(f"experiment {exp.name}: {result.summary.num_rows} configuration(s), {result.texts_embedded} text(s) embedded\n")
    print(format_summary(result.summary, CONFIG_KEYS))
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkeval",
        description="Measure how well chunking, an embedding model and a retrieval depth k find the text that answers each question.",
    )
    parser.add_argument("--version", action="version", version=f"chunkeval {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (model loading, texts embedded)")
    sub = parser.add_subparsers(dest="command", metavar="command")

    p = sub.add_parser("run", help="run an experiment (the demo experiment when none is given) and print its summary",
                       description="Run an experiment: chunk, embed (through the cache), retrieve and score every setting.")
    add_experiment_flags(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="score a grid of chunking settings and k on a span gold set, write the results",
                       description="Score every (chunker, chunk size, overlap, k) on a span gold set. Writes the summary to --out, "
                                   "the per-query table to <out>.per_query and the per-corpus summary to <out>.by_corpus.")
    add_experiment_flags(p)
    p.add_argument("--out", required=True, help="summary file, .csv or .parquet")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("evaluate-run", help="score a run file of a retriever that runs elsewhere against a gold set",
                       description="Set and rank metrics of a ranked run file against chunk-id, string-list or TREC gold.")
    p.add_argument("--gold", required=True, help="gold set: chunk-id CSV/JSONL, string-list JSONL or TREC qrels")
    p.add_argument("--run", required=True, help="run file in the matching format")
    p.add_argument("--format", default="auto", choices=["auto", "chunk-ids", "strings", "trec"],
                   help="input format (default auto: strings when the gold JSONL has 'reference', else chunk-ids; TREC must be named)")
    p.add_argument("--k", type=int, default=10, help="cutoff of the *_at_k metrics (default 10); mrr and map use the whole list")
    p.add_argument("--json", action="store_true", help="print a JSON object with 'macro' and 'micro' maps")
    p.add_argument("--per-query", action="store_true", help="include every query's metrics")
    p.add_argument("--skip-empty-gold", action="store_true", help="leave queries without relevant items out of the averages")
    p.set_defaults(func=cmd_evaluate_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="chunkeval: %(levelname)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except InputError as exc:
        print(f"chunkeval: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chunkeval: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
