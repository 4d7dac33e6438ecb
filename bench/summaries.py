"""The bootstrap intervals of a run's summaries: what a warm demo run spends in its scoring stage.

    python bench/summaries.py [--home DIR] [--repeats 3]

Reads the last run's per-question rows from the warehouse of `--home` (a `CHUNKEVAL_HOME` where the demo has
run; default `$CHUNKEVAL_HOME`), and times, best of `--repeats`:
- `summarize` by configuration and by configuration and corpus, as the sweep forms them (`summarize_sweep`);
- the ends of the intervals alone on matrices of that size (groups x 10,000 resample means): numpy's partition at
  the four order statistics, against a sort of every row (what `stats.resampling.percentiles` does), with the
  two checked equal to the last bit;
- how many of the interval groups are distinct rows (each distinct row of one size is resampled once).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=os.environ.get("CHUNKEVAL_HOME"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    database = Path(args.home or "", "warehouse", "chunkeval.duckdb")
    if not args.home or not database.is_file():
        print(f"skipped: no warehouse at {database} (run `chunkeval run` with CHUNKEVAL_HOME set first)")
        return 0

    import duckdb
    import pyarrow.compute as pc

    from chunkeval.engine.scoring.configuration import CONFIG_KEYS
    from chunkeval.stats.resampling import _bootstrap_means, percentiles
    from chunkeval.stats.summaries import _key_strings, summarize
    from chunkeval.vocabulary import METRICS

    with duckdb.connect(str(database), read_only=True) as con:
        run = con.sql("SELECT max(run_id) FROM query_results").fetchall()[0][0]
        table = con.sql(f"SELECT * FROM query_results WHERE run_id = '{run}'").to_arrow_table()
    metrics = [m for m in METRICS if m in table.column_names]
    print(f"run {run}: {table.num_rows:,} per-question rows, {len(metrics)} metrics; {os.cpu_count()} cores")
    kth = [249, 250, 9749, 9750]  # the order statistics of a 95 % interval of 10,000 means
    for by in (CONFIG_KEYS, [*CONFIG_KEYS, "corpus_id"]):
        keys = pc.dictionary_encode(_key_strings(table, by)).combine_chunks()
        codes = keys.indices.to_numpy(zero_copy_only=False)
        groups, distinct, varied = 0, set(), 0
        for m in metrics:
            values = table[m].to_numpy(zero_copy_only=False).astype(np.float64)
            for g in range(len(keys.dictionary)):
                x = values[codes == g]
                x = x[~np.isnan(x)]
                groups += 1
                if len(x) and x.min() < x.max():
                    varied += 1
                    distinct.add(x.tobytes())
        seconds = best(lambda by=by: summarize(table, by), args.repeats)
        name = "configuration" if by == CONFIG_KEYS else "configuration and corpus"
        print(
            f"summarize by {name}: {seconds:.3f} s; {groups:,} interval groups, {varied:,} with varied values, "
            f"{len(distinct):,} distinct"
        )
        rows = np.random.default_rng(0).random((len(distinct), 30))
        means = _bootstrap_means(rows, 10_000, 0)
        by_partition = best(lambda means=means: np.partition(means, kth, axis=1), args.repeats)
        by_sort = best(lambda means=means: percentiles(means, [0.025, 0.975]), args.repeats)
        ordered = np.partition(means, kth, axis=1)
        assert np.array_equal(ordered[:, kth], np.sort(means, axis=1)[:, kth])
        print(
            f"  the ends of {len(distinct):,} x 10,000 means: partition {by_partition:.3f} s, sort (and interpolation) "
            f"{by_sort:.3f} s, the same order statistics"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
