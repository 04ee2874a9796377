"""scipy.stats distributions (uniform, expon, laplace, cauchy, gamma, chi2, beta, t, pareto,
poisson, binom, geom, multivariate_normal, dirichlet) against closed forms in NumPy/math float64
(densities, CDFs by numerical integration where there is no closed form), with JAX 0.10.2's
out-of-support values (-inf log-densities, 0/1 CDFs)."""
import math

import numpy as np

import ourjax.numpy as jnp
from ourjax.scipy import stats as st

X = np.array([-2., -0.5, 0., 0.3, 0.5, 1., 1.7, 3., 10.])
K = np.array([-1., 0., 1., 2., 5., 9., 12.])


def close(got, want, rtol=1e-5, atol=1e-6):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def test_location_scale_families():
  loc, scale = 0.2, 1.5
  inside = (X >= loc) & (X <= loc + scale)
  close(st.uniform.logpdf(X, loc, scale), np.where(inside, -np.log(scale), -np.inf))
  close(st.uniform.cdf(X, loc, scale), np.clip((X - loc) / scale, 0, 1))
  close(st.uniform.ppf(np.array([0., 0.5, 1.]), loc, scale), [0.2, 0.95, 1.7])
  assert np.isnan(np.asarray(st.uniform.ppf(1.2, loc, scale)))
  z = (X - 0.1) / 2.
  close(st.expon.logpdf(X, 0.1, 2.), np.where(z >= 0, -z - np.log(2.), -np.inf))
  close(st.expon.cdf(X, 0.1, 2.), np.where(z >= 0, 1 - np.exp(-z), 0))
  close(st.expon.sf(X, 0.1, 2.), np.where(z >= 0, np.exp(-z), 1))
  close(st.expon.logsf(X, 0.1, 2.), np.where(z >= 0, -z, 0))
  close(st.expon.ppf(np.array([0., 0.5]), 0.1, 2.), [0.1, 0.1 + 2 * np.log(2)])
  z = (X - 0.5) / 1.3
  close(st.laplace.pdf(X, 0.5, 1.3), np.exp(-np.abs(z)) / 2.6)
  close(st.laplace.cdf(X, 0.5, 1.3), np.where(z <= 0, 0.5 * np.exp(z), 1 - 0.5 * np.exp(-z)))
  close(st.cauchy.pdf(X, 0.5, 1.3), 1 / (np.pi * 1.3 * (1 + z * z)))
  close(st.cauchy.cdf(X, 0.5, 1.3), 0.5 + np.arctan(z) / np.pi)
  close(st.cauchy.logsf(X, 0.5, 1.3), np.log(0.5 - np.arctan(z) / np.pi))
  close(st.cauchy.ppf(st.cauchy.cdf(X, 0.5, 1.3), 0.5, 1.3), X, rtol=1e-4, atol=1e-4)
  close(st.cauchy.isf(0.25, 0.5, 1.3), 0.5 + 1.3)


def test_gamma_chi2_beta_t_pareto():
  for a in (0.5, 1., 2.5):
    y = (X - 0.1) / 1.5
    ys = np.where(y > 0, y, 1)
    want = np.where(y > 0, (a - 1) * np.log(ys) - ys - math.lgamma(a) - np.log(1.5), -np.inf)
    got = np.asarray(st.gamma.logpdf(X, a, 0.1, 1.5), np.float64)
    close(got[y > 0], want[y > 0])
    assert np.all(np.isneginf(got[y < 0]))
    # the CDF is the integral of the density (trapezoid on a fine grid)
    grid = np.linspace(0.1 + 1e-6, 3., 200001)
    dens = np.exp(np.asarray(st.gamma.logpdf(grid.astype(np.float32), a, 0.1, 1.5), np.float64))
    close(st.gamma.cdf(3., a, 0.1, 1.5), np.trapezoid(dens, grid), rtol=2e-3, atol=2e-3)
    close(np.asarray(st.gamma.cdf(X, a, 0.1, 1.5)) + np.asarray(st.gamma.sf(X, a, 0.1, 1.5)),
          np.ones_like(X))
    close(st.chi2.logpdf(X, 2 * a, 0.1, 1.5), st.gamma.logpdf(X, a, 0.1, 3.))
    close(st.chi2.cdf(X, 2 * a), st.gamma.cdf(X, a, 0, 2.))
  y = (X + 0.5) / 3.
  a, b = 2.5, 2.
  inside = (y >= 0) & (y <= 1)
  want = np.where(inside, y ** (a - 1) * (1 - y) ** (b - 1) / math.exp(
      math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)) / 3., 0)
  close(st.beta.pdf(X, a, b, -0.5, 3.), want)
  close(st.beta.cdf(X, 1., 1., -0.5, 3.), np.clip(y, 0, 1))
  close(st.beta.sf(X, 1., 1., -0.5, 3.), 1 - np.clip(y, 0, 1))
  df = 2.5
  z = (X - 0.2) / 1.1
  want = (math.gamma((df + 1) / 2) / (math.sqrt(df * np.pi) * math.gamma(df / 2))
          * (1 + z * z / df) ** (-(df + 1) / 2) / 1.1)
  close(st.t.pdf(X, df, 0.2, 1.1), want)
  z = (X - 0.1) / 0.5
  zs = np.where(z >= 1, z, 1)
  close(st.pareto.pdf(X, 2.5, 0.1, 0.5), np.where(z >= 1, 2.5 / zs ** 3.5 / 0.5, 0))
  close(st.pareto.cdf(X, 2.5, 0.1, 0.5), np.where(z >= 1, 1 - zs ** -2.5, 0))
  close(st.pareto.ppf(0.5, 2.5, 0.1, 0.5), 0.5 * 0.5 ** (-1 / 2.5) + 0.1)


def test_discrete():
  mu = 3.
  y = K - 1
  want = np.array([mu ** v * np.exp(-mu) / math.factorial(int(v)) if v >= 0 else 0 for v in y])
  close(st.poisson.pmf(K, mu, 1.), want)
  cdf = [sum(mu ** j * np.exp(-mu) / math.factorial(j) for j in range(int(v) + 1))
         if v >= 0 else 0 for v in y]
  close(st.poisson.cdf(K, mu, 1.), cdf, rtol=1e-5, atol=1e-6)
  assert np.isneginf(np.asarray(st.poisson.logpmf(2.5, mu)))       # (not an integer)
  n, p = 9., 0.4
  want = np.array([math.comb(9, int(v)) * p ** v * (1 - p) ** (9 - v) if 0 <= v <= 9 else 0
                   for v in y])
  close(st.binom.pmf(K, n, p, 1.), want)
  want = np.array([(1 - p) ** (v - 1) * p if v >= 1 else 0 for v in K])
  close(st.geom.pmf(K, p), want)


def test_multivariate_normal_and_dirichlet():
  rng = np.random.RandomState(0)
  B = rng.randn(3, 3)
  cov = B @ B.T + np.eye(3)
  x = rng.randn(4, 3)
  mean = rng.randn(3)
  d = x - mean
  want = (-0.5 * np.einsum("bi,ij,bj->b", d, np.linalg.inv(cov), d)
          - 1.5 * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(cov)[1])
  close(st.multivariate_normal.logpdf(x.astype(np.float32), mean.astype(np.float32),
                                      cov.astype(np.float32)), want, rtol=1e-4)
  close(st.multivariate_normal.pdf(x[0].astype(np.float32), mean.astype(np.float32),
                                   cov.astype(np.float32)), np.exp(want[0]), rtol=1e-4)
  close(st.multivariate_normal.logpdf(x, mean, 2.),
        -0.5 * np.sum(d * d, 1) / 2 - 1.5 * (np.log(2 * np.pi) + np.log(2.)), rtol=1e-5)
  # batched covariances
  covs = np.stack([cov, 2 * cov])
  got = st.multivariate_normal.logpdf(x[:2], mean, covs)
  want_b = [-0.5 * d[i] @ np.linalg.inv(covs[i]) @ d[i] - 1.5 * np.log(2 * np.pi)
            - 0.5 * np.linalg.slogdet(covs[i])[1] for i in range(2)]
  close(got, want_b, rtol=1e-4)
  alpha = np.array([1.5, 2., 0.7])
  X = np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.5, 0.6, -0.1]]).T
  norm = sum(math.lgamma(a) for a in alpha) - math.lgamma(alpha.sum())
  want = [np.sum((alpha - 1) * np.log(X[:, 0])) - norm,
          np.sum((alpha - 1) * np.log(X[:, 1])) - norm, -np.inf]
  close(st.dirichlet.logpdf(X, alpha), want, rtol=1e-5)
  close(st.dirichlet.logpdf(X[:2, :2], alpha), want[:2], rtol=1e-5)    # K-1 entries given


def test_sem_mode_rankdata():
  a = np.array([[3., 1., 2., 2.], [1., 1., 4., 4.], [5., 5., 5., 0.]])
  close(st.sem(a), a.std(0, ddof=1) / np.sqrt(3))
  close(st.sem(a, axis=None), a.std(ddof=1) / np.sqrt(12))
  close(st.sem(a, axis=1, ddof=0, keepdims=True), a.std(1, keepdims=True) / 2)
  m = st.mode(a, axis=1)
  assert type(m).__name__ == "ModeResult" and m._fields == ("mode", "count")
  assert np.asarray(m.mode).tolist() == [2., 1., 5.] and np.asarray(m.count).tolist() == [2, 2, 3]
  m0 = st.mode(a)                      # ties: the smallest value (as scipy and JAX)
  assert np.asarray(m0.mode).tolist() == [1., 1., 2., 0.]
  assert np.asarray(m0.count).tolist() == [1, 2, 1, 1]
  v = np.array([3., 1., 2., 2., 5., 1.])
  want = {"average": [5, 1.5, 3.5, 3.5, 6, 1.5], "min": [5, 1, 3, 3, 6, 1],
          "max": [5, 2, 4, 4, 6, 2], "dense": [3, 1, 2, 2, 4, 1], "ordinal": [5, 1, 3, 4, 6, 2]}
  for method, w in want.items():
    r = st.rankdata(v, method=method)
    assert r.dtype == jnp.float32 and np.asarray(r).tolist() == w
    rows = st.rankdata(a, method=method, axis=1)
    for i in range(3):
      np.testing.assert_array_equal(rows[i], st.rankdata(a[i], method=method))
  assert np.isnan(np.asarray(st.rankdata(np.array([1., np.nan, 3.])))).all()
