"""Entry point of the `nightly` and `on-change` deployments (deployments/prefect.yaml): evaluate an experiment."""

from chunkeval.flows.evaluate import evaluate  # noqa: F401 (what the deployment runs)
