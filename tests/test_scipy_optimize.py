"""scipy.optimize.minimize (BFGS): minima of functions with known solutions (NumPy float64
algebra for the quadratic's inverse Hessian), under jit and vmap, JAX's result fields and
errors."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy import optimize


def quad(x, a):
  return jnp.sum((x - a) ** 2 * jnp.arange(1., x.size + 1))


def rosen(x):
  return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_quadratic_converges_with_the_inverse_hessian():
  a = jnp.array([1., -2., 3., 0.5])
  r = optimize.minimize(quad, jnp.zeros(4), args=(a,), method="BFGS")
  assert type(r).__name__ == "OptimizeResults"
  assert r._fields == ("x", "success", "status", "fun", "jac", "hess_inv", "nfev", "njev", "nit")
  assert bool(r.success) and int(r.status) == 0
  np.testing.assert_allclose(r.x, a, atol=1e-5)
  np.testing.assert_allclose(r.fun, 0., atol=1e-8)
  assert float(jnp.max(jnp.abs(r.jac))) < 1e-5
  # the estimate approaches the inverse Hessian, diag(1 / (2 k)) (exactly only with exact line
  # searches), and stays symmetric positive definite
  np.testing.assert_allclose(r.hess_inv, np.diag(1 / (2 * np.arange(1., 5.))), atol=2e-2)
  H = np.asarray(r.hess_inv, np.float64)
  np.testing.assert_allclose(H, H.T, atol=1e-5)
  assert np.all(np.linalg.eigvalsh((H + H.T) / 2) > 0)
  assert 0 < int(r.nit) <= 20 and int(r.nfev) >= int(r.nit) and int(r.njev) == int(r.nfev)


def test_nonconvex_problems_and_transformations():
  r = optimize.minimize(rosen, jnp.zeros(3), method="BFGS")
  np.testing.assert_allclose(r.x, np.ones(3), atol=1e-3)
  himmelblau = lambda x: (x[0] ** 2 + x[1] - 11) ** 2 + (x[0] + x[1] ** 2 - 7) ** 2
  r = optimize.minimize(himmelblau, jnp.zeros(2), method="bfgs")
  np.testing.assert_allclose(r.x, [3., 2.], atol=1e-4)       # the minimum nearest the origin
  assert bool(r.success)
  xj = ourjax.jit(lambda x0: optimize.minimize(rosen, x0, method="BFGS").x)(jnp.zeros(2))
  np.testing.assert_allclose(xj, [1., 1.], atol=1e-3)
  starts = jnp.array([[0., 0.], [4., 4.]])
  xs = ourjax.vmap(lambda a: optimize.minimize(quad, jnp.zeros(2), args=(a,),
                                                method="BFGS").x)(starts)
  np.testing.assert_allclose(xs, starts, atol=1e-5)


def test_maxiter_status_and_errors():
  r = optimize.minimize(rosen, jnp.zeros(3), method="BFGS", options=dict(maxiter=3))
  assert int(r.nit) == 3 and int(r.status) == 1 and not bool(r.success)
  assert float(r.fun) < float(rosen(jnp.zeros(3)))      # it made progress
  with pytest.raises(ValueError, match="Method Nelder-Mead not recognized"):
    optimize.minimize(rosen, jnp.zeros(3), method="Nelder-Mead")
  with pytest.raises(TypeError, match="args argument"):
    optimize.minimize(quad, jnp.zeros(2), args=[jnp.zeros(2)], method="BFGS")
