"""Negative array indices of narrow signed types: counted from the end in the index's own type
when the axis size fits it (then converted, the order of JAX's jaxpr), else after widening; the
values are NumPy's either way."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_signed_index_normalized_before_conversion(dtype):
  x = jnp.arange(10)
  prims = [e.primitive.name for e in
           ourjax.make_jaxpr(x.__getitem__)(jnp.arange(3, dtype=dtype)).eqns]
  assert prims[:3] == ["lt", "add", "select_n"]
  assert prims[-2:] == ["broadcast_in_dim", "gather"]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8])
@pytest.mark.parametrize("n", [10, 200, 300])
def test_narrow_index_values_match_numpy(dtype, n):
  info = np.iinfo(dtype)
  idx = np.array([v for v in (-1, -n, 0, n - 1, info.max, info.min, 5)
                  if info.min <= v <= info.max and -n <= v < n], dtype)
  x = np.arange(n) * 3
  want = x[idx]
  np.testing.assert_array_equal(np.asarray(jnp.asarray(x)[idx]), want)
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda a, i: a[i])(x, idx)), want)
