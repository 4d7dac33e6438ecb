"""The relevance rules of span gold (issue 20): overlap, coverage:F, contains; the worked example of
docs/metrics.md ("How a chunk counts as relevant to span gold")."""

from __future__ import annotations

import numpy as np
import pytest

from chunkeval.engine.chunking import Chunks
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.scoring import metrics as M
from chunkeval.engine.scoring.configuration import span_scoring
from chunkeval.errors import InputError
from chunkeval.run_result import RunResult


def example() -> tuple[SpanGold, Chunks]:
    """Corpus `abcdefghij`; the reference `cdef` [2, 6); chunks A [0, 3), B [3, 10), C [0, 10)."""
    gold = SpanGold(["q"], ["?"], ["c"], np.array([0]), np.array([2]), np.array([6]))
    chunks = Chunks(("c",), np.zeros(3, np.int32), np.array([0, 3, 0]), np.array([3, 10, 10]), np.ones(3, np.int64))
    return gold, chunks


@pytest.mark.parametrize(
    "rule, relevant",
    [("overlap", [0, 1, 2]), ("coverage:0.25", [0, 1, 2]), ("coverage:0.5", [1, 2]), ("contains", [2])],
)
def test_the_worked_example(rule, relevant):
    gold, chunks = example()
    topk = np.array([[0, 1, 2]])
    relevance, spans = span_scoring(gold, topk, chunks, relevance=rule)
    assert relevance.keys.tolist() == relevant  # query 0: key = chunk index
    judged = M.judge_topk(topk, relevance.keys, relevance.n_relevant, len(chunks))
    assert M.rank_metrics(judged, 3)["precision"][0] == pytest.approx(len(relevant) / 3)
    # span metrics and precision Ω do not follow the rule
    assert spans(1)["span_recall"][0] == pytest.approx(1 / 4)
    assert relevance.omega_union[0] == 10 and relevance.covered_all[0] == 4


@pytest.mark.parametrize("rule", ["coverage:0", "coverage:1.5", "coverage:x", "coverage", "strict"])
def test_a_rule_outside_the_three_is_refused(rule):
    with pytest.raises(InputError, match="relevance must be overlap, coverage:F with F in"):
        Experiment.from_dict({"relevance": rule})


def test_the_rule_is_recorded_only_where_it_is_not_the_default():
    assert "relevance" not in Experiment.from_dict({}).to_dict()
    assert Experiment.from_dict({"relevance": "contains"}).to_dict()["relevance"] == "contains"


def test_runs_of_different_rules_are_never_compared_nor_trended_together(tmp_path, monkeypatch):
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.warehouse import Warehouse

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    exp = Experiment(name="rel", chunker=("fixed_token",), chunk_sizes=(100,), k=(3,), retriever=("bm25",))
    wh = Warehouse.at_home()
    ids = []
    for rule in ("overlap", "contains"):
        ruled = exp.with_overrides(relevance=rule)
        result = run_sweep(ruled, Embedders(tmp_path / "cache"))
        run_id = wh.begin_run("rel", {}, "manual", ruled.to_dict())
        wh.complete_run(
            run_id,
            RunResult(
                result.per_query, result.summary, texts_embedded=0, references=result.references, models=result.models
            ),
        )
        ids.append(run_id)
    overlap, contains = (wh.summary(i).to_pylist()[0] for i in ids)
    assert overlap["span_recall_mean"] == contains["span_recall_mean"]  # span metrics do not follow the rule
    assert contains["precision_mean"] < overlap["precision_mean"]
    assert wh.reference_run("rel", ids[1]) is None
    with pytest.raises(InputError, match="never compared"):
        wh.regressions("rel", ["precision"], 0.0, baseline=ids[0])
    assert all(row["change"] is None for row in wh.trend("rel", "precision"))
