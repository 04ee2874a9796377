"""Newton's method in a ``lax.while_loop``: the Bratu boundary-value problem.

Solve ``-u''(x) = lam * exp(u(x))`` on (0, 1) with ``u(0) = u(1) = 0``, discretised with
central differences on ``n`` interior points: a nonlinear system ``F(u) = 0``.  Each Newton
step takes the Jacobian from ``ourjax.jacfwd(F)`` (tridiagonal here: its three diagonals are
read off) and solves ``J d = -F`` with the Thomas algorithm, two ``lax.scan`` sweeps.  The whole
iteration is one ``lax.while_loop`` under ``ourjax.jit``; the loop records the residual of each
iterate in a fixed-size array, printed afterwards, so the quadratic convergence shows.

The exact solution is known, ``u(x) = -2 log(cosh((x - 1/2) t / 2) / cosh(t / 4))`` with
``t = sqrt(2 lam) cosh(t / 4)``; the script prints the distance to it (the O(h^2)
discretisation error).  It runs in float64 (ourjax's x64 mode) unless ``--float32``.

    python examples/newton_solver.py
    python examples/newton_solver.py --lam 3.4 --n 200
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def bratu_residual(u, lam, h):
  """F(u) for the interior values ``u`` (zero boundary values)."""
  padded = jnp.concatenate([jnp.zeros((1,), u.dtype), u, jnp.zeros((1,), u.dtype)])
  second_diff = (padded[:-2] - 2 * u + padded[2:]) / (h * h)
  return -second_diff - lam * jnp.exp(u)


def thomas_solve(lower, diag, upper, rhs):
  """Solve the tridiagonal system with sub-diagonal ``lower`` (first entry unused),
  ``diag`` and super-diagonal ``upper`` (last entry unused)."""
  def forward(carry, row):
    c_prev, d_prev = carry
    a, b, c, d = row
    denom = b - a * c_prev
    c_new = c / denom
    d_new = (d - a * d_prev) / denom
    return (c_new, d_new), (c_new, d_new)

  zero = jnp.zeros((), diag.dtype)
  _, (c, d) = lax.scan(forward, (zero, zero), (lower, diag, upper, rhs))

  def backward(x_next, row):
    c_i, d_i = row
    x = d_i - c_i * x_next
    return x, x

  _, x = lax.scan(backward, zero, (c, d), reverse=True)
  return x


def make_solver(n, lam, tol, max_iter):
  h = 1.0 / (n + 1)
  F = lambda u: bratu_residual(u, lam, h)  # noqa: E731

  def newton_step(u):
    J = ourjax.jacfwd(F)(u)
    diag = jnp.diagonal(J)
    upper = jnp.concatenate([jnp.diagonal(J, 1), jnp.zeros((1,), u.dtype)])
    lower = jnp.concatenate([jnp.zeros((1,), u.dtype), jnp.diagonal(J, -1)])
    return u + thomas_solve(lower, diag, upper, -F(u))

  @ourjax.jit
  def solve(u0):
    def cond(state):
      _, k, res, _ = state
      return (res > tol) & (k < max_iter)

    def body(state):
      u, k, _, history = state
      u = newton_step(u)
      res = jnp.max(jnp.abs(F(u))) * h * h  # scaled so that it measures the error in u
      history = lax.dynamic_update_index_in_dim(history, res, k + 1, 0)
      return u, k + 1, res, history

    res0 = jnp.max(jnp.abs(F(u0))) * h * h
    history = jnp.full((max_iter + 1,), jnp.nan, u0.dtype)
    history = lax.dynamic_update_index_in_dim(history, res0, 0, 0)
    return lax.while_loop(cond, body, (u0, jnp.asarray(0), res0, history))

  return solve


def exact_bratu(x, lam):
  t = 1.0  # the smaller root of t = sqrt(2 lam) cosh(t / 4), by fixed-point iteration
  for _ in range(200):
    t = math.sqrt(2 * lam) * math.cosh(t / 4)
  return -2 * np.log(np.cosh((x - 0.5) * t / 2) / math.cosh(t / 4))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--n", type=int, default=100, help="interior grid points")
  parser.add_argument("--lam", type=float, default=2.0, help="lambda (below about 3.51)")
  parser.add_argument("--max-iter", type=int, default=20)
  parser.add_argument("--float32", action="store_true")
  parser.add_argument("--small", action="store_true", help="a quick run (CI)")
  args = parser.parse_args(argv)
  if args.small:
    args.n = min(args.n, 40)

  with ourjax.enable_x64(not args.float32):
    dtype = jnp.float32 if args.float32 else jnp.float64
    tol = 1e-6 if args.float32 else 1e-13
    solve = make_solver(args.n, args.lam, tol, args.max_iter)
    u0 = jnp.zeros((args.n,), dtype)
    start = time.perf_counter()
    u, iters, res, history = solve(u0)
    iters = int(iters)
    seconds = time.perf_counter() - start
    history = np.asarray(history)
    u = np.asarray(u)

  print(f"Bratu problem, lambda = {args.lam}, {args.n} interior points, "
        f"{'float32' if args.float32 else 'float64'}")
  for k in range(iters + 1):
    print(f"  iteration {k:2d}   h^2 |F(u)|_inf = {history[k]:.3e}")
  x = np.linspace(0, 1, args.n + 2)[1:-1]
  err = float(np.max(np.abs(u - exact_bratu(x, args.lam))))
  h = 1.0 / (args.n + 1)
  print(f"converged in {iters} Newton steps ({seconds:.2f}s including compilation); "
        f"max u = {u.max():.6f}; distance to the exact solution {err:.2e} "
        f"(h^2 = {h * h:.2e})")
  return {"iterations": iters, "residual": float(res), "history": history[:iters + 1],
          "error": err, "h": h}


if __name__ == "__main__":
  main()
