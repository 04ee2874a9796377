"""Dot operands in a layout the GEMMs take: each operand of a floating-point ``dot`` whose
batch, free or contracting dimensions do not each form one strided run is transposed first.

The native GEMMs (the CPU's packed GEMM, the GPU's tensor-core and SIMT dots) see an operand as
``[batch, rows, depth]`` with one stride per group (``kernels.DotSpec``): the dimensions of a
group must be adjacent and in order in memory, though the groups themselves may come in any
order (a K-major or an M-major A, a batch dimension inside a row).  Attention written with
einsums ends with ``bhqd,bhkd->bhqk`` products over ``[b, t, h, d]`` arrays, whose batch
dimensions ``b`` and ``h`` are not adjacent (``simplify.dot_fold_transpose`` folds the head
transposes into the dimension numbers, and ``jnp.einsum`` writes such dots directly); such a dot
would run as a loop of dot products per output element.  A transpose costs one pass over the
operand, the product ``M*N*K`` multiply-adds per batch entry, so it is always worth it.

The transposed operand keeps the groups in the order they had (by their first dimension), each
group's dimensions in the order the dot needs them: batch and contracting dimensions in the
order of the dimension numbers (they pair with the other operand's), free dimensions in
increasing order (the result's).  Runs after the fixed point (simplify would fold the
transposes back) and before fusion, on the native backends only (the reference backend
evaluates any dot as it is).
"""
from __future__ import annotations

import numpy as np

from ourjax.lowering.hlo import Builder, Instruction, Module, dot_operand_groups

PASS = "dot_layout"


def _chains(dims, group) -> bool:
  """Whether ``group`` (in this order) is one row-major run of a row-major array of ``dims``:
  each dimension of size > 1 directly followed by the next one of size > 1."""
  real = [d for d in group if dims[d] != 1]
  pos = [d for d in range(len(dims)) if dims[d] != 1]
  if not real:
    return True
  start = pos.index(real[0])
  return pos[start:start + len(real)] == real


def layout_ok(instr: Instruction, k: int) -> bool:
  """Whether operand ``k`` of dot ``instr`` is in a layout the GEMMs take (as it is)."""
  dims = instr.operands[k].dims
  return all(_chains(dims, g) for g in dot_operand_groups(instr, k))


def _order(instr: Instruction, k: int) -> list:
  """The permutation that makes operand ``k``'s groups runs, keeping the groups' order."""
  groups = [g for g in dot_operand_groups(instr, k) if g]
  groups.sort(key=min)
  return [d for g in groups for d in g]


def _eligible(instr: Instruction) -> bool:
  return all(np.dtype(x.dtype).kind == "f" for x in (*instr.operands, instr)) and \
      instr.shape.size > 0


def run(module: Module) -> bool:
  changed = False
  for comp in list(module.computations):
    touched = False
    for instr in list(comp.instructions):
      if instr.opcode != "dot" or not _eligible(instr):
        continue
      ops = list(instr.operands)
      attrs = dict(instr.attrs)
      for k, side in enumerate(("lhs", "rhs")):
        if layout_ok(instr, k):
          continue
        order = _order(instr, k)
        where = {d: i for i, d in enumerate(order)}
        b = Builder.into(comp)
        ops[k] = b.transpose(ops[k], order)
        attrs[f"{side}_batch_dims"] = tuple(where[d] for d in attrs[f"{side}_batch_dims"])
        attrs[f"{side}_contracting_dims"] = tuple(
            where[d] for d in attrs[f"{side}_contracting_dims"])
        module.note(PASS, f"%{instr.name}: {side} %{instr.operands[k].name} transposed "
                          f"{tuple(order)} (its batch/free/contracting dimensions were not "
                          f"runs)")
      if ops == list(instr.operands):
        continue
      new = Builder.into(comp).emit("dot", ops, attrs, shape=instr.shape)
      comp.replace_all_uses(instr, new)
      comp.remove(instr)
      touched = changed = True
    if touched:
      comp.topological_sort()
  return changed
