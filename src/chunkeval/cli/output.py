"""How commands print what is not a table: JSON documents, times and missing numbers; and the net every line
the command prints passes (`Visible`), so that no text from data drives the terminal."""

from __future__ import annotations

import contextlib
import json
import math
import sys

from chunkeval.visible import TERMINAL_WIDTH, fold, visible_lines


class Visible:
    """A text stream that writes to `stream` with every control character but line breaks, carriage returns and
    tabs made visible (`chunkeval.visible.visible_lines`): the net under the names each command already shows
    with `visible`, for every line the command prints (JSON escapes its own: `json` writes `\\u001b`).

    With `fold` (stderr on a terminal, where a person reads it) a line longer than 120 columns (an error, a warning, a
    notice, whoever prints it) is folded, its words going on indented, a path or a URL never cut. Off a terminal (a
    log, a pipe, a scheduler's capture, a test) a message stays one line, word for word, for grep and for the rule
    that bad input ends in one line. A line that rewrites itself (`\\r`, a progress bar) is left whole."""

    open_line = [False]  # a line redrawn in place (`\r`, a progress bar) not yet ended, on either stream: one terminal

    def __init__(self, stream, fold: bool = False):
        self.stream = stream
        self.fold = fold

    def write(self, text: str) -> int:
        text = visible_lines(text)
        if self.fold and "\r" not in text:
            text = "\n".join(fold(line) if len(line) > TERMINAL_WIDTH else line for line in text.split("\n"))
        if not text:
            return 0
        if Visible.open_line[0] and not text.startswith(("\r", "\n")) and _is_terminal(self.stream):
            text = "\n" + text  # a bar is ended before any other line: never `…29528/29528 84 schunkeval: …`
        if "\r" in text or Visible.open_line[0]:
            Visible.open_line[0] = "\r" in text.rsplit("\n", 1)[-1]
        return self.stream.write(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, fileno, isatty, encoding, buffer
        return getattr(self.stream, name)


@contextlib.contextmanager
def visible_output():
    """stdout and stderr wrapped in `Visible` while the block runs (a command), as they were after it."""
    was = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Visible(was[0]), Visible(was[1], fold=_is_terminal(was[1]))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = was


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed, or no file behind it
        return False


def print_prose(text: str) -> None:
    """A sentence on stdout within 120 columns, its words going on indented (a path or a URL is never cut)."""
    print(fold(text))


def print_json(doc, **options) -> None:
    """`doc` as indented JSON on stdout, ended by a newline."""
    json.dump(doc, sys.stdout, indent=2, **options)
    print()


def print_json_rows(rows: list[dict]) -> None:
    """A JSON list of flat row objects on stdout, one row per line (each by the C encoder: `json.dump` with an
    indent encodes in Python, a second for 10,000 runs)."""
    body = ",\n  ".join(json.dumps(r) for r in rows)
    sys.stdout.write(f"[\n  {body}\n]\n" if rows else "[]\n")


def clean(value):
    """NaN as JSON's null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def iso(value) -> str | None:
    """A UTC time of the warehouse as ISO 8601 to the second."""
    return None if value is None else value.isoformat(timespec="seconds") + "Z"
