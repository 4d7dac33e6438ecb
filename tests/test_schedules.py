"""Every schedule Prefect accepts is read by whatever else reads it (issue 55): `@daily`, `0 0 ? * *` and an RRule,
served through the real `chunkeval serve` against a real Prefect server, get their silence alarms (whose interval
is read from the schedule) and serve's next-run lines, where they were internal errors (`CronSimError`, exit 4).
The interval is read from the server's own schedule model, so that it agrees with the scheduler by construction;
what cannot be read is refused up front in one line (tests/test_catalogue.py, issue 55's block)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from chunkeval.flows.alerts import interval_seconds
from chunkeval.flows.schedules import next_times
from chunkeval.paths import DEMO_DIR
from prefect_server import wait_for
from test_orchestration import client_env, served, stop

ODD = {"daily": {"cron": "@daily"}, "question": {"cron": "0 0 ? * *"}, "weekly": {"rrule": "FREQ=WEEKLY;BYDAY=MO"}}


@pytest.mark.parametrize(
    "schedule, seconds",
    [
        ({"cron": "@daily"}, 86400),
        ({"cron": "0 0 ? * *"}, 86400),
        ({"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"}, 3 * 86400),
        ({"rrule": "FREQ=WEEKLY;BYDAY=MO,TU"}, 6 * 86400),
        ({"interval": 900}, 900),
    ],
)
def test_the_silence_alarm_reads_every_schedule_as_the_server_does(schedule, seconds):
    from chunkeval.flows.serve import _schedule

    made = _schedule(schedule, "deployment d")
    assert interval_seconds(made) == seconds
    assert next_times(made, 1)[0] > datetime.now(UTC) - timedelta(seconds=1)


def _world(tmp_path: Path) -> Path:
    """A home whose endpoints.yaml has a webhook (never called here), an experiment that asks for the silence
    alarm, and a deployments file of three deployments whose schedules CronSim did not read."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "endpoints.yaml").write_text(
        yaml.safe_dump({"hook": {"base_url": "http://127.0.0.1:9/h", "kind": "webhook"}})
    )
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(
        yaml.safe_dump(
            {
                "name": "quiet",
                "corpus_dir": str(DEMO_DIR / "corpora"),
                "questions": str(DEMO_DIR / "questions.csv"),
                "retriever": ["bm25"],
                "alerts": [{"to": "hook", "events": ["silence"]}],
            }  # fmt: skip
        )
    )
    flow = "chunkeval.flows.evaluate:evaluate"
    spec = {
        "deployments": [
            {
                "name": name,
                "entrypoint": flow,
                "parameters": {"experiment": str(quiet)},
                "schedules": [{**schedule, "timezone": "UTC"}],
            }  # fmt: skip
            for name, schedule in ODD.items()
        ]
    }
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(spec))
    return home


def test_serve_reads_at_daily_a_question_mark_and_an_rrule(prefect_server, tmp_path):
    home = _world(tmp_path)
    log = tmp_path / "serve.log"
    serve = served(client_env(prefect_server, home), log, "--prefect-file", str(tmp_path / "prefect.yaml"))
    said = lambda: log.read_text(errors="replace")  # noqa: E731
    try:
        wait_for(lambda: said().count("next run at") >= 3, 240, "serve's three next-run lines", serve)
        for name in ODD:
            assert f"silence → evaluate/{name}" in said(), said()
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d")
        assert f"evaluate/daily: next run at {tomorrow} 00:00:00" in said(), said()
        assert f"evaluate/question: next run at {tomorrow} 00:00:00" in said(), said()
        monday = next_times(_rrule(), 1)[0]
        assert f"evaluate/weekly: next run at {monday:%Y-%m-%d} 00:00:00" in said(), said()
        assert "internal error" not in said() and "CronSim" not in said(), said()
    finally:
        ended = stop(serve)
    assert ended is None, f"chunkeval serve ended ({ended}) before the test did:\n{said()}"


def _rrule():
    from prefect.schedules import RRule

    return RRule("FREQ=WEEKLY;BYDAY=MO", timezone="UTC")
