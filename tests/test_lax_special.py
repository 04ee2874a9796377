"""``lax.igamma`` / ``igammac`` / ``igamma_grad_a`` / ``betainc`` / ``bessel_i0e`` /
``bessel_i1e`` and their ``scipy.special`` names, against closed forms computed in float64
(integer parameters of the incomplete gamma and beta functions, NumPy's ``i0``, the power series
of I_1), eager and jitted, with derivatives against finite differences."""
import math

import numpy as np
import pytest

import ourjax
from ourjax import lax
from ourjax.config import enable_x64
import ourjax.scipy.special as sps


def _p_int(n, x):
  """P(n, x) = 1 - e^-x sum_{k<n} x^k / k! for integer n."""
  return 1 - math.exp(-x) * sum(x ** k / math.factorial(k) for k in range(n))


def _betainc_int(a, b, x):
  n = a + b - 1
  return sum(math.comb(n, j) * x ** j * (1 - x) ** (n - j) for j in range(a, n + 1))


def _i1(x):
  return sum((x / 2) ** (2 * k + 1) / (math.factorial(k) * math.factorial(k + 1))
             for k in range(80))


@pytest.mark.parametrize("jit", [False, True])
def test_incomplete_gamma_and_beta_against_closed_forms(jit):
  w = (lambda f: ourjax.jit(f)) if jit else (lambda f: f)
  ns = np.array([1, 2, 3, 5, 8, 12], np.float32)
  xs = np.array([0.1, 1.5, 2.0, 4.0, 9.0, 30.0], np.float32)
  want = np.array([_p_int(int(n), float(x)) for n, x in zip(ns, xs)])
  np.testing.assert_allclose(w(lax.igamma)(ns, xs), want, rtol=2e-6, atol=1e-30)
  np.testing.assert_allclose(w(lax.igammac)(ns, xs), 1 - want, rtol=2e-5, atol=1e-7)
  a = np.array([1, 2, 3, 5], np.float32)
  b = np.array([4, 1, 2, 3], np.float32)
  x = np.array([0.2, 0.5, 0.7, 0.95], np.float32)
  want = [_betainc_int(int(i), int(j), float(v)) for i, j, v in zip(a, b, x)]
  np.testing.assert_allclose(w(lax.betainc)(a, b, x), want, rtol=2e-6)
  np.testing.assert_allclose(sps.betainc(a, b, x), want, rtol=2e-6)
  np.testing.assert_allclose(sps.gammainc(ns, xs), w(lax.igamma)(ns, xs))


def test_edges_as_jax():
  assert lax.igamma(1.0, np.inf) == 1.0 and lax.igammac(1.0, np.inf) == 0.0
  assert lax.igamma(2.0, 0.0) == 0.0 and lax.igammac(2.0, 0.0) == 1.0
  assert np.isnan(lax.igamma(-1.0, 1.0)) and np.isnan(lax.igamma(1.0, -1.0))
  assert lax.betainc(2.0, 3.0, 0.0) == 0.0 and lax.betainc(2.0, 3.0, 1.0) == 1.0
  with pytest.raises(TypeError, match="igamma requires arguments to have the same dtypes"):
    lax.igamma(np.float32(1), np.float16(1))


@pytest.mark.parametrize("jit", [False, True])
def test_bessel_i0e_i1e(jit):
  w = (lambda f: ourjax.jit(f)) if jit else (lambda f: f)
  x = np.array([-45.0, -31.0, -3.0, -0.5, 0.0, 1e-3, 2.0, 29.0, 30.5, 80.0, 1e4], np.float32)
  x64 = x.astype(np.float64)
  small = np.abs(x64) < 100      # (np.i0 overflows beyond)
  np.testing.assert_allclose(np.asarray(w(lax.bessel_i0e)(x))[small],
                             np.exp(-np.abs(x64[small])) * np.i0(x64[small]), rtol=2e-6)
  want1 = np.array([math.copysign(_i1(abs(v)) * math.exp(-abs(v)), v) if s else np.nan
                    for v, s in zip(x64, small)])
  np.testing.assert_allclose(np.asarray(w(lax.bessel_i1e)(x))[small], want1[small], rtol=2e-6)
  # large |x|: I_1 / I_0 -> 1 - 1/(2x)
  np.testing.assert_allclose(lax.bessel_i1e(np.float32(1e4)) / lax.bessel_i0e(np.float32(1e4)),
                             1 - 1 / 2e4, rtol=1e-6)
  np.testing.assert_allclose(sps.i0(np.float32(2)), np.i0(2.0), rtol=2e-6)


def _fd(f, x, eps=1e-6):
  return (f(x + eps) - f(x - eps)) / (2 * eps)


def test_derivatives_match_finite_differences():
  with enable_x64(True):
    for a, x in [(0.7, 0.3), (2.5, 1.5), (4.0, 9.0)]:
      np.testing.assert_allclose(ourjax.grad(lax.igamma, 1)(a, x),
                                 _fd(lambda v: float(lax.igamma(a, v)), x), rtol=1e-6)
      np.testing.assert_allclose(ourjax.grad(lax.igamma, 0)(a, x),
                                 _fd(lambda v: float(lax.igamma(v, x)), a), rtol=1e-5)
      np.testing.assert_allclose(ourjax.grad(lax.igammac, 0)(a, x),
                                 -ourjax.grad(lax.igamma, 0)(a, x), rtol=1e-9)
    a, b, x = 1.5, 2.5, 0.4
    for i, v in enumerate((a, b, x)):
      def f(t, i=i):
        args = [a, b, x]
        args[i] = t
        return lax.betainc(*args)
      np.testing.assert_allclose(ourjax.grad(f)(v), _fd(lambda t: float(f(t)), v), rtol=1e-5)
    for xv in (-3.0, 0.5, 12.0, 45.0):
      for f in (lax.bessel_i0e, lax.bessel_i1e):
        np.testing.assert_allclose(ourjax.grad(f)(xv), _fd(lambda t: float(f(t)), xv),
                                   rtol=1e-6)
        g2 = ourjax.grad(ourjax.grad(f))(xv)
        np.testing.assert_allclose(g2, _fd(lambda t: float(ourjax.grad(f)(t)), xv, 1e-5),
                                   rtol=1e-5)


def test_size_one_dimensions_broadcast_as_jax_lax():
  a = np.array([[1.0], [3.0]], np.float32)
  x = np.array([[0.5, 2.0, 4.0]], np.float32)
  want = np.array([[_p_int(int(i), float(v)) for v in x[0]] for i in a[:, 0]])
  np.testing.assert_allclose(lax.igamma(a, np.broadcast_to(x, (2, 3))), want, rtol=2e-6)
  np.testing.assert_allclose(lax.igamma(np.broadcast_to(a, (2, 3)), x), want, rtol=2e-6)
  with pytest.raises(TypeError, match="incompatible shapes"):
    lax.igamma(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
