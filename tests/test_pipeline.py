"""One pipeline (issues 31 and 42): `chunkeval sweep`, the Python API and the `evaluate` flow prepare a run once
(`prepare`) and run the same steps (`sweep.STEPS`) on its state; the flow's tasks run those very functions (a step
that fans out: its jobs mapped, then its merge), in STEPS' order, and its tables are the sweep's."""

from __future__ import annotations

import asyncio
import inspect

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.sorting import TaskRunSort

from chunkeval.cli import main
from chunkeval.engine.pipeline import fingerprints, sweep
from chunkeval.flows import evaluate as flow_module
from chunkeval.flows.evaluate import evaluate
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_api")

STEPS = [step.name for step in sweep.STEPS]


def flow_tasks(steps=sweep.STEPS, mapped: bool = False) -> list[str]:
    """The tasks the flow runs for `steps`, in order: where the jobs are `mapped` (a cluster, a corpus of
    `MAPPED_CHARACTERS` or more), a step's jobs before its merge; else the step is one task (the demo's corpus)."""
    return [name for s in steps for name in ((f"{s.name}_job",) if mapped and s.name == "chunk" else ()) + (s.name,)]


TIMES = {"index_build_seconds", "latency_p50_ms", "latency_p95_ms", "batch_ms_per_query"}  # measured, not computed


def demo_experiment(tmp_path, name: str) -> str:
    """The demo's corpus and gold set, with a grid of one model, dense and bm25 (the demo's less minilm-static)."""
    settings = {
        "name": name,
        "corpus_dir": str(DEMO_DIR / "corpora"),
        "questions": str(DEMO_DIR / "questions.csv"),
        "chunker": ["fixed_token", "recursive_token"],
        "chunk_sizes": [100, 200],
        "overlaps": [0],
        "k": [1, 5],
        "model": ["all-MiniLM-L6-v2"],
        "retriever": ["dense", "bm25"],
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def task_names(flow_run_id: str) -> list[str]:
    """The flow run's tasks, in the order they started, each named once (a mapped task runs once per job)."""

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                sort=TaskRunSort.EXPECTED_START_TIME_ASC,
            )

    return list(dict.fromkeys(run.name.rsplit("-", 1)[0] for run in asyncio.run(read())))


def same(a: pa.Table, b: pa.Table) -> bool:
    """The same rows and values, whatever their order (the measured times left out)."""
    a, b = (t.drop_columns([c for c in t.column_names if c in TIMES or c == "run_id"]) for t in (a, b))
    order = [(c, "ascending") for c in sorted(a.column_names)]
    return sorted(a.column_names) == sorted(b.column_names) and a.sort_by(order).equals(
        b.select(a.column_names).sort_by(order)
    )


def test_the_flow_runs_the_steps_as_tasks_and_records_the_sweeps_tables(tmp_path):
    exp_file = demo_experiment(tmp_path, "one-pipeline")
    out = tmp_path / "sweep.parquet"
    assert main(["sweep", exp_file, "--out", str(out)]) == 0
    done = evaluate(experiment=exp_file)
    wh = Warehouse.at_home()
    flow_run_id = str(wh.run(done["run_id"])["flow_run_id"])
    # the flow runs the steps' own functions: no choreography of its own (each task wraps its step's function)
    from chunkeval.flows.evaluate import JOB_TASKS, STEP_TASKS

    assert [STEP_TASKS[s.name].fn for s in sweep.STEPS] == [s.run or s.merge for s in sweep.STEPS]
    assert {name: t.fn for name, t in JOB_TASKS.items()} == {s.name: s.job for s in sweep.STEPS if s.job}
    # prepared (and loaded) once, as `chunkeval run` prepares it; in one process, embed has no jobs
    assert task_names(flow_run_id) == [*flow_tasks(sweep.STEPS[1:]), "store", "report"]
    folder = wh.results_dir / done["run_id"]
    for part, rows in (("summary", 16), ("per_query", 16 * 28), ("by_corpus", 16 * 3)):  # 16 configurations
        swept = pq.read_table(out.with_name(f"sweep{'' if part == 'summary' else '.' + part}.parquet"))
        recorded = pq.read_table(folder / f"{part}.parquet")
        named = swept.select(["label", "config_id"])  # a sweep's file names its configurations; the warehouse's views
        swept = swept.drop_columns(["label", "config_id"])  # compute them over its tables, which hold none
        assert named.num_rows == rows and recorded.num_rows == rows and same(swept, recorded), part
    assert STEPS == ["load", "chunk", "embed", "score", "summarise", "check_gold"]


def test_run_checks_fingerprints_and_loads_the_inputs_once(tmp_path, monkeypatch):
    """`chunkeval run` makes the run's state before Prefect starts and the flow goes on from it: the inputs are
    fingerprinted and read once, and the flow's tasks are the steps after loading."""
    counts = {"load_inputs": 0, "input_fingerprints": 0}

    def counted(name, fn):
        def call(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(sweep, "load_inputs", counted("load_inputs", sweep.load_inputs))
    monkeypatch.setattr(sweep, "input_fingerprints", counted("input_fingerprints", fingerprints.input_fingerprints))
    monkeypatch.setattr(flow_module, "MAPPED_CHARACTERS", 1)  # the chunkings as tasks of their own, as a large corpus's
    exp_file = demo_experiment(tmp_path, "one-load")
    assert main(["run", exp_file]) == 0  # no capsys: Prefect's console handler would keep its closed stream
    assert counts == {"load_inputs": 1, "input_fingerprints": 1}
    wh = Warehouse.at_home()
    (run,) = wh.runs("one-load")
    assert task_names(str(run["flow_run_id"])) == [*flow_tasks(sweep.STEPS[1:], mapped=True), "store", "report"]


def test_complete_run_takes_a_run_result_whole():
    parameters = inspect.signature(Warehouse.complete_run).parameters
    assert list(parameters) == ["self", "run_id", "result"] and parameters["result"].annotation == "RunResult"
    fields = set(inspect.signature(RunResult).parameters)
    assert {"per_query", "summary", "texts_embedded", "gold_check", "retrieved", "corpora", "qrels"} <= fields
