"""The `trend-report` flow: trend tables and the HTML page per experiment, regressions flagged.

The one verdict (`chunkeval.analysis.regression.verdict`, what `trend --fail-on-regression` without `--metric`
gives) of the newest run against the pinned baseline (or the previous completed run): a regression emits
`chunkeval.regression.detected` (unless the run announced that very verdict when it ran: told once), writes the diff of the two runs (`reports/<experiment>/diff-<A>-<B>.html`, a
link artifact) and fails the flow run; runs that share nothing comparable fail it too (`NothingComparable`),
never pass as "no regression".
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from chunkeval.analysis.regression import (
    DEFAULT_THRESHOLD,
    NO_REGRESSION,
    NOTHING_COMPARABLE,
    REGRESSION,
    REGRESSION_METRICS,
    verdict_line,
)
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.errors import Fault, InputError, NothingComparable
from chunkeval.flows.alerts import emit
from chunkeval.flows.evaluate import artifact_key, warehouse
from chunkeval.publish import alerts as A
from chunkeval.report.diff import diff_path, write_diff
from chunkeval.report.html import report_path, write_report
from chunkeval.report.terminal import regression_message


class RegressionDetected(RuntimeError):
    pass


@task(cache_policy=NO_CACHE)
def trend_table(experiment: str, metrics: list[str]) -> list[dict]:
    wh = warehouse()
    return [row for metric in metrics for row in wh.trend(experiment, metric)]


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def page(experiment: str, threshold: float) -> str | None:
    """The experiment's HTML page, next to the warehouse; None before its first completed run."""
    wh = warehouse()
    if wh.last_completed(experiment) is None:
        return None
    return str(write_report(wh, experiment, report_path(wh.root, experiment), threshold=threshold))


@task(cache_policy=NO_CACHE)
def verdict(experiment: str, metrics: list[str], threshold: float, baseline: str | None, alpha: float) -> dict | None:
    """The one verdict of the experiment's newest run; None while it has no run to compare with."""
    return warehouse().verdict(experiment, metrics, threshold, baseline, alpha)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def diff(
    experiment: str, reference: str, newest: str, metrics: list[str], threshold: float, alpha: float
) -> str | None:
    """The diff page of the reference run and the newest, beside the reports; None where either run was
    recorded before retrieved lists were kept."""
    wh = warehouse()
    metric = metrics[0] if len(metrics) == 1 else None  # the verdict's family: one metric, else the watched list
    path = diff_path(wh.root, experiment, reference, newest)
    try:
        return str(write_diff(wh, reference, newest, path, None, metric, threshold, alpha))
    except Fault:
        raise
    except InputError:
        return None


@flow(name="trend-report", log_prints=True)
def trend_report(
    experiments: list[str] = ["demo"],  # noqa: B006 (Prefect shows the default; never mutated)
    metrics: list[str] = list(REGRESSION_METRICS),  # noqa: B006
    threshold: float = DEFAULT_THRESHOLD,
    baseline: str | None = None,
    alpha: float = 0.05,
) -> dict:
    logger = get_run_logger()
    found, incomparable = {}, {}
    for ref in experiments:
        name = Experiment.resolve(ref).name
        rows = trend_table(name, metrics)
        if rows:
            create_table_artifact(
                key=artifact_key(name, "trend"),
                table=[{k: str(v) for k, v in r.items()} for r in rows],
                description=f"chunkeval trend of experiment {name}: macro means per completed run",
            )
        checked = verdict(name, metrics, threshold, baseline, alpha)
        if checked is not None:
            for left in checked["left_out"]:
                logger.warning("experiment %s: left out: run %s (%s)", name, left["run_id"], left["why"])
            (logger.error if checked["verdict"] != NO_REGRESSION else logger.info)(
                "experiment %s: %s", name, verdict_line(checked)
            )
            if checked["verdict"] == NOTHING_COMPARABLE:
                incomparable[name] = checked["reason"]
        falls = checked["regressions"] if checked else []
        link = (
            diff(name, falls[0]["reference_run_id"], falls[0]["run_id"], metrics, threshold, alpha) if falls else None
        )  # the page links it
        written = page(name, threshold)
        if written:
            logger.info("experiment %s: report written to %s", name, written)
        if falls:
            told = warehouse().alarms(checked["run_id"]) or {}
            if told.get("verdict") == REGRESSION and told.get("reference_run_id") == checked["reference_run_id"]:
                logger.info("experiment %s: run %s announced this regression when it ran", name, checked["run_id"])
            else:  # a verdict its run did not announce (other metrics, a baseline pinned since): told once, here
                run = {"run_id": checked["run_id"], "trigger": "schedule"}
                emit(A.regression_payload(name, run, checked, written))
            for r in falls:
                logger.error("experiment %s: %s", name, regression_message(r))
            if link:
                create_link_artifact(
                    key=artifact_key(name, "diff"),
                    link=Path(link).as_uri(),
                    link_text=f"what changed: run {falls[0]['reference_run_id']} → {falls[0]['run_id']}",
                    description=f"The diff of experiment {name}'s newest run against its reference run: the "
                    "questions that got worse and what they retrieved before and after (a file on this machine)",
                )
        found[name] = falls
    if any(found.values()):
        raise RegressionDetected(
            f"{sum(map(len, found.values()))} regression(s) beyond {threshold}: "
            + ", ".join(name for name, falls in found.items() if falls)
        )
    if incomparable:
        raise NothingComparable("; ".join(f"experiment {n}: {why}" for n, why in incomparable.items()))
    return {name: len(falls) for name, falls in found.items()}
