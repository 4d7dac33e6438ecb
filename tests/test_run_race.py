"""`chunkeval run --race` (issue 43; docs/statistics.md "Racing", docs/commands.md): a real run through the flow on
the demo's corpus and gold set, bm25 (no model to load) at k 1, 5 and 10, raced on precision_at_k, where k 10 is
clearly worse: the race drops it, evaluates fewer cells than the grid, records the race in the warehouse and
prints it within 120 columns; every row it kept equals the full run's. The settings' bad values are one line,
exit 2, in tests/test_catalogue.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.race import subset
from chunkeval.engine.pipeline.records import Embedded
from chunkeval.engine.pipeline.sweep import load_inputs
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR
from chunkeval.warehouse import Warehouse

GRID = ["--chunker", "fixed_token", "--chunk-sizes", "200", "--k", "1,5,10", "--retriever", "bm25",
        "--corpus-dir", str(DEMO_DIR / "corpora"), "--questions", str(DEMO_DIR / "questions.csv")]  # fmt: skip
KEYS = ["chunker", "chunk_size", "chunk_overlap", "k", "query_id"]


def rows(wh: Warehouse, run_id: str) -> dict:
    return {tuple(r[k] for k in KEYS): r for r in wh.query_results(run_id).to_pylist()}


def test_a_raced_run_drops_the_worse_configuration_and_agrees_with_the_full_run(tmp_path, monkeypatch, prefect_api,
                                                                                 capsys):  # fmt: skip
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    assert main(["run", "--experiment", "full", *GRID]) == 0
    capsys.readouterr()
    assert main(["run", "--experiment", "raced", *GRID, "--race", "--race-metric", "precision_at_k",
                 "--race-batch", "2", "--race-seed", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    wh = Warehouse.at_home()
    full, raced = wh.last_completed("full")["run_id"], wh.last_completed("raced")["run_id"]
    race = wh.race(raced)
    assert wh.race(full) is None and json.loads(wh.manifest_path(raced).read_text())["race"] == race
    assert race["metric"] == "precision_at_k" and race["total_cells"] == 28 * 3
    dropped = {d["label"]: d["after"] for d in race["dropped"]}
    assert "bm25/k=10" in dropped  # clearly worse: dropped
    assert race["cells"] < race["total_cells"] and race["share"] == race["cells"] / race["total_cells"]
    assert race["leader"]["label"] == "bm25/k=1" and "bm25/k=1" not in dropped
    settings = json.loads(wh.run(raced)["settings"])
    assert settings["race"] is True and settings["race_seed"] == 3
    assert "race" not in json.loads(wh.run(full)["settings"])  # a full run records its settings as before

    got, want = rows(wh, raced), rows(wh, full)
    assert len(got) == race["cells"] < len(want)
    metrics = ["precision_at_k", "recall_at_k", "ndcg_at_k", "mrr", "span_iou"]
    for key, row in got.items():  # every cell the race evaluated is the full run's cell
        assert {m: row[m] for m in metrics} == pytest.approx({m: want[key][m] for m in metrics}, abs=1e-12)
    assert len([r for r in got.values() if r["k"] == 10]) == dropped["bm25/k=10"]  # its rows stop at its drop
    by_k = {r["k"]: r["n_queries"] for r in wh.summary(raced).to_pylist()}
    assert by_k[10] == dropped["bm25/k=10"] and by_k[1] == race["questions"]  # n_queries says so

    # the gate judges full runs: a raced run of the experiment is left out, and named; a diff of one is refused
    assert main(["run", "--experiment", "full", *GRID]) == 0
    assert main(["run", "--experiment", "full", *GRID, "--race", "--race-metric", "precision_at_k"]) == 0
    capsys.readouterr()
    raced_full = wh.last_completed("full")["run_id"]
    assert main(["trend", "--experiment", "full", "--fail-on-regression"]) == 0
    gate = capsys.readouterr()
    assert f"left out: run {raced_full} (raced" in gate.err and gate.out.startswith("no regression")
    assert main(["diff", "--run", raced_full, "--run", full]) == 2
    assert f"run {raced_full} was raced (race: true)" in capsys.readouterr().err
    # a raced run is named as what it is wherever runs are listed or judged, and never becomes the baseline
    flat = " ".join(out.split())  # the raced experiment's own run: no full run to judge, the raced one named
    assert f"verdict: no full run to compare with yet; left out: run {raced} (raced" in flat, out
    assert main(["baseline", "--experiment", "raced", "--run", raced]) == 2
    assert f"run {raced} was raced (race: true), scored on part of the questions" in capsys.readouterr().err
    assert main(["runs"]) == 0
    listed = {
        line.split()[0]: line.split()[2] for line in capsys.readouterr().out.splitlines()[2:] if line[:1].isdigit()
    }
    assert listed[raced] == listed[raced_full] == "raced" and listed[full] == "completed"
    assert main(["trend", "--experiment", "full", "--metric", "mrr"]) == 0
    shown = capsys.readouterr().out
    assert f"{raced_full} R" in shown and "(R: a raced run" in shown and f"{full} R" not in shown

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("race on "))
    said = [lines[start]] + [line for line in lines[start + 1 :] if line.startswith("  ")]
    assert said and all(len(line) <= 120 for line in said)
    assert said[0].startswith(f"race on precision_at_k (alpha 0.05, delta 0.01): {race['cells']} of 84 cells (")
    assert said[1].startswith("  stopped (") and said[2].startswith("  the leader is ")
    assert any(line.startswith("  dropped bm25/k=10 [") for line in said)


def test_a_batch_is_the_gold_set_of_its_questions_alone():
    exp = Experiment(corpus_dir=str(DEMO_DIR / "corpora"), questions=str(DEMO_DIR / "questions.csv"),
                     retriever=("bm25",))  # fmt: skip
    inputs = load_inputs(exp, quiet=True)
    gold = inputs.gold
    rows = np.array([2, 5, 11])
    part, vectors = subset(inputs, Embedded({"m": np.arange(gold.n_queries)}, {}, {}), rows)
    assert vectors.queries["m"].tolist() == [2, 5, 11]
    assert part.gold.query_ids == [gold.query_ids[i] for i in rows]
    for j, i in enumerate(rows):
        mine = sorted(zip(gold.ref_start[gold.ref_query == i], gold.ref_end[gold.ref_query == i]))
        theirs = zip(part.gold.ref_start[part.gold.ref_query == j], part.gold.ref_end[part.gold.ref_query == j])
        assert sorted(theirs) == mine


def test_race_settings_are_checked_before_anything_runs():
    with pytest.raises(InputError, match="race_alpha takes a number between 0 and 1"):
        Experiment(race=True, race_alpha=1.0).validate()
    with pytest.raises(InputError, match="race_delta is a setting of a race"):
        Experiment(race_delta=0.02).validate()
    with pytest.raises(InputError, match="doc_ndcg_at_k is scored under document gold"):
        Experiment(race=True, race_metric="doc_ndcg_at_k").validate()


def test_a_race_stops_before_the_batch_that_would_pass_its_budget():
    import chunkeval

    r = chunkeval.evaluate(str(DEMO_DIR / "corpora"), str(DEMO_DIR / "questions.csv"), chunker=["fixed_token"],
                           chunk_sizes=[200], k=[1, 5, 10], retriever=["bm25"], race=True, race_batch=2,
                           race_metric="recall_at_k", budget=20)  # fmt: skip
    assert r.race["stopped"] == "budget" and r.race["cells"] == 18 and r.race["bound"] is None  # 3 batches of 6
    assert r.per_query.num_rows == 18 and set(r.per_query.column("k").to_pylist()) == {1, 5, 10}
    with pytest.raises(
        InputError, match=r"budget 5 cells is less than the race's first batch: 6 cells \(2 question\(s\) × 3"
    ):
        chunkeval.evaluate(str(DEMO_DIR / "corpora"), str(DEMO_DIR / "questions.csv"), chunker=["fixed_token"],
                           chunk_sizes=[200], k=[1, 5, 10], retriever=["bm25"], race=True, race_batch=2,
                           budget=5)  # fmt: skip
