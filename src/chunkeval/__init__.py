"""chunkeval: measure how well a chunking, an embedding model and a retriever find the answers.

From Python: `chunkeval.evaluate(...)` runs a sweep and `chunkeval.score(gold, run, k)` scores ranked
lists held in memory (see `chunkeval.api`); both return `Results` whose tables convert to pandas or polars.
`chunkeval.compare(...)` pairs results or recorded runs, `chunkeval.regressions(experiment)` applies the
alert rule, `chunkeval.inspect(run_id, query_id)` shows what a recorded run retrieved for one question, and
`chunkeval.check_gold(...)` checks a gold set.
"""

from chunkeval._version import __version__

__all__ = ["Results", "check_gold", "compare", "evaluate", "inspect", "regressions", "score", "__version__"]


def __getattr__(name):  # the API is imported on first use: `chunkeval --version` stays instant
    if name in ("Results", "check_gold", "compare", "evaluate", "inspect", "regressions", "score"):
        from chunkeval import api

        return getattr(api, name)
    raise AttributeError(f"module 'chunkeval' has no attribute {name!r}")
