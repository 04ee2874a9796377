"""Array indices as JAX converts them: negative ones of narrow signed types counted from the end
in the index's own type when the axis size fits it (then converted, the order of JAX's jaxpr),
else after widening (the values are NumPy's either way); unsigned ones converted to the index
type without a clamp (uint32 values of 2**31 or more wrap negative there, as in JAX)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_unsigned_index_converted_without_clamp(dtype):
  # unsigned indices are never negative: one conversion to the index type, then the gather
  x = jnp.arange(10)
  prims = [e.primitive.name for e in
           ourjax.make_jaxpr(x.__getitem__)(jnp.arange(3, dtype=dtype)).eqns]
  assert prims == ["convert_element_type", "broadcast_in_dim", "gather"]


def _reference_take_uint32(x, idx, mode):
  """JAX's x[idx] (x64 off) for uint32 indices: the index converts to int32 (an index of 2**31
  or more wraps negative and is not counted from the end), then the gather clamps it ('clip',
  the default) or drops it ('fill')."""
  i = idx.astype(np.int32).astype(np.int64)
  if mode == "fill":
    ok = (i >= 0) & (i < len(x))
    return np.where(ok, x[np.clip(i, 0, len(x) - 1)], np.iinfo(x.dtype).min)
  return x[np.clip(i, 0, len(x) - 1)]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=6),
       st.sampled_from(["clip", "fill"]), st.booleans())
def test_large_uint32_index_values(n, vals, mode, concrete):
  x = np.arange(n, dtype=np.int32) * 3 + 1
  idx = np.array(vals, np.uint32)
  want = _reference_take_uint32(x, idx, mode)
  get = (lambda a, i: a[i]) if mode == "clip" else (lambda a, i: a.at[i].get(mode="fill"))
  i_in = idx if concrete else jnp.asarray(idx)
  np.testing.assert_array_equal(np.asarray(get(jnp.asarray(x), i_in)), want)
  np.testing.assert_array_equal(np.asarray(ourjax.jit(get)(x, idx)), want)
  # jnp.take's clip mode gathers in the unsigned type: large indices clamp to the end
  np.testing.assert_array_equal(np.asarray(jnp.take(x, i_in, mode="clip")),
                                x[np.minimum(idx.astype(np.int64), n - 1)])
