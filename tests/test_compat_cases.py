"""Regression tests for JAX-compatibility differences found by ``tools/jaxdiff.py`` (the same
small programs run with JAX and with ourjax).  Expected values are NumPy's or written out by
hand from JAX's documented behaviour; nothing here imports JAX."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def same(x, value, dtype, weak=False):
  """``x`` is an ourjax array with this value, dtype and weak type."""
  assert isinstance(x, ourjax.Array), type(x)
  assert x.dtype == np.dtype(dtype), (x.dtype, dtype)
  assert x.weak_type == weak, (x.weak_type, weak)
  np.testing.assert_allclose(np.asarray(x, np.float64) if x.dtype.kind != "c" else np.asarray(x),
                             value, rtol=1e-6)


# --- promotion ---------------------------------------------------------------------------------

def test_python_int_wraps_into_narrow_int_dtypes():
  same(jnp.ones(2, jnp.int8) + 300, [45, 45], jnp.int8)
  same(jnp.uint8(3) + (-1), 2, jnp.uint8)
  same(jnp.ones(2, jnp.uint32) + (-1), [0, 0], jnp.uint32)
  same(ourjax.jit(lambda x: x * 300)(jnp.ones(2, jnp.int8)), [44, 44], jnp.int8)
  with pytest.raises(OverflowError):      # must still fit the default int dtype
    jnp.ones(2, jnp.int8) + 2 ** 31
  with pytest.raises(OverflowError):
    jnp.ones(2, jnp.uint32) + (2 ** 32 - 1)


def test_binary_shape_mismatch_is_type_error():
  with pytest.raises(TypeError, match="incompatible shapes"):
    jnp.ones(3) + jnp.ones(4)
  with pytest.raises(TypeError):
    jnp.multiply(jnp.ones((2, 3)), jnp.ones((3, 2)))
  with pytest.raises(ValueError):         # jnp.where broadcasts explicitly: a ValueError
    jnp.where(jnp.ones(2) > 0, jnp.ones(3), 0)
