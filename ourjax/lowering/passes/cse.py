"""Common subexpression elimination by structural hashing.

Two instructions are the same expression when they have the same opcode, shape, attributes and
(already deduplicated) operands; for commutative ops (add, multiply, and, or, xor) the operand
order does not matter. Called computations are compared structurally, by a fingerprint of
their instructions, and identical sub-computations (two copies of the same reducer, say) are
merged first. Parameters are never merged: they are distinct inputs.
"""
from __future__ import annotations

import numpy as np

from ourjax.lowering.hlo import COMMUTATIVE_OPS, Computation, Instruction, Module


class _Fingerprints:
  """Memoised structural keys of computations (names ignored)."""

  def __init__(self):
    self.cache: dict[int, tuple] = {}

  def of(self, comp: Computation) -> tuple:
    key = self.cache.get(id(comp))
    if key is None:
      pos = {instr: k for k, instr in enumerate(comp.instructions)}
      body = tuple((i.opcode, i.shape, tuple(pos[o] for o in i.operands), self.attrs(i))
                   for i in comp.instructions)
      key = (body, pos[comp.root])
      self.cache[id(comp)] = key
    return key

  def value(self, v):
    if isinstance(v, Computation):
      return ("computation", self.of(v))
    if isinstance(v, np.ndarray):
      return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.dtype):
      return ("dtype", v.str)
    if isinstance(v, (list, tuple)):
      return tuple(self.value(x) for x in v)
    if isinstance(v, float) and v != v:
      return ("nan",)
    return v

  def attrs(self, instr: Instruction) -> tuple:
    return tuple(sorted((k, self.value(v)) for k, v in instr.attrs.items()))


def _instruction_key(instr: Instruction, fps: _Fingerprints):
  operands = [id(o) for o in instr.operands]
  if instr.opcode in COMMUTATIVE_OPS:
    operands.sort()
  return (instr.opcode, instr.shape, tuple(operands), fps.attrs(instr))


def _merge_computations(module: Module, fps: _Fingerprints) -> bool:
  canonical: dict[tuple, Computation] = {}
  replace: dict[Computation, Computation] = {}
  for comp in module.computation_post_order():
    if comp is module.entry:
      continue
    key = (fps.of(comp), tuple(comp.parameter_shapes))
    if key in canonical:
      replace[comp] = canonical[key]
    else:
      canonical[key] = comp
  if not replace:
    return False
  for comp in module.computations:
    for instr in comp.instructions:
      for k, v in list(instr.attrs.items()):
        if isinstance(v, Computation) and v in replace:
          instr.attrs[k] = replace[v]
        elif isinstance(v, list) and any(isinstance(c, Computation) and c in replace for c in v):
          instr.attrs[k] = [replace.get(c, c) for c in v]
  for dup, keep in replace.items():
    module.note("cse", f"computation %{dup.name} is identical to %{keep.name}")
  fps.cache.clear()
  return True


def run(module: Module) -> bool:
  fps = _Fingerprints()
  changed = _merge_computations(module, fps)
  for comp in module.computation_post_order():
    seen: dict[tuple, Instruction] = {}
    for instr in list(comp.instructions):
      if instr.opcode == "parameter" or instr.parent is not comp:
        continue
      key = _instruction_key(instr, fps)
      prev = seen.get(key)
      if prev is None:
        seen[key] = instr
        continue
      comp.replace_all_uses(instr, prev)
      module.note("cse", f"{instr.name} is a copy of {prev.name}")
      if not instr.users and instr is not comp.root:
        comp.remove(instr)
      changed = True
    if changed:
      fps.cache.pop(id(comp), None)
  return changed
