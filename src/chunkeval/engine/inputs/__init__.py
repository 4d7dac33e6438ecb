"""Inputs: the documents and the gold set a run reads, validated as they are read.

`readers` (plain files, rows checked one by one), `corpus` and `extract/` (documents and their text),
`span_gold` and `document_gold` (questions with exact spans; queries with qrels, BEIR folders), `run_files`
(a retriever's ranked lists and chunk-level gold for `evaluate-run`), `slices` (groups of questions) and
`duplicates` (what a reference whose text repeats in its corpus counts as).
"""
