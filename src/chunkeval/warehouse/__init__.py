"""The DuckDB warehouse of runs."""

from chunkeval.warehouse.core import *  # noqa: F401,F403
from chunkeval.warehouse.core import DEFAULT_THRESHOLD, REGRESSION_METRICS, SCHEMA_VERSION, Warehouse  # noqa: F401
