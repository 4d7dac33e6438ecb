"""The design space as axes of one grid: models, retrievers, semantic chunkers, splitters, plug-ins,
and the Python API; real models (the bundled one and the locally built minilm-static), real DuckDB."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import chunkeval
from chunkeval.cli import main
from chunkeval.engine.embedding import Embedder, model_fingerprint, resolve_model
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.fingerprints import input_fingerprints
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.vocabulary import CONFIG_KEYS, INDEX_TIMES
from chunkeval.warehouse import Warehouse


def small(**settings) -> Experiment:
    base = dict(name="axes", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(1, 3))
    return Experiment(**{**base, **settings}).validate()


def test_models_and_retrievers_are_axes_of_one_grid(shared_home, minilm_static):
    exp = small(model=("all-MiniLM-L6-v2", "minilm-static"), retriever=("dense", "bm25", "hybrid"))
    result = run_sweep(exp, Embedders(shared_home / "cache" / "embeddings"))
    assert result.summary.column_names[: len(CONFIG_KEYS)] == CONFIG_KEYS
    configs = {(r["model"], r["retriever"]) for r in result.summary.to_pylist()}
    # vectors are read by dense and hybrid, once per model; bm25 over fixed chunks depends on no model
    assert configs == {
        ("all-MiniLM-L6-v2", "dense"),
        ("all-MiniLM-L6-v2", "hybrid"),
        ("minilm-static", "dense"),
        ("minilm-static", "hybrid"),
        ("none", "bm25"),
    }
    assert result.summary.num_rows == 5 * 2 and result.per_query.num_rows == 5 * 2 * 28
    models = {r["model"]: r for r in result.models.to_pylist()}
    assert set(models) == {"all-MiniLM-L6-v2", "minilm-static"}
    assert models["minilm-static"]["model_fingerprint"] != models["all-MiniLM-L6-v2"]["model_fingerprint"]
    for r in result.summary.to_pylist():
        assert 0 <= r["recall_at_k_mean"] <= 1
    # each model keeps its own cache folder
    assert (shared_home / "cache" / "embeddings" / model_fingerprint("minilm-static")).is_dir()


def test_bm25_over_fixed_chunks_loads_no_model_and_embeds_nothing(tmp_path):
    exp = small(retriever=("bm25",), model=("all-MiniLM-L6-v2", "minilm-static"))
    embedders = Embedders(tmp_path / "cache")
    result = run_sweep(exp, embedders)
    assert not embedders.model_loaded and result.texts_embedded == 0 and result.models.num_rows == 0
    assert set(result.summary["model"].to_pylist()) == {"none"}
    assert input_fingerprints(exp)["model"] == "none"
    assert not (tmp_path / "cache").exists()


def test_semantic_chunkers_take_no_overlap_and_share_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    args = [
        "sweep",
        "--chunker",
        "cluster_semantic,semantic_breakpoint",
        "--chunk-sizes",
        "100",
        "--overlaps",
        "0,25%",
        "--k",
        "3",
        "--retriever",
        "dense,bm25",
    ]
    assert main([*args, "--out", str(tmp_path / "a.csv")]) == 0
    out = capsys.readouterr().out
    assert "note: cluster_semantic takes no overlap" in out and "note: semantic_breakpoint takes no overlap" in out
    table = pacsv.read_csv(tmp_path / "a.csv")
    assert set(table["chunk_overlap"].to_pylist()) == {0}
    assert table.num_rows == 2 * 2  # two chunkers × two retrievers, once each; bm25 rows carry the chunking's model
    assert set(table["model"].to_pylist()) == {"all-MiniLM-L6-v2"}
    # pieces, windows and chunks are all in the cache: the same sweep again embeds nothing
    assert main([*args, "--out", str(tmp_path / "b.csv")]) == 0
    assert "\n0 text(s) embedded" in capsys.readouterr().out
    a, b = (pacsv.read_csv(tmp_path / name).drop_columns(list(INDEX_TIMES)) for name in ("a.csv", "b.csv"))
    assert a.equals(b)  # the same numbers; only the measured times of the search differ


def test_model_prompts_are_embedded_and_part_of_the_fingerprint(tmp_path):
    e5_style = tmp_path / "e5-style"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), e5_style)
    config = e5_style / "config_sentence_transformers.json"
    doc = json.loads(config.read_text())
    doc["prompts"] = {"query": "query: ", "document": "passage: "}
    config.write_text(json.dumps(doc))
    assert model_fingerprint(str(e5_style)) != model_fingerprint("all-MiniLM-L6-v2")
    plain = Embedder(cache_dir=tmp_path / "c")
    prompted = Embedder(str(e5_style), cache_dir=tmp_path / "c")
    text = ["How many troops were sent?"]
    q_plain, q_prompted = plain.embed(text, kind="query")[0], prompted.embed(text, kind="query")[0]
    d_prompted = prompted.embed(text)[0]
    assert float(q_plain[0] @ q_prompted[0]) < 0.9999 and float(q_prompted[0] @ d_prompted[0]) < 0.9999
    direct = prompted._load().st.encode(["query: " + text[0]], normalize_embeddings=True)
    np.testing.assert_allclose(q_prompted, direct, atol=1e-5)
    again = Embedder(str(e5_style), cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(again.embed(text, kind="query")[0], q_prompted)
    assert again.texts_embedded == 0


def test_a_text_splitter_and_a_plugin_reranker_run_in_the_grid(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    out = tmp_path / "r.parquet"
    assert (
        main(
            [
                "sweep",
                "--chunker",
                "plugins_for_tests:paragraphs",
                "--chunk-sizes",
                "100",
                "--k",
                "1,5",
                "--retriever",
                "dense,plugins_for_tests:reversed_dense",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pq.read_table(out).to_pylist()
    by = {(r["retriever"], r["k"]): r for r in rows}
    # the reranker reverses the dense top 20: its first chunk is rarely the best one
    assert by[("dense", 1)]["recall_at_k_mean"] > by[("plugins_for_tests:reversed_dense", 1)]["recall_at_k_mean"]
    assert by[("dense", 5)]["n_chunks"] == by[("plugins_for_tests:reversed_dense", 5)]["n_chunks"] > 0


def test_the_warehouse_keys_configurations_on_all_six_settings(tmp_path, monkeypatch, capsys, shared_home):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    exp = small(retriever=("dense", "bm25"))
    result = run_sweep(exp, Embedders(shared_home / "cache" / "embeddings"))
    wh = Warehouse.at_home()
    run_id = wh.begin_run("axes", input_fingerprints(exp), "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query, result.summary, texts_embedded=0, references=result.references, models=result.models
        ),
    )
    assert {(r["model"], r["retriever"]) for r in wh.summary(run_id).to_pylist()} == {
        ("all-MiniLM-L6-v2", "dense"),
        ("none", "bm25"),
    }
    assert main(["trend", "--experiment", "axes", "--metric", "mrr", "--config", "retriever=bm25,k=3", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["model"], row["retriever"], row["k"]) == ("none", "bm25", 3)
    assert wh.models(run_id).to_pylist()[0]["model"] == "all-MiniLM-L6-v2"


def test_runs_recorded_before_the_axes_read_as_dense_with_their_model(tmp_path, monkeypatch, shared_home):
    """Results written by chunkeval 0.1 have no model or retriever column, and settings with one model."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    exp = small()
    result = run_sweep(exp, Embedders(shared_home / "cache" / "embeddings"))
    wh = Warehouse.at_home()
    settings = {**exp.to_dict(), "model": "all-MiniLM-L6-v2"}  # 0.1 recorded the model as a string
    run_id = wh.begin_run("old", {}, "schedule", settings)
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query.drop_columns(["model", "retriever"]),
            result.summary.drop_columns(["model", "retriever"]),
            texts_embedded=0,
            references=result.references.drop_columns(["model"]),
        ),
    )
    rows = wh.summary(run_id).to_pylist()
    assert {(r["model"], r["retriever"]) for r in rows} == {("all-MiniLM-L6-v2", "dense")}
    assert wh.trend("old", "mrr", {"retriever": "dense"})
    with wh.connect() as con:
        assert con.execute("SELECT DISTINCT model FROM gold_references WHERE run_id = ?", [run_id]).fetchall() == [
            ("none",)
        ]


# --------------------------------------------------------------------------- the Python API


def test_python_api_sweeps_from_values_and_paths(shared_home):
    corpora = {
        "story": "The cat sat on the mat. " * 30
        + "The treasure is buried under the old oak tree. "
        + "Birds sing. " * 30
    }
    start = corpora["story"].index("The treasure")
    questions = [
        {
            "question": "Where is the treasure buried?",
            "corpus_id": "story",
            "references": [
                {
                    "content": "The treasure is buried under the old oak tree.",
                    "start_index": start,
                    "end_index": start + 46,
                }
            ],
        }
    ]
    res = chunkeval.evaluate(
        corpora,
        questions,
        chunker="fixed_token",
        chunk_sizes=[20, 40],
        k=[1, 3],
        retriever=["dense", "bm25"],
        cache_dir=shared_home / "cache" / "embeddings",
    )
    assert res.summary.num_rows == 2 * 2 * 2
    frame = res.to_pandas()
    assert list(frame.columns[: len(CONFIG_KEYS)]) == CONFIG_KEYS
    assert frame["span_recall_mean"].max() == 1.0
    assert res.to_pandas("per_query").shape[0] == 8 and res.by_corpus.num_rows == 8
    from_paths = chunkeval.evaluate(
        DEMO_DIR / "corpora",
        DEMO_DIR / "questions.csv",
        chunk_sizes=100,
        k=1,
        cache_dir=shared_home / "cache" / "embeddings",
    )
    assert from_paths.summary.num_rows == 1 and from_paths.per_query.num_rows == 28
    with pytest.raises(InputError, match="unknown retriever"):
        chunkeval.evaluate(corpora, questions, retriever="magic")


def test_python_api_scores_ranked_lists_in_memory():
    res = chunkeval.score(
        {"1": ["A", "B"], "2": {"D": 2, "X": 0}, "3": ["E", "F", "G"]},
        {"1": ["A", "C"], "2": ["D"], "3": ["F", "H", "I"]},
        k=3,
    )
    summary = res.summary.to_pylist()[0]
    assert round(summary["precision_mean"], 3) == 0.611 and summary["recall_micro"] == pytest.approx(0.5)
    texts = chunkeval.score({"q": ["alpha", "beta", "gamma"]}, {"q": ["alpha", "nope", "beta", "Gamma", "gamma"]}, k=5)
    assert texts.summary.to_pylist()[0]["precision_at_k_mean"] == pytest.approx(0.6)
    with pytest.raises(InputError, match="not in the gold set"):
        chunkeval.score({"a": ["x"]}, {"b": ["x"]})
