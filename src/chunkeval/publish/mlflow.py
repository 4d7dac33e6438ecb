"""`chunkeval run --mlflow URI`: a recorded run published where teams already look, an MLflow tracking server.

One MLflow run per chunkeval run, in the MLflow experiment of the chunkeval experiment's name: the run's
settings as params, the tag `chunkeval.run_id`, the HTML report and `summary.parquet` as artifacts. Each
configuration is a nested run (named by its configuration, its configuration keys as params, every macro
mean and micro value of the summary as a metric): the MLflow UI then compares configurations like runs.

It speaks MLflow's documented REST API (`/api/2.0/mlflow/...`, artifacts through the server's artifact proxy
`/api/2.0/mlflow-artifacts/artifacts/...`) with urllib, so publishing needs no extra: the `mlflow` client
library, installed beside chunkeval, would move pyarrow and importlib_metadata off their pins. `chunkeval run`
checks the server before the run starts; the `evaluate` flow publishes (`--mlflow URI`, or the experiment
file's `mlflow:` key, also in a deployment). A server's refusal is one line naming the URI and MLflow's
error code and message.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from chunkeval.errors import Fault, InputError
from chunkeval.vocabulary import CONFIG_KEYS, config_id, config_label

PARAM_LIMIT = 6000  # MLflow's longest param value
BATCH_PARAMS, BATCH_METRICS, BATCH_ENTITIES = 100, 1000, 1000  # MLflow's limits on one runs/log-batch
ANSWER_BYTES = 16 << 20  # the most read of one answer (MLflow's are a few KiB)
ARTIFACTS = "mlflow-artifacts:"  # the scheme of a run's artifacts when the server proxies them


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
    try:  # a proxy or a login page answers /health too: MLflow's API must answer JSON
        _call(uri.rstrip("/"), "GET", "mlflow/experiments/search?max_results=1")
    except MlflowError as exc:
        raise InputError(f"{what}: {exc}") from None
    return uri.rstrip("/")


class MlflowError(InputError):
    """A request the server refused (its HTTP status, MLflow's error_code and message) or did not answer."""

    def __init__(self, message: str, error_code: str = ""):
        super().__init__(" ".join(message.split()))  # one line, whatever the server's message holds
        self.error_code = error_code


def _call(uri: str, method: str, endpoint: str, body=None, data: bytes | None = None, kind="application/json"):
    """One request to the server at `uri`; its JSON answer, or MlflowError naming the URI."""
    url = f"{uri}/api/2.0/{endpoint}"
    if body is not None:
        data = json.dumps(body, allow_nan=False).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": kind})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            text, kind = answer.read(ANSWER_BYTES + 1), answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raw = exc.read(ANSWER_BYTES).decode("utf-8", "replace")
        try:
            found = json.loads(raw)
            code, message = found.get("error_code", ""), found.get("message", raw)
        except (ValueError, AttributeError):
            code, message = "", raw[:300]
        raise MlflowError(
            f"MLflow at {uri} refused {method} {endpoint}: HTTP {exc.code} {code}: {str(message)[:300]}", code
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MlflowError(f"MLflow at {uri} did not answer {method} {endpoint} ({reason})") from None
    if len(text) > ANSWER_BYTES:
        raise MlflowError(f"MLflow at {uri} answered {method} {endpoint} with more than {ANSWER_BYTES:,} bytes")
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:  # a proxy's or a login page's HTML, answered with 200
        what = kind.split(";")[0].strip() or "a body"
        raise MlflowError(
            f"MLflow at {uri} answered {method} {endpoint} with {what} that is not JSON: is {uri} an MLflow "
            "tracking server, not a proxy or a login page?"
        ) from None


def _experiment_id(uri: str, name: str) -> str:
    """The id of the MLflow experiment `name`, created when there is none (or made by another meanwhile)."""
    query = urllib.parse.urlencode({"experiment_name": name})
    for _ in range(2):
        try:
            return _call(uri, "GET", f"mlflow/experiments/get-by-name?{query}")["experiment"]["experiment_id"]
        except MlflowError as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        try:
            return _call(uri, "POST", "mlflow/experiments/create", {"name": name})["experiment_id"]
        except MlflowError as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":  # created by another publisher since: read again
                raise
    raise MlflowError(f"MLflow at {uri}: experiment {name!r} neither found nor created")


def _now() -> int:
    return int(time.time() * 1000)


def _create_run(uri: str, experiment_id: str, name: str, tags: dict) -> dict:
    body = {"experiment_id": experiment_id, "run_name": name, "start_time": _now(),
            "tags": [{"key": k, "value": v} for k, v in tags.items()]}  # fmt: skip
    return _call(uri, "POST", "mlflow/runs/create", body)["run"]["info"]


def _end_run(uri: str, run_id: str, status: str = "FINISHED") -> None:
    _call(uri, "POST", "mlflow/runs/update", {"run_id": run_id, "status": status, "end_time": _now()})


def batches(params: list[dict], metrics: list[dict]):
    """`(params, metrics)` requests within MLflow's limits on one runs/log-batch: at most 100 params, 1000
    metrics and 1000 entities in all."""
    while params or metrics:
        some_params, params = params[:BATCH_PARAMS], params[BATCH_PARAMS:]
        room = min(BATCH_METRICS, BATCH_ENTITIES - len(some_params))
        some_metrics, metrics = metrics[:room], metrics[room:]
        yield some_params, some_metrics


def _log(uri: str, run_id: str, params: dict, metrics: dict | None = None) -> None:
    now = _now()
    p = [{"key": str(k), "value": v[:PARAM_LIMIT]} for k, v in params.items()]
    m = [{"key": k, "value": v, "timestamp": now, "step": 0} for k, v in (metrics or {}).items()]
    for some_params, some_metrics in batches(p, m):
        _call(uri, "POST", "mlflow/runs/log-batch", {"run_id": run_id, "params": some_params, "metrics": some_metrics})


def _upload(uri: str, artifact_uri: str, path: Path) -> None:
    """`path` into the run's artifacts, through the server's artifact proxy."""
    where = urllib.parse.urlparse(artifact_uri).path.strip("/")
    endpoint = "mlflow-artifacts/artifacts/" + urllib.parse.quote(f"{where}/{path.name}")
    kind = "text/html" if path.suffix == ".html" else "application/octet-stream"
    _call(uri, "PUT", endpoint, data=path.read_bytes(), kind=kind)


def _label(row: dict) -> str:
    """A nested run's name: its configuration's label and config_id (`chunkeval.vocabulary.config_label`)."""
    return f"{config_label(row)} [{config_id(row)}]"


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _metrics(row: dict) -> dict:
    """The macro means and micro values of a summary row that are numbers."""
    return {
        name: float(value)
        for name, value in row.items()
        if name.endswith(("_mean", "_micro"))
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def log_run(uri: str, wh, run_id: str, report: Path | None = None) -> str:
    """Publish a completed run to the MLflow server at `uri`; the MLflow run id. Where publishing fails
    part-way, the MLflow run (and the nested run it was writing) is marked FAILED (when the server still answers)
    and the error raised."""
    uri = uri.rstrip("/")
    run = wh.run(run_id)
    experiment_id = _experiment_id(uri, run["experiment"])
    info = _create_run(uri, experiment_id, run_id, {"chunkeval.run_id": run_id})
    parent, child = info["run_id"], None
    try:
        if not info.get("artifact_uri", "").startswith(ARTIFACTS):
            raise MlflowError(
                f"MLflow at {uri} keeps this run's artifacts at {info.get('artifact_uri')!r}, not through its "
                "artifact proxy: the server must serve artifacts (mlflow server --serve-artifacts, the default)"
            )
        settings = json.loads(run["settings"] or "{}")
        _log(uri, parent, {k: _text(v) for k, v in sorted({**settings, "trigger": run["trigger"]}.items())})
        for row in wh.summary(run_id).to_pylist():
            tags = {"mlflow.parentRunId": parent, "chunkeval.run_id": run_id}
            child = _create_run(uri, experiment_id, _label(row), tags)["run_id"]
            params = {k: str(row[k]) for k in CONFIG_KEYS if k in row}
            _log(uri, child, {**params, "label": config_label(row), "config_id": config_id(row)}, _metrics(row))
            _end_run(uri, child)
            child = None
        for path in (report, wh.results_dir / run_id / "summary.parquet"):
            if path is not None and Path(path).is_file():
                _upload(uri, info["artifact_uri"], Path(path))
    except Exception:
        try:  # the nested run being written (if any), then the parent
            for unfinished in (child, parent):
                if unfinished is not None:
                    _end_run(uri, unfinished, "FAILED")
        except MlflowError:
            pass  # the server is gone: the first error is the one to tell
        raise
    _end_run(uri, parent)
    return parent


def publish_run(uri: str, wh, run_id: str, report: Path | None = None) -> str:
    """A recorded run of the warehouse `wh` published to the tracking server at `uri` (checked first); the MLflow
    run's id. Where that fails, a Fault of one line: the run itself stays recorded."""
    uri = check_server(uri, f"run {run_id} is recorded, but not published to MLflow")
    try:
        return log_run(uri, wh, run_id, report)
    except MlflowError as exc:  # a refused or unanswered request: its line names the server
        raise Fault(f"run {run_id} is recorded, but not published: {exc}") from None
    except Exception as exc:  # anything else on the way (a file that could not be read)
        raise Fault(f"run {run_id} is recorded, but publishing it to MLflow at {uri} failed: {exc}") from None
