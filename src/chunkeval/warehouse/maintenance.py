"""Repair and retention: rebuilding a damaged catalogue from the run manifests and pin files, deleting
runs with their files, and pruning an experiment's old runs. Files go last: a run's manifest is marked
deleted before its rows leave the catalogue, so that a repair never brings it back."""

from __future__ import annotations

import json
import os
import shutil
import socket
from datetime import timedelta
from pathlib import Path

from chunkeval.errors import Fault, InputError
from chunkeval.files import pid_alive, write_text
from chunkeval.limits import json_loads, record_text
from chunkeval.warehouse.baselines import Baselines
from chunkeval.warehouse.db import Damaged
from chunkeval.warehouse.migrations import SUMMARY_TABLES
from chunkeval.warehouse.runs import Lifecycle
from chunkeval.warehouse.tables import utc_now

PRUNE_GRACE_S = 600.0  # a run another live process finished this recently is never pruned: it may be reporting it


class Maintenance(Lifecycle, Baselines):
    """Repair, delete and prune (`repair` writes catalogue rows as `Lifecycle` does; `prune` keeps the pinned
    baseline of `Baselines`)."""

    def healthy(self) -> tuple[bool, str]:
        """(True, '') when the catalogue file opens and every table reads; else (False, why)."""
        if not self.exists():
            return False, "missing"
        try:
            with self.connect() as con:
                for table in ("runs", "baselines", "meta"):
                    con.execute(f"SELECT * FROM {table}").fetchall()
        except Damaged as exc:  # a fault of the machine (read-only, no space) is no damage: it is raised
            return False, exc.message
        return True, ""

    def repair(self) -> dict:
        """Rebuild the catalogue from the run manifests and the pin files.

        A damaged (or missing) catalogue file is moved aside to `chunkeval.duckdb.damaged-<time>` and
        a new one is built: every run with a manifest comes back, completed runs with their results,
        and every pinned baseline. A healthy catalogue is kept; runs in it without a manifest (recorded
        by an older chunkeval) get one, so that a later repair can rebuild them too. Either way the
        summary tables are rebuilt from the runs' Parquet files.

        Either way every completed run's results files are read whole first: a run with a file that cannot be
        read is quarantined (its status `quarantined`, the file moved aside to `<name>.parquet.damaged`, the
        error naming it), so that the views, the summaries and every comparison leave it out (`quarantined`).
        """
        ok, why = self.healthy()
        if self.read_only:
            raise Fault("the warehouse is read-only here: repair writes, and nothing was moved", self.db_path)
        manifests = sorted(self.results_dir.glob("*/manifest.json")) if self.results_dir.is_dir() else []
        if ok:
            quarantined = self._quarantine(self.damaged_files())
            for q in quarantined:
                self._update(q["run_id"], status="quarantined", error=q["why"])
            written = 0
            for row in self.runs(with_process=True):
                if self.read_manifest(row["run_id"]) is None:
                    self._write_manifest(row)
                    written += 1
            for pin in self._dicts("SELECT experiment, run_id, pinned_at FROM baselines"):
                self._write_pin(pin)
            self._rematerialize()
            return {
                "damaged": False,
                "moved_to": None,
                "runs": len(self.runs()),
                "manifests_written": written,
                "reason": "",
                "quarantined": quarantined,
            }
        moved = None
        if self.exists():
            moved = self.db_path.with_name(f"{self.db_path.name}.damaged-{utc_now().strftime('%Y%m%dT%H%M%S')}")
            os.replace(self.db_path, moved)
            wal = self.db_path.with_name(self.db_path.name + ".wal")
            if wal.exists():
                os.replace(wal, moved.with_name(moved.name + ".wal"))
        self._ready = False
        rows = [m for m in (self.read_manifest(p.parent.name) for p in manifests) if m is not None]
        quarantined = self._quarantine(self.damaged_files([r["run_id"] for r in rows if r["status"] == "completed"]))
        for row in rows:
            for q in quarantined:
                if q["run_id"] == row["run_id"]:
                    row.update(status="quarantined", error=q["why"])
                    self._write_manifest(row)
        pins = (
            [p for p in (self._read_pin(f) for f in sorted(self.pins.glob("*.json"))) if p]
            if self.pins.is_dir()
            else []
        )
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for row in rows:
                if row["status"] == "completed" and not self._has_results(row["run_id"]):
                    row.update(status="failed", error="results missing when the catalogue was rebuilt")
                self._insert(row, con)
            known = {r["run_id"] for r in rows if r["status"] == "completed"}
            for pin in pins:
                if pin["run_id"] in known:
                    con.execute(
                        "INSERT INTO baselines VALUES (?, ?, ?)", [pin["experiment"], pin["run_id"], pin["pinned_at"]]
                    )
            self._materialize(con, sorted(known))
            con.execute("COMMIT")
        return {
            "damaged": True,
            "moved_to": str(moved) if moved else None,
            "runs": len(rows),
            "pins": len(pins),
            "reason": why,
            "quarantined": quarantined,
        }

    def _quarantine(self, damaged: list) -> list[dict]:
        """Move each damaged results file aside (`<name>.parquet.damaged`: out of the views' reach); per run,
        why it is quarantined. The caller records the status."""
        out: dict[str, dict] = {}
        for exc in damaged:
            path = Path(exc.path)
            os.replace(path, path.with_name(path.name + ".damaged"))
            why = f"{path.name} cannot be read ({exc.reason}); moved aside to {path.name}.damaged"
            if exc.run_id in out:
                out[exc.run_id]["why"] += f"; {why}"
            else:
                out[exc.run_id] = {"run_id": exc.run_id, "why": f"quarantined by `chunkeval warehouse repair`: {why}"}
        return list(out.values())

    def delete_runs(self, run_ids: list[str]) -> list[str]:
        """Remove runs with their files. All are checked first: an unknown or running run, or the pinned
        baseline of its experiment, is an error and nothing is removed. Each run's manifest is marked
        deleted first (so that `repair` never brings it back), then its catalogue and summary rows go in
        one transaction, then its folder."""
        runs = [self.run(r) for r in dict.fromkeys(run_ids)]
        pinned = {row["run_id"]: row["experiment"] for row in self._dicts("SELECT experiment, run_id FROM baselines")}
        for run in runs:
            if run["run_id"] in pinned:
                raise InputError(
                    f"run {run['run_id']} is the pinned baseline of experiment {pinned[run['run_id']]!r}: "
                    "pin another run first (`chunkeval baseline`); nothing was deleted"
                )
            if run["status"] == "running":
                raise InputError(f"run {run['run_id']} is still running; nothing was deleted")
        ids = [r["run_id"] for r in runs]
        for run_id in ids:
            if self.manifest_path(run_id).parent.is_dir():
                write_text(self.manifest_path(run_id), json.dumps({"run_id": run_id, "status": "deleted"}))
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for table in ("runs", *SUMMARY_TABLES):
                con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [ids])
            con.execute("COMMIT")
        for run_id in ids:
            self._remove_folder(run_id)
        self._remove_reports({r["run_id"]: r["experiment"] for r in runs})
        self.collect_corpora()  # the corpus copies only these runs read
        return ids

    def prune(
        self, experiment: str, keep_last: int | None = None, older_than: timedelta | None = None
    ) -> tuple[list[str], str | None]:
        """Delete the experiment's runs beyond the newest `keep_last`, or started more than `older_than`
        ago. Running runs are left alone, and so are runs that another live process finished less than
        `PRUNE_GRACE_S` ago (`_settling`): it may still be writing the run's report (a long run started before
        the cutoff). The pinned
        baseline is kept whatever its age: (deleted, kept)."""
        if (keep_last is None) == (older_than is None):
            raise InputError("prune takes one of keep_last or older_than")
        if keep_last is not None and keep_last < 1:
            raise InputError(f"keep_last must be at least 1, got {keep_last}")
        self.check_experiment(experiment)
        runs = [r for r in self.runs(experiment, with_process=True) if r["status"] != "running"]
        if keep_last is not None:
            doomed = [r["run_id"] for r in runs[keep_last:]]
        else:
            cutoff = utc_now() - older_than
            doomed = [r["run_id"] for r in runs if r["started_at"] < cutoff]
        pinned = self.baseline(experiment)
        kept = pinned if pinned in doomed else None
        settling = {r["run_id"] for r in runs if self._settling(r)}
        doomed = [r for r in doomed if r != pinned and r not in settling]
        if doomed:
            self.delete_runs(doomed)
        self._sweep_deleted()
        return doomed, kept

    @staticmethod
    def _settling(run: dict) -> bool:
        """A run that finished less than `PRUNE_GRACE_S` ago in another process, which may still be writing its
        report: one that is alive on this host, or any on another host (its process cannot be asked)."""
        finished = run["finished_at"]
        if finished is None or finished <= utc_now() - timedelta(seconds=PRUNE_GRACE_S):
            return False
        if run.get("host") != socket.gethostname():
            return True
        return run.get("pid") not in (None, os.getpid()) and pid_alive(run["pid"])

    def _sweep_deleted(self) -> None:
        """Remove the folders a crash left behind after their runs had left the catalogue."""
        if not self.results_dir.is_dir():
            return
        known = {r["run_id"] for r in self._dicts("SELECT run_id FROM runs")}
        for folder in self.results_dir.iterdir():
            if not folder.is_dir() or folder.name in known:
                continue
            if folder.name.startswith(".deleting-"):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            try:
                if json_loads(record_text(folder / "manifest.json")).get("status") == "deleted":
                    self._remove_folder(folder.name)
            except (OSError, ValueError):
                pass
