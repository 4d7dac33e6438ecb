"""A gold set too small for a paired comparison (issue 55): a run of one question, over two configurations or
raced, is recorded, and its command exits 0 with its summary table printed; what the comparisons cannot tell
with one question (the ties with the best) is a notice after the table, never the command's failure. Asked for
by name (`chunkeval compare`), the same comparison stays bad input: one line, exit 2."""

from __future__ import annotations

import pytest

from chunkeval.cli import main
from chunkeval.paths import DEMO_DIR
from chunkeval.warehouse import Warehouse

NOTICE = "no tie with the best was tested: 1 question(s) paired, and a paired comparison needs at least 2"


@pytest.fixture
def one_question(tmp_path, monkeypatch) -> list[str]:
    """The demo's corpus with the first of its questions: bm25 (no model) at two chunk sizes."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    lines = (DEMO_DIR / "questions.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    gold = tmp_path / "one.csv"
    gold.write_text("".join(lines[:2]), encoding="utf-8")
    return ["--corpus-dir", str(DEMO_DIR / "corpora"), "--questions", str(gold), "--retriever", "bm25",
            "--chunker", "fixed_token", "--chunk-sizes", "100,200"]  # fmt: skip


def said_after_the_table(out: str) -> None:
    """The summary table is printed, and the notice comes after it."""
    flat = " ".join(out.split())  # the notice is folded within 120 columns on a terminal
    assert "config_id" in flat and "bm25/size=100" in flat, out
    assert NOTICE in flat and flat.index("config_id") < flat.index(NOTICE), out


@pytest.mark.parametrize("race", [False, True], ids=["two-configurations", "raced"])
def test_a_run_of_one_question_is_recorded_and_its_table_printed(one_question, race, prefect_api, capsys):
    argv = ["run", "--experiment", "tiny", *one_question, *(["--race"] if race else [])]
    assert main(argv) == 0
    captured = capsys.readouterr()
    said_after_the_table(captured.out)
    assert "error" not in captured.err, captured.err
    run = Warehouse.at_home().last_completed("tiny")
    assert run is not None and run["status"] == "completed"
    assert main(["report", "--experiment", "tiny"]) == 0  # the report of the recorded run says the same
    said_after_the_table(capsys.readouterr().out)


def test_a_sweep_of_one_question_prints_its_table(one_question, tmp_path, capsys):
    assert main(["sweep", *one_question, "--out", str(tmp_path / "sweep.csv")]) == 0
    said_after_the_table(capsys.readouterr().out)


def test_a_comparison_asked_for_by_name_stays_bad_input(one_question, prefect_api, capsys):
    assert main(["run", "--experiment", "tiny", *one_question]) == 0
    capsys.readouterr()
    assert main(["compare", "--experiment", "tiny", "--metric", "mrr"]) == 2
    assert "a paired comparison needs at least 2" in capsys.readouterr().err
