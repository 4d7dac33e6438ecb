"""What a notebook or a terminal shows of results held in Python: a summary as a readable table (text for
`repr`, an escaped HTML table for Jupyter's `_repr_html_`), and paired comparisons likewise."""

from __future__ import annotations

import math
from html import escape

import pyarrow as pa

from chunkeval.report.terminal import comparison_table, default_metrics, fold, format_rows, side_label
from chunkeval.vocabulary import config_id, config_label

SHOWN_ROWS = 20  # configurations or comparisons shown; the rest are counted
SHOWN_METRICS = 7
COMPARISON_FIELDS = ("metric", "mean_a", "mean_b", "mean_diff", "ci_low", "ci_high", "p_adjusted", "significant")


def _number(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _summary_cells(summary: pa.Table) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a summary as the terminal shows them: each configuration's label and config_id,
    then mean ± std of the headline metrics of its kind of gold (`chunkeval.report.terminal.default_metrics`)."""
    names = summary.column_names
    means = [c[: -len("_mean")] for c in names if c.endswith("_mean")]
    metrics = ([m for m in default_metrics(summary) if m in means] or means)[:SHOWN_METRICS]
    rows = [
        [config_label(rec), config_id(rec)]
        + [f"{_number(rec[f'{m}_mean'])}±{_number(rec.get(f'{m}_std'))}" for m in metrics]
        for rec in summary.slice(0, SHOWN_ROWS).to_pylist()
    ]
    return ["configuration", "config_id"] + metrics, rows


def _more(total: int, what: str) -> str:
    return f"… and {total - SHOWN_ROWS} more {what}" if total > SHOWN_ROWS else ""


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def results_title(summary: pa.Table, per_query: pa.Table, tables: list[str]) -> str:
    queries = len(set(per_query["query_id"].to_pylist())) if "query_id" in per_query.column_names else 0
    return (
        f"chunkeval Results: {summary.num_rows} configuration(s), {queries} question(s); "
        f"tables {', '.join(tables)} (macro mean ± std)"
    )


def results_text(summary: pa.Table, per_query: pa.Table, tables: list[str]) -> str:
    header, rows = _summary_cells(summary)
    more = _more(summary.num_rows, "configuration(s): .summary has them all")
    return "\n".join(filter(None, [results_title(summary, per_query, tables), format_rows(header, rows), more]))


def results_html(summary: pa.Table, per_query: pa.Table, tables: list[str]) -> str:
    header, rows = _summary_cells(summary)
    more = _more(summary.num_rows, "configuration(s): .summary has them all")
    return (
        f"<div><p><b>{escape(results_title(summary, per_query, tables))}</b></p>{_html_table(header, rows)}"
        + (f"<p>{escape(more)}</p>" if more else "")
        + "</div>"
    )


def _side(value) -> str:
    """A side of a comparison: a configuration (its label and config_id, as the terminal names it), a run or a name."""
    return side_label(value) if isinstance(value, dict) else str(value)


def _comparison_cells(comparisons: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["a", "b", *COMPARISON_FIELDS]
    rows = [
        [_side(c.get("a")), _side(c.get("b"))]
        + [_number(c.get(f), 4 if f.startswith("p_") else 3) for f in COMPARISON_FIELDS]
        for c in comparisons[:SHOWN_ROWS]
    ]
    return header, rows


def comparisons_text(comparisons: list[dict]) -> str:
    """The comparisons as `chunkeval compare` prints them, within 120 columns: per metric a title naming what every
    row shares (the run, the best), then a row per comparison (`comparison_table`), the first `SHOWN_ROWS` of
    each metric and the rest counted."""
    title = f"chunkeval comparisons: {len(comparisons)} paired comparison(s)"
    metrics = list(dict.fromkeys(c.get("metric") for c in comparisons))
    shown_as_cli = all(isinstance(c.get("a"), dict) and isinstance(c.get("b"), dict) for c in comparisons)
    if not comparisons or not shown_as_cli:
        header, rows = _comparison_cells(comparisons)
        return "\n".join(filter(None, [title, format_rows(header, rows) if rows else "", _more(len(comparisons), "")]))
    out = [title]
    for metric in metrics:
        mine = [c for c in comparisons if c.get("metric") == metric]
        where, header, rows = comparison_table(mine)
        out += ["", fold(f"{metric}{where}: differences a − b [95 % interval]; p Holm over the call", indent="")]
        out.append(format_rows(header, rows[:SHOWN_ROWS]))
        if len(rows) > SHOWN_ROWS:
            out.append(f"… and {len(rows) - SHOWN_ROWS} more comparison(s) of {metric}: the list holds them all")
    return "\n".join(out)


def comparisons_html(comparisons: list[dict]) -> str:
    header, rows = _comparison_cells(comparisons)
    more = _more(len(comparisons), "")
    return (
        f"<div><p><b>chunkeval comparisons: {len(comparisons)} paired comparison(s)</b></p>"
        f"{_html_table(header, rows)}" + (f"<p>{escape(more)}</p>" if more else "") + "</div>"
    )
