"""`chunkeval evaluate-run`: a ranked run file of a retriever that runs elsewhere, scored against gold."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_json, add_run_file_options
from chunkeval.cli.output import clean, print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.inputs.document_gold import load_doc_qrels_and_chunk_run
from chunkeval.engine.inputs.run_files import load_gold_and_run
from chunkeval.engine.scoring.metrics import RANK_METRICS, score_run
from chunkeval.engine.settings.table import check_k
from chunkeval.report.terminal import format_macro_micro, format_rows

WAREHOUSE_SESSION = False  # scores files; never opens the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "evaluate-run",
        help=summary("evaluate-run"),
        description="Set and rank metrics of a ranked run file against chunk-id, string-list or TREC gold.",
    )
    p.add_argument("--gold", required=True, help="gold set: chunk-id CSV/JSONL, string-list JSONL or TREC qrels")
    p.add_argument("--run", required=True, help="run file in the matching format")
    add_run_file_options(
        p,
        format_help="input format (default auto: strings when the gold JSONL has 'reference', else chunk-ids; "
        "TREC must be named; doc-qrels: document qrels, BEIR TSV or TREC, with a run of chunk ids whose documents "
        "are ranked by their best chunk and scored as doc_* metrics at depth k)",
        k_help="cutoff of the *_at_k metrics (default 10); mrr and map use the whole list",
    )
    add_json(p, "print a JSON object with 'macro' and 'micro' maps")
    p.add_argument("--per-query", action="store_true", help="include every query's metrics")
    p.add_argument(
        "--skip-empty-gold", action="store_true", help="leave queries without relevant items out of the averages"
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_k(args.k, "--k")
    if args.format == "doc-qrels":
        gold, ranked = load_doc_qrels_and_chunk_run(Path(args.gold), Path(args.run), args.k)
    else:
        gold, ranked = load_gold_and_run(Path(args.gold), Path(args.run), args.format)
    per_query, summary = score_run(gold, ranked, args.k, args.skip_empty_gold)
    rank_metrics = RANK_METRICS
    if args.format == "doc-qrels":  # the rank metrics of the MaxP document lists are the doc_* metrics
        per_query, summary = (_as_doc_metrics(t) for t in (per_query, summary))
        rank_metrics = tuple(DOC_NAMES.get(m, m) for m in RANK_METRICS)
    rec = summary.to_pylist()[0]
    if args.json:
        doc = {
            "k": args.k,
            "n_queries": rec["n_queries"],
            "macro": {m: clean(rec[f"{m}_mean"]) for m in rank_metrics},
            "macro_std": {m: clean(rec[f"{m}_std"]) for m in rank_metrics},
            "micro": {m: clean(rec[f"{m}_micro"]) for m in rank_metrics if f"{m}_micro" in rec},
            "ci": {m: [clean(rec[f"{m}_ci_low"]), clean(rec[f"{m}_ci_high"])] for m in rank_metrics},
        }
        if args.per_query:
            doc["per_query"] = [{k: clean(v) for k, v in row.items()} for row in per_query.to_pylist()]
        print_json(doc)
        return 0
    print(f"{rec['n_queries']} queries, k = {args.k}\n")
    print(format_macro_micro(summary, list(rank_metrics)))
    if args.per_query:
        cols = ["query_id", "tp", "fp", "fn"] + list(rank_metrics)
        rows = [
            [str(r[c]) if not isinstance(r[c], float) else f"{r[c]:.3f}" for c in cols] for r in per_query.to_pylist()
        ]
        print("\n" + format_rows(cols, rows))
    return 0


# the rank metrics of a document list, by the names of the document-level metrics of a sweep
DOC_NAMES = {
    "ndcg_at_k": "doc_ndcg_at_k",
    "recall_at_k": "doc_recall_at_k",
    "precision_at_k": "doc_precision_at_k",
    "mrr": "doc_mrr",
    "map": "doc_map",
}


def _as_doc_metrics(table):
    """A per-query table or summary of rank metrics with the names of the document-level metrics."""
    names = []
    for name in table.column_names:
        metric = next((m for m in DOC_NAMES if name == m or name.startswith(m + "_")), None)
        names.append(DOC_NAMES[metric] + name[len(metric) :] if metric else name)
    return table.rename_columns(names)
