"""A real Phoenix server (arize-phoenix 20.26.1, in a venv of its own: it pins its own pyarrow, pandas and
OpenTelemetry) for the test that reads Phoenix's span export (tests/test_traces.py): traces are sent to it over
OTLP/HTTP by the OpenTelemetry SDK, and Phoenix's own client exports its spans data frame as Parquet.

The venv lives at $CHUNKEVAL_PHOENIX_VENV, by default ~/.cache/chunkeval/phoenix-venv (CI may cache that folder). It
is built in place under a lock and marked complete last. Phoenix starts offline (SQLite under a folder of the test,
no telemetry).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prefect_server import free_port, wait_for
from venvs import built_once

PHOENIX = "arize-phoenix==20.26.1"
MARK = ".chunkeval-complete"


def venv_dir() -> Path:
    return Path(os.environ.get("CHUNKEVAL_PHOENIX_VENV") or Path.home() / ".cache" / "chunkeval" / "phoenix-venv")


def venv_python() -> Path | None:
    """The venv's python where it holds Phoenix (built here, or installed by hand before the mark existed)."""
    final = venv_dir()
    python = final / "bin" / "python"
    if (final / MARK).is_file() or (final / "bin" / "phoenix").exists():
        return python if python.exists() else None
    return None


def ensure_venv() -> Path:
    def build(python: Path) -> None:
        subprocess.run([str(python), "-m", "pip", "install", "-q", PHOENIX], check=True)
        (venv_dir() / MARK).write_text(PHOENIX)

    return built_once(venv_dir(), venv_python, build)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def phoenix_server(python: Path, root: Path) -> Iterator[str]:
    """`phoenix serve` on 127.0.0.1 with its store under `root`; yields its base URL (OTLP/HTTP at /v1/traces)."""
    port, grpc = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PHOENIX_WORKING_DIR": str(root), "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
            "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"}  # fmt: skip
    with open(root / "phoenix.log", "wb") as log:
        proc = subprocess.Popen([str(python.parent / "phoenix"), "serve"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=root, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _up(url + "/healthz") or _up(url + "/"), 180, f"phoenix (its log: {root / 'phoenix.log'})", proc
        )
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


EXPORT = """
import sys
from phoenix.client import Client
Client(base_url=sys.argv[1]).spans.get_spans_dataframe(project_identifier="default").to_parquet(sys.argv[2])
"""


def export(python: Path, url: str, out: Path) -> Path:
    """Phoenix's spans data frame, as its own client gives it, written as Parquet (Phoenix's trace export)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), "-c", EXPORT, url, str(out)], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


if __name__ == "__main__":  # .ci/run builds the venv before the suite (a no-op where it is built)
    print(ensure_venv())
