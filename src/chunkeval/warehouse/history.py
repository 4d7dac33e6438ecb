"""The catalogue's history: runs listed and found, and the questions over an experiment's many runs
(trend, history, rollup). They read the summary tables, never every run's files (a rollup
reads the per-query files of its period's runs)."""

from __future__ import annotations

import json
from datetime import timedelta

import duckdb
import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.stats.aggregate import summary_sql
from chunkeval.vocabulary import ADDED_KEYS, CONFIG_KEYS, METRICS, slice_name
from chunkeval.warehouse.damage import damaged_files
from chunkeval.warehouse.migrations import Schema
from chunkeval.warehouse.tables import (
    DUPLICATES_SQL,
    MANIFEST_COLUMNS,
    RUN_COLUMNS,
    parquet,
    parquet_columns,
    projection,
    utc_now,
)


class History(Schema):
    """Runs, and the questions over an experiment's completed runs."""

    def runs(
        self,
        experiment: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        with_process: bool = False,
    ) -> list[dict]:
        """Runs, newest first."""
        where, params = [], []
        if experiment:
            where.append("experiment = ?")
            params.append(experiment)
        if status:
            where.append("status = ?")
            params.append(status)
        sql = f"SELECT {', '.join(MANIFEST_COLUMNS if with_process else RUN_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._dicts(sql, params)

    def count_runs(self, experiment: str, status: str) -> int:
        """How many runs of the experiment have the status."""
        return self._dicts("SELECT count(*) AS n FROM runs WHERE experiment = ? AND status = ?", [experiment, status])[
            0
        ]["n"]

    def has_run(self, run_id: str) -> bool:
        """Whether the catalogue holds the run (deleted runs are gone from it)."""
        return bool(self._dicts("SELECT 1 AS x FROM runs WHERE run_id = ?", [run_id]))

    def run(self, run_id: str, with_process: bool = False) -> dict:
        columns = MANIFEST_COLUMNS if with_process else RUN_COLUMNS
        rows = self._dicts(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise InputError(f"no run {run_id!r} in the warehouse {self.db_path}")
        return rows[0]

    def last_completed(self, experiment: str) -> dict | None:
        rows = self.runs(experiment, "completed", limit=1)
        return rows[0] if rows else None

    def check_experiment(self, name: str) -> None:
        """An error naming the known experiments unless `name` has a recorded run."""
        if not self.runs(name, limit=1):
            known = sorted({r["experiment"] for r in self.runs()})
            raise InputError(f"no experiment named {name!r} has been recorded; known: {', '.join(known) or 'none'}")

    def trend(
        self,
        experiment: str,
        metric: str,
        config: dict | None = None,
        last: int | None = None,
        configs: list[dict] | None = None,
        in_slice: tuple[str, str] | None = None,
    ) -> list[dict]:
        """The metric (macro mean, with its 95 % bootstrap interval where the run recorded one) per
        completed run and configuration, oldest first, with the change against the previous run scored
        the same way (the `trend` view's numbers, read from `config_summary` for one metric). With `in_slice`
        (column, value), over that slice's queries (`slice_summary`; rows say `n_queries` and `too_small`). Each row
        says whether its run's gold set or model changed since the previous completed run (`gold_changed`,
        `model_changed`)."""
        if metric not in METRICS:
            raise InputError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
        where, params = self._summary_filter(experiment, config, configs)
        keys = ", ".join(CONFIG_KEYS)
        source, extra = "config_summary", ""
        if in_slice is not None:
            source, extra = "slice_summary", ", n_queries, too_small"
            where += " AND slice_column = ? AND slice_value = ?"
            params += list(in_slice)
        sql = (
            f"SELECT run_id, started_at, duplicates, ties, {keys}, label, config_id, '{metric}' AS metric, "
            f"{metric}_mean AS value, "
            f"{metric}_ci_low AS ci_low, {metric}_ci_high AS ci_high, {metric}_mean - lag({metric}_mean) OVER "
            f"(PARTITION BY duplicates, relevance, {keys} ORDER BY started_at, run_id) AS change{extra} "
            f"FROM {source} WHERE {where}"
        )
        if last:  # the newest `last` runs (their changes still against the run before each)
            sql, params = self._newest_runs(sql, params, experiment, last)
        changed = self.input_changes(experiment)
        rows = self._dicts(sql + f" ORDER BY started_at, run_id, {keys}", params)
        return [
            {
                **r,
                "gold_changed": "gold" in changed.get(r["run_id"], ""),
                "model_changed": "model" in changed.get(r["run_id"], ""),
            }
            for r in rows
        ]

    def input_changes(self, experiment: str) -> dict[str, str]:
        """The completed runs whose gold set or model changed: run id → what `trend` and the report's trend mark
        ("gold set changed", "model changed", or both), for each run whose gold set's or model's fingerprint differs
        from the previous completed run's (docs/gold.md, docs/loop.md)."""
        rows = self._dicts(
            "SELECT run_id, gold_fingerprint, model_fingerprint FROM runs WHERE experiment = ? "
            "AND status = 'completed' ORDER BY started_at, run_id",
            [experiment],
        )
        out = {}
        for a, b in zip(rows, rows[1:]):
            what = [
                name
                for key, name in (("gold_fingerprint", "gold set changed"), ("model_fingerprint", "model changed"))
                if a[key] and b[key] and a[key] != b[key]
            ]
            if what:
                out[b["run_id"]] = " and ".join(what)
        return out

    def slices(self, experiment: str) -> list[str]:
        """The slices (`column=value`) the experiment's completed runs recorded, in name order."""
        rows = self._dicts(
            "SELECT DISTINCT slice_column, slice_value FROM slice_summary WHERE experiment = ? ORDER BY 1, 2",
            [experiment],
        )
        return [slice_name(r["slice_column"], r["slice_value"]) for r in rows]

    def has_configuration(self, experiment: str, config: dict) -> bool:
        """Whether a completed run of the experiment has a configuration with the settings of `config`."""
        where, params = self._summary_filter(experiment, config, None)
        return bool(self._dicts(f"SELECT 1 AS found FROM config_summary WHERE {where} LIMIT 1", params))

    def history(self, experiment: str, metrics: list[str], configs: list[dict], last: int) -> list[dict]:
        """Several metrics at once (mean and 95 % interval each) of the given configurations over the
        newest `last` completed runs, oldest first: what the report's trend charts draw, in one query."""
        where, params = self._summary_filter(experiment, None, configs)
        columns = ", ".join(f"{m}_{part}" for m in metrics for part in ("mean", "ci_low", "ci_high"))
        sql, params = self._newest_runs(
            f"SELECT run_id, started_at, {', '.join(CONFIG_KEYS)}, {columns} FROM config_summary WHERE {where}",
            params,
            experiment,
            last,
        )
        return self._dicts(sql + f" ORDER BY started_at, run_id, {', '.join(CONFIG_KEYS)}", params)

    @staticmethod
    def _summary_filter(experiment: str, config: dict | None, configs: list[dict] | None) -> tuple[str, list]:
        """The WHERE clause on `config_summary` for an experiment, a partial configuration and any of a
        list of full configurations."""
        where, params = ["experiment = ?"], [experiment]
        for key, value in (config or {}).items():
            if key not in CONFIG_KEYS:
                raise InputError(f"config keys are {', '.join(CONFIG_KEYS)}; got {key!r}")
            where.append(f"{key} IS NOT DISTINCT FROM ?")  # candidates is null without a reranker
            params.append(value)
        if configs:  # any of these configurations (each a full key)
            where.append(
                "("
                + " OR ".join(
                    "(" + " AND ".join(f"{k} IS NOT DISTINCT FROM ?" for k in CONFIG_KEYS) + ")" for _ in configs
                )
                + ")"
            )
            params += [c[k] for c in configs for k in CONFIG_KEYS]
        return " AND ".join(where), params

    @staticmethod
    def _newest_runs(sql: str, params: list, experiment: str, last: int) -> tuple[str, list]:
        """`sql`'s rows of the newest `last` completed runs of the experiment only."""
        return (
            f"SELECT * FROM ({sql}) WHERE run_id IN (SELECT run_id FROM runs WHERE experiment = ? AND "
            f"status = 'completed' ORDER BY started_at DESC, run_id DESC LIMIT {int(last)})",
            [*params, experiment],
        )

    def rollup(self, experiment: str, since: timedelta) -> tuple[pa.Table, list[str]]:
        """The averages of a period: per configuration (and `duplicates` setting), macro = mean over
        every query row of the experiment's completed runs started within `since`, micro = sums over
        them, with `n_runs`; the same SQL as every summary (`chunkeval.stats.aggregate`). Also the run ids."""
        start = utc_now() - since
        runs = [r for r in self.runs(experiment, "completed") if r["started_at"] >= start]
        if not runs:
            raise InputError(f"experiment {experiment!r} has no completed run since {start:%Y-%m-%d %H:%M} UTC")
        files = [self._file(r["run_id"], "per_query") for r in runs]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise InputError("results missing; `chunkeval warehouse repair` marks such runs failed", missing[0])
        skip = bool(json.loads(runs[0]["settings"] or "{}").get("skip_empty_gold"))
        with self.connect() as con:
            names = parquet_columns(con, files)
            source = (
                f"(SELECT {projection('per_query', names, 'q')}, {DUPLICATES_SQL.format(t='r.')} AS duplicates "
                f"FROM {parquet(files)} q JOIN runs r USING (run_id))"
            )
            columns = [c for c in names | {"model", "retriever", "duplicates", *ADDED_KEYS} if c != "run_id"]
            sql = summary_sql(
                source, ["duplicates", *CONFIG_KEYS], columns, skip, extra=("count(DISTINCT run_id) AS n_runs",)
            )
            try:
                return con.sql(sql).to_arrow_table(), [r["run_id"] for r in runs]
            except duckdb.Error:
                found = damaged_files(self.results_dir, [r["run_id"] for r in runs])
                if not found:
                    raise
                raise found[0] from None
