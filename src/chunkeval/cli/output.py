"""How commands print what is not a table: JSON documents, times and missing numbers; and the net every line
the command prints passes (`Visible`), so that no text from data drives the terminal."""

from __future__ import annotations

import contextlib
import json
import math
import sys

from chunkeval.report.terminal import fold
from chunkeval.visible import visible_lines


class Visible:
    """A text stream that writes to `stream` with every control character but line breaks, carriage returns and
    tabs made visible (`chunkeval.visible.visible_lines`): the net under the names each command already shows
    with `visible`, for every line the command prints (JSON escapes its own: `json` writes `\\u001b`)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(visible_lines(text))

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, fileno, isatty, encoding, buffer
        return getattr(self.stream, name)


def to_reader(text: str, stream=None) -> str:
    """A message chunkeval says on stderr (an error, a warning, a notice) as `stream` (stderr) should get it: on a
    terminal, where a person reads it, each line folded within 120 columns, its words going on indented (a path or a
    URL is never cut); off a terminal (a log, a pipe, a test, a scheduler's capture) one line whatever its length, so
    that one message is one line to grep and to the rule that bad input ends in one line."""
    stream = sys.stderr if stream is None else stream
    try:
        person = stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed or no file
        person = False
    return "\n".join(fold(line) for line in text.split("\n")) if person else text


@contextlib.contextmanager
def visible_output():
    """stdout and stderr wrapped in `Visible` while the block runs (a command), as they were after it."""
    was = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Visible(was[0]), Visible(was[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = was


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
