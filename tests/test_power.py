"""How much a gold set can tell (issue 20): the smallest detectable paired difference (MDE) and the queries a
difference needs, `chunkeval.stats.power`. The worked example of docs/statistics.md, and scipy as the oracle:
Student's t quantiles (`scipy.stats.t.ppf`) and the exact power of the paired t-test at the MDE, from the
noncentral t distribution (`scipy.stats.nct`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from chunkeval.errors import InputError
from chunkeval.stats import power as P


def test_the_worked_example_of_docs_statistics_md():
    """28 questions whose differences have sd 0.2: (2.0518 + 0.8551) · 0.2 / √28 = 0.1099 (normal: 0.1059);
    0.02, 0.05 and 0.10 need 787, 128 and 34 questions (normal: 785, 126, 32)."""
    assert P.multiplier(28) == pytest.approx(2.0518 + 0.8551, abs=1e-4)
    assert P.mde(0.2, 28) == pytest.approx(0.1099, abs=1e-4)
    assert [P.n_needed(0.2, d) for d in (0.02, 0.05, 0.10)] == [787, 128, 34]
    assert P.mde(0.2, 127) > 0.05 >= P.mde(0.2, 128)  # 128 is the fewest
    differences = np.array([0.2, -0.2] * 14)  # sd over 28 values: 0.2 · √(28/27)
    smallest, needed = P.detectable(np.append(differences, np.nan))  # a NaN difference is dropped
    assert smallest == pytest.approx(P.mde(0.2 * math.sqrt(28 / 27), 28)) and list(needed) == ["0.02", "0.05", "0.10"]


@pytest.mark.parametrize("df", [1, 2, 4, 9, 27, 99, 999, 99_999])
def test_t_quantiles_agree_with_scipy(df):
    for p in (0.5, 0.6, 0.8, 0.9, 0.975, 0.995, 0.9995, 0.025):
        assert P.t_quantile(p, df) == pytest.approx(sp.t.ppf(p, df), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n", [8, 10, 28, 100, 1000])
def test_a_paired_t_test_at_the_mde_has_power_0_8(n):
    """The oracle: the exact power of the two-sided paired t-test (both rejection regions) at the MDE, from the
    noncentral t distribution with noncentrality MDE / (sd / √n). Within 0.005 of 0.8 from 8 questions on; the
    normal formula falls short (0.77 at 28 questions)."""
    sd, df = 0.3, n - 1
    critical = sp.t.ppf(0.975, df)

    def power(difference: float) -> float:
        nc = difference / (sd / math.sqrt(n))
        return 1 - sp.nct.cdf(critical, df, nc) + sp.nct.cdf(-critical, df, nc)

    assert power(P.mde(sd, n)) == pytest.approx(0.8, abs=0.005)
    normal = (sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * sd / math.sqrt(n)
    assert P.mde(sd, n) > normal and power(normal) < power(P.mde(sd, n))
    if n >= 28:  # a smaller n to the needed one at the same spread detects less: the search returns the fewest
        needed = P.n_needed(sd, P.mde(sd, n))
        assert needed in (n, n + 1) and P.mde(sd, needed - 1) > P.mde(sd, n) - 1e-12


def test_edges():
    assert math.isnan(P.mde(0.2, 1)) and math.isnan(P.mde(float("nan"), 10))
    assert P.mde(0.0, 10) == 0.0 and P.n_needed(0.0, 0.02) == 2  # no spread: any difference shows
    assert P.n_needed(float("nan"), 0.02) is None
    assert P.mde(0.2, 28, alpha=0.01) > P.mde(0.2, 28) > P.mde(0.2, 28, power=0.5)
    with pytest.raises(InputError, match="above 0"):
        P.n_needed(0.2, 0)
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        P.mde(0.2, 28, power=1.0)


def test_questions_for_a_fall_see_it_with_the_promised_power_by_simulation():
    """`questions_for_fall(δ, sd, checks)` (issue 52): the gold set it asks for sees a fall of mean δ with power 0.8.
    Simulated the way smallest_fall bounds it, the fall spread the widest way (each question falls from 1 to 0 with
    probability δ) on top of the night's own noise, tested by the paired t-test at α / checks: 4,000 nights each."""
    from chunkeval.stats.power import questions_for_fall, smallest_fall, t_quantile

    rng = np.random.default_rng(7)

    def power_of(n: int, delta: float, sd: float, checks: int) -> float:
        falls = -(rng.random((4000, n)) < delta).astype(float) + rng.normal(0.0, sd, (4000, n))
        spread = falls.std(axis=1, ddof=1)
        t = np.divide(falls.mean(axis=1), spread / np.sqrt(n), out=np.zeros(len(spread)), where=spread > 0)
        return float(np.mean(np.abs(t) > t_quantile(1 - 0.05 / (2 * checks), n - 1)))

    for delta, sd, checks in ((0.05, 0.0, 1), (0.10, 0.0, 48), (0.05, 0.05, 10)):
        n = questions_for_fall(delta, sd, checks)
        assert smallest_fall(n, sd, checks) <= delta < smallest_fall(n - 1, sd, checks)
        seen = power_of(n, delta, sd, checks)
        # at least the promised 0.8 (the normal bound is conservative for falls this skewed: 0.95 at δ 0.05, sd 0),
        # and half as many questions fall short of it: the size asked for is not a wild overestimate
        assert seen >= 0.78 and power_of(n // 2, delta, sd, checks) < 0.8, (delta, sd, checks, n, seen)
    assert questions_for_fall(0.05, float("nan")) is None
    assert questions_for_fall(0.071, 0.0, 320) == 286  # the demo's 284 questions see 0.0715 over its 320 checks
