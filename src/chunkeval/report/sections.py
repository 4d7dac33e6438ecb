"""The sections of the HTML report that read a run's summary and history: its summary, the grid of every
configuration with ties and the smallest detectable differences, the trade-off between precision and
recall, the distributions per query, recall against a budget of retrieved tokens, and the trend with its
regressions (the gold set and failure analysis: `gold_sections`)."""

from __future__ import annotations

from datetime import datetime
from html import escape

import duckdb
import numpy as np
import pyarrow as pa

from chunkeval.analysis.regression import NOTHING_COMPARABLE, REGRESSION_METRICS, verdict_line
from chunkeval.errors import Fault, InputError
from chunkeval.report import charts
from chunkeval.report.terminal import detectable_sentence
from chunkeval.stats import bootstrap_ci_groups
from chunkeval.stats.aggregate import MICRO, MICRO_F1
from chunkeval.stats.columns import numbers
from chunkeval.stats.power import at_ceiling
from chunkeval.vocabulary import (
    CONFIG_KEYS,
    INDEX_METRICS,
    LABEL_DEFAULTS,
    METRICS,
    approximate_index,
    config_id,
    config_label,
    gold_kind_said,
    no_match,
    shown_keys,
    split_list,
)
from chunkeval.warehouse import Warehouse

BOX_METRICS = ["span_precision", "span_recall", "span_f1"]


def label(row: dict, with_k: bool = True, with_id: bool = False) -> str:
    """A configuration as every command names it (`chunkeval.vocabulary.config_label`); `with_id`, with its config_id
    (where the page names it in text, as the terminal does); without `with_k`, across its depths (k left out)."""
    if not with_k:
        return config_label({**row, "k": LABEL_DEFAULTS["k"]})
    return f"{config_label(row)} [{config_id(row)}]" if with_id else config_label(row)


def label_html(row: dict) -> str:
    """`label(row, with_id=True)` escaped for a page, free to wrap after each `/` (a label has no spaces)."""
    return escape(label(row, with_id=True)).replace("/", "/<wbr>")


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _gold_kind(settings: dict) -> str:
    """A model-made gold set said beside the gold set's name (docs/gold.md); nothing for human gold."""
    said = gold_kind_said(settings)
    return f" <strong>({escape(said)})</strong>" if said else ""


def _identity(generation) -> str:
    """What the probes say of a served model: how often the model behind its name changed."""
    if generation is None:
        return "–"
    if generation == 0:
        return "as first probed"
    return f"changed behind its name {generation} time(s): vectors of generation {generation}"


def _when(value: datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are HTML already; a cell given as (html, sort key) sorts by the key."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, tuple):
                html, key = cell
                cells.append(f'<td data-v="{escape(str(key))}">{html}</td>')
            else:
                cells.append(f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _scroll(html: str) -> str:
    return f'<div class="scroll">{html}</div>'


REGRESSIONS_SHOWN = 10  # the trend section's regressions shown as the page opens (largest fall first)


def _folded(n: int, what: str, html: str, most: int = charts.CROWDED) -> str:
    """`html` as it is, or folded under `what` where it holds more than `most` rows: the page as first
    shown stays short, and a click opens it."""
    return html if n <= most else f"<details><summary>{escape(what)}</summary>{html}</details>"


def best_rows(summary: list[dict]) -> dict[str, dict]:
    """The configuration with the highest macro mean of each metric (first in grid order on ties)."""
    best = {}
    for m in METRICS:
        rows = [r for r in summary if r.get(f"{m}_mean") is not None]
        if rows:
            best[m] = max(rows, key=lambda r: r[f"{m}_mean"])
    return best


def budget_table(
    per_query: pa.Table, budgets: list[int]
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """For each chunking, the mean over queries of the best span recall among its k whose retrieved
    tokens fit the budget, and the 95 % bootstrap interval of each mean. A query that no evaluated k fits
    counts 0 only where k = 1 was evaluated (then nothing fits: its first chunk alone is over the budget);
    else the point was not measured (a smaller k might fit) and is NaN, left out of the chart."""
    con = duckdb.connect()
    con.register("q", per_query)
    con.register("b", pa.table({"budget": budgets}))
    keys = ", ".join(CONFIG_KEYS[:-1])
    best = con.sql(f"""
        SELECT {keys}, budget, dense_rank() OVER (ORDER BY {keys}, budget) - 1 AS point, best,
               bool_and(measured) OVER (PARTITION BY {keys}, budget) AS measured FROM (
            SELECT {keys}, query_id, budget,
                   coalesce(max(span_recall) FILTER (WHERE retrieved_tokens <= budget), 0) AS best,
                   count(*) FILTER (WHERE retrieved_tokens <= budget) > 0 OR min(k) = 1 AS measured
            FROM q, b GROUP BY ALL)
        ORDER BY point, query_id""").to_arrow_table()
    point = numbers(best["point"]).astype(np.int64)
    values = numbers(best["best"]).astype(np.float64)
    n_points = int(point.max()) + 1 if len(point) else 0
    means = np.bincount(point, weights=values, minlength=n_points) / np.maximum(
        np.bincount(point, minlength=n_points), 1
    )
    low, high = bootstrap_ci_groups(values, point, n_groups=n_points) if n_points else (means, means)
    first = np.unique(point, return_index=True)[1]
    unmeasured = ~np.asarray(best["measured"].to_pylist(), dtype=bool)[first]
    means, low, high = (np.where(unmeasured, np.nan, a) for a in (means, low, high))
    configs = best.select(CONFIG_KEYS[:-1]).take(pa.array(first)).to_pylist()
    names = across_k(per_query)
    curves: dict[str, list[int]] = {}
    for p, config in enumerate(configs):
        curves.setdefault(names[label(config, with_k=False)], []).append(p)
    return ({k: means[v] for k, v in curves.items()}, {k: (low[v], high[v]) for k, v in curves.items()})


def across_k(per_query: pa.Table) -> dict[str, str]:
    """What names a configuration across its depths (a line of the budget chart): its label without k, then the
    config_id of each of its configurations, by k (`bm25/recursive_token [04c4813f k=1, 651306d1 k=5]`); keyed by the
    label without k."""
    present = [k for k in CONFIG_KEYS if k in per_query.column_names]
    rows = per_query.select(present).group_by(present).aggregate([]).to_pylist()
    ids: dict[str, list[tuple[int, str]]] = {}
    for row in rows:
        ids.setdefault(label(row, with_k=False), []).append((row["k"], config_id(row)))
    return {name: f"{name} [{', '.join(f'{i} k={k}' for k, i in sorted(found))}]" for name, found in ids.items()}


def budgets_for(per_query: pa.Table) -> list[int]:
    most = max(per_query["retrieved_tokens"].to_pylist() or [0])
    budgets = [256]
    while budgets[-1] < max(most, 2048):
        budgets.append(budgets[-1] * 2)
    return budgets


def choose(summary: list[dict], config: dict | None) -> dict:
    """The configuration that failure analysis looks at: the one given, else the best by span F1 (by
    doc_ndcg_at_k for a run over document gold, which has no span metrics)."""
    if config:
        matches = [r for r in summary if all(str(r[k]) == str(v) for k, v in config.items())]
        if not matches:
            raise InputError(no_match(config, summary, "the run"))
        return matches[0]
    best = best_rows(summary)
    return best["span_f1"] if "span_f1" in best else best["doc_ndcg_at_k"]


def section_summary(run: dict, settings: dict, summary: list[dict], models: list[dict] | None = None) -> str:
    facts = [
        ("experiment", escape(run["experiment"])),
        ("run", escape(run["run_id"])),
        ("started", _when(run["started_at"])),
        ("finished", _when(run["finished_at"])),
        ("trigger", escape(run["trigger"])),
        ("models", escape(", ".join(split_list(settings.get("model"))))),
        (
            "backend",
            escape(settings.get("backend") or "torch")
            + (" (int8: vectors differ from the model's own)" if settings.get("quantize") == "int8" else "")
            + (
                f" in {escape(settings['precision'])} (vectors differ from fp32's in the last digits)"
                if settings.get("precision") not in (None, "fp32")
                else ""
            )
            + (f" · {escape(settings['backend_auto'])}" if settings.get("backend_auto") else ""),
        ),
        ("retrievers", escape(", ".join(split_list(settings.get("retriever")) or ["dense"]))),
        (
            "indexes",
            escape(", ".join(split_list(settings.get("index")) or ["exact"]))
            + "".join(
                f" · {escape(lib)} {escape(str(v))}" for lib, v in (settings.get("index_libraries") or {}).items()
            ),
        ),
        (
            "corpora",
            escape(str(settings.get("corpus_dir", "")))
            + (" (" + escape(", ".join(settings.get("corpus") or [])) + ")" if settings.get("corpus") else ""),
        ),
        ("gold set", escape(str(settings.get("questions", ""))) + _gold_kind(settings)),
        ("retrieval", "each question from its own corpus" if settings.get("own_corpus") else "pooled over all corpora"),
        (
            "duplicates",
            "credit: a reference's identical copies count as found"
            if settings.get("duplicates") == "credit"
            else "positional: only a reference's gold position counts",
        ),
        ("corpus fingerprint", f"<code>{escape(str(run['corpus_fingerprint']))}</code>"),
        ("gold fingerprint", f"<code>{escape(str(run['gold_fingerprint']))}</code>"),
        ("model fingerprint", f"<code>{escape(str(run['model_fingerprint']))}</code>"),
        ("texts embedded", str(run["texts_embedded"])),
        ("chunkeval", escape(str(run["chunkeval_version"]))),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    rows = []
    for m, r in best_rows(summary).items():
        micro = _num(r.get(f"{m}_micro")) if (m in MICRO or m in MICRO_F1) else "–"
        rows.append([escape(m), label_html(r), f"{_num(r[f'{m}_mean'])} ± {_num(r[f'{m}_std'])}", micro])
    speed = (
        _table(
            ["model", "fingerprint", "texts embedded", "texts per second", "tokens sent", "cost", "identity"],
            [
                [
                    escape(m["model"]),
                    f"<code>{escape(str(m['model_fingerprint'])[:16])}</code>",
                    str(m["texts_embedded"]),
                    _num(m["texts_per_second"], 1),
                    "–" if m.get("tokens") is None else str(m["tokens"]),
                    _num(m.get("cost"), 4),
                    _identity(m.get("generation")),
                ]
                for m in models
            ],
        )
        if models
        else ""
    )
    return (
        f'<section id="summary"><h2>1. Summary</h2><dl>{dl}</dl>{speed}'
        f"<h3>Best configuration per metric</h3>{_table(['metric', 'best configuration', 'macro mean ± std', 'micro'], rows)}</section>"
    )


def section_grid(
    summary: list[dict], tied: dict[str, set[tuple]] | None = None, power: dict | None = None, watched=()
) -> str:
    """The whole grid; with `power` (`chunkeval.analysis.power.against_best`), each cell's smallest detectable
    difference from the best (none for a metric at its ceiling), and a sentence per `watched` metric on what the
    gold set can tell."""
    best = best_rows(summary)
    tied = tied or {}
    power = power or {}
    approximate = any(approximate_index(r.get("index")) for r in summary)
    metrics = [m for m in METRICS if m not in INDEX_METRICS or approximate]  # else every value is 1 or –
    metrics = [m for m in metrics if m in best]  # a metric no configuration measured (the other gold's) is no column
    shown = shown_keys(summary)  # reranker and candidates where a row reranks
    header = ["configuration"] + [escape(k) for k in shown] + [escape(m) for m in metrics] + ["truncated chunks"]
    rows = []
    for r in summary:
        row = [(label_html(r), label(r))]  # as every command names it: its label and config_id
        row += [(escape("–" if r[k] is None else str(r[k])), r[k]) for k in shown]
        for m in metrics:
            mark = best.get(m) is r
            text = f"{_num(r[f'{m}_mean'])}<small> ± {_num(r[f'{m}_std'])}</small>"
            if r.get(f"{m}_ci_low") is not None:
                text += f"<br><small>[{_num(r[f'{m}_ci_low'])}, {_num(r[f'{m}_ci_high'])}]</small>"
            measurable = m in power and not at_ceiling(power[m].ceiling)  # at a ceiling an mde misleads: named below
            smallest = power[m].by_config.get(tuple(r[k] for k in CONFIG_KEYS)) if measurable else None
            if smallest is not None:
                text += f'<br><small title="smallest difference from the best these questions detect">mde {_num(smallest, 2)}</small>'
            if mark:
                text = f'<span class="best" title="best {escape(m)}">★ {text}</span>'
            elif tuple(r[k] for k in CONFIG_KEYS) in tied.get(m, ()):
                text = f'<span class="tied" title="not significantly worse than the best">≈ {text}</span>'
            row.append((text, r[f"{m}_mean"]))
        row.append((str(r.get("truncated_chunks", "")), r.get("truncated_chunks", 0)))
        rows.append(row)
    return (
        f'<section id="grid"><h2>2. Results of the whole grid</h2><p>Macro mean ± sample standard deviation over queries, '
        f"and the 95 % bootstrap interval of the mean. ★ marks the best value of each metric, ≈ a configuration tied with it "
        f"(not significantly worse: paired randomisation test, Holm over the metric's comparisons, α = 0.05). Click a column to sort.</p>"
        f"{_folded(len(rows), f'All {len(rows)} configurations', _scroll(_table(header, rows, 'sortable')))}"
        f"{_power_note(power, watched)}</section>"
    )


def _power_note(power: dict, watched) -> str:
    """What the gold set can tell, one sentence per watched metric, its ceiling named where it is at one
    (`chunkeval.report.terminal.detectable_sentence`, as the terminal says it)."""
    lines = [detectable_sentence(m, power[m]) for m in watched if m in power]
    if not lines:
        return ""
    items = "".join(f"<li>{escape(line[0].upper() + line[1:])}.</li>" for line in lines)
    return (
        "<p>What the gold set can tell: <em>mde</em> is the smallest difference from the best configuration that a "
        "two-sided paired t-test at α = 0.05 detects with power 0.8, given the spread of the per-query differences "
        "(docs/statistics.md); the sentences take the configuration of median mde, and the questions needed are per "
        f"comparison, before Holm.</p><ul>{items}</ul>"
    )


def section_tradeoff(summary: list[dict]) -> str:
    column = lambda key: np.array([r[key] for r in summary], dtype=float)  # noqa: E731
    intervals = all(
        r.get("span_recall_ci_low") is not None and r.get("span_precision_ci_low") is not None for r in summary
    )
    svg = charts.tradeoff(
        [label(r, with_id=True) for r in summary],
        column("span_recall_mean"),
        column("span_precision_mean"),
        column("retrieved_tokens_mean"),
        (column("span_recall_ci_low"), column("span_recall_ci_high")) if intervals else None,
        (column("span_precision_ci_low"), column("span_precision_ci_high")) if intervals else None,
    )
    return (
        '<section id="tradeoff"><h2>3. Precision against recall</h2><p>Each point is a configuration; its colour is the '
        "number of tokens it retrieves per query. The red line is the Pareto front: no configuration beats those on both. "
        "Grey bars are the 95 % bootstrap intervals of both means (runs recorded before chunkeval kept intervals have none)."
        f"</p>{svg}</section>"
    )


def section_distributions(summary: list[dict], per_query: pa.Table) -> str:
    best = best_rows(summary)
    groups = {}
    for title, metric in (("best precision", "span_precision"), ("best recall", "span_recall"), ("best F1", "span_f1")):
        r = best[metric]
        mask = np.ones(per_query.num_rows, dtype=bool)
        for k in CONFIG_KEYS:
            mask &= np.asarray(per_query[k].to_pylist(), dtype=object) == r[k]
        groups[f"{title}\n{label(r, with_id=True)}"] = {
            m: np.asarray(per_query[m].to_pylist(), dtype=float)[mask] for m in BOX_METRICS
        }
    return (
        '<section id="distributions"><h2>4. Distributions per query</h2><p>Box plots of per-query span precision, recall and F1 '
        f"for the best-precision, best-recall and best-F1 configurations (triangles are means).</p>{charts.boxplots(groups, BOX_METRICS)}</section>"
    )


def section_budget(per_query: pa.Table, chosen: dict | None = None) -> str:
    budgets = budgets_for(per_query)
    curves, intervals = budget_table(per_query, budgets)
    mine = label(chosen, with_k=False) if chosen else None  # a curve's name is its label (no space), then its ids
    picked = next((name for name in curves if name.split(" [")[0] == mine), None)
    return (
        '<section id="budget"><h2>7. Recall against retrieved-token budget</h2><p>For each chunking, the span recall a query '
        "reaches with the largest evaluated k whose retrieved chunks fit the budget: which chunking finds the most of the answer "
        f"for the same context cost. The chunkings on or nearest the front (the best at some budget), at most "
        f"{charts.BUDGET_LINES}, and the chosen one are drawn as lines with the 95 % bootstrap intervals of their means "
        "(queries resampled) as bands; the others are one grey band from their lowest to their highest recall.</p>"
        f"{charts.budget_curves(budgets, curves, intervals, picked)}</section>"
    )


TREND_RUNS = 365  # completed runs the trend section draws: a year of nightly runs


def the_verdict(wh: Warehouse, experiment: str, threshold: float, alpha: float = 0.05) -> tuple[dict | None, str]:
    """The one verdict (`chunkeval.analysis.regression.verdict`) of the experiment's newest run (its slices'
    too) over the watched metrics, as the `trend-report` flow and `trend --fail-on-regression` give it (None
    while there is no run to compare with), or why there is none (HTML). A damaged results file is a fault,
    raised."""
    try:
        return wh.verdict(experiment, list(REGRESSION_METRICS), threshold, alpha=alpha), ""
    except Fault:
        raise
    except InputError as exc:  # a pinned baseline scored with another duplicates setting
        return None, f"<p>No regression check: {escape(str(exc))}.</p>"


def regression_check(
    wh: Warehouse, experiment: str, threshold: float, alpha: float = 0.05, found: tuple[dict | None, str] | None = None
) -> tuple[list[dict], str]:
    """The regressions of the experiment's newest run (`the_verdict`, or its answer `found`), and why there is
    none, if so (nothing comparable among them)."""
    found, problem = found if found is not None else the_verdict(wh, experiment, threshold, alpha)
    if found is None:
        return [], problem
    if found["verdict"] == NOTHING_COMPARABLE:
        return [], f"<p><strong>{escape(verdict_line(found))}</strong></p>"
    return found["regressions"], ""


def trend_series(
    wh: Warehouse, experiment: str, configs: list[dict], metrics, falls: list[dict]
) -> tuple[dict, dict[int, str], list[tuple], dict[str, str]]:
    """What `charts.trend_lines` draws of `configs` over the experiment's completed runs: per metric measured
    (a metric no run of them measured, such as doc_ndcg_at_k under span gold, has no panel), a line per
    configuration with the regressions of `falls` marked; the marks of the runs whose gold set changed; the
    runs `(started_at, run_id)` by position; and what changed at each run."""
    # the lines drawn are of the whole gold set
    fell = {(f["metric"], label(f, with_id=True)) for f in falls if not f.get("slice")}
    newest = falls[0]["run_id"] if falls else None
    rows = wh.history(experiment, list(REGRESSION_METRICS), configs, TREND_RUNS)
    runs = list(dict.fromkeys((r["started_at"], r["run_id"]) for r in rows))
    position = {run_id: i + 1 for i, (_, run_id) in enumerate(runs)}
    by_config: dict[tuple, list[dict]] = {}
    for r in rows:
        by_config.setdefault(tuple(r[k] for k in CONFIG_KEYS), []).append(r)
    series: dict[str, dict] = {}
    searched = any(approximate_index(c.get("index")) for c in configs)
    for metric in metrics:
        if metric in INDEX_METRICS and not searched:
            continue  # 1 for exact search, absent for bm25: no line worth drawing
        if not any(r[f"{metric}_mean"] is not None for r in rows):
            continue  # never measured (the other kind of gold): no empty panel
        for c in configs:
            mine = by_config.get(tuple(c[k] for k in CONFIG_KEYS), [])
            name = label(c, with_id=True)
            bad = [r["run_id"] == newest and (metric, name) in fell for r in mine]
            series.setdefault(metric, {})[name] = (
                [position[r["run_id"]] for r in mine],
                [r[f"{metric}_mean"] for r in mine],
                bad,
                [r[f"{metric}_ci_low"] for r in mine],
                [r[f"{metric}_ci_high"] for r in mine],
            )
    changed = wh.input_changes(experiment)
    marks = {position[run_id]: what for run_id, what in changed.items() if run_id in position}
    return series, marks, runs, changed


def section_trend(
    wh: Warehouse,
    experiment: str,
    configs: list[dict],
    threshold: float,
    alpha: float = 0.05,
    checked: tuple[list[dict], str] | None = None,
) -> str:
    """The trend of the chosen configurations, and the regressions of `checked` (`regression_check`'s
    answer; asked here when not given)."""
    falls, problem = checked if checked is not None else regression_check(wh, experiment, threshold, alpha)
    series, marks, runs, changed = trend_series(wh, experiment, configs, REGRESSION_METRICS, falls)
    newest = falls[0]["run_id"] if falls else None
    flagged = [
        [
            escape(f["metric"]),
            label_html(f),
            escape(f.get("slice") or "all questions"),
            escape(f["run_id"]),
            escape(f["reference_run_id"]),
            _num(f["before"]),
            _num(f["after"]),
            _num(f["change"]),
            f"{f['p_adjusted']:.2g}",
            str(f["n_queries"]),
            escape("; ".join(f"{w['query_id']} {w['before']:.2f}→{w['after']:.2f}" for w in f["worst"][:3])),
        ]
        for f in falls
    ]
    legend = _table(
        ["#", "run", "started", "note"],
        [
            [str(i + 1), escape(run_id), _when(when), escape(changed.get(run_id, ""))]
            for i, (when, run_id) in enumerate(runs)
        ],
    )
    diff = (wh.root / "reports" / experiment / f"diff-{falls[0]['reference_run_id']}-{newest}.html") if falls else None
    link = (
        f'<p>What changed: <a href="{escape(diff.as_uri())}">the diff of run {escape(falls[0]["reference_run_id"])} '
        f"→ {escape(newest)}</a> (the questions that got worse and what they retrieved before and after).</p>"
        if diff is not None and diff.is_file()
        else ""
    )
    header = ["metric", "configuration", "slice", "run", "against", "before", "after", "change", "adjusted p",
              "queries", "lost most"]  # fmt: skip
    shown = REGRESSIONS_SHOWN  # the largest falls; the rest folded, so that many regressions do not bury the page
    more = (
        f"<details><summary>{len(flagged) - shown} more regression(s)</summary>{_table(header, flagged[shown:])}</details>"
        if len(flagged) > shown
        else ""
    )
    regress = problem or link + (
        _table(header, flagged[:shown]) + more
        if flagged
        else f"<p>No regression in the newest completed run: no paired fall beyond {threshold} that is "
        f"significant at {alpha} after the step-down max-T.</p>"
    )
    return (
        f'<section id="trend"><h2>8. Trend over the completed runs</h2><p>Macro means of the chosen configurations over the last '
        f"{TREND_RUNS} completed runs (at most) with "
        f"their 95 % bootstrap intervals as bands; red crosses mark the regressions of the newest completed run: a paired "
        f"fall of more than {threshold} against the pinned baseline (else the previous run scored the same way), significant "
        f"at {alpha} after the step-down max-T over paired sign flips of the questions, taken jointly over the "
        f"configurations × metrics checked (and × the slices of the gold set large enough to test, where the run "
        f"recorded slices). A dashed grey line marks a run whose gold set changed since the "
        f"run before it (`chunkeval gold update`, or an edited file).</p>{charts.trend_lines(series, marks)}"
        f"<h3>Regressions</h3>{regress}{_production(wh, experiment)}<details><summary>Runs</summary>{legend}"
        "</details></section>"
    )


def _production(wh: Warehouse, experiment: str) -> str:
    """Production beside the runs: its judged results (docs/traces.md), where any was recorded."""
    rows = wh.production_trend(experiment, "ndcg_at_k")
    if not rows:
        return ""
    body = [
        [escape(r["result_id"]), _when(r["recorded_at"]), str(r["n_queries"]), _num(r["production"]),
         _num(r["best_offline"]), escape(r["best_label"] or ""), escape(r["judged_by"] or "")]
        for r in rows
    ]  # fmt: skip
    return (
        "<h3>Production beside the runs</h3><p>nDCG at k of what production retrieved for a sample of its own queries, "
        "and of the best offline configuration on the same queries, judged by a model (`chunkeval traces compare`, "
        "the production deployment): not the gold set's numbers above.</p>"
        + _table(["result", "recorded", "queries", "production", "best offline", "configuration", "judged by"], body)
    )
