"""Dots on the CPU: a ``dot`` over strided buffers (``DotSpec``) as one ``DotKernel``, calling
the packed GEMM of ``llvm/gemm.py`` when both operands have a unit stride, else a simpler
register-blocked kernel; how many pieces a parallel dot is cut into (``DotKernel.chunks``).
The GPU's dot kernels read the same ``DotSpec``.  Split from ``kernels.py`` (which imports
this module after defining ``Kernel``)."""
from __future__ import annotations

import math

import llvmlite.ir as ir

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm.emitter import I32, ForLoop, alloca_entry, i64
from ourjax.backends.llvm.kernels import (DOT_PIECE_WORK, DOT_SPLIT_WORK, MAX_CHUNKS,
                                          PARALLEL_MIN_WORK, Buf, Kernel, partition)
from ourjax.lowering import hlo

__all__ = ["DotSpec", "DotKernel", "Im2colDotKernel", "PackBKernel", "emit_dot", "gemm_symbols",
           "dot_scratch_bytes", "dot_scratch", "share_b", "fast_dot_ok", "gemm_blocking"]



def _group_stride(dims, strides, group):
  """(size, stride) of a group of dimensions read as one (row-major within the group), or None
  when their strides do not chain."""
  g = [d for d in group if dims[d] != 1]
  size = math.prod(dims[d] for d in group)
  if not g:
    return size, 0
  for a, c in zip(g, g[1:]):
    if strides[a] != strides[c] * dims[c]:
      return None
  return size, strides[g[-1]]


def _row_major_strides(dims):
  st, acc = [], 1
  for n in reversed(dims):
    st.append(acc)
    acc *= n
  return st[::-1]


class DotSpec:
  """A dot as batched C[b, m, n] = sum_k A[b, m, k] B[b, k, n] over strided buffers."""

  def __init__(self, dot):
    lhs, rhs = dot.operands
    lb, lf, lc = hlo.dot_operand_groups(dot, 0)
    rb, rf, rc = hlo.dot_operand_groups(dot, 1)
    ls, rs = _row_major_strides(lhs.dims), _row_major_strides(rhs.dims)
    parts = [_group_stride(lhs.dims, ls, lb), _group_stride(lhs.dims, ls, lf),
             _group_stride(lhs.dims, ls, lc), _group_stride(rhs.dims, rs, rb),
             _group_stride(rhs.dims, rs, rc), _group_stride(rhs.dims, rs, rf)]
    self.ok = all(p is not None for p in parts)
    if self.ok:
      (self.B, self.a_sb), (self.M, self.a_sm), (self.K, self.a_sk) = parts[:3]
      (_, self.b_sb), (_, self.b_sk), (self.N, self.b_sn) = parts[3:]
    self.dtype = dot.dtype


def emit_dot(b, spec: DotSpec, A, Bm, C, scratch, tid, nthreads, accumulate: bool = False,
             b_packed: bool = False, blocking=None):
  """The matrix-product seam: C[b] = A[b] @ B[b] for f32/f64 operands in buffers (``A``, ``Bm``,
  ``C`` typed pointers; ``scratch`` an i8* to this piece's own ``dot_scratch_bytes(spec,
  nthreads)``); ``accumulate``:
  C[b] += A[b] @ B[b] (the packed GEMM only: ``_gemm_layout_ok``); ``b_packed``: ``Bm`` holds
  B packed by a ``PackBKernel`` (the packed GEMM, batch 1); ``blocking``: the packed GEMM's
  cache blocking (``gemm_blocking``; the scratch was sized for it), None: the kernel's own.

  Calls the packed GEMM of ``llvm/gemm.py`` (BLIS-style panels, a micro-kernel register-blocked
  for the target's vector ISA, one process-wide compiled kernel) when both operands have a unit
  stride, else the simpler kernel below."""
  if _gemm_layout_ok(spec):
    from ourjax.backends.llvm import gemm
    gemm.emit_gemm_call(b, "f32" if spec.dtype == E.F32 else "f64", A, Bm, C, M=spec.M,
                        N=spec.N, K=spec.K, a_strides=(spec.a_sm, spec.a_sk),
                        b_strides=(spec.b_sk, spec.b_sn), tid=tid, nthreads=nthreads,
                        scratch=scratch, batch=spec.B,
                        batch_strides=(spec.a_sb, spec.b_sb, spec.M * spec.N),
                        accumulate=accumulate, b_packed=b_packed, blocking=blocking)
    return
  if accumulate:
    raise ValueError("emit_dot: accumulate needs operands the packed GEMM reads")
  _emit_dot_blocked(b, spec, A, Bm, C, scratch, tid, nthreads)


def _gemm_layout_ok(spec) -> bool:
  import os
  if os.environ.get("OURJAX_CPU_SIMPLE_DOT"):
    return False
  try:
    from ourjax.backends.llvm import gemm
  except Exception:   # pragma: no cover
    return False
  return (gemm.operand_layout(spec.M, spec.K, spec.a_sm, spec.a_sk) is not None and
          gemm.operand_layout(spec.N, spec.K, spec.b_sn, spec.b_sk) is not None)


def gemm_symbols(spec) -> list:
  """Process-wide symbols the dot's code links to (to register before loading cached code)."""
  if _gemm_layout_ok(spec):
    from ourjax.backends.llvm import gemm
    return [gemm.prefetch_shared_gemm("f32" if spec.dtype == E.F32 else "f64")]
  return []


def _emit_dot_blocked(b, spec: DotSpec, A, Bm, C, scratch, tid, nthreads):
  """Register-blocked: for each block of NR columns, B[:, block] is packed into a contiguous
  K x NR panel (in the piece's scratch), then MR rows at a time accumulate MR x NR outputs in
  vector registers (``<W x T>`` FMAs on a broadcast A element; W and FMA or multiply + add come
  from the GEMM's vector target, ``gemm.vector_target()``: 6 x 2 accumulators + 2 B + 1
  broadcast fit 16 registers).  Threads split the column blocks (or the rows when there are few
  of them).  Sums are accumulated in k order, which differs from the reference's BLAS only by
  rounding."""
  from ourjax.backends.llvm import gemm
  vt = gemm.vector_target()
  t = E.compute_type(spec.dtype)
  W = vt.lanes["f32" if spec.dtype == E.F32 else "f64"]
  NV = 2
  NR = W * NV
  MR = 6
  vty = ir.VectorType(t, W)
  M, N, K = spec.M, spec.N, spec.K
  nblocks = -(-N // NR)
  panel = b.bitcast(scratch, t.as_pointer())     # (this piece's own: see dot_scratch)
  zero_v = ir.Constant(vty, [ir.Constant(t, 0.0)] * W)
  fma_name = f"llvm.fma.v{W}{'f32' if t == E.FLT else 'f64'}"
  mod = b.module
  fma = (mod.globals.get(fma_name) or ir.Function(mod, ir.FunctionType(vty, [vty] * 3), fma_name)
         if vt.fma else None)

  def madd(x, y, acc):
    return b.call(fma, [x, y, acc]) if fma is not None else b.fadd(b.fmul(x, y), acc)

  def vload(p):
    return b.load(b.bitcast(p, vty.as_pointer()), align=4 if t == E.FLT else 8)

  def vstore(v, p):
    b.store(v, b.bitcast(p, vty.as_pointer()), align=4 if t == E.FLT else 8)

  def splat(x):
    v = b.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, W), [0] * W))

  split_cols = nblocks >= 2 * 4 or M < 4 * MR
  with ForLoop(b, 0, spec.B, "bat") as bat:
    a_base = b.gep(A, [b.mul(bat.index, i64(spec.a_sb))])
    b_base = b.gep(Bm, [b.mul(bat.index, i64(spec.b_sb))])
    c_base = b.gep(C, [b.mul(bat.index, i64(M * N))])
    if split_cols:
      jlo, jhi = partition(b, nblocks, tid, nthreads)
      ilo, ihi = i64(0), i64(M)
    else:
      jlo, jhi = i64(0), i64(nblocks)
      ilo, ihi = partition(b, M, tid, nthreads)
    with ForLoop(b, jlo, jhi, "jb") as jb:
      j0 = b.mul(jb.index, i64(NR))
      width = b.sub(i64(N), j0)
      width = b.select(b.icmp_signed(">", width, i64(NR)), i64(NR), width)
      # pack B[:, j0:j0+width] into panel[k, 0:NR] (zero padded)
      with ForLoop(b, 0, K, "pk") as pk:
        brow = b.gep(b_base, [b.mul(pk.index, i64(spec.b_sk))])
        prow = b.gep(panel, [b.mul(pk.index, i64(NR))])
        with ForLoop(b, 0, NR, "pj") as pj:
          inside = b.icmp_signed("<", pj.index, width)
          jj = b.select(inside, b.add(j0, pj.index), i64(0))
          v = b.load(b.gep(brow, [b.mul(jj, i64(spec.b_sn))]))
          b.store(b.select(inside, v, ir.Constant(t, 0.0)), b.gep(prow, [pj.index]))
      full = b.icmp_signed("==", width, i64(NR))

      def rows_block(mr, i0):
        slots = [[alloca_entry(b, vty) for _ in range(NV)] for _ in range(mr)]
        for r in range(mr):
          for v in range(NV):
            b.store(zero_v, slots[r][v])
        arows = [b.gep(a_base, [b.mul(b.add(i0, i64(r)), i64(spec.a_sm))]) for r in range(mr)]
        with ForLoop(b, 0, K, "k") as k:
          prow = b.gep(panel, [b.mul(k.index, i64(NR))])
          bv = [vload(b.gep(prow, [i64(v * W)])) for v in range(NV)]
          for r in range(mr):
            av = splat(b.load(b.gep(arows[r], [b.mul(k.index, i64(spec.a_sk))])))
            for v in range(NV):
              b.store(madd(av, bv[v], b.load(slots[r][v])), slots[r][v])
        fn = b.function
        fullb, partb, joinb = (fn.append_basic_block(x) for x in ("st.full", "st.part", "st.join"))
        b.cbranch(full, fullb, partb)
        b.position_at_end(fullb)
        for r in range(mr):
          crow = b.gep(c_base, [b.add(b.mul(b.add(i0, i64(r)), i64(N)), j0)])
          for v in range(NV):
            vstore(b.load(slots[r][v]), b.gep(crow, [i64(v * W)]))
        b.branch(joinb)
        b.position_at_end(partb)
        for r in range(mr):
          crow = b.gep(c_base, [b.add(b.mul(b.add(i0, i64(r)), i64(N)), j0)])
          tmp = alloca_entry(b, ir.ArrayType(t, NR))
          tp = b.bitcast(tmp, t.as_pointer())
          for v in range(NV):
            vstore(b.load(slots[r][v]), b.gep(tp, [i64(v * W)]))
          with ForLoop(b, 0, width, "cj") as cj:
            b.store(b.load(b.gep(tp, [cj.index])), b.gep(crow, [cj.index]))
        b.branch(joinb)
        b.position_at_end(joinb)

      nfull = b.add(ilo, b.mul(b.sdiv(b.sub(ihi, ilo), i64(MR)), i64(MR)))
      with ForLoop(b, 0, b.sdiv(b.sub(nfull, ilo), i64(MR)), "ib") as ib:
        rows_block(MR, b.add(ilo, b.mul(ib.index, i64(MR))))
      with ForLoop(b, nfull, ihi, "ir") as ir_:
        rows_block(1, ir_.index)


def gemm_blocking(spec: DotSpec, threads: int, im2col: bool = False):
  """The cache blocking of the packed GEMM's call for a dot of ``spec`` planned for
  ``threads`` threads (``gemm_tune.choose``: tuned per shape class and host, else the
  default), or None: the kernel's own (the register-blocked kernel; a convolution's patch
  matrix, whose packing the tuner does not time).  The same for the same arguments all
  through a process, so a dot's scratch (``dot_scratch``) and its call agree."""
  if im2col:
    return _conv_blocking(spec, threads)
  if not _gemm_layout_ok(spec):
    return None
  from ourjax.backends.llvm import gemm, gemm_tune
  la = gemm.operand_layout(spec.M, spec.K, spec.a_sm, spec.a_sk)
  lb = gemm.operand_layout(spec.N, spec.K, spec.b_sn, spec.b_sk)
  return gemm_tune.choose("f32" if spec.dtype == E.F32 else "f64", spec.M, spec.N, spec.K,
                          not la[0], lb[0], spec.B, dot_pieces(spec, threads))


def _conv_blocking(spec: DotSpec, threads: int):
  """A convolution's blocking (its patch matrix's GEMM, ``gemm_im2col.py``): the kernel's
  own, except that a row-major B (the HWIO weights) is read in place by pieces of up to
  ``CONV_DIRECT_B_ROWS`` rows, the most rows of a piece of this split: its tiles then read
  the weights' rows where they are instead of each piece packing its column block of them (a
  K slice deep: 118 KiB for 128 channels, per thread at once), and A is packed a row panel
  at a time, so a piece's scratch is one ``mr x kc`` panel.  The same FMAs in the same order
  (only where B's panels are read from changes).  None: the kernel's own."""
  from ourjax.backends.llvm import gemm, gemm_scratch
  if not _gemm_layout_ok(spec) or gemm.operand_layout(spec.N, spec.K, spec.b_sn, spec.b_sk)[0]:
    return None
  dtype = "f32" if spec.dtype == E.F32 else "f64"
  bl, w = gemm.default_blocking(dtype), gemm.vector_target().lanes[dtype]
  pieces = dot_pieces(spec, threads)
  rows = max(r for r, _ in gemm_scratch._pieces(spec.M, spec.N, pieces, 1, bl, w))
  rows = -(-rows // 4) * 4         # (the tune word holds rows / 4)
  if rows <= bl.direct_b_rows or rows > CONV_DIRECT_B_ROWS:
    return None
  import dataclasses
  return dataclasses.replace(bl, direct_b_rows=rows)


#: The most rows of a convolution's piece that read B in place (``_conv_blocking``; what the
#: GEMM's tune word can hold).
CONV_DIRECT_B_ROWS = 2040


def dot_scratch_bytes(spec: DotSpec, pieces: int, im2col: bool = False,
                      b_packed: bool = False, blocking=None, direct_a: bool = False) -> int:
  """Scratch bytes of one running piece of a dot of ``spec`` cut into ``pieces`` (each thread
  running pieces at once has such an area of its own, ``DotKernel.scratch_slots``): the packed
  GEMM's panels of its largest piece (``gemm.pack_buffer_bytes``), or the register-blocked
  kernel's K x NR panel of B; ``blocking``: the GEMM's (``gemm_blocking``); ``direct_a``: a
  patch matrix read in place (``gemm_im2col.direct_a``).  0 when nothing is packed into
  scratch (B read in place, A's one row panel on the call's stack or read in place)."""
  from ourjax.backends.llvm import gemm
  dtype = "f32" if spec.dtype == E.F32 else "f64"
  if _gemm_layout_ok(spec):
    lb = gemm.operand_layout(spec.N, spec.K, spec.b_sn, spec.b_sk)
    n = gemm.pack_buffer_bytes(dtype, spec.M, spec.N, spec.K, pieces,
                               blocking, trans_b=bool(lb[0]), batch=spec.B, im2col=im2col,
                               b_packed=b_packed, direct_a=direct_a)
    return n + 64 if n else 0
  W = gemm.vector_target().lanes[dtype]   # _emit_dot_blocked's K x NR panel (NR = 2*W)
  return spec.K * 2 * W * spec.dtype.itemsize + 64


def dot_scratch(new_scratch, spec: DotSpec, threads: int, name: str, im2col: bool = False,
                whole: bool = False, b_packed: bool = False, direct_a: bool = False):
  """The scratch buffer of a ``DotKernel`` of ``spec`` planned for ``threads`` threads: one
  piece's area (``dot_scratch_bytes``) per thread that may run a piece at once (no more than
  the pieces), which the thread reuses for every piece it claims (``Buf.slot_bytes``: the CPU's
  entry passes each thread its own area).  ``whole``: the kernel may also be called as one
  piece (inside a loop or a branch the entry calls small parallel kernels whole), so the area
  also fits that call (only thread 0 makes such calls: its area alone grows).  ``direct_a``:
  a patch matrix the GEMM reads in place (``gemm_im2col.direct_a``): the buffer may have no
  bytes at all (then the arena gives it no room)."""
  from ourjax.backends.llvm import kernels
  pieces = dot_pieces(spec, threads)
  bl = gemm_blocking(spec, threads, im2col)
  one = dot_scratch_bytes(spec, pieces, im2col, b_packed, bl, direct_a)
  first = one
  serial = spec.B * spec.M * spec.N * spec.K < kernels.PARALLEL_MIN_WORK  # (Kernel.parallel)
  if (whole or serial) and pieces > 1:
    # (only thread 0 calls a kernel whole: its area alone fits that call)
    first = max(one, (dot_scratch_bytes(spec, 1, im2col, b_packed, bl, direct_a) + 63)
                // 64 * 64)
  buf = new_scratch(first + one * (max(1, min(pieces, threads)) - 1), name)
  buf.slot_bytes = one
  buf.first_slot_bytes = first
  return buf


def share_b(spec: DotSpec, threads: int, im2col: bool = False) -> bool:
  """Whether a dot of ``spec`` planned for ``threads`` threads packs B once for all its pieces
  (a ``PackBKernel`` first, as BLIS and Eigen share a packed block of B between threads): on
  the packed GEMM, of batch 1, run by several threads at once, where B packed whole is smaller
  (by ``SHARE_B_MIN_SAVING``) than what the threads' areas would each hold beyond one row
  panel of A: the panels of B (the pieces of a column group pack the same columns of B, each
  its own copy: a convolution's weights on 16 threads, 16 times) and the rest of A's row block
  (with B packed, the GEMM packs A a row panel at a time, ``gemm.py``)."""
  if spec.B != 1 or not _gemm_layout_ok(spec):
    return False
  pieces = dot_pieces(spec, threads)
  slots = min(pieces, threads)
  if slots < 2:
    return False
  from ourjax.backends.llvm import gemm
  dtype = "f32" if spec.dtype == E.F32 else "f64"
  bl = gemm_blocking(spec, threads, im2col)
  b_part = (dot_scratch_bytes(spec, pieces, im2col, blocking=bl)
            - dot_scratch_bytes(spec, pieces, im2col, True, bl))
  whole = gemm.packed_b_elements(dtype, spec.N, spec.K) * spec.dtype.itemsize
  return slots * b_part - whole >= SHARE_B_MIN_SAVING


#: Fewest bytes that packing B once must save for a dot to take a ``PackBKernel`` (a kernel
#: and a step more: not worth it for a few kilobytes).
SHARE_B_MIN_SAVING = 1 << 16


class PackBKernel(Kernel):
  """B of the dot ``spec`` packed into ``packed`` (``gemm.packed_b_elements``) for the
  ``DotKernel`` that follows it to read (``packed_b``), pieces of the column panels each
  (``gemm.emit_pack_b_call``)."""

  def __init__(self, name, spec: DotSpec, rhs: Buf, packed: Buf):
    self.spec = spec
    self.rhs, self.packed = rhs, packed
    super().__init__(name, [rhs], [packed], work=spec.K * spec.N)

  def body(self, b, ptr, tid, nthreads):
    from ourjax.backends.llvm import gemm
    gemm.emit_pack_b_call(b, "f32" if self.spec.dtype == E.F32 else "f64", ptr(self.rhs),
                          ptr(self.packed), N=self.spec.N, K=self.spec.K,
                          b_strides=(self.spec.b_sk, self.spec.b_sn), tid=tid,
                          nthreads=nthreads)


def fast_dot_ok(dot) -> bool:
  lhs, rhs = dot.operands
  dt = dot.dtype
  if dt not in (E.F32, E.F64) or lhs.dtype != dt or rhs.dtype != dt:
    return False
  spec = DotSpec(dot)
  return spec.ok and spec.M * spec.N * spec.K >= 4096 and spec.K > 0 and spec.N >= 8


def _narrow_float_dot(dot) -> bool:
  """A dot of f16/bf16 operands (f16/bf16/f32 result) big enough for the f32 GEMM."""
  lhs, rhs = dot.operands
  narrow = (E.F16, E.BF16)
  if lhs.dtype not in narrow or rhs.dtype not in narrow or dot.dtype not in narrow + (E.F32,):
    return False
  spec = DotSpec(dot)
  return spec.ok and spec.M * spec.N * spec.K >= 4096 and spec.K > 0 and spec.N >= 8


def dot_pieces(spec: DotSpec, threads: int) -> int:
  """How many pieces (``dot_scratch_bytes`` of scratch each while it runs) a ``DotKernel`` of
  ``spec`` runs as: one unless its work reaches ``PARALLEL_MIN_WORK``.  A dot of at least as
  many batch entries as threads is cut into whole entries (nothing is packed twice), pieces of
  at least ``DOT_PIECE_WORK`` multiply-adds, as many as ``MAX_CHUNKS``.  Any other on the
  packed GEMM gets a piece per thread (as work allows: pieces of at least ``DOT_SPLIT_WORK``):
  the GEMM cuts C into a grid of blocks whose packing is each block's own rows of A and
  columns of B (``gemm.py``), so more pieces cost little extra packing; the register-blocked
  kernel for other layouts cuts rows only, each piece reading all of B, so it keeps to
  ``1 + max(M, N) / 320`` pieces (the extra reads under a tenth of the products).  Never fewer
  than 2 (4 past 2^28 multiply-adds): pieces beyond the threads measured up to 6% slower on 2
  cores.  The GEMM's results do not depend on how it is cut, so neither do they on the host's
  threads."""
  work = spec.B * spec.M * spec.N * spec.K
  if work < PARALLEL_MIN_WORK:
    return 1
  by_work = work // DOT_PIECE_WORK
  gemm_ok = _gemm_layout_ok(spec)
  if spec.B >= 2 and (spec.B >= threads or not gemm_ok):
    return max(2, min(MAX_CHUNKS, spec.B, by_work))
  few = 2 if work < (1 << 28) else 4
  if gemm_ok:
    return max(few, min(MAX_CHUNKS, threads, work // DOT_SPLIT_WORK))
  return max(few, min(MAX_CHUNKS, threads, 1 + max(spec.M, spec.N) // 320, by_work))


class DotKernel(Kernel):
  """``out = lhs @ rhs`` (``DotSpec``); ``accumulate``: ``out += lhs @ rhs`` (the packed GEMM
  with its ``ACCUMULATE`` bit; ``out`` is read as well)."""

  def __init__(self, name, dot, lhs: Buf, rhs: Buf, out: Buf, scratch: Buf, threads: int = 1,
               accumulate: bool = False, packed_b: Buf | None = None):
    self.dot, self.spec = dot, DotSpec(dot)
    self.threads = threads           # the host's threads at planning time (see chunks)
    self.lhs, self.rhs, self.out = lhs, rhs, out
    self.accumulate = accumulate
    #: B packed by the PackBKernel before it (read instead of ``rhs``), or None
    self.packed_b = packed_b
    #: the packed GEMM's cache blocking (``gemm_blocking``: what the scratch was sized for)
    self.blocking = gemm_blocking(self.spec, threads, isinstance(self, Im2colDotKernel))
    s = self.spec
    super().__init__(name, [lhs, packed_b or rhs] + ([out] if accumulate else []), [out],
                     [scratch], work=s.B * s.M * s.N * s.K)

  @property
  def symbols(self) -> list:
    """The process-wide GEMM this kernel's CPU code calls (compiled on first use: the GPU
    backend, which plans with the same kernels, never asks)."""
    return gemm_symbols(self.spec)

  @property
  def chunks(self) -> int:
    """``dot_pieces``: how many pieces this dot is cut into."""
    return dot_pieces(self.spec, self.threads)

  def body(self, b, ptr, tid, nthreads):
    emit_dot(b, self.spec, ptr(self.lhs), ptr(self.packed_b or self.rhs), ptr(self.out),
             ptr(self.scratch[0]), tid, nthreads, self.accumulate, self.packed_b is not None,
             self.blocking)


class Im2colDotKernel(DotKernel):
  """A dot whose A operand is a convolution's patch matrix that is never written
  (``llvm/im2col.Im2colBuf``): the shared GEMM, through the process-wide packer of the
  matrix's layout, packs A's panels straight from the convolution's input (``gemm_im2col.py``),
  so the kernel reads the input buffer, not the matrix."""

  def __init__(self, name, dot, patches, rhs: Buf, out: Buf, scratch: Buf, threads: int = 1,
               packed_b: Buf | None = None):
    super().__init__(name, dot, patches.source, rhs, out, scratch, threads, packed_b=packed_b)
    # (reads: the input; ``lhs`` stays the virtual matrix, as a GPU translation expects)
    self.lhs = self.patches = patches
    self.epilogue = None

  @property
  def direct_a(self) -> bool:
    """Whether the GEMM's tiles read the patch rows in place (``gemm_im2col.direct_a``: no
    packer, no panel of A in the scratch)."""
    from ourjax.backends.llvm import gemm_im2col
    return gemm_im2col.direct_a(self.patches.geometry, self.spec.N,
                                "f32" if self.spec.dtype == E.F32 else "f64")

  @property
  def symbols(self) -> list:
    """The process-wide GEMM its code calls and the packer of its patch matrix's layout
    (the direct micro-kernel when it reads the patch rows in place)."""
    from ourjax.backends.llvm import gemm
    dtype = "f32" if self.spec.dtype == E.F32 else "f64"
    if self.direct_a:
      return [gemm.prefetch_shared_gemm(dtype), gemm.prefetch_shared_gemm(f"{dtype}_im2col_D")]
    return [gemm.prefetch_shared_gemm(dtype),
            gemm.prefetch_shared_gemm(f"{dtype}_im2col_{self.patches.geometry.layout}")]

  def fuse_epilogue(self, kern) -> bool:
    """Run the loop kernel ``kern`` (the dot's elementwise consumer, planned next) on each
    block of the result as the GEMM finishes it, if ``gemm_im2col.fusable_epilogue``; then
    this kernel also reads and writes what ``kern`` does."""
    from ourjax.backends.llvm import gemm_im2col
    if self.epilogue is not None or not gemm_im2col.fusable_epilogue(self, kern):
      return False
    self.epilogue = kern
    self.reads += [x for x in kern.reads if x not in self.reads]
    self.writes += [x for x in kern.writes if x not in self.writes]
    self.buffers += [x for x in kern.buffers if x not in self.buffers]
    return True

  def body(self, b, ptr, tid, nthreads):
    from ourjax.backends.llvm import gemm_im2col
    gemm_im2col.emit_call(b, self.spec, self.patches.geometry, ptr(self.patches.source),
                          ptr(self.packed_b or self.rhs), ptr(self.out), ptr(self.scratch[0]),
                          tid, nthreads, self.epilogue, ptr, self.packed_b is not None,
                          self.blocking)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
