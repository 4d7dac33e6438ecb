"""The Prefect flows, run in the test process against the session's real Prefect server (`prefect_api`)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from prefect.client.orchestration import get_client

from chunkeval.engine.chunking import chunk_corpora
from chunkeval.engine.embedding import text_hash
from chunkeval.engine.inputs.corpus import load_corpora
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.flows.evaluate import evaluate
from chunkeval.flows.trend_report import RegressionDetected, trend_report
from chunkeval.flows.watch import watch
from chunkeval.paths import DEMO_DIR, home
from chunkeval.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_api")


@pytest.fixture()
def own_home(tmp_path, monkeypatch):
    """A fresh CHUNKEVAL_HOME (cache and warehouse) for tests that count what gets embedded."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def small_experiment(tmp_path, name="small", **overrides) -> str:
    """A copy of the demo data and a small grid, as an experiment file."""
    data = tmp_path / name
    shutil.copytree(DEMO_DIR / "corpora", data / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", data / "questions.csv")
    settings = {
        "name": name,
        "corpus_dir": "corpora",
        "questions": "questions.csv",
        "chunker": ["fixed_token"],
        "chunk_sizes": [60, 120],
        "overlaps": [0],
        "k": [1, 3],
        **overrides,
    }
    path = data / "experiment.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def test_the_flow_runs_every_axis(tmp_path, own_home):
    """Semantic chunkers (made per model, in tasks that share an embedder), several retrievers."""
    exp_file = small_experiment(
        tmp_path,
        "axes",
        chunker=["fixed_token", "cluster_semantic"],
        chunk_sizes=[100],
        overlaps=[0, "20%"],
        k=[3],
        retriever=["dense", "bm25"],
    )
    result = evaluate(experiment=exp_file)
    wh = Warehouse(own_home / "warehouse")
    keys = {
        (r["model"], r["retriever"], r["chunker"], r["chunk_overlap"]) for r in wh.summary(result["run_id"]).to_pylist()
    }
    assert keys == {
        ("all-MiniLM-L6-v2", "dense", "fixed_token", 0),
        ("all-MiniLM-L6-v2", "dense", "fixed_token", 20),
        ("none", "bm25", "fixed_token", 0),
        ("none", "bm25", "fixed_token", 20),
        ("all-MiniLM-L6-v2", "dense", "cluster_semantic", 0),
        ("all-MiniLM-L6-v2", "bm25", "cluster_semantic", 0),
    }
    (model,) = wh.models(result["run_id"]).to_pylist()
    assert model["texts_embedded"] == result["texts_embedded"] > 0 and model["texts_per_second"] > 0
    check = wh.gold_check(result["run_id"])  # the gold-set check is recorded with the run, for its report
    assert set(check) == {
        "ambiguous_references",
        "overlapping_references",
        "empty_references",
        "long_references",
        "repeated_questions",
        "skipped_documents",  # documents left out as unreadable (issue 20)
        "left_out_qrels",  # qrels rows naming an unreadable or unknown document or query (document gold)
        "retired_questions",  # questions whose references could not be placed in the changed corpus (issue 29)
        "anchoring",  # each question's status: exact, reanchored, approximate, retired
    }


def test_evaluate_records_a_run_and_publishes_its_table(tmp_path, own_home):
    exp_file = small_experiment(tmp_path)
    result = evaluate(experiment=exp_file)
    assert result["status"] == "completed" and result["texts_embedded"] > 0
    wh = Warehouse(own_home / "warehouse")
    run = wh.run(result["run_id"])
    assert run["status"] == "completed" and run["trigger"] == "manual" and run["flow_run_id"]
    assert run["corpus_fingerprint"] and run["gold_fingerprint"] and run["model_fingerprint"]
    assert wh.summary(result["run_id"]).num_rows == 4
    assert wh.query_results(result["run_id"]).num_rows == 4 * 28
    kept = wh.retrieved(result["run_id"])  # what every configuration retrieved, and the texts it read
    assert kept.num_rows > 0 and set(kept["corpus_id"].to_pylist()) <= set(wh.corpus_versions(result["run_id"]))

    async def artifact():
        async with get_client() as client:
            return await client.read_latest_artifacts()

    import asyncio

    artifacts = {a.key: a for a in asyncio.run(artifact())}
    assert "small-summary" in artifacts and "small-report" in artifacts
    page = own_home / "warehouse" / "reports" / "small" / f"{result['run_id']}.html"
    assert result["report"] == str(page) and page.is_file()
    assert page.as_uri() in str(artifacts["small-report"].data)
    assert '<section id="trend">' in page.read_text(encoding="utf-8")

    again = evaluate(experiment=exp_file, if_changed=True)
    assert again == {"run_id": again["run_id"], "status": "skipped", "texts_embedded": 0}
    assert wh.run(again["run_id"])["status"] == "skipped"


def test_a_change_run_embeds_only_the_edited_corpus(tmp_path, own_home):
    exp_file = small_experiment(tmp_path, "edits")
    exp = Experiment.from_yaml(exp_file)
    before = load_corpora(exp.corpus_dir)
    assert evaluate(experiment=exp_file)["status"] == "completed"
    edited = exp.corpus_dir + "/sourdough.md"
    with open(edited, "a", encoding="utf-8") as fh:
        fh.write("\n## Storing bread\n\nKeep the loaf cut side down on a board for a day, then in a paper bag.\n")
    after = load_corpora(exp.corpus_dir)
    # what a content-addressed cache must embed: chunk texts of the new corpus that did not exist before
    old = {text_hash(t) for spec in exp.grid() for t in chunk_corpora(before, spec).texts(before)}
    new = {text_hash(t) for spec in exp.grid() for t in chunk_corpora(after, spec).texts(after)} - old
    assert new
    result = evaluate(experiment=exp_file, if_changed=True)
    assert result["status"] == "completed" and result["texts_embedded"] == len(new)
    sourdough_only = {
        text_hash(t) for spec in exp.grid() for t in chunk_corpora({"sourdough": after["sourdough"]}, spec).texts(after)
    }
    assert new <= sourdough_only


def test_watch_emits_change_events(tmp_path, own_home, monkeypatch):
    """One event per experiment and poll, naming everything that changed; a poll exports and probes nothing, even
    where backend auto has chosen nothing yet (a lossless backend's vectors are the model's own)."""
    from chunkeval.engine.embedding import auto
    from chunkeval.flows.watch import change_events

    monkeypatch.delenv("CHUNKEVAL_AUTO_BACKEND")  # the suite's pin lifted: auto would probe if anyone asked it
    monkeypatch.setenv("CHUNKEVAL_BACKENDS", str(tmp_path / "backends"))
    exp_file = small_experiment(tmp_path, "watched")
    probes = auto.probes_run
    assert watch(experiments=[exp_file]) == {"watched": ["chunkeval.corpus.changed"]}  # never run yet: one event
    assert auto.probes_run == probes and not (tmp_path / "backends").exists()  # nothing probed, nothing exported
    monkeypatch.setenv("CHUNKEVAL_AUTO_BACKEND", "torch")
    evaluate(experiment=exp_file)
    monkeypatch.delenv("CHUNKEVAL_AUTO_BACKEND")
    assert watch(experiments=[exp_file]) == {"watched": []}  # the same fingerprints whatever auto would choose
    settings = json.loads(Warehouse(own_home / "warehouse").last_completed("watched")["settings"])
    assert settings["backend"] == "torch" and "pinned by CHUNKEVAL_AUTO_BACKEND" in settings["backend_auto"]
    last = {"corpus_fingerprint": "c", "gold_fingerprint": "g", "model_fingerprint": "m"}
    assert change_events(last, {"corpus": "c2", "gold": "g", "model": "m2"}) == ["chunkeval.corpus.changed"]
    model = tmp_path / "model"
    from chunkeval.engine.embedding import resolve_model

    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), model)
    (model / "sentence_bert_config.json").write_text('{"max_seq_length": 16, "do_lower_case": false}')
    # backend torch, as the run above resolved auto to here: a model of its own would be probed (docs/backends.md)
    changed = small_experiment(tmp_path / "m", "watched", model=str(model), backend="torch")
    assert watch(experiments=[changed]) == {"watched": ["chunkeval.model.changed"]}


def test_trend_report_fails_on_a_real_regression(tmp_path, own_home):
    from chunkeval.engine.embedding import resolve_model

    model = tmp_path / "model"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), model)
    # backend torch: a model of its own, changed below, would be probed twice by backend auto (docs/backends.md)
    good = small_experiment(tmp_path, "quality", chunk_sizes=[120], k=[3], model=str(model), backend="torch")
    evaluate(experiment=good)
    assert trend_report(experiments=[good]) == {"quality": 0}
    assert (home() / "warehouse" / "reports" / "quality.html").is_file()  # the page, next to the warehouse
    # the model is replaced, at the same path, by one that reads only 16 word pieces of each chunk: quality falls
    (model / "sentence_bert_config.json").write_text('{"max_seq_length": 16, "do_lower_case": false}')
    worse = good
    evaluate(experiment=worse)
    falls = Warehouse(home() / "warehouse").regressions("quality", ["span_recall", "recall_at_k", "mrr"], 0.02)
    assert falls, "a model that reads 16 word pieces must lose quality"
    with pytest.raises(RegressionDetected):
        trend_report(experiments=[worse])
    (diff,) = (home() / "warehouse" / "reports" / "quality").glob("diff-*.html")  # the diff beside the reports,
    assert diff.as_uri() in (home() / "warehouse" / "reports" / "quality.html").read_text(encoding="utf-8")  # linked
    # the same verdict from the command line
    from chunkeval.cli import main

    # (the flow's gate, every watched metric: under the step-down max-T one metric alone, recall@3 here, falls on
    # too few questions to be told from noise by sign flips, docs/statistics.md)
    assert main(["trend", "--experiment", "quality", "--metric", "recall_at_k"]) == 0
    assert main(["trend", "--experiment", "quality", "--fail-on-regression"]) == 1
    assert main(["trend", "--experiment", "quality", "--fail-on-regression", "--threshold", "1"]) == 0


def test_history_commands(tmp_path, own_home, capsys):
    import json

    from chunkeval.cli import main

    exp_file = small_experiment(tmp_path, "history")
    assert main(["run", exp_file]) == 0
    assert "completed" in capsys.readouterr().out
    assert main(["run", exp_file, "--if-changed"]) == 0
    assert "skipped" in capsys.readouterr().out
    assert main(["runs", "--experiment", "history", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in runs] == ["skipped", "completed"] and runs[0]["skipped"] is True
    assert (
        main(["trend", "--experiment", "history", "--metric", "span_recall", "--config", "chunk_size=60,k=3", "--json"])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["run_id"] == runs[1]["run_id"] and 0 <= rows[0]["value"] <= 1
    assert main(["report", "--experiment", "history"]) == 0
    out = capsys.readouterr().out
    assert "macro" in out and "micro" in out and "span_recall" in out
    assert main(["report", "--run", runs[0]["run_id"]]) == 2  # a skipped run has no results
    assert "skipped" in capsys.readouterr().err
    assert main(["run", "--experiment", "history", "--k", "1"]) == 0  # the settings of its last run, k overridden
    assert main(["trend", "--experiment", "history", "--metric", "nope"]) == 2


def test_run_experiment_name_with_settings_defines_then_changes_it(own_home, capsys):
    from chunkeval.cli import main

    assert (
        main(
            [
                "run",
                "--experiment",
                "fresh",
                "--corpus-dir",
                str(DEMO_DIR / "corpora"),
                "--questions",
                str(DEMO_DIR / "questions.csv"),
                "--chunk-sizes",
                "100",
                "--k",
                "1",
                "--retriever",
                "bm25",
            ]
        )
        == 0
    )
    assert "experiment fresh: run " in capsys.readouterr().out
    assert main(["run", "--experiment", "fresh", "--k", "3"]) == 0  # its newest settings, k changed
    wh = Warehouse(own_home / "warehouse")
    newest, first = wh.runs("fresh")
    assert json.loads(first["settings"])["k"] == [1] and json.loads(newest["settings"])["k"] == [3]
    assert json.loads(newest["settings"])["retriever"] == ["bm25"] and newest["texts_embedded"] == 0


LARGE = {"chunk_sizes": list(range(10, 61)), "k": list(range(1, 11))}  # 51 sizes × 10 k of dense: 510 configurations


@pytest.mark.slow
def test_a_scheduled_large_grid_fails_in_one_line_with_its_estimate_from_a_probe_then_from_past_runs(
    tmp_path, own_home
):
    """Off a terminal, as a deployment runs it: a grid past 500 configurations without max_configurations fails
    before anything is embedded, recorded as a failed run whose reason is its one line: the estimate (a probe on a
    first run, past runs once the warehouse has one) and what to set (a scheduled night that cannot start is seen
    in `runs`, and heard of); with max_configurations its estimate is logged and it would run."""
    from chunkeval.errors import InputError

    large = small_experiment(tmp_path, "large", **LARGE)
    want = "this grid scores 510 configurations (each at each k) and embeds about "
    with pytest.raises(InputError) as first:
        evaluate(experiment=large)
    assert want in str(first.value) and "of embedding (from a probe)" in str(first.value)
    assert str(first.value).endswith(
        "more than 500 configurations need the flow parameter yes: true, or the experiment key max_configurations: "
        "510 (docs/settings.md)"
    )
    assert "\n" not in str(first.value)
    (refused,) = Warehouse.at_home().runs("large")
    assert refused["status"] == "failed" and str(first.value) in refused["error"]
    assert not any((own_home / "cache" / "embeddings").rglob("*.parquet"))

    assert evaluate(experiment=small_experiment(tmp_path, "measured"))["status"] == "completed"
    with pytest.raises(InputError, match=r"of embedding \(from past runs\); more than 500 configurations need"):
        evaluate(experiment=large)
    assert [(r["experiment"], r["status"]) for r in Warehouse.at_home().runs()] == [
        ("large", "failed"),
        ("measured", "completed"),
        ("large", "failed"),
    ]


def test_a_checkouts_deployments_name_its_flows_folder_and_equal_the_packages(monkeypatch):
    """deployments/prefect.yaml (what `prefect deploy` reads in a checkout) names the entry points of the
    checkout's flows/ folder; the package's file (what `chunkeval serve` and an install read) names the modules.
    Apart from that the two files say the same, and both entry points load the one flow defined in the package."""
    from pathlib import Path

    from chunkeval.flows.serve import _flow
    from chunkeval.paths import DEPLOYMENTS_FILE

    root = Path(__file__).resolve().parents[1]
    checkout = yaml.safe_load((root / "deployments" / "prefect.yaml").read_text())
    package = yaml.safe_load(DEPLOYMENTS_FILE.read_text())
    monkeypatch.syspath_prepend(str(root))
    assert [d["name"] for d in checkout["deployments"]] == [d["name"] for d in package["deployments"]]
    for ours, theirs in zip(checkout["deployments"], package["deployments"], strict=True):
        path, _, name = ours.pop("entrypoint").partition(":")
        module = theirs.pop("entrypoint")
        assert path.startswith("flows/") and module == f"chunkeval.{path.removesuffix('.py').replace('/', '.')}:{name}"
        assert _flow(f"{path}:{name}", "checkout") is _flow(module, "package")
        assert ours == theirs
