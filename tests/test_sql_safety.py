"""`chunkeval sql` is read-only by DuckDB's own settings (no file read or written but the catalogue's, no
extension installed or loaded, settings locked): every documented view answers, and no statement, written
by hand or generated, changes a file of the warehouse or writes one anywhere. A time limit, SIGINT and
SIGTERM stop a query at once, and rows stream out up to a cap in bounded memory. Real DuckDB, real
processes, a real run of the demo."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

DOCS = Path(__file__).resolve().parents[1] / "docs" / "warehouse.md"
ENDLESS = "SELECT count(*) FROM range(9223372036854775807) t(i) WHERE i % 7 = 3"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, embedder_factory):
    """A home whose warehouse holds one completed run (a real sweep of the demo), and a folder outside it."""
    home = tmp_path_factory.mktemp("sql_home")
    exp = Experiment(name="safe", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    result = run_sweep(exp, embedder_factory())
    wh = Warehouse(home / "warehouse")
    run_id = wh.begin_run("safe", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(result.per_query, result.summary, texts_embedded=result.texts_embedded, references=result.references),
    )
    return home, run_id, tmp_path_factory.mktemp("sql_elsewhere")


@pytest.fixture()
def home(recorded, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(recorded[0]))
    monkeypatch.setenv("CHUNKEVAL_LOCK_TIMEOUT", "5")
    return recorded


def hashes(*roots: Path) -> dict:
    """Every file under the roots and the SHA-256 of its bytes (the catalogue file's included)."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for root in roots for p in root.rglob("*") if p.is_file()
    }


def sql(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["sql", *argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def documented_views() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Views") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^- \*\*(\w+)\*\*", section, re.M)


def test_every_documented_view_answers_with_what_the_files_hold(home):
    root, run_id, _ = home
    views = documented_views()
    assert {"query_results", "gold_references", "run_models", "config_summary", "trend"} <= set(views)
    counts = {}
    for view in ["runs", *views]:
        code, out, err = sql(f"SELECT count(*) AS n FROM {view}", "--json")
        assert code == 0, (view, err)
        counts[view] = json.loads(out)[0]["n"]
    files = root / "warehouse" / "results" / run_id
    assert counts["query_results"] == pq.read_metadata(files / "per_query.parquet").num_rows > 0
    assert counts["gold_references"] == pq.read_metadata(files / "references.parquet").num_rows > 0
    assert counts["runs"] == 1 and counts["config_summary"] > 0 and counts["trend"] > 0
    code, out, _ = sql("SELECT q.query_id, r.question FROM query_results q JOIN gold_references r USING (query_id)")
    assert code == 0 and "row(s))" in out


def attacks(run_id: str, elsewhere: Path) -> list[str]:
    per_query = f"results/{run_id}/per_query.parquet"
    targets = [per_query, "chunkeval.duckdb", f"results/{run_id}/new.csv", str(elsewhere / "out.csv")]
    statements = []
    for target in targets:
        path = target if target.startswith("/") else f"{{warehouse}}/{target}"
        statements += [
            f"COPY (SELECT 1 AS a) TO '{path}'",
            f"EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{path}' (FORMAT parquet)",
            f"ATTACH '{path}' AS x",
            f"EXPORT DATABASE '{path}.d'",
        ]
    return [
        *statements,
        "EXPLAIN ANALYZE INSTALL httpfs",
        "INSTALL httpfs",
        "LOAD httpfs",
        f"LOAD '{elsewhere}/x.duckdb_extension'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_parquet('{warehouse}/" + per_query + "')",
        "SET enable_external_access = true",
        f"SET temp_directory = '{elsewhere}'",
        "PRAGMA enable_profiling",
        "CREATE TABLE t AS SELECT 1",
        "CHECKPOINT",
    ]


def test_no_statement_writes_a_file_or_reads_one_outside(home):
    root, run_id, elsewhere = home
    warehouse = root / "warehouse"
    before = hashes(root, elsewhere)
    for statement in attacks(run_id, elsewhere):
        code, out, err = sql(statement.replace("{warehouse}", str(warehouse)))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("chunkeval: error:"), (statement, err)
        assert "root:" not in out and "Traceback" not in err
    assert hashes(root, elsewhere) == before
    assert json.loads(sql("SELECT count(*) AS n FROM query_results", "--json")[1])[0]["n"] > 0


STATEMENTS = st.sampled_from(
    [
        "COPY (SELECT * FROM {view}) TO '{path}'",
        "COPY {view} TO '{path}' (FORMAT parquet)",
        "COPY runs FROM '{path}'",
        "ATTACH '{path}' AS x",
        "ATTACH '{path}' AS x (READ_ONLY)",
        "INSTALL '{path}'",
        "LOAD '{path}'",
        "EXPORT DATABASE '{path}'",
        "IMPORT DATABASE '{path}'",
        "SELECT * FROM read_csv('{path}')",
        "SELECT * FROM read_parquet('{path}')",
        "SELECT * FROM read_blob('{path}')",
        "SELECT * FROM glob('{path}')",
        "SELECT * FROM '{path}'",
        "SET temp_directory = '{path}'",
        "SET profiling_output = '{path}'",
        "PRAGMA enable_profiling",
        "PRAGMA memory_limit = '1MB'",
        "CREATE TABLE t AS SELECT * FROM {view}",
        "INSERT INTO runs SELECT * FROM runs",
        "DELETE FROM {view}",
        "CHECKPOINT",
        "VACUUM",
        "DROP VIEW {view}",
        "SELECT count(*) FROM {view}",
        "SELECT * FROM {view} LIMIT 3",
    ]
)
VIEWS = st.sampled_from(["runs", "query_results", "gold_references", "run_models", "config_summary", "trend"])
PREFIXES = st.sampled_from(["", "EXPLAIN ", "EXPLAIN ANALYZE ", "WITH w AS (SELECT 1) "])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statement=STATEMENTS, view=VIEWS, prefix=PREFIXES, target=st.integers(0, 5))
def test_generated_statements_change_no_file(home, statement, view, prefix, target):
    root, run_id, elsewhere = home
    warehouse = root / "warehouse"
    paths = [
        warehouse / "results" / run_id / "per_query.parquet",
        warehouse / "results" / run_id / "manifest.json",
        warehouse / "chunkeval.duckdb",
        warehouse / "results" / "new.parquet",
        elsewhere / "generated.csv",
        Path("/etc/passwd"),
    ]
    before = hashes(root, elsewhere)
    code, out, err = sql(prefix + statement.format(view=view, path=paths[target]))
    assert code in (0, 2), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("chunkeval: error:"), err
    assert "Traceback" not in err and "root:x:0:0" not in out
    assert hashes(root, elsewhere) == before


def test_the_limit_cuts_with_a_note_and_the_formats_stay(home):
    code, out, err = sql("SELECT i FROM range(25000) t(i)", "--csv")
    assert code == 0 and out.splitlines()[0] == "i" and len(out.splitlines()) == 1 + 10_000
    assert err.strip() == "chunkeval: note: the first 10000 rows are shown; the query has more (--limit N)"
    code, out, err = sql("SELECT i, 'a' || i AS s, NULL AS n FROM range(3) t(i)", "--json", "--limit", "3")
    assert code == 0 and err == ""
    expected = io.StringIO()
    with contextlib.redirect_stdout(expected):
        from chunkeval.cli.output import print_json

        print_json([{"i": i, "s": f"a{i}", "n": None} for i in range(3)])
    assert out == expected.getvalue()
    assert sql("SELECT 1 AS a WHERE false", "--json")[1] == "[]\n"
    code, out, err = sql("SELECT i FROM range(7) t(i)", "--limit", "5")
    assert code == 0 and "(5 row(s))" in out and "--limit N" in err


def test_a_query_past_its_time_limit_stops_and_lets_go(home):
    root = home[0]
    began = time.monotonic()
    code, _, err = sql(ENDLESS, "--timeout", "1")
    assert code == 2 and "the query ran past its time limit of 1 s (--timeout)" in err, err
    assert time.monotonic() - began < 15
    duckdb.connect(str(root / "warehouse" / "chunkeval.duckdb")).close()  # the lock is free: a writer gets in


def _ctrl_c_as_a_terminal_gives_it() -> None:
    """SIGINT at its default in the child, as a terminal's Ctrl-C finds it: an ignored SIGINT is inherited across
    exec, and a test worker where some library set it ignored made the command ignore the test's signal (twice
    on a clean clone's CI, never alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def chunkeval(*argv: str, **options) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "chunkeval.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_a_terminal_gives_it,
        **options,
    )


def wait_held(db: Path, process: subprocess.Popen, seconds: float = 60) -> None:
    """Until `process` has the catalogue file open (read from /proc: a probe that opened the file itself would
    hold the lock for a moment, and the command would say it waited for it)."""
    deadline = time.monotonic() + seconds
    fds = Path(f"/proc/{process.pid}/fd")
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if any(os.readlink(fd) == str(db) for fd in fds.iterdir()):
                return
        except OSError:  # a descriptor closed while it was read
            pass
        time.sleep(0.1)
    raise AssertionError(f"the query never held the warehouse: {process.communicate()}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_signal_stops_the_query_within_a_second_in_one_line(home, signum, code, word):
    db = home[0] / "warehouse" / "chunkeval.duckdb"
    process = chunkeval("sql", ENDLESS, "--timeout", "600")
    try:
        wait_held(db, process)
        time.sleep(0.3)  # well inside the query
        sent = time.monotonic()
        process.send_signal(signum)
        _, err = process.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == code and err.strip() == f"chunkeval: {word}", err
    assert took < 1.5, took
    duckdb.connect(str(db)).close()


REPORTS_PEAK = (  # VmHWM, the peak resident memory of this program (ru_maxrss would count the parent's, from before exec)
    "import re, sys; from chunkeval.cli import main; code = main(sys.argv[1:]); "
    "peak = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read())[1]; "
    "print('peak', int(peak) // 1024, file=sys.stderr); sys.exit(code)"
)


@pytest.mark.slow
def test_wide_rows_stream_out_in_bounded_memory(home):
    """50,000 rows of 10 KB (500 MB in all) written out as CSV, in a fraction of that memory (a list of the
    rows would take more than all of it)."""
    big = "SELECT i, repeat('x', 10000) AS s FROM range(50000) t(i)"
    with open(os.devnull, "w") as sink:
        process = subprocess.run(
            [sys.executable, "-c", REPORTS_PEAK, "sql", big, "--csv", "--limit", "50000"],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert process.returncode == 0 and process.stderr.startswith("peak "), process.stderr

    assert int(process.stderr.split()[1]) < 450, process.stderr
