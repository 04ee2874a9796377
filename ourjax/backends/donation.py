"""Outputs written into donated parameters' buffers (``module.input_output_alias``, set by
``jit``'s donation, see ``ourjax/_donation.py``): the planning both native targets share.

    planner, steps, params, outs, aliases = plan_with_aliases(module, plan, add_copy,
                                                              elementwise_kinds, copy_kinds)

The entry is planned once as usual (parameters and outputs in buffers of their own) and the
steps tell, for each alias ``output j -> parameter k``, whether the output may be computed
straight into the parameter's buffer (``safe``): every step that reads the parameter comes
before the first step that writes the output, or the last reader *is* the first writer and it
reads the parameter only at the index of the element it writes (``same_index``: a copy, an
elementwise kernel whose every use of the parameter is elementwise over the output's shape, or
a GPU dot kernel whose fused epilogue is such a use; these evaluate an element's outputs before
storing them; a dynamic-update-slice's operand counts as read elementwise, and a scatter does
not read its operand's buffer).  A ``while`` or ``conditional`` counts as one step (its body
may run many times).  The entry is then planned again with output ``j``'s buffer *being*
parameter ``k``'s (the same ``Buf``: a kernel that reads one and writes the other gets one
pointer) for the safe aliases; each other alias computes its output into a temporary that one
last copy moves into the parameter's buffer once nothing reads the parameter any more.  Either
way the caller finds output ``j`` in argument ``k``'s memory and allocates nothing for it.
"""
from __future__ import annotations

import math

from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.planning import reads_at_own_index

__all__ = ["plan_with_aliases", "safe", "same_index", "reads_first"]


_VIEWS = ("reshape", "get-tuple-element", "tuple")


def reads_first(entry, aliases) -> bool:
  """Reorder the entry computation ``entry`` so that an instruction that reads a donated
  parameter after the instruction computing the output aliased to it (``aliases``: output j
  -> parameter k) runs before that one where it can: when it does not depend on it, it moves
  to just before it with those of its operands that come after it, unless one of them computes
  an aliased output itself.  (A training step's loss, computed from the parameters by a fusion
  the scheduler put last, then reads them before their update, which may be computed in place
  instead of into a temporary copied over them at the end.)  Returns whether it moved any."""
  root = entry.root
  outs = list(root.operands) if root.opcode == "tuple" else [root]

  def base(x):
    while x.opcode in ("reshape", "get-tuple-element"):
      x = x.operands[0]
    return x
  writers = {id(base(outs[j])) for j in aliases if j < len(outs)}
  moved_any = False
  for j, k in sorted(aliases.items()):
    if j >= len(outs) or k >= len(entry.parameters):
      continue
    w = base(outs[j])
    if w.opcode == "parameter" or w is root:
      continue
    p = entry.parameters[k]
    readers, stack = [], [p]
    while stack:       # (through views of the parameter)
      for u in stack.pop().users:
        if u is root:
          continue
        if u.opcode in _VIEWS:
          stack.append(u)
        else:
          readers.append(u)
    for r in dict.fromkeys(readers):
      pos = {x: n for n, x in enumerate(entry.instructions)}
      if pos[r] < pos[w]:
        continue
      # r and its operands after w: all move, or none
      move, stack, ok = {}, [r], True
      while stack and ok:
        x = stack.pop()
        if x in move or pos[x] < pos[w]:
          continue
        if x is w or (id(x) in writers and x is not r) or x.opcode == "parameter":
          ok = False
          break
        move[x] = True
        stack.extend(x.operands)
      if not ok or id(r) in writers:
        continue
      at = pos[w]
      order = entry.instructions
      early = [x for x in order[at:] if x in move]
      entry.instructions = order[:at] + early + [x for x in order[at:] if x not in move]
      moved_any = True
  return moved_any


def _step_buffers(step, reads: set, writes: set) -> None:
  """ids of the buffers ``step`` (and the steps inside it) reads and writes."""
  kernel = getattr(step, "kernel", None)
  if kernel is not None:
    read = list(kernel.reads)
    sc = kernel if hasattr(kernel, "scatter") else getattr(kernel, "inner", None)
    if getattr(sc, "scatter", None) is not None and hasattr(sc, "leafmap"):
      # a scatter updates ``out``, which holds its operand already: the operand's own buffer
      # is not read (only listed)
      op0 = sc.scatter.operands[0]
      read = [sc.out] + K._leaf_bufs({i: v for i, v in sc.leafmap.items() if i is not op0})
    for b in read + list(getattr(kernel, "scratch", ())):
      reads.add(id(b))
      src = getattr(b, "source", None)       # (a virtual buffer over another one)
      if src is not None:
        reads.add(id(src))
    for b in kernel.writes:
      writes.add(id(b))
    return
  for name in ("pred", "selector"):
    b = getattr(step, name, None)
    if b is not None:
      reads.add(id(b))
  for name in ("cond_steps", "body_steps"):
    for s in getattr(step, name, None) or ():
      _step_buffers(s, reads, writes)
  for br in getattr(step, "branches", None) or ():
    for s in br:
      _step_buffers(s, reads, writes)


def safe(steps, param: K.Buf, out: K.Buf, elementwise_kinds, copy_kinds) -> bool:
  """Whether ``out`` may live in ``param``'s buffer in the top-level ``steps`` (see the module
  docstring)."""
  last_read, first_write = -1, math.inf
  for t, s in enumerate(steps):
    r, w = set(), set()
    _step_buffers(s, r, w)
    if id(param) in r:
      last_read = t
    if id(out) in w and first_write == math.inf:
      first_write = t
    if id(param) in w:
      return False                         # (never: parameters are read-only)
  if last_read < first_write:
    return True
  if last_read > first_write:
    return False
  kernel = getattr(steps[last_read], "kernel", None)
  return kernel is not None and same_index(kernel, param, out, elementwise_kinds, copy_kinds)


class _EpilogueView:
  """A GPU dot kernel's fused elementwise epilogue (``cuda/dot_epilogues.py``: ``Epilogue``) seen as an
  elementwise kernel over the dot's shape: the dot's element is a leaf (it is handed to the
  epilogue where each accumulator is stored, once per element)."""

  def __init__(self, kernel):
    epi = kernel.epilogue
    self.dims = tuple(kernel.dot.dims)
    self.outputs = epi.outputs
    self.leafmap = {**epi.leafmap, kernel.dot: None}


def _epilogue_view(kernel, param):
  """``_EpilogueView`` of a dot kernel with a fused epilogue that does not take ``param`` as an
  operand of the product, else None."""
  if getattr(kernel, "epilogue", None) is None or not hasattr(kernel, "dot"):
    return None
  for name in ("lhs", "rhs", "parts"):
    b = getattr(kernel, name, None)
    if b is not None and (b is param or getattr(b, "source", None) is param):
      return None
  return _EpilogueView(kernel)


def same_index(kernel, param, out, elementwise_kinds, copy_kinds) -> bool:
  """Whether ``kernel`` reads ``param`` only at the index of the element of ``out`` it writes
  (so it may write ``out`` over ``param``): a copy, an elementwise kernel, or a GPU dot kernel
  whose fused epilogue reads ``param`` elementwise (it evaluates an element's epilogue outputs
  before storing them, and stores each element once)."""
  if isinstance(kernel, copy_kinds):
    return kernel.src is param and kernel.dst is out
  if not isinstance(kernel, elementwise_kinds):
    kernel = _epilogue_view(kernel, param)
    if kernel is None:
      return False
  dims = tuple(kernel.dims)
  if out.size != math.prod(dims) or param.nbytes != out.nbytes:
    return False
  mine = [i for i, b in kernel.outputs if b is out]
  if len(mine) != 1 or mine[0].shape.is_tuple or tuple(mine[0].dims) != dims:
    return False
  if any(isinstance(b, tuple) and out in b for _, b in kernel.outputs):
    return False
  if any(spec is out or (isinstance(spec, tuple) and any(x is out for x in spec))
         for spec in kernel.leafmap.values()):
    return False
  return reads_at_own_index(kernel, param, dims)


def plan_with_aliases(module, plan, add_copy, elementwise_kinds, copy_kinds):
  """Plan ``module``'s entry with its outputs in donated parameters' buffers.

  ``plan(outs_for) -> (planner, steps, params, outs)`` plans the entry, the output buffers
  chosen by ``outs_for(params, outs, new_temp)`` (None: the outputs' own), which returns the
  buffer of each output: its own, a parameter's, or a temporary; ``add_copy(planner, steps,
  src, dst)`` appends a copy step; ``elementwise_kinds``/``copy_kinds``: the target's kernel
  classes ``same_index`` accepts.  Returns ``(planner, steps, params, outs, aliases)``:
  ``aliases`` lists ``(j, k, "direct" | "copy")``."""
  aliases = dict(getattr(module, "input_output_alias", None) or {})
  if aliases:
    reads_first(module.entry, aliases)
  planner, steps, params, outs = plan(None)
  if not aliases:
    return planner, steps, params, outs, []
  how = {}
  for j, k in sorted(aliases.items()):
    p, o = params[k], outs[j]
    if p.dtype.itemsize * p.size != o.nbytes:
      continue
    how[j] = (k, "direct" if safe(steps, p, o, elementwise_kinds, copy_kinds) else "copy")
  if not how:
    return planner, steps, params, outs, []
  temps = {}

  def outs_for(new_params, new_outs, new_temp):
    chosen = list(new_outs)
    for j, (k, kind) in how.items():
      if kind == "direct":
        chosen[j] = new_params[k]
      else:
        o = new_outs[j]
        chosen[j] = temps[j] = new_temp(o.dtype, o.dims, f"out{j}.donated")
    return chosen
  planner, steps, params, outs = plan(outs_for)
  for j, (k, kind) in sorted(how.items()):
    if kind == "copy":
      add_copy(planner, steps, temps[j], params[k])
  where = {"direct": "computed in place", "copy": "copied there at the end"}
  module.note("donation", ", ".join(f"output {j} in parameter {k}'s buffer ({where[kind]})"
                                    for j, (k, kind) in sorted(how.items())))
  return planner, steps, params, outs, [(j, k, kind) for j, (k, kind) in sorted(how.items())]
