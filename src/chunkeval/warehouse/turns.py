"""One run of an experiment at a time: the runs of one experiment never overlap, and triggers that arrive while
one runs are coalesced into one follow-up run.

Two lock files per experiment under the warehouse folder, `turns/<experiment>.run` and `.wait`, held with
`flock` (released by the kernel when a process dies, so a killed run never blocks the next one). A run takes its
turn: it holds `.wait` while it waits for `.run`, then `.run` while it runs. A trigger that finds `.wait` held has
a run queued behind the running one already, which will read the inputs as they are when its turn comes: it is
coalesced into that follow-up (the caller records it `coalesced`, with the reason) and runs nothing. So however
many triggers arrive during a run (a nightly schedule and an on-change event at once, a retried event), at most
one run follows it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

TURNS = "turns"


class Turn:
    """The turn of one experiment's runs under warehouse folder `root`. `enter()` waits for it (False: coalesced
    into the run already waiting); `leave()` gives it up. A `Turn` held by a process is re-entrant for it: the
    command that took it hands it to the flow it runs."""

    def __init__(self, root: Path, experiment: str) -> None:
        self.experiment = experiment
        name = hashlib.sha256(experiment.encode()).hexdigest()[:16]  # any experiment name, a safe file name
        self.folder = Path(root) / TURNS
        self._paths = {kind: self.folder / f"{name}.{kind}" for kind in ("run", "wait")}
        self._fds: dict[str, int] = {}
        self.waited = 0.0  # seconds this run waited for the one before it

    def _open(self, kind: str) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self._paths[kind], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)

    def _try(self, kind: str, block: bool) -> bool:
        fd = self._open(kind)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fds[kind] = fd
        return True

    def holder(self) -> str:
        """What the running run wrote of itself (`run <id>, pid <pid>`), for the line that says why one waits."""
        try:
            return self._paths["run"].read_text(encoding="utf-8").strip() or "another run"
        except OSError:
            return "another run"

    def enter(self, say=None) -> bool:
        """Take the turn, waiting for a running run to end (`say` tells once that it waits). False, at once, where
        another trigger waits already: this one is coalesced into it."""
        if "run" in self._fds:
            return True
        if self._try("run", block=False):
            return True
        if not self._try("wait", block=False):
            return False
        try:
            if say is not None:
                say(f"experiment {self.experiment}: {self.holder()} is running; this run follows it when it ends")
            start = time.monotonic()
            self._try("run", block=True)
            self.waited = time.monotonic() - start
        finally:
            self._release("wait")
        return True

    def mark(self, what: str) -> None:
        """Write who holds the turn (`run <id>, pid <pid>`), for a trigger that waits to say."""
        fd = self._fds.get("run")
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{what}, pid {os.getpid()}\n".encode(), 0)

    def _release(self, kind: str) -> None:
        fd = self._fds.pop(kind, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def leave(self) -> None:
        self._release("run")

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc) -> None:
        self.leave()
