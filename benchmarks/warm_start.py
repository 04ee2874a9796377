"""Warm starts: the first call of a models.py workload in a new process whose compilation cache
already holds it, ourjax (its disk cache) against JAX (its persistent cache, every entry kept).

    python benchmarks/warm_start.py [--only transformer,mlp] [--target cpu] [--rounds 3]

For each workload and library, a first process fills a fresh cache directory; then ``--rounds``
new processes each time their first call (trace, cache lookup, load, one run, waited for) and
report it with the process's CPU time over the same span.  Medians; the machine is named.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {here!r})
lib_name, name, target, cache = sys.argv[1:5]
if lib_name == "jax":
  import jax as lib
  lib.config.update("jax_compilation_cache_dir", cache)
  lib.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  lib.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  dev = lib.devices("gpu" if target == "cuda" else "cpu")[0]
else:
  os.environ["OURJAX_CACHE_DIR"] = cache
  import ourjax as lib
  dev = lib.devices(target)[0]
import models
w = models.workloads(target, only={{name}})[0]
# (ourjax's jit compiles for its default backend unless told: on a GPU host, the GPU)
f = lib.jit(w["make"](lib)) if lib_name == "jax" else lib.jit(w["make"](lib), backend=target)
args = lib.tree_util.tree_map(lambda a: lib.device_put(a, dev), w["inputs"])
t0, c0 = time.perf_counter(), time.process_time()
lib.block_until_ready(f(*args))
print(json.dumps({{"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}))
"""


def _run(lib, name, target, cache):
  env = dict(os.environ)
  env.pop("PYTHONDONTWRITEBYTECODE", None)    # (imports as a user's installed package runs them)
  out = subprocess.run([sys.executable, "-c", _CHILD.format(here=HERE), lib, name, target, cache],
                       capture_output=True, text=True, env=env, timeout=900)
  if out.returncode:
    raise RuntimeError(f"{lib} {name}: {out.stderr[-2000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
  sys.path.insert(0, HERE)
  import models
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="")
  ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--no-jax", action="store_true")
  a = ap.parse_args(argv)
  libs = ["ourjax"]
  if not a.no_jax:
    try:
      import jax  # noqa: F401
      libs.append("jax")
    except ImportError:
      pass
  only = set(a.only.split(",")) if a.only else None
  names = [w["name"] for w in models.workloads(a.target, only=only)]
  print(json.dumps(models.machine(a.target, "jax" in libs)))
  print(f"{'workload':24s}" + "".join(f"{lib + ' ms':>14s}{lib + ' cpu ms':>16s}" for lib in libs))
  for name in names:
    row = f"{name:24s}"
    for lib in libs:
      with tempfile.TemporaryDirectory() as cache:
        _run(lib, name, a.target, cache)                       # fills the cache
        runs = [_run(lib, name, a.target, cache) for _ in range(a.rounds)]
      row += (f"{statistics.median(r['wall'] for r in runs) * 1e3:14.1f}"
              f"{statistics.median(r['cpu'] for r in runs) * 1e3:16.1f}")
    print(row, flush=True)


if __name__ == "__main__":
  main()
