"""Charts people can read at 125 configurations, checked without a browser: the label boxes computed from
the SVG (position, anchor, font size, the layout's character width) never overlap and stay on the chart,
every point keeps its tooltip, and the budget chart draws a few lines and one grey band, not 125 lines."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import numpy as np

from chunkeval.report import charts
from chunkeval.report.svg import CHAR_WIDTH

NS = "{http://www.w3.org/2000/svg}"
N = 125


def configurations(seed: int = 7) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = [
        f"all-MiniLM-L6-v2 {r} {c} {s}/{o} k={k}"
        for r, c, s, o, k in itertools.islice(
            itertools.product(
                ["dense", "bm25", "hybrid"],
                ["fixed_token", "recursive_token", "cluster_semantic"],
                [100, 200, 400, 800],
                [0, 20],
                [1, 3, 5, 10],
            ),
            N,
        )
    ]
    recall = np.clip(rng.beta(5, 2, N), 0, 1)
    precision = np.clip(1.1 - recall + rng.normal(0, 0.08, N), 0, 1)  # a crowded front
    tokens = rng.uniform(100, 4000, N)
    return labels, recall, precision, tokens


def boxes(root: ET.Element) -> list[tuple[str, float, float, float, float]]:
    """(text, left, top, right, bottom) of every unrotated text element, as the layout measures text."""
    out = []
    for e in root.iter(f"{NS}text"):
        if e.get("transform"):
            continue
        size = float(e.get("font-size", 10))
        lines = ["".join(e.itertext())] if e.find(f"{NS}tspan") is None else [e.text or ""] + [t.text or "" for t in e]
        width = max(len(line) for line in lines) * size * CHAR_WIDTH
        x, y = float(e.get("x")), float(e.get("y"))
        anchor = e.get("text-anchor", "start")
        left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
        out.append((lines[0], left, y - 0.8 * size, left + width, y + 0.2 * size + (len(lines) - 1) * 1.15 * size))
    return out


def overlapping(found: list[tuple]) -> list[tuple[str, str]]:
    return [
        (a[0], b[0])
        for a, b in itertools.combinations(found, 2)
        if a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5 and a[2] < b[4] - 0.5 and b[2] < a[4] - 0.5
    ]


def test_tradeoff_labels_never_overlap_at_125_configurations():
    labels, recall, precision, tokens = configurations()
    root = ET.fromstring(charts.tradeoff(labels, recall, precision, tokens))
    found = boxes(root)
    assert overlapping(found) == []
    width, height = (float(v) for v in root.get("viewBox").split()[2:])
    assert all(0 <= b[1] and b[3] <= width and 0 <= b[2] and b[4] <= height for b in found)
    tips = [e.find(f"{NS}title").text for e in root.iter(f"{NS}circle")]
    assert len(tips) == N and all(t.split(":")[0] in labels for t in tips)  # every point keeps its tooltip
    named = {b[0] for b in found} & set(labels)
    assert named, "the front's labels are drawn where they fit"


def test_the_budget_chart_draws_a_few_lines_and_summarises_the_rest():
    budgets = [256, 512, 1024, 2048, 4096]
    rng = np.random.default_rng(3)
    curves = {f"chunking {i:03d}": np.sort(rng.uniform(0, 1, len(budgets))) for i in range(N)}
    chosen = "chunking 050"
    root = ET.fromstring(charts.budget_curves(budgets, curves, None, chosen))
    lines = list(root.iter(f"{NS}polyline"))
    assert 2 <= len(lines) <= charts.BUDGET_LINES + 1
    drawn = charts.budget_lines(curves, chosen)
    assert chosen in drawn and len(drawn) == len(lines)
    best = {max(curves, key=lambda n: curves[n][j]) for j in range(len(budgets))}
    assert best <= set(drawn)  # the front is always drawn
    (others,) = [g for g in root.iter(f"{NS}g") if g.get("class") == "others"]
    assert others.find(f"{NS}title").text.startswith(f"{N - len(drawn)} other chunkings")
    found = boxes(root)
    assert f"{N - len(drawn)} other chunkings (their range)" in {b[0] for b in found}
    assert overlapping(found) == []
