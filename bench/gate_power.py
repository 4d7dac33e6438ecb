"""The regression gate's power (issue 45): how often it catches a harm of known size, beside how often it alarms on
a night without harm, under the step-down max-T (the gate) and under Holm over t-test p-values (the rule before).

    python bench/gate_power.py demo-harm
    python bench/gate_power.py real --data demo|shared|beir [--nights 20] [--harmless 100]
    python bench/gate_power.py resampled --data demo|shared|beir [--replications 1000] [--noise night|stress]
    python bench/gate_power.py model --data demo|shared [--corpus state_of_the_union]

The grid is the issue's: bm25 over fixed_token and recursive_token chunks of 100 tokens, k 1 and 5 (4 configurations
× 6 watched metrics, span gold; × 2 document metrics, document gold). The data: the demo (28 questions), the shared
set (five corpora, 472 questions) and a BEIR-format folder made from the shared set (bench/ties_beir.py: documents of
whole paragraphs, a document relevant where it overlaps a reference).

- `demo-harm`: the issue's harm, end to end: two recorded runs of a copy of the demo, the second after a paragraph
  repeating six questions (the first two of each document) is appended to the documents, and `chunkeval trend
  --fail-on-regression` (the default gate, no --metric) asked in a subprocess; Holm's verdict on the same checks.
- `real`: real two runs a night, the second after a change to a fresh copy of the corpus, and the gate's function
  (`chunkeval.analysis.regression.verdict`). Harms: distractors for a share of the questions (their words repeated in
  a paragraph appended to their document; under document gold, in a new document), and the referenced passages of a
  share deleted (under document gold, the relevant documents' text replaced). Harmless nights: three words inserted
  outside every reference (under document gold, anywhere), and re-runs.
- `resampled`: thousands of nights made from real recorded per-query tables: the baseline run and five real nights
  with edits outside the references. A night takes one of those, swaps before and after on a random half of the
  questions (the sign flip of a harmless pair: its differences are as likely either way), and for a harm lowers every
  watched metric of every configuration on a random share of the questions by one factor, chosen so that span recall
  (doc_ndcg_at_k under document gold) falls by the size asked on average over the configurations. `--noise stress`
  draws each question's before and after independently from the baseline's values instead (bench/false_alarms.py's
  null: differences as large as the spread between questions).
- `model`: dense retrieval with a copy of all-MiniLM-L6-v2 at one path (the configurations keep their keys): the
  baseline, then the same path with the model reading 64, 32 and 16 word pieces (harmful), a switch to the onnx
  backend (lossless: docs/backends.md) and a re-run (harmless).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ties_beir import beir_folder  # noqa: E402  (the BEIR-format folder of the shared set)

GRID = {"chunker": ["fixed_token", "recursive_token"], "chunk_sizes": [100], "overlaps": [0], "k": [1, 5]}
SHARES = (0.05, 0.10, 0.20, 0.50)  # of the questions a resampled harm lowers
REAL_SHARES = (0.01, 0.02, *SHARES)  # of the questions a real harm reaches (the same number of questions once)
SIZES = (0.02, 0.03, 0.05, 0.10)
ALPHA, THRESHOLD = 0.05, 0.02


# --------------------------------------------------------------------------- the data and its changes


def set_up(data: str, work: Path) -> dict:
    """A fresh copy of the data set's inputs in `work`: the experiment's settings (without the grid)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if data == "beir":
        beir_folder(work / "beir")
        return {"beir": str(work / "beir")}
    if data == "demo":
        from chunkeval.paths import DEMO_DIR

        corpus, questions = DEMO_DIR / "corpora", DEMO_DIR / "questions.csv"
    else:
        if not (SHARED / "questions_df.csv").is_file():
            raise SystemExit(f"the shared data set is absent: expected it at {SHARED}")
        corpus, questions = SHARED / "corpora", SHARED / "questions_df.csv"
    shutil.copytree(corpus, work / "corpora")
    for path in (work / "corpora").iterdir():
        path.chmod(0o644)  # the shared set's files are read-only
    shutil.copyfile(questions, work / "questions.csv")
    return {"corpus_dir": str(work / "corpora"), "questions": str(work / "questions.csv")}


def gold(inputs: dict) -> list[dict]:
    """The questions, each with its corpus_id, text and references (span gold), or its query id, text and relevant
    documents (document gold)."""
    if "beir" in inputs:
        folder = Path(inputs["beir"])
        relevant: dict[str, list[str]] = {}
        for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
            qid, doc, _ = line.split("\t")
            relevant.setdefault(qid, []).append(doc)
        queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
        return [{"id": q["_id"], "question": q["text"], "relevant": relevant[q["_id"]]} for q in queries]
    with open(inputs["questions"], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [
        {"corpus_id": r["corpus_id"], "question": r["question"], "references": json.loads(r["references"])}
        for r in rows
    ]


def _document(inputs: dict, corpus_id: str) -> Path:
    return next(Path(inputs["corpus_dir"]).glob(f"{corpus_id}.*"))


def _beir_docs(inputs: dict) -> list[dict]:
    path = Path(inputs["beir"]) / "corpus.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_beir_docs(inputs: dict, docs: list[dict]) -> None:
    path = Path(inputs["beir"]) / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def first_of_each_document(questions: list[dict], n: int = 2) -> list[dict]:
    """The first `n` questions of each document, in the gold set's order: the issue's six (of the demo's three)."""
    seen: dict[str, int] = {}
    out = []
    for q in questions:
        seen[q["corpus_id"]] = seen.get(q["corpus_id"], 0) + 1
        out += [q] if seen[q["corpus_id"]] <= n else []
    return out


def distract(inputs: dict, chosen: list[dict]) -> None:
    """The chosen questions' own words, repeated where retrieval finds them before the answer: one paragraph per
    document appended to it, holding its chosen questions (span gold: the issue's harm); under document gold, one
    new document per question."""
    if "beir" in inputs:
        docs = _beir_docs(inputs)
        docs += [{"_id": f"distractor-{i}", "title": "", "text": q["question"]} for i, q in enumerate(chosen)]
        _write_beir_docs(inputs, docs)
        return
    by_doc: dict[str, list[str]] = {}
    for q in chosen:
        by_doc.setdefault(q["corpus_id"], []).append(q["question"])
    for corpus_id, questions in by_doc.items():
        doc = _document(inputs, corpus_id)
        doc.write_text(doc.read_text(encoding="utf-8") + "\n\n" + " ".join(questions) + "\n", encoding="utf-8")


def delete_references(inputs: dict, chosen: list[dict]) -> None:
    """The chosen questions' referenced passages deleted from their documents (span gold: such a question cannot be
    placed and retires); under document gold, the relevant documents' text replaced by a sentence about nothing."""
    if "beir" in inputs:
        gone = {d for q in chosen for d in q["relevant"]}
        docs = [{**d, "text": "This page was left blank."} if d["_id"] in gone else d for d in _beir_docs(inputs)]
        _write_beir_docs(inputs, docs)
        return
    for q in chosen:
        doc = _document(inputs, q["corpus_id"])
        text = doc.read_text(encoding="utf-8")
        for ref in q["references"]:
            text = text.replace(ref["content"], "")
        doc.write_text(text, encoding="utf-8")


def edit_outside(inputs: dict, questions: list[dict], rng: random.Random, edits: int = 3) -> None:
    """`edits` words inserted at random places outside every reference (after an `is`, `was`, `are` or `were`; under
    document gold, after any such word of a random document): the chunks after them move, the answers stay."""
    if "beir" in inputs:
        docs = _beir_docs(inputs)
        for _ in range(edits):
            doc = rng.choice(docs)
            found = list(re.finditer(r"\b(is|was|are|were)\b", doc["text"]))
            if found:
                m = rng.choice(found)
                doc["text"] = doc["text"][: m.end()] + " indeed" + doc["text"][m.end() :]
        _write_beir_docs(inputs, docs)
        return
    for _ in range(edits):
        corpus_id = rng.choice(sorted({q["corpus_id"] for q in questions}))
        doc = _document(inputs, corpus_id)
        text = doc.read_text(encoding="utf-8")
        spans = []
        for q in questions:
            for ref in q["references"] if q["corpus_id"] == corpus_id else []:
                at = text.find(ref["content"])
                spans += [(at, at + len(ref["content"]))] if at >= 0 else []
        found = [
            m for m in re.finditer(r"\b(is|was|are|were)\b", text) if not any(a <= m.start() < b for a, b in spans)
        ]
        m = rng.choice(found)
        doc.write_text(text[: m.end()] + " indeed" + text[m.end() :], encoding="utf-8")


# --------------------------------------------------------------------------- runs and the gate


def experiment(inputs: dict, **more):
    from chunkeval.engine.pipeline.experiment import Experiment

    return Experiment.from_dict({"name": "gate", **inputs, **GRID, "retriever": ["bm25"], **more})


def run(exp):
    """The run's per-query table (its notes on stderr, such as the gold set's retired questions, kept quiet)."""
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.paths import cache_dir

    with contextlib.redirect_stderr(io.StringIO()):
        return run_sweep(exp, Embedders(cache_dir())).per_query


def headline(table) -> str:
    """The metric whose fall a harm is sized by: span recall, or doc_ndcg_at_k under document gold."""
    names = table.column_names if hasattr(table, "column_names") else list(table)
    return "span_recall" if "span_recall" in names and not _all_nan(table["span_recall"]) else "doc_ndcg_at_k"


def _all_nan(column) -> bool:
    values = np.asarray(column.to_numpy(zero_copy_only=False) if hasattr(column, "to_numpy") else column, dtype=float)
    return bool(np.isnan(values).all())


def gate(after, before) -> tuple[bool, bool, dict]:
    """(the gate alarms, Holm over the same checks' t-test p-values would have, the verdict)."""
    from chunkeval.analysis.regression import REGRESSION

    v, _, by_holm = smallest_p(after, before)
    return v["verdict"] == REGRESSION, by_holm < ALPHA, v


def smallest_p(after, before) -> tuple[dict, float, float]:
    """(the verdict, the smallest adjusted p of a check that fell beyond the threshold, the same under Holm over
    the checks' t-tests): a night alarms at any alpha above it (the adjusted p-values do not depend on alpha)."""
    from chunkeval.analysis.regression import verdict
    from chunkeval.stats import holm

    v = verdict("new", "baseline", after, before, threshold=THRESHOLD, alpha=ALPHA)
    checks = v["checks"]
    fell = [c["change"] < -THRESHOLD for c in checks]
    adjusted = holm([c["p_ttest"] for c in checks]) if checks else []
    new = min((c["p_adjusted"] for c, f in zip(checks, fell) if f), default=np.inf)
    old = min((p for p, f in zip(adjusted, fell) if f), default=np.inf)
    return v, float(new), float(old)


def fall(v: dict, metric: str) -> float:
    """The mean change of `metric` over the configurations of the verdict's whole-gold-set checks."""
    changes = [c["change"] for c in v["checks"] if c["metric"] == metric and c["slice"] is None]
    return float(np.mean(changes)) if changes else float("nan")


def rate(hits: int, n: int) -> str:
    from scipy.stats import binomtest

    ci = binomtest(hits, n).proportion_ci(confidence_level=0.95, method="exact")
    return f"{hits}/{n} = {hits / n:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


# --------------------------------------------------------------------------- the modes


def demo_harm(work: Path) -> int:
    """The issue's harm, recorded and asked of the command-line gate."""
    from chunkeval.run_result import RunResult
    from chunkeval.warehouse import Warehouse

    inputs = set_up("demo", work / "inputs")
    exp = experiment(inputs, name="harm")
    wh = Warehouse(work / "home" / "warehouse")

    def record(result) -> str:
        run_id = wh.begin_run(exp.name, {}, "manual", exp.to_dict())
        wh.complete_run(
            run_id, RunResult(result.per_query, result.summary, texts_embedded=0, references=result.references)
        )
        return run_id

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.sweep import run_sweep

    before = run_sweep(exp, Embedders())
    record(before)
    distract(inputs, first_of_each_document(gold(inputs)))
    after = run_sweep(exp, Embedders())
    record(after)
    env = {**os.environ, "CHUNKEVAL_HOME": str(work / "home")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "chunkeval"), "trend", "--experiment", "harm", "--fail-on-regression"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    print(f"chunkeval trend --experiment harm --fail-on-regression: exit {done.returncode}")
    print("  " + done.stdout.splitlines()[0])
    new, old, v = gate(after.per_query, before.per_query)
    value = lambda t, c, m: {  # noqa: E731
        r["query_id"]: r[m] for r in t.to_pylist() if r["chunker"] == c["chunker"] and r["k"] == c["k"]
    }
    from chunkeval.stats import holm

    for c, p in zip(v["checks"], holm([c["p_ttest"] for c in v["checks"]])):
        c["p_holm"] = p
    for c in sorted(v["checks"], key=lambda c: c["p_adjusted"])[:4]:
        was, now = value(before.per_query, c, c["metric"]), value(after.per_query, c, c["metric"])
        print(
            f"  {c['chunker']} k={c['k']} {c['metric']}: {c['before']:.3f} -> {c['after']:.3f}, fell on "
            f"{sum(now[q] < was[q] for q in was)} of {len(was)} questions, p_ttest {c['p_ttest']:.4f}, "
            f"max-T p {c['p_adjusted']:.4f}, Holm p {c['p_holm']:.3f}"
        )
    print(f"the gate (step-down max-T): {'alarm' if new else 'no alarm'}; Holm over {len(v['checks'])} t-tests: "
          f"{'alarm' if old else 'no alarm'}")  # fmt: skip
    return 0 if new and done.returncode == 1 else 1


def night(data: str, work: Path, change, exp_more: dict | None = None):
    """One night: a fresh copy of the inputs, `change(inputs)` applied, and the run's per-query table."""
    inputs = set_up(data, work)
    change(inputs)
    return run(experiment(inputs, **(exp_more or {})))


def real(data: str, work: Path, nights: int, harmless: int) -> int:
    """Real two runs a night (the baseline once), every harm at every share, and the harmless nights."""
    started = time.monotonic()
    base_inputs = set_up(data, work / "baseline")
    questions = gold(base_inputs)
    before = run(experiment(base_inputs))
    metric = headline(before)
    print(f"{data}: {len(questions)} questions; baseline run in {time.monotonic() - started:.0f} s")
    print("| night | share | nights | mean change of " + metric + " | questions paired | gate (max-T) | Holm |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    rng = random.Random(45)
    counts = sorted({max(1, round(share * len(questions))) for share in REAL_SHARES})
    for name, harm in (("distractors", distract), ("references deleted", delete_references)):
        for count in counts:
            share = count / len(questions)
            hits = old_hits = 0
            changes, paired = [], []
            for _ in range(nights):
                chosen = rng.sample(questions, count)
                after = night(data, work / "night", lambda inputs, c=chosen, h=harm: h(inputs, c))  # noqa: B023
                new, old, v = gate(after, before)
                hits, old_hits = hits + new, old_hits + old
                changes.append(fall(v, metric))
                paired.append(v["paired_questions"])
            print(
                f"| {name} | {share:.0%} ({count} q.) | {nights} | {np.mean(changes):+.3f} | {min(paired)}–{max(paired)} "
                f"| {rate(hits, nights)} | {rate(old_hits, nights)} |"
            )
    for name, change in (
        ("3 words inserted outside the references", lambda inputs, r: edit_outside(inputs, questions, r)),
        ("re-run", lambda inputs, r: None),
    ):
        hits = old_hits = 0
        for i in range(harmless):
            r = random.Random(1000 + i)
            after = night(data, work / "night", lambda inputs, r=r, c=change: c(inputs, r))  # noqa: B023
            new, old, _ = gate(after, before)
            hits, old_hits = hits + new, old_hits + old
        print(f"| {name} (no harm) | – | {harmless} | | | {rate(hits, harmless)} | {rate(old_hits, harmless)} |")
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


def _columns(table) -> dict[str, np.ndarray]:
    """A per-query table as the mapping of numpy columns the verdict reads (`Warehouse.run_columns`' form)."""
    from chunkeval.analysis.comparisons import _column

    return {name: _column(table, name) for name in table.column_names}


def resampled(data: str, work: Path, replications: int, noise: str, harmless_nights: int = 5) -> int:
    """Nights made from real per-query tables: harmless ones, and harms of each size on each share."""
    from chunkeval.analysis.comparisons import rows_by_config
    from chunkeval.analysis.regression import REGRESSION_METRICS
    from chunkeval.vocabulary import CONFIG_KEYS

    started = time.monotonic()
    base_inputs = set_up(data, work / "baseline")
    questions = gold(base_inputs)
    before = _columns(run(experiment(base_inputs)))
    nights = [
        _columns(night(data, work / f"edit{i}", lambda inputs, r=random.Random(i): edit_outside(inputs, questions, r)))
        for i in range(harmless_nights)
    ]
    metric = headline(before)
    metrics = [m for m in REGRESSION_METRICS if m in before and not _all_nan(before[m])]
    keys = [k for k in CONFIG_KEYS if k in before]
    # row r of every table: the same (configuration, question) as the baseline's row r
    rows = rows_by_config(before, keys)
    ids = sorted(next(iter(rows.values())))
    order = np.asarray([[rows[c][q] for q in ids] for c in rows]).ravel()  # configuration-major
    aligned = []
    for table in [before, *nights]:
        theirs = rows_by_config(table, keys)
        at = np.asarray([[theirs[c][q] for q in ids] for c in rows]).ravel()
        aligned.append({m: table[m][at].astype(float) for m in metrics})
    frame = {k: before[k][order] for k in [*keys, "query_id"]}
    frame.update({m: np.full(len(order), np.nan) for m in REGRESSION_METRICS if m not in metrics})  # not measured
    n_q, n_c = len(ids), len(rows)
    print(
        f"{data}: {n_q} questions × {n_c} configurations × {len(metrics)} metrics; {noise} noise; "
        f"{harmless_nights} real harmless nights recorded in {time.monotonic() - started:.0f} s"
    )
    rng = np.random.default_rng(2026)

    def make_night(size: float, share: float) -> tuple[dict, dict, float]:
        """(after, before, the fall of `metric` averaged over the configurations) of one night."""
        if noise == "stress":  # before and after drawn independently per question, within each configuration
            pick = lambda: (rng.integers(0, n_q, n_q)[None, :] + n_q * np.arange(n_c)[:, None]).ravel()  # noqa: E731
            b_at, a_at = pick(), pick()
            base = {m: aligned[0][m][b_at] for m in metrics}
            new = {m: aligned[0][m][a_at] for m in metrics}
        else:  # a real harmless night, before and after swapped on a random half of the questions
            other = aligned[1 + rng.integers(0, harmless_nights)]
            swap = np.tile(rng.random(n_q) < 0.5, n_c)
            base = {m: np.where(swap, other[m], aligned[0][m]) for m in metrics}
            new = {m: np.where(swap, aligned[0][m], other[m]) for m in metrics}
        if size > 0:
            hit = np.tile(np.isin(np.arange(n_q), rng.choice(n_q, round(share * n_q), replace=False)), n_c)
            lost = np.nansum(new[metric][hit])
            factor = size * n_q * n_c / lost if lost > 0 else np.inf
            if factor > 1:
                return {}, {}, float("nan")  # the chosen questions hold too little to lose this much
            new = {m: np.where(hit, new[m] * (1 - factor), new[m]) for m in metrics}
        realised = float(np.nanmean(base[metric]) - np.nanmean(new[metric]))
        return {**frame, **new}, {**frame, **base}, realised

    def smallest(size: float, share: float, nights: int) -> np.ndarray:
        """Each feasible night's smallest p under the gate and under Holm (nights × 2)."""
        out = []
        for _ in range(nights):
            after, base, _ = make_night(size, share)
            if after:
                out.append(smallest_p(after, base)[1:])
        return np.asarray(out).reshape(-1, 2)

    nights_free = max(replications, 1000)
    free = smallest(0.0, 0.0, nights_free)
    held = int((free[:, 1] < ALPHA).sum())  # Holm's false alarms
    # the gate's alpha matched to Holm's false alarms on these nights: the largest that alarms no more often
    matched = min(ALPHA, float(np.sort(free[:, 0])[held]))

    def share_detected(size: float, share: float) -> str:
        found = smallest(size, share, replications)
        if len(found) < replications / 2:
            return "–"
        new, at_matched, old = ((found[:, i] < a).mean() for i, a in ((0, ALPHA), (0, matched), (1, ALPHA)))
        return f"{new:.3f} / {at_matched:.3f} / {old:.3f}"

    gate_alarms = int((free[:, 0] < ALPHA).sum())
    print(
        f"false alarms on {nights_free} nights without harm: gate {rate(gate_alarms, nights_free)}; gate at alpha "
        f"{matched:.4f} (matched to Holm's) {rate(int((free[:, 0] < matched).sum()), nights_free)}; Holm "
        f"{rate(held, nights_free)}"
    )
    print(
        f"share of harms detected: gate / gate at alpha {matched:.4f} / Holm, {replications} nights a cell; rows: "
        f"share of questions; columns: fall of {metric} averaged over the configurations"
    )
    print("| share | " + " | ".join(f"{s:.2f}" for s in SIZES) + " |")
    print("| ---: | " + " | ".join("---:" for _ in SIZES) + " |")
    for share in SHARES:
        cells = " | ".join(share_detected(size, share) for size in SIZES)
        print(f"| {share:.0%} ({round(share * n_q)} q.) | {cells} |")
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


def model(data: str, work: Path, corpus: list[str]) -> int:
    """Dense retrieval, one model path whose content changes: harms of three sizes, a lossless backend switch and a
    re-run, each against the baseline."""
    from chunkeval.engine.embedding import resolve_model

    started = time.monotonic()
    inputs = set_up(data, work / "inputs")
    path = work / "model"
    original = resolve_model("all-MiniLM-L6-v2")
    more = {"retriever": ["dense"], "model": [str(path)], **({"corpus": corpus} if corpus else {})}

    def with_model(limit: int | None, backend: str = "torch"):
        if path.exists():
            shutil.rmtree(path)
        shutil.copytree(original, path)
        if limit is not None:
            config = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
            config["max_seq_length"] = limit
            (path / "sentence_bert_config.json").write_text(json.dumps(config), encoding="utf-8")
        return run(experiment(inputs, backend=backend, **more))

    before = with_model(None)
    metric = headline(before)
    print(f"{data}{' (' + ', '.join(corpus) + ')' if corpus else ''}: baseline in {time.monotonic() - started:.0f} s")
    print(f"| night | change of {metric} (mean over configurations) | gate (max-T) | Holm | verdict |")
    print("| --- | ---: | --- | --- | --- |")
    from chunkeval.analysis.regression import verdict_line

    for name, limit, backend in (
        ("the model reads 64 word pieces (harm)", 64, "torch"),
        ("the model reads 32 word pieces (harm)", 32, "torch"),
        ("the model reads 16 word pieces (harm)", 16, "torch"),
        ("backend onnx (lossless, no harm)", None, "onnx"),
        ("re-run (no harm)", None, "torch"),
    ):
        new, old, v = gate(with_model(limit, backend), before)
        print(f"| {name} | {fall(v, metric):+.3f} | {'alarm' if new else '–'} | {'alarm' if old else '–'} | "
              f"{verdict_line(v)[:90]}… |")  # fmt: skip
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["demo-harm", "real", "resampled", "model"])
    parser.add_argument("--data", choices=["demo", "shared", "beir"], default="demo")
    parser.add_argument("--nights", type=int, default=20, help="real: nights per harm and share")
    parser.add_argument("--harmless", type=int, default=100, help="real: nights of each harmless change")
    parser.add_argument("--replications", type=int, default=1000, help="resampled: nights per cell")
    parser.add_argument("--noise", choices=["night", "stress"], default="night")
    parser.add_argument("--corpus", nargs="*", default=None, help="model: the shared set's corpora to keep")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-gate-"))
    os.environ.setdefault("CHUNKEVAL_HOME", str(work / "home"))
    if args.mode == "demo-harm":
        return demo_harm(work)
    if args.mode == "real":
        return real(args.data, work, args.nights, args.harmless)
    if args.mode == "resampled":
        return resampled(args.data, work, args.replications, args.noise)
    corpus = args.corpus if args.corpus is not None else (
        ["chatlogs", "state_of_the_union", "wikitexts"] if args.data == "shared" else []
    )  # fmt: skip
    return model(args.data, work, corpus)


if __name__ == "__main__":
    sys.exit(main())
