"""Model folders chunkeval builds itself (a static model distilled from MiniLM, a cross-encoder made from it):
built once under a lock in a temporary folder beside the final one, then renamed; a record of the recipe and
of every file's size says whether a folder is complete, and a folder that disagrees with its recipe, or that
a killed build left behind, is rebuilt."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from chunkeval.files import pid_alive
from chunkeval.limits import json_loads, record_text

RECORD = "chunkeval_model.json"


_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{32}\.(tmp|old)$")


def _files(folder: Path) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != RECORD
    }


def folder_is_built(folder: Path, record: dict, needs: str | None = None) -> bool:
    """Whether `folder` was built whole from `record`: its record file names the recipe and its files."""
    try:
        written = json_loads(record_text(folder / RECORD))
        return (
            written.get("model") == record
            and written.get("files") == _files(folder)
            and (needs is None or (folder / needs).is_file())
        )
    except (OSError, ValueError, AttributeError):
        return False


def _remove_leftovers(final: Path) -> None:
    """Temporary folders of builds of `final` whose process is gone."""
    for path in final.parent.glob(f".{final.name}.*"):
        match = _TMP.match(path.name)
        if match and match["name"] == final.name and not pid_alive(int(match["pid"])):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _lock(final: Path):
    """An exclusive lock on `.<name>.lock` beside `final` (released by the system if the process dies)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the renames alone keep folders whole
        yield
        return
    with open(final.parent / f".{final.name}.lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stage(final: Path, kind: str = "tmp") -> Path:
    return final.parent / f".{final.name}.{os.getpid()}.{uuid.uuid4().hex}.{kind}"


def build_folder(
    final: Path, record: dict, build: Callable[[Path], None], doing: str, quiet: bool = False, needs: str | None = None
) -> Path:
    """`final`, built once by `build(folder)` from `record` (its recipe): in a temporary folder beside
    it under a lock, then renamed. A folder whose record disagrees with `record` or its files is rebuilt."""
    if folder_is_built(final, record, needs):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _lock(final):
        if folder_is_built(final, record, needs):  # another process built it while this one waited
            return final
        _remove_leftovers(final)
        if not quiet:
            print(f"chunkeval: {doing}, once…", file=sys.stderr, flush=True)
        tmp = _stage(final)
        try:
            tmp.mkdir()
            with _quiet_libraries():
                build(tmp)
            files = {"model": record, "files": _files(tmp)}
            (tmp / RECORD).write_text(json.dumps(files, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            if final.exists():  # damaged or from an older recipe: moved aside, then removed
                old = _stage(final, "old")
                os.replace(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextlib.contextmanager
def _quiet_libraries():
    """No progress bars or load reports from transformers during a build."""
    import logging

    names = ["transformers", "sentence_transformers", "huggingface_hub"]
    levels = {n: logging.getLogger(n).level for n in names}
    previous = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        from transformers.utils import logging as tlog

        bars = tlog.is_progress_bar_enabled()
        tlog.disable_progress_bar()
    except Exception:  # noqa: BLE001 - an older transformers: keep its bars
        tlog, bars = None, False
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        if tlog is not None and bars:
            tlog.enable_progress_bar()
        if previous is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = previous
