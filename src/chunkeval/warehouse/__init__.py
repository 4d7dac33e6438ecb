"""The results warehouse: a DuckDB catalogue of runs, the summaries of their results, and views.

Layout under `$CHUNKEVAL_HOME/warehouse/` (schema: docs/warehouse.md):
- `results/<run_id>/`: the run's Parquet files (`per_query`, `summary`, `by_corpus`, `references`, `by_slice`, `slices`,
  `models`) and its `manifest.json`, written under temporary names and renamed before the run's row
  turns `completed`. They are the source of truth.
- `chunkeval.duckdb`: tables `meta` (schema version), `runs` (one row per run), `baselines`, and
  `summaries`, `corpus_summaries` and `slice_summaries`: the summary rows of every completed run, loaded from its
  Parquet files in the transaction that marks it completed (and rebuilt from them by `repair`), so
  that questions over years of runs never open thousands of files. The views show completed runs only,
  so a run killed at any point leaves no rows in the reports.

`Warehouse` is the one object callers hold. Its methods live in one module per job, bottom to top:

| module | class | job |
| --- | --- | --- |
| `tables` | (functions) | run columns, Arrow schemas of the results files, SQL projections |
| `db` | `Connections` | short connections, waiting on the lock; a damaged file reported, never used |
| `layout` | `Layout` | a run's folder, manifest and files; pin files |
| `damage` | (functions) | a damaged results file named as a fault (`DamagedResults`); files read whole for `repair` |
| `migrations` | `Schema` | schema steps, views, the summary tables loaded from the files |
| `history` | `History` | runs listed and found; trend, history, rollup |
| `results` | `RunFiles` | one run's results, read from its own files |
| `runs` | `Lifecycle` | begin, complete, fail, skip, reap |
| `baselines` | `Baselines` | pins, reference runs, compare and regressions (rules: `chunkeval.analysis.regression`) |
| `maintenance` | `Maintenance` | repair, delete, prune |
| `access` | `Access` | a read-only query for people (`chunkeval sql`), a self-contained snapshot |
| `production` | `Production` | production's imported retrievals (traces) and its judged results beside the runs |

Each job is a class that extends the jobs it uses (`Schema(Connections, Layout)`, `History(Schema)`, …,
`Maintenance(Lifecycle, Baselines)`), as the package's layers do: a reader of one module sees in its
class line everything it may call, and each public method has one signature, where it works, with no
forwarding copy in a facade to keep in step. `Warehouse` below only names the paths and the home.
"""

from __future__ import annotations

from pathlib import Path

from chunkeval.analysis.regression import DEFAULT_THRESHOLD, REGRESSION_METRICS
from chunkeval.errors import InputError
from chunkeval.paths import home
from chunkeval.warehouse.access import Access
from chunkeval.warehouse.baselines import Baselines
from chunkeval.warehouse.db import LockTimeout, lock_timeout_setting
from chunkeval.warehouse.history import History
from chunkeval.warehouse.maintenance import Maintenance
from chunkeval.warehouse.migrations import MIGRATIONS, SCHEMA_VERSION, Schema
from chunkeval.warehouse.production import Production
from chunkeval.warehouse.results import RunFiles
from chunkeval.warehouse.runs import Lifecycle
from chunkeval.warehouse.tables import (
    DUPLICATES_SQL,
    MANIFEST_COLUMNS,
    RESULT_FILES,
    RUN_COLUMNS,
    STATUSES,
    TRIGGERS,
)

__all__ = [
    "DEFAULT_THRESHOLD",  # the regression rule's, re-exported: chunkeval.analysis.regression
    "DUPLICATES_SQL",
    "LockTimeout",
    "MANIFEST_COLUMNS",
    "MIGRATIONS",
    "REGRESSION_METRICS",  # likewise
    "RESULT_FILES",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "STATUSES",
    "TRIGGERS",
    "Warehouse",
]


class Warehouse(Maintenance, Lifecycle, Baselines, RunFiles, Access, History, Production, Schema):
    """The warehouse under `root`: `chunkeval.duckdb`, `results/<run_id>/`, `baselines/<experiment>.json`.
    Every operation opens a short-lived connection, waiting up to `lock_timeout` seconds (by default
    `$CHUNKEVAL_LOCK_TIMEOUT`, else 120) while another process holds the file (a command that only reads asks
    inside one `session()`)."""

    def __init__(self, root: Path, lock_timeout: float | None = None):
        self.root = Path(root)
        self.db_path = self.root / "chunkeval.duckdb"
        self.results_dir = self.root / "results"
        self.lock_timeout = lock_timeout_setting() if lock_timeout is None else lock_timeout
        self._ready = False  # the schema is brought up to date on the first connection
        self._session = None  # the connection of an open `session()`

    @classmethod
    def at_home(cls, must_exist: bool = False) -> Warehouse:
        """The warehouse under `$CHUNKEVAL_HOME/warehouse` (with `must_exist`, an error where no run was
        ever recorded: what only reads never creates it)."""
        wh = cls(home() / "warehouse")
        if must_exist and not wh.exists():
            raise InputError(
                "no warehouse here yet: no run has been recorded (`chunkeval run` records one)", wh.db_path
            )
        return wh
