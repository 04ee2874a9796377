"""Attention as one instruction: ``softmax(q kᵀ · scale) v`` becomes ``attention(q, k, v)``, which
a backend with a fused attention kernel (the GPU's flash attention, ``backends/cuda/attention.py``)
computes without ever writing the ``Tq x Tk`` scores or probabilities to memory.

The pass looks, in every computation, for a ``dot`` whose left operand is a softmax over its
last dimension of the scores of another ``dot``, in the shape JAX's ``nn.softmax`` (and every
ordinary spelling of attention) lowers to::

    d = dot(q, k)            q [B..., Tq, D], k [B..., Tk, D] (dims in any order): D contracted
    s = d * c  |  d / c  |  d        c a scalar constant (the scale)
    m = max(-inf, reduce_max(s))     (or reduce_max(s) alone), over the last dimension
    e = exp(s - broadcast(m))
    a = e / broadcast(reduce_sum(e))
    o = dot(a, v)            v [B..., Tk, Dv] (dims in any order): o [B..., Tq, Dv]

and replaces ``o`` with ``attention(q, k, v), scale=c``, each operand transposed to
``[B..., T, D]`` where it is stored otherwise (a copy of q, k or v: a fraction of the
attention's own traffic).  It rewrites only when nothing else
reads ``d``, ``s``, ``m``, ``e`` or ``a`` (a training step's backward pass reads the
probabilities: there the scores are needed anyway), and when the backend's kernel takes the
match (``Module.fused_attention(dtype, q_dims, k_dims, v_dims, dots)``: None, or the reason it does not, e.g. an
element type, a head size, a dot asking for the highest precision; a module without it is left
alone).  Each match and each near miss is noted with its reason
(``module.note("attention", ...)``).

It runs once, among the native backends' late passes, before ``dot_layout`` (which would move
the dots' operands into other layouts) and fusion (which would fuse the softmax).  The
reference semantics of ``attention`` are the unfused computation's (``reference.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ourjax.lowering.hlo import Computation, Instruction, Module, Shape, dtype_name

PASS = "attention"


def _scalar_constant(x: Instruction):
  """The value of a scalar constant, or of a broadcast of one; None otherwise."""
  if x.opcode == "broadcast":
    x = x.operands[0]
  if x.opcode == "constant" and x.attrs["value"].ndim == 0:
    return float(x.attrs["value"])
  return None


def _row_broadcast(x: Instruction, rank: int):
  """The operand of ``x`` when ``x`` broadcasts a per-row value (rank-1 dims, the last dim
  added) to the full ``rank``; None otherwise."""
  if x.opcode != "broadcast" or tuple(x.attrs["dimensions"]) != tuple(range(rank - 1)):
    return None
  return x.operands[0]


def _row_reduce(x: Instruction, opcode: str, rank: int, init: float):
  """The operand of ``x`` when ``x`` reduces it over its last dimension with ``opcode``
  (starting from ``init``); None otherwise."""
  if x.opcode != "reduce" or len(x.operands) != 2 or \
     tuple(x.attrs["dimensions"]) != (rank - 1,):
    return None
  body = x.attrs["to_apply"]
  if body.root.opcode != opcode or len(body.instructions) != 3:
    return None
  if _scalar_constant(x.operands[1]) != init:
    return None
  return x.operands[0]


def _perms(d: Instruction, nb: int, rhs_contract_first: bool = False):
  """For a dot of two rank ``nb + 2`` operands over ``nb`` batch dims and one contracted dim:
  the permutation of each operand to ``[batch..., free, contracted]`` (the right one's to
  ``[batch..., contracted, free]`` with ``rhs_contract_first``), batch dims in the order the
  dot pairs them; None for any other dot."""
  if d.opcode != "dot":
    return None
  a = d.attrs
  r = nb + 2
  out = []
  for x, bk, ck, first in ((d.operands[0], "lhs_batch_dims", "lhs_contracting_dims", False),
                           (d.operands[1], "rhs_batch_dims", "rhs_contracting_dims",
                            rhs_contract_first)):
    bd, cd = tuple(a[bk]), tuple(a[ck])
    if x.shape.rank != r or len(bd) != nb or len(cd) != 1:
      return None
    (free,) = [i for i in range(r) if i not in bd and i not in cd]
    out.append(bd + ((cd[0], free) if first else (free, cd[0])))
  return tuple(out)


def match(o: Instruction):
  """``(q, k, v, scale, inner, perms)`` when ``o`` is the second dot of an attention (module
  docstring), ``inner`` the instructions it replaces (besides ``o``) and ``perms`` the
  permutations of q, k and v to ``[B..., T, D]``; else a string saying why not, or None when
  ``o`` is no candidate at all (not a dot of probabilities)."""
  if o.opcode != "dot":
    return None
  nb = len(o.attrs["lhs_batch_dims"])
  rank = nb + 2
  pv = _perms(o, nb, rhs_contract_first=True)
  if pv is None or pv[0] != tuple(range(rank)):   # (probabilities [B..., Tq, Tk] as they are)
    return None
  a, v = o.operands
  if a.opcode != "divide":
    return None
  e, zb = a.operands
  z = _row_broadcast(zb, rank)
  if z is None or _row_reduce(z, "add", rank, 0.0) is not e or e.opcode != "exponential":
    return None
  sub = e.operands[0]
  if sub.opcode != "subtract":
    return None
  s, mb = sub.operands
  m = _row_broadcast(mb, rank)
  if m is None:
    return None
  inner = [a, zb, z, e, sub, mb, m]
  if m.opcode == "maximum":
    lo, hi = m.operands
    if _scalar_constant(lo) != -math.inf:
      lo, hi = hi, lo
    if _scalar_constant(lo) != -math.inf:
      return None
    if lo.opcode == "broadcast":
      inner.append(lo)
    m = hi
    inner.append(m)
  if _row_reduce(m, "maximum", rank, -math.inf) is not s:
    return None
  scale = 1.0
  d = s
  if s.opcode in ("multiply", "divide"):
    x, y = s.operands
    c = _scalar_constant(y)
    if c is None and s.opcode == "multiply":
      x, y = y, x
      c = _scalar_constant(y)
    if c is None:
      return "the scores' scale is not a scalar constant"
    scale = c if s.opcode == "multiply" else 1.0 / c
    d = x
    inner += [s] + ([y] if y.opcode == "broadcast" else [])
  qk = _perms(d, nb)
  if qk is None:
    return "the scores are not a dot of q and k over their batch dims and one head dim"
  inner.append(d)
  q, k = d.operands
  perms = (qk[0], qk[1], pv[1])
  (tq, dq), (tk, dk), (tv, _) = [[x.dims[i] for i in p[nb:]] for x, p in zip((q, k, v), perms)]
  if dq != dk or tk != tv:
    return "q, k and v disagree in their sizes"
  # nothing outside reads what the fused kernel never writes
  mine = set(inner) | {o}
  for x in inner:
    if any(u not in mine for u in x.users) or x is x.parent.root:
      return f"%{x.name} is read elsewhere (the scores or probabilities are needed)"
  return q, k, v, scale, inner, perms


def _canonical(comp: Computation, x: Instruction, perm, before: Instruction):
  """``x`` as ``[B..., T, D]``: itself, or its transpose by ``perm``."""
  if tuple(perm) == tuple(range(len(perm))):
    return x
  dims = tuple(x.dims[p] for p in perm)
  return comp.add(Instruction("transpose", [x], Shape(x.dtype, dims), {"dimensions": perm}),
                  before=before)


def run_on(comp: Computation, refuses) -> bool:
  changed = False
  module = comp.module
  for o in list(comp.instructions):
    if o.parent is not comp or o.opcode != "dot":
      continue
    m = match(o)
    if m is None:
      continue
    if isinstance(m, str):
      module.note(PASS, f"%{o.name} not fused: {m}")
      continue
    q, k, v, scale, inner, perms = m
    dts = {x.dtype for x in (q, k, v, o)}
    canon = [tuple(x.dims[i] for i in p) for x, p in zip((q, k, v), perms)]
    why = (f"element types {sorted(dtype_name(t) for t in dts)} differ" if len(dts) != 1 else
           refuses(o.dtype, *canon, [o] + [x for x in inner if x.opcode == "dot"]))
    if why:
      module.note(PASS, f"%{o.name} not fused: {why}")
      continue
    q, k, v = (_canonical(comp, x, p, o) for x, p in zip((q, k, v), perms))
    fused = comp.add(Instruction("attention", [q, k, v], o.shape,
                                 {"scale": float(np.float32(scale))}), before=o)
    comp.replace_all_uses(o, fused)
    comp.remove(o)
    for x in inner:             # (users first: the list runs from the probabilities back)
      if x.parent is comp and not x.users and x is not comp.root:
        comp.remove(x)
    module.note(PASS, f"%{fused.name}: softmax(%{q.name} %{k.name}ᵀ * {scale:g}) %{v.name} "
                f"({'x'.join(map(str, q.dims[:-2])) or 'no'} batch, Tq={q.dims[-2]}, "
                f"Tk={k.dims[-2]}, D={q.dims[-1]}, Dv={v.dims[-1]}) as one kernel")
    changed = True
  return changed


def run(module: Module) -> bool:
  refuses = getattr(module, "fused_attention", None)
  if refuses is None:
    return False
  changed = False
  for comp in list(module.computations):
    changed |= run_on(comp, refuses)
  return changed
