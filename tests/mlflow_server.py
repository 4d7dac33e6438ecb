"""A real MLflow tracking server for tests/test_mlflow.py: mlflow 3.17.2 in a venv of its own (chunkeval
publishes through MLflow's REST API and needs no mlflow; installed beside chunkeval, mlflow would move pyarrow
to 25.x and importlib_metadata to 9.x), built once and reused, and a reader that lists what a server holds
with MLflow's own client (`MlflowClient`), independently of chunkeval's publishing.

The venv lives at $CHUNKEVAL_MLFLOW_VENV, by default ~/.cache/chunkeval/mlflow-3.17.2 (CI may cache that
folder between steps). It is built in place under a lock and marked complete last: a venv without the mark
(an install that was interrupted) is removed and built again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from prefect_server import free_port, wait_for
from served_server import healthy
from venvs import built_once

MLFLOW = "mlflow==3.17.2"
MARK = ".chunkeval-complete"  # written last; its text says what the venv holds
BUILT = f"{MLFLOW} and an empty store"
STORE = "empty-store.db"  # an SQLite store with MLflow's tables: a server starts on a copy 5-7 s sooner


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "chunkeval" / "mlflow-3.17.2"
    return Path(os.environ.get("CHUNKEVAL_MLFLOW_VENV") or default)


def venv_python() -> Path | None:
    """The venv's python when the venv is complete; else None."""
    final = venv_dir()
    mark = final / MARK
    if mark.is_file() and mark.read_text() == BUILT and (final / "bin" / "python").exists():
        return final / "bin" / "python"
    return None


def ensure_venv() -> Path:
    """The mlflow venv's python, built on first use (about a minute, once per machine or CI cache), with
    an empty store that the test servers start from."""

    def build(python: Path) -> None:
        subprocess.run([str(python), "-m", "pip", "install", "-q", MLFLOW], check=True)
        store = f"sqlite:///{venv_dir() / STORE}"  # MLflow's migrations, run once here rather than at each start
        subprocess.run([str(python), "-m", "mlflow", "db", "upgrade", store], env=clean_env(), check=True)
        (venv_dir() / MARK).write_text(BUILT)

    return built_once(venv_dir(), venv_python, build)


def clean_env() -> dict:
    """The environment of the venv's processes: not this interpreter's path or venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # no job runner (its huey consumers: five more processes, seconds of start, for jobs no test runs)
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    return env


@contextlib.contextmanager
def mlflow_server(python: Path, root: Path) -> Iterator[str]:
    """`mlflow server` (SQLite store, artifacts served through its proxy) on 127.0.0.1; yields its URI."""
    shutil.copyfile(python.parent.parent / STORE, root / "mlflow.db")
    port = free_port()
    argv = [str(python), "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")]  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(
            argv, env=clean_env(), stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True
        )
    try:
        wait_for(lambda: healthy(uri), 120, f"mlflow server (its log: {root / 'server.log'})", proc)
        yield uri
    finally:  # the server and the uvicorn process it starts (a throwaway store: no graceful stop, 3 s sooner)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


READ_BACK = """
import hashlib, json, sys, tempfile
from pathlib import Path
from mlflow.tracking import MlflowClient

client = MlflowClient(sys.argv[1])
found = {}
for name in sys.argv[2:]:
  runs = found[name] = []
  for run in client.search_runs([client.get_experiment_by_name(name).experiment_id], max_results=1000):
    artifacts = {}
    with tempfile.TemporaryDirectory() as folder:
        for item in client.list_artifacts(run.info.run_id):
            local = Path(client.download_artifacts(run.info.run_id, item.path, folder))
            artifacts[item.path] = hashlib.sha256(local.read_bytes()).hexdigest()
    runs.append({"run_id": run.info.run_id, "experiment_id": run.info.experiment_id,
                 "name": run.info.run_name, "status": run.info.status,
                 "start_time": run.info.start_time, "end_time": run.info.end_time,
                 "params": run.data.params, "metrics": run.data.metrics, "tags": run.data.tags,
                 "artifacts": artifacts})
print(json.dumps(found))
"""


def read_back(python: Path, uri: str, *experiments: str) -> dict[str, list[dict]]:
    """Every run of each MLflow experiment named, as MLflow's own client reads it (one process: importing
    mlflow takes seconds): ids, name, status, times, params, metrics, tags and the SHA-256 of each artifact
    (downloaded)."""
    argv = [str(python), "-c", READ_BACK, uri, *experiments]
    done = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # .ci/run builds the venv before the suite (a no-op where it is built)
    print(ensure_venv())
