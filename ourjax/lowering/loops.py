"""Static facts about ``while`` loops (XLA's while-loop trip count analysis, in our words).

``lax.scan`` and ``lax.fori_loop`` with static bounds lower to a ``while`` whose state holds a
counter that starts at a constant, grows by a constant each iteration and is compared with a
constant by the condition.  Such a loop runs a number of iterations known at compile time, so a
backend need not evaluate the condition at run time: the GPU launches the body that many times
without reading a predicate back to the host (and can replay the whole loop as one graph).
"""
from __future__ import annotations

import numpy as np

from ourjax.lowering.hlo import Instruction

#: Trip counts above this are reported as unknown (no backend unrolls or replays such loops).
MAX_TRIP_COUNT = 1 << 31


def _scalar_int(instr: Instruction):
  """The value of a scalar integer constant, else None."""
  if instr.opcode != "constant" or instr.shape.is_tuple or instr.dims != ():
    return None
  v = np.asarray(instr.attrs["value"])
  return int(v) if v.dtype.kind in "iu" else None


def _counter(x: Instruction, param: Instruction):
  """k when ``x`` is get-tuple-element(param, k), else None."""
  if x.opcode == "get-tuple-element" and x.operands[0] is param:
    return x.attrs["index"]
  return None


def _expr(x: Instruction):
  """(opcode, operands, attrs) of ``x``, looking into a fusion: its fused root's, with the
  fused computation's parameters replaced by the fusion's operands (the pipeline fuses a
  loop's compare and increment like any other elementwise op)."""
  if x.opcode != "fusion":
    return x.opcode, list(x.operands), x.attrs
  comp = x.attrs["calls"]
  r = comp.root
  outer = {id(q): o for q, o in zip(comp.parameters, x.operands)}
  return r.opcode, [outer.get(id(o), o) for o in r.operands], r.attrs


def trip_count(loop: Instruction) -> int | None:
  """The number of times ``loop`` (a ``while``) runs its body, when its condition is
  ``counter <op> C`` (or ``C <op> counter``) for a state element that starts at a constant and
  that the body advances by a nonzero constant; None when that cannot be shown."""
  if loop.opcode != "while" or not loop.shape.is_tuple:
    return None
  cond, body = loop.attrs["condition"], loop.attrs["body"]
  init = loop.operands[0]
  if init.opcode != "tuple" or len(cond.parameters) != 1 or len(body.parameters) != 1:
    return None
  op, ops, attrs = _expr(cond.root)
  if op != "compare" or len(ops) != 2:
    return None
  a, b = ops
  direction = attrs["direction"]
  k, limit = _counter(a, cond.parameters[0]), _scalar_int(b)
  if k is None or limit is None:      # C <op> counter: mirror the comparison
    k, limit = _counter(b, cond.parameters[0]), _scalar_int(a)
    direction = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction)
  if k is None or limit is None or direction not in ("LT", "LE", "GT", "GE"):
    return None
  start = _scalar_int(init.operands[k])
  broot = body.root
  if start is None or broot.opcode != "tuple":
    return None
  op, ops, _ = _expr(broot.operands[k])
  if op != "add" or len(ops) != 2:
    return None
  p = body.parameters[0]
  x, y = ops
  if _counter(x, p) == k:
    step = _scalar_int(y)
  elif _counter(y, p) == k:
    step = _scalar_int(x)
  else:
    return None
  if not step:
    return None
  if direction == "LE":
    limit, direction = limit + 1, "LT"
  elif direction == "GE":
    limit, direction = limit - 1, "GT"
  if direction == "LT":
    if start >= limit:
      return 0
    if step < 0:
      return None                     # runs until the counter wraps
    n = -(-(limit - start) // step)
  else:
    if start <= limit:
      return 0
    if step > 0:
      return None
    n = -(-(start - limit) // -step)
  # the counter must not wrap around its type before the loop ends
  info = np.iinfo(np.dtype(init.operands[k].dtype))
  last = start + (n - 1) * step
  if not (info.min <= last <= info.max and info.min <= last + step <= info.max):
    return None
  return n if n <= MAX_TRIP_COUNT else None
