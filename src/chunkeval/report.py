"""Presenting results: result files written whole or not at all, and tables for the terminal."""

from __future__ import annotations

import math
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from chunkeval.errors import InputError

TABLE_SUFFIXES = (".csv", ".parquet")
TERMINAL_METRICS = ("span_recall", "span_precision", "span_iou", "precision_omega", "recall_at_k", "mrr", "ndcg_at_k")


def check_table_path(path: Path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise InputError("output must end in .csv or .parquet", path)
    if not path.parent.is_dir():
        raise InputError("output folder does not exist", path.parent)
    return path


def beside(path: Path, part: str) -> Path:
    """`results.csv` → `results.<part>.csv`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{part}{path.suffix}")


def write_tables(tables: dict[Path, pa.Table]) -> None:
    """Write every table under a temporary name first, then rename them all: no half-written results."""
    staged = []
    try:
        for path, table in tables.items():
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            staged.append((tmp, path))
            if path.suffix.lower() == ".parquet":
                pq.write_table(table, tmp)
            else:
                pacsv.write_csv(table, tmp)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_rows(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if i >= 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(lines)


def format_summary(summary: pa.Table, keys: list[str], metrics=TERMINAL_METRICS) -> str:
    """One line per configuration: its keys, then each metric as mean±std (macro) and micro where defined."""
    present = [m for m in metrics if f"{m}_mean" in summary.column_names]
    header = list(keys) + present
    rows = []
    for rec in summary.to_pylist():
        row = [_cell(rec[k]) for k in keys]
        for m in present:
            row.append(f"{_cell(rec[f'{m}_mean'])}±{_cell(rec[f'{m}_std'])}")
        rows.append(row)
    return format_rows(header, rows)


def format_macro_micro(summary: pa.Table, metrics: list[str]) -> str:
    """A metric per line: macro mean ± std and micro, for a one-row summary."""
    rec = summary.to_pylist()[0]
    rows = [[m, _cell(rec.get(f"{m}_mean")), _cell(rec.get(f"{m}_std")), _cell(rec.get(f"{m}_micro"))]
            for m in metrics if f"{m}_mean" in rec]
    return format_rows(["metric", "macro", "std", "micro"], rows)
