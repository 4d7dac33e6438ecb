"""Named points where a run can be killed on purpose, to test that a crash there loses nothing.

`CHUNKEVAL_KILL_AT=<point>` makes the process send itself SIGKILL when it reaches that point: the
same death as an OOM kill or a power cut, at a moment a test chooses. Points: `started` (the
catalogue row says running, nothing is computed yet), `embedding` (a cache
part is on disk, more may follow), `results` (one of a run's Parquet files is in place, the others
not), `catalogue` (every Parquet file and the manifest are in place, the catalogue row still says
running), `report` (the run is recorded, its HTML page is being written). Unset, it costs one lookup.
`CHUNKEVAL_KILL_AT=<point>:TERM` sends SIGTERM instead: a polite stop (a scheduler's, or `kill`), which
ends the run as an interrupt does.
"""

from __future__ import annotations

import os
import signal

POINTS = ("started", "embedding", "results", "catalogue", "report")


def checkpoint(point: str) -> None:
    wanted = os.environ.get("CHUNKEVAL_KILL_AT")
    if wanted == point:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == f"{point}:TERM":
        os.kill(os.getpid(), signal.SIGTERM)
