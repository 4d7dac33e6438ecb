"""The one SQL of every summary (`chunkeval.stats.aggregate`) against plain numpy, per group."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from chunkeval.stats import aggregate as A
from chunkeval.stats.summaries import summarize


def _table(seed: int, n: int = 300) -> pa.Table:
    rng = np.random.default_rng(seed)
    ref_chars = rng.integers(0, 400, n)
    covered = np.minimum(ref_chars, rng.integers(0, 400, n))
    retrieved = covered + rng.integers(0, 2000, n)
    columns = {
        "chunker": rng.choice(["fixed_token", "recursive_token"], n),
        "chunk_size": rng.choice([100, 200, 300], n),
        "k": rng.choice([1, 5], n),
        "query_id": [f"q{i}" for i in range(n)],
        "has_gold": ref_chars > 0,
        "covered": covered,
        "ref_chars": ref_chars,
        "retrieved_chars": retrieved,
        "uncovered": ref_chars - covered,
        "covered_all": covered,
        "omega_union": retrieved,
        "retrieved_tokens": retrieved // 4,
        "tp": rng.integers(0, 5, n),
        "fp": rng.integers(0, 5, n),
        "n_relevant": rng.integers(0, 6, n),
        "hits_at_k": rng.integers(0, 3, n),
    }
    columns["n_retrieved"] = columns["tp"] + columns["fp"]
    for m in A.METRICS:
        columns[m] = rng.random(n)
    columns["chunk_size"][0] = 999  # a group of one query: its std is empty
    return pa.table(columns)


@pytest.mark.parametrize("seed", range(3))
def test_summary_sql_equals_numpy(seed):
    table = _table(seed)
    out = A.summarize_table(table, ["chunker", "chunk_size", "k"])
    rows = table.to_pylist()
    for r in out.to_pylist():
        mine = [x for x in rows if (x["chunker"], x["chunk_size"], x["k"]) == (r["chunker"], r["chunk_size"], r["k"])]
        assert r["n_queries"] == len(mine)
        col = lambda name: np.array([x[name] for x in mine], dtype=np.float64)  # noqa: E731, B023
        for m in A.METRICS:
            assert r[f"{m}_mean"] == pytest.approx(col(m).mean(), abs=1e-12)
            if len(mine) > 1:
                assert r[f"{m}_std"] == pytest.approx(col(m).std(ddof=1), abs=1e-12)
            else:
                assert r[f"{m}_std"] is None
        ratio = lambda num, den: num.sum() / den.sum() if den.sum() else 0.0  # noqa: E731
        p, rc = ratio(col("covered"), col("retrieved_chars")), ratio(col("covered"), col("ref_chars"))
        assert r["span_precision_micro"] == pytest.approx(p, abs=1e-12)
        assert r["span_recall_micro"] == pytest.approx(rc, abs=1e-12)
        assert r["span_f1_micro"] == pytest.approx(2 * p * rc / (p + rc) if p + rc else 0.0, abs=1e-12)
        assert r["span_iou_micro"] == pytest.approx(
            ratio(col("covered"), col("retrieved_chars") + col("uncovered")), abs=1e-12
        )
        assert r["precision_at_k_micro"] == pytest.approx(ratio(col("hits_at_k"), col("k")), abs=1e-12)
        assert r["recall_micro"] == pytest.approx(ratio(col("tp"), col("n_relevant")), abs=1e-12)
        assert r["retrieved_tokens_mean"] == pytest.approx(col("retrieved_tokens").mean(), abs=1e-12)
        assert "mrr_micro" not in r  # not a ratio of counts


def test_skip_empty_gold_leaves_those_queries_out():
    table = _table(7)
    kept = summarize(table, ["k"], intervals=False)  # has_gold present: queries without references are left out
    counted = summarize(table.drop_columns(["has_gold"]), ["k"], intervals=False)
    assert sum(kept["n_queries"].to_pylist()) == sum(table["has_gold"].to_pylist())
    assert sum(counted["n_queries"].to_pylist()) == table.num_rows
