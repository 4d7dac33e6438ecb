"""Ties under one policy, trec_eval's (issue 29 part 4; docs/metrics.md, "Ties"): exact ties ordered by id in
descending string order at chunk and document level, the exported run files with raw scores read back by
trec_eval (pytrec_eval) to the same numbers, and the tie-aware expected metrics (McSherry and Najork, 2008)
against the mean over every ordering of the tied items."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.retrieval.ties import tie_aware, trec_order
from chunkeval.engine.scoring import metrics as M
from chunkeval.engine.scoring.doc_metrics import trec_runs
from chunkeval.errors import InputError
from chunkeval.vocabulary import CONFIG_KEYS
from test_beir import read_run  # a TREC run file as pytrec_eval reads it

PASSAGES = [
    "the copper lantern hangs above the harbor gate",
    "a glacier feeds the river below the marble canyon",
    "the falcon nests on the willow by the meadow",
    "saffron and pepper are sold at the velvet market",
    "the compass points across the tundra to the beacon",
]


def make_repeating_beir(root: Path) -> Path:
    """A BEIR folder whose documents repeat passages, as the shared finance corpus does: every passage is the
    whole text of several documents (ids `d9`, `d10`, …: string order is not number order), each query quotes a
    passage, and one of its copies is relevant."""
    (root / "qrels").mkdir(parents=True)
    docs, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for p, text in enumerate(PASSAGES):
        copies = [f"d{p * 7 + c + 3}" for c in range(p % 3 + 2)]  # 2 to 4 copies, some ids crossing 9 → 10
        docs += [{"_id": doc, "title": "", "text": text} for doc in copies]
        queries.append({"_id": f"q{p}", "text": " ".join(text.split()[1:5])})
        qrels += [f"q{p}\t{copies[0]}\t1", f"q{p}\t{copies[-1]}\t{2 if p % 2 else 0}"]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root


def qrels_of(root: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        out.setdefault(q, {})[d] = int(g)
    return out


@pytest.fixture(scope="module")
def repeating(tmp_path_factory) -> Path:
    return make_repeating_beir(tmp_path_factory.mktemp("ties") / "beir")


def sweep(root: Path, ties: str):
    settings = {"retriever": "bm25", "chunker": ["none", "fixed_token"], "chunk_sizes": [6], "k": [1, 3, 10]}
    return run_sweep(Experiment.from_dict({"beir": str(root), "ties": ties, **settings}), Embedders()).per_query


def test_doc_metrics_equal_trec_eval_on_the_run_file_with_raw_scores(repeating):
    import pytrec_eval

    per_query = sweep(repeating, "trec_eval")
    assert sum(per_query["doc_tied_at_k"].to_pylist()) > 0  # the repeated passages tie
    qrels, rows, checked, tied = qrels_of(repeating), per_query.to_pylist(), 0, 0
    for name, text in trec_runs(per_query, CONFIG_KEYS).items():
        run = read_run(text)
        tied += sum(len(set(s.values())) < len(s) for s in run.values())  # raw scores, ties kept
        k = int(name.rsplit("_", 1)[1].removesuffix(".trec"))
        chunker = "none" if "_none_" in name else "fixed_token"
        measures = {f"ndcg_cut.{k}", f"P.{k}", f"recall.{k}", "recip_rank"}
        oracle = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
        for row in (r for r in rows if r["k"] == k and r["chunker"] == chunker):
            got = oracle[row["query_id"]]
            assert row["doc_ndcg_at_k"] == pytest.approx(got[f"ndcg_cut_{k}"], abs=1e-12)
            assert row["doc_precision_at_k"] == pytest.approx(got[f"P_{k}"], abs=1e-12)
            assert row["doc_recall_at_k"] == pytest.approx(got[f"recall_{k}"], abs=1e-12)
            assert row["doc_mrr"] == pytest.approx(got["recip_rank"], abs=1e-12)
            checked += 1
    assert checked == per_query.num_rows and tied
    # where a tie decides the metric, the tie-aware value lies strictly between the orderings' extremes
    moved = [r for r in rows if r["doc_tied_at_k"] and r["doc_ndcg_at_k_tie_aware"] != r["doc_ndcg_at_k"]]
    assert moved
    untied = [r for r in rows if r["doc_tied_at_k"] is False]
    assert all(r["doc_ndcg_at_k_tie_aware"] == pytest.approx(r["doc_ndcg_at_k"]) for r in untied)


def test_the_retriever_policy_breaks_ties_its_own_way_and_is_recorded(repeating):
    ours, theirs = sweep(repeating, "retriever"), sweep(repeating, "trec_eval")
    assert ours["doc_scores"].null_count == ours.num_rows  # its run files keep rank-based scores
    # the same tie-aware values (they do not depend on the order inside a tie), other numbers where ties decide
    assert ours["doc_ndcg_at_k_tie_aware"].to_pylist() == pytest.approx(theirs["doc_ndcg_at_k_tie_aware"].to_pylist())
    assert ours["doc_ndcg_at_k"].to_pylist() != theirs["doc_ndcg_at_k"].to_pylist()
    assert Experiment.from_dict({"ties": "retriever"}).to_dict()["ties"] == "retriever"
    with pytest.raises(InputError, match="ties must be trec_eval or retriever"):
        Experiment.from_dict({"ties": "random"})


def test_trec_order_breaks_exact_ties_by_id_descending_as_trec_eval_does():
    import pytrec_eval

    names = ["b10", "b9", "a", "c", "d"]
    scores = np.array([[0.5, 0.5, 0.9, 0.5, 0.5 + 1e-12]])
    items, ordered = trec_order(np.array([[0, 1, 2, 3, 4]]), scores, lambda index: [names[i] for i in index])
    ranked = [names[i] for i in items[0]]
    run = {"q": {names[i]: float(s) for i, s in zip(items[0], ordered[0])}}
    for relevant in names:  # trec_eval's rank of each document is its place in our order
        rr = pytrec_eval.RelevanceEvaluator({"q": {relevant: 1}}, {"recip_rank"}).evaluate(run)["q"]["recip_rank"]
        assert rr == 1 / (ranked.index(relevant) + 1)
    assert ranked[:2] == ["a", "d"]  # near-equal floats are not ties


def test_tie_aware_metrics_are_the_mean_over_every_ordering_of_the_tied_group():
    """The worked example of docs/metrics.md: grades 0, [1, 0, 1], 0 with the bracketed three tied."""
    gains = np.array([[0.0, 1.0, 0.0, 1.0, 0.0]])
    items, scores = np.arange(5)[None], np.array([[0.9, 0.5, 0.5, 0.5, 0.1]])
    ideal, n_relevant = np.array([[1.0, 1.0]]), np.array([2])
    for k in (1, 2, 3, 5):
        expected = tie_aware(gains, items, scores, ideal, n_relevant, k)
        each = []
        for order in itertools.permutations([1, 2, 3]):
            judged = M.Judged(gains[:, [0, *order, 4]], np.array([5]), n_relevant, ideal)
            each.append(
                [
                    M.ndcg_at_k(judged, k),
                    M.precision_at_k(judged, k),
                    M.recall_at_k(judged, k),
                    M.reciprocal_rank(judged),
                ]
            )
        mean = np.mean(np.asarray(each)[:, :, 0], axis=0)
        got = [expected[m][0] for m in ("ndcg_at_k", "precision_at_k", "recall_at_k", "mrr")]
        assert got == pytest.approx(mean.tolist(), abs=1e-12)
    assert tie_aware(gains, items, scores, ideal, n_relevant, 10)["mrr"][0] == pytest.approx(4 / 9)
