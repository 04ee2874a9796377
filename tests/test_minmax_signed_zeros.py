"""max and min as XLA (so JAX) computes them: NaN propagates, and +0 is above -0 whatever the
operands' order (``max(+0, -0) == max(-0, +0) == +0``, ``min`` of them ``-0``): IEEE 754-2019
maximum/minimum.  NumPy's ``np.maximum``/``np.minimum`` return an operand by position at such a
tie, which ourjax once followed.  Every path is compared bitwise (any NaN equals any NaN) with
a NumPy statement of those semantics: eager, the reference backend, the CPU backend, and the
GPU backend where there is one; elementwise, against constants, reductions, cumulative,
windowed and scattered max/min, clamp and clip; float32, float64, bfloat16 and float16."""
import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends.cuda import driver

from hlo_programs import assert_bitwise_equal
from test_ptx import _assemble, needs_ptxas

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), BF16, F16]
VALUES = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 2.5]


def want_max(x, y):
  """IEEE 754-2019 maximum, elementwise (float64 in, float64 out)."""
  x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
  tie = np.where(np.signbit(x), y, x)          # equal values: +0 wins
  r = np.where(x > y, x, np.where(y > x, y, tie))
  return np.where(np.isnan(x) | np.isnan(y), np.nan, r)


def want_min(x, y):
  x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
  tie = np.where(np.signbit(x), x, y)          # equal values: -0 wins
  r = np.where(x < y, x, np.where(y < x, y, tie))
  return np.where(np.isnan(x) | np.isnan(y), np.nan, r)


def fold(fn, x, axis):
  x = np.moveaxis(np.asarray(x, np.float64), axis, 0)
  acc = x[0]
  for v in x[1:]:
    acc = fn(acc, v)
  return acc


def scan(fn, x, axis):
  x = np.moveaxis(np.asarray(x, np.float64), axis, 0).copy()
  for k in range(1, x.shape[0]):
    x[k] = fn(x[k - 1], x[k])
  return np.moveaxis(x, 0, axis)


def _pairs(dt):
  v = np.array(VALUES)
  return (np.repeat(v, len(v)).astype(dt).reshape(8, 8),
          np.tile(v, len(v)).astype(dt).reshape(8, 8))


def _zeros_matrix(dt):
  """Rows and columns mixing +0, -0 and negatives (max over them is a zero), and positives
  (min is a zero), and one NaN column."""
  m = np.array([[0.0, -0.0, -1.0, -0.0, 1.0],
                [-0.0, -0.0, -2.0, 0.0, 0.0],
                [-1.0, 0.0, -0.0, -0.0, -0.0],
                [-0.0, -3.0, 0.0, np.nan, 2.0]])
  return m.astype(dt)


#: (name, ourjax function, NumPy statement of JAX's result, inputs)
def _cases(dt):
  x, y = _pairs(dt)
  m = _zeros_matrix(dt)
  zp, zn = dt.type(0.0), dt.type(-0.0)
  idx = np.array([0, 0, 1, 3, 3, 3], np.int32)
  upd = np.array([0.0, -0.0, -0.0, -0.0, 0.0, -0.0]).astype(dt)
  base = np.array([-0.0, 0.0, 5.0, -0.0]).astype(dt)

  def scatter_want(fn):
    r = base.astype(np.float64)
    for i, u in zip(idx, upd.astype(np.float64)):
      r[i] = fn(r[i], u)
    return r
  return [
      ("lax.max", lax.max, lambda: want_max(x, y), (x, y)),
      ("lax.min", lax.min, lambda: want_min(x, y), (x, y)),
      ("jnp.maximum(y, x)", lambda a, b: jnp.maximum(b, a), lambda: want_max(y, x), (x, y)),
      ("jnp.minimum(y, x)", lambda a, b: jnp.minimum(b, a), lambda: want_min(y, x), (x, y)),
      ("max(x, +0)", lambda a: jnp.maximum(a, zp), lambda: want_max(x, 0.0), (x,)),
      ("max(-0, x)", lambda a: jnp.maximum(zn, a), lambda: want_max(-0.0, x), (x,)),
      ("min(x, +0)", lambda a: jnp.minimum(a, zp), lambda: want_min(x, 0.0), (x,)),
      ("min(-0, x)", lambda a: jnp.minimum(zn, a), lambda: want_min(-0.0, x), (x,)),
      ("jnp.max axis 0", lambda a: jnp.max(a, axis=0), lambda: fold(want_max, m, 0), (m,)),
      ("jnp.max axis 1", lambda a: jnp.max(a, axis=1), lambda: fold(want_max, m, 1), (m,)),
      ("jnp.min axis 0", lambda a: jnp.min(a, axis=0), lambda: fold(want_min, m, 0), (m,)),
      ("jnp.amin axis 1", lambda a: jnp.amin(a, axis=1), lambda: fold(want_min, m, 1), (m,)),
      ("jnp.max of -0 and +0", lambda a: jnp.max(a[1:3, :2]),
       lambda: np.float64(0.0), (m,)),
      ("jnp.min of +0 and -0", lambda a: jnp.min(a[:2, :2]),
       lambda: np.float64(-0.0), (m,)),
      ("cummax", lambda a: lax.cummax(a, axis=1), lambda: scan(want_max, m, 1), (m,)),
      ("cummin", lambda a: lax.cummin(a, axis=0), lambda: scan(want_min, m, 0), (m,)),
      ("reduce_window max",
       lambda a: lax.reduce_window(a, -np.inf, lax.max, (2, 2), (1, 1), "VALID"),
       lambda: want_max(want_max(m[:-1, :-1], m[1:, :-1]), want_max(m[:-1, 1:], m[1:, 1:])),
       (m,)),
      ("scatter max", lambda b, i, u: jnp.asarray(b).at[i].max(u), lambda: scatter_want(want_max),
       (base, idx, upd)),
      ("scatter min", lambda b, i, u: jnp.asarray(b).at[i].min(u), lambda: scatter_want(want_min),
       (base, idx, upd)),
      ("clamp(+0, x, 1)", lambda a: lax.clamp(zp, a, dt.type(1.0)),
       lambda: want_min(want_max(x, 0.0), 1.0), (x,)),
      ("clip(x, -1, -0)", lambda a: jnp.clip(a, dt.type(-1.0), zn),
       lambda: want_min(want_max(x, -1.0), -0.0), (x,)),
  ]


def _runner(how):
  if how == "eager":
    return lambda f: f
  if how == "cuda" and not driver.available():
    pytest.skip(f"no CUDA GPU ({driver.unavailable_reason()})")
  return lambda f: ourjax.jit(f, backend=how)


@pytest.mark.parametrize("how", ["eager", "reference", "cpu", "cuda"])
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_max_min_follow_ieee_maximum_minimum(how, dt, x64):
  run = _runner(how)
  for name, fn, want, args in _cases(dt):
    got = np.asarray(run(fn)(*args))
    assert_bitwise_equal(got, np.asarray(want()).astype(dt), f"{how} {dt} {name}")


def test_reduction_over_broadcast_copies_of_a_zero(x64):
  """A max over broadcast copies of +0 from a -0 init (the simplifier folds it to one max)."""
  for backend in ("reference", "cpu"):
    f = ourjax.jit(lambda z: (jnp.max(jnp.broadcast_to(z, (3, 4)), axis=0, initial=-0.0),
                              jnp.min(jnp.broadcast_to(-z, (3, 4)), axis=0, initial=0.0)),
                   backend=backend)
    hi, lo = f(np.float32(0.0))
    assert_bitwise_equal(np.asarray(hi), np.zeros(4, np.float32), backend)
    assert_bitwise_equal(np.asarray(lo), np.full(4, -0.0, np.float32), backend)


@needs_ptxas
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_gpu_max_min_are_ieee_maximum_minimum_in_ptx(dt, x64):
  """On the GPU float max/min are PTX ``max.NaN``/``min.NaN`` (IEEE 754-2019 maximum and
  minimum: NaN propagates, +0 above -0) or, for float64 which has no ``.NaN`` form, ``max.f64``
  with LLVM's fix-ups for NaN and zeros; the PTX assembles."""
  x = np.zeros((64, 33), dt)
  c = ourjax.jit(lambda a, b: (lax.max(a, b), lax.min(a, b), jnp.max(a * b, axis=0)),
                 backend="cuda").lower(x, x).compile()
  ptx = c.as_text(dialect="ptx")
  _assemble(ptx)
  if dt == np.float64:
    assert "max.f64" in ptx and "setp.nan.f64" in ptx
  else:
    assert "max.NaN." in ptx and "min.NaN." in ptx
