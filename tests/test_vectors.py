"""Compressed vectors (docs/vectors.md): the `vectors` and `dims` axes against independent numpy oracles on the
demo, float32/full against today's numbers, and the axes through the warehouse, trend, compare and labels."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.ranking import chunk_ids
from chunkeval.engine.pipeline.sweep import chunk_one, chunking_jobs, embed_all, load_inputs, plan, run_sweep
from chunkeval.engine.retrieval.ties import trec_order
from chunkeval.engine.scoring.configuration import score_chunking
from chunkeval.vocabulary import SPAN_METRICS, TIE_AWARE, config_id, config_label

METRICS = [*SPAN_METRICS, "precision_at_k", "recall_at_k", "hit_rate", "mrr", "map", "ndcg_at_k"]
KS = (1, 3, 5)
BASE = dict(
    chunker=("fixed_token",),
    chunk_sizes=(100,),
    overlaps=("0",),
    k=KS,
    model=("all-MiniLM-L6-v2",),
    retriever=("dense",),
)


@pytest.fixture(scope="module")
def demo(embedder_factory):
    """The demo swept over every vectors setting at full and 128 dimensions, and the inputs and vectors it read."""
    exp = Experiment.demo().with_overrides(
        **BASE, vectors=("float32", "int8", "binary", "binary-rescore:depth=7"), dims=("full", "128")
    )
    embedders = Embedders.of(embedder_factory()).for_experiment(exp)
    result = run_sweep(exp, embedders)
    inputs = load_inputs(exp, quiet=True)
    (chunking,) = [chunk_one(inputs.corpora, s, m, embedders) for s, m in chunking_jobs(exp)]
    embedded = embed_all(inputs, [chunking], plan(exp, [chunking]), embedders)
    q, c = embedded.queries["all-MiniLM-L6-v2"], embedded.chunks[(0, "all-MiniLM-L6-v2")]
    return exp, result, inputs, chunking, q.astype(np.float32), c.astype(np.float32)


def _cut(v: np.ndarray, dims: str) -> np.ndarray:
    if dims == "full":
        return v
    head = v[:, : int(dims)]
    return (head / np.linalg.norm(head, axis=1, keepdims=True)).astype(np.float32)


def _best(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row, ties to the lower chunk index (the cut of exact search)."""
    index = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    order = np.lexsort((index, -scores), axis=1)[:, :k]
    return order, np.take_along_axis(scores, order, 1).astype(np.float64)


def hamming_oracle(q, c, k):
    """Sign bits packed by np.packbits, popcount of the XOR by a lookup table: score = bits shared."""
    table = np.array([bin(i).count("1") for i in range(256)])
    qb, cb = np.packbits(q > 0, axis=1), np.packbits(c > 0, axis=1)
    distance = table[qb[:, None, :] ^ cb[None, :, :]].sum(axis=2)
    return _best(q.shape[1] - distance, k)


def int8_oracle(q, c, k):
    """Per dimension the corpus's [min, max] in 255 steps (1 where they meet); questions in the same ranges;
    codes floor((v - min) / step) clipped to 0 … 255, less 128; integer dot products."""
    low, high = c.min(axis=0), c.max(axis=0)
    step = (high - low) / np.float32(255)
    step = np.where(step == 0, np.float32(1), step)

    def code(v):
        return np.clip(np.floor((v - low) / step), 0, 255).astype(np.int64) - 128

    return _best(code(q) @ code(c).T, k)


def _config_rows(table, vectors: str, dims: str):
    mine = table.filter(pc.and_(pc.equal(table["vectors"], vectors), pc.equal(table["dims"], dims)))
    return mine.sort_by([(key, "ascending") for key in ("k", "query_id") if key in mine.column_names])


def _lists(result, vectors: str, dims: str) -> dict[str, list[str]]:
    rows = _config_rows(result.retrieved, vectors, dims).to_pylist()
    out: dict[str, list] = {}
    for r in sorted(rows, key=lambda r: (r["query_id"], r["rank"])):
        out.setdefault(r["query_id"], []).append(f"{r['corpus_id']}:{r['start']}-{r['end']}")
    return out


@pytest.mark.parametrize("dims", ["full", "128"])
@pytest.mark.parametrize("vectors", ["binary", "int8"])
def test_the_axis_retrieves_what_an_independent_numpy_oracle_does(demo, vectors, dims):
    exp, result, inputs, chunking, q, c = demo
    oracle = hamming_oracle if vectors == "binary" else int8_oracle
    top, scores = oracle(_cut(q, dims), _cut(c, dims), max(KS))
    top, scores = trec_order(top, scores, lambda index: chunk_ids(chunking.chunks, index))  # the tie policy
    ids = {qid: chunk_ids(chunking.chunks, row) for qid, row in zip(inputs.gold.query_ids, top)}
    assert _lists(result, vectors, dims) == ids
    expected = score_chunking(
        inputs.gold, chunking.spec, chunking.chunks, top, KS, "all-MiniLM-L6-v2", scores=scores
    ).sort_by([("k", "ascending"), ("query_id", "ascending")])
    got = _config_rows(result.per_query, vectors, dims)
    assert got.num_rows == expected.num_rows == len(KS) * inputs.gold.n_queries
    for metric in METRICS + [f"{m}_tie_aware" for m in TIE_AWARE]:
        np.testing.assert_allclose(got[metric].to_numpy(), expected[metric].to_numpy(), rtol=0, atol=1e-9)
    if vectors == "binary":  # integer scores: ties the tie policy orders, and marks
        assert pc.any(got["tied_at_k"]).as_py()


def test_binary_rescore_reranks_hammings_top_n_by_float_and_skips_k_above_n(demo):
    exp, result, inputs, chunking, q, c = demo
    top, _ = hamming_oracle(q, c, 7)
    cos = np.einsum("qd,qkd->qk", q, c[top])
    order = np.lexsort((top, -cos), axis=1)
    expected = np.take_along_axis(top, order, 1)[:, :5]
    got = _lists(result, "binary-rescore:depth=7", "full")
    assert got == {qid: chunk_ids(chunking.chunks, row) for qid, row in zip(inputs.gold.query_ids, expected)}
    assert sorted(set(_config_rows(result.per_query, "binary-rescore:depth=7", "full")["k"].to_pylist())) == [1, 3, 5]


def test_float32_full_gives_todays_numbers_and_labels(demo, embedder_factory):
    exp, result, *_ = demo
    today = run_sweep(Experiment.demo().with_overrides(**BASE), embedder_factory())
    assert today.per_query.column_names == result.per_query.column_names
    mine = _config_rows(result.per_query, "float32", "full")
    before = today.per_query.sort_by([("k", "ascending"), ("query_id", "ascending")])
    for name in METRICS:
        assert mine[name].to_pylist() == before[name].to_pylist()
    row = before.slice(0, 1).to_pylist()[0]
    old = {k: v for k, v in row.items() if k not in ("vectors", "dims")}
    assert config_label(row) == config_label(old) and config_id(row) == config_id(old)  # older ids stay
    squeezed = {**row, "vectors": "binary", "dims": "128"}
    assert config_label(squeezed).startswith("binary/dims=128/size=100") and config_id(squeezed) != config_id(row)
    summary = {(r["vectors"], r["dims"], r["k"]): r for r in result.summary.to_pylist()}
    assert summary[("float32", "full", 5)]["ann_recall_at_k_mean"] == 1.0
    assert summary[("float32", "full", 5)]["vector_bytes"] == 4 * 384
    assert summary[("int8", "full", 5)]["vector_bytes"] == 384
    assert summary[("binary", "128", 5)]["vector_bytes"] == 16
    assert summary[("binary", "128", 5)]["index_bytes"] == 16 * summary[("binary", "128", 5)]["n_chunks"]
    assert summary[("binary", "full", 5)]["batch_ms_per_query"] > 0
    assert summary[("binary", "full", 5)]["ann_recall_at_k_mean"] < 1.0  # what binary loses against float


def test_numpy_and_faiss_hamming_agree_with_ties_at_the_cut():
    from chunkeval.engine.retrieval.vectors import _faiss_hamming, _numpy_hamming

    rng = np.random.default_rng(3)
    q, c = rng.integers(0, 256, (40, 2), dtype=np.uint8), rng.integers(0, 256, (3000, 2), dtype=np.uint8)
    for depth in (1, 10, 200):
        a, b = _numpy_hamming(q, c, 16, depth), _faiss_hamming(q, c, 16, depth)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_notes_say_which_combinations_the_axes_leave_out():
    exp = Experiment.demo().with_overrides(
        retriever=("dense", "bm25"), index=("exact", "hnsw"), vectors=("int8", "binary-rescore:depth=3"), k=(1, 5)
    )
    notes = exp.notes()
    assert any("index hnsw:" in n and "retriever bm25 run with float32/full alone" in n for n in notes)
    assert "binary-rescore is not scored where its depth < k: depth 3 at k 5" in notes
    assert "vectors" not in exp.to_dict() or exp.to_dict()["vectors"] == ["int8", "binary-rescore:depth=3"]
    assert "vectors" not in Experiment.demo().to_dict()  # float32/full: recorded as before the keys existed


def test_the_axes_reach_the_warehouse_trend_compare_mlflow_and_the_api(demo, tmp_path, monkeypatch, capsys):
    """The recorded rows keep each vectors and dims setting apart in the views (label, id), the trend, the
    regressions, compare (runs pair a setting with itself), MLflow's nested-run names and the Python API,
    whose keyword takes a single string as it takes a list."""
    import json

    import chunkeval
    from chunkeval.cli import main
    from chunkeval.publish.mlflow import _label
    from chunkeval.run_result import RunResult
    from chunkeval.warehouse import Warehouse

    exp, result, *_ = demo
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    wh = Warehouse.at_home()
    ids = []
    for _ in range(2):
        run_id = wh.begin_run("vec", {}, "manual", exp.to_dict())
        wh.complete_run(run_id, RunResult(result.per_query, result.summary, references=result.references))
        ids.append(run_id)
    with wh.connect() as con:
        got = con.execute(
            "SELECT vectors, dims, count(DISTINCT config_id), count(DISTINCT label) FROM config_summary "
            "WHERE run_id = ? AND k = 5 GROUP BY 1, 2 ORDER BY 1, 2",
            [ids[0]],
        ).fetchall()
    assert [(v, d) for v, d, *_ in got] == sorted(
        (v, d) for v in ("binary", "binary-rescore:depth=7", "float32", "int8") for d in ("128", "full")
    )
    assert all(n_id == n_label == 1 for *_, n_id, n_label in got)  # one configuration each, told apart
    trend = wh.trend("vec", "span_recall", {"vectors": "binary", "dims": "128", "k": 5})
    assert [(r["vectors"], r["dims"]) for r in trend] == [("binary", "128")] * 2 and trend[1]["change"] == 0.0
    assert wh.regressions("vec", ["span_recall"], 0.0) == []
    assert main(["compare", "--run", ids[1], "--run", ids[0], "--metric", "mrr", "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert {(c["a"]["vectors"], c["a"]["dims"]) for c in compared} == {(v, d) for v, d, *_ in got}
    assert all((c["a"]["vectors"], c["a"]["dims"]) == (c["b"]["vectors"], c["b"]["dims"]) for c in compared)
    rows = wh.summary(ids[0]).to_pylist()
    assert len({_label(r) for r in rows}) == len(rows)  # MLflow: a nested run per configuration, named apart
    api = chunkeval.evaluate(
        exp.corpus_dir, exp.questions, chunk_sizes=100, k=3, vectors="binary", dims="128", model="all-MiniLM-L6-v2"
    )
    assert {(r["vectors"], r["dims"]) for r in api.summary.to_pylist()} == {("binary", "128")}
