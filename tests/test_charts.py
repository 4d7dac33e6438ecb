"""The report's SVG charts: well-formed, escaped, and drawn where the data says.

Box-plot statistics are held to matplotlib's `boxplot_stats` (the oracle), histogram bars to numpy's
`histogram`, and every marker's pixel position is mapped back to the value it stands for.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from matplotlib.cbook import boxplot_stats

from chunkeval.report import charts

NS = "{http://www.w3.org/2000/svg}"
EVIL = '<b>fixed & "quoted"</b>'


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    assert root.tag == f"{NS}svg" and root.get("viewBox")
    return root


def titles(root: ET.Element, tag: str) -> list[tuple[ET.Element, str]]:
    return [(e, e.find(f"{NS}title").text) for e in root.iter(f"{NS}{tag}") if e.find(f"{NS}title") is not None]


def test_nice_ticks_are_round_and_inside():
    assert charts.nice_ticks(0, 1).tolist() == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert charts.nice_ticks(0.13, 0.87).tolist() == [0.2, 0.4, 0.6, 0.8]
    assert charts.nice_ticks(-0.02, 1.02).tolist() == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert charts.nice_ticks(1, 365).tolist() == [100, 200, 300]
    assert charts.nice_ticks(0, 23).tolist() == [0, 5, 10, 15, 20]
    assert charts.nice_ticks(0.5, 0.5).tolist() == [0.5]
    assert charts.nice_ticks(1, 3, integer=True).tolist() == [1, 2, 3]  # run numbers: whole steps


@pytest.mark.parametrize("seed", range(30))
def test_box_statistics_equal_matplotlibs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    values = (
        rng.choice([0.0, 1.0, *rng.random(5)], n)
        if seed % 3 == 0
        else np.concatenate([rng.random(n), rng.random(2) * 8 - 4])
    )
    ours, theirs = charts.box_stats(values), boxplot_stats(values)[0]
    for key in ("q1", "med", "q3", "whislo", "whishi", "mean"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key
    assert np.sort(ours["fliers"]).tolist() == pytest.approx(np.sort(theirs["fliers"]).tolist())


def test_tradeoff_points_sit_at_their_values_and_labels_are_text():
    labels = ["a", EVIL, "c", "d"]
    recall, precision = np.array([0.2, 0.5, 0.9, 0.4]), np.array([0.6, 0.5, 0.1, 0.3])
    tokens = np.array([100.0, 200.0, 400.0, 300.0])
    svg = charts.tradeoff(labels, recall, precision, tokens)
    assert "<b>" not in svg and "&lt;b&gt;fixed &amp; &quot;quoted&quot;&lt;/b&gt;" in svg
    root = parse(svg)
    points = titles(root, "circle")
    assert [t.split(":")[0] for _, t in points] == labels  # the parser gives the user's text back, as text
    xs = np.array([float(e.get("cx")) for e, _ in points])
    ys = np.array([float(e.get("cy")) for e, _ in points])
    # a linear map from data to pixels (y grows downwards): fit it on two points, check it on all
    ax = np.polyfit(recall, xs, 1), np.polyfit(precision, ys, 1)
    assert ax[0][0] > 0 and ax[1][0] < 0
    assert np.abs(np.polyval(ax[0], recall) - xs).max() < 0.1 and np.abs(np.polyval(ax[1], precision) - ys).max() < 0.1
    # the colour follows the tokens: fewest is viridis' first colour, most its last
    assert points[0][0].get("fill") == charts.VIRIDIS[0] and points[2][0].get("fill") == charts.VIRIDIS[-1]
    # the Pareto front (indices 0, 1, 2 by recall) is the step path, its points labelled
    front = charts.pareto_front(recall, precision).tolist()
    assert front == [0, 1, 2]
    path = root.find(f".//{NS}path[@class='pareto']").get("d")
    corners = [(float(x), float(y)) for x, y in re.findall(r"M([\d.]+) ([\d.]+)", path)]
    assert corners == [(xs[0], ys[0])] and path.count("H") == 2 and path.count("V") == 2
    annotations = [e.text for e in root.iter(f"{NS}text")]
    assert "d" not in annotations and EVIL in annotations  # only the front is labelled


def test_tradeoff_error_bars_span_the_intervals():
    recall, precision, tokens = np.array([0.5, 0.8, 0.9]), np.array([0.4, 0.3, 0.1]), np.array([100.0, 200.0, 400.0])
    svg = charts.tradeoff(
        ["a", "b", "c"], recall, precision, tokens, (recall - 0.05, recall + 0.04), (precision - 0.02, precision + 0.03)
    )
    root = parse(svg)
    bars = [e.get("d") for e in root.iter(f"{NS}path") if e.get("class") == "errorbar"]
    assert len(bars) == 3
    cx = [float(e.get("cx")) for e, _ in titles(root, "circle")]
    per_unit = (cx[1] - cx[0]) / 0.3  # pixels per unit of recall
    x0, _, x1 = map(float, re.match(r"M([\d.]+) ([\d.]+)H([\d.]+)", bars[0]).groups())
    assert (x1 - x0) / per_unit == pytest.approx(0.09, abs=1e-3)


def test_box_plots_draw_the_quartiles():
    rng = np.random.default_rng(7)
    groups = {
        f"best precision\n{EVIL}": {"m": rng.random(40)},
        "best recall\nx": {"m": np.r_[rng.random(30), 5.0]},
        "empty": {"m": np.array([])},
    }
    root = parse(charts.boxplots(groups, ["m"]))
    boxes = titles(root, "rect")
    assert len(boxes) == 2  # the empty group draws no box
    for (rect, tip), name in zip(boxes, list(groups)[:2], strict=True):  # the empty group is last
        s = charts.box_stats(groups[name]["m"])
        assert f"median {s['med']:.3f}" in tip and f"quartiles {s['q1']:.3f}–{s['q3']:.3f}" in tip
        assert float(rect.get("height")) > 0
    assert len([e for e in root.iter(f"{NS}circle") if e.get("fill") == "none"]) >= 1  # the outlier 5.0 is a flier
    assert len([e for e in root.iter(f"{NS}path") if e.get("class") == "mean"]) == 2


def test_histogram_bars_count_what_numpy_counts():
    per_question = {"a": np.array([1, 1, 2, 3]), EVIL: np.array([1, 2]), "none": np.array([], dtype=int)}
    tokens = {
        "a": np.array([10, 20, 30, 35, 40, 200, 7]),
        EVIL: np.array([15, 16, 400]),
        "none": np.array([], dtype=int),
    }
    root = parse(charts.gold_histograms(per_question, tokens))
    bars = titles(root, "rect")
    counted = {}
    for _, tip in bars:
        name, rest = tip.rsplit(": ", 1)
        counted.setdefault((name, rest.split(" ")[1]), 0)
        counted[(name, rest.split(" ")[1])] += int(rest.split(" ")[0])
    for name in ("a", EVIL):
        assert counted[(name, "questions")] == len(per_question[name])
        assert counted[(name, "references")] == len(tokens[name])
    # one bar per non-empty (corpus, bin), the bins of the panel's np.histogram
    bins = np.linspace(0, 401, 25)
    expected = sum(int((np.histogram(tokens[c], bins)[0] > 0).sum()) for c in tokens)
    assert len([t for _, t in bars if "references in" in t]) == expected


def test_budget_lines_pass_through_their_values_with_gaps_for_missing_bands():
    budgets = [256, 512, 1024, 2048]
    curves = {"fixed 200/0": np.array([0.1, 0.3, 0.6, 0.8]), EVIL: np.array([0.2, 0.25, 0.5, 0.9])}
    intervals = {
        "fixed 200/0": ([0.05, None, 0.5, 0.7], [0.15, None, 0.7, 0.9]),
        EVIL: ([0.1, 0.2, 0.4, 0.8], [0.3, 0.3, 0.6, 1.0]),
    }
    root = parse(charts.budget_curves(budgets, curves, intervals))
    dots = titles(root, "circle")
    assert len(dots) == 8
    xs = np.array([float(e.get("cx")) for e, _ in dots[:4]])
    assert np.diff(np.diff(xs)) == pytest.approx([0, 0], abs=0.15)  # doublings are equal steps: log 2 axis
    ys = np.array([float(e.get("cy")) for e, _ in dots])
    values = np.concatenate(list(curves.values()))
    fit = np.polyfit(values, ys, 1)
    assert np.abs(np.polyval(fit, values) - ys).max() < 0.1
    assert len(list(root.iter(f"{NS}polygon"))) == 3  # the first band has a gap at 512: two pieces, then one


def test_trend_marks_regressions_and_draws_long_histories_as_lines():
    x = list(range(1, 101))
    y = list(np.linspace(0.9, 0.8, 100))
    series = {
        m: {
            "cfg": (x, y, [False] * 99 + [m == "span_recall"], [v - 0.01 for v in y], [v + 0.01 for v in y]),
            EVIL: (x[:5], y[:5], [False] * 5, [None] * 5, [None] * 5),
        }
        for m in ("span_recall", "span_precision", "mrr", "ndcg")
    }
    svg = charts.trend_lines(series)
    root = parse(svg)
    crosses = [e for e in root.iter(f"{NS}path") if e.get("class") == "regression"]
    assert len(crosses) == 1
    assert len(titles(root, "circle")) == 4 * 5  # 100 runs draw no dots; the 5-run series does
    assert len(list(root.iter(f"{NS}polygon"))) == 4  # one band per panel; the series without intervals has none
    assert "&lt;b&gt;" in svg and "<b>" not in svg


def numbers(root: ET.Element) -> list[float]:
    """Every coordinate and size the SVG draws with (attributes and path data), as floats."""
    names = ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height")
    found = [e.get(n) for e in root.iter() for n in names if e.get(n) is not None]
    for e in root.iter():
        found += re.findall(r"-?[\d.]+(?:e-?\d+)?|nan|inf", " ".join(e.get(a, "") for a in ("d", "points")), re.I)
    return [float(v) for v in found]


def test_empty_inputs_still_give_a_valid_chart():
    """No data (or one point, a range of width zero): axes and title, nothing drawn for data that is
    not there, and no coordinate that is not a finite number."""
    empty = parse(charts.gold_histograms({"a": np.array([], dtype=int)}, {"a": np.array([], dtype=int)}))
    assert root_title(empty) == "References per question and reference lengths, per corpus"
    assert titles(empty, "rect") == []  # no bar: no question, no reference
    assert "a" in [e.text for e in empty.iter(f"{NS}text")]  # the corpus is still named in the legend
    no_runs = parse(charts.trend_lines({"span_recall": {}}))
    assert "span_recall" in [e.text for e in no_runs.iter(f"{NS}text")]  # the panel, empty
    assert not [*no_runs.iter(f"{NS}circle"), *no_runs.iter(f"{NS}polyline"), *no_runs.iter(f"{NS}polygon")]
    nothing = parse(charts.trend_lines({}))
    assert root_title(nothing).startswith("Trend") and len(list(nothing)) == 1  # a title and no panel
    one = parse(charts.tradeoff(["only"], np.array([0.5]), np.array([0.5]), np.array([10.0])))
    ((point, tip),) = titles(one, "circle")
    assert tip.startswith("only: recall 0.500")
    # a single value sits in the middle of its padded axes (x from 70 to 630, y from 20 to 410)
    assert (float(point.get("cx")), float(point.get("cy"))) == pytest.approx((350, 215))
    budget = parse(charts.budget_curves([256], {"x": np.array([0.5])}))
    ((dot, tip),) = titles(budget, "circle")
    assert tip == "x: 0.5000 at budget 256" and float(dot.get("cx")) == pytest.approx(390)  # the axis' middle
    for root in (empty, no_runs, nothing, one, budget):
        values = numbers(root)
        assert values and all(np.isfinite(values)), values


def root_title(root: ET.Element) -> str:
    return root.find(f"{NS}title").text
