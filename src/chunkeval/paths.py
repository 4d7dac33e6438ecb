"""Where chunkeval keeps things: `$CHUNKEVAL_HOME` and its folders, and the files the package ships.

The demo data set and the deployments file are package data, read through `importlib.resources`, so that
an installed wheel finds them wherever it is run from.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE = Path(str(files("chunkeval")))
DEMO_DIR = PACKAGE / "data" / "demo"  # the demo experiment: three Markdown corpora and 28 questions
DEPLOYMENTS_FILE = PACKAGE / "deployments" / "prefect.yaml"  # chunkeval's Prefect deployments


def home() -> Path:
    """`$CHUNKEVAL_HOME`, by default `~/.chunkeval`: the embedding cache and the warehouse live there."""
    return Path(os.environ.get("CHUNKEVAL_HOME") or Path.home() / ".chunkeval").expanduser()


def backends_dir() -> Path:
    """Exports of embedding backends and `backend: auto`'s probes: `$CHUNKEVAL_BACKENDS`, by default
    `<home>/backends` (homes on one machine may share one: what it holds depends on the model and the machine)."""
    return Path(os.environ.get("CHUNKEVAL_BACKENDS") or home() / "backends").expanduser()


def cache_dir() -> Path:
    """The embedding cache: `<home>/cache/embeddings/<model fingerprint>/part-*.parquet`."""
    return home() / "cache" / "embeddings"
