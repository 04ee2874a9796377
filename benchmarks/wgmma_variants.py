"""WgmmaDot variants side by side on a Hopper GPU, in one process: for each product and each
variant of the kernel's knobs (``wgmma.RASTER_GROUP``; add others to ``VARIANTS``), the kernel's
device time (CUDA events, median of 20) and its error on 64 sampled rows against float64;
then JAX's wall clock for the same products; then, for the 4096^3 products, where a call's
wall-clock time goes (back-to-back calls timed by the host clock and by events around the
batch, against the kernel's own event time).

    python benchmarks/wgmma_variants.py [--sizes 4096,8192] [--variants base,g0]
                                        [--dtypes float32,bfloat16] [--skip variants,jax,overhead]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("OURJAX_CACHE_DIR", "off")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

BF16 = __import__("ml_dtypes").bfloat16
# variant: the wgmma module's knobs it sets (the others at their defaults)
DEFAULTS = {"RASTER_GROUP": 16}
VARIANTS = {"base": {}, "g0": {"RASTER_GROUP": 0}, "g8": {"RASTER_GROUP": 8},
            "g32": {"RASTER_GROUP": 32}}


def set_variant(wgmma, name):
  for k, v in {**DEFAULTS, **VARIANTS[name]}.items():
    setattr(wgmma, k, v)


def _sample_error(out, a, b, nt, rows):
  ref = a[rows].astype(np.float64) @ (b.T if nt else b).astype(np.float64)
  d = np.asarray(out, np.float64)[rows] - ref
  return np.linalg.norm(d) / np.linalg.norm(ref)


def time_variants(sizes, variants, dtypes=("float32", "bfloat16")):
  import ourjax
  from ourjax.backends.cuda import wgmma
  rng = np.random.default_rng(1)
  cases = []
  for n in sizes:
    cases += [(n, dt, False) for dt in (np.float32, BF16) if np.dtype(dt).name in dtypes]
  if "float32" in dtypes:
    cases.append((4096, np.float32, True))
  for n, dt, nt in cases:
    a = rng.standard_normal((n, n)).astype(dt)
    b = rng.standard_normal((n, n)).astype(dt)
    da, db = ourjax.device_put(a), ourjax.device_put(b)
    rows = rng.choice(n, 64, replace=False)
    keep = []
    first = None
    flop = 2.0 * n ** 3
    for v in variants:
      set_variant(wgmma, v)
      fn = (lambda x, y: x @ y.T) if nt else (lambda x, y: x @ y)
      c = ourjax.jit(fn, backend="cuda").lower(da, db).compile()
      ks = c.runtime_executable().kernels
      out = c(da, db)
      keep.append(out)
      err = _sample_error(out, a, b, nt, rows)
      host = np.asarray(out)
      if first is None:
        first = host
      same = "same" if np.array_equal(host, first) else \
          f"differs {np.abs(host.astype(np.float64) - first).max():.1e}"
      prof = c.runtime_executable().profile(da, db, reps=20)
      ms = sum(p[2] for p in prof)
      desc = ",".join(f"{type(k).__name__}:{getattr(k, 'mode', '')}" for k in ks)
      print(f"{n}^3 {np.dtype(dt).name}{' nt' if nt else ''} {v:9s} {ms:.4f} ms "
            f"{flop / ms / 1e9:6.1f} TFLOP/s err {err:.1e} {same} [{desc}]" +
            (nonfinite(ourjax, dt, nt) if dt == np.float32 else ""), flush=True)
  set_variant(wgmma, "base")


def nonfinite(ourjax, dt, nt, n=512):
  """Whether Inf and NaN entries of the operands give NaN and Inf where float64 does."""
  rng = np.random.default_rng(5)
  a = rng.standard_normal((n, n)).astype(dt)
  b = rng.standard_normal((n, n)).astype(dt)
  a[3, 7], a[100, 9], b[11, 40], b[300, 300] = np.inf, np.nan, -np.inf, np.nan
  fn = (lambda x, y: x @ y.T) if nt else (lambda x, y: x @ y)
  out = np.asarray(ourjax.jit(fn, backend="cuda")(a, b), np.float64)
  with np.errstate(all="ignore"):
    ref = fn(a.astype(np.float64), b.astype(np.float64))
  ok = (np.array_equal(np.isnan(out), np.isnan(ref)) and
        np.array_equal(np.isposinf(out), np.isposinf(ref)) and
        np.array_equal(np.isneginf(out), np.isneginf(ref)))
  return " nonfinite " + ("ok" if ok else "WRONG")


def _jax_wall_ms(f, x, y, calls=10, rounds=7):
  for _ in range(3):
    f(x, y).block_until_ready()
  ts = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    for _ in range(calls):
      r = f(x, y)
    r.block_until_ready()
    ts.append((time.perf_counter() - t0) / calls)
  return statistics.median(ts) * 1e3


def time_jax(sizes):
  import jax
  import jax.numpy as jjnp
  rng = np.random.default_rng(1)
  for n in sizes:
    for dt in (jjnp.float32, jjnp.bfloat16):
      x = jax.device_put(jjnp.asarray(rng.standard_normal((n, n)), dt))
      y = jax.device_put(jjnp.asarray(rng.standard_normal((n, n)), dt))
      ms = _jax_wall_ms(jax.jit(lambda p, q: p @ q), x, y)
      print(f"{n}^3 {jjnp.dtype(dt).name} jax wall {ms:.4f} ms {2.0 * n ** 3 / ms / 1e9:6.1f} "
            "TFLOP/s", flush=True)
  x = jax.device_put(jjnp.asarray(rng.standard_normal((4096, 4096)), jjnp.float32))
  ms = _jax_wall_ms(jax.jit(lambda p, q: p @ q.T), x, x)
  print(f"4096^3 float32 nt jax wall {ms:.4f} ms {2.0 * 4096 ** 3 / ms / 1e9:6.1f} TFLOP/s",
        flush=True)


def call_overhead(n=4096, calls=200, rounds=5):
  """Where the wall-clock time of back-to-back jitted calls goes: rounds of ``calls`` calls
  through ourjax's jit, through the compiled executable itself and through JAX's jit, the
  three interleaved (so that the card's clock, which falls under sustained load, is alike for
  all), against the kernel's own event time."""
  import ourjax
  from ourjax.backends.cuda import driver
  import jax
  rng = np.random.default_rng(2)
  dev = driver.get_device(0)
  for dt in (BF16, np.float32):
    a = rng.standard_normal((n, n)).astype(dt)
    b = rng.standard_normal((n, n)).astype(dt)
    f = ourjax.jit(lambda x, y: x @ y)
    da, db = ourjax.device_put(a), ourjax.device_put(b)
    exe = f.lower(da, db).compile().runtime_executable()
    jf = jax.jit(lambda x, y: x @ y)
    ja, jb = jax.device_put(a), jax.device_put(b)
    for _ in range(5):
      f(da, db).block_until_ready()
      exe(da, db)
      jf(ja, jb).block_until_ready()
    dev.synchronize()
    res = {"jit": [], "events": [], "host": [], "exe": [], "jax": []}
    for _ in range(rounds):
      e0 = driver.Event(dev, timing=True).record()
      t0 = time.perf_counter()
      for _ in range(calls):
        out = f(da, db)
      t1 = time.perf_counter()
      e1 = driver.Event(dev, timing=True).record()
      out.block_until_ready()
      t2 = time.perf_counter()
      res["jit"].append((t2 - t0) / calls * 1e3)
      res["host"].append((t1 - t0) / calls * 1e3)
      res["events"].append(e0.elapsed_ms(e1) / calls)
      t0 = time.perf_counter()
      for _ in range(calls):
        o = exe(da, db)
      dev.synchronize()
      res["exe"].append((time.perf_counter() - t0) / calls * 1e3)
      del o
      t0 = time.perf_counter()
      for _ in range(calls):
        r = jf(ja, jb)
      r.block_until_ready()
      res["jax"].append((time.perf_counter() - t0) / calls * 1e3)
    prof = exe.profile(da, db, reps=20)
    kms = sum(p[2] for p in prof)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{n}^3 {np.dtype(dt).name} calls (median of {rounds} interleaved rounds of {calls}): "
          f"ourjax jit {med['jit']:.4f} ms (events over the batch {med['events']:.4f}, host "
          f"enqueue {med['host']:.4f}), executable {med['exe']:.4f}, JAX {med['jax']:.4f}; "
          f"kernel alone (profile, after) {kms:.4f}", flush=True)
    print("   rounds: " + "; ".join(f"{k} " + " ".join(f"{x:.4f}" for x in v)
                                    for k, v in res.items()), flush=True)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--sizes", default="4096,8192")
  ap.add_argument("--variants", default="base,g0")
  ap.add_argument("--skip", default="")
  ap.add_argument("--dtypes", default="float32,bfloat16")
  args = ap.parse_args()
  sizes = [int(s) for s in args.sizes.split(",")]
  skip = args.skip.split(",")
  if "variants" not in skip:
    time_variants(sizes, args.variants.split(","), dtypes=args.dtypes.split(","))
  if "jax" not in skip:
    time_jax(sizes)
  if "overhead" not in skip:
    call_overhead()


if __name__ == "__main__":
  main()
