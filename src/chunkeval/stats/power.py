"""How much a gold set can tell: the smallest paired difference a two-sided paired t-test detects with a
given power (the minimum detectable effect, MDE), and how many queries a difference needs. Definitions:
docs/statistics.md ("How much a gold set can tell").

The formula is the t-based one: with n paired queries whose differences have sample standard deviation
s_d, ν = n − 1 degrees of freedom,

    MDE = (t_{1−α/2, ν} + t_{power, ν}) · s_d / √n,

t_{p, ν} the p-quantile of Student's t with ν degrees of freedom. It is the normal-approximation formula
(z_{1−α/2} + z_{power}) · s_d / √n with t quantiles in place of normal ones: for 28 queries the normal one
promises power 0.8 where the t-test has 0.77; this one is within 0.005 of 0.8 from n = 8 on (the exact
power, from the noncentral t distribution, is the test's oracle). The t quantiles come from the
regularised incomplete beta function of `chunkeval.stats.tests` (no scipy import).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from chunkeval.errors import InputError
from chunkeval.stats.tests import incomplete_beta

ALPHA = 0.05  # two-sided
POWER = 0.8
DELTAS = (0.02, 0.05, 0.10)  # the differences whose needed number of queries is reported
# a metric at or above CEILING for more than half of its values (every configuration's questions) is at its
# ceiling: its per-query differences are mostly 0, so its MDE is small and its power figures mislead
CEILING = 0.95


def ceiling_share(values) -> float:
    """The share of `values` (NaN dropped) at or above CEILING; NaN for none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float((v >= CEILING).mean()) if len(v) else float("nan")


def at_ceiling(share: float | None) -> bool:
    return share is not None and share > 0.5


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t with `df` degrees of freedom at t."""
    log = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` ≥ 1 degrees of freedom (0 < p < 1). For p > ½: Newton's
    method on the upper tail ½ I_{df/(df+t²)}(df/2, ½) − (1 − p), from the normal quantile (never above the
    t one); the tail is convex and decreasing for t > 0, so the steps rise to the root without passing it."""
    if not 0 < p < 1 or df < 1:
        raise InputError(f"a t quantile needs 0 < p < 1 and at least 1 degree of freedom, got p={p}, df={df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1 - p, df)
    t, last = NormalDist().inv_cdf(p), math.inf
    for _ in range(200):
        step = (0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t)) - (1 - p)) / t_pdf(t, df)
        t += step
        if abs(step) <= 1e-13 * t or (abs(step) >= last and abs(step) <= 1e-9 * t):  # converged, or at the rounding
            break
        last = abs(step)
    return t


def _check(alpha: float, power: float) -> None:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise InputError(f"alpha and power must be strictly between 0 and 1, got {alpha} and {power}")


def multiplier(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """t_{1−α/2, n−1} + t_{power, n−1}: the MDE of n queries in units of s_d / √n."""
    _check(alpha, power)
    return t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest mean paired difference that n queries whose differences have standard deviation `sd`
    detect with probability `power` (two-sided paired t-test at `alpha`); NaN for fewer than 2 queries."""
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    return multiplier(n, alpha, power) * sd / math.sqrt(n)


def n_needed(sd: float, delta: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The fewest queries (at least 2) whose MDE, at the same spread `sd`, is at most `delta`; None when
    `sd` is not a number. The normal formula's n is a lower bound (t quantiles exceed normal ones); the
    search steps up from it."""
    if not delta > 0:
        raise InputError(f"a difference to detect must be above 0, got {delta}")
    _check(alpha, power)
    if not math.isfinite(sd):
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    n = max(2, math.ceil((z * sd / delta) ** 2))
    while mde(sd, n, alpha, power) > delta:
        n += 1
    return n


def smallest_fall(n: int, sd: float, checks: int = 1, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest mean fall δ of a metric whose per-question values lie in [0, 1] that n paired questions detect
    with probability `power` however the fall is spread over them, on top of differences of standard deviation `sd`
    (the night's own), by a two-sided paired t-test at alpha / `checks` (Bonferroni over a family of `checks`; a
    step-down max-T over the same family needs no more). The most spread-out fall of mean δ loses whole questions
    (a share δ of them falls from 1 to 0: variance δ(1 − δ), the most a variable in [−1, 0] with mean −δ has), so δ
    solves δ √n = (t_{1−α/(2·checks), n−1} + t_{power, n−1}) · √(δ(1 − δ) + sd²); at most 1 (a fall of the whole
    metric). NaN for fewer than 2 questions or a spread that is not a number."""
    _check(alpha, power)
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    c = t_quantile(1 - alpha / (2 * max(1, checks)), n - 1) + t_quantile(power, n - 1)
    k = c * c / n
    # δ²(1 + k) − kδ − k·sd² = 0, its positive root
    return min(1.0, (k + math.sqrt(k * k + 4 * (1 + k) * k * sd * sd)) / (2 * (1 + k)))


DETECT_FALL = 0.05  # the fall a verdict says how many questions would see, where its gold set cannot (`detect_fall`)


def questions_for_fall(
    delta: float, sd: float, checks: int = 1, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """The fewest questions n (at least 2) whose `smallest_fall(n, sd, checks)` is at most `delta`: how large a gold
    set must be for the gate to see a fall of mean δ (however it is spread) with probability `power`, beside the
    night's own differences of standard deviation `sd`, over a family of `checks`. smallest_fall falls as n grows,
    so n is found by doubling, then halving the interval; None for a `sd` that is not a number. The normal
    approximation, n ≈ (z_{1−α/(2·checks)} + z_power)² (δ(1 − δ) + sd²) / δ², is where the doubling starts."""
    if not 0 < delta < 1:
        raise InputError(f"a fall to detect lies strictly between 0 and 1, got {delta}")
    if not math.isfinite(sd):
        return None
    z = NormalDist().inv_cdf(1 - alpha / (2 * max(1, checks))) + NormalDist().inv_cdf(power)
    low, high = 1, max(2, math.ceil(z * z * (delta * (1 - delta) + sd * sd) / delta**2))
    while smallest_fall(high, sd, checks, alpha, power) > delta:
        low, high = high, high * 2
    while high - low > 1:  # smallest_fall(low) > delta >= smallest_fall(high)
        mid = (low + high) // 2
        if smallest_fall(mid, sd, checks, alpha, power) > delta:
            low = mid
        else:
            high = mid
    return high


def detectable(
    differences, alpha: float = ALPHA, power: float = POWER, deltas: tuple[float, ...] = DELTAS
) -> tuple[float, dict[str, int | None]]:
    """(MDE, {"0.02": queries needed, …}) of paired differences (NaN ones dropped): their number, their
    sample standard deviation (n − 1), then `mde` and `n_needed` at each of `deltas`."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    sd = float(d.std(ddof=1)) if len(d) >= 2 else float("nan")
    return mde(sd, len(d), alpha, power), {f"{x:.2f}": n_needed(sd, x, alpha, power) for x in deltas}
