"""Racing configurations on a budget (docs/statistics.md, "Racing"): questions are evaluated in a seeded random
order, in batches; after each batch every configuration still in the race is compared with every other on paired
per-question differences through anytime-valid confidence sequences (`chunkeval.stats.racing`), and one whose
upper bound of (its mean − another's) falls below −δ is dropped. The error is bounded over all configurations and
all looks together: with probability at least 1 − α no configuration within δ of the true best (the mean over every
question) is ever dropped.

The race stops when one configuration remains, when the comparison with a reference (production) is decided, when
the budget is spent, or when every question is in (then the means are exact). It reports the winner or the set
still tied, the bound it guarantees (with probability ≥ 1 − α the best configuration's mean exceeds the leader's
by at most `bound`), and the share of (question × configuration) cells evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chunkeval.errors import InputError
from chunkeval.stats.racing import PairedSequences, check_level

DELTA = 0.01  # the tolerance: a configuration is dropped only when it is worse than another by more than this
BATCH = 10  # questions per look


@dataclass
class RaceResult:
    """What a race decided. Indices are columns of the values it was given."""

    winner: int | None  # the one configuration left, else None
    tied: list[int]  # the configurations still in the race (the winner alone where there is one)
    leader: int  # the highest mean among `tied`
    bound: float  # P(best mean − leader's mean ≤ bound) ≥ 1 − α
    dropped: list[dict] = field(default_factory=list)  # {config, after (questions), by (config), upper}
    questions: int = 0  # questions evaluated (of the leader)
    cells: int = 0  # (question × configuration) cells evaluated
    total_cells: int = 0
    looks: int = 0
    stopped: str = ""  # one left, decided, budget, all questions
    reference: dict | None = None  # against the reference: {low, high} of leader − reference, and the verdict

    @property
    def share(self) -> float:
        return self.cells / self.total_cells if self.total_cells else 0.0


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
) -> RaceResult:
    """Race the columns of `values` (questions × configurations, metrics in [0, 1]) in the question `order` (a
    permutation: uniformly random for the guarantee; default the given order). `budget` in the units of `cost`
    (per question × configuration, default 1 per cell); `reference` a column of values of the reference
    (production) on the same questions, compared but never dropped nor the winner."""
    check_level(alpha, delta)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError("a race needs a table of questions × configurations")
    if np.isnan(x).any() or (x < 0).any() or (x > 1).any():
        raise InputError("a race's values are metrics from 0 to 1, with no missing value")
    n, k = x.shape
    ref = None if reference is None else np.asarray(reference, dtype=np.float64)
    arms = np.column_stack([x, ref]) if ref is not None else x
    order = np.arange(n) if order is None else np.asarray(order)
    cost = np.ones_like(x) if cost is None else np.asarray(cost, dtype=np.float64)
    seqs = PairedSequences(arms.shape[1], n, alpha)
    active = np.ones(arms.shape[1], bool)
    dropped, spent, cells, seen, looks, stopped = [], 0.0, 0, 0, 0, "all questions"
    reference_said = None
    while seen < n:
        take = order[seen : seen + batch]
        step = float(cost[take][:, active[:k]].sum())
        if budget is not None and spent + step > budget:
            stopped = "budget"
            break
        for q in take:
            seqs.add(arms[q], active)
        spent, cells, seen, looks = spent + step, cells + len(take) * int(active[:k].sum()), seen + len(take), looks + 1
        low, high = seqs.bounds()
        configs = np.flatnonzero(active[:k])
        for c in configs:
            others = [b for b in configs if b != c and active[b]]
            if not others:
                break
            worst = min(others, key=lambda b: high[c, b])
            if high[c, worst] < -delta:
                active[c] = False
                dropped.append({"config": int(c), "after": seen, "by": int(worst), "upper": float(high[c, worst])})
        if int(active[:k].sum()) == 1:
            stopped = "one left"
            break
        if ref is not None and stop_when_decided:
            reference_said = _against(seqs, active, k, delta)
            if reference_said["decided"]:
                stopped = "decided"
                break
    low, high = seqs.bounds()
    tied = [int(c) for c in np.flatnonzero(active[:k])]
    means = seqs.means()
    leader = max(tied, key=lambda c: (means[c], -c))
    bound = max([0.0] + [float(high[c, leader]) for c in tied if c != leader])
    if ref is not None:
        reference_said = _against(seqs, active, k, delta)
    return RaceResult(
        winner=tied[0] if len(tied) == 1 else None,
        tied=tied,
        leader=leader,
        bound=bound,
        dropped=dropped,
        questions=seen,
        cells=cells,
        total_cells=n * k,
        looks=looks,
        stopped=stopped,
        reference=reference_said,
    )


def _against(seqs: PairedSequences, active, k: int, delta: float) -> dict:
    """The comparison of the configurations still in the race with the reference (the last arm): decided when the
    leader beats it (its lower bound of leader − reference above 0) or none can beat it by more than δ."""
    low, high = seqs.bounds()
    means = seqs.means()
    configs = [int(c) for c in np.flatnonzero(active[:k])]
    leader = max(configs, key=lambda c: (means[c], -c))
    beats = bool(low[leader, k] > 0)
    holds = bool(max(high[c, k] for c in configs) < delta)
    said = "an offline configuration beats production" if beats else "production holds" if holds else "undecided"
    return {"leader": leader, "low": float(low[leader, k]), "high": float(high[leader, k]), "decided": beats or holds,
            "verdict": said}  # fmt: skip


def wrong_drops(result: RaceResult, true_means, delta: float = DELTA) -> int:
    """How many configurations the race dropped whose true mean is within δ of the true best (what the guarantee
    bounds: with probability ≥ 1 − α, none)."""
    mu = np.asarray(true_means, dtype=np.float64)
    best = mu.max()
    return sum(1 for d in result.dropped if mu[d["config"]] >= best - delta)
