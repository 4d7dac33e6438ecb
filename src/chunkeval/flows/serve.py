"""Serve every deployment of `chunkeval/deployments/prefect.yaml` (package data) from one process (no work pool needed).

The YAML file is the one description of the deployments: `prefect deploy --all` reads it too.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from prefect import serve
from prefect.events import DeploymentEventTrigger
from prefect.exceptions import PrefectHTTPStatusError
from prefect.schedules import Cron, Interval, RRule

from chunkeval.engine.settings.plugins import check_module_name, is_stdlib
from chunkeval.errors import InputError
from chunkeval.flows.alerts import interval_seconds, plan_alerts, say_run_ends, sync_automations
from chunkeval.flows.schedules import next_times
from chunkeval.flows.temporary_server import check_api
from chunkeval.limits import read_text, yaml_load
from chunkeval.paths import DEPLOYMENTS_FILE

DEFAULT_FILE = DEPLOYMENTS_FILE


def _flow(entrypoint, where: str):
    """The flow an entrypoint (`module:name`) names; a plug-in name is checked before anything is imported."""
    if not isinstance(entrypoint, str) or ":" not in entrypoint:
        raise InputError(f"{where}: entrypoint must be module:flow, got {entrypoint!r}")
    path, _, name = entrypoint.partition(":")
    module = path.removesuffix(".py").replace("/", ".")
    check_module_name(module, f"{where}: entrypoint")
    if is_stdlib(module):  # refused by name: importing `this` or `antigravity` already does something
        raise InputError(f"{where}: entrypoint {entrypoint!r} names a standard-library module, not a flow")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise InputError(f"{where}: entrypoint {entrypoint!r} does not import ({exc})") from None
    if not hasattr(found, "to_deployment"):
        raise InputError(f"{where}: entrypoint {entrypoint!r} is not a Prefect flow")
    return found


def _schedule(spec, where: str):
    """A schedule of the file (cron or an RRule with a timezone, or interval seconds with an anchor_date), checked
    here so that the server is never sent one it would refuse, one that never fires, or one the silence alarm
    could not read."""
    if not isinstance(spec, dict):
        raise InputError(f"{where}: a schedule is a mapping with cron, rrule or interval, got {spec!r}")
    timezone = spec.get("timezone", "UTC")
    active = spec.get("active", True)
    if not isinstance(active, bool):
        raise InputError(f"{where}: active is true or false, got {active!r}")
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"{where}: unknown timezone {timezone!r} (an IANA name such as UTC or Europe/Paris)") from None
    if "cron" in spec or "rrule" in spec:
        schedule, what = _calendar(spec, timezone, active, where)
        _reads(schedule, what, where)
        return schedule
    if "interval" in spec:  # anchor_date: an ISO time the intervals count from (default: when it is served)
        seconds, anchor = spec["interval"], spec.get("anchor_date")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 1 <= seconds <= 366 * 86400:
            raise InputError(f"{where}: interval must be seconds from 1 to a year, got {seconds!r}")
        try:
            start = datetime.fromisoformat(str(anchor)) if anchor else None
        except ValueError:
            raise InputError(f"{where}: anchor_date must be an ISO time, got {anchor!r}") from None
        if start is not None:  # a first run years ahead never comes: the server would hold a schedule that waits
            aware = start if start.tzinfo else start.replace(tzinfo=ZoneInfo(str(timezone)))
            if aware - datetime.now(aware.tzinfo) > MAX_ANCHOR_AHEAD:
                raise InputError(
                    f"{where}: anchor_date {anchor!r} is more than {MAX_ANCHOR_AHEAD.days} days ahead: the first "
                    "run would wait that long (the intervals count from it)"
                )
        return Interval(seconds, anchor_date=start, timezone=timezone if "timezone" in spec else None, active=active)
    raise InputError(f"{where}: a schedule needs cron, rrule or interval, got {spec!r}")


MAX_ANCHOR_AHEAD = timedelta(days=366)  # the furthest an interval schedule's anchor_date may lie ahead
DEPLOYMENTS_BYTES = 1 << 20  # a deployments file is a few lines


def _calendar(spec: dict, timezone, active: bool, where: str):
    """A cron or RRule schedule of the file as Prefect builds it (which checks its syntax), and its text."""
    kind = "cron" if "cron" in spec else "rrule"
    what = str(spec[kind])
    try:
        if kind == "cron":
            return Cron(what, timezone=timezone, active=active), what
        return RRule(what, timezone=timezone, active=active), what
    except ValueError:
        shape = "a cron expression (minute hour day month weekday)" if kind == "cron" else "an RRule (RFC 5545)"
        raise InputError(f"{where}: {what!r} is not {shape}") from None


def _reads(schedule, what: str, where: str) -> None:
    """Refuse up front, in one line naming the deployment and the schedule, a cron or RRule that the server's
    scheduler finds no next time for (`0 0 31 2 *` reads, and never fires; an RRule whose COUNT has passed) or
    cannot compute (an RRule's UNTIL in local time beside a zoned start): read as the server and the silence
    alarm read it (`chunkeval.flows.schedules`), so that what passes here, both read."""
    from prefect._vendor.croniter import CroniterBadDateError

    try:
        ahead = next_times(schedule, 1)
        interval_seconds(schedule)  # the silence alarm's reading of it
    except CroniterBadDateError:
        ahead = []
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise InputError(f"{where}: schedule {what!r} cannot be read by the server ({_first_line(exc)})") from None
    if not ahead:
        raise InputError(f"{where}: {what!r} never fires: no time from now on matches it")


def _first_line(exc: BaseException) -> str:
    """An exception's first line, cut (a schedule's error quotes the schedule back)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def deployments(prefect_file: Path = DEFAULT_FILE) -> list:
    """The deployments of the file, as runner deployments of this process's flows: each checked in one line
    naming the file and the deployment (its entrypoint, schedules and triggers) before any is served."""
    text = read_text(Path(prefect_file), DEPLOYMENTS_BYTES, "deployments file")  # never a FIFO, never unbounded
    spec = yaml_load(text, prefect_file)  # a key given twice is an error here too
    listed = spec.get("deployments") if isinstance(spec, dict) else None
    if not isinstance(listed, list) or not all(isinstance(d, dict) for d in listed):
        raise InputError("a deployments file holds a list of deployments (mappings) under deployments:", prefect_file)
    out, seen = [], {}
    for n, d in enumerate(listed, start=1):
        where = f"{prefect_file}: deployment {d.get('name') or n}"
        if not isinstance(d.get("name"), str) or not d["name"]:
            raise InputError(f"{where}: needs a name")
        if d["name"] in seen:  # the server keeps one deployment per flow and name: the other would vanish
            raise InputError(f"{where}: the name is given twice (deployments {seen[d['name']]} and {n})")
        seen[d["name"]] = n
        flow = _flow(d.get("entrypoint"), where)
        parameters = d.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InputError(f"{where}: parameters must be a mapping, got {parameters!r}")
        try:  # the server stores what it is given: a parameter the flow does not take fails every run
            inspect.signature(flow.fn).bind_partial(**parameters)
        except TypeError as exc:
            raise InputError(f"{where}: {flow.name} takes no such parameters ({exc})") from None
        try:
            triggers = [
                DeploymentEventTrigger(**{k: v for k, v in t.items() if k != "type"}) for t in d.get("triggers") or []
            ]
            out.append(
                flow.to_deployment(
                    name=d["name"],
                    description=d.get("description"),
                    parameters=parameters,
                    schedules=[_schedule(s, where) for s in d.get("schedules") or []] or None,
                    triggers=triggers or None,
                )
            )
        except (TypeError, ValueError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
            raise InputError(f"{where}: {str(exc).splitlines()[0]}") from None
    return out


def scheduler_wait() -> float:
    """Seconds to wait for the server's scheduler to have created a deployment's first runs: two loops of
    its service for recently changed deployments (PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS,
    5 s by default), as this process's settings give it (a server elsewhere may be set otherwise)."""
    from prefect.settings import get_current_settings

    return 2 * get_current_settings().server.services.scheduler.recent_deployments_loop_seconds


NOT_DEPLOYED = "not deployed"


def next_runs(names: list[str]) -> dict[str, object]:
    """The expected start of the next scheduled flow run of each deployment `flow/name`, read back from the
    Prefect server: None where it holds no scheduled run, NOT_DEPLOYED where the deployment does not exist."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.exceptions import ObjectNotFound

    scheduled = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])))
    out: dict[str, object] = {}
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                deployment = client.read_deployment_by_name(name)
            except ObjectNotFound:
                out[name] = NOT_DEPLOYED
                continue
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                flow_run_filter=scheduled,
                sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                limit=1,
            )
            out[name] = runs[0].expected_start_time if runs else None
    return out


def watch_schedules(names: list[str], wait: float, say=print, registered: float = 120.0) -> dict[str, object]:
    """Once the served deployments exist (`serve` registers them first, within `registered` seconds), wait
    up to `wait` seconds for the server's scheduler to create their runs; then say each one's next
    scheduled time, and in one line which have none, naming the likely cause. Returns what it read."""

    def read() -> dict[str, object]:
        try:
            return next_runs(names)
        except Exception:  # the server not answering yet: read again
            return {}

    found: dict[str, object] = {}
    deadline = time.monotonic() + registered
    while time.monotonic() < deadline:
        found = read()
        if found and NOT_DEPLOYED not in found.values():
            break
        time.sleep(1)
    deadline = time.monotonic() + wait
    while not all(found.get(n) not in (None, NOT_DEPLOYED) for n in names) and time.monotonic() < deadline:
        time.sleep(1)
        found = read() or found
    missing = []
    for name in names:
        when = found.get(name)
        if when in (None, NOT_DEPLOYED):
            missing.append(name)
        else:
            say(f"chunkeval serve: {name}: next run at {when:%Y-%m-%d %H:%M:%S %Z}")
    if missing:
        say(
            f"chunkeval serve: WARNING: the Prefect server scheduled no run of {', '.join(missing)} within "
            f"{wait:g} s (two loops of its scheduler): its scheduler service is failing or off. See the server's "
            "log; SQLAlchemy 2.1 beside prefect 3.8.8 breaks it (chunkeval pins SQLAlchemy < 2.1), and "
            "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED=false turns it off"
        )
    return found


def after_registration(served: list, plan: dict, say) -> None:
    """Once `serve` has registered the deployments: the alarms' automations made on the server (`plan`), then each
    scheduled deployment's next run said (`watch_schedules`)."""
    names = [f"{d.flow_name}/{d.name}" for d in served]
    scheduled = [  # a paused schedule (active: false) gets no run to wait for
        f"{d.flow_name}/{d.name}" for d in served if any(getattr(x, "active", True) for x in d.schedules or [])
    ]
    if plan["routes"] or plan["silences"]:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # a silence alarm names its deployment's id: registered first
            try:
                if NOT_DEPLOYED not in next_runs(names).values():
                    break
            except Exception:  # the server not answering yet: ask again
                pass
            time.sleep(1)
        try:
            sync_automations(plan, say)
        except Exception as exc:  # the server refused one: said, and the deployments are served all the same
            say(f"chunkeval serve: WARNING: the alarms' automations were not made ({str(exc).splitlines()[0][:300]})")
    if scheduled:
        watch_schedules(scheduled, scheduler_wait(), say)


def serve_all(prefect_file: Path = DEFAULT_FILE) -> None:
    """Serve the file's deployments. Meanwhile a thread makes the alarms' automations (`chunkeval.flows.alerts`)
    and reads back each scheduled deployment's next run and says it, and another says each served run's end."""
    served = deployments(prefect_file)
    plan = plan_alerts(served)  # every destination named is defined: else one line, before anything is served
    check_api()  # a Prefect server that does not answer: one line naming it, exit 4 (not Prefect's ConnectError)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    threading.Thread(target=after_registration, args=(served, plan, say), daemon=True).start()
    say_run_ends(say)
    try:
        serve(*served)
    except PrefectHTTPStatusError as exc:  # the server refused a deployment, a schedule or a trigger
        detail = exc.response.text[:300].replace("\n", " ")
        raise InputError(
            f"the Prefect server refused the deployments ({exc.response.status_code}: {detail})", prefect_file
        ) from None
