"""The 2-D heat equation, explicit time steps, as a standalone ourjax array program.

``u_t = alpha * (u_xx + u_yy)`` on the unit square with the boundary held at 0, starting from a
hot square in the middle.  One step is the five-point stencil
``u += alpha * dt / h^2 * (u[i-1,j] + u[i+1,j] + u[i,j-1] + u[i,j+1] - 4 u[i,j])``, stable for
``alpha * dt / h^2 <= 1/4``.  The script runs the same number of steps three ways and prints
the timings: NumPy, ourjax op by op (eager), and ourjax with all the steps inside one
``lax.fori_loop`` under ``ourjax.jit`` (compile time shown separately), and checks that they
agree.  It also prints how much heat is left (the boundary lets it out).

    python examples/heat_equation.py
    python examples/heat_equation.py --n 256 --steps 2000
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def initial_condition(n):
  u = np.zeros((n, n), np.float32)
  u[n // 4: 3 * n // 4, n // 4: 3 * n // 4] = 1.0
  return u


def step_numpy(u, r):
  lap = np.zeros_like(u)
  lap[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                     - 4 * u[1:-1, 1:-1])
  return u + np.float32(r) * lap


def step(u, r):
  """One explicit step (works on NumPy-like ourjax arrays; the border stays 0)."""
  interior = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1])
  lap = jnp.pad(interior, 1)
  return u + r * lap


def make_simulate(r, steps):
  @ourjax.jit
  def simulate(u):
    return lax.fori_loop(0, steps, lambda i, u: step(u, r), u)
  return simulate


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--n", type=int, default=128, help="grid points per side")
  parser.add_argument("--steps", type=int, default=500)
  parser.add_argument("--r", type=float, default=0.2, help="alpha * dt / h^2 (<= 0.25)")
  parser.add_argument("--eager-steps", type=int, default=50,
                      help="steps timed op by op (eager is slow; it is scaled up)")
  parser.add_argument("--small", action="store_true", help="a quick run (CI)")
  args = parser.parse_args(argv)
  if args.small:
    args.n, args.steps, args.eager_steps = min(args.n, 32), min(args.steps, 50), 5
  r = float(args.r)
  u0 = initial_condition(args.n)
  print(f"heat equation on a {args.n}x{args.n} grid, {args.steps} explicit steps, "
        f"r = {r} ({ourjax.default_backend()})")

  t = time.perf_counter()
  u_np = u0
  for _ in range(args.steps):
    u_np = step_numpy(u_np, r)
  t_numpy = time.perf_counter() - t

  t = time.perf_counter()
  u_eager = jnp.asarray(u0)
  for _ in range(args.eager_steps):
    u_eager = step(u_eager, r)
  np.asarray(u_eager)
  t_eager = (time.perf_counter() - t) / args.eager_steps

  simulate = make_simulate(r, args.steps)
  t = time.perf_counter()
  simulate.lower(jnp.asarray(u0)).compile()
  t_compile = time.perf_counter() - t
  t = time.perf_counter()
  u_jit = np.asarray(ourjax.block_until_ready(simulate(jnp.asarray(u0))))
  t_jit = time.perf_counter() - t

  err = float(np.max(np.abs(u_jit - u_np)))
  heat0, heat = float(u0.sum()), float(u_jit.sum())
  per = lambda total: f"{1e6 * total / args.steps:9.1f} us/step"  # noqa: E731
  print(f"  numpy          {t_numpy:8.3f}s  {per(t_numpy)}")
  print(f"  ourjax eager   {t_eager * args.steps:8.3f}s  {1e6 * t_eager:9.1f} us/step "
        f"(timed over {args.eager_steps} steps)")
  print(f"  ourjax jit     {t_jit:8.3f}s  {per(t_jit)}  (+ {t_compile:.2f}s to compile)")
  print(f"max |jit - numpy| = {err:.2e}; heat left {heat / heat0:.1%} of {heat0:.0f}; "
        f"centre temperature {u_jit[args.n // 2, args.n // 2]:.4f}")
  return {"max_error": err, "heat_fraction": heat / heat0, "t_numpy": t_numpy,
          "t_jit": t_jit, "t_compile": t_compile}


if __name__ == "__main__":
  main()
