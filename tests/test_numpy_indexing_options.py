"""Options of ``x[idx]`` and ``x.at[idx]`` against NumPy references: ``wrap_negative_indices``
on every ``.at`` method and out-of-bounds mode, empty boolean masks, the
``jax_check_static_indices`` flag, weakly typed scalar updates that only the array's dtype
holds, and the primitives a static index becomes."""
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp


def _ref_get(data, idx, mode, wrap, fill):
  """NumPy: ``data[idx]`` where out-of-bounds indices clamp ('clip', 'promise_in_bounds') or
  give ``fill`` ('fill', 'drop'); negatives count from the end only if ``wrap``."""
  n = len(data)
  idx = np.where(idx < 0, idx + n, idx) if wrap else idx
  oob = (idx < 0) | (idx >= n)
  if mode in ("fill", "drop"):
    return np.where(oob, fill, data[np.where(oob, 0, idx)])
  return data[np.clip(idx, 0, n - 1)]


@given(n=st.integers(1, 6), idx=st.lists(st.integers(-9, 9), min_size=1, max_size=6),
       mode=st.sampled_from(["promise_in_bounds", "clip", "fill", "drop"]), wrap=st.booleans())
def test_get_wrap_negative_indices(n, idx, mode, wrap):
  data = np.arange(1.0, n + 1, dtype=np.float32)
  idx = np.array(idx, np.int32)
  want = _ref_get(data, idx, mode, wrap, 99.0)
  f = lambda d, i: jnp.asarray(d).at[i].get(mode=mode, fill_value=99.0,
                                             wrap_negative_indices=wrap)
  np.testing.assert_array_equal(np.asarray(f(data, idx)), want)
  np.testing.assert_array_equal(np.asarray(ourjax.jit(f)(data, idx)), want)
  for k in idx.tolist():     # static scalar indices take the slicing path
    np.testing.assert_array_equal(np.asarray(f(data, k)),
                                  _ref_get(data, np.array(k), mode, wrap, 99.0))


_UFUNCS = {"set": None, "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
           "min": np.minimum, "max": np.maximum, "divide": np.divide, "power": np.power}


@pytest.mark.parametrize("op", sorted(_UFUNCS))
@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("wrap", [True, False])
def test_scatter_wrap_negative_indices(op, mode, wrap):
  rng = np.random.default_rng(0)
  n = 6
  data = rng.uniform(1, 2, n).astype(np.float32)
  vals = rng.uniform(1, 2, 5).astype(np.float32)
  # unique places once wrapped (or not) and clipped: 'set' at a place written twice keeps
  # either value (JAX leaves the order to the backend; a GPU's differs from NumPy's)
  idx = np.array([-2, 2, 9, 3, 1], np.int32)
  ref_idx = np.where(idx < 0, idx + n, idx) if wrap else idx
  if mode == "clip":
    ref_idx, ref_vals = np.clip(ref_idx, 0, n - 1), vals
  else:
    ok = (ref_idx >= 0) & (ref_idx < n)
    ref_idx, ref_vals = ref_idx[ok], vals[ok]
  want = data.astype(np.float64)
  if _UFUNCS[op] is None:
    want[ref_idx] = ref_vals
  else:
    _UFUNCS[op].at(want, ref_idx, ref_vals.astype(np.float64))
  f = lambda d, i, v: getattr(jnp.asarray(d).at[i], op)(v, mode=mode,
                                                        wrap_negative_indices=wrap)
  np.testing.assert_allclose(np.asarray(f(data, idx, vals)), want, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(data, idx, vals)), want, rtol=1e-6)


def test_apply_and_static_index_wrap_negative_indices():
  x = jnp.arange(4.0)
  np.testing.assert_array_equal(np.asarray(x.at[-1].apply(lambda v: v + 10)), [0, 1, 2, 13])
  # not wrapped, -1 is out of bounds: the update is dropped, a get clamps to element 0
  np.testing.assert_array_equal(
      np.asarray(x.at[-1].apply(lambda v: v + 10, wrap_negative_indices=False)), [0, 1, 2, 3])
  np.testing.assert_array_equal(np.asarray(x.at[-1].add(5.0, wrap_negative_indices=False)),
                                [0, 1, 2, 3])
  assert float(x.at[-1].get(wrap_negative_indices=False)) == 0.0


@pytest.mark.parametrize("x_shape,m_shape", [((3,), (0,)), ((3, 4), (0,)), ((3, 4), (0, 4)),
                                             ((3, 4), (3, 0)), ((3, 4, 5), (3, 0)),
                                             ((3, 4), (0, 0))])
def test_empty_boolean_masks(x_shape, m_shape):
  x = np.arange(int(np.prod(x_shape)), dtype=np.int32).reshape(x_shape)
  m = np.zeros(m_shape, bool)
  want = x[m]
  got = jnp.asarray(x)[m]
  assert got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize("m_shape", [(2, 0), (0, 5), (2,)])
def test_boolean_mask_shape_mismatch(m_shape):
  with pytest.raises(IndexError, match="boolean index did not match"):
    np.zeros((3, 4))[np.zeros(m_shape, bool)]          # NumPy agrees it is an error
  with pytest.raises(IndexError, match="boolean index did not match shape"):
    jnp.zeros((3, 4))[np.zeros(m_shape, bool)]


_STATIC_OOB = [((2,), -4, -4, 0, 2), ((2,), 4, 4, 0, 2), ((2, 3), np.index_exp[:, 4], 4, 1, 3),
               ((2, 3), np.index_exp[..., -4], -4, 1, 3),
               ((2, 3, 5), np.index_exp[3, :, 0], 3, 0, 2),
               ((2, 3, 5), np.index_exp[:, [1, 2], 6], 6, 2, 5),
               ((2, 3, 5), np.index_exp[np.arange(3), 6, None], 6, 1, 3)]


@pytest.mark.parametrize("shape,idx,bad,axis,size", _STATIC_OOB)
def test_check_static_indices(shape, idx, bad, axis, size):
  x = jnp.zeros(shape)
  msg = f"index {bad} out of bounds for axis {axis} with size {size}"
  x[idx]                                   # off by default: clamped, as JAX
  ourjax.config.update("jax_check_static_indices", True)
  try:
    for f in (lambda x: x[idx], ourjax.jit(lambda x: x[idx]), lambda x: x.at[idx].get()):
      with pytest.raises(IndexError, match=msg):
        f(x)
    # only the promise-in-bounds mode checks; in-bounds and array indices pass
    x.at[idx].get(mode="clip")
    x.at[idx].get(mode="fill", fill_value=0)
    assert float(jnp.arange(3.0)[np.array(7)]) == 2.0
    assert float(jnp.arange(3.0)[-3]) == 0.0
  finally:
    ourjax.config.update("jax_check_static_indices", False)


def test_python_scalar_updates_take_the_array_dtype():
  # a Python int the dtype holds goes in directly; others wrap from int32, or overflow
  a = jnp.zeros(2, jnp.uint32)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert a.at[0].set(2 ** 32 - 1).tolist() == [2 ** 32 - 1, 0]
    assert jnp.zeros(1, jnp.uint8).at[0].set(-1).tolist() == [255]
    assert jnp.zeros(1, jnp.int8).at[0].set(2 ** 31 - 1).tolist() == [np.int8(-1)]
  with pytest.raises(OverflowError):
    jnp.zeros(1, jnp.uint8).at[0].set(2 ** 32 - 1)
  with pytest.warns(FutureWarning, match="scatter inputs have incompatible types"):
    jnp.arange(3, dtype=jnp.int16).at[0].set(jnp.int32(1))


def test_string_index_error():
  with pytest.raises(TypeError, match="JAX does not support string indexing"):
    jnp.zeros(2)["abc"]
  with pytest.raises(TypeError, match="JAX does not support string indexing"):
    jnp.zeros((2, 3))[:, "abc"]


def test_static_indexing_primitives():
  prims = lambda f, x: [e.primitive.name for e in ourjax.make_jaxpr(f)(x).eqns]
  x = jnp.ones((3, 4, 5))
  assert prims(lambda x: x[:2, :2], x) == ["slice"]
  assert prims(lambda x: x[0, :2, 1], x) == ["slice", "squeeze"]
  assert prims(lambda x: x[..., 0], x) == ["slice", "squeeze"]
  assert prims(lambda x: x[0, None, :2], x) == ["slice", "squeeze", "broadcast_in_dim"]
  assert prims(lambda x: x[None], x) == ["broadcast_in_dim"]
  a = np.arange(60.0).reshape(3, 4, 5)
  for idx in [np.index_exp[0, None, :2], np.index_exp[:, None, 1], np.index_exp[1, ::-1],
              np.index_exp[None, 1, None, 2, None], np.index_exp[-1]]:
    np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda x: x[idx])(a)), a[idx])


@pytest.mark.parametrize("idx,fix", [
    ([0], "array"), ([0, 0], "array"), ([[0, 0]], "tuple"), ([0, [0, 1]], "tuple"),
    ([0, np.arange(2)], "tuple"), ([0, None], "tuple"), ([0, slice(None)], "tuple"),
    (range(2), "array")])
def test_a_list_index_is_refused_naming_the_reading_its_items_suggest(idx, fix):
  # NumPy once read some lists as tuples and others as arrays; JAX refuses both, and says which
  x = jnp.arange(6).reshape(3, 2)
  for op in (lambda: x[idx], lambda: x.at[idx].set(0)):
    with pytest.raises(TypeError, match=rf"use `arr\[{fix}\(seq\)\]` instead of `arr\[seq\]`"):
      op()
  good = np.array(idx) if fix == "array" else tuple(idx)
  np.testing.assert_array_equal(x[good], np.arange(6).reshape(3, 2)[good])
