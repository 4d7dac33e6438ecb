"""A large grid does not start unannounced (docs/settings.md): past `LARGE_GRID` configurations, `run`,
`sweep`, the `evaluate` flow and `chunkeval.evaluate` print an estimate (configurations, texts to embed, time)
and ask on a terminal; off a terminal they need a yes (`--yes`, the flow's `yes`, the API's `yes=True`) or the
experiment key `max_configurations` stating the grid is intended."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.embedding.served import lookup
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import grid_size, texts_to_embed
from chunkeval.engine.settings.table import LARGE_GRID
from chunkeval.errors import InputError
from chunkeval.warehouse import Warehouse

PROBE_TEXTS = 64  # texts a first run embeds to measure a model it has no record of


def corpus_bytes(exp: Experiment) -> int:
    """The bytes of the corpus files the experiment reads (a stat of each, nothing opened)."""
    root = Path(exp.beir) / "corpus.jsonl" if exp.beir else Path(exp.corpus_dir)
    if root.is_file():
        return root.stat().st_size
    total = 0
    for folder, _, names in os.walk(root):
        total += sum(os.stat(os.path.join(folder, n)).st_size for n in names if not n.startswith("."))
    return total


def past_throughput() -> dict[str, float]:
    """Texts per second of each model, the median over the runs the warehouse recorded (empty without one)."""
    try:
        wh = Warehouse.at_home()
        if not wh.exists():
            return {}
        with wh.connect() as con:
            rows = con.execute(
                "SELECT model, median(texts_per_second) FROM run_models WHERE texts_per_second > 0 GROUP BY model"
            ).fetchall()
    except Exception:  # noqa: BLE001 - an estimate never stops a run: without the warehouse, a probe measures
        return {}
    return {model: float(rate) for model, rate in rows}


def probe(model: str, embedders: Embedders) -> float | None:
    """Texts per second of `model` on a short batch (None for a served model: a probe would be billed)."""
    if lookup(model, embedders.served) is not None or model.startswith("openai:"):
        return None
    texts = [f"a short probe of the model's speed, text {i}" for i in range(PROBE_TEXTS)]
    embedder = embedders[model]
    embedder._encode(texts[:2])  # the model loaded, so that the probe times embedding only
    start = time.perf_counter()
    embedder._encode(texts)
    return PROBE_TEXTS / max(time.perf_counter() - start, 1e-9)


def estimate(exp: Experiment, embedders: Embedders, probing: bool = True) -> tuple[int, str]:
    """The grid's size and the estimate printed before a large grid starts (a model no past run measured is
    probed where `probing`)."""
    size = grid_size(exp)
    if size <= LARGE_GRID:
        return size, ""
    texts = texts_to_embed(exp, corpus_bytes(exp))
    line = f"this grid scores {size:,} configurations (each at each k) and embeds about {texts:,} texts"
    if texts:
        known = past_throughput()
        models = list(dict.fromkeys(exp.model + tuple(exp.embedding_rerankers())))
        rates = {m: known.get(m) or (probe(m, embedders) if probing else None) for m in models}
        if all(rates.values()):
            seconds = texts / len(models) * sum(1 / r for r in rates.values())
            measured = sum(m in known for m in models)
            source = "past runs" if measured == len(models) else "past runs and a probe" if measured else "a probe"
            line += f", in about {_duration(seconds)} of embedding (from {source})"
        else:
            line += "; how long it takes is not known (no past run of its model, and no probe here)"
    return size, line


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else "1 min"


def check_grid(
    exp: Experiment,
    yes: bool,
    embedders: Embedders,
    ask: bool | None = None,
    remedy: str = "--yes",
    say=None,
) -> None:
    """Let a grid start: a small one, one `yes` or `max_configurations` allows, or one the user confirms when
    `ask` (by default: on a terminal). Past `LARGE_GRID` the estimate is said first (`say`, else stderr) however
    the grid is allowed; refused, it is the one line, which names `remedy` (how this interface says yes: `--yes`
    for the commands, the flow's parameter `yes`, the API's keyword `yes=True`). Every way a run arrives calls
    it: `run`, `sweep`, the `evaluate` flow (scheduled runs) and `chunkeval.evaluate`."""
    size = grid_size(exp)
    if exp.max_configurations and size > exp.max_configurations:
        raise InputError(
            f"the grid has {size:,} configurations, more than its max_configurations ({exp.max_configurations:,})"
        )
    if size <= LARGE_GRID:
        return
    ask = sys.stdin.isatty() if ask is None else ask
    _, line = estimate(exp, embedders)
    if not (yes or exp.max_configurations or ask):
        raise InputError(
            f"{line}; more than {LARGE_GRID} configurations need {remedy}, or the experiment key max_configurations: "
            f"{size} (docs/settings.md)"
        )
    (say or (lambda text: print(text, file=sys.stderr)))(line)
    if yes or exp.max_configurations:
        return
    answer = input("go on? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise InputError("the grid was not started")
