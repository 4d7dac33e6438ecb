"""Does racing's guarantee hold, and what does it save? (issue 43, docs/performance.md "Racing")

On recorded full runs (every configuration scored on every question: the demo, the shared general evaluation, and
a BEIR-format set made from the shared one), racing is replayed `--replays` times with the questions shuffled
(seeded): each replay races the configurations (`chunkeval.stats.racing.race`, α = 0.05, δ = 0.01, batches of
`--batch`) and counts a *wrong drop* when it dropped a configuration whose mean over every question is within δ of
the best's. Beside it, the same replays with Optuna's `WilcoxonPruner` used the same way (each configuration a
trial, each question a step with its own id, checked after each batch; trials in a shuffled order) and with a
fixed-sample comparison (all configurations on the first n questions of the replay, n the race's mean share; a
configuration dropped where a one-sided paired t-test against the sample's best gives p < α/(K − 1) and its mean
is more than δ below). No chat model is involved: the per-question metrics are the runs'.

    python bench/racing.py --out /tmp/racing --record /tmp/racing-runs [--replays 1000] [--optuna-replays 200]
    python bench/racing.py --out /tmp/racing --replay-from /tmp/racing-runs/tables --workers 16

The recorded runs are made once (with the real model, `chunkeval.evaluate`) and kept in `--record` (default
`--out`), with each set's (questions × configurations) table of its metric in `tables/` (`<set>.npz`, under a
megabyte each); `--replay-from` replays those tables alone, on any machine, with no model. Every replay draws from
its own seeded stream, so `--workers N` (processes over the replays) changes the time, not the figures.
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


def oracle_floor(x: np.ndarray, alpha: float, delta: float, many: bool = False) -> float:
    """The share of cells an oracle would need: one that knows every configuration's gap to the best (Δ_c) and the
    standard deviation of its paired differences with the best (σ_c), sizes each configuration's sample alone, and
    pays no price for many configurations or many looks. By the change-of-measure bound of Kaufmann, Cappé and
    Garivier ("On the complexity of best-arm identification in multi-armed bandit models", JMLR 2016, lemma 1),
    under a normal approximation of the differences, any procedure that errs with probability at most α needs
    about n = 2σ² log(1 / 2.4α) / g² questions of a configuration to tell its mean from one g away (drawn without
    replacement from N: n / (1 + n/N)). Dropping c is wrong only within δ of the best (g = Δ_c − δ); keeping it
    to the end and certifying the leader against it needs g = Δ_c + δ. The oracle picks the stop T that costs
    least: every configuration either dropped after its own n (where that comes before T) or certified by T, and
    the best evaluated to T. A yardstick for the race's share, not a bound it could reach: the race must also
    hold its guarantee over every configuration and every look at once. With `many`, the oracle too holds its
    claims over all K − 1 configurations at once, at the half of α the race spends on its drops (each claim at
    α / 2(K − 1), as Bonferroni would): what knowing the gaps saves when the price of many configurations is paid."""
    n, k = x.shape
    mu = x.mean(0)
    best = int(np.argmax(mu))
    info = math.log(1 / (2.4 * (alpha / 2 / (k - 1) if many else alpha)))

    def needed(sd: float, gap: float) -> float:
        if gap <= 0:
            return math.inf
        if sd == 0:
            return 1.0
        m = 2 * sd * sd * info / gap**2
        return min(float(n), max(1.0, m / (1 + m / n)))

    drop, certify = [], []
    for c in range(k):
        if c != best:
            sd, gap = float((x[:, best] - x[:, c]).std()), float(mu[best] - mu[c])
            drop.append(needed(sd, gap - delta))
            certify.append(needed(sd, gap + delta))
    return cheapest(np.array(drop), np.array(certify), n, k)


def cheapest(drop: np.ndarray, certify: np.ndarray, n: int, k: int) -> float:
    """The least share of cells over the stops T: each configuration other than the best dropped after its `drop`
    questions where that comes before T, else certified by T (its `certify` at most T), and the best evaluated to T;
    at T = n every mean is known."""
    stops = sorted({*drop[np.isfinite(drop)].tolist(), *certify[np.isfinite(certify)].tolist(), float(n)})
    cost = min(np.minimum(drop, s).sum() + s for s in stops if s >= n or np.all((drop <= s) | (certify <= s)))
    return float(cost) / (n * k)


def oracle_anytime(x: np.ndarray, order: np.ndarray, alpha: float, delta: float, batch: int, many: bool) -> float:
    """The share of cells an oracle with the race's own kind of guarantee would need on one replay: it knows every
    configuration's gap to the best and the variance of its paired differences with it, and tests each by betting
    exactly as the race does (`LowerTests`' capital, sampling without replacement, a look after each batch), but
    with the growth-optimal constant bet λ* = g / (v + g²) from the first question (no learning, no weighing).
    Each drop test is at α/2 and each certifying test at α/2 alone, or with `many` at those over K − 1 (Bonferroni):
    no price for many configurations, or the plain union's price, for a guarantee valid at every look."""
    from chunkeval.stats.racing import CAP

    n, k = x.shape
    mu = x.mean(0)
    best = int(np.argmax(mu))
    d = np.delete(x - x[:, [best]], best, axis=1)[order]
    level = alpha / 2 / ((k - 1) if many else 1)

    def first_reject(theta: float) -> np.ndarray:
        g = theta - d.mean(0)
        lam = np.where(g > 0, g / (d.var(0) + g * g), 0.0)
        log, past, out = np.zeros(k - 1), np.zeros(k - 1), np.full(k - 1, np.inf)
        for t in range(1, n + 1):
            m = (theta * n - past) / (n - t + 1)
            bet = np.where(m < 1, np.minimum(lam, CAP / np.maximum(1 - m, 1e-12)), 0.0)
            log += np.log1p(bet * (m - d[t - 1]))
            past += d[t - 1]
            out[(log >= math.log(1 / level)) & np.isinf(out)] = t
        return np.minimum(np.ceil(out / batch) * batch, n)  # seen at the look after it

    return cheapest(first_reject(-delta), first_reject(delta), n, k)


def uncorrected_rules():
    """A race that pays no price for many configurations, a yardstick and not a test: each drop test rejects alone
    at α_drops (its capital at 1/α_drops, no closure) and the leader is certified when each pair test rejects at
    α_certify (no weight). It keeps everything else of the race (the weighing, the restart, the bets, the looks),
    so its share of cells, beside the race's, says how much of the race's cost is the guarantee over all
    configurations at once and how much is testing one configuration by betting, look after look."""
    from chunkeval.stats.racing import Racer

    class Uncorrected(Racer):
        def rejected(self):
            return self.drops.evalue() >= 1 / self.alpha["drops"]

        def certify_level(self, lead: int) -> float:
            return self.alpha["certify"]

    return Uncorrected


def save_tables(sets: dict, folder: Path) -> None:
    """Each set's (questions × configurations) table of its metric, with the configurations' labels: a few hundred
    kilobytes per set, enough to replay without the engine or a model (`--replay-from`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, (x, labels)) in enumerate(sets.items()):
        np.savez_compressed(folder / f"{i}.npz", name=np.array(name), x=x, labels=np.array(labels))


def load_tables(folder: Path) -> dict[str, tuple[np.ndarray, list[str]]]:
    out = {}
    for path in sorted(folder.glob("*.npz"), key=lambda p: int(p.stem)):
        with np.load(path) as f:
            out[str(f["name"])] = (f["x"], [str(v) for v in f["labels"]])
    if not out:
        raise SystemExit(f"{folder}: no recorded tables (*.npz); make them with --record")
    return out


SETS: dict = {}  # the tables every worker replays (set before the pool forks)


def batch_of(n: int, batch: int) -> int:
    """Questions per look: `--batch`, and at most a tenth of the set (2 for the demo's 28)."""
    return max(1, min(batch, n // 10))


def rng_for(seed: int, s: int, kind: int, i: int):
    """Replay i of set s draws from its own stream: the figures do not depend on --workers."""
    return np.random.default_rng([seed, s, kind, i])


def replay_race(job):
    from chunkeval.stats.racing import race, wrong_drops

    name, s, i, a = job
    x = SETS[name][0]
    n = x.shape[0]
    truth = x.mean(0)
    order = rng_for(a.seed, s, 0, i).permutation(n)
    t0 = time.perf_counter()
    res = race(x, order, a.alpha, a.delta, batch_of(n, a.batch))
    seconds = time.perf_counter() - t0
    loose = race(x, order, a.alpha, a.delta, batch_of(n, a.batch), rules=uncorrected_rules())
    anytime = [oracle_anytime(x, order, a.alpha, a.delta, batch_of(n, a.batch), many) for many in (False, True)]
    return {"uncorrected_share": loose.share, "uncorrected_wrong": wrong_drops(loose, truth, a.delta) > 0,
            "anytime_share": anytime[0], "anytime_many_share": anytime[1], "seconds": seconds,
            "wrong": wrong_drops(res, truth, a.delta) > 0, "share": res.share, "one_left": res.winner is not None,
            "wrong_leader": bool(truth[res.leader] < truth.max() - a.delta), "stopped": res.stopped}  # fmt: skip


def replay_fixed(job):
    name, s, i, a, n_fixed = job
    x = SETS[name][0]
    truth = x.mean(0)
    dropped = fixed_sample(x, rng_for(a.seed, s, 1, i).permutation(x.shape[0]), n_fixed, a.alpha, a.delta)
    return any(truth[c] >= truth.max() - a.delta for c in dropped)


def replay_wilcoxon(job):
    import warnings

    name, s, i, a = job
    x = SETS[name][0]
    truth = x.mean(0)
    rng = rng_for(a.seed, s, 2, i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # WilcoxonPruner is experimental: said once in the docs, not per trial
        pruned, cells = wilcoxon(x, rng.permutation(x.shape[0]), rng, batch_of(x.shape[0], a.batch), a.alpha)
    return any(truth[c] >= truth.max() - a.delta for c in pruned), cells / x.size


def mapped(fn, jobs, workers: int):
    if workers <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing as mp

    with mp.get_context("fork").Pool(workers) as pool:
        return pool.map(fn, jobs, chunksize=max(1, len(jobs) // (workers * 8)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="where racing.json goes (and the full runs, by default)")
    ap.add_argument("--record", type=Path, help="make the full runs here (once) and keep their tables here")
    ap.add_argument("--replay-from", type=Path, help="replay the tables --record kept here (no model, no engine run)")
    ap.add_argument("--sets", help="replay only the sets whose names start with these (comma-separated)")
    ap.add_argument("--replays", type=int, default=1000)
    ap.add_argument("--optuna-replays", type=int, default=200)
    ap.add_argument("--workers", type=int, default=1, help="processes replaying at once")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replay_from:
        sets = load_tables(args.replay_from)
    else:
        folder = args.record or args.out
        folder.mkdir(parents=True, exist_ok=True)
        sets = recorded(folder)
        save_tables(sets, folder / "tables")
    SETS.update(sets)
    wanted = [w.strip() for w in args.sets.split(",")] if args.sets else None
    results = []
    for s, (name, (x, _labels)) in enumerate(sets.items()):
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        n, k = x.shape
        truth = x.mean(0)
        races = mapped(replay_race, [(name, s, i, args) for i in range(args.replays)], args.workers)
        shares = [r["share"] for r in races]
        stops: dict = {}
        for r in races:
            stops[r["stopped"]] = stops.get(r["stopped"], 0) + 1
        n_fixed = max(2, round(float(np.mean(shares)) * n))
        fixed = mapped(replay_fixed, [(name, s, i, args, n_fixed) for i in range(args.replays)], args.workers)
        t0 = time.perf_counter()
        wil = mapped(replay_wilcoxon, [(name, s, i, args) for i in range(args.optuna_replays)], args.workers)
        wil_s = time.perf_counter() - t0
        row = {
            "set": name, "questions": n, "configurations": k,
            "within_delta_of_best": int((truth >= truth.max() - args.delta).sum()), "batch": batch_of(n, args.batch),
            "race_wrong_drop_rate": sum(r["wrong"] for r in races) / args.replays, "race_cells": float(np.mean(shares)),
            "race_one_left": sum(r["one_left"] for r in races) / args.replays,
            "race_wrong_leader_rate": sum(r["wrong_leader"] for r in races) / args.replays,
            "race_stopped": stops, "race_cells_p90": float(np.quantile(shares, 0.9)),
            "race_seconds_per_replay": float(np.mean([r["seconds"] for r in races])), "oracle_cells": oracle_floor(x, args.alpha, args.delta),
            "oracle_many_cells": oracle_floor(x, args.alpha, args.delta, many=True),
            "uncorrected_cells": float(np.mean([r["uncorrected_share"] for r in races])),
            "uncorrected_wrong_drop_rate": sum(r["uncorrected_wrong"] for r in races) / args.replays,
            "anytime_oracle_cells": float(np.mean([r["anytime_share"] for r in races])),
            "anytime_oracle_many_cells": float(np.mean([r["anytime_many_share"] for r in races])),
            "fixed_questions": n_fixed, "fixed_wrong_drop_rate": sum(fixed) / args.replays, "fixed_cells": n_fixed / n,
            "wilcoxon_wrong_drop_rate": sum(w for w, _ in wil) / max(1, len(wil)),
            "wilcoxon_cells": float(np.mean([c for _, c in wil])) if wil else None,
            "wilcoxon_seconds_per_replay": wil_s / max(1, len(wil)),
            "replays": args.replays, "optuna_replays": args.optuna_replays, "workers": args.workers,
        }  # fmt: skip
        results.append(row)
        print(json.dumps(row), flush=True)
    print("\n| set | questions × configurations | within δ of best | racing: wrong drops | racing: wrong leader | "
          "racing: cells | uncorrected race: cells (wrong drops) | anytime oracle: cells | anytime oracle over K: cells | "
          "oracle: cells | oracle over K: cells | fixed sample: wrong drops | fixed: cells | WilcoxonPruner: wrong drops | "
          "WilcoxonPruner: cells |")  # fmt: skip
    print("|" + " --- |" * 15)
    for r in results:
        wil = (
            "n/a | n/a"
            if r["wilcoxon_cells"] is None
            else f"{r['wilcoxon_wrong_drop_rate']:.3f} | {r['wilcoxon_cells']:.1%}"
        )
        print(f"| {r['set']} | {r['questions']} × {r['configurations']} | {r['within_delta_of_best']} | "
              f"{r['race_wrong_drop_rate']:.3f} | {r['race_wrong_leader_rate']:.3f} | {r['race_cells']:.1%} | "
              f"{r['uncorrected_cells']:.1%} ({r['uncorrected_wrong_drop_rate']:.3f}) | "
              f"{r['anytime_oracle_cells']:.1%} | {r['anytime_oracle_many_cells']:.1%} | "
              f"{r['oracle_cells']:.1%} | {r['oracle_many_cells']:.1%} | "
              f"{r['fixed_wrong_drop_rate']:.3f} | {r['fixed_cells']:.1%} | {wil} |")  # fmt: skip
    (args.out / "racing.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
