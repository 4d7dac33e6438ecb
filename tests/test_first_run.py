"""The first five minutes: the installed `chunkeval run` on the demo, as a new user runs it."""

from __future__ import annotations


def test_first_run_of_the_demo_reads_well(demo_first_run):
    """An empty CHUNKEVAL_HOME but for the session's built models, no PREFECT_API_URL (a temporary
    Prefect server, as a new user has; conftest's `demo_first_run`): progress lines, the summary, and
    not one traceback or ERROR line. minilm-static is built once per session (`minilm_static`); the
    line a first build prints in a command's output is checked in test_models.py on tiny-static."""
    proc, _ = demo_first_run
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed
    assert "Traceback" not in printed and "ERROR" not in printed, printed
    assert "Finished in state" not in printed, printed  # Prefect's task chatter stays in Prefect
    assert "embedding" in proc.stderr and "scoring" in proc.stderr  # progress over the long steps
    assert "experiment demo: run " in proc.stdout and "48 configuration(s)" in proc.stdout
    assert "span_recall" in proc.stdout and "report: " in proc.stdout
    assert "building" not in proc.stderr  # a built model is used as it is, silently
    assert len(printed.splitlines()) < 80, printed
