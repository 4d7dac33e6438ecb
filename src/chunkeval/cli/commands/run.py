"""`chunkeval run`: an experiment as a Prefect flow, recorded in the warehouse."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path

from chunkeval.cli.commands import summary
from chunkeval.cli.options import (
    Sources,
    add_experiment,
    add_experiment_flags,
    add_metric_flags,
    experiment_from_args,
    gives_settings,
    metric_flags,
)
from chunkeval.cli.output import print_prose
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.gold.judge import run_lines
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.grid import Consent, terminal_confirm
from chunkeval.engine.pipeline.prepare import prepare
from chunkeval.engine.pipeline.race import race_lines
from chunkeval.engine.pipeline.records import RunState
from chunkeval.engine.pipeline.runners import check_task_runner, cluster_workers, parse_task_runner
from chunkeval.errors import InputError
from chunkeval.files import check_writable_dir
from chunkeval.flows.temporary_server import begin, check_api, check_folders, temporary_server
from chunkeval.limits import NAME_LENGTH, check_name
from chunkeval.paths import DEMO_DIR, home
from chunkeval.progress import Stopwatch, quiet_prefect, show_progress
from chunkeval.publish.mlflow import check_server, check_uri
from chunkeval.report.terminal import approximate, fold, format_index_costs, format_slices, summary_block
from chunkeval.vocabulary import CONFIG_KEYS, close_names

WAREHOUSE_SESSION = False  # the flow writes to the warehouse while the command runs

log = logging.getLogger("chunkeval")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run",
        help=summary("run"),
        description="Run the evaluate flow for an experiment (the demo experiment when none is given): chunk, "
        "embed (through the cache), retrieve, score every setting, and record the run in the warehouse.",
    )
    add_experiment_flags(p)
    add_experiment(
        p,
        "the experiment's name: demo, $CHUNKEVAL_HOME/experiments/NAME.yaml, or the settings of NAME's last "
        "recorded run, changed by any settings given; an unknown NAME with settings defines a new experiment",
    )
    add_metric_flags(p)
    p.add_argument(
        "--if-changed",
        action="store_true",
        help="record a skipped run, embedding nothing, when corpus, gold set and model are those of the last completed run",
    )
    p.add_argument(
        "--task-runner",
        default="local",
        metavar="RUNNER",
        help="where the chunking and embedding tasks run: local (default, this process), dask (a local Dask cluster, "
        "one worker per core), dask:N (of N workers) or dask=tcp://HOST:PORT (an existing cluster's scheduler); "
        "needs pip install 'chunkeval[dask]'",
    )
    p.add_argument(
        "--mlflow",
        metavar="URI",
        help="also publish the run to this MLflow tracking server (http://HOST:PORT): settings as params, each "
        "configuration a nested run with its means as metrics, the report and summary as artifacts (the experiment "
        "file's mlflow: key does the same; this option wins); the server must serve artifacts (its default)",
    )
    p.set_defaults(func=run)
    return p


def named_experiment(name: str, defining: bool, warehouse: WarehouseAccess) -> Sources:
    """The settings of the experiment NAME, not yet read: `demo`, `$CHUNKEVAL_HOME/experiments/NAME.yaml`, or the
    settings of its last recorded run. An unknown name with settings on the command line (`defining`) is a new
    experiment. A file or recorded settings run plug-ins only as `chunkeval.engine.settings.plugins` allows."""
    check_name(name)  # before it becomes a path: never outside $CHUNKEVAL_HOME/experiments

    if name == "demo":
        path = DEMO_DIR / "experiment.yaml"
        return Sources(Experiment.file_settings(path), path.parent, str(path), trusted=False)
    path = home() / "experiments" / f"{name}.yaml"
    if path.is_file():
        return Sources({**Experiment.file_settings(path), "name": name}, path.parent, str(path), trusted=False)
    wh = warehouse(must_exist=False)
    runs = wh.runs(name, limit=1) if wh.exists() else []
    if runs:
        return Sources(json.loads(runs[0]["settings"]), None, f"the settings of run {runs[0]['run_id']}", False)
    if defining:
        return Sources({"name": name})
    known = ["demo", *(f.stem for f in path.parent.glob("*.yaml")), *(wh.experiments() if wh.exists() else ())]
    hint = close_names(name, known) or "give its settings (--corpus-dir, --questions, …) to define it"
    raise InputError(f"no experiment named {name!r} (not demo, no experiments/{path.name}, no recorded run); {hint}")


DEFINING = ("corpus_dir", "beir", "questions", "qrels", "queries")  # flags that name an experiment's inputs


def experiment_name(args: argparse.Namespace) -> str:
    """The experiment a run without a file records into: `--experiment`, else the demo, unless flags name inputs
    of the user's own (`--corpus-dir`, `--questions`, …): those define a new experiment, never the demo's history,
    named after the corpus folder (else the gold file), said in one notice; a name that cannot be made from it
    asks for `--experiment`."""
    if args.experiment:
        return args.experiment
    given = [key for key in DEFINING if getattr(args, key, None)]
    if not given:
        return "demo"
    flag = "--" + given[0].replace("_", "-")
    value = str(getattr(args, given[0])).rstrip("/\\")
    base = Path(value).name if given[0] in ("corpus_dir", "beir") else Path(value).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("._-")[:NAME_LENGTH].rstrip("._-")
    if not name or name == "demo":
        raise InputError(f"{flag} names inputs of your own: give the experiment a name (--experiment NAME), so that "
                         "its runs are not recorded as the demo's")  # fmt: skip
    print(f"chunkeval: recording as experiment {name!r}, named after {flag} {value} (--experiment NAME names it "
          "otherwise)", file=sys.stderr, flush=True)  # fmt: skip
    return name


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    metric_flags(args)  # the summary's columns, checked before any work: a typo there is bad input too
    if not os.environ.get("PREFECT_API_URL"):  # before Prefect is imported: it makes its home when it is
        check_folders()
    else:  # a configured server that does not answer: one line, exit 4, before anything is read or run
        check_api()

    if args.mlflow:
        check_uri(args.mlflow, "--mlflow")  # before the experiment is read
    if args.experiment_file:
        given = str(args.experiment_file)
        if not os.path.exists(given) and "/" not in given and "." not in given:  # a name where a file belongs
            raise InputError(
                f"no experiment file {given!r} here; to run the experiment of that name: chunkeval run --experiment "
                f"{given}" + (" (or plain `chunkeval run`)" if given == "demo" else "")
            )
        exp = experiment_from_args(args, name=args.experiment)
    else:
        name = experiment_name(args)
        named = named_experiment(name, gives_settings(args), warehouse)
        exp = experiment_from_args(args, named, name=None if name == "demo" else name)
    mlflow = args.mlflow or exp.mlflow
    if mlflow:  # before anything is read or built: a URI where no server answers is bad input
        mlflow = check_server(mlflow, "--mlflow" if args.mlflow else "the experiment's mlflow")
    runner = check_task_runner(parse_task_runner(args.task_runner))
    return _run(args, exp, mlflow, runner, warehouse)


def coalesced(exp: Experiment, warehouse: WarehouseAccess, turn, reason: str | None = None) -> int:
    """This run is coalesced into another and runs nothing, recorded so: a run of the experiment is running and
    another waits to follow it, or (`reason`) the run it waited for read the same inputs."""
    if reason is None:
        reason = (
            f"another run of {exp.name} was running and one more waited to follow it: this trigger is coalesced "
            "into that follow-up"
        )
        said = f"{turn.holder()} is running and another run waits to follow it"
    else:
        said = reason
    run_id = warehouse(must_exist=False).record_skipped(
        exp.name, {}, "manual", exp.recorded_settings(), status="coalesced", reason=reason
    )
    print(f"experiment {exp.name}: {said}; run {run_id} recorded as coalesced into that one")
    return 0


def _prepared(args, exp: Experiment, warehouse: WarehouseAccess, clock: Stopwatch) -> RunState:
    """The run's state, made once before Prefect starts or a catalogue row is written (`prepare`): the home
    writable, the inputs fingerprinted and, unless an --if-changed run will be skipped (which reads nothing, nor
    says how its gold set met the corpus), read and checked, the grid let start: bad input fails here."""
    check_writable_dir(home(), "the cache and warehouse ($CHUNKEVAL_HOME)")
    consent = Consent(
        args.yes, terminal_confirm(), "--yes", throughput=lambda: warehouse(must_exist=False).model_throughput()
    )
    unchanged = lambda state: (
        args.if_changed
        and warehouse(must_exist=False).unchanged_since(  # noqa: E731
            state.exp.name, state.fingerprints
        )
    )
    with show_progress():
        return prepare(
            exp, batch_size=args.batch_size, device=args.device, consent=consent, record=True,
            if_changed=args.if_changed, skip=unchanged, clock=clock,
        )  # fmt: skip


def _run(args, exp: Experiment, mlflow, runner, warehouse: WarehouseAccess) -> int:
    # the temporary Prefect server (where no PREFECT_API_URL names one) is found, or starts now, while the inputs are
    # read and Prefect's client is imported, and is waited for when the flow starts; however the command ends, its
    # use of a kept server ends, and a server of its own stops
    starting = None if os.environ.get("PREFECT_API_URL") else begin()
    try:
        return _turn(args, exp, mlflow, runner, warehouse, starting)
    finally:
        if starting is not None:
            starting.end()


def _turn(args, exp: Experiment, mlflow, runner, warehouse: WarehouseAccess, starting) -> int:
    clock = Stopwatch()
    state = _prepared(args, exp, warehouse, clock)
    shards = cluster_workers(runner) if runner.distributed else 0
    turn = warehouse(must_exist=False).turn(state.exp.name)  # runs of one experiment never overlap (warehouse.turns)
    if not turn.enter(say=lambda line: print(f"chunkeval: {line}", file=sys.stderr, flush=True)):
        return coalesced(state.exp, warehouse, turn)
    try:
        if turn.waited:  # another run ended meanwhile: the inputs are read as they are now
            state = _prepared(args, exp, warehouse, clock)
            same = warehouse(must_exist=False).unchanged_since(state.exp.name, state.fingerprints)
            if same:  # and that run read these very inputs: a second would only repeat it
                return coalesced(state.exp, warehouse, turn, f"run {same['run_id']}, which it waited for, read the "
                                 "same corpus, gold set and model")  # fmt: skip
        return _flow(args, state.exp, mlflow, runner, warehouse, clock, state, shards, turn, starting)
    finally:
        turn.leave()


def _flow(args, exp, mlflow, runner, warehouse, clock, state, shards, turn, starting) -> int:
    """`chunkeval run` once its inputs are checked and the experiment's turn is this process's: the flow, then
    what it made."""

    quiet_prefect(args.verbose)
    log.propagate = False  # Prefect's console handler sits on the root logger: say each thing once
    try:
        from chunkeval.flows.evaluate import Prepared, with_task_runner  # Prefect loads (seconds) only for a flow

        with temporary_server(starting), show_progress():
            result = with_task_runner(runner)(
                experiment=Prepared(state, turn),
                if_changed=args.if_changed,
                trigger="manual",
                shards=shards,
                mlflow=mlflow or None,
                yes=True,  # the grid was let start above (--yes, max_configurations, or the user's answer)
            )
    finally:
        log.propagate = True
    if result["status"] == "skipped":
        print(
            f"experiment {exp.name}: corpus, gold set and model unchanged; run {result['run_id']} recorded as skipped"
        )
        return 0
    clock.merge(result.get("stage_seconds", {}), result.get("stage_cpu_seconds"))
    with clock.stage("summary"):  # the table below, with its ties
        wh = warehouse()
        summary = wh.summary(result["run_id"])
        table = summary_block(summary, wh.query_results(result["run_id"]), args.metrics, args.wide)
    print(
        f"experiment {exp.name}: run {result['run_id']} completed, {summary.num_rows} configuration(s), "
        f"{result['texts_embedded']} text(s) embedded\n"
    )
    print(table)
    # what the gate, the weekly flow and the alarms say of this run
    print("\n" + fold(f"verdict: {result['verdict_line']}"))
    for line in run_lines(json.loads(wh.run(result["run_id"])["settings"] or "{}"), wh.gold_check(result["run_id"])):
        print_prose(line)  # a generated or judged gold set, said (docs/gold.md)
    raced = race_lines(wh.race(result["run_id"]))  # a raced run: what it decided, and the share of cells evaluated
    if raced:
        print("\n" + "\n".join(raced))
    by_slice = wh.slice_summary(result["run_id"])
    if by_slice.num_rows:  # --slice-by: their per-slice rows are in the view slice_summary and the report
        print(format_slices(by_slice))

    if approximate(summary):
        print("\nindexes (build seconds, size, and milliseconds per query: one at a time p50/p95, and batched)")
        print(format_index_costs(summary, CONFIG_KEYS))
    print(f"\n{clock.line()}")
    print(f"report: {result['report']}")
    if result.get("mlflow_run"):  # the flow published it
        print(f"published to MLflow at {mlflow}: run {result['mlflow_run']} (one nested run per configuration)")
    return 0
