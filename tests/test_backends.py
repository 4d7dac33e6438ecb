"""Embedding backends against the model itself: the real all-MiniLM-L6-v2, exported for real to ONNX
and OpenVINO (once per session home), on texts of the demo corpora and on texts past the model's limit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunkeval.engine.embedding import Embedder, backends, embedder_fingerprint, model_fingerprint, resolve_model
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR

pytestmark = pytest.mark.slow  # ONNX and OpenVINO exports of the model


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
    # lossless backends share the model's vectors (a switch between them is no model change, embeds nothing again);
    # int8 weights change the vectors: each its own, never mixed
    lossless = {prints[b, "none"] for b in backends.BACKENDS}
    assert lossless == {model_fingerprint("all-MiniLM-L6-v2")}  # old caches stay valid
    assert len({prints["onnx", "int8"], prints["openvino", "int8"], *lossless}) == 3


def test_static_models_run_as_they_are_on_every_backend(minilm_static):
    static = "minilm-static"
    assert embedder_fingerprint(static, "onnx") == model_fingerprint(static)
    vectors, _ = Embedder(static, backend="onnx").embed(["a static model has no transformer"])
    assert np.array_equal(vectors, Embedder(static).embed(["a static model has no transformer"])[0])


def test_an_export_is_built_once_and_a_damaged_one_again(shared_home, caplog):
    model, fp = "all-MiniLM-L6-v2", model_fingerprint("all-MiniLM-L6-v2")
    export = lambda: backends.ensure_export(model, resolve_model(model), fp, "onnx", "none")  # noqa: E731
    folder = export()
    assert folder == backends.export_dir(fp, "onnx", "none")
    onnx_file = folder / "model.onnx"
    built = onnx_file.stat().st_mtime_ns
    assert export() == folder and onnx_file.stat().st_mtime_ns == built  # built once
    # knowing its vectors' fingerprint builds nothing (a poll must not export): the model's own, fp32 is lossless
    assert embedder_fingerprint(model, "onnx") == fp and onnx_file.stat().st_mtime_ns == built
    data = bytearray(onnx_file.read_bytes())  # damaged in place: same size, other bytes
    data[len(data) // 2] ^= 0xFF
    onnx_file.write_bytes(bytes(data))
    assert export() == folder and onnx_file.read_bytes() != bytes(data)  # rebuilt, never used damaged
    assert "does not match its seal" in caplog.text
    record = json.loads((folder / "chunkeval_model.json").read_text())
    assert record["model"]["backend"] == "onnx" and record["model"]["max_seq_length"] == 256


def test_a_sweep_on_onnx_scores_as_torch_does(tmp_path):
    exp = Experiment(name="onnx", backend="torch", chunk_sizes=(100, 200), k=(1, 5))
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
    with pytest.raises(InputError, match="unknown backend 'tensorrt'; choose auto, torch, onnx, openvino"):
        Experiment(backend="tensorrt").validate()
    with pytest.raises(InputError, match="quantize: int8 needs backend onnx or openvino"):
        Experiment(quantize="int8").validate()
    with pytest.raises(InputError, match="runs on the CPU"):
        Experiment(backend="onnx").checked_for_device("cuda")
    monkeypatch.setitem(backends._NEEDS, "onnx", ("onnxruntime", "no_such_runtime_package"))
    with pytest.raises(InputError, match="needs no_such_runtime_package: pip install"):
        Experiment(backend="onnx").validate()


# --------------------------------------------------------------------------- precision

FP32_FINGERPRINT = "aad501698b1a7a90e7b66df3916aa9fcfc772a3fa15611d02f14c3e26dd715ae"  # torch's, before precisions


@pytest.mark.parametrize("backend", ["torch", "openvino"])
def test_bf16_vectors_stay_close_to_fp32(backend, texts, torch_vectors):
    vectors, truncated = Embedder(backend=backend, precision="bf16").embed(texts)
    reference, reference_truncated = torch_vectors
    assert vectors.dtype == np.float32 and np.array_equal(truncated, reference_truncated)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() > 0.9995 and not np.array_equal(vectors, reference)  # measured: 0.99996 (both)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def test_precision_keys_the_cache_and_fp32_keeps_its_fingerprint(tmp_path):
    model = "all-MiniLM-L6-v2"
    assert embedder_fingerprint(model) == embedder_fingerprint(model, "torch", "none", "fp32") == FP32_FINGERPRINT
    # fp32 on an exported backend: lossless, the model's own vectors (docs/backends.md)
    assert embedder_fingerprint(model, "openvino", "none", "fp32") == FP32_FINGERPRINT
    prints = {
        (b, p): embedder_fingerprint(model, b, "none", p)
        for b, p in (
            ("torch", "fp32"),
            ("torch", "bf16"),
            ("torch", "fp16"),
            ("openvino", "fp32"),
            ("openvino", "bf16"),
        )
    }
    assert len(set(prints.values())) == 4 and prints["openvino", "fp32"] == prints["torch", "fp32"]
    texts = ["vectors of one precision", "never serve another"]
    bf16 = Embedder(cache_dir=tmp_path, precision="bf16")
    low, _ = bf16.embed(texts)
    assert (tmp_path / bf16.fingerprint).is_dir() and bf16.fingerprint == prints["torch", "bf16"]
    fp32 = Embedder(cache_dir=tmp_path)
    assert fp32.missing(texts) == texts  # the bf16 part files are not fp32's
    full, _ = fp32.embed(texts)
    assert fp32.texts_embedded == 2 and np.array_equal(full, Embedder().embed(texts)[0])
    again = Embedder(cache_dir=tmp_path, precision="bf16")
    assert np.array_equal(again.embed(texts)[0], low) and again.texts_embedded == 0


def test_a_precision_change_reads_as_a_model_change(tmp_path):
    """A run in bf16 has another model fingerprint: `--if-changed` runs it, `watch` says the model changed,
    and the run's models table, notes and report name the precision."""
    from chunkeval.engine.pipeline.fingerprints import models_fingerprint
    from chunkeval.flows.watch import change_events
    from chunkeval.report.terminal import format_models

    exp = Experiment(name="bf16", backend="torch", chunk_sizes=(200,), k=(5,))
    low = exp.with_overrides(precision="bf16")
    assert models_fingerprint(exp) == FP32_FINGERPRINT and models_fingerprint(low) != FP32_FINGERPRINT
    last = {"corpus_fingerprint": "c", "gold_fingerprint": "g", "model_fingerprint": models_fingerprint(exp)}
    assert change_events(last, {"corpus": "c", "gold": "g", "model": models_fingerprint(low)}) == [
        "chunkeval.model.changed"
    ]
    result = run_sweep(low, Embedders(tmp_path))
    models = result.models.to_pylist()
    assert models[0]["precision"] == "bf16" and models[0]["model_fingerprint"] == models_fingerprint(low)
    assert "torch bf16" in format_models(result.models)
    assert any(n.startswith("precision: bf16") for n in result.notes)


def test_bad_precision_settings_fail_early():
    with pytest.raises(InputError, match="precision must be fp32 or bf16 or fp16, got 'fp8'"):
        Experiment(precision="fp8").validate()
    with pytest.raises(InputError, match="precision bf16 with quantize: int8"):
        Experiment(backend="openvino", quantize="int8", precision="bf16").validate()
    with pytest.raises(InputError, match="onnxruntime's CPU kernels have no bf16"):
        Experiment(backend="onnx", precision="bf16").validate()
    with pytest.raises(InputError, match="a static model looks its vectors up"):
        Experiment(model=("minilm-static",), precision="bf16").validate()
    with pytest.raises(InputError, match="precision fp16 needs a GPU"):
        Experiment(precision="fp16").validate().checked_for_device("cpu")
    with pytest.raises(InputError, match="precision fp16 needs a GPU"):
        Experiment(backend="openvino", precision="fp16").validate().checked_for_device("auto")
    with pytest.raises(InputError, match="precision fp16 needs a GPU"):
        Embedder(precision="fp16", device="cpu").embed(["fp16 on a CPU"])
    with pytest.raises(InputError, match="a static model looks its vectors up"):
        Embedder("minilm-static", precision="bf16")
    # bm25 over fixed chunks embeds nothing: its precision is never used, so never refused
    assert Experiment(retriever=("bm25",), precision="fp16").validate().checked_for_device("cpu")


def test_what_a_run_says_about_its_precision():
    """One line, read from the CPU's flags (never a measurement): bf16 is there where AMX or a GPU makes
    it fast; bf16 where the CPU has no bf16 arithmetic runs slower than fp32."""
    from chunkeval.engine.embedding.precision import advice

    amx = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"})
    epyc = frozenset({"avx512f", "avx512_bf16", "avx512_vnni"})  # this project's machine: bf16, no AMX
    avx2 = frozenset({"avx2", "fma"})
    assert "--precision bf16 embedded 2.9× faster" in advice("fp32", "torch", "none", "cpu", amx)
    assert "--precision bf16" in advice("fp32", "openvino", "none", "cpu", amx)
    assert advice("fp32", "onnx", "none", "cpu", amx) is None  # onnx has no bf16 to offer
    assert advice("fp32", "openvino", "int8", "cpu", amx) is None
    assert advice("fp32", "torch", "none", "cpu", epyc) is None
    assert advice("bf16", "torch", "none", "cpu", epyc) is None and advice("bf16", "torch", "none", "cpu", amx) is None
    assert "slower than fp32" in advice("bf16", "torch", "none", "cpu", avx2)
    assert "slower than fp32" in advice("bf16", "openvino", "none", "cpu", avx2)
    assert advice("bf16", "torch", "none", "cpu", frozenset()) is None  # flags unknown: nothing said
    assert "GPU" in advice("fp32", "torch", "none", "cuda", avx2)
    assert "\n" not in advice("fp32", "torch", "none", "cpu", amx)


def test_advice_on_a_faster_precision_is_a_notice_not_a_warning(monkeypatch, caplog, tmp_path):
    """On an AMX CPU every run that embeds said `fp32 on a CPU with AMX: …` as a WARNING, and the first-run test
    (which allows no WARNING) failed there: advice is a notice (`chunkeval: …`); a precision that will run slower
    than fp32 stays a warning. The flags are this CPU's where the test runs, so they are handed in here. The
    advice is said once per machine and home, not on every run (issue 42)."""
    import logging

    from chunkeval import progress
    from chunkeval.engine.embedding import precision

    amx = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    monkeypatch.setenv("CHUNKEVAL_BACKENDS", str(tmp_path / "backends"))
    monkeypatch.setattr(precision, "_said", set())
    monkeypatch.setattr(precision, "cpu_flags", lambda: amx)
    with caplog.at_level(logging.WARNING, logger="chunkeval"):
        precision.tell("fp32", "torch", "none", "cpu")
        precision.tell("fp32", "torch", "none", "cpu")  # once per process
        monkeypatch.setattr(precision, "_said", set())  # and the next run's process: said no more
        precision.tell("fp32", "torch", "none", "cpu")
    (said,) = caplog.records
    assert "fp32 on a CPU with AMX" in said.getMessage() and getattr(said, progress.NOTICE, False)
    caplog.clear()
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    with caplog.at_level(logging.WARNING, logger="chunkeval"):
        precision.tell("bf16", "torch", "none", "cpu")
    (slow,) = caplog.records
    assert "slower than fp32" in slow.getMessage() and not getattr(slow, progress.NOTICE, False)


# --------------------------------------------------------------------------- backend auto


def test_auto_resolves_to_an_installed_lossless_backend_that_the_run_records(tmp_path, caplog, monkeypatch):
    """`backend: auto` (the default) runs the fastest backend whose vectors equal torch fp32's on the probe;
    the run's settings, models table and fingerprints name that backend, never `auto`."""
    from chunkeval.engine.embedding import auto, resolution
    from chunkeval.engine.embedding.resolution import choose_backend
    from chunkeval.engine.pipeline.fingerprints import models_fingerprint

    monkeypatch.delenv("CHUNKEVAL_AUTO_BACKEND")  # the suite's pin (conftest) lifted: auto probes
    monkeypatch.setattr(resolution, "_said", set())
    auto.cache_path(model_fingerprint("all-MiniLM-L6-v2")).unlink(missing_ok=True)  # no choice kept yet: a probe
    exp = Experiment(name="auto", chunk_sizes=(200,), k=(5,))
    assert exp.backend == "auto"
    import io

    from chunkeval import progress

    shown = io.StringIO()  # off a terminal: the probe's progress, a line as it begins and as it ends (and every 10 s)
    with progress.show_progress(shown):
        ran, line, fresh = resolution.resolution(exp)
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("probing backends [") and lines[0].split()[3] == "0/3", lines
    assert lines[-1].startswith("probing backends [####") and lines[-1].split()[3] == "3/3", lines
    resolution.say_choice(line, fresh)  # what a run's preparation says, once its inputs are checked
    choice = choose_backend("auto", ["all-MiniLM-L6-v2"])  # now the kept choice: said no more
    assert ran.backend == choice.backend in choice.lossless and backends.check_backend(ran.backend) is None
    assert fresh and line.startswith(choice.line) and line in caplog.text  # said, in one line
    assert resolution.resolution(exp)[2] is False  # a kept choice is recorded with each run, not said again
    assert set(choice.texts_per_s) == {"torch", "onnx", "openvino"}  # all installed here: each probed
    for b in choice.lossless[1:]:
        assert auto.lossless(choice.agreement[b]) and choice.agreement[b]["max_abs"] < 1e-5
    assert ran.recorded_settings()["backend"] == choice.backend
    fingerprint = embedder_fingerprint("all-MiniLM-L6-v2", choice.backend)
    assert models_fingerprint(exp) == models_fingerprint(ran) == fingerprint
    assert embedder_fingerprint("all-MiniLM-L6-v2", "auto") == fingerprint
    models = run_sweep(ran, Embedders(tmp_path)).models.to_pylist()
    assert models[0]["backend"] == choice.backend and models[0]["model_fingerprint"] == fingerprint
    # a run that named its backend keeps it; lossy settings are never auto's to choose
    assert resolution.resolved(exp.with_overrides(backend="torch")).backend == "torch"
    assert resolution.resolved(exp.with_overrides(backend="openvino")).backend == "openvino"
    assert resolution.resolved(exp.with_overrides(precision="bf16")).backend == "torch"
    with pytest.raises(InputError, match="needs backend onnx or openvino named"):
        resolution.resolved(exp.with_overrides(quantize="int8"))


def test_the_auto_probe_runs_once_per_model_and_machine(monkeypatch):
    from chunkeval.engine.embedding import auto
    from chunkeval.engine.embedding.resolution import choose_backend

    monkeypatch.delenv("CHUNKEVAL_AUTO_BACKEND")

    first = choose_backend("auto", ["all-MiniLM-L6-v2"])
    path = auto.cache_path(model_fingerprint("all-MiniLM-L6-v2"))
    record, written, probes = json.loads(path.read_text()), path.stat().st_mtime_ns, auto.probes_run
    assert record["backend"] == first.backend and record["cpu"] == auto.cpu_model() and record["versions"]["torch"]
    again = choose_backend("auto", ["all-MiniLM-L6-v2"])
    assert again.cached and again.backend == first.backend and again.texts_per_s == record["texts_per_s"]
    assert auto.probes_run == probes and path.stat().st_mtime_ns == written  # read, not probed again


def _record(backend="openvino", lossless=("torch", "openvino"), torch_speed=60.0, speed=70.0, cosine=0.9999999):
    return {
        "backend": backend, "line": f"backend auto: {backend} (a kept choice)", "lossless": list(lossless),
        "texts_per_s": {"torch": torch_speed, backend: speed}, "skipped": {},
        "agreement": {b: {"min_cosine": cosine, "max_abs": 1e-7} for b in lossless if b != "torch"},
    }  # fmt: skip


def test_the_kept_choice_survives_a_package_change_and_a_forged_or_special_record_is_remade(monkeypatch, tmp_path):
    """The choice is kept per model and machine: another version of a backend's package is no reason to probe
    again (a poll, a run, an installed extra change nothing). A kept record is trusted state, checked field by
    field: a forged one (lossless named but not agreeing, a backend that is none, speeds of 0) and a FIFO in its
    place are never obeyed (`kept` says why; the next use probes again, with one line)."""
    import os

    from chunkeval.engine.embedding import auto

    monkeypatch.setenv("CHUNKEVAL_BACKENDS", str(tmp_path / "backends"))
    fp = model_fingerprint("all-MiniLM-L6-v2")
    path = auto.cache_path(fp)
    monkeypatch.setattr(auto, "package_version", lambda package: "99.0")  # every package upgraded
    assert auto.cache_path(fp) == path  # the key is the model and the machine: nothing else
    path.parent.mkdir(parents=True)
    mine = {"model_fingerprint": fp, "cpu": auto.cpu_model()}
    path.write_text(json.dumps({**_record(), **mine}))
    choice, why = auto.kept(fp)
    assert choice.backend == "openvino" and choice.cached and why == ""
    forged = {
        "lossless only torch": _record(lossless=("torch",)),
        "a backend that is none": _record(backend="bogus", lossless=("torch", "bogus")),
        "speeds of 0": _record(speed=0),
        "an agreement of 0.5": _record(cosine=0.5),
        "slower than torch": _record(torch_speed=90.0),
        "not a mapping": ["openvino"],
        "another machine's": {**_record(), "cpu": "a CPU elsewhere"},
    }
    for what, record in forged.items():
        path.write_text(json.dumps({**mine, **record} if isinstance(record, dict) else record))
        choice, why = auto.kept(fp)
        assert choice is None and why.startswith("the kept choice does not hold"), what
    path.unlink()
    os.mkfifo(path)  # a FIFO where the record goes: never opened (it would block)
    choice, why = auto.kept(fp)
    assert choice is None and "a FIFO, not a regular file" in why


def test_a_kept_backend_that_is_gone_is_probed_again_with_one_line(monkeypatch, tmp_path, caplog, capsys):
    """openvino kept, then uninstalled: the next use says so in one line and probes again; `chunkeval backends`
    shows what is kept, and `--reprobe` makes a new choice when asked."""
    from chunkeval.cli import main
    from chunkeval.engine.embedding import auto

    monkeypatch.setenv("CHUNKEVAL_BACKENDS", str(tmp_path / "backends"))
    monkeypatch.setattr(auto, "PROBE_TEXTS", 16)
    monkeypatch.setattr(auto, "REPEATS", 1)
    monkeypatch.setattr(auto, "SETTLE", 0.0)
    model, fp = "all-MiniLM-L6-v2", model_fingerprint("all-MiniLM-L6-v2")
    path = auto.cache_path(fp)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**_record(), "model": model, "model_fingerprint": fp, "cpu": auto.cpu_model()}))
    monkeypatch.setitem(backends._NEEDS, "openvino", ("openvino", "no_such_runtime_package"))
    probes = auto.probes_run
    choice = auto.choose(model, resolve_model(model), fp)
    assert auto.probes_run == probes + 1 and choice.backend != "openvino" and not choice.cached
    assert "backend auto: openvino, kept for all-MiniLM-L6-v2 on this machine, is not installed" in caplog.text
    again = auto.choose(model, resolve_model(model), fp)
    assert again.cached and again.backend == choice.backend and auto.probes_run == probes + 1
    capsys.readouterr()
    assert main(["backends"]) == 0  # what is kept, said
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(model)]
    assert row.split()[1] == choice.backend and "torch" in row
    assert main(["backends", "--reprobe"]) == 0 and auto.probes_run == probes + 2  # asked: probed again
    assert capsys.readouterr().out.startswith(f"{model}: backend auto: ")


def test_a_machine_pins_what_auto_means_without_a_probe(monkeypatch):
    """CHUNKEVAL_AUTO_BACKEND (what the suite sets to torch) makes auto that backend, said in its line, with no
    probe run; a value that names no backend is one line."""
    from chunkeval.engine.embedding import auto
    from chunkeval.engine.embedding.resolution import choose_backend

    probes = auto.probes_run
    monkeypatch.setenv("CHUNKEVAL_AUTO_BACKEND", "onnx")
    choice = choose_backend("auto", ["all-MiniLM-L6-v2"])
    assert choice.backend == "onnx" and "pinned by CHUNKEVAL_AUTO_BACKEND" in choice.line
    assert auto.probes_run == probes
    monkeypatch.setenv("CHUNKEVAL_AUTO_BACKEND", "tpu")
    with pytest.raises(InputError, match="CHUNKEVAL_AUTO_BACKEND must be torch, onnx or openvino, got 'tpu'"):
        choose_backend("auto", ["all-MiniLM-L6-v2"])


def test_a_backend_that_fails_the_probe_or_is_missing_is_skipped_with_why(monkeypatch):
    """A candidate whose vectors differ (onnx with int8 weights, which auto never proposes) and one whose
    packages are missing are skipped, each with its reason; torch, the reference, remains."""
    from chunkeval.engine.embedding import auto

    monkeypatch.setattr(auto, "PROBE_TEXTS", 16)
    monkeypatch.setattr(auto, "REPEATS", 1)
    monkeypatch.setitem(backends._NEEDS, "openvino", ("openvino", "no_such_runtime_package"))
    model, fp = "all-MiniLM-L6-v2", model_fingerprint("all-MiniLM-L6-v2")
    choice = auto.probe(model, resolve_model(model), fp, candidates=(("onnx", "int8"), ("openvino", "none")))
    assert choice.backend == "torch" and choice.lossless == ("torch",)
    assert choice.skipped["onnx int8"].startswith("vectors differ from torch fp32's (worst cosine 0.9")
    assert choice.agreement["onnx int8"]["min_cosine"] < auto.MIN_COSINE
    assert (
        choice.skipped["openvino"] == "not installed (needs no_such_runtime_package: pip install 'chunkeval[backends]')"
    )
