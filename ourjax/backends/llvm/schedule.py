"""The order of the entry computation's instructions, chosen for memory (the CPU backend's
``plan_entry(..., reorder=True)``): a list scheduler that runs next, among the instructions whose
operands are computed, the one that frees the most bytes of temporaries net of what it
allocates (XLA's ``ListMemoryScheduler`` heuristic), ties in the original order.  The new order
is kept only where it lowers the peak of the temporaries live at once (an estimate from the
HLO: each array's bytes from its definition to its last use, outputs and parameters apart), so
a program never gets a worse peak from it.  The arrays are counted one by one, each element of
a tuple-shaped result (a while loop's state, a multi-output fusion's results) apart: a scan's
stacked residuals that only one later dot reads die at that dot, which the scheduler may then
run before the backward loop.
"""
from __future__ import annotations

import math

_VIEWS = ("get-tuple-element", "reshape", "tuple")


def _bytes(shape) -> int:
  if shape.is_tuple:
    return sum(_bytes(s) for s in shape.tuple_shapes)
  return math.prod(shape.dims) * shape.dtype.itemsize


def _leaves(shape, prefix=()):
  """Shape indices of the arrays in ``shape``: ``()`` for an array, ``(k, ...)`` in tuples."""
  if not shape.is_tuple:
    yield prefix
    return
  for k, s in enumerate(shape.tuple_shapes):
    yield from _leaves(s, prefix + (k,))


def _model(comp):
  """(bases of each instruction, bytes of each base, instructions that read each base) for
  ``comp``.  A base is one array that an instruction allocates: ``(instr, index)``, element
  ``index`` of its (tuple) result, so that a while loop's or a multi-output fusion's elements
  die one by one as their last readers run.  Views (tuple, get-tuple-element, reshape and
  fusions of reshapes only) allocate nothing and stand for the bases they name; parameters,
  constants and the values that end in the outputs count 0 bytes."""
  from ourjax.backends.llvm.planning import _reshape_view
  instrs = comp.instructions
  memo = {}

  def bases_of(i, index=()):
    """The bases of element ``index`` of ``i``'s result (all of its arrays below it)."""
    key = (i, index)
    if key in memo:
      return memo[key]
    if i.opcode == "tuple":
      if index:
        out = bases_of(i.operands[index[0]], index[1:])
      else:
        out = frozenset().union(*[bases_of(o) for o in i.operands])
    elif i.opcode == "get-tuple-element":
      out = bases_of(i.operands[0], (i.attrs["index"],) + index)
    elif i.opcode == "reshape":
      out = bases_of(i.operands[0], index)
    elif _reshape_view(i) is not None:
      out = bases_of(_reshape_view(i), index)
    else:
      shape = i.shape
      for k in index:
        shape = shape.tuple_shapes[k]
      out = frozenset((i, index + leaf) for leaf in _leaves(shape))
    memo[key] = out
    return out
  bases = {i: bases_of(i) for i in instrs}
  outs = bases[comp.root]
  size = {}
  for i in instrs:
    for base in bases[i]:
      if base[0] is i and base not in size:
        shape = i.shape
        for k in base[1]:
          shape = shape.tuple_shapes[k]
        size[base] = 0 if i.opcode in ("parameter", "constant") or base in outs else \
            _bytes(shape)
  readers = {}
  for i in instrs:
    for o in i.operands:
      for b in bases[o]:
        readers.setdefault(b, set()).add(i)
  return bases, size, readers


def peak(comp, order) -> int:
  """The most bytes of temporaries live at once when ``comp`` runs in ``order`` (``_model``):
  a base from its instruction to its last reader."""
  bases, size, readers = _model(comp)
  pos = {i: k for k, i in enumerate(order)}
  events = [0] * (len(order) + 1)
  for b, n in size.items():
    if n:
      start = pos[b[0]]
      events[start] += n
      events[max((pos[r] for r in readers.get(b, ())), default=start) + 1] -= n
  live = top = 0
  for e in events:
    live += e
    top = max(top, live)
  return top


def list_schedule(comp):
  """The greedy order (see the module docstring) of ``comp``'s instructions."""
  bases, size, readers = _model(comp)
  instrs = comp.instructions
  index = {i: k for k, i in enumerate(instrs)}
  reads = {i: frozenset().union(*[bases[o] for o in set(i.operands)]) if i.operands else
           frozenset() for i in instrs}
  waiting = {i: len(set(i.operands)) for i in instrs}
  users = {i: [] for i in instrs}
  for i in instrs:
    for o in set(i.operands):
      users[o].append(i)
  pending = {b: len(rs) for b, rs in readers.items()}
  alloc = {i: 0 for i in instrs}
  for b, n in size.items():
    alloc[b[0]] += n

  def gain(i):
    """Bytes ``i`` frees (values it is the last reader of) net of what it allocates."""
    return sum(size[b] for b in reads[i] if pending.get(b) == 1) - alloc[i]

  ready = [i for i in instrs if waiting[i] == 0]
  order = []
  while ready:
    views = [i for i in ready if i.opcode in _VIEWS or alloc[i] == 0 and not reads[i]]
    if views:
      best = min(views, key=lambda c: index[c])
    else:
      best = max(ready, key=lambda c: (gain(c), -index[c]))
    ready.remove(best)
    order.append(best)
    for b in reads[best]:
      if b in pending:
        pending[b] -= 1
    for u in users[best]:
      waiting[u] -= 1
      if waiting[u] == 0:
        ready.append(u)
  assert len(order) == len(instrs)
  return order


#: Computations with more instructions than this keep their order (the scheduler is
#: quadratic in the instructions ready at once).
MAX_INSTRUCTIONS = 2000


def reorder(comp) -> bool:
  """Run ``comp`` in its list-scheduled order when that lowers its peak; returns whether it
  changed.  The root stays last."""
  if len(comp.instructions) > MAX_INSTRUCTIONS:
    return False
  order = list_schedule(comp)
  order = [i for i in order if i is not comp.root] + [comp.root]
  if order == comp.instructions or peak(comp, order) >= peak(comp, comp.instructions):
    return False
  comp.instructions = order
  return True


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
