"""lax.custom_root and lax.custom_linear_solve: values and derivatives against NumPy float64
(implicit differentiation: d sqrt(a)/da = 1/(2 sqrt(a)); d(A^-1 b) = A^-1 (db - dA A^-1 b)),
with a while_loop solver that reverse mode could not transpose (so the derivative must come from
transpose_solve, as in JAX)."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def newton(f, x0):
  x = x0
  for _ in range(30):
    x = x - f(x) / ourjax.grad(f)(x)
  return x


def scalar_tangent_solve(g, y):
  return y / g(1.0)


def sqrt_root(a):
  return lax.custom_root(lambda x: x ** 2 - a, 1.0, newton, scalar_tangent_solve)


def test_custom_root_value_and_derivatives():
  np.testing.assert_allclose(sqrt_root(2.), np.sqrt(2.), rtol=1e-6)
  np.testing.assert_allclose(ourjax.grad(sqrt_root)(2.), 0.5 / np.sqrt(2.), rtol=1e-6)
  np.testing.assert_allclose(ourjax.jit(ourjax.grad(sqrt_root))(3.), 0.5 / np.sqrt(3.),
                             rtol=1e-6)
  np.testing.assert_allclose(ourjax.grad(ourjax.grad(sqrt_root))(2.), -0.25 * 2. ** -1.5,
                             rtol=1e-5)
  np.testing.assert_allclose(ourjax.vmap(sqrt_root)(jnp.array([4., 9.])), [2., 3.], rtol=1e-6)
  p, t = ourjax.jvp(sqrt_root, (2.,), (1.,))
  np.testing.assert_allclose(t, 0.5 / np.sqrt(2.), rtol=1e-6)


def test_custom_root_has_aux_and_guess_has_no_derivative():
  def f(a):
    return lax.custom_root(lambda x: x ** 2 - a, 1.0,
                           lambda g, x0: (newton(g, x0), 7.), scalar_tangent_solve,
                           has_aux=True)
  sol, aux = f(2.)
  np.testing.assert_allclose(sol, np.sqrt(2.), rtol=1e-6)
  assert float(aux) == 7.
  np.testing.assert_allclose(ourjax.grad(lambda a: f(a)[0])(2.), 0.5 / np.sqrt(2.), rtol=1e-6)
  g = ourjax.grad(lambda x0: lax.custom_root(lambda x: x ** 2 - 2., x0, newton,
                                             scalar_tangent_solve))(1.0)
  assert float(g) == 0.0


def cg(mv, b):
  """Conjugate gradients in a while_loop (not reverse-differentiable itself)."""
  def cond(s):
    return (s[4] < 50) & (jnp.vdot(s[1], s[1]) > 1e-12)

  def body(s):
    x, r, p, rs, i = s
    Ap = mv(p)
    a = rs / jnp.vdot(p, Ap)
    x, r = x + a * p, r - a * Ap
    rs2 = jnp.vdot(r, r)
    return x, r, r + rs2 / rs * p, rs2, i + 1
  return lax.while_loop(cond, body, (jnp.zeros_like(b), b, b, jnp.vdot(b, b), 0))[0]


M = np.array([[4., 1., 0.], [1., 3., 1.], [0., 1., 2.]])
B = np.array([1., 2., 3.])


def solve_sym(Mv, b):
  return lax.custom_linear_solve(lambda x: Mv @ x, b, cg, symmetric=True)


def test_custom_linear_solve_with_a_loop_solver_differentiates_by_transpose_solve():
  Mj, bj = jnp.asarray(M, jnp.float32), jnp.asarray(B, jnp.float32)
  x = np.linalg.solve(M, B)
  np.testing.assert_allclose(solve_sym(Mj, bj), x, rtol=1e-5)
  gM, gb = ourjax.grad(lambda m, b: solve_sym(m, b).sum(), argnums=(0, 1))(Mj, bj)
  lam = np.linalg.solve(M.T, np.ones(3))
  np.testing.assert_allclose(gb, lam, rtol=1e-4)
  np.testing.assert_allclose(gM, -np.outer(lam, x), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(ourjax.jacrev(lambda b: solve_sym(Mj, b))(bj), np.linalg.inv(M),
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(ourjax.jit(ourjax.jacfwd(lambda b: solve_sym(Mj, b)))(bj),
                             np.linalg.inv(M), rtol=1e-4, atol=1e-6)
  # jvp in M: dx = -M^-1 dM x
  dM = np.ones((3, 3))
  _, t = ourjax.jvp(lambda m: solve_sym(m, bj), (Mj,), (jnp.asarray(dM, jnp.float32),))
  np.testing.assert_allclose(t, -np.linalg.solve(M, dM @ x), rtol=1e-4)
  xs = ourjax.vmap(lambda m: solve_sym(m, bj))(jnp.stack([Mj, 2 * Mj]))
  np.testing.assert_allclose(xs, [x, x / 2], rtol=1e-5)
  g = ourjax.grad(lambda m: ourjax.vmap(lambda b: solve_sym(m, b))(jnp.eye(3)).sum())(Mj)
  Minv = np.linalg.inv(M)
  lam_all = np.linalg.solve(M.T, np.ones(3))
  np.testing.assert_allclose(g, -np.outer(lam_all, Minv.sum(axis=1)), rtol=1e-4, atol=1e-6)


def test_custom_linear_solve_needs_transpose_solve_for_reverse_mode():
  A = jnp.array([[4., 1.], [2., 3.]])

  def f(b):
    return lax.custom_linear_solve(lambda x: A @ x, b, lambda mv, b: jnp.linalg.solve(A, b))
  b = jnp.array([1., 2.])
  np.testing.assert_allclose(f(b), np.linalg.solve(np.asarray(A), [1., 2.]), rtol=1e-6)
  np.testing.assert_allclose(ourjax.jacfwd(f)(b), np.linalg.inv(np.asarray(A)), rtol=1e-5)
  with pytest.raises(TypeError, match="transpose_solve required"):
    ourjax.grad(lambda b: f(b).sum())(b)

  def g(A, b):     # a non-symmetric system with its transpose solver
    return lax.custom_linear_solve(lambda x: A @ x, b, lambda mv, b: jnp.linalg.solve(A, b),
                                   lambda vm, b: jnp.linalg.solve(A.T, b))
  An = np.asarray(A, np.float64)
  lam = np.linalg.solve(An.T, np.ones(2))
  np.testing.assert_allclose(ourjax.grad(lambda A: g(A, b).sum())(A),
                             -np.outer(lam, np.linalg.solve(An, [1., 2.])), rtol=1e-5)


def test_custom_linear_solve_pytree_and_aux():
  b = {"a": jnp.array([1., 2.])}
  x = lax.custom_linear_solve(lambda x: {"a": 2 * x["a"]}, b,
                              lambda mv, b: {"a": b["a"] / 2})
  np.testing.assert_allclose(x["a"], [0.5, 1.])
  x, aux = lax.custom_linear_solve(lambda x: 2 * x, jnp.ones(2),
                                   lambda mv, b: (b / 2, jnp.sum(b)), has_aux=True)
  np.testing.assert_allclose(x, [0.5, 0.5])
  assert float(aux) == 2.0
