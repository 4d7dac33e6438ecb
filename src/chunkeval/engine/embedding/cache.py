"""The embedding cache: each model's vectors keyed by the hash of their text, in Parquet part files
(`<root>/<fingerprint>/part-*.parquet`) written whole under temporary names, so that runs share them and a
run that dies keeps what it embedded. A damaged part is set aside and its texts are embedded again."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chunkeval.errors import InputError
from chunkeval.faults import checkpoint
from chunkeval.files import write_tables, write_text
from chunkeval.limits import read_text
from chunkeval.stats.columns import numbers

log = logging.getLogger("chunkeval")
MAX_WIDTH = 65_536  # the widest vector a recorded width may say (models give a few hundred to a few thousand)


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


PART_COLUMNS = ("text_hash", "vector", "truncated")


class EmbeddingCache:
    """Vectors of one model, keyed by text hash, in `<root>/<fingerprint>/part-*.parquet`."""

    def __init__(self, root: Path, fingerprint: str):
        self.dir = Path(root) / fingerprint
        self._index: dict[str, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._truncated = np.zeros(0, dtype=bool)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # appended since the arrays were last joined
        self._seen: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        """Read part files written since the last look (by this process or another).

        A damaged part (cut short, not Parquet, wrong columns or vector width) is renamed to
        `<name>.corrupt` with one warning line; its texts are simply missing, so they are embedded again.
        """
        if not self.dir.is_dir():
            return
        new = sorted(p for p in self.dir.glob("part-*.parquet") if p.name not in self._seen)
        for path in new:
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO would hold the run: never opened
                    raise ValueError("not a regular file")
                hashes, vectors, truncated = self._read_part(path)
            except FileNotFoundError:  # renamed aside by a concurrent reader
                continue
            except (OSError, ValueError, pa.ArrowException) as exc:
                self._set_aside(path, exc)
                continue
            self._append(hashes, vectors, truncated)
            self._seen.add(path.name)

    def _read_part(self, path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
        with pq.ParquetFile(path) as part:  # not pq.read_table: it imports pyarrow.dataset, and that pandas (0.2 s)
            table = part.read()
        if sorted(table.column_names) != sorted(PART_COLUMNS):
            raise ValueError(f"columns {', '.join(table.column_names)} instead of {', '.join(PART_COLUMNS)}")
        vector = table.column("vector").type
        if not pa.types.is_fixed_size_list(vector) or not pa.types.is_floating(vector.value_type):
            raise ValueError(f"vector column of type {vector}")
        width = self.width()
        if width is not None and vector.list_size != width:
            raise ValueError(f"vectors of width {vector.list_size}, not {width}")
        hashes = table.column("text_hash")
        vectors = numbers(table.column("vector").combine_chunks().flatten()).astype(np.float32, copy=False)
        vectors = vectors.reshape(table.num_rows, -1)  # (numpy's own conversion of an Arrow array imports pandas)
        lengths = pc.min_max(pc.utf8_length(hashes)).as_py()
        if hashes.null_count or (table.num_rows and not lengths["min"] == lengths["max"] == 32):
            raise ValueError("malformed text hashes")
        if not np.all(np.isfinite(vectors)):
            raise ValueError("vectors that are not finite numbers")
        return hashes.to_pylist(), vectors, numbers(pc.cast(table.column("truncated"), pa.int8())).astype(bool)

    def width(self) -> int | None:
        """The vector width of this model's cache, recorded with its first part: a record that does not hold (not
        a regular file of a whole number from 1 to `MAX_WIDTH`) is not believed, and the parts' width is used."""
        recorded = self._recorded_width()
        if recorded is not None:
            return recorded
        return self._joined()[0].shape[1] if len(self) else None

    def _recorded_width(self) -> int | None:
        try:
            width = int(read_text(self.dir / "width", 32, "embedding cache width").strip())
        except (InputError, ValueError):
            return None
        return width if 1 <= width <= MAX_WIDTH else None

    def _set_aside(self, path: Path, exc: Exception) -> None:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning(
            "damaged embedding cache part %s (%s) moved to %s; its texts will be embedded again",
            path,
            reason,
            aside.name,
        )

    def _append(self, hashes: list[str], vectors: np.ndarray, truncated: np.ndarray) -> None:
        keep = [i for i, h in enumerate(hashes) if h not in self._index]
        if not keep:
            return
        base = len(self._index)
        for offset, i in enumerate(keep):
            self._index[hashes[i]] = base + offset
        self._pending.append((vectors[keep], truncated[keep]))  # joined when read: appending part after part
        # would otherwise copy every vector held so far each time (quadratic in the parts of a large run)

    def _joined(self) -> tuple[np.ndarray, np.ndarray]:
        """The vectors and truncated flags of every row, the parts appended since the last call joined once."""
        if self._pending:
            held = [(self._vectors, self._truncated)] if len(self._truncated) else []
            parts = held + self._pending
            self._vectors = np.concatenate([v for v, _ in parts])
            self._truncated = np.concatenate([t for _, t in parts])
            self._pending = []
        return self._vectors, self._truncated

    def __len__(self) -> int:
        return len(self._index)

    def rows(self, hashes: list[str]) -> np.ndarray:
        """Row of each hash in the cache, -1 where it is missing."""
        return np.fromiter((self._index.get(h, -1) for h in hashes), dtype=np.int64, count=len(hashes))

    def get(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vectors, truncated = self._joined()
        return vectors[rows], truncated[rows]

    def add(self, hashes: list[str], vectors: np.ndarray, truncated: np.ndarray) -> None:
        """Persist new vectors as one part file, then make them available."""
        if not hashes:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        table = pa.table(
            {
                "text_hash": pa.array(hashes, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1]),
                "truncated": pa.array(np.asarray(truncated, dtype=bool)),
            }
        )

        if self._recorded_width() is None:  # none yet, or one that does not hold: written anew
            record = self.dir / "width"
            if record.is_symlink() or (record.exists() and not record.is_file()):
                record.unlink()  # a FIFO or a link where the record was: only chunkeval writes here
            write_text(record, str(vectors.shape[1]))
        name = f"part-{uuid.uuid4().hex}.parquet"
        write_tables({self.dir / name: table})
        checkpoint("embedding")  # a part is on disk and more may follow
        self._seen.add(name)
        self._append(hashes, vectors, np.asarray(truncated, dtype=bool))
