"""Dead code elimination: drop instructions nothing uses, and computations nothing calls.

Every op in the IR is free of side effects, so an instruction is live exactly when the root
depends on it. Parameters always stay (they are the computation's signature). Computations not
reachable from the entry (unused reducers, comparators, fused computations left behind by other
passes) are removed from the module.
"""
from __future__ import annotations

from ourjax.lowering.hlo import Module


def run(module: Module) -> bool:
  changed = False
  for comp in module.computations:
    live = set()
    stack = [comp.root]
    while stack:
      i = stack.pop()
      if i in live:
        continue
      live.add(i)
      stack.extend(i.operands)
    dead = [i for i in comp.instructions if i not in live and i.opcode != "parameter"]
    for instr in reversed(dead):  # users before their operands
      comp.remove(instr)
    if dead:
      module.note("dce", f"%{comp.name}: removed {len(dead)} unused instruction(s): "
                  + ", ".join(i.name for i in dead[:8]) + (" ..." if len(dead) > 8 else ""))
      changed = True
  reachable = set(module.reachable_computations())
  for comp in list(module.computations):
    if comp not in reachable:
      module.remove_computation(comp)
      module.note("dce", f"removed unused computation %{comp.name}")
      changed = True
  return changed
