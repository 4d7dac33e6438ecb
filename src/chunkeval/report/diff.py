"""What changed between two recorded runs: for each configuration they share, the questions that got
better, worse or stayed on a metric, the paired test of the difference (as `compare`), and for each
question that changed what it retrieved before and after, worse ones first.

`diff_doc` gives the data (`chunkeval diff --json`), `format_diff` the text a terminal shows."""

from __future__ import annotations

from html import escape
from pathlib import Path

from chunkeval.analysis.comparisons import matching
from chunkeval.analysis.regression import DEFAULT_THRESHOLD, NOTHING_COMPARABLE, REGRESSION_METRICS, verdict_line
from chunkeval.errors import NothingComparable
from chunkeval.files import write_text
from chunkeval.report.inspect import (
    ITEM_STYLE,
    PAGE_STYLE,
    _Texts,
    config_line,
    format_items,
    item_html,
    lists_by_config,
    retrieved_items,
    run_references,
)
from chunkeval.report.terminal import fold, listed, measured
from chunkeval.visible import visible
from chunkeval.vocabulary import CONFIG_KEYS, SPAN_METRICS, config_id, config_label

UNCHANGED = 1e-9  # a change of at most this much is no change
SHOWN_QUERIES = 10  # changed questions a terminal shows per configuration


def _values(wh, run_id: str, metric: str) -> dict[tuple, dict[str, float]]:
    """configuration → query_id → the metric, of one run."""
    found = wh.run_columns(run_id, "per_query", [*CONFIG_KEYS, "query_id", metric])
    out: dict[tuple, dict[str, float]] = {}
    for i in range(len(found["query_id"])):
        key = tuple(found[k][i].item() if hasattr(found[k][i], "item") else found[k][i] for k in CONFIG_KEYS)
        out.setdefault(key, {})[str(found["query_id"][i])] = float(found[metric][i])
    return out


def default_metric(wh, run_id: str) -> str:
    """The first metric of the regression rule the run measures: span_recall, or under document gold (no span
    metric measured) doc_ndcg_at_k, the first of the rule's document metrics."""
    if measured(wh.summary(run_id), SPAN_METRICS):
        return REGRESSION_METRICS[0]
    return next(m for m in REGRESSION_METRICS if m.startswith("doc_"))


VERDICT_FIELDS = (
    "before", "after", "change", "n_queries", "n_unmatched", "p_ttest", "p_adjusted", "mde", "regression",
)  # fmt: skip


class Diff(list):
    """`diff_doc`'s list of configurations, with the `verdict` of run b against run a they are part of."""

    verdict: dict


def diff_doc(
    wh,
    run_a: str,
    run_b: str,
    config: dict | None = None,
    metric: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
) -> Diff:
    """One object per configuration both runs have (with the settings of `config`): its keys, `metric`,
    `better`, `worse`, `unchanged`, the check of the one regression verdict of run b against run a (`VERDICT_FIELDS`:
    change = b − a, the step-down max-T over every configuration × metric checked: `metric` where given, else the
    watched list),
    and `queries` that changed, worse first. The metric shown by default: the first of the regression rule that
    run b measures (`default_metric`). `NothingComparable` where the runs share no configuration or question."""
    config = dict(config or {})
    for run_id in (run_a, run_b):
        wh.retrieved_file(run_id)  # its errors first: unknown or unfinished run, or no retrieved lists kept
        matching(wh.summary(run_id), config, f"run {run_id}")
    checked = wh.verdict_of_runs(run_b, run_a, [metric] if metric else None, threshold, alpha, config)
    if checked["verdict"] == NOTHING_COMPARABLE:
        raise NothingComparable(verdict_line(checked))
    metric = metric or default_metric(wh, run_b)
    comparisons = [c for c in checked["checks"] if c["metric"] == metric and c["slice"] is None]
    values = {run_a: _values(wh, run_a, metric), run_b: _values(wh, run_b, metric)}
    refs = {run_a: run_references(wh, run_a), run_b: run_references(wh, run_b)}
    out, changed_ids = [], set()
    for c in comparisons:
        keys = {k: c[k] for k in CONFIG_KEYS if k in c}
        before, after = values[run_a].get(tuple(keys.values()), {}), values[run_b].get(tuple(keys.values()), {})
        both = sorted(set(before) & set(after))
        change = {q: after[q] - before[q] for q in both}
        moved = sorted((q for q in both if abs(change[q]) > UNCHANGED), key=lambda q: (change[q], q))
        changed_ids.update(moved)
        out.append(
            {
                **keys,
                "label": config_label(keys),
                "config_id": config_id(keys),
                "metric": metric,
                "better": sum(change[q] > UNCHANGED for q in both),
                "worse": sum(change[q] < -UNCHANGED for q in both),
                "unchanged": sum(abs(change[q]) <= UNCHANGED for q in both),
                **{f: c[f] for f in VERDICT_FIELDS},
                "queries": [{"query_id": q, "a": before[q], "b": after[q]} for q in moved],
            }
        )
    lists = {r: wh.retrieved(r, sorted(changed_ids)) for r in (run_a, run_b)} if changed_ids else {}
    texts = {r: _Texts(wh, r) for r in (run_a, run_b)}
    for doc in out:
        keys = {k: doc[k] for k in CONFIG_KEYS if k in doc}
        for q in doc["queries"]:
            q["question"] = refs[run_b][0].get(q["query_id"]) or refs[run_a][0].get(q["query_id"])
            for side, run_id in (("retrieved_a", run_a), ("retrieved_b", run_b)):
                rows = lists_by_config(lists[run_id], [keys], q["query_id"])[0]
                found = refs[run_id][1].get(q["query_id"], [])
                q[side] = retrieved_items(rows, found, texts[run_id], refs[run_id][2])
        doc["queries"] = [
            {k: q[k] for k in ("query_id", "question", "a", "b", "retrieved_a", "retrieved_b")} for q in doc["queries"]
        ]
    out = Diff(out)
    out.verdict = checked
    return out


def _number(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _check(d: dict) -> str:
    """A configuration's check of the verdict: the means, the signed change (b − a) and its adjusted p."""
    return (
        f"{_number(d['before'])} → {_number(d['after'])} (change {d['change']:+.3f}, adjusted p = "
        f"{_number(d['p_adjusted'])}{', a regression' if d['regression'] else ''})"
    )


def format_diff(docs: list[dict], run_a: str, run_b: str, colour: bool = False) -> str:
    """The terminal's view of `diff_doc`, within 120 columns: per configuration its counts and test, then the
    questions that changed most (worse first), each with its retrieved lists before and after; the configurations
    where no question changed, in one line at the end (the first eight named, the rest counted)."""
    lines = [f"diff of run {run_a} (a) → run {run_b} (b)"]
    if getattr(docs, "verdict", None):
        lines.append(fold(verdict_line(docs.verdict)))
    same = [d for d in docs if not d["queries"] and not d["worse"] and not d["better"] and not d["regression"]]
    for d in docs:
        if any(d is s for s in same):
            continue
        lines.append("")
        lines.append(
            fold(
                f"{config_line(d)}: {d['metric']} {_check(d)}; {d['worse']} worse, {d['better']} better, "
                f"{d['unchanged']} unchanged"
            )
        )
        shown = d["queries"][:SHOWN_QUERIES]
        for q in shown:
            lines.append(
                fold(f"  {visible(q['query_id'])} {visible(q['question'] or '')!r}: {q['a']:.3f} → {q['b']:.3f}")
            )
            lines.append("    a retrieved:")
            lines += format_items(q["retrieved_a"], colour, indent="      ")
            lines.append("    b retrieved:")
            lines += format_items(q["retrieved_b"], colour, indent="      ")
        if len(d["queries"]) > len(shown):
            lines.append(f"  … and {len(d['queries']) - len(shown)} more changed question(s): --json gives them all")
    if same:
        metrics = ", ".join(dict.fromkeys(d["metric"] for d in same))
        names = listed([config_line(d) for d in same])
        lines += ["", fold(f"no question changed on {metrics} in {len(same)} configuration(s): {names}")]
    return "\n".join(lines)


def diff_page(docs: list[dict], run_a: str, run_b: str, experiment: str) -> str:
    """The diff as one offline page: per configuration its counts and test, then each changed question
    with its retrieved lists side by side (a before, b after), worse first. Every text is escaped."""
    body = []
    for d in docs:
        body.append(
            f"<h2>{escape(config_line(d))}</h2><p>{escape(d['metric'])} {escape(_check(d))}. {d['worse']} worse, "
            f"{d['better']} better, {d['unchanged']} unchanged.</p>"
        )
        for q in d["queries"]:
            sides = "".join(
                f"<div><h4>{title}</h4><ol class=items>{''.join(item_html(i) for i in q[key])}</ol></div>"
                for title, key in ((f"a: {escape(run_a)}", "retrieved_a"), (f"b: {escape(run_b)}", "retrieved_b"))
            )
            body.append(
                f"<h3>{escape(q['query_id'])}: {escape(q['question'] or '')} ({q['a']:.3f} → {q['b']:.3f})</h3>"
                f"<div class=sides>{sides}</div>"
            )
    style = PAGE_STYLE + ITEM_STYLE + ".sides{display:grid;grid-template-columns:1fr 1fr;gap:1rem}"
    title = f"chunkeval diff: {escape(experiment)}, run {escape(run_a)} → {escape(run_b)}"
    if getattr(docs, "verdict", None):
        body.insert(0, f"<p><strong>{escape(verdict_line(docs.verdict))}</strong></p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title><style>{style}</style></head>
<body><h1>{title}</h1>{"".join(body) or "<p>The runs share no configuration.</p>"}</body></html>
"""


def diff_path(root, experiment: str, run_a: str, run_b: str) -> Path:
    """Where a diff of two runs is kept beside the reports: `reports/<experiment>/diff-<A>-<B>.html`."""
    return Path(root) / "reports" / experiment / f"diff-{run_a}-{run_b}.html"


def write_diff(
    wh,
    run_a: str,
    run_b: str,
    path,
    config: dict | None = None,
    metric: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
) -> Path:
    """Build the diff page of two runs and write it whole; returns the path."""
    path = Path(path)
    with wh.session():
        docs = diff_doc(wh, run_a, run_b, config, metric, threshold, alpha)
        experiment = wh.run(run_b)["experiment"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, diff_page(docs, run_a, run_b, experiment))
    return path
