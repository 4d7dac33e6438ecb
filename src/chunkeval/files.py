"""Result files are written whole or not at all: under a temporary name, then renamed."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq


def hash_file(path: Path, digest=None):
    """Feed a file's bytes, 1 MiB at a time, into `digest` (a new SHA-256 by default); returns it."""
    digest = digest or hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest


def write_tables(tables: dict[Path, pa.Table]) -> None:
    """Write every table (.parquet, else CSV) to a temporary name first, then rename them all."""
    staged = []
    try:
        for path, table in tables.items():
            path = Path(path)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            staged.append((tmp, path))
            if path.suffix.lower() == ".parquet":
                pq.write_table(table, tmp)
            else:
                pacsv.write_csv(table, tmp)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """A text file (UTF-8), written under a temporary name then renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
