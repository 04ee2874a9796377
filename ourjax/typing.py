"""``ourjax.typing``: annotation aliases, as ``jax.typing``."""
from __future__ import annotations

from typing import Any, Union

import numpy as np

from ourjax.array import Array  # noqa: F401

# Anything ``jnp.asarray`` accepts as an array operand.
ArrayLike = Union[Array, np.ndarray, np.bool_, np.number, bool, int, float, complex]
# Anything ``jnp.dtype`` accepts.
DTypeLike = Union[str, type, np.dtype, Any]

__all__ = ["Array", "ArrayLike", "DTypeLike"]
