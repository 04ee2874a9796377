"""float8_e4m3fn and float8_e5m2 under jit on the CPU (which runs them on the reference
backend) and eagerly, against ml_dtypes and exact arithmetic: converts round to nearest even
with ml_dtypes' overflow (NaN for e4m3fn, which has no infinity; infinity for e5m2), a float64
is rounded once (as JAX does; ml_dtypes' own cast goes through float32), max/min over e4m3fn
start from its lowest/highest value (its -inf would be NaN), and dots sum exact products in
f32."""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
FP8 = [E4M3, E5M2]


def _same(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape
  g, w = got.astype(np.float64), want.astype(np.float64)
  ok = ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))
  assert ok.all(), [(x, y) for x, y in zip(g[~ok][:5], w[~ok][:5])]


def _correctly_rounded(x: float, dt) -> float:
  """``x`` rounded to ``dt`` exactly: the nearest finite value (ties to the even code), NaN or
  infinity past the overflow threshold (half an ulp beyond the largest value)."""
  if np.isnan(x):
    return np.nan
  codes = np.arange(128, dtype=np.uint8)
  vals = codes.view(dt).astype(np.float64)
  fin = np.isfinite(vals)
  codes, vals = codes[fin], vals[fin]
  top = Fraction(float(vals[-1])) + (Fraction(float(vals[-1])) - Fraction(float(vals[-2]))) / 2
  a = Fraction(abs(x)) if np.isfinite(x) else top + 1
  sign = -1.0 if np.signbit(x) else 1.0
  if a > top or (a == top and vals[-1] and int(codes[-1]) & 1):
    return np.nan if dt == E4M3 else sign * np.inf
  d = [abs(Fraction(float(v)) - a) for v in vals]
  best = min(d)
  picks = [i for i, e in enumerate(d) if e == best]
  i = picks[0] if len(picks) == 1 else next(i for i in picks if int(codes[i]) % 2 == 0)
  return sign * float(vals[i])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=32), min_size=1, max_size=40), st.sampled_from(FP8),
       st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]))
def test_astype_matches_ml_dtypes(xs, dt, src):
  with np.errstate(all="ignore"):
    x = np.array(xs, np.float32).astype(src)
  f = lambda v: v.astype(dt)   # noqa: E731
  _same(ourjax.jit(f)(x), x.astype(dt))
  _same(jnp.asarray(x).astype(dt), x.astype(dt))
  back = lambda v: v.astype(dt).astype(src)   # noqa: E731
  _same(ourjax.jit(back)(x), x.astype(dt).astype(src))


@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_overflow_gives_nan_or_infinity(dt):
  x = np.array([448, 464, 465, 1e9, np.inf, -np.inf, 57344, 61439, 61440, np.nan], np.float32)
  got = np.asarray(ourjax.jit(lambda v: v.astype(dt))(x)).astype(np.float64)
  want = [_correctly_rounded(float(v), dt) for v in x]
  _same(got, np.array(want))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=-7e4, max_value=7e4), min_size=1, max_size=20),
       st.sampled_from(FP8), st.sampled_from([1.0, 1 + 2.0 ** -40, 1 - 2.0 ** -40]))
def test_float64_is_rounded_once(xs, dt, nudge):
  # (values nudged off a point of float32 onto a rounding boundary of the 8-bit type)
  with ourjax.enable_x64(True):
    x = np.array(xs, np.float64)
    x = np.concatenate([x, x.astype(dt).astype(np.float64) * nudge])
    mids = np.arange(128, dtype=np.uint8).view(dt).astype(np.float64)
    mids = mids[np.isfinite(mids)]
    x = np.concatenate([x, (mids[1:] + mids[:-1]) / 2 * nudge])
    want = np.array([_correctly_rounded(float(v), dt) for v in x])
    got = np.asarray(ourjax.jit(lambda v: v.astype(dt))(x)).astype(np.float64)
    _same(got, want)


@pytest.mark.parametrize("dt", FP8, ids=lambda d: d.name)
def test_max_and_min_over_8_bit_floats(dt):
  """(e4m3fn has no infinity: max's identity is its lowest value, -448, not NaN)"""
  rng = np.random.default_rng(0)
  x = (rng.standard_normal((16, 40)) * 3).astype(dt)
  x[3] = -np.abs(x[3].astype(np.float32)).astype(dt)        # a row of negatives only
  for fn, ref in ((jnp.max, np.max), (jnp.min, np.min)):
    want = ref(x.astype(np.float32), axis=1).astype(dt)
    _same(ourjax.jit(lambda v: fn(v, axis=1))(x), want)
    _same(fn(jnp.asarray(x), axis=1), want)
  low = np.array(-np.inf if dt == E5M2 else -448.0, dt)
  pool = ourjax.jit(lambda v: lax.reduce_window(v, low, lax.max,
                                                (2, 3), (2, 3), "VALID"))
  want = x[:, :39].astype(np.float32).reshape(8, 2, 13, 3).max(axis=(1, 3))
  _same(pool(x[:, :39]), want.astype(dt))


@pytest.mark.parametrize("ta,tb", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)],
                         ids=["e4m3", "e5m2", "mixed"])
@pytest.mark.parametrize("out", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_dot_sums_exact_products(ta, tb, out):
  rng = np.random.default_rng(1)
  a = (rng.standard_normal((2, 17, 40)) * 2).astype(ta)
  b = (rng.standard_normal((2, 40, 9)) * 2).astype(tb)
  f = lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))),   # noqa: E731
                                   preferred_element_type=out)
  got = np.asarray(ourjax.jit(f)(a, b))
  exact = np.einsum("bik,bkj->bij", a.astype(np.float64), b.astype(np.float64))
  assert got.dtype == np.dtype(out)
  tol = 40 * 2.0 ** -24 if out == np.float32 else float(ml_dtypes.finfo(out).eps)
  scale = np.einsum("bik,bkj->bij", np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
  assert (np.abs(got.astype(np.float64) - exact) <= tol * scale + 1e-30).all()
