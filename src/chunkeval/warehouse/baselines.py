"""What a run is measured against: the baseline pinned per experiment (catalogue row and pin file), the
reference run a regression check uses, and the comparisons of recorded runs. The warehouse finds the runs
and reads their rows; the rules are `chunkeval.analysis.regression`'s."""

from __future__ import annotations

import copy
import json

from chunkeval.analysis import regression as P
from chunkeval.errors import Fault, InputError, NothingComparable
from chunkeval.stats.power import DETECT_FALL
from chunkeval.vocabulary import CONFIG_KEYS, RUN_SETTINGS
from chunkeval.warehouse.damage import DamagedResults
from chunkeval.warehouse.results import RunFiles
from chunkeval.warehouse.tables import DUPLICATES_SQL, RACED_SQL, run_setting_sql, run_settings_sql, utc_now

# verdicts of pairs of runs already made in this process, by (warehouse, runs, settings): a completed run's results do
# not change, so the verdict `chunkeval run` tells after its report wrote it is the report's (0.5 s of a warm demo run)
_VERDICTS: dict[tuple, dict] = {}
VERDICTS_KEPT = 4


class Baselines(RunFiles):
    """Pins, reference runs, comparisons and regressions of recorded runs."""

    def pin_baseline(self, experiment: str, run_id: str) -> None:
        run = self.run(run_id)
        if run["status"] != "completed" or run["experiment"] != experiment:
            raise InputError(f"run {run_id!r} is not a completed run of experiment {experiment!r}")
        if self.raced(run_id):  # the gate never compares a raced run: pinned, every verdict would be refused
            raise InputError(f"run {run_id} was raced (race: true), scored on part of the questions: a baseline is a "
                             "full run (chunkeval runs lists them)")  # fmt: skip
        pin = {"experiment": experiment, "run_id": run_id, "pinned_at": utc_now()}
        self._write_pin(pin)
        with self.connect() as con:
            con.execute("DELETE FROM baselines WHERE experiment = ?", [experiment])
            con.execute("INSERT INTO baselines VALUES (?, ?, ?)", [experiment, run_id, pin["pinned_at"]])

    def baseline(self, experiment: str) -> str | None:
        rows = self._dicts("SELECT run_id FROM baselines WHERE experiment = ?", [experiment])
        return rows[0]["run_id"] if rows else None

    def duplicates(self, run_id: str) -> str:
        """The `duplicates` setting a run was scored with (`positional` for runs recorded before it existed)."""
        return self._dicts(f"SELECT {DUPLICATES_SQL.format(t='')} AS d FROM runs WHERE run_id = ?", [run_id])[0]["d"]

    def run_settings_of(self, run_id: str) -> dict[str, str]:
        """The run settings a run was scored with (`chunkeval.vocabulary.RUN_SETTINGS`), older runs' defaults
        filled in."""
        columns = ", ".join(f"{run_setting_sql(name)} AS {name}" for name in RUN_SETTINGS)
        return self._dicts(f"SELECT {columns} FROM runs WHERE run_id = ?", [run_id])[0]

    def raced(self, run_id: str) -> bool:
        """Whether the run was raced (`chunkeval run --race`: configurations scored on part of the questions)."""
        return bool(self._dicts(f"SELECT {RACED_SQL.format(t='')} AS r FROM runs WHERE run_id = ?", [run_id])[0]["r"])

    def _completed(self, experiment: str, raced: bool, since=None, limit: int | None = None) -> list[str]:
        """The experiment's completed runs, raced or not, started at `since` or later, newest first: one query,
        however long the history."""
        where = f"experiment = ? AND status = 'completed' AND {'' if raced else 'NOT '}{RACED_SQL.format(t='')}"
        params = [experiment] + ([since] if since is not None else [])
        rows = self._dicts(
            f"SELECT run_id FROM runs WHERE {where}{' AND started_at >= ?' if since is not None else ''} "
            f"ORDER BY started_at DESC, run_id DESC{f' LIMIT {int(limit)}' if limit else ''}",
            params,
        )
        return [r["run_id"] for r in rows]

    def check_comparable(self, run_a: str, run_b: str) -> None:
        """Runs scored with different run settings are never compared, nor a raced run by the gate."""
        P.check_same_scoring(run_a, self.run_settings_of(run_a), run_b, self.run_settings_of(run_b))
        for run in (run_a, run_b):
            if self.raced(run):
                raise InputError(
                    f"run {run} was raced (race: true): the configurations it dropped were scored on the questions "
                    "before their drop, which the race chose, and a regression is judged between runs scored on "
                    "every question; compare full runs"
                )

    def reference_run(self, experiment: str, run_id: str) -> str | None:
        """What a run of the experiment is checked against: the pinned baseline, else the previous
        completed run scored with the same run settings."""
        pinned = self.baseline(experiment)
        if pinned is not None:
            return pinned
        rows = self._dicts(
            f"SELECT run_id FROM runs WHERE experiment = ? AND status = 'completed' AND run_id <> ? "
            f"AND {run_settings_sql()} = (SELECT {run_settings_sql()} FROM runs WHERE run_id = ?) "
            f"AND NOT {RACED_SQL.format(t='')} "
            "AND started_at <= (SELECT started_at FROM runs WHERE run_id = ?) "
            "ORDER BY started_at DESC, run_id DESC LIMIT 1",
            [experiment, run_id, run_id, run_id],
        )
        return rows[0]["run_id"] if rows else None

    def compare(
        self,
        metric: str,
        run_ids: list[str] | tuple = (),
        experiment: str | None = None,
        config: dict | None = None,
        all_pairs: bool = False,
        alpha: float = 0.05,
    ) -> list[dict]:
        """`chunkeval compare` over recorded runs: one run's configurations against its best (or every
        pair), or the configurations two runs of one experiment share, queries paired by query_id.
        Without a run, the experiment's last completed run. The rules: `chunkeval.analysis.regression`."""
        P.check_request(metric, alpha)
        if experiment:
            self.check_experiment(experiment)
        runs = [self.run(r) for r in run_ids]
        if not runs:
            if not experiment:
                raise InputError("compare takes one or two run ids, or an experiment for its last completed run")
            last = self.last_completed(experiment)
            if last is None:
                raise InputError(f"experiment {experiment!r} has no completed run")
            runs = [last]
        P.check_runs(runs, experiment)
        if len(runs) == 2:
            self.check_comparable(runs[0]["run_id"], runs[1]["run_id"])
        ids = [r["run_id"] for r in runs]
        return P.compare_runs((self.query_results(r) for r in ids), ids, metric, config or {}, all_pairs, alpha)

    def verdict(
        self,
        experiment: str,
        metrics: list[str] | None = None,
        threshold: float = P.DEFAULT_THRESHOLD,
        baseline: str | None = None,
        alpha: float = 0.05,
        config: dict | None = None,
        in_slice: str | None = None,
    ) -> dict | None:
        """The one regression verdict (`chunkeval.analysis.regression.verdict`) of the experiment's newest
        completed run against the pinned (or given) baseline run, else the previous completed run scored the same
        way; None while there is no run to compare with. Quarantined runs are left out (`left_out` names them)."""
        full = self._completed(experiment, raced=False, limit=1)  # raced runs are left out, and named
        if not full:
            return None
        newest = full[0]
        pinned = baseline is None and self.baseline(experiment) is not None
        reference = baseline or self.reference_run(experiment, newest)
        if reference is None or reference == newest:
            return None
        found = self.verdict_of_runs(newest, reference, metrics, threshold, alpha, config, in_slice, pinned=pinned)
        since = self.run(reference)["started_at"]
        found["left_out"] = [
            {"run_id": r["run_id"], "why": r["error"]}
            for r in self.runs(experiment, "quarantined")
            if r["started_at"] >= since
        ] + self.raced_runs(experiment, since)
        return found

    def raced_runs(self, experiment: str, since=None) -> list[dict]:
        """The experiment's raced runs (since `since`), as the gate names what it leaves out."""
        why = "raced: scored on part of the questions (chunkeval run --race)"
        return [{"run_id": r, "why": why} for r in self._completed(experiment, raced=True, since=since)]

    def verdict_of_runs(
        self,
        newest: str,
        reference: str,
        metrics: list[str] | None = None,
        threshold: float = P.DEFAULT_THRESHOLD,
        alpha: float = 0.05,
        config: dict | None = None,
        in_slice: str | None = None,
        pinned: bool = False,
    ) -> dict:
        """The verdict of run `newest` against run `reference` (what `diff` asks of two runs it is given). A
        damaged (or quarantined) results file is a fault; of a `pinned` baseline, with how to pin another."""
        run = self.run(reference)
        if run["status"] == "quarantined":
            raise self._unreadable_baseline(run, run["error"], pinned)
        P.check_runs([self.run(newest), run], None)  # completed runs of one experiment
        self.check_comparable(newest, reference)
        metrics = list(P.REGRESSION_METRICS if metrics is None else metrics)
        files = tuple(self._stamp(r) for r in (newest, reference))  # a file damaged or replaced since: read again
        key = (str(self.root), newest, reference, files, tuple(metrics), threshold, alpha,
               json.dumps(config, sort_keys=True), in_slice, pinned)  # fmt: skip
        if key not in _VERDICTS:
            if len(_VERDICTS) >= VERDICTS_KEPT:
                _VERDICTS.pop(next(iter(_VERDICTS)))
            _VERDICTS[key] = self._verdict_of_runs(newest, reference, run, metrics, threshold, alpha, config, in_slice,
                                                   pinned)  # fmt: skip
        return copy.deepcopy(_VERDICTS[key])  # the caller's to extend (`verdict` adds what it left out)

    def _stamp(self, run_id: str) -> tuple:
        """The size and time of a run's per-question file (None where there is none)."""
        try:
            stat = self._file(run_id, "per_query").stat()
        except OSError:
            return (None,)
        return (stat.st_size, stat.st_mtime_ns, stat.st_ino)

    def _verdict_of_runs(self, newest, reference, run, metrics, threshold, alpha, config, in_slice, pinned) -> dict:
        columns = [*CONFIG_KEYS, "query_id", *metrics]
        try:
            before = self.run_columns(reference, "per_query", columns)
            questions = dict(self._question_texts(reference))
        except DamagedResults as exc:
            raise self._unreadable_baseline(run, str(exc), pinned) from None
        after = self.run_columns(newest, "per_query", columns)
        questions.update(self._question_texts(newest))
        slices = self.query_slices(newest)
        settings = json.loads(self.run(newest)["settings"] or "{}")  # the fall its run asked to see (`detect_fall`)
        return P.verdict(
            newest, reference, after, before, metrics, threshold, alpha, config, questions, slices, in_slice,
            detect_fall=float(settings.get("detect_fall", DETECT_FALL)),
        )  # fmt: skip

    @staticmethod
    def _unreadable_baseline(run: dict, why: str, pinned: bool) -> Fault:
        """The fault of a baseline whose results cannot be read; for a pinned one, how to pin another."""
        if not pinned:
            return Fault(f"the baseline run {run['run_id']} cannot be read: {why}")
        return Fault(
            f"the pinned baseline of experiment {run['experiment']!r}, run {run['run_id']}, cannot be read: {why}; "
            f"pin another with `chunkeval baseline --experiment {run['experiment']} --run <run-id>`"
        )

    def regressions(
        self, experiment: str, metrics: list[str], threshold: float, baseline: str | None = None, alpha: float = 0.05
    ) -> list[dict]:
        """The regressions of `verdict` ([] while there is no run to compare with); `NothingComparable` where
        the newest run and its baseline share no configuration or no paired question."""
        found = self.verdict(experiment, metrics, threshold, baseline, alpha)
        if found is None:
            return []
        if found["verdict"] == P.NOTHING_COMPARABLE:
            raise NothingComparable(found["reason"])
        return found["regressions"]
