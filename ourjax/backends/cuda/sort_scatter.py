"""GPU kernels for ``sort`` and ``scatter`` (``codegen.translate`` hands their planned kernels,
``SortKernel`` and ``ScatterKernel`` of ``llvm/kernels.py``, to ``translate`` here).

Sort: a bitonic sorting network.  Rows are padded to a power of two ``P``; a padded position
carries an original position ``>= n``, which is its validity flag: padding sorts after every
element whatever the comparator says (no sentinel value, so NaNs and extreme values sort as the
comparator says).  The network compares the operands the comparator reads (the others are
gathered by original position when a row is written) and the original positions (``i16`` while
``P <= 65536``, else ``i32``).  A bitonic network is not stable, so a stable sort (every sort
lowered from lax: jnp.sort, jnp.argsort, top_k) breaks comparator ties by original position,
which makes the result exactly the CPU backend's stable merge sort.

* rows that fit in a block's shared memory (keys and positions; the opt-in limit, 227 KiB on
  an H100: f32 rows up to 32768 elements): one ``GpuSort`` kernel, each block sorting whole
  rows in shared memory (up to 1024 positions' worth of short rows per block);
* longer rows: keys and positions go to arena temporaries (``P`` per row); ``GpuSort`` sorts
  chunks of ``C`` (<= 8192) positions in shared memory in alternating directions, then every
  later stage runs ``GpuSortStep`` kernels (one global-memory compare-exchange step per
  distance >= ``C``) and one ``GpuSort`` pass for the distances < ``C``; the last pass writes
  the rows: ``1 + L (L + 3) / 2`` kernels for ``L = log2(P/C)`` (36 for 2^20 f32 elements);
* rows whose chunks cannot fit (many wide keys on a small GPU): ``Threaded`` (one thread per
  row, the CPU kernel's merge sort).

Scatter (``GpuScatter``): one thread per element of ``updates`` (grid-stride); the indices are
read, clamped (``clip``) or checked (``drop``: an update whose window would leave the operand is
dropped) exactly as the CPU kernel does, and the element is combined into the output (which the
planner has already made a copy of the operand):

=========================  ===================================================================
update computation         combine
=========================  ===================================================================
``(old, new) -> new``      a plain store.  With duplicate indices the winner is unspecified,
(``.at[].set``)            as in JAX/XLA on GPUs (the CPU backend applies updates in order, so
                           there the last one wins)
add, subtract: i32, i64,   ``atomicrmw add`` / ``fadd`` (subtract adds the negated update).
u32, u64, f32, f64         Float additions happen in an unspecified order, and PTX's
                           ``atom.add.f32`` flushes subnormal inputs and results to zero
and, or, xor, min, max:    ``atomicrmw`` (``min``/``max`` signed or unsigned)
32/64-bit integers
other associative and      a compare-and-swap loop around the update computation itself: the
commutative ops (float     CPU kernel's arithmetic, updates combined in an unspecified order
multiply/min/max; every    (LLVM widens 8/16-bit compare-and-swap to 32 bits)
op on f16, bf16, bool,
8/16-bit integers)
anything else              ``Threaded`` (the CPU kernel on one GPU thread, in order), unless
                           the scatter's attributes say its indices are unique
                           (``unique_indices``): then a plain read-modify-write per update
=========================  ===================================================================
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.codegen import (DeviceInfo, GpuKernel, Threaded, _grid_for,
                                          _pow2_at_least, barrier, launch_bounds, sreg,
                                          sreg64)
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I1, I32, I64, Emitter, ForLoop, Index, i64
from ourjax.lowering import hlo

__all__ = ["translate", "GpuSort", "GpuSortStep", "GpuScatter", "SortSpec", "shared_budget"]

I16 = ir.IntType(16)

#: Shared memory one block may use (bytes, with the opt-in attribute) by compute capability.
_SHARED_OPTIN = {70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227,
                 103: 227, 120: 99}


def shared_budget(info: DeviceInfo) -> int:
  """Bytes of shared memory a block may use on ``info``'s GPU (48 KiB when unknown)."""
  return _SHARED_OPTIN.get(info.cc, 48) * 1024


def translate(kernel: K.Kernel, new_temp, info: DeviceInfo, max_threads: int) -> list:
  """GPU kernels for a planned ``SortKernel`` or ``ScatterKernel`` (the module docstring says
  which); ``Threaded`` where no parallel form applies."""
  if isinstance(kernel, K.SortKernel):
    kernels = _sort_kernels(kernel, new_temp, info)
    if kernels is not None:
      return kernels
  elif isinstance(kernel, K.ScatterKernel):
    if GpuScatter.combine_kind(kernel.scatter) is not None:
      return [GpuScatter(kernel)]
  return [Threaded(kernel, max_threads)]


def _dynamic_shared(mod: ir.Module, name: str):
  """The block's dynamic shared memory (``extern __shared__``) as an i8 array."""
  gv = mod.globals.get(name)
  if gv is None:
    gv = ir.GlobalVariable(mod, ir.ArrayType(E.I8, 0), name, addrspace=3)
    gv.linkage = "external"
    gv.align = 16
  return gv


def _i32(v: int) -> ir.Constant:
  return ir.Constant(I32, int(v))


def _used_parameters(comp) -> set:
  """Numbers of the parameters ``comp``'s result depends on (all of them when it calls other
  computations)."""
  seen, stack, used = set(), [comp.root], set()
  while stack:
    x = stack.pop()
    if id(x) in seen:
      continue
    seen.add(id(x))
    if x.opcode == "parameter":
      used.add(x.attrs["parameter_number"])
    if any(isinstance(v, hlo.Computation) for v in x.attrs.values()):
      return set(range(len(comp.parameters)))
    stack.extend(x.operands)
  return used


# ---------------------------------------------------------------------------------------------
# sort
# ---------------------------------------------------------------------------------------------

class SortSpec:
  """What every sort kernel needs to know about a planned ``SortKernel``: rows of ``n``
  elements ``inner`` apart, padded to ``P = 2^logP`` positions; the key operands (those the
  comparator reads; parameters 2k and 2k+1 belong to operand k) and the order ``less``."""

  def __init__(self, kernel: K.SortKernel):
    sort = kernel.sort
    self.sort, self.ins, self.outs = sort, list(kernel.ins), list(kernel.outs)
    self.n, self.inner, self.rows = kernel.n, kernel.inner, kernel.rows
    self.comp = sort.attrs["to_apply"]
    self.dtypes = [np.dtype(o.dtype) for o in sort.operands]
    used = _used_parameters(self.comp)
    self.keys = [k for k in range(len(sort.operands)) if 2 * k in used or 2 * k + 1 in used]
    self.stable = bool(sort.attrs.get("is_stable", False))
    self.P = _pow2_at_least(max(self.n, 1))
    self.logP = self.P.bit_length() - 1
    self.idx_ty = I16 if self.P <= 1 << 16 else I32
    self.idx_dtype = np.dtype(np.uint16 if self.idx_ty == I16 else np.int32)

  def shared_layout(self, E: int):
    """Byte offsets of the key arrays and the position array ('idx') for ``E`` positions in
    shared memory, and the total."""
    off, layout = 0, {}
    for k in self.keys:
      layout[k] = off
      off += -(-E * self.dtypes[k].itemsize // 16) * 16
    layout["idx"] = off
    return layout, off + E * self.idx_dtype.itemsize

  def row_base(self, b, row):
    """Element offset of the first element of ``row`` (i64)."""
    if self.inner == 1:
      return b.mul(row, i64(self.n))
    return b.add(b.mul(b.udiv(row, i64(self.inner)), i64(self.n * self.inner)),
                 b.urem(row, i64(self.inner)))

  def at(self, b, base, c):
    return b.add(base, b.mul(c, i64(self.inner))) if self.inner != 1 else b.add(base, c)

  def less(self, b, x, y):
    """Whether element ``x`` = (raw keys, original position) sorts before ``y``: elements
    (position < n) before padding; among elements the comparator decides, ties broken by
    position when the sort is stable."""
    (kx, ix), (ky, iy) = x, y
    ix, iy = b.zext(ix, I32), b.zext(iy, I32)
    n = _i32(self.n)
    vx = b.icmp_unsigned("<", ix, n)
    vy = b.icmp_unsigned("<", iy, n)
    vals_x = {k: E.from_storage(b, r, self.dtypes[k]) for k, r in zip(self.keys, kx)}
    vals_y = {k: E.from_storage(b, r, self.dtypes[k]) for k, r in zip(self.keys, ky)}
    lt = self._comp(b, vals_x, vals_y)
    if self.stable:
      gt = self._comp(b, vals_y, vals_x)
      lt = b.or_(lt, b.and_(b.not_(gt), b.icmp_unsigned("<", ix, iy)))
    return b.and_(vx, b.or_(b.not_(vy), lt))

  def _comp(self, b, lhs, rhs):
    args = []
    for k, dt in enumerate(self.dtypes):
      zero = E.const(dt, 0)
      args += [lhs.get(k, zero), rhs.get(k, zero)]
    r = Emitter(b, {}).call(self.comp, args)
    if r.type != I1:
      r = b.icmp_unsigned("!=", r, ir.Constant(r.type, 0))
    return r

  def pair(self, b, q, jlog, j):
    """Positions (i, i + j) of compare-exchange ``q`` of a step with distance j = 2^jlog
    (i32): i is q with a 0 bit inserted at bit jlog."""
    hi = b.shl(b.lshr(q, jlog), b.add(jlog, ir.Constant(q.type, 1)))
    i = b.or_(hi, b.and_(q, b.sub(j, ir.Constant(q.type, 1))))
    return i, b.or_(i, j)


class GpuSort(GpuKernel):
  """Bitonic sorting in shared memory: block ``g`` holds the ``E`` consecutive positions
  ``g*E ..`` of the padded rows (``R = E/P`` whole rows, or one ``E``-position chunk of a
  long row), loads them (keys and positions, from the operands or from the ``temps`` of a
  long sort), runs stages ``s_lo..s_hi`` (blocks of 2^s positions become sorted, ascending
  where bit s of the position in the row is 0, so that pairs of them are bitonic), each from
  step ``min(s - 1, jcap)`` down to 0 (compare positions 2^j apart), one compare-exchange
  per thread and pair, a barrier after every step; then writes the rows (keys from shared
  memory, other operands gathered by position) or the temps back."""
  compile_cost = 8
  ROW_ELEMS = 1024      # short rows are packed R to a block up to this many positions
  CHUNK = 8192          # positions per block of a long sort
  MAX_THREADS = 1024

  def __init__(self, name, spec: SortSpec, E: int, stages, temps=None, src="operands",
               dst="outputs"):
    self.spec, self.E, self.stages = spec, E, stages
    self.temps, self.src, self.dst = temps, src, dst
    self.T = max(32, min(self.MAX_THREADS, E // 2))
    self.layout, self.shared_bytes = spec.shared_layout(E)
    tbufs = [] if temps is None else list(temps[0].values()) + [temps[1]]
    reads = (spec.ins if src == "operands" or dst == "outputs" else []) + \
        (tbufs if src == "temps" else [])
    writes = spec.outs if dst == "outputs" else tbufs
    s_lo, s_hi, jcap = stages
    steps = sum(min(s, jcap + 1) for s in range(s_lo, s_hi + 1))
    super().__init__(name, reads, writes, work=spec.rows * spec.P * max(1, steps))

  @classmethod
  def rows_per_block(cls, spec: SortSpec) -> int:
    return max(1, min(cls.ROW_ELEMS // spec.P, _pow2_at_least(max(spec.rows, 1))))

  def launch(self, info):
    s = self.spec
    return (-(-s.rows * s.P // self.E), 1, 1), (self.T, 1, 1), self.shared_bytes

  def emit_gpu(self, module):
    fn = super().emit_gpu(module)
    launch_bounds(module, fn, self.T)
    return fn

  def gpu_body(self, b, ptr):
    s = self.spec
    n, P, E_, T = s.n, s.P, self.E, self.T
    smem = _dynamic_shared(b.module, self.name + "_smem")
    arrays = {}
    for k in s.keys:
      ety = E.storage_type(s.dtypes[k])
      arrays[k] = b.bitcast(b.gep(smem, [_i32(0), _i32(self.layout[k])], inbounds=True),
                            ir.PointerType(ety, addrspace=3))
    idxs = b.bitcast(b.gep(smem, [_i32(0), _i32(self.layout["idx"])], inbounds=True),
                     ir.PointerType(s.idx_ty, addrspace=3))
    ins = [ptr(x) for x in s.ins] if (self.src == "operands" or self.dst == "outputs") else None
    tk = {k: ptr(t) for k, t in self.temps[0].items()} if self.temps else None
    tidx = ptr(self.temps[1]) if self.temps else None
    tid = sreg(b, "tid.x")
    g0 = b.mul(sreg64(b, "ctaid.x"), i64(E_))        # first padded position of the block
    # position in its row of the block's first position (0 for whole rows)
    rpos0 = b.trunc(b.and_(g0, i64(P - 1)), I32) if E_ < P else _i32(0)

    def row_pos(e):
      """(row in range, first element of the row, position in the row) of block position e."""
      g = b.add(g0, b.zext(e, I64))
      row = b.lshr(g, i64(s.logP))
      ok = b.icmp_unsigned("<", row, i64(s.rows))
      row = b.select(ok, row, i64(s.rows - 1))
      return ok, s.row_base(b, row), b.zext(b.and_(b.trunc(g, I32), _i32(P - 1)), I64), g

    with ForLoop(b, b.zext(tid, I64), E_, "ld", step=T) as lp:
      e = b.trunc(lp.index, I32)
      if self.src == "operands":
        # padding: a position >= n, its keys a copy of the row's last element (so that no
        # uninitialised value is ever read)
        _, base, c, _ = row_pos(e)
        cc = b.select(b.icmp_unsigned("<", c, i64(n)), c, i64(n - 1))
        for k in s.keys:
          b.store(b.load(b.gep(ins[k], [s.at(b, base, cc)], inbounds=True)),
                  b.gep(arrays[k], [e], inbounds=True))
        b.store(b.trunc(c, s.idx_ty), b.gep(idxs, [e], inbounds=True))
      else:
        g = b.add(g0, b.zext(e, I64))
        for k in s.keys:
          b.store(b.load(b.gep(tk[k], [g], inbounds=True)), b.gep(arrays[k], [e], inbounds=True))
        v = b.load(b.gep(tidx, [g], inbounds=True))
        b.store(b.trunc(v, s.idx_ty) if v.type != s.idx_ty else v,
                b.gep(idxs, [e], inbounds=True))
    barrier(b)
    self._network(b, arrays, idxs, tid, rpos0)
    with ForLoop(b, b.zext(tid, I64), E_, "st", step=T) as lp:
      e = b.trunc(lp.index, I32)
      if self.dst == "temps":
        g = b.add(g0, b.zext(e, I64))
        for k in s.keys:
          b.store(b.load(b.gep(arrays[k], [e], inbounds=True)), b.gep(tk[k], [g], inbounds=True))
        v = b.load(b.gep(idxs, [e], inbounds=True))
        b.store(b.zext(v, I32) if v.type != I32 else v, b.gep(tidx, [g], inbounds=True))
      else:
        self._write_row(b, ptr, arrays, idxs, ins, e, row_pos)

  def _write_row(self, b, ptr, arrays, idxs, ins, e, row_pos):
    """Position e of the block into the outputs (when it is an element of a row): keys from
    shared memory, the other operands gathered by the element's original position."""
    s = self.spec
    ok, base, c, _ = row_pos(e)
    ok = b.and_(ok, b.icmp_unsigned("<", c, i64(s.n)))
    with b.if_then(ok):
      q = b.zext(b.load(b.gep(idxs, [e], inbounds=True)), I64)
      dst, src = s.at(b, base, c), s.at(b, base, q)
      for k, (x, o) in enumerate(zip(ins, [ptr(x) for x in s.outs])):
        if k in arrays:
          raw = b.load(b.gep(arrays[k], [e], inbounds=True))
        else:
          raw = b.load(b.gep(x, [src], inbounds=True))
        b.store(raw, b.gep(o, [dst], inbounds=True))

  def _network(self, b, arrays, idxs, tid, rpos0):
    """The stages, each step of them by every thread, so that the barrier after each step is
    reached by all of them."""
    s_lo, s_hi, jcap = self.stages
    P = self.spec.P
    with ForLoop(b, s_lo, s_hi + 1, "stage") as st:
      stage = b.trunc(st.index, I32)
      first = b.select(b.icmp_signed("<", stage, _i32(jcap + 1)), stage, _i32(jcap + 1))
      with ForLoop(b, 0, b.zext(first, I64), "step") as sp:
        jlog = b.sub(b.sub(first, _i32(1)), b.trunc(sp.index, I32))
        j = b.shl(_i32(1), jlog)
        with ForLoop(b, b.zext(tid, I64), self.E // 2, "pair", step=self.T) as pq:
          i, l = self.spec.pair(b, b.trunc(pq.index, I32), jlog, j)
          rpos = b.and_(b.or_(rpos0, i), _i32(P - 1))
          desc = b.icmp_unsigned("!=", b.and_(rpos, b.shl(_i32(1), stage)), _i32(0))
          _compare_exchange(b, self.spec, [arrays[k] for k in self.spec.keys], idxs, i, l, desc)
        barrier(b)


def _compare_exchange(b, spec, arrays, idxs, i, l, desc, only_swaps=False):
  """Order the elements at ``i < l`` (of the key arrays and the position array) ascending, or
  descending where ``desc``: swap when the one that belongs first is not first."""
  raw_i = [b.load(b.gep(a, [i], inbounds=True)) for a in arrays]
  raw_l = [b.load(b.gep(a, [l], inbounds=True)) for a in arrays]
  id_i = b.load(b.gep(idxs, [i], inbounds=True))
  id_l = b.load(b.gep(idxs, [l], inbounds=True))
  # ascending: swap if x[l] < x[i]; descending: swap if x[i] < x[l]
  first = ([b.select(desc, a, c) for a, c in zip(raw_i, raw_l)], b.select(desc, id_i, id_l))
  second = ([b.select(desc, c, a) for a, c in zip(raw_i, raw_l)], b.select(desc, id_l, id_i))
  swap = spec.less(b, first, second)
  if only_swaps:          # global memory: write only what moves
    with b.if_then(swap):
      for a, x, y in zip(arrays + [idxs], raw_i + [id_i], raw_l + [id_l]):
        b.store(y, b.gep(a, [i], inbounds=True))
        b.store(x, b.gep(a, [l], inbounds=True))
    return
  for a, x, y in zip(arrays + [idxs], raw_i + [id_i], raw_l + [id_l]):
    b.store(b.select(swap, y, x), b.gep(a, [i], inbounds=True))
    b.store(b.select(swap, x, y), b.gep(a, [l], inbounds=True))


class GpuSortStep(GpuKernel):
  """One step of a long sort's bitonic merge in global memory (``temps``): compare-exchange
  positions 2^jlog apart for stage ``stage``, one thread per pair (grid-stride)."""
  BLOCK = 256

  def __init__(self, name, spec: SortSpec, temps, stage: int, jlog: int):
    self.spec, self.temps, self.stage, self.jlog = spec, temps, stage, jlog
    bufs = list(temps[0].values()) + [temps[1]]
    super().__init__(name, bufs, bufs, work=spec.rows * spec.P // 2)

  def launch(self, info):
    npairs = self.spec.rows * self.spec.P // 2
    return (_grid_for(npairs, self.BLOCK, info, 32), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    s = self.spec
    arrays = [ptr(self.temps[0][k]) for k in s.keys]
    idxs = ptr(self.temps[1])
    gid = b.add(b.mul(sreg64(b, "ctaid.x"), sreg64(b, "ntid.x")), sreg64(b, "tid.x"))
    stride = b.mul(sreg64(b, "nctaid.x"), sreg64(b, "ntid.x"))
    with ForLoop(b, gid, s.rows * s.P // 2, "pair", step=stride) as pq:
      i, l = s.pair(b, pq.index, i64(self.jlog), i64(1 << self.jlog))
      desc = b.icmp_unsigned("!=", b.and_(i, i64(1 << self.stage)), i64(0))
      if self.stage == s.logP:    # bit logP of i is the row's parity, not part of the position
        desc = ir.Constant(I1, 0)
      _compare_exchange(b, s, arrays, idxs, i, l, desc, only_swaps=True)


def _sort_kernels(kernel: K.SortKernel, new_temp, info: DeviceInfo):
  """The GPU kernels of a sort, or None (keep ``Threaded``): rows that fit in a block's shared
  memory are sorted there, R to a block; longer rows go through ``temps`` in global memory
  (keys and positions, P per row): chunks of C positions are sorted in shared memory (in
  alternating directions), then every stage s > log2 C merges with global steps of distance
  >= C followed by one shared-memory pass for the distances < C (the last one writes the
  rows)."""
  spec = SortSpec(kernel)
  if spec.rows * spec.n == 0:
    return None
  budget = shared_budget(info)
  R = GpuSort.rows_per_block(spec)
  if spec.shared_layout(R * spec.P)[1] <= budget:
    return [GpuSort(kernel.name + "_bitonic", spec, R * spec.P, (1, spec.logP, spec.logP))]
  C = min(spec.P // 2, GpuSort.CHUNK)
  while C >= 1024 and spec.shared_layout(C)[1] > budget:
    C //= 2
  if C < 1024:
    return None
  logC = C.bit_length() - 1
  size = spec.rows * spec.P
  temps = ({k: new_temp(spec.dtypes[k], (size,), f"{kernel.name}.keys{k}") for k in spec.keys},
           new_temp(np.int32, (size,), f"{kernel.name}.pos"))
  name = kernel.name + "_bitonic"
  out = [GpuSort(name + "_c", spec, C, (1, logC, logC), temps, "operands", "temps")]
  for stage in range(logC + 1, spec.logP + 1):
    for jlog in range(stage - 1, logC - 1, -1):
      out.append(GpuSortStep(f"{name}_s{stage}_{jlog}", spec, temps, stage, jlog))
    last = stage == spec.logP
    out.append(GpuSort(f"{name}_m{stage}", spec, C, (stage, stage, logC - 1), temps, "temps",
                       "outputs" if last else "temps"))
  return out


# ---------------------------------------------------------------------------------------------
# scatter
# ---------------------------------------------------------------------------------------------

_COMMUTATIVE = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")
_INT_ATOMIC = {"add": "add", "subtract": "sub", "and": "and", "or": "or", "xor": "xor"}


def _unique_indices(sc) -> bool:
  a = sc.attrs
  return bool(a.get("unique_indices", False) or a.get("indices_are_unique", False))


class GpuScatter(GpuKernel):
  """XLA scatter with one thread per update element (grid-stride loop); ``kind`` is how an
  update is combined (see the module docstring): ``store``, ``atomic`` (``atomicrmw op``),
  ``cas`` (a compare-and-swap loop around the update computation) or ``rmw`` (a plain
  read-modify-write, for unique indices)."""
  BLOCK = 256

  def __init__(self, kernel: K.ScatterKernel):
    self.scatter, self.out, self.leafmap = kernel.scatter, kernel.out, dict(kernel.leafmap)
    self.kind, self.op = GpuScatter.combine_kind(self.scatter)
    super().__init__(kernel.name + "_par", kernel.reads, kernel.writes, work=kernel.work)

  @staticmethod
  def combine_kind(sc):
    """(kind, atomic op or None) for scatter ``sc``, or None when it must stay serial."""
    comp = sc.attrs["to_apply"]
    dt = np.dtype(sc.dtype)
    if len(comp.parameters) != 2 or sc.shape.is_tuple:
      return None
    p0, p1 = comp.parameters
    root = comp.root
    if root is p1:
      return "store", None
    op = None
    if root.opcode in _COMMUTATIVE and len(root.operands) == 2 and \
        set(map(id, root.operands)) == {id(p0), id(p1)}:
      op = root.opcode
    elif root.opcode == "subtract" and root.operands[0] is p0 and root.operands[1] is p1:
      op = "subtract"
    if op is None or np.dtype(root.dtype) != dt:
      return ("rmw", None) if _unique_indices(sc) else None
    if E._is_int(dt) and dt.itemsize in (4, 8):
      if op in _INT_ATOMIC:
        return "atomic", _INT_ATOMIC[op]
      if op in ("maximum", "minimum"):
        return "atomic", ("" if E._is_signed(dt) else "u") + op[:3]
    if dt in (E.F32, E.F64) and op in ("add", "subtract"):
      return "atomic", "fadd"
    return "cas", None

  def launch(self, info):
    total = self.scatter.operands[2].shape.size
    return (_grid_for(max(total, 1), self.BLOCK, info, 64), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    sc = self.scatter
    updates = sc.operands[2]
    geo = K.ScatterGeometry(sc)
    if geo.empty:
      return
    dt = np.dtype(sc.dtype)
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    out = ptr(self.out)
    gid = b.add(b.mul(sreg64(b, "ctaid.x"), sreg64(b, "ntid.x")), sreg64(b, "tid.x"))
    stride = b.mul(sreg64(b, "nctaid.x"), sreg64(b, "ntid.x"))
    with ForLoop(b, gid, updates.shape.size, "u", step=stride) as lp:
      em.push_scope()
      uidx = Index(b, updates.dims, linear=lp.index)
      valid, tgt = geo.target(b, em, uidx.multi)
      with b.if_then(valid):
        lin = E.linearize(b, tgt, geo.operand_dims)
        upd = em.value(updates, uidx)
        self._combine(b, em, out, lin, upd, dt)
      em.pop_scope()

  def _combine(self, b, em, out, lin, upd, dt):
    comp = self.scatter.attrs["to_apply"]
    elem = b.gep(out, [lin], inbounds=True)
    if self.kind == "store":
      b.store(E.to_storage(b, upd, dt), elem)
    elif self.kind == "rmw":
      old = E.from_storage(b, b.load(elem), dt)
      b.store(E.to_storage(b, em.call(comp, [old, upd]), dt), elem)
    elif self.kind == "atomic":
      v = upd
      if self.op == "fadd" and comp.root.opcode == "subtract":
        v = b.fneg(upd)
      b.atomic_rmw(self.op, elem, v, "monotonic")
    else:
      _cas_loop(b, elem, dt, lambda old: em.call(comp, [old, upd]))


def _cas_loop(b, elem, dt, combine):
  """``*elem = combine(*elem)`` atomically: compare-and-swap on the element's bits until it
  succeeds (or the combination leaves the element as it is)."""
  sty = E.storage_type(dt)
  bits = sty.width if isinstance(sty, ir.IntType) else (64 if dt == E.F64 else 32)
  ity = ir.IntType(bits)
  iptr = b.bitcast(elem, ity.as_pointer())

  def value(word):
    return E.from_storage(b, word if sty == ity else b.bitcast(word, sty), dt)

  def word(v):
    s = E.to_storage(b, v, dt)
    return s if sty == ity else b.bitcast(s, ity)

  first = b.load(iptr)
  pre = b.block
  fn = b.function
  loop = fn.append_basic_block("cas.loop")
  swap = fn.append_basic_block("cas.swap")
  done = fn.append_basic_block("cas.done")
  b.branch(loop)
  b.position_at_end(loop)
  old = b.phi(ity)
  old.add_incoming(first, pre)
  new = word(combine(value(old)))
  b.cbranch(b.icmp_unsigned("==", new, old), done, swap)
  b.position_at_end(swap)
  # device scope (PTX .gpu, as CUDA's atomicCAS), not LLVM's default, the whole system
  pair = b.cmpxchg(iptr, old, new, 'syncscope("device") monotonic', "monotonic")
  seen = b.extract_value(pair, 0)
  ok = b.extract_value(pair, 1)
  old.add_incoming(seen, swap)
  b.cbranch(ok, done, loop)
  b.position_at_end(done)
