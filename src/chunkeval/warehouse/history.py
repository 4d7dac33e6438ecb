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
from chunkeval.vocabulary import ADDED_KEYS, CONFIG_KEYS, check_metric, close_names, folded, slice_name
from chunkeval.warehouse.damage import damaged_files
from chunkeval.warehouse.migrations import Schema
from chunkeval.warehouse.tables import (
    DUPLICATES_SQL,
    MANIFEST_COLUMNS,
    RUN_COLUMNS,
    parquet,
    parquet_columns,
    projection,
    raced,
    utc_now,
)

# Per completed run of an experiment (its one parameter): whether its gold set's or model's fingerprint differs from
# the previous completed run's (a missing or empty fingerprint differs from nothing).
_CHANGES_SQL = (
    "SELECT run_id, coalesce(g <> pg, false) AS gold_changed, coalesce(m <> pm, false) AS model_changed FROM ("
    "SELECT run_id, nullif(gold_fingerprint, '') AS g, lag(nullif(gold_fingerprint, '')) OVER w AS pg, "
    "nullif(model_fingerprint, '') AS m, lag(nullif(model_fingerprint, '')) OVER w AS pm FROM runs "
    "WHERE experiment = ? AND status = 'completed' WINDOW w AS (ORDER BY started_at, run_id))"
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

    def experiments(self) -> list[str]:
        """The names of the experiments with a recorded run, in order."""
        return [r["experiment"] for r in self._dicts("SELECT DISTINCT experiment FROM runs ORDER BY experiment", [])]

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

    def model_throughput(self) -> dict[str, float]:
        """Texts per second of each model, the median over the runs recorded (empty without a warehouse): what the
        estimate of a large grid reads (`chunkeval.engine.pipeline.grid`). An estimate never stops a run: a
        warehouse that cannot be read gives nothing, and the estimate probes instead."""
        try:
            if not self.exists():
                return {}
            with self.connect() as con:
                rows = con.execute(
                    "SELECT model, median(texts_per_second) FROM run_models WHERE texts_per_second > 0 GROUP BY model"
                ).fetchall()
        except Exception:  # noqa: BLE001 - without the warehouse, a probe measures
            return {}
        return {model: float(rate) for model, rate in rows}

    def unchanged_since(self, experiment: str, fingerprints: dict) -> dict | None:
        """The experiment's last completed run where its corpus, gold set and model are those of `fingerprints`
        (what `--if-changed` skips for), else None."""
        last = self.last_completed(experiment) if self.exists() else None
        same = last and all(last[f"{key}_fingerprint"] == fingerprints.get(key) for key in ("corpus", "gold", "model"))
        return last if same else None

    def check_experiment(self, name: str) -> None:
        """An error naming the known experiments unless `name` has a recorded run."""
        if not self.runs(name, limit=1):
            known = self.experiments()
            said = close_names(name, known) or f"known: {folded(known) if known else 'none'}"
            raise InputError(f"no experiment named {name!r} has been recorded; {said}")

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
        return self._dicts(*self._trend_sql(experiment, metric, config, last, configs, in_slice))

    def trend_json(
        self,
        out,
        experiment: str,
        metrics: list[str],
        config: dict | None = None,
        last: int | None = None,
        in_slice: tuple[str, str] | None = None,
    ) -> int:
        """Write the rows of `trend` for each metric in turn to the binary stream `out` as one JSON list (a row
        object per line, `started_at` in ISO 8601 UTC); the number of rows. DuckDB encodes each row and the encoded
        rows go to `out` in Arrow batches, never as Python objects: 120,000 rows (65 MB) take well under a second
        where building and encoding them in Python took seconds (docs/performance.md)."""
        parts, params = [], []
        for order, metric in enumerate(metrics):
            sql, more = self._trend_sql(experiment, metric, config, last, None, in_slice)
            parts.append(f"SELECT {order} AS metric_order, * FROM ({sql})")
            params += more
        union = " UNION ALL ".join(parts)
        sep = ",\n  "
        rows = 0
        with self.connect() as con:
            names = con.execute(f"SELECT * EXCLUDE (metric_order) FROM ({union}) LIMIT 0", params).description
            fields = ", ".join(
                f'"{n}" := ' + ("strftime(started_at, '%Y-%m-%dT%H:%M:%SZ')" if n == "started_at" else f'"{n}"')
                for n, *_ in names
            )
            order = ", ".join(["metric_order", "started_at", "run_id", *CONFIG_KEYS])
            reader = con.sql(
                f"SELECT to_json(struct_pack({fields}))::VARCHAR || '{sep}' AS row FROM ({union}) ORDER BY {order}",
                params=params,
            ).to_arrow_reader()
            for batch in reader:
                column = batch.column(0)
                if not len(column):
                    continue
                # each row's JSON and its separator lie end to end in the array's one data buffer
                width = 8 if pa.types.is_large_string(column.type) else 4
                offsets = memoryview(column.buffers()[1]).cast("B")[column.offset * width :]
                start, end = (int.from_bytes(offsets[n * width : (n + 1) * width], "little") for n in (0, len(column)))
                data = memoryview(column.buffers()[2]).cast("B")[start:end]
                out.write(sep.encode() if rows else b"[\n  ")
                out.write(data[: -len(sep)])
                rows += len(column)
        out.write(b"\n]\n" if rows else b"[]\n")
        return rows

    def _trend_sql(
        self,
        experiment: str,
        metric: str,
        config: dict | None,
        last: int | None,
        configs: list[dict] | None,
        in_slice: tuple[str, str] | None,
    ) -> tuple[str, list]:
        """The query of `trend` (ordered oldest first) and its parameters."""
        check_metric(metric)
        where, params = self._summary_filter(experiment, config, configs)
        keys = ", ".join(CONFIG_KEYS)
        source, extra = "config_summary", ""
        if in_slice is not None:
            source, extra = "slice_summary", ", n_queries, too_small"
            where += " AND slice_column = ? AND slice_value = ?"
            params += list(in_slice)

        def columns(t: str = "") -> str:
            return (
                ", ".join(f"{t}{c}" for c in ("run_id", "started_at", "duplicates", "ties", *CONFIG_KEYS, "label"))
                + f", {t}config_id, '{metric}' AS metric, {t}{metric}_mean AS value, {t}{metric}_ci_low AS ci_low, "
                f"{t}{metric}_ci_high AS ci_high"
            )

        scored = f"duplicates, relevance, {keys}"  # the change is against the previous run scored the same way
        if not last:
            sql = (
                f"SELECT {columns()}, {metric}_mean - lag({metric}_mean) OVER (PARTITION BY {scored} ORDER BY "
                f"started_at, run_id) AS change{extra} FROM {source} WHERE {where}"
            )
        else:  # the newest `last` runs, each change still against the run before: for the first shown row of each
            # configuration, the newest older row (a grouped arg_max, not a window over every run of the history)
            shown = (
                f"SELECT run_id FROM runs WHERE experiment = ? AND status = 'completed' "
                f"ORDER BY started_at DESC, run_id DESC LIMIT {int(last)}"
            )
            same = " AND ".join(f"r.{k} IS NOT DISTINCT FROM p.{k}" for k in ("duplicates", "relevance", *CONFIG_KEYS))
            change = f"CASE WHEN nth = 1 THEN r.{metric}_mean - p.before ELSE r.{metric}_mean - previous END"
            sql = (
                f"SELECT {columns('r.')}, {change} AS change{extra.replace(', ', ', r.')} FROM (SELECT *, "
                f"row_number() OVER w AS nth, lag({metric}_mean) OVER w AS previous "
                f"FROM {source} WHERE {where} AND run_id IN ({shown}) "
                f"WINDOW w AS (PARTITION BY {scored} ORDER BY started_at, run_id)) r "
                f"LEFT JOIN (SELECT {scored}, arg_max_null({metric}_mean, (started_at, run_id)) AS before "
                f"FROM {source} WHERE {where} AND run_id NOT IN ({shown}) GROUP BY ALL) p ON {same}"
            )
            params = [*params, experiment, *params, experiment]
        sql = (
            f"SELECT t.*, coalesce(c.gold_changed, false) AS gold_changed, coalesce(c.model_changed, false) AS "
            f"model_changed FROM ({sql}) t LEFT JOIN ({_CHANGES_SQL}) c USING (run_id) "
            f"ORDER BY t.started_at, t.run_id, {', '.join('t.' + k for k in CONFIG_KEYS)}"
        )
        return sql, [*params, experiment]

    def input_changes(self, experiment: str) -> dict[str, str]:
        """The completed runs whose gold set or model changed: run id → what `trend` and the report's trend mark
        ("gold set changed", "model changed", or both), for each run whose gold set's or model's fingerprint differs
        from the previous completed run's (docs/gold.md, docs/loop.md; `_CHANGES_SQL`, which `trend` reads too)."""
        rows = self._dicts(f"SELECT * FROM ({_CHANGES_SQL}) WHERE gold_changed OR model_changed", [experiment])
        names = (("gold_changed", "gold set changed"), ("model_changed", "model changed"))
        return {r["run_id"]: " and ".join(name for key, name in names if r[key]) for r in rows}

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
        runs = [
            r
            for r in self.runs(experiment, "completed")
            if r["started_at"] >= start and not raced(r["settings"])  # a raced run scored part of the questions
        ]
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
