"""Six nights of the loop through the real scheduler (bench/month.py on the demo): every night completes, the only
alarm is the harmful night, and what changed the gold set or the model is marked in `trend` (issue 29)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import month  # noqa: E402

pytestmark = pytest.mark.slow


def test_six_nights_of_the_demo_hold(tmp_path, minilm_static, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_MODELS", str(minilm_static.parent))  # the session's built models, lent
    lines = []
    timeline = month.play("demo", month.SIX_NIGHTS, 6, tmp_path / "month", say=lines.append)
    print("\n".join(lines))
    assert [n.status for n in timeline] == ["completed"] * 6, lines
    assert all(n.trigger == "schedule" for n in timeline)
    harmful = [n.night for n in timeline if "harm" in month.SIX_NIGHTS[n.night]]
    assert [n.night for n in timeline if n.gate == 1] == harmful == [5], lines
    assert all(n.gate == 0 for n in timeline if n.night not in harmful), lines
