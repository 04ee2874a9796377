"""What a planned kernel is, for people: the profiler's description of one kernel.

    describe(kernel) -> {"name", "kind", "hlo", "group", "bytes", "flops"}

* ``kind``: the kernel's class (``LoopKernel``, ``DotKernel``, ``Elementwise``, ``WgmmaDot``...).
* ``hlo``: the HLO instructions it computes, e.g. ``fusion.3: dot.1 add.2 maximum.4`` (the
  instruction the planner was planning when it made the kernel, then the instructions inside
  it that this kernel evaluates; parameters and constants left out).  The planners tag each
  kernel with that instruction (``kernel.hlo_group``) and, for a GPU kernel translated from a
  planned one, the planned kernel (``kernel.hlo_source``).
* ``bytes``: the sizes of the buffers it reads and writes, each once (scratch space left out):
  an estimate of its memory traffic, exact for a kernel that streams each buffer once.
* ``flops``: ``2*B*M*N*K`` per dot, ``2 * outputs * window * input features`` per
  convolution and ``2*B*Tq*Tk*(D + Dv)`` per attention it computes (a causal one's skipped
  tiles counted too); 0 for kernels without contractions.
"""
from __future__ import annotations

import math

from ourjax.lowering import hlo

__all__ = ["describe", "covered", "contraction_flops", "same_origin"]

#: Kernels that finish or prepare a contraction that another kernel counts.
_NO_FLOPS = {"SplitKSum", "StridedTranspose"}

_ROOT_ATTRS = ("dot", "reduce", "sort", "scatter", "dus", "root")   # root: concat.ConcatKernel
_PAIR_ATTRS = ("outputs", "inner_outs", "outer_outs")
_LIST_ATTRS = ("prefetch", "prefetch_outer", "prefetch_elem", "reduces")


def _roots_and_leaves(kernel):
  roots, leaves = [], {}
  for a in _ROOT_ATTRS:
    x = getattr(kernel, a, None)
    if isinstance(x, hlo.Instruction):
      roots.append(x)
  for a in _PAIR_ATTRS:
    for pair in getattr(kernel, a, None) or ():
      if isinstance(pair, tuple) and pair and isinstance(pair[0], hlo.Instruction):
        roots.append(pair[0])
  for a in _LIST_ATTRS:
    roots.extend(x for x in getattr(kernel, a, None) or () if isinstance(x, hlo.Instruction))
  epi = getattr(kernel, "epilogue", None)
  if epi is not None:
    roots.extend(i for i, _ in getattr(epi, "outputs", ()))
    leaves.update(getattr(epi, "leafmap", {}) or {})
  lm = getattr(kernel, "leafmap", None)
  if isinstance(lm, dict):
    leaves.update(lm)
  return roots, leaves


def _inside(group):
  """``ok(instr)``: whether ``instr`` belongs to the planned group ``group`` (the instructions
  of a fusion's computation, or the unfused instruction itself; instructions the planner made
  up, such as a widened dot, belong to every group)."""
  if group is None:
    return lambda x: True
  if group.opcode == "fusion":
    comp = group.attrs["calls"]
    return lambda x: x.parent is comp or x.parent is None
  return lambda x: x is group or x.parent is None


def covered(kernel) -> list:
  """The HLO instructions ``kernel`` evaluates (parameters and constants left out), in the
  order of their computation where known."""
  inner = getattr(kernel, "inner", None)          # a GPU kernel wrapping a planned one
  if inner is not None and not _roots_and_leaves(kernel)[0]:
    kernel = inner
  roots, leaves = _roots_and_leaves(kernel)
  ok = _inside(_group_of(kernel))
  seen, out, stack = set(), [], [r for r in roots if ok(r)]
  root_ids = {id(r) for r in roots}
  while stack:
    x = stack.pop()
    if id(x) in seen:
      continue
    seen.add(id(x))
    if (x in leaves and id(x) not in root_ids) or not ok(x):
      continue
    if x.opcode not in ("parameter", "constant"):
      out.append(x)
    stack.extend(x.operands)
  if not out:
    src = getattr(kernel, "hlo_source", None)
    if src is not None and src is not kernel:
      return covered(src)
    return []
  order = {}
  for x in out:
    comp = x.parent
    if comp is not None and id(comp) not in order:
      order[id(comp)] = {id(i): k for k, i in enumerate(comp.instructions)}
  return sorted(out, key=lambda x: (order.get(id(x.parent), {}).get(id(x), 1 << 30), x.name or ""))


def contraction_flops(instr) -> int:
  """2*B*M*N*K of a dot, 2 * outputs * window * input features of a convolution, the two
  products of an attention, else 0."""
  if instr.opcode == "dot":
    lhs = instr.operands[0].dims
    k = math.prod(lhs[d] for d in instr.attrs.get("lhs_contracting_dims", ()))
    return 2 * instr.shape.size * k
  if instr.opcode == "attention":     # q kᵀ and P v: 2*B*Tq*Tk*(D + Dv)
    q, k, v = (o.dims for o in instr.operands[:3])
    return 2 * math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1])
  if instr.opcode == "convolution":
    _, rspec, _ = instr.attrs["dimension_numbers"]
    rhs = instr.operands[1].dims
    return 2 * instr.shape.size * math.prod(rhs[d] for d in rspec[2:]) * rhs[rspec[1]]
  return 0


def same_origin(new, old):
  """``new`` (a kernel made from ``old``: rebuilt, folded or chained) with ``old``'s tags
  (``hlo_group``, ``hlo_source``)."""
  for a in ("hlo_group", "hlo_source"):
    if hasattr(old, a):
      setattr(new, a, getattr(old, a))
  return new


def _group_of(kernel):
  g = getattr(kernel, "hlo_group", None)
  if g is None:
    src = getattr(kernel, "hlo_source", None)
    g = getattr(src, "hlo_group", None) if src is not None else None
  return g


def describe(kernel) -> dict:
  """The profiler's record of ``kernel`` (see the module docstring); JSON-serialisable."""
  kind = type(kernel).__name__
  parts = getattr(kernel, "parts", None)
  if isinstance(parts, list) and parts and all(hasattr(p, "writes") for p in parts):
    # kernels launched as one (cuda/horizontal.py)
    ds = [describe(p) for p in parts]
    return {"name": kernel.name, "kind": kind,
            "hlo": " + ".join(d["hlo"] for d in ds),
            "group": ds[0]["group"], "bytes": sum(d["bytes"] for d in ds),
            "flops": sum(d["flops"] for d in ds)}
  stages = getattr(kernel, "stages", None)
  if isinstance(stages, list) and stages and all(hasattr(st, "kernel") for st in stages):
    # elementwise kernels run one after another in one launch (cuda/stencil.py): theirs is
    # the HLO, the launch's own buffers the traffic (intermediates stay on chip)
    ds = [describe(st.kernel) for st in stages]
    return {"name": kernel.name, "kind": kind, "hlo": " > ".join(d["hlo"] for d in ds),
            "group": ds[0]["group"], "bytes": _traffic(kernel),
            "flops": sum(d["flops"] for d in ds)}
  instrs = covered(kernel)
  group = _group_of(kernel)
  names = [i.name or i.opcode for i in instrs]
  if group is not None and group.opcode == "fusion":
    text = f"{group.name}: " + " ".join(names)
  elif names:
    text = " ".join(names)
  elif getattr(kernel, "is_copy", False) or kind == "CopyKernel":
    dst = getattr(kernel, "dst", None)
    text = f"copy into {dst.name}" if dst is not None and dst.name else "copy"
    if group is not None:
      text += f" ({group.name})"
  else:
    text = group.name if group is not None else ""
  if not text:
    text = "writes " + ", ".join(w.name for w in kernel.writes if w.name)
  if group is not None and group.opcode == "attention" and group not in instrs:
    instrs = instrs + [group]       # (an attention kernel computes its instruction whole)
  flops = 0 if kind in _NO_FLOPS else sum(contraction_flops(i) for i in instrs)
  return {"name": kernel.name, "kind": kind, "hlo": text,
          "group": group.name if group is not None else None,
          "bytes": _traffic(kernel), "flops": int(flops)}


def _traffic(kernel) -> int:
  """The bytes of the buffers ``kernel`` reads and writes, each once (scratch left out)."""
  seen, nbytes = set(), 0
  for b in list(kernel.reads) + list(kernel.writes):
    if id(b) not in seen and getattr(b, "kind", "") != "scratch":
      seen.add(id(b))
      nbytes += int(b.nbytes)
  return nbytes
