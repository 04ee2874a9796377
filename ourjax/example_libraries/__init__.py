"""Small example libraries in the style of ``jax.example_libraries``: ``optimizers`` (pure
functional optimizers over pytrees) and ``stax`` (a tiny neural-network layer library)."""
