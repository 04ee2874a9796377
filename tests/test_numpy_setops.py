"""The set functions (union1d, intersect1d, setdiff1d, setxor1d) and the array API's unique
functions (unique_values, unique_counts, unique_inverse, unique_all) against NumPy, on drawn
arrays with many repeats, NaNs and signed zeros: eager, cut or padded to a static ``size``
(JAX's default padding), under jit with ``size`` (one compiled program for all of them) and
vmap, and JAX's errors (ConcretizationTypeError under jit without ``size``)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import errors

SET_OPS = ("union1d", "intersect1d", "setdiff1d", "setxor1d")


def _values(dtype, max_size=8):
  """1-D arrays of few distinct values (so that they repeat and the arguments overlap)."""
  if np.dtype(dtype).kind == "f":
    pool = [0.0, -0.0, 1.5, -2.0, 3.0, np.nan]
  elif np.dtype(dtype) == np.bool_:
    pool = [False, True]
  else:
    pool = [0, 1, 2, 5, -3]
  return st.lists(st.sampled_from(pool), max_size=max_size).map(
      lambda v: np.array(v, dtype).reshape(-1))


def _check(got, want, dtype=None):
  got = np.asarray(got)
  want = np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert got.dtype == (want.dtype if dtype is None else dtype), (got.dtype, want.dtype)
  np.testing.assert_array_equal(got, want)


def _result_dtype(op, a, b):
  """JAX's: setdiff1d keeps ar1's dtype, the others promote (bool < int32 < float32 here)."""
  if op == "setdiff1d":
    return a.dtype
  kinds = {a.dtype.kind, b.dtype.kind}
  return np.dtype(np.float32 if "f" in kinds else np.int32 if "i" in kinds else np.bool_)


def _default_fill(op, want):
  """JAX's padding when no fill_value is given: union1d the smallest value; intersect1d and
  setxor1d the smallest (NaN if there is one), 0 when empty; setdiff1d 0."""
  if op == "setdiff1d" or want.size == 0:
    return 0
  if op == "union1d":
    return want[0]
  return np.nan if np.isnan(want.astype(float)).any() else want.min()


@given(op=st.sampled_from(SET_OPS), dtype=st.sampled_from([np.int32, np.float32, np.bool_]),
       data=st.data())
def test_set_functions(op, dtype, data):
  a = data.draw(_values(dtype))
  b = data.draw(_values(data.draw(st.sampled_from([dtype, np.int32]))))
  want = getattr(np, op)(a, b)
  dt = _result_dtype(op, a, b)
  _check(getattr(jnp, op)(a, b), want.astype(dt), dt)
  # a static size: the first `size` values, then the padding
  size = data.draw(st.integers(0, 10))
  if op == "union1d" and a.size + b.size == 0 and size:
    with pytest.raises(ValueError, match="fill_value"):
      jnp.union1d(a, b, size=size)
    return
  pad = max(size - want.size, 0)
  fill = _default_fill(op, want)
  got = getattr(jnp, op)(a, b, size=size)
  _check(got, np.concatenate([want[:size], np.full(pad, fill)]).astype(dt), dt)
  one = dt.type(1)                   # (a Python int would promote bools in intersect1d and
  got = getattr(jnp, op)(a, b, size=size, fill_value=one)           # setxor1d, as in JAX)
  _check(got, np.concatenate([want[:size], np.full(pad, one)]).astype(dt), dt)


@given(dtype=st.sampled_from([np.int32, np.float32]), data=st.data())
def test_intersect1d_indices(dtype, data):
  a, b = data.draw(_values(dtype)), data.draw(_values(dtype))
  want = np.intersect1d(a, b, return_indices=True)    # first occurrences
  got = jnp.intersect1d(a, b, return_indices=True)
  _check(got[0], want[0])
  _check(got[1], want[1], np.int32)
  _check(got[2], want[2], np.int32)
  # unique arguments may say so
  ua, ub = np.unique(a), np.unique(b)
  got = jnp.intersect1d(ua[::-1], ub, assume_unique=True, return_indices=True)
  want = np.intersect1d(ua[::-1], ub, assume_unique=True, return_indices=True)
  for g, w in zip(got, want):
    _check(g, w, g.dtype)
  # padded: values as the default, indices with the argument sizes
  k = want[0].size + 2
  vals, i1, i2 = jnp.intersect1d(ua, ub, return_indices=True, size=k)
  _check(i1, np.concatenate([np.searchsorted(ua, want[0]), [ua.size] * 2]), np.int32)
  _check(i2, np.concatenate([np.searchsorted(ub, want[0]), [ub.size] * 2]), np.int32)


@given(data=st.data())
def test_assume_unique(data):
  a = np.unique(data.draw(_values(np.int32)))
  b = np.unique(data.draw(_values(np.int32)))
  for op in ("intersect1d", "setdiff1d", "setxor1d"):
    want = getattr(np, op)(a, b, assume_unique=True)
    _check(getattr(jnp, op)(a, b, assume_unique=True), np.sort(want).astype(np.int32))


def test_set_functions_dtypes_and_weak_types():
  i8 = np.array([3, 1, 2], np.int8)
  for op in SET_OPS:
    assert getattr(jnp, op)(i8, 2).dtype == np.int8          # a Python scalar is weak
    r = getattr(jnp, op)(np.arange(3), np.array([1.5, 2.0], np.float32))
    assert r.dtype == (np.int32 if op == "setdiff1d" else np.float32)
  # JAX's where-promotion of a float fill_value in intersect1d and setxor1d only
  r = jnp.intersect1d(np.arange(3), np.arange(2), size=4, fill_value=2.5)
  assert r.dtype == np.float32 and r.weak_type
  _check(r, np.array([0, 1, 2.5, 2.5], np.float32))
  _check(jnp.setdiff1d(np.arange(3), np.arange(1), size=4, fill_value=2.5),
         np.array([1, 2, 2, 2], np.int32))
  # 2-D arguments are flattened
  _check(jnp.union1d(np.array([[5, 1], [3, 1]]), np.array([[1, 2, 3]])),
         np.array([1, 2, 3, 5], np.int32))


def test_set_functions_under_jit_and_vmap():
  rng = np.random.default_rng(0)

  @ourjax.jit
  def all_ops(a, b):
    out = {op: getattr(jnp, op)(a, b, size=9) for op in SET_OPS}
    out["indices"] = jnp.intersect1d(a, b, return_indices=True, size=4, fill_value=-1)
    out["unique_all"] = tuple(jnp.unique_all(a, size=5))
    return out

  for _ in range(3):                  # one compilation, three inputs
    a = rng.integers(-3, 4, 8).astype(np.int32)
    b = rng.integers(-3, 4, 6).astype(np.int32)
    got = all_ops(a, b)
    for op in SET_OPS:
      want = getattr(np, op)(a, b)
      pad = max(9 - want.size, 0)
      _check(got[op], np.concatenate([want[:9], np.full(pad, _default_fill(op, want))])
             .astype(np.int32))
    eager = jnp.intersect1d(a, b, return_indices=True, size=4, fill_value=-1)
    for g, e in zip(got["indices"], eager):
      _check(g, np.asarray(e))
    for g, e in zip(got["unique_all"], jnp.unique_all(a, size=5)):
      _check(g, np.asarray(e))
  # vmap with a size
  a = np.array([[1, 2, 3], [3, 3, 0]], np.int32)
  b = np.array([[2, 5], [0, 4]], np.int32)
  got = ourjax.vmap(lambda x, y: jnp.setxor1d(x, y, size=5, fill_value=9))(a, b)
  _check(got, np.array([[1, 3, 5, 9, 9], [3, 4, 9, 9, 9]], np.int32))


@pytest.mark.parametrize("op", SET_OPS)
def test_set_function_errors(op):
  a, b = jnp.array([3, 1, 2]), jnp.array([2, 7])
  fn = getattr(jnp, op)
  with pytest.raises(errors.ConcretizationTypeError):
    ourjax.jit(fn)(a, b)
  with pytest.raises(TypeError, match=op):
    fn([1, 2], b)
  with pytest.raises(errors.ConcretizationTypeError if op in ("union1d", "setdiff1d")
                     else ValueError):         # JAX's: its size is a jit static argument there
    ourjax.jit(lambda x, n: fn(x, x, size=n))(a, 3)
  if op in ("intersect1d", "setxor1d"):       # JAX reaches a boolean mask index there
    with pytest.raises(errors.NonConcreteBooleanIndexError):
      ourjax.jit(lambda x, y: fn(x, y, assume_unique=True))(a, b)


# ------------------------------------------------------------------------------------------------
# unique_values / unique_counts / unique_inverse / unique_all


@given(shape=st.sampled_from([(), (0,), (5,), (2, 3), (3, 1, 2)]), data=st.data())
def test_unique_functions(shape, data):
  n = int(np.prod(shape, dtype=int))
  x = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.5, -2.0, np.nan]), min_size=n,
                                  max_size=n)), np.float32).reshape(shape)
  want = np.unique_all(x)           # every NaN is its own value (equal_nan=False)
  _check(jnp.unique_values(x), want.values)
  got = jnp.unique_counts(x)
  assert type(got).__name__ == "_UniqueCountsResult" and got._fields == ("values", "counts")
  _check(got.values, want.values)
  _check(got.counts, want.counts, np.int32)
  got = jnp.unique_inverse(x)
  assert got._fields == ("values", "inverse_indices")
  _check(got.inverse_indices, want.inverse_indices.reshape(shape), np.int32)
  got = jnp.unique_all(x)
  assert got._fields == ("values", "indices", "inverse_indices", "counts")
  _check(got.values, want.values)
  _check(got.indices, want.indices, np.int32)
  _check(got.inverse_indices, want.inverse_indices.reshape(shape), np.int32)
  _check(got.counts, want.counts, np.int32)
  # a static size: values padded with the smallest one, counts with 0
  k = data.draw(st.integers(1, 7))
  if n == 0:
    with pytest.raises(ValueError, match="fill_value"):
      jnp.unique_values(x, size=k)
    _check(jnp.unique_values(x, size=k, fill_value=4), np.full(k, 4, np.float32))
    return
  pad = max(k - want.values.size, 0)
  got = jnp.unique_counts(x, size=k)
  _check(got.values, np.concatenate([want.values[:k], np.full(pad, want.values[0])]))
  _check(got.counts, np.concatenate([want.counts[:k], np.zeros(pad)]).astype(np.int32))


def test_unique_function_errors_and_weak_types():
  x = jnp.array([3, 1, 3])
  for name in ("unique_values", "unique_counts", "unique_inverse", "unique_all"):
    fn = getattr(jnp, name)
    with pytest.raises(errors.ConcretizationTypeError):
      ourjax.jit(fn)(x)
    with pytest.raises(TypeError):
      fn(x, 3)                         # size is keyword-only
    with pytest.raises(TypeError, match=name):
      fn([1, 2])
  assert jnp.unique_values(2.0).weak_type
  assert not jnp.unique_values(x).weak_type
