"""The `evaluate` flow: ingest → chunk → embed (through the Parquet cache) → retrieve → metrics → store.

Each task calls one library function; the chunking jobs fan out with `.map`, and scoring every
configuration is one task (a task per configuration cost more in orchestration than it scored).
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path

import pyarrow as pa
from prefect import flow, task, unmapped
from prefect.artifacts import create_link_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.runtime import flow_run

from chunkeval import progress
from chunkeval.engine import gold_check, sweep
from chunkeval.engine.chunking import ChunkerSpec
from chunkeval.engine.doc_metrics import write_doc_runs
from chunkeval.engine.embedding.resolution import resolution
from chunkeval.engine.experiment import Experiment
from chunkeval.engine.fingerprints import input_fingerprints
from chunkeval.engine.metrics import METRICS
from chunkeval.engine.notes import clamped_k_note
from chunkeval.engine.retrieved import kept_qrels
from chunkeval.engine.runners import TaskRunner
from chunkeval.engine.scoring import reference_tables
from chunkeval.errors import Fault, InputError
from chunkeval.faults import checkpoint
from chunkeval.paths import cache_dir
from chunkeval.report.html import report_path, write_report
from chunkeval.warehouse import LockTimeout, Warehouse

# Inputs are large arrays: no task caching (its keys would hash them), results stay in memory.
TASK = dict(cache_policy=NO_CACHE, persist_result=False)
IO_TASK = dict(TASK, retries=2, retry_delay_seconds=2)


def warehouse() -> Warehouse:
    return Warehouse.at_home()


@task(**IO_TASK)
def fingerprint(exp: Experiment, probe: str = "run") -> dict:
    """The fingerprints of the experiment's inputs; its served models probed as `probe` says."""
    return input_fingerprints(exp, probe)


@task(**IO_TASK)
def load(exp: Experiment) -> sweep.Inputs:
    return sweep.load_inputs(exp)


@task(**TASK)
def chunk(corpora: dict, spec: ChunkerSpec, model: str | None, embedders: sweep.Embedders) -> tuple:
    """A chunking, and what its semantic chunker embedded (counted by the flow when it ran on a worker)."""
    before = embedders.counters()
    chunking = sweep.chunk_one(corpora, spec, model, embedders)
    after = embedders.counters()
    return chunking, {m: tuple(a - b for a, b in zip(c, before.get(m, (0, 0, 0.0, 0)))) for m, c in after.items()}


@task(**IO_TASK)
def embed_shard(model: str, kind: str, texts: list, embedders: sweep.Embedders) -> dict:
    """One worker's share of the embedding, written into the shared cache as its own part files."""
    return sweep.embed_shard(
        model,
        kind,
        texts,
        embedders.cache_dir,
        embedders.batch_size,
        embedders.device,
        embedders.backend,
        embedders.quantize,
        embedders.precision,
        embedders[model].served,
    )


@task(**IO_TASK)
def embed(inputs: sweep.Inputs, chunkings: list, configs: list, embedders: sweep.Embedders) -> sweep.Embedded:
    return sweep.embed_all(inputs, chunkings, configs, embedders)


# Scoring is one task for every configuration: each takes milliseconds of vectorised work, so a task
# per configuration bought nothing but the orchestration's own cost (a state round trip per task).
@task(**TASK)
def score(
    inputs: sweep.Inputs, chunkings: list, configs: list, embedded: sweep.Embedded, exp: Experiment
) -> tuple[pa.Table, dict, pa.Table, progress.Stopwatch]:
    """Every configuration's per-query table, what each configuration's index cost, what each retrieved
    (kept with the run), and the seconds of retrieval and of scoring."""
    kept, clock = [], progress.Stopwatch()
    per_query, index_stats = sweep.score_all(inputs, chunkings, configs, embedded, exp, kept, clock)
    return per_query, index_stats, pa.concat_tables(kept) if kept else None, clock


@task(**TASK)
def references(inputs: sweep.Inputs, chunkings: list) -> pa.Table:
    return reference_tables(inputs.gold, inputs.corpora, chunkings)


@task(**TASK)
def check_gold(inputs: sweep.Inputs, exp: Experiment) -> dict:
    return gold_check.check_gold(inputs.gold, inputs.corpora, min(exp.chunk_sizes), inputs.skipped).to_dict()


@task(**IO_TASK)
def report(experiment: str, run_id: str) -> str:
    wh = warehouse()
    return str(write_report(wh, experiment, report_path(wh.root, experiment, run_id), run_id))


@task(**TASK)  # no retries: a retry after a partial publish would make a second MLflow run
def publish(uri: str, run_id: str, page: str) -> str:
    """A recorded run published to the MLflow tracking server at `uri` (`chunkeval.cli.mlflow_export`); the
    MLflow run's id. Where that fails, one line: the run itself stays recorded."""
    from chunkeval.cli.mlflow_export import MlflowError, check_server, log_run

    uri = check_server(uri, f"run {run_id} is recorded, but not published to MLflow")
    try:
        return log_run(uri, warehouse(), run_id, Path(page))
    except MlflowError as exc:  # a refused or unanswered request: its line names the server
        raise Fault(f"run {run_id} is recorded, but not published: {exc}") from None
    except Exception as exc:  # anything else on the way (a file that could not be read)
        raise Fault(f"run {run_id} is recorded, but publishing it to MLflow at {uri} failed: {exc}") from None


@task(**TASK)
def summarize(
    per_query: pa.Table,
    index_stats: dict,
    chunkings: list,
    configs: list,
    embedded: sweep.Embedded,
    skip_empty_gold: bool,
    slices: pa.Table | None = None,
) -> tuple:
    """(summary, per-corpus summary, per-slice summary or None)."""
    stats = sweep.chunk_stats(chunkings, configs, embedded, index_stats)
    return (
        *sweep.summarize_sweep(per_query, stats, skip_empty_gold),
        sweep.summarize_slices(per_query, slices, skip_empty_gold),
    )


@task(**IO_TASK)
def store(
    run_id: str,
    per_query: pa.Table,
    summary: pa.Table,
    by_corpus: pa.Table,
    texts_embedded: int,
    refs: pa.Table,
    models: pa.Table,
    gold: dict,
    retrieved: pa.Table | None,
    corpora: dict,
    slices: pa.Table | None = None,
    by_slice: pa.Table | None = None,
    qrels: pa.Table | None = None,
) -> str | None:
    """The run recorded; where another process held the warehouse past the lock timeout, the reason (the
    results are kept and the next command records them), returned rather than raised: no retry waits again."""
    try:
        wh = warehouse()
        write_doc_runs(per_query, wh.results / run_id / "doc_runs")  # document gold: the TREC run files, first
        wh.complete_run(
            run_id,
            per_query,
            summary,
            texts_embedded,
            refs,
            models,
            gold,
            by_corpus,
            retrieved,
            corpora,
            slices,
            by_slice,
            qrels,
        )
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
        row = {k: rec[k] for k in sweep.CONFIG_KEYS}
        for m in METRICS:
            if rec.get(f"{m}_mean") is not None:  # a metric of no row (ann_recall_at_k of bm25) is left out
                row[m] = f"{rec[f'{m}_mean']:.3f} ± {(rec[f'{m}_std'] or 0):.3f}"
                if rec.get(f"{m}_micro") is not None:
                    row[f"{m} (micro)"] = f"{rec[f'{m}_micro']:.3f}"
        rows.append(row)
    return rows


@flow(name="evaluate", log_prints=True)
def evaluate(
    experiment: str | dict = "demo",
    if_changed: bool = False,
    trigger: str = "manual",
    batch_size: int | None = None,
    device: str = "auto",
    shards: int = 0,
    mlflow: str | None = None,
    yes: bool = False,
) -> dict:
    """Run one experiment (`demo`, the path of an experiment YAML file, or its settings) and record it in the warehouse.

    With `if_changed`, a run whose corpus, gold set and model are those of the last completed run is
    recorded as `skipped` and embeds nothing. With `shards` (a Dask task runner: `with_task_runner`),
    the texts the cache lacks are embedded by that many tasks on the cluster's workers first. A completed run
    is published to the MLflow tracking server `mlflow` (else the experiment's `mlflow:` key) when one is given.
    A grid past `LARGE_GRID` configurations runs with `yes` or the experiment's `max_configurations`, its estimate
    logged first; else the flow run fails with one line saying so, before anything is recorded (a scheduled run
    has no terminal to ask on).
    """
    logger = get_run_logger()
    progress.one_line_input_errors()
    exp, backend_choice = resolution(Experiment.resolve(experiment), device)  # backend auto: the one chosen
    if mlflow:
        from chunkeval.cli.mlflow_export import check_uri

        check_uri(mlflow, "mlflow")  # the key's URI is checked with the experiment
    from chunkeval.cli.large_grid import check_grid

    embedders = sweep.Embedders(cache_dir(), batch_size, device=device).for_experiment(exp)
    check_grid(exp, yes, embedders, ask=False, remedy="the flow parameter yes: true", say=logger.info)
    wh = warehouse()
    wh.reap()
    clock = progress.Stopwatch()  # each stage's seconds, returned with the run (`chunkeval run` prints them)
    with clock.stage("checks"):
        fps = fingerprint(exp, "none" if if_changed else "run")  # a skipped run sends no request
    settings = {**exp.recorded_settings(), **({"backend_auto": backend_choice} if backend_choice else {})}
    flow_run_id = flow_run.get_id()
    last = wh.last_completed(exp.name)
    unchanged = last and all(last[f"{key}_fingerprint"] == fps[key] for key in ("corpus", "gold", "model"))
    if if_changed and not unchanged:
        fps = fingerprint(exp)  # it runs: its served models are probed
    if if_changed and unchanged:
        run_id = wh.record_skipped(exp.name, fps, trigger, settings, flow_run_id)
        logger.info(
            "experiment %s: corpus, gold set and model unchanged since run %s; skipped", exp.name, last["run_id"]
        )
        return {"run_id": run_id, "status": "skipped", "texts_embedded": 0}
    run_id = wh.begin_run(exp.name, fps, trigger, settings, flow_run_id)
    try:  # from here a run that ends (an error, ^C, SIGTERM) is recorded failed
        checkpoint("started")
        logger.info("experiment %s: run %s (%s)", exp.name, run_id, trigger)
        with clock.stage("loading", show=True):
            inputs = load(exp)
        for note in exp.notes():
            logger.info(note)
        with clock.stage("chunking", show=True):
            jobs = sweep.chunking_jobs(exp)
            done = chunk.map(
                unmapped(inputs.corpora), [s for s, _ in jobs], [m for _, m in jobs], unmapped(embedders)
            ).result()
            chunkings = [c for c, _ in done]
            configs = sweep.plan(exp, chunkings)
            sweep.check_indexes_fit(inputs, chunkings, configs, embedders, exp.own_corpus)
            for note in clamped_k_note(exp.k, chunkings):
                logger.info(note)
        with clock.stage("embedding"):
            if shards:  # tasks ran on workers, each with its own copy of the embedders: count what they embedded
                for _, counted in done:
                    for model, counters in counted.items():
                        embedders.count(model, counters)
                work = sweep.embedding_shards(inputs, chunkings, configs, embedders, shards)
                logger.info("embedding %d shard(s) on the cluster's workers", len(work))
                for result in [embed_shard.submit(m, kind, texts, embedders) for m, kind, texts in work]:
                    found = result.result()
                    embedders.count(found["model"], found["counters"])
            embedded = embed(inputs, chunkings, configs, embedders)
        logger.info(
            "%d text(s) embedded, %d chunk(s) truncated to the model's input",
            embedders.texts_embedded,
            sum(embedded.truncated.values()),
        )
        progress.step("scoring")
        per_query, index_stats, retrieved, scored = score(inputs, chunkings, configs, embedded, exp)
        clock.merge(scored.seconds, scored.cpu)
        with clock.stage("scoring"):
            refs = references(inputs, chunkings)
            summary, by_corpus, by_slice = summarize(
                per_query, index_stats, chunkings, configs, embedded, exp.skip_empty_gold, inputs.slices
            )
            gold = check_gold(inputs, exp)
        with clock.stage("storing", show=True):
            held = store(
                run_id,
                per_query,
                summary,
                by_corpus,
                embedders.texts_embedded,
                refs,
                embedders.table(),
                gold,
                retrieved,
                inputs.corpora,
                inputs.slices,
                by_slice,
                kept_qrels(inputs.gold),
            )
        if held:
            raise LockTimeout(held)
    except BaseException as exc:
        wh.fail_run(run_id, "".join(traceback.format_exception_only(exc)).strip())
        raise
    create_table_artifact(
        key=artifact_key(exp.name, "summary"),
        table=summary_rows(summary),
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
    done = {
        "run_id": run_id,
        "status": "completed",
        "texts_embedded": embedders.texts_embedded,
        "report": str(page),
        "stage_seconds": clock.seconds,
        "stage_cpu_seconds": clock.cpu,
    }
    if mlflow or exp.mlflow:
        done["mlflow_run"] = publish(mlflow or exp.mlflow, run_id, str(page))
    return done
