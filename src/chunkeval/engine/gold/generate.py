"""`chunkeval gold generate`: a gold set from a corpus, asked of a chat model and checked (docs/gold.md).

Passages (a document cut at paragraph breaks into pieces of at most `passage_chars` characters) are sampled in
proportion to their length, seeded; the chat model is shown each and asked for questions of the types asked
for, each with the exact excerpts that answer it. What comes back is checked, in this order:

1. every excerpt is placed in its document exactly, or approximately as the gold set is placed when its corpus
   changes (`anchoring.place_reference`, threshold `anchor_similarity`); a question with an excerpt that cannot
   be placed is rejected (`excerpt not found`);
2. a question whose excerpts are on average less similar to it than `excerpt_similarity` (cosine, by the
   embedding model) is rejected (`excerpt far from the question`);
3. a question at least `dedup_similarity` similar to a question kept before it is rejected (`near-duplicate`);
4. a kept question whose excerpt's text occurs more than once in its document is flagged, as `gold check`
   finds ambiguous references (`duplicates.occurrences`): a person decides in the review file.

Pure functions but for the chat requests and the embedding model, which the caller hands in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from chunkeval import progress
from chunkeval.engine.gold.chat import prompt_tokens
from chunkeval.engine.inputs.anchoring import place_reference
from chunkeval.engine.inputs.duplicates import occurrences
from chunkeval.errors import InputError

PROMPT_VERSION = "gold-generate/1"
QUESTION_TYPES = {
    "fact": "a question answered by a single fact stated in one excerpt",
    "number": "a question whose answer is a number, a date or a quantity stated in the passage",
    "list": "a question whose answer is a list gathered from two or more separate excerpts",
    "section": "a question that needs a whole section or paragraph of the passage to answer",
}
SYSTEM = (
    "You write evaluation questions for a retrieval system. You are shown one passage of a document. "
    "Write questions that a reader of the whole collection could ask and that this passage answers. "
    "For each question, copy the excerpts of the passage that answer it exactly, character for character: "
    "whole sentences, no ellipses, no paraphrase. Answer with JSON only, no prose: "
    '{"questions": [{"question": "...", "type": "...", "excerpts": ["...", "..."]}]}'
)
REASONS = ("excerpt not found", "excerpt far from the question", "near-duplicate", "no question or excerpt")
# Thresholds for all-MiniLM-L6-v2 (docs/gold.md, "Calibrate the thresholds"): cosine similarity of questions
# that ask the same thing in other words is 0.85 or more with it, and of different questions about one document
# at most about 0.7; an excerpt that answers a question is 0.3 or more similar to it, an off-topic one below 0.15.
DEDUP_SIMILARITY = 0.85
EXCERPT_SIMILARITY = 0.25
PASSAGE_CHARS = 4000
ASK_YES_TOKENS = 200_000  # an estimate above this many tokens asks for --yes
ANSWER_TOKENS_PER_QUESTION = 120  # what the estimate expects a model to write per question


@dataclass(frozen=True)
class Passage:
    document: str
    start: int
    end: int


@dataclass
class Outcome:
    """What a generation kept and rejected: kept questions (rows of the gold set), rejected ones with their
    reason, and the unusable answers."""

    kept: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    unusable: list[dict] = field(default_factory=list)  # answers that held no JSON list of questions

    def counts(self) -> dict:
        reasons = {r: 0 for r in REASONS}
        for r in self.rejected:
            reasons[r["reason"]] += 1
        return {
            "proposed": len(self.kept) + len(self.rejected),
            "kept": len(self.kept),
            "rejected": len(self.rejected),
            "rejected_by_reason": reasons,
            "flagged": sum(1 for k in self.kept if k["flag"]),
            "unusable_answers": len(self.unusable),
        }


def check_types(types) -> tuple[str, ...]:
    out = tuple(t.strip() for t in types if t.strip())
    unknown = [t for t in out if t not in QUESTION_TYPES]
    if unknown or not out:
        raise InputError(f"--types takes {', '.join(QUESTION_TYPES)}; got {', '.join(unknown) or 'none'}")
    return out


def passages(texts: dict[str, str], passage_chars: int = PASSAGE_CHARS) -> list[Passage]:
    """Each document cut at paragraph breaks (a blank line) into passages of at most `passage_chars`
    characters (a longer paragraph is a passage of its own); documents with no text give none."""
    out = []
    for doc, text in texts.items():
        start = end = None
        for m in re.finditer(r"\S(?:.*?\S)?(?=\n\s*\n|\s*\Z)", text, flags=re.S):
            if start is not None and m.end() - start > passage_chars:
                out.append(Passage(doc, start, end))
                start = None
            start = m.start() if start is None else start
            end = m.end()
        if start is not None:
            out.append(Passage(doc, start, end))
    return out


def sample(pool: list[Passage], n: int, seed: int) -> list[Passage]:
    """`n` passages drawn in proportion to their length with this seed: without replacement while passages
    last, then again from all of them."""
    rng = np.random.default_rng(seed)
    lengths = np.array([p.end - p.start for p in pool], dtype=float)
    chosen: list[Passage] = []
    while len(chosen) < n:
        take = min(n - len(chosen), len(pool))
        order = rng.choice(len(pool), size=take, replace=False, p=lengths / lengths.sum())
        chosen.extend(pool[i] for i in order)
    return chosen


def plan(pool: list[Passage], questions: int, per_passage: int, types: tuple[str, ...], seed: int) -> list[dict]:
    """The requests to make: a passage each and the types of the questions asked of it, cycling through
    `types` so that each is asked about as often."""
    n = -(-questions // per_passage)
    asked = [types[i % len(types)] for i in range(n * per_passage)][:questions]
    return [
        {"passage": p, "types": asked[i * per_passage : (i + 1) * per_passage]}
        for i, p in enumerate(sample(pool, n, seed))
    ]


def messages(text: str, document: str, types: list[str]) -> list[dict]:
    """The chat request for one passage (prompt version `PROMPT_VERSION`)."""
    wanted = "\n".join(f"- one question of type {t!r}: {QUESTION_TYPES[t]}" for t in types)
    user = (
        f"Document: {document}\n\nPassage:\n<<<\n{text}\n>>>\n\n"
        f"Write {len(types)} question(s):\n{wanted}\nGive each question's type as written above."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_answer(content: str) -> list[dict]:
    """The proposed questions of an answer: JSON (a `questions` list, or a list), in a code fence or not.
    Raises ValueError where there is none."""
    text = content.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    data = json.loads(fenced[1] if fenced else text)
    items = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError("no list of questions")
    return [i if isinstance(i, dict) else {} for i in items]


def _proposal(item: dict, asked: str) -> tuple[str, str, list[str]] | None:
    question, excerpts = item.get("question"), item.get("excerpts")
    if isinstance(excerpts, str):
        excerpts = [excerpts]
    if not isinstance(question, str) or not question.strip() or not isinstance(excerpts, list):
        return None
    excerpts = [e for e in excerpts if isinstance(e, str) and e.strip()]
    kind = item.get("type") if item.get("type") in QUESTION_TYPES else asked
    return (" ".join(question.split()), kind, excerpts) if excerpts else None


def place(item: dict, texts: dict[str, str], passage: Passage, similarity: float) -> tuple[list[dict], str]:
    """The references of a proposal's excerpts in the passage's document ([] and why where one is not found)."""
    text, refs = texts[passage.document], []
    for excerpt in item["excerpts"]:
        near = text.find(excerpt, passage.start)
        at = near if near >= 0 else passage.start
        p = place_reference(text, excerpt, at, at + len(excerpt), similarity, passage.document)
        if p["status"] == "retired":
            return [], p["reason"]
        refs.append(
            {
                "content": text[p["start"] : p["end"]],
                "start_index": p["start"],
                "end_index": p["end"],
                "placed": "exact" if p["status"] in ("exact", "reanchored") else "approximate",
                "similarity": p["similarity"],
            }
        )
    return refs, ""


def validate(
    proposals: list[dict],
    texts: dict[str, str],
    embed,
    anchor_similarity: float,
    excerpt_similarity: float = EXCERPT_SIMILARITY,
    dedup_similarity: float = DEDUP_SIMILARITY,
) -> Outcome:
    """Kept and rejected questions of `proposals` (each: question, type, excerpts, passage, request), checked in
    the module's order. `embed(texts, kind)` gives L2-normalised vectors (`Embedder.embed`)."""
    out, placed = Outcome(), []
    for item in proposals:
        base = {k: item[k] for k in ("question", "type", "excerpts", "request")} | {
            "document": item["passage"].document
        }
        if not item["question"]:
            out.rejected.append(
                base | {"reason": "no question or excerpt", "detail": "the answer's item is incomplete"}
            )
            continue
        refs, why = place(item, texts, item["passage"], anchor_similarity)
        if not refs:
            out.rejected.append(base | {"reason": "excerpt not found", "detail": why})
        else:
            placed.append((base, refs))
    if not placed:
        return out
    questions = [b["question"] for b, _ in placed]
    q_vec = embed(questions, "query")[0]
    excerpts = [r["content"] for _, refs in placed for r in refs]
    e_vec = embed(excerpts, "document")[0]
    kept_vec: list[np.ndarray] = []
    at = 0
    for i, (base, refs) in enumerate(placed):
        sims = e_vec[at : at + len(refs)] @ q_vec[i]
        at += len(refs)
        score = float(np.mean(sims))
        nearest = max((float(v @ q_vec[i]) for v in kept_vec), default=0.0)
        row = base | {"excerpt_similarity": round(score, 3), "nearest_similarity": round(nearest, 3)}
        if score < excerpt_similarity:
            out.rejected.append(row | {"reason": "excerpt far from the question", "detail": f"{score:.3f}"})
            continue
        if nearest >= dedup_similarity:
            out.rejected.append(row | {"reason": "near-duplicate", "detail": f"{nearest:.3f}"})
            continue
        text = texts[base["document"]]
        repeated = [r for r in refs if len(occurrences(text, r["content"])) > 1]
        flag = "text repeated elsewhere in the document (ambiguous reference)" if repeated else ""
        approx = [r for r in refs if r["placed"] == "approximate"]
        if approx and not flag:
            flag = f"excerpt placed approximately (similarity {min(r['similarity'] for r in approx):g})"
        kept_vec.append(q_vec[i])
        out.kept.append(row | {"references": refs, "flag": flag})
    return out


def estimate(requests: list[dict], texts: dict[str, str]) -> int:
    """Tokens a generation would send and receive (cl100k; the answers guessed at
    `ANSWER_TOKENS_PER_QUESTION` per question)."""
    sent = sum(prompt_tokens(request_messages(r, texts)) for r in requests)
    return sent + ANSWER_TOKENS_PER_QUESTION * sum(len(r["types"]) for r in requests)


def request_messages(request: dict, texts: dict[str, str]) -> list[dict]:
    p = request["passage"]
    return messages(texts[p.document][p.start : p.end], p.document, request["types"])


def gold_rows(kept: list[dict], prefix: str = "gen") -> list[dict]:
    """The gold set's rows (chunkeval's questions CSV: query_id, question, references, corpus_id, type)."""
    return [
        {
            "query_id": f"{prefix}-{i:04d}",
            "question": k["question"],
            "references": json.dumps(
                [{c: r[c] for c in ("content", "start_index", "end_index")} for r in k["references"]],
                ensure_ascii=False,
            ),
            "corpus_id": k["document"],
            "type": k["type"],
        }
        for i, k in enumerate(kept, start=1)
    ]


GOLD_COLUMNS = ("query_id", "question", "references", "corpus_id", "type")
REVIEW_COLUMNS = (
    "query_id",
    "corpus_id",
    "type",
    "question",
    "excerpts",
    "excerpt_similarity",
    "nearest_similarity",
    "flag",
    "accept",
)


def review_rows(rows: list[dict], kept: list[dict]) -> list[dict]:
    """One review row per kept question: `accept` yes where nothing is flagged, empty where a person judges."""
    return [
        {
            "query_id": r["query_id"],
            "corpus_id": r["corpus_id"],
            "type": r["type"],
            "question": r["question"],
            "excerpts": " | ".join(x["content"] for x in k["references"]),
            "excerpt_similarity": k["excerpt_similarity"],
            "nearest_similarity": k["nearest_similarity"],
            "flag": k["flag"],
            "accept": "" if k["flag"] else "yes",
        }
        for r, k in zip(rows, kept)
    ]


def run_requests(requests: list[dict], texts: dict[str, str], chat) -> tuple[list[dict], list[dict]]:
    """(proposals, unusable answers) of asking `chat` (a `chunkeval.engine.gold.chat.Chat`) every request, with a
    progress bar. A usable answer is kept in the chat's cache as soon as it arrives; an unusable one is not."""
    proposals, unusable = [], []
    for n, request in enumerate(requests, start=1):
        msgs = request_messages(request, texts)
        content, cached = chat.ask(msgs)
        try:
            items = parse_answer(content)
        except (ValueError, RecursionError) as exc:
            unusable.append({"request": n, "document": request["passage"].document, "reason": str(exc)[:200]})
        else:
            if not cached:
                chat.keep(msgs, content)
            for item, asked in zip(items, request["types"] + [request["types"][-1]] * len(items)):
                found = _proposal(item, asked)
                question, kind, excerpts = found or ("", asked, [])
                proposals.append(
                    {"question": question, "type": kind, "excerpts": excerpts, "passage": request["passage"]}
                    | {"request": n}
                )
        progress.step("asking the chat model", n, len(requests))
    return proposals, unusable


def accepted(review: list[tuple[int, dict]], rows: list[tuple[int, dict]], review_path, gold_path) -> list[dict]:
    """The gold set's rows whose review row says `accept` yes, in the gold set's order. Every review id must
    name a question of the gold set and every question must have a review row (else one line, naming them)."""
    ids = [r.get("query_id", "") for _, r in rows]
    by_id = {r.get("query_id", ""): (n, r) for n, r in review}
    unknown = [f"{q!r} (row {n})" for q, (n, _) in by_id.items() if q not in set(ids)]
    if unknown:
        raise InputError(
            f"query_id {unknown[0]} is not a question of {gold_path} ({len(unknown)} unknown)", review_path
        )
    missing = [q for q in ids if q not in by_id]
    if missing:
        raise InputError(
            f"no review row for {len(missing)} question(s) of {gold_path}, first {missing[0]!r}", review_path
        )
    bad = [(n, r["accept"]) for n, r in review if r.get("accept", "").strip().lower() not in ("yes", "no", "")]
    if bad:
        raise InputError(f"row {bad[0][0]}: accept takes yes, no or nothing, got {bad[0][1]!r}", review_path)
    return [r for _, r in rows if by_id[r["query_id"]][1].get("accept", "").strip().lower() == "yes"]
