"""Damaged files are detected and recovered, never used: a real embedding cache and a real DuckDB
catalogue, each damaged by the test the way a disk, a full volume or a stray command damages them."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkeval.cli import main
from chunkeval.engine.embedding import Embedder
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.vocabulary import INDEX_TIMES
from chunkeval.warehouse import Warehouse

TEXTS = [
    f"Sentence number {i} about {topic}."
    for i, topic in enumerate(
        [
            "rivers",
            "taxes",
            "music",
            "proteins",
            "elections",
            "glaciers",
            "poetry",
            "markets",
            "vaccines",
            "chess",
            "bridges",
            "tea",
        ]
    )
]


def parts(cache_root):
    return sorted(cache_root.glob("*/part-*.parquet"))


def test_damaged_cache_parts_are_set_aside_and_their_texts_embedded_again(tmp_path, caplog):
    root = tmp_path / "cache"
    first = Embedder(cache_dir=root, flush_every=3, part_seconds=0)  # four parts of three texts
    original, _ = first.embed(TEXTS)
    files = parts(root)
    assert len(files) == 4
    rows = [pq.read_table(p).num_rows for p in files]
    # four kinds of damage: cut short, not Parquet at all, vectors of the wrong width, wrong columns
    files[0].write_bytes(files[0].read_bytes()[:100])
    files[1].write_text("this is not a parquet file")
    pq.write_table(
        pa.table(
            {
                "text_hash": pa.array(["0" * 32]),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 0.0, 0.0], pa.float32()), 3),
                "truncated": pa.array([False]),
            }
        ),
        files[2],
    )
    pq.write_table(pa.table({"hash": pa.array(["x"]), "embedding": pa.array([1.0])}), files[3])

    caplog.set_level(logging.WARNING, logger="chunkeval")
    second = Embedder(cache_dir=root, flush_every=3)
    again, _ = second.embed(TEXTS)
    assert second.texts_embedded == sum(rows)  # every text of every damaged part, and no other
    np.testing.assert_allclose(again, original, atol=1e-5)
    for damaged in (files[0], files[1], files[2], files[3]):
        assert damaged.with_name(damaged.name + ".corrupt").exists() and not damaged.exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4 and all("damaged embedding cache part" in w and "\n" not in w for w in warnings)
    assert any(files[0].name in w for w in warnings)
    # the cache is whole again: a third reader embeds nothing and never loads the model
    third = Embedder(cache_dir=root)
    third.embed(TEXTS)
    assert third.texts_embedded == 0 and not third.model_loaded


def test_a_sweep_over_a_damaged_cache_gives_the_numbers_of_an_undamaged_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    args = ["sweep", "--chunker", "fixed_token", "--chunk-sizes", "100", "--overlaps", "0", "--k", "1,3"]
    assert main([*args, "--out", str(tmp_path / "a.parquet")]) == 0
    part = parts(tmp_path / "home" / "cache" / "embeddings")[0]
    part.write_bytes(part.read_bytes()[:100])  # `head -c 100 part.parquet > x && mv x part.parquet`
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "b.parquet")]) == 0
    out, err = capsys.readouterr()
    assert "damaged embedding cache part" in err and "Traceback" not in err
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert a.column_names == b.column_names
    for name in a.column_names:
        if name in INDEX_TIMES:
            continue  # measured times of the search: they differ run to run
        if pa.types.is_floating(a.schema.field(name).type):
            np.testing.assert_allclose(b[name].to_numpy(), a[name].to_numpy(), atol=1e-9, err_msg=name)
        else:
            assert a[name].to_pylist() == b[name].to_pylist(), name


# --------------------------------------------------------------------------- the catalogue


@pytest.fixture(scope="module")
def swept(embedder_factory):
    """One real sweep of the demo, recorded by each test's `history` in a warehouse of its own."""
    exp = Experiment(name="rec", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    return exp, run_sweep(exp, embedder_factory())


@pytest.fixture()
def history(tmp_path, monkeypatch, swept):
    """A real warehouse with two completed runs, a failed one and a skipped one, the first run pinned."""
    home = tmp_path / "home"
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    exp, result = swept
    wh = Warehouse.at_home()
    done = []
    for _ in range(2):
        run_id = wh.begin_run("rec", {"corpus": "c", "gold": "g", "model": "m"}, "schedule", exp.to_dict())
        wh.complete_run(
            run_id, RunResult(result.per_query, result.summary, texts_embedded=7, references=result.references)
        )
        done.append(run_id)
    failed = wh.begin_run("rec", {}, "manual", exp.to_dict())
    wh.fail_run(failed, "RuntimeError: out of memory")
    skipped = wh.record_skipped("rec", {}, "event", exp.to_dict())
    wh.pin_baseline("rec", done[0])
    return wh, done, failed, skipped


def overwrite_a_page(db_path, offset=12288):
    """Overwrite one 4 KiB page of the file (the first block after DuckDB's headers holds the catalogue)
    with bytes of a seeded generator: the same damage at every run."""
    with open(db_path, "r+b") as fh:
        fh.seek(offset)
        fh.write(random.Random(0).randbytes(4096))


def test_a_damaged_catalogue_is_reported_in_one_line(history, capsys):
    wh, *_ = history
    overwrite_a_page(wh.db_path)
    for argv in (["runs"], ["trend", "--experiment", "rec", "--metric", "mrr"], ["report", "--experiment", "rec"]):
        assert main(argv) == 4  # damaged state is a fault
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert str(wh.db_path) in err and "damaged" in err and "chunkeval warehouse repair" in err


def test_repair_rebuilds_every_run_and_pin_from_the_manifests(history, capsys):
    wh, done, failed, skipped = history
    before = {r["run_id"]: r for r in wh.runs()}
    summary_before = wh.summary(done[1]).to_pylist()
    overwrite_a_page(wh.db_path)
    assert main(["warehouse", "repair"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # its sentences, folded within 120 columns
    assert "rebuilt from the run manifests" in out and "4 run(s)" in out and "1 pinned baseline(s)" in out
    aside = list(wh.root.glob("chunkeval.duckdb.damaged-*"))
    assert len(aside) == 1  # the damaged file is kept, aside, for whoever wants to look at it
    rebuilt = Warehouse.at_home()
    after = {r["run_id"]: r for r in rebuilt.runs()}
    assert after == before
    assert after[failed]["status"] == "failed" and after[failed]["error"] == "RuntimeError: out of memory"
    assert after[skipped]["status"] == "skipped"
    assert rebuilt.baseline("rec") == done[0]
    assert rebuilt.summary(done[1]).to_pylist() == summary_before
    assert main(["runs", "--experiment", "rec", "--json"]) == 0
    assert {r["run_id"] for r in json.loads(capsys.readouterr().out)} == set(before)
    # a healthy catalogue is left alone
    assert main(["warehouse", "repair"]) == 0
    assert "is readable: nothing to rebuild" in " ".join(capsys.readouterr().out.split())


def test_a_lost_catalogue_is_rebuilt_too(history, capsys):
    wh, done, *_ = history
    wh.db_path.unlink()
    assert main(["warehouse", "repair"]) == 0
    assert "4 run(s)" in capsys.readouterr().out
    assert Warehouse.at_home().baseline("rec") == done[0]


def test_an_older_warehouse_gets_manifests_when_it_is_opened(history):
    wh, done, *_ = history
    for run_id in done:
        wh.manifest_path(run_id).unlink()
    (wh.root / "baselines" / "rec.json").unlink()
    with wh.connect() as con:  # as a v2 warehouse would read
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    reopened = Warehouse.at_home()
    reopened.runs()
    assert all(reopened.read_manifest(run_id)["status"] == "completed" for run_id in done)
    assert (wh.root / "baselines" / "rec.json").is_file()


def test_a_run_that_died_after_its_manifest_is_settled_from_it(history):
    """Killed between the manifest saying completed and the catalogue row: the results are whole, so
    the next run's reaping completes it instead of calling it failed."""
    wh, done, *_ = history
    with wh.connect() as con:
        con.execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, pid = 999999999 WHERE run_id = ?", [done[1]]
        )
    assert wh.reap() == 1
    assert wh.run(done[1])["status"] == "completed"
