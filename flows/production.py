"""Entry point of the `production` deployment (deployments/prefect.yaml): a day of production traffic judged
against the grid, with its alarms."""

from chunkeval.flows.production import production  # noqa: F401 (what the deployment runs)
