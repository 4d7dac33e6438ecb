"""A deployment's schedule read as the Prefect server reads it: its next times, from the server's own schedule model
(`prefect.server.schemas.schedules`: croniter for cron, dateutil for RRule), the one its scheduler creates runs
from. Whatever else reads a schedule (the silence alarm's interval, `serve`'s checks) reads it through here, so that
every cron, interval and RRule Prefect accepts (`@daily`, `0 0 ? * *`, `L`, `5#2`, `FREQ=WEEKLY;BYDAY=MO`) reads
the same way by construction, and none is read by a second parser that disagrees."""

from __future__ import annotations

from datetime import datetime


def server_schedule(schedule):
    """A schedule (Prefect's `prefect.schedules.Schedule`, a client schema, or a deployment's schedule holding one)
    as the server's schema of its kind, which computes the dates; None where it is none of cron, interval, RRule."""
    from prefect.server.schemas import schedules as server

    inner = getattr(schedule, "schedule", schedule)
    timezone = getattr(inner, "timezone", None) or "UTC"
    if getattr(inner, "interval", None) is not None:
        anchor = getattr(inner, "anchor_date", None)
        return server.IntervalSchedule(
            interval=inner.interval, timezone=timezone, **({"anchor_date": anchor} if anchor else {})
        )
    if getattr(inner, "cron", None):
        return server.CronSchedule(cron=inner.cron, timezone=timezone, day_or=getattr(inner, "day_or", True))
    if getattr(inner, "rrule", None):
        return server.RRuleSchedule(rrule=inner.rrule, timezone=timezone)
    return None


def next_times(schedule, n: int = 10, start: datetime | None = None) -> list[datetime]:
    """The next `n` times of `schedule` from `start` (now), as the server's scheduler computes them (fewer where
    it ends: an RRule's COUNT or UNTIL); none for a schedule that is none of cron, interval, RRule."""
    from prefect.utilities.asyncutils import run_coro_as_sync

    model = server_schedule(schedule)
    return [] if model is None else list(run_coro_as_sync(model.get_dates(n=n, start=start)))
