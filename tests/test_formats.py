"""Corpora in the formats teams have (issue 20): PDF and HTML documents through their extractors, subfolders and JSONL
corpora, `chunkeval extract`, span gold written against the extracted text, unreadable documents, the extraction
cache and the corpus fingerprint. The PDFs are real (tests/data/formats/make_pdfs.py made them with Chromium); every
run here uses bm25, so no model is loaded."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from chunkeval.cli import main
from chunkeval.engine.inputs.corpus import folder_fingerprint, load_documents
from chunkeval.engine.inputs.extract import DocumentReader, Unreadable, cache_root, html, page_span, pdf
from chunkeval.errors import InputError
from chunkeval.run_result import RunResult

FORMATS = Path(__file__).resolve().parent / "data" / "formats"
GUIDE = (FORMATS / "guide.html").read_bytes()
HANDBOOK_PAGES = [
    "Keeper's handbook\nThe keeper trims the lamp wick every evening before dusk.",
    "Paraffin is stored in the oil room, away from the lantern.\nBrass is polished every morning.",
    "",  # a page holding only a drawing
    "Fog signals sound every thirty seconds while visibility is under two nautical miles.",
]


def test_a_pdf_keeps_its_page_boundaries_and_unreadable_ones_say_why():
    got = pdf.extract((FORMATS / "handbook.pdf").read_bytes())
    assert got.text == "\n\n".join(p for p in HANDBOOK_PAGES if p)
    # page 3 has no text: it starts where page 4 does, and the break before a page belongs to the one before it
    assert got.pages == (0, 77, 170, 170)
    assert got.text[got.pages[1] : got.pages[2]].rstrip() == HANDBOOK_PAGES[1]
    fog = got.text.index("Fog")
    assert got.pages_of(got.text.index("Brass"), got.text.index("Brass") + 5) == (2, 2)
    assert page_span(got.pages, got.text.index("dusk"), got.text.index("Paraffin") + 8) == (1, 2)
    assert page_span(got.pages, got.text.index("Brass"), fog + 3) == (2, 4)  # the empty page 3 in between
    assert page_span(got.pages, fog, len(got.text)) == (4, 4)
    assert page_span((), 0, 5) is None
    for name, why in (("scanned.pdf", "no text layer"), ("damaged.pdf", "damaged PDF")):
        with pytest.raises(Unreadable, match=why):
            pdf.extract((FORMATS / name).read_bytes())
    with pytest.raises(Unreadable, match="not a PDF"):
        pdf.extract(b"plain words")


def test_html_gives_its_full_text_or_its_main_content_and_never_scripts_or_styles():
    full = html.extract(GUIDE, "full").text
    main_text = html.extract(GUIDE, "main").text
    for text in (full, main_text):
        for never in ("analytics", "never text", "font-family", "Enable JavaScript", "a comment", "a field guide"):
            assert never not in text  # scripts, styles, noscript, comments and <head> are never text
        assert "The keeper trims the lamp wick every evening before dusk" in text
        assert "A café au lait at 6 °C" in text  # entities and &nbsp; read as text and spaces
    assert full.startswith("Home | Guides | Contact\n\nThe Coastal Trust & friends\n\nLighthouse keeping\n\n")
    assert "Wind speed and direction at noon.\nVisibility" in full and "Month\tFog days\nMarch\t11" in full
    assert full.endswith("© 2024 The Coastal Trust. All rights reserved.")
    assert (
        "Home | Guides" not in main_text and "All rights reserved" not in main_text and "tide tables" not in main_text
    )
    assert html.identity("full") != html.identity("main")
    latin = '<html><head><meta charset="iso-8859-1"></head><body><p>caf\xe9</p></body></html>'.encode("latin-1")
    assert html.extract(latin, "full").text == "café"
    with pytest.raises(Unreadable, match="no charset declared"):
        html.extract(b"<html><body><p>caf\xe9</p></body></html>", "full")
    with pytest.raises(Unreadable, match="no text in the page"):
        html.extract(b"<html><body><script>var a = 1;</script></body></html>", "full")


def make_folder(root: Path) -> Path:
    """A corpus folder of every kind: a PDF in a subfolder corpus, an HTML page, a Markdown file, a JSONL corpus
    with metadata and a line that is not UTF-8, and a PDF without a text layer."""
    folder = root / "corpora"
    (folder / "manuals" / "deck").mkdir(parents=True)
    shutil.copy(FORMATS / "handbook.pdf", folder / "manuals" / "deck" / "handbook.pdf")
    (folder / "manuals" / "tides.txt").write_text("High tide comes twice a day.\n")
    shutil.copy(FORMATS / "guide.html", folder / "guide.html")
    shutil.copy(FORMATS / "scanned.pdf", folder / "scanned.pdf")
    (folder / "notes.md").write_text("Oil lamps smoke when the wick is cut unevenly.\n")
    lines = [
        json.dumps(
            {"id": "orchard", "title": "Orchards", "text": "Apple trees need pruning in late winter.", "lang": "en"}
        ),
        json.dumps({"_id": "harbor", "text": "Boats wait in the harbor while the tide turns.", "tags": ["sea"]}),
    ]
    (folder / "misc.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"_id": "latin", "text": "caf\xe9"}\n')
    return folder


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The corpus folder, and what `chunkeval extract` wrote from it (and said on stderr)."""
    root = tmp_path_factory.mktemp("formats")
    folder = make_folder(root)
    return folder, root / "texts"


def test_extract_writes_the_text_chunkeval_chunks_and_names_the_documents_it_left_out(extracted, capsys):
    folder, out = extracted
    assert main(["extract", str(folder), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    warnings = captured.err.strip().splitlines()
    assert len(warnings) == 2 and all("is unreadable and left out" in w for w in warnings)
    assert "misc.jsonl: row 3: document 'latin'" in warnings[0] and "not UTF-8" in warnings[0]
    assert "scanned.pdf: document 'scanned'" in warnings[1] and "no text layer" in warnings[1]
    assert "6 document(s) of 4 corpus(es)" in captured.out and "2 unreadable" in captured.out
    rows = {r["id"]: r for r in map(json.loads, (out / "documents.jsonl").read_text().splitlines())}
    handbook = rows["manuals/deck/handbook"]
    assert handbook["corpus"] == "manuals" and handbook["file"] == "manuals/deck/handbook.txt"
    assert handbook["pages"] == [0, 77, 170, 170] and handbook["extractor"].startswith("pdf: pypdf ")
    assert (out / "manuals" / "deck" / "handbook.txt").read_text() == "\n\n".join(p for p in HANDBOOK_PAGES if p)
    assert rows["orchard"]["metadata"] == {"lang": "en"} and rows["harbor"]["metadata"] == {"tags": ["sea"]}
    assert (out / "orchard.txt").read_text() == "Orchards Apple trees need pruning in late winter."
    assert rows["guide"]["extractor"].startswith("html full: lxml")
    assert (out / "guide.txt").read_bytes() == html.extract(GUIDE, "full").text.encode()
    assert rows["latin"]["file"] is None and rows["scanned"]["unreadable"].startswith("no text layer")
    assert main(["extract", str(folder), "--out", str(out)]) == 2  # never into a folder that holds files
    assert "--out must be a new or empty folder" in capsys.readouterr().err


def span(texts: Path, doc: str, content: str) -> dict:
    text = (texts / f"{doc}.txt").read_text()
    start = text.index(content)
    return {"content": content, "start_index": start, "end_index": start + len(content)}


def write_questions(path: Path, rows: list[tuple[str, str, list[dict]]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["query_id", "question", "references", "corpus_id"])
        for i, (question, doc, refs) in enumerate(rows):
            out.writerow([f"q{i}", question, json.dumps(refs), doc])
    return path


def test_span_gold_names_documents_of_pdf_html_and_jsonl_corpora(extracted, tmp_path, capsys):
    """Span gold written against `extract`'s text scores on the documents a run reads: the corpus_id column names
    a document (of a subfolder corpus, a JSONL corpus, an HTML file), and per-corpus rows stay per corpus."""
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep

    folder, texts = extracted
    if not texts.exists():
        assert main(["extract", str(folder), "--out", str(texts)]) == 0
        capsys.readouterr()
    questions = write_questions(
        tmp_path / "q.csv",
        [
            (
                "where is paraffin stored",
                "manuals/deck/handbook",
                [span(texts, "manuals/deck/handbook", "Paraffin is stored in the oil room")],
            ),
            ("when are apple trees pruned", "orchard", [span(texts, "orchard", "pruning in late winter")]),
            ("what does the keeper trim", "guide", [span(texts, "guide", "trims the lamp wick every evening")]),
        ],
    )
    assert main(["gold", "check", "--corpus-dir", str(folder), "--questions", str(questions), "--json"]) == 0
    check = json.loads(capsys.readouterr().out)
    assert [d["document"] for d in check["skipped_documents"]] == ["latin", "scanned"]
    assert not check["ambiguous_references"] and not check["empty_references"]
    settings = {"corpus_dir": str(folder), "questions": str(questions), "retriever": "bm25", "chunk_sizes": [12]}
    result = run_sweep(Experiment.from_dict({**settings, "k": [3]}), Embedders())
    rows = result.per_query.to_pylist()
    assert {r["query_id"]: r["corpus_id"] for r in rows} == {"q0": "manuals", "q1": "misc", "q2": "guide"}
    assert all(r["span_recall"] > 0 for r in rows)
    assert sorted(result.by_corpus["corpus_id"].to_pylist()) == ["guide", "manuals", "misc"]
    assert any("2 unreadable document(s) left out of the run: latin, scanned" in n for n in result.notes)
    pooled = run_sweep(Experiment.from_dict({**settings, "k": [50]}), Embedders())
    own = run_sweep(Experiment.from_dict({**settings, "k": [50], "own_corpus": True}), Embedders())

    def documents(result, query):
        return {r["corpus_id"] for r in result.retrieved.to_pylist() if r["query_id"] == query}

    # each question's own corpus is all the documents of its corpus, and only those
    assert "manuals/deck/handbook" in documents(own, "q0") <= {"manuals/deck/handbook", "manuals/tides"}
    assert "orchard" in documents(own, "q1") <= {"orchard", "harbor"}
    assert "guide" in documents(pooled, "q0")  # pooled, q0 gets a chunk of the guide, which speaks of paraffin too
    # a retrieved chunk of a PDF says which pages it spans (inspect shows them); other documents' chunks have none
    from chunkeval.report.inspect import pages, retrieved_items

    handbook = (texts / "manuals" / "deck" / "handbook.txt").read_text()
    paraffin, fog = handbook.index("Paraffin"), handbook.index("Fog")
    for r in own.retrieved.to_pylist():
        if r["corpus_id"] != "manuals/deck/handbook":
            assert r["first_page"] is None and r["last_page"] is None
            continue
        first = 1 if r["start"] < paraffin else 2 if r["start"] < fog else 4
        last = 1 if r["end"] <= paraffin else 2 if r["end"] <= fog else 4
        assert (r["first_page"], r["last_page"]) == (first, last)
    paged = [r for r in own.retrieved.to_pylist() if r["first_page"] is not None]
    (item,) = retrieved_items(paged[:1], [], lambda corpus, start, end: None)
    assert item["pages"] == [paged[0]["first_page"], paged[0]["last_page"]]
    assert pages({"pages": [2, 4]}) == " (pages 2–4)" and pages({"pages": [2, 2]}) == " (page 2)"


def test_a_question_about_an_unreadable_document_retires_and_names_both(extracted, tmp_path):
    """A document that turns unreadable between nights (a page saved as a scan) retires its questions, naming the
    document and why, and the run goes on with the rest; under strict, and where every question retires, one line."""
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs

    folder, texts = extracted
    if not texts.exists():
        assert main(["extract", str(folder), "--out", str(texts)]) == 0
    paraffin = span(texts, "guide", "trims the lamp wick every evening")
    questions = write_questions(
        tmp_path / "q.csv", [("what is this scan", "scanned", []), ("wick?", "guide", [paraffin])]
    )
    gold = load_inputs(Experiment(corpus_dir=str(folder), questions=str(questions))).gold
    assert gold.query_ids == ["q1"]
    (retired,) = [a for a in gold.anchoring if a["status"] == "retired"]
    assert retired["query_id"] == "q0" and re.search(
        r"corpus_id 'scanned' names an unreadable document \(.*scanned\.pdf: no text layer", retired["reason"]
    )
    with pytest.raises(InputError, match=r"is unreadable: .*\(strict: every document must be read\)"):
        load_inputs(Experiment(corpus_dir=str(folder), questions=str(questions), strict=True))
    alone = write_questions(tmp_path / "one.csv", [("what is this scan", "scanned", [])])
    with pytest.raises(
        InputError, match=r"one\.csv: every question is retired: .*\(row 1: corpus_id 'scanned' names an"
    ):
        load_inputs(Experiment(corpus_dir=str(folder), questions=str(alone)))
    with pytest.raises(InputError, match=r"misc\.jsonl: row 3: document 'latin' is unreadable: not UTF-8 .*\(strict"):
        load_documents(folder, strict=True)


def test_qrels_rows_naming_an_unreadable_document_are_left_out_and_counted(extracted, tmp_path):
    from chunkeval.engine.inputs.document_gold import load_document_gold

    folder, _ = extracted
    (tmp_path / "queries.jsonl").write_text('{"_id": "a", "text": "apple pruning"}\n{"_id": "b", "text": "scan"}\n')
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\na\torchard\t1\na\tlatin\t1\nb\tscanned\t1\na\tnowhere\t1\n"
    )
    args = ("", "test", str(folder), str(tmp_path / "queries.jsonl"), str(tmp_path / "qrels.tsv"))
    docs, gold = load_document_gold(*args)
    assert gold.query_ids == ["a"] and gold.qrels == {"a": {"orchard": 1.0}}
    assert (gold.unreadable, gold.dropped) == (2, 1)
    assert set(docs.skipped) == {"latin", "scanned"} and docs.corpus_of["manuals/deck/handbook"] == "manuals"
    with pytest.raises(InputError, match="document 'latin' is unreadable"):
        load_document_gold(*args, strict=True)
    # the run records what it left out: each row in its gold-set check, the documents and the count in its manifest
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.gold.check import check_gold
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs, run_sweep
    from chunkeval.warehouse import Warehouse

    settings = {"corpus_dir": args[2], "queries": args[3], "qrels": args[4], "retriever": "bm25", "chunk_sizes": [12]}
    exp = Experiment.from_dict({**settings, "k": [3]})
    inputs = load_inputs(exp, quiet=True)
    check = check_gold(inputs.gold, inputs.corpora, None, inputs.skipped).to_dict()
    assert check["left_out_qrels"] == [
        {"row": 2, "query_id": "a", "doc_id": "latin", "reason": "unreadable document"},
        {"row": 3, "query_id": "b", "doc_id": "scanned", "reason": "unreadable document"},
        {"row": 4, "query_id": "a", "doc_id": "nowhere", "reason": "unknown document"},
    ]
    result = run_sweep(exp, Embedders())
    wh = Warehouse(tmp_path / "warehouse")
    run_id = wh.begin_run("formats", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query,
            result.summary,
            texts_embedded=0,
            references=result.references,
            models=result.models,
            gold_check=check,
        ),
    )
    manifest = json.loads(wh.manifest_path(run_id).read_text())
    assert manifest["status"] == "completed" and manifest["documents_left_out"] == ["latin", "scanned"]
    assert manifest["qrels_rows_left_out"] == 3 and wh.read_manifest(run_id)["status"] == "completed"
    from chunkeval.report.gold_sections import gold_check_html

    page = gold_check_html(wh.gold_check(run_id), exp.to_dict())
    assert "Qrels rows left out: 3</summary>" in page and "<td>nowhere</td><td>unknown document</td>" in page


def test_extracted_text_is_cached_by_content_and_extractor_and_the_fingerprint_covers_the_extractor(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "guide.html").write_bytes(GUIDE)
    (folder / "notes.md").write_text("Oil lamps smoke.\n")
    reader = DocumentReader("full")
    first = reader.read(folder / "guide.html")
    assert not cache_root().exists()  # nothing is written until the inputs are checked
    reader.save()
    (entry,) = cache_root().rglob("*.json")
    assert entry.name == hashlib.sha256(GUIDE).hexdigest() + ".json"
    cached = json.loads(entry.read_text())
    assert cached["extractor"] == html.identity("full") and cached["text"] == first.text
    entry.write_text(json.dumps({**cached, "text": "from the cache"}))
    assert DocumentReader("full").read(folder / "guide.html").text == "from the cache"
    assert DocumentReader("main").read(folder / "guide.html").text == html.extract(GUIDE, "main").text
    entry.write_text("{broken")  # a damaged entry is extracted again
    assert DocumentReader("full").read(folder / "guide.html").text == first.text
    full, main_print = folder_fingerprint(folder, "full"), folder_fingerprint(folder, "main")
    assert full != main_print
    monkeypatch.setattr(html, "version", lambda name: "0.0-other")  # a new library version: a new fingerprint
    assert folder_fingerprint(folder, "full") not in (full, main_print)
    (folder / "guide.html").unlink()  # a folder of text files keeps the fingerprint it had before documents
    before = {"notes": hashlib.sha256((folder / "notes.md").read_bytes()).hexdigest()}
    assert folder_fingerprint(folder) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()


def test_extract_reads_one_file_and_writes_unsafe_ids_encoded(tmp_path, capsys):
    from chunkeval.engine.inputs.extract.export import document_path

    assert main(["extract", str(FORMATS / "guide.html"), "--out", str(tmp_path / "one"), "--html", "main"]) == 0
    (row,) = map(json.loads, (tmp_path / "one" / "documents.jsonl").read_text().splitlines())
    assert row["id"] == "guide" and row["extractor"].startswith("html main: trafilatura")
    assert (tmp_path / "one" / "guide.txt").read_text() == html.extract(GUIDE, "main").text
    assert "1 document(s) of 1 corpus(es)" in capsys.readouterr().out
    assert document_path("notes/keeper") == "notes/keeper.txt"
    assert document_path("../etc/passwd") == "..%2Fetc%2Fpasswd.txt" and document_path("a//b") == "a%2F%2Fb.txt"
    assert document_path("doc:7") == "doc%3A7.txt"


def test_documents_left_out_for_one_cause_are_one_warning(tmp_path, capsys):
    """Sixteen empty files are one cause: one warning line naming the files, folded with a count (issue 42's notices
    once per cause), not sixteen; a document left out for a cause of its own keeps its own line."""
    folder = tmp_path / "corpora"
    folder.mkdir()
    (folder / "good.md").write_text("Bees dance to say where the flowers are.\n", encoding="utf-8")
    for i in range(16):
        (folder / f"e{i:02d}.md").write_text("", encoding="utf-8")
    shutil.copy(FORMATS / "scanned.pdf", folder / "scanned.pdf")
    assert main(["extract", str(folder), "--out", str(tmp_path / "texts")]) == 0
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 2, warnings
    empty = next(w for w in warnings if "16 documents are unreadable and left out: file is empty: " in w)
    assert "e00.md" in empty and "(16 in all)" in empty and len(empty) < 200, empty
    assert any("scanned.pdf: document 'scanned' is unreadable and left out: no text layer" in w for w in warnings)
