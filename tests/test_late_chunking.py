"""Late chunking (`late`, chunkeval.engine.embedding.late): exact by construction, checked against today's vectors
and against an independent computation from sentence-transformers' token embeddings; the window rule; the cache;
the refusals."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from chunkeval.engine.embedding import Embedder, late
from chunkeval.engine.embedding.registry import resolve_model
from chunkeval.errors import InputError

MODEL = "all-MiniLM-L6-v2"
DOC = (
    "Late chunking reads each chunk inside its document. The model runs once over a window of the text, and "
    "every chunk's vector is the mean of the token embeddings that fall inside its span. Unbelievably, a pronoun "
    "such as it then carries what it refers to: the window saw the sentence before. Chunks cut mid-word, like "
    "this one, still take the word pieces they overlap."
)


def cuts(text: str, every: int) -> tuple[np.ndarray, np.ndarray]:
    starts = np.arange(0, len(text), every, dtype=np.int64)
    return starts, np.minimum(starts + every, len(text))


def token_embeddings(st, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """sentence-transformers' own token embeddings of `text`, with each token's characters and whether the
    model added it (its [CLS] and [SEP])."""
    hidden = np.asarray(st.encode(text, output_value="token_embeddings", convert_to_numpy=True))
    enc = st.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    return hidden, np.asarray(enc["offset_mapping"]), np.asarray(enc["special_tokens_mask"], dtype=bool)


def by_hand(hidden, offsets, special, start, end) -> np.ndarray:
    """The issue's definition in numpy: the mean of the added tokens and those overlapping [start, end), normalised."""
    member = special | ((offsets[:, 0] < end) & (offsets[:, 1] > start))
    vector = hidden[member].mean(axis=0)
    return vector / np.linalg.norm(vector)


@pytest.fixture(scope="module")
def embedder():
    return Embedder(MODEL, cache_dir=None, device="cpu", backend="torch")


def test_a_chunk_that_is_one_window_is_todays_vector(embedder):
    """The same pooling over the same tokens: whole documents read in windows that hold them, at the smallest
    window that does (their tokens and the two the model adds) and at the position limit."""
    docs = [DOC, "A short one.", "  Leading and trailing spaces are not tokens.  ", "x"]
    today, _ = embedder.embed(docs)
    spans = [(np.array([0]), np.array([len(d)])) for d in docs]
    tokenizer = late.tokenizer_of(resolve_model(MODEL))
    tight = max(len(tokenizer.encode(d).ids) for d in docs) + 2
    for size in (tight, 512):
        vectors, truncated = embedder.embed_late(docs, spans, size)
        assert not truncated.any()
        assert np.min(np.sum(vectors * today, axis=1)) > 1 - 1e-6


def test_chunks_in_one_window_equal_an_independent_computation(embedder):
    st = embedder._load().st
    hidden, offsets, special = token_embeddings(st, DOC)
    assert len(hidden) <= 256  # sentence-transformers read the whole document
    starts, ends = cuts(DOC, 37)  # cuts mid-word, mid-token
    vectors, _ = embedder.embed_late([DOC], [(starts, ends)], 512)
    expected = np.stack([by_hand(hidden, offsets, special, s, e) for s, e in zip(starts, ends)])
    assert np.min(np.sum(vectors * expected, axis=1)) > 1 - 1e-6
    # context changes them: not the chunks' own vectors
    own, _ = embedder.embed([DOC[s:e] for s, e in zip(starts, ends)])
    assert np.min(np.sum(vectors * own, axis=1)) < 0.99


def test_chunks_in_small_windows_equal_an_independent_computation_of_their_window(embedder):
    """Windows of 32 tokens: each chunk is pooled in the window the plan names, computed again from
    sentence-transformers' token embeddings of that window's text; a chunk longer than a window over its pieces."""
    st = embedder._load().st
    doc = DOC * 2
    starts, ends = cuts(doc, 60)
    starts, ends = np.append(starts, 10), np.append(ends, 400)  # a long chunk, read in pieces
    tokenizer = late.tokenizer_of(resolve_model(MODEL))
    plan = late.plan(tokenizer, [doc], [(starts, ends)], 32, "")
    vectors, _ = embedder.embed_late([doc], [(starts, ends)], 32)
    for n, items in enumerate(plan.items):
        sums, count = 0.0, 0
        for w, s, e in items:
            hidden, offsets, special = token_embeddings(st, plan.texts[w])
            assert len(hidden) <= 32
            member = special | ((offsets[:, 0] < e) & (offsets[:, 1] > s))
            sums, count = sums + hidden[member].sum(axis=0), count + member.sum()
        expected = sums / count
        assert float(vectors[n] @ (expected / np.linalg.norm(expected))) > 1 - 1e-6
    assert len(plan.items[-1]) > 1


def test_no_chunk_that_fits_a_window_is_cut():
    """Random chunkings of a long document: every window holds at most `width` tokens and starts and ends at a
    word's edge; a chunk of at most `width` tokens is read whole in one window; a longer one in pieces covering it."""
    rng = np.random.default_rng(0)
    tokenizer = late.tokenizer_of(resolve_model(MODEL))
    doc = " ".join(rng.choice(["alpha", "beta,", "gamma.", "unbelievably", "x", "chunking"], size=3000))
    enc = tokenizer.encode(doc, add_special_tokens=False)
    offsets = np.asarray(enc.offsets)
    words = np.asarray(enc.word_ids)
    first = np.concatenate([[True], words[1:] != words[:-1]])
    for width in (14, 62, 254):
        starts = np.sort(rng.integers(0, len(doc) - 1, 200))
        ends = np.minimum(starts + rng.integers(1, 8 * width, 200), len(doc))
        placed = late.place(offsets[:, 0], offsets[:, 1], first, starts, ends, width)
        edges = set(np.flatnonzero(first).tolist()) | {len(offsets)}
        for lo, hi in placed.windows:
            assert 0 < hi - lo <= width and lo in edges and hi in edges
        for s, e, reads in zip(starts, ends, placed.reads):
            inside = np.flatnonzero((offsets[:, 0] < e) & (offsets[:, 1] > s))
            if not len(inside):  # a space only: pooled with the added tokens of a window around it
                continue
            a, b = inside.min(), inside.max() + 1
            held = [(placed.windows[w][0] <= a and b <= placed.windows[w][1]) for w in reads]
            if len(reads) == 1:
                assert held[0]
            else:  # too long for a window: consecutive pieces from its first token to its last
                spans = [placed.windows[w] for w in reads]
                assert spans[0][0] <= a and spans[-1][1] >= b
                assert all(x[1] == y[0] for x, y in zip(spans, spans[1:]))


def test_a_second_run_embeds_nothing_and_loads_no_model(tmp_path):
    docs = [DOC, DOC[::-1]]
    spans = [cuts(d, 50) for d in docs]
    first = Embedder(MODEL, cache_dir=tmp_path, device="cpu", backend="torch")
    vectors, _ = first.embed_late(docs, spans, 64)
    assert first.texts_embedded == sum(len(s[0]) for s in spans) and first.late_tokens > 0
    again = Embedder(MODEL, cache_dir=tmp_path, device="cpu", backend="torch")
    cached, _ = again.embed_late(docs, spans, 64)
    assert again.texts_embedded == 0 and not again.model_loaded
    np.testing.assert_array_equal(cached, vectors)
    # the key is the window's text and the chunk's span: a chunk's vector is not a plain text's
    plain, _ = again.embed([DOC[:50]])
    assert again.model_loaded and float(plain[0] @ cached[0]) < 0.99


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_exported_backends_read_chunks_late_as_torch_does(embedder, backend):
    pytest.importorskip("onnxruntime")
    if backend == "openvino":
        pytest.importorskip("openvino")
    spans = [cuts(DOC, 40)]
    reference, _ = embedder.embed_late([DOC], spans, 48)
    other = Embedder(MODEL, cache_dir=None, device="cpu", backend=backend)
    vectors, _ = other.embed_late([DOC], spans, 48)
    assert np.abs(vectors - reference).max() < 1e-5


@pytest.mark.parametrize(
    "text, message",
    [
        ("window", "late must be none or window:size=N"),
        ("window:size=abc", "late must be none or window:size=N"),
        ("window:n=2", "late must be none or window:size=N"),
        ("window:size=4", "at least 8"),
    ],
)
def test_bad_settings_are_one_line(text, message):
    with pytest.raises(InputError, match=message):
        late.parse_late(text)


def test_models_that_cannot_read_late_are_refused(tmp_path):
    folder = resolve_model(MODEL)
    assert late.parse_late("window:size=512") == 512 and late.refusal(MODEL, folder, 512) is None
    assert "position limit (512" in late.refusal(MODEL, folder, 513)
    assert "served model" in late.refusal("openai:text-embedding-3-small", None, 256)
    cls = tmp_path / "cls-model"
    cls.mkdir()
    for name in os.listdir(folder):
        if name != "1_Pooling":
            (cls / name).symlink_to(folder / name)
    (cls / "1_Pooling").mkdir()
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (cls / "1_Pooling" / "config.json").write_text(json.dumps(config))
    assert "pools by cls_token; late chunking needs mean pooling" in late.refusal("cls-model", cls, 256)
    static = tmp_path / "static"
    static.mkdir()
    (static / "modules.json").write_text(json.dumps([{"idx": 0, "path": "0_Static", "type": "x.StaticEmbedding"}]))
    assert "not a transformer" in late.refusal("static", static, 256)
    with pytest.raises(InputError, match="cls_token"):
        Embedder(str(cls), cache_dir=None, device="cpu", backend="torch").embed_late([DOC], [cuts(DOC, 50)], 64)


def small(**changes):
    from chunkeval.engine.pipeline.experiment import Experiment

    grid = {
        "chunker": ("fixed_token",),
        "chunk_sizes": (100,),
        "overlaps": ("0",),
        "k": (1, 3),
        "retriever": ("dense",),
    }
    return Experiment.demo().with_overrides(model=(MODEL,), **{**grid, **changes})


@pytest.mark.slow  # three sweeps of the demo with the model
def test_the_axis_late_none_keeps_todays_rows_and_ids_and_a_second_run_embeds_nothing(tmp_path):
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.vocabulary import config_id

    assert "late" not in small().to_dict()  # recorded as before the axis existed
    plain = run_sweep(small(), Embedders(tmp_path))
    exp = small(late=("none", "window:size=256"), context=("none", "title"))
    embedders = Embedders(tmp_path)
    both = run_sweep(exp, embedders)
    rows = both.summary.to_pylist()
    # late crosses context none only: (none, none), (title, none), (none, window)
    assert sorted({(r["context"], r["late"]) for r in rows}) == [
        ("none", "none"), ("none", "window:size=256"), ("title", "none"),
    ]  # fmt: skip
    none = [r for r in both.per_query.to_pylist() if r["late"] == "none" and r["context"] == "none"]
    assert none == plain.per_query.to_pylist()
    assert {config_id(r) for r in plain.summary.to_pylist()} < {config_id(r) for r in rows}
    assert len({config_id(r) for r in rows}) == len(rows)
    late_rows = [r for r in both.per_query.to_pylist() if r["late"] != "none"]
    assert [r["span_recall"] for r in late_rows] != [r["span_recall"] for r in none]
    again = Embedders(tmp_path)
    second = run_sweep(exp, again)
    assert again.texts_embedded == 0 and not again.model_loaded
    assert second.per_query.to_pylist() == both.per_query.to_pylist()


def test_a_grid_with_late_leaves_out_what_cannot_read_late_and_says_so():
    """Late chunking on the demo's grid (issue 52): minilm-static cannot read late and bm25 reads no vectors, so
    their late configurations are left out (one notice names both) instead of the grid being refused or bm25's
    unchanged rows labelled late; only a grid whose every model refuses is an error (the catalogue's cases)."""
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.grid import grid_size
    from chunkeval.engine.pipeline.sweep import late_notice

    base = Experiment.demo()
    late = base.with_overrides(late=("none", "window:size=256"))
    # 8 chunkings × k 2: without late, (2 dense + bm25) each; late adds MiniLM's dense alone
    assert grid_size(base) == 8 * 2 * 3 and grid_size(late) == 8 * 2 * 3 + 8 * 2
    said = late_notice(late)
    assert "minilm-static is a static model" in said and "bm25 reads no vectors" in said
    assert late_notice(base) is None
