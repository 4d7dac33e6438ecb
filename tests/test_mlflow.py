"""`chunkeval run --mlflow URI` and the experiment file's `mlflow:` key against a real `mlflow server` on
127.0.0.1, started once for this module (the extra `chunkeval[mlflow]`; skipped where mlflow is not installed).
Real runs of the demo data with bm25 (nothing to embed), through the real Prefect server of the session. The
key's parsing needs no mlflow and runs everywhere."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from chunkeval.cli import main
from chunkeval.engine.experiment import Experiment
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server (SQLite store, artifacts served) on 127.0.0.1; yields its URI."""
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start")
        yield uri
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="pip install 'chunkeval[mlflow]'")
@pytest.mark.usefixtures("prefect_api")
def test_a_run_is_published_with_a_nested_run_per_configuration(mlflow_server, tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    shutil.copytree(DEMO_DIR / "corpora", data / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", data / "questions.csv")
    settings = {"name": "tracked", "corpus_dir": "corpora", "questions": "questions.csv", "chunker": ["fixed_token"],
                "chunk_sizes": [60, 120], "overlaps": [0], "k": [1, 3], "retriever": ["bm25"]}  # fmt: skip
    (data / "experiment.yaml").write_text(yaml.safe_dump(settings))
    assert main(["run", str(data / "experiment.yaml"), "--mlflow", mlflow_server]) == 0
    out = capsys.readouterr().out
    assert f"published to MLflow at {mlflow_server}: run " in out and "View run" not in out
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("tracked")
    (parent,) = client.search_runs(
        [experiment.experiment_id], "tags.`chunkeval.run_id` != '' and attributes.run_name LIKE '2%'"
    )
    assert parent.data.params["chunk_sizes"] == "[60, 120]" and parent.data.params["trigger"] == "manual"
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 4  # 2 chunk sizes x 2 k
    for child in children:
        assert child.data.params["retriever"] == "bm25" and 0 <= child.data.metrics["span_recall_mean"] <= 1
        assert "span_recall_micro" in child.data.metrics and child.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "summary.parquet" in artifacts and any(a.endswith(".html") for a in artifacts)
    # the experiment file's key publishes as the option does
    (data / "experiment.yaml").write_text(yaml.safe_dump({**settings, "chunk_sizes": [60], "mlflow": mlflow_server}))
    assert main(["run", str(data / "experiment.yaml")]) == 0
    assert f"published to MLflow at {mlflow_server}: run " in capsys.readouterr().out
    parents = client.search_runs([experiment.experiment_id], "attributes.run_name LIKE '2%'")
    assert len(parents) == 2 and "mlflow" not in {p for run in parents for p in run.data.params}
    (newest,) = [run for run in parents if run.info.run_id != parent.info.run_id]
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{newest.info.run_id}'")
    assert len(children) == 2 and newest.data.params["chunk_sizes"] == "[60]"
