"""The pipeline: a run's steps in order, over the records they hand on.

`records` (the plain data between steps: inputs, chunkings, configurations, vectors, results), `sweep` (the
steps: load, chunk, embed, retrieve and score, summarise) and `runners` (where the tasks of a run execute).
"""
