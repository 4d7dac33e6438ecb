"""The `duplicates` setting: what a reference whose text occurs more than once in its corpus counts as.

- `positional` (the default): only the gold position counts. A chunk over another copy of the same
  words gets no credit. These are the numbers of Chroma's report.
- `credit`: per query and k, each reference is replaced by the copy of its text (in the same corpus)
  that the top k chunks cover most (ties: the gold copy, then the earliest), and the span metrics are
  computed as with `positional`. For precision Ω and for the relevance of chunks in the set and rank
  metrics, every copy is a reference: a chunk overlapping any copy is relevant.

A copy is an exact occurrence of the reference's text; occurrences may overlap one another. A
whitespace-only reference has no copies but its gold position. Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from chunkeval.engine.inputs.span_gold import SpanGold

MODES = ("positional", "credit")


def occurrences(text: str, needle: str) -> list[tuple[int, int]]:
    """Every `[start, end)` where `needle` occurs in `text`, overlapping occurrences included."""
    found, at = [], text.find(needle)
    while at != -1:
        found.append((at, at + len(needle)))
        at = text.find(needle, at + 1)
    return found


@dataclass(frozen=True)
class Copies:
    """Every copy of every reference, grouped by reference: copy i is of reference `ref[i]`."""

    ref: np.ndarray  # int64, index into the gold set's references, ascending
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    gold: np.ndarray  # bool: this copy is the reference's own position

    def gold_set(self, gold: SpanGold) -> SpanGold:
        """The gold set with every copy as a reference of its question."""
        return replace(gold, ref_query=gold.ref_query[self.ref], ref_start=self.start, ref_end=self.end)


def find_copies(gold: SpanGold, corpora: dict[str, str]) -> Copies:
    """The copies of each reference (one text search per distinct reference text and corpus)."""
    found: dict[tuple[str, str], list[tuple[int, int]]] = {}
    ref, start, end = [], [], []
    for i, (q, s, e) in enumerate(zip(gold.ref_query.tolist(), gold.ref_start.tolist(), gold.ref_end.tolist())):
        corpus = gold.corpus_ids[q]
        text = corpora[corpus][s:e]
        spots = [(s, e)]
        if text.strip():
            key = (corpus, text)
            if key not in found:
                found[key] = occurrences(corpora[corpus], text)
            spots = found[key]
        ref += [i] * len(spots)
        start += [a for a, _ in spots]
        end += [b for _, b in spots]
    ref_a, start_a = np.asarray(ref, dtype=np.int64), np.asarray(start, dtype=np.int64)
    return Copies(ref_a, start_a, np.asarray(end, dtype=np.int64), start_a == gold.ref_start[ref_a])


def best_copies(copies: Copies, covered: np.ndarray) -> np.ndarray:
    """Per reference, the index of its copy with the most covered characters (ties: the gold copy, then
    the earliest)."""
    order = np.lexsort((copies.start, ~copies.gold, -covered, copies.ref))
    grouped = copies.ref[order]
    return order[np.r_[True, grouped[1:] != grouped[:-1]]] if len(order) else order


def credited_copies(copies: Copies, covered: np.ndarray) -> np.ndarray:
    """Which copies stand for their reference under `credit`: per reference, the copy with the most
    `covered` characters (ties: the gold copy, then the earliest). A boolean mask over the copies."""
    chosen = np.zeros(len(copies.ref), dtype=bool)
    chosen[best_copies(copies, covered)] = True
    return chosen
