"""Which production queries are judged: a seeded sample of a time window, stratified by day and session
(docs/traces.md, "Sampling").

The unit is a distinct query (its `query_hash`: the same text asked again is one query, first asked in its
stratum). Strata are (UTC day, session); each gets a share of the sample proportional to its queries (largest
remainders, and at least one per stratum while the sample has room), and within a stratum queries are taken in
the order of a hash of the seed and the query, so the same seed over the same traffic draws the same sample, and
more traffic changes it little.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from pathlib import Path

from chunkeval.errors import InputError
from chunkeval.limits import DOCUMENT_BYTES, INPUT_BYTES, json_loads, read_text, short


def _order(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}\0{key}".encode("utf-8", "surrogatepass")).hexdigest()


def sample_queries(spans: list[dict], size: int, seed: int = 0) -> list[dict]:
    """The sampled spans (one per distinct query: its first span), at most `size`, oldest first. `spans`: dicts
    with span_id, query_hash, time, session_id, as `Warehouse.production_spans` gives them (oldest first)."""
    first: dict[str, dict] = {}
    for s in spans:
        first.setdefault(s["query_hash"], s)
    strata: dict[tuple, list[dict]] = defaultdict(list)
    for s in first.values():
        day = s["time"].date().isoformat() if s.get("time") is not None else ""
        strata[(day, s.get("session_id") or "")].append(s)
    total = len(first)
    if total <= size:
        chosen = list(first.values())
    else:
        keys = sorted(strata)
        quota = {k: size * len(strata[k]) / total for k in keys}
        take = {k: math.floor(q) for k, q in quota.items()}
        if size >= len(keys):  # every stratum at least one while there is room
            for k in keys:
                take[k] = max(take[k], 1)
        while sum(take.values()) > size:  # the minimum of one overshot: trim the largest, hash-ordered
            k = max(keys, key=lambda k: (take[k], _order(seed, "|".join(k))))
            take[k] -= 1
        left = sorted(keys, key=lambda k: (-(quota[k] - math.floor(quota[k])), _order(seed, "|".join(k))))
        for k in left:
            if sum(take.values()) >= size:
                break
            if take[k] < len(strata[k]):
                take[k] += 1
        chosen = []
        for k in keys:
            ranked = sorted(strata[k], key=lambda s: _order(seed, s["query_hash"]))
            chosen.extend(ranked[: take[k]])
    return sorted(chosen, key=lambda s: (s["time"] is None, s["time"], s["span_id"]))


def strata_counts(sample: list[dict]) -> dict[str, int]:
    """Sampled queries per day (what the command prints)."""
    out: dict[str, int] = defaultdict(int)
    for s in sample:
        out[s["time"].date().isoformat() if s.get("time") is not None else "?"] += 1
    return dict(sorted(out.items()))


def read_production(path, questions: dict[str, str]) -> tuple[list[dict], dict[str, str]]:
    """What production retrieved for the sampled questions, as `traces sample` wrote it (`<out>.production.jsonl`):
    rows of query_id, rank, corpus_id, start, end (a placed document's span of the corpus, or `production:<hash>`
    with its content), and the texts of the unplaced ones (`production:<hash>` → content). The file may have been
    edited: a line that is not such a row is one line naming it; a query not among `questions` is left out."""
    rows, texts, seen = [], {}, set()
    text = read_text(Path(path), INPUT_BYTES, "production file")  # a regular file, UTF-8, of bounded size
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = json_loads(line)
        except ValueError:
            raise InputError(f"line {number}: not JSON (or nested too deep)", path) from None
        ok = isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("query_id", "corpus_id"))
        ok = ok and all(isinstance(r.get(k), int) and not isinstance(r.get(k), bool) for k in ("rank", "start", "end"))
        if not ok or not 0 <= r["start"] < r["end"] <= DOCUMENT_BYTES or r["rank"] < 1:  # no document is longer
            raise InputError(f"line {number}: a production row has query_id, rank (from 1), corpus_id, "
                             "0 ≤ start < end", path)  # fmt: skip
        if (r["query_id"], r["rank"]) in seen:
            raise InputError(f"line {number}: query {short(r['query_id'])} has rank {r['rank']} twice", path)
        seen.add((r["query_id"], r["rank"]))
        if r["corpus_id"].startswith("production:"):
            content = r.get("content")
            if not isinstance(content, str) or len(content) != r["end"] or r["start"] != 0:
                raise InputError(f"line {number}: an unplaced document carries its content, 0 to its length",
                                 path)  # fmt: skip
            texts[r["corpus_id"]] = content
        if r["query_id"] in questions:
            rows.append({k: r[k] for k in ("query_id", "rank", "corpus_id", "start", "end")})
    return sorted(rows, key=lambda r: (r["query_id"], r["rank"])), texts
