"""A while_loop of scalar work (issue #15's "10,000-step while_loop" target), ourjax vs JAX.

    python benchmarks/while_loop.py [--steps N] [--state S] [--test-state] [--repeat R]
                                    [--backend cpu|cuda]

The loop carries a counter and one float32 (``x = 0.999 x + 1e-3 sin(x)`` until the counter
reaches ``N``): per iteration almost no work, so the figure is the cost of running an
iteration.  ``--state S`` carries S float32 instead, each step also adding the state's mean
(a reduction: the body is several kernels, not one loop kernel), so on the GPU the figure is
what each iteration's launches cost.  ``--test-state`` makes the loop's condition also test
the state (``max |x| < 1e30``, always true here), so that the trip count is not known before
the loop runs: the predicate is computed on the device every iteration.  Both libraries jit the same function in one process; the first call (trace,
compile, run) is reported apart, then the calls alternate between the libraries and the median
of ``--repeat`` rounds is printed with the ratio ourjax/JAX (below 1: ourjax faster) and the
machine.  The results are compared (float32, relative 1e-5).  Exit status 1 when they differ.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def make(lib, steps, state=0, test_state=False):
  lax, jnp = lib.lax, lib.numpy

  def cond(c):
    if test_state:
      return (c[0] < steps) & (jnp.max(jnp.abs(c[1])) < 1e30)
    return c[0] < steps

  def body(c):
    x = c[1] * 0.999 + jnp.sin(c[1]) * 1e-3
    if state:
      x = x + jnp.mean(c[1]) * 1e-4
    return c[0] + 1, x
  if state:
    return lib.jit(lambda x: jnp.sum(lax.while_loop(cond, body, (0, x))[1]))
  return lib.jit(lambda x: lax.while_loop(cond, body, (0, x))[1])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--steps", type=int, default=10000)
  ap.add_argument("--state", type=int, default=0, help="carry S float32 (default: one)")
  ap.add_argument("--test-state", action="store_true",
                  help="the condition also tests the state (trip count unknown in advance)")
  ap.add_argument("--repeat", type=int, default=7)
  ap.add_argument("--backend", default=None, help="cpu or cuda (default: each library's own)")
  a = ap.parse_args(argv)
  import ourjax
  libs = {"ourjax": ourjax}
  try:
    import jax
    libs["jax"] = jax
  except Exception:   # noqa: BLE001 - JAX is optional
    pass
  if a.backend:
    ourjax.config.update("jax_platforms", a.backend)
    if "jax" in libs:
      libs["jax"].config.update("jax_platforms", "cuda" if a.backend == "cuda" else "cpu")
  x = (np.linspace(0.1, 0.9, a.state, dtype=np.float32) if a.state else np.float32(0.5))
  fns, first, values = {}, {}, {}
  for name, lib in libs.items():
    f = make(lib, a.steps, a.state, a.test_state)
    t0 = time.perf_counter()
    values[name] = float(np.asarray(f(x)))
    first[name] = time.perf_counter() - t0
    fns[name] = f
  times = {k: [] for k in fns}
  for _ in range(a.repeat):
    for k, f in fns.items():
      t0 = time.perf_counter()
      np.asarray(f(x))
      times[k].append(time.perf_counter() - t0)
  med = {k: statistics.median(v) for k, v in times.items()}
  dev = ourjax.devices()[0]
  print(f"machine: {dev.device_kind if hasattr(dev, 'device_kind') else dev}; "
        f"ourjax {ourjax.__version__}" + (f", JAX {libs['jax'].__version__}" if "jax" in libs
                                          else ""))
  for k in fns:
    print(f"{k:7s} {med[k] * 1e3:9.3f} ms for {a.steps} iterations"
          f"{f' of {a.state} floats' if a.state else ''} "
          f"({med[k] / a.steps * 1e9:7.1f} ns each; first call {first[k]:.2f} s)")
  ok = True
  if "jax" in med:
    print(f"ratio ourjax/JAX: {med['ourjax'] / med['jax']:.2f}")
    ok = abs(values["ourjax"] - values["jax"]) <= 1e-5 * max(1.0, abs(values["jax"]))
    print("check:", "ok" if ok else f"DIFFERENT {values}")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
