"""The report's index section: what each approximate index loses in recall against what it saves in time.

One point per index setting and (model, retriever, chunking), at the grid's largest k: `ann_recall_at_k`
(macro mean) against the p95 latency of one query, coloured by index kind, each with its tooltip; a table
beside it with build seconds, size and both latencies. Drawn only for runs that searched an approximate
index (docs/indexes.md).
"""

from __future__ import annotations

from html import escape

import numpy as np

from chunkeval.report.svg import CYCLE, Axes, Svg, legend, padded
from chunkeval.vocabulary import CONFIG_KEYS, approximate_index, config_id, config_label


def _deepest(summary: list[dict]) -> list[dict]:
    """Rows of indexes that are not `none`, at the largest k of each configuration."""
    deepest: dict[tuple, dict] = {}
    for r in summary:
        if r.get("index") in (None, "none") or r.get("ann_recall_at_k_mean") is None:
            continue
        key = tuple(r[k] for k in CONFIG_KEYS if k != "k")
        if key not in deepest or r["k"] > deepest[key]["k"]:
            deepest[key] = r
    return list(deepest.values())


def recall_latency_chart(rows: list[dict]) -> str:
    """ann_recall_at_k against p95 latency (log scale), a colour per index kind."""
    svg = Svg(760, 420, "ann_recall_at_k against p95 latency per index setting")
    latency = np.array([max(r.get("latency_p95_ms") or 0.0, 1e-4) for r in rows], dtype=np.float64)
    recall = np.array([r["ann_recall_at_k_mean"] for r in rows], dtype=np.float64)
    lo, hi = float(latency.min()), float(latency.max())
    if hi <= lo * 1.5:
        lo, hi = lo / 2, hi * 2
    ax = Axes(70, 24, 520, 340, (lo / 1.3, hi * 1.3), padded(np.append(recall, 1.0)), xlog=True)
    ticks = [2.0**e for e in range(int(np.floor(np.log2(ax.xlim[0]))), int(np.ceil(np.log2(ax.xlim[1]))) + 1)]
    ax.frame(
        svg,
        "p95 latency of one query (ms, log scale)",
        "ann_recall_at_k (macro mean, largest k)",
        xticks=ticks,
        xtick_labels=[f"{t:.2g}" for t in ticks],
    )
    kinds = sorted({str(r["index"]).split(":")[0] for r in rows})
    color = {kind: CYCLE[i % len(CYCLE)] for i, kind in enumerate(kinds)}
    for r, x, y in zip(rows, ax.px(latency), ax.py(recall)):
        kind = str(r["index"]).split(":")[0]
        tip = f"{config_label(r)} [{config_id(r)}]: ann_recall_at_k {r['ann_recall_at_k_mean']:.3f}, p95 {r.get('latency_p95_ms') or 0:.3f} ms"
        svg.circle(x, y, 5, color[kind], "#000", tip)
    legend(svg, ax.left + ax.width + 20, ax.top + 12, [(k, color[k], "box") for k in kinds])
    return svg.render()


def section_indexes(summary: list[dict]) -> str:
    rows = _deepest(summary)
    if not any(approximate_index(r["index"]) for r in rows):
        return ""
    table_rows = []
    for r in rows:
        size = r.get("index_bytes")
        cells = [
            escape(str(r["index"])),
            escape(f"{config_label(r)} [{config_id(r)}]"),
            str(r["k"]),
            f"{r['ann_recall_at_k_mean']:.3f}",
            "–" if r.get("index_build_seconds") is None else f"{r['index_build_seconds']:.2f}",
            "–" if size is None else f"{size / 2**20:.2f}",
            *(
                "–" if r.get(c) is None else f"{r[c]:.3f}"
                for c in ("latency_p50_ms", "latency_p95_ms", "batch_ms_per_query")
            ),
        ]
        table_rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = ["index", "configuration", "k", "ann_recall_at_k", "build s", "MiB", "p50 ms", "p95 ms", "batch ms/query"]
    table = (
        "<table><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(table_rows)
        + "</tbody></table>"
    )
    return (
        '<section id="indexes"><h2>Indexes: recall lost against time saved</h2><p>Each point is an index setting '
        "over one chunking and model, at the grid's largest k: the share of the exact top k it returned "
        "(ann_recall_at_k; ties with the k-th best count as found) against the 95th percentile of the time one "
        "query takes. Exact search is at recall 1. A Chroma server's size is not known to its client (–). "
        f'Definitions: docs/indexes.md.</p>{recall_latency_chart(rows)}<div class="scroll">{table}</div></section>'
    )
