"""Five nights of the loop through the real scheduler (bench/month.py on the demo): every night completes, though a
quoted document is deleted, another renamed and one saved as UTF-16 (issue 40); one run a night; the only alarm is
the harmful night's, and exactly one regression message reaches the webhook receiver that night, through the
Prefect server's automation; what changed the gold set or the model is marked in `trend` and in the HTML trend
(issue 29)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from chunkeval.warehouse import Warehouse
from prefect_server import BIN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import month  # noqa: E402

pytestmark = pytest.mark.slow


def test_five_nights_of_the_demo_hold(tmp_path, minilm_static, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_MODELS", str(minilm_static.parent))  # the session's built models, lent
    lines = []
    work = tmp_path / "month"
    timeline = month.play("demo", month.FIVE_NIGHTS, 5, work, say=lines.append)
    said = "\n".join(lines)
    assert [n.status for n in timeline] == ["completed"] * 5, said
    assert all(n.trigger == "schedule" and n.runs == 1 for n in timeline), said
    harmful = [n.night for n in timeline if "harm" in month.FIVE_NIGHTS[n.night]]
    assert harmful == [5] and [n.night for n in timeline if n.gate == 1] == harmful, said
    assert timeline[0].gate == 3, said  # the first night: nothing to compare, one status wherever the gate meets it
    assert all(n.gate == 0 for n in timeline[1:] if n.night not in harmful), said
    assert [n.alarms for n in timeline] == [[], [], [], [], ["regression"]], said  # told once, that night only
    assert timeline[4].delay is not None and timeline[4].delay < 30, said
    count = lambda night, what: int(re.search(rf"(\d+) {what}", timeline[night - 1].gold).group(1))  # noqa: E731
    assert count(3, "re-anchored") >= 9, said  # the renamed document's questions followed it
    assert count(4, "retired") >= 9, said  # the deleted document's questions retired; the night went on
    assert "approximate (lowest" in timeline[1].gold, said  # the comma put into a referenced sentence
    assert ", 0 approximate" in timeline[2].gold, said  # gold update placed the edited reference for good
    run = {n.night: n.run_id for n in timeline}
    home = work / "home"
    changes = Warehouse(home / "warehouse").input_changes("month-demo")
    assert changes == {run[3]: "gold set changed", run[4]: "model changed"}, said
    env = {"CHUNKEVAL_HOME": str(home), "PATH": str(BIN)}
    trend = subprocess.run(
        [str(BIN / "chunkeval"), "trend", "--experiment", "month-demo", "--metric", "mrr", "--all"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert f"{run[3]} G" in trend.stdout and f"{run[4]} M" in trend.stdout, trend.stdout + trend.stderr
    page = tmp_path / "month.html"
    report = [str(BIN / "chunkeval"), "report", "--experiment", "month-demo", "--html", str(page)]
    assert subprocess.run(report, capture_output=True, env=env).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert "gold set changed" in html and "model changed" in html
