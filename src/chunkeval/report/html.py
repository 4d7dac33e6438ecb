"""One self-contained HTML page per experiment, built from the warehouse's views.

The page needs nothing from anywhere: charts are inline SVG, styles and the table-sorting script
are inline, and a Content-Security-Policy forbids every fetch. All user text is escaped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html import escape
from pathlib import Path

from chunkeval._version import __version__
from chunkeval.analysis.comparisons import ties
from chunkeval.analysis.power import against_best
from chunkeval.analysis.regression import DEFAULT_THRESHOLD
from chunkeval.errors import InputError
from chunkeval.faults import checkpoint
from chunkeval.files import write_text
from chunkeval.report.drilldown import drilldown
from chunkeval.report.gold_sections import section_doc_failures, section_doc_gold, section_failures, section_gold
from chunkeval.report.index_section import section_indexes
from chunkeval.report.inspect import ITEM_STYLE
from chunkeval.report.overview import OVERVIEW_STYLE, section_overview
from chunkeval.report.sections import (
    _when,
    best_rows,
    choose,
    label,
    regression_check,
    section_budget,
    section_distributions,
    section_grid,
    section_summary,
    section_tradeoff,
    section_trend,
    the_verdict,
)
from chunkeval.report.slice_section import section_slices
from chunkeval.vocabulary import METRICS
from chunkeval.warehouse import Warehouse

# --------------------------------------------------------------------------- sections


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1200px;color:#1d232a;padding:0 1rem}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #dde3ea;padding-bottom:.3rem;margin-top:2.4rem}
table{border-collapse:collapse;font-size:.82rem;margin:.6rem 0}th,td{border:1px solid #dde3ea;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f3f6f9;position:sticky;top:0;white-space:nowrap}#grid td{white-space:nowrap}table.sortable th{cursor:pointer}table.sortable th:hover{background:#e4ebf2}
td small{color:#6b7785}.best{font-weight:600;color:#0b6e4f}.tied{color:#0b6e4f}.scroll{overflow-x:auto}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;font-size:.9rem}dt{font-weight:600}dd{margin:0}
code{font-size:.78rem;word-break:break-all}svg{max-width:100%;height:auto}nav a{margin-right:.8rem}
"""

SCRIPT = r"""
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows), asc = th.dataset.dir !== 'asc';
      th.dataset.dir = asc ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v, nx = parseFloat(x), ny = parseFloat(y);
        var c = (isNaN(nx) || isNaN(ny)) ? String(x).localeCompare(String(y)) : nx - ny;
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
(function () {
  var blob = document.getElementById('questions-data'), data = blob ? JSON.parse(blob.textContent) : null;
  var chars = {};
  function text(corpus, s, e) {  // the kept text of [s, e) in code points (as Python slices), else null
    var pieces = data.texts[corpus] || [];
    for (var i = 0; i < pieces.length; i++) {
      var p = pieces[i], start = p[0];
      if (start <= s && s <= start + p[1].length) {
        var key = corpus + '\u0000' + i, c = chars[key] || (chars[key] = Array.from(p[1]));
        if (s - start <= c.length) return c.slice(s - start, e - start).join('');
      }
    }
    return null;
  }
  function el(tag, parent, content) {
    var node = document.createElement(tag);
    if (content !== undefined) node.textContent = content;
    if (parent) parent.appendChild(node);
    return node;
  }
  function add(parent, content) { parent.appendChild(document.createTextNode(content)); }
  function marked(parent, content, offset, spans) {  // content from corpus offset, spans [[s, e]] marked
    var at = 0, c = Array.from(content);
    spans.forEach(function (span) {
      var s = Math.max(span[0] - offset, at), e = Math.min(span[1] - offset, c.length);
      if (e > s) { add(parent, c.slice(at, s).join('')); el('mark', parent, c.slice(s, e).join('')); at = e; }
    });
    add(parent, c.slice(at).join(''));
  }
  function grade(g) { return String(Number(g)); }
  function render(box, i) {
    var q = data.questions[i], refs = q[0], items = q[1], list, p;
    if (data.documents) {
      var relevant = refs.filter(function (d) { return d[1] > 0; }).length;
      el('p', box, 'Judged documents (' + refs.length + ', ' + relevant + ' relevant), with their first ' + data.preview + ' characters:');
      list = el('ul', box);
      refs.forEach(function (d) {
        var li = el('li', list), t = text(d[0], 0, data.preview + 1), chunk;
        el('code', li, d[0]); add(li, ' ');
        if (d[1] > 0) el('mark', li, 'relevant (grade ' + grade(d[1]) + ')'); else add(li, 'grade ' + grade(d[1]));
        chunk = el('div', li); chunk.className = 'chunk';
        if (t === null) el('em', chunk, 'text not kept');
        else add(chunk, Array.from(t).slice(0, data.preview).join('') + (Array.from(t).length > data.preview ? '\u2026' : ''));
      });
      el('p', box, 'Retrieved at k = ' + data.k + ', the chunks of relevant documents highlighted whole (the qrels judge documents):');
    } else {
      el('p', box, 'References (' + refs.length + '), with ' + data.context + ' characters of context:');
      list = el('ul', box);
      refs.forEach(function (r) {
        var li = el('li', list), start = Math.max(0, r[1] - data.context), t = text(r[0], start, r[2] + data.context);
        el('code', li, r[0]); add(li, ' [' + r[1] + ', ' + r[2] + '): ');
        if (t === null) { el('em', li, 'text not kept'); return; }
        var chunk = el('div', li); chunk.className = 'chunk';
        add(chunk, '\u2026'); marked(chunk, t, start, [[r[1], r[2]]]); add(chunk, '\u2026');
      });
      el('p', box, 'Retrieved at k = ' + data.k + ':');
    }
    list = el('ol', box); list.className = 'items';
    items.forEach(function (it) {  // [rank, corpus, start, end, score, relevant, grade, marks, pages]
      var li = el('li', list), t = text(it[1], it[2], it[3]), chunk, pages = it[8];
      el('b', li, '#' + it[0]); add(li, ' '); el('code', li, it[1] + ':' + it[2] + '-' + it[3]);
      if (pages) add(li, pages[0] === pages[1] ? ' (page ' + pages[0] + ')' : ' (pages ' + pages[0] + '\u2013' + pages[1] + ')');
      add(li, ' score ' + (it[4] === null ? '\u2013' : it[4].toFixed(3)) + ', ');
      if (data.documents) { add(li, 'document '); el('code', li, it[1]); add(li, ', '); }
      add(li, it[5] ? 'relevant (grade ' + grade(it[6]) + ')' : 'not relevant');
      chunk = el('div', li); chunk.className = 'chunk';
      if (t === null) el('em', chunk, 'text not kept'); else marked(chunk, t, it[2], it[7]);
    });
  }
  document.addEventListener('toggle', function (event) {
    var box = event.target;
    if (data && box.open && box.dataset && box.dataset.q !== undefined && !box.dataset.drawn) {
      box.dataset.drawn = '1';
      render(box, Number(box.dataset.q));
    }
  }, true);
  function reveal() {  // a link to a question opens it, and the closed sections around it
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var node = target; node; node = node.parentElement) if (node.tagName === 'DETAILS') node.open = true;
    if (target) target.scrollIntoView();
  }
  window.addEventListener('hashchange', reveal);
  document.addEventListener('click', function (event) {
    var a = event.target.closest && event.target.closest('a[href^="#"]');
    if (a && a.getAttribute('href') === location.hash) setTimeout(reveal, 0);
  });
  reveal();
})();
"""
# the one script the page runs, allowed by its hash alone (the CSP runs no other inline script, and no handler)
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()


def build_report(
    wh: Warehouse,
    experiment: str,
    run_id: str | None = None,
    config: dict | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> str:
    """The HTML page of an experiment: its given (or latest completed) run, and its history."""
    run = wh.run(run_id) if run_id else wh.last_completed(experiment)
    if run is None:
        raise InputError(f"experiment {experiment!r} has no completed run")
    if run["experiment"] != experiment or run["status"] != "completed":
        raise InputError(
            f"run {run['run_id']} is a {run['status']} run of {run['experiment']!r}, not a completed run of {experiment!r}"
        )
    run_id = run["run_id"]
    settings = json.loads(run["settings"] or "{}")
    summary = wh.summary(run_id).to_pylist()
    per_query = wh.query_results(run_id)
    refs = wh.references(run_id)
    chosen = choose(summary, config)
    best = best_rows(summary)
    spans = "span_f1" in best  # a run over document gold measures no span metric: its sections of spans are left out
    watched = ("span_precision", "span_recall", "span_f1") if spans else ("doc_ndcg_at_k", "doc_recall_at_k")
    trend_configs = list({label(r): r for r in [chosen, *(best[m] for m in watched)]}.values())
    found = the_verdict(wh, experiment, threshold)
    checked = regression_check(wh, experiment, threshold, found=found)
    slices = wh.slice_summary(run_id).to_pylist()
    mine = [f for f in checked[0] if f["run_id"] == run_id]
    newest = wh.last_completed(experiment)["run_id"]  # the regression check is of the newest run
    compared = not checked[1] and newest == run_id and wh.reference_run(experiment, run_id) not in (None, run_id)
    tied = ties(per_query, METRICS)
    questions, worst = drilldown(wh, run_id, chosen, per_query)
    sections = [
        section_overview(wh, experiment, run_id, summary, tied, spans, found, checked[0], worst, chosen, per_query),
        section_summary(run, settings, summary, wh.models(run_id).to_pylist()),
        section_grid(summary, tied, against_best(per_query, METRICS), watched),
        *([section_slices(slices, chosen, watched, mine, compared)] if slices else []),
        *([section_tradeoff(summary)] if spans else []),
        section_indexes(summary),
        *(
            [
                section_distributions(summary, per_query),
                section_gold(refs, per_query, wh.gold_check(run_id), settings),
                section_failures(chosen, per_query, refs, questions),
                section_budget(per_query, chosen),
            ]
            if spans
            else [
                section_doc_gold(wh.qrels(run_id), wh.gold_check(run_id), settings),
                section_doc_failures(chosen, questions),
            ]
        ),
        section_trend(wh, experiment, trend_configs, threshold, checked=checked),
    ]
    shown = set(
        re.findall(r'<section id="([\w-]+)">', "".join(sections))
    )  # a section with nothing to show is not there
    nav = "".join(
        f'<a href="#{s}">{t}</a>'
        for s, t in [
            ("overview", "At a glance"),
            ("summary", "Summary"),
            ("grid", "Grid"),
            ("slices", "Slices"),
            ("tradeoff", "Trade-off"),
            ("indexes", "Indexes"),
            ("distributions", "Distributions"),
            ("gold", "Gold set"),
            ("failures", "Failures"),
            ("budget", "Budget"),
            ("trend", "Trend"),
        ]
        if s in shown
    )
    title = f"chunkeval: {escape(experiment)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src '{SCRIPT_HASH}'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title><style>{STYLE}{ITEM_STYLE}{OVERVIEW_STYLE}</style></head>
<body><h1>{title}</h1><p>Run {escape(run_id)}, {_when(run["started_at"])}. Written by chunkeval {escape(__version__)}.</p>
<nav>{nav}</nav>
{"".join(sections)}
<script>{SCRIPT}</script></body></html>
"""


def report_path(root, experiment: str, run_id: str | None = None):
    """Where the flows keep reports, next to the warehouse: `reports/<experiment>.html` (the latest,
    written by trend-report) and `reports/<experiment>/<run_id>.html` (one per evaluate run)."""
    folder = Path(root) / "reports"
    return folder / f"{experiment}.html" if run_id is None else folder / experiment / f"{run_id}.html"


def write_report(
    wh: Warehouse,
    experiment: str,
    path,
    run_id: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    config: dict | None = None,
):
    """Build the page and write it whole (temporary name, then rename); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with wh.session():  # one connection for the page's many questions (opening the file each time cost ~1 s)
        page = build_report(wh, experiment, run_id, config, threshold)
    checkpoint("report")
    write_text(path, page)
    return path
