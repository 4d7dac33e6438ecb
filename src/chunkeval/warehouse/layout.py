"""The warehouse's files on disk, beside the catalogue: each run's folder `results/<run_id>/` (its Parquet
files, `manifest.json`, `gold_check.json`) and the pins `baselines/<experiment>.json`. The manifests and
pins are what `repair` rebuilds a catalogue from. No connection is opened here."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

from chunkeval.files import write_text
from chunkeval.warehouse.tables import MANIFEST_COLUMNS, STATUSES


class Layout:
    """Paths and small files under `root` (attributes the `Warehouse` sets: `root`, `results`)."""

    root: Path
    results: Path

    def _file(self, run_id: str, kind: str) -> Path:
        return self.results / run_id / f"{kind}.parquet"

    def _has_results(self, run_id: str) -> bool:
        return all(self._file(run_id, name).is_file() for name in ("per_query", "summary"))

    def manifest_path(self, run_id: str) -> Path:
        return self.results / run_id / "manifest.json"

    def _write_manifest(self, row: dict) -> None:
        """The run's catalogue row as a small JSON file beside its results: what `repair` rebuilds from."""
        doc = {c: (row[c].isoformat() if isinstance(row.get(c), datetime) else row.get(c)) for c in MANIFEST_COLUMNS}
        folder = self.results / row["run_id"]
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "manifest.json", json.dumps(doc, indent=1, sort_keys=True))

    def read_manifest(self, run_id: str) -> dict | None:
        """A run's manifest, or None where it is missing or unreadable."""
        try:
            doc = json.loads(self.manifest_path(run_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("run_id") != run_id or doc.get("status") not in STATUSES:
            return None
        for c in ("started_at", "finished_at"):
            doc[c] = datetime.fromisoformat(doc[c]) if doc.get(c) else None
        return {c: doc.get(c) for c in MANIFEST_COLUMNS}

    def _remove_folder(self, run_id: str) -> None:
        folder = self.results / run_id
        if folder.is_dir():
            aside = folder.with_name(f".deleting-{run_id}")
            os.replace(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)

    @property
    def pins(self) -> Path:
        return self.root / "baselines"

    def _write_pin(self, pin: dict) -> None:
        self.pins.mkdir(parents=True, exist_ok=True)
        doc = {**pin, "pinned_at": pin["pinned_at"].isoformat()}
        write_text(self.pins / f"{pin['experiment']}.json", json.dumps(doc, sort_keys=True))

    @staticmethod
    def _read_pin(path: Path) -> dict | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return {
                "experiment": str(doc["experiment"]),
                "run_id": str(doc["run_id"]),
                "pinned_at": datetime.fromisoformat(doc["pinned_at"]),
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None
