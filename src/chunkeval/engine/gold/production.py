"""Judging production's and a grid's passages question by question, raced (docs/traces.md, "Replay, judge and
decide"): what `chunkeval traces compare` and the `production` deployment judge."""

from __future__ import annotations

from chunkeval.engine.gold import judge as gj
from chunkeval.stats.judged import PRODUCTION, gains, ideal, list_metrics


def judge_race(lists: dict, questions: dict[str, str], texts: dict[str, str], chat, order: list[str], k: int,
               min_grade: int, metric: str = "ndcg_at_k", racing: bool = False, budget: float | None = None,
               unit: str = "requests", racer=None, batch: int = 10) -> dict:  # fmt: skip
    """Judge production's and the configurations' top-k passages question by question in `order` (seeded and
    uniformly random for racing's guarantee), `batch` questions at a time, with 2 canaries per question; before
    each batch, stop where it would pass `budget` (judge requests, or tokens: estimated as a quarter of the
    request's characters until the endpoint has said); after each, race the configurations with production as the
    reference (`racer`: a `chunkeval.stats.racing.Racer` of the configurations and production, on `metric`) and, with `racing`, judge no further passage of a
    configuration it dropped and stop when it is decided. `chat` asks (and caches) each request."""
    configs = [c for c in lists if c != ((PRODUCTION, True),)]
    prod = lists.get(((PRODUCTION, True),), {})
    grades: dict[tuple, int] = {}
    asked: set[tuple] = set()
    unusable, canary_verdicts, canaries_asked = [], [], 0
    raced: dict[tuple, list[str]] = {c: [] for c in configs}
    stopped, looks, spent = "all questions", 0, 0.0
    for start in range(0, len(order), batch):
        qs = order[start : start + batch]
        on = racer.configs() if racing else list(range(len(configs)))
        wanted = {(q, *it) for q in qs for c in on for it in lists[configs[c]].get(q, [])[:k]}
        wanted |= {(q, *it) for q in qs for it in prod.get(q, [])[:k]}
        new = sorted(wanted - asked)
        pooled = [gj.Pooled(*p) for p in new]
        canaries = gj.canaries(pooled, {q: questions[q] for q in qs}) if pooled else []
        cost = len(pooled) + len(canaries)
        if unit == "tokens":
            cost = sum(len(questions[p.query_id]) + p.end - p.start + 1600 for p in pooled + canaries) / 4
        if budget is not None and spent + cost > budget:
            stopped = "budget"
            break
        verdicts, bad = gj.judge(pooled, questions, texts, chat)
        found, _ = gj.judge(canaries, questions, texts, chat)
        canary_verdicts += found
        canaries_asked += len(canaries)
        unusable += bad
        asked |= set(new)
        grades |= {(v["query_id"], v["corpus_id"], v["start"], v["end"]): v["grade"] for v in verdicts}
        spent = chat.requests if unit == "requests" else chat.sent_tokens + chat.received_tokens
        gain = gains(grades, min_grade)
        best = ideal(gain)
        for q in qs:
            row = [list_metrics(lists[c].get(q, []), q, gain, best, k)[metric] if i in on else 0.0
                   for i, c in enumerate(configs)]  # fmt: skip
            row.append(list_metrics(prod.get(q, []), q, gain, best, k)[metric])
            racer.add(row)
            for i in on:
                raced[configs[i]].append(q)
        looks += 1
        racer.look()
        if racing and len(racer.configs()) == 1:
            stopped = "one left"
            break
        if racing and racer.t < len(order) and racer.against_reference()["decided"]:
            stopped = "decided"
            break
    return {"grades": grades, "unusable": unusable, "canaries": canary_verdicts, "canaries_asked": canaries_asked,
            "race": racer.result(stopped, looks), "raced": raced, "configs": configs, "spent": spent,
            "questions": order[: racer.t]}  # fmt: skip
