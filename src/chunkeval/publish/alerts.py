"""Alarms that reach people: what each chunkeval event says (a payload with a subject and a short text that reads on
a phone: the experiment, the verdict, the worst fall, the command to see more), how each kind of destination
receives it (a template per kind: a webhook's JSON body, Slack's, Teams', an email's subject and text), and its
delivery straight from this process (`send`, what `chunkeval alerts test` does).

When runs are served, Prefect's automations deliver the events instead (`chunkeval.flows.alerts`): they render
the very templates below on the Prefect server, so a test message and an alarm look alike. Everything a
destination answers is untrusted: read within one exchange's bounds, masked of every secret of the destination,
cut and escaped before it is shown (`chunkeval.publish.delivery`). Definitions: docs/loop.md,
"Who is told".
"""

from __future__ import annotations

from urllib.parse import urlsplit

from chunkeval.analysis.regression import NOTHING_COMPARABLE, REGRESSION
from chunkeval.engine.settings.endpoints import Destination, read_key
from chunkeval.publish.delivery import Exchange, Redaction, post, send_mail
from chunkeval.vocabulary import ALERT_EVENTS, config_id, config_label

MAX_FALLS = 5  # falls a regression payload lists (the worst first); the diff has them all

# What a destination receives, rendered with `{"event": {"event": name, "payload": payload}}`: the templates a
# Prefect automation renders on the server (`chunkeval.flows.alerts`, where `event` is the real event) and
# `render` renders here. `tojson` is Jinja's (Prefect's own is the same: HTML-safe JSON).
TEMPLATES = {
    "webhook": "{{ event.payload | tojson }}",
    "slack": '{"text": {{ ("*" ~ event.payload.subject ~ "*\\n" ~ event.payload.text) | tojson }}}',
    "teams": (
        '{"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", '
        '"content": {"type": "AdaptiveCard", "$schema": "http://adaptivecards.io/schemas/adaptive-card.json", '
        '"version": "1.4", "body": [{"type": "TextBlock", "weight": "Bolder", "wrap": true, '
        '"text": {{ event.payload.subject | tojson }}}, {"type": "TextBlock", "wrap": true, '
        '"text": {{ event.payload.text | tojson }}}]}}]}'
    ),
}
EMAIL_SUBJECT = "{{ event.payload.subject }}"
EMAIL_BODY = "{{ event.payload.text }}"


def _environment():
    # here, not at the top: Jinja only where a message is rendered
    import jinja2.sandbox

    return jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.ChainableUndefined, autoescape=False)


def render(kind: str, event: str, payload: dict) -> tuple[str, str]:
    """(subject, body) that a destination of `kind` receives for `payload` (the subject is the email's; the body
    the HTTP request's or the email's text)."""
    env, context = _environment(), {"event": {"event": event, "payload": payload}}
    subject = env.from_string(EMAIL_SUBJECT).render(context)
    body = env.from_string(EMAIL_BODY if kind == "email" else TEMPLATES[kind]).render(context)
    return subject, body


# --------------------------------------------------------------------------- what each event says


def _fall_line(f: dict) -> str:
    where = f" in {f['slice']}" if f.get("slice") else ""
    interval = f", 95% CI {f['ci_low']:+.3f}…{f['ci_high']:+.3f}" if f.get("ci_low") is not None else ""
    return (
        f"{f['metric']} of {config_label(f)} [{config_id(f)}]{where}: {f['before']:.3f} → {f['after']:.3f} "
        f"({f['change']:+.3f}{interval}, adjusted p {f['p_adjusted']:.2g})"
    )


def falls(verdict: dict) -> list[dict]:
    """The falls of a verdict as a payload lists them (the worst first, at most `MAX_FALLS`)."""
    keep = ("metric", "slice", "before", "after", "change", "ci_low", "ci_high", "p_adjusted", "n_queries")
    return [
        {"configuration": config_label(f), "config_id": config_id(f), **{k: f.get(k) for k in keep}}
        for f in verdict["regressions"][:MAX_FALLS]
    ]


def _base(event: str, experiment: str, run: dict | None) -> dict:
    out = {"event": ALERT_EVENTS[event], "kind": event, "experiment": experiment}
    if run:
        out.update(run_id=run.get("run_id"), trigger=run.get("trigger"))
    return out


def completed_payload(experiment: str, run: dict, verdict: dict | None, line: str, report: str | None) -> dict:
    """A run completed: its verdict in one line (none for a first run: nothing to compare with)."""
    said = verdict["verdict"] if verdict else "first run"
    text = f"{experiment}: run {run['run_id']} completed ({run.get('trigger')}): {line}"
    if report:
        text += f"\nreport: {report}"
    return {
        **_base("completed", experiment, run),
        "verdict": said,
        "verdict_line": line,
        "report": report,
        "subject": f"chunkeval {experiment}: run completed, {said}",
        "text": text,
    }


def regression_payload(experiment: str, run: dict, verdict: dict, report: str | None) -> dict:
    """A regression: the configurations and metrics that fell (worst first: each with its fall, interval and
    adjusted p), and the commands that show why."""
    listed = falls(verdict)
    worst = verdict["regressions"][0]
    diff = f"chunkeval diff --run {verdict['reference_run_id']} --run {verdict['run_id']}"
    more = len(verdict["regressions"]) - 1
    text = "\n".join(
        [
            f"{experiment}: REGRESSION in run {verdict['run_id']} against {verdict['reference_run_id']}",
            f"worst: {_fall_line(worst)}",
            *([f"and {more} more fall(s): {', '.join(f['metric'] + ' ' + f['configuration'] for f in listed[1:])}"
               + ("…" if more >= MAX_FALLS else "")] if more else []),
            f"see: {diff}",
            *([f"report: {report}"] if report else []),
        ]
    )  # fmt: skip
    return {
        **_base("regression", experiment, run),
        "verdict": REGRESSION,
        "reference_run_id": verdict["reference_run_id"],
        "regressions": listed,
        "n_regressions": len(verdict["regressions"]),
        "diff": diff,
        "report": report,
        "subject": f"chunkeval {experiment}: REGRESSION, {worst['metric']} {worst['change']:+.3f}",
        "text": text,
    }


def failed_payload(experiment: str, run: dict, reason: str) -> dict:
    reason = " ".join(str(reason).split())[:500]
    return {
        **_base("failed", experiment, run),
        "reason": reason,
        "subject": f"chunkeval {experiment}: run FAILED",
        "text": f"{experiment}: run {run.get('run_id')} failed ({run.get('trigger')}): {reason}\n"
        f"see: chunkeval runs --experiment {experiment}",
    }


def nothing_comparable_payload(experiment: str, run: dict, verdict: dict) -> dict:
    return {
        **_base("nothing_comparable", experiment, run),
        "verdict": NOTHING_COMPARABLE,
        "reason": verdict["reason"],
        "subject": f"chunkeval {experiment}: nothing comparable",
        "text": f"{experiment}: run {run['run_id']}: nothing comparable: {verdict['reason']}\n"
        f"pin a new baseline: chunkeval baseline --experiment {experiment} --run {run['run_id']}",
    }


def drift(anchoring, threshold: float) -> dict | None:
    """How far the gold set drifted from its corpus in a run (questions retired or placed approximately), where
    that share reaches `threshold`, else None."""
    anchoring = list(anchoring or ())
    if not anchoring:
        return None
    retired = [a["query_id"] for a in anchoring if a["status"] == "retired"]
    approx = [a["query_id"] for a in anchoring if a["status"] == "approximate"]
    share = (len(retired) + len(approx)) / len(anchoring)
    if not (retired or approx) or share < threshold:
        return None
    return {"questions": len(anchoring), "retired": retired, "approximate": approx, "share": share,
            "threshold": threshold}  # fmt: skip


def gold_drift_payload(experiment: str, run: dict, drifted: dict, command: str) -> dict:
    """The gold set drifted past the experiment's bar; `command` is the `chunkeval gold update` line that corrects it
    (`chunkeval.engine.gold.update.update_command`), runnable as written."""
    n = len(drifted["retired"]) + len(drifted["approximate"])
    ids = ", ".join((drifted["retired"] + drifted["approximate"])[:8]) + ("…" if n > 8 else "")
    return {
        **_base("gold_drift", experiment, run),
        **drifted,
        "subject": f"chunkeval {experiment}: gold set drift, {n} of {drifted['questions']} questions",
        "text": f"{experiment}: run {run['run_id']}: {len(drifted['retired'])} question(s) retired and "
        f"{len(drifted['approximate'])} placed approximately of {drifted['questions']} ({ids})\n"
        f"correct it: {command} (then review the changes: docs/gold.md)",
    }


def silence_payload(deployment: str, experiments: list[str], interval: float, grace: float) -> dict:
    """No run of a scheduled deployment ended within its interval and grace: the scheduler or the server stopped."""
    hours = (interval + grace) / 3600
    said = f"{hours:.1f} h" if hours >= 1 else f"{interval + grace:.0f} s"
    names = ", ".join(experiments)
    return {
        "event": "prefect.flow-run.Completed (absent)",
        "kind": "silence",
        "experiment": names,
        "deployment": deployment,
        "interval_seconds": interval,
        "grace_seconds": grace,
        "subject": f"chunkeval: no run of {deployment} in {said}",
        "text": f"No run of {deployment} ({names}) ended within its interval plus {grace:.0f} s of grace ({said}). "
        "Is `chunkeval serve` running, and its Prefect server?\nsee: chunkeval runs --experiment "
        f"{experiments[0] if experiments else 'NAME'}",
    }


def _production_base(event: str, experiment: str, result_id: str) -> dict:
    return _base(event, experiment, None) | {"result_id": result_id, "trigger": "schedule"}


def production_beaten_payload(experiment: str, result_id: str, verdict: dict, judge: str) -> dict:
    """An offline configuration beats production on the judged sample of production's own queries (the one
    verdict, production the newest and each configuration its baseline: the worst 'fall' of production is the
    configuration that beats it most)."""
    listed = falls(verdict)
    worst = verdict["regressions"][0]
    lead = (
        f"{worst['metric']} of production {worst['after']:.3f} against {worst['before']:.3f} for {config_label(worst)}"
    )
    text = "\n".join(
        [
            f"{experiment}: an offline configuration BEATS PRODUCTION on production's judged queries ({result_id})",
            f"largest: {lead} ({-worst['change']:+.3f}, adjusted p {worst['p_adjusted']:.2g}; judged by {judge})",
            f"see: chunkeval trend {experiment} (production beside runs)",
        ]
    )
    return {
        **_production_base("production_beaten", experiment, result_id),
        "configurations": sorted({f["configuration"] for f in listed}),
        "regressions": listed,
        "n_checks": len(verdict["checks"]),
        "judged_by": judge,
        "subject": f"chunkeval {experiment}: {config_label(worst)} beats production, {worst['metric']} "
        f"{-worst['change']:+.3f}",
        "text": text,
    }


def production_fell_payload(experiment: str, result_id: str, verdict: dict, judge: str) -> dict:
    """Production's judged quality fell against its previous judged result, on the queries asked in both."""
    worst = verdict["regressions"][0]
    text = (
        f"{experiment}: PRODUCTION's judged quality FELL ({result_id} against {verdict['reference_run_id']}): "
        f"{worst['metric']} {worst['before']:.3f} → {worst['after']:.3f} ({worst['change']:+.3f}, adjusted p "
        f"{worst['p_adjusted']:.2g}) on {worst['n_queries']} quer(ies) asked both times; judged by {judge}\n"
        f"see: chunkeval trend {experiment} (production beside runs)"
    )
    return {
        **_production_base("production_fell", experiment, result_id),
        "reference_result_id": verdict["reference_run_id"],
        "falls": [
            {
                k: f.get(k)
                for k in ("metric", "before", "after", "change", "ci_low", "ci_high", "p_adjusted", "n_queries")
            }
            for f in verdict["regressions"][:MAX_FALLS]
        ],  # fmt: skip
        "judged_by": judge,
        "subject": f"chunkeval {experiment}: production fell, {worst['metric']} {worst['change']:+.3f}",
        "text": text,
    }


def test_payload(experiment: str, destination: str) -> dict:
    return {
        "event": "chunkeval.alerts.test",
        "kind": "test",
        "experiment": experiment,
        "subject": f"chunkeval {experiment}: a test message to {destination}",
        "text": f"{experiment}: this is a test of its alarms to {destination} (chunkeval alerts test). "
        "Nothing is wrong.",
    }


def verdict_payloads(experiment: str, run: dict, verdict: dict | None, line: str, report: str | None) -> list[dict]:
    """The events a completed run emits: `completed` always, and `regression` or `nothing_comparable` where its
    verdict says so."""
    out = [completed_payload(experiment, run, verdict, line, report)]
    if verdict and verdict["verdict"] == REGRESSION:
        out.append(regression_payload(experiment, run, verdict, report))
    elif verdict and verdict["verdict"] == NOTHING_COMPARABLE:
        out.append(nothing_comparable_payload(experiment, run, verdict))
    return out


# --------------------------------------------------------------------------- delivery from this process


def credentials(destination: Destination) -> tuple[str | None, str | None]:
    """(the bearer token, the SMTP password) `destination` is sent with, read from the variables it names: a
    variable that is not set is the user's input, one line naming the destination and the variable."""
    what = f"destination {destination.name}"
    token = read_key(destination.api_key_env, what) if destination.api_key_env else None
    password = read_key(destination.password_env, what) if destination.password_env else None
    return token, password


def redaction(destination: Destination, token: str | None, password: str | None) -> Redaction:
    """What is masked of everything `destination` answers: its URL (path segments, query values), its token, its
    login, in every form a server may echo them (`chunkeval.publish.delivery.Redaction`)."""
    logins = ((destination.username, password),) if destination.username else ()
    return Redaction(token, password, destination.username, urls=(destination.url,), logins=logins)


def send(destination: Destination, event: str, payload: dict) -> str:
    """Deliver one message to `destination` now, within one exchange's bounds (`chunkeval.publish.delivery`);
    what it answered, in a few words, masked. A destination that cannot be reached, refuses or goes past a bound
    raises nothing: the answer says so (the caller reports each). A variable it names that is not set raises
    `InputError` before anything is sent."""
    subject, body = render(destination.kind, event, payload)
    token, password = credentials(destination)
    masked = redaction(destination, token, password)
    with Exchange() as exchange:
        try:
            if destination.kind == "email":
                verdict, said = _send_email(destination, subject, body, password, exchange)
            else:
                verdict, said = _post(destination, body, token, exchange)
        except Exception as exc:  # refused, timed out, past a bound, a TLS or SMTP error: each said, none raised
            verdict, said = "failed", exchange.said(exc)
    return f"{verdict}: {masked.shown(said)}"


def _post(destination: Destination, body: str, token: str | None, exchange: Exchange) -> tuple[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "chunkeval-alerts"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, text = post(destination.url, body.encode("utf-8"), headers, exchange)
    return ("delivered" if 200 <= status < 300 else "refused"), f"HTTP {status} {text}"


def _send_email(
    destination: Destination, subject: str, body: str, password: str | None, exchange: Exchange
) -> tuple[str, str]:
    parts = urlsplit(destination.url)
    security = "ssl" if parts.scheme == "smtps" else "starttls" if destination.starttls else "none"
    port = parts.port or (465 if security == "ssl" else 25)
    refused = send_mail(
        parts.hostname, port, security, destination.sender, list(destination.to), subject, body,
        destination.username, password, exchange,
    )  # fmt: skip
    if refused:
        return "refused", f"for {', '.join(refused)}"
    return "delivered", f"accepted by {parts.hostname}:{port} for {len(destination.to)} recipient(s)"
