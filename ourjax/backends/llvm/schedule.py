"""The order of the entry computation's instructions, chosen for memory (the CPU backend's
``plan_entry(..., reorder=True)``): a list scheduler that runs next, among the instructions whose
operands are computed, the one that frees the most bytes of temporaries net of what it
allocates (XLA's ``ListMemoryScheduler`` heuristic), ties in the original order.  The new order
is kept only where it lowers the peak of the temporaries live at once (an estimate from the
HLO: each non-view value's bytes from its definition to its last use, outputs and parameters
apart), so a program never gets a worse peak from it.
"""
from __future__ import annotations

import math

_VIEWS = ("get-tuple-element", "reshape", "tuple")


def _bytes(shape) -> int:
  if shape.is_tuple:
    return sum(_bytes(s) for s in shape.tuple_shapes)
  return math.prod(shape.dims) * shape.dtype.itemsize


def _model(comp):
  """(bases of each instruction, bytes each instruction allocates, instructions that read each
  base) for ``comp``: views (tuple, get-tuple-element, reshape and fusions of reshapes only)
  allocate nothing and stand for their operands' buffers; parameters, constants and the values
  that end in the outputs count 0."""
  from ourjax.backends.llvm.planning import _reshape_view
  instrs = comp.instructions
  bases = {}
  for i in instrs:
    if i.opcode in _VIEWS:
      bases[i] = frozenset().union(*[bases[o] for o in i.operands]) if i.operands else \
          frozenset()
    elif _reshape_view(i) is not None:
      bases[i] = bases[_reshape_view(i)]
    else:
      bases[i] = frozenset([i])
  outs = bases[comp.root]
  size = {}
  for i in instrs:
    own = bases[i] == frozenset([i])
    size[i] = 0 if (not own or i.opcode in ("parameter", "constant") or i in outs) else \
        _bytes(i.shape)
  readers = {}
  for i in instrs:
    for o in i.operands:
      for b in bases[o]:
        readers.setdefault(b, set()).add(i)
  return bases, size, readers


def peak(comp, order) -> int:
  """The most bytes of temporaries live at once when ``comp`` runs in ``order`` (``_model``)."""
  bases, size, readers = _model(comp)
  pos = {i: k for k, i in enumerate(order)}
  last = {b: max((pos[r] for r in rs), default=pos[b]) for b, rs in readers.items()}
  events = [0] * (len(order) + 1)
  for i in order:
    if size[i]:
      events[pos[i]] += size[i]
      events[last.get(i, pos[i]) + 1] -= size[i]
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

  def gain(i):
    """Bytes ``i`` frees (values it is the last reader of) net of what it allocates."""
    return sum(size[b] for b in reads[i] if pending.get(b) == 1) - size[i]

  ready = [i for i in instrs if waiting[i] == 0]
  order = []
  while ready:
    views = [i for i in ready if i.opcode in _VIEWS or size[i] == 0 and not reads[i]]
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
