"""Entry point of the `weekly` deployment (deployments/prefect.yaml): the trend tables, failing on regressions."""

from chunkeval.flows.trend_report import trend_report  # noqa: F401 (what the deployment runs)
