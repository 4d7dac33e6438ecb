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


def test_the_demo_summary_fits_and_says_what_its_ties_mean(demo_first_run):
    """The demo's summary (issue 32): every line within 120 columns, one label and config_id per configuration,
    the headline metrics of span gold, and where most configurations tie (or a metric is at its ceiling) a line
    that says so, with no star on that metric's cells."""
    import re

    from chunkeval.report.terminal import SPAN_HEADLINE, TERMINAL_WIDTH

    proc, _ = demo_first_run
    print(proc.stdout)
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("configuration"))
    table = lines[header : header + 2 + 48]
    assert all(len(line) <= TERMINAL_WIDTH for line in table), "\n".join(table)
    assert table[0].split() == ["configuration", "config_id", *SPAN_HEADLINE]
    ids = [row.split()[1] for row in table[2:]]
    assert len(set(ids)) == 48 and all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids)
    said = [line for line in lines if "tie with the best" in line or "ceiling effect" in line]
    assert said, proc.stdout
    for line in said:
        column = SPAN_HEADLINE.index(line.split(":")[0]) + 2
        assert not any(row.split()[column].endswith("*") for row in table[2:]), line
