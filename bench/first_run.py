"""The demo's first run from an empty home, end to end: what a newcomer waits for after install.

    python bench/first_run.py [--runs 2]

Each run is `chunkeval run` (the demo) in a fresh process, with `CHUNKEVAL_HOME` an empty temporary folder and the
working directory another: the one-time build of `minilm-static`, the probe of `backend: auto` (exports included,
where onnxruntime or OpenVINO is installed), the sweep and its recording all happen, as on a fresh install.
`--runs 2` times a second run over the home the first left (nothing built, probed or embedded again).
Printed: wall seconds of each run, its `stage seconds` line, and the lines it printed on stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs over the same home (the first from empty)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as cwd:
        env = {k: v for k, v in os.environ.items() if k != "CHUNKEVAL_AUTO_BACKEND"}  # auto probes, as installed
        env.update(CHUNKEVAL_HOME=home, HF_HUB_OFFLINE="1")
        for n in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run(
                [str(Path(sys.executable).with_name("chunkeval")), "run"],  # the command a newcomer types
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - start
            lines = (done.stdout + done.stderr).splitlines()
            stages = next((line for line in lines if line.startswith("stage seconds:")), "(no stage line)")
            shown = [line for line in done.stderr.splitlines() if not line.startswith(("INFO", "DEBUG", "  "))]
            print(
                f"run {n + 1} ({'empty home' if n == 0 else 'the same home'}): exit {done.returncode}, {seconds:.1f} s"
            )
            print(f"  {stages}")
            for line in shown[:12]:
                print(f"  | {line}")


if __name__ == "__main__":
    main()
