"""Statistics below the engine: resampling (bootstrap intervals), paired tests and Holm's correction, the
step-down max-T correction of a family of paired checks, and the SQL that forms macro and micro averages. Definitions: docs/statistics.md and docs/metrics.md."""

from chunkeval.stats.maxt import MaxT, maxt_adjusted
from chunkeval.stats.resampling import (
    CHUNK_BYTES,
    bootstrap_ci,
    bootstrap_ci_groups,
    paired_diff_ci,
    paired_differences,
)
from chunkeval.stats.tests import (
    EXACT_MAX_N,
    TIE_TOLERANCE,
    compare_paired,
    compare_paired_rows,
    holm,
    incomplete_beta,
    paired_permutation,
    paired_permutation_columns,
    paired_ttest,
)

__all__ = [
    "CHUNK_BYTES",
    "EXACT_MAX_N",
    "MaxT",
    "TIE_TOLERANCE",
    "bootstrap_ci",
    "bootstrap_ci_groups",
    "compare_paired",
    "compare_paired_rows",
    "holm",
    "incomplete_beta",
    "maxt_adjusted",
    "paired_diff_ci",
    "paired_differences",
    "paired_permutation",
    "paired_permutation_columns",
    "paired_ttest",
]
