"""The `watch` flow: emits `chunkeval.corpus.changed` or `chunkeval.model.changed` for each experiment
whose corpus, gold set or model differs from its last completed run (or that has never completed)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event
from prefect.logging import get_run_logger

from chunkeval.engine.embedding.resolution import resolved
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.flows.evaluate import fingerprint, warehouse


@task(cache_policy=NO_CACHE)
def changes(experiment: str, fingerprints: dict) -> list[str]:
    """The events due for one experiment: what differs from its last completed run."""
    return change_events(warehouse().last_completed(experiment), fingerprints)


def change_events(last: dict | None, fingerprints: dict) -> list[str]:
    if (
        last is None
        or last["corpus_fingerprint"] != fingerprints["corpus"]
        or last["gold_fingerprint"] != fingerprints["gold"]
    ):
        events = ["chunkeval.corpus.changed"]
    else:
        events = []
    if last is not None and last["model_fingerprint"] != fingerprints["model"]:
        events.append("chunkeval.model.changed")
    return events


@flow(name="watch", log_prints=True)
def watch(experiments: list[str] = ["demo"]) -> dict[str, list[str]]:  # noqa: B006 (Prefect parameters are copied)
    """Emit a change event (resource `chunkeval.experiment.<name>`) for each changed experiment."""
    logger = get_run_logger()
    emitted = {}
    for ref in experiments:
        exp = resolved(Experiment.resolve(ref))  # backend auto: the fingerprint names the backend chosen
        fps = fingerprint(exp, "interval")  # a served model is probed at most once per its probe_interval
        events = changes(exp.name, fps)
        for event in events:
            emit_event(
                event=event,
                resource={"prefect.resource.id": f"chunkeval.experiment.{exp.name}", "prefect.resource.name": exp.name},
                payload={"experiment": exp.name, **{f"{k}_fingerprint": v for k, v in fps.items()}},
            )
            logger.info("experiment %s: %s", exp.name, event)
        emitted[exp.name] = events
    return emitted
