"""Plug-ins that the tests name on the command line (`--retriever plugins_for_tests:...`,
`--chunker plugins_for_tests:...`): pytest puts this folder on sys.path."""

import numpy as np


def reversed_dense(request):
    """A reranker: the dense top 20, in reverse order."""
    return np.asarray(request.candidates)[:, ::-1][:, : request.k]


reversed_dense.candidates = 20


def out_of_range(request):
    return np.full((len(request.query_texts), request.k), len(request.chunk_texts) + 5)


out_of_range.needs_embeddings = False


def wrong_shape(request):
    return np.zeros((len(request.query_texts), request.k + 3), dtype=np.int64)


wrong_shape.needs_embeddings = False


def paragraphs(text, chunk_size, chunk_overlap):
    """A text splitter (strings, not offsets): one chunk per paragraph, stripped."""
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def invents_text(text, chunk_size, chunk_overlap):
    return [text[:20], "words that are nowhere in the corpus"]


def every_chunk_backwards(request):
    """Every chunk, the last first (for the check that reranking every chunk gives dense retrieval)."""
    n = len(request.chunk_texts)
    order = np.arange(n - 1, -1, -1, dtype=np.int64)[: request.k]
    out = np.full((len(request.query_texts), request.k), -1, dtype=np.int64)
    out[:, : len(order)] = order
    return out


def has_a_bug(request):
    """A retriever with a bug in it: what chunkeval did not expect ends in one line, exit 4."""
    return {}["no such key"]


has_a_bug.needs_embeddings = False
