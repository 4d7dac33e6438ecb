"""What a run made, whole (`RunResult`): the tables the engine's steps produce and the warehouse records.

Below both: the engine fills it in (`chunkeval.engine.pipeline.sweep.result`), `Warehouse.complete_run(run_id, result)`
records it, `chunkeval sweep` writes it to files and the Python API returns its tables. The warehouse imports
no engine type, so the type they share lives here, with the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class RunResult:
    """What a run made, whole: what `chunkeval sweep` writes, the Python API returns and
    `Warehouse.complete_run(run_id, result)` records. Only the per-query and summary tables are required (a
    table recorded by hand); the warehouse computes what else it needs from them."""

    per_query: pa.Table
    summary: pa.Table
    by_corpus: pa.Table | None = None  # the summary per configuration and corpus
    references: pa.Table | None = None  # what each question's references are (`chunkeval.engine.scoring.configuration`)
    models: pa.Table | None = None  # each model's identity, dimensions and texts embedded
    texts_embedded: int = 0
    model_loaded: bool = False
    notes: tuple[str, ...] = ()
    retrieved: pa.Table | None = None  # what every configuration retrieved (`chunkeval.engine.scoring.retrieved`)
    corpora: dict | None = None  # the texts the run read, by corpus id
    by_slice: pa.Table | None = None  # the summary per configuration and slice of the gold set (`slice_by`)
    slices: pa.Table | None = None  # which queries each slice holds
    qrels: pa.Table | None = None  # under document gold, the qrels with the questions (`retrieved.qrels_table`)
    gold_check: dict | None = None  # the gold set's check on the run's inputs (`chunkeval.engine.gold.check`)
    race: dict | None = None  # a raced run's summary: what it decided and the cells it evaluated (`race: true`)
