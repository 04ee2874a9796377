"""The GEMM autotuner (ourjax/backends/llvm/gemm_tune.py) shape by shape: tune the cache blocking
of each product (as ``OURJAX_GEMM_AUTOTUNE=1`` would, within ``OURJAX_GEMM_AUTOTUNE_MS``), then
time the default blocking and the tuned one alternately in this process (one thread, the shared
kernel, random operands), so that load from other processes hits both alike.

    PYTHONPATH=. python benchmarks/gemm_tune.py [--dtype f64] [--sizes 128x784x512x00,...]
        [--pieces 2]

Sizes are ``MxKxN`` plus two layout digits: transA, transB (``10``: A stored K x M).  Prints
what the tuner changed (or ``default kept``), how long it tuned, and default/tuned of the best
and median times (> 1: the tuned blocking is faster).  ``OURJAX_CPU=haswell`` times AVX2 code.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# the model suite's products (MLP, transformer, per-example) and a few skinny and large ones
SIZES = ("10x128x512x10,12x784x512x00,16x784x512x00,96x512x512x00,128x784x512x00,"
         "128x512x784x01,784x128x512x10,512x128x384x00,512x384x128x01,256x784x512x00,"
         "1024x1024x1024x00")


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", default=SIZES)
  ap.add_argument("--dtype", default="f32", choices=("f32", "f64"))
  ap.add_argument("--pieces", type=int, default=1,
                  help="pieces of each product (called one after another, as threads would)")
  a = ap.parse_args()
  os.environ.setdefault("OURJAX_CACHE_DIR", "off")
  from ourjax.backends.llvm import gemm, gemm_tune
  fields = ("kc", "mc", "nc", "direct_b_rows", "stream_rows")
  d = gemm.default_blocking(a.dtype)
  print(f"vector target {gemm.vector_target().isa}, {a.dtype}, default {d}")
  for s in a.sizes.split(","):
    m, k, n, t = s.split("x")
    M, K, N, ta, tb = int(m), int(k), int(n), t[0] == "1", t[1] == "1"
    bench = gemm_tune._Bench(a.dtype, M, N, K, ta, tb, 1, a.pieces)
    t0 = time.perf_counter()
    best, trials = gemm_tune.tune(a.dtype, M, N, K, ta, tb, 1, a.pieces, run=bench.run)
    took = time.perf_counter() - t0
    reps = max(20, min(400, int(0.5 / max(1e-6, 2e-11 * M * N * K))))
    ts = {"default": [], "tuned": []}
    for _ in range(reps):
      for key, bl in (("default", d), ("tuned", best)):
        t1 = time.perf_counter()
        bench.run(bl)
        ts[key].append(time.perf_counter() - t1)
    diff = {f: getattr(best, f) for f in fields if getattr(best, f) != getattr(d, f)}
    b, md = {k: min(v) for k, v in ts.items()}, {k: np.median(v) for k, v in ts.items()}
    print(f"{M:>5}x{K:>5}x{N:>5} t{int(ta)}{int(tb)}  tuned in {took * 1e3:4.0f} ms "
          f"({len(trials):2} trials)  default {2 * M * N * K / b['default'] / 1e9:6.1f} GF/s  "
          f"default/tuned best {b['default'] / b['tuned']:.3f} median "
          f"{md['default'] / md['tuned']:.3f}  {diff or 'default kept'}", flush=True)


if __name__ == "__main__":
  main()
