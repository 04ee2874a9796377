"""scipy.sparse.linalg.cg / bicgstab against NumPy float64 solves (values, implicit
derivatives through custom_linear_solve), preconditioning, pytrees, maxiter."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy.sparse import linalg as sl

rng = np.random.RandomState(0)
B = rng.randn(6, 6)
A = B @ B.T + 6 * np.eye(6)               # symmetric positive definite
N = rng.randn(6, 6) + 5 * np.eye(6)       # non-symmetric
b = rng.randn(6)
A32, N32, b32 = (v.astype(np.float32) for v in (A, N, b))


def test_cg_values_preconditioner_and_derivatives():
  x, info = sl.cg(A32, b32)
  assert info is None
  np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-4, atol=1e-5)
  x, _ = sl.cg(lambda v: A32 @ v, b32, M=lambda v: v / jnp.diag(A32))
  np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-4, atol=1e-5)
  g = ourjax.grad(lambda bb: sl.cg(A32, bb)[0].sum())(b32)
  np.testing.assert_allclose(g, np.linalg.solve(A.T, np.ones(6)), rtol=1e-3, atol=1e-5)
  gA = ourjax.grad(lambda AA: sl.cg(AA, b32)[0].sum())(jnp.asarray(A32))
  lam = np.linalg.solve(A.T, np.ones(6))
  np.testing.assert_allclose(gA, -np.outer(lam, np.linalg.solve(A, b)), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(ourjax.jit(lambda bb: sl.cg(A32, bb)[0])(b32),
                             np.linalg.solve(A, b), rtol=1e-4, atol=1e-5)


def test_cg_maxiter_and_pytree():
  # two CG steps from zero minimise the A-norm error over the Krylov space {b, A b}
  x2, _ = sl.cg(A32, b32, maxiter=2)
  K = np.stack([b, A @ b], 1)
  c = np.linalg.solve(K.T @ A @ K, K.T @ b)
  np.testing.assert_allclose(x2, K @ c, rtol=1e-3, atol=1e-5)
  x, _ = sl.cg(lambda t: {"a": 2 * t["a"]}, {"a": jnp.ones(3)})
  np.testing.assert_allclose(x["a"], [0.5, 0.5, 0.5], rtol=1e-6)
  with pytest.raises(ValueError, match="matching tree structure"):
    sl.cg(A32, b32, x0=jnp.zeros(5))


def test_bicgstab_values_and_derivative():
  x, info = sl.bicgstab(N32, b32)
  assert info is None
  np.testing.assert_allclose(x, np.linalg.solve(N, b), rtol=1e-3, atol=1e-5)
  g = ourjax.grad(lambda bb: sl.bicgstab(N32, bb)[0].sum())(b32)
  np.testing.assert_allclose(g, np.linalg.solve(N.T, np.ones(6)), rtol=1e-3, atol=1e-5)
