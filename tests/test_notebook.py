"""Results and comparisons in a terminal and in Jupyter: a readable table, escaped HTML, and a missing
optional library named in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa

import chunkeval
from chunkeval.api import Results

GOLD = {"q1": ["a", "b"], "q2": ["c"]}
RUN = {"q1": ["a", "x"], "q2": ["y", "c"]}


def test_results_show_their_summary_as_a_table():
    res = chunkeval.score(GOLD, RUN, k=2)
    text = repr(res)
    lines = text.splitlines()
    assert lines[0].startswith("chunkeval Results: 1 configuration(s), 2 question(s); tables summary, per_query")
    assert lines[1].split() == ["configuration", "config_id", "recall_at_k", "mrr"]  # the terminal's columns
    row = lines[3].split()
    assert row[0] == "k=2" and len(row[1]) == 8 and row[2:] == ["0.750±0.354", "0.750±0.354"]
    assert "Schema" not in text and "pyarrow" not in text
    html = res._repr_html_()
    assert html.startswith("<div>") and "<th>mrr</th>" in html and "<td>0.750±0.354</td>" in html


def test_many_configurations_are_counted_and_every_text_is_escaped():
    n = 45
    summary = pa.table(
        {
            "chunker": ["<script>x</script>"] * n,
            "chunk_size": list(range(n)),
            "k": [5] * n,
            "mrr_mean": [0.5] * n,
            "mrr_std": [0.1] * n,
        }
    )
    res = Results(summary, pa.table({"query_id": ["q1", "q2"]}))
    assert "… and 25 more configuration(s)" in repr(res)
    assert len(repr(res).splitlines()) == 1 + 2 + 20 + 1
    html = res._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_comparisons_show_as_a_table_and_stay_a_list_of_dicts():
    res = chunkeval.score(GOLD, RUN, k=2)
    found = chunkeval.compare(res, res, metric="mrr")
    assert isinstance(found, list) and found[0]["metric"] == "mrr"
    assert json.loads(json.dumps(found))[0]["mean_diff"] == 0
    lines = repr(found).splitlines()
    assert lines[0] == "chunkeval comparisons: 1 paired comparison(s)"
    assert lines[2].startswith("mrr (a: run a, b: run b): ")  # what every row shares, said once
    assert lines[3].split()[:3] == ["configuration", "mean", "a"]
    assert lines[5].startswith("k=2 [")  # the label and config_id, as the terminal names it
    assert "<th>p_adjusted</th>" in found._repr_html_()


def test_many_comparisons_print_within_120_columns_and_fold_with_a_count():
    """The demo's `chunkeval.compare(run, metric=...)` printed 164 columns (issue 42): the best and the run are
    said once above the table, as `chunkeval compare` says them, and only the first rows are shown."""
    from chunkeval.api import Comparisons
    from chunkeval.report.notebook import SHOWN_ROWS

    run = "20261127T211456-eff17091"
    best = {"chunker": "fixed_token", "chunk_size": 100, "chunk_overlap": 0, "k": 5, "model": "all-MiniLM-L6-v2"}
    found = Comparisons(
        {
            "a": best | {"run_id": run},
            "b": best
            | {"chunker": "recursive_token", "model": "minilm-static", "chunk_overlap": 25, "k": k}
            | {"chunk_size": size, "run_id": run},
            "metric": "span_recall",
            "n_queries": 28,
            "n_unmatched": 0,
            "mean_a": 1.0,
            "mean_b": 0.7,
            "mean_diff": 0.3,
            "ci_low": 0.15,
            "ci_high": 0.45,
            "p_adjusted": 0.01,
            "significant": True,
            "mde": 0.2,
        }
        for size in (100, 300, 500, 700, 900)
        for k in range(1, 8)
    )
    lines = repr(found).splitlines()
    assert max(map(len, lines)) <= 120, repr(found)
    assert lines[-1] == f"… and {35 - SHOWN_ROWS} more comparison(s) of span_recall: the list holds them all"
    assert sum(run in line for line in lines) == 1 and sum("the best: size=100 [" in line for line in lines) == 1


def test_a_missing_optional_library_is_one_line_saying_what_to_install():
    code = (
        "import sys\n"
        "class Absent:  # pandas and polars as if not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in ('pandas', 'polars'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Absent())\n"
        "import chunkeval\n"
        "res = chunkeval.score({'q': ['a']}, {'q': ['a']}, k=1)\n"
        "for call in (res.to_pandas, res.to_polars):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "Results.to_pandas needs pandas, which is not installed: pip install pandas",
        "Results.to_polars needs polars, which is not installed: pip install polars",
    ]


def test_the_api_is_discoverable_by_dir_and_help():
    """The API loads on first use, yet dir() and tab completion list it, and help(chunkeval) is a short manual
    that documents each function of __all__ (issue 32)."""
    import pydoc
    import subprocess
    import sys

    import chunkeval

    fresh = subprocess.run(  # before anything has loaded the API
        [sys.executable, "-c", "import chunkeval; print(' '.join(n for n in dir(chunkeval) if n[0] != '_'))"],
        capture_output=True,
        text=True,
    )
    assert fresh.stdout.split() == sorted(n for n in chunkeval.__all__ if not n.startswith("_")), fresh.stderr
    page = pydoc.render_doc(chunkeval, renderer=pydoc.plaintext)
    for name in ("evaluate", "score", "compare", "regressions", "inspect", "check_gold"):
        assert f"\n    {name}(" in page, name  # the manual's line and the function's own entry
        assert getattr(chunkeval, name).__doc__.split("\n")[0] in page, name


def test_a_table_too_wide_folds_its_labels_after_a_slash():
    """A table that would pass 120 columns only for its labels folds them after a `/` (issue 42); one that cannot
    fit so (`--wide`) keeps its width and its one line per row."""
    from chunkeval.report.terminal import format_rows

    label = "minilm-static/recursive_token/size=100/overlap=25/context=title,headings/k=1"
    lines = format_rows(["configuration", "config_id", "m" * 60], [[label, "40464f6f", "0.700"]]).splitlines()
    assert max(map(len, lines)) <= 120 and len(lines) == 4, "\n".join(lines)
    assert lines[2].split()[1:] == ["40464f6f", "0.700"]
    assert "".join(line.split()[0] if i == 0 else line.strip() for i, line in enumerate(lines[2:])) == label
    wide = format_rows(["configuration", "config_id", "m" * 110], [[label, "40464f6f", "0.700"]]).splitlines()
    assert len(wide) == 3 and len(wide[2]) > 120
