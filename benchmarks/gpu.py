"""GPU benchmarks: ourjax's CUDA backend vs JAX (XLA) on the same GPU and the same inputs.

    python benchmarks/gpu.py [--only NAME[,NAME]] [--small]

For each workload: the median time per call of a jitted function called back to back (both
frameworks launch asynchronously; the timed region ends with ``block_until_ready``), the bytes
the workload must move (each input read once, each output written once) over that time, as
GB/s and as a fraction of the measured device-to-device copy bandwidth (bytes read + written),
TFLOP/s for matrix products, and the relative difference between the two frameworks' results.
The copy bandwidth is measured first with ``cuMemcpyDtoDAsync`` timed by CUDA events.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402


def _block(x):
  for leaf in _leaves(x):
    if hasattr(leaf, "block_until_ready"):
      leaf.block_until_ready()
  return x


def _leaves(x):
  if isinstance(x, (list, tuple)):
    out = []
    for v in x:
      out.extend(_leaves(v))
    return out
  if isinstance(x, dict):
    return _leaves(list(x.values()))
  return [x]


def time_calls(fn, args, min_seconds=0.3, rounds=5):
  """Median seconds per call over ``rounds`` rounds of back-to-back calls (after warm-up)."""
  for _ in range(3):
    _block(fn(*args))
  t0 = time.perf_counter()
  _block(fn(*args))
  one = max(time.perf_counter() - t0, 1e-6)
  reps = max(1, min(1000, int(min_seconds / rounds / one)))
  times = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    for _ in range(reps):
      out = fn(*args)
    _block(out)
    times.append((time.perf_counter() - t0) / reps)
  return statistics.median(times)


def copy_bandwidth(nbytes=1 << 30):
  """Bytes read + written per second of a device-to-device copy (CUDA events)."""
  from ourjax.backends.cuda import driver
  dev = driver.get_device(0)
  a = dev.allocator.allocate(nbytes)
  b = dev.allocator.allocate(nbytes)
  dev.memset8(a.ptr, 1, nbytes)
  for _ in range(3):
    dev.copy_device(b.ptr, a.ptr, nbytes)
  dev.synchronize()
  times = []
  for _ in range(10):
    e0, e1 = driver.Event(dev, timing=True), driver.Event(dev, timing=True)
    e0.record()
    dev.copy_device(b.ptr, a.ptr, nbytes)
    e1.record()
    e1.synchronize()
    times.append(e0.elapsed_ms(e1) / 1e3)
  return 2 * nbytes / statistics.median(times)


# ------------------------------------------------------------------------------------------------
# workloads: (name, make(np_like, nn) -> fn, inputs(rng), bytes, flops)

def _chain(jnp, nn):
  return lambda x, y: jnp.sin(x) * 2.0 + y * y - 1.0


def _axpy(jnp, nn):
  return lambda x, y: x * 2.5 + y


def _reduction_chain(jnp, nn):
  """Seven dependent full reductions on a small array: ~20 tiny kernels per call (ourjax: two
  per reduction plus elementwise), so the time is launch overhead (graph replay on the GPU)."""
  def f(x):
    for _ in range(7):
      x = x / (1.0 + jnp.sum(x * x))
    return x
  return f


def _gelu(jnp, nn):
  return lambda x: nn.gelu(x, approximate=True)


def _sum(jnp, nn):
  return lambda x: jnp.sum(x)


def _rowsum(jnp, nn):
  return lambda x: jnp.sum(x, axis=-1)


def _softmax(jnp, nn):
  return lambda x: nn.softmax(x, axis=-1)


def _layernorm(jnp, nn):
  def ln(x, g, b):
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b
  return ln


def _transpose(jnp, nn):
  return lambda x: x.T * 2.0


def _sort(jnp, nn):
  return lambda x: jnp.sort(x, axis=-1)


def _scatter_add(jnp, nn):
  return lambda v, i: jnp.zeros(1 << 16, v.dtype).at[i].add(v)


def _matmul(jnp, nn):
  return lambda a, b: a @ b


def _mlp(jnp, nn, grad):
  def loss(params, x, y):
    w1, b1, w2, b2 = params
    h = nn.relu(x @ w1 + b1)
    return jnp.mean((h @ w2 + b2 - y) ** 2)

  def step(params, x, y):
    lv, g = grad(loss)(params, x, y)
    return lv, [p - 1e-3 * d for p, d in zip(params, g)]
  return step


def workloads(small: bool):
  n = 1 << (22 if small else 26)
  R, C = (1024, 4096) if small else (8192, 4096)
  M = 1024 if small else 4096
  B, D, H = (512, 512, 1024) if small else (4096, 1024, 4096)
  f = 4
  bf16 = __import__("ml_dtypes").bfloat16
  return [
      ("dispatch", _axpy, lambda r: [r.standard_normal(1024, np.float32),
                                     r.standard_normal(1024, np.float32)], 3 * 1024 * f, 0),
      ("dispatch20", _reduction_chain, lambda r: [r.standard_normal((64, 300), np.float32)],
       2 * 64 * 300 * f, 0),
      ("axpy", _axpy, lambda r: [r.standard_normal(n, np.float32),
                                 r.standard_normal(n, np.float32)], 3 * n * f, 0),
      ("chain", _chain, lambda r: [r.standard_normal(n, np.float32),
                                   r.standard_normal(n, np.float32)], 3 * n * f, 0),
      ("gelu", _gelu, lambda r: [r.standard_normal(n, np.float32)], 2 * n * f, 0),
      ("sum", _sum, lambda r: [r.standard_normal(n, np.float32)], n * f, 0),
      ("rowsum", _rowsum, lambda r: [r.standard_normal((R, C), np.float32)], R * C * f, 0),
      ("softmax", _softmax, lambda r: [r.standard_normal((R, C), np.float32)],
       2 * R * C * f, 0),
      ("layernorm", _layernorm, lambda r: [r.standard_normal((R, C), np.float32),
                                           r.standard_normal(C, np.float32),
                                           r.standard_normal(C, np.float32)], 2 * R * C * f, 0),
      ("transpose", _transpose, lambda r: [r.standard_normal((R, C), np.float32)],
       2 * R * C * f, 0),
      ("sort_rows", _sort, lambda r: [r.standard_normal((R // 4, 1024), np.float32)],
       2 * (R // 4) * 1024 * f, 0),
      ("scatter_add", _scatter_add, lambda r: [r.standard_normal(n // 4, np.float32),
                                               r.integers(0, 1 << 16, n // 4, dtype=np.int32)],
       2 * (n // 4) * f, 0),
      ("matmul_f32", _matmul, lambda r: [r.standard_normal((M, M), np.float32),
                                         r.standard_normal((M, M), np.float32)],
       3 * M * M * f, 2 * M ** 3),
      ("matmul_bf16", _matmul, lambda r: [r.standard_normal((M, M)).astype(bf16),
                                          r.standard_normal((M, M)).astype(bf16)],
       3 * M * M * 2, 2 * M ** 3),
      ("mlp_step", "mlp", lambda r: [[(r.standard_normal((D, H)) * 0.02).astype(np.float32),
                                      np.zeros(H, np.float32) + 0.01,
                                      (r.standard_normal((H, D)) * 0.02).astype(np.float32),
                                      np.zeros(D, np.float32) + 0.01],
                                     r.standard_normal((B, D), np.float32),
                                     r.standard_normal((B, D), np.float32)],
       (2 * (2 * D * H + H + D) + 2 * B * D) * f, 6 * 2 * B * D * H),
  ]


def _dispatch_note(jitted) -> str:
  """How ourjax ran a dispatch workload: its kernel count, and graph replay or why not."""
  try:
    (entry,) = jitted._cache.values()
    exe = entry.executable.compiled
  except (AttributeError, ValueError):
    return "(executable not found)"
  why = getattr(exe, "graph_reason", "")
  how = "replayed as a CUDA graph" if why is None else f"launched one by one ({why})"
  return f"{len(getattr(exe, 'kernels', ()))} kernel(s), {how}"


def _rel(a, b):
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  d = np.linalg.norm(b.ravel())
  return float(np.linalg.norm((a - b).ravel()) / (d if d else 1.0))


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--only", default="")
  ap.add_argument("--small", action="store_true")
  ap.add_argument("--profile", default="", help="per-kernel device times of these workloads")
  ap.add_argument("--vec-sweep", default="",
                  help="also time these workloads with 8 elements per thread (codegen.VEC)")
  args = ap.parse_args(argv)
  import ourjax
  import ourjax.numpy as ojnp
  from ourjax.backends.cuda import driver
  if not driver.available():
    print(f"no CUDA GPU: {driver.unavailable_reason()}")
    return 1
  try:
    import jax
    import jax.numpy as jjnp
    have_jax = any(d.platform == "gpu" for d in jax.devices())
  except Exception as e:   # noqa: BLE001
    print(f"JAX unavailable ({e}); timing ourjax only")
    have_jax = False
  dev = driver.get_device(0)
  bw = copy_bandwidth()
  print(f"device: {dev.name} (sm_{dev.arch}, {dev.multiprocessor_count} SMs); "
        f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write)"
        + (f"; JAX {jax.__version__} on {jax.devices()[0]}" if have_jax else ""))
  only = set(filter(None, args.only.split(",")))
  rows = []
  rng = np.random.default_rng(0)
  for name, make, inputs, nbytes, flops in workloads(args.small):
    if only and name not in only:
      continue
    host = inputs(rng)
    if make == "mlp":
      ofn = _mlp(ojnp, ourjax.nn, ourjax.value_and_grad)
    else:
      ofn = make(ojnp, ourjax.nn)
    oj = ourjax.jit(ofn)
    oargs = ourjax.device_put(host)
    t0 = time.perf_counter()
    oout = _block(oj(*oargs))
    ocompile = time.perf_counter() - t0
    ot = time_calls(oj, oargs)
    row = {"name": name, "ourjax_ms": ot * 1e3, "ourjax_compile_s": ocompile,
           "bytes": nbytes, "flops": flops}
    if have_jax:
      jfn = _mlp(jjnp, jax.nn, jax.value_and_grad) if make == "mlp" else make(jjnp, jax.nn)
      jj = jax.jit(jfn)
      jargs = jax.device_put(host)
      jout = _block(jj(*jargs))
      jt = time_calls(jj, jargs)
      row["jax_ms"] = jt * 1e3
      errs = [_rel(a, b) for a, b in zip(_leaves(oout), jax.tree_util.tree_leaves(jout))]
      row["rel_diff"] = max(errs) if errs else 0.0
    rows.append(row)
    _print_row(row, bw)
    if name.startswith("dispatch"):
      print(f"  {name}: {_dispatch_note(oj)}")
    if name in args.profile.split(","):
      mexe = oj.lower(*oargs).compile()._executable     # backends.ModuleExecutable
      exe = getattr(mexe, "compiled", None)
      if hasattr(exe, "profile"):
        leaves = ourjax.tree_util.tree_leaves(oargs)
        if mexe.kept_args is not None:
          leaves = [leaves[i] for i in mexe.kept_args]
        prof = exe.profile(*leaves, *[ourjax.Array(h) for h in mexe.hoisted])
        total = sum(ms for _, _, ms in prof)
        print(f"  {name}: {len(prof)} launches, {total:.3f} ms of device time")
        for kname, cls, ms in prof:
          print(f"    {kname:14s} {cls:14s} {ms:8.3f} ms")
    if name in args.vec_sweep.split(","):
      from ourjax.backends.cuda import codegen
      for attr, val in (("VEC", 8), ("GRID_WAVES", 1 << 20)):
        saved = getattr(codegen, attr)
        setattr(codegen, attr, val)
        try:
          oj2 = ourjax.jit(lambda *a: ofn(*a))     # a new function: a new compilation
          _block(oj2(*oargs))
          t2 = time_calls(oj2, oargs)
          print(f"  {name} with {attr}={val}: {t2 * 1e3:.3f} ms ({nbytes / t2 / 1e9:.0f} GB/s)")
        finally:
          setattr(codegen, attr, saved)
  print()
  print(f"{'workload':12s} {'ourjax ms':>10s} {'JAX ms':>9s} {'ratio':>6s} {'ourjax GB/s':>12s} "
        f"{'%copy':>6s} {'JAX GB/s':>9s} {'%copy':>6s} {'TFLOP/s o/J':>14s} {'rel diff':>9s}")
  for row in rows:
    _print_row(row, bw, table=True)
  return 0


def _print_row(row, bw, table=False):
  o = row["ourjax_ms"]
  j = row.get("jax_ms")
  ogb = row["bytes"] / (o / 1e3) / 1e9
  jgb = row["bytes"] / (j / 1e3) / 1e9 if j else float("nan")
  tf = ""
  if row["flops"]:
    tf = f"{row['flops'] / (o / 1e3) / 1e12:.1f}/" + (
        f"{row['flops'] / (j / 1e3) / 1e12:.1f}" if j else "-")
  ratio = f"{o / j:.2f}" if j else "-"
  jms = f"{j:9.3f}" if j else f"{'-':>9s}"
  diff = f"{row.get('rel_diff', float('nan')):9.1e}"
  if table:
    print(f"{row['name']:12s} {o:10.3f} {jms} {ratio:>6s} {ogb:12.0f} {100 * ogb * 1e9 / bw:6.1f} "
          f"{jgb:9.0f} {100 * jgb * 1e9 / bw:6.1f} {tf:>14s} {diff}")
  else:
    print(f"  {row['name']}: ourjax {o:.3f} ms (compile {row['ourjax_compile_s']:.2f} s)"
          + (f", JAX {j:.3f} ms" if j else "") + f", {ogb:.0f} GB/s" + (f", {tf} TFLOP/s"
                                                                        if tf else "")
          + f", rel diff {row.get('rel_diff', float('nan')):.1e}", flush=True)


if __name__ == "__main__":
  sys.exit(main())
