"""What a user types to `chunkeval` does not change when the CLI's code moves: every command path keeps
its subcommands, positionals and options (flags, metavars, defaults, choices, types) as
tests/data/cli_options.json recorded them from the CLI before it was split into command modules. Added since, on
purpose: to run and sweep, `--plugin MODULE` (plug-ins run only when asked), `--yes` (a large grid runs without asking), `--precision` (how the model runs)
and `--html full|main` (the text of HTML documents); to `gold check`, `--html` and `--strict` (an unreadable
document is an error); the command `extract` (a corpus's text, one file per document, docs/formats.md); and,
with issue 20's slices of the gold set, `--slice-by COLUMNS` to run and sweep and `--slice COLUMN=VALUE` to trend;
with issue 29, `--anchor-similarity S` and `--ties trec_eval|retriever` to run and sweep (`--anchor-similarity` to
`gold check` too), the command `gold update`, `--threshold` and `--alpha` to diff (the one verdict), and trend's
`--metric` no longer required (without it, the watched metrics); with issue 32, `--metrics M1,M2` and `--wide` to run,
sweep and report; with issue 30, `--limit N` and `--timeout SECONDS`
to sql; with issue 40, the commands `alerts test` (a test message to each destination) and `backends` (backend auto's
kept choice), and `--qrels`, `--queries`, `--beir` and `--split` to `gold update` (document gold corrected too)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


def _maker():
    spec = importlib.util.spec_from_file_location("make_cli_options", DATA / "make_cli_options.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_keeps_its_options():
    from chunkeval.cli.main import build_parser

    recorded = json.loads((DATA / "cli_options.json").read_text(encoding="utf-8"))
    now = _maker().describe(build_parser())
    assert list(now) == list(recorded), "the same commands and subcommands, in the same order"
    for path, entry in recorded.items():
        assert now[path] == entry, path


def test_the_recorded_file_is_what_the_script_writes():
    maker = _maker()
    recorded = (DATA / "cli_options.json").read_text(encoding="utf-8")
    assert maker.dumps(json.loads(recorded)) == recorded


def test_every_command_module_says_how_it_reaches_the_warehouse():
    """One module per command, its options beside its handler, and an explicit WAREHOUSE_SESSION: the
    commands that only read the warehouse hold one connection for the whole command."""
    from chunkeval.cli.commands import command_modules

    sessions = {}
    for command in command_modules():
        assert callable(command.add_parser), command.__name__
        assert isinstance(command.WAREHOUSE_SESSION, bool), command.__name__
        sessions[command.__name__.rpartition(".")[2]] = command.WAREHOUSE_SESSION
    assert len(sessions) == 18  # 15, then alerts and backends (issue 40), traces (issue 43)
    assert {name for name, held in sessions.items() if held} == {
        "runs",
        "trend",
        "report",
        "inspect",
        "diff",
        "baseline",
        "compare",
    }


def test_flags_that_name_inputs_never_record_into_the_demo(tmp_path, monkeypatch, capsys):
    """`run --corpus-dir docs --questions gold.csv` without `--experiment` (issue 52) defines a new experiment named
    after the corpus folder, said in one notice; a folder whose name makes no name (or makes `demo`) asks for one."""
    import argparse

    from chunkeval.cli.commands.run import experiment_name
    from chunkeval.errors import InputError

    def args(**given):
        base = dict.fromkeys(("experiment", "corpus_dir", "beir", "questions", "qrels", "queries"))
        return argparse.Namespace(**{**base, **given})

    assert experiment_name(args()) == "demo" and experiment_name(args(experiment="nightly")) == "nightly"
    assert experiment_name(args(corpus_dir="work/docs/", questions="gold.csv")) == "docs"
    assert "recording as experiment 'docs', named after --corpus-dir work/docs" in capsys.readouterr().err
    assert experiment_name(args(questions="my gold.csv")) == "my-gold"
    for folder in ("demo", "..", "!!!"):
        with pytest.raises(InputError, match="--experiment NAME"):
            experiment_name(args(corpus_dir=folder))


def test_the_gate_meets_nothing_to_compare_with_one_status(tmp_path, monkeypatch, capsys):
    """'Nothing to compare' is exit 3 wherever the gate meets it (issue 52): in a fresh home for the demo (it was 2)
    and an experiment file not yet run; an experiment nobody defined is still bad input (2, a typo)."""
    from chunkeval.cli import main

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    assert main(["trend", "--experiment", "demo", "--fail-on-regression"]) == 3
    assert "experiment 'demo' has no recorded run yet: nothing to compare" in capsys.readouterr().err
    (tmp_path / "home" / "experiments").mkdir(parents=True)
    (tmp_path / "home" / "experiments" / "nightly.yaml").write_text("k: [5]\n")
    assert main(["trend", "--experiment", "nightly", "--fail-on-regression"]) == 3
    assert main(["trend", "--experiment", "nosuch", "--fail-on-regression"]) == 2
