"""`chunkeval gold judge`: graded relevance where there is no gold, asked of a chat model (docs/gold.md).

The pool of a question is the union of the chunks that a recorded run's configurations retrieved for it down to
`depth` (pooled judging, as TREC pools its runs). A chat model grades each pooled (question, passage) 0–3 with
`PROMPT` (version `PROMPT_VERSION`), in the manner of UMBRELA (Upadhyay et al., 2024: the TREC RAG track's
open reproduction of Bing's relevance-labelling prompt). A verdict is a character span of a document with its
grade, so it survives a change of chunking; from verdicts come qrels at document level (a document's grade is the
highest of its judged passages) and at chunk level for any chunking, by the relevance rule span gold uses
(`metrics.share_held`). Unjudged text counts as not relevant. Where human gold exists for the same questions,
`agreement` says how far the judge can be trusted (quadratic weighted kappa, Cohen's kappa, the confusion table).

Pure functions but for the chat requests, which the caller hands in (`chunkeval.engine.gold.chat.Chat`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from chunkeval import progress
from chunkeval.engine.gold import answers
from chunkeval.engine.gold.injection import delimited, instruction_like
from chunkeval.engine.inputs.provenance import experiment_gold
from chunkeval.engine.inputs.readers import read_csv_rows
from chunkeval.engine.inputs.span_gold import span_query_id
from chunkeval.engine.scoring.metrics import share_held
from chunkeval.errors import InputError
from chunkeval.visible import visible
from chunkeval.vocabulary import CONFIG_KEYS, config_label
from chunkeval.vocabulary import gold_kind_said as describe

PROMPT_VERSION = "gold-judge/2"  # 2: the passage delimited as data (`injection.delimited`); canaries
GRADES = {
    0: "the passage has nothing to do with the query",
    1: "the passage seems related to the query but does not answer it",
    2: "the passage has some answer for the query, but the answer may be a bit unclear, or hidden amongst "
    "extraneous information",
    3: "the passage is dedicated to the query and contains the exact answer",
}
SYSTEM = "You are a search quality rater evaluating the relevance of passages to queries."
PROMPT = (
    "Given a query and a passage, give the passage a score on an integer scale of 0 to 3 with these meanings:\n"
    + "\n".join(f"{g} = {meaning}" for g, meaning in GRADES.items())
    + "\nAssign 1 if the passage is somewhat related to the topic but not completely, 2 if it presents something "
    "important for the query but also other information, 3 if it refers only and entirely to what is asked. If "
    "none of these holds, give 0.\n\n"
    "Document: {document}\nQuery: {query}\n{passage}\n\n"
    "Split the problem into steps: consider the intent behind the query; measure how well the passage matches "
    "that intent; measure how trustworthy the passage is; weigh them and decide on a final score. The final score "
    "is an integer only. Give it in the form ##final score: N and no reasoning."
)
DEPTH = 10  # how deep in each configuration's list the pool goes
MIN_GRADE = 2  # the lowest grade that is relevant (TREC Deep Learning binarises its 0-3 passage grades at 2)
QUESTION_COLUMNS = ("query_id", "question")
VERDICT_COLUMNS = (
    "query_id",
    "corpus_id",
    "start",
    "end",
    "grade",
    "judge_model",
    "prompt_version",
    "judged_by",
    "flag",
)
# Canaries (docs/gold.md, "Prompt injection"): per judged question, passages of documents the run retrieved for
# other questions and never for it, which are graded like the pool's and known not relevant. A judge that grades
# more than `CANARY_RATE` of them relevant is not grading what it is shown (a passage told it what to say, or it
# grades everything high): the command warns.
CANARIES = 2  # canary passages per judged question
CANARY_RATE = 0.10  # the share of canaries graded relevant above which the command warns
PASSAGE_CHARS = 20_000  # the most characters of a passage shown to the judge (a chunk is rarely longer)


@dataclass(frozen=True)
class Pooled:
    """A passage of the pool: a chunk one of the run's configurations retrieved for a question."""

    query_id: str
    corpus_id: str
    start: int
    end: int


def read_questions(path) -> dict[str, str]:
    """query_id → question of a questions file without references: a CSV with `query_id` and `question` (any other
    column is ignored, so a span gold set is a questions file too: its query_id, else `<corpus_id>:<row>`)."""
    out: dict[str, str] = {}
    for row, rec in read_csv_rows(path, ("question",)):
        qid = (rec.get("query_id") or "").strip()
        if not qid and rec.get("corpus_id"):
            qid = span_query_id(rec, row)
        if not qid:
            raise InputError("empty query_id (a questions file without corpus_id needs a query_id column)", path, row)
        if not rec["question"].strip():
            raise InputError("empty question", path, row)
        if qid in out:
            raise InputError(f"query_id {qid!r} appears twice", path, row)
        out[qid] = " ".join(rec["question"].split())
    return out


def pool(retrieved: list[dict], questions: dict[str, str], depth: int = DEPTH) -> list[Pooled]:
    """The distinct passages the run's rows (query_id, rank, corpus_id, start, end; every configuration's) hold at
    rank `depth` or better for the questions, in question order, then document and offsets."""
    found = {
        Pooled(r["query_id"], str(r["corpus_id"]), int(r["start"]), int(r["end"]))
        for r in retrieved
        if r["rank"] <= depth and r["query_id"] in questions
    }
    order = {q: i for i, q in enumerate(questions)}
    return sorted(found, key=lambda p: (order[p.query_id], p.corpus_id, p.start, p.end))


def messages(question: str, document: str, passage: str) -> list[dict]:
    """The chat request for one pooled passage (prompt version `PROMPT_VERSION`): the passage delimited as data,
    at most `PASSAGE_CHARS` of it."""
    shown = delimited(passage[:PASSAGE_CHARS])
    user = PROMPT.format(document=visible(document), query=visible(question), passage=shown)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def canaries(pooled: list[Pooled], questions: dict[str, str], per_question: int = CANARIES) -> list[Pooled]:
    """Per question of the pool, `per_question` canary passages: pooled passages of other questions from documents
    the question's own pool does not hold (so known not relevant to it), chosen by a hash of the question's id
    (the same canaries on a rerun). A question whose pool holds every document gets none."""
    by_doc: dict[str, list[Pooled]] = {}
    own: dict[str, set[str]] = {}
    for p in pooled:
        by_doc.setdefault(p.corpus_id, []).append(p)
        own.setdefault(p.query_id, set()).add(p.corpus_id)
    out = []
    for q in questions:
        if q not in own:
            continue
        others = sorted((d for d in by_doc if d not in own[q]), key=lambda d: _hash(q, d))[:per_question]
        for d in others:
            chosen = min(by_doc[d], key=lambda p: _hash(q, f"{p.corpus_id}:{p.start}-{p.end}"))
            out.append(Pooled(q, chosen.corpus_id, chosen.start, chosen.end))
    return out


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def parse_grade(content: str) -> int:
    """The grade of an answer (`answers.grade`: the one reader of both commands, strict about the value)."""
    return answers.grade(content)


def judge(
    pooled: list[Pooled], questions: dict[str, str], texts: dict[str, str], chat, what: str = "judging the pool"
) -> tuple[list, list]:
    """(verdicts, unusable answers) of asking `chat` to grade every pooled passage, with a progress bar (step
    `what`). Every
    answer is kept in the chat's response cache as it arrives, usable or not (a rerun counts the same unusable
    answers and asks nothing again); an unusable answer's passage stays unjudged. A verdict carries a flag where its
    passage holds instruction-like text (`injection.instruction_like`)."""
    verdicts, unusable = [], []
    if pooled:
        progress.step(what, 0, len(pooled))  # said before the first answer, which may take long
    for n, p in enumerate(pooled, start=1):
        passage = texts[p.corpus_id][p.start : p.end]
        answer = chat.ask(messages(questions[p.query_id], p.corpus_id, passage))
        where = {"query_id": p.query_id, "corpus_id": p.corpus_id, "start": p.start, "end": p.end}
        try:
            if answer.refused:
                raise ValueError(answer.refused)
            grade = parse_grade(answer.text)
        except ValueError as exc:
            unusable.append(where | {"reason": visible(str(exc))[:200]})
        else:
            steering = instruction_like(passage)
            flag = f"the passage holds instruction-like text ({steering!r})" if steering else ""
            verdicts.append(where | {"grade": grade, "flag": flag})
        progress.step(what, n, len(pooled))
    return verdicts, unusable


def canary_report(verdicts: list[dict], asked: int, min_grade: int = MIN_GRADE) -> dict:
    """How the canaries were graded: asked, graded (usable answers), graded relevant (at least `min_grade`), the
    rate, the threshold, whether it is passed, and the questions whose canary was graded relevant."""
    relevant = [v for v in verdicts if v["grade"] >= min_grade]
    rate = len(relevant) / len(verdicts) if verdicts else None
    return {
        "per_question": CANARIES,
        "asked": asked,
        "graded": len(verdicts),
        "graded_relevant": len(relevant),
        "rate": None if rate is None else round(rate, 4),
        "warn_above": CANARY_RATE,
        "warning": rate is not None and rate > CANARY_RATE,
        "questions": sorted({v["query_id"] for v in relevant}),
    }


def verdict_rows(verdicts: list[dict], model: str) -> list[dict]:
    """The judged passages file's rows: each verdict marked as a model's, with its prompt version."""
    return [v | {"judge_model": model, "prompt_version": PROMPT_VERSION, "judged_by": "model"} for v in verdicts]


def doc_qrels(verdicts: list[dict], min_grade: int = MIN_GRADE) -> dict[str, dict[str, int]]:
    """query_id → {document → grade}: a document's grade is the highest of its judged passages, written 0 below
    `min_grade` (judged, not relevant: chunkeval counts a grade above 0 relevant)."""
    out: dict[str, dict[str, int]] = {}
    for v in verdicts:
        docs = out.setdefault(v["query_id"], {})
        docs[v["corpus_id"]] = max(docs.get(v["corpus_id"], 0), v["grade"])
    return {q: {d: (g if g >= min_grade else 0) for d, g in docs.items()} for q, docs in out.items()}


def chunk_grades(
    verdicts: list[dict], chunks: list[tuple[str, str, int, int]], relevance: str = "overlap"
) -> tuple[np.ndarray, np.ndarray]:
    """(grade, judged) of each (query_id, corpus_id, start, end) chunk of any chunking: its grade is the highest of
    the judged passages of its question that the relevance rule makes it relevant to (overlap: any shared character;
    coverage:F: it holds F of the passage; contains: the whole passage), 0 where none; it is judged where it shares
    a character with any judged passage of its question. Unjudged chunks have grade 0 (pooled judging)."""
    share = share_held(relevance)
    by_key: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    for v in verdicts:
        by_key.setdefault((v["query_id"], v["corpus_id"]), []).append((v["start"], v["end"], v["grade"]))
    grade = np.zeros(len(chunks), dtype=np.int64)
    judged = np.zeros(len(chunks), dtype=bool)
    for i, (q, doc, start, end) in enumerate(chunks):
        for s, e, g in by_key.get((q, doc), ()):
            inside = min(end, e) - max(start, s)
            if inside > 0:
                judged[i] = True
                if inside >= share * (e - s) - 1e-9:
                    grade[i] = max(grade[i], g)
    return grade, judged


def judged_share(retrieved: list[dict], qrels: dict[str, dict], k: int, keys: list[str]) -> list[dict]:
    """Per configuration (`keys` of the rows), the share of its top-k chunks whose document the qrels judge for
    the question (any grade, 0 included): how much of what the run scored was judged."""
    totals: dict[tuple, list[int]] = {}
    for r in retrieved:
        if r["rank"] > k:
            continue
        t = totals.setdefault(tuple(r[key] for key in keys), [0, 0])
        t[0] += str(r["corpus_id"]) in qrels.get(r["query_id"], {})
        t[1] += 1
    return [
        dict(zip(keys, c)) | {"k": k, "judged_share": round(j / n, 4) if n else None} for c, (j, n) in totals.items()
    ]


def cohen_kappa(a, b, weights: str | None = None) -> float:
    """Cohen's kappa of two raters' labels (integers), unweighted or with `weights="quadratic"`:
    1 - Σ w·O / Σ w·E, O the observed confusion counts, E the counts expected from the two raters' marginals,
    w 0 on the diagonal and 1 (unweighted) or (i - j)² (quadratic) off it, over the labels from the lowest either
    rater gave to the highest (sklearn.metrics.cohen_kappa_score's definition with those labels). 1 where both
    raters gave one and the same label throughout."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    both = np.concatenate([a, b])
    labels = np.arange(both.min(), both.max() + 1) if len(both) else np.zeros(0, np.int64)
    if len(labels) < 2:
        return 1.0
    index = {v: i for i, v in enumerate(labels.tolist())}
    n = len(labels)
    observed = np.zeros((n, n))
    np.add.at(observed, ([index[v] for v in a.tolist()], [index[v] for v in b.tolist()]), 1)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    i, j = np.indices((n, n))
    w = (i != j).astype(float) if weights is None else (i - j).astype(float) ** 2
    return float(1 - (w * observed).sum() / (w * expected).sum())


def agreement(judge_grades, human_grades, min_grade: int = MIN_GRADE, graded: bool = True) -> dict:
    """How the judge agrees with human gold on the same passages: quadratic weighted kappa on the grades (where the
    human gold is graded), Cohen's kappa on relevant (judge: grade ≥ `min_grade`; human: above 0) versus not, and
    the confusion table (judge grade → human grade → count)."""
    j, h = np.asarray(judge_grades, dtype=np.int64), np.asarray(human_grades, dtype=np.int64)
    confusion: dict[str, dict[str, int]] = {}
    for a, b in zip(j.tolist(), h.tolist()):
        row = confusion.setdefault(str(a), {})
        row[str(b)] = row.get(str(b), 0) + 1
    return {
        "passages": int(len(j)),
        "weighted_kappa": round(cohen_kappa(j, h, "quadratic"), 4) if graded and len(j) else None,
        "kappa_relevant": round(cohen_kappa(j >= min_grade, h > 0), 4) if len(j) else None,
        "confusion": {a: dict(sorted(r.items())) for a, r in sorted(confusion.items())},
    }


def human_span_grades(verdicts: list[dict], gold, relevance: str = "overlap") -> list[int | None]:
    """Each verdict's human grade under span gold (`inputs.SpanGold`): 1 where the passage is relevant to a
    reference of its question by the relevance rule, 0 where not; None for a question the gold set does not have."""
    refs: dict[str, list[dict]] = {}
    index = {q: i for i, q in enumerate(gold.query_ids)}
    for r, s, e in zip(gold.ref_query.tolist(), gold.ref_start.tolist(), gold.ref_end.tolist()):
        refs.setdefault(gold.query_ids[r], []).append(
            {"query_id": gold.query_ids[r], "corpus_id": gold.corpus_ids[r], "start": s, "end": e, "grade": 1}
        )
    chunks = [(v["query_id"], v["corpus_id"], v["start"], v["end"]) for v in verdicts]
    grades, _ = chunk_grades([x for rs in refs.values() for x in rs], chunks, relevance)
    return [int(g) if v["query_id"] in index else None for v, g in zip(verdicts, grades.tolist())]


def human_qrels_grades(verdicts: list[dict], qrels: dict[str, dict[str, float]]) -> list[int | None]:
    """Each verdict's human grade under document qrels: its document's grade, None where unjudged."""
    out = []
    for v in verdicts:
        g = qrels.get(v["query_id"], {}).get(v["corpus_id"])
        out.append(None if g is None else int(max(g, 0)))
    return out


def run_judged_share(exp, gold, retrieved) -> list[dict]:
    """Per configuration and k of a run over judged gold (`gold_provenance`: kind `judged`, document gold), the
    share of its top k that was judged ([] for any other run): what the run prints and keeps in its gold check."""
    if retrieved is None or not getattr(exp, "doc_gold", False) or experiment_gold(exp)["kind"] != "judged":
        return []
    rows = retrieved.to_pylist()
    keys = [k for k in CONFIG_KEYS if k in retrieved.column_names and k != "k"]
    return [s for k in sorted(set(exp.k)) for s in judged_share(rows, gold.qrels, k, keys)]


def judged_lines(shares: list[dict]) -> list[str]:
    """One line per k: the share of the top k that was judged, over the run's configurations (mean and lowest)."""
    lines = []
    for k in sorted({s["k"] for s in shares}):
        at = [s for s in shares if s["k"] == k and s["judged_share"] is not None]
        if at:
            low = min(at, key=lambda s: s["judged_share"])
            mean = sum(s["judged_share"] for s in at) / len(at)
            lines.append(
                f"judged gold: {mean:.0%} of the top {k} was judged on average (lowest {low['judged_share']:.0%}, "
                f"{config_label(low | {'k': k})}); unjudged chunks count as not relevant"
            )
    return lines


def run_lines(settings: dict, check: dict | None) -> list[str]:
    """What `chunkeval run` prints of a recorded run's gold set when it is model-made: its kind, and for judged
    gold the share of the top k that was judged (kept in the run's gold check, `judged_share`)."""
    said = describe(settings)
    return ([f"gold set {said}"] if said else []) + judged_lines((check or {}).get("judged_share") or [])
