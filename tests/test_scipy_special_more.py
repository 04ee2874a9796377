"""scipy.special's rel_entr, kl_div, factorial, comb, poch, boxcox(1p), gammasgn, loggamma,
bernoulli, zeta (Hurwitz) and polygamma of any order; lax.zeta/polygamma/approx_max_k/
approx_min_k; scipy.cluster.vq.vq; scipy.integrate.trapezoid; scipy.linalg.eigh_tridiagonal;
erfcx: against Python's math module,
NumPy float64 and identities, with JAX 0.10.2's edge values."""
import math
from fractions import Fraction

import numpy as np
import pytest

import ourjax.numpy as jnp
from ourjax import lax
from ourjax.scipy import special as sp
from ourjax.scipy import integrate
from ourjax.scipy.cluster import vq


def test_entropies_with_jax_edge_values():
  p = jnp.array([0., 0., 0.5, 1., 2., -1., 0.3])
  q = jnp.array([0., 1., 0.5, 2., 0., 1., -1.])
  inf = np.inf
  np.testing.assert_allclose(sp.rel_entr(p, q), [0, 0, 0, np.log(0.5), inf, inf, inf],
                             rtol=1e-6)
  np.testing.assert_allclose(sp.kl_div(p, q), [0, 1, 0, np.log(0.5) + 1, inf, inf, inf],
                             rtol=1e-6)


def test_factorial_comb_poch_gamma_sign_and_log():
  n = np.array([-2., -0.5, 0., 0.5, 1., 4., 10.])
  want = [0, 0, 1, math.gamma(1.5), 1, 24, 3628800]
  np.testing.assert_allclose(sp.factorial(n.astype(np.float32)), want, rtol=1e-5)
  with pytest.raises(NotImplementedError):
    sp.factorial(3, exact=True)
  N = np.array([5., 5., 5., 10., 0.])
  k = np.array([2., 0., 6., 3., 0.])
  np.testing.assert_allclose(sp.comb(N, k), [math.comb(5, 2), 1, 0, math.comb(10, 3), 1],
                             rtol=1e-5)
  np.testing.assert_allclose(sp.comb(jnp.array([5., 3.]), jnp.array([2., 4.]), repetition=True),
                             [math.comb(6, 2), math.comb(6, 4)], rtol=1e-5)
  z = np.array([1., 2.5, -1.5, 0., 3.])
  m = np.array([0., 1.5, 2., 1., -1.])
  want = [1, math.gamma(4) / math.gamma(2.5), math.gamma(0.5) / math.gamma(-1.5), 0, 0.5]
  np.testing.assert_allclose(sp.poch(z, m), want, rtol=1e-5)     # (poch(0, 1) = 0, as JAX)
  g = np.array([-2.5, -1.5, -0.5, 0.5, 3.])
  np.testing.assert_array_equal(sp.gammasgn(g), [np.sign(math.gamma(v)) for v in g])
  out = np.asarray(sp.gammasgn(jnp.array([-2., 0., -0.])))
  assert np.isnan(out[0]) and out[1] == 1 and out[2] == -1
  np.testing.assert_allclose(sp.gamma(jnp.array([0., -0.])), [np.inf, -np.inf])
  x = np.array([0.5, 1., 3.5, 100.])
  np.testing.assert_allclose(sp.loggamma(x), [math.lgamma(v) for v in x], rtol=1e-6, atol=1e-6)
  assert np.isnan(np.asarray(sp.loggamma(jnp.array([0., -1.5])))).all()


def test_boxcox_and_bernoulli():
  x = np.array([0.5, 1., 2., 3.])
  lm = np.array([0., 0.5, -1., 2.])
  want = np.where(lm == 0, np.log(x), (x ** lm - 1) / np.where(lm == 0, 1, lm))
  np.testing.assert_allclose(sp.boxcox(x, lm), want, rtol=1e-6)
  want1 = np.where(lm == 0, np.log1p(x), ((1 + x) ** lm - 1) / np.where(lm == 0, 1, lm))
  np.testing.assert_allclose(sp.boxcox1p(x, lm), want1, rtol=1e-6)
  known = [Fraction(1), Fraction(-1, 2), Fraction(1, 6), 0, Fraction(-1, 30), 0,
           Fraction(1, 42), 0, Fraction(-1, 30)]
  np.testing.assert_allclose(sp.bernoulli(8), [float(f) for f in known], rtol=1e-6, atol=1e-7)


def test_zeta_and_polygamma():
  np.testing.assert_allclose(sp.zeta(2., 1.), np.pi ** 2 / 6, rtol=1e-6)
  np.testing.assert_allclose(sp.zeta(4., 1.), np.pi ** 4 / 90, rtol=1e-6)
  rng = np.random.RandomState(0)
  x = rng.uniform(1.2, 12, 50).astype(np.float32)
  q = rng.uniform(0.1, 20, 50).astype(np.float32)
  # the defining recurrence zeta(x, q) = q**-x + zeta(x, q + 1), in float64
  lhs = np.asarray(sp.zeta(x, q), np.float64)
  rhs = q.astype(np.float64) ** -x.astype(np.float64) + np.asarray(sp.zeta(x, q + 1),
                                                                    np.float64)
  np.testing.assert_allclose(lhs, rhs, rtol=2e-6)
  # JAX 0.10.2's edge values: inf at x = 1 and at non-positive integer q, nan for x < 1,
  # finite for negative non-integer q with integer x
  out = np.asarray(sp.zeta(jnp.array([1., 0.5, 2., 2., 2.]), jnp.array([1., 1., -1., -1.5, 0.])))
  assert np.isinf(out[0]) and np.isnan(out[1]) and np.isinf(out[2]) and np.isinf(out[4])
  np.testing.assert_allclose(out[3], 9.379247, rtol=1e-5)
  # polygamma(n, 1) = (-1)**(n+1) n! zeta(n + 1); polygamma(1, x) = zeta(2, x)
  for n, z in [(1, np.pi ** 2 / 6), (2, 1.2020569031595942), (3, np.pi ** 4 / 90)]:
    np.testing.assert_allclose(sp.polygamma(n, 1.), (-1) ** (n + 1) * math.factorial(n) * z,
                               rtol=1e-5)
  np.testing.assert_allclose(sp.polygamma(1, q), sp.zeta(2., q), rtol=1e-6)
  np.testing.assert_allclose(sp.polygamma(0, 2.), 1 - np.euler_gamma, rtol=1e-6)
  np.testing.assert_allclose(lax.zeta(2., 1.), np.pi ** 2 / 6, rtol=1e-6)
  np.testing.assert_allclose(lax.polygamma(1., 2.), np.pi ** 2 / 6 - 1, rtol=1e-6)


def test_approx_k_vq_trapezoid():
  x = np.array([[1., 5., 3., 2.], [7., 0., 4., 9.]], np.float32)
  v, i = lax.approx_max_k(x, 2)
  np.testing.assert_array_equal(v, -np.sort(-x, axis=1)[:, :2])
  np.testing.assert_array_equal(i, np.argsort(-x, axis=1)[:, :2])
  v, i = lax.approx_min_k(x, 2, reduction_dimension=0)
  np.testing.assert_array_equal(v, np.sort(x, axis=0))
  np.testing.assert_array_equal(i, np.argsort(x, axis=0))
  v, _ = lax.approx_min_k(np.array([3, 1, 2], np.uint32), 2)
  assert np.asarray(v).tolist() == [1, 2]
  obs = np.array([[1., 1.], [0., 0.], [5., 4.], [2., 2.]])
  book = np.array([[0., 0.], [5., 5.], [1.5, 1.5]])
  codes, dist = vq.vq(obs, book)
  d = np.linalg.norm(obs[:, None] - book[None], axis=-1)
  np.testing.assert_array_equal(codes, d.argmin(1))
  np.testing.assert_allclose(dist, d.min(1), rtol=1e-6)
  np.testing.assert_allclose(integrate.trapezoid(jnp.arange(5.) ** 2, dx=0.5),
                             np.trapezoid(np.arange(5.) ** 2, dx=0.5))


def test_xlogy_xlog1py_derivative_at_zero_x():
  import ourjax
  # d/dx x log(y) = log(y) also at x = 0 (JAX 0.10.2: 0.6931472 for y = 2); the where() that
  # makes the value 0 there must not zero the derivative
  gx, gy = ourjax.grad(sp.xlogy, argnums=(0, 1))(0., 2.)
  np.testing.assert_allclose([gx, gy], [np.log(2.), 0.], rtol=1e-6)
  gx, gy = ourjax.grad(sp.xlogy, argnums=(0, 1))(2., 0.5)
  np.testing.assert_allclose([gx, gy], [np.log(0.5), 4.], rtol=1e-6)
  gx, gy = ourjax.grad(sp.xlog1py, argnums=(0, 1))(0., 1.)
  np.testing.assert_allclose([gx, gy], [np.log(2.), 0.], rtol=1e-6)
  assert float(sp.xlogy(0., 0.)) == 0.
  # so the gamma log-density's derivative in its shape at a = 1 is log(x) - digamma(1)
  from ourjax.scipy import stats
  np.testing.assert_allclose(ourjax.grad(lambda a: stats.gamma.logpdf(2., a))(1.),
                             np.log(2.) + np.euler_gamma, rtol=1e-5)


def test_erfcx_against_float64_and_its_derivative():
  import ourjax
  x = np.linspace(-9, 9, 73)
  want = np.array([math.exp(v * v) * math.erfc(v) for v in x])
  np.testing.assert_allclose(sp.erfcx(x.astype(np.float32)), want, rtol=2e-5)
  # large x: the asymptote 1 / (x sqrt(pi)) without overflow (JAX: 5.6418956e-11 at 1e10)
  big = np.array([1e3, 1e10], np.float32)
  np.testing.assert_allclose(sp.erfcx(big), 1 / (big.astype(np.float64) * np.sqrt(np.pi)),
                             rtol=1e-5)
  out = np.asarray(sp.erfcx(jnp.array([np.inf, -np.inf, -20.])))
  assert out[0] == 0 and np.isinf(out[1]) and np.isinf(out[2])
  g = ourjax.vmap(ourjax.grad(sp.erfcx))(jnp.asarray(x, jnp.float32))
  np.testing.assert_allclose(g, 2 * x * want - 2 / np.sqrt(np.pi), rtol=2e-4, atol=1e-5)


def test_eigh_tridiagonal():
  import ourjax
  from ourjax.scipy import linalg
  d = np.array([1., 2., 3., 4.])
  e = np.array([0.5, -1., 0.3])
  T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
  want = np.linalg.eigvalsh(T)
  w, v = linalg.eigh_tridiagonal(d.astype(np.float32), e.astype(np.float32))
  np.testing.assert_allclose(w, want, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(v).T @ T @ np.asarray(v), np.diag(want), atol=1e-5)
  np.testing.assert_allclose(
      linalg.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(1, 2)),
      want[1:3], rtol=1e-5)
  # Hermitian: the eigenvalues of diag(d) + e below + conj(e) above (JAX 0.10.2's values)
  np.testing.assert_allclose(linalg.eigh_tridiagonal(d + 0j, e + 0.5j, eigvals_only=True),
                             [0.4936769, 1.6767389, 3.4281526, 4.401431], rtol=1e-5)
  g = ourjax.grad(lambda dd: linalg.eigh_tridiagonal(dd, e, eigvals_only=True).sum())(d)
  np.testing.assert_allclose(g, np.ones(4), rtol=1e-5)     # the trace's derivative
  with pytest.raises(NotImplementedError, match="select='v'"):
    linalg.eigh_tridiagonal(d, e, eigvals_only=True, select="v", select_range=(1., 2.))
