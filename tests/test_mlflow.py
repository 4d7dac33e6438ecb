"""`chunkeval run --mlflow URI` and the experiment file's `mlflow:` key against a real `mlflow server` on
127.0.0.1 (mlflow 3.17.2 in a venv of its own, tests/mlflow_server.py), started once for this module. What was
published is read back with MLflow's own client in that venv, not with chunkeval's code. Where the venv is not
built the server tests are skipped, except in CI (CI=true), where that is a failure. Real runs of the demo data
with bm25 (nothing to embed), through the real Prefect server of the session. The key's parsing needs no
server and runs everywhere."""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request

import pytest
import yaml

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR
from chunkeval.publish.mlflow import MlflowError, batches, log_run
from chunkeval.report.html import report_path
from chunkeval.vocabulary import CONFIG_KEYS, config_id, config_label
from chunkeval.warehouse import Warehouse
from mlflow_server import mlflow_server, read_back, venv_dir, venv_python


def test_the_experiment_file_names_its_server_and_runs_do_not_record_it(tmp_path):
    """`mlflow:` is read and checked with the experiment (no mlflow client needed); it says where runs are
    published, not how they are evaluated: their settings and fingerprint are those of the file without it."""
    path = tmp_path / "tracked.yaml"
    path.write_text("chunk_sizes: [60]\nretriever: bm25\nmlflow: http://127.0.0.1:5000\n")
    exp = Experiment.from_yaml(path)
    assert exp.mlflow == "http://127.0.0.1:5000" and "mlflow" not in exp.to_dict()
    path.write_text("chunk_sizes: [60]\nretriever: bm25\n")
    assert Experiment.from_yaml(path).fingerprint() == exp.fingerprint()
    for value, message in (
        ("file:///tmp/mlruns", "mlflow takes the http"),
        ("[http://a, http://b]", "takes one value"),
    ):
        path.write_text(f"chunk_sizes: [60]\nmlflow: {value}\n")
        with pytest.raises(InputError, match=message) as caught:
            Experiment.from_yaml(path)
        assert caught.value.path == str(path)


def test_batches_keep_within_mlflows_limits():
    """At most 100 params, 1000 metrics and 1000 entities a request; every item sent once, in order."""
    params, metrics = list(range(250)), list(range(1000, 3950))
    sent = list(batches(params, metrics))
    assert all(len(p) <= 100 and len(m) <= 1000 and len(p) + len(m) <= 1000 for p, m in sent)
    assert [x for p, _ in sent for x in p] == params and [x for _, m in sent for x in m] == metrics
    assert [(len(p), len(m)) for p, m in sent][:3] == [(100, 900), (100, 900), (50, 950)]


@pytest.fixture(scope="session")
def mlflow_python():
    """The python of the mlflow venv, which the session builds where the machine has none (conftest's `built_venv`:
    once per machine, in the background from the session's start)."""
    from conftest import built_venv

    built_venv("mlflow")
    python = venv_python()
    assert python is not None, f"no complete mlflow venv at {venv_dir()} after its build"
    return python


@pytest.fixture(scope="module")
def mlflow_uri(mlflow_python, tmp_path_factory):
    """A real MLflow tracking server (SQLite store, artifacts served) on 127.0.0.1; yields its URI."""
    with mlflow_server(mlflow_python, tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


def api(uri: str, endpoint: str, body: dict | None = None) -> dict:
    """One request of MLflow's REST API (a GET without a body), as the test's own client."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{uri}/api/2.0/mlflow/{endpoint}", data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"{}")


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_published(runs: list[dict], wh: Warehouse, run_id: str) -> dict:
    """The MLflow run of chunkeval run `run_id` as read back holds what the warehouse holds: the settings as
    params, a nested run per configuration whose metrics are the summary's means and micro values."""
    (parent,) = [r for r in runs if r["name"] == run_id]
    assert parent["status"] == "FINISHED" and parent["tags"]["chunkeval.run_id"] == run_id
    assert parent["end_time"] >= parent["start_time"] > 0 and "mlflow.parentRunId" not in parent["tags"]
    recorded = wh.run(run_id)
    settings = json.loads(recorded["settings"])
    expected = {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in settings.items()}
    assert parent["params"] == {**expected, "trigger": recorded["trigger"]}
    children = {r["name"]: r for r in runs if r["tags"].get("mlflow.parentRunId") == parent["run_id"]}
    summary = wh.summary(run_id).to_pylist()
    assert len(children) == len(summary)
    for row in summary:
        child = children[f"{config_label(row)} [{config_id(row)}]"]  # the one label, with the stable id
        assert child["status"] == "FINISHED" and child["tags"]["chunkeval.run_id"] == run_id
        settings = {k: str(row[k]) for k in CONFIG_KEYS if k in row}
        assert child["params"] == {**settings, "label": config_label(row), "config_id": config_id(row)}
        means = {k: v for k, v in row.items() if k.endswith(("_mean", "_micro")) and v is not None}
        assert set(child["metrics"]) == set(means) and "span_recall_micro" in means
        assert all(abs(child["metrics"][k] - v) <= 1e-12 for k, v in means.items())
        assert child["artifacts"] == {}
    report = report_path(wh.root, recorded["experiment"], run_id)
    summary_file = wh.results_dir / run_id / "summary.parquet"
    assert parent["artifacts"] == {report.name: sha256(report), "summary.parquet": sha256(summary_file)}
    return parent


@pytest.mark.usefixtures("mlflow_python", "prefect_api")  # in this order: where there is no venv, no server starts
def test_a_run_is_published_with_a_nested_run_per_configuration(
    mlflow_uri, mlflow_python, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    shutil.copytree(DEMO_DIR / "corpora", data / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", data / "questions.csv")
    settings = {"name": "tracked", "corpus_dir": "corpora", "questions": "questions.csv", "chunker": ["fixed_token"],
                "chunk_sizes": [60, 120], "overlaps": [0], "k": [1, 3], "retriever": ["bm25"]}  # fmt: skip
    (data / "experiment.yaml").write_text(yaml.safe_dump(settings))
    assert main(["run", str(data / "experiment.yaml"), "--mlflow", mlflow_uri]) == 0
    assert f"published to MLflow at {mlflow_uri}: run " in capsys.readouterr().out
    # the experiment file's key publishes as the option does, into the same MLflow experiment
    (data / "experiment.yaml").write_text(yaml.safe_dump({**settings, "chunk_sizes": [60], "mlflow": mlflow_uri}))
    assert main(["run", str(data / "experiment.yaml")]) == 0
    assert f"published to MLflow at {mlflow_uri}: run " in capsys.readouterr().out
    wh = Warehouse.at_home()
    second, first = (run["run_id"] for run in wh.runs("tracked"))
    # a server that keeps the experiment's artifacts itself, not through its proxy: one line, the run FAILED
    tracked = api(mlflow_uri, "experiments/get-by-name?experiment_name=tracked")["experiment"]["experiment_id"]
    api(mlflow_uri, "experiments/update", {"experiment_id": tracked, "new_name": "tracked-old"})
    api(mlflow_uri, "experiments/create", {"name": "tracked", "artifact_location": str(tmp_path / "elsewhere")})
    report = report_path(wh.root, "tracked", second)
    with pytest.raises(MlflowError, match=f"MLflow at {mlflow_uri} keeps this run's artifacts at .*must serve"):
        log_run(mlflow_uri, wh, second, report)

    published = read_back(mlflow_python, mlflow_uri, "tracked-old", "tracked")
    runs = published["tracked-old"]
    assert len(runs) == 2 + 4 + 2 and {run["experiment_id"] for run in runs} == {tracked}  # two parents, 4 + 2 nested
    assert check_published(runs, wh, first)["params"]["chunk_sizes"] == "[60, 120]"
    assert check_published(runs, wh, second)["params"]["chunk_sizes"] == "[60]"
    (failed,) = published["tracked"]
    assert failed["status"] == "FAILED" and failed["params"] == {} and failed["name"] == second

    # a refusal once the run is recorded: one line naming the server, MLflow's error code and message; the
    # chunkeval run stays recorded
    api(mlflow_uri, "experiments/delete", {"experiment_id": failed["experiment_id"]})
    (data / "experiment.yaml").write_text(yaml.safe_dump({**settings, "chunk_sizes": [60], "k": [1]}))
    assert main(["run", str(data / "experiment.yaml"), "--mlflow", mlflow_uri]) == 4  # a fault
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("chunkeval: error:")]
    newest = wh.runs("tracked")[0]
    assert newest["status"] == "completed" and newest["run_id"] not in (first, second)
    assert line == (
        f"chunkeval: error: run {newest['run_id']} is recorded, but not published: MLflow at {mlflow_uri} refused POST mlflow/runs/create: HTTP 400 INVALID_PARAMETER_VALUE: The experiment "
        f"{failed['experiment_id']} must be in the 'active' state. Current state is deleted."
    )
