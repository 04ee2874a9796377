"""Removal of optimization barriers (``opt-barrier``), once the passes they guard against have
run: each ``get-tuple-element(opt-barrier(x0, x1, ...), i)`` becomes ``xi``.

A barrier keeps the fixed-point passes (simplify, constant folding, CSE) from merging the
computation behind it with equal work elsewhere: ``checkpoint``'s recomputation reads its inputs
through one, so that it is not merged back into the forward pass it recomputes (which would keep
the forward values alive until the backward pass: what remat exists to avoid).  Fusion and the
backends need no barrier, so this is the first late pass.
"""
from __future__ import annotations

from ourjax.lowering.hlo import Module


def run(module: Module) -> bool:
  changed = False
  for comp in module.computations:
    for instr in list(comp.instructions):
      if instr.parent is not comp or instr.opcode != "opt-barrier":
        continue
      for user in list(instr.users):
        if user.opcode == "get-tuple-element" and user.parent is comp:
          comp.replace_all_uses(user, instr.operands[user.attrs["index"]])
          if user is not comp.root:
            comp.remove(user)
      if not instr.users and instr is not comp.root:
        comp.remove(instr)
        module.note("barriers", f"{instr.name} removed")
        changed = True
  return changed
