"""Small-to-big retrieval (issue 33, `expand`): the worked example of docs/metrics.md ("Small-to-big
retrieval"), `window:n=0` against a run without the setting, parents, and the axis through the warehouse."""

from __future__ import annotations

import numpy as np
import pytest

from chunkeval.engine.chunking import ChunkerSpec, Chunks, chunk_corpora, count_tokens
from chunkeval.engine.chunking.fixed import fixed_token
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.scoring import metrics as M
from chunkeval.engine.scoring.configuration import score_chunking
from chunkeval.engine.scoring.expansion import Expansion, expanded, merge_top, parse_expand, units_of
from chunkeval.run_result import RunResult

TEXT = "One. Two. Three. Four. Five. Six."
SENTENCES = [(0, 4), (5, 9), (10, 16), (17, 22), (23, 28), (29, 33)]  # S0 … S5, a chunk each


def sentences() -> tuple[SpanGold, Chunks]:
    """The corpus of docs/metrics.md's example: six sentences, one chunk each; the reference `Four` [17, 21)."""
    start, end = (np.array(x) for x in zip(*SENTENCES))
    chunks = Chunks(("c",), np.zeros(6, np.int32), start, end, count_tokens([TEXT[s:e] for s, e in SENTENCES]))
    gold = SpanGold(["q"], ["which number?"], ["c"], np.array([0]), np.array([17]), np.array([21]))
    return gold, chunks


def scored(k: int, topk=((5, 0, 3),)):
    gold, chunks = sentences()
    topk = np.array(topk)
    units = expanded(gold, chunks, {"c": TEXT}, topk, None, (k,), parse_expand("window:n=1"))[k]
    spec = ChunkerSpec("sentence", 0, 0)
    table = score_chunking(gold, spec, units.chunks, units.topk, (k,), counted=units.counted, expand="window:n=1")
    return units, table.to_pylist()[0]


def test_the_worked_example_window_1_over_sentences():
    # top 3: S5, S0, S3. Windows: S4–S5, S0–S1, S2–S4. S2–S4 shares S4 with S4–S5: one unit S2–S5 at rank 1;
    # S0–S1 only touches S2: a unit of its own at rank 2. Two units for k = 3.
    units, row = scored(3)
    spans = [(int(units.chunks.start[i]), int(units.chunks.end[i])) for i in units.topk[0] if i >= 0]
    assert spans == [(10, 33), (0, 9)]
    assert row["n_retrieved"] == 2 and row["tp"] == 1 and row["n_relevant"] == 1  # the ideal list: S1–S5, one unit
    assert row["precision_at_k"] == pytest.approx(1 / 3) and row["precision"] == pytest.approx(1 / 2)
    assert row["recall_at_k"] == 1 and row["mrr"] == 1
    assert row["span_recall"] == 1 and row["span_precision"] == pytest.approx(4 / 32)
    assert row["span_iou"] == pytest.approx(4 / 32)
    assert row["precision_omega"] == pytest.approx(4 / 28)  # the relevant windows' union: S1–S5, [5, 33)
    assert row["retrieved_tokens"] == int(count_tokens(["Three. Four. Five. Six.", "One. Two."]).sum())
    _, row = scored(1)  # k = 1: S4–S5 alone, which misses the reference
    assert row["span_recall"] == 0 and row["recall_at_k"] == 0 and row["retrieved_chars"] == 10


def test_merging_is_vectorised_over_questions_and_keeps_the_best_rank():
    gold, chunks = sentences()
    units = units_of(chunks, Expansion("window", 1), {"c": TEXT})
    merged = merge_top(units, np.array([[5, 0, 3], [2, -1, -1], [0, 5, -1]]))
    assert merged.best.tolist() == [[0, 1, -1], [0, -1, -1], [0, 1, -1]]
    assert merged.lo.tolist()[0][:2] == [2, 0] and merged.hi.tolist()[0][:2] == [5, 1]


@pytest.fixture(scope="module")
def demo():
    exp = Experiment(
        name="expand",
        chunker=("fixed_token",),
        chunk_sizes=(50,),
        k=(1, 3, 5),
        retriever=("bm25",),
        expand=("none", "window:n=0", "window:n=2", "parent:size=150"),
    )
    return exp, run_sweep(exp, Embedders())


def test_window_0_and_none_give_todays_numbers(demo):
    exp, result = demo
    plain = run_sweep(exp.with_overrides(expand=("none",)), Embedders()).per_query
    pq = result.per_query
    for key in ("none", "window:n=0"):
        rows = pq.filter(np.asarray(pq["expand"].to_pylist()) == key)
        for name in (*M.SPAN_METRICS, *M.RANK_METRICS, "retrieved_tokens"):
            assert np.allclose(rows[name].to_numpy(), plain[name].to_numpy(), rtol=0, atol=1e-12), (key, name)


def test_window_0_through_the_merging_path_gives_todays_numbers(demo):
    """The shortcut aside: window:n=0 merged and scored as any expansion equals the chunks scored as they are."""
    from chunkeval.engine.pipeline.sweep import load_inputs

    exp, _ = demo
    inputs = load_inputs(exp.with_overrides(expand=("none",)), quiet=True)
    chunks = chunk_corpora(inputs.corpora, _spec())
    rng = np.random.default_rng(0)
    topk = np.stack([rng.choice(len(chunks), 5, replace=False) for _ in range(inputs.gold.n_queries)])
    plain = score_chunking(inputs.gold, _spec(), chunks, topk, (1, 3, 5)).to_pylist()
    merged = []
    for k, units in expanded(
        inputs.gold, chunks, inputs.corpora, topk, None, (1, 3, 5), Expansion("window", 0)
    ).items():
        merged += score_chunking(
            inputs.gold, _spec(), units.chunks, units.topk, (k,), counted=units.counted
        ).to_pylist()
    for a, b in zip(plain, merged, strict=True):
        for name in (*M.SPAN_METRICS, *M.RANK_METRICS, "retrieved_tokens"):
            assert abs(a[name] - b[name]) <= 1e-12, name


def _spec():
    return ChunkerSpec("fixed_token", 50, 0)


def test_parents_are_fixed_token_chunks_holding_the_match(demo):
    _, result = demo
    kept = result.retrieved.to_pylist()
    corpora = result.corpora
    parents = {name: set(zip(*(a.tolist() for a in fixed_token(text, 150, 0)))) for name, text in corpora.items()}
    rows = [r for r in kept if r["expand"] == "parent:size=150"]
    assert rows and all((r["start"], r["end"]) in parents[r["corpus_id"]] for r in rows)
    summary = {(r["expand"], r["k"]): r for r in result.summary.to_pylist()}
    for k in (1, 3, 5):  # bigger units hold more of the references, and cost more tokens
        assert summary[("window:n=2", k)]["span_recall_mean"] >= summary[("none", k)]["span_recall_mean"]
        assert summary[("window:n=2", k)]["retrieved_tokens_mean"] > summary[("none", k)]["retrieved_tokens_mean"]


@pytest.mark.parametrize("value", ["window:n=-1", "parent:size=0", "sentence:n=1", "window", "parent:size=x"])
def test_bad_values_are_one_line(value):
    from chunkeval.errors import InputError

    with pytest.raises(InputError, match="expand takes none"):
        Experiment.from_dict({"expand": value})


@pytest.mark.slow  # a warehouse with two runs: its views and summaries take seconds on two shared cores
def test_the_axis_reaches_the_warehouse_and_older_runs_read_none(demo, tmp_path):
    """An old run (no expand column) and a new one: trend pairs `none` across them with the same config id,
    compare and regressions see each expansion as a configuration, labels show it and leave `none` out."""
    from chunkeval.vocabulary import config_id, config_label
    from chunkeval.warehouse import Warehouse

    exp, result = demo
    wh = Warehouse(tmp_path / "warehouse")
    pq, summary = result.per_query, result.summary
    none_rows = np.asarray(pq["expand"].to_pylist()) == "none"
    old_pq = pq.filter(none_rows).drop_columns(["expand"])
    old_summary = summary.filter(np.asarray(summary["expand"].to_pylist()) == "none").drop_columns(["expand"])
    old = wh.begin_run("expand", {}, "manual", exp.with_overrides(expand=("none",)).to_dict())
    wh.complete_run(old, RunResult(old_pq, old_summary, references=result.references))
    new = wh.begin_run("expand", {}, "manual", exp.to_dict())
    wh.complete_run(
        new, RunResult(pq, summary, references=result.references, retrieved=result.retrieved, corpora=result.corpora)
    )
    rows = wh.trend("expand", "span_recall")
    by_key = {}
    for row in rows:
        by_key.setdefault((row["expand"], row["k"]), []).append(row)
    assert [r["run_id"] for r in by_key[("none", 5)]] == [old, new]  # the old run's rows read `none`
    assert len(by_key[("window:n=2", 5)]) == 1 and by_key[("none", 5)][1]["change"] == pytest.approx(0)
    row = by_key[("window:n=2", 5)][0]
    assert "window:n=2" in row["label"] and "none" not in config_label({**row, "expand": "none"})
    assert row["config_id"] == config_id(row) and by_key[("none", 5)][0]["config_id"] == config_id(
        {k: v for k, v in by_key[("none", 5)][0].items() if k != "expand"}
    )
    compared = wh.compare("span_recall", [new])
    sides = [c[side] for c in compared for side in ("a", "b") if isinstance(c.get(side), dict)]
    assert {s.get("expand") for s in sides} >= {"window:n=2", "parent:size=150"}
    assert wh.regressions("expand", ["span_recall"], 0.0, baseline=old) == []  # none against none: unchanged
    kept = wh.retrieved(new).to_pylist()
    assert {r["expand"] for r in kept} == set(exp.expand)
