"""The report's section on the slices of the gold set (`--slice-by`): per slice, its queries, the chosen
configuration's means with their 95 % intervals, the best configuration within the slice, and what the
regression check said of it. A slice of fewer than MIN_SLICE_QUERIES queries is shown, marked too small to
test: no regression is tested on it (docs/statistics.md)."""

from __future__ import annotations

from html import escape

from chunkeval.report.sections import _num, _table, label
from chunkeval.vocabulary import CONFIG_KEYS, MIN_SLICE_QUERIES, slice_name


def _cell(row: dict | None, metric: str) -> tuple[str, float] | str:
    if row is None or row.get(f"{metric}_mean") is None:
        return "–"
    text = _num(row[f"{metric}_mean"])
    if row.get(f"{metric}_ci_low") is not None:
        text += f"<br><small>[{_num(row[f'{metric}_ci_low'])}, {_num(row[f'{metric}_ci_high'])}]</small>"
    return text, row[f"{metric}_mean"]


def _verdict(name: str, small: bool, falls: list[dict], checked: bool) -> str:
    if small:
        return f"too small to test (fewer than {MIN_SLICE_QUERIES} questions)"
    mine = [f for f in falls if f.get("slice") == name]
    if mine:
        worst = min(mine, key=lambda f: f["change"])
        return escape(
            f"regression in {len(mine)} configuration × metric(s); most: {worst['metric']} of {label(worst, with_id=True)} "
            f"{worst['before']:.3f} → {worst['after']:.3f}"
        )
    return "no regression" if checked else "tested in the regression check of the newest run"


def section_slices(rows: list[dict], chosen: dict, watched, falls: list[dict], checked: bool) -> str:
    """`rows`: the run's `slice_summary` rows; `falls`: the regression check's findings for this run
    (`checked`: whether the check compared this run with a reference)."""
    slices: dict[str, list[dict]] = {}
    for r in rows:
        slices.setdefault(slice_name(r["slice_column"], r["slice_value"]), []).append(r)
    key = tuple(chosen[k] for k in CONFIG_KEYS)
    first = watched[0]
    body = []
    for name, mine in slices.items():
        picked = next((r for r in mine if tuple(r[k] for k in CONFIG_KEYS) == key), None)
        measured = [r for r in mine if r.get(f"{first}_mean") is not None]
        best = max(measured, key=lambda r: r[f"{first}_mean"]) if measured else None
        n = max(r["n_queries"] for r in mine)
        small = any(r["too_small"] for r in mine)
        body.append(
            [
                (escape(name), name),
                (f"{n}{'*' if small else ''}", n),
                *(_cell(picked, m) for m in watched),
                escape(f"{label(best)} ({_num(best[f'{first}_mean'])})") if best else "–",
                _verdict(name, small, falls, checked),
            ]
        )
    header = ["slice", "questions", *(escape(m) for m in watched), f"best by {escape(first)}", "tested"]
    return (
        '<section id="slices"><h2>2a. Slices of the gold set</h2><p>The questions of each slice (a value of a column '
        "named with --slice-by; a question with a list of tags is in the slice of each), the chosen configuration "
        f"({escape(label(chosen, with_id=True))})'s macro means over them with 95 % bootstrap intervals, and the best configuration "
        f"within the slice. * fewer than {MIN_SLICE_QUERIES} questions: too small to test, so no regression is tested "
        "on it. Regressions of the others are checked with the whole gold set's, under one family-wise correction "
        "(step-down max-T).</p>"
        f'<div class="scroll">{_table(header, body, "sortable")}</div></section>'
    )
