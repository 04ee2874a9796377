"""lax cumulative reductions (cumsum, cumprod, cummax, cummin, cumlogsumexp) and
associative_scan: values against NumPy's accumulate (float64) and a Python loop, JVPs/gradients
against central finite differences, cumsum's transpose by <J v, u> = <v, J^T u>, vmap against a
loop over the batch."""
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


_UFUNC = {"cumsum": np.add, "cumprod": np.multiply, "cummax": np.maximum,
          "cummin": np.minimum, "cumlogsumexp": np.logaddexp}


def _reference(name, x, axis, reverse):
  """float64 accumulate, from the other end when reversed."""
  x = x.astype(np.float64) if dtypes.is_float(x.dtype) else x.astype(np.int64)
  if reverse:
    x = np.flip(x, axis)
  with np.errstate(all="ignore"):
    out = _UFUNC[name].accumulate(x, axis=axis) if x.size else x
  return np.flip(out, axis) if reverse else out


@st.composite
def shape_and_axis(draw, min_size=0, max_size=5):
  rank = draw(st.integers(1, 3))
  shape = tuple(draw(st.integers(min_size, max_size)) for _ in range(rank))
  return shape, draw(st.integers(0, rank - 1))


def _rand(rng, shape, dtype, name=""):
  dtype = np.dtype(dtype)
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-3, 4, shape).astype(dtype)
  if name == "cumprod":   # keep products of many terms in range
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


@given(shape_and_axis(), st.sampled_from(sorted(_UFUNC)),
       st.sampled_from(["float32", "int32", "float16", "bfloat16", "int8"]), st.booleans(),
       st.integers(0, 2**31))
def test_cumulative_matches_numpy(sa, name, dtype, reverse, seed):
  shape, axis = sa
  dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
  if name == "cumlogsumexp" and not dtypes.is_float(dt):
    return
  x = _rand(np.random.default_rng(seed), shape, dt, name)
  out = getattr(lax, name)(x, axis=axis, reverse=reverse)
  assert out.shape == shape and out.dtype == dt
  want = _reference(name, x, axis, reverse)
  if not dtypes.is_float(dt):
    np.testing.assert_array_equal(_np(out), want.astype(dt))   # wraps like the integer type
  else:
    tol = {"float32": 2e-6, "float16": 1e-2, "bfloat16": 4e-2}[dtype]
    np.testing.assert_allclose(_np(out).astype(np.float64), want, rtol=tol, atol=tol * 4)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400), st.integers(1, 3), st.sampled_from(sorted(_UFUNC)),
       st.sampled_from(["float32", "int32", "bfloat16"]), st.booleans(), st.booleans(),
       st.integers(0, 2**31))
def test_long_axes_compiled_match_numpy(n, other, name, dtype, reverse, leading, seed):
  """Compiled, axes longer than ``cumulative.DIRECT_MAX`` are scanned by blocks (recursively
  past ``BLOCK * DIRECT_MAX``), padded where the length is not a multiple of the block."""
  dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
  if name == "cumlogsumexp" and not dtypes.is_float(dt):
    return
  shape, axis = ((n, other), 0) if leading else ((other, n), 1)
  x = _rand(np.random.default_rng(seed), shape, dt, name)
  if name == "cumprod" and dtypes.is_float(dt):
    x = (np.abs(x.astype(np.float32)) ** 0.02 * np.sign(x.astype(np.float32))).astype(dt)
  out = ourjax.jit(lambda v: getattr(lax, name)(v, axis=axis, reverse=reverse))(x)
  want = _reference(name, x, axis, reverse)
  if not dtypes.is_float(dt):
    np.testing.assert_array_equal(_np(out), want.astype(dt))
  else:
    tol = {"float32": 2e-5, "bfloat16": 4e-2}[dtype]
    scale = np.maximum.accumulate(np.abs(want), axis=axis) if name == "cumsum" else \
        np.abs(want)
    np.testing.assert_array_less(np.abs(_np(out).astype(np.float64) - want),
                                 tol * (scale + 4) * np.sqrt(n))


def test_cumulative_nans_and_errors():
  x = np.array([1.0, np.nan, 3.0, 0.5], np.float32)
  np.testing.assert_array_equal(_np(lax.cummax(x)), [1, np.nan, np.nan, np.nan])
  np.testing.assert_array_equal(_np(lax.cummin(x, reverse=True)), [np.nan, np.nan, 0.5, 0.5])
  np.testing.assert_allclose(_np(lax.cumlogsumexp(np.array([-np.inf, -np.inf, 0.0]))),
                             [-np.inf, -np.inf, 0.0])
  with pytest.raises(ValueError, match="axis 1 is out of bounds"):
    lax.cumsum(x, axis=1)
  with pytest.raises(TypeError, match="cumsum does not accept dtype bool"):
    lax.cumsum(x > 1)
  with pytest.raises(TypeError, match="cumlogsumexp does not accept dtype int32"):
    lax.cumlogsumexp(np.arange(3, dtype=np.int32))
  with pytest.raises(ValueError, match="out of bounds"):   # a scalar has no axis
    lax.cumsum(np.float32(1.0), axis=0)


# ------------------------------------------------------------------------------------------------
# derivatives


def _num_jvp(f, x, t, eps=1e-6):
  return (np.asarray(f(x + eps * t), np.float64) - np.asarray(f(x - eps * t), np.float64)) / (
      2 * eps)


@settings(max_examples=20)
@given(shape_and_axis(min_size=1), st.sampled_from(sorted(_UFUNC)), st.booleans(),
       st.integers(0, 2**31))
@in_x64
def test_cumulative_jvp_finite_differences(sa, name, reverse, seed):
  shape, axis = sa
  rng = np.random.default_rng(seed)
  x = _rand(rng, shape, np.float64, name)   # distinct values: cummax/cummin are smooth here
  t = rng.standard_normal(shape)
  f = lambda v: getattr(lax, name)(v, axis=axis, reverse=reverse)
  out, tan = ourjax.jvp(f, (x,), (t,))
  np.testing.assert_allclose(_np(out), _reference(name, x, axis, reverse), rtol=1e-12,
                             atol=1e-12)
  np.testing.assert_allclose(_np(tan), _num_jvp(f, x, t), rtol=1e-6, atol=1e-8)
  # reverse mode agrees with forward mode: <J t, u> = <t, J^T u>
  u = rng.standard_normal(shape)
  _, f_vjp = ourjax.vjp(f, x)
  ct, = f_vjp(u)
  np.testing.assert_allclose(np.sum(_np(tan) * u), np.sum(t * _np(ct)), rtol=1e-9, atol=1e-9)


@settings(max_examples=20)
@given(shape_and_axis(), st.booleans(), st.integers(0, 2**31))
@in_x64
def test_cumsum_transpose(sa, reverse, seed):
  shape, axis = sa
  rng = np.random.default_rng(seed)
  v, u = rng.standard_normal(shape), rng.standard_normal(shape)
  f = lambda a: lax.cumsum(a, axis=axis, reverse=reverse)
  _, f_vjp = ourjax.vjp(f, v)
  ct, = f_vjp(u)
  np.testing.assert_allclose(np.sum(_np(f(v)) * u), np.sum(v * _np(ct)), rtol=1e-10, atol=1e-10)
  # the cumsum's transpose is the cumsum from the other end
  np.testing.assert_allclose(_np(ct), _reference("cumsum", u, axis, not reverse), rtol=1e-12,
                             atol=1e-12)
  assert "cumsum" in str(ourjax.make_jaxpr(f_vjp)(u))


def test_cumprod_grad_with_zeros(x64):
  x = np.array([2.0, 0.0, 3.0, 4.0])
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.cumprod(v), (0,)))(x)
  # d/dx_j sum_i prod_{k<=i} x_k, exact with the zero at position 1
  want = [1 + 0, 2 + 2 * 3 + 2 * 3 * 4, 0, 0]
  np.testing.assert_array_equal(_np(g), want)


def test_cummax_ties_split_like_lax_max():
  # cummax([a, a]): the second output is max(a, a), whose JVP splits the tangent in half
  _, t = ourjax.jvp(lambda v: lax.cummax(v), (np.array([1.0, 1.0], np.float32),),
                    (np.array([2.0, 4.0], np.float32),))
  np.testing.assert_array_equal(_np(t), [2.0, 3.0])
  _, t = ourjax.jvp(lambda v: lax.cummin(v, reverse=True),
                    (np.array([1.0, 2.0, 0.5], np.float32),), (np.array([1.0, 2.0, 3.0],
                                                                        np.float32),))
  np.testing.assert_array_equal(_np(t), [3.0, 3.0, 3.0])


def test_integer_cumulative_has_zero_tangent():
  x = np.arange(4, dtype=np.int32)
  _, t = ourjax.jvp(lambda v: lax.cummax(v), (x,), (np.zeros(4, dtypes.float0),))
  assert t.dtype == dtypes.float0


# ------------------------------------------------------------------------------------------------
# vmap


@settings(max_examples=30)
@given(shape_and_axis(max_size=4), st.sampled_from(sorted(_UFUNC)), st.booleans(),
       st.integers(1, 3), st.data())
def test_cumulative_vmap(sa, name, reverse, size, data):
  shape, axis = sa
  bdim = data.draw(st.integers(0, len(shape)))
  full = list(shape)
  full.insert(bdim, size)
  x = _rand(np.random.default_rng(data.draw(st.integers(0, 2**31))), tuple(full), np.float32,
            name)
  f = lambda v: getattr(lax, name)(v, axis=axis, reverse=reverse)
  out = ourjax.vmap(f, in_axes=bdim)(x)
  want = np.stack([np.asarray(f(np.take(x, i, axis=bdim))) for i in range(size)])
  np.testing.assert_allclose(_np(out), want, rtol=1e-6, atol=1e-6)
  # and vmap of the JVP (the associative scan under vmap)
  _, tan = ourjax.vmap(lambda v: ourjax.jvp(f, (v,), (v,)), in_axes=bdim)(x)
  want_t = np.stack([np.asarray(ourjax.jvp(f, (xi,), (xi,))[1])
                     for xi in (np.take(x, i, axis=bdim) for i in range(size))])
  np.testing.assert_allclose(_np(tan), want_t, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# associative_scan


def _affine(a, b):
  """Composition of affine maps v -> m v + c (first a, then b): associative, not commutative."""
  (ma, ca), (mb, cb) = a, b
  return lax.mul(mb, ma), lax.add(lax.mul(mb, ca), cb)


@given(st.integers(0, 9), st.integers(1, 3), st.booleans(), st.integers(0, 2**31))
@in_x64
def test_associative_scan_matches_loop(n, width, reverse, seed):
  rng = np.random.default_rng(seed)
  m, c = rng.standard_normal((width, n)), rng.standard_normal((width, n))
  out_m, out_c = lax.associative_scan(_affine, (m, c), reverse=reverse, axis=1)
  want_m, want_c = np.empty_like(m), np.empty_like(c)
  order = range(n - 1, -1, -1) if reverse else range(n)
  acc = None
  for i in order:
    cur = (m[:, i], c[:, i])
    acc = cur if acc is None else (cur[0] * acc[0], cur[0] * acc[1] + cur[1])
    want_m[:, i], want_c[:, i] = acc
  np.testing.assert_allclose(_np(out_m), want_m, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(_np(out_c), want_c, rtol=1e-12, atol=1e-12)


def test_associative_scan_errors():
  with pytest.raises(ValueError, match="same first dimension"):
    lax.associative_scan(lax.add, (np.ones(3), np.ones(4)))


@pytest.mark.parametrize("shape,axis", [((0,), 0), ((2, 0), 1), ((0, 3), 0), ((0, 3), 1)])
@pytest.mark.parametrize("dt", [np.int32, np.int8, np.float32])
def test_cumlogsumexp_of_an_empty_array(shape, axis, dt):
  """An empty array (integer ones too, as JAX accepts them) comes back empty; eager and
  jitted."""
  x = np.zeros(shape, dt)
  for fn in (lambda f: f, ourjax.jit):
    got = fn(lambda v: ourjax.lax.cumlogsumexp(v, axis=axis))(x)
    assert got.shape == shape and got.dtype == dt
  with pytest.raises(ValueError, match="out of bounds"):
    ourjax.lax.cumlogsumexp(x, axis=2)


def test_cumsum_of_negative_zeros_is_positive_zero_eagerly_and_compiled():
  """XLA's sums start from +0, so -0.0 accumulates to +0.0 (JAX's eager and jitted cumsum); the
  sign shows through arctan2, whose result at (-0, +0) and (-0, -0) differs by pi."""
  import ourjax.numpy as jnp
  x = np.array([-0.0, 0.0, -0.0, 1.0], np.float32)
  for fn in (jnp.cumsum, ourjax.jit(jnp.cumsum)):
    got = np.asarray(fn(x))
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 1.0])
    assert not np.signbit(got[:3]).any()
    np.testing.assert_array_equal(np.signbit(np.asarray(jnp.arctan2(x, fn(x)))),
                                  [True, False, True, False])
