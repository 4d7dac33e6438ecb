"""Reading plain input files: text, CSV, JSONL and their rows, each validated as it is read.

Every reader raises `InputError` naming the file, the row and what is wrong, before anything is computed.
Rows are data rows counted from 1 (a CSV header is not a row, a JSONL file's first line is row 1).
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from chunkeval.errors import InputError
from chunkeval.limits import HEADER_BYTES, INPUT_BYTES, head, json_loads, read_bytes, regular_file, short
from chunkeval.vocabulary import close_matches, folded

log = logging.getLogger("chunkeval")

# --------------------------------------------------------------------------- plain files


def read_text(path: Path) -> str:
    """A UTF-8 text file, newlines normalized as Python's `open()` does (offsets are `str` positions)."""
    path = regular_file(path)  # a FIFO or a device is refused before it is opened
    raw = read_bytes(path, INPUT_BYTES, "file")  # and when opened: one swapped in meanwhile is never waited on
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (invalid byte at offset {exc.start})", path) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def nonempty(text: str, path: Path) -> str:
    if not text.strip():
        raise InputError("file is empty", path)
    return text


def _check_head(path: Path, check) -> None:
    """`check(first_line)` on the file's first line, read from its first bytes alone (limits.HEADER_BYTES):
    a file with a wrong header is refused before the rest of it is read."""
    raw = head(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.lstrip(b"\r\n").split(b"\n", 1)
    if len(lines) == 1 and len(raw) >= HEADER_BYTES:
        raise InputError(f"no line ends within the first {HEADER_BYTES:,} bytes", path)
    try:
        first = lines[0].decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (invalid byte at offset {exc.start})", path) from None
    if first.strip():
        check(first)


def _check_columns(required, columns: list[str], path: Path) -> None:
    """The one line of a header without a required column: what it has, and the column a typo most looks like."""
    missing = [c for c in required if c not in columns]
    if missing:
        close = close_matches(missing[0], columns)
        said = f"; is {close[0]} meant to be {missing[0]}?" if close else ""
        raise InputError(f"missing column(s) {', '.join(missing)}; found {folded(columns) if columns else 'none'}{said}",
                         path)  # fmt: skip


def read_csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(row number, row) pairs of a CSV file that must have the `required` columns."""

    def header(line: str) -> None:
        try:  # the first line as its bytes gave it: a CR of a CRLF file ends it, a lone CR inside breaks it
            columns = next(csv.reader([line.rstrip("\r")]), [])
        except csv.Error as exc:
            raise InputError(f"malformed CSV header ({exc})", path, 1) from None
        _check_columns(required, columns, path)

    _check_head(path, header)
    text = nonempty(read_text(path), path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:  # every csv.Error of the file, its header's included, is one line naming the row
        _check_columns(required, reader.fieldnames or [], path)
        rows = list(reader)
    except csv.Error as exc:
        raise InputError(f"malformed CSV ({exc})", path, reader.line_num) from None
    if not rows:
        raise InputError("no data rows", path)
    for number, row in enumerate(rows, start=1):
        if None in row or any(row.get(c) is None for c in required):
            raise InputError("wrong number of fields", path, number)
        yield number, row


def jsonl_object(line: str, required: tuple[str, ...], path: Path, number: int) -> dict:
    try:
        obj = json_loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"broken JSON ({exc.msg} at column {exc.colno})", path, number) from None
    if not isinstance(obj, dict):
        raise InputError("each line must be a JSON object", path, number)
    missing = [k for k in required if k not in obj]
    if missing:
        raise InputError(f"missing key(s) {', '.join(missing)}", path, number)
    return obj


def read_jsonl_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(row number, object) pairs of a JSON Lines file whose objects must have the `required` keys."""
    _check_head(path, lambda line: jsonl_object(line, required, path, 1))
    text = nonempty(read_text(path), path)
    number = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        number += 1
        yield number, jsonl_object(line, required, path, number)


def read_table_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """CSV or JSONL rows, chosen by the file's extension (.csv, else JSON Lines)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return read_csv_rows(path, required)
    return read_jsonl_rows(path, required)


def json_value(value, path: Path, row: int, column: str):
    """A cell that holds JSON: JSONL gives it parsed, CSV gives its text."""
    if not isinstance(value, str):
        return value
    try:
        return json_loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"column {column}: broken JSON ({exc.msg})", path, row) from None


def query_id_value(value, path: Path, row: int, what: str = "query_id") -> str:
    """An id of a row (text or a whole number); `what` names it in the error (query_id, document _id)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"empty {what}", path, row)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{what} must be text or a number, got {short(value)}", path, row)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
