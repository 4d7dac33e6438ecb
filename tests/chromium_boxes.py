"""A report page measured in headless Chromium: a copy of the page whose script (allowed where the page's CSP
allowed only its own) writes the page's height, the box of each section, and the boxes of every chart's texts
and legend swatches into the DOM, which `--dump-dom` prints. Used by the report's browser tests and by
bench/report_screenshots.py."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

MEASURE = """
(function () {
  function box(r) { return [r.left, r.top + scrollY, r.right, r.bottom + scrollY]; }
  var out = {height: document.documentElement.scrollHeight, sections: {}, charts: []};
  document.querySelectorAll('section').forEach(function (s) { out.sections[s.id] = box(s.getBoundingClientRect()); });
  document.querySelectorAll('svg').forEach(function (svg) {
    if (!svg.getBoundingClientRect().width) return;
    var texts = [], swatches = [];
    svg.querySelectorAll('text').forEach(function (t) {
      var b = t.getBoundingClientRect();
      if (b.width) texts.push([t.textContent].concat(box(b)));
    });
    svg.querySelectorAll('.legend rect, .legend line').forEach(function (s) {
      var b = box(s.getBoundingClientRect());
      swatches.push([b[0], b[1] - 1, b[2], b[3] + 1]);  // a line's box has no height: its stroke has
    });
    out.charts.push({title: svg.querySelector('title').textContent, texts: texts, swatches: swatches});
  });
  var pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", *FLAGS, *args], capture_output=True, text=True, timeout=timeout)


def measure(page: Path, folder: Path, width: int = 1400, height: int = 900) -> dict:
    """The page as first shown in a `width` × `height` window: `{height, sections: {id: box}, charts: [{title,
    texts: [[text, *box]], swatches: [box]}]}`, boxes as [left, top, right, bottom] in page pixels."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"script-src '[^']*'", "script-src 'unsafe-inline'", text, count=1)
    copy = Path(folder) / f"measured-{page.name}"
    copy.write_text(text.replace("</body>", f"<script>{MEASURE}</script></body>"), encoding="utf-8")
    run = chromium(f"--window-size={width},{height}", "--dump-dom", copy.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def overlap(a, b, tolerance: float = 0.5) -> bool:
    """Whether two boxes share more than a sliver."""
    return a[0] < b[2] - tolerance and b[0] < a[2] - tolerance and a[1] < b[3] - tolerance and b[1] < a[3] - tolerance


def collisions(chart: dict) -> list[tuple[str, str]]:
    """The pairs of a chart's texts that overlap, and its texts that overlap a legend swatch."""
    texts = chart["texts"]
    found = [(a[0], b[0]) for i, a in enumerate(texts) for b in texts[i + 1 :] if overlap(a[1:], b[1:])]
    return found + [(a[0], "a legend swatch") for a in texts for s in chart["swatches"] if overlap(a[1:], s)]
