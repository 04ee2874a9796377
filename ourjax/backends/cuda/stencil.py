"""Stencil chains: dependent elementwise kernels whose reads are shifted along one axis run as
one launch, each intermediate staged in shared memory over the block's tile and a halo.

Fusion stops where a value would be computed at too many positions per element
(``fusion.MAX_DUPLICATION``): an RK4 step of a rolled stencil evaluates each stage of the
right-hand side at the neighbours of the previous one, 3^4 positions deep.  What stays is a
chain of kernels, each reading the previous ones' results in memory at a few offsets along the
last axis (``roll``, shifted slices, pads), and a loop body of small arrays pays a launch per
kernel (about 1.5-2 us, more than the work) several times per iteration.

Here a run of consecutive planned kernels (``chain_steps``) becomes one ``StencilChain``:
elementwise stages over arrays whose last dimension is the same ``N`` (the tile axis; the
leading dimensions are small and taken whole), optionally ending in a split reduction of one
output (a scan step's ``mean(s**2)``), which the chain's blocks then compute as their partials.
Block ``g`` owns positions ``[g*T, (g+1)*T)`` of the tile axis.  Each stage is a phase: the
block computes the stage's outputs over its tile widened by the halo its readers need
(``_windows``: the offsets at which later stages read them, found by ``read_offsets``, windows
taken modulo ``N`` so that a roll's wrap-around is a shift like any other), keeps in shared
memory those that later stages read, writes to memory those anything else reads (at the tile's
own positions only), then ``bar.sync``.  A later stage reads a staged value from shared
memory (``_StagedEmitter``): a position is found in the window by its offset from the window's
start modulo ``N``; a read the emitter makes but then discards (the other side of a
concatenate's select) may fall outside the window and is clamped into it.  Values in the halo
are computed by two neighbouring blocks (a few positions per stage); every value is otherwise
computed once, from the same operands as before, so elementwise results are bit for bit those
of the separate kernels (a reduction's partials are per tile: another summation order).  The
finishing ``SplitFinish`` combines one partial per tile with a block of threads.

A chain is formed only where it saves a launch (a stage reads an earlier stage's result) and
is safe: every read of an earlier stage's result is at offsets along the last axis only
(``read_offsets``; a read at positions that do not follow the element, a gather or a reverse
along it, leaves the kernels as they are), nothing the chain writes is read from memory by a
stage, and the staged values fit in shared memory.  ``OURJAX_CUDA_STENCIL=0`` turns it off.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ourjax.backends.cuda import codegen, reductions
from ourjax.backends.cuda.codegen import I32, GpuKernel, sreg64
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.kernel_info import same_origin
from ourjax.backends.llvm.emitter import Emitter, Index, i64
from ourjax.config import env_switch

__all__ = ["StencilChain", "chain_steps", "read_offsets", "enabled"]

#: Positions of the tile axis a block owns.
TILE = 256          # (measured on an H100, RK4 scan: 128 -> 7.6 ms, 256 -> 6.3, 512 -> 7.3)
#: The widest halo (on either side) a staged value may need.
MAX_HALO = 64
#: Shared memory the staged values may take (static shared memory: 48 KiB per block).
MAX_SHARED_BYTES = 40 << 10
#: The most distinct offsets tracked per value (more: not a stencil).
MAX_OFFSETS = 64
#: The most kernels sharing no buffer with a chain that may sit between its kernels (and run
#: after it instead): a loop's scalar updates.
MAX_SKIPPED = 8


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_STENCIL")


class NotStencil(Exception):
  """A kernel reads a value at positions that are not shifts along the tile axis."""


# ---------------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------------

def read_offsets(outputs, leafmap) -> dict:
  """For a kernel computing ``outputs`` (instructions of one fused computation, each evaluated
  at every index of its dims) from the leaves of ``leafmap``: ``{leaf: (axis, offsets)}``, the
  dimension of the leaf that follows the outputs' last dimension and the offsets along it at
  which the leaf is read relative to the output's position (``axis`` None: read at positions
  that do not depend on it).  Raises ``NotStencil`` where the relation is anything else."""
  state: dict = {}
  order = []

  def need(x, axis, offs):
    old = state.get(x)
    if old is None:
      state[x] = (axis, set(offs))
      order.append(x)
      return
    if old[0] != axis:
      if old[0] is None and not old[1]:
        state[x] = (axis, set(offs))
        return
      if axis is None and not offs:
        return
      raise NotStencil(f"%{x.name} is read along different dimensions")
    old[1].update(offs)
    if len(old[1]) > MAX_OFFSETS:
      raise NotStencil(f"%{x.name} is read at more than {MAX_OFFSETS} offsets")

  comp = None
  for instr in outputs:
    comp = instr.parent
    need(instr, len(instr.dims) - 1 if instr.dims else None, {0} if instr.dims else ())
  if comp is None:
    return {}
  for x in reversed(comp.instructions):
    st = state.get(x)
    if st is None or x in leafmap:
      continue
    a, offs = st
    _propagate(x, a, offs, need)
  return {x: (state[x][0], frozenset(state[x][1])) for x in order if x in leafmap}


def _propagate(x, a, offs, need) -> None:
  op = x.opcode
  ops = x.operands
  if a is None:
    for o in ops:
      need(o, None, ())
    return
  if op in ("parameter", "constant", "iota"):
    return
  if x.is_elementwise() or op in ("copy", "bitcast-convert"):
    for o in ops:
      if o.dims == x.dims:
        need(o, a, offs)
      elif o.dims == ():
        need(o, None, ())
      else:
        raise NotStencil(f"%{x.name}: operand of other dims")
    return
  if op == "broadcast":
    dims = list(x.attrs["dimensions"])
    o = ops[0]
    if a in dims and o.dims[dims.index(a)] == x.dims[a]:
      need(o, dims.index(a), offs)
    else:
      need(o, None, ())
    return
  if op == "reshape":
    o = ops[0]
    if (a == len(x.dims) - 1 and o.dims and o.dims[-1] == x.dims[-1]
        and math.prod(o.dims[:-1]) == math.prod(x.dims[:-1])):
      need(o, len(o.dims) - 1, offs)
      return
    raise NotStencil(f"%{x.name}: a reshape across the tile axis")
  if op == "transpose":
    need(ops[0], x.attrs["dimensions"][a], offs)
    return
  if op == "slice":
    strides = x.attrs.get("strides") or (1,) * len(x.dims)
    if strides[a] != 1:
      raise NotStencil(f"%{x.name}: a strided slice along the tile axis")
    s = x.attrs["start_indices"][a]
    need(ops[0], a, {d + s for d in offs})
    return
  if op == "concatenate":
    d, parts = E.concat_parts(x)
    for o, off, _n in parts:
      need(o, a, offs if d != a else {v - off for v in offs})
    return                  # (empty parts are never read)
  if op == "pad":
    lo, _hi, interior = x.attrs["padding_config"][a]
    if interior:
      raise NotStencil(f"%{x.name}: interior padding along the tile axis")
    need(ops[0], a, {v - lo for v in offs})
    need(ops[1], None, ())
    return
  if op == "reverse":
    if a in x.attrs["dimensions"]:
      raise NotStencil(f"%{x.name}: a reverse along the tile axis")
    need(ops[0], a, offs)
    return
  if op == "dynamic-slice":
    o = ops[0]
    if x.attrs["dynamic_slice_sizes"][a] != o.dims[a]:
      raise NotStencil(f"%{x.name}: a dynamic slice along the tile axis")
    need(o, a, offs)
    for i in ops[1:]:
      need(i, None, ())
    return
  raise NotStencil(f"%{x.name}: {op} along the tile axis")


def _normalize(offs, n: int) -> list:
  """Offsets modulo ``n``, each as the representative nearest zero."""
  out = []
  for v in offs:
    v %= n
    out.append(v - n if v > n // 2 else v)
  return out


# ---------------------------------------------------------------------------------------------
# the chain kernel
# ---------------------------------------------------------------------------------------------

class _Stage:
  """One phase: ``kind`` "elementwise" (outputs [(instr, Buf)], dims) or "partials" (the
  reductions of a one-output split reduction, written per block into ``partials``)."""

  def __init__(self, kind, kernel, dims, outputs, leafmap, reduces=(), partials=()):
    self.kind, self.kernel, self.dims = kind, kernel, tuple(dims)
    self.outputs, self.leafmap = list(outputs), dict(leafmap)
    self.reduces, self.partials = list(reduces), list(partials)
    self.reads = {}          # leaf instr -> offsets (normalised) for staged leaves
    self.lo = self.hi = 0    # the halo of this stage's window


class StencilChain(GpuKernel):
  """Stages computed block by block over tiles of the last axis (module docstring)."""
  compile_cost = 16

  def __init__(self, name, stages, n, staged, globals_out, partial_bufs, extra_reads=(),
               extra_writes=()):
    self.stages, self.n = list(stages), n
    self.staged = set(staged)             # id(Buf) of outputs kept in shared memory
    self.globals_out = set(globals_out)   # id(Buf) of outputs also written to memory
    self.tiles = -(-n // TILE)
    reads, writes, seen = [], [], set()
    for st in self.stages:
      for _, buf in st.outputs:
        if id(buf) in self.globals_out and id(buf) not in seen:
          seen.add(id(buf))
          writes.append(buf)
    for ps in partial_bufs:
      for p in ps:
        seen.add(id(p))
        writes.append(p)
    for st in self.stages:
      for x in st.leafmap.values():
        if not isinstance(x, K.Buf) or id(x) in self.staged:
          continue
        if id(x) not in seen:
          seen.add(id(x))
          reads.append(x)
    super().__init__(name, reads + list(extra_reads), writes + list(extra_writes), work=sum(
        math.prod(st.dims) for st in self.stages))
    if "block" not in vars(self):
      # a thread per position of the widest window (a warp's multiple), so that a stage
      # evaluates one element per row and thread in straight-line code (measured on an H100,
      # RK4 blocked ten iterations per launch: 5.8 us per iteration with 256 threads looping
      # over a 344-wide window, 2.1 with 352)
      widest = TILE + max(st.lo + st.hi for st in self.stages)
      self.block = min(1024, -(-widest // 32) * 32)

  #: the widest halo of a window (how far outside the axis a window position may fall)
  reach = MAX_HALO

  def launch(self, info):
    return (self.tiles, 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    mod = b.module
    codegen.launch_bounds(mod, b.function, self.block)   # (registers for the whole block)
    tile = sreg64(b, "ctaid.x")
    t0 = b.mul(tile, i64(TILE), flags=["nuw", "nsw"])
    tid = sreg64(b, "tid.x")
    # id(Buf) -> (shared-memory pointer, window length, window start, axis length, dtype)
    arrays = {}
    for st in self.stages:
      win, base = _window(b, st, t0)
      for _, buf in st.outputs:
        if id(buf) in self.staged:
          rows = math.prod(buf.dims[:-1])
          gv = codegen.shared_array(mod, E.storage_type(buf.dtype), rows * win,
                                    f"{self.name}_s{len(arrays)}")
          p = b.gep(gv, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
          arrays[id(buf)] = (p, win, base, st.dims[-1], buf.dtype)
    self._run_stages(b, t0, tid, ptr, lambda buf: arrays.get(id(buf)), ptr)

  def _run_stages(self, b, t0, tid, ptr, staged_as, leaf_ptr, row=None):
    """The stages one after the other, a ``bar.sync`` wherever a stage reads a value staged
    since the last one or writes over a staged value read or written since then.
    ``staged_as(buf)``: the shared-memory array holding ``buf`` (pointer, window length,
    window start, axis length, dtype), None for a value in memory; ``leaf_ptr(buf)``: where a
    leaf read from memory is (time blocking: a scalar's value of this iteration); ``row``: the
    row of partials a reduction stage writes (time blocking: the iteration, an i64)."""
    pending = set()          # arrays written since the last barrier
    read = set()             # arrays read since the last barrier
    for j, st in enumerate(self.stages):
      staged = {}
      for leaf, spec in st.leafmap.items():
        a = staged_as(spec) if isinstance(spec, K.Buf) else None
        if a is not None:
          staged[leaf] = a
      rkeys = {id(a[0]) for a in staged.values()}
      wkeys = {id(a[0]) for a in (staged_as(buf) for _, buf in st.outputs) if a is not None}
      if rkeys & pending or wkeys & (pending | read):
        codegen.barrier(b)   # (stages that read none of each other's values share a phase)
        pending.clear()
        read.clear()
      leaves = K._make_leaves(b, {k: v for k, v in st.leafmap.items() if k not in staged},
                              leaf_ptr)
      em = _StagedEmitter(b, leaves, staged, self.reach)
      if st.kind == "elementwise":
        self._elementwise(b, em, st, t0, tid, staged_as, ptr)
      else:
        self._partials(b, em, st, t0, tid, ptr, j, row)
      read |= rkeys
      pending |= wkeys

  #: The most elements a thread evaluates in straight-line code per stage (rows x window
  #: positions; more: a loop).
  MAX_STRAIGHT = 8

  def _elementwise(self, b, em, st, t0, tid, staged_as, ptr):
    rows = math.prod(st.dims[:-1])
    win, base = _window(b, st, t0)
    nk = -(-win // self.block)
    if rows * nk <= self.MAX_STRAIGHT and nk * self.block - win <= win // 4:
      # each thread's elements one after the other in one basic block (their shared-memory
      # reads overlap); a position past the window is evaluated at its last one, again
      for r in range(rows):
        for k in range(nk):
          w = b.add(tid, i64(k * self.block)) if k else tid
          if (k + 1) * self.block > win:
            w = b.select(b.icmp_unsigned("<", w, i64(win)), w, i64(win - 1))
          self._element(b, em, st, t0, i64(r), w, win, base, staged_as, ptr)
      return
    # (a loop over the rows around one over the window: no division per element)
    with E.ForLoop(b, 0, rows, "er") as rl, \
        E.ForLoop(b, tid, win, "e", step=i64(self.block)) as wl:
      self._element(b, em, st, t0, rl.index, wl.index, win, base, staged_as, ptr)

  def _element(self, b, em, st, t0, r, w, win, base, staged_as, ptr):
    """Stage ``st``'s outputs at window position ``w`` of row ``r``: into their shared-memory
    arrays, and those read outside the chain into memory (the tile's own positions)."""
    dims = st.dims
    lead = dims[:-1]
    em.push_scope()
    slot = b.add(b.mul(r, i64(win), flags=["nuw", "nsw"]), w, flags=["nuw", "nsw"])
    pos = _wrap(b, b.add(base, w), dims[-1], self.reach)
    multi = (E.delinearize(b, r, lead) if lead else []) + [pos]
    idx = Index(b, dims, multi=multi)
    vals = [em.value(instr, idx) for instr, _ in st.outputs]
    for (instr, buf), v in zip(st.outputs, vals):
      a = staged_as(buf)
      if a is not None:
        E.store_element(b, v, a[0], slot, buf.dtype)
    if any(id(buf) in self.globals_out for _, buf in st.outputs):
      # the tile's own positions (not the halo, not past the end) go to memory
      own = b.and_(b.icmp_unsigned(">=", w, i64(st.lo)),
                   b.icmp_unsigned("<", w, i64(st.lo + TILE)))
      own = b.and_(own, b.icmp_signed("<", b.add(t0, b.sub(w, i64(st.lo))), i64(self.n)))
      with b.if_then(own):
        for (instr, buf), v in zip(st.outputs, vals):
          if id(buf) in self.globals_out:
            K.store_output(b, instr, buf, v, idx, ptr)
    em.pop_scope()

  def _partials(self, b, em, st, t0, tid, ptr, j, row=None):
    lead = st.dims[:-1]
    rows = math.prod(lead)
    for jr, (r, parts) in enumerate(zip(st.reduces, st.partials)):
      red = reductions._Reducer(b, em, r)
      accs = [E.alloca_entry(b, v.type) for v in red.ident]
      for a, v in zip(accs, red.ident):
        b.store(v, a)
      with E.ForLoop(b, tid, rows * TILE, "e", step=i64(self.block)) as lp:
        em.push_scope()
        rr = b.udiv(lp.index, i64(TILE))
        w = b.urem(lp.index, i64(TILE))
        pos = b.add(t0, w)
        inside = b.icmp_signed("<", pos, i64(self.n))
        pos = b.select(inside, pos, i64(0))
        multi = (E.delinearize(b, rr, lead) if lead else []) + [pos]
        idx = Index(b, st.dims, multi=multi)
        with b.if_then(inside):
          new = red.combine([b.load(a) for a in accs], [em.value(o, idx) for o in red.ops])
          for a, v in zip(accs, new):
            b.store(v, a)
        em.pop_scope()
      vals = reductions._block_allreduce(b, red, [b.load(a) for a in accs], self.block,
                                      f"{self.name}_r{j}_{jr}")
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        tile = sreg64(b, "ctaid.x")
        if row is not None:                  # (time blocking: a row per iteration)
          tile = b.add(tile, b.mul(row, i64(self.tiles)))
        for v, p, dt in zip(vals, parts, red.dtypes):
          v = E.convert_value(b, v, dt, p.dtype) if p.dtype != np.dtype(dt) else v
          E.store_element(b, v, ptr(p), tile, p.dtype)


def _window(b, st, t0):
  """(length, first position) of stage ``st``'s window in the tile starting at ``t0``."""
  return TILE + st.lo + st.hi, (b.sub(t0, i64(st.lo)) if st.lo else t0)


def _wrap(b, v, n, reach=MAX_HALO):
  """``v`` modulo ``n``: a window's position, or a position's offset from a window's start.
  On an axis of at least a window and two halos (``TILE + 2 * reach``, ``reach`` the widest
  halo) these fall at most one axis length out either way, and two selects do; on a shorter one
  a window wraps around it several times, and the remainder is taken."""
  if n >= TILE + 2 * reach:
    v = b.select(b.icmp_signed("<", v, i64(0)), b.add(v, i64(n)), v)
    return b.select(b.icmp_signed(">=", v, i64(n)), b.sub(v, i64(n)), v)
  r = b.srem(v, i64(n))
  return b.select(b.icmp_signed("<", r, i64(0)), b.add(r, i64(n)), r)


class _StagedEmitter(Emitter):
  """The shared emitter, with some leaves read from the block's shared-memory windows."""

  def __init__(self, b, leaves, staged, reach=MAX_HALO):
    super().__init__(b, leaves)
    self.staged, self.reach = staged, reach

  def _compute(self, instr, index):
    st = self.staged.get(instr)
    if st is None:
      return super()._compute(instr, index)
    b = self.b
    p, win, base, n, dtype = st
    lead = instr.dims[:-1]
    slot = _wrap(b, b.sub(index.multi[-1], base), n, self.reach)
    # (a read that is then discarded may fall outside the window: kept inside it)
    slot = b.select(b.icmp_unsigned(">", slot, i64(win - 1)), i64(win - 1), slot)
    if lead:
      r = E.linearize(b, index.multi[:-1], lead)
      slot = b.add(b.mul(r, i64(win), flags=["nuw", "nsw"]), slot, flags=["nuw", "nsw"])
    return E.load_element(b, p, slot, dtype)


# ---------------------------------------------------------------------------------------------
# forming chains
# ---------------------------------------------------------------------------------------------

def _stage_of(kernel):
  """A ``_Stage`` for ``kernel`` if it can be one, else None."""
  if type(kernel) is codegen.Elementwise:
    dims = kernel.dims
    if not dims or not dims[-1] or kernel.scratch:
      return None
    if any(not isinstance(buf, K.Buf) or buf.dims[-1:] != dims[-1:]
           for _, buf in kernel.outputs):
      return None
    return _Stage("elementwise", kernel, dims, kernel.outputs, kernel.leafmap)
  if type(kernel) is reductions.SplitPartials and kernel.nout == 1 and len(kernel.prefetch) == 1:
    r = kernel.prefetch[0]
    src = r.operands[0].dims
    if (not src or not src[-1] or sorted(r.attrs["dimensions"]) != list(range(len(src)))
        or len(r.operands) != 2):
      return None
    return _Stage("partials", kernel, src, [], kernel.leafmap, [r], kernel.partials)
  return None


_NOT_STENCIL = object()


def _analyse(stages, max_halo: int = MAX_HALO, memo: dict | None = None):
  """The stages with their staged reads and windows filled in; None when the chain is not a
  stencil.  (Inputs stay in memory: copying those several stages read into shared memory first
  was measured slower, an extra phase, where later phases find them in L1.)  ``memo``: a dict
  that keeps ``read_offsets`` of a stage's computation for copies of the same stage (which
  differ only in their buffers) across calls; it must not outlive the instructions."""
  produced = {}                      # id(Buf) -> stage index
  for j, st in enumerate(stages):
    for _, buf in st.outputs:
      if id(buf) in produced:
        return None
      produced[id(buf)] = j
  for j, st in enumerate(stages):
    outs = ([i for i, _ in st.outputs] if st.kind == "elementwise"
            else list(st.reduces[0].operands[:1]))
    # (read_offsets reads only the outputs and which instructions are leaves)
    key = (tuple(id(i) for i in outs), frozenset(id(x) for x in st.leafmap)) \
        if memo is not None else None
    offs = memo.get(key) if memo is not None else None
    if offs is None:
      try:
        offs = read_offsets(outs, st.leafmap)
      except NotStencil:
        offs = _NOT_STENCIL
      if memo is not None:
        memo[key] = offs
    if offs is _NOT_STENCIL:
      return None
    for leaf, spec in st.leafmap.items():
      if not isinstance(spec, K.Buf):
        continue
      axis, o = offs.get(leaf, (None, frozenset()))
      if id(spec) not in produced:
        continue
      if produced[id(spec)] >= j:
        return None                  # (read before it is written: not a chain)
      m = stages[produced[id(spec)]].dims[-1]
      if axis is None or axis != len(leaf.dims) - 1 or leaf.dims[-1] != m:
        return None
      st.reads[leaf] = _reads(st, o, m)
  stages = list(stages)
  # windows, last stage first: a stage's window covers what its later readers read of its
  # outputs, at their own windows
  readers = [[] for _ in stages]
  for k, rd in enumerate(stages):
    for leaf, o in rd.reads.items():
      readers[produced[id(rd.leafmap[leaf])]].append((rd, o))    # (a stage before k)
  for j in range(len(stages) - 1, -1, -1):
    st = stages[j]
    for rd, o in readers[j]:
      st.lo = max(st.lo, rd.lo - min(o))
      st.hi = max(st.hi, rd.hi + max(o))
    if st.lo > max_halo or st.hi > max_halo:
      return None
  return stages


def _reads(reader, offs, m) -> list:
  """A reader's offsets into an axis of length ``m``: a roll wraps around an axis of the
  reader's own length (normalised modulo ``m``); reads of an axis of another length, a pad's or
  a slice's, are plain shifts."""
  return _normalize(offs, m) if reader.dims[-1] == m else list(offs)


def _plan_chain(kernels, readers_outside, new_temp_name):
  """A StencilChain for ``kernels`` (and the rebuilt SplitFinish when the last stage is a
  split reduction's partials), or None."""
  stages = [_stage_of(k) for k in kernels]
  if any(st is None for st in stages):
    return None
  n = stages[-1].dims[-1]              # (tiles cover the last stage's positions)
  stages = _analyse(stages)
  if stages is None:
    return None
  if not any(st.reads for st in stages):
    return None                      # nothing depends on anything: horizontal fusion's case
  # staged: outputs a later stage reads; to memory: outputs anything else may read
  staged, globals_out = set(), set()
  smem = 0
  for j, st in enumerate(stages):
    for _, buf in st.outputs:
      if any(any(rd.leafmap[l] is buf for l in rd.reads) for rd in stages[j + 1:]):
        rows = math.prod(buf.dims[:-1])
        staged.add(id(buf))
        smem += rows * (TILE + st.lo + st.hi) * max(1, buf.dtype.itemsize)
      if buf.kind != "temp" or id(buf) in readers_outside:
        if st.dims[-1] != n:
          return None               # (only the tiles' own positions are written)
        globals_out.add(id(buf))
  if smem > MAX_SHARED_BYTES:
    return None
  # nothing the chain writes may be read from memory by one of its stages
  written = {id(buf) for st in stages for _, buf in st.outputs}
  for st in stages:
    for leaf, spec in st.leafmap.items():
      if isinstance(spec, K.Buf) and id(spec) in written and leaf not in st.reads:
        return None
  tiles = -(-n // TILE)
  partial_bufs = []
  last = stages[-1]
  if last.kind == "partials":
    r = last.reduces[0]
    shapes = r.shape.tuple_shapes if r.shape.is_tuple else [r.shape]
    last.partials = [[K.Buf(reductions._partial_dtype(sh.dtype), (tiles,),
                            f"{r.name}.tile{k}") for k, sh in enumerate(shapes)]]
    partial_bufs = last.partials
  return StencilChain(new_temp_name, stages, n, staged, globals_out, partial_bufs)


def _kernel(step):
  return getattr(step, "kernel", None)


def _all_readers(steps, out) -> None:
  for s in steps:
    k = _kernel(s)
    if k is not None:
      for x in k.reads:
        out.setdefault(id(x), []).append(k)
      continue
    for attr in ("pred", "selector"):      # (read by the host or a branch choice)
      x = getattr(s, attr, None)
      if isinstance(x, K.Buf):
        out.setdefault(id(x), []).append(s)
    for attr in ("cond_steps", "body_steps"):
      if hasattr(s, attr):
        _all_readers(getattr(s, attr), out)
    for br in getattr(s, "branches", ()):
      _all_readers(br, out)


def _finish_leaves(fin) -> dict:
  """The part of a SplitFinish's leaf map it reads: its reductions' init values and what its
  outputs compute after the reductions (not the reduced operands, which its partials hold)."""
  keep, stack, seen = {}, [i for i, _ in fin.outputs], set()
  red = set(fin.prefetch)
  while stack:
    x = stack.pop()
    if id(x) in seen:
      continue
    seen.add(id(x))
    if x in fin.leafmap:
      keep[x] = fin.leafmap[x]
      continue
    ops = x.operands[len(x.operands) // 2:] if x in red else x.operands
    stack.extend(ops)
  return keep


def _independent(others, kernels) -> bool:
  """Whether ``others`` share no buffer with ``kernels`` that either writes (so that they may
  run before or after them alike)."""
  w = {id(x) for k in kernels for x in k.writes}
  r = {id(x) for k in kernels for x in k.reads}
  return not any(id(x) in w for o in others for x in o.reads) and \
      not any(id(x) in w or id(x) in r for o in others for x in o.writes)


def _movable_before(k, before, after) -> bool:
  """Whether kernel ``k``, between a chain's kernels ``before`` and ``after`` it, may run
  before all of them: it reads nothing those before it write, and writes nothing those before
  it touch or those after it write (those after it may read what it writes: they still do so
  after it)."""
  rd = {id(x) for x in k.reads}
  wr = {id(x) for x in k.writes}
  for m in before:
    if any(id(x) in rd or id(x) in wr for x in m.writes) or any(id(x) in wr for x in m.reads):
      return False
  return not any(id(x) in wr for m in after for x in m.writes)


def chain_steps(steps, info, step_type, readers=None):
  """``steps`` with each run of consecutive stencil kernels made one ``StencilChain`` (module
  docstring); loops' and conditionals' steps are chained inside."""
  if readers is None:
    readers = {}
    _all_readers(steps, readers)
  out = []
  i = 0
  while i < len(steps):
    s = steps[i]
    k = _kernel(s)
    if k is None:
      for attr in ("cond_steps", "body_steps"):
        if hasattr(s, attr):
          setattr(s, attr, chain_steps(getattr(s, attr), info, step_type, readers))
      if hasattr(s, "branches"):
        s.branches = [chain_steps(br, info, step_type, readers) for br in s.branches]
      out.append(s)
      i += 1
      continue
    # the stencil kernels from here on (the longest run that forms a chain is taken), and
    # between them kernels that may run before all of them (a loop's scalar work: a
    # counter's increment, a forcing term of the time), which then do
    idx, skipped = [], 0
    j = i
    while j < len(steps) and _kernel(steps[j]) is not None:
      kj = _kernel(steps[j])
      if _stage_of(kj) is not None:
        idx.append(j)
      elif not idx or skipped == MAX_SKIPPED or \
          not _movable_before(kj, [_kernel(steps[x]) for x in idx], []):
        break
      else:
        skipped += 1
      j += 1
    done = False
    for end in range(len(idx), 1, -1):
      members = idx[:end]
      kernels = [_kernel(steps[x]) for x in members]
      inside = set(members)
      between = [x for x in range(i, members[-1] + 1) if x not in inside]
      if not all(_movable_before(_kernel(steps[x]),
                                 [_kernel(steps[m]) for m in members if m < x],
                                 [_kernel(steps[m]) for m in members if m > x])
                 for x in between):
        continue
      fin = fin_at = None
      if kernels[-1].__class__ is reductions.SplitPartials:
        x = members[-1] + 1
        while x < min(len(steps), members[-1] + 1 + MAX_SKIPPED) and \
            _kernel(steps[x]) is not None and \
            type(_kernel(steps[x])) is not reductions.SplitFinish:
          x += 1
        nxt = _kernel(steps[x]) if x < len(steps) else None
        if type(nxt) is not reductions.SplitFinish or nxt.partials != kernels[-1].partials:
          continue
        more = list(range(members[-1] + 1, x))
        if not _independent([_kernel(steps[y]) for y in more], kernels + [nxt]):
          continue
        fin, fin_at = nxt, x
        between += more
      member_ids = {id(k) for k in kernels}
      outside = {b for b, ks in readers.items()
                 if any(id(k) not in member_ids and k is not fin for k in ks)}
      fin_leaves = _finish_leaves(fin) if fin is not None else {}
      outside |= {id(x) for x in K._leaf_bufs(fin_leaves)}
      chain = _plan_chain(kernels, outside, kernels[0].name + "_st")
      if chain is None:
        continue
      out.extend(steps[x] for x in between)
      out.append(step_type(same_origin(chain, kernels[0])))
      if fin is not None:
        last = chain.stages[-1]
        new = reductions.SplitFinish(fin.name, fin.dims, fin.outputs, fin.prefetch,
                                     last.partials, fin_leaves, chain.tiles, fin.tails)
        out.append(step_type(same_origin(new, fin)))
      i = (fin_at if fin is not None else members[-1]) + 1
      done = True
      break
    if not done:
      out.append(s)
      i += 1
  return out


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
