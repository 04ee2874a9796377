"""Several devices, ourjax against JAX in one process: collective bandwidth and data-parallel
training throughput.

    python benchmarks/multigpu.py                      # all GPUs (or CPU devices)
    python benchmarks/multigpu.py --sizes-mb 1,16,256,1024 --dp-devices 1,2,4

1. **Collectives** through ``pmap``: all-reduce (``psum``), all-gather and reduce-scatter
   (``psum_scatter``) of float32 arrays of each size (per device), on all devices.  Bus bandwidth
   as NCCL's tests count it: all-reduce ``2 (n-1)/n * bytes / t``, all-gather and
   reduce-scatter ``(n-1)/n * (bytes of the whole array) / t``.  The results are checked
   against NumPy first.
2. **Data-parallel transformer step** (``examples/data_parallel.py``; weak scaling: the same
   batch per device) on 1, 2, 4, ... devices; throughput and scaling efficiency
   ``thr(n) / (n * thr(1))``, and the loss checked against the one-device run.  Every
   (library, device count) is timed in each of ``--rounds`` rounds, in turn.

Each library's calls alternate; medians.  JAX is told not to preallocate GPU memory.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import data_parallel as dp  # noqa: E402


def _block(tree, lib):
  lib.block_until_ready(tree)


def collectives(libs, n, sizes_mb, repeat):
  rows = []
  for mb in sizes_mb:
    count = int(mb * 2**20) // 4
    x = np.random.default_rng(0).standard_normal((n, count)).astype(np.float32)
    for name in ("all_reduce", "all_gather", "reduce_scatter"):
      res = {}
      for lname, lib in libs.items():
        lax = lib.lax
        f = {"all_reduce": lambda v: lax.psum(v, "i"),
             "all_gather": lambda v: lax.all_gather(v, "i", tiled=True),
             "reduce_scatter": lambda v: lax.psum_scatter(v, "i", tiled=True)}[name]
        if name == "reduce_scatter" and count % n:
          continue
        pf = lib.pmap(f, axis_name="i")
        arg = _on_devices(lib, x, n)
        out = pf(arg)
        _block(out, lib)
        if mb <= 16:     # check the values once at small sizes
          got = np.asarray(out)
          want = {"all_reduce": lambda: np.broadcast_to(x.sum(0), x.shape),
                  "all_gather": lambda: np.broadcast_to(x.reshape(-1), (n, n * count)),
                  "reduce_scatter": lambda: x.sum(0).reshape(n, count // n)}[name]()
          np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * n)
        res[lname] = (pf, arg)
      times = {k: [] for k in res}
      for r in range(repeat * 2):
        for k in (list(res) if r % 2 == 0 else list(res)[::-1]):
          pf, arg = res[k]
          t0 = time.perf_counter()
          _block(pf(arg), libs[k])
          times[k].append(time.perf_counter() - t0)
      nbytes = count * 4
      factor = {"all_reduce": 2 * (n - 1) / n * nbytes,
                "all_gather": (n - 1) / n * nbytes * n,
                "reduce_scatter": (n - 1) / n * nbytes}[name]
      row = {"op": name, "MB": mb}
      for k, v in times.items():
        t = statistics.median(v)
        row[f"{k}_ms"] = t * 1e3
        row[f"{k}_busbw_GBs"] = factor / t / 1e9
      rows.append(row)
      print("  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in row.items()), flush=True)
  return rows


def _on_devices(lib, x, n):
  """``x`` [n, ...] laid out one row per device (as a previous pmap would leave it)."""
  ident = lib.pmap(lambda v: v, axis_name="i")
  return ident(x)


def data_parallel(libs, counts, per_device, steps, rounds=7):
  """Every (library, device count) set up first, then ``rounds`` rounds timing a batch of
  ``steps`` steps of each in turn (the order reversed every other round), so that slow and
  fast periods of the machine fall on all of them alike; each figure is the median over the
  rounds of a batch's median step (each step waited for)."""
  setups = {}
  rows = {n: {"devices": n} for n in counts}
  losses = {n: {} for n in counts}
  for n in counts:
    for lname, lib in libs.items():
      devs = lib.devices()[:n]
      plain = dp.make_step(lib)
      step = lib.pmap(plain, axis_name="devices", devices=devs)
      params, opt = dp.init(0)
      params, opt = dp.replicate(params, n), dp.replicate(opt, n)
      x, labels = dp.batch(1, n, per_device)
      t0 = time.perf_counter()
      params, opt, loss = step(params, opt, x, labels)
      _block(loss, lib)
      rows[n][f"{lname}_compile_s"] = time.perf_counter() - t0
      losses[n][lname] = float(np.asarray(loss)[0])
      # the mean of the devices' losses is the loss of the whole batch on one device
      p0, _ = dp.init(0)
      whole = float(lib.jit(plain.loss)(p0, x.reshape((-1,) + x.shape[2:]),
                                        labels.reshape((-1,) + labels.shape[2:])))
      assert abs(losses[n][lname] - whole) < 1e-3 * max(1.0, abs(whole)), (n, lname, losses,
                                                                           whole)
      state = [params, opt]

      def one(step=step, state=state, x=x, labels=labels):
        p, o, l_ = step(state[0], state[1], x, labels)
        state[0], state[1] = p, o
        return l_
      for _ in range(3):
        _block(one(), lib)
      setups[(n, lname)] = (one, lib)
  times = {k: [] for k in setups}
  order = list(setups)
  for r in range(rounds):
    for k in (order if r % 2 == 0 else order[::-1]):
      one, lib = setups[k]
      batch = []
      for _ in range(steps):
        t0 = time.perf_counter()
        _block(one(), lib)
        batch.append(time.perf_counter() - t0)
      times[k].append(statistics.median(batch))
  for (n, lname), v in times.items():
    row = rows[n]
    row[f"{lname}_step_ms"] = statistics.median(v) * 1e3
    row[f"{lname}_tokens_per_s"] = n * per_device * dp.CFG["seq"] / row[f"{lname}_step_ms"] * 1e3
  out = [rows[n] for n in counts]
  base = out[0]
  for r in out:
    r["loss"] = losses[r["devices"]]
    for lname in libs:
      r[f"{lname}_efficiency"] = (r[f"{lname}_tokens_per_s"] /
                                  (r["devices"] / base["devices"] * base[f"{lname}_tokens_per_s"]))
    print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in r.items()), flush=True)
  return out


def main(argv=None):
  import ourjax
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes-mb", default="1,16,256,1024")
  ap.add_argument("--dp-devices", default="")
  ap.add_argument("--per-device-batch", type=int, default=16)
  ap.add_argument("--repeat", type=int, default=10,
                  help="collectives: timed calls; data-parallel: steps in a round's batch")
  ap.add_argument("--rounds", type=int, default=7, help="data-parallel timing rounds")
  ap.add_argument("--no-jax", action="store_true")
  ap.add_argument("--skip-collectives", action="store_true")
  a = ap.parse_args(argv)
  libs = {"ourjax": ourjax}
  if not a.no_jax:
    try:
      import jax
      libs["jax"] = jax
    except ImportError:
      pass
  n = len(ourjax.devices())
  print(f"devices: ourjax {ourjax.devices()}" +
        (f"; jax {libs['jax'].devices()}" if "jax" in libs else ""), flush=True)
  if not a.skip_collectives:
    collectives(libs, n, [float(s) for s in a.sizes_mb.split(",")], a.repeat)
  counts = [int(c) for c in a.dp_devices.split(",")] if a.dp_devices else \
      [c for c in (1, 2, 4, 8) if c <= n]
  data_parallel(libs, counts, a.per_device_batch, a.repeat, a.rounds)


if __name__ == "__main__":
  main()
