"""Result files are written whole or not at all: under a temporary name, then renamed."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from chunkeval.errors import as_fault
from chunkeval.faults import checkpoint


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
    from chunkeval.errors import InputError

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
        for tmp, path in staged:
            os.replace(tmp, path)
    except OSError as exc:
        raise (as_fault(exc) or exc) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
