"""A run's life in the warehouse: begun (its catalogue row and manifest), completed (its files, then its
manifest, then its row and summaries in one transaction), failed, skipped, or settled by `reap` after its
process died. Every change of status is written to the manifest first, then to the catalogue; a run that
could not reach the catalogue (another process held it past the lock timeout) is recorded from its
manifest by the next process that opens the warehouse for writing (`_settle`)."""

from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from chunkeval._version import __version__
from chunkeval.errors import InputError
from chunkeval.faults import checkpoint
from chunkeval.files import pid_alive, write_tables, write_text
from chunkeval.run_result import RunResult
from chunkeval.stats.summaries import summarize, summarize_slices
from chunkeval.vocabulary import CONFIG_KEYS
from chunkeval.warehouse.db import LockTimeout
from chunkeval.warehouse.history import History
from chunkeval.warehouse.tables import MANIFEST_COLUMNS, TRIGGERS, utc_now
from chunkeval.warehouse.turns import Turn


class Lifecycle(History):
    """Begin, complete, fail, skip and reap runs."""

    def _update(self, run_id: str, **changes) -> None:
        """Change a run's manifest, then its catalogue row: the manifest always knows at least as much."""
        row = self.read_manifest(run_id) or self.run(run_id, with_process=True)
        row.update(changes)
        self._write_manifest(row)
        if changes.get("status") == "completed":
            checkpoint("catalogue")
        with self.connect() as con:
            self._apply(con, run_id, changes)

    def _apply(self, con, run_id: str, changes: dict) -> None:
        """A change of a run's catalogue row, in one transaction (with its summaries when it completed)."""
        con.execute("BEGIN TRANSACTION")
        if changes.get("status") == "completed":  # its summaries become visible with its status
            self._materialize(con, [run_id])
        assignments = ", ".join(f"{c} = ?" for c in changes)
        con.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*changes.values(), run_id])
        con.execute("COMMIT")

    def _settle(self, con) -> None:
        """Runs whose manifest says how they ended while the catalogue still says running (their process
        could not reach the catalogue): recorded as their manifest says, a completed one with its summaries."""
        for (run_id,) in con.execute("SELECT run_id FROM runs WHERE status = 'running'").fetchall():
            manifest = self.read_manifest(run_id)
            if manifest is None or manifest["status"] == "running":
                continue
            if manifest["status"] == "completed" and not self._has_results(run_id):
                continue
            self._apply(con, run_id, {c: manifest[c] for c in ("status", "finished_at", "texts_embedded", "error")})

    def begin_run(
        self,
        experiment: str,
        fingerprints: dict,
        trigger: str,
        settings: dict,
        flow_run_id: str | None = None,
        status: str = "running",
        started_at: datetime | None = None,
        reason: str | None = None,
    ) -> str:
        """A new run's catalogue row and manifest. `started_at` (UTC, naive) is for importing history;
        by default it is now."""
        if trigger not in TRIGGERS:
            raise InputError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
        now = started_at or utc_now()
        row = {
            "run_id": now.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8],
            "flow_run_id": flow_run_id,
            "experiment": experiment,
            "status": status,
            "trigger": trigger,
            "started_at": now,
            "finished_at": now if status in ("skipped", "coalesced", "failed", "interrupted") else None,
            "corpus_fingerprint": fingerprints.get("corpus"),
            "gold_fingerprint": fingerprints.get("gold"),
            "model_fingerprint": fingerprints.get("model"),
            "chunkeval_version": __version__,
            "texts_embedded": 0,
            "settings": json.dumps(settings, sort_keys=True),
            "error": reason,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        self._write_manifest(row)
        try:
            self._insert(row)
        except LockTimeout:
            self._remove_folder(row["run_id"])  # never begun: no manifest left for `repair` to find
            raise
        return row["run_id"]

    def _insert(self, row: dict, con=None) -> None:
        sql = f"INSERT INTO runs ({', '.join(MANIFEST_COLUMNS)}) VALUES ({', '.join('?' for _ in MANIFEST_COLUMNS)})"
        if con is not None:
            con.execute(sql, [row[c] for c in MANIFEST_COLUMNS])
            return
        with self.connect() as con:
            con.execute(sql, [row[c] for c in MANIFEST_COLUMNS])

    def record_skipped(
        self,
        experiment: str,
        fingerprints: dict,
        trigger: str,
        settings: dict,
        flow_run_id: str | None = None,
        status: str = "skipped",
        reason: str | None = None,
    ) -> str:
        """A run that ran nothing, recorded with why (`reason`, in the `error` column `runs` shows): `skipped`
        (inputs unchanged since the last completed run), `coalesced` (another run waited to follow the running
        one: `chunkeval.warehouse.turns`) or `failed` (a deployment's run that failed before it began)."""
        return self.begin_run(experiment, fingerprints, trigger, settings, flow_run_id, status=status, reason=reason)

    def turn(self, experiment: str) -> Turn:
        """The turn of the experiment's runs (`chunkeval.warehouse.turns`): one at a time, the rest coalesced."""
        return Turn(self.root, experiment)

    def complete_run(self, run_id: str, result: RunResult) -> None:
        """Write the run's files (each whole or not at all), its manifest, then mark it completed. `result` is the
        run's whole result (`chunkeval.run_result.RunResult`): its `gold_check` is the gold-set check's findings
        on the run's inputs (`chunkeval gold check`); without `by_corpus` (the sweep's per-corpus summary) it is
        computed from `per_query`. `retrieved` (what every configuration retrieved) and `corpora` (the texts the
        run read: a copy of each version is kept, `layout`) are what `chunkeval inspect` and `diff` show; under
        document gold, `qrels` (the judged documents of each question, with its text) are a question's references
        there. `slices` (which queries each slice of the gold set holds: `chunkeval.engine.inputs.slices`) is kept with its
        summary `by_slice` (computed from `per_query` when not given)."""
        per_query, summary, references, models = result.per_query, result.summary, result.references, result.models
        gold_check, by_corpus, retrieved = result.gold_check, result.by_corpus, result.retrieved
        corpora, slices, by_slice, qrels = result.corpora, result.slices, result.by_slice, result.qrels
        folder = self.results_dir / run_id
        folder.mkdir(parents=True, exist_ok=True)
        if corpora is not None:
            self._keep_corpora(run_id, corpora)
        if gold_check is not None:
            write_text(folder / "gold_check.json", json.dumps(gold_check, indent=1))
        if result.race is not None:  # a raced run: what the race decided (its manifest says it too)
            write_text(folder / "race.json", json.dumps(result.race, indent=1))
        run_col = lambda t: t.append_column("run_id", pa.array([run_id] * t.num_rows, pa.string()))  # noqa: E731
        tables = {folder / "per_query.parquet": run_col(per_query), folder / "summary.parquet": run_col(summary)}
        if references is not None:
            tables[folder / "references.parquet"] = run_col(references)
        if qrels is not None:
            tables[folder / "qrels.parquet"] = qrels
        if models is not None:
            tables[folder / "models.parquet"] = run_col(models)
        keys = [k for k in CONFIG_KEYS if k in per_query.column_names]
        if by_corpus is None:
            by_corpus = summarize(self._averaged(run_id, per_query), keys + ["corpus_id"])
        tables[folder / "by_corpus.parquet"] = run_col(by_corpus)
        if slices is not None:
            if by_slice is None:
                by_slice = summarize_slices(self._averaged(run_id, per_query), slices, keys)
            tables[folder / "slices.parquet"] = run_col(slices)
            tables[folder / "by_slice.parquet"] = run_col(by_slice)
        if retrieved is not None:  # [start, end) kept as start and length, zstd: half the bytes of snappy's end
            length = pc.subtract(retrieved["end"], retrieved["start"]).cast(pa.int32())
            stored = retrieved.drop_columns(["end"]).append_column("length", length)
            # scores, nearly all distinct: no dictionary, their bytes split into streams (a fifth fewer bytes)
            encodings = {"use_dictionary": [c for c in stored.column_names if c != "score"]}
            encodings["use_byte_stream_split"] = ["score"]
            write_tables({folder / "retrieved.parquet": stored}, compression="zstd", **encodings)
        write_tables(tables, point="results")
        try:
            self._update(run_id, status="completed", finished_at=utc_now(), texts_embedded=int(result.texts_embedded))
        except LockTimeout as exc:
            raise LockTimeout(
                f"{exc.message}; run {run_id} is complete and its results are kept: the next chunkeval command "
                "that opens the warehouse records it",
                exc.path,
            ) from None

    def _averaged(self, run_id: str, per_query: pa.Table) -> pa.Table:
        """The per-query rows a run's averages take: without `has_gold` (every question counts) unless the run
        left questions without references out (`skip_empty_gold`, read from the manifest: it needs no lock)."""
        settings = (self.read_manifest(run_id) or self.run(run_id))["settings"]
        skip = bool(json.loads(settings or "{}").get("skip_empty_gold"))
        return per_query if skip or "has_gold" not in per_query.column_names else per_query.drop_columns(["has_gold"])

    def fail_run(self, run_id: str, error: str, status: str = "failed") -> None:
        """Record a running run failed, or `interrupted` by a signal (its manifest first). Where the catalogue is
        held past the lock timeout, the manifest says so and the next command that opens the warehouse records it."""
        manifest = self.read_manifest(run_id)
        if (manifest or self.run(run_id))["status"] != "running":
            return
        try:
            self._update(run_id, status=status, finished_at=utc_now(), error=error[:2000])
        except LockTimeout:
            pass  # the manifest says failed: `_settle` records it

    def reap(self) -> int:
        """Settle runs of this host whose process has died (kill -9, power loss): a run whose manifest
        says completed (it died between its manifest and its catalogue row) is completed, the rest failed."""
        host = socket.gethostname()
        with self.connect() as con:
            rows = con.execute("SELECT run_id, pid FROM runs WHERE status = 'running' AND host = ?", [host]).fetchall()
        dead = [run_id for run_id, pid in rows if pid is None or not pid_alive(pid)]
        for run_id in dead:
            manifest = self.read_manifest(run_id)
            if manifest and manifest["status"] == "completed" and self._has_results(run_id):
                self._update(run_id, **{c: manifest[c] for c in ("status", "finished_at", "texts_embedded")})
            else:
                self._update(
                    run_id, status="failed", finished_at=utc_now(), error="process ended before the run finished"
                )
        return len(dead)
