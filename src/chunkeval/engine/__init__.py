"""The engine: from an experiment's inputs to per-query metrics. Pure functions over numpy and Arrow.

Its packages follow a run: `settings` (the settings table, plug-ins, endpoints) → `inputs` (documents, gold
sets, run files) → `chunking` → `embedding` → `retrieval` (retrievers, indexes, reranking, ties) → `scoring`
(metrics) → `gold` (making, checking and updating gold sets) → `pipeline` (the experiment, its fingerprints
and the run's steps). Each imports only from those before it (tests/test_layers.py); docs/architecture.md.
"""

from chunkeval.engine import moved

moved.install()  # the old flat module paths keep working until moved.REMOVAL, with a one-line warning
