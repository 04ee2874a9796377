"""``verify(module)``: the HLO verifier (structure, use lists, and every instruction's shape
recomputed by ``infer_shape``).  Part of ``hlo`` (``hlo.verify``), split out of hlo.py."""
from __future__ import annotations

import numpy as np

from ourjax.lowering.hlo import Instruction, Module, ShapeError, VerifyError, infer_shape

__all__ = ["verify"]

def _verify_fail(comp, instr, msg):
  where = f"%{instr.name} ({instr.opcode}) in %{comp.name}" if instr is not None else \
      f"computation %{comp.name}"
  raise VerifyError(f"verify: {where}: {msg}")


def verify(module: Module) -> None:
  """Check that ``module`` is well formed; raise ``VerifyError`` naming the instruction.

  Checks: an entry exists; names are unique; every computation has its parameters numbered
  0..n-1 and a root inside it; operands are defined earlier in the same computation; operand
  and user lists agree; every instruction's shape equals what its shape rule computes from its
  operands and attributes (which also checks the signatures of called computations); called
  computations belong to the module; constants hold read-only arrays of their shape."""
  if module.entry is None:
    raise VerifyError(f"verify: module {module.name} has no entry computation")
  names: dict[str, Instruction] = {}
  comp_names = set()
  in_module = set(module.computations)
  for comp in module.computations:
    if comp.name in comp_names:
      raise VerifyError(f"verify: duplicate computation name %{comp.name}")
    comp_names.add(comp.name)
    if comp.module is not module:
      _verify_fail(comp, None, "computation does not point back to its module")
    if comp.root is None:
      _verify_fail(comp, None, "no root")
    if comp.root.parent is not comp:
      _verify_fail(comp, comp.root, "the root is not in this computation")
    listed = set(comp.instructions) if comp.parameters else ()
    for i, p in enumerate(comp.parameters):
      if p is None or p.opcode != "parameter" or p.attrs["parameter_number"] != i:
        _verify_fail(comp, p, f"parameter {i} missing or misnumbered")
      if p.parent is not comp or p not in listed:
        _verify_fail(comp, p, "parameter not in the instruction list")
    position = {}
    for k, instr in enumerate(comp.instructions):
      if instr.parent is not comp:
        _verify_fail(comp, instr, "parent is not this computation")
      if instr.name in names:
        _verify_fail(comp, instr, f"duplicate instruction name %{instr.name}")
      names[instr.name] = instr
      if instr.opcode == "parameter" and (
          instr.attrs["parameter_number"] >= len(comp.parameters)
          or comp.parameters[instr.attrs["parameter_number"]] is not instr):
        _verify_fail(comp, instr, "parameter not registered in the parameter list")
      for op in instr.operands:
        if op not in position:
          _verify_fail(comp, instr, f"operand %{op.name} is not defined before use in this "
                       "computation")
        if instr not in op.users:
          _verify_fail(comp, instr, f"missing from the users of its operand %{op.name}")
      for u in instr.users:
        if instr not in u.operands or u.parent is not comp:
          _verify_fail(comp, instr, f"dangling user %{u.name}")
      if len(set(map(id, instr.users))) != len(instr.users):
        _verify_fail(comp, instr, "duplicate entries in users")
      for sub in instr.called_computations:
        if sub not in in_module:
          _verify_fail(comp, instr, f"calls %{sub.name}, which is not in the module")
        if sub is comp:
          _verify_fail(comp, instr, "calls its own computation")
      if instr.opcode == "constant":
        v = instr.attrs.get("value")
        if not isinstance(v, np.ndarray) or v.flags.writeable:
          _verify_fail(comp, instr, "constant value must be a read-only numpy array")
      declared = instr.shape
      try:
        expect = infer_shape(instr.opcode, [o.shape for o in instr.operands], instr.attrs,
                             declared)
      except ShapeError as e:
        _verify_fail(comp, instr, str(e))
      if expect != declared:
        _verify_fail(comp, instr, f"shape {declared} but its operands and attributes give "
                     f"{expect}")
      position[instr] = k
    if comp.root not in position:
      _verify_fail(comp, comp.root, "root not in the instruction list")
