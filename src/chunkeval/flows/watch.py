"""The `watch` flow: for each experiment whose corpus, gold set or model differs from its last completed run (or
that has never completed), one change event naming everything that changed: `chunkeval.corpus.changed` where the
corpus or the gold set changed, else `chunkeval.model.changed`, its payload's `changed` listing them all. One
event per experiment and poll, so that one change starts one run. A poll does no heavy one-time work: nothing is
exported or probed to know a model's fingerprint (a lossless backend shares the model's own:
`chunkeval.engine.embedding.registry.embedder_fingerprint`)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event
from prefect.logging import get_run_logger

from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.flows.alerts import resource
from chunkeval.flows.evaluate import fingerprint, warehouse

WHAT = (("corpus", "corpus"), ("gold", "gold set"), ("model", "model"))


@task(cache_policy=NO_CACHE)
def changes(experiment: str, fingerprints: dict) -> list[str]:
    """What differs from the experiment's last completed run: `corpus`, `gold`, `model` (all of them before its
    first completed run)."""
    return changed(warehouse().last_completed(experiment), fingerprints)


def changed(last: dict | None, fingerprints: dict) -> list[str]:
    if last is None:
        return [key for key, _ in WHAT]
    return [key for key, _ in WHAT if last[f"{key}_fingerprint"] != fingerprints[key]]


def change_event(what: list[str]) -> str | None:
    """The one event of a poll that found `what` changed (None where nothing did)."""
    if not what:
        return None
    return "chunkeval.corpus.changed" if {"corpus", "gold"} & set(what) else "chunkeval.model.changed"


def change_events(last: dict | None, fingerprints: dict) -> list[str]:
    """The events due for one experiment (at most one)."""
    event = change_event(changed(last, fingerprints))
    return [event] if event else []


@flow(name="watch", log_prints=True)
def watch(experiments: list[str] = ["demo"]) -> dict[str, list[str]]:  # noqa: B006 (Prefect parameters are copied)
    """Emit one change event (resource `chunkeval.experiment.<name>`) for each changed experiment."""
    logger = get_run_logger()
    emitted = {}
    for ref in experiments:
        exp = Experiment.resolve(ref)  # backend auto stays auto: its fingerprint needs no probe
        fps = fingerprint(exp, "interval")  # a served model is probed at most once per its probe_interval
        what = changes(exp.name, fps)
        event = change_event(what)
        if event:
            named = [label for key, label in WHAT if key in what]
            emit_event(
                event=event,
                resource=resource(exp.name),
                payload={"experiment": exp.name, "changed": what, **{f"{k}_fingerprint": v for k, v in fps.items()}},
            )
            logger.info("experiment %s: %s changed: %s", exp.name, ", ".join(named), event)
        emitted[exp.name] = [event] if event else []
    return emitted
