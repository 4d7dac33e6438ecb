"""The flow entry points of a checkout's deployments: deployments/prefect.yaml names `flows/<name>.py:<flow>`,
so that `prefect deploy` at the repository's root deploys this checkout's code. Each flow is defined once, in
the package (`chunkeval.flows`); an install's deployments name those modules directly."""
