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
    a = e / broadcast(reduce_sum(e))  (for 16-bit types the sum may be taken in f32; or XLA's
                                      e * broadcast(1 / reduce_sum(e)), as lowered: _normalized)
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

Where a training step's backward reads the probabilities, ``attention_grad.py`` first makes
that backward one ``attention-grad`` instruction (``Module.fused_attention_grad``), after which
nothing else reads them and the forward fuses too.

It runs once, among the native backends' late passes, before ``dot_layout`` (which would move
the dots' operands into other layouts) and fusion (which would fuse the softmax).  The
reference semantics of ``attention`` are the unfused computation's (``reference.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ourjax.lowering.passes import dce
from ourjax.lowering.hlo import (ELEMENTWISE_OPS, Computation, Instruction, Module, Shape,
                                 dtype_name)

PASS = "attention"

#: Most elementwise ops between the scores' dot and the softmax (masks, biases, the scale).
MAX_SCORE_OPS = 16
#: The largest fill of a causal mask whose keys a kernel may skip (``causal``).
MASKED = -1e9


def _scalar_constant(x: Instruction):
  """The value of a scalar constant, or of a broadcast of one; None otherwise."""
  if x.opcode == "broadcast":
    x = x.operands[0]
  if x.opcode == "constant" and x.attrs["value"].ndim == 0:
    return float(x.attrs["value"])
  return None


def _constant_broadcast(x: Instruction) -> bool:
  """Whether ``x`` broadcasts a scalar constant (nothing to keep from other readers: it stays
  where they read it, and costs no memory traffic inside the kernel)."""
  return x.opcode == "broadcast" and _scalar_constant(x) is not None


def _row_broadcast(x: Instruction, rank: int):
  """The operand of ``x`` when ``x`` broadcasts a per-row value (rank-1 dims, the last dim
  added) to the full ``rank``; None otherwise."""
  if x.opcode != "broadcast" or tuple(x.attrs["dimensions"]) != tuple(range(rank - 1)):
    return None
  return x.operands[0]


def _normalized(a: Instruction, rank: int):
  """``(e, z, taken)`` when ``a`` is ``e`` divided by a per-row ``z`` (``taken``: the
  instructions between ``a`` and them), in either spelling: ``e / broadcast(z)``, or XLA's
  rewrite of it that the lowering makes (``lowering/xla_division.py``), ``e * broadcast(1 / z)``,
  for 16-bit types ``convert(convert(e, f32) * broadcast(1 / convert(z, f32)))``; None
  otherwise."""
  if a.opcode == "divide":
    e, zb = a.operands
    z = _row_broadcast(zb, rank)
    return None if z is None else (e, z, [a, zb])
  outer, x = [], a
  if x.opcode == "convert":
    outer, x = [x], x.operands[0]
  if x.opcode != "multiply":
    return None
  for e, rb in (x.operands, x.operands[::-1]):
    r = _row_broadcast(rb, rank)
    if r is None or r.opcode != "divide":
      continue
    one, z = r.operands
    if _scalar_constant(one) != 1.0:
      continue
    taken = outer + [x, rb, r] + ([one] if one.opcode == "broadcast" else [])
    if outer:      # (the product in f32: both its factors widened)
      if e.opcode != "convert" or z.opcode != "convert":
        continue
      taken += [e, z]
      e, z = e.operands[0], z.operands[0]
    return e, z, taken
  return None


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


def match(o: Instruction, readers: bool = True):
  """``(q, k, v, scale, inner, perms)`` when ``o`` is the second dot of an attention (module
  docstring), ``inner`` the instructions it replaces (besides ``o``) and ``perms`` the
  permutations of q, k and v to ``[B..., T, D]``; else a string saying why not, or None when
  ``o`` is no candidate at all (not a dot of probabilities).  ``readers=False`` skips the check
  that nothing else reads ``inner`` (``attention_grad.match`` makes its own)."""
  if o.opcode != "dot":
    return None
  nb = len(o.attrs["lhs_batch_dims"])
  rank = nb + 2
  pv = _perms(o, nb, rhs_contract_first=True)
  if pv is None or pv[0] != tuple(range(rank)):   # (probabilities [B..., Tq, Tk] as they are)
    return None
  a, v = o.operands
  norm = _normalized(a, rank)
  if norm is None:
    return None
  e, z, taken = norm
  wide = []       # (16-bit types: the sum is taken in f32, convert(reduce(convert(e))))
  if z.opcode == "convert" and z.operands[0].opcode == "reduce":
    wide.append(z)
    z = z.operands[0]
  summed = _row_reduce(z, "add", rank, 0.0)
  if wide and summed is not None and summed.opcode == "convert":
    wide.append(summed)
    summed = summed.operands[0]
  if summed is not e or e.opcode != "exponential":
    return None
  sub = e.operands[0]
  if sub.opcode != "subtract":
    return None
  s, mb = sub.operands
  m = _row_broadcast(mb, rank)
  if m is None:
    return None
  inner = taken + wide[:1] + [z] + wide[1:] + [e, sub, mb, m]
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
  path = _score_path(s, nb)
  if path is None:
    return None
  d = path.pop()
  scale, base = 1.0, d     # (base: the scaled scores, what the rest of the path modifies)
  # (16-bit scores scaled as XLA's division rewrite leaves them, ``xla_division``: widened to
  # f32, multiplied, rounded back: convert(convert(d, f32) * c))
  wide = 1 if (len(path) >= 3 and path[-1].opcode == "convert" and path[-1].operands[0] is d
               and path[-3].opcode == "convert" and path[-3].dtype == d.dtype) else 0
  src = path[-1] if wide else d
  if len(path) > wide and path[-1 - wide].opcode in ("multiply", "divide"):   # the scale
    sc = path[-1 - wide]
    x, y = sc.operands
    c = _scalar_constant(y)
    if c is None and sc.opcode == "multiply":
      x, y = y, x
      c = _scalar_constant(y)
    if c is not None and x is src:
      scale = c if sc.opcode == "multiply" else 1.0 / c
      taken = [path.pop() for _ in range(1 + 2 * wide)]
      base = taken[-1]
      inner += taken + ([y] if y.opcode == "broadcast" else [])
  inner += path
  qk = _perms(d, nb)       # (a dot of q and k: _score_path saw to it)
  inner.append(d)
  q, k = d.operands
  perms = (qk[0], qk[1], pv[1])
  (tq, dq), (tk, dk), (tv, _) = [[x.dims[i] for i in p[nb:]] for x, p in zip((q, k, v), perms)]
  if dq != dk or tk != tv:
    return "q, k and v disagree in their sizes"
  # nothing outside reads what the fused kernel never writes
  mine = set(inner) | {o}
  for x in inner if readers else ():
    if _constant_broadcast(x):      # (a scale's broadcast may serve other layers too)
      continue
    if any(u not in mine for u in x.users) or x is x.parent.root:
      return f"%{x.name} is read elsewhere (the scores or probabilities are needed)"
  return q, k, v, scale, inner, perms, path, base


def _score_path(s: Instruction, nb: int):
  """The elementwise instructions from the scores ``s`` back to the dot of q and k that they
  modify (a mask's select, a bias's add, the scale), that dot last; None when ``s`` does not
  lead to such a dot through elementwise ops of its shape, one operand at a time."""
  path, x = [], s
  while x.opcode != "dot":
    if x.opcode not in ELEMENTWISE_OPS or len(path) > MAX_SCORE_OPS:
      return None
    leads = [o for o in x.operands if o.shape.dims == s.shape.dims and _reaches_dot(o, nb)]
    if len(leads) != 1:
      return None
    path.append(x)
    x = leads[0]
  if _perms(x, nb) is None:
    return None
  return path + [x]


def _reaches_dot(x: Instruction, nb: int, depth: int = MAX_SCORE_OPS) -> bool:
  if x.opcode == "dot":
    return _perms(x, nb) is not None
  if not depth or x.opcode not in ELEMENTWISE_OPS:
    return False
  return any(_reaches_dot(o, nb, depth - 1) for o in x.operands if o.shape.dims == x.shape.dims)


def _score_computation(module: Module, path, d: Instruction, name: str = "attention_scores"):
  """The scores' modification (``path``, the instructions between the scaled scores ``d`` and
  the softmax, with the loop ops feeding them: iotas, compares, broadcasts, small constants) as a
  computation of the scores (parameter 0) and of the arrays it reads (the other parameters),
  and those arrays; (None, []) when there is nothing to modify."""
  if not path:
    return None, []
  from ourjax.lowering.passes.fusion import is_loop_op
  comp = Computation(name, module)
  params = [comp.add(Instruction("parameter", [], d.shape, {"parameter_number": 0},
                                 name="scores"))]
  leaves, made = [], {d: params[0]}
  inside = set(path)

  def clone(x):
    if x in made:
      return made[x]
    if x in inside or (is_loop_op(x) and x.opcode != "fusion" and x.opcode != "parameter"):
      y = comp.add(Instruction(x.opcode, [clone(o) for o in x.operands], x.shape,
                               dict(x.attrs)))
    else:
      y = comp.add(Instruction("parameter", [], x.shape,
                               {"parameter_number": len(params)}))
      params.append(y)
      leaves.append(x)
    made[x] = y
    return y
  comp.set_root(clone(path[0]))
  module.add_computation(comp)
  return comp, leaves


def _canonical(comp: Computation, x: Instruction, perm, before: Instruction, made=None):
  """``x`` as ``[B..., T, D]``: itself, or its transpose by ``perm`` (one transpose for each
  (x, perm) in ``made``)."""
  if tuple(perm) == tuple(range(len(perm))):
    return x
  key = (x, tuple(perm))
  if made is not None and key in made:
    return made[key]
  dims = tuple(x.dims[p] for p in perm)
  t = comp.add(Instruction("transpose", [x], Shape(x.dtype, dims), {"dimensions": perm}),
               before=before)
  if made is not None:
    made[key] = t
  return t


def _refusal(refuses, o, qkv, perms, others, dots):
  """Why the backend's ``refuses`` (or differing element types of q, k, v and ``others``)
  keeps the match of ``o`` unfused; None when it is fused."""
  dts = {x.dtype for x in tuple(qkv) + tuple(others)}
  if len(dts) != 1:
    return f"element types {sorted(dtype_name(t) for t in dts)} differ"
  canon = [tuple(x.dims[i] for i in p) for x, p in zip(qkv, perms)]
  return refuses(o.dtype, *canon, dots)


def _fuse_backward(comp: Computation, o: Instruction, refuses_grad, made) -> None:
  """Where the probabilities of the attention ending in ``o`` are read by its backward
  (``attention_grad``), that backward as one ``attention-grad`` instruction, so that the
  forward match then finds them read by nothing else."""
  from ourjax.lowering.passes import attention_grad as AG
  module = comp.module
  fwd = match(o, readers=False)
  if not isinstance(fwd, tuple):
    return
  m = AG.match(o, fwd)
  if m is None:
    return
  if isinstance(m, str):
    module.note(PASS, f"%{o.name}: backward not fused: {m}")
    return
  q, k, v, scale, inner, perms, path, base = fwd
  dq, dk, dv, do = m[:4]
  why = _refusal(refuses_grad, o, (q, k, v), perms, (o, do, dq, dk, dv),
                 [o, dq, dk, dv, m[7][0]] + [x for x in inner if x.opcode == "dot"])
  if why:
    module.note(PASS, f"%{o.name}: backward not fused: {why}")
    return
  first = min((dq, dk, dv), key=comp.instructions.index)
  qkv = [_canonical(comp, x, p, o, made) for x, p in zip((q, k, v), perms)]
  scores, fwd_leaves = _score_computation(module, path, base)
  grad_comp, grad_leaves = AG.grad_computation(module, m[5], m[6])
  g = AG.rewrite(comp, o, m, {"qkv": qkv,
                              "make": lambda x, p, before: _canonical(comp, x, p, before, made)},
                 scores, fwd_leaves, grad_comp, grad_leaves, float(np.float32(scale)))
  if g is None:
    for c in (scores, grad_comp):
      if c is not None:
        module.remove_computation(c)
    module.note(PASS, f"%{o.name}: backward not fused: an operand is computed after "
                f"%{first.name}")
    return
  module.note(PASS, f"%{g.name}: the backward of %{o.name} (dq, dk, dv) as one instruction")


def run_on(comp: Computation, refuses, refuses_grad=None) -> bool:
  changed = False
  module = comp.module
  made = {}
  for o in list(comp.instructions):
    if o.parent is not comp or o.opcode != "dot":
      continue
    if refuses_grad is not None:
      _fuse_backward(comp, o, refuses_grad, made)
    m = match(o)
    if m is None:
      continue
    if isinstance(m, str):
      module.note(PASS, f"%{o.name} not fused: {m}")
      continue
    q, k, v, scale, inner, perms, path, base = m
    why = _refusal(refuses, o, (q, k, v), perms, (o,),
                   [o] + [x for x in inner if x.opcode == "dot"])
    if why:
      module.note(PASS, f"%{o.name} not fused: {why}")
      continue
    q, k, v = (_canonical(comp, x, p, o, made) for x, p in zip((q, k, v), perms))
    scores, leaves = _score_computation(module, path, base)
    attrs = {"scale": float(np.float32(scale))}
    if scores is not None:
      attrs["calls"] = scores
    fused = comp.add(Instruction("attention", [q, k, v] + leaves, o.shape, attrs), before=o)
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
  refuses_grad = getattr(module, "fused_attention_grad", None)
  for comp in list(module.computations):
    changed |= run_on(comp, refuses, refuses_grad)
  if changed:     # (what only the scores' mask read: iotas, compares, broadcasts)
    dce.run(module)
  return changed


# -- what kernels ask of a match ----------------------------------------------------------------

def causal(scores) -> bool:
  """Whether the scores computation masks every key past its query's row (``select(row >=
  key, s, c)``, alone or and-ed with other masks, ``c <= MASKED``: its exponential is 0 beside
  any score up to ``-MASKED / 2``): whole key tiles past a block's last row then need no
  visit."""
  nb = scores.root.shape.rank - 2
  row, col = nb, nb + 1
  root = scores.root
  s0 = scores.parameters[0]
  if root.opcode != "select" or root.operands[1] is not s0:
    return False
  fill = _scalar_constant(root.operands[2])
  if fill is None or not fill <= MASKED:
    return False
  return _masks_future(root.operands[0], {d: d for d in range(root.shape.rank)}, row, col)


def _iota_dim(x, dims):
  """The dim of the scores along which ``x`` counts (an iota, through broadcasts and
  converts; ``dims`` maps x's dims to the scores'), or None."""
  while x.opcode in ("broadcast", "convert", "reshape"):
    if x.opcode == "broadcast":
      dims = {k: dims[d] for k, d in enumerate(x.attrs["dimensions"]) if d in dims}
    elif x.opcode == "reshape":
      dims = _through_reshape(x, dims)
      if dims is None:
        return None
    x = x.operands[0]
  if x.opcode == "iota":
    return dims.get(x.attrs["iota_dimension"])
  return None


def _through_reshape(x, dims):
  """``dims`` (x's dims -> the scores') for the operand of ``x``, a reshape that only adds or
  drops dims of size 1; None for other reshapes."""
  src = [k for k, n in enumerate(x.operands[0].dims) if n != 1]
  dst = [k for k, n in enumerate(x.dims) if n != 1]
  if [x.operands[0].dims[k] for k in src] != [x.dims[k] for k in dst]:
    return None
  return {a: dims[b] for a, b in zip(src, dst) if b in dims}


def _masks_future(p, dims, row, col) -> bool:
  """Whether the predicate ``p`` is false wherever key > row (``dims``: p's dims -> the
  scores')."""
  if p.opcode == "reshape":
    inner = _through_reshape(p, dims)
    return inner is not None and _masks_future(p.operands[0], inner, row, col)
  if p.opcode == "broadcast":
    return _masks_future(p.operands[0], {k: dims[d] for k, d in
                                         enumerate(p.attrs["dimensions"]) if d in dims},
                         row, col)
  if p.opcode == "and":
    return any(_masks_future(o, dims, row, col) for o in p.operands)
  if p.opcode == "select":       # select(c, true, false) is c
    t, f = p.operands[1:]
    tv, fv = (_const_value(x) for x in (t, f))
    return tv is True and fv is False and _masks_future(p.operands[0], dims, row, col)
  if p.opcode == "compare":
    a, c = (_iota_dim(o, dims) for o in p.operands)
    d = p.attrs["direction"]
    return (a, c, d) in ((row, col, "GE"), (col, row, "LE"), (row, col, "GT"), (col, row, "LT"))
  return False


def _const_value(x):
  while x.opcode == "broadcast":
    x = x.operands[0]
  if x.opcode == "constant" and x.attrs["value"].ndim == 0:
    return bool(x.attrs["value"])
  return None
