"""Production's documents placed in the team's corpus, so that what production retrieved is a span of a document
as chunkeval's own chunks are (docs/traces.md, "Placing production's documents").

Each distinct (document id, content) is placed once, by the first rule that holds:

1. `id`: the id names a corpus document (its content found in it word for word, or the whole document where the
   span carries no content), or is a chunk id `<document>:<start>-<end>` of chunkeval's form whose span holds the
   content;
2. `exact`: the content is found word for word in one document (the first occurrence);
3. `approximate`: the document that shares the most distinct words with the content holds a span at least
   `similarity` similar to it, by the gold set's own alignment (`anchoring.place_reference`, rapidfuzz's);
4. `unplaced`: none of these; counted and listed, never guessed.
"""

from __future__ import annotations

import re
from collections import Counter

from chunkeval.engine.inputs.anchoring import ANCHOR_SIMILARITY, Relocator, place_reference

PLACEMENTS = ("id", "exact", "approximate", "unplaced")
_CHUNK_ID = re.compile(r"^(?P<doc>.+):(?P<start>[0-9]{1,10})-(?P<end>[0-9]{1,10})$")
_WORD = re.compile(r"\w{3,}")


class Placer:
    """Places production documents in `texts` (document id → text); the word index of approximate placement is
    built on first use."""

    def __init__(self, texts: dict[str, str], similarity: float = ANCHOR_SIMILARITY):
        self.texts = texts
        self.similarity = similarity
        self.relocator = Relocator(texts)
        self._words: dict[str, Counter] | None = None

    def _candidate(self, content: str) -> str | None:
        if self._words is None:
            self._words = {d: Counter(set(_WORD.findall(t.lower()))) for d, t in self.texts.items()}
        mine = set(_WORD.findall(content.lower()))
        if not mine:
            return None
        best = max(self._words, key=lambda d: (sum(1 for w in mine if w in self._words[d]), d), default=None)
        return best if best is not None and any(w in self._words[best] for w in mine) else None

    def place(self, document_id: str | None, content: str | None) -> dict:
        """{status, corpus_id, start, end, similarity} of one production document (status in `PLACEMENTS`)."""
        texts = self.texts
        if document_id is not None and document_id in texts:
            text = texts[document_id]
            if not content:
                return _placed("id", document_id, 0, len(text))
            at = text.find(content)
            if at >= 0:
                return _placed("id", document_id, at, at + len(content))
        m = _CHUNK_ID.match(document_id or "")
        if m and m["doc"] in texts:
            s, e, text = int(m["start"]), int(m["end"]), texts[m["doc"]]
            if 0 <= s < e <= len(text) and (not content or text[s:e] == content):
                return _placed("id", m["doc"], s, e)
        if not content or "\x00" in content:
            return _placed("unplaced", None, None, None, 0.0)
        found = sorted(self.relocator.documents(content))
        if found:
            at = texts[found[0]].find(content)
            return _placed("exact", found[0], at, at + len(content))
        doc = self._candidate(content)
        if doc is not None:
            got = place_reference(texts[doc], content, 0, len(content), self.similarity, doc)
            if got["status"] == "approximate":
                return _placed("approximate", doc, got["start"], got["end"], got["similarity"])
            return _placed("unplaced", None, None, None, got["similarity"])
        return _placed("unplaced", None, None, None, 0.0)


def _placed(status: str, doc, start, end, similarity: float = 100.0) -> dict:
    return {"placement": status, "corpus_id": doc, "start": start, "end": end, "similarity": similarity}


def place_documents(documents: list[dict], texts: dict[str, str], similarity: float = ANCHOR_SIMILARITY) -> list[dict]:
    """Each row of `documents` (document_id, content, …) with where it is placed (`Placer.place`), each distinct
    (id, content) placed once."""
    placer, done = Placer(texts, similarity), {}
    out = []
    for d in documents:
        key = (d.get("document_id"), d.get("content"))
        if key not in done:
            done[key] = placer.place(*key)
        out.append(d | done[key])
    return out


def placement_counts(placed: list[dict]) -> dict[str, int]:
    """Documents (rows) per placement status, every status named."""
    counts = Counter(p["placement"] for p in placed)
    return {s: counts.get(s, 0) for s in PLACEMENTS}
