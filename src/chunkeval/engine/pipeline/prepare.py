"""The one preparation of a run, whoever asks for it: `chunkeval run` and `sweep`, `chunkeval.evaluate` and the
`evaluate` flow each call `prepare` and then run the steps (`chunkeval.engine.pipeline.sweep.STEPS`). It takes
the experiment once validated (by `Experiment.from_dict`, which every way of giving settings goes through) and
makes the run's state: the device checked, `backend: auto` resolved (`chunkeval.engine.embedding.resolution`),
the embedders made, the served models probed, with `record` the inputs fingerprinted, the inputs read and
checked, and the grid's size let start (`chunkeval.engine.pipeline.grid`), in that order, each once. How the
caller asks the user (a terminal, a keyword, a flow parameter) is the `Consent` it passes in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.embedding.resolution import resolution, say_choice
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.grid import Consent, check_grid, check_race_budget
from chunkeval.engine.pipeline.records import RunState
from chunkeval.engine.pipeline.sweep import begin, late_notice, load
from chunkeval.paths import cache_dir
from chunkeval.progress import Stopwatch, notice


def prepare(
    exp: Experiment,
    *,
    embedders: Embedders | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    consent: Consent = Consent(),
    record: bool = False,
    if_changed: bool = False,
    skip: Callable[[RunState], bool] | None = None,
    clock: Stopwatch | None = None,
    cache: Path | None = None,
) -> RunState:
    """The run's state, ready for its steps from `chunk` on (`load` done), or from `load` where `skip` says so
    (an `--if-changed` run that will be skipped reads nothing, nor says how its gold set met its corpus).

    `embedders` (else made under `cache`, by default $CHUNKEVAL_HOME's) are made for the experiment; with
    `record` (a run the warehouse records) the inputs are fingerprinted and, unless `if_changed`, its served
    models probed meanwhile; `consent` lets a large grid start. Bad input fails here, in one line, before anything
    is written. `clock` gets the seconds of `checks` (a model built on first use is a stage of its own) and
    `loading`."""
    clock = clock or Stopwatch()
    with clock.stage("checks"):
        exp = exp.checked_for_device(device)
        exp, backend_line, fresh = resolution(exp, device)  # backend auto: the one chosen, recorded with why
        made = embedders or Embedders(cache or cache_dir(), batch_size, device=device)
        state = begin(exp, made.for_experiment(exp), "none" if if_changed else "run", fingerprint=record)
        state.backend_auto = backend_line
    if skip is None or not skip(state):
        with clock.stage("loading"):  # said by no line of its own: bad input is then the one line
            state = load(state)
    check_grid(exp, state.embedders, consent)
    if state.inputs is not None:
        check_race_budget(exp, state.inputs.gold.n_queries)
    say_choice(backend_line, fresh)  # once the inputs are checked: bad input is the one line a mistake prints
    left_out = late_notice(exp)
    if left_out:
        notice(left_out)
    state.clock = clock
    return state
