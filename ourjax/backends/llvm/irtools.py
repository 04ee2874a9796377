"""Housekeeping of llvmlite IR objects once they are built.

    drop_unused(fn)     # delete the side-effect-free instructions nothing uses
    release(module)     # break a module's reference cycles once its text is taken
"""
from __future__ import annotations

import llvmlite.ir as ir

__all__ = ["drop_unused", "release"]


#: Instructions without side effects (``drop_unused`` may delete them when unused).
_PURE_OPS = frozenset(
    "add sub mul udiv sdiv urem srem shl lshr ashr and or xor icmp fcmp getelementptr select "
    "fadd fsub fmul fdiv frem fneg zext sext trunc bitcast ptrtoint inttoptr fpext fptrunc "
    "sitofp uitofp fptosi fptoui extractelement insertelement shufflevector".split())


def drop_unused(fn: ir.Function) -> int:
  """Delete the side-effect-free instructions of ``fn`` that nothing uses (and then those only
  they used), returning how many: index arithmetic made in case it is needed, say.  LLVM
  deletes them too, but only after parsing them, and unused IR that names constants (the
  sizes of dimensions) made functions alike in effect differ in text, and so in the keys by
  which code is shared."""
  uses = {}
  for blk in fn.blocks:
    for ins in blk.instructions:
      for v in ins.operands:
        uses[id(v)] = uses.get(id(v), 0) + 1
      if type(ins) is ir.PhiInstr:
        for v, _ in ins.incomings:
          uses[id(v)] = uses.get(id(v), 0) + 1
  dead = set()
  work = [ins for blk in fn.blocks for ins in blk.instructions
          if ins.opname in _PURE_OPS and id(ins) not in uses]
  while work:
    ins = work.pop()
    if id(ins) in dead:
      continue
    dead.add(id(ins))
    for v in ins.operands:
      n = uses[id(v)] - 1
      uses[id(v)] = n
      if n == 0 and isinstance(v, ir.Instruction) and v.opname in _PURE_OPS:
        work.append(v)
  if dead:
    for blk in fn.blocks:
      blk.instructions[:] = [ins for ins in blk.instructions if id(ins) not in dead]
  return len(dead)


def release(module: ir.Module) -> None:
  """Break the reference cycles of an llvmlite module whose text has been taken (instructions
  and their blocks, blocks and their functions, functions and the module), so that reference
  counting frees its objects as soon as the last reference goes: left to the cyclic collector,
  the tens of thousands of objects a program's kernels make were one collection of about a
  tenth of a second at the end of its compilation (the collector is paused meanwhile:
  ``ourjax/_gc.py``)."""
  for g in list(module.globals.values()):
    if isinstance(g, ir.Function):
      for blk in g.blocks:
        for ins in blk.instructions:
          ins.__dict__.clear()
        blk.__dict__.clear()
      g.__dict__.clear()
    else:
      g.__dict__.clear()
  module.globals.clear()
