"""Presenting results: result files written whole or not at all, and tables for the terminal."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.analysis.comparisons import TIE_NOTE, decision, ties, untested_line
from chunkeval.analysis.power import against_best
from chunkeval.errors import InputError
from chunkeval.files import check_output
from chunkeval.stats.power import CEILING, at_ceiling
from chunkeval.visible import TERMINAL_WIDTH, fold, visible
from chunkeval.vocabulary import (
    CONFIG_KEYS,
    DEFAULT_LABEL,
    DOC_METRICS,
    INDEX_METRICS,
    LABEL_DEFAULTS,
    METRICS,
    MIN_SLICE_QUERIES,
    NO_RERANKER,
    OPTIONAL_KEYS,
    RERANK_KEYS,
    SPAN_METRICS,
    approximate_index,
    check_metrics,
    config_id,
    config_label,
    slice_name,
    split_flags,
)

TABLE_SUFFIXES = (".csv", ".parquet")
# the headline metrics of a run's kind of gold: what its summary shows unless --metrics or --wide says otherwise
SPAN_HEADLINE = ("span_recall", "span_iou", "recall_at_k", "mrr")
DOC_HEADLINE = ("doc_ndcg_at_k", "doc_recall_at_k", "mrr")
RANK_HEADLINE = ("ndcg_at_k", "recall_at_k", "mrr")  # of ranked-list files (`compare --run-file`): rank metrics only
TERMINAL_METRICS = SPAN_HEADLINE


def check_table_path(path: Path, inputs=()) -> Path:
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise InputError("output must end in .csv or .parquet", path)
    return check_output_path(path, inputs)


def check_output_path(path: Path, inputs=()) -> Path:
    """An output file that `chunkeval.files.check_output` allows (checked before any work starts): the path
    to write, resolved."""
    return check_output(path, inputs)


def side_label(side: dict) -> str:
    """A side of a comparison as tables name it: its run file, or its configuration's label and config_id (and
    its run where two runs are compared)."""
    if side.get("run_file"):
        return str(side["run_file"])
    run = f" @{side['run_id']}" if side.get("run_id") and len(side) > 1 else ""
    if not any(k in side for k in CONFIG_KEYS):
        return str(side.get("run_id", side))
    return f"{config_label(side)} [{config_id(side)}]{run}"


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
    """The headline metrics of the run's kind of gold (SPAN_HEADLINE; DOC_HEADLINE where no span metric was
    measured but a document one was), and the index metrics where an approximate index was searched."""
    headline = DOC_HEADLINE if measured(summary, DOC_METRICS) and not measured(summary, SPAN_METRICS) else SPAN_HEADLINE
    return tuple(shown_metrics(summary, headline + INDEX_METRICS))


def shown_metrics(summary: pa.Table, metrics=METRICS) -> list[str]:
    """`metrics`, with the index metrics only where an approximate index was searched (else they are 1 or –)."""
    return [m for m in metrics if m not in INDEX_METRICS or approximate(summary)]


def chosen_metrics(summary: pa.Table, metrics=None, wide: bool = False) -> tuple[str, ...]:
    """The metrics a table shows: `metrics` (`--metrics`, names or one comma-separated string) where given, every
    metric measured (`--wide`), else `default_metrics`. JSON and CSV outputs keep every metric whatever this says."""
    if metrics:
        return tuple(check_metrics(split_flags(metrics, "--metrics")))
    if wide:
        return tuple(m for m in shown_metrics(summary) if measured(summary, [m]))
    return default_metrics(summary)


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


def comparison_table(results: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """Comparisons of one metric as a table within 120 columns where labels allow: (where, header, rows). A side
    every row shares (the best, a run) is named once in `where` (`within run R, each against the best: label
    [config_id] (mean 0.982)`), not in each row; each row has the other side, the queries where they differ, the
    means, the difference a − b with its 95 % interval, the adjusted p and its verdict, and the MDE."""
    a, b = [[dict(r[side]) for r in results] for side in ("a", "b")]
    runs = {side: {s.get("run_id") for s in sides} for side, sides in (("a", a), ("b", b))}
    where = ""
    if not any(s.get("run_file") for s in a) and len(runs["a"]) == len(runs["b"]) == 1 and None not in runs["a"]:
        ra, rb = runs["a"].pop(), runs["b"].pop()
        where = f" within run {ra}" if ra == rb else f" (a: run {ra}, b: run {rb})"
        for s in a + b:
            s.pop("run_id")
    one_best = len(results) > 1 and len({side_label(s) for s in a}) == 1
    same = all(side_label(x) == side_label(y) for x, y in zip(a, b))  # two runs: each configuration against itself
    if one_best:
        where += f", each against the best: {side_label(a[0])} (mean {results[0]['mean_a']:.3f})"
    sides = [[side_label(y)] for y in b] if one_best or same else [[side_label(x), side_label(y)] for x, y in zip(a, b)]
    queries = len({r["n_queries"] for r in results}) > 1
    header = (
        (["configuration"] if one_best or same else ["a", "b"])
        + (["queries"] if queries else [])
        + (["mean"] if one_best else ["mean a", "mean b"])
        + ["difference [95 % CI]", "p Holm", "MDE"]
    )
    rows = [
        [
            *side,
            *([str(r["n_queries"])] if queries else []),
            *([] if one_best else [f"{r['mean_a']:.3f}"]),
            f"{r['mean_b']:.3f}",
            f"{r['mean_diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
            f"{r['p_adjusted']:.4f} {'yes' if r['significant'] else 'no'}",
            "–" if r["mde"] != r["mde"] else f"{r['mde']:.3f}",
        ]
        for side, r in zip(sides, results)
    ]
    return where, header, rows


def regression_message(f: dict) -> str:
    """One alert: the configuration, the fall and its evidence, the queries that lost the most."""
    worst = "; ".join(
        f"{w['query_id']} {w['question'][:50]!r} {w['before']:.2f}→{w['after']:.2f}" for w in f.get("worst", [])[:3]
    )
    unmatched = f", {f['n_unmatched']} query row(s) in one run only left out" if f.get("n_unmatched") else ""
    where = f" in slice {f['slice']}" if f.get("slice") else ""
    return (
        f"chunkeval: regression: {f['metric']} of {config_label(f)} [{config_id(f)}]{where} fell from {f['before']:.3f} to {f['after']:.3f} "
        f"(run {f['run_id']} against {f['reference_run_id']}; {f['n_queries']} paired queries, adjusted p = "
        f"{f['p_adjusted']:.2g}{unmatched}); lost most: {worst}"
    )


def format_slices(by_slice: pa.Table) -> str:
    """The slices of a gold set and their queries, those too small to test marked (folded at 120 columns; the
    first 16 slices named, the rest counted: the report and the view slice_summary have them all)."""
    sizes: dict[str, int] = {}
    for row in by_slice.select(["slice_column", "slice_value", "n_queries"]).to_pylist():
        name = slice_name(row["slice_column"], row["slice_value"])
        sizes[name] = max(sizes.get(name, 0), row["n_queries"])
    shown = listed([f"{name} {n}{'*' if n < MIN_SLICE_QUERIES else ''}" for name, n in sizes.items()], 16)
    small = (
        f"; * too small to test (fewer than {MIN_SLICE_QUERIES} queries)"
        if any(n < MIN_SLICE_QUERIES for n in sizes.values())
        else ""
    )
    return fold(f"slices (queries): {shown or 'none'}{small}")


def _difference(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.2g}"


def power_sentence(n: int, metric: str, mde: float, needed: dict, ceiling: float | None = None) -> str:
    """ "with 28 questions, a difference in span recall under 0.08 cannot be told from noise; …": what a gold
    set can tell (`chunkeval.stats.power`: a two-sided paired t-test at α 0.05 with power 0.8, per comparison).
    At a ceiling (`ceiling`, the share of values at or near 1, over half) the ceiling is named instead: there
    the differences are mostly 0 and the power figures would promise what the metric cannot show."""
    if ceiling_note(ceiling):
        return f"with {n} questions, {metric.replace('_', ' ')} is {ceiling_note(ceiling)}"
    if mde is None or math.isnan(mde):
        return f"with {n} question(s), {metric.replace('_', ' ')} has no spread of differences to measure"
    sizes = list(needed)
    counts = ["–" if needed[d] is None else str(needed[d]) for d in sizes]
    return (
        f"with {n} questions, a difference in {metric.replace('_', ' ')} under {_difference(mde)} cannot be told "
        f"from noise; differences of {_and(sizes)} would need {_and(counts)} questions"
    )


def detectable_sentence(metric: str, d) -> str:
    """`power_sentence` of one metric of `chunkeval.analysis.power.against_best` (`d`, its median configuration),
    its ceiling named where it is at one, as `tie_lines` names it: the HTML report's sentence and the terminal's
    line come from the one share and the one test (`chunkeval.stats.power.at_ceiling`)."""
    return power_sentence(d.n, metric, d.mde, d.n_needed, d.ceiling)


def ceiling_note(share: float | None) -> str:
    """'…at or near 1 (≥ 0.95) for 90 % of its values: a ceiling…', or '' below the ceiling."""
    if not at_ceiling(share):
        return ""
    return (
        f"at or near 1 (≥ {CEILING}) for {share:.0%} of its values, a ceiling effect: the gold set is too easy to "
        "tell configurations apart on it (power figures would mislead)"
    )


def tie_lines(power: dict, tied: dict[str, set], n_configs: dict[str, int]) -> tuple[dict[str, set], list[str]]:
    """The ties worth starring and one line per metric that says more: where more than half of the
    configurations tie with the best (`tied`, of `n_configs` that measured it), that the gold set cannot
    separate them, the smallest difference it detects (the median configuration's MDE) and the questions the
    largest observed difference needs. The metrics at their ceiling share one line, said once for them all
    (`ceiling_line`), where the first of them would have its own. Stars stay only where ties are a minority.
    `power`: `chunkeval.analysis.power.against_best`."""
    starred, lines, ceilings = {}, [], {}
    for m, configs in tied.items():
        d, n = power.get(m), n_configs.get(m, 0)
        majority = n > 1 and len(configs) * 2 > n
        if not majority:
            starred[m] = configs
        if d is not None and ceiling_note(d.ceiling):
            if not ceilings:
                lines.append("")  # the place of the one ceiling line
            ceilings[m] = d.ceiling
        elif majority and d is not None:
            needed = "–" if d.largest_needed is None else str(d.largest_needed)
            lines.append(
                f"{m}: {len(configs)} of {n} configurations tie with the best: the gold set cannot separate them "
                f"(with {d.n} questions it detects differences of {_difference(d.mde)} or more; the largest observed, "
                f"{_difference(d.largest)}, would need {needed} questions)"
            )
        elif majority:
            lines.append(
                f"{m}: {len(configs)} of {n} configurations tie with the best: the gold set cannot separate them"
            )
    if ceilings:
        lines[lines.index("")] = ceiling_line(ceilings)
    return starred, lines


def ceiling_line(shares: dict[str, float]) -> str:
    """One line for every metric at its ceiling (its share of values at or near 1, by metric): the cause said once,
    `span_recall and mrr: at or near 1 (≥ 0.95) for 92% and 93% of their values, a ceiling effect: …`."""
    if len(shares) == 1:
        ((metric, share),) = shares.items()
        return f"{metric}: {ceiling_note(share)}"
    percents = _and([f"{share:.0%}" for share in shares.values()])
    return (
        f"{_and(list(shares))}: at or near 1 (≥ {CEILING}) for {percents} of their values, a ceiling effect: the gold "
        "set is too easy to tell configurations apart on them (power figures would mislead)"
    )


def summary_ties(per_query: pa.Table, metrics, alpha: float = 0.05, known: dict | None = None):
    """`tie_lines` of a run's per-query rows: the configurations to star per metric, and the lines to print
    (`known`: decisions already made, by metric, whose tests are the ties')."""
    tied = ties(per_query, metrics, alpha, known)
    counts = {}
    for m in tied:
        rows = per_query.filter(pc.is_valid(per_query[m])) if per_query[m].null_count else per_query
        present = [k for k in CONFIG_KEYS if k in rows.column_names]
        counts[m] = len(set(zip(*(rows[k].to_pylist() for k in present)))) if rows.num_rows else 0
    starred, lines = tie_lines(against_best(per_query, list(tied), alpha), tied, counts)
    untested = untested_line(tied.untested)  # a gold set too small to test: said, never the command's failure
    return starred, lines + ([untested] if untested else [])


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


LEFT = ("config_id",)  # columns left-aligned whatever their cells start with


def listed(names: list[str], shown: int = 8) -> str:
    """`a, b, c` of at most `shown` names, the rest counted: `a, b, … and 12 more`."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f", … and {more} more" if more > 0 else "")


FOLDED_LABEL = 20  # the narrowest first column `format_rows` folds a label into


def fold_label(text: str, width: int) -> list[str]:
    """A label in lines of at most `width` characters, each ending after a `/` or before a space where it can (a
    part longer than a line is cut)."""
    import re

    lines = [""]
    for part in re.findall(r"[^/ ]*(?:/|\s+|$)", text):
        while part:
            if lines[-1] and len(lines[-1]) + len(part.rstrip()) > width:
                lines.append("")
            room = width - len(lines[-1])
            lines[-1] += part[:room]
            part = part[room:].lstrip() if len(part) > room else ""
    return [line.rstrip() for line in lines if line.strip()] or [""]


NUMERIC_START = set("0123456789+-–.")  # a cell that starts so is a number (or none, –): aligned right
NAMED = re.compile(r".+ \[[0-9a-f]{8}\]")  # a cell naming a configuration by its label and config_id
SHORTEST_NAMED = 24  # the narrowest a label column other than the first is shortened to


def _shortened_labels(header, rows, widths, width):
    """A table wider than `width` with columns of labels beyond the first (`compare --all-pairs`: a and b) has those
    labels shortened in their middle, each keeping its start and its config_id (`bm25/recursive_…/k=1 [f6a1f0b4]`),
    as far as makes it fit; the first column folds after (`format_rows`)."""
    over = sum(widths) + 2 * (len(widths) - 1) - width
    named = [i for i in range(1, len(header)) if all(NAMED.fullmatch(r[i]) or not r[i] for r in rows)]
    fixed = sum(w for i, w in enumerate(widths) if i and i not in named) + 2 * (len(widths) - 1)
    share = (width - fixed) // (1 + len(named))  # the first column and each of these alike, as far as they need
    for i in named:
        if over <= 0:
            break
        cut = min(over, widths[i] - max(SHORTEST_NAMED, share, len(header[i])))
        if cut > 0:
            widths[i] -= cut
            over -= cut
            keep = widths[i] - 12  # the label's start, then `…` and ` [config_id]` (11)
            for r in rows:
                if len(r[i]) > widths[i]:
                    r[i] = r[i][:keep] + "…" + r[i][-11:]
    return rows, widths


def format_rows(header: list[str], rows: list[list[str]], width: int | None = TERMINAL_WIDTH) -> str:
    """Aligned columns, numbers to the right, within `width` columns (None: as wide as it is; `--wide`). A table
    wider than that has its label columns beyond the first shortened (`_shortened_labels`) and its first column (a
    configuration's label) folded after a `/` onto lines of its own (indented), down to `FOLDED_LABEL` columns; one
    that still cannot fit (many `--metrics`, a `sql` query of many columns) is cut into panels of as many columns as
    fit, one under the other, each beginning with the first column (and a config_id beside it)."""
    return _aligned(header, [[visible(c) for c in r] for r in rows], width)


def _panels(header: list[str], widths: list[int], width: int) -> list[list[int]]:
    """The columns of each panel of a table too wide for `width`: what names a row in each (a configuration's label
    and config_id where the table has them, wherever they are: a `sql` query's `SELECT *` puts them last; else the
    first column, and a config_id after it), then as many of the others, in order, as fit."""
    if "label" in header and header[0] != "configuration":
        keys = [header.index(k) for k in ("label", "config_id") if k in header]
    else:
        keys = [0, 1] if len(header) > 1 and header[1] in LEFT else [0]
    base = sum(min(widths[k], width // 2) for k in keys) + 2 * (len(keys) - 1)
    groups, current, used = [], [], base
    for i in (i for i in range(len(header)) if i not in keys):
        if current and used + 2 + widths[i] > width:
            groups.append(current)
            current, used = [], base
        current.append(i)
        used += 2 + widths[i]
    return [keys + g for g in [*groups, current] if g]


def _aligned(header: list[str], rows: list[list[str]], width: int | None) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    if width is not None and rows:
        rows, widths = _shortened_labels(header, rows, widths, width)
    rest = sum(widths[1:]) + 2 * (len(widths) - 1)
    room = (width or 0) - rest
    fold = width is not None and widths[0] + rest > width and room >= max(FOLDED_LABEL, len(header[0]))
    if width is not None and widths[0] + rest > width and not fold:
        panels = _panels(header, widths, width)
        if len(panels) > 1:
            return "\n\n".join(
                _aligned([header[i] for i in g], [[r[i] for i in g] for r in rows], width) for g in panels
            )
    if fold:
        widths[0] = room
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for r in rows:
        first = fold_label(r[0], room)[0] if fold and len(r[0]) > room else r[0]
        cells = [first, *r[1:]]
        lines.append(
            "  ".join(
                c.rjust(w) if i and c[:1] in NUMERIC_START and header[i] not in LEFT else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()
        )
        rest_of_label = r[0][len(first) :].strip()
        lines += [f"  {part}" for part in fold_label(rest_of_label, room - 2)] if rest_of_label else []
    return "\n".join(lines)


def format_table(table: pa.Table, width: int | None = TERMINAL_WIDTH) -> str:
    """Any Arrow table (a query's rows) as aligned text within `width` columns (`format_rows`): numbers to six
    significant digits, NULL as –."""

    def cell(value) -> str:
        if isinstance(value, float) and not math.isnan(value):
            return f"{value:.6g}"
        text = _cell(value)
        if width is not None and len(text) > width // 2:  # a long text (a run's settings) cut, as the note says
            cut.append(True)
            return text[: width // 2 - 1] + "…"
        return text

    cut: list[bool] = []
    text = format_rows(table.column_names, [[cell(v) for v in row.values()] for row in table.to_pylist()], width)
    return text + (
        f"\n(values longer than {width // 2} characters cut; --wide, --json or --csv show them whole)" if cut else ""
    )


def format_summary(
    summary: pa.Table,
    keys: list[str],
    metrics=None,
    micro: bool = False,
    intervals: bool = False,
    tied: dict[str, set[tuple]] | None = None,
    width: int | None = TERMINAL_WIDTH,
) -> str:
    """One line per configuration (within `width` columns; None: `--wide`): its label and config_id (`chunkeval.vocabulary.config_label`), then each
    metric (`metrics`; default `default_metrics`) as mean±std (macro), its micro value, or (`intervals`) the 95 %
    bootstrap interval of its macro mean, `low–high` (as narrow as mean±std: the means are the macro table's). A
    macro cell of a configuration in `tied[metric]` (tied with the best, `tie_lines`) ends with `*`."""
    suffix = "_micro" if micro else "_ci_low" if intervals else "_mean"
    if metrics is None:
        metrics = default_metrics(summary)
    present = [m for m in metrics if f"{m}{suffix}" in summary.column_names]
    extra = [k for k in keys if k not in CONFIG_KEYS]  # a rollup's duplicates and n_runs
    rows = []
    for rec in summary.to_pylist():
        row = [config_label(rec), config_id(rec)] + [_cell(rec[k]) for k in extra]
        for m in present:
            if micro:
                row.append(_cell(rec[f"{m}_micro"]))
            elif intervals:
                low, high = _cell(rec[f"{m}_ci_low"]), _cell(rec[f"{m}_ci_high"])
                row.append("–" if "–" in (low, high) else f"{low}–{high}")
            else:
                row.append(f"{_cell(rec[f'{m}_mean'])}±{_cell(rec[f'{m}_std'])}")
            if tied and not micro and tuple(rec[k] for k in keys) in tied.get(m, ()):
                row[-1] += "*"
        rows.append(row)
    return format_rows(["configuration", "config_id"] + extra + present, rows, width)


# what the label `default` means, said under a table that shows it (a label leaves out every key at its default)
DEFAULT_NOTE = (
    "default: every key at its default: "
    + ", ".join(f"{k} {v}" for k, v in LABEL_DEFAULTS.items() if v is not None and k not in OPTIONAL_KEYS)
    + " (a label names only the keys that differ)"
)


def _present(table: pa.Table) -> list[str]:
    return [k for k in CONFIG_KEYS if k in table.column_names]


def decision_line(d: dict | None) -> str | None:
    """The decision a run supports on its headline metric (`chunkeval.analysis.comparisons.decision`), in one
    sentence: the best configuration, by how much it beats the default and the runner-up (the paired interval and
    adjusted p), and how many configurations the gold set cannot tell from it."""
    if d is None:
        return None

    def side(what: str, o: dict) -> str:
        told = "" if o["significant"] else ": not told apart"
        label = config_label(o["config"])
        return (
            f"{what}{'' if label == DEFAULT_LABEL else ' ' + label} [{config_id(o['config'])}] {o['mean']:.3f} by "
            f"{o['difference']:+.3f} [{o['ci_low']:+.3f}, {o['ci_high']:+.3f}], adjusted p {o['p_adjusted']:.2g}{told}"
        )

    same = d["default"] and d["runner_up"] and d["runner_up"]["config"] == d["default"]["config"]
    sides = [side("the default (also the runner-up)" if same else "the default", d["default"])] if d["default"] else []
    if d["runner_up"] and not same:
        sides.append(side("the runner-up", d["runner_up"]))
    tied = (
        f"the gold set cannot tell {d['tied']} of the other {d['n_configs'] - 1} from it"
        if d["tied"]
        else f"every other configuration is significantly worse (of {d['n_configs']})"
    )
    return (
        f"decision on {d['metric']}: best {config_label(d['best'])} [{config_id(d['best'])}] {d['mean']:.3f}"
        + (f"; it beats {' and '.join(sides)}" if sides else "")
        + f"; {tied} (paired randomisation tests, Holm, alpha {d['alpha']:g}; {d['n_queries']} questions)"
    )


def summary_block(summary: pa.Table, per_query: pa.Table, metrics=None, wide: bool = False) -> str:
    """What `run`, `sweep` and `report` print of a run's macro means: the table of `chosen_metrics`, the ties
    starred where they are a minority, and a line per metric whose ties or ceiling say more (`tie_lines`)."""
    shown = chosen_metrics(summary, metrics, wide)
    made = decision(per_query, shown[0]) if shown else None
    tied, lines = summary_ties(per_query, shown, known={shown[0]: made} if made else None)
    decided = decision_line(made)
    lead = [textwrap.fill(decided, TERMINAL_WIDTH, subsequent_indent="  "), ""] if decided else []
    out = [format_summary(summary, CONFIG_KEYS, metrics=shown, tied=tied, width=None if wide else TERMINAL_WIDTH)]
    if any(tied.values()):
        out.append(TIE_NOTE.format(alpha=0.05))
    if any(config_label(row) == DEFAULT_LABEL for row in summary.select(_present(summary)).to_pylist()):
        out.append(DEFAULT_NOTE)
    notes = [textwrap.fill(line, TERMINAL_WIDTH, subsequent_indent="  ") for line in out[1:] + lines]
    return "\n".join(lead + out[:1] + notes)


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
