"""``ourjax.experimental``: names JAX keeps under ``jax.experimental``."""
