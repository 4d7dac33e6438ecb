"""The real all-MiniLM-L6-v2 and the Parquet cache."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq

from chunkeval.embedding import Embedder, EmbeddingCache, model_fingerprint, resolve_model


def test_vectors_are_normalized_and_meaningful(embedder_factory):
    emb = embedder_factory()
    vecs, truncated = emb.embed(["A cat sat on the mat.", "A kitten is sitting on a rug.", "Quarterly revenue rose 8%."])
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
