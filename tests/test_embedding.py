"""The real all-MiniLM-L6-v2 and the Parquet cache."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from chunkeval.engine.embedding import Embedder, EmbeddingCache, model_fingerprint, resolve_model


def test_vectors_are_normalized_and_meaningful(embedder_factory):
    emb = embedder_factory()
    vecs, truncated = emb.embed(
        ["A cat sat on the mat.", "A kitten is sitting on a rug.", "Quarterly revenue rose 8%."]
    )
    assert vecs.dtype == np.float32 and vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2
    assert not truncated.any()


def test_cache_reuses_vectors_without_loading_the_model(tmp_path):
    texts = ["alpha beta", "gamma delta", "alpha beta"]
    first = Embedder(cache_dir=tmp_path)
    v1, _ = first.embed(texts)
    assert first.texts_embedded == 2  # the repeated text is embedded once
    second = Embedder(cache_dir=tmp_path)
    v2, _ = second.embed(texts[::-1])
    assert second.texts_embedded == 0 and not second.model_loaded
    assert np.array_equal(v2, v1[::-1])
    parts = list((tmp_path / first.fingerprint).glob("part-*.parquet"))
    assert len(parts) == 1 and pq.read_table(parts[0]).num_rows == 2
    third = Embedder(cache_dir=tmp_path)
    third.embed(["alpha beta", "new text"])
    assert third.texts_embedded == 1


def test_long_chunks_are_truncated_and_counted(embedder_factory):
    long_text = "word " * 400
    vecs, truncated = embedder_factory().embed([long_text, "short"])
    assert truncated.tolist() == [True, False]
    # the model sees the first 256 word pieces only: extra words at the end change nothing
    more, _ = embedder_factory().embed([long_text + "completely different ending " * 50])
    assert float(vecs[0] @ more[0]) > 0.9999


def test_fingerprint_follows_content_not_name(tmp_path):
    original = resolve_model("all-MiniLM-L6-v2")
    copy = tmp_path / "model"
    shutil.copytree(original, copy)
    assert model_fingerprint(str(copy)) == model_fingerprint("all-MiniLM-L6-v2")
    cfg = copy / "sentence_bert_config.json"
    cfg.write_text(cfg.read_text().replace("256", "128"))
    changed = model_fingerprint(str(copy))
    assert changed != model_fingerprint("all-MiniLM-L6-v2")
    cache = EmbeddingCache(tmp_path / "cache", changed)
    assert len(cache) == 0


def test_texts_the_model_reads_alike_are_embedded_once(tmp_path):
    """Two chunks that start alike and are both longer than the model's 256 word pieces give the model
    the same input: one run through the model, one vector for both (both kept in the cache)."""
    start = " ".join(f"w{i}" for i in range(400))
    texts = [start + " one ending", start + " a quite different ending", "short text"]
    emb = Embedder(cache_dir=tmp_path)
    vecs, truncated = emb.embed(texts)
    assert truncated.tolist() == [True, True, False]
    assert emb.texts_embedded == 3 and emb.texts_shared == 1
    assert emb.texts_per_second == pytest.approx(2 / emb.embed_seconds)  # the model ran two texts
    assert np.array_equal(vecs[0], vecs[1]) and not np.array_equal(vecs[0], vecs[2])
    alone, _ = Embedder().embed([texts[1]])  # what the model gives that text alone
    assert float(alone[0] @ vecs[1]) > 0.99999
    again = Embedder(cache_dir=tmp_path)
    assert np.array_equal(again.embed(texts)[0], vecs) and again.texts_embedded == 0


def test_device_auto_falls_back_to_the_cpu_and_a_batch_fits_it(tmp_path):
    import torch

    from chunkeval.engine.embedding import check_device, fitting_batch, pick_device

    assert check_device(None) == "auto" and check_device("cpu") == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device("auto") == expected
    assert fitting_batch("cpu", None) == 16 and fitting_batch("cpu", 7) == 7
    emb = Embedder(cache_dir=tmp_path, batch_size=None, device="auto")
    vecs, _ = emb.embed(["one text", "another text"])
    assert vecs.shape == (2, 384) and emb.batch_size == (16 if expected == "cpu" else fitting_batch("cuda", None))


def test_a_cold_cache_loads_the_model_in_the_background_once_and_a_warm_one_never(tmp_path, monkeypatch):
    """`load_if_cold` (a first run's chunk step) starts the model's load in a thread; whoever asks for the model
    meanwhile (the width, the vectors) waits for that load instead of beginning another; over a warm cache it loads
    nothing, so a warm run still loads no model."""
    from chunkeval.engine.embedding import embedder as module

    loads = []
    real = module.load_runner

    def counted(*args, **kwargs):  # the real loader, counted
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "load_runner", counted)
    cold = Embedder(cache_dir=tmp_path)
    cold.load_if_cold()
    assert cold.width() == 384  # asked for while the thread loads: waits for it
    cold.embed(["alpha beta", "gamma delta"])
    assert loads == ["all-MiniLM-L6-v2"] and cold.model_loaded
    warm = Embedder(cache_dir=tmp_path)
    warm.load_if_cold()
    warm.embed(["alpha beta"])
    assert loads == ["all-MiniLM-L6-v2"] and not warm.model_loaded and warm.texts_embedded == 0


def test_texts_read_alike_share_a_vector_across_parts_and_a_window_bounds_the_readings(tmp_path, monkeypatch):
    """What the model reads is found for a window of texts at once (a sweep's all), so texts read alike (equal word
    pieces: here, spacing apart) share one vector across the cache's parts; a smaller window gives the same
    vectors, sharing only within each window."""
    from chunkeval.engine.embedding import embedder as module

    texts = ["alpha beta", "gamma delta", "a longer text about lighthouses", "alpha  beta", "gamma   delta"]
    whole = Embedder(cache_dir=tmp_path / "whole", flush_every=2, part_seconds=0)
    vectors, _ = whole.embed(texts)
    assert whole.texts_embedded == 5 and whole.texts_shared == 2  # across parts of two texts
    assert np.array_equal(vectors[0], vectors[3]) and np.array_equal(vectors[1], vectors[4])
    assert len(list((tmp_path / "whole" / whole.fingerprint).glob("part-*.parquet"))) == 2  # 3 run, in parts of 2
    monkeypatch.setattr(module, "READ_WINDOW", 2)
    windowed = Embedder(cache_dir=tmp_path / "windowed", flush_every=2, part_seconds=0)
    again, _ = windowed.embed(texts)
    assert windowed.texts_embedded == 5 and windowed.texts_shared == 0  # no alike pair within a window of two
    assert np.allclose(again, vectors, atol=1e-6)
