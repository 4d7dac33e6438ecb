"""Third-party text splitters: the strings they return are located FORWARD in the corpus, verbatim or
with whitespace ignored, into exact offsets. Real splitters (semchunk, LangChain) run end to end."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkeval.engine.chunking import (
    RECURSIVE_SEPARATORS,
    ChunkerSpec,
    chunk_corpora,
    fixed_char,
    fixed_token,
    get_encoding,
    recursive_token,
    resolve_chunker,
)
from chunkeval.engine.chunking.splitters import ChunkerOutputError, as_chunker, locate_chunks, to_offsets
from chunkeval.errors import InputError

DEMO = Path(__file__).resolve().parent / "data" / "tiny_demo" / "corpora"
CHROMA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "chroma_general"
HERE = __name__  # splitters below are named to `--chunker` as f"{HERE}:function"


def demo_corpora() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(DEMO.glob("*.md"))}


def cl100k_tokens(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


def texts_of(corpora: dict[str, str], chunks, name: str) -> list[str]:
    keep = chunks.corpus == chunks.corpus_names.index(name)
    return [corpora[name][s:e] for s, e in zip(chunks.start[keep].tolist(), chunks.end[keep].tolist())]


def spans_of(chunks, name: str) -> list[tuple[int, int]]:
    keep = chunks.corpus == chunks.corpus_names.index(name)
    return list(zip(chunks.start[keep].tolist(), chunks.end[keep].tolist()))


def squeeze(text: str) -> str:
    return "".join(text.split())


# --------------------------------------------------------------------------- splitters named by module:function


def semchunk_split(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    import semchunk

    return semchunk.chunk(text, chunk_size, cl100k_tokens, overlap=chunk_overlap or None)


def langchain_split(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        length_function=cl100k_tokens,
        separators=list(RECURSIVE_SEPARATORS),
    )
    return splitter.split_text(text)


def paragraph_split(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    return text.split("\n\n")


def collapsing_split(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    """Windows of chunk_size words, stride chunk_size - chunk_overlap, joined with single spaces."""
    words = text.split()
    return [
        " ".join(words[i : i + chunk_size])
        for i in range(0, max(len(words) - chunk_overlap, 1), chunk_size - chunk_overlap)
    ]


def never_split(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    return [text[:30], "Nowhere in the text"]


# --------------------------------------------------------------------------- real splitters, end to end


@pytest.mark.parametrize("size,overlap", [(50, 0), (50, 10), (200, 0), (100, 30)])
def test_semchunk_through_chunk_corpora_gives_semchunks_own_offsets(size, overlap):
    semchunk = pytest.importorskip("semchunk", reason="semchunk is a test extra: pip install -e '.[test]'")
    corpora = demo_corpora()
    chunks = chunk_corpora(corpora, ChunkerSpec(f"{HERE}:semchunk_split", size, overlap))
    for name, text in corpora.items():
        strings, offsets = semchunk.chunk(text, size, cl100k_tokens, overlap=overlap or None, offsets=True)
        assert texts_of(corpora, chunks, name) == strings  # corpus[start:end] is each returned string
        assert spans_of(chunks, name) == [tuple(o) for o in offsets]  # and where semchunk itself says it is


@pytest.mark.parametrize("size,overlap", [(20, 5), (50, 0), (50, 10), (100, 30), (200, 0)])
def test_langchain_recursive_splitter_through_chunk_corpora_is_recursive_token(size, overlap):
    pytest.importorskip("langchain_text_splitters", reason="langchain-text-splitters is a test extra")
    corpora = demo_corpora()
    chunks = chunk_corpora(corpora, ChunkerSpec(f"{HERE}:langchain_split", size, overlap))
    for name, text in corpora.items():
        assert texts_of(corpora, chunks, name) == langchain_split(text, size, overlap)
        # recursive_token transcribes this splitter on offsets: the located strings land on its spans
        starts, ends = recursive_token(text, size, overlap)
        assert spans_of(chunks, name) == list(zip(starts.tolist(), ends.tolist()))
    assert np.all(chunks.n_tokens > 0)


def test_finance_forward_search_places_every_chunk_where_search_from_the_start_does_not():
    finance = CHROMA / "corpora" / "finance.md"
    if not finance.is_file():
        pytest.skip(f"the shared data set is absent: expected {finance}")
    text = finance.read_text(encoding="utf-8")
    starts, ends = fixed_token(text, 200, 0)
    strings = [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    naive = np.array([text.find(s) for s in strings])  # Chroma's evaluation: from the corpus start
    assert (len(strings), int(np.sum(naive != starts))) == (831, 276)
    found_starts, found_ends = locate_chunks(text, strings, "fixed_token", "finance")
    assert np.array_equal(found_starts, starts) and np.array_equal(found_ends, ends)
    # the same chunks with their whitespace collapsed land on the same spans, trimmed
    squeezed = [" ".join(s.split()) for s in strings]
    found_starts, found_ends = locate_chunks(text, squeezed, "collapse", "finance")
    lead = np.array([len(s) - len(s.lstrip()) for s in strings])
    trail = np.array([len(s) - len(s.rstrip()) for s in strings])
    assert np.array_equal(found_starts, starts + lead) and np.array_equal(found_ends, ends - trail)


# --------------------------------------------------------------------------- forward search


def test_a_repeated_paragraph_maps_to_each_of_its_copies():
    paragraph = "The hive keeps its brood at thirty-five degrees.\nWorkers fan their wings to cool it."
    text = f"{paragraph}\n\n{paragraph}\n\n{paragraph}"
    corpora = {"hive": text}
    chunks = chunk_corpora(corpora, ChunkerSpec(f"{HERE}:paragraph_split", 100, 0))
    step = len(paragraph) + 2
    assert spans_of(chunks, "hive") == [
        (0, len(paragraph)),
        (step, step + len(paragraph)),
        (2 * step, 2 * step + len(paragraph)),
    ]
    assert [text.find(p) for p in paragraph_split(text, 100, 0)] == [0, 0, 0]  # what a search from the start gives


def test_a_short_chunk_is_not_put_inside_the_previous_chunk():
    text = "Mr. Smith went home. Then he slept"
    starts, ends = locate_chunks(text, ["Mr. Smith went home", ".", "Then he slept"], "s", "c")
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 19), (19, 20), (21, 34)]
    # a chunk that only occurs nested in the previous one is still found there
    starts, ends = locate_chunks(text, ["Mr. Smith went home.", "Smith"], "s", "c")
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 20), (4, 9)]


def test_overlapping_chunks_of_a_repeated_passage_each_start_inside_the_previous_one():
    passage = "Sourdough rises slowly; the starter is fed flour and water daily. Bake at 240 C!!"
    text = passage * 4
    size, overlap = len(passage) + 30, 30  # stride = one passage: every window is the same string
    starts, ends = fixed_char(text, size, overlap)
    strings = [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    assert len(set(strings[:-1])) == 1
    found_starts, found_ends = locate_chunks(text, strings, "windows", "bread")
    assert np.array_equal(found_starts, starts) and np.array_equal(found_ends, ends)


def test_overlapping_windows_of_real_text_are_found_exactly():
    for name, text in demo_corpora().items():
        for size, overlap in [(64, 16), (300, 299), (500, 100)]:
            starts, ends = fixed_char(text, size, overlap)
            strings = [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
            found_starts, found_ends = locate_chunks(text, strings, "windows", name)
            assert np.array_equal(found_starts, starts) and np.array_equal(found_ends, ends)


# --------------------------------------------------------------------------- whitespace


def test_whitespace_changed_chunks_span_their_first_to_last_non_whitespace_character():
    text = "a  b\n c\n\nd\te \n\nend.Next one"
    chunks = ["a b c", "  d e  ", "end. Next one"]  # collapsed, padded, a space where there was none
    starts, ends = locate_chunks(text, chunks, "s", "c")
    spans = list(zip(starts.tolist(), ends.tolist()))
    assert spans == [(0, 7), (9, 12), (15, 27)]
    assert [text[s:e] for s, e in spans] == ["a  b\n c", "d\te", "end.Next one"]
    assert all(squeeze(text[s:e]) == squeeze(c) for (s, e), c in zip(spans, chunks))


def test_whitespace_changed_repeats_map_to_their_own_copies():
    text = "x  y\n\nx\ty\n\nx y"
    starts, ends = locate_chunks(text, ["x y", "x y", "x y"], "s", "c")
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 4), (6, 9), (11, 14)]


def test_a_verbatim_chunk_keeps_its_own_whitespace():
    text = "alpha beta\n\ngamma delta\n"
    starts, ends = locate_chunks(text, ["alpha beta\n\n", "gamma delta\n"], "s", "c")
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 12), (12, 24)]


def test_collapsing_splitter_through_chunk_corpora():
    corpora = demo_corpora()
    chunks = chunk_corpora(corpora, ChunkerSpec(f"{HERE}:collapsing_split", 60, 15))
    for name, text in corpora.items():
        strings = collapsing_split(text, 60, 15)
        got = texts_of(corpora, chunks, name)
        assert [g.split() for g in got] == [s.split() for s in strings]  # whitespace-equal
        assert all(not g[0].isspace() and not g[-1].isspace() for g in got)


def test_empty_and_whitespace_only_strings_are_skipped():
    text = "alpha\n\n\nbeta"
    starts, ends = locate_chunks(text, ["", "alpha", " \n ", "", "beta", "\n"], "s", "c")
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 5), (8, 12)]
    starts, ends = locate_chunks(text, [], "s", "c")
    assert starts.dtype == np.int64 and len(starts) == len(ends) == 0


# --------------------------------------------------------------------------- errors


def test_a_chunk_not_in_the_corpus_is_an_input_error_naming_chunker_chunk_and_corpus():
    text = "The quick brown fox jumps over the lazy dog. " * 3
    strings = ["The quick brown fox", "jumps over the lazy dog.", "The quick brown cat and a great many other animals"]
    with pytest.raises(ChunkerOutputError) as caught:
        locate_chunks(text, strings, "mypkg:split", "doc")
    assert str(caught.value) == (
        "chunker 'mypkg:split' returned chunk 2 ('The quick brown cat and a great many oth…') that is not in corpus 'doc' after offset 20"
    )
    assert isinstance(caught.value, InputError)
    # a chunk that is only before the previous one (out of order) is not in the corpus after it
    with pytest.raises(
        ChunkerOutputError, match=r"returned chunk 1 \('alpha'\) that is not in corpus 'c' after offset 6$"
    ):
        locate_chunks("alpha beta", ["beta", "alpha"], "s", "c")


def test_the_error_names_the_corpus_once_known_and_survives_pickling():
    wrapped = as_chunker(never_split, "mypkg:never")
    with pytest.raises(ChunkerOutputError) as caught:
        wrapped("Once upon a time there was a lighthouse keeper.", 10, 0)
    message = "chunker 'mypkg:never' returned chunk 1 ('Nowhere in the text') that is not in {} after offset 0"
    assert str(caught.value) == message.format("the corpus")
    named = caught.value.in_corpus("lighthouses")
    assert str(named) == message.format("corpus 'lighthouses'")
    again = pickle.loads(pickle.dumps(named))
    assert type(again) is ChunkerOutputError and str(again) == str(named) and again.corpus_name == "lighthouses"


def test_chunk_corpora_reports_an_unlocatable_chunk_as_input_error():
    name = f"{HERE}:never_split"
    with pytest.raises(
        InputError,
        match=rf"^chunker '{re.escape(name)}' returned chunk 1 \('Nowhere in the text'\) that is not in "
        r"(corpus 'honeybees'|the corpus) after offset 0$",
    ):
        chunk_corpora(demo_corpora(), ChunkerSpec(name, 50, 0))


@pytest.mark.parametrize(
    "result,expected",
    [
        ("a whole string", r"returned a single string for the corpus; a splitter returns a list of strings"),
        (42, r"returned int for the corpus; a chunker returns \(starts, ends\), a splitter a list of strings"),
        (["alpha", 3], r"returned a sequence of int, str for the corpus"),
        ([[0], [5], [9]], r"returned a sequence of list for the corpus"),
        (np.zeros((3, 2), dtype=np.int64), r"returned an array of shape \(3, 2\) for the corpus"),
    ],
)
def test_output_that_is_neither_offsets_nor_strings_is_an_input_error(result, expected):
    with pytest.raises(ChunkerOutputError, match=r"^chunker 'f' " + expected):
        to_offsets(result, "alpha beta", "f")


def test_offsets_pass_through_and_strings_are_located():
    text = "alpha beta gamma"
    pair = (np.array([0, 6]), np.array([5, 10]))
    assert to_offsets(pair, text, "f") is not None and to_offsets(pair, text, "f")[0] is pair[0]
    assert [list(x) for x in to_offsets(np.array([[0, 6], [5, 10]]), text, "f")] == [[0, 6], [5, 10]]
    assert [x.tolist() for x in to_offsets(["alpha", "beta"], text, "f")] == [
        [0, 6],
        [5, 10],
    ]  # two strings, not offsets
    assert [x.tolist() for x in to_offsets(iter(["gamma"]), text, "f")] == [[11], [16]]
    assert [x.tolist() for x in to_offsets(np.array(["beta"]), text, "f")] == [[6], [10]]


def test_resolve_chunker_wraps_imported_functions_only():
    assert resolve_chunker("fixed_token") is fixed_token
    assert resolve_chunker("chunkeval.engine.chunking:fixed_char") is fixed_char  # registered: already offsets
    wrapped = resolve_chunker(f"{HERE}:paragraph_split")
    assert wrapped.__name__ == "paragraph_split" and as_chunker(wrapped, "again") is wrapped
    assert [x.tolist() for x in wrapped("one\n\ntwo", 10, 0)] == [[0, 5], [3, 8]]


def test_wrapper_keeps_needs_embeddings_and_passes_keyword_arguments():
    def split(text, chunk_size, chunk_overlap, embed):
        assert embed("x") == "vec"
        return text.split()

    split.needs_embeddings = True
    wrapped = as_chunker(split, "mod:split")
    assert wrapped.needs_embeddings is True
    assert [x.tolist() for x in wrapped("ab cd", 5, 0, embed=lambda t: "vec")] == [[0, 3], [2, 5]]


# --------------------------------------------------------------------------- properties

texts = st.text(st.sampled_from("ab \n.é"), min_size=0, max_size=300)


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(1, 40), st.data())
def test_located_windows_are_the_returned_strings_never_past_their_true_start(text, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    starts, ends = fixed_char(text, size, overlap)
    strings = [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    kept = [(s, c) for s, c in zip(starts.tolist(), strings) if c.strip()]
    found_starts, found_ends = locate_chunks(text, strings, "windows", "random")
    assert [text[s:e] for s, e in zip(found_starts.tolist(), found_ends.tolist())] == [c for _, c in kept]
    assert np.all(np.diff(found_starts) > 0)
    # forward search never overshoots: with small alphabets an earlier equal copy may be taken
    assert np.all(found_starts <= np.array([s for s, _ in kept], dtype=np.int64))


words = st.lists(st.sampled_from(["", " ", "  ", "\n", "\n\n", "\t ", "\u00a0", "\u3000"]), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(words, st.integers(1, 8), st.data())
def test_whitespace_collapsed_windows_land_on_their_own_words(gaps, size, data):
    """Distinct words with random whitespace (or none) between them; the splitter returns windows of
    words joined by single spaces. Each lands on exactly its words, first to last character."""
    overlap = data.draw(st.integers(0, size - 1))
    tokens = [f"<{i}>" for i in range(len(gaps))]
    pieces, spans, at = [], [], 0
    for token, gap in zip(tokens, gaps):
        pieces += [token, gap]
        spans.append((at, at + len(token)))
        at += len(token) + len(gap)
    text = "".join(pieces)
    stride = size - overlap
    windows = [(i, min(i + size, len(tokens))) for i in range(0, max(len(tokens) - overlap, 1), stride)]
    strings = [" ".join(tokens[a:b]) for a, b in windows]
    found_starts, found_ends = locate_chunks(text, strings, "words", "random")
    assert list(zip(found_starts.tolist(), found_ends.tolist())) == [(spans[a][0], spans[b - 1][1]) for a, b in windows]
