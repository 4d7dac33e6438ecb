"""Publishing: recorded runs sent where teams already look (`mlflow`: an MLflow tracking server), read from the
warehouse. A layer beside the reports, below the interfaces that publish (`chunkeval run --mlflow`, the flow)."""
