"""Charts of the HTML report, written as inline SVG by chunkeval itself.

A chart is a few hundred SVG elements: axes with tick labels, lines, markers, bars and bands. Writing
them directly takes milliseconds where a plotting library took seconds to import and draw, and a
reader can hover over a point to see its configuration (each marker carries a `<title>`). Every piece
of user text (configuration labels, corpus names) is escaped, and the page fetches nothing: text uses
the reader's own system font.

The statistics drawn (box-plot quartiles and whiskers, histogram counts, the Pareto front) are plain
functions here, tested against matplotlib's and numpy's definitions.
"""

from __future__ import annotations

import math
import textwrap
from html import escape

import numpy as np

from chunkeval.report.svg import (
    CHAR_WIDTH,
    CYCLE,
    INK,
    VIRIDIS,
    Axes,
    Svg,
    _f,
    legend,
    nice_ticks,
    padded,
    text_width,
    tick_label,
    viridis,
)


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (higher is better), by x ascending."""
    order = np.lexsort((-y, -x))  # x descending, then y descending
    front, best = [], -np.inf
    for i in order:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return np.asarray(front[::-1], dtype=np.int64)


CROWDED = 20  # configurations beyond which a chart shows the front and the best few, the rest muted
BEST_FEW = 5
MUTED_POINT = "#c9d0d8"


def featured(recall: np.ndarray, precision: np.ndarray, front: np.ndarray, most: int = CROWDED) -> np.ndarray:
    """The points a trade-off chart draws in colour: all of them up to `most`; beyond, those of the Pareto
    `front` and the `BEST_FEW` others of highest F1 of the two means (the rest are muted)."""
    if len(recall) <= most:
        return np.arange(len(recall))
    f1 = np.where(recall + precision > 0, 2 * recall * precision / np.maximum(recall + precision, 1e-300), 0.0)
    others = [i for i in np.argsort(-f1, kind="stable") if i not in set(front.tolist())]
    return np.asarray(sorted({*front.tolist(), *others[:BEST_FEW]}), dtype=np.int64)


def tradeoff(
    labels: list[str],
    recall: np.ndarray,
    precision: np.ndarray,
    tokens: np.ndarray,
    recall_ci: tuple[np.ndarray, np.ndarray] | None = None,
    precision_ci: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """Precision against recall per configuration, coloured by retrieved tokens, Pareto front drawn; with
    the intervals given, each point carries error bars (the 95 % bootstrap intervals of both means)."""
    recall, precision, tokens = (np.asarray(a, dtype=np.float64) for a in (recall, precision, tokens))
    svg = Svg(760, 470, "Span precision against span recall per configuration")
    xs = np.concatenate([recall, *(recall_ci or ())])
    ys = np.concatenate([precision, *(precision_ci or ())])
    ax = Axes(70, 20, 560, 390, padded(xs), padded(ys))
    ax.frame(svg, "span recall (macro mean)", "span precision (macro mean)")
    front = pareto_front(recall, precision)
    shown = featured(recall, precision, front)
    if recall_ci is not None and precision_ci is not None:
        px, py = ax.px(recall), ax.py(precision)
        for x, y, x0, x1, y0, y1 in zip(
            px[shown], py[shown], *(a[shown] for a in (ax.px(recall_ci[0]), ax.px(recall_ci[1]))),
            *(a[shown] for a in (ax.py(precision_ci[0]), ax.py(precision_ci[1]))),
        ):  # fmt: skip
            svg.add(
                f'<path class="errorbar" d="M{_f(x0)} {_f(y)}H{_f(x1)}M{_f(x)} {_f(y0)}V{_f(y1)}" stroke="#9aa5b1" stroke-width="0.8"/>'
            )
    fx, fy = ax.px(recall[front]), ax.py(precision[front])
    if len(front):
        steps = f"M{_f(fx[0])} {_f(fy[0])}" + "".join(f"H{_f(x)}V{_f(y)}" for x, y in zip(fx[1:], fy[1:]))
        svg.add(f'<path class="pareto" d="{steps}" fill="none" stroke="crimson" stroke-width="1.4"/>')
    lo, hi = (float(tokens.min()), float(tokens.max())) if len(tokens) else (0.0, 1.0)
    colors = viridis((tokens - lo) / (hi - lo) if hi > lo else np.full(len(tokens), 0.5))
    points = list(zip(labels, ax.px(recall), ax.py(precision), recall, precision, tokens, colors))
    featured_set = set(shown.tolist())
    for i in [i for i in range(len(points)) if i not in featured_set] + shown.tolist():  # the muted ones below
        name, x, y, r, p, t, c = points[i]
        tip = f"{name}: recall {r:.3f}, precision {p:.3f}, {t:.0f} tokens"
        if i in featured_set:
            svg.circle(x, y, 4.5, c, "#000", tip)
        else:
            svg.circle(x, y, 3, MUTED_POINT, "none", tip)
    # (left, right, baseline) of what is written inside the plot: the legend first, then the featured labels
    placed: list[tuple[float, float, float]] = [(ax.left + ax.width - 95, ax.left + ax.width, ax.top + 10)]
    named = [i for i in shown if i not in set(front.tolist())] if len(labels) > CROWDED else []  # the best few
    for i, x, y in zip([*front, *named], [*fx, *ax.px(recall[named])], [*fy, *ax.py(precision[named])]):
        width, left_side = text_width(labels[i], 8), x > ax.left + 0.7 * ax.width
        x0 = x - 5 - width if left_side else x + 5
        y = y - 5
        while any(abs(y - b) < 10 and x0 < right and left < x0 + width for left, right, b in placed):
            y += 10
        if y > ax.top + ax.height - 4 or x0 < ax.left or x0 + width > ax.left + ax.width:
            continue  # no room inside the plot: dropped (the point keeps its tooltip)
        placed.append((x0, x0 + width, y))
        svg.text(x - 5 if left_side else x + 5, y, labels[i], 8, "end" if left_side else "start")
    legend(svg, ax.left + ax.width - 95, ax.top + 10, [("Pareto front", "crimson", "line")])
    # the colour bar: the token scale as a gradient with its ticks
    bar_x, bar_top, bar_h = ax.left + ax.width + 24, ax.top, ax.height
    stops = "".join(
        f'<stop offset="{i / (len(VIRIDIS) - 1):.3f}" stop-color="{c}"/>' for i, c in enumerate(reversed(VIRIDIS))
    )
    svg.add(f'<defs><linearGradient id="tokens-scale" x1="0" y1="0" x2="0" y2="1">{stops}</linearGradient></defs>')
    svg.add(
        f'<rect x="{_f(bar_x)}" y="{_f(bar_top)}" width="12" height="{_f(bar_h)}" fill="url(#tokens-scale)" stroke="{INK}" stroke-width="0.5"/>'
    )
    for v in nice_ticks(lo, hi, 5) if hi > lo else [lo]:
        y = bar_top + bar_h * (1 - ((v - lo) / (hi - lo) if hi > lo else 0.5))
        svg.line(bar_x + 12, y, bar_x + 16, y, INK, 0.8)
        svg.text(bar_x + 19, y + 3, tick_label(v), 9, "start")
    svg.text(bar_x + 62, bar_top + bar_h / 2, "retrieved tokens per query (mean)", 10.5, rotate=True)
    return svg.render()


def box_stats(values: np.ndarray, whis: float = 1.5) -> dict:
    """Tukey's box plot of one sample: quartiles (linear interpolation), whiskers at the most extreme
    values within `whis` × IQR of the box, the values beyond them (fliers) and the mean."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    iqr = q3 - q1
    inside = v[(v >= q1 - whis * iqr) & (v <= q3 + whis * iqr)]
    low = min(float(inside.min()), float(q1)) if len(inside) else float(q1)
    high = max(float(inside.max()), float(q3)) if len(inside) else float(q3)
    return {
        "q1": float(q1),
        "med": float(med),
        "q3": float(q3),
        "whislo": low,
        "whishi": high,
        "fliers": v[(v < low) | (v > high)],
        "mean": float(v.mean()),
    }


def boxplots(groups: dict[str, dict[str, np.ndarray]], metrics: list[str]) -> str:
    """One panel per metric: a box per configuration of that metric's per-query values."""
    names = list(groups)
    panel, gap, left, top = 250.0, 30.0, 50.0, 26.0
    slot = panel / max(len(names), 1)
    wrapped = [
        "\n".join(textwrap.fill(part, max(int(slot / (8 * CHAR_WIDTH)), 8)) for part in n.split("\n")) for n in names
    ]
    label_rows = max((w.count("\n") + 1 for w in wrapped), default=1)
    svg = Svg(
        left + len(metrics) * (panel + gap),
        top + 230 + 22 + label_rows * 9.5 + 6,
        "Per-query distributions of the best configurations",
    )
    for j, metric in enumerate(metrics):
        ax = Axes(left + j * (panel + gap), top, panel, 230, (0.5, len(names) + 0.5), (-0.03, 1.03))
        ax.frame(svg, title=metric, xticks=[], ylabels=j == 0)
        for i, (name, text) in enumerate(zip(names, wrapped)):
            values = np.asarray(groups[name][metric], dtype=np.float64)
            cx = float(ax.px(i + 1))
            svg.text(cx, ax.top + ax.height + 14, text, 8)
            if not len(values):
                continue
            s = box_stats(values)
            half = min(slot * 0.25, 22)
            y1, ymed, y3, ylo, yhi = (float(ax.py(s[k])) for k in ("q1", "med", "q3", "whislo", "whishi"))
            tip = (
                f"{name.replace(chr(10), ' ')} · {metric}: median {s['med']:.3f}, quartiles {s['q1']:.3f}–{s['q3']:.3f}, "
                f"mean {s['mean']:.3f}, {len(values)} queries"
            )
            svg.line(cx, ylo, cx, y1, INK, 0.9)
            svg.line(cx, y3, cx, yhi, INK, 0.9)
            svg.line(cx - half / 2, ylo, cx + half / 2, ylo, INK, 0.9)
            svg.line(cx - half / 2, yhi, cx + half / 2, yhi, INK, 0.9)
            svg.rect(cx - half, y3, 2 * half, y1 - y3, "#ffffff", INK, tip)
            svg.line(cx - half, ymed, cx + half, ymed, "#ff7f0e", 1.6)
            my = float(ax.py(s["mean"]))
            svg.add(
                f'<path class="mean" d="M{_f(cx)} {_f(my - 4)}L{_f(cx + 4)} {_f(my + 3)}L{_f(cx - 4)} {_f(my + 3)}Z" fill="#2ca02c"/>'
            )
            for y in ax.py(s["fliers"]):
                svg.circle(cx, y, 2.5, INK, hollow=True)
    return svg.render()


def stacked_histogram(
    svg: Svg, ax: Axes, series: list[np.ndarray], bins: np.ndarray, names: list[str], unit: str
) -> None:
    """Bars of np.histogram counts, one colour per series, stacked."""
    base = np.zeros(len(bins) - 1)
    for k, (values, name) in enumerate(zip(series, names)):
        counts = np.histogram(values, bins=bins)[0]
        for lo, hi, b, c in zip(bins[:-1], bins[1:], base, counts):
            if c:
                x0, x1, y0, y1 = float(ax.px(lo)), float(ax.px(hi)), float(ax.py(b)), float(ax.py(b + c))
                svg.rect(
                    x0,
                    y1,
                    x1 - x0,
                    y0 - y1,
                    CYCLE[k % len(CYCLE)],
                    "#ffffff",
                    f"{name}: {int(c)} {unit} in [{tick_label(lo)}, {tick_label(hi)})",
                )
        base = base + counts


def gold_histograms(refs_per_question: dict[str, np.ndarray], ref_tokens: dict[str, np.ndarray]) -> str:
    """References per question, and reference length in tokens, one series per corpus."""
    corpora = list(refs_per_question)
    top = max([int(v.max()) for v in refs_per_question.values() if len(v)] + [1])  # at least one bin, always
    longest = max([int(v.max()) for v in ref_tokens.values() if len(v)] + [1])
    panels = [
        (
            "references per question",
            "questions",
            [np.asarray(refs_per_question[c]) for c in corpora],
            np.arange(0.5, top + 1.5),
        ),
        (
            "reference length (cl100k_base tokens)",
            "references",
            [np.asarray(ref_tokens[c]) for c in corpora],
            np.linspace(0, longest + 1, 25),
        ),
    ]
    width, left = 340.0, 60.0
    svg = Svg(2 * (width + left) + 150, 290, "References per question and reference lengths, per corpus")
    for j, (xlabel, ylabel, series, bins) in enumerate(panels):
        totals = sum((np.histogram(s, bins=bins)[0] for s in series), np.zeros(len(bins) - 1))
        ax = Axes(
            left + j * (width + left + 20),
            20,
            width,
            220,
            (float(bins[0]), float(bins[-1])),
            (0, max(float(totals.max()), 1.0) * 1.05),
        )
        integer = j == 0
        xticks = np.arange(1, top + 1) if integer and top <= 12 else None
        ax.frame(svg, xlabel, ylabel, xticks=xticks)
        stacked_histogram(svg, ax, series, bins, corpora, ylabel)
    legend(svg, 2 * (width + left) + 30, 30, [(c, CYCLE[k % len(CYCLE)], "box") for k, c in enumerate(corpora)])
    return svg.render()


def segments(finite: np.ndarray) -> list[np.ndarray]:
    """Runs of consecutive True positions: where a band or a line has values to draw."""
    idx = np.flatnonzero(finite)
    return [run for run in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1) if len(run)] if len(idx) else []


def band(svg: Svg, ax: Axes, x, low, high, color) -> None:
    """A 95 % interval as a light band around its line (gaps where a point has none)."""
    x = np.asarray(x, dtype=np.float64)
    low = np.asarray([np.nan if v is None else v for v in low], dtype=np.float64)
    high = np.asarray([np.nan if v is None else v for v in high], dtype=np.float64)
    for run in segments(np.isfinite(low) & np.isfinite(high)):
        px = ax.px(x[run])
        svg.polygon(np.concatenate([px, px[::-1]]), np.concatenate([ax.py(high[run]), ax.py(low[run])[::-1]]), color)


def series_line(svg: Svg, ax: Axes, x, y, color, name: str, dots: bool, what: str = "") -> None:
    """A line through the finite points, with a hoverable dot at each point when asked."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray([np.nan if v is None else v for v in y], dtype=np.float64)
    px, py = ax.px(x), ax.py(y)
    for run in segments(np.isfinite(y)):
        svg.polyline(px[run], py[run], color)
    if dots:
        for xi, yi, a, b in zip(px, py, x, y):
            if np.isfinite(b):
                svg.circle(xi, yi, 2.6, color, title=f"{name}: {b:.4f} at {what}{tick_label(a)}")


BUDGET_LINES = 5  # chunkings drawn as lines (those on or nearest the front), besides the one the reader picked
OTHERS = "#9aa5b1"


def budget_lines(curves: dict[str, np.ndarray], chosen: str | None = None, most: int = BUDGET_LINES) -> list[str]:
    """The chunkings worth a line of their own: those on the Pareto front of the budget chart (best span
    recall at some budget), then those nearest it (smallest largest shortfall from the best), at most
    `most`, and the reader's `chosen` one; in the order of `curves`."""
    names = list(curves)
    if len(names) <= most + 1:
        return names
    values = np.nan_to_num(np.vstack([np.asarray(curves[n], dtype=np.float64) for n in names]), nan=0.0)
    shortfall = (values.max(axis=0) - values).max(axis=1)  # 0 for a curve that is best at every budget
    on_front = (values >= values.max(axis=0) - 1e-12).any(axis=1)
    order = sorted(range(len(names)), key=lambda i: (not on_front[i], shortfall[i], names[i]))
    keep = set(order[:most]) | ({names.index(chosen)} if chosen in curves else set())
    return [n for i, n in enumerate(names) if i in keep]


def budget_curves(
    budgets: list[int],
    curves: dict[str, np.ndarray],
    intervals: dict[str, tuple] | None = None,
    chosen: str | None = None,
) -> str:
    """Span recall reachable within each retrieved-token budget: a line (with its 95 % bootstrap band) for
    each chunking on or near the Pareto front and for the `chosen` one; the others summarised as one grey
    band from their lowest to their highest recall at each budget."""
    drawn = budget_lines(curves, chosen)
    rest = [n for n in curves if n not in drawn]
    names = [n + (" (chosen)" if n == chosen else "") for n in drawn]  # as the legend writes them
    names += [f"{len(rest)} other chunkings (their range)"] if rest else []
    columns = 3
    entry_width = max((text_width(n, 9) for n in names), default=0) + 30
    rows = math.ceil(len(names) / columns)
    svg = Svg(
        max(760, 70 + columns * entry_width),
        20 + 300 + 50 + rows * 14.4 + 10,
        "Span recall against retrieved-token budget",
    )
    lo, hi = (min(budgets), max(budgets)) if budgets else (1, 2)
    pad = 2 ** (math.log2(hi / lo) * 0.04) if hi > lo else 2.0
    ax = Axes(70, 20, 640, 300, (lo / pad, hi * pad), (-0.02, 1.02), xlog=True)
    ax.frame(
        svg,
        "retrieved-token budget per query",
        "span recall (mean over queries)",
        xticks=budgets,
        xtick_labels=[str(b) for b in budgets],
    )
    if rest:
        values = np.vstack([np.asarray(curves[n], dtype=np.float64) for n in rest])
        some = np.isfinite(values).any(axis=0)  # a budget where none of them was measured has no band
        low = np.where(some, np.nanmin(np.where(np.isfinite(values), values, np.inf), axis=0), np.nan)
        high = np.where(some, np.nanmax(np.where(np.isfinite(values), values, -np.inf), axis=0), np.nan)
        px = ax.px(np.asarray(budgets, dtype=np.float64))
        svg.add(
            f'<g class="others"><title>{len(rest)} other chunkings: span recall from '
            + escape(", ".join(f"{a:.2f}–{b:.2f}" if s else "–" for a, b, s in zip(low, high, some)))
            + " at the budgets</title>"
        )
        for run in segments(some):
            svg.polygon(
                np.concatenate([px[run], px[run][::-1]]),
                np.concatenate([ax.py(high[run]), ax.py(low[run])[::-1]]),
                OTHERS,
                0.35,
            )
        svg.add("</g>")
    colors = {n: CYCLE[k % len(CYCLE)] for k, n in enumerate(drawn)}
    for name in drawn:
        if intervals and name in intervals:
            band(svg, ax, budgets, *intervals[name], colors[name])
        series_line(svg, ax, budgets, curves[name], colors[name], name, dots=True, what="budget ")
    entries = [(shown, colors[n], "line") for n, shown in zip(drawn, names)]
    if rest:
        entries.append((names[-1], OTHERS, "box"))
    legend(svg, 70, 20 + 300 + 58, entries, columns, entry_width)
    return svg.render()


def trend_lines(
    series: dict[str, dict[str, tuple[list, list, list]]],
    marks: dict[int, str] | None = None,
    title: str = "Trend of the chosen configurations over the completed runs",
) -> str:
    """Small multiples: per metric, a line per configuration over the runs with its 95 % bootstrap band;
    regressions as red crosses. `series[metric][config] = (x positions, values, regressed flags, lows, highs)`.
    `marks`: x position → what changed at that run (a gold set changed), a dashed grey line in every panel."""
    metrics = list(series)
    cols = max(min(3, len(metrics)), 1)
    rows = max(-(-len(metrics) // cols), 1)
    panel_w, panel_h, gap_x, gap_y, left, top = 300.0, 170.0, 60.0, 72.0, 50.0, 26.0
    configs = list(dict.fromkeys(c for m in metrics for c in series[m]))
    colors = {c: CYCLE[k % len(CYCLE)] for k, c in enumerate(configs)}
    entry_width = max((text_width(c, 9) for c in configs), default=0) + 30
    legend_cols = max(1, min(3, int((left + cols * (panel_w + gap_x)) // max(entry_width, 1))))
    legend_top = top + rows * (panel_h + gap_y) - 10
    svg = Svg(
        max(left + cols * (panel_w + gap_x), legend_cols * entry_width + left),
        legend_top + math.ceil(len(configs) / legend_cols) * 14.4 + 10,
        title,
    )
    for j, metric in enumerate(metrics):
        r, c = divmod(j, cols)
        xs = [x for x, *_ in series[metric].values() if len(x)]
        last = max((max(x) for x in xs), default=1)
        ax = Axes(
            left + c * (panel_w + gap_x),
            top + r * (panel_h + gap_y),
            panel_w,
            panel_h,
            (0.5, last + 0.5),
            (-0.02, 1.02),
        )
        ax.frame(svg, "completed run", title=metric, xticks=nice_ticks(1, last, 5, integer=True) if last > 1 else [1])
        for x, what in (marks or {}).items():
            mx = float(ax.px([x])[0])
            svg.add(
                f'<line class="mark" x1="{_f(mx)}" y1="{_f(ax.top)}" x2="{_f(mx)}" y2="{_f(ax.top + ax.height)}" '
                f'stroke="#888" stroke-width="1.2" stroke-dasharray="4 3"><title>run {x}: {escape(what)}</title></line>'
            )
        for name, (x, y, bad, low, high) in series[metric].items():
            band(svg, ax, x, low, high, colors[name])
            series_line(svg, ax, x, y, colors[name], name, dots=len(x) <= 60, what="run ")
            bad = np.asarray(bad, dtype=bool)
            if bad.any():
                for cx, cy in zip(
                    ax.px(np.asarray(x, dtype=np.float64)[bad]), ax.py(np.asarray(y, dtype=np.float64)[bad])
                ):
                    svg.add(
                        f'<path class="regression" d="M{_f(cx - 5)} {_f(cy - 5)}L{_f(cx + 5)} {_f(cy + 5)}M{_f(cx - 5)} {_f(cy + 5)}'
                        f'L{_f(cx + 5)} {_f(cy - 5)}" stroke="red" stroke-width="1.8"><title>regression: {escape(name)}</title></path>'
                    )
    legend(svg, left, legend_top, [(name, colors[name], "line") for name in configs], legend_cols, entry_width)
    return svg.render()
