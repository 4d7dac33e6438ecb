"""SVG primitives of the report's charts: a document, axes with nice ticks, legends, colours. No plotting library."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

import numpy as np

INK, GRID, MUTED = "#1d232a", "#e6eaef", "#6b7785"
FONT = "system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"


# matplotlib's default colour cycle ("tab10"), so that colours read as readers of plots expect
CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


# the viridis colour map sampled at 0, 1/8, ..., 1 (perceptually uniform, readable in grey)
VIRIDIS = ["#440154", "#46327e", "#365c8d", "#277f8e", "#1fa187", "#4ac16d", "#a0da39", "#fde725"]


CHAR_WIDTH = 0.56  # mean advance of a character, in ems: enough to lay out labels without a font


def _f(v: float) -> str:
    return f"{v:.1f}"


# advances in ems, at least those of DejaVu Sans (the widest of the usual system-ui fonts), so that a label laid out
# by this estimate never runs into what is placed after it (a legend's next swatch) in whatever font the reader has
NARROW, WIDE, CAPITAL, OTHER = 0.34, 0.98, 0.78, 0.64
_NARROW = frozenset(" .,:;'!|ijlft()[]/-`\"")
_WIDE = frozenset("mwMW@%")


def _advance(c: str) -> float:
    if c in _NARROW:
        return NARROW
    if c in _WIDE:
        return WIDE
    return CAPITAL if c.isupper() else OTHER


def text_width(s: str, size: float) -> float:
    """An upper estimate of the width of `s` (its longest line) at font size `size`, in the font's units."""
    return max((sum(map(_advance, line)) for line in s.split("\n")), default=0.0) * size


def nice_ticks(lo: float, hi: float, n: int = 5, integer: bool = False) -> np.ndarray:
    """Round tick values inside [lo, hi]: the step of 1, 2, 2.5 or 5 times a power of ten whose count
    of intervals comes nearest to n (whole steps only when `integer`)."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return np.array([lo])
    power = 10.0 ** math.floor(math.log10((hi - lo) / max(n, 1)))
    steps = [m * power for m in (1, 2, 2.5, 5, 10)]
    if integer:
        steps = [s for s in steps if s >= 1 and s == int(s)] or [1.0]
    step = min(steps, key=lambda s: abs((hi - lo) / s - n))
    first = math.ceil(lo / step - 1e-9)
    values = (first + np.arange(int(math.floor(hi / step + 1e-9)) - first + 1)) * step
    return np.round(values, 12)


def tick_label(v: float) -> str:
    return f"{v:.6g}" if abs(v) >= 1e-12 else "0"


def padded(values: np.ndarray, margin: float = 0.05, floor: float | None = None) -> tuple[float, float]:
    """A data range widened by a margin on both sides (a single value gets a unit-sized one)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return (0.0, 1.0)
    lo, hi = float(values.min()), float(values.max())
    pad = (hi - lo) * margin if hi > lo else max(abs(hi) * margin, 0.05)
    lo, hi = lo - pad, hi + pad
    return (max(lo, floor) if floor is not None else lo, hi)


def viridis(t: np.ndarray) -> list[str]:
    """Colours of values in [0, 1] on the viridis map (linear between its samples)."""
    stops = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in VIRIDIS], dtype=np.float64)
    t = np.clip(np.nan_to_num(np.asarray(t, dtype=np.float64), nan=0.0), 0.0, 1.0) * (len(VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(VIRIDIS) - 2)
    rgb = stops[i] + (stops[i + 1] - stops[i]) * (t - i)[:, None]
    return ["#{:02x}{:02x}{:02x}".format(*(int(round(c)) for c in row)) for row in rgb]


class Svg:
    """An SVG document built element by element."""

    def __init__(self, width: float, height: float, title: str):
        self.width, self.height, self.parts = width, height, [f"<title>{escape(title)}</title>"]

    def add(self, element: str) -> None:
        self.parts.append(element)

    def line(self, x1, y1, x2, y2, color=INK, width=1.0, dash: str | None = None) -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(
            f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{color}" stroke-width="{width}"{extra}/>'
        )

    def polyline(self, xs, ys, color, width=1.2) -> None:
        points = " ".join(f"{_f(x)},{_f(y)}" for x, y in zip(xs, ys))
        self.add(
            f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="{width}" stroke-linejoin="round"/>'
        )

    def polygon(self, xs, ys, color, opacity=0.18) -> None:
        points = " ".join(f"{_f(x)},{_f(y)}" for x, y in zip(xs, ys))
        self.add(f'<polygon points="{points}" fill="{color}" fill-opacity="{opacity}" stroke="none"/>')

    def rect(self, x, y, w, h, color, stroke="none", title: str | None = None) -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.add(
            f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0))}" height="{_f(max(h, 0))}" fill="{color}" stroke="{stroke}">{tip}</rect>'
        )

    def circle(self, x, y, r, color, stroke="none", title: str | None = None, hollow=False) -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        fill = "none" if hollow else color
        edge = color if hollow else stroke
        self.add(
            f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{r}" fill="{fill}" stroke="{edge}" stroke-width="0.6">{tip}</circle>'
        )

    def text(self, x, y, s: str, size=10.0, anchor="middle", color=INK, rotate=False, weight="normal") -> None:
        """Text at (x, y) (its baseline), one line per newline."""
        transform = f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        bold = ' font-weight="600"' if weight != "normal" else ""
        lines = s.split("\n")
        body = escape(lines[0]) + "".join(
            f'<tspan x="{_f(x)}" dy="1.15em">{escape(line)}</tspan>' for line in lines[1:]
        )
        self.add(
            f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size}" text-anchor="{anchor}" fill="{color}"{bold}{transform}>{body}</text>'
        )

    def render(self) -> str:
        w, h = int(math.ceil(self.width)), int(math.ceil(self.height))
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
            f'font-family="{FONT}" role="img">' + "".join(self.parts) + "</svg>"
        )


@dataclass
class Axes:
    """A plotting area: data coordinates within xlim × ylim drawn into a pixel box."""

    left: float
    top: float
    width: float
    height: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    xlog: bool = False  # log base 2

    def px(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        lo, hi = self.xlim
        if self.xlog:
            x, lo, hi = np.log2(x), math.log2(lo), math.log2(hi)
        return self.left + (x - lo) / (hi - lo) * self.width

    def py(self, y) -> np.ndarray:
        lo, hi = self.ylim
        return self.top + self.height - (np.asarray(y, dtype=np.float64) - lo) / (hi - lo) * self.height

    def frame(
        self,
        svg: Svg,
        xlabel: str = "",
        ylabel: str = "",
        title: str = "",
        xticks=None,
        xtick_labels=None,
        yticks=None,
        ylabels: bool = True,
    ) -> None:
        """Grid lines, the left and bottom axes with their ticks, axis labels and a title."""
        bottom, right = self.top + self.height, self.left + self.width
        xticks = nice_ticks(*self.xlim) if xticks is None else np.asarray(xticks, dtype=np.float64)
        yticks = nice_ticks(*self.ylim) if yticks is None else np.asarray(yticks, dtype=np.float64)
        xtick_labels = [tick_label(v) for v in xticks] if xtick_labels is None else xtick_labels
        for v, y in zip(yticks, self.py(yticks)):
            if self.top - 0.5 <= y <= bottom + 0.5:
                svg.line(self.left, y, right, y, GRID, 0.8)
                svg.line(self.left - 4, y, self.left, y, INK, 0.8)
                if ylabels:
                    svg.text(self.left - 6, y + 3, tick_label(v), 9, "end")
        for name, x in zip(xtick_labels, self.px(xticks)):
            if self.left - 0.5 <= x <= right + 0.5:
                svg.line(x, bottom, x, bottom + 4, INK, 0.8)
                svg.text(x, bottom + 15, name, 9)
        svg.line(self.left, self.top, self.left, bottom, INK, 0.9)
        svg.line(self.left, bottom, right, bottom, INK, 0.9)
        if xlabel:
            svg.text(self.left + self.width / 2, bottom + 32, xlabel, 10.5)
        if ylabel:
            svg.text(self.left - 40, self.top + self.height / 2, ylabel, 10.5, rotate=True)
        if title:
            svg.text(self.left + self.width / 2, self.top - 8, title, 11, weight="bold")


def legend(
    svg: Svg,
    left: float,
    top: float,
    entries: list[tuple[str, str, str]],
    columns: int = 1,
    column_width: float | None = None,
    size: float = 9.0,
) -> float:
    """Swatches with labels in rows of `columns`; entries are (label, colour, kind: line | box). Returns its height."""
    column_width = column_width or (max((text_width(t, size) for t, _, _ in entries), default=0) + 30)
    row = size * 1.6
    if not entries:
        return 0.0
    svg.add('<g class="legend">')
    for i, (name, color, kind) in enumerate(entries):
        x, y = left + (i % columns) * column_width, top + (i // columns) * row
        if kind == "box":
            svg.rect(x, y - size * 0.8, 12, size * 0.8, color)
        else:
            svg.line(x, y - size * 0.35, x + 16, y - size * 0.35, color, 1.6)
        svg.text(x + 20, y, name, size, "start")
    svg.add("</g>")
    return math.ceil(len(entries) / columns) * row
