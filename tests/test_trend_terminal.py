"""History a person can read: `trend` in a terminal shows the last 30 runs and counts the rest; the
regression check prints its verdict and the regressions, the table only with -v; --json gives the table's rows.
A real warehouse of 35 nights of one real sweep, the last one worse on mrr."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

NIGHTS = 35


@pytest.fixture(scope="module")
def nights(tmp_path_factory, embedder_factory):
    home = tmp_path_factory.mktemp("nights")
    exp = Experiment(name="night", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    result = run_sweep(exp, embedder_factory())
    worse = result.per_query.set_column(
        result.per_query.column_names.index("mrr"), "mrr", pa.array([0.0] * result.per_query.num_rows)
    )
    wh = Warehouse(home / "warehouse")
    first = datetime(2026, 1, 1, 2, 0)
    ids = []
    with wh.session():  # one connection for the 35 recordings
        for night in range(NIGHTS):
            run_id = wh.begin_run("night", {}, "schedule", exp.to_dict(), started_at=first + timedelta(days=night))
            per_query = worse if night == NIGHTS - 1 else result.per_query
            wh.complete_run(
                run_id,
                RunResult(
                    per_query,
                    result.summary,
                    texts_embedded=0,
                    references=result.references,
                    by_corpus=result.by_corpus,
                    retrieved=result.retrieved,
                    corpora=result.corpora,
                ),
            )
            ids.append(run_id)
    return home, ids


@pytest.fixture()
def night_home(nights, monkeypatch):
    home, ids = nights
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    return ids


def table_rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line[:8].isdigit()]


def test_a_terminal_shows_the_last_30_runs_and_counts_the_rest(night_home, capsys):
    assert main(["trend", "--experiment", "night", "--metric", "mrr"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert len(rows) == 30 and rows[-1].startswith(night_home[-1]) and rows[0].startswith(night_home[5])
    assert out.splitlines()[-1] == "(5 earlier completed run(s) not shown: --last N or --all shows them)"
    assert main(["trend", "--experiment", "night", "--metric", "mrr", "--last", "3"]) == 0
    out = capsys.readouterr().out
    assert len(table_rows(out)) == 3 and "(32 earlier completed run(s) not shown" in out
    assert main(["trend", "--experiment", "night", "--metric", "mrr", "--all"]) == 0
    out = capsys.readouterr().out
    assert len(table_rows(out)) == NIGHTS and "not shown" not in out


def test_json_shows_the_runs_a_terminal_shows_and_is_one_document(night_home, capsys):
    """JSON rows are those of the table: the last 30 runs (the rest counted on stderr), --last N, or --all."""
    assert main(["trend", "--experiment", "night", "--metric", "mrr", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert [r["run_id"] for r in rows] == night_home[5:]
    assert err.splitlines()[-1] == "(5 earlier completed run(s) not shown: --last N or --all shows them)"
    assert set(rows[0]) >= {"run_id", "started_at", "value", "change", "ci_low", "ci_high", "k", "chunker"}
    assert rows[0]["started_at"] == "2026-01-06T02:00:00Z" and rows[0]["change"] == 0.0  # against night 5
    assert main(["trend", "--experiment", "night", "--metric", "mrr", "--json", "--all"]) == 0
    out, err = capsys.readouterr()
    assert [r["run_id"] for r in json.loads(out)] == night_home and "not shown" not in err
    assert json.loads(out)[0]["started_at"] == "2026-01-01T02:00:00Z" and json.loads(out)[0]["change"] is None
    assert main(["trend", "--experiment", "night", "--metrics", "mrr,span_recall", "--json", "--last", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["metric"], r["run_id"]) for r in rows] == [
        (m, i) for m in ("mrr", "span_recall") for i in night_home[-2:]
    ]


def test_the_regression_check_prints_its_verdict_and_the_table_only_with_v(night_home, capsys):
    argv = ["trend", "--experiment", "night", "--metric", "mrr", "--fail-on-regression"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    page = (
        Path(os.environ["CHUNKEVAL_HOME"])
        / "warehouse"
        / "reports"
        / "night"
        / f"diff-{night_home[-2]}-{night_home[-1]}.html"
    )
    from chunkeval.report.terminal import fold

    assert captured.out.splitlines() == [
        *fold(
            f"REGRESSION: mrr fell in 1 check(s), run {night_home[-1]} against {night_home[-2]} "
            "(step-down max-T over 1 check(s), 10,000 sign flips; 1 configuration(s), up to 28 paired question(s))"
        ).splitlines(),
        f"diff: {page}",
    ]
    assert max(map(len, captured.out.splitlines()[:-1])) <= 120  # the verdict folds (issue 42); a path cannot
    assert "<mark>" in page.read_text(encoding="utf-8")  # the questions that got worse, what they retrieved
    from chunkeval.report.html import build_report

    assert f'<a href="{page.as_uri()}">the diff of run' in build_report(
        Warehouse.at_home(), "night"
    )  # the report links it
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chunkeval: regression: mrr of ") and "lost most:" in err[0]
    assert main(["-v", *argv]) == 1
    assert len(table_rows(capsys.readouterr().out)) == 30
    assert main([*argv, "--threshold", "1"]) == 0
    assert capsys.readouterr().out.startswith(
        f"no regression of mrr larger than 1 (the threshold) in run {night_home[-1]}"
    )
    assert main([*argv, "--baseline", night_home[0], "--json"]) == 1  # JSON stays one document on stdout
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)) == 30 and captured.err.startswith("(5 earlier completed run(s) not shown")
    assert "\nREGRESSION: mrr fell" in captured.err
