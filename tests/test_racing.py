"""Racing (issue 43, docs/statistics.md "Racing"): the tests by betting of `chunkeval.stats.racing` held to a plain
loop of their formulas and to the worked example of the docs, their error over every look checked by shuffling a
population at the null's edge, the closure of e-values against its definition, and the race's decisions
(`Racer`, `race`). The 1,000-replay check of the guarantee on recorded runs is bench/racing.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from chunkeval.errors import InputError
from chunkeval.stats.racing import CAP, VARIANCE_PRIOR, LowerTests, closed_rejects, race, wrong_drops

WORKED = np.array([-0.4, 0.0] * 30 + [0.0] * 40)  # docs/statistics.md's example: mean −0.12


def plain(d, n: int, theta: float):
    """The capital of one test, one question at a time, in plain Python (the formulas of `LowerTests`)."""
    log_cap, past, squares, out = 0.0, 0.0, 0.0, []
    for t, di in enumerate(d, start=1):
        m = (theta * n - past) / (n - t + 1)
        lam = 0.0
        if t > 1:
            seen = t - 1
            mean = m - past / seen
            var = (squares - past**2 / seen + VARIANCE_PRIOR) / (seen + 1)
            lam = max(mean / (var + mean**2), 0.0) if m < 1 else 0.0
            lam = min(lam, CAP / (1 - m)) if m < 1 else 0.0
        log_cap += math.log1p(lam * (m - di))
        past, squares = past + di, squares + di * di
        out.append(log_cap)
    return np.array(out)


def capital(d, n: int, theta: float):
    tests, past, squares, out = LowerTests(n, 1, theta), 0.0, 0.0, []
    for t, di in enumerate(d, start=1):
        tests.add(t, np.array([di]), np.array([past]), np.array([True]), np.array([squares]))
        past, squares = past + di, squares + di * di
        out.append((tests.log_capital[0], tests.pvalue()[0]))
    return np.array(out)


def test_the_test_is_the_formula_and_the_worked_example():
    got = capital(WORKED, 100, -0.01)
    assert np.allclose(got[:, 0], plain(WORKED, 100, -0.01), atol=1e-12)
    said = {10: 0.2892, 20: 0.0499, 30: 0.0065, 40: 0.0006}  # the p-value after t questions
    for t, p in said.items():
        assert round(got[t - 1, 1], 4) == p
    assert got[-1, 1] == 0.0  # every question in: the mean difference −0.12 < −0.01 is known


def test_at_the_null_s_edge_every_look_together_errs_at_most_alpha():
    rng = np.random.default_rng(7)
    population = np.clip(rng.normal(0.0, 0.3, 120), -1, 1)
    population -= population.mean() - (-0.01)  # the mean difference is exactly θ: the null holds, at its edge
    errors = 0
    for _ in range(300):
        got = capital(population[rng.permutation(120)], 120, -0.01)
        errors += bool((got[:, 1] <= 0.2).any())
    assert errors / 300 <= 0.2  # anytime: over every one of the 120 looks at once


def test_the_closure_rejects_what_every_intersection_s_mean_rejects():
    rng = np.random.default_rng(3)
    for _ in range(50):
        e = np.exp(rng.normal(2, 2, 6))
        want = [
            all(np.mean(e[list(s)]) >= 20 for r in range(1, 7) for s in itertools.combinations(range(6), r) if c in s)
            for c in range(6)
        ]
        assert closed_rejects(e, 0.05).tolist() == want
        w = rng.uniform(0.01, 1, 6)
        weighted = [
            all(np.average(e[list(s)], weights=w[list(s)]) >= 20 for r in range(1, 7)
                for s in itertools.combinations(range(6), r) if c in s)
            for c in range(6)
        ]  # fmt: skip
        assert closed_rejects(e, 0.05, w).tolist() == weighted


def test_weighed_races_at_the_edge_drop_a_configuration_within_delta_at_most_alpha():
    """The weights (`Racer.weigh`) are read from the first questions; the tests run from there. Two configurations
    exactly δ below the best (at the edge of their nulls, the hardest to keep) beside three far below, which the
    weights favour for dropping: over 200 races with their own orders, one that drops either of the two errs, and
    the guarantee allows α = 0.2 of them."""
    rng = np.random.default_rng(11)
    n = 150
    x = np.array([0.7, 0.69, 0.69, 0.5, 0.45, 0.4]) + rng.uniform(-0.25, 0.25, (n, 6))
    x[:, 1:3] += (x[:, 0].mean() - 0.01) - x[:, 1:3].mean(0)  # exactly δ below the best, over every question
    assert x.min() >= 0 and x.max() <= 1
    errors = sum(wrong_drops(race(x, rng.permutation(n), alpha=0.2, batch=5), x.mean(0)) > 0 for _ in range(200))
    assert errors <= 0.2 * 200


def test_a_race_finds_the_best_drops_the_rest_and_reports_its_bound():
    rng = np.random.default_rng(1)
    n = 300
    means = np.array([0.8, 0.5, 0.45, 0.3, 0.795])
    x = np.clip(means + rng.normal(0, 0.1, (n, 5)), 0, 1)
    res = race(x, rng.permutation(n), batch=10, certify=False)
    assert 0 in res.tied and 4 in res.tied and res.leader in (0, 4)  # 0.8 and 0.795: within δ, never dropped
    assert {d["config"] for d in res.dropped} == {1, 2, 3} and res.share < 0.5
    assert wrong_drops(res, x.mean(0)) == 0 and res.stopped == "all questions" and res.bound == 0.0
    sure = race(x, rng.permutation(n), batch=10)
    assert sure.stopped == "certified" and sure.bound == 0.01 and sure.share < res.share
    one = race(x[:, :4], rng.permutation(n), batch=10)
    assert one.winner == 0 and one.stopped == "one left" and one.bound == 0
    poor = race(x, rng.permutation(n), batch=10, budget=100)
    assert poor.stopped == "budget" and poor.cells <= 100 and poor.questions == 20 and poor.bound is None
    vs = race(x[:, 1:4], rng.permutation(n), batch=10, reference=x[:, 0], stop_when_decided=True)
    assert vs.stopped == "decided" and vs.reference["verdict"] == "production holds"
    beat = race(x[:, [0, 4]], rng.permutation(n), batch=10, reference=x[:, 1], stop_when_decided=True)
    assert beat.reference["verdict"] == "an offline configuration beats production" and beat.stopped == "decided"
    assert beat.alpha == {"drops": 0.025, "certify": 0.0125, "reference": 0.0125}


def test_a_race_refuses_values_that_are_no_metric():
    with pytest.raises(InputError, match="metrics from 0 to 1"):
        race(np.array([[0.5, 1.5]]))
    with pytest.raises(InputError, match="alpha"):
        race(np.array([[0.5, 0.5]]), alpha=1.0)


def test_the_bench_replays_kept_tables_alike_over_any_number_of_workers(tmp_path):
    """bench/racing.py: the tables `--record` keeps read back whole (`--replay-from`), and each replay draws from its
    own seeded stream, so `--workers 2` gives the figures of `--workers 1`."""
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import racing as bench

    rng = np.random.default_rng(5)
    x = np.clip(np.array([0.8, 0.6, 0.3, 0.79]) + rng.normal(0, 0.1, (200, 4)), 0, 1)
    bench.save_tables({"toy: ndcg_at_k": (x, ["a", "b", "c", "d"])}, tmp_path)
    ((got, labels),) = bench.load_tables(tmp_path).values()
    assert np.array_equal(got, x) and labels == ["a", "b", "c", "d"] and (tmp_path / "0.npz").stat().st_size < 50_000
    bench.SETS.update(bench.load_tables(tmp_path))
    a = argparse.Namespace(seed=0, alpha=0.05, delta=0.01, batch=10)
    jobs = [("toy: ndcg_at_k", 0, i, a) for i in range(6)]
    one, two = bench.mapped(bench.replay_race, jobs, 1), bench.mapped(bench.replay_race, jobs, 2)
    timeless = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert timeless(one) == timeless(two) and not any(r["wrong"] for r in one) and all(r["share"] < 1 for r in one)
    # the yardsticks beside it: paying for many configurations never makes the betting oracle cheaper, and a race
    # that pays nothing for them (no closure, no weights) drops sooner than the race
    assert all(r["anytime_share"] <= r["anytime_many_share"] <= 1 for r in one)
    assert np.mean([r["uncorrected_share"] for r in one]) <= np.mean([r["share"] for r in one])
