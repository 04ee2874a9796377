"""Sorting and searching against NumPy: sort/argsort (stable, descending, NaN last), lexsort,
partition, searchsorted (sides, sorter, NaN), digitize, isin."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import ALL, array_of, arrays, bf16, check

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


def _no_negzero(x):
  if x.dtype.kind == "f" or x.dtype == bf16:
    x = np.where(x == 0, np.zeros((), x.dtype), x).astype(x.dtype)
  return x


def _host(x):
  return x.astype(np.float32) if x.dtype in (bf16, np.dtype(np.float16)) else x


@st.composite
def sortable(draw, dtypes=ALL):
  x = _no_negzero(draw(array_of(dtypes, lo=-5, hi=5, nan=True, max_dims=3)))
  axis = draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)) if x.ndim else st.none())
  return x, axis


def _ranks(v):
  """Dense ranks along the last axis with NaN largest (a total order for the references)."""
  v = _host(v).astype(np.float64) if v.dtype != np.bool_ else v.astype(np.float64)
  v = np.where(np.isnan(v), np.inf, v) + np.isnan(v)   # NaN sorts after inf
  return v


@given(xa=sortable())
def test_sort(xa):
  x, axis = xa
  ax = -1 if axis is None else axis
  src = x.ravel() if axis is None else x
  ref = np.sort(_host(src), axis=ax).astype(x.dtype)
  check(jnp.sort(x, axis=axis), ref)
  check(jnp.sort(x, axis=axis, descending=True), np.flip(ref, ax))
  if axis is not None:
    check(jnp.asarray(x).sort(axis), ref)


@given(xa=sortable())
def test_argsort(xa):
  x, axis = xa
  ax = -1 if axis is None else axis
  src = x.ravel() if axis is None else x
  ref = np.argsort(_host(src), axis=ax, kind="stable").astype(np.int32)
  check(jnp.argsort(x, axis=axis), ref)
  # descending and stable: larger first, ties in their original order
  r = np.moveaxis(_ranks(src), ax, -1) if src.ndim else _ranks(src)[None]
  n = r.shape[-1]
  desc = np.empty(r.shape, np.int32)
  for idx in np.ndindex(r.shape[:-1]):
    desc[idx] = np.lexsort((np.arange(n), -r[idx]))
  desc = np.moveaxis(desc, -1, ax) if src.ndim else desc[0]
  check(jnp.argsort(x, axis=axis, descending=True), desc)
  if axis is not None:
    check(jnp.asarray(x).argsort(axis=axis), ref)


def test_sort_errors_and_jit():
  with pytest.raises(ValueError, match="axis 1"):
    jnp.sort(np.ones(3), axis=1)
  with pytest.raises(TypeError, match="order"):
    jnp.sort(np.ones(3), order="x")
  f = ourjax.jit(lambda v: (jnp.sort(v), jnp.argsort(v, descending=True)))
  s, a = f(np.float32([3, 1, 2, 1]))
  check(s, np.float32([1, 1, 2, 3]))
  check(a, np.int32([0, 2, 1, 3]))
  # d/dv sum(sort(v) * [0, 1, 2, 3]) = each element's rank
  check(ourjax.grad(lambda v: jnp.sum(jnp.sort(v) * jnp.arange(4.0)))(np.float32([3, 1, 2, 0])),
        np.float32([3, 1, 2, 0]))


@given(data=st.data())
def test_lexsort(data):
  shape = data.draw(st.tuples(st.integers(1, 3), st.integers(0, 6)), label="shape")
  k = data.draw(st.integers(1, 3), label="keys")
  keys = [data.draw(arrays(data.draw(st.sampled_from([I32, F32, np.dtype(np.bool_)]),
                                     label="dt"), shape, -2, 2), label="key")
          for _ in range(k)]
  axis = data.draw(st.integers(-2, 1), label="axis")
  check(jnp.lexsort(keys, axis=axis), np.lexsort(keys, axis=axis).astype(np.int32))


@given(data=st.data())
def test_partition(data):
  x = data.draw(array_of([F32, I32], lo=-9, hi=9, min_dims=1, min_side=1), label="x")
  axis = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis")
  kth = data.draw(st.integers(0, x.shape[axis] - 1), label="kth")
  p = np.moveaxis(np.asarray(jnp.partition(x, kth, axis)), axis, -1)
  s = np.moveaxis(np.sort(x, axis), axis, -1)
  np.testing.assert_array_equal(p[..., kth], s[..., kth])
  assert (p[..., :kth] <= p[..., kth:kth + 1]).all() and (p[..., kth + 1:] >= p[..., kth:kth +
                                                                                 1]).all()
  ap = np.asarray(jnp.argpartition(x, kth, axis))
  np.testing.assert_array_equal(np.take_along_axis(x, ap, axis), np.moveaxis(p, -1, axis))


@given(data=st.data())
def test_searchsorted(data):
  dt = data.draw(st.sampled_from([F32, I32, np.dtype(np.uint8), np.dtype(np.float16)]),
                 label="dtype")
  a = np.sort(_no_negzero(data.draw(array_of([dt], lo=0, hi=9, nan=dt.kind == "f",
                                             max_dims=1, min_dims=1), label="a")))
  v = _no_negzero(data.draw(array_of([dt], lo=-1, hi=10, nan=dt.kind == "f", max_dims=2),
                            label="v"))
  for side in ("left", "right"):
    ref = np.searchsorted(a, v, side=side).astype(np.int32)
    check(jnp.searchsorted(a, v, side=side), ref)
    check(jnp.searchsorted(a, v, side=side, method="compare_all"), ref)
  perm = data.draw(st.permutations(range(a.size)), label="perm")
  shuffled = a[np.argsort(perm)] if a.size else a
  sorter = np.argsort(shuffled, kind="stable")
  check(jnp.searchsorted(shuffled, v, sorter=sorter),
        np.searchsorted(shuffled, v, sorter=sorter).astype(np.int32))


def test_searchsorted_errors():
  with pytest.raises(ValueError, match="side"):
    jnp.searchsorted(np.ones(3), 1, side="middle")
  with pytest.raises(ValueError, match="1-dimensional"):
    jnp.searchsorted(np.ones((2, 2)), 1)
  check(jnp.searchsorted(np.zeros(0), np.ones(2)), np.zeros(2, np.int32))


@given(data=st.data())
def test_digitize(data):
  bins = np.unique(data.draw(arrays(np.float32, data.draw(st.integers(0, 5), label="n"), -5, 5),
                             label="bins"))
  if data.draw(st.booleans(), label="decreasing"):
    bins = bins[::-1].copy()
  x = data.draw(array_of([F32], lo=-6, hi=6, max_dims=2), label="x")
  right = data.draw(st.booleans(), label="right")
  check(jnp.digitize(x, bins, right=right), np.digitize(x, bins, right=right).astype(np.int32))


@given(data=st.data())
def test_isin(data):
  e = data.draw(array_of([I32, F32], lo=-4, hi=4, max_dims=3), label="element")
  t = data.draw(array_of([e.dtype], lo=-4, hi=4, max_dims=2), label="test")
  invert = data.draw(st.booleans(), label="invert")
  check(jnp.isin(e, t, invert=invert), np.isin(e, t, invert=invert))
  for removed in ("in1d", "fix", "row_stack"):      # removed from jax.numpy in JAX 0.10
    assert not hasattr(jnp, removed) and removed not in dir(jnp)


@pytest.mark.parametrize("method", ["scan", "scan_unrolled", "sort", "compare_all"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_methods_match_numpy(method, side):
  """Every method (bisection in a loop or unrolled, comparison with every element) gives
  NumPy's insertion points: ties, values outside the range, NaN sorted last, lengths that are
  and are not one below a power of two, compiled and eager, queries of any shape."""
  rng = np.random.default_rng(len(method) + len(side))
  for n in (1, 2, 3, 7, 8, 100, 257):
    a = np.sort(rng.integers(-5, 5, n).astype(np.float32))
    if n > 3:
      a[-2:] = np.nan
    v = np.concatenate([rng.integers(-7, 7, 40).astype(np.float32),
                        [np.nan, np.inf, -np.inf, a[0], a[n // 2]]])
    want = np.searchsorted(a, v, side=side)
    got = jnp.searchsorted(a, v, side=side, method=method)
    np.testing.assert_array_equal(np.asarray(got), want)
    got = ourjax.jit(lambda x, y: jnp.searchsorted(x, y, side=side, method=method))(
        a, v.reshape(5, 9))
    np.testing.assert_array_equal(np.asarray(got), want.reshape(5, 9))
