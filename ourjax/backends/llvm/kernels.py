"""Kernel bodies: how a group of HLO instructions (a fusion, or one unfused op) becomes loops.

A *kernel* is one LLVM function ``void k(T0* noalias b0, ..., i64 tid, i64 nthreads)`` over
buffers planned by the backend; it computes the share ``tid`` of ``nthreads`` of its outputs
(a serial kernel ignores them and is only called on thread 0).  ``plan_group`` turns a group
into kernels:

* ``dot``, ``convolution``, ``sort`` and ``scatter`` inside a group get kernels of their own
  (their operands materialised into buffers when they are not buffers already); so does a
  ``reduce`` whose value would otherwise be needed at indices that are not the kernel's row
  (recomputing it per element would be quadratic).
* Everything else is evaluated element by element (``emitter.Emitter``) in a ``LoopKernel``:
  a loop over the output's rows and columns (``rows`` mode: row reductions of the row being
  written are *prefetched* once per row, which is how softmax/layernorm become one pass over
  each row; a costly value a row reduction computed is kept for the row's outputs in a one-row
  cache, and a concatenation along the row is written one column loop per part:
  ``row_cache.py``) or over the flat index (``flat`` mode: same-shape operands are loaded at the
  linear index, so the loop vectorizes), or in tiles when an input is read transposed
  (``tiled`` mode, see ``transposed_read``).
* Reductions choose a strategy: over trailing dimensions, one loop per output element whose
  reducer (add/mul/max/min/and/or/xor) may reassociate so that LLVM vectorizes it with partial
  accumulators; over a middle/leading block, a *column* kernel that accumulates whole output
  rows in order (exact, vectorized across outputs); a long reduction to few outputs is *split*
  across threads into partials and combined.

Float reductions that reassociate (``add``/``multiply`` with ``reassoc nsz``; max/min through
``llvm.maximum``/``llvm.minimum``) differ from the sequential/pairwise reference by rounding
only: the tests compare them with a relative tolerance of ``~sqrt(n)`` ulp of the sum of
magnitudes (see tests/test_cpu_ops.py); everything else is bit-exact with the reference except
the inline transcendental functions (a few ulp).

``emit_dot`` (``llvm/dots.py``) is the seam for matrix products: a packed, register-blocked
f32/f64 kernel for operands in buffers, and the elemental loop nest otherwise.  This file holds
the ``Kernel`` base and the loop kernel; the reduction kernels live in ``reduce_kernels.py``,
the copies, in-place updates, scatter and sort in ``copy_kernels.py``, the planning of a group
in ``group_planner.py`` (their names are this module's too).
"""
from __future__ import annotations

import math
from typing import Sequence

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import row_cache
from ourjax.backends.llvm.emitter import (I8, I64, Emitter, EmitterError, ForLoop, Index, Leaf,
                                          i64)

__all__ = ["Buf", "Kernel", "LoopKernel", "plan_group", "HARD_OPS", "emit_dot", "PlanError"]

#: Ops that never run element by element inside another kernel.
HARD_OPS = {"dot", "convolution", "sort", "scatter"}

#: Elements of work below which a kernel runs on one thread.
PARALLEL_MIN_WORK = 1 << 17
#: Most pieces a parallel kernel is cut into.
MAX_CHUNKS = 16
#: Fewest multiply-adds in a piece of a parallel dot (claiming a piece and setting up its
#: panels costs microseconds; a piece of this size computes for tens of them).
DOT_PIECE_WORK = 1 << 22
#: Fewest multiply-adds in a piece of an unbatched dot on the packed GEMM, whose pieces pack only
#: their own blocks of A and B: a piece of 512k computes for about 10 us on one core, and only
#: hosts of more threads than ``work / DOT_PIECE_WORK`` cut a dot this finely (an LSTM step's
#: 32x128x512 products, 2M multiply-adds each, ran on 2 of 16 threads with ``DOT_PIECE_WORK``;
#: JAX's contractions there spread over more cores).
DOT_SPLIT_WORK = 1 << 19


class PlanError(EmitterError):
  """The group cannot be planned natively."""


class Buf:
  """A buffer: ``dims`` elements of ``dtype`` in row-major order.  The backend decides where it
  lives (``kind``: param/output/const/temp/scratch, with ``slot`` or ``offset``).  ``donated``:
  an output that a call may write into a donated parameter's buffer.  ``slot_bytes``: scratch
  made of one area of that many bytes per thread running the kernel's pieces at once, except
  thread 0's, of ``first_slot_bytes`` (None: the same), first; the CPU's entry passes each
  thread its own area, which the kernel uses as a piece's whole scratch (None: the kernel
  divides the buffer itself).  ``home``: the slot of the output buffer a temporary lives in
  (at ``offset`` bytes into it) before that output is written (None: the arena)."""
  __slots__ = ("dtype", "dims", "nbytes", "name", "kind", "slot", "offset", "const_value",
               "donated", "slot_bytes", "first_slot_bytes", "home")

  def __init__(self, dtype, dims, name: str = "", kind: str = "temp", nbytes=None):
    self.dtype = np.dtype(dtype)
    self.dims = tuple(dims)
    self.nbytes = int(nbytes if nbytes is not None else
                      math.prod(self.dims) * self.dtype.itemsize)
    self.name, self.kind = name, kind
    self.slot = self.offset = self.home = None
    self.const_value = None
    self.donated = False
    self.slot_bytes = self.first_slot_bytes = None

  @property
  def size(self):
    return math.prod(self.dims)

  def __repr__(self):
    return f"<Buf {self.name} {self.kind} {self.dtype}{list(self.dims)}>"


def _ptr_type(buf: Buf):
  if buf.kind == "scratch":
    return I8.as_pointer()
  return E.storage_type(buf.dtype).as_pointer()


class Kernel:
  """One kernel function.  ``reads``/``writes`` are the buffers it touches (for liveness);
  ``scratch`` buffers are private work space (sized for all threads)."""
  serial_only = False

  def __init__(self, name: str, reads: Sequence[Buf], writes: Sequence[Buf],
               scratch: Sequence[Buf] = (), work: int = 0):
    self.name = name
    self.reads, self.writes, self.scratch = list(reads), list(writes), list(scratch)
    self.work = int(work)
    seen, bufs = set(), []
    for x in self.writes + self.reads + self.scratch:
      if id(x) not in seen:
        seen.add(id(x))
        bufs.append(x)
    self.buffers = bufs

  @property
  def parallel(self) -> bool:
    return not self.serial_only and self.work >= PARALLEL_MIN_WORK

  @property
  def chunks(self) -> int:
    """How many pieces a parallel kernel is cut into (threads claim them one at a time; the
    count is fixed here, so results do not depend on how many threads run)."""
    if not self.parallel:
      return 1
    return max(2, min(MAX_CHUNKS, self.work // PARALLEL_MIN_WORK))

  def emit(self, module: ir.Module) -> ir.Function:
    fty = ir.FunctionType(ir.VoidType(), [_ptr_type(x) for x in self.buffers] + [I64, I64])
    fn = ir.Function(module, fty, name=self.name)
    fn.linkage = "internal"
    for a, buf in zip(fn.args, self.buffers):
      a.add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    ptrs = {id(x): a for x, a in zip(self.buffers, fn.args)}
    tid, nthreads = fn.args[-2], fn.args[-1]
    if ((not self.parallel or id(self) in getattr(module, WHOLE_ATTR, ()))
        and not str(module.triple or "").startswith("nvptx")):
      # (on the CPU a serial kernel is only ever called as piece 0 of 1, cpu/entry.py: its
      # loops get constant bounds, which LLVM folds, unrolls and unswitches on as when it
      # inlines the call into an entry beside it, also where the entry lives in another
      # module.  On the GPU a kernel emitted here is a device function that a GPU kernel
      # calls with the thread's index and the thread count: ``parallel`` is the CPU's
      # planning and says nothing of it)
      tid, nthreads = i64(0), i64(1)
    elif self.parallel and getattr(module, PIECES_ONLY_ATTR, False):
      # (a module whose parallel kernels are only ever called piece by piece, ``chunks`` of
      # them (cpu/entry.py, a program without control flow compiled apart from its entry):
      # the piece count is a constant, as LLVM makes it when the entry is beside them)
      nthreads = i64(self.chunks)
    self.body(b, lambda buf: ptrs[id(buf)], tid, nthreads)
    b.ret_void()
    return fn

  def body(self, b, ptr, tid, nthreads):
    raise NotImplementedError


#: The attribute of an ``ir.Module`` that says its parallel kernels are only called in their
#: ``chunks`` pieces (never whole), so ``Kernel.emit`` makes the piece count a constant.
PIECES_ONLY_ATTR = "_ourjax_pieces_only"

#: The attribute of an ``ir.Module``: ids of the parallel kernels it holds that are only ever
#: called whole, as piece 0 of 1 (cpu/entry.py: called by a loop, not as a job), whose loops
#: then get constant bounds as a serial kernel's do.
WHOLE_ATTR = "_ourjax_whole"


def partition(b, total: int, tid, nthreads, align: int = 1):
  """[lo, hi) of ``total`` items for thread ``tid`` (chunks rounded up to ``align``)."""
  if total == 0:
    return i64(0), i64(0)
  chunk = b.sdiv(b.add(i64(total), b.sub(nthreads, i64(1))), nthreads)
  if align > 1:
    chunk = b.mul(b.sdiv(b.add(chunk, i64(align - 1)), i64(align)), i64(align))
  lo = b.mul(tid, chunk)
  lo = b.select(b.icmp_signed(">", lo, i64(total)), i64(total), lo)
  hi = b.add(lo, chunk)
  hi = b.select(b.icmp_signed(">", hi, i64(total)), i64(total), hi)
  return lo, hi


def _make_leaves(b, leafmap: dict, ptr) -> dict:
  """Emitter leaves from the planner's map: instr -> Buf | tuple of Buf | ('imm', value)."""
  out = {}
  for instr, spec in leafmap.items():
    if isinstance(spec, tuple) and spec and spec[0] == "imm":
      out[instr] = Leaf(instr.dtype, (), value=E.const(instr.dtype, spec[1]))
    elif isinstance(spec, tuple):
      out[instr] = tuple(Leaf(x.dtype, x.dims, ptr=ptr(x)) for x in spec)
    else:
      out[instr] = Leaf(spec.dtype, instr.dims if not instr.shape.is_tuple else spec.dims,
                        ptr=ptr(spec))
  return out


def _leaf_bufs(leafmap: dict) -> list:
  out = []
  for spec in leafmap.values():
    if isinstance(spec, Buf):
      out.append(spec)
    elif isinstance(spec, tuple) and spec and isinstance(spec[0], Buf):
      out.extend(spec)
  return out


def output_bufs(outputs) -> list:
  """The buffers that (instr, Buf or tuple of Bufs) output pairs write."""
  out = []
  for _, buf in outputs:
    out.extend(buf if isinstance(buf, tuple) else [buf])
  return out


def store_output(b, instr, buf, value, index, ptr):
  """Store output ``instr``'s element ``value`` (a tuple of them for a tuple output) at
  ``index`` of its buffer(s) ``buf``."""
  if isinstance(buf, tuple):
    for x, bx in zip(value, buf):
      E.store_element(b, x, ptr(bx), index.linear, bx.dtype)
  else:
    E.store_element(b, value, ptr(buf), index.linear, instr.dtype)


def store_outputs(b, em, outputs, index, ptr, evaluate_first: bool = False):
  """Evaluate each output of ``outputs`` ((instr, buf) pairs) at ``index`` and store it.
  ``evaluate_first``: every output is evaluated before the first store, so that an output may
  be written over a buffer the kernel reads at the same index (``backends/donation.py``)."""
  if evaluate_first and len(outputs) > 1:
    vals = [em.value(instr, index) for instr, _ in outputs]
    for (instr, buf), v in zip(outputs, vals):
      store_output(b, instr, buf, v, index, ptr)
    return
  for instr, buf in outputs:
    store_output(b, instr, buf, em.value(instr, index), index, ptr)


# ---------------------------------------------------------------------------------------------
# the loop kernel
# ---------------------------------------------------------------------------------------------

#: Cache-line bytes; a transposed read touches one line an element.
LINE_BYTES = 64
#: Side of the register blocks a plain transpose of 32-bit elements is written in (8 lanes:
#: AVX2's vectors; a 16-lane AVX-512 vector is two of them)
TRANSPOSE_BLOCK = 8
#: Side of the square tiles (of such blocks) it goes through, where the dimensions allow (else
#: the tiles of ``L1_WAYS`` rows by a cache line).  1024x1024 float32 on one core of a loaded 2-core AMD EPYC (CPU time):
#: 480 us with tiles of 32, 420-510 with 16, 690+ with 8, 630+ element by element
TRANSPOSE_TILE = 32
#: L1 data cache bytes and ways assumed by the tiling rule (the smallest of the x86-64 cores
#: targeted: 32 KiB, 8 ways).
L1_BYTES = 32 << 10
L1_WAYS = 8


def transposed_read(outputs, dims, leafmap):
  """``(d, itemsize)`` when some input buffer is read through a transpose that makes its rows
  run along dimension ``d`` of ``dims`` (not the last): written row by row, each output element
  would read another cache line of it (and, with rows of 4 KiB, another page); None when none
  is.  The walk follows the element's index from the outputs through ops that keep it
  (elementwise ops, converts, slices) and transposes, to the buffers it reads."""
  n = len(dims)
  last = n - 1
  seen = set()
  stack = [(i, tuple(range(n))) for i, _ in outputs if tuple(_dims(i)) == tuple(dims)]
  found = None
  while stack:
    instr, kdim = stack.pop()
    key = (id(instr), kdim)
    if key in seen:
      continue
    seen.add(key)
    spec = leafmap.get(instr)
    if spec is not None:
      if isinstance(spec, Buf) and len(instr.dims) == n and kdim[-1] != last and \
          instr.dims[-1] * instr.dtype.itemsize >= LINE_BYTES:
        if found is None or instr.dtype.itemsize < found[1]:
          found = (kdim[-1], instr.dtype.itemsize)
      continue
    op = instr.opcode
    if op == "transpose":
      perm = instr.attrs["dimensions"]
      inner = [None] * n
      for i, p in enumerate(perm):
        inner[p] = kdim[i]
      stack.append((instr.operands[0], tuple(inner)))
    elif op in ("slice", "copy") or instr.is_elementwise():
      for x in instr.operands:
        if not x.shape.is_tuple and (len(x.dims) == n if op == "slice" else x.dims == instr.dims):
          stack.append((x, kdim))
  return found


class LoopKernel(Kernel):
  """Stores ``outputs`` ((instr, Buf) pairs) element by element over ``dims``.  Outputs whose
  dims are ``dims[:-1]`` are written once per row (rows mode).  ``prefetch`` lists reductions
  (by level: 'outer' = per row, 'elem' = per element) evaluated before the outputs so that the
  emitter finds them memoised."""

  def __init__(self, name, dims, outputs, leafmap, rows: bool, prefetch_outer=(),
               prefetch_elem=(), fast_reductions=True):
    self.dims = tuple(dims)
    self.outputs = list(outputs)
    self.leafmap = dict(leafmap)
    self.rows = rows
    self.prefetch_outer = list(prefetch_outer)
    self.prefetch_elem = list(prefetch_elem)
    self.fast_reductions = fast_reductions
    work = math.prod(self.dims) * max(1, _cost_per_element(outputs, leafmap))
    super().__init__(name, _leaf_bufs(leafmap), output_bufs(outputs), work=work)
    # (what ``chunks`` cuts: transcendental functions at their cost; ``work``, which decides
    # whether the kernel is parallel at all, keeps the weights PARALLEL_MIN_WORK was set with)
    self.split_work = math.prod(self.dims) * max(1, _cost_per_element(
        outputs, leafmap, TRANSCENDENTAL_COST))
    # tiled: (d, rows, cols) when an input is read transposed along d and the lines one output
    # row reads from it (one an element) would not stay in a quarter of L1 until the next row
    # reads them again.  The output is then written in tiles of `rows` x `cols` (a cache line
    # of each output row); a tile reads `cols` lines of the input, `rows` elements of each.
    # `rows` is L1's ways: rows of a power-of-two length map to one cache set, and tiles of 16
    # such rows ran 3.5x slower than tiles of 8 (1024x1024 f32 transpose, one AMD EPYC core:
    # 3.2 ms against 0.91; 4.0 ms untiled)
    # (rows mode without per-row work, which a plain transpose is planned in, too)
    self.tiled = None
    per_row = self.prefetch_outer or self.prefetch_elem or any(
        _dims(i) != self.dims for i, _ in self.outputs)
    t = None if per_row or len(self.dims) < 2 else \
        transposed_read(outputs, self.dims, leafmap)
    if t is not None:
      d = t[0]
      cols = max(8, LINE_BYTES // max(b.dtype.itemsize for b in self.writes))
      if self.dims[-1] * LINE_BYTES > L1_BYTES // 4 and self.dims[d] >= 2 * L1_WAYS:
        self.tiled = (d, L1_WAYS, cols)
        if self._vector_transpose() is not None and self.dims[d] % TRANSPOSE_TILE == 0 and \
            self.dims[-1] % TRANSPOSE_TILE == 0:      # square tiles of register blocks
          self.tiled = (d, TRANSPOSE_TILE, TRANSPOSE_TILE)

  def _units(self) -> int:
    """What ``body`` shares out: rows in rows mode, strips of the tiles' rows along the
    transposed dimension in tiled mode, else blocks of 64 elements (see its ``partition``)."""
    total = math.prod(self.dims)
    if self.tiled:
      d, rows, _ = self.tiled
      return total // (self.dims[d] * self.dims[-1]) * -(-self.dims[d] // rows)
    if self.rows:
      return math.prod(self.dims[:-1])
    return -(-total // 64) if total >= 256 else total

  @property
  def parallel(self) -> bool:
    return super().parallel and self._units() >= 2

  @property
  def chunks(self) -> int:
    """``Kernel.chunks`` of ``split_work``, at most one piece per unit ``body`` shares out (more
    would be empty: a (2, 4096) kernel in rows mode had 7 pieces, 5 of them empty)."""
    if not self.parallel:
      return 1
    return min(max(2, min(MAX_CHUNKS, self.split_work // PARALLEL_MIN_WORK)), self._units())

  def body(self, b, ptr, tid, nthreads):
    total = math.prod(self.dims)
    if total == 0:
      return
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr), self.fast_reductions)
    em.reduce_ok = None
    inner_outs = [(i, buf) for i, buf in self.outputs if _dims(i) == self.dims]
    outer_outs = [(i, buf) for i, buf in self.outputs if _dims(i) != self.dims]

    fills = {}                      # id(reduction) -> the row caches its loop fills
    if self.rows:
      for x, r in row_cache.plan_row_caches(self.dims, self.outputs, self.leafmap,
                                            self.prefetch_outer, self.prefetch_elem):
        em.row_caches[id(x)] = c = row_cache.RowCache(b, x, self.dims[-1])
        fills.setdefault(id(r), []).append(c)

    def prefetch(reduces, index):
      for r in reduces:
        caches = fills.get(id(r), ())
        for c in caches:
          c.filling = True
        em.reduce_ok = r
        em.value(r, index)
        em.reduce_ok = None
        for c in caches:
          c.filling, c.filled = False, True

    def store(outs, index):
      store_outputs(b, em, outs, index, ptr, evaluate_first=True)

    if self.tiled and self._vector_transpose() is not None:
      self._vector_transpose_body(b, ptr, tid, nthreads)
    elif self.tiled:
      assert not outer_outs
      self._tiled_body(b, em, tid, nthreads, lambda idx: (prefetch(self.prefetch_elem, idx),
                                                          store(inner_outs, idx)))
    elif self.rows:
      n = self.dims[-1]
      outer_dims = self.dims[:-1]
      lo, hi = partition(b, math.prod(outer_dims), tid, nthreads)
      with ForLoop(b, lo, hi, "row") as row:
        omulti = E.delinearize(b, row.index, outer_dims)
        oidx = Index(b, outer_dims, linear=row.index, multi=omulti)
        em.push_scope()
        prefetch(self.prefetch_outer, oidx)
        store(outer_outs, oidx)
        base = b.mul(row.index, i64(n), flags=["nuw", "nsw"])
        segments = row_cache.column_segments(self.dims, inner_outs, self.leafmap)
        for clo, chi in segments:
          with ForLoop(b, clo, chi, "col") as col:
            if len(segments) > 1:
              em.ranges[id(col.index)] = (clo, chi)
            em.push_scope()
            idx = Index(b, self.dims, linear=b.add(base, col.index, flags=["nuw", "nsw"]),
                        multi=omulti + [col.index])
            prefetch(self.prefetch_elem, idx)
            store(inner_outs, idx)
            em.pop_scope()
        em.pop_scope()
    else:
      assert not outer_outs
      lo, hi = partition(b, total, tid, nthreads, align=64 if total >= 256 else 1)
      # (one dimension: its index is the column's, cut as a row's is, each thread's share of
      # the positions run segment by segment)
      segments = row_cache.column_segments(self.dims, inner_outs, self.leafmap) \
          if len(self.dims) == 1 else [(0, total)]
      for clo, chi in segments:
        start, stop = lo, hi
        if len(segments) > 1:
          start = b.select(b.icmp_signed("<", lo, i64(clo)), i64(clo), lo)
          stop = b.select(b.icmp_signed(">", hi, i64(chi)), i64(chi), hi)
        with ForLoop(b, start, stop, "i") as loop:
          if len(segments) > 1:
            em.ranges[id(loop.index)] = (clo, chi)
          em.push_scope()
          idx = Index(b, self.dims, linear=loop.index)
          prefetch(self.prefetch_elem, idx)
          store(inner_outs, idx)
          em.pop_scope()


  def _vector_transpose(self):
    """The input Buf when the kernel is a plain transpose of 32-bit elements whose tiles are
    whole ``TRANSPOSE_BLOCK``-square blocks (``_vector_transpose_body``), else None."""
    if not self.tiled or len(self.outputs) != 1 or self.prefetch_outer or self.prefetch_elem:
      return None
    instr, out = self.outputs[0]
    if instr.opcode != "transpose" or not isinstance(out, Buf) or out.donated:
      return None
    src = self.leafmap.get(instr.operands[0])
    d, rows, cols = self.tiled
    v, last = TRANSPOSE_BLOCK, len(self.dims) - 1
    if (not isinstance(src, Buf) or src.dtype != out.dtype or src.dtype.itemsize != 4 or
        src.size != out.size or instr.attrs["dimensions"][d] != last or rows % v or
        cols % v or self.dims[d] % rows or self.dims[last] % cols):
      return None
    return src

  def _vector_transpose_body(self, b, ptr, tid, nthreads):
    """``_tiled_body``'s strips of a plain transpose, each written in blocks of V x V elements
    (V = ``TRANSPOSE_BLOCK``): V vector loads of V contiguous input elements (one per input
    row), a transpose of the V vectors in registers (``gemm._transpose``: log2(V) rounds of
    shuffles), V vector stores of V contiguous output elements.  The element-by-element tile
    moves an element per load and store (1024x1024 float32 on one AMD EPYC core: ~550 us)."""
    from ourjax.backends.llvm.gemm import _transpose
    instr, out = self.outputs[0]
    src = self._vector_transpose()
    perm = instr.attrs["dimensions"]
    d, rows, cols = self.tiled
    dims, v = self.dims, TRANSPOSE_BLOCK
    n = len(dims)
    last = n - 1
    in_dims = instr.operands[0].dims
    in_strides = [math.prod(in_dims[k + 1:]) for k in range(n)]
    out_strides = [math.prod(dims[k + 1:]) for k in range(n)]
    other_axes = [k for k in range(n) if k not in (d, last)]
    strips = dims[d] // rows
    src_p, dst_p = ptr(src), ptr(out)
    vt = ir.VectorType(src_p.type.pointee, v)
    col_stride = in_strides[perm[last]]       # input elements between two output columns
    row_stride = out_strides[d]               # output elements between two output rows

    def at(p, k):
      return b.bitcast(b.gep(p, [k], inbounds=True), vt.as_pointer())

    lo, hi = partition(b, self._units(), tid, nthreads)
    with ForLoop(b, lo, hi, "strip") as s:
      outer = E.delinearize(b, b.sdiv(s.index, i64(strips)), [dims[k] for k in other_axes]) \
          if other_axes else []
      r0 = b.mul(b.srem(s.index, i64(strips)), i64(rows), flags=["nuw", "nsw"])
      in_base, out_base = r0, b.mul(r0, i64(row_stride), flags=["nuw", "nsw"])
      for k, x in zip(other_axes, outer):
        in_base = b.add(in_base, b.mul(x, i64(in_strides[perm[k]]), flags=["nuw", "nsw"]),
                        flags=["nuw", "nsw"])
        out_base = b.add(out_base, b.mul(x, i64(out_strides[k]), flags=["nuw", "nsw"]),
                         flags=["nuw", "nsw"])
      with ForLoop(b, 0, dims[last], "tile", step=cols) as t:
        # (V input rows at a time, all of the tile's blocks along them: each input line is
        # used up while it is in L1)
        with ForLoop(b, 0, cols, "cb", step=v) as cb:
          with ForLoop(b, 0, rows, "rb", step=v) as rb:
            c0 = b.add(t.index, cb.index, flags=["nuw", "nsw"])
            src0 = b.add(b.add(in_base, rb.index, flags=["nuw", "nsw"]),
                         b.mul(c0, i64(col_stride), flags=["nuw", "nsw"]), flags=["nuw", "nsw"])
            vecs = [b.load(at(src_p, b.add(src0, i64(j * col_stride), flags=["nuw", "nsw"])),
                           align=4) for j in range(v)]
            dst0 = b.add(b.add(out_base, c0, flags=["nuw", "nsw"]),
                         b.mul(rb.index, i64(row_stride), flags=["nuw", "nsw"]),
                         flags=["nuw", "nsw"])
            for i, row in enumerate(_transpose(b, vecs)):
              b.store(row, at(dst_p, b.add(dst0, i64(i * row_stride), flags=["nuw", "nsw"])),
                      align=4)

  def _tiled_body(self, b, em, tid, nthreads, element):
    """The elements in tiles of ``rows`` (along the transposed dimension ``d``) x ``cols``
    (along the last one): threads share strips of ``rows`` (of every other index), and a strip
    is written tile by tile, row by row within a tile."""
    d, rows, cols = self.tiled
    dims = self.dims
    last = len(dims) - 1
    other = [n for i, n in enumerate(dims) if i not in (d, last)]
    strips = -(-dims[d] // rows)

    def upto(x, n):
      return b.select(b.icmp_signed("<", x, i64(n)), x, i64(n))
    lo, hi = partition(b, self._units(), tid, nthreads)
    with ForLoop(b, lo, hi, "strip") as s:
      outer = E.delinearize(b, b.sdiv(s.index, i64(strips)), other) if other else []
      r0 = b.mul(b.srem(s.index, i64(strips)), i64(rows), flags=["nuw", "nsw"])
      r1 = upto(b.add(r0, i64(rows), flags=["nuw", "nsw"]), dims[d])
      with ForLoop(b, 0, dims[last], "tile", step=cols) as t:
        c1 = upto(b.add(t.index, i64(cols), flags=["nuw", "nsw"]), dims[last])
        with ForLoop(b, r0, r1, "r") as r:
          with ForLoop(b, t.index, c1, "c") as c:
            rest = iter(outer)
            multi = [r.index if i == d else c.index if i == last else next(rest)
                     for i in range(len(dims))]
            em.push_scope()
            element(Index(b, dims, multi=multi))
            em.pop_scope()


_EXPENSIVE = set(E._MATH_UNARY) | {"power", "atan2", "remainder", "divide", "sqrt", "rsqrt"}
#: What a transcendental function costs in ``LoopKernel.chunks`` (in fused elementwise ops):
#: vectorized, a fused op costs ~0.02 ns an element here and tanh, logistic or exp 0.7-1.7 ns
#: (a 2M-element tanh took 3.2 ms on one core, an LSTM step's gate kernel, 5 of them per
#: element, 30 us for 4096 elements); at 8 that kernel was cut in 2 pieces, so that 16 threads
#: ran it on 2.
TRANSCENDENTAL_COST = 64


def _cost_per_element(outputs, leafmap, transcendental: int = 8) -> int:
  """A rough count of operations per output element (reductions count their inputs);
  ``transcendental``: what a transcendental function (``E._MATH_UNARY``, power, atan2)
  counts."""
  seen = set()
  cost = 0
  stack = [i for i, _ in outputs]
  while stack:
    x = stack.pop()
    if id(x) in seen or x in leafmap:
      continue
    seen.add(id(x))
    if x.opcode == "reduce":
      red = math.prod(x.operands[0].dims[d] for d in x.attrs["dimensions"])
      cost += red * 2
    elif x.opcode in ("dot", "convolution"):
      cost += 2 * max(1, x.operands[0].shape.size // max(1, x.shape.size))
    elif x.opcode in _EXPENSIVE:
      cost += transcendental if x.opcode in E._MATH_UNARY or x.opcode in ("power", "atan2") \
          else 8
    else:
      cost += 1
    stack.extend(x.operands)
  return cost


#: Chunks a split reduction is cut into (independent of the thread count, so results are too).
SPLIT_CHUNKS = 32


# the reduction kernels (llvm/reduce_kernels.py) and the copies, in-place updates, scatter and
# sort (llvm/copy_kernels.py) build on Kernel above, hence imported here; their names are
# kernels' too
from ourjax.backends.llvm.reduce_kernels import (  # noqa: E402,F401
    ColumnReduceKernel, SplitReduceFinish, SplitReducePartials, _NEUTRAL, _neutral)
from ourjax.backends.llvm.copy_kernels import (  # noqa: E402,F401
    CopyKernel, DynamicUpdateInPlace, ScatterGeometry, ScatterKernel, SortKernel)


# the dot family (llvm/dots.py builds on Kernel and partition above, hence imported here)
from ourjax.backends.llvm.dots import (DotKernel, DotSpec, dot_pieces, dot_scratch_bytes,  # noqa: E402,F401,E501
                                       emit_dot, fast_dot_ok, gemm_symbols, _narrow_float_dot,
                                       Im2colDotKernel)


# planning a group lives in group_planner.py; its names are kernels' too
from ourjax.backends.llvm.group_planner import (  # noqa: E402,F401
    GroupPlanner, _column_reduce, _dims, _index_classes, _operand_class, _reachable, _restrict,
    _restrict_many, plan_group)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
