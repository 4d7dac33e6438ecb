"""The engine's old import paths, kept working until 2027-05-26: the one compatibility module.

In November 2026 the engine's flat modules moved into packages by the stage of a run (docs/architecture.md,
"Moved modules"): `chunkeval.engine.retrievers` is now `chunkeval.engine.retrieval.retrievers`,
`chunkeval.engine.sweep` is `chunkeval.engine.pipeline.sweep`, and so on (`MOVED`). Importing an old path
gives the module at its new path (the same module object, so classes stay identical) and one
`FutureWarning` line naming the new path. Three old names are now packages of their own and are not aliased:
`chunkeval.engine.settings` (the table is `settings.table`), `chunkeval.engine.scoring` (one configuration's
scoring is `scoring.configuration`) and `chunkeval.engine.inputs` (its readers, span gold and run files are
`inputs.readers`, `inputs.span_gold` and `inputs.run_files`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

REMOVAL = "2027-05-26"
PREFIX = "chunkeval.engine."
MOVED = {  # old module under chunkeval.engine → its new path under chunkeval.engine
    "experiment": "pipeline.experiment",
    "fingerprints": "pipeline.fingerprints",
    "plugins": "settings.plugins",
    "endpoints": "settings.endpoints",
    "doc_settings": "pipeline.experiment",
    "notes": "pipeline.experiment",
    "corpus": "inputs.corpus",
    "extract": "inputs.extract",
    "documents": "inputs.document_gold",
    "slices": "inputs.slices",
    "duplicates": "inputs.duplicates",
    "anchoring": "inputs.anchoring",
    "gold_update": "gold.update",
    "gold_check": "gold.check",
    "gold_generate": "gold.generate",
    "chat": "gold.chat",
    "embedders": "embedding.embedders",
    "retrievers": "retrieval.retrievers",
    "indexes": "retrieval.indexes",
    "rerank": "retrieval.rerank",
    "ranking": "pipeline.ranking",
    "ties": "retrieval.ties",
    "metrics": "scoring.metrics",
    "doc_metrics": "scoring.doc_metrics",
    "retrieved": "scoring.retrieved",
    "sweep": "pipeline.sweep",
    "grid": "pipeline.records",
    "runners": "pipeline.runners",
}


def new_name(old: str) -> str | None:
    """The new path of an old module path (or of a module inside an old package), else None."""
    if not old.startswith(PREFIX):
        return None
    head, dot, tail = old[len(PREFIX) :].partition(".")
    if head not in MOVED:
        return None
    return PREFIX + MOVED[head] + dot + tail


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path before the path finder can (which would load a second copy of a moved module's
    children), and hands back the module at the new path."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if new_name(name) else None

    def create_module(self, spec):
        new = new_name(spec.name)
        warnings.warn(f"{spec.name} has moved to {new}; the old path goes on {REMOVAL}", FutureWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """The module at the new path is already executed."""


def install() -> None:
    """Put the finder first on `sys.meta_path`, once."""
    if not any(isinstance(f, _Moved) for f in sys.meta_path):
        sys.meta_path.insert(0, _Moved())
