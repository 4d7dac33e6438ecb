"""Alarms through Prefect's own automations (docs/loop.md, "Who is told").

- `emit`: a run's events (`chunkeval.publish.alerts` says what each holds), on resource
  `chunkeval.experiment.<name>` with the run as a related resource.
- `sync_automations`: what `chunkeval serve` creates, or updates (never twice), on the Prefect server: one
  automation per destination of the served experiments' `alerts:` (chunkeval's notification block for its kind,
  `chunkeval-webhook` for webhook, Slack and Teams, `chunkeval-smtp-email` for email, and a SendNotification),
  and the silence alarm of each scheduled deployment: a proactive trigger that fires when no run of it ended
  within its interval plus grace. The server delivers them, whether or not chunkeval runs in the foreground.
- `say_run_ends`: the line `chunkeval serve` prints when a served run ends, read from the same events.
"""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import UTC, datetime, timedelta

from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.settings.endpoints import Destination, destination
from chunkeval.flows.blocks import ChunkevalEmail, ChunkevalWebhook
from chunkeval.flows.schedules import next_times
from chunkeval.publish.alerts import EMAIL_BODY, EMAIL_SUBJECT, TEMPLATES, credentials, render, silence_payload
from chunkeval.vocabulary import ALERT_EVENTS

PREFIX = "chunkeval"  # of the automations and blocks serve owns (found again by name: updated, never doubled)
RUN_ENDS = ("chunkeval.run.completed", "chunkeval.run.failed")


def resource(experiment: str) -> dict:
    return {"prefect.resource.id": f"chunkeval.experiment.{experiment}", "prefect.resource.name": experiment}


def emit(payload: dict) -> None:
    """Emit one event of a run (`payload` as `chunkeval.publish.alerts` makes it)."""
    from prefect.events import emit_event

    related = [{"prefect.resource.id": f"chunkeval.run.{payload['run_id']}", "prefect.resource.role": "run"}]
    emit_event(
        event=payload["event"],
        resource=resource(payload["experiment"]),
        related=related if payload.get("run_id") else None,
        payload=payload,
    )


# --------------------------------------------------------------------------- automations


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _block(dest: Destination):
    """The Prefect block that reaches `dest`, saved under `chunkeval-<name>` (its secrets stored as secrets): one
    of chunkeval's own notification blocks (`chunkeval.flows.blocks`), which deliver within one exchange's bounds
    and say a failure masked, where Prefect's Webhook block would read any answer whole."""
    from urllib.parse import urlsplit

    name = f"{PREFIX}-{_slug(dest.name)}"
    token, password = credentials(dest)
    if dest.kind == "email":
        parts = urlsplit(dest.url)
        security = "ssl" if parts.scheme == "smtps" else "starttls" if dest.starttls else "none"
        block = ChunkevalEmail(
            host=parts.hostname, port=parts.port or (465 if security == "ssl" else 25), security=security,
            sender=dest.sender, to=list(dest.to), username=dest.username, password=password,
        )  # fmt: skip
    else:
        block = ChunkevalWebhook(url=dest.url, token=token)
    return block.save(name, overwrite=True)


def _action(dest: Destination, block_id, payload: dict | None = None):
    """The action that delivers to `dest`: its kind's template, rendered by the server from the event (or, for the
    silence alarm, which has no event, rendered here from `payload`), sent by its block."""
    from prefect.events.actions import SendNotification

    if payload is not None:
        subject, body = render(dest.kind, payload["event"], payload)
        return SendNotification(block_document_id=block_id, subject=subject, body=body)
    body = EMAIL_BODY if dest.kind == "email" else TEMPLATES[dest.kind]
    return SendNotification(block_document_id=block_id, subject=EMAIL_SUBJECT, body=body)


def _upsert(client, automation) -> str:
    """Create the automation, or update the one of its name (serve run again never doubles one); what it did."""
    found = client.read_automations_by_name(automation.name)
    if found:
        client.update_automation(found[0].id, automation)
        for extra in found[1:]:  # doubled by an older serve: one is kept
            client.delete_automation(extra.id)
        return "updated"
    client.create_automation(automation)
    return "created"


def deployment_experiments(deployment) -> list[Experiment]:
    """The experiments a served deployment runs (its `experiment` or `experiments` parameter)."""
    params = deployment.parameters or {}
    refs = [params["experiment"]] if "experiment" in params else list(params.get("experiments") or [])
    return [Experiment.resolve(ref) for ref in refs]


def interval_seconds(schedule) -> float | None:
    """The longest wait between two runs of a deployment schedule: an interval's, or a cron's or an RRule's over
    its next ten times (a weekdays-only cron waits three days over a weekend, and a silence alarm must not fire
    then); None where it has fewer than two times left (an RRule that ends). The times are the server's own
    (`chunkeval.flows.schedules.next_times`), so that every schedule Prefect accepts (`@daily`, `0 0 ? * *`)
    reads here as its scheduler reads it."""
    inner = getattr(schedule, "schedule", schedule)
    interval = getattr(inner, "interval", None)
    if interval is not None:
        return interval.total_seconds() if isinstance(interval, timedelta) else float(interval)
    points = next_times(inner, 10, datetime.now(UTC))
    return max((b - a).total_seconds() for a, b in zip(points, points[1:])) if len(points) > 1 else None


def plan_alerts(deployments) -> dict:
    """What the served deployments' experiments ask to be told, checked before anything is served: each
    destination looked up in the user's endpoints.yaml (an unknown one is one line naming it). `routes`:
    destination → experiment → events; `silences`: (deployment, destinations, experiments, interval, grace)."""
    routes: dict[str, dict[str, tuple]] = {}
    silences = []
    for deployment in deployments:
        experiments = deployment_experiments(deployment)
        for exp in experiments:
            for route in exp.alerts:
                destination(route.to, f"experiment {exp.name}: alerts")  # defined, or one line now
                wanted = tuple(e for e in route.events if e != "silence")
                if wanted:
                    routes.setdefault(route.to, {})[exp.name] = wanted
        listen = [(r, exp) for exp in experiments for r in exp.alerts if "silence" in r.events]
        for schedule in deployment.schedules or []:
            if getattr(schedule, "active", True) is False:  # a paused schedule runs nothing: no silence to watch
                continue
            interval = interval_seconds(schedule)
            if interval is None or not listen:
                continue
            grace = max(r.grace for r, _ in listen)
            names = sorted({exp.name for _, exp in listen})
            silences.append((deployment, sorted({r.to for r, _ in listen}), names, interval, grace))
    return {"routes": routes, "silences": silences}


def sync_automations(plan: dict, say=print) -> list[str]:
    """Create or update, on the Prefect server, the automations of `plan` (`plan_alerts`), once the deployments
    are registered (a silence alarm names its deployment's id); one line each of what was done."""
    from prefect.client.orchestration import get_client
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    routes, silences = plan["routes"], plan["silences"]
    if not routes and not silences:
        return []
    done = []
    blocks = {}
    with get_client(sync_client=True) as client:
        for name in sorted(set(routes) | {d for s in silences for d in s[1]}):
            dest = destination(name)
            blocks[name] = (dest, _block(dest))
        for name, experiments in sorted(routes.items()):
            dest, block_id = blocks[name]
            groups: dict[tuple, list[str]] = {}
            for exp_name, events in experiments.items():
                groups.setdefault(events, []).append(exp_name)
            for events, names in groups.items():
                title = f"{PREFIX} alerts → {name}" + (f" ({', '.join(sorted(names))})" if len(groups) > 1 else "")
                trigger = EventTrigger(
                    match={"prefect.resource.id": [f"chunkeval.experiment.{n}" for n in sorted(names)]},
                    expect={ALERT_EVENTS[e] for e in events},
                    posture=Posture.Reactive,
                    threshold=1,
                    within=timedelta(0),
                )
                automation = AutomationCore(
                    name=title,
                    description=f"chunkeval: {', '.join(events)} of {', '.join(sorted(names))} to {name} "
                    f"({dest.kind}, {dest.shown()})",
                    trigger=trigger,
                    actions=[_action(dest, block_id)],
                )
                done.append(f"{_upsert(client, automation)} automation '{title}' ({', '.join(events)})")
        for deployment, dests, names, interval, grace in silences:
            full = f"{deployment.flow_name}/{deployment.name}"
            payload = silence_payload(full, names, interval, grace)
            found = client.read_deployment_by_name(full)
            trigger = EventTrigger(
                match={"prefect.resource.id": "prefect.flow-run.*"},
                match_related={"prefect.resource.id": f"prefect.deployment.{found.id}"},
                expect={"prefect.flow-run.Completed", "prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
                posture=Posture.Proactive,
                threshold=1,
                within=timedelta(seconds=max(10.0, interval + grace)),
            )
            title = f"{PREFIX} silence → {full}"
            automation = AutomationCore(
                name=title,
                description=f"chunkeval: no run of {full} ended within {interval:g} s + {grace} s of grace",
                trigger=trigger,
                actions=[_action(blocks[d][0], blocks[d][1], payload) for d in dests],
            )
            done.append(f"{_upsert(client, automation)} automation '{title}' (to {', '.join(dests)})")
    for line in done:
        say(f"chunkeval serve: {line}")
    return done


# --------------------------------------------------------------------------- serve's line per run


def run_end_line(event) -> str:
    """The line `chunkeval serve` prints when a served run ends: completed with its verdict, or failed with why."""
    payload = event.payload or {}
    experiment, run_id = payload.get("experiment", "?"), payload.get("run_id", "?")
    if event.event == "chunkeval.run.failed":
        return f"chunkeval serve: experiment {experiment}: run {run_id} failed ({payload.get('trigger')}): " + str(
            payload.get("reason", "")
        )
    return f"chunkeval serve: experiment {experiment}: run {run_id} completed ({payload.get('trigger')}): " + str(
        payload.get("verdict_line", "")
    )


def say_run_ends(say, stop: threading.Event | None = None) -> threading.Thread:
    """A thread that says `run_end_line` for every run that ends, as long as the process lives (reconnecting
    where the server's event stream drops)."""
    from prefect.events.clients import get_events_subscriber
    from prefect.events.filters import EventFilter, EventNameFilter

    async def listen() -> None:
        while stop is None or not stop.is_set():
            try:
                flt = EventFilter(event=EventNameFilter(name=list(RUN_ENDS)))
                async with get_events_subscriber(filter=flt) as subscriber:
                    async for event in subscriber:
                        say(run_end_line(event))
            except Exception:  # the server restarting, a dropped socket: listen again
                await asyncio.sleep(2)

    thread = threading.Thread(target=lambda: asyncio.run(listen()), daemon=True, name="chunkeval-run-ends")
    thread.start()
    return thread
