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


def resolution(exp, device: str | None = None):
    """(`exp` with its backend resolved where it says `auto`, the line that says the choice and why, or None
    where it named a backend). A line that a probe or a pin decided is said once per process, as a notice
    (seen without -v, `chunkeval.progress.notice`); torch by rule (a GPU, a lower precision, only static or served models) is recorded, not said.
    `exp` is a `chunkeval.engine.pipeline.experiment.Experiment`."""
    if exp.backend != "auto":
        return exp, None
    if not exp.needs_model():
        return replace(exp, backend="torch"), "backend auto: torch (nothing in this grid embeds)"
    names = list(exp.model if exp.first_stage_embeds() else []) + exp.embedding_rerankers()
    local = [m for m in dict.fromkeys(names) if lookup(m, exp.models) is None]
    choice = auto_choice(local, exp.quantize, exp.precision, device)
    skipped = "; ".join(f"{b} {why}" for b, why in choice.skipped.items())
    line = choice.line + (f"; {skipped}" if skipped else "")
    decided = bool(choice.texts_per_s) or PIN in line  # a probe (or a pin) chose: said; torch by rule is not
    if decided and line not in _said:
        _said.add(line)
        progress.notice(line)
    return replace(exp, backend=choice.backend), line or None


def resolved(exp, device: str | None = None):
    """`exp` with its backend resolved where it says `auto` (`resolution`)."""
    return resolution(exp, device)[0]
