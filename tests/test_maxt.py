"""The gate's family-wise correction (issue 45): Westfall and Young's step-down max-T over paired sign flips,
`chunkeval.stats.maxt`, held to a plain, slow implementation written here from the textbook (Westfall and Young,
1993, algorithm 2.8: a loop over the flips, a loop over the checks, scipy's one-sample t-test), exactly where every
flip is enumerated and within Monte-Carlo error where they are drawn; to the randomisation test of one check
(`paired_permutation`), which a family of one is; and the worked example of docs/statistics.md."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sp

from chunkeval.errors import InputError
from chunkeval.stats import holm, maxt_adjusted, paired_permutation
from chunkeval.stats.power import smallest_fall, t_quantile


def scipy_t(values: np.ndarray) -> float:
    """|t| of one check's kept differences by scipy; no spread: ∞ for a non-zero mean, else 0."""
    if np.ptp(values) == 0:
        return math.inf if values[0] != 0 else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return abs(float(sp.ttest_1samp(values, 0.0).statistic))


def plain_t(values: np.ndarray) -> float:
    """The same from the mean and the sample standard deviation (faster than scipy's, for many flips)."""
    if np.ptp(values) == 0:
        return math.inf if values[0] != 0 else 0.0
    return abs(values.mean()) / (values.std(ddof=1) / math.sqrt(len(values)))


def oracle(diffs: np.ndarray, flips, oracle_t=scipy_t) -> tuple[list[int], int, list[int]]:
    """Algorithm 2.8, one flip and one check at a time: order the checks by observed |t|, most significant first;
    for each flip, the largest |t| over each check and the checks after it; count where it reaches the observed
    |t|; p = count / flips (with the identity among the flips) or (1 + count) / (1 + flips), made monotone."""
    n_checks = diffs.shape[1]
    columns = [diffs[:, j] for j in range(n_checks)]
    observed = [oracle_t(c[~np.isnan(c)]) for c in columns]
    order = sorted(range(n_checks), key=lambda j: -observed[j])
    counts = [0] * n_checks
    total = 0
    for signs in flips:
        total += 1
        t = [oracle_t((signs * c)[~np.isnan(c)]) for c in columns]
        running = -math.inf
        for rank in reversed(range(n_checks)):
            j = order[rank]
            running = max(running, t[j])
            if running >= observed[j] * (1 - 1e-9):
                counts[rank] += 1
    return counts, total, order


def exact_oracle(diffs: np.ndarray) -> np.ndarray:
    counts, total, order = oracle(diffs, (np.array(s) for s in itertools.product((1.0, -1.0), repeat=len(diffs))))
    p = np.maximum.accumulate(np.array(counts) / total)
    out = np.empty(len(p))
    out[order] = p
    return out


def monte_carlo_oracle(diffs: np.ndarray, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts, total, order = oracle(diffs, (rng.choice((-1.0, 1.0), size=len(diffs)) for _ in range(n)), plain_t)
    p = np.maximum.accumulate((1 + np.array(counts)) / (1 + total))
    out = np.empty(len(p))
    out[order] = p
    return out


def family(n: int, seed: int) -> np.ndarray:
    """A family of checks as two runs give them: two configurations × three correlated metrics, the same questions
    falling in several of them, a NULL here and there, a slice (questions 0 to n/2), a check of no change and a
    copy of another check."""
    rng = np.random.default_rng(seed)
    lost = rng.random(n) < 0.3
    base = np.where(lost, -rng.uniform(0.3, 1.0, n), rng.normal(0, 0.08, n))
    columns = [base, base * rng.uniform(0.5, 1, n), np.round(base, 1), rng.normal(0, 0.1, n)]
    columns += [np.where(np.arange(n) < n // 2, base, np.nan), np.zeros(n), columns[0].copy()]
    d = np.stack(columns, axis=1)
    d[rng.random(d.shape) < 0.1] = np.nan
    d[:2, 5] = 0.0  # the check of no change keeps at least 2 questions
    return d


def test_the_worked_example_of_docs_statistics_md():
    """Seven questions, three checks: span recall and MRR of one configuration lost on the same six questions (t = 6
    and 4.5), span recall of another configuration unchanged on average (t = 0; question 7 NULL there). Of the
    2⁷ = 128 flips, 4 reach t = 6 or 4.5 (the six questions all of one sign, question 7 either way): both checks of the
    first configuration get 4/128 = 0.03125; the third 1. Holm over the same flips' p-values counts the two first
    checks twice: 3 · 0.03125 = 0.094."""
    d = np.array(
        [
            [-1, -1, 0.5],
            [-1, -0.5, -0.5],
            [-1, -1, 0],
            [-1, -0.5, 0],
            [-1, -1, 0],
            [-1, -0.5, 0],
            [0, 0, np.nan],
        ]
    )
    found = maxt_adjusted(d)
    assert found.exact and found.n_resamples == 128 and list(found.n) == [7, 7, 6]
    assert found.t == pytest.approx([6.0, 4.5, 0.0], abs=1e-12)
    assert list(found.adjusted) == [0.03125, 0.03125, 1.0]
    alone = [paired_permutation(c[~np.isnan(c)], np.zeros(int((~np.isnan(c)).sum()))) for c in d.T]
    assert alone == [0.03125, 0.03125, 1.0]
    assert list(holm(alone)) == [0.09375, 0.09375, 1.0]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_flip_enumerated_gives_the_plain_loops_p_values(seed):
    d = family(10, seed)
    found = maxt_adjusted(d)
    assert found.exact and found.n_resamples == 2**10
    assert list(found.adjusted) == pytest.approx(list(exact_oracle(d)), abs=1e-12)


def test_random_flips_agree_with_the_plain_loop_within_monte_carlo_error():
    d = family(40, 5)
    found = maxt_adjusted(d, n_resamples=20_000, seed=3)
    assert not found.exact and found.n_resamples == 20_000
    expected = monte_carlo_oracle(d, 4_000, seed=11)
    assert np.abs(found.adjusted - expected).max() < 0.02, (found.adjusted, expected)
    assert found.adjusted.min() < 0.01 and found.adjusted.max() == 1.0  # the family holds a fall and no change
    again = maxt_adjusted(d, n_resamples=20_000, seed=3)
    assert list(again.adjusted) == list(found.adjusted)  # seeded


@pytest.mark.parametrize("n", [12, 40])
def test_a_family_of_one_is_the_randomisation_test(n):
    """One check: its |t| grows with |mean| under every flip (the sum of squares does not change), so the max-T p is
    `paired_permutation`'s, flip for flip (the same seed draws the same flips)."""
    rng = np.random.default_rng(n)
    a, b = rng.random(n), rng.random(n) * 0.8
    assert maxt_adjusted(a - b).adjusted[0] == paired_permutation(a, b)
    with_null = np.append(a - b, np.nan)  # a question the check lacks changes nothing
    assert maxt_adjusted(with_null).adjusted[0] == pytest.approx(paired_permutation(a, b), abs=0 if n <= 12 else 0.01)


def test_checks_that_move_together_are_counted_once():
    """Nine copies of one check (nine metrics of one configuration falling on the same questions) get the one
    check's p-value; Holm would multiply it by nine."""
    rng = np.random.default_rng(7)
    d = np.where(rng.random(60) < 0.2, -0.6, rng.normal(0, 0.05, 60))
    one = maxt_adjusted(d).adjusted[0]
    nine = maxt_adjusted(np.repeat(d[:, None], 9, axis=1)).adjusted
    assert list(nine) == [one] * 9 and one < 0.01


def test_bad_input_is_one_line():
    with pytest.raises(InputError, match="at least 2 paired questions"):
        maxt_adjusted(np.array([[1.0, np.nan], [2.0, np.nan], [3.0, 1.0]]))
    with pytest.raises(InputError, match="questions × checks"):
        maxt_adjusted(np.zeros((2, 2, 2)))
    with pytest.raises(InputError, match="n_resamples"):
        maxt_adjusted(np.ones((30, 1)), n_resamples=0)
    assert maxt_adjusted(np.empty((0, 0))).adjusted.shape == (0,)


def test_the_smallest_fall_the_gate_sees():
    """`smallest_fall`: the root of δ√n = c·√(δ(1 − δ) + sd²), c = t_{1−α/(2m), n−1} + t_{0.8, n−1} (scipy's
    quantiles); with no spread of its own, c² / (n + c²): 0.39 at 28 questions and 24 checks, 0.032 at 472."""
    for n, sd, m in [(28, 0.0, 24), (28, 0.1, 24), (472, 0.0, 24), (276, 0.05, 36), (10, 0.3, 1)]:
        c = sp.t.ppf(1 - 0.05 / (2 * m), n - 1) + sp.t.ppf(0.8, n - 1)
        delta = smallest_fall(n, sd, m)
        assert delta * math.sqrt(n) == pytest.approx(c * math.sqrt(delta * (1 - delta) + sd * sd), rel=1e-9)
    assert smallest_fall(28, 0.0, 24) == pytest.approx(0.3933, abs=1e-4)
    assert smallest_fall(472, 0.0, 24) == pytest.approx(0.0318, abs=1e-4)
    assert smallest_fall(28, 0.0, 1) < smallest_fall(28, 0.0, 24) < smallest_fall(28, 0.2, 24)
    assert smallest_fall(3, 5.0) == 1.0 and math.isnan(smallest_fall(1, 0.0))
    assert t_quantile(1 - 0.05 / 48, 27) == pytest.approx(sp.t.ppf(1 - 0.05 / 48, 27), rel=1e-9)


def test_the_interval_of_a_fall_stays_within_what_the_metric_can_do() -> None:
    """A change of a metric in [0, 1] from a mean `before` lies in [−before, 1 − before]: the paired t interval is
    cut to it (docs/statistics.md, "One verdict"). The issue's case: MRR falls on most questions from 1 to near 0,
    and the uncut interval read −1.091…−0.755."""
    from chunkeval.analysis.comparisons import _fall

    n = 10
    whole = _fall(np.zeros(n), np.ones(n), [f"q{i}" for i in range(n)], 3, None)  # a fall of 1.0: every question
    assert whole["change"] == -1.0 and whole["ci_low"] == -1.0 and whole["ci_high"] == -1.0
    before = np.array([1.0] * 9 + [0.5])
    after = np.array([0.0] * 8 + [1.0, 0.5])
    f = _fall(after, before, [f"q{i}" for i in range(n)], 3, None)
    half = t_quantile(0.975, n - 1) * np.std(after - before, ddof=1) / math.sqrt(n)
    assert f["change"] - half < -before.mean()  # the uncut interval would pass the bound
    assert f["ci_low"] == pytest.approx(-before.mean()) and f["ci_high"] == pytest.approx(f["change"] + half)
    assert -1.0 <= f["ci_low"] <= f["change"] <= f["ci_high"] <= 1.0 - f["before"]
