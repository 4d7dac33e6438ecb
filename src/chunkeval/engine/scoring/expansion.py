"""Small-to-big retrieval (`expand`): retrieval matches the grid's chunks; what is returned, and scored, is the
unit around each (docs/metrics.md, "Small-to-big retrieval").

- `window:n=N`: the matched chunk with the N chunks before and after it in the same document (document order:
  by start), sentence-window retrieval.
- `parent:size=SIZE`: the parent chunk that holds the matched chunk's start. The parents of a document are its
  `fixed_token` chunks of SIZE tokens with no overlap, so they tile it; a matched chunk that runs past its
  parent's end returns the parent alone.
- Units that share a member merge (windows that share a chunk; chunks of one parent), as often as they chain:
  a merged unit spans `[first start, last end)` of its members and takes the rank of its best member; the
  ranked list of merged units, by that rank, is what the metrics see, so at depth k it may hold fewer than k.
  Where chunks do not overlap (chunk_overlap 0), units that share a member are exactly those whose spans
  overlap; windows that merely touch stay two units.
- `none` and `window:n=0` return the chunks themselves (`Expansion.identity`).

Everything here is vectorised over questions: numpy over the (questions × k) chunk indices and each
chunking's start and end arrays; the only loop is over documents, to cut parents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from chunkeval.engine.chunking import Chunks, count_tokens
from chunkeval.engine.chunking.fixed import fixed_token
from chunkeval.engine.scoring import metrics as M
from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.vocabulary import NO_EXPAND, close_names

MAX_WINDOW = 10_000  # neighbours on each side
MAX_PARENT = 1_000_000  # tokens of a parent (as MAX_CHUNK_SIZE)
_SYNTAX = re.compile(r"^(window):n=(-?\d+)$|^(parent):size=(-?\d+)$")
USAGE = "expand takes none, window:n=N (N from 0) or parent:size=SIZE (SIZE from 1 token)"


@dataclass(frozen=True)
class Expansion:
    kind: str = NO_EXPAND  # none, window, parent
    amount: int = 0  # neighbours on each side (window) or tokens (parent)

    @property
    def text(self) -> str:
        """The configuration key: `none`, `window:n=N`, `parent:size=SIZE`."""
        return {"window": f"window:n={self.amount}", "parent": f"parent:size={self.amount}"}.get(self.kind, NO_EXPAND)

    @property
    def identity(self) -> bool:
        """Whether it returns the chunks themselves: today's numbers."""
        return self.kind == NO_EXPAND or (self.kind == "window" and self.amount == 0)


def parse_expand(text, source: str | None = None) -> Expansion:
    """An `expand` value, checked: one line naming the setting where it is not one."""
    value = str(text).strip() if isinstance(text, (str, int)) else None
    if value == NO_EXPAND:
        return Expansion()
    found = _SYNTAX.match(value or "")
    if not found:
        hint = close_names(str(text).split(":", 1)[0], (NO_EXPAND, "window", "parent"))
        raise InputError(f"{USAGE}; got {short(text)}" + (f"; {hint}" if hint else ""), source)
    kind = found.group(1) or found.group(3)
    amount = int(found.group(2) or found.group(4))
    least, most = (0, MAX_WINDOW) if kind == "window" else (1, MAX_PARENT)
    if not least <= amount <= most:
        raise InputError(f"{USAGE} (at most {most:,}); got {short(text)}", source)
    return Expansion(kind, amount)


def expand_keys(values) -> list[str]:
    """The `expand` axis as configuration keys (`window:n=N`, `parent:size=SIZE`, `none`), in the order given."""
    return list(dict.fromkeys(parse_expand(text).text for text in values))


def check_expand(exp, source: str | None = None) -> None:
    """An experiment's `expand` values: each parses, listed once; span gold only (document gold scores
    documents, not returned spans)."""
    if not exp.expand:
        raise InputError("an experiment needs at least one expand (none: the chunks themselves)", source)
    keys = [parse_expand(text, source).text for text in exp.expand]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise InputError(f"expand {', '.join(map(repr, twice))} listed twice", source)
    if exp.doc_gold and keys != [NO_EXPAND]:
        raise InputError("expand applies to span gold; document gold scores documents, not returned spans", source)


@dataclass(frozen=True)
class Units:
    """The unit around each chunk of a chunking, as an interval `[lo, hi]` of members that merging compares:
    for windows the chunks in document order, for parents the parents. Member m spans
    `[member_start[m], member_end[m])` of document `member_corpus[m]`; a run of members `[lo, hi]` spans
    `[member_start[lo], member_end[hi])` (for windows, `member_end` is the furthest end so far in its document)."""

    lo: np.ndarray  # (C,) int64, per chunk
    hi: np.ndarray  # (C,) int64
    member_corpus: np.ndarray  # (M,) int
    member_start: np.ndarray  # (M,) int64
    member_end: np.ndarray  # (M,) int64

    def spans(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The corpus, start and end of runs of members `[lo, hi]`."""
        return self.member_corpus[lo], self.member_start[lo], self.member_end[hi]

    def of_chunks(self, names: tuple[str, ...]) -> Chunks:
        """The unit of every chunk as chunks (tokens not counted: for its relevance)."""
        corpus, start, end = self.spans(self.lo, self.hi)
        return Chunks(names, corpus, start, end, np.zeros(len(start), np.int64))


def units_of(chunks: Chunks, expansion: Expansion, corpora: dict[str, str]) -> Units:
    """The unit around each chunk (`expansion` not `none`)."""
    if expansion.kind == "parent":
        return _parents(chunks, expansion.amount, corpora)
    n = expansion.amount
    order = np.lexsort((chunks.start, chunks.corpus))  # document order
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    corpus = chunks.corpus[order].astype(np.int64)
    first = np.searchsorted(corpus, corpus, side="left")  # the first position of each chunk's document
    last = np.searchsorted(corpus, corpus, side="right") - 1
    lo = np.maximum(pos - n, first[pos])
    hi = np.minimum(pos + n, last[pos])
    # the furthest end so far: a running maximum within each document (offset so it never carries over)
    span = int(chunks.end.max(initial=0)) + 1
    ends = chunks.end[order].astype(np.int64)
    reach = np.maximum.accumulate(ends + corpus * span) - corpus * span if len(order) else ends
    return Units(lo, hi, chunks.corpus[order], chunks.start[order].astype(np.int64), reach)


def _parents(chunks: Chunks, size: int, corpora: dict[str, str]) -> Units:
    """Each chunk's parent: the `fixed_token` chunk of `size` tokens, no overlap, holding the chunk's start
    (the first parent for a chunk that starts before the first token)."""
    starts, ends = [], []
    for name in chunks.corpus_names:  # a loop over documents
        s, e = fixed_token(corpora[name], size, 0)
        starts.append(np.asarray(s, np.int64))
        ends.append(np.asarray(e, np.int64))
    counts = np.asarray([len(s) for s in starts], np.int64)
    base = np.cumsum(counts) - counts
    pid = np.zeros(len(chunks), dtype=np.int64)
    for d in np.unique(chunks.corpus).tolist():  # a loop over documents, vectorised within
        here = np.flatnonzero(chunks.corpus == d)
        local = np.searchsorted(starts[d], chunks.start[here], side="right") - 1
        pid[here] = base[d] + np.clip(local, 0, max(counts[d] - 1, 0))
    member_corpus = np.repeat(np.arange(len(counts)), counts)
    return Units(
        pid,
        pid,
        member_corpus,
        np.concatenate(starts + [np.zeros(0, np.int64)]),
        np.concatenate(ends + [np.zeros(0, np.int64)]),
    )


def as_chunks(names: tuple[str, ...], corpus, start, end, corpora: dict[str, str]) -> Chunks:
    """Spans as `Chunks`, their tokens counted once per distinct span."""
    corpus = np.asarray(corpus, np.int32)
    keys = np.stack([corpus.astype(np.int64), start, end], axis=1) if len(corpus) else np.zeros((0, 3), np.int64)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    texts = [corpora[names[c]][s:e] for c, s, e in distinct.tolist()]
    tokens = count_tokens(texts)[inverse.reshape(-1)] if len(texts) else np.zeros(0, np.int64)
    return Chunks(names, corpus, np.asarray(start, np.int64), np.asarray(end, np.int64), tokens.astype(np.int64))


@dataclass(frozen=True)
class Merged:
    """The ranked merged units of each question's top k: `lo`/`hi` their member intervals, `best` the
    0-based rank of the best member in the chunk list, -1 past the end of a shorter list."""

    lo: np.ndarray  # (Q, k) int64
    hi: np.ndarray  # (Q, k) int64
    best: np.ndarray  # (Q, k) int64


def merge_top(units: Units, topk: np.ndarray) -> Merged:
    """Merge the units of each question's top k (`topk`: chunk indices, -1 padding) where they share a member."""
    n_q, k = topk.shape
    valid = topk >= 0
    safe = np.maximum(topk, 0)
    big = np.iinfo(np.int64).max
    lo = np.where(valid, units.lo[safe], big)
    hi = np.where(valid, units.hi[safe], big)
    order = np.argsort(lo, axis=1, kind="stable")
    lo, hi = np.take_along_axis(lo, order, 1), np.take_along_axis(hi, order, 1)
    rank = np.broadcast_to(np.arange(k), (n_q, k))
    rank = np.take_along_axis(np.where(valid, rank, big), order, 1)
    # a new unit begins where a member interval starts past the furthest end of those sorted before it
    reach = np.maximum.accumulate(hi, axis=1)
    new = np.ones((n_q, k), dtype=bool)
    new[:, 1:] = lo[:, 1:] > reach[:, :-1]
    group = np.cumsum(new, axis=1) - 1  # (Q, k), 0-based per question
    flat = (np.arange(n_q)[:, None] * k + group).reshape(-1)
    keep = (rank != big).reshape(-1)
    g_lo = np.full(n_q * k, big, np.int64)
    g_hi = np.full(n_q * k, -1, np.int64)
    g_best = np.full(n_q * k, big, np.int64)
    np.minimum.at(g_lo, flat[keep], lo.reshape(-1)[keep])
    np.maximum.at(g_hi, flat[keep], hi.reshape(-1)[keep])
    np.minimum.at(g_best, flat[keep], rank.reshape(-1)[keep])
    g_lo, g_hi, g_best = (a.reshape(n_q, k) for a in (g_lo, g_hi, g_best))
    by_rank = np.argsort(g_best, axis=1, kind="stable")  # units by the rank of their best member
    g_lo, g_hi, g_best = (np.take_along_axis(a, by_rank, 1) for a in (g_lo, g_hi, g_best))
    empty = g_best == big
    return Merged(np.where(empty, -1, g_lo), np.where(empty, -1, g_hi), np.where(empty, -1, g_best))


@dataclass(frozen=True)
class Scored:
    """What the metrics see at one depth: the merged units as chunks, each question's ranked list of them
    (indices into `chunks`, -1 padding), their scores (the best member's), and the relevance that counts
    the relevant units and precision Ω (`ideal_relevance`)."""

    chunks: Chunks
    topk: np.ndarray
    scores: np.ndarray | None
    counted: M.ChunkRelevance | None  # None: counted over `chunks`


def ideal_relevance(candidates: M.ChunkRelevance, units: Units, n_chunks: int) -> np.ndarray:
    """Per question, the merged units of the expansion of every chunk whose unit is relevant: the relevant
    units an ideal list holds (`candidates`: the relevance of each chunk's unit)."""
    q = candidates.keys // max(n_chunks, 1)
    c = candidates.keys % max(n_chunks, 1)
    lo, hi = units.lo[c], units.hi[c]
    span = len(units.member_start) + 1
    order = np.lexsort((lo, q))
    q, lo, hi = q[order], lo[order] + q[order] * span, hi[order] + q[order] * span
    reach = np.maximum.accumulate(hi) if len(hi) else hi
    new = np.ones(len(lo), dtype=bool)
    new[1:] = lo[1:] > reach[:-1]
    return np.bincount(q[new], minlength=len(candidates.n_relevant)).astype(np.int64)


def expanded(
    gold,
    chunks: Chunks,
    corpora: dict[str, str],
    topk: np.ndarray,
    scores: np.ndarray | None,
    ks: tuple[int, ...],
    expansion: Expansion,
    judged_gold=None,
    rule: str = "overlap",
) -> dict[int, Scored]:
    """For each k, what the metrics see of the top k expanded and merged (`judged_gold`: the gold set chunks
    are judged against, every copy of each reference under `duplicates: credit`; `gold` by default). The
    relevant units a question has: those of the ideal list (`ideal_relevance`), or as many as its list holds
    where that is more (two units inside one long relevant stretch), so that recall never passes 1."""
    judged_gold = gold if judged_gold is None else judged_gold
    units = units_of(chunks, expansion, corpora)
    names = chunks.corpus_names
    ref = M.reference_chars(judged_gold, names)
    candidates = M.chunk_relevance(judged_gold, ref, units.of_chunks(names), rule)
    ideal = ideal_relevance(candidates, units, len(chunks))
    out = {}
    for k in sorted(set(ks)):  # a loop over depths
        merged = merge_top(units, topk[:, :k])
        valid = merged.best >= 0
        corpus, start, end = units.spans(merged.lo[valid], merged.hi[valid])
        unit_chunks = as_chunks(names, corpus, start, end, corpora)
        index = np.full(merged.best.shape, -1, np.int64)
        index[valid] = np.arange(int(valid.sum()))
        unit_scores = None
        if scores is not None:
            unit_scores = np.where(valid, np.take_along_axis(scores[:, :k], np.maximum(merged.best, 0), 1), np.nan)
        held = M.chunk_relevance(judged_gold, ref, unit_chunks, rule)
        n_q = topk.shape[0]
        hits = (np.isin(np.arange(n_q)[:, None] * max(len(unit_chunks), 1) + index, held.keys) & valid).sum(axis=1)
        counted = M.ChunkRelevance(
            candidates.keys, np.maximum(ideal, hits), candidates.covered_all, candidates.omega_union
        )
        out[k] = Scored(unit_chunks, index, unit_scores, counted)
    return out
