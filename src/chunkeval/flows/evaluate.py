"""The `evaluate` flow: a run prepared once (`chunkeval.engine.pipeline.prepare`), its steps
(`chunkeval.engine.pipeline.sweep.STEPS`: load → chunk → embed → score → summarise → check_gold) run in that order as
Prefect tasks, then store → report → tell → publish.

The flow writes no order of its own and re-implements none of a step: it runs `STEPS` in a loop, a task per step
(`STEP_TASKS`); a step that carries its own fan-out (`Step.jobs`: the chunkings, the embedding's shards on a
cluster) has its jobs mapped over the task runner (a Dask cluster's workers with `--task-runner dask`), then its
`merge` as a task. Scoring every configuration is one task (a task per configuration cost more in orchestration
than it scored). `chunkeval run` hands the flow the state it prepared before Prefect started (`Prepared`); a
deployment passes settings, and the flow prepares the state itself, the same way.
"""

from __future__ import annotations

import re
import signal
import traceback
from pathlib import Path

import pyarrow as pa
from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.runtime import flow_run

from chunkeval import progress
from chunkeval.analysis.regression import (
    NOTHING_COMPARABLE,
    REGRESSION_METRICS,
    first_sight,
    left_out_text,
    verdict_line,
)
from chunkeval.engine.gold.update import update_command
from chunkeval.engine.pipeline import sweep
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.fingerprints import input_fingerprints, models_fingerprint
from chunkeval.engine.pipeline.grid import Consent
from chunkeval.engine.pipeline.prepare import prepare
from chunkeval.engine.pipeline.records import RunState
from chunkeval.engine.pipeline.runners import TaskRunner
from chunkeval.engine.scoring.doc_metrics import write_doc_runs
from chunkeval.engine.scoring.metrics import METRICS
from chunkeval.errors import Fault, InputError
from chunkeval.faults import checkpoint
from chunkeval.flows.alerts import emit
from chunkeval.publish import alerts as A
from chunkeval.publish.mlflow import check_uri, publish_run
from chunkeval.report.html import report_path, write_report
from chunkeval.run_result import RunResult
from chunkeval.vocabulary import CONFIG_KEYS
from chunkeval.warehouse import LockTimeout, Warehouse
from chunkeval.warehouse.turns import Turn

# Inputs are large arrays: no task caching (its keys would hash them), results stay in memory.
TASK = dict(cache_policy=NO_CACHE, persist_result=False)
IO_TASK = dict(TASK, retries=2, retry_delay_seconds=2)


class Prepared:
    """A run's state made by the command that calls the flow in its own process (`chunkeval run`: the experiment
    validated, its inputs fingerprinted and loaded before Prefect starts), so that the flow neither checks nor
    reads them again; and the experiment's turn the command took before it read them (`Turn`). Prefect keeps a
    flow's parameters as JSON: this one has no fields it can read (`__slots__`), so it is recorded as `<Prepared>`
    instead of a copy of the run's inputs."""

    __slots__ = ("state", "turn")

    def __init__(self, state: RunState, turn: Turn | None = None):
        self.state, self.turn = state, turn


def warehouse() -> Warehouse:
    return Warehouse.at_home()


@task(**IO_TASK)
def fingerprint(exp: Experiment, probe: str = "run") -> dict:
    """The fingerprints of the experiment's inputs; its served models probed as `probe` says."""
    return input_fingerprints(exp, probe)


# --------------------------------------------------------------------------- the steps, as tasks


def _step_task(fn, name: str, io: bool):
    return task(fn, name=name, **(IO_TASK if io else TASK))


# a task per step of STEPS: its `run`, or for a step that fans out its `job` (mapped) and its `merge`; and a step that
# fans out as one task (its jobs one after the other, then its merge), where its jobs are too small to be tasks
STEP_TASKS = {s.name: _step_task(s.run or s.merge, s.name, s.io) for s in sweep.STEPS}
JOB_TASKS = {s.name: _step_task(s.job, f"{s.name}_job", s.io) for s in sweep.STEPS if s.job is not None}


def _whole(step: sweep.Step):
    def whole(state: RunState) -> RunState:
        return sweep.run_step(step, state)  # the jobs one after the other, then the merge

    whole.__qualname__ = f"{step.name}_whole"  # the task's key
    return whole


WHOLE_TASKS = {s.name: _step_task(_whole(s), s.name, s.io) for s in sweep.STEPS if s.job is not None}
MAPPED_CHARACTERS = 2_000_000  # a corpus from which each chunking is worth a task of its own (tens of ms of Prefect's)


def _mapped(state: RunState) -> bool:
    """Whether a step's jobs run as tasks of their own, mapped over the task runner: on a cluster, whose workers
    run them, or over a corpus large enough that each chunking takes longer than the task run around it (about
    0.2 s of the server's bookkeeping on a 2-core machine: the demo's 8 chunkings took 2.5 s as tasks, 0.8 s
    in one). Either way the step is a task of the flow run, and its numbers are the same."""
    corpora = state.inputs.corpora if state.inputs is not None else {}
    return bool(state.shards) or sum(len(text) for text in corpora.values()) >= MAPPED_CHARACTERS


def run_steps(state: RunState, clock: progress.Stopwatch) -> RunState:
    """Every step of `STEPS`, in its order, as tasks (the load of a state `chunkeval run` prepared is done)."""
    shown = None
    for step in sweep.STEPS:
        if step.run is sweep.load and state.inputs is not None:
            continue
        with clock.stage(step.stage, show=step.stage != shown):  # one progress line per stage, not per step
            shown = step.stage
            if step.run is not None:
                state = STEP_TASKS[step.name](state)
                continue
            if not _mapped(state):
                state = WHOLE_TASKS[step.name](state)
                continue
            jobs = step.jobs(state)
            done = JOB_TASKS[step.name].map(*map(list, zip(*jobs))).result() if jobs else []
            state = STEP_TASKS[step.name](state, done)
    return state


@task(**IO_TASK)
def report(experiment: str, run_id: str) -> str:
    wh = warehouse()
    return str(write_report(wh, experiment, report_path(wh.root, experiment, run_id), run_id))


@task(**TASK)  # no retries: a retry after a partial publish would make a second MLflow run
def publish(uri: str, run_id: str, page: str) -> str:
    """A recorded run published to the MLflow tracking server at `uri` (`chunkeval.publish.mlflow`)."""
    return publish_run(uri, warehouse(), run_id, Path(page))


@task(**IO_TASK)
def store(run_id: str, result: RunResult) -> str | None:
    """The run recorded; where another process held the warehouse past the lock timeout, the reason (the
    results are kept and the next command records them), returned rather than raised: no retry waits again."""
    try:
        wh = warehouse()
        # document gold: the TREC run files, first
        write_doc_runs(result.per_query, wh.results_dir / run_id / "doc_runs")
        wh.complete_run(run_id, result)
    except LockTimeout as exc:
        return str(exc)
    return None


def with_task_runner(runner: TaskRunner):
    """The `evaluate` flow on the runner's Dask cluster (prefect-dask), or as it is for `local`."""
    if not runner.distributed:
        return evaluate
    from prefect_dask import DaskTaskRunner

    if runner.address:
        dask = DaskTaskRunner(address=runner.address)
    else:  # a local cluster of processes, one thread each (the nanny keeps each worker's BLAS at one thread)
        dask = DaskTaskRunner(
            cluster_kwargs={
                "n_workers": runner.workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            }
        )
    return evaluate.with_options(task_runner=dask)


def artifact_key(experiment: str, what: str) -> str:
    """Prefect artifact keys take lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{experiment}-{what}".lower())


def summary_rows(summary: pa.Table) -> list[dict]:
    """The macro (mean ± std) and micro table of a run, for the Prefect artifact."""
    rows = []
    for rec in summary.to_pylist():
        row = {k: rec[k] for k in CONFIG_KEYS}
        for m in METRICS:
            if rec.get(f"{m}_mean") is not None:  # a metric of no row (ann_recall_at_k of bm25) is left out
                row[m] = f"{rec[f'{m}_mean']:.3f} ± {(rec[f'{m}_std'] or 0):.3f}"
                if rec.get(f"{m}_micro") is not None:
                    row[f"{m} (micro)"] = f"{rec[f'{m}_micro']:.3f}"
        rows.append(row)
    return rows


def true_trigger(asked: str) -> str:
    """What really started this flow run: `schedule` (the scheduler made it), `change` (an automation: a change
    event's trigger), `manual` (a deployment run by hand, a command, the API). A run outside any deployment is
    what its caller says (`chunkeval run` says manual); the `trigger` parameter of a deployment is not trusted."""
    said = "change" if asked == "event" else asked  # `event`: what deployments files wrote before `change`
    flow_run_id = flow_run.get_id()
    if not flow_run_id:
        return said
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run_id)
    except Exception:  # the server does not answer: what the caller says
        return said
    if run.deployment_id is None:
        return said
    if run.auto_scheduled:
        return "schedule"
    if run.created_by is not None and str(run.created_by.type).upper() == "AUTOMATION":
        return "change"
    return "manual"


def tell(wh: Warehouse, exp: Experiment, run_id: str, trigger: str, report: str | None, gold, summary=None) -> str:
    """After a completed run: its one verdict against its baseline (`Warehouse.verdict`, what the gate says), and
    the events it emits (completed; regression or nothing comparable; gold drift past `gold_drift`), recorded
    with the run (`alarms.json`). Returns the verdict's line."""
    run = {"run_id": run_id, "trigger": trigger}
    try:
        found = wh.verdict(exp.name)
        if found:  # with the runs the gate left out, named
            line = verdict_line(found) + left_out_text(found.get("left_out", []))
        else:
            raced = wh.raced_runs(exp.name)
            line = (
                f"no full run to compare with yet{left_out_text(raced)}"
                if raced
                else "the first run: nothing to compare with yet" + _sight(exp, summary)
            )
    except InputError as exc:  # runs scored otherwise (a run setting changed): never compared
        found = {"verdict": NOTHING_COMPARABLE, "reason": str(exc), "run_id": run_id, "reference_run_id": None}
        line = f"nothing comparable: {exc}"
    payloads = A.verdict_payloads(exp.name, run, found, line, report)
    drifted = A.drift(getattr(gold, "anchoring", ()), exp.gold_drift)
    if drifted:
        out = f"{exp.name}-gold-{run_id}{'.tsv' if exp.doc_gold else '.csv'}"  # in the folder the reader runs it from
        payloads.append(A.gold_drift_payload(exp.name, run, drifted, update_command(exp, out)))
    for payload in payloads:
        emit(payload)
    wh.record_alarms(
        run_id,
        {
            "verdict": found["verdict"] if found else None,
            "reference_run_id": found.get("reference_run_id") if found else None,
            "line": line,
            "events": [p["event"] for p in payloads],
        },
    )
    return line


def _sight(exp: Experiment, summary: pa.Table | None) -> str:
    """`first_sight` of a first run, from its summary in memory (no second reading of the warehouse, which other
    runs may hold): its questions, and the checks its next verdict will make (each configuration's watched metrics,
    those it measured)."""
    if summary is None or not len(summary):
        return ""
    columns = [f"{m}_mean" for m in REGRESSION_METRICS if f"{m}_mean" in summary.column_names]
    checks = sum(len(summary) - summary[c].null_count for c in columns)  # each configuration that measured each
    n = max(summary["n_queries"].to_pylist(), default=0) if "n_queries" in summary.column_names else 0
    return first_sight(n, int(checks), exp.detect_fall)


def _reason(exc: BaseException) -> str:
    """What a run's row and its `failed` event say of the exception that ended it: its type and message."""
    return ("".join(traceback.format_exception_only(exc)).strip() if str(exc) else "") or type(exc).__name__


def failed(exp_name: str, run_id: str | None, trigger: str, exc: BaseException) -> None:
    """The `failed` event of a run that ended with `exc` (before its row was written too: a deployment whose
    experiment file broke is heard of)."""
    signalled = signal_name(exc)
    reason = f"interrupted by {signalled}" if signalled else _reason(exc).splitlines()[-1]
    try:
        emit(A.failed_payload(exp_name, {"run_id": run_id, "trigger": trigger}, reason))
    except Exception:  # no server to tell: the run's own failure is what is raised
        pass


@flow(name="evaluate", log_prints=True)
def evaluate(
    experiment: str | dict | Prepared = "demo",
    if_changed: bool = False,
    trigger: str = "manual",
    batch_size: int | None = None,
    device: str = "auto",
    shards: int = 0,
    mlflow: str | None = None,
    yes: bool = False,
) -> dict:
    """Run one experiment (`demo`, the path of an experiment YAML file, or its settings) and record it in the warehouse.

    `chunkeval run` passes the run's state it made instead (`Prepared`): the experiment is then not checked, and
    its inputs neither fingerprinted nor read, a second time (its `batch_size` and `device` are its embedders').
    Runs of one experiment take turns (`chunkeval.warehouse.turns`): a run waits for the one running, and a
    trigger that finds another already waiting is recorded `coalesced`. The trigger recorded is the true one
    (`true_trigger`). With `if_changed`, a run whose corpus, gold set and model are those of the last completed run
    is recorded as `skipped` and embeds nothing. With `shards` (a Dask task runner: `with_task_runner`), the texts
    the cache lacks are embedded by that many tasks on the cluster's workers first. A completed run is compared
    with its baseline (the one verdict) and emits its events (`tell`); a failed one emits `chunkeval.run.failed`.
    It is published to the MLflow tracking server `mlflow` (else the experiment's `mlflow:` key) when one is given.
    A grid past `LARGE_GRID` configurations runs with `yes` or the experiment's `max_configurations`, its estimate
    logged first; else the flow run fails with one line saying so, before anything is recorded (a scheduled run
    has no terminal to ask on).
    """
    logger = get_run_logger()
    progress.one_line_input_errors()
    prepared = experiment.state if isinstance(experiment, Prepared) else None
    trigger = true_trigger(trigger)
    name = prepared.exp.name if prepared else Path(experiment).stem if isinstance(experiment, str) else "?"
    try:
        if mlflow and prepared is None:
            check_uri(mlflow, "mlflow")  # the key's URI is checked with the experiment
        wh = warehouse()
        wh.reap()
        if prepared is None:
            exp = Experiment.resolve(experiment)
            name = exp.name
            state = _prepare(exp, wh, if_changed, batch_size, device, yes, logger)
        else:  # the command prepared it: the experiment checked, its inputs fingerprinted and read, its grid let go
            state = prepared
        turn = experiment.turn if isinstance(experiment, Prepared) and experiment.turn else wh.turn(state.exp.name)
        if not turn.enter(say=logger.info):
            run_id = wh.record_skipped(
                state.exp.name, {}, trigger, state.exp.recorded_settings(), flow_run.get_id(), status="coalesced",
                reason=f"another run of {state.exp.name} was running and one more waited to follow it: this "
                "trigger is coalesced into that follow-up",
            )  # fmt: skip
            logger.info("experiment %s: a run waits already to follow %s; coalesced into it", name, turn.holder())
            return {"run_id": run_id, "status": "coalesced", "texts_embedded": 0}
        if turn.waited and prepared is None:  # another run ended meanwhile: the inputs are read as they are now
            state = _prepare(state.exp, wh, if_changed, batch_size, device, yes, logger)
    except BaseException as exc:  # before its run began: recorded failed where the flow prepared it, and heard of
        run_id = None
        if prepared is None:  # a deployment's run (a scheduled night): `runs` shows it failed, and why
            run_id = _failed_before(name, trigger, exc)
        failed(name, run_id, trigger, exc)
        raise
    try:
        return _run(state, turn, trigger, if_changed, shards, mlflow, logger, wh)
    finally:
        if not (isinstance(experiment, Prepared) and experiment.turn):
            turn.leave()


def signal_name(exc: BaseException) -> str | None:
    """The signal an exception is the effect of (SIGINT for ^C's KeyboardInterrupt, SIGTERM for the command's
    `Terminated` and Prefect's `TerminationSignal`), else None: such a run is recorded `interrupted`, not failed."""
    number = getattr(exc, "signal", None)
    if isinstance(number, int):
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"
    if isinstance(exc, KeyboardInterrupt):
        return "SIGTERM" if type(exc).__name__ == "Terminated" else "SIGINT"
    return None


def _failed_before(name: str, trigger: str, exc: BaseException) -> str | None:
    """A deployment's run that failed before it began (a broken experiment file, bad input, a refused grid),
    recorded `failed` with its reason and nothing else (`interrupted`, naming the signal, where one stopped it);
    None where even that cannot be written."""
    signalled = signal_name(exc)  # a scheduler's SIGTERM: stopped, not failed, and named by its signal
    reason = f"interrupted by {signalled}" if signalled else _reason(exc)
    status = "interrupted" if signalled else "failed"
    try:
        return warehouse().record_skipped(name, {}, trigger, {}, flow_run.get_id(), status=status, reason=reason)
    except Exception:  # the warehouse itself is what failed: the event still says it
        return None


def _prepare(exp: Experiment, wh: Warehouse, if_changed, batch_size, device, yes, logger) -> RunState:
    """A deployment's run prepared as `chunkeval run` prepares its own (`prepare`): a large grid logs its estimate
    and needs the flow parameter `yes` (a scheduled run has no terminal to ask on)."""
    consent = Consent(yes, None, "the flow parameter yes: true", logger.info, wh.model_throughput)
    skip = lambda state: if_changed and wh.unchanged_since(state.exp.name, state.fingerprints)  # noqa: E731
    return prepare(exp, batch_size=batch_size, device=device, consent=consent, record=True, if_changed=if_changed,
                   skip=skip)  # fmt: skip


def _run(state: RunState, turn, trigger, if_changed, shards, mlflow, logger, wh) -> dict:
    """The body of `evaluate` once the run has its turn: skipped or coalesced where nothing changed, else begun,
    its steps run, stored, reported, told and published."""
    exp = state.exp
    clock = progress.Stopwatch()  # each stage's seconds, returned with the run (`chunkeval run` prints them)
    state.clock, state.shards = clock, shards
    embedders, fps = state.embedders, state.fingerprints
    choice = {"backend_auto": state.backend_auto} if state.backend_auto else {}
    settings = {**exp.recorded_settings(), **choice}
    flow_run_id = flow_run.get_id()
    last = wh.unchanged_since(exp.name, fps)
    if turn.waited and last:  # the run it waited for read these very inputs: a second would only repeat it
        reason = f"run {last['run_id']}, which it waited for, read the same corpus, gold set and model"
        run_id = wh.record_skipped(exp.name, fps, trigger, settings, flow_run_id, status="coalesced", reason=reason)
        logger.info("experiment %s: %s; coalesced into it", exp.name, reason)
        return {"run_id": run_id, "status": "coalesced", "texts_embedded": 0}
    if if_changed and last:
        reason = f"corpus, gold set and model unchanged since run {last['run_id']}"
        run_id = wh.record_skipped(exp.name, fps, trigger, settings, flow_run_id, reason=reason)
        logger.info("experiment %s: %s; skipped", exp.name, reason)
        return {"run_id": run_id, "status": "skipped", "texts_embedded": 0}
    if if_changed:  # it runs: its served models are probed now
        fps["model"] = models_fingerprint(exp, "run")
    run_id = wh.begin_run(exp.name, fps, trigger, settings, flow_run_id)
    turn.mark(f"run {run_id}")
    try:  # from here a run that ends (an error, ^C, SIGTERM) is recorded failed
        checkpoint("started")
        logger.info("experiment %s: run %s (%s)", exp.name, run_id, trigger)
        for note in state.notes:
            logger.info(note)
        said = len(state.notes)
        state = run_steps(state, clock)
        for note in state.notes[said:]:
            logger.info(note)
        logger.info(
            "%d text(s) embedded, %d chunk(s) truncated to the model's input",
            embedders.texts_embedded,
            sum(state.embedded.truncated.values()),
        )
        with clock.stage("storing", show=True):
            held = store(run_id, sweep.result(state))
        if held:
            raise LockTimeout(held)
    except BaseException as exc:
        signalled = signal_name(exc)
        if signalled:  # ^C, a scheduler's SIGTERM: the run did not fail, it was stopped
            wh.fail_run(run_id, f"interrupted by {signalled}", status="interrupted")
        else:
            wh.fail_run(run_id, "".join(traceback.format_exception_only(exc)).strip())
        failed(exp.name, run_id, trigger, exc)
        raise
    create_table_artifact(
        key=artifact_key(exp.name, "summary"),
        table=summary_rows(state.summary),
        description=f"chunkeval run {run_id} of experiment {exp.name}: macro mean ± std and micro per configuration",
    )
    try:
        with clock.stage("report", show=True):
            page = Path(report(exp.name, run_id))
    except InputError:
        if not wh.has_run(run_id):  # `runs delete` or `runs prune` in another process, meanwhile
            raise Fault(
                f"run {run_id} was deleted while its report was being written (by `runs delete` or `runs prune` "
                "in another process): its results are gone"
            ) from None
        raise
    create_link_artifact(
        key=artifact_key(exp.name, "report"),
        link=page.as_uri(),
        link_text=f"chunkeval report of run {run_id}",
        description=f"The HTML report of experiment {exp.name} at run {run_id} (a file on the machine that ran it)",
    )
    with clock.stage("verdict"):
        line = tell(wh, exp, run_id, trigger, str(page), state.inputs.gold, state.summary)
    logger.info("experiment %s: %s", exp.name, line)
    done = {
        "run_id": run_id,
        "status": "completed",
        "texts_embedded": embedders.texts_embedded,
        "report": str(page),
        "verdict_line": line,
        "stage_seconds": clock.seconds,
        "stage_cpu_seconds": clock.cpu,
    }
    if mlflow or exp.mlflow:
        done["mlflow_run"] = publish(mlflow or exp.mlflow, run_id, str(page))
    return done
