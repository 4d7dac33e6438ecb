"""A large grid does not start unannounced (docs/settings.md): past `LARGE_GRID` configurations, a run prints an
estimate (configurations, texts to embed, time) and asks, however it arrives (`chunkeval run`, `sweep`, the
`evaluate` flow, `chunkeval.evaluate`): how each asks the user is the caller's (`Consent`, which
`chunkeval.engine.pipeline.prepare` takes). Where nobody can be asked, it needs a yes (`--yes`, the flow's `yes`,
the API's `yes=True`) or the experiment key `max_configurations` stating the grid is intended."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.embedding.served import lookup
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.records import Chunking
from chunkeval.engine.pipeline.sweep import chunking_jobs, plan, with_contexts
from chunkeval.engine.settings.table import LARGE_GRID
from chunkeval.errors import InputError

PROBE_TEXTS = 64  # texts a first run embeds to measure a model it has no record of


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass(frozen=True)
class Consent:
    """How the caller lets a large grid start: `yes` (given already: `--yes`, the flow's `yes`), `confirm` (asks the
    user and says whether to go on; None where nobody can be asked: off a terminal, a schedule, the API),
    `remedy` (how this interface says yes, for the one line of a refusal), `say` (where the estimate goes) and
    `throughput` (texts per second of each model in past runs: the warehouse's, for the estimate)."""

    yes: bool = False
    confirm: Callable[[str], bool] | None = None
    remedy: str = "--yes"
    say: Callable[[str], None] = _stderr
    throughput: Callable[[], dict[str, float]] = field(default=dict)


def terminal_confirm(prompt: str = "go on? [y/N] ") -> Callable[[str], bool] | None:
    """A `confirm` that asks on the terminal, or None off one."""
    if not sys.stdin.isatty():
        return None
    return lambda line: input(prompt).strip().lower() in ("y", "yes")


def grid_size(exp: Experiment) -> int:
    """The configurations a sweep of `exp` scores, each at each k (what `LARGE_GRID` and the experiment
    key `max_configurations` count), from the settings alone."""
    chunkings = [Chunking(spec, model, None) for spec, model in chunking_jobs(exp)]
    return len(plan(exp, with_contexts(exp, chunkings))) * len(exp.k)


CHARS_PER_TOKEN = 4  # about, for English text: what turns a corpus's bytes into a number of chunks


def texts_to_embed(exp: Experiment, corpus_bytes: int) -> int:
    """About how many texts a sweep of `exp` embeds over a corpus of `corpus_bytes` (each model embeds
    each chunking's chunks once; nothing when no chunker, retriever or reranker reads vectors)."""
    if not exp.needs_model():
        return 0
    models = len(exp.model) if exp.first_stage_embeds() else 0
    models += len(exp.embedding_rerankers())
    total = 0
    for spec in exp.grid():
        step = max(spec.chunk_size - spec.chunk_overlap, 1) * (1 if spec.chunker == "fixed_char" else CHARS_PER_TOKEN)
        total += -(-corpus_bytes // step) if spec.chunker != "none" else 1
    return total * models


def corpus_bytes(exp: Experiment) -> int:
    """The bytes of the corpus files the experiment reads (a stat of each, nothing opened)."""
    root = Path(exp.beir) / "corpus.jsonl" if exp.beir else Path(exp.corpus_dir)
    if root.is_file():
        return root.stat().st_size
    total = 0
    for folder, _, names in os.walk(root):
        total += sum(os.stat(os.path.join(folder, n)).st_size for n in names if not n.startswith("."))
    return total


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


def estimate(exp: Experiment, embedders: Embedders, known: dict[str, float], probing: bool = True) -> tuple[int, str]:
    """The grid's size and the estimate printed before a large grid starts: from the texts per second `known` of
    past runs, and a model none measured probed where `probing`."""
    size = grid_size(exp)
    if size <= LARGE_GRID:
        return size, ""
    texts = texts_to_embed(exp, corpus_bytes(exp))
    line = f"this grid scores {size:,} configurations (each at each k) and embeds about {texts:,} texts"
    if texts:
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


def check_race_budget(exp: Experiment, n_questions: int) -> None:
    """A race's `budget` pays at least for its first batch (every configuration, each at each k, on `race_batch`
    questions): else nothing would be evaluated, found before any work rather than after the chunking."""
    if exp.race and exp.budget:
        questions, size = min(exp.race_batch, n_questions), grid_size(exp)
        if exp.budget < questions * size:
            raise InputError(f"budget {exp.budget:,} cells is less than the race's first batch: {questions * size:,} "
                             f"cells ({questions} question(s) × {size:,} configurations, each at each k)")  # fmt: skip


def check_grid(exp: Experiment, embedders: Embedders, consent: Consent = Consent()) -> None:
    """Let a grid start: a small one, one `consent.yes` or `max_configurations` allows, or one the user confirms
    (`consent.confirm`). Past `LARGE_GRID` the estimate is said first (`consent.say`) however the grid is allowed;
    refused, it is the one line, which names `consent.remedy`. Every way a run arrives asks it, through
    `chunkeval.engine.pipeline.prepare`."""
    size = grid_size(exp)
    if exp.max_configurations and size > exp.max_configurations:
        raise InputError(
            f"the grid has {size:,} configurations, more than its max_configurations ({exp.max_configurations:,})"
        )
    if size <= LARGE_GRID:
        return
    _, line = estimate(exp, embedders, consent.throughput())
    allowed = consent.yes or exp.max_configurations
    if not (allowed or consent.confirm):
        raise InputError(
            f"{line}; more than {LARGE_GRID} configurations need {consent.remedy}, or the experiment key "
            f"max_configurations: {size} (docs/settings.md)"
        )
    consent.say(line)
    if not allowed and not consent.confirm(line):
        raise InputError("the grid was not started")
