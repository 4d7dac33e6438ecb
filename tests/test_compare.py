"""Intervals in every summary, and `chunkeval compare`, against scipy.stats on real results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from chunkeval import stats
from chunkeval.analysis import comparisons as C
from chunkeval.cli import main
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.scoring.metrics import METRICS
from chunkeval.errors import InputError
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

ORACLE = Path(__file__).parent / "data" / "ranx_oracle.json"
_spec = importlib.util.spec_from_file_location("make_ranx_oracle", ORACLE.with_name("make_ranx_oracle.py"))
make_ranx_oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_ranx_oracle)  # writes the TREC files that ranx scored


@pytest.fixture(scope="module")
def swept(shared_home):
    exp = Experiment(
        name="cmp",
        chunker=("fixed_token", "recursive_token"),
        chunk_sizes=(50, 150),
        overlaps=("0",),
        k=(3,),
        retriever=("dense", "bm25"),
    )
    return exp, run_sweep(exp, Embedders(shared_home / "cache" / "embeddings"))


@pytest.fixture()
def recorded(swept, tmp_path, monkeypatch):
    exp, result = swept
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    wh = Warehouse.at_home()
    ids = []
    for per_query in (result.per_query, result.per_query.slice(0, result.per_query.num_rows - 3)):
        run_id = wh.begin_run("cmp", {}, "manual", exp.to_dict())
        wh.complete_run(
            run_id,
            RunResult(per_query, result.summary, texts_embedded=0, references=result.references, models=result.models),
        )
        ids.append(run_id)
    return wh, ids


def test_every_macro_mean_has_its_bootstrap_interval(swept):
    _, result = swept
    pq = result.per_query.to_pylist()
    for row in result.summary.to_pylist():
        mine = [
            r
            for r in pq
            if all(r[k] == row[k] for k in ("model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"))
        ]
        for m in METRICS:
            if row[f"{m}_mean"] is None:  # a metric of no row here (ann_recall_at_k where no index is searched)
                assert row[f"{m}_ci_low"] is None and row[f"{m}_ci_high"] is None
                continue
            assert row[f"{m}_ci_low"] <= row[f"{m}_mean"] + 1e-12 and row[f"{m}_mean"] <= row[f"{m}_ci_high"] + 1e-12
        values = np.array([r["span_recall"] for r in mine])
        assert (row["span_recall_ci_low"], row["span_recall_ci_high"]) == pytest.approx(
            stats.bootstrap_ci(values), abs=1e-12
        )
    by_corpus = result.by_corpus.column_names
    assert "mrr_ci_low" in by_corpus and "mrr_ci_high" in by_corpus


def test_compare_within_a_run_agrees_with_scipy(recorded, capsys):
    wh, (run_id, _) = recorded
    assert main(["compare", "--run", run_id, "--metric", "span_recall", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 7  # 8 configurations, each against the best
    per_query = wh.query_results(run_id)
    for r in results:
        a = C.values_of(per_query, {k: v for k, v in r["a"].items() if k != "run_id"}, "span_recall")
        b = C.values_of(per_query, {k: v for k, v in r["b"].items() if k != "run_id"}, "span_recall")
        x, y, _ = C.pair(a, b)
        assert r["n_queries"] == 28 and r["mean_a"] >= r["mean_b"]
        assert r["mean_diff"] == pytest.approx(np.mean(x - y))
        if np.ptp(x - y) > 0:
            assert r["p_ttest"] == pytest.approx(sps.ttest_rel(x, y).pvalue, abs=1e-12)
            oracle = sps.permutation_test(
                (x, y),
                lambda u, v: np.mean(u - v),
                permutation_type="samples",
                n_resamples=10_000,
                alternative="two-sided",
                random_state=1,
            )
            assert abs(r["p_permutation"] - oracle.pvalue) < 0.03
        assert r["ci_low"] <= r["mean_diff"] <= r["ci_high"]
        assert set(r) >= {
            "a",
            "b",
            "metric",
            "n_queries",
            "mean_a",
            "mean_b",
            "mean_diff",
            "ci_low",
            "ci_high",
            "p_ttest",
            "p_permutation",
            "p_adjusted",
        }
    np.testing.assert_allclose([r["p_adjusted"] for r in results], stats.holm([r["p_permutation"] for r in results]))
    assert main(["compare", "--run", run_id, "--metric", "span_recall", "--all-pairs", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 8 * 7 // 2
    assert main(["compare", "--run", run_id, "--metric", "mrr", "--config", "retriever=bm25"]) == 0
    assert "Holm over 3 comparison(s)" in capsys.readouterr().out


def test_compare_two_runs_pairs_queries_by_id(recorded, capsys):
    wh, (first, second) = recorded
    assert main(["compare", "--run", first, "--run", second, "--metric", "recall_at_k", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 8 and all(r["a"]["run_id"] == first and r["b"]["run_id"] == second for r in results)
    short = [r for r in results if r["n_unmatched"]]
    assert len(short) == 1 and short[0]["n_queries"] == 25 and short[0]["n_unmatched"] == 3
    assert all(r["mean_diff"] == pytest.approx(r["mean_a"] - r["mean_b"]) for r in results if not r["n_unmatched"])


def test_compare_two_run_files(tmp_path, capsys):
    rng = np.random.default_rng(3)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{q} 0 d{d} 1\n" for q in range(30) for d in rng.choice(50, 3, replace=False)))
    for name, noise in (("a.run", 0.2), ("b.run", 2.0)):
        lines = []
        for q in range(30):
            relevant = {f"d{d}" for d in range(50) if f"q{q} 0 d{d} 1" in qrels.read_text()}
            scores = {f"d{d}": rng.normal() * noise + (1.0 if f"d{d}" in relevant else 0.0) for d in range(50)}
            lines += [f"q{q} Q0 {d} 0 {s:.6f} t\n" for d, s in scores.items()]
        (tmp_path / name).write_text("".join(lines))
    assert (
        main(
            [
                "compare",
                "--gold",
                str(qrels),
                "--run-file",
                str(tmp_path / "a.run"),
                "--run-file",
                str(tmp_path / "b.run"),
                "--format",
                "trec",
                "--metric",
                "ndcg_at_k",
                "--k",
                "10",
                "--json",
            ]
        )
        == 0
    )
    (r,) = json.loads(capsys.readouterr().out)
    assert (
        r["n_queries"] == 30
        and r["mean_a"] > r["mean_b"]
        and r["p_permutation"] < 0.05
        and r["p_adjusted"] == r["p_permutation"]
    )


def test_compare_agrees_with_ranx(tmp_path):
    """ranx's `compare` on the same TREC files: equal means and t-test p-values, and its Fisher
    randomisation test (sign flips per query, two-sided) within Monte-Carlo error.

    ranx's values are stored in tests/data/ranx_oracle.json by tests/data/make_ranx_oracle.py (numba
    compiles ranx for about a minute on a fresh installation, so the suite never runs it)."""
    from chunkeval.engine.inputs.run_files import load_gold_and_run
    from chunkeval.engine.scoring.metrics import score_run

    oracle = json.loads(ORACLE.read_text(encoding="utf-8"))
    assert make_ranx_oracle.write_trec_files(tmp_path) == oracle["files_sha256"]  # the files ranx scored
    ours = {}
    for name in ("a.run", "b.run"):
        gold, run = load_gold_and_run(tmp_path / "qrels.txt", tmp_path / name, "trec")
        ours[name] = score_run(gold, run, 10)[0]
    assert set(oracle["metrics"]) == {"ndcg_at_k", "map", "mrr", "precision_at_k", "recall_at_k"}
    for test in ("student", "fisher"):
        report = oracle[test]
        for metric, theirs in oracle["metrics"].items():
            values = [dict(zip(t["query_id"].to_pylist(), t[metric].to_pylist(), strict=True)) for t in ours.values()]
            assert len(values[0]) == len(values[1]) == 40
            r = C.compare(values[0], values[1], {"run": "a"}, {"run": "b"}, metric)
            assert (r["mean_a"], r["mean_b"]) == pytest.approx(
                (report["mean_a"][theirs], report["mean_b"][theirs]), abs=1e-12
            )
            p = report["p"][theirs]
            if test == "student":
                assert r["p_ttest"] == pytest.approx(p, abs=1e-9), metric
            else:
                assert abs(r["p_permutation"] - p) < 0.03, metric


def test_compare_and_the_alert_rule_from_the_python_api(swept, recorded, capsys):
    import chunkeval
    from chunkeval.api import Results

    exp, result = swept
    wh, (first, second) = recorded
    res = Results(result.summary, result.per_query)
    within = chunkeval.compare(res, metric="span_recall")
    assert main(["compare", "--run", first, "--metric", "span_recall", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)

    def strip(results):  # per pair of configurations (the run ids aside), its numbers
        side = lambda s: tuple(sorted((k, v) for k, v in s.items() if k != "run_id"))  # noqa: E731
        return {(side(r["a"]), side(r["b"])): {k: v for k, v in r.items() if k not in ("a", "b")} for r in results}

    assert strip(within) == strip(cli)  # the same numbers as the command
    assert chunkeval.compare(first, metric="span_recall") == cli
    across = chunkeval.compare(first, second, metric="mrr", config={"retriever": "bm25"})
    assert len(across) == 4 and all(r["a"]["run_id"] == first for r in across)
    shorter = Results(result.summary, result.per_query.slice(0, result.per_query.num_rows - 3))
    in_memory = chunkeval.compare(res, shorter, metric="mrr", config={"retriever": "bm25"})
    assert strip(in_memory) == strip(across)
    assert chunkeval.regressions("cmp") == []  # the second run lost three query rows, nothing fell
    with pytest.raises(InputError, match="unknown metric"):
        chunkeval.compare(res, metric="accuracy")
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        chunkeval.compare(res, metric="mrr", alpha=0)
    with pytest.raises(InputError, match="no configuration of a matches"):
        chunkeval.compare(res, metric="mrr", config={"chunk_size": 999})
    with pytest.raises(InputError, match="no experiment named 'nosuch'"):
        chunkeval.regressions("nosuch")


def test_no_common_query_is_an_error():
    with pytest.raises(InputError, match="no query in common"):
        C.pair({"a": 1.0}, {"b": 1.0})


def test_configurations_of_an_arrow_table_pair_when_a_key_is_null():
    """A sweep's per-query table holds `candidates` null where nothing was reranked: its configurations pair
    by that null, as the warehouse's columns do (a null read through numpy was NaN, which pairs with nothing)."""
    import pyarrow as pa

    table = pa.table(
        {
            "k": [5, 5, 10, 10],
            "candidates": pa.array([None, None, None, None], pa.int64()),
            "query_id": ["q1", "q2", "q1", "q2"],
        }
    )
    assert C.rows_by_config(table, ["k", "candidates"]) == {
        (5, None): {"q1": 0, "q2": 1},
        (10, None): {"q1": 2, "q2": 3},
    }
    columns = {name: np.array(table[name].to_pylist(), dtype=object) for name in table.column_names}
    assert C.rows_by_config(columns, ["k", "candidates"]) == C.rows_by_config(table, ["k", "candidates"])


def test_configurations_tied_with_the_best_are_marked(recorded, capsys, tmp_path):
    wh, (run_id, _) = recorded
    per_query = wh.query_results(run_id)
    comparisons = C.within_run(per_query, "span_precision", run_id)
    tied = C.tied_with_best(per_query, "span_precision")
    grid = C.query_grid(
        per_query
    )  # one batch of sign flips: a null key (candidates) is one configuration, not one per row
    assert grid is not None and grid.shape == (28, len(C.configurations(per_query)))
    assert tied[0] == {k: v for k, v in comparisons[0]["a"].items() if k != "run_id"}
    assert len(tied) == 1 + sum(c["p_adjusted"] >= 0.05 for c in comparisons)
    assert main(["report", "--run", run_id]) == 0
    out = capsys.readouterr().out
    assert "* tied with the best of its metric" in out and "*  " in out
    assert main(["report", "--experiment", "cmp", "--run", run_id, "--html", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert 'class="tied"' in html and "bootstrap interval" in html


def test_the_worked_example_of_the_docs():
    a, b = [1, 1, 0.5, 1, 0], [0.5, 1, 0, 0.5, 0]
    result = C.compare(dict(zip("vwxyz", a)), dict(zip("vwxyz", b)), {"side": "a"}, {"side": "b"}, "span_recall")
    assert result["mean_diff"] == pytest.approx(0.3)
    assert result["p_ttest"] == pytest.approx(0.0705, abs=5e-5)
    assert result["p_permutation"] == pytest.approx(0.25)  # exact: 8 of the 32 sign flips


def test_the_trade_off_chart_carries_the_intervals_as_error_bars():
    from chunkeval.report import charts

    recall, precision, tokens = np.array([0.5, 0.8, 0.9]), np.array([0.4, 0.3, 0.1]), np.array([100.0, 200.0, 400.0])
    plain = charts.tradeoff(["a", "b", "c"], recall, precision, tokens)
    with_bars = charts.tradeoff(
        ["a", "b", "c"], recall, precision, tokens, (recall - 0.05, recall + 0.04), (precision - 0.02, precision + 0.03)
    )
    assert plain.count('class="errorbar"') == 0 and with_bars.count('class="errorbar"') == 3  # a bar per configuration


def test_the_decision_names_the_best_and_what_it_beats_as_the_stars_do(recorded, capsys):
    """`decision` (the first line of run, sweep and report, and of the HTML's first screen): the best configuration
    of the headline metric, the runner-up and the default each with best − other, its paired t interval (scipy's)
    and the adjusted p of the very tests that star the ties, so that 'not told apart' and a star never disagree."""
    wh, (run_id, _) = recorded
    per_query = wh.query_results(run_id)
    d = C.decision(per_query, "span_precision")
    tied = C.tied_with_best(per_query, "span_precision")
    assert d["best"] == tied[0] and d["tied"] == len(tied) - 1 and d["n_queries"] == 28
    for side in (d["runner_up"], d["default"]):
        if side is None:
            continue
        a = C.values_of(per_query, d["best"], "span_precision")
        b = C.values_of(per_query, side["config"], "span_precision")
        x, y, n = C.pair(a, b)
        low, high = sps.ttest_rel(x, y).confidence_interval(0.95)
        assert side["difference"] == pytest.approx(float(np.mean(x - y)), abs=1e-12)
        assert side["ci_low"] == pytest.approx(max(low, -1.0), abs=1e-9)
        assert side["ci_high"] == pytest.approx(min(high, 1.0), abs=1e-9)
        assert side["significant"] == (side["config"] not in tied)
    runner = max((c for c in C.configurations(per_query) if c != d["best"]),
                 key=lambda c: np.mean(list(C.values_of(per_query, c, "span_precision").values())))  # fmt: skip
    assert d["runner_up"]["config"] == runner
    assert main(["report", "--run", run_id, "--metrics", "span_precision"]) == 0
    out = capsys.readouterr().out
    assert "decision on span_precision: best" in out.split("configuration")[0]  # it leads, before the table
