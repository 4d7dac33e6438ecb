"""How often the regression alert fires when nothing changed, and that it fires when something did.

    python bench/false_alarms.py [--nights 1000] [--corpus chatlogs state_of_the_union wikitexts]

1. A real run on the shared data set: fixed_token and recursive_token at 200 tokens, dense and bm25,
   k = 5, all-MiniLM-L6-v2 (4 configurations × the 6 watched metrics = 24 checks a night).
2. Unchanged system, simulated: each night draws, for every query, a `before` and an `after` row
   independently from that configuration's per-query rows (one distribution: every alarm is false),
   and applies the alert rule (`chunkeval.analysis.regression.verdict`: a paired fall beyond 0.02 that is
   significant at alpha = 0.05 after the step-down max-T over the night's checks). The false-alarm rate over
   the nights is printed with its Clopper-Pearson 95 % interval, beside the rule before issue 45 (Holm over the
   same checks' t-tests) and chunkeval 0.1's (any mean fall beyond 0.02) on the same nights.
3. A real regression: the same run with a copy of the model that reads 16 word pieces
   (max_seq_length 16), checked against the first run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "chroma_general"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=1000)
    parser.add_argument("--corpus", nargs="*", default=["chatlogs", "state_of_the_union", "wikitexts"])
    args = parser.parse_args()
    if not (DATA / "questions_df.csv").is_file():
        print(f"the shared data set is absent: expected it at {DATA}", file=sys.stderr)
        return 2
    os.environ.setdefault("CHUNKEVAL_HOME", tempfile.mkdtemp(prefix="chunkeval-alarms-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import pyarrow as pa
    from scipy.stats import binomtest

    from chunkeval.analysis.comparisons import configurations
    from chunkeval.analysis.regression import DEFAULT_THRESHOLD, REGRESSION_METRICS, verdict
    from chunkeval.stats import holm

    def regressions(after, before, metrics, threshold, alpha):  # the one verdict's regressions of two nights
        return verdict("after", "before", after, before, metrics, threshold, alpha)["regressions"]

    def both(after, before, metrics, threshold, alpha):  # (the gate alarms, Holm over its t-tests would)
        checks = verdict("after", "before", after, before, metrics, threshold, alpha)["checks"]
        adjusted = holm([c["p_ttest"] for c in checks]) if checks else []
        holm_alarm = any(c["change"] < -threshold and p < alpha for c, p in zip(checks, adjusted))
        return any(c["regression"] for c in checks), holm_alarm

    from chunkeval.engine.embedding import resolve_model
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.paths import cache_dir

    def run(model: str):
        exp = Experiment(
            name="alarms",
            corpus_dir=str(DATA / "corpora"),
            questions=str(DATA / "questions_df.csv"),
            corpus=tuple(args.corpus),
            chunker=("fixed_token", "recursive_token"),
            chunk_sizes=(200,),
            overlaps=("0",),
            k=(5,),
            model=(model,),
            retriever=("dense", "bm25"),
        )
        return run_sweep(exp, Embedders(cache_dir())).per_query

    metrics = list(REGRESSION_METRICS)
    real = run("all-MiniLM-L6-v2")
    configs = configurations(real)
    rows_of = [
        np.flatnonzero(np.all([np.asarray(real[k].to_pylist(), dtype=object) == v for k, v in c.items()], axis=0))
        for c in configs
    ]
    n_q = len(rows_of[0])
    rng = np.random.default_rng(2026)
    new_alarms = holm_alarms = old_alarms = 0
    for _ in range(args.nights):
        before_idx = np.concatenate([rows[rng.integers(0, n_q, n_q)] for rows in rows_of])
        after_idx = np.concatenate([rows[rng.integers(0, n_q, n_q)] for rows in rows_of])
        qids = pa.array([str(i) for i in range(n_q)] * len(configs))

        def night(idx):
            table = real.take(pa.array(idx)).select([k for k in configs[0]] + metrics)
            return table.append_column("query_id", qids)  # noqa: B023 (called in this iteration)

        before, after = night(before_idx), night(after_idx)
        gate, by_holm = both(after, before, metrics, DEFAULT_THRESHOLD, 0.05)
        new_alarms, holm_alarms = new_alarms + gate, holm_alarms + by_holm
        means = lambda t: np.asarray(
            [
                [np.mean(t[m].to_numpy()[i * n_q : (i + 1) * n_q]) for m in metrics]  # noqa: E731
                for i in range(len(configs))
            ]
        )
        old_alarms += bool(np.any(means(after) < means(before) - DEFAULT_THRESHOLD))
    print(
        f"{', '.join(args.corpus)}: {n_q} queries, {len(configs)} configurations × {len(metrics)} metrics a night, "
        f"{args.nights} simulated nights of an unchanged system"
    )
    for name, count in (
        ("the gate (fall > 0.02 and step-down max-T p < 0.05)", new_alarms),
        ("the rule before issue 45 (fall > 0.02 and Holm-adjusted t-test p < 0.05)", holm_alarms),
        ("mean rule of chunkeval 0.1 (any mean fall > 0.02)", old_alarms),
    ):
        ci = binomtest(count, args.nights).proportion_ci(confidence_level=0.95, method="exact")
        print(
            f"  {name}: {count} false alarm night(s), rate {count / args.nights:.3f} [95 % CI {ci.low:.3f}, {ci.high:.3f}]"
        )

    short = Path(tempfile.mkdtemp(prefix="chunkeval-short-")) / "minilm-16"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), short)
    (short / "sentence_bert_config.json").write_text('{"max_seq_length": 16, "do_lower_case": false}')
    worse = run(str(short))
    import pyarrow.compute as pc

    renamed = pc.if_else(
        pc.equal(worse["model"], "none"), "none", "all-MiniLM-L6-v2"
    )  # the same model path, new content
    worse = worse.set_column(worse.column_names.index("model"), "model", renamed)
    falls = regressions(worse, real, metrics, DEFAULT_THRESHOLD, 0.05)
    print(
        f"a real regression (the model reads 16 word pieces): {len(falls)} of {len(configs) * len(metrics)} checks alert"
    )
    for f in falls[:5]:
        print(
            f"  {f['retriever']} {f['chunker']} {f['metric']}: {f['before']:.3f} → {f['after']:.3f}, p_adj = {f['p_adjusted']:.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
