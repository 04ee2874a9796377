"""SASS instructions per element of the CUDA backend's kernels, without a GPU.

    python benchmarks/sass_count.py [--only NAME[,NAME]] [--arch sm_90] [--nvdisasm PATH]
        [--dump DIR]

Each workload is jitted for the cuda backend, its PTX assembled with ``ptxas -arch=sm_90`` and
the cubin disassembled with ``nvdisasm`` (or ``cuobjdump -sass``; found on PATH, in
``$CUDA_HOME/bin``, or given by ``--nvdisasm`` / ``$OURJAX_NVDISASM``).  Memory-bound kernels
run at copy bandwidth only while the instructions an element costs stay below the SM's budget,
so the number that matters is the length of the main loop's *hot path* per element:

- the main loop of a kernel is the backward branch whose range stores the most bytes (the
  vector loop of ``Elementwise``, the row loop of ``RowReduce``); elements per iteration =
  stored bytes / 4 (float32 outputs);
- the hot path walks that range from its head: a conditional forward branch is taken when the
  code it skips is cold (calls a slow path, e.g. the IEEE division's, or an ``accurate``
  function, or uses float64), else it falls through; calls into the module's own functions
  (e.g. inline math's ``patch``) add the callee's hot path up to its return.

The table also gives the static size of the loop and the widest global load and store in it
(128: 16-byte vector accesses).  ``--dump DIR`` writes each workload's PTX and SASS there.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402


def _workloads():
  import ourjax.numpy as jnp
  from ourjax import nn
  n = 1 << 20
  v = lambda r: r.standard_normal(n, np.float32)  # noqa: E731
  rows = lambda r: r.standard_normal((8192, 4096), np.float32)  # noqa: E731

  def ln(x, g, b):
    m = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / jnp.sqrt(var + 1e-5) * g + b

  return [
      ("axpy", lambda x, y: x * 2.5 + y, lambda r: [v(r), v(r)]),
      ("gelu", lambda x: nn.gelu(x, approximate=True), lambda r: [v(r)]),
      ("gelu_erf", lambda x: nn.gelu(x, approximate=False), lambda r: [v(r)]),
      ("chain", lambda x, y: jnp.sin(x) * 2.0 + y * y - 1.0, lambda r: [v(r), v(r)]),
      ("sin", jnp.sin, lambda r: [v(r)]),
      ("cos", jnp.cos, lambda r: [v(r)]),
      ("tanh", jnp.tanh, lambda r: [v(r)]),
      ("logistic", nn.sigmoid, lambda r: [v(r)]),
      ("exp", jnp.exp, lambda r: [v(r)]),
      ("log", jnp.log, lambda r: [v(r)]),
      ("erf", lambda x: __import__("ourjax").lax.erf(x), lambda r: [v(r)]),
      ("softmax", lambda x: nn.softmax(x, axis=-1), lambda r: [rows(r)]),
      ("layernorm", ln, lambda r: [rows(r), r.standard_normal(4096, np.float32),
                                   r.standard_normal(4096, np.float32)]),
  ]


# ---------------------------------------------------------------------------------------------
# tools

def find_disassembler(given=None):
  """(kind, path): ("nvdisasm", p) or ("cuobjdump", p), or (None, None)."""
  cands = [given, os.environ.get("OURJAX_NVDISASM")]
  for tool in ("nvdisasm", "cuobjdump"):
    cands += [shutil.which(tool)]
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
      if root:
        cands.append(os.path.join(root, "bin", tool))
  for c in cands:
    if c and os.path.isfile(c) and os.access(c, os.X_OK):
      return ("cuobjdump" if "cuobjdump" in os.path.basename(c) else "nvdisasm"), c
  return None, None


def sass_of(ptx: str, arch: str, tool) -> str:
  kind, path = tool
  with tempfile.TemporaryDirectory() as d:
    src, cub = os.path.join(d, "m.ptx"), os.path.join(d, "m.cubin")
    with open(src, "w") as f:
      f.write(ptx)
    m = re.search(r"^\.target (\w+)", ptx, re.M)
    if m and m.group(1).endswith("a"):      # wgmma modules need their own target
      arch = m.group(1)
    subprocess.run(["ptxas", f"-arch={arch}", src, "-o", cub], check=True, capture_output=True,
                   text=True)
    cmd = [path, "-c", cub] if kind == "nvdisasm" else [path, "-sass", cub]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


# ---------------------------------------------------------------------------------------------
# parsing

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+|[\w$.]+):\s*$")
_FUNC = re.compile(r"^\s*\.text\.([\w$]+):")
_TARGET = re.compile(r"`\(([^)]+)\)")


class Function:
  """Instructions (address, text) and label addresses of one SASS function."""

  def __init__(self, name):
    self.name, self.ins, self.labels = name, [], {}

  def at(self, addr):
    return self.index[addr]

  def finish(self):
    self.index = {a: i for i, (a, _) in enumerate(self.ins)}


def parse(sass: str) -> dict:
  """{function name: Function}; labels map to the address of the next instruction.  cuobjdump
  names labels by address (``.L_x_N`` in nvdisasm); both are handled."""
  funcs, cur, pending = {}, None, []
  for line in sass.splitlines():
    m = _FUNC.match(line)
    if m:
      cur = funcs[m.group(1)] = Function(m.group(1))
      pending = [m.group(1)]
      continue
    if cur is None:
      continue
    m = _LABEL.match(line)
    if m:
      pending.append(m.group(1))
      continue
    m = _INSTR.search(line)
    if m:
      addr = int(m.group(1), 16)
      for lab in pending:
        cur.labels[lab] = addr
      pending = []
      cur.ins.append((addr, m.group(2)))
  for f in funcs.values():
    f.finish()
  return funcs


def _target(f: Function, text: str, funcs):
  """Branch/call target of ``text``: (function, address)."""
  m = _TARGET.search(text)
  if not m:
    return None, None
  lab = m.group(1)
  for name in (lab, lab.lstrip("$")):
    if name in f.labels:
      return f, f.labels[name]
  for g in funcs.values():            # a call into another section
    if g.name == lab or g.name.endswith(lab) or lab.endswith(g.name):
      return g, g.ins[0][0]
  if lab.startswith("0x"):
    return f, int(lab, 16)
  return None, None


def _is_cold(f, lo, hi, funcs):
  """Instructions f[lo:hi] (indices) are a rare path: a slow-path/accurate call or float64."""
  for _, t in f.ins[lo:hi]:
    op = t.split()[0] if not t.startswith("@") else t.split()[1]
    if op.startswith("CALL") and ("slowpath" in t or "accurate" in t):
      return True
    if re.match(r"(DFMA|DADD|DMUL|DSETP|F2F\.F64|F2F\.F32\.F64|I2F\.F64)", op):
      return True
  return False


def hot_path(f: Function, start: int, stop, funcs, depth=0) -> int:
  """Instructions executed from address ``start`` to ``stop`` (an address, inclusive; None: the
  first RET/EXIT), by the rules of the module docstring."""
  i, n, end = f.at(start), 0, f.at(stop) if stop is not None else len(f.ins) - 1
  seen = set()
  while i <= end and i not in seen:
    seen.add(i)
    addr, t = f.ins[i]
    n += 1
    pred = t.startswith("@")
    op = t.split()[1] if pred else t.split()[0]
    if stop is not None and addr == stop:
      break
    if op.startswith("RET") or (op == "EXIT" and not pred):
      break
    if op.startswith("CALL"):
      g, a = _target(f, t, funcs)
      if g is not None and depth < 4 and not _is_cold(f, i, i + 1, funcs):
        n += hot_path(g, a, None, funcs, depth + 1)
      i += 1
      continue
    if op.startswith("BRA"):
      g, a = _target(f, t, funcs)
      if g is f and a is not None and a > addr and a in f.index and f.at(a) <= end:
        j = f.at(a)
        if not pred or _is_cold(f, i + 1, j, funcs):
          i = j
          continue
      elif not pred:
        break
    i += 1
  return n


def loops(f: Function):
  """(head address, back-branch address) of every backward branch."""
  out = []
  for addr, t in f.ins:
    op = t.split()[1] if t.startswith("@") else t.split()[0]
    if op.startswith("BRA"):
      g, a = _target(f, t, {})
      if g is f and a is not None and a <= addr:
        out.append((a, addr))
  return out


_WIDTH = re.compile(r"\.(64|128)\b")


def _mem(t):
  """(kind, bytes) for a global load/store instruction, else None."""
  op = t.split()[1] if t.startswith("@") else t.split()[0]
  if not (op.startswith("LDG") or op.startswith("STG")):
    return None
  m = _WIDTH.search(op)
  bits = int(m.group(1)) if m else 32
  if ".U8" in op or ".S8" in op:
    bits = 8
  elif ".U16" in op or ".S16" in op:
    bits = 16
  return op[:3], bits // 8


def main_loop(f: Function):
  """The loop whose range stores the most bytes: dict with its figures, or None."""
  best = None
  for head, back in loops(f):
    lo, hi = f.at(head), f.at(back)
    st = [_mem(t) for _, t in f.ins[lo:hi + 1]]
    stored = sum(m[1] for m in st if m and m[0] == "STG")
    if not stored:
      continue
    if best is None or stored > best["stored"]:
      widths = {k: max([m[1] * 8 for m in st if m and m[0] == k], default=0)
                for k in ("LDG", "STG")}
      best = dict(head=head, back=back, stored=stored, static=hi - lo + 1, ldg=widths["LDG"],
                  stg=widths["STG"])
  return best


def count(sass: str, funcs=None):
  """[(kernel name, figures or None)] for the entry functions of ``sass``."""
  funcs = funcs or parse(sass)
  out = []
  for name, f in funcs.items():
    if "$" in name:                      # a sub-function (called), not a kernel
      continue
    ml = main_loop(f)
    if ml is not None:
      ml["hot"] = hot_path(f, ml["head"], ml["back"], funcs)
      ml["elems"] = ml["stored"] // 4
    out.append((name, ml))
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--only", default="", help="comma-separated workload names")
  ap.add_argument("--arch", default="sm_90")
  ap.add_argument("--nvdisasm", default=None, help="path of nvdisasm or cuobjdump")
  ap.add_argument("--dump", default=None, help="directory for each workload's PTX and SASS")
  args = ap.parse_args(argv)
  import ourjax
  tool = find_disassembler(args.nvdisasm)
  if tool[0] is None:
    sys.exit("sass_count: neither nvdisasm nor cuobjdump found (give --nvdisasm PATH)")
  if shutil.which("ptxas") is None:
    sys.exit("sass_count: ptxas is not on PATH")
  only = set(filter(None, args.only.split(",")))
  rng = np.random.default_rng(0)
  print(f"{'workload':<11} {'kernel':<10} {'per elem':>8} {'hot':>5} {'elems':>5} "
        f"{'static':>6} {'ldg':>4} {'stg':>4}")
  for name, fn, make in _workloads():
    if only and name not in only:
      continue
    ptx = ourjax.jit(fn, backend="cuda").lower(*make(rng)).compile().as_text(dialect="ptx")
    sass = sass_of(ptx, args.arch, tool)
    if args.dump:
      os.makedirs(args.dump, exist_ok=True)
      for ext, text in (("ptx", ptx), ("sass", sass)):
        with open(os.path.join(args.dump, f"{name}.{ext}"), "w") as fh:
          fh.write(text)
    for kname, ml in count(sass):
      if ml is None:
        print(f"{name:<11} {kname:<10} {'(no loop storing to global memory)':>30}")
        continue
      print(f"{name:<11} {kname:<10} {ml['hot'] / ml['elems']:>8.1f} {ml['hot']:>5} "
            f"{ml['elems']:>5} {ml['static']:>6} {ml['ldg']:>4} {ml['stg']:>4}")


if __name__ == "__main__":
  main()
