"""A million chunks, end to end: `chunkeval run` over a generated BEIR folder, each stage timed, peak memory.

    python bench/scale.py [--docs 10000,100000] [--queries 10000] [--work DIR] [--models-home DIR] [--seed 0] [--keep]

For each number of documents N in `--docs`, the script writes a BEIR folder (`corpus.jsonl`,
`queries.jsonl`, `qrels/test.tsv`) built from the sentences of the shared data set
(`../shared/datasets/chroma_general/corpora/*.md` from the repository root; the script exits with status 2
and says so when it is absent), then runs the real command in a subprocess, in a fresh `CHUNKEVAL_HOME`
(an empty embedding cache and warehouse; the `minilm-static` model is linked in from `--models-home`'s
`models/`, by default `$CHUNKEVAL_HOME/models`, where chunkeval builds it on first use: built beforehand if
missing, not timed) with a temporary Prefect server, as a user runs it:

    chunkeval run --experiment scale --beir DIR --chunker fixed_token --chunk-sizes 100 --overlaps 0 \\
        --model minilm-static --retriever dense,bm25 --index exact --k 10

The data. Sentences: every line of the five corpora split after `.`, `?` or `!`, kept when it has 6 to 60
cl100k_base tokens, each distinct sentence once (8,060). A document `docNNNNNN` has the title
`Record N` and sentences drawn at random (with replacement, so sentences recur across documents) until the
next one would take it past 1,000 tokens, facts included: about 10 chunks of 100 tokens. A question asks
for a fact only its document holds: `Ledger entry K7QX2M9P records that Mara Ellison received 41 crates of
copper at Valparaiso.` asked as `What does ledger entry K7QX2M9P record about Mara Ellison?`. The entry
code is 8 characters of a 32-letter alphabet, a bijection of the question's number (so no two facts share
it; it is one word to bm25's tokenizer), the rest drawn from small lists; the fact sits at a random place
among the document's sentences. Question q's gold (grade 1) is the document that holds its fact: the
documents of a random permutation, in turn, so with fewer documents than questions each document holds
several facts (at 1,000 documents and 10,000 questions, ten). Everything is seeded (`--seed`).

What is measured, per N: the wall-clock seconds of the command, and of each stage as the command prints them
(its last lines: `stage seconds: checks 1.20 (cpu 1.15), loading …`: checks, loading, chunking, embedding,
retrieval, scoring, storing, report, summary; the wall-clock seconds and the command's CPU seconds meanwhile,
which on a machine shared with other work say more than the wall clock); "other" is the rest (interpreter
start, imports, the Prefect server's start and stop); the CPU seconds of every process of the run (Prefect's
server included); the peak memory, the largest sum of the resident sets of the command's process tree
(sampled every 0.2 s; the Prefect server included) and the largest resident set of one of its processes
(`ru_maxrss` of `wait4`); the chunks made and the run's doc_recall_at_k and doc_ndcg_at_k at k = 10 for each
retriever (a check of the data: bm25 finds the entry code). Linux only (it reads /proc). The table gives,
for each stage, the ratio of its CPU seconds from one number of documents to the next: a stage that grows
faster than the documents is a defect.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT.parent / "shared" / "datasets" / "chroma_general").resolve()
RECIPE = 1  # bump when the generated data change, so that a kept folder is made again
DOC_TOKENS = 1000  # a document's budget: sentences are added while they fit
MIN_TOKENS, MAX_TOKENS = 6, 60
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # 32 letters: no I, O, 0 or 1
CODE_LENGTH = 8
NAMES = (
    "Mara Ellison", "Tomas Varga", "Ines Okafor", "Lukas Brandt", "Priya Raman", "Owen Achterberg",
    "Sofia Lindqvist", "Kenji Morita", "Amara Diallo", "Felix Navarro", "Hana Kowalczyk", "Rafael Quispe",
)  # fmt: skip
VERBS = ("shipped", "received", "ordered", "returned", "insured", "inspected")
ITEMS = ("crates of copper", "barrels of olive oil", "bales of cotton", "cases of glassware", "sacks of coffee")
PLACES = ("Valparaiso", "Rotterdam", "Mombasa", "Tallinn", "Cebu", "Trieste", "Halifax", "Durban", "Busan")
COMMAND = [
    "--chunker", "fixed_token", "--chunk-sizes", "100", "--overlaps", "0", "--model", "minilm-static",
    "--retriever", "dense,bm25", "--index", "exact", "--k", "10",
]  # fmt: skip


# --------------------------------------------------------------------------- the data


def sentences(data: Path) -> tuple[list[str], np.ndarray]:
    """The distinct sentences of the shared corpora that have MIN_TOKENS to MAX_TOKENS tokens, and their counts."""
    from chunkeval.engine.chunking.tokens import count_tokens

    found: dict[str, None] = {}
    for path in sorted((data / "corpora").glob("*.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for s in re.split(r"(?<=[.?!])\s+", line.strip()):
                found.setdefault(s.strip())
    texts = [s for s in found if s]
    counts = count_tokens(texts)
    keep = (counts >= MIN_TOKENS) & (counts <= MAX_TOKENS)
    return [t for t, k in zip(texts, keep.tolist()) if k], counts[keep]


def entry_code(number: int) -> str:
    """An 8-letter code, a bijection of `number` (< 32**8): an odd multiplier mod 2**40 mixes the digits."""
    value = (number * 0x9E3779B1 + 0x5BD1E995) % (1 << 40)
    return "".join(CODE_ALPHABET[(value >> (5 * i)) & 31] for i in range(CODE_LENGTH))


def fact_and_question(number: int, rng: np.random.Generator) -> tuple[str, str]:
    code = entry_code(number)
    name, verb, item, place = (
        NAMES[rng.integers(len(NAMES))],
        VERBS[rng.integers(len(VERBS))],
        ITEMS[rng.integers(len(ITEMS))],
        PLACES[rng.integers(len(PLACES))],
    )
    fact = f"Ledger entry {code} records that {name} {verb} {rng.integers(2, 500)} {item} at {place}."
    return fact, f"What does ledger entry {code} record about {name}?"


def build_beir(folder: Path, n_docs: int, n_queries: int, seed: int) -> dict:
    """Write the BEIR folder (the module's docstring says how); returns what it holds."""
    from chunkeval.engine.chunking.tokens import count_tokens

    pool, pool_tokens = sentences(DATA)
    rng = np.random.default_rng([seed, n_docs, n_queries])
    target = rng.permutation(n_docs)[np.arange(n_queries) % n_docs]  # question q's document
    facts, questions = zip(*(fact_and_question(q, rng) for q in range(n_queries))) if n_queries else ((), ())
    fact_tokens = count_tokens(list(facts))
    facts_of: list[list[int]] = [[] for _ in range(n_docs)]
    for q, d in enumerate(target.tolist()):
        facts_of[d].append(q)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "qrels").mkdir(parents=True)
    width = 2 * DOC_TOKENS // MIN_TOKENS  # draws per document: more than any document can take
    n_sentences = 0
    with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as out:
        for lo in range(0, n_docs, 4096):
            docs = range(lo, min(lo + 4096, n_docs))
            draws = rng.integers(0, len(pool), (len(docs), width))
            budget = DOC_TOKENS - 3 - np.array([fact_tokens[facts_of[d]].sum() for d in docs])  # the title's 3
            fits = np.cumsum(pool_tokens[draws], axis=1) <= budget[:, None]
            taken = fits.sum(axis=1)  # cumulative sums grow: the sentences that fit are a prefix
            for row, d in enumerate(docs):
                body = [pool[i] for i in draws[row, : taken[row]].tolist()]
                for q in facts_of[d]:
                    body.insert(int(rng.integers(len(body) + 1)), facts[q])
                n_sentences += len(body)
                out.write(json.dumps({"_id": f"doc{d:06d}", "title": f"Record {d}", "text": " ".join(body)}) + "\n")
    with open(tmp / "queries.jsonl", "w", encoding="utf-8") as out:
        for q, text in enumerate(questions):
            out.write(json.dumps({"_id": f"q{q:05d}", "text": text}) + "\n")
    with open(tmp / "qrels" / "test.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        out.writelines(f"q{q:05d}\tdoc{d:06d}\t1\n" for q, d in enumerate(target.tolist()))
    about = {
        "recipe": RECIPE,
        "docs": n_docs,
        "queries": n_queries,
        "seed": seed,
        "sentence_pool": len(pool),
        "sentences": n_sentences,
        "corpus_bytes": (tmp / "corpus.jsonl").stat().st_size,
    }
    (tmp / "scale.json").write_text(json.dumps(about, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return about


def beir_folder(work: Path, n_docs: int, n_queries: int, seed: int) -> tuple[Path, dict, float]:
    """The BEIR folder of these settings under `work`, made unless a complete one of this recipe is there."""
    folder = work / f"beir-{n_docs}-{n_queries}-seed{seed}"
    try:
        about = json.loads((folder / "scale.json").read_text())
        if about.get("recipe") == RECIPE:
            return folder, about, 0.0
    except (OSError, ValueError):
        pass
    t0 = time.perf_counter()
    about = build_beir(folder, n_docs, n_queries, seed)
    return folder, about, time.perf_counter() - t0


# --------------------------------------------------------------------------- the run


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def ensure_model(models: Path) -> None:
    """minilm-static built into `models` (the models folder of a CHUNKEVAL_HOME) if missing; not timed."""
    env = {**os.environ, "CHUNKEVAL_HOME": str(models.parent), "HF_HUB_OFFLINE": "1"}
    code = "from chunkeval.engine.embedding import static; static.ensure_model('minilm-static')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def tree_rss(pid: int) -> int:
    """Bytes resident in process `pid` and its descendants now (0 for a process gone meanwhile)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def stage_seconds(output: str) -> tuple[dict[str, float], dict[str, float]]:
    """Wall and CPU seconds per stage from `chunkeval run`'s line `stage seconds: loading 1.20 (cpu 1.15), …`."""
    found = re.search(r"^stage seconds: (.*)$", output, re.M)
    stages = re.findall(r"(\w+) ([\d.]+) \(cpu ([\d.]+)\)", found.group(1) if found else "")
    return {n: float(w) for n, w, _ in stages}, {n: float(c) for n, _, c in stages}


def run_once(beir: Path, work: Path, models: Path, keep: bool) -> dict:
    """`chunkeval run` over `beir` in a fresh home: wall seconds, stage seconds, peak memory, the run's numbers."""
    home = Path(tempfile.mkdtemp(prefix=f"home-{beir.name}-", dir=work))
    (home / "chunkeval").mkdir()
    (home / "chunkeval" / "models").symlink_to(models, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(CHUNKEVAL_HOME=str(home / "chunkeval"), PREFECT_HOME=str(home / "prefect"), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "chunkeval.cli", "run", "--experiment", "scale", "--beir", str(beir), *COMMAND]
    peak, done = [0], threading.Event()
    t0 = time.perf_counter()
    with open(home / "run.out", "w") as out, open(home / "run.err", "w") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=out, stderr=err)

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss(proc.pid))
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the resources of this run's processes alone
        seconds = time.perf_counter() - t0
        done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = (home / "run.out").read_text(), (home / "run.err").read_text()
    if proc.returncode:
        sys.exit(f"chunkeval run failed ({proc.returncode}):\n{err[-4000:]}\n{out[-2000:]}")
    stages, cpu = stage_seconds(out)
    run_id = re.search(r"^experiment scale: run (\S+) completed", out, re.M).group(1)
    result = {
        "seconds": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "stages": stages,
        "stage_cpu": cpu,
        "other": seconds - sum(stages.values()),
        "peak_tree_mib": peak[0] / 2**20,
        "peak_process_mib": usage.ru_maxrss / 1024,
        **run_numbers(home / "chunkeval" / "warehouse" / "results" / run_id / "summary.parquet"),
    }
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return result


def run_numbers(summary: Path) -> dict:
    """Chunks made and the doc metrics at k = 10 per retriever, read from the run's summary table."""
    import pyarrow.parquet as pq

    rows = pq.read_table(summary).to_pylist()
    return {
        "chunks": rows[0]["n_chunks"],
        "metrics": {
            r["retriever"]: {m: round(r[f"{m}_mean"], 4) for m in ("doc_recall_at_k", "doc_ndcg_at_k")}
            for r in rows
            if r["k"] == 10
        },
    }


# --------------------------------------------------------------------------- the table


STAGES = ("checks", "loading", "chunking", "embedding", "retrieval", "scoring", "storing", "report", "summary")


def table(results: dict[int, dict]) -> str:
    """Stages as rows, one column per number of documents (`wall (cpu)` seconds), and the growth of each stage's
    CPU seconds from one size to the next."""
    sizes = sorted(results)
    head = ["stage", *(f"{n:,} documents ({results[n]['chunks']:,} chunks)" for n in sizes)]
    head += [f"cpu × ({a:,} → {b:,})" for a, b in zip(sizes, sizes[1:])]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]

    def row(name: str, cells: list[str], ratios: list[float | None]) -> None:
        lines.append("| " + " | ".join([name, *cells, *(f"{r:.1f}" if r else "" for r in ratios)]) + " |")

    def ratios(values: list[float]) -> list[float | None]:
        return [b / a if a > 0.05 else None for a, b in zip(values, values[1:])]  # below 0.05 s: noise

    for stage in STAGES:
        cpu = [results[n]["stage_cpu"].get(stage, 0.0) for n in sizes]
        row(stage, [f"{results[n]['stages'].get(stage, 0.0):.1f} ({c:.1f})" for n, c in zip(sizes, cpu)], ratios(cpu))
    row(
        "other (start, imports, Prefect server)",
        [f"{results[n]['other']:.1f}" for n in sizes],
        [None] * (len(sizes) - 1),
    )
    total = [results[n]["cpu"] for n in sizes]
    row(
        "total (cpu of every process)",
        [f"{results[n]['seconds']:.1f} ({c:.1f})" for n, c in zip(sizes, total)],
        ratios(total),
    )
    for key, name in (
        ("peak_tree_mib", "peak memory, process tree (MiB)"),
        ("peak_process_mib", "peak memory, one process (MiB)"),
    ):
        values = [results[n][key] for n in sizes]
        row(name, [f"{v:,.0f}" for v in values], ratios(values))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--docs", default="10000,100000", help="comma-separated numbers of documents (default 10000,100000)"
    )
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--work", help="where the BEIR folders (kept and reused) and the runs' homes go (default: a temporary folder)"
    )
    ap.add_argument("--keep", action="store_true", help="keep each run's CHUNKEVAL_HOME (its warehouse and cache)")
    ap.add_argument(
        "--models-home",
        help="a CHUNKEVAL_HOME whose models/ holds minilm-static, built there if missing ($CHUNKEVAL_HOME)",
    )
    args = ap.parse_args()
    if not (DATA / "corpora").is_dir():
        print(f"skipped: the shared data set is absent (expected it at {DATA})", file=sys.stderr)
        sys.exit(2)
    sizes = [int(n) for n in args.docs.split(",")]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="chunkeval-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    from chunkeval.paths import home

    models = (Path(args.models_home) if args.models_home else home()) / "models"
    ensure_model(models)
    results = {}
    for n in sizes:
        beir, about, made = beir_folder(work, n, args.queries, args.seed)
        print(
            f"{n:,} documents: {beir} ({about['corpus_bytes'] / 2**20:,.0f} MiB of corpus.jsonl"
            + (f", written in {made:.1f} s)" if made else ", kept from before)"),
            file=sys.stderr,
            flush=True,
        )
        results[n] = run_once(beir, work, models, args.keep)
        print(json.dumps({"docs": n, **results[n]}), file=sys.stderr, flush=True)
    print(
        f"\n`chunkeval run --experiment scale --beir DIR {' '.join(COMMAND)}`, {args.queries:,} questions, {cores()} cores\n"
    )
    print(table(results))
    for n in sizes:
        print(f"{n:,} documents, at k = 10: {results[n]['metrics']}")
    if args.work:
        (work / "results.json").write_text(json.dumps({str(n): r for n, r in results.items()}, indent=1))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
