"""Small example libraries in the style of ``jax.example_libraries``: ``optimizers`` (pure
functional optimizers over pytrees) and ``stax`` (a tiny neural-network layer library)."""


def __getattr__(name):
  # ``ourjax.example_libraries.optimizers`` works after a plain ``import ourjax``
  if name in ("optimizers", "stax"):
    import importlib
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
