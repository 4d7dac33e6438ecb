"""Embedding-based chunkers: Chroma's ClusterSemanticChunker and KamradtModifiedChunker, on offsets.

Both cut the text into pieces of at most 50 cl100k tokens with the recursive splitter
(`recursive_token(text, 50, 0)`), embed pieces (or windows of pieces), and group consecutive pieces
into chunks. A chunk runs from its first piece's start to its last piece's end in the original text,
so `text[start:end]` is the chunk (never a re-joined string). `chunk_overlap` is ignored.

- `cluster_semantic`: the grouping of consecutive pieces, at most `chunk_size // 50` pieces a group,
  that maximises the summed within-group similarity (similarities less their mean, diagonal zeroed).
- `semantic_breakpoint`: a break after every piece whose 7-piece window is further (cosine distance)
  from the next piece's window than a threshold, the threshold found by binary search so that the
  number of breaks is `total tokens // chunk_size`.

Both are registered with `needs_embeddings=True`: `chunk_corpora(..., embed=...)` passes them
`embed(list[str]) -> (n, d)` float32 L2-normalised vectors. See docs/semantic_chunkers.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from chunkeval.engine.chunking.fixed import recursive_token
from chunkeval.engine.chunking.registry import register_chunker
from chunkeval.engine.chunking.tokens import count_tokens
from chunkeval.errors import InputError

Embed = Callable[[list[str]], np.ndarray]

PIECE_TOKENS = 50  # Chroma's min_chunk_size: the recursive splitter's piece size
WINDOW_NEIGHBOURS = 3  # Chroma's buffer_size in KamradtModifiedChunker.split_text
SEARCH_TOLERANCE = 1e-6  # Chroma's stopping rule for the threshold search

_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


# --------------------------------------------------------------------------- shared


def _check_size(name: str, chunk_size: int) -> None:
    if chunk_size < PIECE_TOKENS:
        raise InputError(
            f"chunker {name!r} needs chunk_size ≥ {PIECE_TOKENS} (its pieces are {PIECE_TOKENS} tokens), got {chunk_size}"
        )


def semantic_pieces(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The pieces both chunkers group: recursive splitter offsets at 50 tokens, no overlap."""
    return recursive_token(text, PIECE_TOKENS, 0)


def _embed(embed: Embed, texts: list[str], name: str) -> np.ndarray:
    """float64 unit vectors of `texts` (re-normalised, a zero vector left as zero)."""
    vectors = np.asarray(embed(texts), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise InputError(
            f"chunker {name!r}: the embedding function returned shape {vectors.shape} for {len(texts)} texts"
        )
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


# --------------------------------------------------------------------------- cluster_semantic


def similarity_rewards(matrix: np.ndarray, max_cluster: int) -> np.ndarray:
    """Reward of every candidate group, from a similarity matrix, as Chroma scores it.

    The matrix loses the mean of its strictly upper triangle (the mean off-diagonal similarity),
    then its diagonal is set to 0; a group's reward is the sum of its square sub-matrix.
    Returns `R` of shape (n, max_cluster): `R[i, s - 1]` is the reward of pieces `i-s+1 .. i`
    (-inf where that group would start before piece 0). Sums come from 2-D prefix sums.
    """
    m = np.array(matrix, dtype=np.float64)  # a copy: the caller's matrix is left alone
    n = m.shape[0]
    if n > 1:
        m -= m[np.triu_indices(n, k=1)].mean()
    np.fill_diagonal(m, 0.0)
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = m.cumsum(axis=0).cumsum(axis=1)
    last = np.arange(n)[:, None]
    first = last - np.arange(max_cluster)[None, :]
    valid = first >= 0
    a, b = np.where(valid, first, 0), last + 1
    rewards = prefix[b, b] - prefix[a, b] - prefix[b, a] + prefix[a, a]
    return np.where(valid, rewards, -np.inf)


def vector_rewards(vectors: np.ndarray, max_cluster: int) -> np.ndarray:
    """`similarity_rewards(vectors @ vectors.T, max_cluster)` without the n × n matrix.

    A group's summed dot products is |sum of its vectors|², so its reward is that less the group's
    squared norms (the zeroed diagonal) less mean × (s² - s) (its off-diagonal entries). Memory is
    O(n · (d + max_cluster)).
    """
    e = np.asarray(vectors, dtype=np.float64)
    n = e.shape[0]
    squares = np.einsum("ij,ij->i", e, e)
    total = e.sum(axis=0)
    mean = (total @ total - squares.sum()) / (n * (n - 1)) if n > 1 else 0.0
    rewards = np.full((n, max_cluster), -np.inf)
    group, group_squares = e.copy(), squares.copy()  # groups of size s, indexed by first piece
    for s in range(1, min(max_cluster, n) + 1):
        if s > 1:
            group = group[:-1] + e[s - 1 :]
            group_squares = group_squares[:-1] + squares[s - 1 :]
        rewards[s - 1 :, s - 1] = np.einsum("ij,ij->i", group, group) - group_squares - mean * (s * s - s)
    return rewards


def optimal_segmentation(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The split of pieces 0..n-1 into consecutive groups with the largest summed reward.

    `rewards` is (n, max_cluster) as `similarity_rewards` gives it. Returns `(first, last)`, the
    inclusive piece range of each group in order. Among equal totals the last group is the shortest
    (Chroma tries sizes in increasing order and keeps a strictly better one). O(n · max_cluster).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    n, max_cluster = rewards.shape
    best = np.zeros(n + 1)  # best[j]: best total over pieces 0..j-1
    size = np.zeros(n, dtype=np.int64)  # size of the last group of the best split of 0..i
    for i in range(n):
        sizes = min(max_cluster, i + 1)
        candidates = best[i + 1 - sizes : i + 1][::-1] + rewards[i, :sizes]  # group sizes 1..sizes
        k = int(np.argmax(candidates))
        best[i + 1] = candidates[k]
        size[i] = k + 1
    lasts = []
    i = n - 1
    while i >= 0:
        lasts.append(i)
        i -= size[i]
    last = np.asarray(lasts[::-1], dtype=np.int64)
    return last - size[last] + 1, last


def segment_similarity(matrix: np.ndarray, max_cluster: int) -> tuple[np.ndarray, np.ndarray]:
    """The DP of `cluster_semantic` as a pure function of a similarity matrix: `(first, last)` per group."""
    return optimal_segmentation(similarity_rewards(matrix, max_cluster))


@register_chunker("cluster_semantic", needs_embeddings=True, min_chunk_size=PIECE_TOKENS)
def cluster_semantic(text: str, chunk_size: int, chunk_overlap: int, *, embed: Embed) -> tuple[np.ndarray, np.ndarray]:
    """Chroma's ClusterSemanticChunker: 50-token pieces grouped, at most `chunk_size // 50` a group,
    so that the summed within-group similarity (less the mean similarity, diagonal zeroed) is largest."""
    _check_size("cluster_semantic", chunk_size)
    starts, ends = semantic_pieces(text)
    if len(starts) == 0:
        return _EMPTY
    vectors = _embed(embed, [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())], "cluster_semantic")
    first, last = optimal_segmentation(vector_rewards(vectors, max(1, chunk_size // PIECE_TOKENS)))
    return starts[first], ends[last]


# --------------------------------------------------------------------------- semantic_breakpoint


def neighbour_windows(
    starts: np.ndarray, ends: np.ndarray, neighbours: int = WINDOW_NEIGHBOURS
) -> tuple[np.ndarray, np.ndarray]:
    """Each piece widened by up to `neighbours` pieces on either side: from the first piece's start to
    the last piece's end (the corpus substring, where Chroma joins the piece texts with spaces)."""
    n = len(starts)
    index = np.arange(n)
    return np.asarray(starts)[np.maximum(index - neighbours, 0)], np.asarray(ends)[
        np.minimum(index + neighbours, n - 1)
    ]


def breakpoint_threshold(distances: np.ndarray, n_cuts: int) -> float:
    """Chroma's binary search: on [0, 1], halve until the bounds are within 1e-6; a midpoint with more
    than `n_cuts` distances above it becomes the lower bound, otherwise the upper bound. Returns the
    last midpoint tried (as Chroma does), so `distances > threshold` gives n_cuts breaks, or one more
    where the last midpoint fell just below the (n_cuts+1)-th largest distance."""
    d = np.asarray(distances, dtype=np.float64)
    lower, upper = 0.0, 1.0
    threshold = (lower + upper) / 2.0
    while upper - lower > SEARCH_TOLERANCE:
        threshold = (lower + upper) / 2.0
        if np.count_nonzero(d > threshold) > n_cuts:
            lower = threshold
        else:
            upper = threshold
    return threshold


@register_chunker("semantic_breakpoint", needs_embeddings=True, min_chunk_size=PIECE_TOKENS)
def semantic_breakpoint(
    text: str, chunk_size: int, chunk_overlap: int, *, embed: Embed
) -> tuple[np.ndarray, np.ndarray]:
    """Chroma's KamradtModifiedChunker: 50-token pieces, each embedded with 3 neighbours either side;
    a break after piece i where the cosine distance from window i to window i+1 is above a threshold
    chosen so that there are `total tokens // chunk_size` breaks."""
    _check_size("semantic_breakpoint", chunk_size)
    starts, ends = semantic_pieces(text)
    n = len(starts)
    if n == 0:
        return _EMPTY
    win_start, win_end = neighbour_windows(starts, ends)
    vectors = _embed(embed, [text[s:e] for s, e in zip(win_start.tolist(), win_end.tolist())], "semantic_breakpoint")
    distances = 1.0 - np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
    total = int(count_tokens([text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]).sum())
    threshold = breakpoint_threshold(distances, total // chunk_size)
    breaks = np.flatnonzero(distances > threshold)
    first = np.concatenate(([0], breaks + 1))
    last = np.concatenate((breaks, [n - 1]))
    return starts[first], ends[last]
