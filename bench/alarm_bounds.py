"""What `chunkeval alerts test` costs against hostile destinations (issue 55, docs/limits.md "Alarm destinations"):
each hostile answer of tests/hostile_receivers.py alone, `alerts test` as a whole process, its wall seconds and
peak RSS (its own `VmHWM`, written as it exits), beside a destination that answers `ok`.

    python bench/alarm_bounds.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from hostile_receivers import http_receiver, run_measured, smtp_receiver  # noqa: E402

BIN = Path(sys.executable).parent
TINY = ROOT / "tests" / "data" / "tiny_demo"


def one(tmp: Path, entry: dict) -> tuple[float, float, str]:
    """(seconds, peak MiB, the line it printed) of `alerts test` to the one destination `entry`."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    (home / "endpoints.yaml").write_text(yaml.safe_dump({"d": entry}))
    exp = tmp / "exp.yaml"
    exp.write_text(
        yaml.safe_dump(
            {"name": "b", "corpus_dir": str(TINY / "corpora"), "questions": str(TINY / "questions.csv"),
             "alerts": [{"to": "d", "events": ["completed"]}]}
        )
    )  # fmt: skip
    env = {**os.environ, "CHUNKEVAL_HOME": str(home), "SMTP_PASS": "x" * 12}
    _, out, seconds, peak = run_measured(["alerts", "test", exp], env, tmp / "peak.txt")
    return seconds, peak, out.strip().split(": ", 1)[-1][:70]


def main() -> None:
    print(f"{'destination':<28} {'seconds':>8} {'peak MiB':>9}  answer shown")
    with tempfile.TemporaryDirectory() as tmp, http_receiver() as (url, _, _):
        for way in ("ok", "gigabyte", "gzip", "trickle-body", "trickle-head", "echo"):
            s, peak, said = one(Path(tmp), {"base_url": f"{url}/{way}", "kind": "webhook"})
            print(f"{'webhook ' + way:<28} {s:8.1f} {peak:9.0f}  {said}")
    for way in ("ok", "endless", "trickle", "auth-echo"):
        with tempfile.TemporaryDirectory() as tmp, smtp_receiver(way) as (port, _):
            entry = {"base_url": f"smtp://127.0.0.1:{port}", "kind": "email", "to": ["a@example.com"]}
            if way == "auth-echo":
                entry.update(username="someone", password_env="SMTP_PASS")
            s, peak, said = one(Path(tmp), entry)
            print(f"{'smtp ' + way:<28} {s:8.1f} {peak:9.0f}  {said}")


if __name__ == "__main__":
    main()
