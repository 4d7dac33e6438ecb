"""A gold set meets its corpus as the corpus is now: each reference of span gold is found at its offsets
(`exact`), elsewhere word for word (`reanchored`), approximately (`approximate`: rapidfuzz's alignment, at least
`ANCHOR_SIMILARITY` similar) or nowhere (its question `retired` from the run). What reading a gold set had to
do is said in one summary line (`gold_summary`), by the one caller that reads it for a run (docs/gold.md).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, short
from chunkeval.visible import visible
from chunkeval.vocabulary import ANCHOR_STATUSES


def _reanchor(corpus: str, content: str, start: int) -> int:
    """Offset of the occurrence of `content` nearest to `start`, or -1."""
    best, pos = -1, corpus.find(content)
    while pos != -1:
        if best == -1 or abs(pos - start) < abs(best - start):
            best = pos
        if pos > start:
            break
        pos = corpus.find(content, pos + 1)
    return best


# A reference whose text is no longer in its document is placed where the document holds the most similar
# text, when that text is at least this similar (rapidfuzz's ratio, 0 to 100: 100 less the share of characters
# an edit would change, about). A comma put into a quoted sentence leaves 99; a deleted sentence's best match in
# what is left of the demo's documents is at most 63. At 90 a placement differs from the reference in about one
# character in ten at most (a comma, a typo, a number or a word changed); past that it is retired. docs/gold.md
ANCHOR_SIMILARITY = 90.0
ANCHOR_BOUNDS = (0, 100)  # rapidfuzz's ratio: 100 places exact matches only


def check_anchor_similarity(value, source: str | None = None) -> float:
    """The similarity threshold of approximate placement: a number from 0 to 100 (100: exact matches only)."""
    low, high = ANCHOR_BOUNDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InputError(f"anchor_similarity takes a number from {low} to {high}, got {short(value)}", source)
    return float(value)


def _best_edges(text: str, content: str, start: int, end: int) -> tuple[int, int, float]:
    """The span near [start, end) most similar to `content`: each edge moved, in turn, by up to a tenth of the
    content's length (an insertion or deletion shifts where the text ends)."""
    from rapidfuzz import fuzz

    reach = max(2, len(content) // 10)
    best = (start, end, fuzz.ratio(content, text[start:end]))
    for _ in range(2):
        s = best[0]
        for e in range(max(s + 1, best[1] - reach), min(len(text), best[1] + reach) + 1):
            score = fuzz.ratio(content, text[s:e])
            if score > best[2]:
                best = (s, e, score)
        e = best[1]
        for s in range(max(0, best[0] - reach), min(e - 1, best[0] + reach) + 1):
            score = fuzz.ratio(content, text[s:e])
            if score > best[2]:
                best = (s, e, score)
    return best


# Bounds on approximate placement (docs/limits.md): rapidfuzz's alignment costs about the content's length times
# the text's, in C code that no signal interrupts, so each call is kept to about `ALIGN_CELLS` (a tenth of a
# second or so): the search looks within `ALIGN_WINDOW` characters around the reference's offsets (the whole
# document when it is that short), content that would cost more is aligned by its first and last pieces, and
# content longer than `APPROX_CHARS` is placed only word for word. A caller may give a deadline (a model's
# excerpts: `gold generate`), past which nothing more is aligned.
ALIGN_WINDOW = 200_000  # characters searched around a reference's offsets
ALIGN_CELLS = 50_000_000  # content characters × window characters of one alignment
APPROX_CHARS = 20_000  # the longest content placed approximately
EDGE_CHARS = 2_000  # the longest content whose edges are then tuned character by character


def _window(text: str, start: int, end: int, window: tuple[int, int] | None) -> tuple[int, int]:
    if window is not None:
        return max(0, window[0]), min(len(text), window[1])
    if len(text) <= ALIGN_WINDOW:
        return 0, len(text)
    middle = (max(0, min(start, len(text))) + max(0, min(end, len(text)))) // 2
    lo = max(0, min(middle - ALIGN_WINDOW // 2, len(text) - ALIGN_WINDOW))
    return lo, lo + ALIGN_WINDOW


def _align(text: str, content: str, lo: int, hi: int, deadline: float | None):
    """(start, end, score) of the span of text[lo:hi] most like `content`, its cost bounded (`ALIGN_CELLS`):
    the whole content where that is cheap enough, else its first and last pieces, each aligned, and the span
    between them scored whole. None where the deadline passed."""
    from rapidfuzz import fuzz

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    if late() or hi <= lo:
        return None
    if len(content) * (hi - lo) <= ALIGN_CELLS:
        rough = fuzz.partial_ratio_alignment(content, text[lo:hi])
        return lo + rough.dest_start, lo + rough.dest_end, rough.score
    piece = max(32, min(len(content) // 2, ALIGN_CELLS // (hi - lo)))
    head = fuzz.partial_ratio_alignment(content[:piece], text[lo:hi])
    start = lo + head.dest_start
    reach = min(hi, start + len(content) + len(content) // 10 + piece)
    if late() or reach - start < piece:
        return None
    tail = fuzz.partial_ratio_alignment(content[-piece:], text[start:reach])
    end = start + tail.dest_end
    if end <= start or late():
        return None
    return start, end, fuzz.ratio(content, text[start:end])


def place_reference(
    text: str,
    content: str,
    start: int,
    end: int,
    similarity: float,
    document: str = "",
    window: tuple[int, int] | None = None,
    deadline: float | None = None,
) -> dict:
    """Where a reference's `content` is in its document's `text`: at its offsets (`exact`), elsewhere word for
    word (`reanchored`, the occurrence nearest its old start), or approximately (`approximate`: the span most
    similar to it, by rapidfuzz, at least `similarity` of 100, searched within `window` or `ALIGN_WINDOW`
    characters around its offsets, before the `deadline` of `time.monotonic`), else nowhere (`retired`, with the
    reason)."""
    if 0 <= start < end <= len(text) and text[start:end] == content:
        return {"status": "exact", "start": start, "end": end, "similarity": 100.0}
    found = _reanchor(text, content, start)
    if found >= 0:
        return {"status": "reanchored", "start": found, "end": found + len(content), "similarity": 100.0}
    if len(content) > APPROX_CHARS:
        why = (
            f"content not found word for word in document {document!r}, and its {len(content):,} characters are "
            f"more than the {APPROX_CHARS:,} placed approximately (docs/limits.md)"
        )
        return {"status": "retired", "start": start, "end": end, "similarity": 0.0, "reason": why}
    lo, hi = _window(text, start, end, window)
    rough = _align(text, content, lo, hi, deadline) if text and content else (0, 0, 0.0)
    if rough is None:
        why = f"content not found word for word in document {document!r}, and the time to align it was spent"
        return {"status": "retired", "start": start, "end": end, "similarity": 0.0, "reason": why}
    if rough[2] >= similarity:
        s, e, score = _best_edges(text, content, rough[0], rough[1]) if len(content) <= EDGE_CHARS else rough
        if score >= similarity:
            return {"status": "approximate", "start": s, "end": e, "similarity": round(score, 1)}
    score = round(rough[2], 1)
    why = f"content not found in document {document!r} (best match {score:g} < {similarity:g})"
    if not 0 <= start < end <= len(text):
        why += f"; its offsets [{start}, {end}) are out of range of the document's {len(text):,} characters"
    return {"status": "retired", "start": start, "end": end, "similarity": score, "reason": why}


class Relocator:
    """Where a question goes whose document is gone from the corpus (deleted, renamed, split in two, merged into
    another): the one other document that holds every one of its references word for word. Built on first use
    (most runs need none): the documents' texts joined, so that each reference is one `str.find` per occurrence."""

    MAX_OCCURRENCES = 1_000  # occurrences of one reference looked at, at most (a passage repeated past that: ambiguous)

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self._joined: str | None = None
        self._starts: list[int] = []
        self._names: list[str] = []

    def _index(self) -> str:
        if self._joined is None:
            parts, at = [], 0
            for name, text in self.texts.items():
                self._starts.append(at)
                self._names.append(name)
                parts.append(text)
                at += len(text) + 1
            self._joined = "\x00".join(parts)  # no reference holds NUL: a match never spans two documents
        return self._joined

    def documents(self, content: str) -> set[str]:
        """The documents that hold `content` word for word (at most two are named: one, or ambiguous)."""
        import bisect

        joined, found, pos, seen = self._index(), set(), 0, 0
        while len(found) < 2 and seen < self.MAX_OCCURRENCES:
            pos = joined.find(content, pos)
            if pos < 0:
                break
            found.add(self._names[bisect.bisect_right(self._starts, pos) - 1])
            pos, seen = pos + 1, seen + 1
        return found

    def relocate(self, contents: list[str]) -> tuple[str | None, str]:
        """(the document that holds every content word for word, "") or (None, why there is none)."""
        if not contents:
            return None, "it has no reference to look for"
        homes = [self.documents(c) for c in contents if c and "\x00" not in c]
        if len(homes) < len(contents) or not all(homes):
            return None, "its text is in no other document"
        if any(len(h) > 1 for h in homes):
            return None, "its text is in several other documents"
        names = set().union(*homes)
        if len(names) > 1:
            return None, f"its references are now in {len(names)} documents"
        return names.pop(), ""


def question_status(references: list[dict]) -> tuple[str, float]:
    """A question's status (the worst of its references') and its lowest similarity."""
    if not references:
        return "exact", 100.0
    worst = max(references, key=lambda r: (ANCHOR_STATUSES.index(r["status"]), -r["similarity"]))
    return worst["status"], min(r["similarity"] for r in references)


def anchoring_counts(anchoring) -> dict[str, int]:
    """How many questions have each status (`ANCHOR_STATUSES`)."""
    counts = dict.fromkeys(ANCHOR_STATUSES, 0)
    for a in anchoring:
        counts[a["status"]] += 1
    return counts


def gold_summary(gold, examples: int = 3, remedy: bool = True) -> list[str]:
    """What reading the gold set had to do, in one line, then at most `examples` lines of examples: how many
    questions were exact, re-anchored (moved to another document, of them), placed approximately (with the lowest
    similarity) and retired, and what else was set aside (qrels rows left out, questions without references).
    Empty where all was exact. With `remedy`, a last line names `chunkeval gold update` (not where that command
    itself reads the gold set)."""
    anchoring = list(getattr(gold, "anchoring", ()) or ())
    counts = anchoring_counts(anchoring)
    left_out = getattr(gold, "left_out", ()) or ()
    no_refs = getattr(gold, "no_references", 0)
    if counts["exact"] == len(anchoring) and not left_out and not no_refs:
        return []
    moved = sum(1 for a in anchoring if a.get("moved_from") and a["status"] != "retired")
    parts = [f"{counts['exact']} exact", f"{counts['reanchored']} re-anchored"]
    if moved:
        parts[-1] += f" ({moved} moved to another document)"
    approx = [a for a in anchoring if a["status"] == "approximate"]
    parts.append(
        f"{len(approx)} placed approximately"
        + (f" (lowest similarity {min(a['similarity'] for a in approx):g} of 100)" if approx else "")
    )
    parts.append(f"{counts['retired']} retired")
    line = f"gold set {visible(Path(gold.source).name)}: {len(anchoring)} question(s): {', '.join(parts)}"
    if left_out:
        reasons = Counter(r["reason"] for r in left_out)
        line += f"; {len(left_out)} qrels row(s) left out ({', '.join(f'{n} {why}' for why, n in reasons.items())})"
    if no_refs:
        line += f"; {no_refs} question(s) without references"
    shown = sorted(
        (a for a in anchoring if a["status"] in ("retired", "approximate")),
        key=lambda a: (a["status"] != "retired", a["similarity"]),
    )[:examples]
    lines = [line]
    for a in shown:
        if a["status"] == "retired":
            lines.append(f"  retired {visible(a['query_id'])} (row {a['row']}): {visible(a['reason'])}")
        else:
            edited = [r for r in a["references"] if r["status"] == "approximate"]
            spans = ", ".join(f"[{r['was'][0]}, {r['was'][1]}) → [{r['start']}, {r['end']})" for r in edited)
            lines.append(
                f"  placed {visible(a['query_id'])} (row {a['row']}) at similarity {a['similarity']:g}: {spans}"
            )
    unshown = [a for a in anchoring if a["status"] == "retired" and a not in shown]
    if unshown:  # every retired question is named, by id, with its reason: the rest in one line
        named = [f"{visible(a['query_id'])} ({visible(a['reason'])})" for a in unshown[:20]]
        lines.append(
            f"  retired too: {'; '.join(named)}" + (f"; … ({len(unshown)} in all)" if len(unshown) > 20 else "")
        )
    for a in [a for a in anchoring if a.get("moved_from") and a["status"] != "retired"][:examples]:
        lines.append(  # a typo in corpus_id or a renamed document: which question, and where it went
            f"  moved {visible(a['query_id'])} (row {a['row']}) to document {visible(a['corpus_id'])}, which holds its "
            f"references: {visible(a.get('moved_why', 'its document is gone'))}"
        )
    if (counts["retired"] or approx or moved) and remedy:
        lines.append("  (`chunkeval gold update` writes the corrected gold set and a review file: docs/gold.md)")
    return lines


def _offset(value) -> int:
    """A character offset of a reference: a whole number (`18` or `18.0`, never `true`, `18.5` or `1e400`)
    within `MAX_INT`, checked before it becomes an index."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    number = int(value)
    if abs(number) > MAX_INT:
        raise ValueError(value)
    return number


def _reference(ref, where: str, path: Path, row: int) -> tuple[str, int, int]:
    """A reference's content and offsets, checked for what the gold file alone can get wrong."""
    if not isinstance(ref, dict) or not {"content", "start_index", "end_index"} <= ref.keys():
        raise InputError(f"{where}: needs content, start_index and end_index", path, row)
    content = ref["content"]
    try:
        start, end = _offset(ref["start_index"]), _offset(ref["end_index"])
    except (TypeError, ValueError, OverflowError):
        raise InputError(
            f"{where}: start_index and end_index must be whole numbers up to {MAX_INT}, got "
            f"{short(ref['start_index'])} and {short(ref['end_index'])}",
            path,
            row,
        ) from None
    if not isinstance(content, str) or not content:
        raise InputError(f"{where}: empty content", path, row)
    if start < 0:
        raise InputError(f"{where}: offsets [{start}, {end}) out of range (negative start)", path, row)
    if end <= start:
        raise InputError(f"{where}: reversed or empty offsets [{start}, {end})", path, row)
    return content, start, end
