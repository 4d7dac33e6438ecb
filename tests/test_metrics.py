"""Metric definitions: the worked examples, trec_eval as oracle, and brute-force span oracles."""

from __future__ import annotations

import random

import numpy as np
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkeval.engine.chunking import Chunks
from chunkeval.engine.inputs.run_files import Qrels, RankedLists
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.scoring import metrics as M


def summary_of(gold: dict, run: dict, k: int):
    per_query, summary = M.score_run(Qrels({q: {d: 1.0 for d in ds} for q, ds in gold.items()}), RankedLists(run), k)
    return per_query.to_pylist(), summary.to_pylist()[0]


# --------------------------------------------------------------------------- worked examples


def test_macro_and_micro_set_metrics_worked_example():
    gold = {"1": ["A", "B"], "2": ["D"], "3": ["E", "F", "G"]}
    run = {"1": ["A", "C"], "2": ["D"], "3": ["F", "H", "I"]}
    rows, s = summary_of(gold, run, 10)
    assert [(r["tp"], r["fp"], r["fn"]) for r in rows] == [(1, 1, 1), (1, 0, 0), (1, 2, 2)]
    assert s["precision_mean"] == pytest.approx(11 / 18) and round(s["precision_mean"], 3) == 0.611
    assert s["recall_mean"] == pytest.approx(11 / 18)
    assert s["precision_micro"] == pytest.approx(0.5) and s["recall_micro"] == pytest.approx(0.5)
    assert s["f1_micro"] == pytest.approx(0.5)
    # sample standard deviation (n - 1) of 1/2, 1, 1/3
    assert s["precision_std"] == pytest.approx(np.std([0.5, 1.0, 1 / 3], ddof=1))


def test_precision_at_k_worked_examples():
    refs = ["r1", "r2", "r3"]
    rows, _ = summary_of({"q": refs}, {"q": ["r1", "x", "r2", "y", "r3"]}, 5)
    assert rows[0]["precision_at_k"] == pytest.approx(0.6)
    cases = {"a": ["r1", "x", "y"], "b": ["r1", "r2"], "c": ["x", "y", "z", "r1"]}
    rows, _ = summary_of({q: refs for q in cases}, cases, 3)
    got = {r["query_id"]: round(r["precision_at_k"], 3) for r in rows}
    assert got == {"a": 0.333, "b": 0.667, "c": 0.0}


def test_precision_and_recall_with_eight_relevant():
    relevant = [f"r{i}" for i in range(8)]
    rows, _ = summary_of({"q": relevant}, {"q": ["r0", "x1", "r1", "x2", "r2"]}, 5)
    assert rows[0]["precision"] == pytest.approx(0.6)
    assert rows[0]["recall"] == pytest.approx(0.375)


def test_empty_retrieval_and_empty_gold():
    rows, s = summary_of({"a": ["x"], "b": []}, {"a": []}, 3)
    a, b = rows
    assert a["precision"] == 0 and a["recall"] == 0 and a["precision_at_k"] == 0 and a["mrr"] == 0
    assert b["recall"] == 0 and b["n_relevant"] == 0
    assert s["n_queries"] == 2
    _, skipped = M.score_run(Qrels({"a": {"x": 1.0}, "b": {}}), RankedLists({"a": ["x"]}), 3, skip_empty_gold=True)
    assert skipped.to_pylist()[0]["n_queries"] == 1


def test_graded_ndcg_by_hand():
    gold = Qrels({"q": {"a": 3.0, "b": 2.0, "c": 0.0, "d": 1.0}})
    per_query, _ = M.score_run(gold, RankedLists({"q": ["b", "c", "a"]}), 3)
    dcg = 2 / np.log2(2) + 0 + 3 / np.log2(4)
    idcg = 3 / np.log2(2) + 2 / np.log2(3) + 1 / np.log2(4)
    row = per_query.to_pylist()[0]
    assert row["ndcg_at_k"] == pytest.approx(dcg / idcg)
    assert row["n_relevant"] == 3  # grade 0 is not relevant
    assert row["map"] == pytest.approx((1 / 1 + 2 / 3) / 3)


# --------------------------------------------------------------------------- trec_eval oracle


def random_trec(seed: int):
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(25):
        qid = f"q{q}"
        docs = [f"d{i:03d}" for i in rng.sample(range(60), 30)]
        qrels[qid] = {d: rng.choice([0, 0, 1, 1, 2, 3]) for d in docs[:20]}
        qrels[qid][docs[0]] = max(qrels[qid][docs[0]], 1)  # every query has a relevant doc
        ranked = rng.sample(docs + [f"n{i}" for i in range(10)], rng.randint(1, 25))
        run[qid] = {d: float(rng.randint(0, 8)) for d in ranked}  # coarse scores: ties on purpose
    return qrels, run


def write_trec(tmp_path, qrels, run):
    qp, rp = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qp.write_text("".join(f"{q} 0 {d} {g}\n" for q, ds in qrels.items() for d, g in ds.items()))
    rp.write_text(
        "".join(f"{q} Q0 {d} {i + 1} {s} tag\n" for q, ds in run.items() for i, (d, s) in enumerate(ds.items()))
    )
    return qp, rp


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 5, 10])
def test_rank_metrics_agree_with_trec_eval(tmp_path, seed, k):
    from chunkeval.engine.inputs.run_files import load_gold_and_run

    qrels, run = random_trec(seed)
    gold, ours = load_gold_and_run(*write_trec(tmp_path, qrels, run), fmt="trec")
    per_query, _ = M.score_run(gold, ours, k)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "map", f"P_{k}", f"recall_{k}", f"ndcg_cut_{k}"})
    oracle = evaluator.evaluate(run)
    for row in per_query.to_pylist():
        o = oracle[row["query_id"]]
        assert row["mrr"] == pytest.approx(o["recip_rank"], abs=1e-12)
        assert row["map"] == pytest.approx(o["map"], abs=1e-12)
        assert row["precision_at_k"] == pytest.approx(o[f"P_{k}"], abs=1e-12)
        assert row["recall_at_k"] == pytest.approx(o[f"recall_{k}"], abs=1e-12)
        assert row["ndcg_at_k"] == pytest.approx(o[f"ndcg_cut_{k}"], abs=1e-12)


# --------------------------------------------------------------------------- span metrics


def span_case(text_len, refs, chunk_spans, topk_rows):
    """refs: list per query of (start, end); one corpus."""
    rq = [q for q, rs in enumerate(refs) for _ in rs]
    gold = SpanGold(
        [f"q{i}" for i in range(len(refs))],
        ["?"] * len(refs),
        ["c"] * len(refs),
        np.asarray(rq, dtype=np.int64),
        np.asarray([s for rs in refs for s, _ in rs], dtype=np.int64),
        np.asarray([e for rs in refs for _, e in rs], dtype=np.int64),
    )
    starts = np.asarray([s for s, _ in chunk_spans], dtype=np.int64)
    ends = np.asarray([e for _, e in chunk_spans], dtype=np.int64)
    chunks = Chunks(("c",), np.zeros(len(starts), np.int32), starts, ends, ends - starts)
    return gold, chunks, np.asarray(topk_rows, dtype=np.int64)


def brute_force(refs, chunk_spans, ranked, k):
    """Definitions of docs/metrics.md with Python sets, one query."""
    retrieved = [chunk_spans[c] for c in ranked[:k] if c >= 0]
    ref_set = set().union(*(range(s, e) for s, e in refs)) if refs else set()
    got = set().union(*(range(s, e) for s, e in retrieved)) if retrieved else set()
    covered = len(ref_set & got)
    ref_total = sum(e - s for s, e in refs)
    ret_total = sum(e - s for s, e in retrieved)
    unused = sum(len(set(range(s, e)) - got) for s, e in refs)
    p = covered / ret_total if ret_total else 0.0
    r = covered / ref_total if ref_total else 0.0
    rel_chunks = [c for c in chunk_spans if any(c[0] < e and c[1] > s for s, e in refs)]
    union = set().union(*(range(s, e) for s, e in rel_chunks)) if rel_chunks else set()
    return {
        "span_precision": p,
        "span_recall": r,
        "span_f1": 2 * p * r / (p + r) if p + r else 0.0,
        "span_iou": covered / (ret_total + unused) if ret_total + unused else 0.0,
        "precision_omega": len(ref_set & union) / len(union) if union else 0.0,
    }


def test_span_metrics_worked_example():
    # reference [10, 30); chunks [0, 20) and [15, 40): covered 20 of 20, retrieved 45 characters
    gold, chunks, topk = span_case(50, [[(10, 30)]], [(0, 20), (15, 40), (40, 50)], [[0, 1]])
    ref = M.reference_chars(gold, ("c",))
    first = M.first_covering_rank(ref, topk, chunks)
    at1 = M.span_metrics(ref, first, topk, chunks, 1)
    at2 = M.span_metrics(ref, first, topk, chunks, 2)
    assert at1["span_recall"][0] == pytest.approx(0.5) and at1["span_precision"][0] == pytest.approx(0.5)
    assert at1["span_iou"][0] == pytest.approx(10 / (20 + 10))
    assert at2["span_recall"][0] == 1.0 and at2["span_precision"][0] == pytest.approx(20 / 45)
    rel = M.chunk_relevance(gold, ref, chunks)
    assert rel.omega_union[0] == 40 and rel.covered_all[0] == 20 and rel.n_relevant[0] == 2


@st.composite
def span_problems(draw):
    n = draw(st.integers(20, 120))
    interval = st.tuples(st.integers(0, n - 1), st.integers(1, 30)).map(lambda t: (t[0], min(n, t[0] + t[1])))
    chunks = draw(st.lists(interval, min_size=1, max_size=12))
    refs = draw(st.lists(st.lists(interval, min_size=0, max_size=3), min_size=1, max_size=5))
    k = draw(st.integers(1, 6))
    ranked = [draw(st.lists(st.integers(0, len(chunks) - 1), min_size=0, max_size=k, unique=True)) for _ in refs]
    return n, refs, chunks, [r + [-1] * (k - len(r)) for r in ranked], k


@settings(max_examples=300, deadline=None)
@given(span_problems())
def test_span_metrics_match_brute_force(problem):
    n, refs, chunk_spans, ranked, k_max = problem
    gold, chunks, topk = span_case(n, refs, chunk_spans, ranked)
    ref = M.reference_chars(gold, ("c",))
    first = M.first_covering_rank(ref, topk, chunks)
    rel = M.chunk_relevance(gold, ref, chunks)
    omega = M.safe_div(rel.covered_all, rel.omega_union)
    previous = None
    for k in range(1, k_max + 1):
        got = M.span_metrics(ref, first, topk, chunks, k)
        for q in range(len(refs)):
            want = brute_force(refs[q], chunk_spans, ranked[q], k)
            for name in ("span_precision", "span_recall", "span_f1", "span_iou"):
                assert got[name][q] == pytest.approx(want[name]), (name, q, k)
                assert 0.0 <= got[name][q] <= 1.0
            assert omega[q] == pytest.approx(want["precision_omega"])
        if previous is not None:  # recall never falls as k grows
            assert np.all(got["span_recall"] >= previous - 1e-12)
        previous = got["span_recall"]


@settings(max_examples=60, deadline=None)  # each example bootstraps its summary: 58 ms
@given(
    st.lists(
        st.tuples(st.sets(st.integers(0, 15), max_size=6), st.lists(st.integers(0, 15), max_size=10, unique=True)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 12),
)
def test_rank_metric_invariants(cases, k):
    gold = Qrels({f"q{i}": {str(d): 1.0 for d in g} for i, (g, _) in enumerate(cases)})
    run = RankedLists({f"q{i}": [str(d) for d in r] for i, (_, r) in enumerate(cases)})
    per_query, summary = M.score_run(gold, run, k)
    for row in per_query.to_pylist():
        for name in M.RANK_METRICS:
            assert 0.0 <= row[name] <= 1.0 + 1e-12, name
        assert row["tp"] + row["fp"] == row["n_retrieved"] and row["tp"] + row["fn"] == row["n_relevant"]
        assert row["hits_at_k"] <= min(k, row["tp"])
        if row["n_relevant"]:
            assert row["hit_rate"] == (row["hits_at_k"] > 0)
    s = summary.to_pylist()[0]
    tp, fp = sum(r["tp"] for r in per_query.to_pylist()), sum(r["fp"] for r in per_query.to_pylist())
    assert s["precision_micro"] == pytest.approx(tp / (tp + fp) if tp + fp else 0.0)
