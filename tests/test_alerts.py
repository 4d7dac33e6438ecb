"""Alarms that reach a person (issue 40), through the real parts: a real Prefect server and its automations, the
served deployments of `chunkeval serve`, a webhook receiver and a real SMTP server on 127.0.0.1
(tests/alarm_receivers.py). What a destination receives is what a team's Slack, Teams, webhook or mailbox would:
a healthy run tells nobody who did not ask, a regression is told once, a failed run says why, and a schedule that
stopped is told by the silence alarm. The month of nights (test_month.py) holds the scheduled part."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alarm_receivers import smtp_server, webhook_receiver
from prefect_server import BIN, wait_for
from test_orchestration import ROOT, client_env, served, stop

sys.path.insert(0, str(ROOT / "bench"))
import month  # noqa: E402  (its harm: distractors above every document)
from chunkeval.paths import DEMO_DIR  # noqa: E402
from chunkeval.warehouse import Warehouse  # noqa: E402

pytestmark = pytest.mark.slow

GRID = {"chunker": ["fixed_token"], "chunk_sizes": [100], "overlaps": [0], "k": [1, 3], "retriever": ["bm25"]}


def _world(tmp_path: Path, hook: str, smtp_port: int) -> dict:
    """A home whose endpoints.yaml binds four destinations, an experiment that alarms them, one whose schedule
    never comes (for the silence alarm), and the deployments file that serves both."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "endpoints.yaml").write_text(
        yaml.safe_dump(
            {
                "team-hook": {"base_url": f"{hook}/hook/s3cr3t-path", "kind": "webhook"},
                "team-slack": {"base_url": f"{hook}/slack/T000/B000/XXXX", "kind": "slack"},
                "team-teams": {"base_url": f"{hook}/teams/webhookb2/abc", "kind": "teams"},
                "oncall-mail": {
                    "base_url": f"smtp://127.0.0.1:{smtp_port}",
                    "kind": "email",
                    "to": ["oncall@example.com"],
                    "from": "chunkeval@example.com",
                },
            }  # fmt: skip
        )
    )
    data = tmp_path / "data"
    shutil.copytree(DEMO_DIR / "corpora", data / "corpora")
    shutil.copyfile(DEMO_DIR / "questions.csv", data / "questions.csv")
    alarmed = tmp_path / "alarmed.yaml"
    alarmed.write_text(
        yaml.safe_dump(
            {
                "name": "alarmed",
                "corpus_dir": str(data / "corpora"),
                "questions": str(data / "questions.csv"),
                **GRID,
                "alerts": [
                    {"to": "team-hook", "events": ["completed", "regression", "failed"]},
                    {"to": "oncall-mail", "events": ["regression", "failed"]},
                    {"to": "team-slack", "events": ["failed"]},
                    {"to": "team-teams", "events": ["failed"]},
                ],
            }  # fmt: skip
        )
    )
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(
        yaml.safe_dump(
            {
                "name": "quiet",
                "corpus_dir": str(DEMO_DIR / "corpora"),
                "questions": str(DEMO_DIR / "questions.csv"),
                **GRID,
                "alerts": [{"to": "team-hook", "events": ["silence"], "grace": 5}],
            }  # fmt: skip
        )
    )
    flow = "chunkeval.flows.evaluate:evaluate"
    # a schedule whose time does not come while the test runs, a minute apart when it does (on 29 February): a
    # stopped schedule whose silence alarm fires 65 s after serve starts. (An interval anchored ahead was meant to be
    # one, but an interval's anchor is its phase, not its start: it ran every 5 s, and under load those runs queued
    # before the alarmed one.)
    spec = {
        "deployments": [
            {"name": "alarmed", "entrypoint": flow, "parameters": {"experiment": str(alarmed)}},
            {"name": "quiet", "entrypoint": flow, "parameters": {"experiment": str(quiet)},
             "schedules": [{"cron": "* * 29 2 *", "timezone": "UTC"}]},
        ]
    }  # fmt: skip
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(spec))
    return {"home": home, "data": data, "alarmed": alarmed, "prefect_file": tmp_path / "prefect.yaml"}


def _told(posts, path: str = "/hook/s3cr3t-path") -> list:
    """What the hook received of the runs' own events (the silence alarm of the quiet deployment comes meanwhile)."""
    return [m for m in posts.at(path) if m.json().get("kind") != "silence"]


def _deployment_run(env: dict, name: str) -> None:
    """A deployment run started by hand, as `prefect deployment run` starts it (its trigger: manual)."""
    done = subprocess.run(
        [str(BIN / "prefect"), "deployment", "run", name], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_served_runs_tell_who_asked_once_and_a_stopped_schedule_is_heard(prefect_server, tmp_path):
    with webhook_receiver() as (hook, posts), smtp_server() as (smtp_port, mails):
        world = _world(tmp_path, hook, smtp_port)
        env = client_env(prefect_server, world["home"])
        env["PREFECT_RUNNER_POLL_FREQUENCY"] = "2"
        log = tmp_path / "serve.log"
        serve = served(env, log, "--prefect-file", str(world["prefect_file"]))
        said = lambda: log.read_text(errors="replace")  # noqa: E731
        try:
            wait_for(lambda: said().count("automation 'chunkeval") >= 3, 120, "serve's automations", serve)
            assert "silence → evaluate/quiet" in said() and "alerts → team-hook" in said(), said()

            # `alerts test`: one message to each destination, straight from the command, each answer said
            test = subprocess.run(
                [str(BIN / "chunkeval"), "alerts", "test", str(world["alarmed"])],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert test.returncode == 0, test.stdout + test.stderr
            assert test.stdout.count(": delivered") == 4 and "s3cr3t" not in test.stdout, test.stdout
            assert "team-hook (webhook, http://127.0.0.1:" in test.stdout and "/***)" in test.stdout
            (slack,) = posts.at("/slack/T000/B000/XXXX")
            assert slack.json()["text"].startswith("*chunkeval alarmed: a test message to team-slack*")
            (teams,) = posts.at("/teams/webhookb2/abc")
            card = teams.json()["attachments"][0]["content"]
            assert card["type"] == "AdaptiveCard" and "test message" in card["body"][0]["text"]
            (mail,) = mails.messages
            assert (
                mail.subject == "chunkeval alarmed: a test message to oncall-mail" and "Nothing is wrong" in mail.body
            )
            posts.messages.clear()
            mails.messages.clear()

            # a healthy first run: the hook asked for `completed`; the mailbox did not, and hears nothing
            wh = Warehouse(world["home"] / "warehouse")
            _deployment_run(env, "evaluate/alarmed")
            # bounded waits, long enough for a 2-core machine whose other worker runs the demo's first run meanwhile
            first = wait_for(lambda: wh.exists() and wh.runs("alarmed", "completed"), 600, "the first run", serve)
            assert first[0]["trigger"] == "manual"  # started by hand, though a deployment ran it
            done = posts.wait(lambda: _told(posts), 180, "the completed message")
            assert [m.json()["kind"] for m in done] == ["completed"] and done[0].json()["verdict"] == "first run"
            wait_for(lambda: f"run {first[0]['run_id']} completed (manual)" in said(), 30, "serve's line", serve)

            # the corpus harmed: exactly one regression message at each destination that asked, with its numbers
            month.harm(
                month.World(
                    tmp_path, world["data"] / "corpora", world["data"] / "questions.csv", world["alarmed"], env
                ),
                2,
            )
            posts.messages.clear()
            _deployment_run(env, "evaluate/alarmed")
            regressions = mails.wait(lambda: mails.messages, 240, "the regression email")
            hooked = posts.wait(lambda: len(_told(posts)) >= 2 and _told(posts), 60, "the hook's two messages")
            kinds = sorted(m.json()["kind"] for m in hooked)
            assert kinds == ["completed", "regression"], kinds
            regression = next(m.json() for m in hooked if m.json()["kind"] == "regression")
            worst = regression["regressions"][0]
            assert worst["change"] < -0.02 and worst["ci_high"] < 0 < 0.05 - worst["p_adjusted"]
            assert regression["diff"].startswith("chunkeval diff --run ") and regression["reference_run_id"]
            (mail,) = regressions
            assert mail.subject.startswith("chunkeval alarmed: REGRESSION, ") and "see: chunkeval diff" in mail.body
            assert len(mail.body.splitlines()) <= 6  # reads on a phone
            wait_for(lambda: "REGRESSION" in said(), 30, "serve's line of the regression", serve)

            # a run that fails says why, to every destination that asked for `failed`
            (world["data"] / "questions.csv").write_text("question,corpus_id\nWhat?,honeybees\n")
            mails.messages.clear()
            _deployment_run(env, "evaluate/alarmed")
            (failed,) = mails.wait(lambda: mails.messages, 240, "the failure email")
            assert "run FAILED" in failed.subject and "questions.csv" in failed.body, failed.body
            slack = posts.wait(lambda: posts.at("/slack/T000/B000/XXXX"), 60, "the failure on Slack")
            assert "questions.csv" in slack[0].json()["text"]
            assert posts.wait(lambda: posts.at("/teams/webhookb2/abc"), 60, "the failure on Teams")
            wait_for(lambda: "failed (manual): " in said(), 30, "serve's line of the failure", serve)

            # the schedule that never fires: the silence alarm, from the Prefect server alone
            silence = posts.wait(
                lambda: [m for m in posts.at("/hook/s3cr3t-path") if m.json().get("kind") == "silence"],
                120, "the silence alarm",
            )  # fmt: skip
            assert silence[0].json()["deployment"] == "evaluate/quiet"
        finally:
            ended = stop(serve)
        assert ended is None, f"chunkeval serve ended ({ended}) before the test did:\n{said()}"
    runs = subprocess.run(
        [str(BIN / "chunkeval"), "runs", "--experiment", "alarmed"], env=env, capture_output=True, text=True
    )
    (reason,) = [line for line in runs.stdout.splitlines() if line.startswith("  └ ")]  # the failed run's why
    assert runs.returncode == 0 and "missing" in reason and max(map(len, runs.stdout.splitlines())) <= 120, reason
    assert all("s3cr3t" not in json.dumps(m.json()) for m in posts.messages)  # a secret URL is never quoted
    assert [m.json()["kind"] for m in _told(posts)].count("regression") == 1  # told once, however it was asked
