"""lax.sort (several operands, num_keys, NaNs last, -0.0 tied with +0.0, stable),
lax.sort_key_val and lax.top_k: values against Python/NumPy references, JVPs (the tangents
follow the permutation) against central finite differences and the transpose identity, vmap
against a loop over the batch."""
import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import dtypes, lax
from ourjax.config import enable_x64


def in_x64(f):
  @functools.wraps(f)
  def wrapped(*args, **kwargs):
    with enable_x64(True):
      return f(*args, **kwargs)
  return wrapped


def _np(x):
  return np.asarray(x)


def _rand(rng, shape, dtype, special=False):
  """Values with many ties; with ``special``, also NaNs, infinities and signed zeros."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -3
    return rng.integers(lo, 4, shape).astype(dtype)
  x = rng.integers(-3, 4, shape).astype(np.float64)
  if special:
    pick = rng.random(shape)
    x = np.where(pick < 0.15, np.nan, x)
    x = np.where((pick >= 0.15) & (pick < 0.25), np.inf * rng.choice([-1, 1], shape), x)
    x = np.where((pick >= 0.25) & (pick < 0.4), -0.0, x)
    x = np.where((pick >= 0.4) & (pick < 0.5), 0.0, x)
  return x.astype(dtype)


def _sort_key(v):
  """lax.sort's order of one element as a Python tuple: NaN last, -0.0 == +0.0."""
  v = float(v) if not isinstance(v, (bool, np.bool_)) else int(v)
  if v != v:
    return (1, 0.0)
  return (0, v + 0.0)


@st.composite
def shape_and_dim(draw, min_size=0):
  rank = draw(st.integers(1, 3))
  shape = tuple(draw(st.integers(min_size, 4)) for _ in range(rank))
  return shape, draw(st.integers(-rank, rank - 1))


def _dtype(name):
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _sort_reference(operands, dimension, num_keys):
  """A stable Python sort of every row along ``dimension`` by the first num_keys operands."""
  moved = [np.moveaxis(o, dimension, -1) for o in operands]
  outs = [np.empty_like(m) for m in moved]
  for idx in np.ndindex(*moved[0].shape[:-1]):
    n = moved[0].shape[-1]
    order = sorted(range(n), key=lambda i: tuple(_sort_key(m[idx][i]) for m in moved[:num_keys]))
    for o, m in zip(outs, moved):
      o[idx] = m[idx][order]
  return [np.moveaxis(o, -1, dimension) for o in outs]


def _assert_same(a, b):
  """Equal, NaNs equal and signed zeros distinguished (a stable sort keeps -0/+0 in order)."""
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype
  if dtypes.is_float(a.dtype):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_array_equal(a64, b64)
    np.testing.assert_array_equal(np.signbit(a64), np.signbit(b64))
  else:
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------------
# sort values


@given(shape_and_dim(), st.sampled_from(["float32", "int32", "bool", "bfloat16", "uint8"]),
       st.integers(0, 2**31))
def test_sort_single_operand(sd, dtype, seed):
  shape, dim = sd
  dt = _dtype(dtype)
  x = _rand(np.random.default_rng(seed), shape, dt, special=True)
  out = lax.sort(x, dimension=dim)
  want, = _sort_reference([x], dim, 1)
  _assert_same(out, want)


@given(shape_and_dim(), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**31))
def test_sort_multiple_operands(sd, n_ops, num_keys, seed):
  shape, dim = sd
  num_keys = min(num_keys, n_ops)
  rng = np.random.default_rng(seed)
  dts = [np.float32, np.int32, np.float32][:n_ops]
  ops = [_rand(rng, shape, dt, special=True) for dt in dts]
  # a last operand of distinct values shows the permutation itself (stability included)
  ops.append(np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape))
  outs = lax.sort(ops, dimension=dim, num_keys=num_keys)
  assert isinstance(outs, tuple) and len(outs) == len(ops)
  for o, w in zip(outs, _sort_reference(ops, dim, num_keys)):
    _assert_same(o, w)


def test_sort_complex_and_signed_zeros():
  x = np.array([1 + 2j, 1 - 1j, -3 + 0j, 1 + 2j, np.nan + 0j], np.complex64)
  np.testing.assert_array_equal(_np(lax.sort(x))[:4], np.array([-3, 1 - 1j, 1 + 2j, 1 + 2j]))
  assert np.isnan(_np(lax.sort(x))[4])
  z = np.array([0.0, -0.0, 0.0, -0.0], np.float32)
  # -0.0 and +0.0 compare equal: a stable sort leaves them where they were
  np.testing.assert_array_equal(np.signbit(_np(lax.sort(z))), np.signbit(z))


def test_sort_key_val_and_errors():
  k = np.array([3, 1, 2, 1], np.int32)
  v = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
  sk, sv = lax.sort_key_val(k, v)
  np.testing.assert_array_equal(_np(sk), [1, 1, 2, 3])
  np.testing.assert_array_equal(_np(sv), [20, 40, 30, 10])
  with pytest.raises(TypeError, match="equal shapes"):
    lax.sort([k, np.ones(3)])
  with pytest.raises(ValueError, match="num_keys"):
    lax.sort(k, num_keys=2)
  with pytest.raises(ValueError, match="num_keys"):
    lax.sort([k, v], num_keys=3)
  with pytest.raises(TypeError, match="at least one operand"):
    lax.sort([])
  with pytest.raises(ValueError):
    lax.sort(k, dimension=1)


# ------------------------------------------------------------------------------------------------
# sort derivatives and vmap


@settings(max_examples=20)
@given(shape_and_dim(), st.booleans(), st.integers(0, 2**31))
@in_x64
def test_sort_jvp(sd, two_operands, seed):
  shape, dim = sd
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape)          # distinct keys: sort is smooth here
  y = rng.standard_normal(shape)
  tx, ty = rng.standard_normal(shape), rng.standard_normal(shape)
  if two_operands:
    f = lambda a, b: lax.sort((a, b), dimension=dim, num_keys=1)
    prim, tan = ourjax.jvp(f, (x, y), (tx, ty))
    eps = 1e-6
    num = [(_np(p) - _np(m)) / (2 * eps) for p, m in zip(f(x + eps * tx, y + eps * ty),
                                                         f(x - eps * tx, y - eps * ty))]
    for t, n in zip(tan, num):
      np.testing.assert_allclose(_np(t), n, rtol=1e-6, atol=1e-8)
    # the tangents are permuted exactly like the values
    perm = np.argsort(x, axis=dim, kind="stable")
    np.testing.assert_array_equal(_np(tan[1]), np.take_along_axis(ty, perm, axis=dim))
  else:
    f = lambda a: lax.sort(a, dimension=dim)
    _, tan = ourjax.jvp(f, (x,), (tx,))
    perm = np.argsort(x, axis=dim, kind="stable")
    np.testing.assert_array_equal(_np(tan), np.take_along_axis(tx, perm, axis=dim))
    u = rng.standard_normal(shape)
    _, f_vjp = ourjax.vjp(f, x)
    ct, = f_vjp(u)
    np.testing.assert_allclose(np.sum(_np(tan) * u), np.sum(tx * _np(ct)), rtol=1e-10,
                               atol=1e-10)


def test_sort_grad_of_smallest():
  x = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 4.0]], np.float32)
  w = np.array([1.0, 10.0, 100.0], np.float32)
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.mul(lax.sort(v, 1),
                                                   lax.broadcast_in_dim(w, (2, 3), (1,))),
                                           (0, 1)))(x)
  np.testing.assert_array_equal(_np(g), [[100, 1, 10], [10, 1, 100]])


@settings(max_examples=30)
@given(shape_and_dim(), st.integers(1, 3), st.data())
def test_sort_vmap(sd, size, data):
  shape, dim = sd
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  in_axes = (data.draw(st.sampled_from([0, len(shape), None])),
             data.draw(st.sampled_from([0, len(shape)])))

  def mk(d, dt):
    s = list(shape)
    if d is not None:
      s.insert(d, size)
    return _rand(rng, tuple(s), dt, special=True)
  k, v = mk(in_axes[0], np.float32), mk(in_axes[1], np.int32)
  f = lambda a, b: lax.sort((a, b), dimension=dim, num_keys=1)
  out = ourjax.vmap(f, in_axes=in_axes)(k, v)
  for j in range(size):
    kj = k if in_axes[0] is None else np.take(k, j, axis=in_axes[0])
    vj = np.take(v, j, axis=in_axes[1])
    for o, w in zip(out, _sort_reference([kj, vj], dim, 1)):
      _assert_same(_np(o)[j], w)


# ------------------------------------------------------------------------------------------------
# top_k


def _top_k_reference(x, k, axis):
  """Descending in the total order (NaN largest, +0 above -0), lower index first on ties."""
  moved = np.moveaxis(x, axis, -1)
  vals = np.empty(moved.shape[:-1] + (k,), x.dtype)
  idxs = np.empty(moved.shape[:-1] + (k,), np.int32)

  def key(v):
    v = float(v)
    if v != v:
      return (1, 0.0, 0)
    return (0, v, 0 if np.signbit(v) else 1)
  for idx in np.ndindex(*moved.shape[:-1]):
    row = moved[idx]
    order = sorted(range(row.shape[0]), key=lambda i: (tuple(-c for c in key(row[i])), i))[:k]
    vals[idx] = row[order]
    idxs[idx] = order
  return np.moveaxis(vals, -1, axis), np.moveaxis(idxs, -1, axis)


@given(shape_and_dim(), st.sampled_from(["float32", "int32", "bfloat16", "bool"]), st.data())
def test_top_k(sd, dtype, data):
  shape, axis = sd
  k = data.draw(st.integers(0, shape[axis]))
  dt = _dtype(dtype)
  x = _rand(np.random.default_rng(data.draw(st.integers(0, 2**31))), shape, dt, special=True)
  vals, idxs = lax.top_k(x, k, axis=axis)
  want_v, want_i = _top_k_reference(x, k, axis)
  assert idxs.dtype == np.int32
  _assert_same(vals, want_v)
  np.testing.assert_array_equal(_np(idxs), want_i)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 300), st.integers(1, 3), st.booleans(),
       st.sampled_from(["float32", "int32", "bfloat16", "bool"]),
       st.sampled_from(["random", "ascending", "descending", "ties"]), st.data())
def test_top_k_compiled_selects(n, rows, leading, dtype, order, data):
  """Compiled, a small k selects (the CPU's sort with ``top_k``: one comparison an element
  for most, an insertion for the others): the same values and indices as the reference, for
  rows in any order, with ties (lower index first) and special values."""
  k = data.draw(st.integers(1, min(n, 4 * max(1, int(np.log2(n))))))
  dt = _dtype(dtype)
  x = _rand(np.random.default_rng(data.draw(st.integers(0, 2**31))), (rows, n), dt,
            special=True)
  if order == "ascending":
    x = np.sort(x, axis=1)
  elif order == "descending":
    x = np.sort(x, axis=1)[:, ::-1].copy()
  elif order == "ties":
    x = (x.astype(np.float32) > 0).astype(dt)
  if leading:
    x = np.ascontiguousarray(x.T)
  vals, idxs = ourjax.jit(lambda a: lax.top_k(a.T if leading else a, k))(x)
  want_v, want_i = _top_k_reference(x.T if leading else x, k, 1)
  _assert_same(vals, want_v)
  np.testing.assert_array_equal(_np(idxs), want_i)


def test_top_k_docs_example_and_errors():
  vals, idxs = lax.top_k(np.array([9.0, 3.0, 6.0, 4.0, 10.0], np.float32), 3)
  np.testing.assert_array_equal(_np(vals), [10, 9, 6])
  np.testing.assert_array_equal(_np(idxs), [4, 0, 2])
  with pytest.raises(ValueError, match="no larger than size along axis"):
    lax.top_k(np.ones(3), 4)
  with pytest.raises(ValueError, match="nonnegative"):
    lax.top_k(np.ones(3), -1)
  with pytest.raises(ValueError, match="complex"):
    lax.top_k(np.ones(3, np.complex64), 1)
  with pytest.raises(TypeError, match=">= 1 dimension"):
    lax.top_k(np.float32(1), 1)


@settings(max_examples=20)
@given(shape_and_dim(min_size=1), st.data())
@in_x64
def test_top_k_jvp(sd, data):
  shape, axis = sd
  k = data.draw(st.integers(0, shape[axis]))
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  x, t = rng.standard_normal(shape), rng.standard_normal(shape)
  f = lambda a: lax.top_k(a, k, axis=axis)[0]
  _, tan = ourjax.jvp(f, (x,), (t,))
  _, idx = _top_k_reference(x, k, axis)
  np.testing.assert_array_equal(_np(tan), np.take_along_axis(t, idx.astype(np.intp), axis=axis))
  eps = 1e-6
  np.testing.assert_allclose(_np(tan), (_np(f(x + eps * t)) - _np(f(x - eps * t))) / (2 * eps),
                             rtol=1e-6, atol=1e-8)
  u = rng.standard_normal(np.shape(tan))
  _, f_vjp = ourjax.vjp(f, x)
  ct, = f_vjp(u)
  np.testing.assert_allclose(np.sum(_np(tan) * u), np.sum(t * _np(ct)), rtol=1e-10, atol=1e-10)


@settings(max_examples=30)
@given(shape_and_dim(min_size=1), st.integers(1, 3), st.data())
def test_top_k_vmap(sd, size, data):
  shape, axis = sd
  k = data.draw(st.integers(0, shape[axis]))
  bdim = data.draw(st.integers(0, len(shape)))
  s = list(shape)
  s.insert(bdim, size)
  x = _rand(np.random.default_rng(data.draw(st.integers(0, 2**31))), tuple(s), np.float32,
            special=True)
  f = lambda a: lax.top_k(a, k, axis=axis)
  vals, idxs = ourjax.vmap(f, in_axes=bdim)(x)
  for j in range(size):
    wv, wi = _top_k_reference(np.take(x, j, axis=bdim), k, axis % len(shape))
    _assert_same(_np(vals)[j], wv)
    np.testing.assert_array_equal(_np(idxs)[j], wi)
