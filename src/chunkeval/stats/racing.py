"""Anytime-valid tests by betting for paired differences of configurations, questions drawn without replacement
(docs/statistics.md, "Racing"): `LowerTests` (one-sided tests of μ_a − μ_b ≥ θ, for many pairs at once, against a
fixed or a predictable comparator), and how a race combines its tests of every configuration into one family-wise guarantee,
`closed_rejects` (the closure of the mean of e-values).

The questions come in a uniformly random order from the N of the set, and the target is the mean over all N: what
a full evaluation gives. Once all N are in, every mean is known exactly.
"""

from __future__ import annotations

import numpy as np

from chunkeval.errors import InputError


def check_level(alpha: float, delta: float | None = None) -> None:
    if not 0 < alpha < 1:
        raise InputError(f"alpha takes a number between 0 and 1, got {alpha!r}")
    if delta is not None and not 0 <= delta < 1:
        raise InputError(f"delta takes a number from 0 to below 1, got {delta!r}")


CAP = 0.9  # the largest bet, as a share of what keeps the capital nonnegative (1 / the largest possible loss)
EXACT = 1e-9  # below θ by more than rounding: a mean known once every question is in
VARIANCE_PRIOR = 0.0025  # the variance a bet assumes before any question (a paired difference of ±0.05)


class LowerTests:
    """Anytime-valid one-sided tests, by betting, of the nulls μ_a − μ_b ≥ θ (a's mean over all `n` questions is at
    least θ above b's), for many (a, b) at once, questions drawn without replacement (docs/statistics.md,
    "Racing"). Each test is a capital process (Waudby-Smith and Ramdas, "Estimating means of bounded random
    variables by betting", JRSS B 2023, its section on sampling without replacement; Shafer and Vovk's testing by
    betting): before question t the mean of the differences d = x_a − x_b still to come is, under the null,
    at least m_t = (θ·n − D_{t−1}) / (n − t + 1), D_{t−1} the sum of the differences seen; the capital is
    multiplied by 1 + λ_t (m_t − d_t), a bet against the null that wins when d falls below it. Under the null its
    expectation is at most 1 whatever λ_t ≥ 0 is chosen before the question, so the capital is a nonnegative
    supermartingale and by Ville's inequality P(it ever reaches 1/a) ≤ a: `pvalue` (1 / the largest capital so
    far) is valid at every look at once, and the capital itself is an e-value at any look (`evalue`). λ_t is the
    aGRAPA bet (ĝ / (v̂ + ĝ²), ĝ and v̂ the mean and variance of the gain m − d as the past predicts it), at most
    `CAP` / (1 − m_t) so that no question can take the capital to 0.

    `count` tests, `theta` one bound each. The caller hands in each question's differences and the sums of the
    differences seen before it, so b may change from question to question (the race's leader, chosen before each
    question: still predictable, so still a test), each pair's two arms seen on every question so far.
    """

    def __init__(self, n: int, count: int, theta):
        self.n = n
        self.theta = np.broadcast_to(np.asarray(theta, dtype=np.float64), (count,)).copy()
        self.log_capital = np.zeros(count)
        self.best = np.zeros(count)  # the largest log capital so far
        self.gains = np.zeros(count)
        self.squares = np.zeros(count)
        self.bets = np.zeros(count)  # bets placed (questions each test has seen)
        self.sure = np.zeros(count, bool)  # rejected for certain: the null cannot hold whatever is left

    def add(self, t: int, d, past, on, squares=None) -> None:
        """Question t (from 1): the pairs' differences `d`, the sums of their differences over questions 1…t−1
        `past`, and which tests take part (`on`). `squares`, where given, the sums of the squared differences
        over those questions: the bet then reads the pair's own past (whatever comparator each test had then)."""
        remaining = self.n - t + 1
        m = (self.theta * self.n - past) / remaining
        g = m - d
        if squares is None:
            mean = self.gains / (self.bets + 1)
            var = (self.squares - self.gains * mean + VARIANCE_PRIOR) / (self.bets + 1)
        else:  # the gain the pair's past differences would give now, and their variance
            seen = t - 1
            mean = m - past / max(seen, 1)
            var = (squares - past**2 / max(seen, 1) + VARIANCE_PRIOR) / (seen + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = np.clip(mean / (var + mean**2), 0.0, None)
            lam = np.where(m < 1, np.minimum(lam, CAP / (1 - m)), 0.0)
        lam = np.where(self.bets > 0, lam, 0.0)
        self.log_capital = np.where(on, self.log_capital + np.log1p(lam * g), self.log_capital)
        self.best = np.maximum(self.best, self.log_capital)
        self.gains = np.where(on, self.gains + g, self.gains)
        self.squares = np.where(on, self.squares + g * g, self.squares)
        self.bets = np.where(on, self.bets + 1, self.bets)
        # after question t: the most the full mean can be is (D_t + (n − t)) / n (each difference at most 1)
        self.sure |= on & ((past + d + (self.n - t)) / self.n < self.theta - EXACT)

    def evalue(self) -> np.ndarray:
        """The capital of each test now (infinite where rejected for certain): an e-value at any look."""
        return np.where(self.sure, np.inf, np.exp(self.log_capital))

    def pvalue(self) -> np.ndarray:
        """The anytime-valid p-value of each test: 1 / its largest capital so far (0 where rejected for certain)."""
        return np.where(self.sure, 0.0, np.minimum(1.0, np.exp(-self.best)))


def closed_rejects(evalues, alpha: float) -> np.ndarray:
    """Which hypotheses the closure of the mean of e-values rejects at `alpha` (Vovk and Wang, "E-values:
    calibration, combination, and applications", Annals of Statistics 2021): H_c is rejected when every
    intersection of hypotheses holding it has a mean e-value of at least 1/α. The mean of test supermartingales of
    the same questions is one under their intersection, so by Ville's inequality the family-wise error is at most α
    over every look at once. The intersection that binds for c is c with the others of smallest e-value, as many
    as lower the mean."""
    e = np.asarray(evalues, dtype=np.float64)
    out = np.zeros(len(e), bool)
    order = np.sort(e)
    for c in range(len(e)):
        others = np.delete(order, np.searchsorted(order, e[c]))  # the others, smallest first
        means = (e[c] + np.concatenate([[0.0], np.cumsum(others)])) / np.arange(1, len(e) + 1)
        out[c] = means.min() >= 1 / alpha
    return out
