"""Host time to dispatch one data-parallel pmap step (``examples/data_parallel.py``'s step),
on CPU devices, with the computation taken out.

The step keeps its structure (the parameter and Adam-state trees, the segments and the
gradients' all-reduce) at tiny sizes, so that the compiled segments run in microseconds; the
time inside them (each lane's segment call, measured around it) is subtracted from the step's
wall time, which leaves the Python of ``pmap`` (argument matching, lanes, ``Program.run``, the
collective's bookkeeping, building the results).  The inputs are already on the devices (a
previous pmap's results), as in a training loop.

    OURJAX_NUM_CPU_DEVICES=2 python benchmarks/pmap_dispatch.py --devices 1,2
    OURJAX_NUM_CPU_DEVICES=2 python benchmarks/pmap_dispatch.py --profile 2   # cProfile

``--fake-gpus`` runs the CUDA backend's host side instead, on two stand-in GPUs
(``tests/cuda_fake_driver.py``: every driver call answered at once, nothing computed) and a
stand-in NCCL that records nothing: the dispatch of the GPU path (segment calls with their
output allocation and graph replays, the all-reduce's buffers and events, context switches
between the lanes) becomes visible on a machine without GPUs, the driver's and NCCL's own
costs left out.  ``PSORT=cumulative`` sorts the profile by cumulative time.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import data_parallel as dp  # noqa: E402

TINY = dict(seq=4, dim=8, heads=2, layers=2, vocab=16)


def _timed_segments(program, lanes, spent):
  """Wrap each lane's segment callers so that the time inside them adds to ``spent[0]``."""
  envs, steps = program._lane_plan(lanes)
  for i, st in enumerate(steps):
    if st[0] == 0 and not getattr(st[1], "_timed", False):
      def wrap(call):
        def timed(args):
          t = time.perf_counter()
          try:
            return call(args)
          finally:
            spent[0] += time.perf_counter() - t
        return timed

      class _L(list):
        _timed = True
      steps[i] = (0, _L(wrap(c) for c in st[1]), st[2], st[3])


def run(n, steps, profile=False):
  import ourjax
  devs = ourjax.devices()[:n]
  step = ourjax.pmap(dp.make_step(ourjax, TINY), axis_name="devices", devices=devs)
  params, opt = dp.init(0, TINY)
  params, opt = dp.replicate(params, n), dp.replicate(opt, n)
  x, labels = dp.batch(1, n, 2, TINY)
  put = ourjax.pmap(lambda a: a, axis_name="devices", devices=devs)
  x, labels = put(x), put(labels)
  params, opt, loss = step(params, opt, x, labels)       # compile, lay out
  params, opt, loss = step(params, opt, x, labels)
  spent = [0.0]
  for entry in step._pmap_cache.values():
    _timed_segments(entry[0], entry[1], spent)
  if profile:
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
      params, opt, loss = step(params, opt, x, labels)
    pr.disable()
    pstats.Stats(pr).sort_stats(os.environ.get("PSORT", "tottime")).print_stats(int(os.environ.get("PN", "25")))
    return None
  walls, computes = [], []
  for _ in range(steps):
    spent[0] = 0.0
    t = time.perf_counter()
    params, opt, loss = step(params, opt, x, labels)
    walls.append(time.perf_counter() - t)
    computes.append(spent[0])
  wall, comp = statistics.median(walls), statistics.median(computes)
  return wall, comp, statistics.median(w - c for w, c in zip(walls, computes))


@contextlib.contextmanager
def _fake_gpus():
  """Two stand-in GPUs and a stand-in NCCL (see the module docstring)."""
  import types
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
  import cuda_fake_driver
  nop = lambda *a: None  # noqa: E731
  nccl = types.SimpleNamespace(group_start=nop, group_end=nop, all_reduce=nop, all_gather=nop,
                               reduce_scatter=nop, allto_all=nop, send=nop, recv=nop,
                               comm_init_all=lambda n, ids: [f"comm{i}" for i in ids],
                               Comm=lambda p: p)
  pkg, sub = types.ModuleType("nccl"), types.ModuleType("nccl.bindings")
  sub.nccl, pkg.bindings = nccl, sub
  saved = {k: sys.modules.get(k) for k in ("nccl", "nccl.bindings", "nccl.bindings.nccl")}
  sys.modules.update({"nccl": pkg, "nccl.bindings": sub, "nccl.bindings.nccl": nccl})

  class _Nothing(list):       # (the fake's record of launches, kept empty)
    def append(self, x):
      pass

    def extend(self, x):
      pass
  import ourjax
  try:
    with cuda_fake_driver.installed() as fake:
      fake.device_count = 2
      fake.executed = _Nothing()
      old = ourjax.config.jax_platforms
      ourjax.config.update("jax_platforms", "cuda")
      try:
        yield
      finally:
        ourjax.config.update("jax_platforms", old)
  finally:
    for k, v in saved.items():
      if v is None:
        sys.modules.pop(k, None)
      else:
        sys.modules[k] = v


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--devices", default="1,2")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--profile", type=int, default=0, help="cProfile the step on N devices")
  ap.add_argument("--fake-gpus", action="store_true",
                  help="the CUDA path's host side on two stand-in GPUs (see the docstring)")
  a = ap.parse_args(argv)
  if a.fake_gpus:
    with _fake_gpus():
      _main(a)
  else:
    _main(a)


def _main(a):
  if a.profile:
    run(a.profile, a.steps, profile=True)
    return
  print(f"{'devices':>8} {'step ms':>9} {'segments ms':>12} {'host ms':>9}")
  for n in [int(v) for v in a.devices.split(",")]:
    wall, comp, host = run(n, a.steps)
    print(f"{n:>8} {wall * 1e3:>9.3f} {comp * 1e3:>12.3f} {host * 1e3:>9.3f}")


if __name__ == "__main__":
  main()
