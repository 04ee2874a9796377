"""Polynomial functions (poly, polyadd/polysub/polymul/polydiv, polyder/polyint, polyfit, roots)
and window functions (bartlett, blackman, hamming, hanning, kaiser, i0) against NumPy float64,
with JAX's conventions where they differ from NumPy's (inexact results, leading zeros kept,
complex roots, NaN roots for stripped zeros), and their jit / vmap / grad behaviour."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.config import enable_x64
from ourjax.errors import ConcretizationTypeError
from test_numpy_helpers import arrays, check

F32, F64, C64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64)


def coeffs(n_min=1, n_max=6, dt=np.float32, lo=-4, hi=4):
  return st.integers(n_min, n_max).flatmap(lambda n: arrays(dt, (n,), lo, hi))


def np_pad_front(a, n):
  """NumPy's result with the leading zeros JAX keeps (NumPy trims them)."""
  a = np.asarray(a)
  return np.concatenate([np.zeros(n - len(a), a.dtype), a])


# ---------------------------------------------------------------------------------------------
# Arithmetic


@given(a=coeffs(), b=coeffs())
def test_polyadd_polysub(a, b):
  check(jnp.polyadd(a, b), np.polyadd(a.astype(F64), b.astype(F64)), F32)
  check(jnp.polysub(a, b), np.polysub(a.astype(F64), b.astype(F64)), F32)


def test_polyadd_dtypes_and_2d():
  i = np.array([1, 2, 3], np.int32)
  check(jnp.polyadd(i, np.array([5, 6], np.int32)), np.array([1, 7, 9]), np.int32)
  check(jnp.polysub(i, np.array([5., 6.], np.float32)), np.array([1., -3., -3.]), F32)
  check(jnp.polyadd(np.ones((1, 3), F32), np.ones((2, 3), F32)),
        np.array([[1., 1, 1], [2, 2, 2]]), F32)
  with pytest.raises(IndexError):
    jnp.polyadd(1, 2)
  with pytest.raises(TypeError, match="list"):
    jnp.polyadd([1, 2], [3])


@given(a=coeffs(), b=coeffs())
def test_polymul(a, b):
  ref = np.convolve(a.astype(F64), b.astype(F64))   # np.polymul without its trimming
  check(jnp.polymul(a, b), ref, F32, rtol=1e-5, atol=1e-4)
  if a.any() and b.any():
    check(jnp.polymul(a, b, trim_leading_zeros=True),
          np.polymul(np.trim_zeros(a.astype(F64), "f"), np.trim_zeros(b.astype(F64), "f")),
          F32, rtol=1e-5, atol=1e-4)


def test_polymul_conventions():
  x1, x2 = np.array([2, 1, 0]), np.array([0, 5, 0, 3])
  check(jnp.polymul(x1, x2), np.array([0., 10, 5, 6, 3, 0]), F32)
  check(jnp.polymul(x1, x2, trim_leading_zeros=True), np.array([10., 5, 6, 3, 0]), F32)
  check(jnp.polymul(np.zeros(0, F32), np.array([1., 2.], F32)), np.zeros(2), F32)
  check(jnp.polymul(np.array([2., 1 + 2j]), np.array([1., 1.])),
        np.array([2., 3 + 2j, 1 + 2j]), C64)
  with pytest.raises(ConcretizationTypeError):
    ourjax.jit(lambda a, b: jnp.polymul(a, b, trim_leading_zeros=True))(x1, x2)
  check(ourjax.jit(jnp.polymul)(x1, x2), np.array([0., 10, 5, 6, 3, 0]), F32)


@given(u=coeffs(1, 7), v=coeffs(1, 4, lo=1, hi=4))
def test_polydiv(u, v):
  q, r = jnp.polydiv(u, v)
  qn, rn = np.polydiv(u.astype(F64), v.astype(F64))
  check(q, np_pad_front(qn, max(len(u) - len(v) + 1, 1)), F32, rtol=1e-4, atol=1e-4)
  assert r.shape == u.shape and r.dtype == F32  # the remainder keeps u's length
  check(r[len(u) - len(rn):], rn, F32, rtol=1e-4, atol=1e-3)
  # u == q * v + r
  back = np.polyadd(np.polymul(np.asarray(q, F64), v), np.asarray(r, F64))
  np.testing.assert_allclose(np.polysub(back, u.astype(F64)), 0, atol=1e-3)


def test_polydiv_conventions():
  q, r = jnp.polydiv(np.array([5, 7, 9]), np.array([4, 1]))
  check(q, np.array([1.25, 1.4375]), F32)
  check(r, np.array([0., 0, 7.5625]), F32)
  q, r = jnp.polydiv(np.array([5, 7, 9]), np.array([4, 1]), trim_leading_zeros=True)
  check(r, np.array([7.5625]), F32)
  q, r = jnp.polydiv(np.array([1., 3, 2]), np.array([1., 1]), trim_leading_zeros=True)
  check(q, np.array([1., 2.]), F32)
  check(r, np.zeros(0), F32)
  q, r = ourjax.jit(jnp.polydiv)(np.array([5., 7, 9], F32), np.array([4., 1], F32))
  check(r, np.array([0., 0, 7.5625]), F32)
  with pytest.raises(ConcretizationTypeError):
    ourjax.jit(lambda a, b: jnp.polydiv(a, b, trim_leading_zeros=True))(
        np.array([5., 7, 9]), np.array([4., 1]))


@given(p=coeffs(1, 7), m=st.integers(0, 8))
def test_polyder(p, m):
  ref = np.polyder(p.astype(F64), m)
  n_out = max(len(p) - m, 0)
  got = jnp.polyder(p, m)
  assert got.shape == (n_out if m else len(p),) and got.dtype == F32
  if n_out:
    check(got, np_pad_front(ref, n_out), F32, rtol=1e-5, atol=1e-3)


@given(p=coeffs(1, 6), m=st.integers(0, 3), data=st.data())
def test_polyint(p, m, data):
  k = data.draw(arrays(np.float32, (m,), -3, 3), label="k") if m else None
  ref = np.polyint(p.astype(F64), m, k if k is not None else 0)
  check(jnp.polyint(p, m, k), ref, F32, rtol=1e-5, atol=1e-5)
  check(jnp.polyint(p, m, 2.0), np.polyint(p.astype(F64), m, 2.0), F32, rtol=1e-5, atol=1e-5)


def test_polyder_polyint_conventions():
  p = np.array([2, -5, 3, -1])
  check(jnp.polyder(p), np.array([6., -10, 3]), F32)    # integers give floats (JAX's rule)
  check(jnp.polyder(p, 0), p.astype(F32), F32)
  check(jnp.polyder(p.astype(np.float16), 1), np.array([6., -10, 3]), np.float16)
  check(jnp.polyint(np.array([12, 12, 6]), m=2, k=np.array([4, 5])),
        np.array([1., 2, 3, 4, 5]), F32)
  with pytest.raises(ValueError, match="positive"):
    jnp.polyder(p, -1)
  with pytest.raises(ValueError, match="positive"):
    jnp.polyint(p, -1)
  with pytest.raises(ValueError, match="length 1 or m"):
    jnp.polyint(p, 2, k=np.array([1., 2, 3]))
  # the orders are static in JAX (jit static_argnames): an array is unhashable there
  with pytest.raises(ValueError, match="Non-hashable"):
    jnp.polyder(p, np.array(1))
  with pytest.raises(ValueError, match="Non-hashable"):
    jnp.polyint(p, jnp.array(1))
  check(ourjax.jit(jnp.polyder, static_argnums=1)(p, 2), np.array([12., -10]), F32)
  check(ourjax.jit(lambda q, k: jnp.polyint(q, 1, k))(p, 3.0), np.array([.5, -5 / 3, 1.5, -1, 3]),
        F32)


# ---------------------------------------------------------------------------------------------
# poly and roots


def match_roots(got, ref, tol, p=None):
  """Every reference root has a distinct computed root within ``tol`` (relative); with the
  coefficients ``p``, ``tol`` is per unit of the root's condition number, so that the bound
  is what a backward-stable method in that precision reaches."""
  got = list(np.asarray(got, np.complex128))
  assert len(got) == len(ref)
  for r in sorted(ref, key=lambda z: -abs(z)):
    bound = tol * max(1.0, abs(r))
    if p is not None:   # |delta r| <= eps * sum |p_k| |r|^k / |p'(r)|
      n = len(p) - 1
      size = sum(abs(c) * abs(r) ** (n - k) for k, c in enumerate(p))
      bound = tol * (1 + size / abs(np.polyval(np.polyder(p), r)))
    d = [abs(g - r) for g in got]
    i = int(np.argmin(d))
    assert d[i] <= bound, (got, ref)
    got.pop(i)


# polynomials with distinct roots (then every root is simple and has a finite condition number)
distinct_roots = st.lists(st.integers(-8, 8), min_size=1, max_size=6, unique=True).map(
    lambda r: np.array(r, np.float64) / 2)


@settings(max_examples=12)   # each degree compiles the eigenvalue loop once
@given(r=distinct_roots, lead=st.sampled_from([1.0, -2.0, 0.5]), pairs=st.integers(0, 1))
def test_roots(r, lead, pairs):
  if pairs:   # a complex conjugate pair too
    r = np.concatenate([r, [0.5 + 1.5j, 0.5 - 1.5j]])
  p = (lead * np.poly(r)).real.astype(np.float32)
  got = jnp.roots(p)
  assert got.dtype == C64 and got.shape == (len(r),)
  match_roots(got, np.roots(p.astype(F64)), 30 * np.finfo(np.float32).eps, p.astype(F64))


@settings(max_examples=6)
@given(r=distinct_roots)
def test_roots_float64(r):
  p = np.poly(r)
  with enable_x64(True):
    got = jnp.roots(p)
  assert got.dtype == np.complex128
  match_roots(got, np.roots(p), 30 * np.finfo(np.float64).eps, p)


def test_roots_zeros_and_conventions():
  check(jnp.roots(np.array([1., -3, 2])), np.array([2., 1.]), C64)
  check(jnp.roots(np.array([0, 1, 2])), np.array([-2.]), C64)       # leading zeros stripped
  check(jnp.roots(np.array([1., -3, 2, 0, 0])).real.sort(), np.array([0., 0, 1, 2]), F32,
        atol=1e-6)
  assert np.asarray(jnp.roots(np.array([1., -3, 2, 0, 0]))).tolist().count(0) == 2  # exact
  check(jnp.roots(np.array([0., 0, 0])), np.zeros(0), C64)
  check(jnp.roots(3.0), np.zeros(0), C64)
  check(jnp.roots(np.array([1., 1j])), np.array([-1j]), C64)
  # strip_zeros=False traces; each leading zero makes one root NaN, placed last
  nan = complex(np.nan, np.nan)
  check(jnp.roots(np.array([0, 1, 2]), strip_zeros=False), np.array([-2., nan]), C64)
  check(jnp.roots(np.zeros(3), strip_zeros=False), np.array([nan, nan]), C64)
  f = ourjax.jit(lambda p: jnp.roots(p, strip_zeros=False))
  check(f(np.array([1., -3, 2], np.float32)), np.array([2., 1.]), C64, atol=1e-6)
  batch = ourjax.vmap(lambda p: jnp.roots(p, strip_zeros=False))(
      np.array([[0., 1, -3, 2], [1., 0, 0, -1]], np.float32))
  match_roots(np.asarray(batch)[0][:2], [1., 2.], 1e-5)
  assert np.isnan(np.asarray(batch)[0][2])
  match_roots(batch[1], np.roots([1., 0, 0, -1]), 1e-5)
  with pytest.raises(ConcretizationTypeError):
    ourjax.jit(jnp.roots)(np.array([1., -3, 2]))
  with pytest.raises(ValueError, match="rank-1"):
    jnp.roots(np.ones((2, 2)))
  with pytest.raises(NotImplementedError, match="float16"):
    jnp.roots(np.array([1., -3, 2], np.float16))


@given(r=st.lists(st.floats(-3, 3, width=32), min_size=0, max_size=5))
def test_poly_of_roots(r):
  r = np.array(r, np.float32)
  got = jnp.poly(r)
  if len(r) == 0:
    assert got.shape == () and got.dtype == F32
  check(got, np.poly(r.astype(F64)), F32, rtol=1e-5, atol=1e-4)


@given(a=st.integers(1, 5).flatmap(lambda n: arrays(np.float32, (n, n), -2, 2)))
def test_poly_of_matrix(a):
  # the characteristic polynomial, computed from the eigenvalues (complex, as JAX's)
  got = jnp.poly(a)
  assert got.dtype == C64
  ref = np.poly(a.astype(F64))
  scale = np.abs(ref).max()
  np.testing.assert_allclose(np.asarray(got, np.complex128), ref, atol=1e-4 * scale)


def test_poly_conventions():
  check(jnp.poly(1), np.array([1., -1.]), F32)
  check(jnp.poly(np.array([1, 2, 3])), np.array([1., -6, 11, -6]), F32)
  check(jnp.poly(np.array([1 + 1j, 1 - 1j])), np.array([1., -2, 2]), C64)
  check(ourjax.jit(jnp.poly)(np.array([1., 2, 3], np.float32)), np.array([1., -6, 11, -6]),
        F32)
  check(ourjax.vmap(jnp.poly)(np.array([[1., 2], [3, 4]], np.float32)),
        np.array([[1., -3, 2], [1, -7, 12]]), F32)
  with pytest.raises(ValueError, match="square"):
    jnp.poly(np.ones((2, 3)))


# ---------------------------------------------------------------------------------------------
# polyfit


@settings(max_examples=6)   # eager lstsq runs its Jacobi sweeps op by op
@given(n=st.integers(4, 9), deg=st.integers(0, 3), data=st.data())
def test_polyfit(n, deg, data):
  x = np.linspace(-2, 2, n).astype(np.float32)
  y = data.draw(arrays(np.float32, (n,), -3, 3), label="y")
  check(jnp.polyfit(x, y, deg), np.polyfit(x.astype(F64), y.astype(F64), deg), F32, rtol=1e-4,
        atol=1e-4)
  w = data.draw(arrays(np.float32, (n,), 0.5, 2), label="w")
  check(jnp.polyfit(x, y, deg, w=w), np.polyfit(x.astype(F64), y.astype(F64), deg, w=w),
        F32, rtol=1e-4, atol=1e-4)
  y2 = np.stack([y, y[::-1]], 1)
  check(jnp.polyfit(x, y2, deg), np.polyfit(x.astype(F64), y2.astype(F64), deg), F32,
        rtol=1e-4, atol=1e-4)


def test_polyfit_full_cov_and_errors():
  x = np.array([3., 6, 9, 4], np.float32)
  y = np.array([0., 2, 8, 1], np.float32)
  xd, yd = x.astype(F64), y.astype(F64)
  c, resid, rank, s, rcond = jnp.polyfit(x, y, 2, full=True)
  cn, residn, rankn, sn, rcondn = np.polyfit(xd, yd, 2, full=True)
  check(c, cn, F32, rtol=1e-4)
  np.testing.assert_allclose(np.asarray(resid).ravel(), residn, rtol=1e-3)
  assert int(rank) == rankn == 3
  check(s, sn, F32, rtol=1e-4)
  assert rcond.dtype == F32 and float(rcond) == pytest.approx(4 * np.finfo(np.float32).eps)
  c, cov = jnp.polyfit(x, y, 2, cov=True)
  check(cov, np.polyfit(xd, yd, 2, cov=True)[1], F32, rtol=1e-3, atol=1e-5)
  c, cov = jnp.polyfit(x, y, 2, cov="unscaled")
  check(cov, np.polyfit(xd, yd, 2, cov="unscaled")[1], F32, rtol=1e-3, atol=1e-5)
  y2 = np.array([[0., 1], [2, 5], [8, 4], [1, 6]], np.float32)
  c, cov = jnp.polyfit(x, y2, 1, cov=True)
  check(cov, np.polyfit(xd, y2.astype(F64), 1, cov=True)[1], F32, rtol=1e-3, atol=1e-5)
  check(ourjax.jit(jnp.polyfit, static_argnums=2)(x, y, 1), np.polyfit(xd, yd, 1), F32,
        rtol=1e-4)
  with pytest.raises(ValueError, match="deg >= 0"):
    jnp.polyfit(x, y, -1)
  with pytest.raises(TypeError, match="1D vector"):
    jnp.polyfit(np.ones((2, 2)), np.ones(2), 1)
  with pytest.raises(TypeError, match="same length"):
    jnp.polyfit(np.ones(3), np.ones(2), 1)
  with pytest.raises(ValueError, match="exceed order"):
    jnp.polyfit(np.array([1., 2]), np.array([1., 2]), 1, cov=True)
  with pytest.raises(ValueError, match="Non-hashable"):
    jnp.polyfit(x, y, jnp.array(1))
  with pytest.raises(ValueError, match="not inexact"):
    jnp.polyfit(np.array([3, 6, 9, 4]), np.array([0, 2, 8, 1]), 2)


def test_grad_polyval_and_polyfit():
  p = np.array([1., -2., 3., 0.5], np.float32)
  # d/dx p(x) = p'(x); d/dp_i p(x) = x^(n-1-i)
  for x in (-1.5, 0.0, 2.0):
    g = ourjax.grad(lambda x: jnp.polyval(p, x))(x)
    np.testing.assert_allclose(float(g), np.polyval(np.polyder(p.astype(F64)), x), rtol=1e-6)
    g = ourjax.grad(lambda q: jnp.polyval(q, x))(p)
    np.testing.assert_allclose(np.asarray(g), x ** np.arange(3, -1, -1.0), rtol=1e-6)
  # polyfit is linear in y: the gradient of sum(coefficients) is the sum of pinv(V)'s rows
  x = np.linspace(-1, 1, 7).astype(np.float32)
  y = (x ** 3 - x).astype(np.float32)
  g = ourjax.grad(lambda y: jnp.polyfit(x, y, 2).sum())(y)
  ref = np.linalg.pinv(np.vander(x.astype(F64), 3)).sum(0)
  np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Windows and i0

WINDOWS = ["bartlett", "blackman", "hamming", "hanning"]


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("M", [0, 1, 2, 5, 16, 33])
def test_windows(name, M):
  got = getattr(jnp, name)(M)
  ref = getattr(np, name)(M)
  check(got, ref, F32, rtol=1e-6, atol=1e-6, weak=False)
  with pytest.raises(TypeError, match="nonnegative"):   # as JAX's (NumPy: an empty window)
    getattr(jnp, name)(-1)


@pytest.mark.parametrize("name", WINDOWS + ["kaiser"])
def test_windows_x64_and_jit(x64, name):
  args = (12, 5.0) if name == "kaiser" else (12,)
  got = getattr(jnp, name)(*args)
  check(got, getattr(np, name)(*args), F64, rtol=1e-13, atol=1e-14, weak=False)
  with pytest.raises(ConcretizationTypeError):
    ourjax.jit(getattr(jnp, name))(*args)


@pytest.mark.parametrize("M,beta", [(0, 1.0), (1, 3.0), (2, 0.0), (9, 6.0), (20, 14.0),
                                    (31, 8.6), (50, 40.0)])
def test_kaiser(M, beta):
  # the argument's relative rounding (1 - t^2 near the ends) is amplified ~beta-fold by i0's
  # growth: JAX's float32 window is off from NumPy's by 7e-6 at beta=40 too
  check(jnp.kaiser(M, beta), np.kaiser(M, beta), F32, rtol=1e-6 * max(2, beta / 4), atol=1e-7,
        weak=False)


@given(x=arrays(np.float32, (64,), -90, 90))
def test_i0(x):
  ref = np.i0(x.astype(F64))
  got = jnp.i0(x)
  assert got.dtype == F32
  np.testing.assert_allclose(np.asarray(got, F64), ref, rtol=1e-6)


def test_i0_x64_dtypes_and_grad(x64):
  x = np.concatenate([np.linspace(-700, 700, 301), [0, 1e-3, 9.99, 10.01, 29.99, 30.01]])
  check(jnp.i0(x), np.i0(x), F64, rtol=5e-15)
  assert jnp.i0(1.0).weak_type and jnp.i0(np.float16(2)).dtype == np.float16
  with pytest.raises(ValueError, match="Unsupported input type"):
    jnp.i0(np.array([1j]))
  # d/dx I0 = I1 = sum (x/2)^(2k+1) / (k! (k+1)!)
  for v in (-3.0, 0.0, 0.5, 12.0, 40.0):
    term, i1 = v / 2, 0.0
    for k in range(120):
      i1 += term
      term *= (v / 2) ** 2 / ((k + 1) * (k + 2))
    np.testing.assert_allclose(float(ourjax.grad(jnp.i0)(v)), i1, rtol=1e-12, atol=1e-300)
