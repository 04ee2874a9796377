"""lax.reduce_window (reduce_window_sum/_max/_min and the general reduce_window): values against
a Python loop over windows in float64 (hypothesis shapes, windows, strides, padding, dilations),
eagerly and under jit; derivatives against central finite differences and JAX's values at ties;
the sum's transpose by <J v, u> = <v, J^T u>; vmap against a loop over the batch; errors."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def _loop(x, init, fn, window, strides, padding, base, wdil):
  """Each output element: ``init`` combined with the elements its window covers in the dilated,
  padded operand, in row-major window order; padding and holes are skipped."""
  out_shape = lax.reduce_window_shape_tuple(x.shape, window, strides, padding, base, wdil)
  out = np.empty(out_shape, x.dtype)
  for o in np.ndindex(*out_shape):
    acc = init
    for k in np.ndindex(*window):
      src = []
      for d in range(x.ndim):
        p = o[d] * strides[d] + k[d] * wdil[d] - padding[d][0]
        if p < 0 or p % base[d] or p // base[d] >= x.shape[d]:
          break
        src.append(p // base[d])
      else:
        acc = fn(acc, x[tuple(src)])
    out[o] = acc
  return out


@st.composite
def windows(draw, max_rank=3):
  rank = draw(st.integers(1, max_rank))
  shape = tuple(draw(st.integers(0 if rank == 1 else 1, 4)) for _ in range(rank))
  window = tuple(draw(st.integers(1, 3)) for _ in range(rank))
  strides = tuple(draw(st.integers(1, 3)) for _ in range(rank))
  base = tuple(draw(st.integers(1, 2)) for _ in range(rank))
  wdil = tuple(draw(st.integers(1, 2)) for _ in range(rank))
  padding = draw(st.sampled_from(["VALID", "SAME", "SAME_LOWER", "explicit"]))
  if padding == "explicit":
    padding = tuple((draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(rank))
    dilated = [(n - 1) * b + 1 if n else 0 for n, b in zip(shape, base)]
    padding = tuple((0, 0) if n + lo + hi < 0 else (lo, hi)
                    for n, (lo, hi) in zip(dilated, padding))
  return shape, window, strides, padding, base, wdil


def _pads(shape, window, strides, padding, wdil):
  if not isinstance(padding, str):
    return padding
  return tuple(lax.padtype_to_pads(shape, [(w - 1) * d + 1 for w, d in zip(window, wdil)],
                                   strides, padding))


_KINDS = {   # name: (init, lax computation, numpy combine)
    "sum": (0.0, lax.add, lambda a, b: a + b),
    "max": (-np.inf, lax.max, max),
    "min": (np.inf, lax.min, min),
    "sum_init": (1.5, lax.add, lambda a, b: a + b),   # not the identity: the general primitive
    "affine": (0.5, lambda a, b: a * 0.5 + b, lambda a, b: a * 0.5 + b),
}


@settings(max_examples=40)
@given(windows(), st.sampled_from(sorted(_KINDS)), st.integers(0, 2 ** 31))
def test_values_against_loop(w, kind, seed):
  shape, window, strides, padding, base, wdil = w
  init, comp, fn = _KINDS[kind]
  x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  got = lax.reduce_window(x, np.float32(init), comp, window, strides, padding, base, wdil)
  pads = _pads(shape, window, strides, padding, wdil)
  want = _loop(x.astype(np.float64), init, fn, window, strides, pads, base, wdil)
  assert got.dtype == np.float32 and got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=8)
@given(windows(max_rank=2), st.sampled_from(sorted(_KINDS)), st.integers(0, 2 ** 31))
def test_jit_matches_eager(w, kind, seed):
  """jit (the native CPU backend) against the eager NumPy implementation."""
  shape, window, strides, padding, base, wdil = w
  init, comp, _ = _KINDS[kind]
  x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

  def f(x):
    return lax.reduce_window(x, np.float32(init), comp, window, strides, padding, base, wdil)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x)), np.asarray(f(x)), rtol=1e-6,
                             atol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float16", "bfloat16"])
def test_other_dtypes(dtype):
  x = (np.arange(20) * 7 % 11).reshape(4, 5).astype(dtype)
  window, strides, pads = (2, 3), (1, 2), ((1, 0), (1, 1))
  for comp, fn, init in ((lax.max, np.maximum, np.zeros((), dtype)),
                         (lax.min, np.minimum, np.ones((), dtype))):
    ident = np.asarray(lax._reductions._chooser_identity(comp is lax.max, np.dtype(dtype)))
    got = lax.reduce_window(x, ident.astype(dtype), comp, window, strides, pads)
    want = _loop(x, init if dtype == "bool" else ident.astype(dtype), fn, window, strides,
                 pads, (1, 1), (1, 1))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))
  if dtype != "bool":
    got = lax.reduce_window(x, np.zeros((), dtype), lax.add, window, strides, pads)
    want = _loop(x.astype(np.float64), 0.0, np.add, window, strides, pads, (1, 1), (1, 1))
    assert got.dtype == x.dtype
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=1e-2)
    np.testing.assert_array_equal(np.asarray(ourjax.jit(
        lambda x: lax.reduce_window(x, np.zeros((), dtype), lax.add, window, strides, pads))(x)),
        np.asarray(got))


def test_primitive_choice_and_weak_type():
  x = jnp.ones((4,))
  def prims(f, *a):
    return [e.primitive.name for e in ourjax.make_jaxpr(f)(*a).jaxpr.eqns]
  assert prims(lambda x: lax.reduce_window(x, 0.0, lax.add, (2,), (1,), "VALID"), x) == \
      ["reduce_window_sum"]
  assert prims(lambda x: lax.reduce_window(x, -0.0, lambda a, b: a + b, (2,)), x) == \
      ["reduce_window_sum"]
  assert prims(lambda x: lax.reduce_window(x, -np.inf, lax.max, (2,)), x) == \
      ["reduce_window_max"]
  assert prims(lambda x: lax.reduce_window(x, np.inf, lax.min, (2,)), x) == \
      ["reduce_window_min"]
  assert prims(lambda x: lax.reduce_window(x, 0.0, lax.max, (2,)), x) == ["reduce_window"]
  assert prims(lambda x, i: lax.reduce_window(x, i, lax.add, (2,)), x, 0.0) == ["reduce_window"]
  # weak types: the monoid primitives keep the operand's, the general one drops it
  weak = lax.broadcast_in_dim(1.0, (3,), ())
  assert lax.reduce_window(weak, 0.0, lax.add, (2,)).weak_type
  assert not lax.reduce_window(weak, 1.0, lax.mul, (2,)).weak_type


def test_several_operands_and_pytrees():
  x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  i = (np.arange(12) % 5).astype(np.int32).reshape(3, 4)
  out = lax.reduce_window({"a": x, "b": i}, {"a": np.float32(0), "b": np.int32(-1)},
                          lambda p, q: {"a": p["a"] + q["a"], "b": lax.max(p["b"], q["b"])},
                          (2, 2), (1, 1), "SAME")
  np.testing.assert_allclose(np.asarray(out["a"]), _loop(x, 0.0, np.add, (2, 2), (1, 1),
                                                         ((0, 1), (0, 1)), (1, 1), (1, 1)))
  np.testing.assert_array_equal(np.asarray(out["b"]), _loop(i, -1, max, (2, 2), (1, 1),
                                                            ((0, 1), (0, 1)), (1, 1), (1, 1)))


# ------------------------------------------------------------------------------------------------
# Derivatives


def _fd(f, x, t, eps=1e-6):
  with np.errstate(invalid="ignore"):   # inf - inf where a window holds no element
    return (np.asarray(f(x + eps * t)) - np.asarray(f(x - eps * t))) / (2 * eps)


@pytest.mark.usefixtures("x64")
@settings(max_examples=20)
@given(windows(max_rank=2), st.sampled_from(["sum", "max", "min", "affine"]),
       st.integers(0, 2 ** 31))
def test_derivatives_against_finite_differences(w, kind, seed):
  shape, window, strides, padding, base, wdil = w
  init, comp, _ = _KINDS[kind]
  rng = np.random.default_rng(seed)
  n = int(np.prod(shape))
  # distinct values at least 0.05 apart: no ties, finite differences stay on one piece
  x = (rng.permutation(n) * 0.1 + rng.uniform(0, 0.05, n)).reshape(shape)
  t = rng.standard_normal(shape)

  def f(x):
    return lax.reduce_window(x, np.float64(init), comp, window, strides, padding, base, wdil)
  out, tan = ourjax.jvp(f, (x,), (t,))
  # (a window of only padding and holes gives +-inf, a constant: its tangent is 0)
  want = np.where(np.isfinite(np.asarray(out)), _fd(f, x, t), 0.0)
  np.testing.assert_allclose(np.asarray(tan), want, rtol=1e-6, atol=1e-6)
  if kind == "affine":   # the general primitive: forward mode only, like JAX's
    return
  u = rng.standard_normal(np.shape(out))
  _, pullback = ourjax.vjp(f, x)
  ct, = pullback(u)
  assert ct.shape == x.shape
  np.testing.assert_allclose(float(np.sum(np.asarray(tan) * u)),
                             float(np.sum(t * np.asarray(ct))), rtol=1e-9, atol=1e-9)


def test_gradients_at_ties_match_jax():
  """JAX's gradient convention (values taken from JAX 0.10.2): the first maximum of a window
  wins a tie, padding and holes are candidates holding -inf."""
  def g(x, *args):
    return np.asarray(ourjax.grad(lambda x: lax.reduce_window(x, -np.inf, lax.max, *args).sum())(
        jnp.asarray(x, jnp.float32)))
  np.testing.assert_array_equal(g(np.ones((3, 3)), (2, 2), (1, 1), "VALID"),
                                [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
  np.testing.assert_array_equal(g([1.0, 1.0, 1.0], (2,), (1,), "VALID"), [1, 1, 0])
  np.testing.assert_array_equal(g([-np.inf] * 3, (3,), (1,), "SAME"), [1, 1, 0])
  np.testing.assert_array_equal(g([-np.inf, -np.inf, 2.0], (2,), (1,), "SAME"), [1, 0, 2])
  np.testing.assert_array_equal(g([1.0, np.nan, 2.0, 0.0], (3,), (1,), "SAME"), [0, 1, 3, 0])
  ct = np.asarray(ourjax.grad(lambda x: (lax.reduce_window(
      x, -np.inf, lax.max, (3,), (1,), ((1, 2),), (2,)) * jnp.arange(1.0, 7.0)).sum())(
          jnp.array([3.0, 1.0, 2.0])))
  np.testing.assert_array_equal(ct, [3, 3, 15])
  # the sum's gradient (JAX: [[4,8,8,8],[20,24,32,24],[36,40,56,40]])
  x = jnp.arange(12.0).reshape(3, 4)
  ct = ourjax.grad(lambda x: (lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 1), ((1, 0), (0, 1)),
                                                (2, 1), (1, 2)) ** 2).sum())(x)
  np.testing.assert_array_equal(np.asarray(ct), [[4, 8, 8, 8], [20, 24, 32, 24],
                                                 [36, 40, 56, 40]])


def test_second_derivative_and_jit_of_grad():
  f = lambda x: (lax.reduce_window(x, -np.inf, lax.max, (2,), (1,), "VALID") ** 2).sum()
  x = jnp.array([1.0, 3.0, 2.0])
  np.testing.assert_array_equal(np.asarray(ourjax.hessian(f)(x)),
                                [[0, 0, 0], [0, 4, 0], [0, 0, 0]])
  np.testing.assert_array_equal(np.asarray(ourjax.jit(ourjax.grad(f))(x)),
                                np.asarray(ourjax.grad(f)(x)))


# ------------------------------------------------------------------------------------------------
# vmap


@settings(max_examples=10)
@given(windows(max_rank=2), st.sampled_from(sorted(_KINDS)), st.integers(0, 2), st.booleans(),
       st.integers(0, 2 ** 31))
def test_vmap_against_loop(w, kind, axis, jit, seed):
  shape, window, strides, padding, base, wdil = w
  init, comp, _ = _KINDS[kind]
  axis = min(axis, len(shape))
  xs = np.random.default_rng(seed).standard_normal(shape[:axis] + (3,) + shape[axis:])
  xs = xs.astype(np.float32)

  def f(x):
    return lax.reduce_window(x, np.float32(init), comp, window, strides, padding, base, wdil)
  vf = ourjax.vmap(f, in_axes=axis)
  got = np.asarray((ourjax.jit(vf) if jit else vf)(xs))
  want = np.stack([np.asarray(f(np.take(xs, b, axis))) for b in range(3)])
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_vmap_of_grad_of_max_pool():
  xs = np.random.default_rng(0).standard_normal((2, 4, 4)).astype(np.float32)
  pool = lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 2), "VALID").sum()
  got = ourjax.vmap(ourjax.grad(pool))(xs)
  np.testing.assert_array_equal(np.asarray(got),
                                np.stack([np.asarray(ourjax.grad(pool)(x)) for x in xs]))


# ------------------------------------------------------------------------------------------------
# Errors (JAX's types and messages)


@pytest.mark.parametrize("args,exc,match", [
    (((2,), (1,)), TypeError, "wrong number of window_dimensions"),
    (((2, 2), (1,)), TypeError, "inconsistent window_strides"),
    (((0, 2), (1, 1)), TypeError, "window_dimensions must have every element be strictly"),
    (((1, 2), (0, 1)), TypeError, "window_strides must have every element be strictly"),
    (((1, 2), (1, 1), "VALID", (0, 1)), TypeError, "All dilations must be positive"),
    (((1, 2), (1, 1), "VALID", (1, 1, 1)), TypeError, "inconsistent base_dilation"),
    (((1, 2), (1, 1), ((0, 0),)), ValueError, "padding"),
    ((2, (1,)), TypeError, "must be of type tuple/list/ndarray"),
])
def test_window_errors(args, exc, match):
  with pytest.raises(exc, match=match):
    lax.reduce_window(jnp.ones((3, 4)), 0.0, lax.add, *args)


def test_operand_errors():
  x = jnp.ones((3,))
  with pytest.raises(TypeError, match="must have a number dtype, got bool"):
    lax.reduce_window(jnp.array([True, False]), False, lax.add, (2,))
  with pytest.raises(TypeError, match="inconsistent dtypes for operands and init_values"):
    lax.reduce_window(x, np.int32(1), lax.mul, (2,))
  with pytest.raises(TypeError, match="expected init_values to be scalars"):
    lax.reduce_window(x, jnp.zeros(2), lax.add, (2,))
  with pytest.raises(ValueError, match="same tree structure as init_values"):
    lax.reduce_window((x,), 0.0, lax.add, (2,))
  with pytest.raises(ValueError, match="output must have the same tree structure"):
    lax.reduce_window((x, x), (0.0, 0.0), lambda a, b: (a[0] + b[0],), (2,))
  with pytest.raises(ValueError, match="at least one operand"):
    lax.reduce_window((), (), lax.add, (2,))
  with pytest.raises(NotImplementedError, match="initial values"):
    ourjax.vmap(lambda x, i: lax.reduce_window(x, i, lax.mul, (2,)))(jnp.ones((2, 3)),
                                                                     jnp.ones(2))


def test_shape_tuple():
  assert lax.reduce_window_shape_tuple((5, 6), (2, 3), (2, 1), ((1, 0), (0, 2)), (1, 2),
                                       (1, 2)) == (3, 9)
  for n, w, s, lo, hi in itertools.product(range(4), range(1, 3), range(1, 3), range(2),
                                           range(2)):
    got = lax.reduce_window(jnp.ones((n,)), 0.0, lax.add, (w,), (s,), ((lo, hi),))
    assert got.shape == lax.reduce_window_shape_tuple((n,), (w,), (s,), ((lo, hi),))
