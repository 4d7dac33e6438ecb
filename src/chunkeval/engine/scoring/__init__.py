"""Scoring: a configuration's ranked chunks against the gold set, per question and at every k.

`metrics` (span, set and rank metrics, vectorized over questions), `doc_metrics` (document gold: MaxP and
chunk-level qrels), `configuration` (one configuration scored at every k) and `retrieved` (what each
configuration retrieved, kept for inspect and diff). Definitions: docs/metrics.md.
"""
