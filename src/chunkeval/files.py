"""Result files are written whole or not at all: under a temporary name, then renamed."""

from __future__ import annotations

import csv
import hashlib
import os
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from chunkeval.errors import InputError, as_fault
from chunkeval.faults import checkpoint
from chunkeval.limits import short
from chunkeval.paths import home as chunkeval_home


def hash_file(path: Path, digest=None):
    """Feed a file's bytes, 1 MiB at a time, into `digest` (a new SHA-256 by default); returns it."""
    digest = digest or hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest


_folder_hashes: dict[tuple, str] = {}


def hash_folder(root: Path, skip: frozenset[str] = frozenset()) -> str:
    """SHA-256 (hex) over the relative path and content of every file under `root` but those named in
    `skip`, remembered per (path, size, mtime) of its files: a changed file is hashed again."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in skip)
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _folder_hashes:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            hash_file(path, digest)
        _folder_hashes[key] = digest.hexdigest()
    return _folder_hashes[key]


def pid_alive(pid: int) -> bool:
    """Whether a process of this host is still running (a process we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def check_writable_dir(path: Path, what: str) -> Path:
    """Fail early, writing nothing, when `path` (a folder, made later where missing) cannot be created or written."""
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"cannot create {what} here: {probe} is a file, not a folder", path)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {what} here: {probe} is not writable", path)
    return path


# chunkeval's own folders under $CHUNKEVAL_HOME: no output a user names is written into them
OWN_FOLDERS = ("warehouse", "cache", "models", "indexes", "backends", "served", "experiments")

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is ('a FIFO', …); None for a regular file."""
    return next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


_SEPARATORS_ALWAYS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # line breaks of every line-based file


def field(value, separators: str, what: str, path=None) -> str:
    """`value` as a field of a file whose `separators` (and line breaks) cannot be escaped, such as a TSV file or
    a TREC run: refused in one line naming the value and the file where it holds one, or is empty, so that no
    value forges a row or a column."""
    text = str(value)
    if not text or any(c in separators or c in _SEPARATORS_ALWAYS for c in text):
        said = "is empty" if not text else "holds a separator of the file (a tab, a space or a line break)"
        raise InputError(f"{what} {short(text)} {said}: it would forge a row or a column", path)
    return text


class CsvRows:
    """Rows written as CSV to a text stream, one line per row, fields quoted where they need it. Python's csv
    quotes a field for the characters of its line ending only, so a lone carriage return (`\\r`), which ends a
    row for most readers, would forge one: a row with one in a field has every field quoted."""

    def __init__(self, stream):
        self.minimal = csv.writer(stream, lineterminator="\n")
        self.quoted = csv.writer(stream, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def writerow(self, values) -> None:
        values = list(values)
        (self.quoted if any(isinstance(v, str) and "\r" in v for v in values) else self.minimal).writerow(values)


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output(
    path: Path | str,
    inputs: Iterable[Path | str | None] = (),
    *,
    folder: str = "",
    what: str = "output",
    home: Path | None = None,
) -> Path:
    """The one rule for every output a user names (docs/limits.md, "Outputs"); checked before any work,
    writing nothing. Returns the path to write: absolute, symlinks resolved (a link to a file replaces the
    file it names). Refused with an `InputError` (one line, exit status 2):

    - an output whose folder is missing or not writable;
    - an existing file that is not a regular file (a folder, a device, a FIFO, a socket, a link to one):
      `/dev/null` is never turned into a file. With `folder="new"` the output is a folder written whole
      (`extract --out`): only a missing or empty real folder is replaced; with `folder="into"`, a folder
      that files are written into (made where missing), whose files are then replaced one by one;
    - anything inside chunkeval's own folders under `$CHUNKEVAL_HOME` (`home`, default `paths.home()`):
      the warehouse (the catalogue, its WAL, the runs' Parquet files and reports), the caches, the models;
    - one of the command's own `inputs` (files, or folders whose every file counts), compared by resolved
      path and by identity (a hard link), or any path inside an input folder.

    Write the output with `write_text` / `write_tables` (a temporary file beside it, then a rename), which
    also refuse, at the rename, a target that has meanwhile become something other than a regular file."""
    named = Path(path).expanduser()
    real = Path(os.path.realpath(named))
    shown = named if real == Path(os.path.abspath(named)) else f"{named} (a link to {real})"
    if not real.parent.is_dir():
        raise InputError(f"{what} folder does not exist", real.parent)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise InputError(f"cannot check the {what} ({exc.strerror})", shown) from None
    if mode is not None:
        kind = _kind(mode)
        if folder and kind == "a folder":
            if folder == "new" and any(real.iterdir()):
                raise InputError(f"{what} must be a new or empty folder", shown)
        elif folder:
            raise InputError(f"{what} is {'a regular file' if kind is None else kind}, not a folder", shown)
        elif kind == "a folder":
            raise InputError(f"{what} is a folder, not a file", shown)
        elif kind is not None:
            raise InputError(f"{what} is {kind}, not a regular file: chunkeval replaces only regular files", shown)
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise InputError(f"{what} folder is not writable", real.parent)
    root = Path(os.path.realpath(home or chunkeval_home()))
    for own in OWN_FOLDERS:
        if _within(real, root / own):
            raise InputError(
                f"{what} is inside chunkeval's own folder {root / own}, which only chunkeval writes "
                "($CHUNKEVAL_HOME): name a path elsewhere",
                shown,
            )
    for given in inputs:
        if not given:
            continue
        source = Path(os.path.realpath(Path(given).expanduser()))
        inside = _within(real, source) if source.is_dir() else real == source
        if inside or (mode is not None and source.exists() and os.path.samefile(source, real)):
            where = "inside " if real != source and source.is_dir() else ""
            raise InputError(f"{what} is {where}the command's own input {source}: name a path elsewhere", shown)
    return real


def _replaceable(path: Path) -> None:
    """Refuse a target that exists and is not a regular file (it may have changed since `check_output`):
    `os.replace` would turn a device into a file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    kind = _kind(mode)
    if kind is not None:
        raise InputError(f"output is {kind}, not a regular file: chunkeval replaces only regular files", path)


def replace_file(tmp: Path, path: Path) -> None:
    """Rename the finished temporary file `tmp` onto `path`, which may only be missing or a regular file."""
    _replaceable(path)
    os.replace(tmp, path)


def write_tables(
    tables: dict[Path, pa.Table], point: str | None = None, compression: str | None = None, **parquet
) -> None:
    """Write every table (.parquet, else CSV) to a temporary name first, then rename them all.
    `point` names the fault-injection point between the first rename and the others; `compression` is
    Parquet's codec (pyarrow's default, snappy, when None); `parquet`, more of `pyarrow.parquet.write_table`'s
    options (encodings)."""
    staged = []
    try:
        for path, table in tables.items():
            path = Path(path)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            staged.append((tmp, path))
            if path.suffix.lower() == ".parquet":
                pq.write_table(table, tmp, **({"compression": compression} if compression else {}), **parquet)
            else:
                pacsv.write_csv(table, tmp)
        for _, path in staged:
            _replaceable(path)
        for i, (tmp, path) in enumerate(staged):
            os.replace(tmp, path)
            if i == 0 and point:
                checkpoint(point)  # one file in place, the others not yet
    except OSError as exc:
        raise (as_fault(exc) or exc) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """A text file (UTF-8), written under a temporary name then renamed."""
    write_texts({Path(path): text})


def write_texts(texts: dict[Path, str]) -> None:
    """Text files (UTF-8), each written under a temporary name first, then all renamed: a failure on the way
    leaves none of them half-written."""
    staged = []
    try:
        for path, text in texts.items():
            path = Path(path)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            staged.append((tmp, path))
            tmp.write_text(text, encoding="utf-8")
        for _, path in staged:
            _replaceable(path)
        for tmp, path in staged:
            replace_file(tmp, path)
    except OSError as exc:
        raise (as_fault(exc) or exc) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
