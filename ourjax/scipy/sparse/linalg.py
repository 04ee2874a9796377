"""``ourjax.scipy.sparse.linalg``: ``cg`` (conjugate gradients) and ``bicgstab``, as
``jax.scipy.sparse.linalg``: ``A`` is a matrix or a linear function, ``b`` any pytree of arrays,
``M`` an optional preconditioner (approximating the inverse of ``A``).  The iteration runs in a
``lax.while_loop`` until ``||r|| <= max(tol * ||b||, atol)`` or ``maxiter`` steps (default 10
times the size of ``b``); derivatives come from ``lax.custom_linear_solve`` (implicit, so the
loop is never differentiated).  Both return ``(x, None)``, as JAX."""
from __future__ import annotations

import functools
import operator

import numpy as np

from ourjax import lax
import ourjax.numpy as jnp
from ourjax._pytree import tree_leaves, tree_map, tree_structure

__all__ = ["cg", "bicgstab"]


def _vdot_real(x, y):
  return sum(jnp.real(jnp.vdot(a, b)) for a, b in zip(tree_leaves(x), tree_leaves(y)))


def _vdot(x, y):
  return sum(jnp.vdot(a, b) for a, b in zip(tree_leaves(x), tree_leaves(y)))


def _norm2(x):
  return _vdot_real(x, x)


def _add(x, y):
  return tree_map(operator.add, x, y)


def _sub(x, y):
  return tree_map(operator.sub, x, y)


def _scale(a, x):
  return tree_map(lambda v: (a * v).astype(v.dtype), x)


def _as_linear(A, name):
  if callable(A):
    return A
  A = jnp.asarray(A)
  if A.ndim != 2:
    raise ValueError(f"{name}: a matrix operand must be 2-dimensional; got shape {A.shape}")
  return lambda x: tree_map(lambda v: jnp.matmul(A, v, precision=lax.Precision.HIGHEST), x)


def _identity(x):
  return x


def _shapes_match(x, y):
  return tree_structure(x) == tree_structure(y) and all(
      jnp.shape(a) == jnp.shape(b) for a, b in zip(tree_leaves(x), tree_leaves(y)))


def _prepare(A, b, x0, maxiter, M, name):
  b = tree_map(jnp.asarray, b)
  if x0 is None:
    x0 = tree_map(jnp.zeros_like, b)
  x0 = tree_map(jnp.asarray, x0)
  if maxiter is None:
    maxiter = 10 * sum(int(np.size(v)) for v in tree_leaves(b))
  A = _as_linear(A, name)
  M = _identity if M is None else _as_linear(M, name)
  if not _shapes_match(x0, b):
    raise ValueError("x0 and b must have matching tree structure and array shapes; got "
                     f"{tree_structure(x0)} and {tree_structure(b)}")
  if not _shapes_match(A(x0), b):
    raise ValueError("the output of A(x) must match the tree structure and shapes of b")
  return A, b, x0, maxiter, M


def _cg_solve(A, b, x0, *, maxiter, tol, atol, M):
  bs = _norm2(b)
  atol2 = jnp.maximum(jnp.square(tol) * bs, jnp.square(atol))

  def cond(s):
    _, r, gamma, _, k = s
    return (_norm2(r) > atol2) & (k < maxiter)

  def body(s):
    x, r, gamma, p, k = s
    Ap = A(p)
    alpha = gamma / _vdot_real(p, Ap).astype(gamma.dtype)
    x = _add(x, _scale(alpha, p))
    r = _sub(r, _scale(alpha, Ap))
    z = M(r)
    gamma_new = _vdot_real(r, z).astype(gamma.dtype)
    p = _add(z, _scale(gamma_new / gamma, p))
    return x, r, gamma_new, p, k + 1

  r0 = _sub(b, A(x0))
  z0 = M(r0)
  gamma0 = _vdot_real(r0, z0)
  x, *_ = lax.while_loop(cond, body, (x0, r0, gamma0, z0, jnp.int32(0)))
  return x


def _bicgstab_solve(A, b, x0, *, maxiter, tol, atol, M):
  bs = _norm2(b)
  atol2 = jnp.maximum(jnp.square(tol) * bs, jnp.square(atol))
  r0 = _sub(b, A(x0))
  dtype = jnp.result_type(*tree_leaves(b))
  one = jnp.ones((), dtype)

  def cond(s):
    _, r, *_, k = s
    return (k >= 0) & (k < maxiter) & (_norm2(r) > atol2)

  def body(s):
    x, r, rhat, alpha, omega, rho, p, q, k = s
    rho_new = _vdot(rhat, r)
    beta = rho_new / rho * alpha / omega
    p = _add(r, _scale(beta, _sub(p, _scale(omega, q))))
    phat = M(p)
    q = A(phat)
    alpha = rho_new / _vdot(rhat, q)
    s_ = _sub(r, _scale(alpha, q))
    exit_early = _norm2(s_) < atol2
    shat = M(s_)
    t = A(shat)
    omega = _vdot(t, s_) / _vdot(t, t)
    x_ = tree_map(functools.partial(jnp.where, exit_early), _add(x, _scale(alpha, phat)),
                  _add(_add(x, _scale(alpha, phat)), _scale(omega, shat)))
    r_ = tree_map(functools.partial(jnp.where, exit_early), s_, _sub(s_, _scale(omega, t)))
    # a breakdown (rho or omega zero) ends the iteration with k = -10 / -11, as JAX
    k_ = jnp.where((omega == 0) | (alpha == 0), -11, k + 1)
    k_ = jnp.where(rho_new == 0, -10, k_)
    return x_, r_, rhat, alpha, omega, rho_new, p, q, k_

  init = (x0, r0, r0, one, one, one, tree_map(jnp.zeros_like, r0),
          tree_map(jnp.zeros_like, r0), jnp.int32(0))
  x, *_ = lax.while_loop(cond, body, init)
  return x


def _isolve(solver, A, b, x0, *, tol, atol, maxiter, M, symmetric, name):
  A, b, x0, maxiter, M = _prepare(A, b, x0, maxiter, M, name)
  solve = functools.partial(solver, x0=x0, tol=tol, atol=atol, maxiter=maxiter, M=M)
  if symmetric:
    x = lax.custom_linear_solve(A, b, solve=lambda A_, b_: solve(A_, b_), symmetric=True)
  else:
    x = lax.custom_linear_solve(A, b, solve=lambda A_, b_: solve(A_, b_),
                                transpose_solve=lambda At, bt: solve(At, bt))
  return x, None


def cg(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
  """Solve ``A x = b`` for a Hermitian positive definite ``A`` by conjugate gradients; returns
  ``(x, None)``."""
  return _isolve(_cg_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M,
                 symmetric=True, name="cg")


def bicgstab(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
  """Solve ``A x = b`` for a general (non-symmetric) ``A`` by BiCGSTAB; returns
  ``(x, None)``."""
  return _isolve(_bicgstab_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M,
                 symmetric=False, name="bicgstab")
