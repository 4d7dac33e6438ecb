"""The warehouse's files on disk, beside the catalogue: each run's folder `results/<run_id>/` (its Parquet
files, `manifest.json`, `gold_check.json`, `race.json` of a raced run, `corpora.json`), the pins `baselines/<experiment>.json`, and
the corpus texts runs read. The manifests and pins are what `repair` rebuilds a catalogue from. No
connection is opened here.

Corpus texts are kept as long as a run that read them: `corpora/<sha256>.txt.gz`, each corpus text once
per version (named by the SHA-256 of its UTF-8 bytes, gzip-compressed), and `results/<run_id>/corpora.json`
mapping the run's corpus ids to them. A copy is read back only when its bytes hash to its name, so a run's
offsets never meet another version's text. `collect_corpora` removes the copies no kept run names (after
delete and prune), leaving one written or reused in the last `GRACE_S` seconds to a run being recorded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import time
from datetime import datetime
from pathlib import Path

from chunkeval.files import write_text
from chunkeval.limits import json_loads, record_text
from chunkeval.vocabulary import ANCHOR_STATUSES
from chunkeval.warehouse.tables import MANIFEST_COLUMNS, STATUSES

GRACE_S = 600.0  # a corpus copy this young is never collected: a run may be recording itself with it


class Layout:
    """Paths and small files under `root` (attributes the `Warehouse` sets: `root`, `results`)."""

    root: Path
    results: Path

    def _file(self, run_id: str, kind: str) -> Path:
        return self.results_dir / run_id / f"{kind}.parquet"

    def _has_results(self, run_id: str) -> bool:
        return all(self._file(run_id, name).is_file() for name in ("per_query", "summary"))

    def manifest_path(self, run_id: str) -> Path:
        return self.results_dir / run_id / "manifest.json"

    def _write_manifest(self, row: dict) -> None:
        """The run's catalogue row as a small JSON file beside its results: what `repair` rebuilds from. Once
        the run's gold-set check is written (a completed run), the manifest also names the documents it left out
        as unreadable and counts the qrels rows it left out (`documents_left_out`, `qrels_rows_left_out`), lists the
        questions it retired with the reason (`questions_retired`), and counts its questions by how their references
        met the corpus (`anchoring`: exact, reanchored, approximate, retired; docs/gold.md)."""
        doc = {c: (row[c].isoformat() if isinstance(row.get(c), datetime) else row.get(c)) for c in MANIFEST_COLUMNS}
        folder = self.results_dir / row["run_id"]
        folder.mkdir(parents=True, exist_ok=True)
        try:
            check = json_loads(record_text(folder / "gold_check.json"))
        except (OSError, ValueError):
            check = None
        if isinstance(check, dict):
            doc["documents_left_out"] = [d.get("document") for d in check.get("skipped_documents") or []]
            doc["qrels_rows_left_out"] = len(check.get("left_out_qrels") or [])
            doc["questions_retired"] = [
                {"query_id": r.get("query_id"), "reason": r.get("reason")} for r in check.get("retired_questions") or []
            ]
            statuses = [a.get("status") for a in check.get("anchoring") or []]
            doc["anchoring"] = {s: statuses.count(s) for s in ANCHOR_STATUSES}
        race = self.race(row["run_id"])
        if race is not None:  # a raced run (`race: true`): its per-query rows are the cells the race evaluated
            doc["race"] = race
        write_text(folder / "manifest.json", json.dumps(doc, indent=1, sort_keys=True))

    def race(self, run_id: str) -> dict | None:
        """A raced run's summary (`race.json`: what the race decided, the cells it evaluated); None for a run that
        evaluated every cell, or where the file is unreadable."""
        try:
            found = json_loads(record_text(self.results_dir / run_id / "race.json"))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def read_manifest(self, run_id: str) -> dict | None:
        """A run's manifest, or None where it is missing or unreadable."""
        try:
            doc = json_loads(record_text(self.manifest_path(run_id)))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("run_id") != run_id or doc.get("status") not in STATUSES:
            return None
        for c in ("started_at", "finished_at"):
            doc[c] = datetime.fromisoformat(doc[c]) if doc.get(c) else None
        return {c: doc.get(c) for c in MANIFEST_COLUMNS}

    def _remove_folder(self, run_id: str) -> None:
        folder = self.results_dir / run_id
        if folder.is_dir():
            aside = folder.with_name(f".deleting-{run_id}")
            os.replace(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)

    @property
    def reports(self) -> Path:
        """Where the flows keep HTML reports (`chunkeval.report.html.report_path`): `reports/<experiment>.html`,
        `reports/<experiment>/<run_id>.html` and `reports/<experiment>/diff-<A>-<B>.html`."""
        return self.root / "reports"

    def _remove_reports(self, experiments: dict[str, str]) -> None:
        """Every report that holds text of the runs (run id → experiment): each run's page, the diffs that name
        it, and the experiment's latest page where it shows the run (the next trend-report writes it again)."""
        for run_id, experiment in experiments.items():
            folder = self.reports / experiment
            doomed = [p for p in folder.glob("*") if run_id in p.name] if folder.is_dir() else []
            latest = self.reports / f"{experiment}.html"
            try:
                if latest.is_file() and run_id in latest.read_text(encoding="utf-8", errors="replace"):
                    doomed.append(latest)
            except OSError:
                pass
            for path in doomed:
                try:
                    path.unlink()
                except OSError:
                    pass

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
            doc = json_loads(record_text(path))
            return {
                "experiment": str(doc["experiment"]),
                "run_id": str(doc["run_id"]),
                "pinned_at": datetime.fromisoformat(doc["pinned_at"]),
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @property
    def corpora_dir(self) -> Path:
        return self.root / "corpora"

    def _keep_corpora(self, run_id: str, corpora: dict[str, str]) -> None:
        """Name the run's corpus versions in its folder first, then make sure each copy exists (a reused
        copy is touched, so that a collection running meanwhile leaves it)."""
        names = {cid: hashlib.sha256(text.encode("utf-8")).hexdigest() for cid, text in corpora.items()}
        folder = self.results_dir / run_id
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "corpora.json", json.dumps(names, indent=1, sort_keys=True))
        self.corpora_dir.mkdir(parents=True, exist_ok=True)
        for cid, digest in names.items():
            path = self.corpora_dir / f"{digest}.txt.gz"
            if path.is_file():
                os.utime(path)
                continue
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_bytes(gzip.compress(corpora[cid].encode("utf-8"), compresslevel=6, mtime=0))
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)

    def corpus_versions(self, run_id: str) -> dict[str, str]:
        """corpus id → SHA-256 of the text the run read (empty for runs recorded before texts were kept)."""
        try:
            found = json_loads(record_text(self.results_dir / run_id / "corpora.json"))
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def corpus_text(self, run_id: str, corpus_id: str, _cache: dict | None = None) -> str | None:
        """The text of a corpus as the run read it, or None where no intact copy of that version is kept.
        `_cache`, a dict the caller keeps between calls, holds the run's versions once read (a run over
        document gold has one corpus per document: thousands, each read of `corpora.json` naming them all)."""
        if _cache is None:
            _cache = {}
        if run_id not in _cache:
            _cache[run_id] = self.corpus_versions(run_id)
        digest = _cache[run_id].get(corpus_id)
        if digest is None:
            return None
        try:
            text = gzip.decompress((self.corpora_dir / f"{digest}.txt.gz").read_bytes())
        except (OSError, EOFError, gzip.BadGzipFile):
            return None
        return text.decode("utf-8") if hashlib.sha256(text).hexdigest() == digest else None

    def collect_corpora(self) -> list[str]:
        """Remove the corpus copies no kept run names (older than `GRACE_S`); the removed names."""
        if not self.corpora_dir.is_dir():
            return []
        copies = {p.name.split(".")[0]: p for p in self.corpora_dir.glob("*.txt.gz")}
        named = set()
        if self.results_dir.is_dir():
            for folder in self.results_dir.iterdir():
                if folder.is_dir() and not folder.name.startswith(".deleting-"):
                    named.update(self.corpus_versions(folder.name).values())
        now, removed = time.time(), []
        for digest, path in copies.items():
            try:
                if digest not in named and now - path.stat().st_mtime > GRACE_S:
                    path.unlink()
                    removed.append(digest)
            except OSError:
                pass
        return removed
