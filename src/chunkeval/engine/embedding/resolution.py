"""Which backend embeds: the whole decision in one place, `choose_backend`, which every caller asks.

A named backend (torch, onnx, openvino) is that backend, once it is known, allowed with the quantisation and
precision and installed (`chunkeval.engine.embedding.backends.check_backend`, whose precision rules are
`chunkeval.engine.embedding.precision.check_precision`). `auto` is decided by rule where a rule decides it
(a lower precision, a GPU, no transformer to export: torch; `CHUNKEVAL_AUTO_BACKEND`: its pin), else it is the
choice kept per model and machine, probed once (`chunkeval.engine.embedding.auto`). An experiment's `auto`
is resolved before it runs (`resolution`): the backend chosen replaces `auto` in the settings, so that
fingerprints, recorded settings and the models table name it, and the choice is said in one line."""

from __future__ import annotations

import os
from dataclasses import replace

from chunkeval import progress
from chunkeval.engine.embedding import auto
from chunkeval.engine.embedding.auto import AUTO, CANDIDATES, PIN, Choice
from chunkeval.engine.embedding.backends import check_backend, is_transformer
from chunkeval.engine.embedding.registry import model_fingerprint, resolve_model
from chunkeval.engine.embedding.served import lookup
from chunkeval.errors import InputError
from chunkeval.limits import short

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
    choice = choose_backend(AUTO, local, exp.quantize, exp.precision, device)
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


def choose_backend(
    backend: str, models=(), quantize: str = "none", precision: str = "fp32", device: str | None = None
) -> Choice:
    """The backend that embeds these local models (names; served ones are left out by the caller) with
    `quantize` and `precision` on `device`: a named one as it is, once it can run here; `auto` one backend for
    all of them, lossless for each (probed once per transformer model and machine, and kept; a static model
    runs alike on every backend)."""
    if backend != AUTO:
        check_backend(backend, quantize, precision=precision)
        return Choice(backend, "")
    folders = [(m, resolve_model(m)) for m in models]
    transformers = [(m, folder, model_fingerprint(m)) for m, folder in folders if is_transformer(folder)]
    gpu = bool(models) and auto.on_gpu(device)
    check_backend(AUTO, quantize, precision=precision)  # int8 needs a backend named
    if precision != "fp32":
        return Choice("torch", f"backend auto: torch (precision {precision} is yours to choose; auto probes fp32)")
    if gpu:
        return Choice("torch", "backend auto: torch (the GPU runs backend torch; onnx and openvino run on the CPU)")
    if not transformers:
        return Choice("torch", "backend auto: torch (no transformer to export: a static model runs alike everywhere)")
    pinned = os.environ.get(PIN)
    if pinned:  # a machine's choice made once by its owner (a CI runner, a fleet of one kind): nothing probed
        if pinned not in ("torch", *CANDIDATES):
            raise InputError(f"{PIN} must be torch, onnx or openvino, got {short(pinned)}")
        return Choice(pinned, f"backend auto: {pinned} (pinned by {PIN}; nothing probed)")
    try:
        choices = [auto.choose(*t) for t in transformers]
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):  # torch itself cannot load it: the run says so
        return Choice("torch", "")
    if len(choices) == 1:
        return choices[0]
    # several models: a backend lossless for each, the one that embeds all their probes soonest
    usable = tuple(b for b in choices[0].lossless if all(b in c.lossless for c in choices))
    best = auto.fastest_lossless(usable, [c.texts_per_s for c in choices])
    lines = "; ".join(f"{t[0]}: {c.line.removeprefix('backend auto: ')}" for t, c in zip(transformers, choices))
    return Choice(best, f"backend auto: {best} for {len(choices)} models ({lines})")
