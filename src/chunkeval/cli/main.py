"""The `chunkeval` command: the parser built from the command modules (`chunkeval.cli.commands`), and
the dispatch. Bad input ends with one line on stderr and exit status 2; the table of every exit status is
`chunkeval.errors.EXIT_CODES` (shown at the end of `--help`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading

from chunkeval import progress
from chunkeval._version import __version__
from chunkeval.cli.commands import COMMANDS, command_module, summary
from chunkeval.cli.output import visible_output
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import EXIT_FAULT, EXIT_INPUT, InputError, as_fault, exit_code_table
from chunkeval.limits import NAME_LENGTH, check_name, check_path_length
from chunkeval.paths import check_home, home
from chunkeval.visible import visible_lines
from chunkeval.vocabulary import close_matches, not_one_of, unknown_name

log = logging.getLogger("chunkeval")


_GIVEN: list[str] = []  # the command line being parsed, for what a usage mistake looks like (`_Parser.error`)
_ROOT_FLAGS: set[str] = set()  # chunkeval's own flags (-v, --version), which no command has


class _Parser(argparse.ArgumentParser):
    """Usage mistakes end like every other bad input: one line, exit status 2, and where a flag or a command is
    misspelt, the one it looks like (`did you mean --experiment?`), however argparse came to stumble on it (an
    unknown flag, a flag's value read as a command, a required flag missing). A flag is never taken by its first
    letters (argparse's abbreviations): `run --chunk-size 100` ran the grid of `--chunk-sizes 100` without a word and
    recorded it; a flag not spelt whole is a mistake, with the flag it looks like."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False  # every command's parser: subcommands are made of this class
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"{self.prog}: error: {self._explained(message)} (see --help)\n")

    def _explained(self, message: str) -> str:
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        for token in (t.split("=", 1)[0] for t in _GIVEN if t.startswith("--") and len(t) > 2):
            if token not in flags and token not in _ROOT_FLAGS:
                hint = _flag_hint(token, flags)  # else a flag of a command misspelt itself (`rnu --experiment x`)
                if hint or (message.startswith("unrecognized arguments") and token in message.split()):
                    return f"unknown flag {token}" + (f"; {hint}" if hint else "")
        bad = re.match(r"argument (\S+): invalid choice: '(.*?)' \(choose from", message)
        if bad and bad.group(1) in self._option_string_actions:  # a flag's value
            return not_one_of(bad.group(1), bad.group(2), self._option_string_actions[bad.group(1)].choices)
        subcommands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if bad and subcommands:
            return unknown_name("command", bad.group(2), subcommands[0].choices)
        return message if len(message) <= 100 else message[:100] + "…"


def _flag_hint(token: str, flags: list[str]) -> str:
    """`did you mean …?` for a flag not spelt whole: the flags it begins (`--exp` → `--experiment`), else those it
    looks like, compared without their dashes (which every flag shares)."""
    name = token.lstrip("-")
    if len(name) < 2:  # `---` or `--x`: no flag to guess
        return ""
    begun = sorted(f for f in flags if f[2:].startswith(name))
    close = begun[:3] or ["--" + c for c in close_matches(name, [f[2:] for f in flags])]
    return f"did you mean {' or '.join(close)}?" if close else ""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `chunkeval`. Given a command line, only the command it names is built whole (its module
    imported, its flags declared); every other command is a name and its line of help, which is all that `--help`
    and a misspelt command need: a command pays for its own imports and no other's. With no command line, every
    command is built (what the tests and the docs read of the options)."""
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    parser = _Parser(
        prog="chunkeval",
        description="Measure how well chunking, an embedding model and a retrieval depth k find the text that answers each question.",
        epilog=exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"chunkeval {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (model loading, texts embedded)")
    _ROOT_FLAGS.update(parser._option_string_actions)
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name in COMMANDS:
        if chosen is None or name == chosen:
            command = command_module(name)
            command.add_parser(sub).set_defaults(warehouse_session=command.WAREHOUSE_SESSION)
        else:
            sub.add_parser(name, help=summary(name), add_help=False)
    _bound_whole_numbers(parser)
    return parser


def _bound_whole_numbers(parser: argparse.ArgumentParser) -> None:
    """Every whole-number flag of every command reads a number from 0 to `MAX_INT` (`options.whole_number`), so
    that none reaches a query or an allocation as -1 or 10**23 (each command's own lower bound still holds); the
    experiment settings' flags are checked by the settings table, as the setting is however it arrives."""
    from chunkeval.cli.options import is_setting_flag, whole_number  # not for --version: its 0.1 s are Python's

    for action in parser._actions:
        if action.type is int and not is_setting_flag(action):
            action.type = whole_number
        for child in (action.choices or {}).values() if isinstance(action, argparse._SubParsersAction) else ():
            _bound_whole_numbers(child)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of the message."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


class _Formatter(logging.Formatter):
    """`chunkeval: WARNING: …`, and a notice (`chunkeval.progress.notice`) as `chunkeval: …`."""

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, progress.NOTICE, False):
            return visible_lines(f"chunkeval: {record.getMessage()}")
        return visible_lines(super().format(record))


def configure_logging(verbose: bool) -> None:
    """chunkeval's own messages as `chunkeval: WARNING: …` lines on stderr (a notice without its level);
    other libraries' loggers (Prefect's among them) keep their own handlers."""
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_Formatter("chunkeval: %(levelname)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that a terminated run ends as an interrupted one does:
    recorded failed, its temporary server stopped, nothing left running."""


_SIGNALLED: list[int] = []  # the signals this command received: what an exception after one is the effect of


def _terminate(signum, frame):
    _SIGNALLED.append(signum)
    raise Terminated()


def _interrupt(signum, frame):
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt()


def internal_error(exc: BaseException) -> str:
    """The one line of an exception no part of chunkeval expected (a bug): its traceback goes to a file under
    `$CHUNKEVAL_HOME/logs`, not the terminal; exit status 4, never 1 (which means "a regression")."""
    import datetime
    import traceback

    what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")[:200]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = home() / "logs" / f"internal-error-{stamp}-{os.getpid()}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        where = f"the traceback is in {path}"
    except (OSError, InputError):  # an unwritable home: the line still says what happened
        where = "the traceback could not be written under $CHUNKEVAL_HOME/logs"
    return f"chunkeval: error: an internal error ({what}): please report it; {where}"


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command the arguments chose, however deep (`gold check`)."""
    while parser._subparsers:
        action = next(a for a in parser._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
        chosen = getattr(args, action.dest, None)
        if not chosen or chosen not in action.choices:
            break
        parser = action.choices[chosen]
    return parser


class _WithoutPandas:
    """While a command runs, pyarrow and chunkeval cannot import pandas (as where pandas is not installed), unless
    pandas is loaded already. pyarrow asks for pandas on the first array it makes from Python values (its C++
    conversion looks for pandas' NA and NaT; its shim, whether a value is a pandas object): 0.3 to 0.5 s of every
    command, for objects no command is given. pyarrow takes a pandas that fails to import as absent, which is what the
    commands need; chunkeval's own code never imports pandas but in the Python API's `Results.to_pandas`, which no
    command calls. Every other library imports it as usual (transformers asks whether pandas is there, and may load
    it): the import is refused only where the code that asked is pyarrow's or chunkeval's (pyarrow's C++ asks from
    the Python frame that made the array). docs/performance.md ("Commands"); test_first_run holds each command's
    imports."""

    REFUSED_FOR = ("pyarrow", "chunkeval")

    def find_spec(self, name, path=None, target=None):
        if name != "pandas" and not name.startswith("pandas."):
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back  # the import machinery: the code that asked is above it
        asker = frame.f_globals.get("__name__", "") if frame is not None else ""
        if asker.partition(".")[0] in self.REFUSED_FOR:
            raise ModuleNotFoundError("pyarrow, within chunkeval's commands, does without pandas", name=name)
        return None

    def __enter__(self):
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self)


def main(argv: list[str] | None = None) -> int:
    with visible_output():  # no text from data drives the terminal, whatever prints it
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    _GIVEN[:] = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = build_parser(_GIVEN)
    args, extra = parser.parse_known_args(argv)
    if extra:  # an unknown flag: what it looks like, among the flags of the command it was given to
        _command(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_INPUT
    in_main_thread = threading.current_thread() is threading.main_thread()
    _SIGNALLED.clear()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    before = signal.signal(signal.SIGINT, _interrupt) if in_main_thread else None
    try:
        # the deepest path a command writes under the home: a report of an experiment of the longest name
        check_path_length(
            home() / "warehouse" / "reports" / ("n" * NAME_LENGTH) / f"{'r' * 24}.html", "$CHUNKEVAL_HOME"
        )
        check_home()  # a symlink loop, a file on its way: one line now, not an OSError where it is first made
        for dest in ("experiment", "prune_experiment"):  # a name may become a path: checked before any use
            if getattr(args, dest, None) is not None:
                check_name(getattr(args, dest))
        with contextlib.ExitStack() as session, _WithoutPandas():
            return args.func(args, WarehouseAccess(session if args.warehouse_session else None))
    except InputError as exc:
        print(f"chunkeval: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"chunkeval: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as exc:  # noqa: BLE001 - a fault of the machine, else a bug: one line either way
        if _SIGNALLED:  # a library turned the signal into its own error (DuckDB: "Query interrupted")
            terminated = _SIGNALLED[-1] == signal.SIGTERM
            print(f"chunkeval: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
            return 143 if terminated else 130
        from chunkeval.flows.temporary_server import as_unreachable  # Prefect's errors, where a command met them

        fault = as_fault(exc) if isinstance(exc, OSError) else as_unreachable(exc)  # a Prefect server down: 4
        print(f"chunkeval: error: {fault}" if fault else internal_error(exc), file=sys.stderr)
        return fault.exit_code if fault else EXIT_FAULT
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, before)


if __name__ == "__main__":
    sys.exit(main())
