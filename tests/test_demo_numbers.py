"""The demo's bm25 numbers, per query, equal those of the code before the architecture move (stored in
tests/data/demo_bm25.json by tests/data/make_demo_bm25.py). bm25 reads no vectors, so these numbers do not
follow the CPU's float rounding: they hold on every machine. The dense numbers are compared with an older
commit side by side by bench/same_numbers.py (they would not travel between machines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep

STORED = Path(__file__).resolve().parent / "data" / "demo_bm25.json"
KEYS = ("chunker", "chunk_size", "chunk_overlap", "k")


def test_demo_bm25_per_query_numbers_are_the_stored_ones(embedder_factory):
    stored = json.loads(STORED.read_text(encoding="utf-8"))
    exp = Experiment.demo().with_overrides(retriever=("bm25",))
    result = run_sweep(exp, embedder_factory())
    rows = result.per_query.sort_by([(k, "ascending") for k in (*KEYS, "query_id")]).to_pylist()
    got: dict[str, dict] = {}
    for row in rows:
        entry = got.setdefault(",".join(f"{k}={row[k]}" for k in KEYS), {})
        for name, value in row.items():
            entry.setdefault(name, []).append(value)
    assert sorted(got) == sorted(stored) and len(stored) == 16
    for label, columns in stored.items():
        assert got[label]["query_id"] == columns["query_id"], label
        assert set(got[label]["model"]) == {"none"}  # no model was loaded
        for metric, values in columns.items():
            if metric != "query_id":
                np.testing.assert_allclose(got[label][metric], values, rtol=0, atol=1e-12, err_msg=f"{label} {metric}")
