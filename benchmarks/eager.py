"""Eager-mode latency: one op at a time on concrete arrays (no jit), ourjax vs JAX vs NumPy.

    python benchmarks/eager.py [--only NAME[,NAME]] [--sizes small,large] [--repeat N]
                               [--min-time S] [--no-jax] [--json PATH] [--backend cpu|cuda]

Each row is one operation (``x + y``, ``x + row``, ``jnp.exp(x)``, ``jnp.sum(x, axis=-1)``,
``nn.softmax(x)``, ``x[1:3]``, ``x.at[1].set(0)``...; log and sqrt of positive inputs) on float32
inputs of one size: ``8`` and ``64x64`` (small: the per-op overhead of Python, dtype handling and
dispatch) and ``1024x1024`` (large: the kernel itself).  The three libraries run the same expression
on the same NumPy inputs, converted once to each library's array; every call's result is waited for
(``block_until_ready``: JAX dispatches asynchronously).  Each op is first run 30 times (1 s at
most): the steady state of an op in a loop, after JAX's compile of the signature and ourjax's choice
between NumPy and a compiled kernel (ourjax compiles a large signature's kernel on a worker thread
while NumPy answers: the warm-up waits for those compiles, then runs the op 10 more times: a
kernel's trial against NumPy, in turn, is 7 calls; and again, up to three rounds, while those
calls started compiles, e.g. of a whole ``softmax`` once its primitives' kernels were built).
Timing alternates the libraries in one process: each round times a batch of calls per library
(the batch sized to last ``--min-time`` seconds), and
the table prints the median time per call over the rounds and the ratios ourjax/JAX and ourjax/NumPy
(below 1.0: ourjax faster).  Each row also checks ourjax's result against JAX's (or NumPy's without
JAX): dtype, shape and values.

The last rows time one step of ``examples/heat_equation.py`` (a 128x128 five-point stencil:
slices, adds, a scalar multiply and a pad) eagerly in each library.  The exit status is 1 when
a check failed.  Machines are noisy: compare ratios taken in one run.

``--backend cuda``: ourjax's and JAX's inputs are put on their first GPU (the script exits with
a message if either library has none; ``--no-jax`` times ourjax alone), results are waited for
the same way, and a row's check says which library's result came back on the host (an eager
op computed there).  NumPy's column stays the host's.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES = {"small": [(8,), (64, 64)], "large": [(1024, 1024)]}


# ------------------------------------------------------------------------------------------------
# Operations: ``fn(jnp, x, y)`` with ``jnp`` one of ourjax.numpy, jax.numpy, numpy.  ``numpy``
# overrides the expression where NumPy spells it differently (``.at[].set``).


def _at_set_numpy(x):
  z = x.copy()
  z[1] = 0.0
  return z


def _heat_step(jnp, u, r):
  """examples/heat_equation.py's step, written against ``jnp``."""
  interior = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1])
  lap = jnp.pad(interior, 1)
  return u + r * lap


def _nn(jnp):
  """The ``nn`` module beside ``jnp`` (ourjax.nn, jax.nn)."""
  import importlib
  return importlib.import_module(jnp.__name__.rsplit(".", 1)[0] + ".nn")


def _softmax_numpy(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def _positive(x, y):
  """Inputs of log and sqrt: |x| + 0.5, |y| + 0.5."""
  return np.abs(x) + 0.5, np.abs(y) + 0.5


def _bias_row(x, y):
  """``y`` as one row (the last axis of ``x``): a broadcasting add's bias."""
  return x, np.ascontiguousarray(y.reshape(-1)[: x.shape[-1]])


OPS = [
    # name, fn(jnp, x, y), numpy override fn(x, y) or None[, inputs(x, y) -> (x, y)]
    ("add", lambda jnp, x, y: x + y, None),
    ("mul", lambda jnp, x, y: x * y, None),
    ("mul_scalar", lambda jnp, x, y: x * 2.0, None),
    ("add_row", lambda jnp, x, y: x + y, None, _bias_row),
    ("maximum", lambda jnp, x, y: jnp.maximum(x, y), None),
    ("exp", lambda jnp, x, y: jnp.exp(x), None),
    ("tanh", lambda jnp, x, y: jnp.tanh(x), None),
    ("log", lambda jnp, x, y: jnp.log(x), None, _positive),
    ("sin", lambda jnp, x, y: jnp.sin(x), None),
    ("sqrt", lambda jnp, x, y: jnp.sqrt(x), None, _positive),
    ("sum", lambda jnp, x, y: jnp.sum(x), None),
    ("sum_axis0", lambda jnp, x, y: jnp.sum(x, axis=0), None),
    ("sum_axis1", lambda jnp, x, y: jnp.sum(x, axis=-1), None),
    ("mean", lambda jnp, x, y: jnp.mean(x), None),
    ("argmax", lambda jnp, x, y: jnp.argmax(x, axis=-1), None),
    ("cumsum", lambda jnp, x, y: jnp.cumsum(x, axis=-1), None),
    ("softmax", lambda jnp, x, y: _nn(jnp).softmax(x, axis=-1), lambda x, y: _softmax_numpy(x)),
    ("matmul", lambda jnp, x, y: x @ y, None),
    ("reshape", lambda jnp, x, y: x.reshape(-1), None),
    ("transpose", lambda jnp, x, y: x.T, None),
    ("slice", lambda jnp, x, y: x[1:3], None),
    ("at_set", lambda jnp, x, y: x.at[1].set(0.0), lambda x, y: _at_set_numpy(x)),
    ("where", lambda jnp, x, y: jnp.where(x > 0, x, y), None),
    ("less", lambda jnp, x, y: x < y, None),
    ("astype", lambda jnp, x, y: x.astype(jnp.int32), None),
    ("concatenate", lambda jnp, x, y: jnp.concatenate([x, y]), None),
]


def _block(x):
  if hasattr(x, "block_until_ready"):
    x.block_until_ready()
  return x


def _calibrate(call, min_time: float) -> int:
  """Calls per batch so that a batch lasts about ``min_time`` seconds (at least 1)."""
  n = 1
  while True:
    t0 = time.perf_counter()
    for _ in range(n):
      call()
    dt = time.perf_counter() - t0
    if dt >= min_time or n >= 1 << 16:
      return n
    n = max(n + 1, min(n * 8, int(n * min_time / max(dt, 1e-9) * 1.2) + 1))


def _warm_up(call, calls: int = 30, seconds: float = 1.0):
  """Run ``call`` at least ``calls`` times and for about ``seconds`` at most: the steady state
  of an op used in a loop (JAX compiles each signature on its first call; ourjax decides after
  a few large calls whether a compiled kernel beats NumPy)."""
  t_end = time.perf_counter() + seconds
  for i in range(calls):
    call()
    if i >= 2 and time.perf_counter() > t_end:
      break


def _settle_ourjax(call):
  """Wait for the kernels ourjax compiles in the background for eager calls, then call 10
  times (a kernel's trial against NumPy); again while those calls started compiles (a compile
  refused while others were pending starts on a later call), three rounds at most."""
  from ourjax import _eager
  for _ in range(3):
    _eager.wait_for_kernels(120)
    _warm_up(call, calls=10)
    with _eager._lock:
      if not _eager._pending:
        return


def time_alternating(calls: dict, repeat: int, min_time: float) -> dict:
  """Median seconds per call of each of ``calls`` (name -> thunk), the libraries timed one after
  the other in each of ``repeat`` rounds, after a warm-up."""
  for k, c in calls.items():
    _warm_up(c)
    if k == "ourjax":
      _settle_ourjax(c)
  batch = {k: _calibrate(c, min_time) for k, c in calls.items()}
  times = {k: [] for k in calls}
  for _ in range(repeat):
    for k, c in calls.items():
      n = batch[k]
      t0 = time.perf_counter()
      for _ in range(n):
        c()
      times[k].append((time.perf_counter() - t0) / n)
  return {k: statistics.median(v) for k, v in times.items()}


def _check(ours, ref, ref_name: str):
  """'ok' when ourjax's result has the reference's shape and dtype and close values."""
  o, r = np.asarray(ours), np.asarray(ref)
  if o.shape != r.shape:
    return f"shape {o.shape} vs {ref_name} {r.shape}"
  if o.dtype != r.dtype:
    return f"dtype {o.dtype} vs {ref_name} {r.dtype}"
  if o.dtype.kind == "f":
    tol = 1e-4 * max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
    if not np.allclose(o, r, rtol=1e-5, atol=tol, equal_nan=True):
      return f"values differ from {ref_name} by {float(np.max(np.abs(o - r))):.3g}"
  elif not np.array_equal(o, r):
    return f"values differ from {ref_name}"
  return "ok"


def _put(lib: str, mod, x_np, backend: str):
  """``x_np`` as ``lib``'s array on ``backend``'s first device (NumPy: itself)."""
  if lib == "numpy":
    return x_np
  if backend == "cpu":
    return _block(mod.asarray(x_np))
  if lib == "ourjax":
    import ourjax
    return _block(ourjax.device_put(x_np, ourjax.devices("cuda")[0]))
  import jax
  return _block(jax.device_put(x_np, jax.devices("gpu")[0]))


def _platforms(x) -> set:
  """The platforms of the devices holding array ``x`` ('cpu', 'gpu'/'cuda')."""
  try:
    return {d.platform for d in x.devices()}
  except Exception:   # noqa: BLE001  (not an array of a library with devices)
    return {"cpu"}


def _with_placement(check: str, results: dict, backend: str) -> str:
  """``check``, plus a note where a library's result is not on the GPU (``--backend cuda``:
  that library computed on the host, and its time is the host's)."""
  if backend == "cpu":
    return check
  off = [lib for lib, r in results.items()
         if lib != "numpy" and not (_platforms(r) & {"gpu", "cuda"})]
  return check + (f" ({', '.join(off)} result on the host)" if off else "")


def run(libs: dict, ops, sizes, repeat: int, min_time: float, on_row=None,
        backend: str = "cpu"):
  """Rows of {name, size, <lib>_us..., ratios, check}; ``libs``: name -> numpy-like module;
  ``backend``: where the inputs of ourjax and JAX live ('cpu' or 'cuda')."""
  rng = np.random.default_rng(0)
  rows = []
  cases = [(op[0], op[1], op[2], op[3] if len(op) > 3 else None, shape)
           for shape in sizes for op in ops]
  for name, fn, np_fn, inputs, shape in cases:
    x_np = rng.standard_normal(shape).astype(np.float32)
    y_np = rng.standard_normal(shape[::-1] if name == "matmul" else shape).astype(np.float32)
    if inputs is not None:
      x_np, y_np = inputs(x_np, y_np)
    calls, results = {}, {}
    for lib, mod in libs.items():
      x, y = _put(lib, mod, x_np, backend), _put(lib, mod, y_np, backend)
      if lib == "numpy":
        f = (lambda x, y, f=np_fn: f(x, y)) if np_fn else (lambda x, y, f=fn: f(np, x, y))
      else:
        f = lambda x, y, f=fn, m=mod: f(m, x, y)      # noqa: E731
      results[lib] = _block(f(x, y))
      calls[lib] = lambda f=f, x=x, y=y: _block(f(x, y))
    t = time_alternating(calls, repeat, min_time)
    ref = "jax" if "jax" in libs else "numpy"
    check = _with_placement(_check(results["ourjax"], results[ref], ref), results, backend)
    rows.append(_row(name, shape, t, check))
    if on_row:
      on_row(rows[-1])
  return rows


def heat_rows(libs: dict, repeat: int, min_time: float, n: int = 128, on_row=None,
              backend: str = "cpu"):
  u0 = np.zeros((n, n), np.float32)
  u0[n // 4: 3 * n // 4, n // 4: 3 * n // 4] = 1.0
  u0 += np.random.default_rng(1).random((n, n), dtype=np.float32) * 0.1
  calls, results = {}, {}
  for lib, mod in libs.items():
    if lib == "numpy":
      from heat_equation import step_numpy
      f, u = step_numpy, u0
    else:
      f, u = (lambda u, r, m=mod: _heat_step(m, u, r)), _put(lib, mod, u0, backend)
    results[lib] = _block(f(u, 0.2))
    calls[lib] = lambda f=f, u=u: _block(f(u, 0.2))
  t = time_alternating(calls, repeat, min_time)
  ref = "jax" if "jax" in libs else "numpy"
  check = _with_placement(_check(results["ourjax"], results[ref], ref), results, backend)
  row = _row("heat_equation_step", (n, n), t, check)
  if on_row:
    on_row(row)
  return [row]


def _row(name, shape, t, check):
  row = {"name": name, "size": "x".join(map(str, shape)), "check": check}
  for lib, v in t.items():
    row[f"{lib}_us"] = 1e6 * v
  ours = t["ourjax"]
  row["ratio_jax"] = ours / t["jax"] if "jax" in t else None
  row["ratio_numpy"] = ours / t["numpy"]
  return row


HEADER = (f"{'op':20s} {'size':>9s} {'ourjax us':>10s} {'JAX us':>9s} {'NumPy us':>9s} "
          f"{'/JAX':>6s} {'/NumPy':>7s}  check")


def format_row(r) -> str:
  def num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(int(fmt.split(".")[0]))
  return (f"{r['name']:20s} {r['size']:>9s} {num(r['ourjax_us'], '10.1f')} "
          f"{num(r.get('jax_us'), '9.1f')} {num(r['numpy_us'], '9.1f')} "
          f"{num(r['ratio_jax'], '6.2f')} {num(r['ratio_numpy'], '7.2f')}  {r['check']}")


def summary(rows) -> str:
  def gm(vals):
    vals = [v for v in vals if isinstance(v, (int, float)) and v > 0]
    return f"{math.exp(sum(map(math.log, vals)) / len(vals)):.2f}" if vals else "-"
  parts = []
  for label, pred in (("small", lambda r: r["size"] in ("8", "64x64")),
                      ("large", lambda r: r["size"] == "1024x1024")):
    sel = [r for r in rows if pred(r) and r["name"] != "heat_equation_step"]
    if sel:
      parts.append(f"{label}: /JAX {gm([r['ratio_jax'] for r in sel])}, "
                   f"/NumPy {gm([r['ratio_numpy'] for r in sel])}")
  return "geomean ourjax ratios (below 1: ourjax faster) " + "; ".join(parts)


def _require_gpus(libs):
  """Exit with a message unless ourjax (and JAX, when timed) each see a GPU."""
  import ourjax
  try:
    ourjax.devices("cuda")
  except Exception as e:   # noqa: BLE001
    sys.exit(f"--backend cuda: ourjax has no GPU ({e})")
  if "jax" in libs:
    import jax
    try:
      jax.devices("gpu")
    except Exception as e:   # noqa: BLE001
      sys.exit(f"--backend cuda: JAX has no GPU ({e}); --no-jax times ourjax and NumPy only")


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="", help="comma-separated op names (heat_equation_step too)")
  ap.add_argument("--sizes", default="small,large", help="small (8, 64x64), large (1024x1024)")
  ap.add_argument("--repeat", type=int, default=7, help="timing rounds")
  ap.add_argument("--min-time", type=float, default=0.01, help="seconds per timed batch")
  ap.add_argument("--no-jax", action="store_true", help="ourjax and NumPy only")
  ap.add_argument("--json", default="", help="also write the rows and the machine as JSON")
  ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                  help="where ourjax's and JAX's inputs live (cuda: the first GPU of each)")
  a = ap.parse_args(argv)
  os.environ["OURJAX_PLATFORMS"] = a.backend
  os.environ["JAX_PLATFORMS"] = a.backend
  os.environ.setdefault("OURJAX_CACHE_DIR", "off")
  only = set(filter(None, a.only.split(","))) or None
  known = {o[0] for o in OPS} | {"heat_equation_step"}
  if only and only - known:
    ap.error(f"unknown ops {sorted(only - known)}; known: {sorted(known)}")
  sizes = [s for k in a.sizes.split(",") for s in SIZES[k]]

  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
  import ourjax.numpy as ojnp
  libs = {"ourjax": ojnp}
  if not a.no_jax:
    try:
      import jax.numpy as jjnp
      libs["jax"] = jjnp
    except ImportError:
      print("JAX is not importable: timing ourjax and NumPy only", file=sys.stderr)
  libs["numpy"] = np
  if a.backend == "cuda":
    _require_gpus(libs)
  from models import machine, machine_line
  info = machine(a.backend, "jax" in libs)
  print(machine_line(info))
  print(HEADER, flush=True)
  show = lambda r: print(format_row(r), flush=True)     # noqa: E731
  ops = [o for o in OPS if only is None or o[0] in only]
  rows = run(libs, ops, sizes, a.repeat, a.min_time, on_row=show, backend=a.backend)
  if only is None or "heat_equation_step" in only:
    rows += heat_rows(libs, a.repeat, max(a.min_time, 0.05), on_row=show, backend=a.backend)
  print(summary(rows))
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"machine": info, "date": time.strftime("%Y-%m-%d"), "rows": rows}, f, indent=1)
  return 1 if any(r["check"] != "ok" for r in rows) else 0


if __name__ == "__main__":
  sys.exit(main())
