"""4096^3 bf16 (or f32) matmul through jit on the GPU: WgmmaDot variants against JAX.

    VARIANTS="base;persistent:OURJAX_CUDA_WGMMA_PERSISTENT=1" DTYPES=bf16 python benchmarks/matmul_variants_gpu.py

Each variant's environment is set while it compiles; the variants and JAX alternate in one
process, CALLS back-to-back calls a round, ROUNDS rounds, medians; each variant's lone kernel
time (profile) and its result against JAX's; then 2-s sustained loops of each (sample the
card's clock, power and throttle reasons with nvidia-smi meanwhile: back to back an H100 sits
at its 700 W cap)."""
import os, time, statistics
import numpy as np, ml_dtypes
import ourjax, jax, jax.numpy as jjnp

R = int(os.environ.get("ROUNDS", "15"))
CALLS = int(os.environ.get("CALLS", "200"))
VARIANTS = [v for v in os.environ.get("VARIANTS", "base;persistent:OURJAX_CUDA_WGMMA_PERSISTENT=1").split(";") if v]
DTYPES = os.environ.get("DTYPES", "bf16").split(",")

def mark(msg):
  print(f"[{time.time():.3f}] {msg}", flush=True)

def block(x):
  x.block_until_ready(); return x

def per_call(f, a, b, n):
  t0 = time.perf_counter()
  for _ in range(n):
    r = f(a, b)
  r.block_until_ready()
  return (time.perf_counter() - t0) / n * 1e3

rng = np.random.default_rng(1)
n = 4096
for dn in DTYPES:
  dt = ml_dtypes.bfloat16 if dn == "bf16" else np.float32
  ha = rng.standard_normal((n, n)).astype(dt); hb = rng.standard_normal((n, n)).astype(dt)
  a, b = ourjax.device_put(ha), ourjax.device_put(hb)
  ja, jb = jax.device_put(ha), jax.device_put(hb)
  fns = {}
  jf = jax.jit(lambda x, y: x @ y)
  ref = np.asarray(block(jf(ja, jb))).astype(np.float64)
  fns["jax"] = (jf, ja, jb)
  for v in VARIANTS:
    name, _, envs = v.partition(":")
    saved = {}
    for kv in filter(None, envs.split(",")):
      k, _, val = kv.partition("="); saved[k] = os.environ.get(k); os.environ[k] = val
    f = ourjax.jit(lambda x, y: x @ y)
    t0 = time.perf_counter(); out = np.asarray(block(f(a, b))).astype(np.float64); tc = time.perf_counter() - t0
    exe = ourjax.jit(lambda x, y: x @ y, backend="cuda").lower(a, b).compile()
    kinfo = [(type(k).__name__, getattr(k, "mode", None), k.launch(None)[0]) for k in exe.runtime_executable().kernels]
    prof = exe.runtime_executable().profile(a, b, reps=20)
    lone = sum(p[2] for p in prof)
    for k, val in saved.items():
      if val is None: os.environ.pop(k)
      else: os.environ[k] = val
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    mark(f"{dn} {name}: kernels {kinfo} compile+first {tc:.2f}s lone kernel {lone:.4f} ms rel err vs jax {err:.2e}")
    fns[name] = (f, a, b)
  names = list(fns)
  for nm in names:
    f, x, y = fns[nm]
    for _ in range(3): block(f(x, y))
  res = {nm: [] for nm in names}
  mark(f"{dn} timing start")
  for r in range(R):
    order = names[r % len(names):] + names[:r % len(names)]
    for nm in order:
      f, x, y = fns[nm]
      res[nm].append(per_call(f, x, y, CALLS))
  mark(f"{dn} timing end")
  j = statistics.median(res["jax"])
  for nm in names:
    m = statistics.median(res[nm])
    print(f"{dn} {nm}: median {m:.4f} ms/call ({2*n**3/m/1e9:.1f} TFLOP/s), min {min(res[nm]):.4f} max {max(res[nm]):.4f}; JAX/ours rate ratio {j/m:.3f}", flush=True)
  # sustained loops with the card's clock sampled (nvidia-smi in the background)
  for nm in names:
    f, x, y = fns[nm]
    mark(f"{dn} sustained {nm} start")
    t_end = time.perf_counter() + 2.0; cnt = 0
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
      for _ in range(50):
        r = f(x, y)
      r.block_until_ready(); cnt += 50
    mark(f"{dn} sustained {nm} end: {(time.perf_counter()-t0)/cnt*1e3:.4f} ms/call over {cnt}")
