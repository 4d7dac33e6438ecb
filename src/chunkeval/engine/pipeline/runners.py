"""Where the tasks of a run execute: in the flow's own process (`local`, the default) or on a Dask
cluster (`dask`: a local cluster started for the run; `dask:N`: one of N workers; `dask=tcp://HOST:PORT`:
an existing cluster's scheduler). The flow turns a spec into Prefect's DaskTaskRunner (prefect-dask);
this module only reads and checks the setting, so that a bad one fails before any work.

On a cluster the chunkings run as tasks on the workers and the embedding is split into one shard per
worker; each worker embeds its shard into the shared cache folder, writing its own part files. The
flow's process then reads the cache, retrieves, scores and writes the warehouse: the catalogue stays
one DuckDB file written by one process. Workers must see the same `$CHUNKEVAL_HOME` (docs/scheduling.md: Running
on a Dask cluster).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from dataclasses import dataclass

from chunkeval.errors import InputError

_ADDRESS = re.compile(r"^tcp://(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class TaskRunner:
    kind: str = "local"  # local or dask
    workers: int = 0  # workers of a local cluster (0: none started)
    address: str | None = None  # scheduler of an existing cluster

    @property
    def distributed(self) -> bool:
        return self.kind == "dask"


def parse_task_runner(value: str | None) -> TaskRunner:
    """`local`, `dask`, `dask:N` or `dask=tcp://HOST:PORT`, checked for form only."""
    value = (value or "local").strip()
    if value == "local":
        return TaskRunner()
    if value == "dask":
        return TaskRunner("dask", workers=max(2, os.cpu_count() or 2))
    if value.startswith("dask:"):
        count = value[5:]
        if not count.isdigit() or int(count) < 1:
            raise InputError(f"--task-runner dask:N takes a number of workers of at least 1, got {count!r}")
        return TaskRunner("dask", workers=int(count))
    if value.startswith("dask="):
        address = value[5:]
        match = _ADDRESS.match(address)
        if not match or not 0 < int(match["port"]) < 65536:
            raise InputError(
                f"--task-runner dask=ADDRESS takes a scheduler address like tcp://scheduler:8786, got {address!r}"
            )
        return TaskRunner("dask", address=address)
    raise InputError(f"--task-runner must be local, dask, dask:N or dask=tcp://HOST:PORT, got {value!r}")


def check_task_runner(runner: TaskRunner, timeout: float = 3.0) -> TaskRunner:
    """The runner, where it can run here: prefect-dask installed, an existing scheduler answering."""
    if not runner.distributed:
        return runner
    missing = [p for p in ("prefect_dask", "distributed") if importlib.util.find_spec(p) is None]
    if missing:
        raise InputError(f"--task-runner dask needs {', '.join(missing)}: pip install 'chunkeval[dask]'")
    if runner.address:
        match = _ADDRESS.match(runner.address)
        host = match["host"].strip("[]")
        try:
            socket.create_connection((host, int(match["port"])), timeout=timeout).close()
        except OSError as exc:
            raise InputError(
                f"--task-runner {runner.address}: no Dask scheduler answers there ({exc.strerror or exc})"
            ) from None
    return runner


def cluster_workers(runner: TaskRunner, timeout: float = 10.0) -> int:
    """How many workers the run splits its embedding over: the local cluster's, or those the existing
    scheduler has now (at least 1)."""
    if not runner.address:
        return max(1, runner.workers)
    from distributed import Client

    with Client(runner.address, timeout=timeout) as client:
        return max(1, len(client.scheduler_info().get("workers", {})))
