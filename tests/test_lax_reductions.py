"""lax reductions: reduce_sum/prod/max/min/and/or/xor, argmax/argmin and the generic lax.reduce,
against NumPy (float64 where precision matters) and Python loops; JVPs and gradients against
central finite differences (float64); vmap against a loop over the batch."""
import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import ourjax
from ourjax import dtypes, lax
from ourjax.config import enable_x64


def in_x64(f):
  """Run a hypothesis test body with 64-bit types (function-scoped fixtures are not re-entered
  per example)."""
  @functools.wraps(f)
  def wrapped(*args, **kwargs):
    with enable_x64(True):
      return f(*args, **kwargs)
  return wrapped


def _np(x):
  return np.asarray(x)


def _rand(rng, shape, dtype, ties=False):
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -5
    return rng.integers(lo, 6, shape).astype(dtype)
  if ties:
    return rng.integers(-2, 3, shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


@st.composite
def shape_and_axes(draw, min_rank=0, max_rank=3, nonempty_axes=False):
  rank = draw(st.integers(min_rank, max_rank))
  shape = tuple(draw(st.integers(1 if nonempty_axes else 0, 4)) for _ in range(rank))
  axes = draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank)) \
      if rank else []
  return shape, tuple(axes)


_DTYPES = ["float32", "int32", "bfloat16", "float16", "uint8"]


def _dt(name):
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# ------------------------------------------------------------------------------------------------
# values


_NUMPY = {"reduce_sum": np.sum, "reduce_prod": np.prod, "reduce_max": np.max,
          "reduce_min": np.min}


@given(shape_and_axes(), st.sampled_from(sorted(_NUMPY)), st.sampled_from(_DTYPES),
       st.integers(0, 2**31))
def test_reducers_match_numpy(sa, name, dtype, seed):
  shape, axes = sa
  dt = _dt(dtype)
  x = _rand(np.random.default_rng(seed), shape, dt)
  out = getattr(lax, name)(x, axes)
  wide = x.astype(np.float64) if dtypes.is_float(dt) else x
  kw = {}
  if name in ("reduce_max", "reduce_min"):
    # an empty max/min is the identity: -inf/+inf for floats, the extreme integers otherwise
    ident = (-np.inf if name == "reduce_max" else np.inf) if dtypes.is_float(dt) else (
        np.iinfo(dt).min if name == "reduce_max" else np.iinfo(dt).max)
    kw["initial"] = ident
  want = _NUMPY[name](wide, axis=axes, **kw)
  if not dtypes.is_float(dt):
    want = np.asarray(want).astype(dt)   # integer sums/products wrap around
  assert out.shape == np.shape(want) and out.dtype == dt
  tol = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}.get(dtype, 0)
  np.testing.assert_allclose(_np(out).astype(np.float64), np.asarray(want, np.float64),
                             rtol=tol, atol=tol * 4)


@given(shape_and_axes(), st.sampled_from(["reduce_and", "reduce_or", "reduce_xor"]),
       st.sampled_from(["bool", "int32", "uint8"]), st.integers(0, 2**31))
def test_bitwise_reducers(sa, name, dtype, seed):
  shape, axes = sa
  x = _rand(np.random.default_rng(seed), shape, np.dtype(dtype))
  ufunc = {"reduce_and": np.bitwise_and, "reduce_or": np.bitwise_or,
           "reduce_xor": np.bitwise_xor}[name]
  want = ufunc.reduce(x, axis=axes) if axes else x
  out = getattr(lax, name)(x, axes)
  np.testing.assert_array_equal(_np(out), np.asarray(want, dtype))


def test_reducer_errors():
  x = np.ones((2, 3), np.float32)
  with pytest.raises(TypeError, match="reduce_and does not accept dtype float32"):
    lax.reduce_and(x, (0,))
  with pytest.raises(TypeError, match="reduce_sum does not accept dtype bool"):
    lax.reduce_sum(x > 0, (0,))


# ------------------------------------------------------------------------------------------------
# argmax / argmin


@given(shape_and_axes(min_rank=1, nonempty_axes=True), st.sampled_from(["argmax", "argmin"]),
       st.sampled_from(["float32", "int32", "bool", "bfloat16"]), st.booleans(),
       st.sampled_from(["int32", "uint8", "int16"]), st.data())
def test_argminmax(sa, name, dtype, nans, index_dtype, data):
  shape, _ = sa
  axis = data.draw(st.integers(0, len(shape) - 1))
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  dt = _dt(dtype)
  x = _rand(rng, shape, dt, ties=True)
  if nans and dtypes.is_float(dt):
    x = np.where(rng.random(shape) < 0.3, np.nan, x).astype(dt)
  out = getattr(lax, name)(x, axis, index_dtype)
  # NumPy's rule is JAX's: the first occurrence wins, and a NaN beats every number both ways
  want = getattr(np, name)(x.astype(np.float64) if dtypes.is_float(dt) else x, axis=axis)
  assert out.dtype == np.dtype(index_dtype)
  np.testing.assert_array_equal(_np(out), want.astype(index_dtype))


def test_argminmax_errors_and_derivatives():
  x = np.array([[1.0, 3.0, 3.0], [2.0, -1.0, 0.5]], np.float32)
  with pytest.raises(ValueError, match="non-empty reduced dimension"):
    lax.argmax(np.ones((2, 0)), 1, np.int32)
  with pytest.raises(ValueError, match="Invalid axis"):
    lax.argmin(x, 2, np.int32)
  with pytest.raises(TypeError, match="index_dtype must be an integer type"):
    lax.argmax(x, 0, np.float32)
  # integer-valued: the tangent is a symbolic zero of dtype float0
  out, t = ourjax.jvp(lambda v: lax.argmax(v, 1, np.int32), (x,), (np.ones_like(x),))
  np.testing.assert_array_equal(_np(out), [1, 0])
  assert t.dtype == dtypes.float0 and t.shape == (2,)
  # and a function of x[argmax] differentiates through the selected element only
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.mul(
      v, lax.convert_element_type(lax.eq(lax.broadcasted_iota(np.int32, (2, 3), 1),
                                         lax.broadcast_in_dim(lax.argmax(v, 1, np.int32),
                                                              (2, 3), (0,))), np.float32)),
      (0, 1)))(x)
  np.testing.assert_array_equal(_np(g), [[0, 1, 0], [1, 0, 0]])


# ------------------------------------------------------------------------------------------------
# derivatives


def _num_grad(f, x, eps=1e-6):
  g = np.zeros(x.size)
  for i in range(x.size):
    e = np.zeros(x.size)
    e[i] = eps
    g[i] = (float(f(x + e.reshape(x.shape))) - float(f(x - e.reshape(x.shape)))) / (2 * eps)
  return g.reshape(x.shape)


@settings(max_examples=15)
@given(shape_and_axes(max_rank=3), st.sampled_from(sorted(_NUMPY)), st.integers(0, 2**31))
@in_x64
def test_reducer_grads_finite_differences(sa, name, seed):
  shape, axes = sa
  rng = np.random.default_rng(seed)
  x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
  w = rng.standard_normal(tuple(s for i, s in enumerate(shape) if i not in axes))
  red = getattr(lax, name)
  f = lambda v: lax.reduce_sum(lax.mul(red(v, axes), w), tuple(range(w.ndim)))
  g = ourjax.grad(f)(x)
  np.testing.assert_allclose(_np(g), _num_grad(f, x), rtol=1e-6, atol=1e-7)


def test_reduce_max_min_ties_split_evenly():
  x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0]], np.float32)
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.reduce_max(v, (1,)), (0,)))(x)
  np.testing.assert_array_equal(_np(g), [[0, 0.5, 0.5, 0], [0.25] * 4])
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.reduce_min(v, (0, 1)), ()))(x)
  np.testing.assert_array_equal(_np(g), [[1, 0, 0, 0], [0] * 4])


def test_reduce_prod_grad_with_zeros(x64):
  """The product's gradient is the product of the others, exact even with zeros."""
  x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 5.0]])
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.reduce_prod(v, (1,)), (0,)))(x)
  np.testing.assert_array_equal(_np(g), [[6, 0, 0], [0, 0, 0], [10, 5, 2]])
  # second derivative of prod(x) along x0, x1 is prod of the rest
  e0 = np.array([1.0, 0.0, 0.0])
  h = ourjax.grad(lambda v: lax.reduce_sum(lax.mul(
      ourjax.grad(lambda u: lax.reduce_prod(u, (0,)))(v), e0), (0,)))(np.array([0.0, 2.0, 3.0]))
  np.testing.assert_array_equal(_np(h), [0, 3, 2])


@settings(max_examples=20)
@given(shape_and_axes(max_rank=3), st.sampled_from(["reduce_sum", "reduce_max"]),
       st.integers(0, 2**31))
@in_x64
def test_reduce_transpose_identity(sa, name, seed):
  """<J v, u> = <v, J^T u> for the linearization of the reducers."""
  shape, axes = sa
  if name == "reduce_max" and any(shape[a] == 0 for a in axes):
    return   # the JVP of an empty max is 0/0 = NaN, as in JAX
  rng = np.random.default_rng(seed)
  x, v = rng.standard_normal(shape), rng.standard_normal(shape)
  f = lambda a: getattr(lax, name)(a, axes)
  out, f_vjp = ourjax.vjp(f, x)
  u = rng.standard_normal(np.shape(out))
  _, jv = ourjax.jvp(f, (x,), (v,))
  ct, = f_vjp(u)
  np.testing.assert_allclose(np.sum(_np(jv) * u), np.sum(v * _np(ct)), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------------
# vmap


def _loop(f, axis, x):
  return np.stack([np.asarray(f(np.take(x, i, axis=axis))) for i in range(x.shape[axis])])


@settings(max_examples=30)
@given(shape_and_axes(max_rank=2, nonempty_axes=True),
       st.sampled_from(sorted(_NUMPY) + ["reduce_or", "argmax", "argmin"]),
       st.integers(1, 3), st.data())
def test_reducers_vmap(sa, name, size, data):
  shape, axes = sa
  bdim = data.draw(st.integers(0, len(shape)))
  rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
  full = list(shape)
  full.insert(bdim, size)
  if name.startswith("arg"):
    if not shape:
      return
    axis = data.draw(st.integers(0, len(shape) - 1))
    f = lambda v: getattr(lax, name)(v, axis, np.int32)
    x = _rand(rng, tuple(full), np.float32, ties=True)
  elif name == "reduce_or":
    f = lambda v: lax.reduce_or(v, axes)
    x = _rand(rng, tuple(full), np.bool_)
  else:
    f = lambda v: getattr(lax, name)(v, axes)
    x = _rand(rng, tuple(full), np.float32)
  out = ourjax.vmap(f, in_axes=bdim)(x)
  np.testing.assert_allclose(_np(out), _loop(f, bdim, x), rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# lax.reduce


def _jaxpr_text(f, *args):
  return str(ourjax.make_jaxpr(f)(*args))


def test_reduce_monoids_map_to_reduce_primitives():
  x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
  cases = [(lax.add, 0.0, "reduce_sum", np.sum), (lambda a, b: a * b, 1.0, "reduce_prod",
                                                  np.prod),
           (lax.max, -np.inf, "reduce_max", np.max), (lambda a, b: lax.min(b, a), np.inf,
                                                       "reduce_min", np.min)]
  for comp, init, prim, ref in cases:
    f = lambda v, comp=comp, init=init: lax.reduce(v, np.float32(init), comp, (1,))
    text = _jaxpr_text(f, x)
    assert prim in text and "reduce[" not in text, text
    np.testing.assert_allclose(_np(f(x)), ref(x, axis=1), rtol=1e-6)
  b = x > 0
  for comp, init, prim in ((lax.and_, True, "reduce_and"), (lax.or_, False, "reduce_or")):
    text = _jaxpr_text(lambda v: lax.reduce(v, init, comp, (0,)), b)
    assert prim in text
  np.testing.assert_array_equal(_np(lax.reduce(b, True, lax.and_, (0,))), np.all(b, 0))
  np.testing.assert_array_equal(_np(lax.reduce(b, False, lax.or_, (1,))), np.any(b, 1))


@given(shape_and_axes(), st.sampled_from(["add", "mul", "max", "min"]),
       st.floats(-3, 3, width=32), st.integers(0, 2**31))
def test_reduce_monoid_with_other_init(sa, op, init, seed):
  """A non-identity init value enters the reduction once, as for XLA's reduce."""
  shape, axes = sa
  x = _rand(np.random.default_rng(seed), shape, np.float32)
  comp = getattr(lax, op)
  out = lax.reduce(x, np.float32(init), comp, axes)
  ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op]
  want = np.full(tuple(s for i, s in enumerate(shape) if i not in axes), init, np.float64)
  for idx in np.ndindex(*shape):
    k = tuple(i for d, i in enumerate(idx) if d not in axes)
    want[k] = ufunc(want[k], float(x[idx]))
  np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)


def _loop_reduce(fn, operands, inits, axes):
  """The reference: combine elements one by one in row-major order of the reduced axes."""
  shape = operands[0].shape
  kept = tuple(s for i, s in enumerate(shape) if i not in axes)
  outs = [np.full(kept, i) for i in inits]
  for idx in np.ndindex(*shape):
    k = tuple(i for d, i in enumerate(idx) if d not in axes)
    accs = tuple(o[k] for o in outs)
    new = fn(accs, tuple(op[idx] for op in operands))
    for o, v in zip(outs, new):
      o[k] = v
  return outs


@given(shape_and_axes(nonempty_axes=True), st.integers(0, 2**31))
def test_general_reduce_variadic_argmax(sa, seed):
  """A two-operand (value, index) reduction -- not a monoid -- through the general primitive."""
  shape, axes = sa
  rng = np.random.default_rng(seed)
  x = _rand(rng, shape, np.float32, ties=True)
  idx = np.arange(x.size, dtype=np.int32).reshape(shape)

  def comp(a, b):
    take_b = lax.or_(lax.gt(b[0], a[0]), lax.and_(lax.eq(b[0], a[0]), lax.lt(b[1], a[1])))
    return lax.select_n(take_b, a[0], b[0]), lax.select_n(take_b, a[1], b[1])
  inits = (np.float32(-np.inf), np.int32(2**31 - 1))
  out_v, out_i = lax.reduce((x, idx), inits, comp, axes)
  assert "reduce[" in _jaxpr_text(lambda a, b: lax.reduce((a, b), inits, comp, axes), x, idx)

  def py(a, b):
    if b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]):
      return b
    return a
  want_v, want_i = _loop_reduce(py, (x, idx), inits, axes)
  np.testing.assert_array_equal(_np(out_v), want_v.astype(np.float32))
  np.testing.assert_array_equal(_np(out_i), want_i.astype(np.int32))
  # vmap of the general reduce over a leading batch of two
  xs, ids = np.stack([x, -x]), np.stack([idx, idx])
  bv, bi = ourjax.vmap(lambda a, b: lax.reduce((a, b), inits, comp, axes))(xs, ids)
  for j in range(2):
    wv, wi = _loop_reduce(py, (xs[j], ids[j]), inits, axes)
    np.testing.assert_array_equal(_np(bv)[j], wv.astype(np.float32))
    np.testing.assert_array_equal(_np(bi)[j], wi.astype(np.int32))


def test_general_reduce_jvp(x64):
  """An associative computation that is not a single monoid op, (a, b) -> a + b + a b, i.e.
  prod(1 + x) - 1: its JVP against central finite differences."""
  comp = lambda a, b: lax.add(lax.add(a, b), lax.mul(a, b))
  rng = np.random.default_rng(4)
  x = rng.uniform(-0.5, 0.5, (3, 5))
  f = lambda v: lax.reduce(v, 0.0, comp, (1,))
  assert "reduce[" in _jaxpr_text(f, x)
  np.testing.assert_allclose(_np(f(x)), np.prod(1 + x, axis=1) - 1, rtol=1e-12)
  w = rng.standard_normal(3)
  g = ourjax.grad(lambda v: lax.reduce_sum(lax.mul(f(v), w), (0,)))(x)
  np.testing.assert_allclose(_np(g), _num_grad(lambda v: np.sum((np.prod(1 + v, 1) - 1) * w),
                                               x), rtol=1e-6, atol=1e-8)


def test_reduce_errors():
  x = np.ones((2, 3), np.float32)
  with pytest.raises(ValueError, match="same tree structure"):
    lax.reduce((x, x), np.float32(0), lax.add, (0,))
  # not a monoid, so the general reduce checks the init value's type against the operand's
  with pytest.raises(TypeError, match="does not match init value dtype int32"):
    lax.reduce(x, np.int32(0), lax.sub, (0,))
  with pytest.raises(TypeError, match="init value dtype int32 does not match"):
    lax.reduce(x, np.int32(0), lax.add, (0,))


# ------------------------------------------------------------------------------------------------
# reduce_precision


def _xla_reduce_precision(x, narrow):
  """XLA's rule for reduce_precision to ``narrow``'s (exponent, mantissa) bits: the significand
  is rounded (to nearest even) to the narrow mantissa at x's own exponent in one step, results
  above the narrow type's largest finite value become infinities and results below its smallest
  normal flush to zero (signed)."""
  fi = ml_dtypes.finfo(narrow)
  with np.errstate(invalid="ignore", over="ignore"):
    m, e = np.frexp(x.astype(np.float64))
    want = np.ldexp(np.round(m * 2.0 ** (fi.nmant + 1)) / 2.0 ** (fi.nmant + 1), e)
    want = np.where(np.abs(want) > float(fi.max), np.copysign(np.inf, x), want)
  tiny = np.abs(want) < float(fi.tiny)
  return np.where(tiny, np.copysign(0.0, x), np.where(np.isfinite(x), want, x)).astype(x.dtype)


@given(st.integers(0, 2**31), st.sampled_from(["float32", "float64"]))
@example(267724, "float64")
def test_reduce_precision_matches_narrow_types(seed, dtype):
  """(8, 7) and (5, 10) round the significand to bfloat16's / float16's bits at x's own
  exponent in one step and flush results below the narrow normal range to zero (XLA's rule).
  For float32 inputs (8, 7) is also a round trip through bfloat16; for float64 inputs it is
  not: ml_dtypes converts float64 to bfloat16 through float32, rounding twice (hypothesis found
  -0x1.aaffff025ce78p-13, which one rounding takes to -0x1.aap-13 and two to -0x1.acp-13)."""
  rng = np.random.default_rng(seed)
  with enable_x64(dtype == "float64"):
    x = (rng.standard_normal(200) * 10.0 ** rng.integers(-4, 5, 200)).astype(dtype)
    x[:3] = [np.nan, np.inf, -0.0]
    bf = _np(lax.reduce_precision(x, 8, 7))
    np.testing.assert_array_equal(bf, _xla_reduce_precision(x, ml_dtypes.bfloat16))
    if dtype == "float32":
      np.testing.assert_array_equal(bf, x.astype(ml_dtypes.bfloat16).astype(dtype))
    # (5, 10): just below float16's smallest normal, a value that float16 itself would round
    # up to that normal becomes 0, as in JAX
    f16 = _np(lax.reduce_precision(x, 5, 10))
    want = _xla_reduce_precision(x, np.float16)
    np.testing.assert_array_equal(f16, want)
    assert np.array_equal(np.signbit(f16), np.signbit(want))
    assert np.array_equal(np.signbit(bf), np.signbit(x))


def test_reduce_precision_rules():
  x = np.array([1.0, 1.125, 1.375, 2.0], np.float32)
  # 2 mantissa bits: 1.125 is a tie between 1.0 and 1.25 (rounds to even 1.0); 1.375 -> 1.5
  np.testing.assert_array_equal(_np(lax.reduce_precision(x, 8, 2)), [1.0, 1.0, 1.5, 2.0])
  _, t = ourjax.jvp(lambda v: lax.reduce_precision(v, 8, 2), (x,), (x,))
  np.testing.assert_array_equal(_np(t), [1.0, 1.0, 1.5, 2.0])   # linear: applied to tangents
  out = ourjax.vmap(lambda v: lax.reduce_precision(v, 8, 2), in_axes=1)(np.stack([x, x]))
  np.testing.assert_array_equal(_np(out), np.stack([[1.0, 1.0, 1.5, 2.0]] * 2, 1))
  with pytest.raises(TypeError, match="reduce_precision does not accept dtype int32"):
    lax.reduce_precision(np.ones(2, np.int32), 8, 7)
