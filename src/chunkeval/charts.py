"""Charts of the HTML report, drawn with matplotlib and returned as inline SVG text.

Text is drawn as paths (matplotlib's default), so an SVG holds no fonts to fetch and no user text
as markup.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "chunkeval", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False})


def to_svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (higher is better), by x ascending."""
    order = np.lexsort((-y, -x))  # x descending, then y descending
    front, best = [], -np.inf
    for i in order:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return np.asarray(front[::-1], dtype=np.int64)


def tradeoff(labels: list[str], recall: np.ndarray, precision: np.ndarray, tokens: np.ndarray,
             recall_ci: tuple[np.ndarray, np.ndarray] | None = None, precision_ci: tuple[np.ndarray, np.ndarray] | None = None) -> str:
    """Precision against recall per configuration, coloured by retrieved tokens, Pareto front drawn; with
    the intervals given, each point carries error bars (the 95 % bootstrap intervals of both means)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    if recall_ci is not None and precision_ci is not None:
        ax.errorbar(recall, precision, xerr=np.abs(np.vstack(recall_ci) - recall), yerr=np.abs(np.vstack(precision_ci) - precision),
                    fmt="none", ecolor="#9aa5b1", elinewidth=0.7, zorder=1)
    points = ax.scatter(recall, precision, c=tokens, s=36, cmap="viridis", edgecolors="black", linewidths=0.4)
    front = pareto_front(recall, precision)
    ax.step(recall[front], precision[front], where="post", color="crimson", linewidth=1.4, label="Pareto front")
    for i in front:
        ax.annotate(labels[i], (recall[i], precision[i]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    fig.colorbar(points, ax=ax, label="retrieved tokens per query (mean)")
    ax.set_xlabel("span recall (macro mean)")
    ax.set_ylabel("span precision (macro mean)")
    ax.legend(loc="upper right", frameon=False)
    return to_svg(fig)


def boxplots(groups: dict[str, dict[str, np.ndarray]], metrics: list[str]) -> str:
    """One panel per metric: a box per configuration of that metric's per-query values."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.4 * len(metrics), 3.6), sharey=True)
    for ax, metric in zip(np.atleast_1d(axes), metrics):
        names = list(groups)
        ax.boxplot([groups[n][metric] for n in names], showmeans=True)
        ax.set_xticks(range(1, len(names) + 1), names, fontsize=6.5)
        ax.set_title(metric)
        ax.set_ylim(-0.03, 1.03)
    return to_svg(fig)


def gold_histograms(refs_per_question: dict[str, np.ndarray], ref_tokens: dict[str, np.ndarray]) -> str:
    """References per question, and reference length in tokens, one series per corpus."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    corpora = list(refs_per_question)
    top = max((int(v.max()) for v in refs_per_question.values() if len(v)), default=1)
    left.hist([refs_per_question[c] for c in corpora], bins=np.arange(0.5, top + 1.5), label=corpora, stacked=True)
    left.set_xlabel("references per question")
    left.set_ylabel("questions")
    longest = max((int(v.max()) for v in ref_tokens.values() if len(v)), default=1)
    right.hist([ref_tokens[c] for c in corpora], bins=np.linspace(0, longest + 1, 25), label=corpora, stacked=True)
    right.set_xlabel("reference length (cl100k_base tokens)")
    right.set_ylabel("references")
    right.legend(frameon=False, fontsize=7)
    return to_svg(fig)


def band(ax, x, low, high, color) -> None:
    """A 95 % interval as a light band around its line (gaps where a point has none)."""
    low = np.asarray([np.nan if v is None else v for v in low], dtype=np.float64)
    high = np.asarray([np.nan if v is None else v for v in high], dtype=np.float64)
    if np.isfinite(low).any():
        ax.fill_between(x, low, high, color=color, alpha=0.18, linewidth=0)


def budget_curves(budgets: list[int], curves: dict[str, np.ndarray], intervals: dict[str, tuple] | None = None) -> str:
    """Span recall reachable within each retrieved-token budget, one line per chunking; with the
    intervals given, each line carries its 95 % bootstrap band."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, values in curves.items():
        (line,) = ax.plot(budgets, values, marker="o", markersize=3, linewidth=1.2, label=label)
        if intervals and label in intervals:
            band(ax, budgets, *intervals[label], line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_xlabel("retrieved-token budget per query")
    ax.set_ylabel("span recall (mean over queries)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(frameon=False, fontsize=6.5, ncol=2)
    return to_svg(fig)


def trend_lines(series: dict[str, dict[str, tuple[list, list, list]]]) -> str:
    """Small multiples: per metric, a line per configuration over the runs with its 95 % bootstrap band;
    regressions as red crosses. `series[metric][config] = (x positions, values, regressed flags, lows, highs)`."""
    metrics = list(series)
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for label, (x, y, bad, low, high) in series[metric].items():
            dots = dict(marker="o", markersize=3) if len(x) <= 60 else {}  # a long history reads as a line
            (line,) = ax.plot(x, y, linewidth=1.1, label=label, **dots)
            band(ax, x, low, high, line.get_color())
            bad = np.asarray(bad, dtype=bool)
            if bad.any():
                ax.scatter(np.asarray(x)[bad], np.asarray(y)[bad], marker="x", s=60, color="red", zorder=3)
        ax.set_title(metric)
        ax.set_xlabel("completed run")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False, fontsize=7, bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    return to_svg(fig)
