"""The first five minutes: the installed `chunkeval run` on the demo, as a new user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_first_run_of_the_demo_reads_well(tmp_path, share_models):
    """An empty CHUNKEVAL_HOME but for the session's built models, no PREFECT_API_URL (a temporary
    Prefect server, as a new user has): progress lines, the summary, and not one traceback or ERROR
    line. minilm-static is built once per session (`minilm_static`); the line a first build prints
    in a command's output is checked in test_models.py on tiny-static."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    home = share_models(tmp_path / "home")
    env.update(CHUNKEVAL_HOME=str(home), PREFECT_HOME=str(tmp_path / "prefect"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(BIN / "chunkeval"), "run"], env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed
    assert "Traceback" not in printed and "ERROR" not in printed, printed
    assert "Finished in state" not in printed, printed  # Prefect's task chatter stays in Prefect
    assert "embedding" in proc.stderr and "scoring" in proc.stderr  # progress over the long steps
    assert "experiment demo: run " in proc.stdout and "48 configuration(s)" in proc.stdout
    assert "span_recall" in proc.stdout and "report: " in proc.stdout
    assert "building" not in proc.stderr  # a built model is used as it is, silently
    assert len(printed.splitlines()) < 80, printed
