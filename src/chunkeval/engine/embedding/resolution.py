"""An experiment's `backend: auto` resolved before it runs: the backend chosen (`chunkeval.engine.embedding.auto`)
replaces `auto` in the settings, so that fingerprints, recorded settings and the models table name it, and
the choice is said in one line."""

from __future__ import annotations

from dataclasses import replace

from chunkeval import progress
from chunkeval.engine.embedding.auto import PIN
from chunkeval.engine.embedding.registry import auto_choice
from chunkeval.engine.embedding.served import lookup

_said: set[str] = set()
_pending: list[str] = []  # pinned lines said when a model loads


def resolution(exp, device: str | None = None):
    """(`exp` with its backend resolved where it says `auto`, the line that says the choice and why, or None
    where it named a backend, and whether that line tells something new: a choice a probe has just made, or a
    pin). Nothing is said here: the caller says a new line once the inputs are checked (`say_choice`, from
    `chunkeval.engine.pipeline.prepare`), so that bad input is the one line a mistake prints. A choice kept from an
    earlier probe is recorded with the run (`backend_auto`), not said again; torch by rule (a GPU, a lower
    precision, only static or served models) is recorded, not said. `exp` is an `Experiment`."""
    if exp.backend != "auto":
        return exp, None, False
    if not exp.needs_model():
        return replace(exp, backend="torch"), "backend auto: torch (nothing in this grid embeds)", False
    names = list(exp.model if exp.first_stage_embeds() else []) + exp.embedding_rerankers()
    local = [m for m in dict.fromkeys(names) if lookup(m, exp.models) is None]
    choice = auto_choice(local, exp.quantize, exp.precision, device)
    skipped = "; ".join(f"{b} {why}" for b, why in choice.skipped.items())
    line = choice.line + (f"; {skipped}" if skipped and not choice.cached else "")
    fresh = (bool(choice.texts_per_s) and not choice.cached) or PIN in line
    return replace(exp, backend=choice.backend), line or None, fresh


def say_choice(line: str | None, fresh: bool) -> None:
    """Say a new backend line (`resolution`) once per process, as a notice (seen without -v,
    `chunkeval.progress.notice`). A pin is said when a model first loads (`say_pending`), for nothing has
    loaded one yet: a model folder that does not load is then the one line its mistake prints, and a run whose
    vectors are all cached, which loads no model, says nothing of a backend it did not use (its run records it)."""
    if not fresh or not line or line in _said:
        return
    if PIN in line:
        _pending.append(line)
    else:
        _said.add(line)
        progress.notice(line)


def say_pending() -> None:
    """Say the pinned backend lines waiting for a model to load (`say_choice`); called once a model has loaded."""
    while _pending:
        line = _pending.pop()
        if line not in _said:
            _said.add(line)
            progress.notice(line)


def resolved(exp, device: str | None = None):
    """`exp` with its backend resolved where it says `auto` (`resolution`)."""
    return resolution(exp, device)[0]
