"""Horizontal fusion: independent GPU kernels that run one after the other become one launch.

A kernel launch costs the device about a microsecond and a half even inside a CUDA graph, more
than the work of a small kernel: a scan iteration of an LSTM's forward pass plans a dozen small
kernels (the step's gates, each residual written into its stacked slice), an RK4 step several.
Kernels that neither read what another writes nor write what another reads or writes can run
at the same time; XLA's horizontal fusion puts such kernels into one.  Here the planned steps
of every straight-line stretch are grouped (``merge_steps``) and each group of two or more
becomes one ``Horizontal`` kernel: its grid is the parts' grids end to end, block ``b`` runs
part ``i`` when ``b`` falls in part ``i``'s range, with the special registers the part reads
(``ctaid.x``, ``nctaid.x``, ``ntid.x``) answering as in the part's own launch
(``codegen.sreg``'s overrides); threads beyond a part's block size skip it.

Parts are the 1-D kernels without scratch or dynamic shared memory whose blocks are
independent: the grid-stride ones (``Elementwise``, ``Threaded``), and those whose blocks
synchronise only within themselves (``SplitPartials``, ``RowReduce``: block-wide reductions),
which join a group only at their own block size, so that every thread of a block reaches their
barriers.  A kernel joins the earliest group above it that it can reach: nothing between
the group and the kernel (nor the group itself) conflicts with it, looking back at most
``LOOKBACK`` steps, so kernels move up only past independent neighbours, live ranges change
little, and kernels that depend on one group all land in the group after it (an LSTM step's
residuals: computed in one launch, stored into their stacked slices in the next).
Grouping runs before buffer assignment: the parts' buffers are distinct ``Buf`` objects, all
alive at the merged step, so they get disjoint memory.  ``OURJAX_CUDA_HORIZONTAL=0`` turns it
off.

The same pass over the steps folds an elementwise kernel that reads a ``ColumnFinish``'s result
only at its own index into that kernel, and a one-thread kernel into the ``SplitFinish`` of one
output before it (``fold_finish_epilogues``: vertically, a bias's update computed where its
gradient is finished, a scan step's scalar stored where it is reduced).
"""
from __future__ import annotations

from llvmlite import ir

from ourjax.backends.cuda import codegen, reductions, stencil
from ourjax.backends.cuda.codegen import I32, GpuKernel
from ourjax.backends.llvm.kernel_info import same_origin
from ourjax.backends.llvm.planning import reads_at_own_index
from ourjax.config import env_switch

__all__ = ["Horizontal", "merge_steps", "enabled"]

#: How many steps back a kernel may move to join a group.
LOOKBACK = 12


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_HORIZONTAL")


#: Kernels whose blocks synchronise (block-wide reductions through static shared memory and
#: ``bar.sync``): parts only where every thread of the merged block runs them, i.e. where
#: their block size is the merged kernel's.
SYNCED = (reductions.SplitPartials, reductions.RowReduce, stencil.StencilChain)


def mergeable(kernel) -> bool:
  """Whether ``kernel`` can be a part: a 1-D kernel without dynamic shared memory or scratch
  whose blocks are independent of each other: a grid-stride kernel, or one whose blocks
  synchronise within themselves (``SYNCED``, at the merged block size only)."""
  if isinstance(kernel, Horizontal):
    return True
  if type(kernel) not in (codegen.Elementwise, codegen.Threaded) + SYNCED or kernel.scratch:
    return False
  return True


def _parts(kernel) -> list:
  return kernel.parts if isinstance(kernel, Horizontal) else [kernel]


def _fits(group, kernel, info) -> bool:
  """Whether ``kernel`` can join ``group`` as far as block sizes go: every synchronising part
  must get exactly its own block size (all its threads reach its barriers)."""
  parts = [p for k in group + [kernel] for p in _parts(k)]
  blocks = {id(p): p.launch(info)[1][0] for p in parts}
  block = max(blocks.values())
  return all(blocks[id(p)] == block for p in parts if isinstance(p, SYNCED))


class Horizontal(GpuKernel):
  """Independent kernels ``parts`` launched as one (see the module docstring).  The parts'
  grids are fixed here from ``info`` (each part's own launch on that device); a part's code
  covers its elements whatever grid it gets, so a device with another SM count only changes
  how the work is spread."""

  def __init__(self, name, parts, info):
    flat = []
    for p in parts:
      flat.extend(p.parts if isinstance(p, Horizontal) else [p])
    self.parts = flat
    self.ranges = []
    start = 0
    block = 1
    for p in flat:
      (gx, gy, gz), (bx, by, bz), shared = p.launch(info)
      if gy != 1 or gz != 1 or by != 1 or bz != 1 or shared:
        raise ValueError(f"{p.name}: not a 1-D launch without shared memory")
      self.ranges.append((start, start + gx, bx))
      start += gx
      block = max(block, bx)
    self.blocks, self.block = start, block
    for p, (_, _, bx) in zip(flat, self.ranges):
      if isinstance(p, SYNCED) and bx != block:
        raise ValueError(f"{p.name}: synchronises blocks of {bx} threads, merged block {block}")
    reads, writes, seen = [], [], set()
    for p in flat:
      for x in p.writes:
        if id(x) not in seen:
          seen.add(id(x))
          writes.append(x)
    for p in flat:
      for x in p.reads:
        if id(x) not in seen:
          seen.add(id(x))
          reads.append(x)
    super().__init__(name, reads, writes, work=sum(p.work for p in flat))

  def launch(self, info):
    return (self.blocks, 1, 1), (self.block, 1, 1), 0

  def helpers(self):
    return [h for p in self.parts for h in p.helpers()]

  def gpu_body(self, b, ptr):
    blk = codegen.sreg(b, "ctaid.x")
    tid = codegen.sreg(b, "tid.x")
    for p, (lo, hi, bx) in zip(self.parts, self.ranges):
      inside = b.and_(b.icmp_unsigned(">=", blk, ir.Constant(I32, lo)),
                      b.icmp_unsigned("<", blk, ir.Constant(I32, hi)))
      if bx < self.block:
        inside = b.and_(inside, b.icmp_unsigned("<", tid, ir.Constant(I32, bx)))
      with b.if_then(inside):
        saved = getattr(b, "sreg_values", None)
        b.sreg_values = {"ctaid.x": b.sub(blk, ir.Constant(I32, lo)),
                         "nctaid.x": ir.Constant(I32, hi - lo),
                         "ntid.x": ir.Constant(I32, bx)}
        try:
          p.gpu_body(b, ptr)
        finally:
          b.sreg_values = saved


def _conflict(a, b) -> bool:
  """Whether kernels ``a`` and ``b`` must run in order: one writes a buffer the other reads
  or writes."""
  wa = {id(x) for x in a.writes}
  wb = {id(x) for x in b.writes}
  if wa & wb:
    return True
  return bool(wa & {id(x) for x in b.reads}) or bool(wb & {id(x) for x in a.reads})


def _within(step, transform) -> None:
  """Replace each step list inside ``step`` (a loop's condition and body, a conditional's
  branches) by ``transform`` of it."""
  for attr in ("cond_steps", "body_steps"):
    if hasattr(step, attr):
      setattr(step, attr, transform(getattr(step, attr)))
  if hasattr(step, "branches"):
    step.branches = [transform(br) for br in step.branches]


def merge_steps(steps, info, step_type):
  """``steps`` with the kernels of each straight-line stretch grouped (module docstring);
  loops' and conditionals' steps are grouped inside.  ``step_type(kernel)`` makes a step."""
  out = []          # steps; a group is a list of kernels until the stretch ends
  for s in steps:
    k = getattr(s, "kernel", None)
    if k is None:
      _within(s, lambda sub: merge_steps(sub, info, step_type))
      out.append(s)
      continue
    target = None
    if mergeable(k):      # the earliest group it can join, moving up past independent steps
      for j in range(len(out) - 1, max(-1, len(out) - 1 - LOOKBACK), -1):
        item = out[j]
        if isinstance(item, list):
          if any(_conflict(m, k) for m in item):
            break
          if _fits(item, k, info):
            target = item
          continue
        other = getattr(item, "kernel", None)
        if other is None or _conflict(other, k):
          break
    if target is not None:
      target.append(k)
    elif mergeable(k):
      out.append([k])
    else:
      out.append(s)
  result = []
  for item in out:
    if not isinstance(item, list):
      result.append(item)
    elif len(item) == 1:
      result.append(step_type(item[0]))
    else:
      merged = Horizontal(item[0].name + "_h", item, info)
      merged.hlo_group = getattr(item[0], "hlo_group", None)
      result.append(step_type(merged))
  return result


def fold_finish_epilogues(steps, step_type):
  """``steps`` with each elementwise kernel that follows a ``ColumnFinish`` and reads its
  output only at the index of the element it computes (a bias's update from its gradient, the
  gradient's scaling) computed by that kernel, and each serial (one-thread) kernel that follows
  a ``SplitFinish`` of one output run by that output's thread after it (a scan step's scalar
  result stored into its stacked slice): one launch instead of two; loops' and conditionals'
  steps are folded inside."""
  out = []
  for s in steps:
    k = getattr(s, "kernel", None)
    if k is None:
      _within(s, lambda sub: fold_finish_epilogues(sub, step_type))
      out.append(s)
      continue
    prev = getattr(out[-1], "kernel", None) if out else None
    if (type(prev) is reductions.ColumnFinish and type(k) is codegen.Elementwise
        and k.total == prev.nout and not k.scratch
        and any(b is prev.out for b in k.leafmap.values())
        and not ({id(x) for x in k.writes} & {id(x) for x in prev.reads + prev.writes})
        and reads_at_own_index(k, prev.out, k.dims)):
      new = reductions.ColumnFinish(prev.name, prev.reduce, prev.out, prev.partials,
                                    prev.leafmap, prev.splits, prev.epilogues + [k])
      out[-1] = step_type(same_origin(new, prev))
      continue
    if (type(prev) is reductions.SplitFinish and prev.nout == 1 and type(k) is codegen.Threaded
        and k.nthreads == 1 and not k.scratch
        and not ({id(x) for x in k.writes} & {id(x) for x in prev.reads + prev.writes})):
      new = reductions.SplitFinish(prev.name, prev.dims, prev.outputs, prev.prefetch,
                                   prev.partials, prev.leafmap, prev.groups,
                                   prev.tails + [k.inner])
      out[-1] = step_type(same_origin(new, prev))
      continue
    out.append(s)
  return out


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
