"""Chunk offsets are exact: `text[start:end]` is the chunk, whatever the text holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkeval.engine.chunking import (
    CHUNKERS,
    ChunkerSpec,
    chunk_corpora,
    count_tokens,
    fixed_token,
    get_encoding,
    recursive_token,
    register_chunker,
    resolve_chunker,
    token_offsets,
    window_bounds,
)
from chunkeval.errors import InputError

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=400)


def chroma_windows(ids, size, overlap):
    """Chroma's FixedTokenChunker loop, transcribed: windows of token ids."""
    out, start = [], 0
    cur = min(start + size, len(ids))
    while start < len(ids):
        out.append(ids[start:cur])
        if cur == len(ids):
            break
        start += size - overlap
        cur = min(start + size, len(ids))
    return out


@settings(max_examples=200, deadline=None)
@given(texts)
def test_token_offsets_tile_the_text(text):
    start, end = token_offsets(text)
    enc = get_encoding()
    assert len(start) == len(enc.encode_ordinary(text))
    if len(start):
        assert start[0] == 0 and end[-1] == len(text)
        assert np.all(np.diff(start) >= 0) and np.all(end >= start)


@settings(max_examples=200, deadline=None)
@given(texts, st.integers(1, 40), st.data())
def test_fixed_token_windows_are_chromas_windows(text, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    enc = get_encoding()
    ids = enc.encode_ordinary(text)
    starts, ends = fixed_token(text, size, overlap)
    windows = chroma_windows(ids, size, overlap)
    assert len(starts) == len(windows)
    for s, e, window in zip(starts, ends, windows, strict=True):
        raw = b"".join(enc.decode_single_token_bytes(t) for t in window)
        chunk = text[s:e].encode("utf-8")
        # the chunk holds the window's bytes, widened at most to whole characters at each edge
        assert raw in chunk and len(chunk) - len(raw) <= 6
        if not any(b >= 0x80 for b in raw):
            assert chunk == raw


def test_multibyte_character_split_at_a_window_edge():
    text = "ab😀cd"  # tokens: b"ab", b"\xf0\x9f\x98", b"\x80", b"cd": the emoji is split over two tokens
    enc = get_encoding()
    assert [enc.decode_single_token_bytes(t) for t in enc.encode_ordinary(text)] == [
        b"ab",
        b"\xf0\x9f\x98",
        b"\x80",
        b"cd",
    ]
    # windows of 2 tokens: [ab, emoji-part] [emoji-part, cd]: each takes the whole emoji
    starts, ends = fixed_token(text, 2, 0)
    assert [text[s:e] for s, e in zip(starts, ends)] == ["ab😀", "😀cd"]
    # a window that is only the second half of the emoji still maps to that character
    starts, ends = fixed_token(text, 1, 0)
    assert [text[s:e] for s, e in zip(starts, ends)] == ["ab", "😀", "😀", "cd"]


def test_repeated_passages_get_their_own_offsets():
    passage = "The same sentence appears twice in this corpus. "
    text = passage * 6
    for name in ("fixed_token", "fixed_char", "recursive_token"):
        starts, ends = CHUNKERS[name](text, 10, 0)
        assert len(set(zip(starts.tolist(), ends.tolist()))) == len(starts)
        assert list(starts) == sorted(starts)


@pytest.mark.parametrize(
    "n,size,overlap,expected",
    [
        (10, 4, 0, [(0, 4), (4, 8), (8, 10)]),
        (10, 4, 2, [(0, 4), (2, 6), (4, 8), (6, 10)]),
        (3, 5, 1, [(0, 3)]),
        (0, 5, 1, []),
    ],
)
def test_window_bounds(n, size, overlap, expected):
    s, e = window_bounds(n, size, overlap)
    assert list(zip(s.tolist(), e.tolist())) == expected


@settings(max_examples=100, deadline=None)
@given(texts, st.integers(2, 60), st.data())
def test_recursive_chunks_respect_budget_and_cover_all_non_space(text, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    starts, ends = recursive_token(text, size, overlap)
    covered = np.zeros(len(text), bool)
    for s, e in zip(starts.tolist(), ends.tolist()):
        assert 0 <= s < e <= len(text)
        assert not text[s].isspace() and not text[e - 1].isspace()
        covered[s:e] = True
    for i, ch in enumerate(text):
        if not ch.isspace():
            assert covered[i], (i, ch)


def test_recursive_prefers_paragraph_then_sentence_boundaries():
    para1 = "First paragraph has one sentence. And a second one."
    para2 = "Second paragraph is here."
    text = f"{para1}\n\n{para2}"
    starts, ends = recursive_token(text, 8, 0)
    chunks = [text[s:e] for s, e in zip(starts, ends)]
    assert chunks == ["First paragraph has one sentence", ". And a second one.", "Second paragraph is here."]
    sizes = count_tokens(chunks)
    assert all(sizes <= 8)


def test_recursive_overlap_carries_trailing_pieces():
    text = " ".join(f"w{i}" for i in range(40))
    starts, ends = recursive_token(text, 12, 4)
    assert len(starts) > 1
    assert all(starts[i + 1] < ends[i] for i in range(len(starts) - 1))  # neighbours overlap


def test_chunk_corpora_on_the_shared_data(chroma):
    from chunkeval.engine.inputs.corpus import load_corpora

    corpora = load_corpora(chroma / "corpora")
    for spec in (
        ChunkerSpec("fixed_token", 200, 50),
        ChunkerSpec("fixed_char", 800, 400),
        ChunkerSpec("recursive_token", 200, 0),
    ):
        chunks = chunk_corpora(corpora, spec)
        assert len(chunks) > 100 and len(set(chunks.ids())) == len(chunks)
        texts = chunks.texts(corpora)
        sample = np.random.default_rng(0).choice(len(chunks), 50, replace=False)
        for i in sample:
            name = chunks.corpus_names[chunks.corpus[i]]
            assert texts[i] == corpora[name][chunks.start[i] : chunks.end[i]]
        if spec.chunker == "fixed_token":
            assert chunks.n_tokens.max() <= 201
        if spec.chunker == "recursive_token":
            assert chunks.n_tokens.max() <= 200 * 1.1


def test_chunker_validation_and_plugins():
    with pytest.raises(InputError, match="chunk_overlap"):
        ChunkerSpec("fixed_token", 100, 100).validate()
    with pytest.raises(InputError, match="unknown chunker"):
        ChunkerSpec("nope", 100, 0).validate()

    @register_chunker("sentences_test")
    def sentences(text, chunk_size, chunk_overlap):
        bounds = [0] + [i + 1 for i, c in enumerate(text) if c == "."] + [len(text)]
        pairs = [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
        return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])

    chunks = chunk_corpora({"x": "One. Two. Three."}, ChunkerSpec("sentences_test", 1, 0))
    assert chunks.texts({"x": "One. Two. Three."}) == ["One.", " Two.", " Three."]
    assert resolve_chunker("chunkeval.engine.chunking:fixed_char") is CHUNKERS["fixed_char"]
    with pytest.raises(InputError, match="cannot import"):
        resolve_chunker("no_such_module:f")


def test_a_documents_token_offsets_are_kept_read_only_and_equal_fresh_ones():
    """A sweep chunks a document once per size and overlap: its offsets are computed once and kept, read-only,
    and equal the offsets computed afresh (a document over the kept size is never kept)."""
    from chunkeval.engine.chunking import tokens

    text = "Lighthouses guide ships. Ünïcode and emoji 🐝 too. " * 50
    first = tokens.token_offsets(text)
    again = tokens.token_offsets(text)
    assert first[0] is again[0] and not first[0].flags.writeable and not first[1].flags.writeable
    fresh = tokens._token_offsets(text, tokens.TOKENIZER)
    assert np.array_equal(first[0], fresh[0]) and np.array_equal(first[1], fresh[1])
    with pytest.raises(ValueError):
        first[0][0] = 5
