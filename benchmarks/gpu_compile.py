"""Where the CUDA backend's compile time goes, phase by phase, without a GPU.

    python benchmarks/gpu_compile.py [--only NAME[,NAME]] [--repeat N] [--jobs N]
        [--ptxas PATH] [--dump DIR] [--json PATH] [--same-process] [--load] [--small]
    python benchmarks/gpu_compile.py --first-call [--only ...] [--repeat N] [--ab ENV=V[,ENV=V]]

For each workload of ``benchmarks/models.py`` (its ``cuda`` sizes), in a fresh process of its
own (``--same-process``: all in this one, in order, as ``models.py`` runs them, so that what one
executable leaves in the process's caches serves the next), after a tiny program has been
compiled (the imports and LLVM set-up of a process's first compile are not counted), with the
disk cache off:

============  ==================================================================================
column        what
============  ==================================================================================
front         ``jit(f).trace`` + ``.lower()`` + the pass pipeline + the GPU planner (Python)
emit          the kernels' LLVM IR made by the emitter (``llvmlite.ir``) and printed (Python)
llvm          LLVM NVPTX: parsing, optimisation and PTX generation, wall time (the modules on
              several threads); ``llvm cpu`` is the sum over the threads
compile       the whole ``.compile()`` (passes .. llvm), wall time; ``cpu`` the process's CPU
              seconds from tracing to the end of the compile, all threads (what a loaded
              machine does not stretch)
ptxas         CPU seconds of ``ptxas -arch=sm_90a`` (each module's own ``.target``) of every
              PTX module, one after the other: a proxy for the driver's JIT (``cuLinkAddData``)
              of the first call; ``ptxas max`` the slowest module (the least the driver's
              parallel link of the modules can take)
PTX KB        the PTX text of the executable
kernels       kernels launched / distinct kernel modules (the ones compiled and loaded)
============  ==================================================================================

Times are the median of ``--repeat`` fresh processes (``--same-process``: one run).  ``--dump
DIR`` writes each workload's PTX (``NAME.ptx``, the modules in order) to compare code
generation before and after a change.  ``--load`` (on a machine with a GPU) also times the
first call's module load (``load``: the driver's JIT, which ptxas stands in for here) and
``first``: trace + compile + load (with a GPU the modules are linked while the program
compiles, ``OURJAX_CUDA_LINK_AT_COMPILE``, so compare this sum).  Environment switches of the
CUDA backend (``OURJAX_CUDA_*``) pass on to the child processes, so an A/B is two runs of this
script.

``--first-call`` times what ``models.py``'s compile column times instead, the wall time of the
first call ``jit(f)(*args)`` up to its results being ready (trace, compile, the driver's JIT,
load, one run), each workload in a fresh process whose driver and context were started by a
tiny program first and whose arguments are already on the device; the median of ``--repeat``
processes.  On a machine with a GPU that is the real thing (``first`` column); without one the
CUDA backend runs on the test suite's stand-in driver (``tests/cuda_fake_driver.py``) whose
linker runs ``ptxas`` on each module, as the driver's JIT would (``first*``: a proxy, nothing
runs).  ``--ab ENV=V[,ENV=V]`` also times every workload with those switches set, the two
settings in alternating processes, and prints the ratio: one command gives a before/after of a
change that has a switch, on the same machine in the same minutes::

    python benchmarks/gpu_compile.py --first-call --only conv_bn_relu,ode_rk4 --repeat 7 \
        --ab OURJAX_CUDA_FOLD=0
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

COLUMNS = ("front", "emit", "llvm", "llvm_cpu", "compile", "cpu", "ptxas", "ptxas_max", "load",
           "first")


def _ptxas_path(given=None):
  for c in (given, os.environ.get("OURJAX_PTXAS"), shutil.which("ptxas"),
            "/usr/local/cuda/bin/ptxas"):
    if c and os.path.isfile(c) and os.access(c, os.X_OK):
      return c
  return None


def ptxas_times(modules, ptxas) -> list:
  """CPU seconds (user + system) of ``ptxas`` for each PTX text (its own ``.target``), one
  after the other (CPU time: a loaded machine stretches the wall time, not this)."""
  import resource
  out = []
  with tempfile.TemporaryDirectory() as d:
    for i, ptx in enumerate(modules):
      m = re.search(r"^\.target (\w+)", ptx, re.M)
      arch = m.group(1) if m else "sm_90"
      src, cub = os.path.join(d, f"m{i}.ptx"), os.path.join(d, f"m{i}.cubin")
      with open(src, "w") as f:
        f.write(ptx)
      r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
      r = subprocess.run([ptxas, f"-arch={arch}", src, "-o", cub], capture_output=True,
                         text=True)
      r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
      out.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
      if r.returncode != 0:
        raise RuntimeError(f"ptxas failed on module {i}:\n{r.stderr[:2000]}")
  return out


def measure(w, ptxas=None, dump=None, load=False) -> dict:
  """One workload's compile, phase by phase (see the module docstring)."""
  import ourjax
  from ourjax import _phases
  f = w["make"](ourjax)
  args = w["inputs"]
  jitted = ourjax.jit(f, backend="cuda")
  c0 = time.process_time()
  t0 = time.perf_counter()
  traced = jitted.trace(*args)
  t1 = time.perf_counter()
  lowered = traced.lower()
  t2 = time.perf_counter()
  times = _phases.Times(w["name"])
  with _phases.collecting(times):
    compiled = lowered.compile()
  t3 = time.perf_counter()
  cpu = time.process_time() - c0
  exe = compiled.runtime_executable()
  ph = {k: v[0] for k, v in times.phases.items()}
  row = {"name": w["name"], "trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2,
         "emit": ph.get("emit", 0.0), "llvm": ph.get("llvm", 0.0),
         "llvm_cpu": sum(ph.get(k, 0.0) for k in ("llvm.parse", "llvm.opt", "llvm.codegen")),
         "kind": type(exe).__name__, "cpu": cpu}
  row["front"] = (t3 - t0) - row["emit"] - row["llvm"]
  mods = list(getattr(exe, "ptx_modules", []) or [])
  row["kernels"] = len(getattr(exe, "kernels", []) or [])
  row["modules"] = len(mods)
  row["ptx_bytes"] = sum(len(p) for p in mods)
  kinds: dict = {}
  for k in getattr(exe, "kernels", []) or []:
    kinds[type(k).__name__] = kinds.get(type(k).__name__, 0) + 1
  row["kinds"] = kinds
  if dump:
    os.makedirs(dump, exist_ok=True)
    with open(os.path.join(dump, w["name"] + ".ptx"), "w") as fh:
      fh.write("\n// ==== module ====\n".join(mods))
  if ptxas and mods:
    ts = ptxas_times(mods, ptxas)
    row["ptxas"], row["ptxas_max"] = sum(ts), max(ts)
    # per module: the kinds of its kernels, its PTX bytes and ptxas seconds (``--modules``)
    names = [[] for _ in mods]
    for k in getattr(exe, "kernels", []) or []:
      entry = getattr(k, "ptx_entry", None)
      if entry is not None and entry[0] < len(mods):
        names[entry[0]].append(type(k).__name__ + _kernel_detail(k))
    row["per_module"] = [[sorted(set(n)), len(p), t] for n, p, t in zip(names, mods, ts)]
  if load and hasattr(exe, "_load"):
    t4 = time.perf_counter()
    exe._load()
    row["load"] = time.perf_counter() - t4
    row["first"] = (t3 - t0) + row["load"]     # (what a first call spends before running)
  return row


def _ptxas_linking_driver(ptxas):
  """The stand-in driver of the test suite (no GPU), its linker running ``ptxas`` on each
  module as the driver's JIT would (the cubin it returns is still the stand-in's)."""
  sys.path.insert(0, os.path.join(HERE, "..", "tests"))
  import cuda_fake_driver

  class PtxasLinking(cuda_fake_driver.FakeDriver):
    def cuLinkComplete(self, state):
      if ptxas:
        ptx = state.ptx.decode()
        m = re.search(r"^\.target (\w+)", ptx, re.M)
        with tempfile.TemporaryDirectory() as d:
          src = os.path.join(d, "m.ptx")
          with open(src, "w") as f:
            f.write(ptx)
          subprocess.run([ptxas, f"-arch={m.group(1) if m else 'sm_90'}", src, "-o",
                          os.path.join(d, "m.cubin")], check=True, capture_output=True)
      return super().cuLinkComplete(state)
  cuda_fake_driver.FakeDriver = PtxasLinking
  return cuda_fake_driver.installed()


def _import_compiler():
  """Imports every module of the compiler (lowering, LLVM and CUDA backends) that a compile
  might import on its first use, as a process that compiled other programs first has (in
  ``models.py`` each workload follows others): the first call is not charged with them."""
  import importlib
  import pkgutil
  import ourjax.backends.cuda
  import ourjax.backends.llvm
  import ourjax.lowering
  for pkg in (ourjax.lowering, ourjax.backends.llvm, ourjax.backends.cuda):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
      try:
        importlib.import_module(m.name)
      except Exception:      # noqa: BLE001  (an optional module whose dependency is missing)
        pass


def measure_first(w, ptxas=None) -> dict:
  """The wall time of a workload's first call (see the module docstring): on a GPU, or on the
  stand-in driver with ``ptxas`` as its JIT when there is none."""
  import contextlib
  import numpy as np
  import ourjax
  from ourjax.backends.cuda import driver
  from run import _block
  real = driver.available()
  ctx = contextlib.nullcontext() if real else _ptxas_linking_driver(ptxas)
  _import_compiler()
  with ctx:
    dev = ourjax.devices("cuda")[0]
    warm = ourjax.jit(lambda x: x * 2.0 + 1.0, backend="cuda")
    _block(warm(ourjax.device_put(np.ones(4, np.float32), dev)))
    f = ourjax.jit(w["make"](ourjax), backend="cuda")
    args = ourjax.tree_util.tree_map(lambda a: ourjax.device_put(a, dev), w["inputs"])
    _block(args)
    t0 = time.perf_counter()
    _block(f(*args))
    first = time.perf_counter() - t0
  return {"name": w["name"], "first": first, "real_gpu": real}


def _kernel_detail(k) -> str:
  """A WgmmaDot's form: (mode, Q, warpgroups, M x N x K)."""
  spec = getattr(k, "spec", None)
  if type(k).__name__ != "WgmmaDot" or spec is None:
    return ""
  return f"({k.mode},{k.Q},{k.WG},{spec.B}x{spec.M}x{spec.N}x{spec.K})"


def warm_up():
  """Compile a tiny program first, so that the imports and LLVM's set-up that any first
  compile of a process pays are not charged to the workload (``_import_compiler``: nor the
  compiler modules a workload's compile would import on their first use)."""
  import numpy as np
  import ourjax
  _import_compiler()
  ourjax.jit(lambda x: x * 2.0 + 1.0, backend="cuda").lower(np.ones(4, np.float32)).compile()


def _child(name, small, ptxas, dump, load, first=False):
  import models
  w = next(x for x in models.workloads("cuda", small) if x["name"] == name)
  if first:
    print("ROW " + json.dumps(measure_first(w, ptxas)), flush=True)
    return
  warm_up()
  print("ROW " + json.dumps(measure(w, ptxas, dump, load)), flush=True)


def _run_child(name, a, ptxas, env=None) -> dict:
  cmd = [sys.executable, os.path.abspath(__file__), "--child", name]
  if a.first_call:
    cmd.append("--first-call")
  if a.small:
    cmd.append("--small")
  if ptxas:
    cmd += ["--ptxas", ptxas]
  else:
    cmd.append("--no-ptxas")
  if a.dump:
    cmd += ["--dump", a.dump]
  if a.load:
    cmd.append("--load")
  r = subprocess.run(cmd, capture_output=True, text=True,
                     env=None if env is None else dict(os.environ, **env))
  for line in r.stdout.splitlines():
    if line.startswith("ROW "):
      return json.loads(line[4:])
  raise RuntimeError(f"{name}: the child failed:\n{r.stderr[-3000:]}")


def _median_row(rows):
  out = dict(rows[0])
  for k in COLUMNS + ("trace", "lower"):
    vals = [r[k] for r in rows if k in r]
    if vals:
      out[k] = statistics.median(vals)
  return out


HEADER = (f"{'workload':24s} {'front':>6s} {'emit':>6s} {'llvm':>6s} {'llvm cpu':>8s} "
          f"{'compile':>7s} {'cpu':>6s} {'ptxas':>6s} {'ptxas max':>9s} {'load':>6s} {'PTX KB':>7s} "
          f"{'kernels':>9s} {'first':>6s}")


def format_row(r) -> str:
  def s(k, width):
    return f"{r[k]:{width}.3f}" if k in r else f"{'-':>{width}s}"
  return (f"{r['name']:24s} {s('front', 6)} {s('emit', 6)} {s('llvm', 6)} {s('llvm_cpu', 8)} "
          f"{s('compile', 7)} {s('cpu', 6)} {s('ptxas', 6)} {s('ptxas_max', 9)} {s('load', 6)} "
          f"{r.get('ptx_bytes', 0) / 1024:7.0f} {r.get('kernels', 0):>4d}/{r.get('modules', 0):<4d}"
          f" {s('first', 6)}")


def _print_modules(row, on):
  if on:
    for i, (kinds, nbytes, t) in enumerate(row.get("per_module", [])):
      print(f"    module {i:3d}: {nbytes / 1024:6.1f} KB  ptxas {t:.3f} s  {' '.join(kinds)}")


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="", help="comma-separated workload or family names")
  ap.add_argument("--repeat", type=int, default=1, help="fresh runs per workload (median)")
  ap.add_argument("--ptxas", default=None, help="the ptxas to run (default: on PATH)")
  ap.add_argument("--no-ptxas", action="store_true", help="do not run ptxas")
  ap.add_argument("--dump", default="", help="write each workload's PTX to DIR/NAME.ptx")
  ap.add_argument("--json", default="", help="also write the rows as JSON")
  ap.add_argument("--same-process", action="store_true",
                  help="all workloads in this process, in order (caches carry over)")
  ap.add_argument("--load", action="store_true", help="also time the module load (needs a GPU)")
  ap.add_argument("--small", action="store_true", help="the tiny sizes (a quick check)")
  ap.add_argument("--modules", action="store_true",
                  help="also list each workload's PTX modules: kernels, KB, ptxas seconds")
  ap.add_argument("--first-call", action="store_true",
                  help="time the first call instead (on the stand-in driver with ptxas as its "
                  "JIT where there is no GPU)")
  ap.add_argument("--ab", default="",
                  help="with --first-call: also time every workload with these switches "
                  "(ENV=V[,ENV=V]), alternating processes")
  ap.add_argument("--child", default="", help=argparse.SUPPRESS)
  a = ap.parse_args(argv)
  os.environ["OURJAX_CACHE_DIR"] = "off"
  ptxas = None if a.no_ptxas else _ptxas_path(a.ptxas)
  if a.child:
    _child(a.child, a.small, ptxas, a.dump or None, a.load, a.first_call)
    return 0
  if a.first_call:
    return _first_call_table(a, ptxas)
  import models
  only = set(filter(None, a.only.split(","))) or None
  names = [w["name"] for w in models.workloads("cuda", a.small, only)]
  if not names:
    ap.error(f"no workload matches {a.only!r}")
  if ptxas is None and not a.no_ptxas:
    print("(no ptxas found: the ptxas columns are left out)", file=sys.stderr)
  env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("OURJAX_CUDA")}
  print(f"# cuda compile phases, s ({os.cpu_count()} cores; median of {a.repeat}; "
        f"{'one process' if a.same_process else 'a process per workload'}; "
        f"switches: {env or 'defaults'})")
  print(HEADER, flush=True)
  rows = []
  if a.same_process:      # (once: a second round would find the first one's kernels)
    warm_up()
    for w in models.workloads("cuda", a.small, only):
      rows.append(measure(w, ptxas, a.dump or None, a.load))
      print(format_row(rows[-1]), flush=True)
      _print_modules(rows[-1], a.modules)
  else:
    for name in names:
      rows.append(_median_row([_run_child(name, a, ptxas) for _ in range(max(1, a.repeat))]))
      print(format_row(rows[-1]), flush=True)
      _print_modules(rows[-1], a.modules)
  tot = {k: sum(r.get(k, 0.0) for r in rows) for k in COLUMNS}
  tot.update(name="total", ptx_bytes=sum(r["ptx_bytes"] for r in rows),
             kernels=sum(r["kernels"] for r in rows), modules=sum(r["modules"] for r in rows))
  print(format_row({k: v for k, v in tot.items() if v or k in ("name", "kernels", "modules")}))
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"env": env, "rows": rows}, f, indent=1)
  return 0


def _first_call_table(a, ptxas) -> int:
  """``--first-call`` (and ``--ab``): one line per workload, medians of ``--repeat`` processes."""
  import models
  only = set(filter(None, a.only.split(","))) or None
  names = [w["name"] for w in models.workloads("cuda", a.small, only)]
  if not names:
    raise SystemExit(f"no workload matches {a.only!r}")
  ab = dict(kv.split("=", 1) for kv in filter(None, a.ab.split(",")))
  settings = [("default", {})] + ([(a.ab, ab)] if ab else [])
  env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("OURJAX_CUDA")}
  print(f"# first call, s: median of {a.repeat} fresh processes ({os.cpu_count()} cores; "
        f"switches: {env or 'defaults'}); first* = no GPU: the stand-in driver, ptxas as its "
        f"JIT{'' if ptxas else ' (no ptxas found: none run)'}")
  head = f"{'workload':24s} " + " ".join(f"{n[:22]:>22s}" for n, _ in settings)
  print(head + ("   ratio" if ab else ""), flush=True)
  rows = []
  for name in names:
    got = {n: [] for n, _ in settings}
    for _ in range(max(1, a.repeat)):
      for n, e in settings:                       # (alternating: the same machine state)
        got[n].append(_run_child(name, a, ptxas, e))
    med = {n: statistics.median(r["first"] for r in got[n]) for n, _ in settings}
    star = "" if got["default"][0].get("real_gpu") else "*"
    line = f"{name:24s} " + " ".join(f"{med[n]:21.3f}{star or ' '}" for n, _ in settings)
    if ab:
      line += f"  {med[a.ab] / med['default']:6.2f}"
    print(line, flush=True)
    rows.append({"name": name, **{f"first[{n}]": med[n] for n, _ in settings}})
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"env": env, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
