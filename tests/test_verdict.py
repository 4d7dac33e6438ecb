"""One verdict: trend, the trend-report flow, the Python API, `diff` and the HTML report give the same verdict,
p-values and signed change for the same two real runs of the demo (the second after half of its questions were
reworded into words the corpus lacks: a real fall); runs with nothing comparable exit 3, never "no regression";
a damaged results file is a fault (exit 4) named in one line, and `warehouse repair` quarantines its run; and the
harm of issue 45 (a paragraph repeating six questions appended to the documents), which Holm let pass, alarms
the default gate."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from html import escape
from pathlib import Path

import pytest
import yaml

import chunkeval
from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.errors import NothingComparable
from chunkeval.paths import DEMO_DIR
from chunkeval.report.terminal import regression_message
from chunkeval.run_result import RunResult
from chunkeval.stats import holm
from chunkeval.warehouse import Warehouse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gate_power  # noqa: E402  (the harm of bench/gate_power.py, as the bench makes it)


def record(wh: Warehouse, exp: Experiment, result) -> str:
    run_id = wh.begin_run(exp.name, {}, "manual", exp.to_dict())
    kept = {"by_corpus": result.by_corpus, "retrieved": result.retrieved, "corpora": result.corpora}
    wh.complete_run(
        run_id, RunResult(result.per_query, result.summary, texts_embedded=0, references=result.references, **kept)
    )
    return run_id


@pytest.fixture(scope="module")
def worse(tmp_path_factory, embedder_factory):
    """Runs a (the demo) and b (half the questions reworded: retrieval falls) of experiment `verdict`, and the
    sweeps' results."""
    root = tmp_path_factory.mktemp("verdict")
    shutil.copytree(DEMO_DIR / "corpora", root / "corpora")
    settings = {"name": "verdict", "corpus_dir": str(root / "corpora"), "questions": str(root / "questions.csv"),
                "chunker": ["fixed_token"], "chunk_sizes": [100], "overlaps": [0], "k": [1, 3], "retriever": ["bm25"]}  # fmt: skip
    shutil.copy(DEMO_DIR / "questions.csv", root / "questions.csv")
    exp = Experiment.from_dict(settings)
    (root / "verdict.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")  # what the flow is given
    wh = Warehouse(root / "home" / "warehouse")
    good = run_sweep(exp, embedder_factory())
    a = record(wh, exp, good)
    with open(DEMO_DIR / "questions.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, row in enumerate(rows):  # the same rows (the same query ids), every other one asking about nothing here
        if i % 2 == 0:
            row["question"] = "xylophone quasar zeppelin"
    with open(root / "questions.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    bad = run_sweep(exp, embedder_factory())
    b = record(wh, exp, bad)
    return root / "home", a, b, exp, bad, root / "verdict.yaml"


@pytest.fixture()
def home(worse, tmp_path, monkeypatch):
    """A copy of the module's home, CHUNKEVAL_HOME pointing at it."""
    copy = tmp_path / "home"
    shutil.copytree(worse[0], copy)
    monkeypatch.setenv("CHUNKEVAL_HOME", str(copy))
    return copy


def check_key(c: dict) -> tuple:
    return (c["chunk_size"], c["k"], c["metric"], c.get("slice"))


@pytest.mark.usefixtures("prefect_api")
def test_trend_the_flow_the_api_diff_and_the_report_give_one_verdict(worse, home, capsys):
    _, a, b, _, _, settings = worse
    api = chunkeval.regressions("verdict")  # the watched list over every paired configuration
    v = api.verdict
    assert v["verdict"] == "regression" and api and v["run_id"] == b and v["reference_run_id"] == a
    assert len(v["checks"]) > 2 * 2 and {c["metric"] for c in v["checks"]} >= {"span_recall", "mrr"}
    assert all(f["change"] < -0.02 and f["change"] == pytest.approx(f["after"] - f["before"]) for f in api)  # new − old

    # trend --fail-on-regression, without --metric: the same regressions, each line as the API's
    assert main(["trend", "--experiment", "verdict", "--fail-on-regression"]) == 1
    captured = capsys.readouterr()
    said = " ".join(captured.out.split())  # the verdict folds at 120 columns
    assert said.startswith("REGRESSION: ") and f"step-down max-T over {len(v['checks'])} check(s)" in said
    assert (v["procedure"], v["n_resamples"], v["seed"]) == ("step-down max-T", 10_000, 0)
    assert captured.err.strip().splitlines() == [regression_message(f) for f in api]

    # diff: the same checks (p-values, signed change, verdict) for the metric it shows
    assert main(["diff", "--run", a, "--run", b, "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    by_key = {check_key(c): c for c in v["checks"]}
    for d in docs:
        c = by_key[(d["chunk_size"], d["k"], d["metric"], None)]
        assert (d["change"], d["p_adjusted"], d["regression"]) == (c["change"], c["p_adjusted"], c["regression"])
        assert d["change"] == pytest.approx(d["after"] - d["before"])
    # narrowed to one metric: the family is that metric's, in every caller alike
    one = chunkeval.regressions("verdict", metrics=["mrr"]).verdict
    assert main(["diff", "--run", a, "--run", b, "--metric", "mrr", "--json"]) == 0
    narrowed = {(d["chunk_size"], d["k"]): (d["change"], d["p_adjusted"]) for d in json.loads(capsys.readouterr().out)}
    assert narrowed == {(c["chunk_size"], c["k"]): (c["change"], c["p_adjusted"]) for c in one["checks"]}
    assert main(["trend", "--experiment", "verdict", "--metric", "mrr", "--fail-on-regression"]) == (
        1 if one["regressions"] else 0
    )
    assert capsys.readouterr().err.strip().splitlines() == [regression_message(f) for f in one["regressions"]]

    # the HTML report: each regression with its adjusted p
    from chunkeval.report.html import build_report

    page = build_report(Warehouse.at_home(), "verdict")
    assert all(f"<td>{f['p_adjusted']:.2g}</td>" in page for f in api)

    # the weekly flow: fails with the same regressions; the pages it writes say the same verdict and p-values
    from chunkeval.analysis.regression import verdict_line
    from chunkeval.flows.trend_report import RegressionDetected, trend_report

    with pytest.raises(RegressionDetected, match=f"^{len(api)} regression"):
        trend_report(experiments=[str(settings)])
    reports = home / "warehouse" / "reports"
    assert escape(verdict_line(v)) in (reports / "verdict" / f"diff-{a}-{b}.html").read_text(encoding="utf-8")
    flow_page = (reports / "verdict.html").read_text(encoding="utf-8")
    assert all(f"<td>{f['p_adjusted']:.2g}</td>" in flow_page for f in api)


def test_nothing_comparable_is_its_own_exit_and_never_no_regression(worse, home, capsys, embedder_factory):
    _, a, b, exp, _, _ = worse
    wh = Warehouse(home / "warehouse")
    assert main(["baseline", "--experiment", "verdict", "--run", a]) == 0
    other = exp.with_overrides(chunk_sizes=(60,))  # a new grid: no configuration of the baseline's
    record(wh, other, run_sweep(other, embedder_factory()))
    capsys.readouterr()
    for argv in (["trend", "--experiment", "verdict", "--fail-on-regression"],
                 ["-v", "trend", "--experiment", "verdict", "--metric", "span_recall", "--fail-on-regression"]):  # fmt: skip
        assert main(argv) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "nothing comparable" in err[0] and "share no configuration" in err[0], err
    with pytest.raises(NothingComparable, match="share no configuration"):
        chunkeval.regressions("verdict")
    assert main(["diff", "--run", a, "--run", wh.last_completed("verdict")["run_id"]]) == 3
    assert "nothing comparable" in capsys.readouterr().err


def truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_damaged_results_file_is_a_fault_and_repair_quarantines_its_run(worse, home, capsys):
    _, a, b, exp, bad, _ = worse
    wh = Warehouse(home / "warehouse")
    c = record(wh, exp, bad)  # a third night, as the second
    damaged = wh.results_dir / b / "per_query.parquet"
    truncate(damaged)
    for argv in (
        ["trend", "--experiment", "verdict", "--fail-on-regression"],
        ["report", "--experiment", "verdict", "--html", str(home / "r.html")],
        ["diff", "--run", a, "--run", b],
        ["warehouse", "snapshot", str(home / "snap.duckdb")],
    ):
        assert main(argv) == 4, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(damaged) in err[0] and "warehouse repair" in err[0], (argv, err)
        assert not (home / "r.html").exists() and not (home / "snap.duckdb").exists()
    assert main(["warehouse", "repair"]) == 0
    out = capsys.readouterr().out
    assert f"run {b} quarantined" in out and "per_query.parquet cannot be read" in out
    assert wh.run(b)["status"] == "quarantined" and (damaged.parent / "per_query.parquet.damaged").is_file()
    assert main(["runs", "--json"]) == 0
    assert {r["run_id"]: r["status"] for r in json.loads(capsys.readouterr().out)}[b] == "quarantined"
    # the comparison leaves it out, and says so: c against a
    assert main(["trend", "--experiment", "verdict", "--fail-on-regression"]) == 1  # c fell against a, as b did
    captured = capsys.readouterr()
    said = " ".join(captured.out.split())  # the verdict folds at 120 columns
    assert f"run {c} against {a}" in said and f"left out: run {b} (quarantined" in captured.err
    assert main(["warehouse", "snapshot", str(home / "snap.duckdb")]) == 0
    capsys.readouterr()

    # a damaged pinned baseline: the fault, and how to pin another
    assert main(["baseline", "--experiment", "verdict", "--run", a]) == 0
    truncate(wh.results_dir / a / "per_query.parquet")
    for _ in range(2):  # damaged, then quarantined by a repair
        assert main(["trend", "--experiment", "verdict", "--fail-on-regression"]) == 4
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"the pinned baseline of experiment 'verdict', run {a}, cannot be read" in err[0]
        assert "pin another with `chunkeval baseline --experiment verdict --run <run-id>`" in err[0]
        assert main(["warehouse", "repair"]) == 0
        capsys.readouterr()


def test_the_issues_harm_alarms_the_default_gate(tmp_path, monkeypatch, capsys, embedder_factory):
    """Issue 45: a copy of the demo, bm25 over fixed and recursive 100-token chunks at k 1 and 5; the second run after
    a paragraph repeating six questions (the first two of each document) is appended to the documents. Span recall
    of recursive_token at k 1 falls from 0.984 to 0.734 (7 of 28 questions). Holm over the 24 checks' t-tests passed
    it (p 0.13); the default gate, `trend --fail-on-regression` without --metric, alarms (max-T p 0.018)."""
    inputs = gate_power.set_up("demo", tmp_path / "inputs")
    exp = gate_power.experiment(inputs, name="harm")
    wh = Warehouse(tmp_path / "home" / "warehouse")
    before = run_sweep(exp, embedder_factory())
    record(wh, exp, before)
    gate_power.distract(inputs, gate_power.first_of_each_document(gate_power.gold(inputs)))
    after = run_sweep(exp, embedder_factory())
    record(wh, exp, after)
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    capsys.readouterr()
    assert main(["trend", "--experiment", "harm", "--fail-on-regression"]) == 1
    assert "step-down max-T over 24 check(s), 10,000 sign flips" in capsys.readouterr().out
    v = chunkeval.regressions("harm").verdict
    fell = next(c for c in v["checks"] if (c["chunker"], c["k"], c["metric"]) == ("recursive_token", 1, "span_recall"))
    assert (round(fell["before"], 3), round(fell["after"], 3), round(fell["p_adjusted"], 4)) == (0.984, 0.734, 0.0182)
    by_holm = holm([c["p_ttest"] for c in v["checks"]])
    assert fell["regression"] and round(by_holm[v["checks"].index(fell)], 3) == 0.132
    assert not any(c["change"] < -0.02 and p < 0.05 for c, p in zip(v["checks"], by_holm))  # what Holm said


def test_a_verdict_asked_again_in_one_process_is_the_same_and_the_callers_own(worse, home):
    """`chunkeval run` asks the verdict of its run twice (its report, then what it tells): the second is the first,
    made once per process (`baselines._VERDICTS`), equal to one made afresh, and each caller's copy its own."""
    from chunkeval.warehouse import baselines

    wh = Warehouse(home / "warehouse")
    first = wh.verdict("verdict")
    first["left_out"].append({"run_id": "x", "why": "a caller's own addition"})
    again = wh.verdict("verdict")
    assert again["left_out"] == [] and again["verdict"] == first["verdict"]
    baselines._VERDICTS.clear()
    afresh = wh.verdict("verdict")
    assert json.dumps(afresh, default=str, sort_keys=True) == json.dumps(again, default=str, sort_keys=True)
