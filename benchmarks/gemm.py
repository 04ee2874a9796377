"""Matrix multiply: ourjax's generated GEMM kernel (ourjax/backends/llvm/gemm.py) against NumPy
(OpenBLAS) and JAX's jitted matmul (XLA CPU, Eigen), with 1 and 2 threads.

    PYTHONPATH=/work/main /work/benchvenv/bin/python benchmarks/gemm.py [--quick] [--f64]
        [--sizes 1024x1024x1024,256x784x512] [--reps 30]

Sizes are ``MxKxN`` (C[M,N] = A[M,K] @ B[K,N]).  Each thread count runs in its own child process
so that OpenBLAS and XLA can be limited to that many threads through the environment
(``OPENBLAS_NUM_THREADS``; for one thread ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` and
core pinning).
Inside a child the three implementations are timed round-robin (one call of each per round) so
that load from other processes hits them alike; the table shows the median and the best time of
``--reps`` rounds, GFLOP/s of both, and ratios ourjax/other of both (> 1: ourjax is slower).  On a
shared machine the best times are the better estimate of what each implementation can do; the
one-thread child is pinned to one core (``sched_setaffinity``) so that XLA's and OpenBLAS's
helper threads cannot use a second one.

ourjax's multi-threaded call is ``nthreads`` ctypes calls of the same function with
``tid = 0..nthreads-1`` (tid 0 on the calling thread, the others on a Python thread pool), so its
time includes that dispatch (~tens of microseconds).  JAX is skipped when it is not importable.

``--tuned`` adds a column ``tuned``: the same kernel run with the cache blocking the autotuner
(``ourjax/backends/llvm/gemm_tune.py``) picks for the size and thread count, tuned in the child
before timing (within ``OURJAX_GEMM_AUTOTUNE_MS``; with ``OURJAX_CACHE_DIR=off``, tuned anew).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np


def _parse_sizes(s):
  out = []
  for item in s.split(","):
    m, k, n = (int(v) for v in item.lower().split("x"))
    out.append((m, k, n))
  return out


def _worker(args):
  from concurrent.futures import ThreadPoolExecutor
  from ourjax.backends.cpu.jit import compile_module, new_module
  from ourjax.backends.llvm import gemm

  nthreads = args.threads
  if nthreads == 1 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # JAX/OpenBLAS: one core
  dtypes = ["f32"] + (["f64"] if args.f64 else [])
  try:
    import jax
    import jax.numpy as jnp
    if args.f64:
      jax.config.update("jax_enable_x64", True)
    jmm = jax.jit(lambda x, y: x @ y)
  except Exception:  # noqa: BLE001 - any import failure means: no JAX column
    jax = None
  pool = ThreadPoolExecutor(max(1, nthreads - 1))
  P, L, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
  results = []
  for dtype in dtypes:
    npdt = np.float32 if dtype == "f32" else np.float64
    mod = new_module("bench_gemm")
    gemm.emit_gemm(mod, "gemm", dtype)
    t0 = time.perf_counter()
    cm = compile_module(mod, ["gemm"])
    compile_s = time.perf_counter() - t0
    f = cm.ctypes_function("gemm", None, [P, P, P, L, L, L, L, L, L, I, I, L, L, L, L, L, L, P, L])
    for (M, K, N) in args.sizes:
      rng = np.random.default_rng(0)
      a = rng.standard_normal((M, K)).astype(npdt)
      b = rng.standard_normal((K, N)).astype(npdt)
      c = np.empty((M, N), npdt)
      # (each thread's call packs into an area of its own)
      packs = [np.empty(gemm.pack_buffer_elements(dtype, M, N, K, nthreads, trans_b=False), npdt)
               for _ in range(nthreads)]
      argv = [(a.ctypes.data, b.ctypes.data, c.ctypes.data, M, N, K, K, N, N, 0, 0, 1, 0, 0, 0,
               t, nthreads, packs[t].ctypes.data, 0) for t in range(nthreads)]

      def ours():
        futs = [pool.submit(f, *argv[t]) for t in range(1, nthreads)]
        f(*argv[0])
        for fu in futs:
          fu.result()

      impls = {"ourjax": ours}
      if args.tuned:
        from ourjax.backends.llvm import gemm_tune
        os.environ["OURJAX_GEMM_AUTOTUNE"] = "1"
        bl = gemm_tune.choose(dtype, M, N, K, False, False, 1, nthreads)
        word = gemm.tune_word(bl, dtype)
        tpacks = [np.empty(gemm.pack_buffer_elements(dtype, M, N, K, nthreads, bl,
                                                     trans_b=False), npdt)
                  for _ in range(nthreads)]
        targv = [a_[:-2] + (tpacks[t].ctypes.data, word) for t, a_ in enumerate(argv)]

        def tuned():
          futs = [pool.submit(f, *targv[t]) for t in range(1, nthreads)]
          f(*targv[0])
          for fu in futs:
            fu.result()
        impls["tuned"] = tuned
        tuned_fields = {k: getattr(bl, k) for k in ("kc", "mc", "nc", "direct_b_rows",
                                                    "stream_rows")}
      impls["numpy"] = lambda: np.matmul(a, b)
      if jax is not None:
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        impls["jax"] = lambda: jmm(ja, jb).block_until_ready()
      for fn in impls.values():  # warm up (JAX compiles here)
        fn()
      ref = a.astype(np.float64) @ b.astype(np.float64)
      err = float(np.max(np.abs(c - ref)) / max(1.0, float(np.max(np.abs(ref)))))
      reps = args.reps if M * N * K <= 2 ** 31 else max(3, args.reps // 10)
      times = {k: [] for k in impls}
      for _ in range(reps):
        for k, fn in impls.items():
          t = time.perf_counter()
          fn()
          times[k].append(time.perf_counter() - t)
      results.append(dict(dtype=dtype, M=M, K=K, N=N, threads=nthreads, compile_s=compile_s,
                          rel_err=err, tuned=tuned_fields if args.tuned else None,
                          times={k: dict(median=float(np.median(v)), best=float(np.min(v)))
                                 for k, v in times.items()}))
  print(json.dumps(results))


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", type=_parse_sizes,
                  default=_parse_sizes("1024x1024x1024,256x784x512,4096x4096x4096"))
  ap.add_argument("--quick", action="store_true", help="skip 4096^3")
  ap.add_argument("--f64", action="store_true", help="also time float64")
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--tuned", action="store_true",
                  help="also time the blocking the autotuner picks (column 'tuned')")
  ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.threads:
    return _worker(args)
  if args.quick:
    args.sizes = [s for s in args.sizes if s[0] * s[1] * s[2] < 2 ** 33]
  rows = []
  for nt in (1, 2):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(nt), OMP_NUM_THREADS=str(nt))
    if nt == 1:
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                          " intra_op_parallelism_threads=1").strip()
    cmd = [sys.executable, __file__, "--threads", str(nt), "--reps", str(args.reps),
           "--sizes", ",".join(f"{m}x{k}x{n}" for m, k, n in args.sizes)]
    if args.f64:
      cmd.append("--f64")
    if args.tuned:
      cmd.append("--tuned")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows += json.loads(out.strip().splitlines()[-1])
  print(f"{'dtype':5} {'M x K x N':>15} {'thr':>3} | {'impl':>7} {'median ms':>10} {'best ms':>9} "
        f"{'GFLOP/s':>8} {'(best)':>7} | {'ours/impl':>9} {'(best)':>7}")
  for r in rows:
    fl = 2.0 * r["M"] * r["N"] * r["K"]
    ours = r["times"]["ourjax"]
    for k, t in r["times"].items():
      ratio = "" if k == "ourjax" else f"{ours['median'] / t['median']:9.2f} " \
          f"{ours['best'] / t['best']:7.2f}"
      print(f"{r['dtype']:5} {r['M']:>4}x{r['K']:>4}x{r['N']:>4} {r['threads']:>3} | {k:>7} "
            f"{t['median'] * 1e3:10.3f} {t['best'] * 1e3:9.3f} {fl / t['median'] / 1e9:8.1f} "
            f"{fl / t['best'] / 1e9:7.1f} | {ratio}")
    print(f"{'':27}(ourjax: rel. error {r['rel_err']:.1e}, compile {r['compile_s']:.2f} s)"
          + (f" tuned {r['tuned']}" if r.get("tuned") else ""))


if __name__ == "__main__":
  main()
