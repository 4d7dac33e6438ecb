"""Presenting results: result files written whole or not at all, and tables for the terminal."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.vocabulary import (
    DOC_METRICS,
    INDEX_METRICS,
    METRICS,
    MIN_SLICE_QUERIES,
    NO_RERANKER,
    RERANK_KEYS,
    SPAN_METRICS,
    approximate_index,
    shown_keys,
    slice_name,
)

TABLE_SUFFIXES = (".csv", ".parquet")
TERMINAL_METRICS = ("span_recall", "span_precision", "span_iou", "precision_omega", "recall_at_k", "mrr", "ndcg_at_k")


def check_table_path(path: Path, inputs=()) -> Path:
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise InputError("output must end in .csv or .parquet", path)
    return check_output_path(path, inputs)


def check_output_path(path: Path, inputs=()) -> Path:
    """An output file that `chunkeval.files.check_output` allows (checked before any work starts): the path
    to write, resolved."""
    from chunkeval.files import check_output

    return check_output(path, inputs)


def config_label(row: dict) -> str:
    """`model/retriever[/index][>reranker@candidates]/chunker/size/overlap/k=K`: one configuration, as messages
    name it (the index where it is an approximate one)."""
    index = row.get("index")
    searched = f"/{index}" if approximate_index(index) else ""
    return (
        f"{row['model']}/{row['retriever']}{searched}{rerank_label(row, '>')}/{row['chunker']}/{row['chunk_size']}/"
        f"{row['chunk_overlap']}/k={row['k']}"
    )


def rerank_label(row: dict, before: str = " > ") -> str:
    """`> reranker@candidates` of a configuration that reranks, else ''."""
    reranker = row.get("reranker")
    if reranker in (None, NO_RERANKER):
        return ""
    return f"{before}{Path(str(reranker)).name}@{row.get('candidates')}"


def approximate(summary: pa.Table) -> bool:
    """Whether any row of a summary searched an approximate index (its index measures are worth showing)."""
    if "index" not in summary.column_names:
        return False
    return any(approximate_index(v) for v in summary["index"].to_pylist())


def measured(summary: pa.Table, metrics) -> bool:
    """Whether any row of a summary has a mean of one of `metrics` (a run measures span or document metrics)."""
    names = [f"{m}_mean" for m in metrics if f"{m}_mean" in summary.column_names]
    return any(summary[n].null_count < summary.num_rows for n in names)


def default_metrics(summary: pa.Table) -> tuple[str, ...]:
    """TERMINAL_METRICS; for a run over document gold (no span metric measured), doc_ndcg_at_k and doc_recall_at_k
    in place of the span metrics."""
    if measured(summary, SPAN_METRICS) or not measured(summary, DOC_METRICS):
        return TERMINAL_METRICS
    return ("doc_ndcg_at_k", "doc_recall_at_k") + tuple(m for m in TERMINAL_METRICS if m not in SPAN_METRICS)


def shown_metrics(summary: pa.Table, metrics=METRICS) -> list[str]:
    """`metrics`, with the index metrics only where an approximate index was searched (else they are 1 or –)."""
    return [m for m in metrics if m not in INDEX_METRICS or approximate(summary)]


INDEX_COLUMNS = ("index_build_seconds", "index_bytes", "latency_p50_ms", "latency_p95_ms", "batch_ms_per_query")


def format_index_costs(summary: pa.Table, keys: list[str]) -> str:
    """What each index cost, once per configuration without its k: build seconds, MiB, latency of one query
    (p50, p95) and of a batch (per query), in milliseconds."""
    have = [c for c in INDEX_COLUMNS if c in summary.column_names]
    keys = [k for k in keys if k != "k" and k not in RERANK_KEYS]  # an index serves every k and reranking
    seen, rows = set(), []
    for rec in summary.to_pylist():
        if rec.get("index") in (None, "none"):
            continue
        key = tuple(rec[k] for k in keys)
        if key in seen:
            continue
        seen.add(key)
        cells = []
        for c in have:
            value = rec[c]
            if c == "index_bytes":
                cells.append("–" if value is None else f"{value / 2**20:.2f}")
            else:
                cells.append(_cell(value) if c != "index_build_seconds" or value is None else f"{value:.2f}")
        rows.append([_cell(v) for v in key] + cells)
    header = keys + [c.replace("index_bytes", "index_mib") for c in have]
    return format_rows(header, rows)


def regression_message(f: dict) -> str:
    """One alert: the configuration, the fall and its evidence, the queries that lost the most."""
    worst = "; ".join(
        f"{w['query_id']} {w['question'][:50]!r} {w['before']:.2f}→{w['after']:.2f}" for w in f.get("worst", [])[:3]
    )
    unmatched = f", {f['n_unmatched']} query row(s) in one run only left out" if f.get("n_unmatched") else ""
    where = f" in slice {f['slice']}" if f.get("slice") else ""
    return (
        f"chunkeval: regression: {f['metric']} of {config_label(f)}{where} fell from {f['before']:.3f} to {f['after']:.3f} "
        f"(run {f['run_id']} against {f['reference_run_id']}; {f['n_queries']} paired queries, Holm-adjusted p = "
        f"{f['p_adjusted']:.2g}{unmatched}); lost most: {worst}"
    )


def format_slices(by_slice: pa.Table) -> str:
    """The slices of a gold set and their queries, those too small to test marked (one line)."""
    sizes: dict[str, int] = {}
    for row in by_slice.select(["slice_column", "slice_value", "n_queries"]).to_pylist():
        name = slice_name(row["slice_column"], row["slice_value"])
        sizes[name] = max(sizes.get(name, 0), row["n_queries"])
    shown = ", ".join(f"{name} {n}{'*' if n < MIN_SLICE_QUERIES else ''}" for name, n in sizes.items())
    small = (
        f"; * too small to test (fewer than {MIN_SLICE_QUERIES} queries)"
        if any(n < MIN_SLICE_QUERIES for n in sizes.values())
        else ""
    )
    return f"slices (queries): {shown or 'none'}{small}"


def _difference(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.2g}"


def power_sentence(n: int, metric: str, mde: float, needed: dict) -> str:
    """ "with 28 questions, a difference in span recall under 0.08 cannot be told from noise; …": what a gold
    set can tell (`chunkeval.stats.power`: a two-sided paired t-test at α 0.05 with power 0.8, per comparison)."""
    if mde is None or math.isnan(mde):
        return f"with {n} question(s), {metric.replace('_', ' ')} has no spread of differences to measure"
    sizes = list(needed)
    counts = ["–" if needed[d] is None else str(needed[d]) for d in sizes]
    return (
        f"with {n} questions, a difference in {metric.replace('_', ' ')} under {_difference(mde)} cannot be told "
        f"from noise; differences of {_and(sizes)} would need {_and(counts)} questions"
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def beside(path: Path, part: str) -> Path:
    """`results.csv` → `results.<part>.csv`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{part}{path.suffix}")


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters escaped (`\\x1b`): text from data never drives the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def format_rows(header: list[str], rows: list[list[str]]) -> str:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += [
        "  ".join(c.ljust(w) if i == 0 or c[:1].isalpha() else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    return "\n".join(lines)


def format_table(table: pa.Table) -> str:
    """Any Arrow table (a query's rows) as aligned text: numbers to six significant digits, NULL as –."""

    def cell(value) -> str:
        if isinstance(value, float) and not math.isnan(value):
            return f"{value:.6g}"
        return _cell(value)

    return format_rows(table.column_names, [[cell(v) for v in row.values()] for row in table.to_pylist()])


def format_summary(
    summary: pa.Table,
    keys: list[str],
    metrics=TERMINAL_METRICS,
    micro: bool = False,
    intervals: bool = False,
    tied: dict[str, set[tuple]] | None = None,
) -> str:
    """One line per configuration: its keys, then each metric as mean±std (macro), its micro value, or
    (`intervals`) its macro mean with the 95 % bootstrap interval, `mean [low, high]`. A macro cell of a
    configuration in `tied[metric]` (tied with the best, `chunkeval.analysis.comparisons.ties`) ends with `*`."""
    suffix = "_micro" if micro else "_ci_low" if intervals else "_mean"
    if metrics == TERMINAL_METRICS:
        metrics = shown_metrics(summary, default_metrics(summary) + INDEX_METRICS)
    present = [m for m in metrics if f"{m}{suffix}" in summary.column_names]
    rows = []
    records = summary.to_pylist()
    shown = shown_keys(records, keys)  # reranker and candidates where a row reranks
    for rec in records:
        row = [_cell(rec[k]) for k in shown]
        for m in present:
            if micro:
                row.append(_cell(rec[f"{m}_micro"]))
            elif intervals:
                row.append(f"{_cell(rec[f'{m}_mean'])} [{_cell(rec[f'{m}_ci_low'])}, {_cell(rec[f'{m}_ci_high'])}]")
            else:
                row.append(f"{_cell(rec[f'{m}_mean'])}±{_cell(rec[f'{m}_std'])}")
            if tied and not micro and tuple(rec[k] for k in keys) in tied.get(m, ()):
                row[-1] += "*"
        rows.append(row)
    return format_rows(list(shown) + present, rows)


def format_macro_micro(summary: pa.Table, metrics: list[str]) -> str:
    """A metric per line: macro mean ± std and micro, for a one-row summary."""
    rec = summary.to_pylist()[0]
    rows = [
        [m, _cell(rec.get(f"{m}_mean")), _cell(rec.get(f"{m}_std")), _cell(rec.get(f"{m}_micro"))]
        for m in metrics
        if f"{m}_mean" in rec
    ]
    return format_rows(["metric", "macro", "std", "micro"], rows)


def format_models(models: pa.Table) -> str:
    """The models of a run: backend (with int8 and a precision other than fp32), texts embedded and throughput
    (texts per second; – when nothing was embedded), and for served models the tokens sent and their cost."""
    rows = [
        [
            r["model"],
            " ".join(
                b
                for b in (r.get("backend") or "torch", r.get("quantize"), r.get("precision"))
                if b not in (None, "none", "fp32")
            ),
            str(r["texts_embedded"]),
            "–" if r["texts_per_second"] is None else f"{r['texts_per_second']:.1f}",
            "–" if r.get("tokens") is None else str(r["tokens"]),
            "–" if r.get("cost") is None else f"{r['cost']:.4f}",
            (r["model_fingerprint"] or "")[:12],
        ]
        for r in models.to_pylist()
    ]
    served = any(r[5] != "–" for r in rows)  # tokens and cost are a served model's
    rows = [r if served else r[:4] + r[6:] for r in rows]
    header = ["model", "backend", "texts embedded", "texts/s", "tokens", "cost", "fingerprint"]
    return format_rows(header if served else header[:4] + header[6:], rows)
