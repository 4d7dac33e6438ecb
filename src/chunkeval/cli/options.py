"""Options that more than one command takes, each declared once here, and what turns their values into
the library's: the experiment settings of `run` and `sweep` (made from the settings table of
`chunkeval.engine.settings.table`, one flag per setting), `--experiment`, `--run`, `--metric`,
`--alpha`, `--config`, `--threshold`, `--json`, the run-file options of `compare` and `evaluate-run`.

The checks of values that the Python API and the warehouse take too live beside what they check, in
the layer below: metric names in `chunkeval.stats.aggregate`, alpha and the regression threshold in
`chunkeval.analysis.comparisons`, k and every setting's range in `chunkeval.engine.settings.table`, the batch size in the embedding.
"""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chunkeval.engine.settings.table import LARGE_GRID, Setting, parse_ints, read_flag
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, short
from chunkeval.vocabulary import (
    AXES,
    CONFIG_KEYS,
    GOLD_FORMATS,
    NUMBER_KEYS,
    check_metric,
    check_metrics,
    folded,
    split_flags,
    unknown_name,
)

if TYPE_CHECKING:
    from chunkeval.engine.pipeline.experiment import Experiment

# --------------------------------------------------------------------------- experiment settings


@functools.cache
def _settings() -> dict[str, Setting]:
    """The settings table by name, read where a command declares or reads a setting's flag: the experiment's
    module (and what it imports) is loaded by the commands that take settings, not by every command."""
    from chunkeval.engine.pipeline.experiment import SETTINGS  # on demand: the engine, for the commands of settings

    return {s.name: s for s in SETTINGS}


def add_experiment_flags(p: argparse.ArgumentParser) -> None:
    """An experiment file and the flags that override its settings (`run`, `sweep`): one flag per setting of
    the settings table that has one (`chunkeval.engine.settings.table`), then how to embed."""
    p.add_argument(
        "experiment_file",
        nargs="?",
        metavar="experiment.yaml",
        help="an experiment file; flags given as well override its settings",
    )
    g = p.add_argument_group("experiment settings")
    for s in _settings().values():
        if s.flag:
            add_setting_flag(g, s)
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="let the experiment file (or the recorded run) run module:function chunkers and retrievers of MODULE, "
        "as if it listed MODULE under plugins: (repeatable); plug-ins named by flags need none",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        help="texts per embedding batch (default 16 on a CPU; on a GPU, what a quarter of its free memory holds; "
        "1024 for a static model such as minilm-static)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="where to embed: auto (a GPU when torch sees one, else the CPU), cpu, cuda or cuda:N",
    )
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"run a grid of more than {LARGE_GRID} configurations without asking (as the experiment key "
        "max_configurations does); off a terminal such a grid needs one of them",
    )


def add_setting_flag(p, s: Setting, help: str | None = None) -> None:
    """The flag of setting `s`, as its table entry describes it (`help` replaces its own)."""
    kwargs = {"help": help or s.help}
    if s.metavar:
        kwargs["metavar"] = s.metavar
    if s.choices and s.kind != "names":  # a list's values are checked one by one once split (the settings table)
        kwargs["choices"] = s.choices
        if not s.metavar and len(",".join(s.choices)) > 40:  # a usage line of every choice would pass 120 columns
            kwargs["metavar"] = s.name.upper()
    if s.kind == "bool":
        kwargs.update(action="store_true", default=None)
    elif s.kind == "int":
        kwargs["type"] = int
    elif s.kind == "number":
        kwargs["type"] = float
    if s.repeatable:
        kwargs.update(action="extend", nargs="+")
    p.add_argument(s.flag, **kwargs).chunkeval_setting = s.name


def is_setting_flag(action: argparse.Action) -> bool:
    """Whether the flag is a setting's (`add_setting_flag`), whose values the settings table checks."""
    return getattr(action, "chunkeval_setting", None) is not None


def gives_settings(args: argparse.Namespace) -> bool:
    """Whether any experiment setting was given on the command line (not --batch-size or --device: giving a
    setting defines an experiment)."""
    return any(s.flag and getattr(args, s.dest, None) not in (None, [], ()) for s in _settings().values())


def experiment_inputs(args: argparse.Namespace, exp: Experiment) -> list[str]:
    """The files and folders a command of this experiment reads (its file, corpus folders, gold files, local
    model folders): no output may replace them (`chunkeval.files.check_output`)."""
    found = [getattr(args, "experiment_file", None)]
    for key in ("corpus_dir", "questions", "beir", "queries", "qrels"):
        value = getattr(exp, key)
        found += [value] if isinstance(value, str) else list(value)
    found += [m for m in (*exp.model, *exp.reranker) if isinstance(m, str) and Path(m).is_dir()]
    return [f for f in found if f]


def experiment_from_args(args: argparse.Namespace, named: Sources | None = None, name: str | None = None) -> Experiment:
    """The experiment of the file given (else the `named` one's settings, else the built-in defaults) changed by
    the flags given, read and validated once (`Experiment.from_dict`)."""
    from chunkeval.engine.embedding import check_batch_size, check_device  # the engine, on demand
    from chunkeval.engine.pipeline.experiment import Experiment  # (the commands that run an experiment)
    from chunkeval.engine.settings.plugins import check_plugin_modules  # (idem)

    check_batch_size(args.batch_size)
    check_device(args.device)
    allow = tuple(check_plugin_modules(args.plugin or (), "--plugin"))
    if args.experiment_file:
        path = Path(args.experiment_file)
        named = Sources(Experiment.file_settings(path), path.parent, str(path), trusted=False)
    named = named or Sources({})
    flags = {s.name: read_flag(s, getattr(args, s.dest)) for s in _settings().values() if s.flag}
    flags = {k: v for k, v in flags.items() if v not in (None, (), [])}
    if name:
        flags["name"] = name
    try:
        return Experiment.from_dict(named.data, named.base, named.source, named.trusted, allow, overrides=flags)
    except InputError as exc:
        raise _blamed_on_flag(exc, flags) from None


def _blamed_on_flag(exc: InputError, flags: dict) -> InputError:
    """The error of a setting whose value a flag gave names the flag, not the file whose value the flag replaced:
    `--k: k must be at least 1, got 0` (the setting is the one its first words name)."""
    words = re.split(r"[\s:'\"]+", exc.message)[:3]
    for s in _settings().values():
        if (
            s.flag and s.name in flags and (s.name in words or s.name.removesuffix("s") == words[0])
        ):  # overlap, of overlaps
            return InputError(exc.message, s.flag)
    return exc


@dataclass(frozen=True)
class Sources:
    """Settings as written where they come from, not yet read: an experiment file's (relative paths from its
    folder `base`), or a recorded run's; `trusted` where no plug-in check applies (settings typed by the user)."""

    data: dict
    base: Path | None = None
    source: str | None = None
    trusted: bool = True


def add_strict(p, help: str | None = None) -> None:
    """`--strict` of commands that read a corpus (the setting `strict`; `help`: what it means to this command)."""
    add_setting_flag(p, _settings()["strict"], help)


def add_anchor_similarity(p, help: str | None = None) -> None:
    """`--anchor-similarity` of commands that place text in a corpus (the setting `anchor_similarity`)."""
    add_setting_flag(p, _settings()["anchor_similarity"], help)


def add_html(p) -> None:
    """`--html full|main` of commands that read a corpus (the setting `html`; docs/formats.md)."""
    add_setting_flag(p, _settings()["html"])


def add_corpus_filter(p, help: str) -> None:
    """`--corpus ID …` of commands that read a corpus (the setting `corpus`), with the command's own help."""
    add_setting_flag(p, _settings()["corpus"], help)


# --------------------------------------------------------------------------- what a command reads


def add_experiment(
    p: argparse.ArgumentParser, help: str | None = None, *, required: bool = False, dest: str = "experiment"
) -> None:
    p.add_argument("--experiment", metavar="NAME", required=required, dest=dest, help=help)


def add_run(p: argparse.ArgumentParser, help: str | None = None, *, required: bool = False, many: bool = False) -> None:
    """`--run ID`, of a run recorded in the warehouse (given twice where `many`)."""
    p.add_argument("--run", action="append" if many else "store", metavar="ID", required=required, help=help)


def add_metric(p: argparse.ArgumentParser, help: str, required: bool = True) -> None:
    """`--metric NAME`, which the command checks with `chunkeval.stats.aggregate.check_metric`."""
    p.add_argument("--metric", required=required, help=help)


def add_metric_flags(p) -> None:
    """`--metrics M1,M2` and `--wide`: the columns of a command's table (run, sweep, report, compare, trend)."""
    p.add_argument(
        "--metrics",
        action="append",
        metavar="M1,M2",
        help="the metrics the table shows (comma-separated; default: the headline metrics of the run's kind of gold)",
    )
    p.add_argument("--wide", action="store_true", help="show every metric measured (the table may pass 120 columns)")


def metric_flags(args: argparse.Namespace) -> tuple[list[str] | None, bool]:
    """`--metric NAME` (compare, trend) or `--metrics M1,M2` and `--wide`, not both: the metrics named, checked
    (None where none is), and whether `--wide` was given."""
    if getattr(args, "metric", None) is not None:
        if args.metrics or args.wide:
            raise InputError("give --metric NAME or --metrics M1,M2 (or --wide), not both")
        return [check_metric(args.metric)], False
    if args.metrics is None:
        return None, args.wide
    named = split_flags(args.metrics, "--metrics")
    if not named:
        raise InputError("--metrics takes metric names, comma-separated, e.g. --metrics span_recall,mrr")
    return check_metrics(named), args.wide


def add_alpha(p: argparse.ArgumentParser) -> None:
    """`--alpha`, which the command checks with `chunkeval.analysis.comparisons.check_alpha`."""
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level after the correction for the call's checks (default 0.05)",
    )


def add_threshold(p: argparse.ArgumentParser, help: str) -> None:
    """`--threshold`, which the command checks with `chunkeval.analysis.comparisons.check_threshold`."""
    p.add_argument("--threshold", type=float, default=0.02, help=help)


def add_config(p: argparse.ArgumentParser, help: str) -> None:
    """`--config KEY=VALUE`, repeatable; `config_filter` reads it."""
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help=help)


LABEL_KEYS = {
    a.label: a.key for a in AXES if a.label and a.label != a.key
}  # size → chunk_size, overlap → chunk_overlap


def config_filter(values: list[str] | None, what: str = "--config") -> dict:
    """The configuration settings of `--config` (key=value pairs, comma-separated or repeated; a key as a label
    writes it, `size=200`, names its configuration key); `what` names them as the caller's user gave them (the
    Python API's `config`)."""
    out = {}
    for item in split_flags(values, what):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"{what} takes key=value pairs (keys: {folded(CONFIG_KEYS)}), got {short(item)}")
        key = LABEL_KEYS.get(key.strip(), key.strip())  # size=200 as a label writes it: chunk_size=200
        if key not in CONFIG_KEYS:
            raise InputError(unknown_name(f"{what} key", key, [*CONFIG_KEYS, *LABEL_KEYS]))
        number = key in NUMBER_KEYS and value.strip() not in ("", "none", "null")  # candidates=none: no reranker
        out[key] = parse_ints(value, f"{what} {key}")[0] if number else (None if key in NUMBER_KEYS else value.strip())
    return out


def add_json(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_run_file_options(p: argparse.ArgumentParser, format_help: str, k_help: str) -> None:
    """`--format` and `--k` of ranked-list files (`--k` is checked with `chunkeval.engine.settings.table.check_k`)."""
    p.add_argument("--format", default="auto", choices=list(GOLD_FORMATS), help=format_help)
    p.add_argument("--k", type=int, default=10, help=k_help)


def number_in(value, least: float, most: float, flag: str) -> None:
    """A number given on the command line within [least, most] (`gold generate`, `gold judge`)."""
    if not least <= value <= most:
        raise InputError(f"{flag} takes a number from {least:g} to {most:g}, got {value:g}")


def whole_number(text: str) -> int:
    """A whole-number flag's value: 0 to `MAX_INT` (docs/limits.md); what argparse says otherwise is one line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{short(text)} is not a whole number") from None
    if value < 0:  # the command's own lower bound (--last at least 1) is said by the command: no range claimed here
        raise argparse.ArgumentTypeError(f"{short(text)} is below 0")
    if value > MAX_INT:
        raise argparse.ArgumentTypeError(f"{short(text)} is over {MAX_INT} (docs/limits.md)")
    return value


whole_number.__name__ = "int"  # what the flags' type was, and is still (tests/data/cli_options.json records it)


def check_at_least_one(value: int | None, flag: str) -> int | None:
    """A count given on the command line (--last, --chunk-size): at least 1 where given."""
    if value is not None and value < 1:
        raise InputError(f"{flag} must be at least 1, got {value}")
    return value
