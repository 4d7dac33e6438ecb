"""chunkeval: measure how well a chunking, an embedding model and a retriever find the answers.

The Python API, a short manual (each function's own help says more; docs/python.md has examples):

    evaluate(corpus_dir, questions, **settings) -> Results
        Run a sweep (any experiment setting as a keyword: chunk_sizes=[100, 200], k=5, retriever="bm25", ...)
        and return its tables: summary, per_query, by_corpus (Arrow; .to_pandas() and .to_polars()).
    score(gold, run, k=10) -> Results
        Set and rank metrics of ranked lists held in memory (query id -> items), as trec_eval defines them.
    compare(a, b=None, *, metric) -> Comparisons
        Paired comparisons of Results, per-query tables or recorded run ids: differences, intervals, p-values.
    regressions(experiment) -> list
        The regression verdict of the newest recorded run against its baseline (as `chunkeval trend
        --fail-on-regression` gives it).
    inspect(run_id, query_id) -> Inspection
        What a recorded run retrieved for one question, beside its references.
    check_gold(corpus_dir, questions) -> dict
        The findings of `chunkeval gold check` on a gold set.

Every argument that takes a list of names also takes one name as a string. Definitions of every metric and
statistic: docs/metrics.md and docs/statistics.md.
"""

from chunkeval._version import __version__

_API = ("Results", "check_gold", "compare", "evaluate", "inspect", "regressions", "score")
__all__ = [*_API, "__version__"]


def __getattr__(name):  # the API is imported on first use: `chunkeval --version` stays instant
    if name in _API:
        from chunkeval import api  # on first use: `import chunkeval` and `--version` load no engine

        return getattr(api, name)
    raise AttributeError(f"module 'chunkeval' has no attribute {name!r}")


def __dir__():  # dir(), help() and tab completion list the API, which loads on first use
    return sorted({*globals(), *__all__})
