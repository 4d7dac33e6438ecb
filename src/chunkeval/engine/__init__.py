"""The engine: from an experiment's inputs to per-query metrics. Pure functions over numpy and Arrow.

inputs (corpora and gold) → chunking → embedding → retrievers → metrics, chained by `sweep`;
`experiment` holds the settings, `runners` the task runners a flow may use. docs/architecture.md.
"""
