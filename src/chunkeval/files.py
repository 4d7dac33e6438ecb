"""Result files are written whole or not at all: under a temporary name, then renamed."""

from __future__ import annotations

import contextlib
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


# the files chunkeval writes and reads beside a file, named after it: its provenance record and review (the gold
# commands), the judged qrels and queries (`gold judge`), a sweep's per-query, per-corpus and per-slice tables and
# TREC runs. They belong to that file: an output that would replace one replaces part of an input.
COMPANION_PARTS = ("provenance.json", "review.csv", "review.html", "qrels.tsv", "queries.jsonl", "chunk_qrels.jsonl")
TABLE_PARTS = ("per_query", "by_corpus", "by_slice")


def companions(path: Path | str) -> list[Path]:
    """The companion files of `path` (`COMPANION_PARTS`, `TABLE_PARTS` with its suffix, its `.doc_runs` folder)."""
    path, out = Path(path), []
    stems = [path.name.rsplit(".", i)[0] for i in range(1, path.name.count(".") + 1)]  # j.qrels.tsv: j.qrels, j
    for stem in stems:
        out += [path.with_name(f"{stem}.{part}") for part in COMPANION_PARTS]
    out += [path.with_name(f"{path.stem}.{part}{path.suffix}") for part in TABLE_PARTS]
    return [*out, path.with_name(f"{path.stem}.doc_runs")]


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
    for given in (c for i in inputs if i for c in (i, *companions(i))):
        source = Path(os.path.realpath(Path(given).expanduser()))
        inside = _within(real, source) if source.is_dir() else real == source
        if inside or (mode is not None and source.exists() and os.path.samefile(source, real)):
            where = "inside " if real != source and source.is_dir() else ""
            raise InputError(f"{what} is {where}the command's own input {source}: name a path elsewhere", shown)
    _CHECKED[str(real.parent)] = _identity(os.stat(real.parent))
    return real


# The folders of outputs as `check_output` saw them, by resolved path: (device, inode). Written later, an output's
# folder is opened once, from `/` one component at a time without following any link, and must be that folder
# still: a folder swapped meanwhile for a link (into the warehouse, say) or for another folder is refused.
_CHECKED: dict[str, tuple[int, int]] = {}
_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _walk(folder: Path, fd: int | None = None) -> int:
    """A descriptor of `folder`, reached from `/` (or from the folder `fd` is, for a relative one) one component at
    a time, none of them a link (O_NOFOLLOW); `fd` is closed."""
    fd = os.open("/", _DIR) if fd is None else fd
    try:
        for part in folder.parts[1:] if folder.is_absolute() else folder.parts:
            step = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = step
    except OSError:
        os.close(fd)
        raise
    return fd


def open_folder(folder: Path) -> int:
    """A descriptor of the folder an output is written into: for a folder `check_output` checked (or a folder
    below one), reached without following any link and checked to be the folder it checked (else one line,
    nothing written); any other folder (chunkeval's own, under `$CHUNKEVAL_HOME`) opened as it is named."""
    folder = Path(folder)
    checked = next((f for f in (folder, *folder.parents) if str(f) in _CHECKED), None)
    if checked is None:
        return os.open(folder, _DIR)
    try:
        fd = _walk(checked)
    except OSError:
        raise InputError(
            "output folder changed since it was checked (now a link, or gone): nothing written", checked
        ) from None
    if _identity(os.fstat(fd)) != _CHECKED[str(checked)]:
        os.close(fd)
        raise InputError("output folder changed since it was checked (now another folder): nothing written", checked)
    try:
        return _walk(folder.relative_to(checked), fd) if folder != checked else fd
    except OSError:
        raise InputError("output folder is a link, or changed since it was checked: nothing written", folder) from None


@contextlib.contextmanager
def output_folder(folder: Path):
    """`open_folder(folder)` as a path through its descriptor (`/proc/self/fd/N`, Linux), for writers that take a
    path (DuckDB, a folder written whole): what they write lands in the folder opened once, whatever happens to
    its name meanwhile. Where there is no /proc, the folder's own path."""
    fd = open_folder(folder)
    try:
        through = Path(f"/proc/self/fd/{fd}")
        yield through if through.is_dir() else Path(folder)
    finally:
        os.close(fd)


def _target(fd: int, name: str, shown: Path, checked: bool) -> None:
    """Refuse, at the moment of writing, a name in the folder `fd` that exists and is not a regular file (a link,
    in a folder `check_output` checked: `os.replace` would turn a device into a file, and a link swapped in is no
    output anyone checked)."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=not checked).st_mode
    except FileNotFoundError:
        return
    kind = _kind(mode) if not stat.S_ISLNK(mode) else "a link (made after it was checked)"
    if kind is not None:
        raise InputError(f"output is {kind}, not a regular file: chunkeval replaces only regular files", shown)


def _checked_folder(path: Path) -> bool:
    return any(str(f) in _CHECKED for f in (path.parent, *path.parent.parents))


def replace_file(tmp: Path, path: Path) -> None:
    """Rename the finished temporary file `tmp` (beside `path`) onto `path`, which may only be missing or a regular
    file, within the folder opened once (`open_folder`)."""
    path = Path(path)
    fd = open_folder(path.parent)
    try:
        _target(fd, path.name, path, _checked_folder(path))
        os.replace(Path(tmp).name, path.name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def _write_staged(items: list[tuple[Path, object]], write, point: str | None = None) -> None:
    """Write each item (path, content) with `write(file, content)` to a temporary file in its folder, each folder
    opened once (`open_folder`), then check every target and rename them all: a failure on the way leaves none of
    them half-written. `point` names the fault-injection point between the first rename and the others."""
    folders: dict[Path, int] = {}
    staged: list[tuple[int, str, Path]] = []
    try:
        for path, content in items:
            path = Path(path)
            if path.parent not in folders:
                folders[path.parent] = open_folder(path.parent)
            fd = folders[path.parent]
            tmp = f".{path.name}.{uuid.uuid4().hex}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            staged.append((fd, tmp, path))
            with os.fdopen(os.open(tmp, flags, 0o666, dir_fd=fd), "wb") as fh:
                write(fh, content)
        for fd, _, path in staged:
            _target(fd, path.name, path, _checked_folder(path))
        for i, (fd, tmp, path) in enumerate(staged):
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
            if i == 0 and point:
                checkpoint(point)  # one file in place, the others not yet
    except OSError as exc:
        raise (as_fault(exc) or exc) from None
    finally:
        for fd, tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
        for fd in folders.values():
            os.close(fd)


def _write_table(fh, table: pa.Table, path: Path, compression: str | None, parquet: dict) -> None:
    if path.suffix.lower() == ".parquet":
        pq.write_table(table, fh, **({"compression": compression} if compression else {}), **parquet)
    else:
        pacsv.write_csv(table, fh)


def write_tables(
    tables: dict[Path, pa.Table], point: str | None = None, compression: str | None = None, **parquet
) -> None:
    """Write every table (.parquet, else CSV) to a temporary name first, then rename them all.
    `point` names the fault-injection point between the first rename and the others; `compression` is
    Parquet's codec (pyarrow's default, snappy, when None); `parquet`, more of `pyarrow.parquet.write_table`'s
    options (encodings)."""
    items = [(Path(path), (Path(path), table)) for path, table in tables.items()]
    _write_staged(items, lambda fh, pt: _write_table(fh, pt[1], pt[0], compression, parquet), point)


def write_text(path: Path, text: str) -> None:
    """A text file (UTF-8), written under a temporary name then renamed."""
    write_texts({Path(path): text})


def write_texts(texts: dict[Path, str]) -> None:
    """Text files (UTF-8), each written under a temporary name first, then all renamed: a failure on the way
    leaves none of them half-written."""
    _write_staged([(Path(p), t) for p, t in texts.items()], lambda fh, text: fh.write(text.encode("utf-8")))
