"""Policy over the engine's results: paired comparisons of configurations and runs, and the regression rule."""
