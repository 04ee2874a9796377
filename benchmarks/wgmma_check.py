"""WgmmaDot (ourjax/backends/cuda/wgmma.py) on a Hopper GPU: correctness against NumPy float64
for each operand layout and dtype the kernel takes, then 4096^3 f32 (tf32) and bf16 device time
(CUDA events, median) next to MmaDot and, when JAX is installed, cuBLAS through JAX.

    python benchmarks/wgmma_check.py            # every check (one process each), then timings
    python benchmarks/wgmma_check.py --case NAME | --time | --time-int8 | --time-fp8

Each case runs in its own process (a kernel fault poisons the CUDA context).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402

BF16 = __import__("ml_dtypes").bfloat16
F16 = np.float16
E4M3 = __import__("ml_dtypes").float8_e4m3fn
E5M2 = __import__("ml_dtypes").float8_e5m2


def _mm(a, b):
  return a @ b


def _mm_f32(a, b):
  import ourjax.numpy as jnp
  return jnp.matmul(a, b, preferred_element_type=jnp.float32)


def _nt(a, b):
  return a @ b.T


def _nt_f32(a, b):
  import ourjax.numpy as jnp
  return jnp.matmul(a, b.T, preferred_element_type=jnp.float32)


def _bmm(a, b):
  import ourjax.numpy as jnp
  return jnp.einsum("bij,bjk->bik", a, b)


# name: (ourjax fn, numpy float64 fn, shape of a, shape of b, dtype, tolerance)
CASES = {
    "tf32_nn_q128": (_mm, np.matmul, (384, 96), (96, 256), np.float32, 5e-3),
    "tf32_nn_q256": (_mm, np.matmul, (512, 256), (256, 384), np.float32, 5e-3),
    "tf32_nn_k32": (_mm, np.matmul, (256, 32), (32, 128), np.float32, 5e-3),
    "tf32_nn_odd_kt": (_mm, np.matmul, (256, 160), (160, 256), np.float32, 5e-3),
    "tf32_nt": (_nt, lambda a, b: a @ b.T, (256, 160), (512, 160), np.float32, 5e-3),
    "tf32_batched": (_bmm, np.matmul, (3, 256, 128), (3, 128, 256), np.float32, 5e-3),
    "bf16_nn": (_mm_f32, np.matmul, (256, 192), (192, 512), BF16, 1e-3),
    "bf16_nn_q128": (_mm_f32, np.matmul, (128, 128), (128, 384), BF16, 1e-3),
    "bf16_nt": (_nt_f32, lambda a, b: a @ b.T, (384, 128), (256, 128), BF16, 1e-3),
    "bf16_batched": (_bmm, np.matmul, (2, 128, 256), (2, 256, 256), BF16, 1e-2),
    "f16_nn_f16out": (_mm, np.matmul, (256, 128), (128, 256), F16, 1e-2),
    "tf32_nn_4096": (_mm, np.matmul, (4096, 4096), (4096, 4096), np.float32, 5e-3),
    "bf16_nn_4096": (_mm_f32, np.matmul, (4096, 4096), (4096, 4096), BF16, 1e-3),
    # float8 (f32 accumulators; B row-major is copied K-major first)
    "e4m3_nt": (_nt_f32, lambda a, b: a @ b.T, (384, 128), (256, 128), E4M3, 2e-3),
    "e4m3_nt_edges": (_nt_f32, lambda a, b: a @ b.T, (200, 96), (130, 96), E4M3, 2e-3),
    "e5m2_nn": (_mm_f32, np.matmul, (256, 192), (192, 512), E5M2, 2e-3),
    "e4m3_batched": (_bmm, np.matmul, (3, 128, 64), (3, 64, 96), E4M3, 5e-2),
    "e4m3_nt_4096": (_nt_f32, lambda a, b: a @ b.T, (4096, 4096), (4096, 4096), E4M3, 2e-2),
}


def _compile(fn, args, mma):
  import ourjax
  os.environ["OURJAX_CUDA_MMA"] = mma
  c = ourjax.jit(lambda *a: fn(*a), backend="cuda").lower(*args).compile()
  return c, [type(k).__name__ for k in c.runtime_executable().kernels]


def _errors(out, ref):
  out = np.asarray(out, np.float64)
  d = out - ref
  return (np.linalg.norm(d.ravel()) / np.linalg.norm(ref.ravel()),
          np.abs(d).max() / np.abs(ref).max())


def run_case(name):
  fn, npfn, sa, sb, dt, tol = CASES[name]
  rng = np.random.default_rng(0)
  a = rng.uniform(-1, 1, sa).astype(dt)
  b = rng.uniform(-1, 1, sb).astype(dt)
  ref = npfn(a.astype(np.float64), b.astype(np.float64))
  line = [f"{name:15s}"]
  ok = True
  for mma in ("wgmma", "v2"):
    c, kinds = _compile(fn, (a, b), mma)
    frob, mx = _errors(c(a, b), ref)
    line.append(f"{mma}:{','.join(kinds)} frob={frob:.2e} max={mx:.2e}")
    if mma == "wgmma":
      ok = "WgmmaDot" in kinds and frob <= tol
  print(" | ".join(line), "OK" if ok else f"FAIL (tol {tol})", flush=True)
  return ok


def _jax_wall_ms(f, x, y):
  """Median wall-clock milliseconds of JAX's ``f(x, y)``, 10 calls a round, 7 rounds."""
  for _ in range(3):
    f(x, y).block_until_ready()
  ts = []
  for _ in range(7):
    t0 = time.perf_counter()
    for _ in range(10):
      r = f(x, y)
    r.block_until_ready()
    ts.append((time.perf_counter() - t0) / 10)
  return statistics.median(ts) * 1e3


def run_timing():
  import ourjax
  rng = np.random.default_rng(1)
  for n, dt in ((4096, np.float32), (4096, BF16), (8192, np.float32), (8192, BF16)):
    flop = 2.0 * n ** 3
    a = ourjax.device_put(rng.standard_normal((n, n)).astype(dt))
    b = ourjax.device_put(rng.standard_normal((n, n)).astype(dt))
    res = []
    for mma in ("wgmma", "v2"):
      c, kinds = _compile(_mm, (a, b), mma)
      prof = c.runtime_executable().profile(a, b, reps=20)
      ms = sum(p[2] for p in prof)
      res.append(f"{mma}:{','.join(kinds)} {ms:.3f} ms {flop / ms / 1e9:.1f} TFLOP/s")
    print(f"{n}^3 {np.dtype(dt).name}: " + " | ".join(res), flush=True)
  try:
    import jax
    import jax.numpy as jjnp
    for n, dt in ((4096, jjnp.float32), (4096, jjnp.bfloat16), (8192, jjnp.float32),
                  (8192, jjnp.bfloat16)):
      flop = 2.0 * n ** 3
      x = jax.device_put(jjnp.asarray(rng.standard_normal((n, n)), dt))
      y = jax.device_put(jjnp.asarray(rng.standard_normal((n, n)), dt))
      ms = _jax_wall_ms(jax.jit(lambda p, q: p @ q), x, y)
      print(f"{n}^3 {jjnp.dtype(dt).name} jax (cuBLAS, wall clock): {ms:.3f} ms "
            f"{flop / ms / 1e9:.1f} TFLOP/s", flush=True)
  except Exception as e:   # noqa: BLE001
    print(f"jax: {type(e).__name__}: {e}")


def run_timing_int8(n=4096):
  """int8 x int8 -> int32 at n^3: WgmmaDot's device time (B row-major: copied K-major first,
  included) against JAX's wall clock (cuBLAS)."""
  import ourjax
  import ourjax.numpy as jnp
  rng = np.random.default_rng(1)
  a = rng.integers(-128, 128, (n, n), dtype=np.int8)
  b = rng.integers(-128, 128, (n, n), dtype=np.int8)
  flop = 2.0 * n ** 3

  def mm(x, y):
    return ourjax.lax.dot(x, y, preferred_element_type=jnp.int32)
  c, kinds = _compile(mm, (ourjax.device_put(a), ourjax.device_put(b)), "wgmma")
  prof = c.runtime_executable().profile(ourjax.device_put(a), ourjax.device_put(b), reps=20)
  ms = sum(p[2] for p in prof)
  print(f"{n}^3 int8->int32 ours {','.join(kinds)}: {ms:.3f} ms {flop / ms / 1e9:.1f} TOP/s "
        f"({', '.join(f'{p[1]} {p[2]:.3f}' for p in prof)})", flush=True)
  try:
    import jax
    import jax.numpy as jjnp
    f = jax.jit(lambda p, q: jax.lax.dot(p, q, preferred_element_type=jjnp.int32))
    x, y = jax.device_put(a), jax.device_put(b)
    same = np.array_equal(np.asarray(f(x, y)), np.asarray(c(ourjax.device_put(a),
                                                             ourjax.device_put(b))))
    ms = _jax_wall_ms(f, x, y)
    print(f"{n}^3 int8->int32 jax (wall clock): {ms:.3f} ms {flop / ms / 1e9:.1f} TOP/s; "
          f"results {'equal' if same else 'DIFFER'}", flush=True)
  except Exception as e:   # noqa: BLE001
    print(f"jax: {type(e).__name__}: {e}")


def run_timing_fp8(n=4096):
  """float8_e4m3fn x float8_e4m3fn -> f32 at n^3: WgmmaDot's device time with both operands
  K-major (``x @ w.T``, no copy) and with B row-major (``x @ w``, copied K-major first,
  included), and a whole quantize -> dot -> dequantize program from f32 inputs, each against
  JAX's wall clock on the same program, with both results' error against float64."""
  import ourjax
  import ourjax.numpy as jnp
  rng = np.random.default_rng(1)
  a = (rng.standard_normal((n, n)) * 2).astype(np.float32).astype(E4M3)
  b = (rng.standard_normal((n, n)) * 2).astype(np.float32).astype(E4M3)
  xf = rng.standard_normal((n, n)).astype(np.float32)
  wf = rng.standard_normal((n, n)).astype(np.float32)
  sx, sw = np.float32(np.abs(xf).max() / 448), np.float32(np.abs(wf).max() / 448)
  flop = 2.0 * n ** 3

  def nt(x, y, lib=None):
    lax = (lib or ourjax).lax
    return lax.dot_general(x, y, (((1,), (1,)), ((), ())), preferred_element_type=np.float32)

  def nn(x, y, lib=None):
    return (lib or ourjax).lax.dot(x, y, preferred_element_type=np.float32)

  def linear(x, w, s, t, lib=None):
    lib = lib or ourjax
    xq = (x / s).astype(E4M3)
    wq = (w / t).astype(E4M3)
    return lib.lax.dot_general(xq, wq, (((1,), (1,)), ((), ())),
                               preferred_element_type=np.float32) * (s * t)

  def err(out, want):
    d = np.asarray(out, np.float64) - want
    return np.linalg.norm(d) / np.linalg.norm(want)

  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  want = {"nt": a64 @ b64.T, "nn": a64 @ b64}
  xq64 = (xf / sx).astype(E4M3).astype(np.float64)
  wq64 = (wf / sw).astype(E4M3).astype(np.float64)
  want["linear"] = (xq64 @ wq64.T) * (np.float64(sx) * np.float64(sw))
  programs = {"nt": (nt, (a, b)), "nn": (nn, (a, b)), "linear": (linear, (xf, wf, sx, sw))}
  try:
    import jax
  except Exception as e:   # noqa: BLE001
    jax = None
    print(f"jax: {type(e).__name__}: {e}")
  for name, (fn, args) in programs.items():
    dargs = [ourjax.device_put(x) for x in args]
    c, kinds = _compile(fn, dargs, "wgmma")
    prof = c.runtime_executable().profile(*dargs, reps=20)
    ms = sum(p[2] for p in prof)
    print(f"{n}^3 e4m3 {name} ours {','.join(kinds)}: {ms:.3f} ms {flop / ms / 1e9:.1f} "
          f"TFLOP/s, error {err(c(*dargs), want[name]):.2e} "
          f"({', '.join(f'{p[1]} {p[2]:.3f}' for p in prof)})", flush=True)
    if jax is None:
      continue
    try:
      f = jax.jit(lambda *xs, fn=fn: fn(*xs, lib=jax))
      jargs = [jax.device_put(x) for x in args]
      jms = _jax_wall_ms(lambda *xs: f(*xs), *jargs) if len(jargs) == 2 else \
          _jax_wall_ms(lambda p, q: f(p, q, *jargs[2:]), *jargs[:2])
      print(f"{n}^3 e4m3 {name} jax (wall clock): {jms:.3f} ms {flop / jms / 1e9:.1f} TFLOP/s, "
            f"error {err(f(*jargs), want[name]):.2e}", flush=True)
    except Exception as e:   # noqa: BLE001
      print(f"jax {name}: {type(e).__name__}: {str(e)[:300]}")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--case")
  ap.add_argument("--time", action="store_true")
  ap.add_argument("--time-int8", action="store_true")
  ap.add_argument("--time-fp8", action="store_true")
  ap.add_argument("--no-time", action="store_true")
  args = ap.parse_args()
  if args.case:
    sys.exit(0 if run_case(args.case) else 1)
  if args.time:
    run_timing()
    return
  if args.time_int8:
    run_timing_int8()
    return
  if args.time_fp8:
    run_timing_fp8()
    return
  import llvmlite
  print("llvmlite", llvmlite.__version__, flush=True)
  exe = [sys.executable, os.path.abspath(__file__)]
  for name in CASES:
    try:
      r = subprocess.run(exe + ["--case", name], timeout=45, capture_output=True, text=True)
      sys.stdout.write(r.stdout)
      if r.returncode not in (0, 1) or "Traceback" in r.stderr:
        print(f"{name}: exit {r.returncode}\n{r.stderr[-1500:]}", flush=True)
    except subprocess.TimeoutExpired:
      print(f"{name}: TIMEOUT (hang?)", flush=True)
  if not args.no_time:
    try:
      r = subprocess.run(exe + ["--time"], timeout=120, capture_output=True, text=True)
      sys.stdout.write(r.stdout)
      if r.returncode:
        print(f"timing: exit {r.returncode}\n{r.stderr[-1500:]}")
    except subprocess.TimeoutExpired:
      print("timing: TIMEOUT")


if __name__ == "__main__":
  main()
