"""Entry point of the `poll` deployment (deployments/prefect.yaml): emit change events for experiments whose
corpus, gold set or model changed.
"""

from chunkeval.flows.watch import watch  # noqa: F401 (what the deployment runs)
