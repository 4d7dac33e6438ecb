"""`chunkeval run --mlflow URI`: a recorded run published where teams already look, an MLflow tracking server.

One MLflow run per chunkeval run, in the MLflow experiment of the chunkeval experiment's name: the run's
settings as params, the tag `chunkeval.run_id`, the HTML report and `summary.parquet` as artifacts. Each
configuration is a nested run (named by its configuration, its configuration keys as params, every macro
mean and micro value of the summary as a metric): the MLflow UI then compares configurations like runs.
Needs the extra: `pip install 'chunkeval[mlflow]'`. `chunkeval run` checks the server before the run starts;
the `evaluate` flow publishes (`--mlflow URI`, or the experiment file's `mlflow:` key, also in a deployment).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
import urllib.error
import urllib.request
from pathlib import Path

from chunkeval.errors import InputError
from chunkeval.vocabulary import CONFIG_KEYS

PARAM_LIMIT = 6000  # MLflow's longest param value


def check_uri(uri: str, what: str = "--mlflow") -> None:
    """An http(s) URI (`what` names where it was given: --mlflow, the experiment's mlflow)."""
    if not uri.startswith(("http://", "https://")):
        raise InputError(f"{what} takes the http(s) URI of an MLflow tracking server, got {uri!r}")


def check_server(uri: str, what: str = "--mlflow") -> str:
    """The tracking server's URI when one answers there (its /health); else one line naming the URI."""
    check_uri(uri, what)
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10) as answer:
            ok = answer.status == 200
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(f"{what}: no MLflow server answers at {uri} ({reason})") from None
    if not ok:
        raise InputError(f"{what}: {uri} is no MLflow tracking server (its /health did not answer OK)")
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise InputError(f"{what} needs the mlflow client: pip install 'chunkeval[mlflow]'") from None
    return uri.rstrip("/")


def _label(row: dict) -> str:
    return " ".join(f"{k}={row[k]}" for k in CONFIG_KEYS if k in row)


def _params(settings: dict) -> list:
    from mlflow.entities import Param

    out = []
    for key, value in sorted(settings.items()):
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        out.append(Param(str(key), text[:PARAM_LIMIT]))
    return out


def log_run(uri: str, wh, run_id: str, report: Path | None = None) -> str:
    """Publish a completed run to the MLflow server at `uri`; the MLflow run id. (The client's own lines,
    a link per run it ends, are kept off the command's output.)"""
    with contextlib.redirect_stdout(io.StringIO()):
        return _log_run(uri, wh, run_id, report)


def _log_run(uri: str, wh, run_id: str, report: Path | None) -> str:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    run = wh.run(run_id)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(run["experiment"])
    experiment_id = found.experiment_id if found else client.create_experiment(run["experiment"])
    parent = client.create_run(experiment_id, run_name=run_id, tags={"chunkeval.run_id": run_id}).info.run_id
    settings = json.loads(run["settings"] or "{}")
    client.log_batch(parent, params=_params({**settings, "trigger": run["trigger"]}))
    now = int(time.time() * 1000)
    for row in wh.summary(run_id).to_pylist():
        child = client.create_run(
            experiment_id,
            run_name=_label(row),
            tags={"mlflow.parentRunId": parent, "chunkeval.run_id": run_id},
        ).info.run_id
        metrics = [
            Metric(name, float(value), now, 0)
            for name, value in row.items()
            if name.endswith(("_mean", "_micro")) and isinstance(value, (int, float)) and math.isfinite(value)
        ]
        params = [Param(k, str(row[k])) for k in CONFIG_KEYS if k in row]
        client.log_batch(child, metrics=metrics, params=params)
        client.set_terminated(child)
    for path in (report, wh.results / run_id / "summary.parquet"):
        if path is not None and Path(path).is_file():
            client.log_artifact(parent, str(path))
    client.set_terminated(parent)
    return parent
