"""The first five minutes: the installed `chunkeval run` on the demo, as a new user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_first_run_of_the_demo_reads_well(tmp_path):
    """Empty CHUNKEVAL_HOME, no PREFECT_API_URL (a temporary Prefect server): progress lines, the
    summary, and not one traceback or ERROR line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(CHUNKEVAL_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "prefect"), HF_HUB_OFFLINE="1")
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
    assert "building minilm-static" in proc.stderr  # built on first use, with one line saying so
    assert len(printed.splitlines()) < 80, printed
