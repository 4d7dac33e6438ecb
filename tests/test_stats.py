"""Statistics of docs/statistics.md: the worked examples, scipy (and statsmodels) as oracles, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from chunkeval import stats as S
from chunkeval.errors import InputError


def mean_diff(x, y, axis=-1):
    return np.mean(x - y, axis=axis)


def scipy_permutation_p(a, b, n_resamples, seed):
    return scipy.stats.permutation_test(
        (a, b),
        mean_diff,
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=n_resamples,
        vectorized=True,
        rng=seed,
    ).pvalue


# --------------------------------------------------------------------------- bootstrap intervals


def test_bootstrap_ci_worked_example():
    # resample means of [0, 0, 1] are 0, 1/3, 2/3, 1 with probability 8/27, 12/27, 6/27, 1/27
    assert S.bootstrap_ci([0.0, 0.0, 1.0]) == (0.0, 1.0)
    assert S.bootstrap_ci([0.0, 0.0, 1.0], confidence=0.80) == pytest.approx((0.0, 2 / 3), abs=1e-12)
    # NaN is ignored
    assert S.bootstrap_ci([0.0, np.nan, 0.0, 1.0], confidence=0.80) == S.bootstrap_ci([0.0, 0.0, 1.0], confidence=0.80)


def test_bootstrap_ci_small_groups():
    assert S.bootstrap_ci([0.4]) == (0.4, 0.4)
    assert S.bootstrap_ci([0.1] * 5) == (0.1, 0.1)
    assert S.bootstrap_ci([np.nan, 0.4, np.nan]) == (0.4, 0.4)
    for empty in ([], [np.nan, np.nan]):
        low, high = S.bootstrap_ci(empty)
        assert math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize("case", range(6))
def test_bootstrap_ci_against_scipy_percentile(case):
    rng = np.random.default_rng(100 + case)
    n = (20, 40, 76, 76, 150, 300)[case]
    values = rng.random(n) if case % 2 == 0 else (rng.random(n) < 0.4).astype(float)  # continuous or 0/1
    low, high = S.bootstrap_ci(values, seed=case)
    ref = scipy.stats.bootstrap(
        (values,), np.mean, method="percentile", n_resamples=10_000, rng=1000 + case
    ).confidence_interval
    # 0/1 values give means on the lattice k / n: Monte-Carlo error can move an end by one step
    tol = 0.01 if case % 2 == 0 else max(0.01, 1.01 / n)
    assert abs(low - ref.low) < tol and abs(high - ref.high) < tol
    assert low < values.mean() < high


def test_bootstrap_ci_is_reproducible():
    values = np.random.default_rng(3).random(50)
    assert S.bootstrap_ci(values, seed=7) == S.bootstrap_ci(values, seed=7)
    assert S.bootstrap_ci(values, seed=7) != S.bootstrap_ci(values, seed=8)


def groups_case():
    rng = np.random.default_rng(5)
    sizes = [76] * 6 + [75, 12, 2, 1, 0]
    values = np.concatenate([rng.random(s) for s in sizes])
    groups = np.repeat(np.arange(len(sizes)), sizes)
    values[rng.choice(len(values) - 1, 10, replace=False)] = np.nan  # some groups lose values (not group 9)
    perm = rng.permutation(len(values))  # the rows of a group need not be contiguous
    return values[perm], groups[perm]


def check_groups_equal_single(values, groups, **kw):
    low, high = S.bootstrap_ci_groups(values, groups, **kw, n_groups=12)
    assert len(low) == len(high) == 12
    for g in range(12):
        one = S.bootstrap_ci(values[groups == g], **kw)
        np.testing.assert_allclose([low[g], high[g]], one, rtol=0, atol=1e-12)
    return low, high


def test_batched_equals_one_group_form():
    values, groups = groups_case()
    low, high = check_groups_equal_single(values, groups, confidence=0.9, seed=11)
    assert np.isnan(low[10:]).all() and np.isnan(high[10:]).all()  # codes 10 and 11 have no values
    assert (low[9], high[9]) == (values[groups == 9][0],) * 2  # one value
    assert (low[:9] < high[:9]).all()


def test_batched_equals_one_group_form_in_small_chunks(monkeypatch):
    # several resample chunks per group and several blocks of groups
    monkeypatch.setattr(S, "CHUNK_BYTES", 8 * 2_000)
    values, groups = groups_case()
    low, high = check_groups_equal_single(values, groups, n_resamples=3_000)
    monkeypatch.undo()
    full_low, full_high = S.bootstrap_ci_groups(values, groups, n_resamples=3_000)
    ok = ~np.isnan(full_low)
    # another chunking draws other resamples: equal within Monte-Carlo error
    assert np.abs(low[: len(full_low)][ok] - full_low[ok]).max() < 0.03
    assert np.abs(high[: len(full_high)][ok] - full_high[ok]).max() < 0.03


def test_groups_of_the_same_values_share_one_interval_and_blocks_share_their_resamples(monkeypatch):
    """Groups of equal size and equal values (two metrics that agree on every query) are resampled once and get
    the same interval; with several blocks of one size (a working matrix of 5 groups' means), the resample counts
    are made once for all blocks: every group still equals its one-group interval (within 1e-12, as every batched
    interval: a matrix product of another shape sums in another order), and groups of the same values exactly."""
    monkeypatch.setattr(S, "CHUNK_BYTES", 8 * 5 * 1_000)
    rng = np.random.default_rng(4)
    distinct = rng.random((7, 6)).round(2)
    rows = distinct[[0, 1, 2, 0, 3, 4, 1, 5, 6, 0, 2, 6, 3]]  # 13 groups of 6 values, 7 distinct
    values, groups = rows.ravel(), np.repeat(np.arange(len(rows)), 6)
    low, high = S.bootstrap_ci_groups(values, groups, n_resamples=1_000, seed=3)
    for g in range(len(rows)):
        one = S.bootstrap_ci(rows[g], n_resamples=1_000, seed=3)
        np.testing.assert_allclose([low[g], high[g]], one, rtol=0, atol=1e-12, err_msg=str(g))
    assert (low[0], high[0]) == (low[3], high[3]) == (low[9], high[9])


def test_batched_worked_example():
    values = np.array([0.0, 0.0, 1.0, 0.5, np.nan, np.nan])
    groups = np.array([0, 0, 0, 1, 1, 3])
    low, high = S.bootstrap_ci_groups(values, groups)
    assert (low[0], high[0]) == (0.0, 1.0)
    assert (low[1], high[1]) == (0.5, 0.5)
    assert np.isnan([low[2], high[2], low[3], high[3]]).all()


# --------------------------------------------------------------------------- paired t-test


def test_paired_ttest_worked_example():
    # differences 0.1, 0.2, 0.3: t = 0.2 / (0.1 / sqrt 3) = sqrt 12 with 2 degrees of freedom
    p = S.paired_ttest([0.3, 0.5, 0.7], [0.2, 0.3, 0.4])
    assert p == pytest.approx(1 - math.sqrt(6 / 7), abs=1e-12)
    assert round(p, 4) == 0.0742


@pytest.mark.parametrize("n", [2, 3, 5, 20, 76, 500])
def test_paired_ttest_against_scipy(n):
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.05, 0.3):
        a, b = rng.random(n), rng.random(n)
        a = np.clip(a + shift, 0, 1)
        expected = scipy.stats.ttest_rel(a, b).pvalue
        assert S.paired_ttest(a, b) == pytest.approx(expected, abs=1e-12, rel=1e-9)


def test_incomplete_beta_against_scipy():
    """The t-test's tail without scipy: I_x(a, b) against scipy.special.betainc, from tiny to huge shapes."""
    from scipy.special import betainc

    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.random(40), [1e-12, 1e-6, 0.5, 1 - 1e-9]])
    for a in (0.5, 1.0, 2.5, 10.0, 37.5, 249.5, 2500.0):
        for b in (0.5, 1.0, 3.3, 40.0):
            for x in xs:
                assert S.incomplete_beta(a, b, x) == pytest.approx(betainc(a, b, x), rel=1e-10, abs=1e-300)
    assert S.incomplete_beta(2.0, 3.0, 0.0) == 0.0 and S.incomplete_beta(2.0, 3.0, 1.0) == 1.0
    # worked example: I_x(1, 1) = x, and I_x(a, 1) = x^a
    assert S.incomplete_beta(1.0, 1.0, 0.3) == pytest.approx(0.3, rel=1e-14)
    assert S.incomplete_beta(3.0, 1.0, 0.5) == pytest.approx(0.125, rel=1e-14)


def test_paired_ttest_zero_variance():
    assert S.paired_ttest([0.2, 0.5, 0.9], [0.2, 0.5, 0.9]) == 1.0
    assert S.paired_ttest([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]) == 0.0
    assert S.paired_ttest([1.0, 1.0], [0.0, 0.0]) == 0.0


def test_paired_ttest_drops_pairs_with_nan():
    a = np.array([0.3, np.nan, 0.5, 0.7, 0.1])
    b = np.array([0.2, 0.9, 0.3, np.nan, 0.4])
    keep = [0, 2, 4]
    assert S.paired_ttest(a, b) == pytest.approx(scipy.stats.ttest_rel(a[keep], b[keep]).pvalue, abs=1e-12)


# --------------------------------------------------------------------------- paired permutation


def test_paired_permutation_worked_example():
    # differences 0.1, 0.2, 0.3: of the 8 sign flips only (+,+,+) and (−,−,−) reach |mean| = 0.2
    assert S.paired_permutation([0.3, 0.5, 0.7], [0.2, 0.3, 0.4]) == 0.25
    assert S.paired_permutation([0.3, 0.5], [0.3, 0.5]) == 1.0


def test_paired_permutation_add_one_floor():
    # 20 equal positive differences: no random flip is as extreme (chance 2^-19 each), p = 1 / 10,001
    a, b = np.full(20, 0.6), np.full(20, 0.5)
    assert S.paired_permutation(a, b) == pytest.approx(1 / 10_001)
    assert S.paired_permutation(a, b, n_resamples=999) == pytest.approx(1 / 1_000)


@pytest.mark.parametrize("n", [2, 4, 7, 10, 12])
def test_paired_permutation_exact_against_scipy(n):
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.1, 0.3):
        a, b = np.clip(rng.random(n) + shift, 0, 1), rng.random(n)
        assert S.paired_permutation(a, b) == pytest.approx(scipy_permutation_p(a, b, np.inf, 0), abs=1e-12)
    # ties: 0/1 values give many equal flipped means
    a, b = (rng.random(n) < 0.6).astype(float), (rng.random(n) < 0.4).astype(float)
    assert S.paired_permutation(a, b) == pytest.approx(scipy_permutation_p(a, b, np.inf, 0), abs=1e-12)


@pytest.mark.parametrize("case", range(6))
def test_paired_permutation_random_against_scipy(case):
    rng = np.random.default_rng(200 + case)
    n = (17, 20, 40, 76, 76, 200)[case]
    a = rng.random(n) if case % 2 else (rng.random(n) < 0.5).astype(float)
    b = np.clip(a + rng.normal((0.0, 0.03, 0.05)[case % 3], 0.2, n), 0, 1)
    if case % 2 == 0:
        b = np.round(b)
    p = S.paired_permutation(a, b, seed=case)
    assert abs(p - scipy_permutation_p(a, b, 10_000, 300 + case)) < 0.02


def test_paired_permutation_is_reproducible():
    rng = np.random.default_rng(9)
    a, b = rng.random(40), rng.random(40)
    assert S.paired_permutation(a, b, seed=3) == S.paired_permutation(a, b, seed=3)


# --------------------------------------------------------------------------- paired difference interval


def test_paired_diff_ci_worked_example():
    a, b = [0.5, 0.5, 1.0], [0.5, 0.5, 0.0]  # differences 0, 0, 1
    assert S.paired_diff_ci(a, b) == (0.0, 1.0)
    assert S.paired_diff_ci(a, b, confidence=0.8) == pytest.approx((0.0, 2 / 3), abs=1e-12)


def test_paired_diff_ci_is_the_bootstrap_of_the_differences():
    rng = np.random.default_rng(4)
    a, b = rng.random(76), rng.random(76)
    assert S.paired_diff_ci(a, b, seed=2) == S.bootstrap_ci(a - b, seed=2)
    ref = scipy.stats.bootstrap(
        (a, b), mean_diff, paired=True, method="percentile", n_resamples=10_000, rng=5
    ).confidence_interval
    low, high = S.paired_diff_ci(a, b)
    assert abs(low - ref.low) < 0.01 and abs(high - ref.high) < 0.01


# --------------------------------------------------------------------------- Holm


def test_holm_worked_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(S.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02], atol=1e-15)
    np.testing.assert_allclose(S.holm([0.01, np.nan, 0.04, 0.03, 0.005]), [0.03, np.nan, 0.06, 0.06, 0.02], atol=1e-15)
    np.testing.assert_allclose(S.holm([0.3, 0.5]), [0.6, 0.6])
    np.testing.assert_allclose(S.holm([0.6, 0.7]), [1.0, 1.0])
    np.testing.assert_allclose(S.holm([0.2, 0.2, 0.01]), [0.4, 0.4, 0.03])
    assert S.holm([]).shape == (0,)
    assert np.isnan(S.holm([np.nan])).all()


def test_holm_properties():
    rng = np.random.default_rng(0)
    p = rng.random(40) ** 3
    adj = S.holm(p)
    order = np.argsort(p)
    assert (np.diff(adj[order]) >= 0).all() and (adj >= p).all() and (adj <= 1).all()


def test_holm_against_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 30):
        p = rng.random(n) ** 2
        np.testing.assert_allclose(S.holm(p), multitest.multipletests(p, method="holm")[1], atol=1e-15)


def test_holm_rejects_out_of_range():
    with pytest.raises(InputError, match="p-values must lie in"):
        S.holm([0.5, 1.5])


# --------------------------------------------------------------------------- compare_paired


def test_compare_paired_worked_example():
    r = S.compare_paired([0.3, 0.5, 0.7], [0.2, 0.3, 0.4])
    assert set(r) == {
        "n_queries",
        "mean_a",
        "mean_b",
        "mean_diff",
        "ci_low",
        "ci_high",
        "p_ttest",
        "p_permutation",
        "p_adjusted",
    }
    assert r["n_queries"] == 3
    assert (
        r["mean_a"] == pytest.approx(0.5) and r["mean_b"] == pytest.approx(0.3) and r["mean_diff"] == pytest.approx(0.2)
    )
    # resample means of 0.1, 0.2, 0.3 reach 0.1 and 0.3 with probability 1/27 each, more than 2.5 %
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((0.1, 0.3), abs=1e-12)
    assert r["p_ttest"] == pytest.approx(1 - math.sqrt(6 / 7), abs=1e-12)
    assert r["p_permutation"] == 0.25
    assert math.isnan(r["p_adjusted"])


def test_compare_paired_drops_nan_pairs():
    r = S.compare_paired([0.3, np.nan, 0.5, 0.7], [0.2, 0.1, 0.3, 0.4])
    assert r["n_queries"] == 3 and r["mean_b"] == pytest.approx(0.3)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: S.paired_ttest([0.1, 0.2, 0.3], [0.1, 0.2]), "same length, got 3 and 2"),
        (lambda: S.paired_permutation([0.1], [0.2]), "at least 2 pairs"),
        (lambda: S.paired_diff_ci([0.1, np.nan], [0.2, 0.3]), "at least 2 pairs of non-NaN values, got 1"),
        (lambda: S.compare_paired([], []), "at least 2 pairs"),
        (lambda: S.bootstrap_ci([0.1, 0.2], confidence=0.0), "confidence must be strictly between 0 and 1"),
        (lambda: S.bootstrap_ci([0.1, 0.2], confidence=1.0), "confidence must be strictly between 0 and 1"),
        (
            lambda: S.paired_diff_ci([0.1, 0.2], [0.1, 0.3], confidence=95),
            "confidence must be strictly between 0 and 1",
        ),
        (lambda: S.bootstrap_ci([0.1, 0.2], n_resamples=0), "n_resamples must be a positive integer"),
        (lambda: S.bootstrap_ci_groups([0.1, 0.2], [0]), "groups must be a one-dimensional array as long as values"),
        (lambda: S.bootstrap_ci_groups([0.1, 0.2], [0.0, 1.0]), "integer group codes"),
        (lambda: S.bootstrap_ci_groups([0.1, 0.2], [0, -1]), "non-negative"),
        (lambda: S.bootstrap_ci([[0.1, 0.2]]), "one-dimensional"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(InputError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("n", [5, 16, 17, 40])
def test_permutation_p_values_of_many_columns_equal_those_of_one(n):
    rng = np.random.default_rng(n)
    diffs = np.round(rng.normal(0.05, 0.3, size=(n, 6)), 2)  # rounded: ties among flipped means
    diffs[:, 0] = 0.0  # no difference at all
    many = S.paired_permutation_columns(diffs, n_resamples=2000, seed=3)
    one = [S.paired_permutation(diffs[:, j], np.zeros(n), n_resamples=2000, seed=3) for j in range(6)]
    assert many.tolist() == one


def test_columns_become_numpy_without_importing_pandas():
    """`stats.columns.numbers`: numbers in their own dtype (chunked, sliced), NULL as NaN, anything else as
    objects; and no pandas import (pyarrow's own conversion imports it: half a second of every report)."""
    import subprocess
    import sys

    script = """
import sys
import duckdb
import numpy as np
from chunkeval.stats.columns import numbers
t = duckdb.sql("SELECT i::INT AS i, i / 4 AS f, CASE WHEN i % 2 = 0 THEN i END AS n, 'q' || i AS s FROM range(7) r(i)")
t = t.to_arrow_table()
import pyarrow as pa
sliced = pa.chunked_array([t["i"].combine_chunks().slice(2, 3), t["i"].combine_chunks().slice(0, 1)])
assert numbers(t["i"]).dtype == np.int32 and numbers(t["i"]).tolist() == list(range(7))
assert numbers(sliced).tolist() == [2, 3, 4, 0] and numbers(t["f"]).tolist() == [i / 4 for i in range(7)]
assert np.isnan(numbers(t["n"])[1]) and numbers(t["n"])[2] == 2 and numbers(t["s"])[3] == "q3"
assert "pandas" not in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("corpora", [("honeybees",), ("honeybees", "lighthouses", "sourdough")])
def test_the_sweeps_per_corpus_summary_equals_summarising_by_corpus(corpora):
    """With one corpus, the per-corpus summary is the summary's rows with their corpus (computed once); with
    several it is summarised by corpus: either way it equals `summarize` grouped by configuration and corpus,
    intervals to the last bit."""
    from chunkeval.engine.embedding import Embedder
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.engine.scoring import metrics as M
    from chunkeval.paths import DEMO_DIR
    from chunkeval.vocabulary import CONFIG_KEYS

    exp = Experiment.from_yaml(DEMO_DIR / "experiment.yaml").with_overrides(
        corpus=corpora, chunker=("fixed_token",), chunk_sizes=(100, 200), overlaps=("0",), k=(1, 5), retriever=("bm25",)
    )
    result = run_sweep(exp, Embedder(cache_dir=None))
    keys = CONFIG_KEYS + ["corpus_id"]
    expected = M.summarize(result.per_query.drop_columns(["has_gold"]), keys).sort_by([(c, "ascending") for c in keys])
    assert result.by_corpus.equals(expected) and result.by_corpus.num_rows == 4 * len(corpora)


@pytest.mark.parametrize("seed", range(4))
def test_percentiles_equal_numpys_quantile_to_the_last_bit(seed):
    """`resampling.percentiles` (what the bootstrap intervals read their ends with) is `np.quantile(…, axis=1)`,
    bit for bit: rounded values (ties), rows of 2, 3 and 10,000 values, and the quantiles the intervals ask."""
    from chunkeval.stats.resampling import percentiles

    rng = np.random.default_rng(seed)
    for width in (2, 3, 17, 10_000):
        rows = rng.normal(size=(int(rng.integers(1, 30)), width))
        if seed % 2:
            rows = np.round(rows, 1)
        for quantiles in ([0.025, 0.975], [0.05, 0.95], [0.5], [0.1, 0.2, 0.9]):
            assert np.array_equal(percentiles(rows, quantiles), np.quantile(rows, quantiles, axis=1))
