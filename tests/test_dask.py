"""The evaluate flow on a real local Dask cluster of 2 worker processes (prefect-dask), against the
same experiment run in the flow's own process, against the session's real Prefect server (`prefect_api`)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from chunkeval.engine.pipeline.runners import TaskRunner, check_task_runner, parse_task_runner
from chunkeval.engine.scoring.metrics import METRICS
from chunkeval.errors import InputError
from chunkeval.flows.evaluate import with_task_runner
from chunkeval.vocabulary import CONFIG_KEYS
from chunkeval.warehouse import Warehouse
from test_flows import small_experiment


def run_in(home, monkeypatch, exp_file: str, runner: TaskRunner, shards: int) -> tuple[dict, Warehouse]:
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))  # the workers are spawned with it: one cache for all
    result = with_task_runner(runner)(experiment=exp_file, shards=shards)
    return result, Warehouse(home / "warehouse")


def per_query(wh: Warehouse, run_id: str) -> dict[str, np.ndarray]:
    table = wh.query_results(run_id).sort_by([(k, "ascending") for k in [*CONFIG_KEYS, "query_id"]])
    keys = {*CONFIG_KEYS, "query_id", "corpus_id"}  # as Python values: a null candidates equals null
    return {
        c: table[c].to_pylist() if c in keys else table[c].to_numpy(zero_copy_only=False)
        for c in table.column_names
        if c != "run_id"
    }


@pytest.mark.usefixtures("prefect_api")
def test_a_two_worker_cluster_gives_the_numbers_of_the_in_process_run(tmp_path, monkeypatch, share_models):
    # a semantic chunker embeds inside its chunking task (on a worker); fixed chunks are embedded in shards. The
    # model is the session's built minilm-static (each worker loads it in a blink; all-MiniLM-L6-v2 cost each run's
    # processes their torch load): what is checked is where the work runs and that the numbers agree
    exp_file = small_experiment(
        tmp_path,
        "dask",
        chunker=["fixed_token", "cluster_semantic"],
        chunk_sizes=[60, 120],
        retriever=["dense", "bm25"],
        model=["minilm-static"],
    )
    local, wh_local = run_in(share_models(tmp_path / "local"), monkeypatch, exp_file, TaskRunner(), 0)
    runner = parse_task_runner("dask:2")
    assert runner == TaskRunner("dask", workers=2) and check_task_runner(runner) is runner
    dask, wh_dask = run_in(share_models(tmp_path / "dask"), monkeypatch, exp_file, runner, 2)

    a, b = per_query(wh_local, local["run_id"]), per_query(wh_dask, dask["run_id"])
    assert len(a["query_id"]) == len(b["query_id"]) > 0
    for key in [*CONFIG_KEYS, "query_id", "corpus_id"]:
        assert list(a[key]) == list(b[key])
    for metric in [m for m in METRICS if m in a]:
        assert np.allclose(a[metric].astype(float), b[metric].astype(float), rtol=0, atol=1e-9, equal_nan=True), metric
    # what the workers embedded is counted; two chunkings of one semantic chunker on two workers may
    # embed the same pieces at once (neither sees the other's part yet), so never fewer than in-process
    assert dask["texts_embedded"] >= local["texts_embedded"] > 0
    (model,) = wh_dask.models(dask["run_id"]).to_pylist()
    assert model["texts_embedded"] == dask["texts_embedded"]
    # the workers wrote the cache, each shard its own part files: the same texts as the in-process run's
    parts = {
        name: list((tmp_path / name / "cache" / "embeddings").glob("*/part-*.parquet")) for name in ("local", "dask")
    }
    hashes = {
        name: {h for p in found for h in pq.read_table(p, columns=["text_hash"])["text_hash"].to_pylist()}
        for name, found in parts.items()
    }
    assert len(parts["dask"]) >= 4 and hashes["dask"] == hashes["local"]


@pytest.mark.parametrize(
    "value, message",
    [
        ("ray", "--task-runner must be local, dask, dask:N or dask=tcp://HOST:PORT, got 'ray'"),
        ("dask:0", "takes a number of workers of at least 1, got '0'"),
        ("dask=scheduler:8786", "takes a scheduler address like tcp://scheduler:8786, got 'scheduler:8786'"),
        ("dask=tcp://127.0.0.1:99999", "takes a scheduler address like tcp://scheduler:8786"),
    ],
)
def test_bad_task_runners_are_refused(value, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_task_runner(value)


def test_a_scheduler_that_does_not_answer_is_refused_before_any_work():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError, match=f"tcp://127.0.0.1:{port}: no Dask scheduler answers there"):
        check_task_runner(parse_task_runner(f"dask=tcp://127.0.0.1:{port}"))
