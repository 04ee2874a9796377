"""lax.index_take: indices taken modulo the axis sizes as Python's % (negatives from the end),
its value against NumPy and its VJP against a scatter-add."""
import numpy as np
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import lax


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(-12, 11), min_size=1, max_size=5), st.sampled_from([0, 1, 2]),
       st.sampled_from([np.int32, np.int8, np.uint8]))
def test_index_take_matches_numpy_wrap(idx, axis, idtype):
  src = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
  idx = np.array([i % 256 if idtype == np.uint8 else i for i in idx]).astype(idtype)
  got = np.asarray(lax.index_take(src, (idx,), (axis,)))
  want = np.moveaxis(np.take(src, idx.astype(np.int64), axis=axis, mode="wrap"), axis, 0)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(
      np.asarray(ourjax.jit(lambda s: lax.index_take(s, (idx,), (axis,)))(src)), want)


def test_index_take_vjp_is_scatter_add():
  src = np.random.RandomState(0).randn(3, 4, 5).astype(np.float32)
  i0, i1 = np.array([-1, -2, 2]), np.array([1, -1, 3])
  f = lambda s: lax.index_take(s, (i0, i1), (0, 2))
  y, vjp = ourjax.vjp(f, src)
  ct = np.random.RandomState(1).randn(*np.shape(y)).astype(np.float32)
  want = np.zeros_like(src)
  np.add.at(want, (i0 % 3, slice(None), i1 % 5), ct)
  np.testing.assert_allclose(np.asarray(vjp(ct)[0]), want, rtol=1e-6)
