"""The first screen of the HTML report: what a reader needs before scrolling. The verdict of the newest run
against its baseline (the one verdict, `chunkeval.analysis.regression.verdict`), the best configuration of
each headline metric of the run's kind of gold with how many configurations tie with it, the trend of the
headline metric, and links to the worst questions of the drill-down."""

from __future__ import annotations

from html import escape

from chunkeval.analysis.comparisons import decision
from chunkeval.analysis.regression import NO_REGRESSION, NOTHING_COMPARABLE, verdict_line
from chunkeval.report import charts
from chunkeval.report.sections import _num, _table, best_rows, label_html, trend_series
from chunkeval.report.terminal import decision_line
from chunkeval.vocabulary import CONFIG_KEYS

# the metrics a reader looks at first, per kind of gold (the rest are in the grid)
HEADLINE = {
    "spans": ("span_recall", "span_iou", "recall_at_k", "mrr"),
    "documents": ("doc_ndcg_at_k", "doc_recall_at_k", "mrr"),
}

OVERVIEW_STYLE = (
    ".glance{display:flex;flex-wrap:wrap;gap:1.2rem;align-items:flex-start}.glance>div{flex:1 1 420px;min-width:0}"
    ".glance svg{max-width:460px}.verdict{padding:.4rem .7rem;border-left:4px solid #9aa5b1;background:#f6f8fa}"
    ".verdict.bad{border-color:#c62828;background:#fdecea}.verdict.good{border-color:#0b6e4f;background:#e9f6f0}"
    "ol.worst{margin:.3rem 0;padding-left:1.4rem;font-size:.9rem}ol.worst li{white-space:nowrap;overflow:hidden;"
    "text-overflow:ellipsis}"
)


def headline_metrics(spans: bool) -> tuple[str, ...]:
    return HEADLINE["spans" if spans else "documents"]


def _verdict_html(found: dict | None, problem: str, run_id: str) -> str:
    if problem:
        return f'<div class="verdict">{problem}</div>'
    if found is None:
        return '<p class="verdict">No verdict yet: there is no earlier completed run (or pinned baseline) to compare with.</p>'
    cls = {NO_REGRESSION: "good", NOTHING_COMPARABLE: ""}.get(found["verdict"], "bad")
    newer = "" if found["run_id"] == run_id else f" (the newest run's verdict; this page shows run {escape(run_id)})"
    link = ' <a href="#trend">Regressions</a>' if found["verdict"] not in (NO_REGRESSION, NOTHING_COMPARABLE) else ""
    return f'<p class="verdict {cls}"><strong>Verdict:</strong> {escape(verdict_line(found))}{newer}.{link}</p>'


def section_overview(
    wh,
    experiment: str,
    run_id: str,
    summary: list[dict],
    tied: dict[str, set[tuple]],
    spans: bool,
    found: tuple[dict | None, str],
    falls: list[dict],
    worst: list[dict],
    chosen: dict,
    per_query=None,
) -> str:
    """The overview: `found` is `sections.the_verdict`'s answer, `falls` its regressions, `worst` the drill-down's
    worst questions (`drilldown.drilldown`)."""
    best = best_rows(summary)
    metrics = [m for m in headline_metrics(spans) if m in best]
    rows = []
    for m in metrics:
        r = best[m]
        interval = f" [{_num(r[f'{m}_ci_low'])}, {_num(r[f'{m}_ci_high'])}]" if r.get(f"{m}_ci_low") is not None else ""
        n_tied = len(tied.get(m, ()) - {tuple(r[k] for k in CONFIG_KEYS)})
        rows.append(
            [
                escape(m),
                label_html(r),
                f"{_num(r[f'{m}_mean'])}<small>{interval}</small>",
                f"{n_tied} of {len(summary) - 1}",
            ]
        )
    table = _table(["metric", "best configuration", "mean [95 % CI]", "tied with it"], rows)
    headline = metrics[0] if metrics else None
    decided = decision_line(decision(per_query, headline)) if headline and per_query is not None else None
    lead = f'<p class="decision"><strong>{escape(decided)}</strong></p>' if decided else ""
    chart = ""
    if headline is not None:
        series = trend_series(wh, experiment, [best[headline]], (headline,), falls)[0]
        if series:
            chart = charts.trend_lines(series, title=f"Trend of {headline} of its best configuration")
    named = worst[0]["metric"].replace("_", " ") if worst else ""
    links = "".join(
        (f'<li><a href="#{w["anchor"]}">{escape(w["query_id"])}</a>' if w["anchor"] else f"<li>{escape(w['query_id'])}")
        + f" ({named} {_num(w['value'])}): "
        f"{escape(w['question'])}</li>"
        for w in worst
    )
    questions = (
        f"<p>The worst questions of the chosen configuration, {label_html(chosen)}, by {named} "
        f'(<a href="#failures">failure analysis</a>; none at or near 1):</p>'
        f'<ol class="worst">{links}</ol>'
        if links
        else ""
    )
    return (
        f'<section id="overview"><h2>At a glance</h2>{lead}{_verdict_html(*found, run_id)}<div class="glance">'
        f"<div><p>Best configuration of each headline metric (of {len(summary)}; all metrics in the "
        f'<a href="#grid">grid</a>):</p>{table}{questions}</div>'
        f"<div>{chart}</div></div></section>"
    )
