"""The command line: sweeps on the shared data, run files, and every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from chunkeval.cli import main
from chunkeval.engine.inputs.corpus import load_corpora
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.engine.pipeline.experiment import parse_overlap
from chunkeval.vocabulary import CONFIG_KEYS, INDEX_TIMES


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- sweep


def test_sweep_on_the_shared_data(chroma, tmp_path, capsys):
    out = tmp_path / "results.parquet"
    code, stdout, err = run_cli(
        capsys,
        "sweep",
        "--corpus-dir",
        chroma / "corpora",
        "--questions",
        chroma / "questions_df.csv",
        "--corpus",
        "state_of_the_union",
        "--chunker",
        "fixed_token",
        "--chunk-sizes",
        "100,250",
        "--overlaps",
        "0,10%",
        "--k",
        "1,5",
        "--out",
        out,
    )
    assert code == 0, err
    summary = pq.read_table(out)
    assert summary.column_names[: len(CONFIG_KEYS)] == CONFIG_KEYS  # the configuration first, in its order
    assert set(summary["model"].to_pylist()) == {"all-MiniLM-L6-v2"} and set(summary["retriever"].to_pylist()) == {
        "dense"
    }
    assert sorted(set(zip(summary["chunk_size"].to_pylist(), summary["chunk_overlap"].to_pylist()))) == [
        (100, 0),
        (100, 10),
        (250, 0),
        (250, 25),
    ]
    assert summary.num_rows == 8
    for metric in (
        "span_precision",
        "span_recall",
        "span_f1",
        "span_iou",
        "precision_omega",
        "precision",
        "recall",
        "f1",
        "precision_at_k",
        "recall_at_k",
        "hit_rate",
        "mrr",
        "map",
        "ndcg_at_k",
    ):
        for suffix in ("_mean", "_std"):
            values = np.asarray(summary[metric + suffix].to_pylist(), dtype=float)
            assert np.all((values >= 0) & (values <= 1)), metric + suffix
    per_query = pq.read_table(tmp_path / "results.per_query.parquet")
    assert per_query.num_rows == 8 * 76
    # the summary's macro and micro figures are those of the per-query table
    rows = [r for r in per_query.to_pylist() if r["chunk_size"] == 250 and r["chunk_overlap"] == 25 and r["k"] == 5]
    s = next(r for r in summary.to_pylist() if r["chunk_size"] == 250 and r["chunk_overlap"] == 25 and r["k"] == 5)
    recall = [r["span_recall"] for r in rows]
    assert s["span_recall_mean"] == pytest.approx(np.mean(recall))
    assert s["span_recall_std"] == pytest.approx(np.std(recall, ddof=1))
    assert s["span_precision_micro"] == pytest.approx(
        sum(r["covered"] for r in rows) / sum(r["retrieved_chars"] for r in rows)
    )
    # real model, real data: 5 chunks of 250 tokens find most of each answer
    assert s["span_recall_mean"] > 0.8
    assert s["truncated_chunks"] > 0  # 250 cl100k tokens exceed 256 word pieces for most chunks
    by_corpus = pq.read_table(tmp_path / "results.by_corpus.parquet")
    assert set(by_corpus["corpus_id"].to_pylist()) == {"state_of_the_union"}
    assert "span_recall" in stdout and "embedded" in stdout


def test_second_sweep_embeds_nothing(chroma, tmp_path, capsys):
    args = [
        "sweep",
        "--corpus-dir",
        chroma / "corpora",
        "--questions",
        chroma / "questions_df.csv",
        "--corpus",
        "chatlogs",
        "--chunk-sizes",
        "200",
        "--overlaps",
        "0",
        "--k",
        "3",
    ]
    assert run_cli(capsys, *args, "--out", tmp_path / "a.csv")[0] == 0
    code, stdout, _ = run_cli(capsys, *args, "--out", tmp_path / "b.csv")
    assert code == 0 and "\n0 text(s) embedded" in stdout
    # the same numbers; only the measured times of the search may differ between two runs
    a, b = (pacsv.read_csv(tmp_path / name).drop_columns(list(INDEX_TIMES)) for name in ("a.csv", "b.csv"))
    assert a.equals(b)


def test_overlap_percentages_round_down():
    assert parse_overlap("10%", 250) == 25 and parse_overlap("50%", 101) == 50 and parse_overlap("12", 100) == 12


def test_reference_with_stale_offsets_is_reanchored(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "doc.md").write_text("Intro. The answer is forty-two. Outro.", encoding="utf-8")
    q = tmp_path / "q.csv"
    q.write_text(
        'question,references,corpus_id\nWhat?,"[{""content"": ""The answer is forty-two."", ""start_index"": 0, ""end_index"": 24}]",doc\n'
    )
    gold = load_span_gold(q, load_corpora(corpus))
    assert (gold.ref_start[0], gold.ref_end[0]) == (7, 31) and gold.reanchored == 1
    assert gold.anchoring[0]["status"] == "reanchored"  # said once, by whoever reads it for the run (docs/gold.md)


# --------------------------------------------------------------------------- evaluate-run


def test_evaluate_run_chunk_ids_json(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(
        'query_id,query,relevant_chunk_ids\n1,q one,"[""A"", ""B""]"\n2,q two,"{""D"": 2, ""X"": 0}"\n3,q three,"[""E"", ""F"", ""G""]"\n'
    )
    run = tmp_path / "run.jsonl"
    run.write_text(
        '{"query_id": 1, "retrieved_chunk_ids": ["A", "C"]}\n{"query_id": "2", "retrieved_chunk_ids": ["D"]}\n'
        '{"query_id": "3", "retrieved_chunk_ids": ["F", "H", "I"]}\n'
    )
    code, stdout, err = run_cli(
        capsys, "evaluate-run", "--gold", gold, "--run", run, "--k", "3", "--json", "--per-query"
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert round(doc["macro"]["precision"], 3) == 0.611 and doc["micro"]["recall"] == pytest.approx(0.5)
    assert [r["query_id"] for r in doc["per_query"]] == ["1", "2", "3"]
    assert set(doc["per_query"][0]) >= {
        "query_id",
        "precision",
        "recall",
        "f1",
        "mrr",
        "map",
        "ndcg_at_k",
        "precision_at_k",
    }


def test_evaluate_run_string_lists(tmp_path, capsys):
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"query_id": "q", "reference": ["alpha", "beta", "gamma"]}\n')
    run = tmp_path / "run.jsonl"
    run.write_text('{"query_id": "q", "hypothesis": ["alpha", "nope", "beta", "Gamma", "gamma"]}\n')
    code, stdout, _ = run_cli(capsys, "evaluate-run", "--gold", gold, "--run", run, "--k", "5", "--json")
    assert code == 0
    assert json.loads(stdout)["macro"]["precision_at_k"] == pytest.approx(0.6)
    code, stdout, _ = run_cli(capsys, "evaluate-run", "--gold", gold, "--run", run, "--k", "5", "--per-query")
    assert code == 0 and "micro" in stdout and "precision_at_k" in stdout


# --------------------------------------------------------------------------- bad input (the whole catalogue: test_catalogue.py)


@pytest.fixture()
def good(tmp_path):
    corpus = tmp_path / "corpora"
    corpus.mkdir()
    (corpus / "doc.md").write_text("Alpha beta gamma. Delta epsilon zeta. " * 20, encoding="utf-8")
    q = tmp_path / "q.csv"
    q.write_text(
        'question,references,corpus_id\nWhat?,"[{""content"": ""Delta epsilon"", ""start_index"": 18, ""end_index"": 31}]",doc\n'
    )
    return corpus, q


def test_error_names_file_and_row(good, tmp_path, capsys):
    corpus, _ = good
    q = tmp_path / "rows.csv"
    q.write_text(
        'question,references,corpus_id\nOk?,"[{""content"": ""Delta epsilon"", ""start_index"": 18, ""end_index"": 31}]",doc\n'
        'Bad?,"[{""content"": ""missing text"", ""start_index"": 0, ""end_index"": 12}]",doc\n'
    )
    args = ("sweep", "--corpus-dir", corpus, "--questions", q, "--out", tmp_path / "o.csv")
    code, _, err = run_cli(capsys, *args, "--strict")  # strict: a question that had to be retired is an error
    assert code == 2 and f"{q}: row 2:" in err and "content not found" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, *args)  # else it is retired from the run, which goes on, and said once
    assert code == 0 and "1 retired" in err and "(row 2)" in err


def test_run_file_naming_an_unknown_query(tmp_path, capsys):
    gold = tmp_path / "g.jsonl"
    gold.write_text('{"query_id": "a", "query": "x", "relevant_chunk_ids": ["c1"]}\n')
    run = tmp_path / "r.jsonl"
    run.write_text(
        '{"query_id": "a", "retrieved_chunk_ids": ["c1"]}\n{"query_id": "zz", "retrieved_chunk_ids": ["c1"]}\n'
    )
    code, _, err = run_cli(capsys, "evaluate-run", "--gold", gold, "--run", run)
    assert code == 2 and "r.jsonl: row 2: query_id 'zz' is not in the gold set" in err
    run.write_text('{"query_id": "a", "retrieved_chunk_ids": ["c1"\n')
    code, _, err = run_cli(capsys, "evaluate-run", "--gold", gold, "--run", run)
    assert code == 2 and "row 1: broken JSON" in err


def test_bad_output_suffix_fails_before_any_work(good, tmp_path, capsys):
    corpus, q = good
    code, _, err = run_cli(capsys, "sweep", "--corpus-dir", corpus, "--questions", q, "--out", tmp_path / "o.txt")
    assert code == 2 and ".csv or .parquet" in err


def test_the_installed_command_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "chunkeval.cli",
            "evaluate-run",
            "--gold",
            tmp_path / "none.csv",
            "--run",
            tmp_path / "r.csv",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "file not found" in proc.stderr and "Traceback" not in proc.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "chunkeval.cli", "sweep", "--help"], capture_output=True, text=True
    ).stdout
    for flag in (
        "--corpus-dir",
        "--questions",
        "--chunker",
        "--chunk-sizes",
        "--overlaps",
        "--k",
        "--out",
        "--own-corpus",
    ):
        assert flag in help_text


def in_a_terminal(argv: list, cwd, env: dict, timeout: float = 300) -> tuple[int, str]:
    """Run a command in a real pseudo-terminal (stdout and stderr one terminal, as a person's): its exit status
    and everything it drew."""
    import os
    import pty

    main_fd, terminal = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    said = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the terminal closed: the command has ended
            break
        if not chunk:
            break
        said += chunk
    os.close(main_fd)
    return proc.wait(timeout=timeout), said.decode()


@pytest.mark.slow  # a real run, with its temporary Prefect server
def test_a_run_on_a_terminal_shows_chunkevals_lines_alone(tmp_path):
    """A new user's first run on a terminal (issue 52): every bar is ended before the next line, and Prefect's
    first-run telemetry notice is not shown (chunkeval's temporary server already sends nothing: the client is told
    so too, DO_NOT_TRACK)."""
    import os

    argv = [sys.executable, "-m", "chunkeval.cli", "run", "--experiment", "tty", "--retriever", "bm25", "--k", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "DO_NOT_TRACK"}
    env.update(CHUNKEVAL_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "prefect"))
    code, said = in_a_terminal(argv, tmp_path, env)
    assert code == 0, said
    assert "anonymous usage" not in said and "telemetry" not in said, said
    drawn = said.replace("\r\n", "\n")
    assert "…\r" in drawn or "]\r" in drawn or "\rchunking" in drawn, drawn  # bars were drawn in place
    for line in drawn.split("\n"):  # what a bar left on a line is a bar: no message glued after it
        last = line.rsplit("\r", 1)[-1]
        assert not ("\r" in line and ("chunkeval:" in last or last.startswith("experiment "))), repr(line)


def test_a_terminal_reads_an_error_within_120_columns_a_log_gets_it_as_one_line(tmp_path):
    """Bad input ends in one line, and no line a person reads is longer than 120 columns (issue 42): on a terminal
    the message is folded, its words going on indented; off one (a log, a pipe, a scheduler) it is the one line,
    word for word the same text. Run in a real pseudo-terminal."""
    import os

    (tmp_path / "exp.yaml").write_text("name: x\nmodels:\n  team: {batch: 1, base_url: 'http://127.0.0.1:9'}\n")
    argv = [sys.executable, "-m", "chunkeval.cli", "run", "exp.yaml"]
    env = {**os.environ, "CHUNKEVAL_HOME": str(tmp_path / "home")}
    piped = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert piped.returncode == 2 and len(piped.stderr.splitlines()) == 1, piped.stderr
    line = piped.stderr.strip()
    assert "unknown key(s) batch" in line and len(line) > 160, line
    code, said = in_a_terminal(argv, tmp_path, env)
    assert code == 2
    lines = said.replace("\r\n", "\n").strip().splitlines()
    assert len(lines) > 1 and all(len(row) <= 120 for row in lines), lines
    assert all(row.startswith("  ") for row in lines[1:])
    assert " ".join(row.strip() for row in lines) == line


def test_a_sweeps_files_name_each_configuration_as_it_printed_it(tmp_path, capsys):
    """The summary and per-query files of `sweep` carry each row's label and config_id (issue 42: one face), the ones
    its table printed, computed by the warehouse's own expressions and equal to Python's `config_label`."""
    from chunkeval.paths import DEMO_DIR
    from chunkeval.vocabulary import config_id, config_label

    out = tmp_path / "r.parquet"
    argv = ["sweep", "--corpus-dir", DEMO_DIR / "corpora", "--questions", DEMO_DIR / "questions.csv"]
    code, stdout, _ = run_cli(
        capsys, *argv, "--retriever", "bm25", "--chunk-sizes", "100,200", "--k", "1,5", "--out", out
    )
    assert code == 0
    for table in (pq.read_table(out), pq.read_table(tmp_path / "r.per_query.parquet")):
        rows = table.to_pylist()
        assert [r["label"] for r in rows] == [config_label(r) for r in rows]
        assert [r["config_id"] for r in rows] == [config_id(r) for r in rows]
        assert table.column_names.index("label") == table.column_names.index("k") + 1
    printed = {tuple(line.split()[:2]) for line in stdout.splitlines() if line.startswith("bm25")}
    assert printed == {(r["label"], r["config_id"]) for r in pq.read_table(out).to_pylist()}


def test_a_progress_bar_is_ended_before_any_other_line():
    """On a terminal a bar is redrawn in place (`\\r`); a notice or a table printed while it is open starts on a line
    of its own (issue 52: `…29528/29528    84 schunkeval: backend auto: probing torch…`), on stderr and stdout alike
    (one terminal); off a terminal nothing is added."""
    import io

    from chunkeval.cli.output import Visible

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    err, out = Visible(screen, fold=True), Visible(screen)
    err.write("\rbuilding [####....] 1/2")
    err.write("\rbuilding [########] 2/2")
    err.write("chunkeval: backend auto: probing torch…\n")
    err.write("\rembedding [########] 2/2")
    out.write("experiment demo: run x completed")
    out.write("\n")
    err.write("\rscoring…")
    err.write("\n")  # the bar's own end: no second line break
    out.write("done\n")
    assert screen.getvalue() == (
        "\rbuilding [####....] 1/2\rbuilding [########] 2/2\nchunkeval: backend auto: probing torch…\n"
        "\rembedding [########] 2/2\nexperiment demo: run x completed\n\rscoring…\ndone\n"
    )
    Visible.open_line[0] = False
    log = io.StringIO()
    Visible(log).write("\rbar 1/2")
    Visible(log).write("next\n")
    assert log.getvalue() == "\rbar 1/2next\n"  # off a terminal: never a bar drawn, nothing added
    Visible.open_line[0] = False
