"""Makes the PDF fixtures of tests/test_formats.py from the HTML below, with headless Chromium (run once; the PDFs
are committed): `python tests/data/formats/make_pdfs.py` (Chromium on PATH as `chromium`).

- handbook.pdf: four pages; the third holds only a drawing (a page without text between pages with text);
- scanned.pdf: one page holding only a drawing: a PDF without a text layer, as a scan without OCR is;
- damaged.pdf: the first half of handbook.pdf's bytes (a download cut short).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

DRAWING = (
    '<svg width="300" height="200" xmlns="http://www.w3.org/2000/svg">'
    '<rect x="10" y="10" width="280" height="180" fill="#ddd" stroke="#333"/>'
    '<circle cx="150" cy="100" r="60" fill="#88a"/></svg>'
)
PAGE = '<div style="page-break-after: always">{}</div>'
HANDBOOK = [
    "<h1>Keeper's handbook</h1><p>The keeper trims the lamp wick every evening before dusk.</p>",
    "<p>Paraffin is stored in the oil room, away from the lantern.</p><p>Brass is polished every morning.</p>",
    DRAWING,
    "<p>Fog signals sound every thirty seconds while visibility is under two nautical miles.</p>",
]


def html(pages: list[str]) -> str:
    body = "".join(PAGE.format(p) for p in pages[:-1]) + f"<div>{pages[-1]}</div>"
    return f'<!doctype html><html><head><meta charset="utf-8"><title>fixture</title></head><body>{body}</body></html>'


def print_pdf(source: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(source, encoding="utf-8")
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-pdf-header-footer",
                f"--print-to-pdf={out}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main() -> int:
    print_pdf(html(HANDBOOK), HERE / "handbook.pdf")
    print_pdf(html([DRAWING]), HERE / "scanned.pdf")
    data = (HERE / "handbook.pdf").read_bytes()
    (HERE / "damaged.pdf").write_bytes(data[: len(data) // 2])
    for name in ("handbook.pdf", "scanned.pdf", "damaged.pdf"):
        print(name, (HERE / name).stat().st_size, "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
