"""Side-by-side benchmarks: ourjax vs JAX (when importable) vs NumPy on the same inputs.

    python benchmarks/run.py [--only NAME[,NAME]] [--repeat N] [--backend cpu|cuda] [--small]

Each workload is timed as the median of N calls after warm-up (compile time is excluded, except
in the compile-time workload).  The table prints medians and the ratio ourjax/JAX (below 1.0
means ourjax is faster) and ourjax/NumPy.  Machines are noisy: compare ratios taken in one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _median_time(fn, repeat: int, min_time: float = 0.0) -> float:
  times = []
  t_end = time.perf_counter() + min_time
  while len(times) < repeat or time.perf_counter() < t_end:
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
    if len(times) > 100 * repeat:
      break
  return statistics.median(times)


def _block(x):
  if hasattr(x, "block_until_ready"):
    x.block_until_ready()
  elif isinstance(x, (tuple, list)):
    for v in x:
      _block(v)
  elif isinstance(x, dict):
    for v in x.values():
      _block(v)
  return x


# ------------------------------------------------------------------------------------------------
# Workloads: each returns {"inputs": [...], "fn": f(np_mod)(*args), "jit": bool}
# ``np_mod`` is ourjax.numpy, jax.numpy or numpy; ``nn`` helpers are written against it.


def gelu(jnp, x):
  return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def chain(jnp, x, y):
  return jnp.maximum(x * 2.0 + y, 0.0) - jnp.minimum(y, x) * 0.5


def softmax(jnp, x):
  m = jnp.max(x, axis=-1, keepdims=True)
  e = jnp.exp(x - m)
  return e / jnp.sum(e, axis=-1, keepdims=True)


def layernorm(jnp, x):
  mu = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + 1e-5)


def matmul(jnp, a, b):
  return a @ b


def sum_all(jnp, x):
  return jnp.sum(x)


def mlp_init(rng, sizes=(784, 512, 512, 10)):
  params = []
  for m, n in zip(sizes[:-1], sizes[1:]):
    params.append((rng.standard_normal((m, n)).astype(np.float32) * np.sqrt(2.0 / m),
                   np.zeros(n, np.float32)))
  return params


def mlp_step_fn(lib):
  jnp = lib.numpy

  def loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      if i < len(params) - 1:
        h = jnp.maximum(h, 0.0)
    h = h - jnp.max(h, axis=-1, keepdims=True)
    logp = h - jnp.log(jnp.sum(jnp.exp(h), axis=-1, keepdims=True))
    return -jnp.mean(jnp.sum(logp * y, axis=-1))

  def step(params, x, y):
    l, g = lib.value_and_grad(loss)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)], l

  return step


def mlp_step_numpy(params, x, y, lr=0.01):
  """The same training step by hand in NumPy (forward, backward, SGD with step ``lr``; ``y``
  one-hot labels): the new parameters and the loss, in the inputs' precision."""
  hs, h = [x], x
  for i, (w, b) in enumerate(params):
    h = h @ w + b
    if i < len(params) - 1:
      h = np.maximum(h, 0.0)
    hs.append(h)
  z = h - h.max(-1, keepdims=True)
  p = np.exp(z)
  p /= p.sum(-1, keepdims=True)
  n = x.shape[0]
  loss = -np.mean(np.sum((z - np.log(np.exp(z).sum(-1, keepdims=True))) * y, -1))
  g = (p - y) / n
  new = []
  for i in reversed(range(len(params))):
    w, b = params[i]
    gw, gb = hs[i].T @ g, g.sum(0)
    if i > 0:
      g = (g @ w.T) * (hs[i] > 0)
    new.append((w - lr * gw, b - lr * gb))
  return new[::-1], loss


def thirty_ops(jnp, x):
  for i in range(10):
    x = jnp.sin(x) * 1.5 + jnp.cos(x * 0.5)
  return x


def build_workloads(small: bool):
  rng = np.random.default_rng(0)
  n16m = 1 << (20 if small else 24)
  sq = 1024 if small else 4096
  w = {}
  x16 = rng.standard_normal(n16m).astype(np.float32)
  y16 = rng.standard_normal(n16m).astype(np.float32)
  w["gelu_16M"] = dict(fn=gelu, inputs=[x16])
  w["chain_2in_16M"] = dict(fn=chain, inputs=[x16, y16])
  w["sum_16M"] = dict(fn=sum_all, inputs=[x16])
  xs = rng.standard_normal((sq, sq)).astype(np.float32)
  w[f"softmax_{sq}x{sq}"] = dict(fn=softmax, inputs=[xs])
  w[f"layernorm_{sq}x{sq}"] = dict(fn=layernorm, inputs=[xs])
  a = rng.standard_normal((1024, 1024)).astype(np.float32)
  b = rng.standard_normal((1024, 1024)).astype(np.float32)
  w["matmul_1024"] = dict(fn=matmul, inputs=[a, b])
  params = mlp_init(rng)
  xb = rng.standard_normal((256, 784)).astype(np.float32)
  yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)]
  w["mlp_train_step"] = dict(step=True, inputs=[params, xb, yb])
  w["dispatch_tiny"] = dict(fn=lambda jnp, x: x + 1.0, inputs=[np.ones(4, np.float32)],
                            dispatch=True)
  w["compile_30op"] = dict(fn=thirty_ops, inputs=[np.ones(128, np.float32)], compile=True)
  return w


def _libs(backend):
  libs = {}
  import ourjax
  libs["ourjax"] = ourjax
  try:
    import jax
    jax.config.update("jax_platforms", "cuda" if backend == "cuda" else "cpu")
    libs["jax"] = jax
  except Exception:   # JAX is optional: the table then has no JAX column
    pass
  return libs


def _to_device(lib, name, inputs):
  if name == "numpy":
    return inputs
  return lib.tree_util.tree_map(lambda a: lib.device_put(a), inputs)


def run(names=None, repeat=10, backend="cpu", small=False):
  workloads = build_workloads(small)
  libs = _libs(backend)
  rows = []
  for wname, spec in workloads.items():
    if names and wname not in names:
      continue
    res = {}
    for lname, lib in list(libs.items()) + [("numpy", None)]:
      try:
        res[lname] = _time_one(lname, lib, spec, repeat, backend)
      except Exception as e:  # a failure is reported in the table, not hidden
        res[lname] = f"error: {type(e).__name__}: {str(e)[:60]}"
    rows.append((wname, res))
    _print_row(wname, res, "jax" in libs)
  return rows


def _time_one(lname, lib, spec, repeat, backend):
  inputs = spec["inputs"]
  if lname == "numpy":
    if spec.get("compile"):
      return None
    if spec.get("step"):
      return _median_time(lambda: mlp_step_numpy(*inputs), repeat)
    return _median_time(lambda: spec["fn"](np, *inputs), repeat)
  args = _to_device(lib, lname, inputs)
  jit_kw = {"backend": backend} if lname == "ourjax" and backend else {}
  if spec.get("step"):
    f = lib.jit(mlp_step_fn(lib), **jit_kw)
  else:
    fn = spec["fn"]
    f = lib.jit(lambda *a: fn(lib.numpy, *a), **jit_kw)
  if spec.get("compile"):
    def compile_fresh():
      g = lib.jit(lambda *a: spec["fn"](lib.numpy, *a), **jit_kw)
      _block(g(*args))
    return _median_time(compile_fresh, max(3, repeat // 3))
  _block(f(*args))
  _block(f(*args))
  return _median_time(lambda: _block(f(*args)), repeat, min_time=0.2 if spec.get("dispatch")
                      else 0.0)


def _fmt(t):
  if t is None:
    return "-"
  if isinstance(t, str):
    return t
  return f"{t * 1e6:9.1f} us" if t < 1e-3 else f"{t * 1e3:9.3f} ms"


def _print_row(name, res, have_jax):
  o, j, n = res.get("ourjax"), res.get("jax"), res.get("numpy")
  ratio = lambda a, b: f"{a / b:6.2f}" if isinstance(a, float) and isinstance(b, float) else "   -"
  cols = [f"{name:22s}", f"ourjax {_fmt(o):>14s}"]
  if have_jax:
    cols += [f"jax {_fmt(j):>14s}", f"ourjax/jax {ratio(o, j)}"]
  cols += [f"numpy {_fmt(n):>14s}", f"ourjax/numpy {ratio(o, n)}"]
  print("  ".join(cols), flush=True)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--only", default="")
  ap.add_argument("--repeat", type=int, default=10)
  ap.add_argument("--backend", default=os.environ.get("OURJAX_PLATFORMS", "cpu"))
  ap.add_argument("--small", action="store_true", help="smaller sizes (quick smoke run)")
  a = ap.parse_args()
  names = set(a.only.split(",")) if a.only else None
  run(names, a.repeat, a.backend, a.small)


if __name__ == "__main__":
  main()
