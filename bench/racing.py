"""Does racing's guarantee hold, and what does it save? (issue 43, docs/performance.md "Racing")

On recorded full runs (every configuration scored on every question: the demo, the shared general evaluation, and
a BEIR-format set made from the shared one), racing is replayed `--replays` times with the questions shuffled
(seeded): each replay races the configurations (`chunkeval.analysis.racing.race`, α = 0.05, δ = 0.01, batches of
`--batch`) and counts a *wrong drop* when it dropped a configuration whose mean over every question is within δ of
the best's. Beside it, the same replays with Optuna's `WilcoxonPruner` used the same way (each configuration a
trial, each question a step with its own id, checked after each batch; trials in a shuffled order) and with a
fixed-sample comparison (all configurations on the first n questions of the replay, n the race's mean share; a
configuration dropped where a one-sided paired t-test against the sample's best gives p < α/(K − 1) and its mean
is more than δ below). No chat model is involved: the per-question metrics are the runs'.

    python bench/racing.py --out /tmp/racing [--replays 1000] [--optuna-replays 200]

The recorded runs are made once (with the real model, `chunkeval.evaluate`) and kept in `--out`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CHUNKEVAL_SHARED_DATA", "/work/shared/datasets/chroma_general"))
DEMO = ROOT / "src" / "chunkeval" / "data" / "demo"


def beir_from(corpora: Path, questions: Path, root: Path) -> Path:
    """A BEIR folder: each paragraph of each corpus a document, each question a query, judged relevant in every
    paragraph a reference of it overlaps (as bench/same_numbers.py makes the demo's)."""
    if (root / "qrels" / "test.tsv").is_file():
        return root
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    docs, spans = [], {}
    for path in sorted(corpora.glob("*.md")):
        text, start = path.read_text(encoding="utf-8"), 0
        for n, part in enumerate(text.split("\n\n")):
            if part.strip():
                docs.append({"_id": f"{path.stem}:{n}", "title": path.stem, "text": part})
                spans.setdefault(path.stem, []).append((start, start + len(part), f"{path.stem}:{n}"))
            start += len(part) + 2
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    with open(questions, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            judged = {
                doc
                for ref in json.loads(row["references"])
                for a, b, doc in spans[row["corpus_id"]]
                if a < ref["end_index"] and ref["start_index"] < b
            }
            if judged:
                queries.append({"_id": f"q{i}", "text": row["question"]})
                qrels += [f"q{i}\t{doc}\t1" for doc in sorted(judged)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return root


def recorded(out: Path) -> dict[str, tuple[np.ndarray, list[str]]]:
    """(questions × configurations, labels) per set and metric, from full runs made once and kept in `out`."""
    import pyarrow.parquet as pq

    import chunkeval
    from chunkeval.vocabulary import CONFIG_KEYS, config_label

    grids = {
        "demo": dict(corpus=DEMO / "corpora", questions=DEMO / "questions.csv", metric="ndcg_at_k",
                     grid=dict(chunker=["fixed_token", "recursive_token"], chunk_sizes=[100, 200, 400],
                               k=[1, 3, 5, 10], retriever=["dense", "bm25"])),
        "shared": dict(corpus=SHARED / "corpora", questions=SHARED / "questions_df.csv", metric="ndcg_at_k",
                       grid=dict(chunker=["fixed_token", "recursive_token"], chunk_sizes=[200, 400],
                                 k=[1, 5, 10], retriever=["dense", "bm25", "hybrid"])),
        "beir (from shared)": dict(beir=True, metric="doc_ndcg_at_k",
                                   grid=dict(chunker=["fixed_token", "none"], chunk_sizes=[100, 200],
                                             k=[1, 5, 10], retriever=["dense", "bm25"])),
    }  # fmt: skip
    sets = {}
    for name, spec in grids.items():
        path = out / f"{name.split()[0]}.per_query.parquet"
        if not path.is_file():
            t0 = time.perf_counter()
            if spec.get("beir"):
                folder = beir_from(SHARED / "corpora", SHARED / "questions_df.csv", out / "beir")
                res = chunkeval.evaluate(beir=str(folder), **spec["grid"])
            else:
                res = chunkeval.evaluate(str(spec["corpus"]), str(spec["questions"]), **spec["grid"])
            pq.write_table(res.per_query, path)
            print(f"recorded {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        table = pq.read_table(path)
        keys = [k for k in CONFIG_KEYS if k in table.column_names]
        rows = table.select(["query_id", *keys, spec["metric"]]).to_pylist()
        configs = sorted({tuple(r[k] for k in keys) for r in rows}, key=str)
        queries = sorted({r["query_id"] for r in rows})
        col, row = {c: i for i, c in enumerate(configs)}, {q: i for i, q in enumerate(queries)}
        x = np.full((len(queries), len(configs)), np.nan)
        for r in rows:
            x[row[r["query_id"]], col[tuple(r[k] for k in keys)]] = r[spec["metric"]]
        keep = ~np.isnan(x).any(axis=1)
        labels = [config_label(dict(zip(keys, c))) for c in configs]
        sets[f"{name}: {spec['metric']}"] = (x[keep], labels)
    return sets


def fixed_sample(x: np.ndarray, order: np.ndarray, n: int, alpha: float, delta: float) -> list[int]:
    """The configurations a one-look comparison on the first n questions drops (one-sided paired t-test against
    the sample's best, Bonferroni over the K − 1 comparisons, and a mean more than δ below)."""
    from scipy import stats

    s = x[order[:n]]
    best = int(np.argmax(s.mean(0)))
    out = []
    for c in range(x.shape[1]):
        if c == best:
            continue
        d = s[:, c] - s[:, best]
        if d.mean() >= -delta:
            continue
        sd = d.std(ddof=1)
        p = 0.0 if sd == 0 else stats.t.cdf(d.mean() / (sd / math.sqrt(n)), n - 1)
        if p < alpha / (x.shape[1] - 1):
            out.append(c)
    return out


def wilcoxon(x: np.ndarray, order: np.ndarray, rng, batch: int, p_threshold: float) -> tuple[list[int], int]:
    """Optuna's WilcoxonPruner used as the race: each configuration a trial (in a shuffled order), each question a
    step; (pruned configurations, cells evaluated)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.WilcoxonPruner(p_threshold=p_threshold))
    pruned, cells = [], 0
    for c in rng.permutation(x.shape[1]):
        trial = study.ask()
        stopped = False
        for i, q in enumerate(order, start=1):
            trial.report(float(x[q, c]), int(q))
            cells += 1
            if (i % batch == 0 or i == len(order)) and trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned.append(int(c))
                stopped = True
                break
        if not stopped:
            study.tell(trial, float(x[:, c].mean()))
    return pruned, cells


def main() -> int:
    from chunkeval.analysis.racing import race, wrong_drops

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--replays", type=int, default=1000)
    ap.add_argument("--optuna-replays", type=int, default=200)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name, (x, _labels) in recorded(args.out).items():
        n, k = x.shape
        truth = x.mean(0)
        rng = np.random.default_rng(args.seed)
        batch = max(1, min(args.batch, n // 10))
        t0 = time.perf_counter()
        wrong, wrong_leader, shares, winners, stops = 0, 0, [], 0, {}
        for _ in range(args.replays):
            res = race(x, rng.permutation(n), args.alpha, args.delta, batch)
            wrong += wrong_drops(res, truth, args.delta) > 0
            wrong_leader += truth[res.leader] < truth.max() - args.delta  # a stop that named a leader not δ-good
            shares.append(res.share)
            winners += res.winner is not None
            stops[res.stopped] = stops.get(res.stopped, 0) + 1
        race_s = time.perf_counter() - t0
        n_fixed = max(2, round(float(np.mean(shares)) * n))
        fixed_wrong = 0
        for _ in range(args.replays):
            order = rng.permutation(n)
            fixed_wrong += any(
                truth[c] >= truth.max() - args.delta for c in fixed_sample(x, order, n_fixed, args.alpha, args.delta)
            )
        opt_wrong, opt_cells = 0, []
        for _ in range(args.optuna_replays):
            pruned, cells = wilcoxon(x, rng.permutation(n), rng, batch, args.alpha)
            opt_wrong += any(truth[c] >= truth.max() - args.delta for c in pruned)
            opt_cells.append(cells / (n * k))
        within = int((truth >= truth.max() - args.delta).sum())
        row = {
            "set": name, "questions": n, "configurations": k, "within_delta_of_best": within, "batch": batch,
            "race_wrong_drop_rate": wrong / args.replays, "race_cells": float(np.mean(shares)),
            "race_one_left": winners / args.replays, "race_wrong_leader_rate": wrong_leader / args.replays,
            "race_stopped": stops, "race_cells_p90": float(np.quantile(shares, 0.9)),
            "race_seconds_per_replay": race_s / args.replays,
            "fixed_questions": n_fixed, "fixed_wrong_drop_rate": fixed_wrong / args.replays,
            "fixed_cells": n_fixed / n,
            "wilcoxon_wrong_drop_rate": opt_wrong / max(1, args.optuna_replays),
            "wilcoxon_cells": float(np.mean(opt_cells)) if opt_cells else None,
            "replays": args.replays, "optuna_replays": args.optuna_replays,
        }  # fmt: skip
        results.append(row)
        print(json.dumps(row), flush=True)
    print("\n| set | questions × configurations | within δ of best | racing: wrong drops | racing: wrong leader | "
          "racing: cells | fixed sample: wrong drops | fixed: cells | WilcoxonPruner: wrong drops | "
          "WilcoxonPruner: cells |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['set']} | {r['questions']} × {r['configurations']} | {r['within_delta_of_best']} | "
              f"{r['race_wrong_drop_rate']:.3f} | {r['race_wrong_leader_rate']:.3f} | {r['race_cells']:.1%} | "
              f"{r['fixed_wrong_drop_rate']:.3f} | "
              f"{r['fixed_cells']:.1%} | {r['wilcoxon_wrong_drop_rate']:.3f} | {r['wilcoxon_cells']:.1%} |")  # fmt: skip
    (args.out / "racing.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
