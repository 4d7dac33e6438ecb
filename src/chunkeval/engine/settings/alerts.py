"""Who is told: an experiment's `alerts:` entries, each a destination the user named in their own
`endpoints.yaml` (`chunkeval.engine.settings.endpoints`: its URL, its kind and any secret live there, never in an
experiment file) and the events it wants (docs/loop.md, "Who is told"):

    alerts:
      - to: team-alerts
        events: [regression, failed, gold_drift, silence]   # default: all but `completed`
        grace: 3600                                          # silence: seconds past a schedule's interval

The key is `events`, not `on`, which YAML 1.1 reads as `true`.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunkeval.engine.settings.endpoints import ENDPOINT_NAME
from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.vocabulary import ALERT_EVENTS, DEFAULT_ALERTS

MAX_GRACE = 7 * 86400  # a week past the interval: a silence alarm later than that tells nobody anything
DEFAULT_GRACE = 3600


@dataclass(frozen=True)
class AlertRoute:
    """One `alerts:` entry: the destination `to` (an endpoint name), the events it wants, and for `silence`
    the seconds of grace past a scheduled deployment's interval."""

    to: str
    events: tuple[str, ...] = DEFAULT_ALERTS
    grace: int = DEFAULT_GRACE


def parse_alerts(value, source: str | None = None) -> tuple[AlertRoute, ...]:
    """The `alerts:` list of an experiment (each entry checked: one line naming what is wrong)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, AlertRoute) for v in value):
        return tuple(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"alerts: a list of {{to: NAME, events: [...]}} entries, got {short(value)}", source)
    out = []
    for n, entry in enumerate(value, start=1):
        where = f"alerts: entry {n}"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: a mapping with to and events, got {short(entry)}", source)
        if True in entry or "on" in entry:  # YAML 1.1 reads a bare `on:` key as true
            raise InputError(f"{where}: write `events:`, not `on:` (YAML reads `on` as true)", source)
        unknown = sorted(set(map(str, entry)) - {"to", "events", "grace"})
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; an entry takes to, events, grace", source)
        to = entry.get("to")
        if not isinstance(to, str) or not ENDPOINT_NAME.fullmatch(to):
            raise InputError(
                f"{where}: to names a destination of your endpoints.yaml (a name, never a URL), got {short(to)}",
                source,
            )
        events = entry.get("events", list(DEFAULT_ALERTS))
        if isinstance(events, str):
            events = [e.strip() for e in events.split(",")]
        if not isinstance(events, (list, tuple)) or not events or not all(isinstance(e, str) for e in events):
            raise InputError(f"{where}: events is a list of {', '.join(ALERT_EVENTS)}, got {short(events)}", source)
        bad = [e for e in events if e not in ALERT_EVENTS]
        if bad:
            raise InputError(f"{where}: unknown event {short(bad[0])}; choose from {', '.join(ALERT_EVENTS)}", source)
        grace = entry.get("grace", DEFAULT_GRACE)
        if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= MAX_GRACE:
            raise InputError(f"{where}: grace is whole seconds from 0 to {MAX_GRACE:,}, got {short(grace)}", source)
        out.append(AlertRoute(to, tuple(dict.fromkeys(events)), grace))
    tos = [a.to for a in out]
    twice = sorted({t for t in tos if tos.count(t) > 1})
    if twice:
        raise InputError(
            f"alerts: destination {twice[0]!r} listed twice: give it one entry with all its events", source
        )
    return tuple(out)
