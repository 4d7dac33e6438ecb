"""Anytime-valid confidence sequences for paired differences of configurations, questions drawn without replacement
(docs/statistics.md, "Racing").

The method is the predictable-plug-in empirical-Bernstein confidence sequence for sampling without replacement of
Waudby-Smith and Ramdas ("Confidence sequences for sampling without replacement", NeurIPS 2020; the betting form in
"Estimating means of bounded random variables by betting", JRSS B 2023, Theorem 2 and its section on sampling
without replacement). For one pair of configurations (a, b), question i's paired difference d_i = x_a,i − x_b,i of
metrics in [0, 1] is mapped to y_i = (d_i + 1) / 2 in [0, 1]; questions come in a uniformly random order from the
N questions of the set, and the target is the mean over all N (what a full evaluation gives). With
S_{t} = y_1 + … + y_t, Z_t = S_{t−1} / (N − t + 1), W_t = (t − 1) / (N − t + 1), the regularised running mean
μ̂_t = (1/2 + S_t) / (t + 1) and variance σ̂²_t = (1/4 + Σ_{i≤t} (y_i − μ̂_i)²) / (t + 1), the bet
λ_t = min(√(2ℓ / (σ̂²_{t−1} · t · log(1 + t))), 3/4) and v_t = (y_t − μ̂_{t−1})², ψ(λ) = −log(1 − λ) − λ:

    centre_t = Σ λ_i (y_i + Z_i) / Σ λ_i (1 + W_i)
    margin_t = (ℓ + Σ v_i ψ(λ_i)) / Σ λ_i (1 + W_i)
    y-mean ∈ [centre_t − margin_t, centre_t + margin_t] for every t at once, with probability ≥ 1 − 2e^{−ℓ}

ℓ = log(2M/α) for M pairs (both sides of every pair under one union bound): every interval of every pair holds at
every look together with probability at least 1 − α. Once all N questions are in, the mean is known exactly and the
interval is that point. The state of every pair is updated one question at a time (arrays over pairs), so a look
costs nothing beyond its questions.
"""

from __future__ import annotations

import math

import numpy as np

from chunkeval.errors import InputError

TRUNCATION = 0.75  # the largest bet (Waudby-Smith and Ramdas take 1/2; any λ < 1 keeps the guarantee, and 3/4 left
# 12 % fewer cells on the shared set in bench/racing.py, whose paired differences are mostly 0)


def check_level(alpha: float, delta: float | None = None) -> None:
    if not 0 < alpha < 1:
        raise InputError(f"alpha takes a number between 0 and 1, got {alpha!r}")
    if delta is not None and not 0 <= delta < 1:
        raise InputError(f"delta takes a number from 0 to below 1, got {delta!r}")


class PairedSequences:
    """Confidence sequences for the mean paired difference of every pair of `k` arms (metrics in [0, 1]) over a
    population of `n` questions, taken without replacement; `pairs` is M of the union bound (default: every pair
    of the `k` arms). `add(row)` takes one question's values of the arms still compared (`active`, a boolean mask;
    the pairs of a dropped arm keep their last state). `bounds()`: (low, high) matrices of x_a − x_b, NaN on the
    diagonal and where a pair has no question yet."""

    def __init__(self, k: int, n: int, alpha: float = 0.05, pairs: int | None = None):
        check_level(alpha)
        if k < 1 or n < 1:
            raise InputError("a race needs at least one arm and one question")
        self.k, self.n, self.alpha = k, n, alpha
        self.pairs = pairs if pairs is not None else max(1, k * (k - 1) // 2)
        self.ell = math.log(2 * self.pairs / alpha)
        shape = (k, k)
        self.t = np.zeros(shape)  # questions seen by each pair
        self.s = np.zeros(shape)  # Σ y
        self.a = np.zeros(shape)  # Σ λ y
        self.b = np.zeros(shape)  # Σ λ Z
        self.c = np.zeros(shape)  # Σ λ (1 + W)
        self.v = np.zeros(shape)  # Σ v ψ(λ)
        self.mu = np.full(shape, 0.5)  # μ̂_{t}
        self.sq = np.zeros(shape)  # Σ (y_i − μ̂_i)²
        self.sums = np.zeros(k)  # Σ x per arm (the exact means at the end)
        self.seen = np.zeros(k)

    def add(self, row, active=None) -> None:
        x = np.asarray(row, dtype=np.float64)
        on = np.ones(self.k, bool) if active is None else np.asarray(active, bool)
        both = np.outer(on, on)
        np.fill_diagonal(both, False)
        y = (x[:, None] - x[None, :] + 1.0) / 2.0
        t = self.t + 1
        sigma2 = (0.25 + self.sq) / t  # σ̂²_{t−1} = (1/4 + Σ_{i<t}) / t
        lam = np.minimum(np.sqrt(2 * self.ell / (sigma2 * t * np.log1p(t))), TRUNCATION)
        remaining = self.n - t + 1
        z, w = self.s / remaining, (t - 1) / remaining
        psi = -np.log1p(-lam) - lam
        vt = (y - self.mu) ** 2
        s = self.s + y
        mu = (0.5 + s) / (t + 1)
        updates = {
            "a": self.a + lam * y,
            "b": self.b + lam * z,
            "c": self.c + lam * (1 + w),
            "v": self.v + vt * psi,
            "sq": self.sq + (y - mu) ** 2,
            "s": s,
            "mu": mu,
            "t": t,
        }
        for name, value in updates.items():
            setattr(self, name, np.where(both, value, getattr(self, name)))
        self.sums = np.where(on, self.sums + x, self.sums)
        self.seen = np.where(on, self.seen + 1, self.seen)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            centre = (self.a + self.b) / self.c
            margin = (self.ell + self.v) / self.c
            low = np.clip(centre - margin, 0.0, 1.0) * 2 - 1
            high = np.clip(centre + margin, 0.0, 1.0) * 2 - 1
        done = self.t >= self.n  # every question in: the mean is known
        exact = (self.s / np.maximum(self.t, 1)) * 2 - 1
        low, high = np.where(done, exact, low), np.where(done, exact, high)
        none = self.t == 0
        low[none], high[none] = np.nan, np.nan
        np.fill_diagonal(low, np.nan)
        np.fill_diagonal(high, np.nan)
        return low, high

    def means(self) -> np.ndarray:
        """Each arm's mean over the questions it has seen."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums / self.seen


def sequence(differences, n: int, alpha: float = 0.05, pairs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The confidence sequence (low, high after each question) of one pair's paired differences in [−1, 1], in
    the order given, over a population of `n` questions: `PairedSequences` for two arms, kept whole."""
    d = np.asarray(differences, dtype=np.float64)
    seqs = PairedSequences(2, n, alpha, pairs)
    lows, highs = [], []
    for value in d:
        seqs.add([value, 0.0])
        low, high = seqs.bounds()
        lows.append(low[0, 1])
        highs.append(high[0, 1])
    return np.array(lows), np.array(highs)
