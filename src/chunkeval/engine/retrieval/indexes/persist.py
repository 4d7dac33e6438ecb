"""faiss index files: written in the background while the run searches, checked when read back.

A built index is usable at once; its file is written by a thread of its own, in one pass that writes the
bytes, hashes them (XXH3-128) and counts them, under a temporary name renamed into place last, with a
record beside it (`{"xxh3_128": …, "build_seconds": …}`). A run therefore does not wait for the disk
before it searches (1.5 GB of IVF index at 0.3 GB/s is 5 s, an eighth of faiss's own build at a million
vectors); what waits for the file is what needs it: its size (`Pending.size`), `wait_all` (a test's new
process, `chunkeval.engine.retrieval.indexes.forget`), and the interpreter's exit, which joins the writer
threads. A file whose bytes do not match its record is set aside by the reader and built again.
Records written before this module (`sha256`) are still checked with SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

import numpy as np

from chunkeval.engine.retrieval.indexes.spec import load_library
from chunkeval.files import hash_file, write_text
from chunkeval.limits import json_loads, record_text

log = logging.getLogger("chunkeval")
BLOCK = 1 << 22  # bytes faiss hands the writer at a time


def vectors_digest(vectors: np.ndarray) -> str:
    """What an index holds, as a hash of its vectors' shape and bytes (XXH3-128: 20 GB/s, where SHA-256
    makes 1.5 GB of vectors cost a second before every build or reuse)."""
    import xxhash

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    digest = xxhash.xxh3_128(f"{x.shape}".encode())
    digest.update(memoryview(x).cast("B"))
    return digest.hexdigest()


class Pending:
    """One index file being written; `size` waits for it (None if it could not be written)."""

    def __init__(self, index, path: Path, record: Path, seconds: float):
        self.path, self.record, self.seconds = path, record, seconds
        self._size: int | None = None
        self._thread = threading.Thread(target=self._write, args=(index,), name=f"chunkeval-index-{path.stem[:16]}")
        with _lock:  # registered before it starts: a write that ends at once still leaves the set
            _pending.add(self)
        self._thread.start()

    def _write(self, index) -> None:
        import xxhash

        faiss = load_library("faiss")
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        digest, size = xxhash.xxh3_128(), 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as fh:

                def take(block: bytes) -> None:
                    nonlocal size
                    fh.write(block)
                    digest.update(block)
                    size += len(block)

                faiss.write_index(index, faiss.PyCallbackIOWriter(take, BLOCK))
            write_text(self.record, json.dumps({"xxh3_128": digest.hexdigest(), "build_seconds": self.seconds}) + "\n")
            os.replace(tmp, self.path)
            self._size = size
        except Exception as exc:  # a full disk: the run goes on with the index in memory, built again next time
            log.warning("index %s could not be kept (%s); a later run builds it again", self.path.name, exc)
            tmp.unlink(missing_ok=True)
        finally:
            with _lock:
                _pending.discard(self)

    def wait(self) -> None:
        self._thread.join()

    @property
    def size(self) -> int | None:
        self.wait()
        return self._size


_pending: set[Pending] = set()
_lock = threading.Lock()


def wait_all(path: Path | None = None) -> None:
    """Every index file being written (or the one at `path`), written."""
    with _lock:
        pending = [p for p in _pending if path is None or p.path == path]
    for p in pending:
        p.wait()


def read(path: Path, record: Path):
    """(index, build seconds) of a kept file; ValueError where its bytes are not what its record says."""
    kept = json_loads(record_text(record)) if record.is_file() else {}
    if "xxh3_128" in kept:
        import xxhash

        found = hash_file(path, xxhash.xxh3_128()).hexdigest() == kept["xxh3_128"]
    else:
        found = kept.get("sha256") == hash_file(path, hashlib.sha256()).hexdigest()
    if not found:
        raise ValueError("its checksum does not match")
    return load_library("faiss").read_index(str(path)), float(kept["build_seconds"])
