"""Constant folding: evaluate instructions whose operands are all constants.

Values come from the reference executor (``backends/reference.py``), so a folded constant is
bitwise what the unfolded program computes there. Folding is bounded: results with more than
``MAX_ELEMENTS`` elements stay computed, and splats (``broadcast`` of a constant) and ``iota``
are never materialised — they are cheap to compute and would only bloat the module. Instructions
with side computations that may not terminate (``while``) are left alone, as are tuple-shaped
results (the IR has no tuple constants).
"""
from __future__ import annotations

from ourjax.backends import reference
from ourjax.lowering.hlo import Builder, Module

#: Largest result (in elements) that is folded into a constant.
MAX_ELEMENTS = 1 << 16

# broadcast/iota: keep splats and iotas symbolic; while: might not terminate;
# tuple/get-tuple-element: no tuple constants (simplify forwards get-tuple-element(tuple)).
NEVER_FOLD = {"parameter", "constant", "iota", "broadcast", "while", "tuple", "get-tuple-element"}


def run(module: Module) -> bool:
  changed = False
  for comp in module.computations:
    for instr in list(comp.instructions):
      if instr.parent is not comp or instr.opcode in NEVER_FOLD or not instr.operands:
        continue
      if instr.shape.is_tuple or instr.shape.size > MAX_ELEMENTS:
        continue
      if not all(o.opcode == "constant" for o in instr.operands):
        continue
      try:
        value = reference.evaluate_instruction(instr, [o.value for o in instr.operands])
      except reference.ReferenceError:
        continue  # leave it for run time, where the error belongs
      const = Builder.into(comp, before=instr).constant(value, instr.dtype)
      comp.replace_all_uses(instr, const)
      module.note("constant_folding", f"{instr.name} ({instr.opcode}) -> {const.name}")
      if not instr.users and instr is not comp.root:
        ops = list(instr.operands)
        comp.remove(instr)
        for o in set(ops):  # operands often die with it
          if o.parent is comp and not o.users and o is not comp.root:
            comp.remove(o)
      changed = True
  return changed
