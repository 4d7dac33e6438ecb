"""Anytime-valid tests by betting for paired differences of configurations, questions drawn without replacement
(docs/statistics.md, "Racing"): `LowerTests` (one-sided tests of μ_a − μ_b ≥ θ, for many pairs at once, against a
fixed or a predictable comparator), and how a race combines its tests of every configuration into one family-wise guarantee,
`closed_rejects` (the closure of the mean of e-values); and the race that combines them (`Racer`, `race`).

The questions come in a uniformly random order from the N of the set, and the target is the mean over all N: what
a full evaluation gives. Once all N are in, every mean is known exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist

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

    def restart(self) -> None:
        """Every test runs from here: each capital back to 1 (what the bets learnt of the differences is kept)."""
        self.log_capital[:] = 0.0
        self.best[:] = 0.0

    def evalue(self) -> np.ndarray:
        """The capital of each test now (infinite where rejected for certain): an e-value at any look."""
        return np.where(self.sure, np.inf, np.exp(self.log_capital))

    def pvalue(self) -> np.ndarray:
        """The anytime-valid p-value of each test: 1 / its largest capital so far (0 where rejected for certain)."""
        return np.where(self.sure, 0.0, np.minimum(1.0, np.exp(-self.best)))


def closed_rejects(evalues, alpha: float, weights=None) -> np.ndarray:
    """Which hypotheses the closure of the (weighted) mean of e-values rejects at `alpha` (Vovk and Wang, "E-values:
    calibration, combination, and applications", Annals of Statistics 2021): H_c is rejected when every
    intersection of hypotheses holding it has a mean e-value of at least 1/α, each intersection's mean weighted by
    `weights` (fixed before the e-values' questions; default equal). The weighted mean of test supermartingales of
    the same questions is one under their intersection, so by Ville's inequality the family-wise error is at most α
    over every look at once. The intersection that binds for c is c with the others of smallest e-value, as many
    as lower the mean."""
    e = np.asarray(evalues, dtype=np.float64)
    w = np.ones(len(e)) if weights is None else np.asarray(weights, dtype=np.float64)
    out = np.zeros(len(e), bool)
    order = np.argsort(e, kind="stable")
    with np.errstate(invalid="ignore"):  # an infinite e-value (rejected for certain) times a weight
        for c in range(len(e)):
            others = order[order != c]  # the others, smallest first
            mass = w[c] + np.concatenate([[0.0], np.cumsum(w[others])])
            means = (w[c] * e[c] + np.concatenate([[0.0], np.cumsum(w[others] * e[others])])) / mass
            out[c] = np.nanmin(means) >= 1 / alpha
    return out


# --------------------------------------------------------------------------- the race
# Racing configurations on a budget (docs/statistics.md, "Racing"): questions are evaluated in a seeded random
# order, in batches; the first look after `WEIGH` questions weighs the configurations (`Racer.weigh`), and after
# each later batch every configuration still in the race is tested against the leader by betting (`LowerTests`), and
# one shown worse than the leader by more than δ is dropped. The error is
# bounded over all configurations and all looks together: with probability at least 1 − α no configuration within δ
# of the true best (the mean over every question) is ever dropped, and a race that stops *certified* has a leader
# within δ of the true best.
#
# The race stops when one configuration remains, when the leader is certified within δ of every configuration still
# in the race, when the comparison with a reference (production) is decided, when the budget is spent, or when every
# question is in (then the means are exact). It reports the winner or the set still tied, the bound it guarantees,
# and the share of (question × configuration) cells evaluated. `Racer` is the race one question at a time, for a
# caller whose values arrive as they are paid for (`chunkeval traces compare --race` judges them); `race` runs it
# over a table.

DELTA = 0.01  # the tolerance: a configuration is dropped only when it is worse than another by more than this
BATCH = 10  # questions per look
WEIGH = 10  # questions the race reads before it weighs the configurations; every test is run from there
SURE = 2.0  # the weights' hinge: how many standard errors below the leader a configuration looks (`Racer.weigh`)
FLOOR = 0.01  # every configuration keeps at least this weight, before the weights are made to sum to one
PHI = np.vectorize(NormalDist().cdf)  # the standard normal's distribution function, elementwise


@dataclass
class RaceResult:
    """What a race decided. Indices are columns of the values it was given."""

    winner: int | None  # the one configuration left, else None
    tied: list[int]  # the configurations still in the race (the winner alone where there is one)
    leader: int  # the highest mean among `tied`
    bound: float | None  # P(best mean − leader's mean ≤ bound) ≥ 1 − α; None where the race could not say
    dropped: list[dict] = field(default_factory=list)  # {config, after (questions), by (the leader then), p}
    questions: int = 0  # questions evaluated (of the leader)
    cells: int = 0  # (question × configuration) cells evaluated
    total_cells: int = 0
    looks: int = 0
    stopped: str = ""  # one left, certified, decided, budget, all questions
    reference: dict | None = None  # against the reference: the verdict and what it rests on
    alpha: dict = field(default_factory=dict)  # how α was shared: drops, certify, reference

    @property
    def share(self) -> float:
        return self.cells / self.total_cells if self.total_cells else 0.0


def shares(alpha: float, reference: bool) -> dict:
    """How a race spends α: half on its drops, the rest on certifying the leader (and, with a reference, half of
    that on the comparison with it). Every claim of the race together holds with probability ≥ 1 − α."""
    if reference:
        return {"drops": alpha / 2, "certify": alpha / 4, "reference": alpha / 4}
    return {"drops": alpha / 2, "certify": alpha / 2, "reference": 0.0}


class Racer:
    """A race over `k` configurations (and a reference arm after them, where `reference`) and a population of `n`
    questions in a uniformly random order. `add(row)` takes one question's values of every arm (metrics in
    [0, 1]; those of configurations no longer in the race are not read), `look()` drops what the tests allow and
    says whether the race may stop."""

    def __init__(self, k: int, n: int, alpha: float = 0.05, delta: float = DELTA, reference: bool = False):
        check_level(alpha, delta)
        if k < 1 or n < 1:
            raise InputError("a race needs at least one configuration and one question")
        self.k, self.n, self.delta, self.has_reference = k, n, delta, reference
        self.alpha = shares(alpha, reference)
        arms = k + int(reference)
        self.arms = arms
        self.active = np.ones(arms, bool)
        self.sums = np.zeros(arms)
        self.cross = np.zeros((arms, arms))  # Σ x_a x_b over the questions seen
        self.t = 0
        self.drops = LowerTests(n, k, -delta)  # c against the leader: H0 "c is within δ of the best"
        theta = np.full((arms, arms), delta)
        if reference:
            theta[k, :k] = 0.0  # (reference, c): H0 "the reference is at least as good as c"
        self.pairs = LowerTests(n, arms * arms, theta.ravel())  # (a, b): H0 "μ_a − μ_b ≥ θ_ab"
        self.dropped: list[dict] = []
        self.cells = 0
        self.weights: np.ndarray | None = None  # the drops' weights, once weighed (`weigh`)
        self.leads: np.ndarray | None = None  # the certified stop's weights: how likely each is the leader at the end

    def leader(self) -> int:
        """The configuration still in the race with the highest mean so far (the lowest index among equals)."""
        on = np.flatnonzero(self.active[: self.k])
        return int(on[np.argmax(self.sums[on])])

    def configs(self) -> list[int]:
        return [int(c) for c in np.flatnonzero(self.active[: self.k])]

    def add(self, row) -> None:
        x = np.asarray(row, dtype=np.float64)
        k = self.k
        x = np.where(self.active, x, 0.0)
        t = self.t + 1
        lead = self.leader()  # the comparator, chosen before the question: predictable
        on = self.active[:k] & (np.arange(k) != lead)
        self.drops.add(t, x[:k] - x[lead], self.sums[:k] - self.sums[lead], on, self.squares_against(lead))
        both = np.outer(self.active, self.active)
        np.fill_diagonal(both, False)
        d = (x[:, None] - x[None, :]).ravel()
        past = (self.sums[:, None] - self.sums[None, :]).ravel()
        self.pairs.add(t, d, past, both.ravel())
        self.sums = self.sums + x
        self.cross = self.cross + np.outer(x, x)
        self.cells += int(self.active[:k].sum())
        self.t = t

    def squares_against(self, b: int) -> np.ndarray:
        """Σ (x_c − x_b)² over the questions seen, for every configuration c."""
        c, k = self.cross, self.k
        return np.diag(c)[:k] + c[b, b] - 2 * c[:k, b]

    def pair_p(self) -> np.ndarray:
        return self.pairs.pvalue().reshape(self.arms, self.arms)

    def weigh(self) -> None:
        """Weigh the configurations from the questions read so far, and run every test from here (each capital
        back to 1, so that the weights come before every question the tests read). For each configuration c, z_c
        is how many standard errors its mean is below the leader's (paired). A drop's weight is Φ(z_c − SURE) and
        a certified stop's Φ(SURE − z_c), each at least FLOOR and summing to one: the closure of the drops then
        pays little for the configurations near the best (which only the race's end can settle) and the stop
        little for those far below it (which will not lead). Any weights fixed here keep every guarantee; these
        only decide where the race spends its α."""
        k, lead = self.k, self.leader()
        gap = (self.sums[lead] - self.sums[:k]) / self.t
        squares = self.squares_against(lead) / self.t
        spread = np.sqrt((np.maximum(squares - gap**2, 0.0) + VARIANCE_PRIOR) / self.t)
        z = gap / spread
        on = self.active[:k]
        drops = np.where(on, PHI(z - SURE) + FLOOR, 0.0)
        leads = np.where(on, PHI(SURE - z) + FLOOR, 0.0)
        self.weights, self.leads = drops / drops.sum(), leads / leads.sum()
        self.drops.restart()
        self.pairs.restart()

    def look(self) -> None:
        """Drop every configuration the closure of the drop tests' e-values rejects (never the leader). The first
        look after `WEIGH` questions weighs the configurations instead (`weigh`)."""
        if self.weights is None:
            if self.t >= min(WEIGH, self.n):
                self.weigh()
            return
        lead = self.leader()
        rejected = self.rejected()
        for c in self.configs():
            if c != lead and rejected[c]:
                self.active[c] = False
                self.dropped.append({"config": c, "after": self.t, "by": lead, "p": float(self.drops.pvalue()[c])})

    def rejected(self) -> np.ndarray:
        """Which configurations' drop tests reject now: the closure of their weighted e-values (`closed_rejects`)."""
        return closed_rejects(self.drops.evalue(), self.alpha["drops"], self.weights)

    def certify_level(self, lead: int) -> float:
        """The level each pair test against the leader `lead` must reach to certify it: α_certify · its weight."""
        return self.alpha["certify"] * self.leads[lead]

    def certified(self) -> bool:
        """Every configuration still in the race is shown at most δ better than the leader L (an intersection-union
        test over them, each pair at α_certify · the leader's weight, `weigh`): the leader is within δ of the
        best."""
        if self.alpha["certify"] <= 0 or self.leads is None:
            return False
        lead, p = self.leader(), self.pair_p()
        level = self.certify_level(lead)
        return all(p[c, lead] <= level for c in self.configs() if c != lead)

    def against_reference(self) -> dict | None:
        """The comparison with the reference: an offline configuration beats it (the leader shown better than the
        reference, at α_reference / (2k): the leader is any of k), production holds (every configuration still in
        the race shown at most δ better than it, at α_reference / 2: the best is one fixed configuration), or
        undecided."""
        if not self.has_reference:
            return None
        k, p = self.k, self.pair_p()
        lead = self.leader()
        means = self.means()
        beats = bool(p[k, lead] <= self.alpha["reference"] / (2 * k))
        holds = all(p[c, k] <= self.alpha["reference"] / 2 for c in self.configs())
        said = "an offline configuration beats production" if beats else "production holds" if holds else "undecided"
        return {"leader": lead, "leader_mean": float(means[lead]), "reference_mean": float(means[k]),
                "p_beats": float(p[k, lead]), "decided": beats or holds, "verdict": said}  # fmt: skip

    def means(self) -> np.ndarray:
        return self.sums / max(self.t, 1)

    def result(self, stopped: str, looks: int) -> RaceResult:
        tied = self.configs()
        lead = self.leader()
        exact = self.t >= self.n
        bound = 0.0 if len(tied) == 1 or exact else self.delta if stopped == "certified" else None
        return RaceResult(
            winner=tied[0] if len(tied) == 1 else None,
            tied=tied,
            leader=lead,
            bound=bound,
            dropped=list(self.dropped),
            questions=self.t,
            cells=self.cells,
            total_cells=self.n * self.k,
            looks=looks,
            stopped=stopped,
            reference=self.against_reference(),
            alpha=dict(self.alpha),
        )


def race(
    values,
    order=None,
    alpha: float = 0.05,
    delta: float = DELTA,
    batch: int = BATCH,
    budget: float | None = None,
    cost=None,
    reference=None,
    stop_when_decided: bool = False,
    certify: bool = True,
    rules: type[Racer] = Racer,
) -> RaceResult:
    """Race the columns of `values` (questions × configurations, metrics in [0, 1]) in the question `order` (a
    permutation: uniformly random for the guarantee; default the given order). `budget` in the units of `cost`
    (per question × configuration, default 1 per cell); `reference` a column of values of the reference
    (production) on the same questions, compared but never dropped nor the winner; `certify`: stop once the
    leader is shown within δ of every configuration left; `rules` the rules of its looks (a `Racer`, or a subclass
    that changes them: bench/racing.py's yardsticks)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError("a race needs a table of questions × configurations")
    ref = None if reference is None else np.asarray(reference, dtype=np.float64).reshape(-1, 1)
    arms = x if ref is None else np.column_stack([x, ref])
    if np.isnan(arms).any() or (arms < 0).any() or (arms > 1).any():
        raise InputError("a race's values are metrics from 0 to 1, with no missing value")
    n, k = x.shape
    order = np.arange(n) if order is None else np.asarray(order)
    cost = np.ones_like(x) if cost is None else np.asarray(cost, dtype=np.float64)
    racer = rules(k, n, alpha, delta, reference=ref is not None)
    spent, looks, stopped = 0.0, 0, "all questions"
    while racer.t < n:
        take = order[racer.t : racer.t + batch]
        step = float(cost[take][:, racer.active[:k]].sum())
        if budget is not None and spent + step > budget:
            stopped = "budget"
            break
        for q in take:
            racer.add(arms[q])
        spent, looks = spent + step, looks + 1
        racer.look()
        if len(racer.configs()) == 1:
            stopped = "one left"
            break
        if certify and racer.t < n and racer.certified():
            stopped = "certified"
            break
        if ref is not None and stop_when_decided and racer.against_reference()["decided"]:
            stopped = "decided"
            break
    return racer.result(stopped, looks)


def wrong_drops(result: RaceResult, true_means, delta: float = DELTA) -> int:
    """How many configurations the race dropped whose true mean is within δ of the true best (what the guarantee
    bounds: with probability ≥ 1 − α, none)."""
    mu = np.asarray(true_means, dtype=np.float64)
    best = mu.max()
    return sum(1 for d in result.dropped if mu[d["config"]] >= best - delta)
