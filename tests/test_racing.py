"""Racing (issue 43, docs/statistics.md "Racing"): the confidence sequences of `chunkeval.stats.racing` held to a
plain loop of Waudby-Smith and Ramdas's formulas and to the worked example of the docs, their coverage over every
look checked by shuffling a fixed population, and the race's decisions (`chunkeval.analysis.racing`). The
1,000-replay check of the guarantee on recorded runs is bench/racing.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chunkeval.analysis.racing import race, wrong_drops
from chunkeval.errors import InputError
from chunkeval.stats.racing import TRUNCATION, sequence

WORKED = np.array([0.2] * 60 + [0.0] * 40)  # docs/statistics.md's example: mean 0.12


def plain(d, n: int, alpha: float = 0.05, pairs: int = 1):
    """The formulas of the module docstring, one question at a time, in plain Python."""
    ell = math.log(2 * pairs / alpha)
    s = a = b = c = v = sq = 0.0
    mu = 0.5
    out = []
    for t, di in enumerate(d, start=1):
        y = (di + 1) / 2
        sigma2 = (0.25 + sq) / t
        lam = min(math.sqrt(2 * ell / (sigma2 * t * math.log(1 + t))), TRUNCATION)
        z, w = s / (n - t + 1), (t - 1) / (n - t + 1)
        a, b, c = a + lam * y, b + lam * z, c + lam * (1 + w)
        v += (y - mu) ** 2 * (-math.log(1 - lam) - lam)
        s += y
        mu = (0.5 + s) / (t + 1)
        sq += (y - mu) ** 2
        centre, margin = (a + b) / c, (ell + v) / c
        low, high = min(max(centre - margin, 0), 1) * 2 - 1, min(max(centre + margin, 0), 1) * 2 - 1
        if t == n:
            low = high = 2 * s / t - 1
        out.append((low, high))
    return np.array(out)


def test_the_sequence_is_the_formula_and_the_worked_example():
    low, high = sequence(WORKED, 100)
    expected = plain(WORKED, 100)
    assert np.allclose(low, expected[:, 0], atol=1e-12) and np.allclose(high, expected[:, 1], atol=1e-12)
    said = {25: (-0.1449, 0.5449), 50: (0.0567, 0.3433), 75: (0.0996, 0.2464), 99: (0.1129, 0.1619), 100: (0.12, 0.12)}
    for t, (lo, hi) in said.items():
        assert (round(low[t - 1], 4), round(high[t - 1], 4)) == (lo, hi)
    assert (low <= 0.12 + 1e-12).all() and (high >= 0.12 - 1e-12).all()


def test_every_look_covers_the_population_mean_at_the_stated_level():
    rng = np.random.default_rng(7)
    population = np.clip(rng.normal(0.05, 0.3, 120), -1, 1)
    truth, missed = population.mean(), 0
    for _ in range(300):
        low, high = sequence(population[rng.permutation(120)], 120, alpha=0.2)
        missed += bool(((low > truth + 1e-12) | (high < truth - 1e-12)).any())
    assert missed / 300 <= 0.2  # anytime: over every one of the 120 looks at once


def test_a_race_finds_the_best_drops_the_rest_and_reports_its_bound():
    rng = np.random.default_rng(1)
    n = 300
    means = np.array([0.8, 0.5, 0.45, 0.3, 0.79])
    x = np.clip(means + rng.normal(0, 0.1, (n, 5)), 0, 1)
    res = race(x, rng.permutation(n), batch=10)
    assert 0 in res.tied and 4 in res.tied and res.leader in (0, 4)  # 0.8 and 0.79 differ by 0.01: tied
    assert {d["config"] for d in res.dropped} == {1, 2, 3} and res.share < 0.7
    assert wrong_drops(res, x.mean(0)) == 0 and res.bound >= 0
    one = race(x[:, :4], rng.permutation(n), batch=10)
    assert one.winner == 0 and one.stopped == "one left" and one.bound == 0
    poor = race(x, rng.permutation(n), batch=10, budget=100)
    assert poor.stopped == "budget" and poor.cells <= 100 and poor.questions == 20
    vs = race(x[:, 1:4], rng.permutation(n), batch=10, reference=x[:, 0], stop_when_decided=True)
    assert vs.stopped == "decided" and vs.reference["verdict"] == "production holds"
    beat = race(x[:, [0, 4]], rng.permutation(n), batch=10, reference=x[:, 1], stop_when_decided=True)
    assert beat.reference["verdict"] == "an offline configuration beats production" and beat.reference["low"] > 0


def test_a_race_refuses_values_that_are_no_metric():
    with pytest.raises(InputError, match="metrics from 0 to 1"):
        race(np.array([[0.5, 1.5]]))
    with pytest.raises(InputError, match="alpha"):
        race(np.array([[0.5, 0.5]]), alpha=1.0)
