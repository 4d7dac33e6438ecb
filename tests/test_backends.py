"""Embedding backends against the model itself: the real all-MiniLM-L6-v2, exported for real to ONNX
and OpenVINO (once per session home), on texts of the demo corpora and on texts past the model's limit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunkeval.engine.embedding import Embedder, backends, embedder_fingerprint, model_fingerprint, resolve_model
from chunkeval.engine.experiment import Experiment
from chunkeval.engine.sweep import Embedders, run_sweep
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Passages of the demo corpora cut at 600 characters, a few past 256 word pieces, and odd ones."""
    out = []
    for path in sorted((DEMO_DIR / "corpora").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        out += [text[i : i + 600] for i in range(0, len(text), 600)]
    return out + [" ".join(out)[:4000], "x", "naïve café — ünïcödé ∑ 42", "word " * 300]


@pytest.fixture(scope="module")
def torch_vectors(texts):
    return Embedder().embed(texts)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_fp32_backends_give_the_models_vectors(backend, texts, torch_vectors):
    vectors, truncated = Embedder(backend=backend).embed(texts)
    reference, reference_truncated = torch_vectors
    assert truncated.sum() >= 2 and np.array_equal(truncated, reference_truncated)
    assert np.abs(vectors - reference).max() < 1e-5  # measured: 1.9e-7 (onnx), 2.8e-7 (openvino)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)


def test_the_onnx_export_is_fused_and_openvino_reads_the_plain_graph():
    """onnxruntime runs the graph with its fused transformer operators; OpenVINO the exported graph before
    fusion (plain ONNX operators), whose attention is the eager pattern both recognise."""
    import onnx

    folder = resolve_model("all-MiniLM-L6-v2")
    fp = model_fingerprint("all-MiniLM-L6-v2")
    export = backends.ensure_export("all-MiniLM-L6-v2", folder, fp, "onnx", "none")
    ops = lambda path: {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}  # noqa: E731
    fused, plain = ops(export / "model.onnx"), ops(export / backends.GRAPH)
    assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"} <= fused
    assert "Attention" not in plain and {"MatMul", "Softmax"} <= plain
    int8 = ops(backends.ensure_export("all-MiniLM-L6-v2", folder, fp, "onnx", "int8") / "model.onnx")
    assert "DynamicQuantizeMatMul" in int8 or "MatMulInteger" in int8 or "QAttention" in int8


def test_graph_tokenizer_reads_what_sentence_transformers_reads(texts):
    """The `tokenizers` pipeline of the exported backends gives the word pieces of the model's own tokenizer."""
    folder = resolve_model("all-MiniLM-L6-v2")
    runner = backends.load_runner(
        "all-MiniLM-L6-v2", folder, model_fingerprint("all-MiniLM-L6-v2"), "onnx", "none", "cpu"
    )
    torch_runner = backends.TorchRunner(folder, "cpu")
    ours, cut = runner.reads(texts)
    theirs = torch_runner.st.tokenize(texts)["input_ids"].numpy()
    for row, ids in zip(theirs, ours, strict=True):
        assert list(row[: len(ids)]) == list(ids) and not row[len(ids) :].any()
    assert np.array_equal(cut, torch_runner.reads(texts)[1])


def test_int8_drifts_within_bounds_and_is_cached_apart(texts, torch_vectors, tmp_path):
    reference = torch_vectors[0]
    for backend, worst in (("onnx", 0.97), ("openvino", 0.99)):  # measured: 0.980 and 0.9985
        emb = Embedder(cache_dir=tmp_path, backend=backend, quantize="int8")
        vectors, _ = emb.embed(texts)
        cosines = (vectors * reference).sum(axis=1)
        assert cosines.min() > worst and not np.array_equal(vectors, reference)
        assert (tmp_path / emb.fingerprint).is_dir()
    prints = {
        (b, q): embedder_fingerprint("all-MiniLM-L6-v2", b, q)
        for b in backends.BACKENDS
        for q in backends.QUANTIZE
        if not (b == "torch" and q == "int8")
    }
    assert len(set(prints.values())) == 5  # vectors of different backends never mix
    assert prints["torch", "none"] == model_fingerprint("all-MiniLM-L6-v2")  # old caches stay valid


def test_static_models_run_as_they_are_on_every_backend(minilm_static):
    static = "minilm-static"
    assert embedder_fingerprint(static, "onnx") == model_fingerprint(static)
    vectors, _ = Embedder(static, backend="onnx").embed(["a static model has no transformer"])
    assert np.array_equal(vectors, Embedder(static).embed(["a static model has no transformer"])[0])


def test_an_export_is_built_once_and_a_damaged_one_again(shared_home, caplog):
    fingerprint = embedder_fingerprint("all-MiniLM-L6-v2", "onnx")
    folder = backends.export_dir(model_fingerprint("all-MiniLM-L6-v2"), "onnx", "none")
    onnx_file = folder / "model.onnx"
    built = onnx_file.stat().st_mtime_ns
    assert embedder_fingerprint("all-MiniLM-L6-v2", "onnx") == fingerprint and onnx_file.stat().st_mtime_ns == built
    data = bytearray(onnx_file.read_bytes())  # damaged in place: same size, other bytes
    data[len(data) // 2] ^= 0xFF
    onnx_file.write_bytes(bytes(data))
    assert embedder_fingerprint("all-MiniLM-L6-v2", "onnx") == fingerprint  # rebuilt, never used damaged
    assert "does not match its seal" in caplog.text
    record = json.loads((folder / "chunkeval_model.json").read_text())
    assert record["model"]["backend"] == "onnx" and record["model"]["max_seq_length"] == 256


def test_a_sweep_on_onnx_scores_as_torch_does(tmp_path):
    exp = Experiment(name="onnx", chunk_sizes=(100, 200), k=(1, 5))
    torch_run = run_sweep(exp, Embedders(tmp_path))
    onnx_run = run_sweep(exp.with_overrides(backend="onnx"), Embedders(tmp_path))
    for column in ("span_recall", "span_precision", "recall_at_k", "mrr", "ndcg_at_k"):
        a, b = (
            np.asarray(r.per_query[column].to_numpy(zero_copy_only=False), dtype=float) for r in (torch_run, onnx_run)
        )
        assert np.allclose(a, b, atol=1e-9, equal_nan=True), column
    models = onnx_run.models.to_pylist()
    assert models[0]["backend"] == "onnx" and models[0]["model_fingerprint"] == embedder_fingerprint(
        "all-MiniLM-L6-v2", "onnx"
    )


def test_bad_backend_settings_fail_early(monkeypatch):
    with pytest.raises(InputError, match="backend must be torch, onnx, openvino"):
        Experiment(backend="tensorrt").validate()
    with pytest.raises(InputError, match="quantize: int8 needs backend onnx or openvino"):
        Experiment(quantize="int8").validate()
    with pytest.raises(InputError, match="runs on the CPU"):
        Experiment(backend="onnx").checked_for_device("cuda")
    monkeypatch.setitem(backends._NEEDS, "onnx", ("onnxruntime", "no_such_runtime_package"))
    with pytest.raises(InputError, match="needs no_such_runtime_package: pip install"):
        Experiment(backend="onnx").validate()
