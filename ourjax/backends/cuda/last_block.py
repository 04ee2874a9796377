"""A split reduction finished by the last block of the launch that computes its partials.

A reduction of one output over many elements (a loss's mean, a scan step's ``mean(s**2)``) is
planned in two passes: a kernel whose blocks write one partial each (``SplitPartials``, or a
``StencilChain`` or ``Horizontal`` holding one), then a ``SplitFinish`` that combines them.  The
second launch costs about as much as the first's work when the arrays are small, and a loop
pays it every iteration (an RK4 scan: two launches per step).

``FinishInLastBlock`` runs both in one launch, the way CUB's single-pass reductions do: every
block runs the first kernel's code, makes its writes visible device-wide (``fence.acq_rel.gpu``),
and counts itself on a counter (``atom.inc``, which wraps to 0 after the last block, so the
counter is back at 0 for the next launch without a reset); the block that arrives last runs the
finishing kernel's code, which reads every block's partial.  The partials are combined in the
same order as before, by one block, so the result is what the two launches computed, bit for
bit.  The counter is a 4-byte constant of the executable (zero when uploaded).

``fuse`` finds each such pair of consecutive steps (inside loops too).  ``OURJAX_CUDA_LAST_BLOCK=0``
keeps the two launches.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ourjax.backends.cuda import codegen, reductions
from ourjax.backends.cuda.codegen import I32, GpuKernel, barrier, shared_array, shared_ptr
from ourjax.backends.cuda.dots import _asm
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.kernel_info import same_origin
from ourjax.config import env_switch

__all__ = ["FinishInLastBlock", "fuse", "enabled"]


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_LAST_BLOCK")


class FinishInLastBlock(GpuKernel):
  """``first`` (a 1-D launch writing ``finish``'s partials) and ``finish`` (a ``SplitFinish``
  of one output) as one launch (module docstring); ``counter``: a 4-byte buffer holding 0."""

  def __init__(self, name, first, finish, counter, info):
    (gx, gy, gz), (bx, by, bz), shared = first.launch(info)
    if gy != 1 or gz != 1 or by != 1 or bz != 1:
      raise ValueError(f"{first.name}: not a 1-D launch")
    self.first, self.counter = first, counter
    self.grid, self.block, self.shared = gx, bx, shared
    # the finishing code runs on the first kernel's block: a block-wide combination strides
    # over the partials with all of its threads
    self.finish = reductions.SplitFinish(finish.name, finish.dims, finish.outputs,
                                         finish.prefetch, finish.partials, finish.leafmap,
                                         finish.groups, finish.tails)
    self.finish.WIDE_BLOCK = bx
    reads, writes, seen = [], [], set()
    for k in (first, self.finish):
      for x in k.writes:
        if id(x) not in seen:
          seen.add(id(x))
          writes.append(x)
    for k in (first, self.finish):
      for x in k.reads:
        if id(x) not in seen:
          seen.add(id(x))
          reads.append(x)
    super().__init__(name, reads, writes + [counter], work=first.work + finish.work)

  def launch(self, info):
    return (self.grid, 1, 1), (self.block, 1, 1), self.shared

  def helpers(self):
    return list(self.first.helpers()) + list(self.finish.helpers())

  def gpu_body(self, b, ptr):
    self.first.gpu_body(b, ptr)
    # this block's writes are visible device-wide before it is counted
    _asm(b, "fence.acq_rel.gpu;", "~{memory}", [])
    barrier(b)
    flag = shared_array(b.module, I32, 1, self.name + "_last", 4)
    tid = codegen.sreg(b, "tid.x")
    with b.if_then(b.icmp_unsigned("==", tid, ir.Constant(I32, 0))):
      cnt = b.bitcast(ptr(self.counter), ir.PointerType(I32))
      old = _asm(b, "atom.acq_rel.gpu.global.inc.u32 $0, [$1], $2;", "=r,l,r,~{memory}",
                 [cnt, ir.Constant(I32, self.grid - 1)], ret=I32)
      last = b.icmp_unsigned("==", old, ir.Constant(I32, self.grid - 1))
      b.store(b.zext(last, I32), shared_ptr(b, flag, ir.Constant(I32, 0)))
    barrier(b)
    last = b.load(shared_ptr(b, flag, ir.Constant(I32, 0)))
    with b.if_then(b.icmp_unsigned("!=", last, ir.Constant(I32, 0))):
      _asm(b, "fence.acq_rel.gpu;", "~{memory}", [])
      saved = getattr(b, "sreg_values", None)
      b.sreg_values = {"ctaid.x": ir.Constant(I32, 0), "nctaid.x": ir.Constant(I32, 1),
                       "ntid.x": ir.Constant(I32, self.block)}
      try:
        self.finish.gpu_body(b, ptr)
      finally:
        b.sreg_values = saved


def _fits(first, finish, info) -> bool:
  if type(finish) is not reductions.SplitFinish or finish.nout != 1:
    return False
  if not isinstance(first, GpuKernel) or first.is_copy:
    return False
  (gx, gy, gz), (bx, by, bz), _ = first.launch(info)
  if gy != 1 or gz != 1 or by != 1 or bz != 1 or gx < 1 or bx % 32:
    return False
  written = {id(x) for x in first.writes}
  return all(id(p) in written for ps in finish.partials for p in ps)


def fuse(steps, planner, info, step_type):
  """``steps`` with each ``SplitFinish`` of one output that directly follows the kernel writing
  its partials run by that kernel's last block (inside loops and conditionals too)."""
  from ourjax.backends.cuda.horizontal import _within
  out = []
  for s in steps:
    k = getattr(s, "kernel", None)
    if k is None:
      _within(s, lambda sub: fuse(sub, planner, info, step_type))
      out.append(s)
      continue
    prev = getattr(out[-1], "kernel", None) if out else None
    if prev is not None and _fits(prev, k, info):
      counter = K.Buf(np.dtype(np.uint32), (1,), f"{prev.name}.blocks_done", kind="const")
      counter.const_value = np.zeros(1, np.uint32)
      planner.consts.append(counter)
      new = FinishInLastBlock(prev.name + "_f", prev, k, counter, info)
      out[-1] = step_type(same_origin(new, prev))
      continue
    out.append(s)
  return out
