"""``ourjax.ops.segment_*`` against a Python loop over the rows (NumPy float64), with dropped
out-of-range and negative ids, identities of empty segments, jit and grad."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import ops

_REF = {"sum": (np.add, 0.0), "prod": (np.multiply, 1.0), "max": (np.maximum, -np.inf),
        "min": (np.minimum, np.inf)}


def _loop(op, data, ids, n):
  fn, ident = _REF[op]
  out = np.full((n,) + data.shape[1:], ident)
  for i, row in zip(ids, data.astype(np.float64)):
    if 0 <= i < n:
      out[i] = fn(out[i], row)
  return out


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@settings(max_examples=15, deadline=None)
@given(rows=st.integers(0, 6), n=st.integers(0, 4), seed=st.integers(0, 2**31),
       jit=st.booleans())
def test_segment_reductions_match_a_loop(op, rows, n, seed, jit):
  rng = np.random.default_rng(seed)
  data = rng.uniform(0.5, 1.5, (rows, 3)).astype(np.float32)
  ids = rng.integers(-2, n + 2, rows).astype(np.int32)
  f = getattr(ops, f"segment_{op}")
  g = (lambda d, s: f(d, s, n)) if not jit else ourjax.jit(lambda d, s: f(d, s, n))
  np.testing.assert_allclose(g(data, ids), _loop(op, data, ids, n).astype(np.float32),
                             rtol=1e-6)


def test_num_segments_from_the_ids_and_integer_and_bool_identities():
  data = np.array([5, 1, 7, 2, 3, 4, 1, 3], np.int32)
  np.testing.assert_array_equal(ops.segment_sum(data, np.array([3, 3, 3, 4, 5, 5, -7, -6])),
                                [0, 0, 0, 13, 2, 7])
  np.testing.assert_array_equal(ops.segment_max(data, np.array([0, 0, 2, 2, 2, 0, 0, 0]), 4),
                                [5, np.iinfo(data.dtype).min, 7, np.iinfo(data.dtype).min])
  np.testing.assert_array_equal(ops.segment_min(np.array([True, False]), np.array([0, 0]), 2),
                                [False, True])
  with pytest.raises(ourjax.errors.ConcretizationTypeError):
    ourjax.jit(lambda d, s: ops.segment_sum(d, s))(data, np.zeros(8, np.int32))


def test_segment_sum_gradient_gathers_and_drops():
  ids = np.array([0, 2, 1, 5, -1, 1])
  w = np.arange(3.0)
  g = ourjax.grad(lambda d: (ops.segment_sum(d, ids, 3) * w).sum())(np.ones(6, np.float32))
  np.testing.assert_array_equal(g, [0, 2, 1, 0, 0, 1])
