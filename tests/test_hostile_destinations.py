"""What a destination of alarms answers is untrusted input (issue 55): `chunkeval alerts test` and the automations
`chunkeval serve` creates read every answer within one exchange's bounds (a deadline on the whole exchange, a bound
on the bytes read, no decompression), and show it masked of every secret of the destination. The destinations are
real servers on 127.0.0.1 that answer as hostile or broken ones would (tests/hostile_receivers.py); the bounds are
`chunkeval.publish.delivery`'s, documented in docs/limits.md."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkeval.paths import DEMO_DIR
from chunkeval.publish.delivery import DEADLINE, Redaction
from hostile_receivers import http_receiver, run_measured, smtp_receiver

BIN = Path(sys.executable).parent
PATH_SECRET = "S3CRETpathSEGMENT42"
QUERY_SECRET = "QU+ERY/SECRET=77"  # sent URL-encoded, echoed decoded
TOKEN = "tok-SECRET-token-9001"
USER, PASSWORD = "chunkeval-login", "PASSWORD-secret-000"
HTTP_WAYS = ("gigabyte", "gzip", "trickle-body", "trickle-head", "echo", "terminal", "redirect")
SMTP_WAYS = ("endless", "trickle", "auth-echo")


def forms(secret: str) -> set[str]:
    """What must never be printed or written of `secret`: itself and its URL and base64 forms."""
    raw = secret.encode()
    return {secret, quote(secret, safe=""), quote_plus(secret), unquote(secret), base64.b64encode(raw).decode()}


FORBIDDEN = (
    forms(PATH_SECRET)
    | forms(QUERY_SECRET)
    | forms(TOKEN)
    | forms(USER)
    | forms(PASSWORD)
    | {base64.b64encode(f"\0{USER}\0{PASSWORD}".encode()).decode()}
)


def _experiment(tmp_path: Path, destinations: list[str]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "hostile",
                "corpus_dir": str(DEMO_DIR / "corpora"),
                "questions": str(DEMO_DIR / "questions.csv"),
                "alerts": [{"to": name, "events": ["completed"]} for name in destinations],
            }
        )
    )
    return path


def _home(tmp_path: Path, endpoints: dict) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "endpoints.yaml").write_text(yaml.safe_dump(endpoints))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(CHUNKEVAL_HOME=str(home), HOOK_TOKEN=TOKEN, SMTP_PASS=PASSWORD, HF_HUB_OFFLINE="1")
    return env


def _alerts_test(env: dict, experiment: Path) -> tuple[int, str, float, float]:
    """`chunkeval alerts test` as a whole process: (exit status, stdout + stderr, seconds, its own peak RSS in MiB)."""
    return run_measured(["alerts", "test", experiment], env, experiment.parent / "peak.txt")


def _leaks(text: str) -> list[str]:
    return sorted(f for f in FORBIDDEN if f in text)


def test_every_hostile_answer_is_read_within_bounds_and_shown_without_a_secret(tmp_path):
    """One `alerts test` to ten hostile destinations at once: a gigabyte, a gzip bomb, two trickles, a silent
    greeting that never ends, echoes of the URL, the token and the SMTP login; the process stays small, ends
    within the deadline, and prints and writes no secret in any form."""
    with http_receiver() as (url, requests, sent), contextlib_smtp(SMTP_WAYS) as smtp:
        endpoints = {
            f"hook-{way}": {
                "base_url": f"{url}/{way}/{PATH_SECRET}?token={quote_plus(QUERY_SECRET)}",
                "kind": "webhook",
                "api_key_env": "HOOK_TOKEN",
            }
            for way in HTTP_WAYS
        }
        for way, (port, _) in smtp.items():
            endpoints[f"mail-{way}"] = {
                "base_url": f"smtp://127.0.0.1:{port}", "kind": "email", "to": ["oncall@example.com"],
                "username": USER, "password_env": "SMTP_PASS",
            }  # fmt: skip
        env = _home(tmp_path, endpoints)
        code, out, seconds, peak = _alerts_test(env, _experiment(tmp_path, sorted(endpoints)))
        lines = {line.split(" ", 1)[0]: line for line in out.splitlines() if line.startswith(("hook-", "mail-"))}

        assert code == 4, out  # a destination that did not take its message: a fault, not bad input
        assert seconds < DEADLINE + 15, (seconds, out)  # every exchange at once, each within its deadline
        assert peak < 300, (peak, out)  # a gigabyte and a 512 MiB bomb, never held
        assert sent.get("gigabyte", 0) < 64 << 20  # the client stopped reading: the rest of the gigabyte unsent
        assert _leaks(out) == [], out
        home = Path(env["CHUNKEVAL_HOME"])
        written = [p for p in home.rglob("*") if p.is_file() and p.name != "endpoints.yaml"]  # the secrets' own file
        assert _leaks("".join(p.read_text(errors="replace") for p in written)) == []

        shown = lines["hook-gigabyte"].split("delivered: ", 1)[1]
        assert shown.startswith("HTTP 200 AAAA") and shown.endswith("A…") and len(shown) == 300, out  # cut at 300
        assert "delivered: HTTP 200 (an answer encoded ***: not read)" in lines["hook-gzip"], (
            out
        )  # gzip: a path segment of its URL, masked
        assert "(its answer cut at the 20 s deadline)" in lines["hook-trickle-body"], out
        assert "failed: no whole answer within 20 s" in lines["hook-trickle-head"], out
        assert lines["hook-echo"].count("***") >= 3 and "refused: HTTP 400" in lines["hook-echo"], out
        assert "\\x1b[2J" in lines["hook-terminal"] and "\x1b" not in out and "\x00" not in out, out
        assert "refused: HTTP 302" in lines["hook-redirect"] and not any(b"/followed" in r for r in requests)
        assert "failed: it sent more than 256 KiB" in lines["mail-endless"], out
        assert "failed: no whole answer within 20 s" in lines["mail-trickle"], out
        assert "SMTPAuthenticationError" in lines["mail-auth-echo"] and "***" in lines["mail-auth-echo"], out
        auth = [line for line in smtp["auth-echo"][1] if line.upper().startswith(b"AUTH")]
        assert auth, smtp["auth-echo"][1]  # the login was sent, and echoed: what was printed is masked


class contextlib_smtp:  # noqa: N801 (a context manager over several receivers)
    """One SMTP receiver per way: {way: (port, lines received)}."""

    def __init__(self, ways):
        self.ways, self.managers = ways, []

    def __enter__(self):
        out = {}
        for way in self.ways:
            manager = smtp_receiver(way)
            out[way] = manager.__enter__()
            self.managers.append(manager)
        return out

    def __exit__(self, *exc):
        for manager in reversed(self.managers):
            manager.__exit__(*exc)


@pytest.mark.parametrize(
    "base_url, part",
    [
        (f"https://hooks.slack.com:443000/services/T000/B000/{PATH_SECRET}", "its port is not a number"),
        (f"https://[hooks.slack.com/services/T000/B000/{PATH_SECRET}", "its host is not valid"),
        (f"ftp://hooks.slack.com/services/{PATH_SECRET}", "http:// or https:// with a host"),
    ],
)
def test_an_endpoints_value_refused_is_named_by_its_part_never_shown(tmp_path, base_url, part):
    env = _home(tmp_path, {"team-slack": {"base_url": base_url, "kind": "slack"}})
    code, out, _, _ = _alerts_test(env, _experiment(tmp_path, ["team-slack"]))
    assert code == 2 and "destination team-slack" in out and part in out, out
    assert PATH_SECRET not in out and len(out.strip().splitlines()) == 1, out


def test_a_variable_a_destination_names_that_is_not_set_is_the_users_input(tmp_path):
    with http_receiver() as (url, requests, _):
        env = _home(
            tmp_path,
            {
                "ok-hook": {"base_url": f"{url}/ok", "kind": "webhook"},
                "keyed": {"base_url": f"{url}/ok/{PATH_SECRET}", "kind": "webhook", "api_key_env": "UNSET_HOOK_KEY"},
            },
        )
        env.pop("UNSET_HOOK_KEY", None)
        code, out, _, _ = _alerts_test(env, _experiment(tmp_path, ["ok-hook", "keyed"]))
        assert code == 2, out
        assert "destination keyed: the API key variable UNSET_HOOK_KEY is not set" in out, out
        assert requests == []  # checked before anything was sent, to any destination


@settings(max_examples=150, deadline=None)
@given(
    secret=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=40),
    before=st.binary(max_size=7),
    after=st.binary(max_size=7),
)
def test_a_secret_is_masked_in_every_form_a_server_may_echo_it(secret, before, after):
    """Plain, in other letter case, URL-encoded and decoded, base64, and base64 at any offset of a longer value:
    the window of a longer encoding that holds only the secret's bytes is computed here from the whole encoding,
    independently of how the redaction builds its forms."""
    redaction = Redaction(secret)
    encoded = base64.b64encode(before + secret.encode() + after).decode()
    start, end = -(-len(before) // 3) * 3, (len(before) + len(secret.encode())) // 3 * 3
    window = encoded[start // 3 * 4 : end // 3 * 4]
    echoes = [secret, secret.upper(), quote(secret, safe=""), quote_plus(secret), base64.b64encode(secret.encode())]
    for echo in echoes:
        text = echo.decode() if isinstance(echo, bytes) else echo
        assert text not in redaction.apply(f"the server said: {text}.")
    assert window not in redaction.apply(f"AUTH PLAIN {encoded}")


@pytest.mark.slow
def test_a_served_automation_delivers_within_bounds_and_keeps_no_secret(
    prefect_server, prefect_api, tmp_path, monkeypatch
):
    """The automations `chunkeval serve` creates deliver through chunkeval's own blocks on the Prefect server:
    an answer that echoes the destination's secrets fails the action with a masked log, a gigabyte answer is not
    read, and neither the server's events nor its log hold a secret."""
    import httpx

    from chunkeval.flows.alerts import emit, sync_automations

    with http_receiver() as (url, requests, sent):
        endpoints = {
            f"served-{way}": {
                "base_url": f"{url}/{way}/{PATH_SECRET}?token={quote_plus(QUERY_SECRET)}",
                "kind": kind,
                "api_key_env": "HOOK_TOKEN",
            }
            for way, kind in (("echo", "webhook"), ("gigabyte", "slack"))
        }
        env = _home(tmp_path, endpoints)
        for name in ("CHUNKEVAL_HOME", "HOOK_TOKEN"):
            monkeypatch.setenv(name, env[name])
        api = prefect_api
        experiment = f"hostile-{os.getpid()}"
        routes = {name: {experiment: ("completed",)} for name in endpoints}
        sync_automations({"routes": routes, "silences": []}, say=lambda line: None)
        since = time.time()

        def outcomes():
            answer = httpx.post(f"{api}/events/filter", json={"limit": 50}, timeout=10).json()  # the most a page holds
            return [
                e
                for e in answer.get("events", [])
                if e["event"].startswith("prefect.automation.action.") and any(n in json.dumps(e) for n in endpoints)
            ]

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len([e for e in outcomes() if "triggered" not in e["event"]]) < 2:
            emit(  # again until the server's triggers have loaded the automations (they refresh on their own)
                {"event": "chunkeval.run.completed", "experiment": experiment, "run_id": f"r{int(since)}",
                 "subject": f"chunkeval {experiment}: completed", "text": "a run completed"}
            )  # fmt: skip
            time.sleep(3)
        ended = [e for e in outcomes() if "triggered" not in e["event"]]
        assert len(ended) >= 2, httpx.post(f"{api}/events/filter", json={"limit": 5}, timeout=10).text[:3000]
        seen = json.dumps(outcomes())
        failed = [e for e in ended if e["event"] == "prefect.automation.action.failed"]
        assert failed and "***" in seen and "refused: HTTP 400" in seen, seen
        assert _leaks(seen) == [], _leaks(seen)
        assert sent.get("gigabyte", 0) < 64 << 20
        log = Path(prefect_server["PREFECT_HOME"]) / "server.log"
        assert _leaks(log.read_text(errors="replace")) == []
        assert any(f"/echo/{PATH_SECRET}".encode() in r for r in requests)  # it was delivered to, and answered
