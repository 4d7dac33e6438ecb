"""The HTML report as a reader first sees it: its bytes, its height as first shown, and a screenshot of its
first screen (1,400 × 900) for docs/.

    python bench/report_screenshots.py [--out docs] [--home DIR]

Runs the demo experiment (`chunkeval run`) and an experiment of three corpora of the shared set (chatlogs,
state_of_the_union and wikitexts: 276 questions; fixed_token and recursive_token, sizes 100, 200 and 400,
overlaps 0 and 20 %, k 1, 3, 5 and 10: 48 configurations) in `--home` (a temporary folder unless given;
given, a second call reuses its runs and embeddings), writes each report with `chunkeval report --html`,
measures it in headless Chromium (`tests/chromium_boxes.py`) and saves `report-demo.png` and
`report-shared.png` in `--out` (palette PNGs, half size). A bench, not a test: it takes minutes on a CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT.parent / "shared" / "datasets" / "chroma_general").resolve()
sys.path.insert(0, str(ROOT / "tests"))

from chromium_boxes import chromium, measure  # noqa: E402

EXPERIMENTS = {
    "demo": [],
    "shared": [
        *("--experiment", "shared", "--corpus-dir", str(SHARED / "corpora"), "--questions"),
        *(str(SHARED / "questions_df.csv"), "--corpus", "chatlogs", "state_of_the_union", "wikitexts"),
        *("--chunker", "fixed_token,recursive_token", "--chunk-sizes", "100,200,400", "--overlaps", "0,20%"),
        *("--k", "1,3,5,10", "--yes"),
    ],
}


def chunkeval(env: dict, *args: str) -> None:
    run = subprocess.run([sys.executable, "-m", "chunkeval.cli", *args], env=env, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"chunkeval {' '.join(args[:3])}… failed ({run.returncode}): {run.stderr[-2000:]}")


def shrink(png: Path) -> None:
    """Half size, 64 colours: a screenshot of text and charts that stays small in the repository."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    image = image.resize((image.width // 2, image.height // 2), Image.LANCZOS)
    image.quantize(64).save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="report-bench-"))
    env = {**os.environ, "CHUNKEVAL_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    print("| report | bytes | height as first shown (px) | overview ends at (px) |")
    print("|---|---:|---:|---:|")
    for name, flags in EXPERIMENTS.items():
        experiment = "demo" if name == "demo" else "shared"
        if not (home / "warehouse" / "reports" / experiment).is_dir():
            chunkeval(env, "run", *flags)
        shoot(env, home, name, experiment, args.out)


def shoot(env: dict, home: Path, name: str, experiment: str, out: Path) -> None:
    """Write the experiment's report, measure it, save its first screen as `out/report-<name>.png`, print a row."""
    page = home / f"{name}.html"
    chunkeval(env, "report", "--experiment", experiment, "--html", str(page))
    boxes = measure(page, home)
    shot = out / f"report-{name}.png"
    run = chromium("--window-size=1400,900", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri())
    if not shot.is_file():
        sys.exit(f"no screenshot of {page}: {run.stderr[-2000:]}")
    shrink(shot)
    print(f"| {name} | {page.stat().st_size:,} | {boxes['height']:,} | {boxes['sections']['overview'][3]:.0f} |")


if __name__ == "__main__":
    main()
