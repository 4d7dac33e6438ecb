"""Whether the model behind a served name is still the one whose vectors are cached.

A served model's vectors are keyed by its identity (`ServedModel.identity`) and a generation. At the
start of a run that embeds, a few fixed probe texts are embedded and compared, by cosine, with the
vectors recorded for the identity in `$CHUNKEVAL_HOME/served/<identity>/probes.json`: bytes would not do
(a GPU server's floats differ run to run, a bf16 server's from fp32 by about 4e-5). When every probe has
cosine ≥ `SAME`, it is the same model. Below that (or at another width), the model behind the name has
changed: the run says so in one line, the generation moves on (a new cache folder, a new model
fingerprint: old vectors are never reused for it) and the new vectors are recorded.

`check(served, mode)`: `run` probes; `interval` probes when the last probe is older than the model's
`probe_interval` (the watch); `none` sends nothing and reads the recorded generation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np

from chunkeval.engine.embedding.client import Client
from chunkeval.engine.embedding.served import ServedModel
from chunkeval.files import write_text
from chunkeval.limits import json_loads, record_text
from chunkeval.paths import home

log = logging.getLogger("chunkeval")

SAME = 0.999
MODES = ("run", "interval", "none")
PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the boiling point of water at sea level?",
    "Retrieval-augmented generation retrieves passages, then writes an answer from them.",
    "def add(a, b):\n    return a + b",
    "Der Zug nach Berlin fährt um acht Uhr ab.",
)
CHANGED: list[str] = []  # the lines of the changes this process found (for the run's notes)


def record_path(served: ServedModel) -> Path:
    return home() / "served" / served.identity_hash()[:32] / "probes.json"


def read_record(served: ServedModel) -> dict | None:
    try:
        record = json_loads(record_text(record_path(served)))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("vectors"), list) else None


def generation(served: ServedModel) -> int:
    record = read_record(served)
    return int(record.get("generation", 0)) if record else 0


def fingerprint(served: ServedModel, gen: int | None = None) -> str:
    """The model fingerprint of a served model: its identity and generation."""
    gen = generation(served) if gen is None else gen
    return hashlib.sha256(json.dumps([served.identity(), gen], sort_keys=True).encode()).hexdigest()


def lowest_cosine(recorded: np.ndarray, answered: np.ndarray) -> float:
    """The smallest cosine between recorded and answered probe vectors (-1 when their shapes differ)."""
    if recorded.shape != answered.shape:
        return -1.0
    norms = np.linalg.norm(recorded, axis=1) * np.linalg.norm(answered, axis=1)
    return float(np.min(np.sum(recorded * answered, axis=1) / np.maximum(norms, 1e-12)))


def check(served: ServedModel, mode: str = "run") -> str:
    """The served model's fingerprint after probing it as `mode` says."""
    record = read_record(served)
    now = time.time()
    if mode == "none" or (
        mode == "interval" and record and now - float(record.get("probed_at", 0)) < served.probe_interval
    ):
        return fingerprint(served, int(record.get("generation", 0)) if record else 0)
    client = Client(served)
    try:
        answered, _ = client.request(list(PROBES))
    finally:
        client.close()
    gen = int(record.get("generation", 0)) if record else 0
    if record is not None:
        cosine = lowest_cosine(np.asarray(record["vectors"], dtype=np.float64), answered.astype(np.float64))
        if cosine >= SAME:
            write_text(record_path(served), json.dumps({**record, "probed_at": now}))
            return fingerprint(served, gen)
        gen += 1
        line = (
            f"served model {served.name}: the model behind the name changed (probe cosine {cosine:.4f} < {SAME}); "
            f"its vectors go to a new cache generation ({gen}) and its fingerprint changed"
        )
        log.warning(line)
        CHANGED.append(line)
    record_path(served).parent.mkdir(parents=True, exist_ok=True)
    written = {
        "model": served.identity(),
        "generation": gen,
        "probed_at": now,
        "width": int(answered.shape[1]),
        "vectors": answered.tolist(),
    }
    write_text(record_path(served), json.dumps(written))
    return fingerprint(served, gen)
