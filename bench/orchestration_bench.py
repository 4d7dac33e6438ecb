"""What orchestration costs: a warm `chunkeval run` of the demo against `chunkeval sweep` with the same settings.

    python bench/orchestration_bench.py [--repeat 3]

In one temporary CHUNKEVAL_HOME (the first, untimed `sweep` fills the embedding cache and builds
minilm-static), it times, each as a fresh process, median of --repeat:
- `chunkeval sweep` of the demo experiment's settings (no Prefect, no warehouse);
- `chunkeval run` of the demo against a Prefect server started here on 127.0.0.1 (PREFECT_API_URL set):
  the flow, its tasks, the warehouse row and files, and the HTML report page;
- `chunkeval run` with no PREFECT_API_URL: Prefect starts a temporary server for the run.
The issue's goal: the run against a server within 2 × sweep + 3 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "experiment.yaml"


def timed(argv: list[str], env: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return statistics.median(times)


def start_server(env: dict, home: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=open(home / "server.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the Prefect server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="chunkeval-orchestration-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        CHUNKEVAL_HOME=str(home / "chunkeval"),
        PREFECT_HOME=str(home / "prefect"),
        HF_HUB_OFFLINE="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        PREFECT_SERVER_API_HOST="127.0.0.1",
    )
    chunkeval = str(BIN / "chunkeval")
    sweep = [chunkeval, "sweep", str(DEMO), "--out", str(home / "out.csv")]
    subprocess.run(sweep, env=env, check=True, capture_output=True)  # fills the cache
    subprocess.run([chunkeval, "run", str(DEMO)], env=env, check=True, capture_output=True)  # and the Prefect database
    results = {"sweep": timed(sweep, env, args.repeat)}
    proc, url = start_server(env, home)
    try:
        results["run against a server"] = timed(
            [chunkeval, "run", str(DEMO)], {**env, "PREFECT_API_URL": url}, args.repeat
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    results["run with a temporary server"] = timed([chunkeval, "run", str(DEMO)], env, args.repeat)
    print(f"| command (demo, warm cache) | seconds (median of {args.repeat}) |\n|---|---:|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.1f} |")
    goal = 2 * results["sweep"] + 3
    print(
        f"\ngoal for the run against a server: 2 x sweep + 3 s = {goal:.1f} s: "
        f"{'met' if results['run against a server'] <= goal else 'not met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
