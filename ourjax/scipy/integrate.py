"""``ourjax.scipy.integrate``: ``trapezoid`` (the trapezoidal rule, ``jnp.trapezoid``)."""
from ourjax.numpy import trapezoid  # noqa: F401

__all__ = ["trapezoid"]
