"""Matrix multiply as generated LLVM IR: packed panels, a register-blocked micro-kernel, and a
fused per-element epilogue.

:func:`emit_gemm` writes one function into an ``llvmlite.ir.Module``::

    void name(const T* A, const T* B, T* C,
              i64 M, i64 N, i64 K, i64 lda, i64 ldb, i64 ldc, i32 transA, i32 transB,
              i64 batch, i64 strideA, i64 strideB, i64 strideC,
              i64 tid, i64 nthreads, T* pack, i64 tune)

computing, for every ``b < batch``, ``C_b = op(A_b) @ op(B_b)`` (row-major, ``M x N``, overwritten;
``C_b += ...`` when bit 1 of ``transA`` is set (``ACCUMULATE``), or always with
``accumulate=True`` at generation time).  ``A_b = A + b*strideA`` holds
``A[i, k]`` at ``i*lda + k`` (bit 0 of ``transA`` clear) or at ``k*lda + i`` (set, i.e. the
array in memory is ``K x M``); likewise ``B[k, j]`` at ``k*ldb + j`` or ``j*ldb + k``
(``transB != 0``).  ``C[i, j]``
is at ``C + b*strideC + i*ldc + j``.  ``T`` is ``float`` or ``double``.

Threading: ``nthreads`` callers run the function at once with ``tid = 0 .. nthreads-1`` and the
same arguments; each writes a disjoint part of C (whole batch entries when ``batch >= nthreads``,
else a block of row tiles x column panels of every entry), so no barrier is needed inside and
the work is done once all calls have returned.  ``nthreads = 1, tid = 0`` is the serial call.
Every split gives the serial call's bits: it changes which thread computes an element, never the
order of that element's sum (the K slices and the choice between axpy kernels and register tiles
depend on M and K only; the per-thread choices, unpacked B and edge tiles, only move data).

Scratch: ``pack`` points to at least :func:`pack_buffer_elements` ``(dtype, M, N, K, nthreads)``
elements of ``T`` (any alignment) that are this call's own: calls running at once pass
different buffers (a piece's packed panels of A and B, sized for the largest piece of the
``nthreads``-way split; the CPU backend gives each worker thread one such area, which it reuses
for every piece it claims; a piece that packs A one row panel at a time keeps that panel on
the call's stack instead, up to ``A_PANEL_STACK_BYTES``).  The buffer holds no state between
calls.

Tune: ``tune`` overrides the cache blocking the kernel was generated with, at run time, per
call: 0 keeps it; else :func:`tune_word` of a :class:`Blocking` of the same micro-tile gives
its ``kc``, ``mc``, ``nc``, ``direct_b_rows`` and ``stream_rows`` (what ``gemm_tune.py``
chooses per shape class and host).  ``pack`` must then hold :func:`pack_buffer_elements` of
that blocking.  Only the register blocking (``mr``, ``nv``, ``unroll``, edge kernels) is fixed
when the code is generated.

Epilogue: ``epilogue(builder, value, row, col) -> value`` runs at generation time and emits IR
that transforms a finished result before it is stored for the last time.  ``value`` is a
``<W x T>`` vector (W of the vector target, :func:`vector_target`: 16 f32 / 8 f64 lanes on
AVX-512, 8 / 4 on AVX2, 4 / 2 on SSE) holding ``C[row, col .. col+W-1]``, or a scalar
``T`` holding ``C[row, col]`` (the last ``N mod W`` columns of a tile, and always when
``N < W``); ``row`` and ``col`` are ``i64``.  ``row`` counts rows of all batch entries together
(``b*M + i``), so for a contiguous ``[batch, M, N]`` output the element offset is
``row*N + col``.  The hook sees every element of C exactly once, after the whole sum over K.
The builder is positioned inside the kernel: the hook may add instructions and basic blocks (and
must leave the builder at the end of the block where the result is available), but must not
return from the function.

Design (GotoBLAS/BLIS).  Vector width and register blocking follow the vector instruction set
of the CPU code is generated for (``jit.vector_isa()``: the host, or ``OURJAX_CPU``), chosen in
one table, :data:`VECTOR_TARGETS` (``gemm_targets.py``; each entry says why its registers
suffice):

  ========  =====================  ==========  ============================================
  ISA       W (f32 / f64)          mr x nv     registers of the micro-kernel
  ========  =====================  ==========  ============================================
  avx512    16 / 8   (zmm)         14 x 2      28 acc + 2 B + 1 broadcast = 31 of 32
  avx2      8 / 4    (ymm)         6 x 2       12 acc + 2 B + 1 broadcast = 15 of 16
  sse       4 / 2    (xmm, no FMA) 4 x 2       8 acc + 2 B + 1 broadcast + 1 product = 12 of 16
  ========  =====================  ==========  ============================================

The AVX-512 blocking was measured on AMD znver5; the AVX2 one by running AVX2 code
(``OURJAX_CPU=haswell``) on an AVX-512 host; the SSE one is only meant to be correct (fmul +
fadd, since ``llvm.fma`` without FMA hardware is a libm call per lane).  Rounding depends on the
target (FMA or not, K slices), so the serial-bits property above holds within one target.

* blocking: the N range of a thread is cut into ``nc`` wide column blocks, K into ``kc`` deep
  slices, M into ``mc`` tall row blocks.  For each (column block, K slice), B's ``kc x nc`` block is
  packed into ``nr``-wide column panels (``kc x nr`` each, contiguous, zero-padded at the edge);
  for each row block, A's ``mc x kc`` block is packed into ``mr``-tall row panels (``kc x mr``
  each).  The loop over row panels is innermost, so one ``kc x nr`` B panel (f32 with
  ``kc = 256``: 32 KiB on AVX-512, 16 KiB on AVX2) stays in L1 while A panels stream from L2.
  A piece of at most ``mc`` rows (one row block) packs each B panel just before its row
  panels use it, into one panel of scratch, instead of the whole ``kc x nc`` block first (the
  same packing work: every panel is used by that one block only).  Likewise a piece of one
  column panel (at most ``nr`` columns: a convolution of 32 channels, a classifier's 10 logits)
  packs each ``mr``-row panel of A just before its tile runs, into one ``kc x mr`` panel of
  scratch, instead of the ``mc x kc`` block (every row panel is used by that one tile only).
  So does a piece whose B panels are all packed before its row blocks run (by ``PACKED_B``
  once for all pieces, or by the piece for a column block that several row blocks use),
  running each row panel across the block's column panels (B's packed panels then come from
  L2, A's from L1): its A scratch is one panel; so does a piece that reads B in place (B's
  rows from L2) while a K slice of its column block fits :data:`DIRECT_ROWS_FIRST_BYTES`.
  Only a piece that packs B a panel at a time (one row block), or reads a wider B in place,
  packs A's row block first, for every panel to reuse.
* micro-kernel: ``mr x nr`` accumulators (``nr = nv*W``) live in vector registers (AVX-512 f32:
  14 x 32 = 28 zmm of the 32); one step of k loads ``nv`` vectors of the B panel and broadcasts
  ``mr`` elements of the A panel (``vbroadcastss``), i.e. ``mr * nv`` FMAs (``llvm.fma`` on
  ``<W x T>``, or fmul + fadd without FMA) for ``nv + mr`` loads; the k loop is unrolled
  ``unroll`` times.  The first K slice stores the sums, the following ones add to C, the last
  one also applies the epilogue.
* edges: tiles compute on zero-padded panels and store with row guards and lane masks
  (``llvm.masked.store``: AVX-512 mask registers, AVX2 ``vmaskmov``, scalarized on SSE);
  a tile of at most ``2*mr_small`` rows runs an ``mr_small``-row kernel (per ``mr_small`` rows),
  a panel of at most W columns a one-vector-wide kernel, so a 4-row or 10-column remainder does
  not pay for a whole 14 x 32 tile (the small kernel is off unless ``2*mr_small < mr``).
* small M: a thread with at most ``direct_b_rows`` rows reads a row-major B in place (only a
  partial last column panel is packed), since packing B would cost as much as using it (a
  convolution raises the rows to its pieces', ``dots._conv_blocking``: no packed weights).  A
  product with ``M <= stream_rows`` drops register tiles altogether and runs 4/2/1-row "axpy"
  kernels that stream whole rows of B into rows of C kept in L1 (a GEMV runs at the speed of
  reading B).  That choice looks at M, never at a thread's share of the rows: the axpy kernels
  run one fma chain over all of K (from C with ``accumulate``), the tiles one per K slice with
  the partial sums added to C, so the two round differently once K spans several slices (with
  ``accumulate``, always).
* threads split C into a grid of row-tile groups x column-panel groups (the grid whose largest
  piece costs least: its FMAs plus packing its rows of A and its columns of B), so a thread
  packs only its own rows of A and columns of B (no sharing, no barrier), into scratch sized
  for its piece: a K slice of its column block's panels of B (one edge panel where B is read
  in place) and of its row block's panels of A (:func:`pack_buffer_elements`).

Cache blocking per shape: ``kc``, ``mc``, ``nc`` and the two row thresholds above are also
arguments of each call (the ``tune`` word), which ``gemm_tune.py`` autotunes per shape class
and host at first use (a few calls of the compiled kernel each, cached on disk).

Calling it from a fused kernel: :func:`emit_gemm_call` turns static sizes and element strides
into the arguments above (:func:`operand_layout`); without an epilogue it calls one process-wide
kernel (:func:`shared_gemm_symbol`, compiled once and registered with LLVM and the loader (``loader.define``)), so a
module that contains a dot does not recompile the GEMM.  The shared kernel also runs
convolutions without a patch matrix (implicit im2col, ``gemm_im2col.py``): called with
``transA == IM2COL`` its ``A`` points to a descriptor of the patch matrix, whose A panels a
packing function the descriptor names packs from the convolution's input
(``emit_gemm(im2col=True)``: the same driver and micro-kernels), or whose tiles the direct
micro-kernel it names reads in place.  Those packers, one per patch layout, and the direct
micro-kernel are process-wide functions of their own, each built only for programs that need
it (``gemm_library.py``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional

import llvmlite.ir as ir

__all__ = ["Blocking", "VectorTarget", "VECTOR_TARGETS", "vector_target", "default_blocking",
           "ACCUMULATE", "PACK_B", "PACKED_B", "packed_b_elements", "emit_pack_b_call",
           "emit_gemm", "pack_buffer_elements", "pack_buffer_bytes", "ARG_NAMES",
           "operand_layout", "emit_gemm_call", "shared_gemm_symbol", "declare_shared_gemm",
           "prefetch_shared_gemm", "tune_word", "TUNE_FIELDS"]

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
#: ``transA`` of a call whose ``A`` is an implicit-im2col descriptor (``gemm_im2col.py``)
IM2COL = 4        # (a value of its own: bit 0 is A's transposition, bit 1 ACCUMULATE)
#: ``transA`` of a call that only packs op(B) (``transB`` 0 or 1 as usual) into ``C`` as the
#: panels a ``PACKED_B`` call reads: piece ``tid`` of ``nthreads`` packs its share of the
#: ``nr``-wide column panels (batch 1; A, M and the rest unread)
PACK_B = 8
#: ``transB`` of a call whose ``B`` holds op(B) already packed (by a ``PACK_B`` call): column
#: panel ``p`` (columns ``p*nr ..``, zero-padded) is ``K x nr`` elements at ``p*K*nr`` (batch 1),
#: read by every piece of the product (packed once, not by each piece: ``packed_b_elements``)
PACKED_B = 2
_TYPES = {"f32": (ir.FloatType, 4), "f64": (ir.DoubleType, 8)}  # element type, bytes
ARG_NAMES = ("A", "B", "C", "M", "N", "K", "lda", "ldb", "ldc", "transA", "transB", "batch",
             "strideA", "strideB", "strideC", "tid", "nthreads", "pack", "tune")

Epilogue = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]

#: The bit of ``transA`` that makes a call add to C (``C += A @ B``: an accumulator's dot, one
#: compiled kernel for both; its own library doubled the LLVM time of a cold program's GEMMs).
ACCUMULATE = 2


# the vector targets, their blocking and the tune word: gemm_targets.py
from ourjax.backends.llvm.gemm_targets import (TUNE_FIELDS, VECTOR_TARGETS,  # noqa: E402,F401
                                               Blocking, VectorTarget, default_blocking,
                                               tune_word, vector_target)


_ROW_CHUNK = 512  # columns of C per pass of the few-rows kernel

#: A piece that reads B in place runs a row panel of A across its column block (A packed a
#: panel at a time) while a K slice of that block of B is at most this many bytes (it is read
#: from L2 for every row panel); a wider one runs each column panel of B across the row block
#: (A's whole row block packed), keeping the panel in L1: f32 200 x 2048 x 2048 on 2 threads
#: (4 pieces, 512 KiB slices) ran 8% slower row panel first on the 2-core EPYC, a convolution
#: of 256 channels (256 KiB) 7% faster (no weights packed).
DIRECT_ROWS_FIRST_BYTES = 256 << 10
#: Most bytes of the one row panel of A (``mr`` x a K slice) that a piece packing A a panel at
#: a time keeps on its thread's stack (a frame of the call, like the row caches of loop
#: kernels), not in the call's scratch: a buffer of the arena for each thread less.  The
#: convolution 3x3, 256 -> 256 channels on 28 x 28 (f32, 14 x 256 panel) needed 2 x 14.5 KB of
#: arena for it, which put the program's peak above JAX's (whose GEMMs' packing buffers are
#: not in its buffers either).
A_PANEL_STACK_BYTES = 64 << 10


# --------------------------------------------------------------------------------------------
# small IR helpers

def _c64(v):
  return ir.Constant(I64, v)


def _c32(v):
  return ir.Constant(I32, v)


@contextmanager
def _for(b: ir.IRBuilder, start, stop, step=1, name="i"):
  """``for (i = start; i < stop; i += step)``, signed i64; yields i.  The body may add blocks."""
  if isinstance(start, int):
    start = _c64(start)
  if isinstance(stop, int):
    stop = _c64(stop)
  if isinstance(step, int):
    step = _c64(step)
  pre = b.block
  hdr = b.append_basic_block(name + ".hdr")
  body = b.append_basic_block(name + ".body")
  done = b.append_basic_block(name + ".done")
  b.branch(hdr)
  b.position_at_end(hdr)
  i = b.phi(I64, name=name)
  i.add_incoming(start, pre)
  b.cbranch(b.icmp_signed("<", i, stop), body, done)
  b.position_at_end(body)
  yield i
  nxt = b.add(i, step, name=name + ".next")
  i.add_incoming(nxt, b.block)
  b.branch(hdr)
  b.position_at_end(done)


@contextmanager
def _if(b: ir.IRBuilder, cond, name="if"):
  then = b.append_basic_block(name + ".then")
  done = b.append_basic_block(name + ".end")
  b.cbranch(cond, then, done)
  b.position_at_end(then)
  yield
  b.branch(done)
  b.position_at_end(done)


def _smin(b, x, y):
  return b.select(b.icmp_signed("<", x, y), x, y)


def _smax(b, x, y):
  return b.select(b.icmp_signed(">", x, y), x, y)


def _sdiv_up(b, x, d):
  return b.sdiv(b.add(x, b.sub(d, _c64(1))), d)


def _splat(b, x, n):
  undef, zeros = _splat_constants(x.type, n)
  v = b.insert_element(undef, x, _C32_0)
  return b.shuffle_vector(v, undef, zeros)


_SPLATS: dict = {}
_C32_0 = ir.Constant(I32, 0)


def _lane_mask(lanes):
  """The ``<n x i32>`` shuffle mask of ``lanes``, made once."""
  key = ("mask",) + tuple(lanes)
  c = _SPLATS.get(key)
  if c is None:
    c = _SPLATS[key] = ir.Constant(ir.VectorType(I32, len(lanes)), list(lanes))
  return c


def _splat_constants(t, n):
  """The ``<n x t>`` undef vector and the ``<n x i32>`` zero mask of a splat, made once (the
  shared GEMM's emission made them 197 times, a sixth of its time; an llvmlite constant is
  only ever read, and its text is printed once)."""
  key = (str(t), n)
  c = _SPLATS.get(key)
  if c is None:
    c = _SPLATS[key] = (ir.Constant(ir.VectorType(t, n), None),
                        ir.Constant(ir.VectorType(I32, n), [0] * n))
  return c


def _intrinsic(module, name, ret, args):
  fn = module.globals.get(name)
  if fn is None:
    fn = ir.Function(module, ir.FunctionType(ret, args), name)
  return fn


class _Ctx:
  """Per-dtype types and intrinsics of one generated kernel for one vector target."""

  def __init__(self, module, dtype, vt: VectorTarget):
    tycls, size = _TYPES[dtype]
    w = vt.lanes[dtype]
    self.module, self.dtype, self.w, self.size = module, dtype, w, size
    self.t = tycls()
    self.p = self.t.as_pointer()
    self.vt = ir.VectorType(self.t, w)
    self.mt = ir.VectorType(I1, w)
    sfx = f"v{w}{'f32' if dtype == 'f32' else 'f64'}"
    self.fma = _intrinsic(module, f"llvm.fma.{sfx}", self.vt, [self.vt] * 3) if vt.fma else None
    self.mstore = _intrinsic(module, f"llvm.masked.store.{sfx}.p0", ir.VoidType(),
                             [self.vt, self.p, I32, self.mt])
    self.mload = _intrinsic(module, f"llvm.masked.load.{sfx}.p0", self.vt,
                            [self.p, I32, self.mt, self.vt])
    self.zero = ir.Constant(self.t, 0.0)
    self.vzero = ir.Constant(self.vt, [self.zero] * w)
    self.iota = ir.Constant(ir.VectorType(I64, w), list(range(w)))

  def madd(self, b, x, y, acc):
    """``x*y + acc`` on ``<W x T>``: one ``llvm.fma``, or fmul + fadd on a target without FMA."""
    if self.fma is not None:
      return b.call(self.fma, [x, y, acc])
    return b.fadd(b.fmul(x, y), acc)

  def vload(self, b, ptr, align):
    p = b.bitcast(ptr, self.vt.as_pointer())
    return b.load(p, align=align)

  def vstore(self, b, val, ptr, align):
    p = b.bitcast(ptr, self.vt.as_pointer())
    b.store(val, p, align=align)

  def lane_mask(self, b, count):
    """Lanes ``l < count`` (count an i64, any value)."""
    return b.icmp_signed("<", self.iota, _splat(b, count, self.w))


# --------------------------------------------------------------------------------------------
# packing

def _transpose(b: ir.IRBuilder, rows):
  """Transpose ``n`` vectors of ``n`` lanes (n a power of two): ``log2(n)`` rounds of ``n``
  two-input shuffles; round h pairs vectors i and i+h and swaps their off-diagonal h-blocks."""
  n = len(rows)
  rows = list(rows)
  h = n // 2
  while h >= 1:
    lo = [j for blk in range(0, n, 2 * h) for j in (list(range(blk, blk + h)) +
                                                     list(range(n + blk, n + blk + h)))]
    hi = [j + h for j in lo]
    out = list(rows)
    lo_mask, hi_mask = _lane_mask(lo), _lane_mask(hi)
    for i in range(n):
      if i & h:
        continue
      a, c = rows[i], rows[i + h]
      out[i] = b.shuffle_vector(a, c, lo_mask)
      out[i + h] = b.shuffle_vector(a, c, hi_mask)
    rows = out
    h //= 2
  return rows


def _emit_pack(cx: _Ctx, name: str, w: int) -> ir.Function:
  """``void pack(T* src, i64 rstride, i64 kstride, i64 rows, i64 kb, T* out)``:
  ``out[p][k][r] = src[(p*w + r)*rstride + k*kstride]`` for ``p < ceil(rows/w)``, ``k < kb``,
  ``r < w``, zero where ``p*w + r >= rows``.  Panels are ``kb*w`` elements long.

  One of the strides must be 1.  ``kstride == 1`` (each row contiguous in k: a row-major A, a
  transposed B) loads W x W blocks, transposes them in registers and stores ``w`` lanes per k;
  otherwise ``rstride == 1`` (a transposed A, a row-major B) and each k copies ``w`` contiguous
  elements with masked vectors."""
  W = cx.w
  fn = ir.Function(cx.module, ir.FunctionType(ir.VoidType(), [cx.p, I64, I64, I64, I64, cx.p]),
                   name)
  fn.linkage = "internal"
  fn.attributes.add("noinline")
  src, rs, ks, rows, kb, out = fn.args
  src.add_attribute("noalias")
  out.add_attribute("noalias")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  wc = _c64(w)
  npanels = _sdiv_up(b, rows, wc)
  groups = [(g, min(W, w - g)) for g in range(0, w, W)]  # (first row, rows) of W-row groups
  lanes_ = {n: ir.Constant(cx.mt, [1] * n + [0] * (W - n)) for _, n in groups}
  no_lanes = ir.Constant(cx.mt, [0] * W)
  # a panel row of w = a multiple of W elements keeps every W-vector aligned to its own size
  # (the buffer is 64-byte aligned; panels and rows are whole vectors apart)
  align_out = min(64, W * cx.size) if w % W == 0 else cx.size

  def store_lanes(val, ptr, n):
    if n == W:
      cx.vstore(b, val, ptr, align_out)
    else:
      b.call(cx.mstore, [val, ptr, _c32(cx.size), lanes_[n]])

  def mload(ptr, mask):
    return b.call(cx.mload, [ptr, _c32(cx.size), mask, cx.vzero])

  k_contig = b.icmp_signed("==", ks, _c64(1))
  with b.if_else(k_contig) as (kc_, other):
    with kc_:
      # W x W blocks: load W k-values of each row of a group, transpose, store per k
      with _for(b, 0, npanels, name="p") as p:
        r0 = b.mul(p, wc)
        dst0 = b.gep(out, [b.mul(r0, kb)])
        ptrs, valid = [], []
        for g, n in groups:
          for i in range(W):
            row = b.add(r0, _c64(g + i))
            ok = b.and_(b.icmp_signed("<", row, rows), ir.Constant(I1, i < n))
            ptrs.append(b.gep(src, [b.mul(b.select(ok, row, _c64(0)), rs)]))
            valid.append(ok)
        # one loop over W-deep k chunks; the last one loads masked and stores only k < kb
        with _for(b, 0, kb, W, name="k") as k0:
          nk = b.sub(kb, k0)
          kmask = cx.lane_mask(b, nk)
          for gi, (g, n) in enumerate(groups):
            vs = [mload(b.gep(ptrs[gi * W + i], [k0]), b.select(valid[gi * W + i], kmask, no_lanes))
                  for i in range(W)]
            ts = _transpose(b, vs)
            for k in range(W):
              d = b.gep(dst0, [b.add(b.mul(b.add(k0, _c64(k)), wc), _c64(g))])
              if k == 0:
                store_lanes(ts[k], d, n)
              else:
                with _if(b, b.icmp_signed("<", _c64(k), nk), name="kt"):
                  store_lanes(ts[k], d, n)
    with other:
      # kstride != 1, so rstride == 1 (one of the two is the unit stride): each k copies w
      # contiguous elements (masked past the last row)
      with _for(b, 0, npanels, name="p") as p:
        r0 = b.mul(p, wc)
        left = b.sub(rows, r0)
        dst0 = b.gep(out, [b.mul(r0, kb)])
        masks = [b.and_(cx.lane_mask(b, b.sub(left, _c64(g))), lanes_[n]) for g, n in groups]
        with _for(b, 0, kb, name="k") as k:
          s_ = b.gep(src, [b.add(r0, b.mul(k, ks))])
          d = b.gep(dst0, [b.mul(k, wc)])
          for (g, n), m in zip(groups, masks):
            store_lanes(mload(b.gep(s_, [_c64(g)]), m), b.gep(d, [_c64(g)]), n)
  b.ret_void()
  return fn


# --------------------------------------------------------------------------------------------
# micro-kernel

def _k_loop(b, cx: _Ctx, step, accs_in, start, stop, unroll: int, tag: str) -> list:
  """The accumulators after ``accs = step(accs, k)`` for k from ``start`` to ``stop`` (the
  loop's count a multiple of ``unroll``), ``unroll`` steps an iteration, in blocks named
  ``tag``.hdr/.body/.done; ``b`` ends in .done."""
  pre = b.block
  hdr = b.append_basic_block(tag + ".hdr")
  body = b.append_basic_block(tag + ".body")
  done = b.append_basic_block(tag + ".done")
  b.branch(hdr)
  b.position_at_end(hdr)
  k = b.phi(I64, name=tag + ".k")
  k.add_incoming(start, pre)
  phis = []
  for i, a in enumerate(accs_in):
    ph = b.phi(cx.vt, name=f"{tag}.acc{i}")
    ph.add_incoming(a, pre)
    phis.append(ph)
  b.cbranch(b.icmp_signed("<", k, stop), body, done)
  b.position_at_end(body)
  accs = phis
  for u in range(unroll):
    accs = step(accs, b.add(k, _c64(u)))
  k.add_incoming(b.add(k, _c64(unroll)), b.block)
  for ph, a in zip(phis, accs):
    ph.add_incoming(a, b.block)
  b.branch(hdr)
  b.position_at_end(done)
  return phis


def _emit_ukernel(cx: _Ctx, name: str, bl: Blocking, mr: int, nv: int,
                  epilogue: Optional[Epilogue], accumulate: bool) -> ir.Function:
  """``void uk(i64 kb, T* Ap, T* Bp, i64 bstride, T* C, i64 ldc, i64 mv, i64 nvalid, i1 first,
  i1 last, i64 row0, i64 col0)``: the ``mr x nv*W`` tile ``sum_k Ap[k*bl.mr + r] *
  Bp[k*bstride + c]`` (A from a packed panel, of which it may use the first ``mr`` rows; B from a
  packed panel, ``bstride = bl.mr*W``... or straight from a row-major B, ``bstride = ldb``) stored
  to ``C[r*ldc + c]`` for ``r < mv``, ``c < nvalid`` (added to C unless ``first``); with ``last``
  the epilogue runs on the stored tile."""
  w = cx.w
  astride = bl.mr
  fn = ir.Function(cx.module, ir.FunctionType(
      ir.VoidType(), [I64, cx.p, cx.p, I64, cx.p, I64, I64, I64, I1, I1, I64, I64]), name)
  fn.linkage = "internal"
  fn.attributes.add("noinline")
  kb, ap, bp, bstride, c, ldc, mv, nvalid, first, last, row0, col0 = fn.args
  for a in (ap, bp, c):
    a.add_attribute("noalias")
  b = ir.IRBuilder(fn.append_basic_block("entry"))

  def step(accs, k):
    brow = b.gep(bp, [b.mul(k, bstride)])
    bv = [cx.vload(b, b.gep(brow, [_c64(v * w)]), cx.size) for v in range(nv)]
    out = list(accs)
    abase = b.gep(ap, [b.mul(k, _c64(astride))])
    for r in range(mr):
      a = _splat(b, b.load(b.gep(abase, [_c64(r)]), align=cx.size), w)
      for v in range(nv):
        out[r * nv + v] = cx.madd(b, a, bv[v], out[r * nv + v])
    return out

  zeros = [cx.vzero] * (mr * nv)
  # the edge kernels run on a small share of the tiles: less unrolling, less code to compile
  u = max(1, bl.unroll if (mr, nv) == (bl.mr, bl.nv) else min(bl.unroll, 2))
  kmain = b.sub(kb, b.srem(kb, _c64(u)))
  accs = _k_loop(b, cx, step, zeros, _c64(0), kmain, u, "kmain")
  accs = _k_loop(b, cx, step, accs, kmain, kb, 1, "krem")
  _emit_tile_store(b, cx, accs, mr, nv, c, ldc, mv, nvalid, first, last, row0, col0, epilogue,
                   accumulate)
  b.ret_void()
  return fn


def _emit_tile_store(b, cx: _Ctx, accs, mr: int, nv: int, c, ldc, mv, nvalid, first, last,
                     row0, col0, epilogue: Optional[Epilogue], accumulate: bool) -> None:
  """A micro-kernel's end: its ``mr x nv*W`` accumulators ``accs`` stored to ``C[r*ldc + c]``
  for ``r < mv``, ``c < nvalid`` (added to C unless ``first``), then the epilogue on the tile
  where ``last`` (``_emit_ukernel``, ``gemm_im2col.emit_direct_ukernel``)."""
  w = cx.w
  nr = nv * w
  full = b.and_(b.icmp_signed("==", mv, _c64(mr)), b.icmp_signed("==", nvalid, _c64(nr)))
  overwrite = ir.Constant(I1, 0) if accumulate else first

  def store_tile(masked, add):
    masks = [cx.lane_mask(b, b.sub(nvalid, _c64(v * w))) for v in range(nv)] if masked else None
    for r in range(mr):
      crow = b.gep(c, [b.mul(_c64(r), ldc)])

      def row_body():
        for v in range(nv):
          p = b.gep(crow, [_c64(v * w)])
          x = accs[r * nv + v]
          if masked:
            if add:
              x = b.fadd(x, b.call(cx.mload, [p, _c32(cx.size), masks[v], cx.vzero]))
            b.call(cx.mstore, [x, p, _c32(cx.size), masks[v]])
          else:
            if add:
              x = b.fadd(x, cx.vload(b, p, cx.size))
            cx.vstore(b, x, p, cx.size)
      if masked and r > 0:
        with _if(b, b.icmp_signed("<", _c64(r), mv), name=f"row{r}"):
          row_body()
      else:
        row_body()

  with b.if_else(full) as (is_full, is_edge):
    with is_full:
      with b.if_else(overwrite) as (o, a):
        with o:
          store_tile(False, False)
        with a:
          store_tile(False, True)
    with is_edge:
      with b.if_else(overwrite) as (o, a):
        with o:
          store_tile(True, False)
        with a:
          store_tile(True, True)

  if epilogue is not None:
    with _if(b, last, name="epi"):
      _emit_epilogue_loop(b, cx, epilogue, c, ldc, mv, nvalid, row0, col0)


def _emit_epilogue_loop(b, cx: _Ctx, epilogue: Epilogue, c, ldc, rows, cols, row0, col0):
  """Apply the epilogue in place to ``C[r*ldc + j]``, ``r < rows``, ``j < cols``: W-wide vectors,
  then scalars for the last ``cols mod W`` columns."""
  w = cx.w
  nfull = b.mul(b.sdiv(cols, _c64(w)), _c64(w))
  with _for(b, 0, rows, name="er") as r:
    crow = b.gep(c, [b.mul(r, ldc)])
    row = b.add(row0, r)
    with _for(b, 0, nfull, w, name="ev") as j:
      p = b.gep(crow, [j])
      cx.vstore(b, epilogue(b, cx.vload(b, p, cx.size), row, b.add(col0, j)), p, cx.size)
    with _for(b, nfull, cols, name="es") as j:
      p = b.gep(crow, [j])
      b.store(epilogue(b, b.load(p, align=cx.size), row, b.add(col0, j)), p, align=cx.size)


# --------------------------------------------------------------------------------------------
# few rows: C rows += A[r, k] * B[k, :] with B streamed row by row

def emit_gemm(module: ir.Module, name: str, dtype: str, *, epilogue: Optional[Epilogue] = None,
              accumulate: bool = False, blocking: Optional[Blocking] = None,
              isa: Optional[str] = None, im2col: bool = False) -> ir.Function:
  """Emit ``name`` (see the module docstring for its signature and contract) and its internal
  helpers ``name.pack_a``, ``name.pack_b``, ``name.ukernel`` into ``module``, for the vector
  target ``isa`` (:data:`VECTOR_TARGETS`; default: the CPU code is generated for) with its
  blocking unless ``blocking`` is given.  ``im2col``: the kernel also takes ``transA ==
  IM2COL``: then ``A`` points to the descriptor of a convolution's patch matrix, whose panels
  the packing function the descriptor names packs straight from the convolution's input (or
  whose tiles the direct micro-kernel it names reads in place), and whose block epilogue, if
  any, runs on each finished block of C (``gemm_im2col.py``; ``batch`` must be 1, ``lda`` is
  not read; never the few-rows kernels; only without ``epilogue`` and ``accumulate``, with the
  target's blocking: the direct micro-kernel's)."""
  if dtype not in _TYPES:
    raise ValueError(f"emit_gemm: dtype must be 'f32' or 'f64', not {dtype!r}")
  vt = vector_target(isa)
  bl = blocking or vt.blocking[dtype]
  cx = _Ctx(module, dtype, vt)
  w = cx.w
  mr, nr = bl.mr, bl.nv * w
  if bl.mc % mr or bl.nc % nr:
    raise ValueError(f"emit_gemm: mc must be a multiple of mr and nc of nr ({bl})")
  pack_a = _emit_pack(cx, name + ".pack_a", mr)
  pack_b = _emit_pack(cx, name + ".pack_b", nr)
  uk = _emit_ukernel(cx, name + ".ukernel", bl, mr, bl.nv, epilogue, accumulate)
  # (off unless 2*mr_small < mr: else every tile would take the small kernel)
  ms = bl.mr_small if 0 < 2 * bl.mr_small < mr else 0
  narrow = bl.narrow and bl.nv > 1
  uk_n = _emit_ukernel(cx, name + ".ukernel_n", bl, mr, 1, epilogue, accumulate) if narrow \
      else None
  uk_s = _emit_ukernel(cx, name + ".ukernel_s", bl, ms, bl.nv, epilogue, accumulate) if ms \
      else None
  uk_sn = _emit_ukernel(cx, name + ".ukernel_sn", bl, ms, 1, epilogue, accumulate) \
      if ms and narrow else None
  rows_fns = {r: _emit_rows(cx, f"{name}.rows{r}", r, _ROW_CHUNK, epilogue, accumulate)
              for r in (4, 2, 1)} if bl.stream_rows > 0 else None
  from ourjax.backends.llvm import gemm_im2col
  if im2col and (epilogue is not None or accumulate or
                 blocking not in (None, vt.blocking[dtype])):
    # (a convolution's patch matrix read in place: the tiles of the process-wide direct
    # micro-kernel its descriptor names, gemm_im2col.emit_direct_library, made for the
    # shared GEMM's own blocking, without an epilogue)
    raise ValueError("emit_gemm: im2col only for the shared GEMM (no epilogue, no accumulate, "
                     "the target's blocking)")

  def driver(fname):
    """The kernel ``fname``: A a matrix or (``im2col`` and ``transA == IM2COL``) the
    descriptor of a convolution's patch matrix (``gemm_im2col.py``)."""
    fn = ir.Function(module, _signature(cx.p), fname)
    for a, n in zip(fn.args, ARG_NAMES):
      a.name = n
    (A, B, C, M, N, K, lda, ldb, ldc, ta, tb, batch, sA, sB, sC, tid, nth, pack,
     tune) = fn.args
    for a in (A, B, C, pack):
      a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    one = _c64(1)
    conv = b.icmp_signed("==", ta, _c32(IM2COL)) if im2col else None
    # the cache blocking of this call: the tune word's fields, else the generated ones
    knob = {}
    for fname_, off, bits, scale in TUNE_FIELDS:
      f_ = b.and_(b.lshr(tune, _c64(off)), _c64((1 << bits) - 1))
      v_ = b.mul(b.sub(f_, one), _c64(scale))
      knob[fname_] = b.select(b.icmp_signed("==", f_, _c64(0)), _c64(getattr(bl, fname_)), v_)
    kc_, mc_, stream_rows = knob["kc"], knob["mc"], knob["stream_rows"]
    direct_rows = knob["direct_b_rows"]
    nc_ = b.mul(_sdiv_up(b, knob["nc"], _c64(nr)), _c64(nr))   # (whole panels, whatever it says)
    desc = b.bitcast(A, I64.as_pointer()) if im2col else None
    direct_a = None     # (a patch matrix read in place: its descriptor names no packer)
    if im2col:
      nopack = b.alloca(I64, name="nopack")      # (b is in the entry block)
      b.store(_c64(0), nopack)
      pk_ = b.load(b.select(conv, b.gep(desc, [_c64(gemm_im2col.DESC_PACK)]), nopack), align=8)
      direct_a = b.and_(conv, b.icmp_signed("==", pk_, _c64(0)))

    # strides of A (i, k) and B (k, j)
    ta1 = b.icmp_signed("!=", b.and_(ta, _c32(1)), _c32(0))
    tb1 = b.icmp_signed("!=", tb, _c32(0))
    # C += A @ B (a call's ACCUMULATE bit): no K slice overwrites C
    overwrite_c = b.icmp_signed("==", b.and_(ta, _c32(ACCUMULATE)), _c32(0))
    a_rs = b.select(ta1, one, lda)
    a_ks = b.select(ta1, lda, one)
    b_ks = b.select(tb1, one, ldb)
    b_cs = b.select(tb1, ldb, one)

    # this call's scratch, 64-byte aligned: a piece's B panels, then its A panels, each
    # sized in tiled() (gemm_scratch._piece_elements, whose most pack_buffer_elements takes)
    align = 64 // cx.size
    raw = b.ptrtoint(pack, I64)
    bpk = b.inttoptr(b.and_(b.add(raw, _c64(63)), _c64(-64)), cx.p)

    # a PACK_B call: this piece's share of op(B)'s column panels, packed K deep into C
    packb, rest = fn.append_basic_block("packb"), fn.append_basic_block("gemm")
    b.cbranch(b.icmp_signed("==", ta, _c32(PACK_B)), packb, rest)
    b.position_at_end(packb)
    tn = _sdiv_up(b, N, _c64(nr))
    p0 = b.sdiv(b.mul(tn, tid), nth)
    p1 = b.sdiv(b.mul(tn, b.add(tid, one)), nth)
    with _if(b, b.icmp_signed("<", p0, p1), name="packb.mine"):
      j0 = b.mul(p0, _c64(nr))
      cols_ = b.sub(_smin(b, b.mul(p1, _c64(nr)), N), j0)
      kk = _smax(b, K, one)
      b.call(pack_b, [b.gep(B, [b.mul(j0, b_cs)]), b_cs, b_ks, cols_, kk,
                      b.gep(C, [b.mul(j0, kk)])])
    b.ret_void()
    b.position_at_end(rest)
    prepacked = b.icmp_signed("==", tb, _c32(PACKED_B))

    # K slices of balanced depth (at least one slice, so K == 0 still stores zeros)
    nks = _smax(b, one, _sdiv_up(b, K, kc_))
    kstep = _smax(b, one, _sdiv_up(b, K, nks))
    klimit = _smax(b, K, one)
    # the row panel of A a piece packs a panel at a time (mr x kstep, 64-byte aligned) on this
    # call's stack frame, where it fits A_PANEL_STACK_BYTES (gemm_scratch._piece_elements
    # leaves it out of the scratch then); a frame of 1 element otherwise
    on_stack = b.icmp_signed("<=", b.mul(kstep, _c64(mr * cx.size)), _c64(A_PANEL_STACK_BYTES))
    a_stack = b.alloca(cx.t, size=b.select(on_stack, b.mul(kstep, _c64(mr)), one),
                       name="apanel")
    a_stack.align = 64

    def gemm_block(bi, m0, m1, n0, n1):
      Ab = b.gep(A, [b.mul(bi, sA)])
      Bb = b.gep(B, [b.mul(bi, sB)])
      Cb = b.gep(C, [b.mul(bi, sC)])
      rowbase = b.mul(bi, M)
      if rows_fns is None:
        tiled(bi, Ab, Bb, Cb, rowbase, m0, m1, n0, n1)
        return
      # decided by M, not by this thread's rows: the axpy kernels sum over all of K in one fma
      # chain, the tiles per K slice (partial sums added to C), so a per-thread choice would
      # round differently from the serial call when a row split leaves a thread few rows
      few = b.and_(b.icmp_signed("==", tb, _c32(0)), b.icmp_signed("<=", M, stream_rows))
      if conv is not None:   # (a patch matrix is packed, always)
        few = b.and_(few, b.not_(conv))
      with b.if_else(few) as (f_, t_):
        with f_:
          # groups of 4 rows, then 2, then 1: each group streams B once
          start = m0
          for r, fn_r in rows_fns.items():
            count = b.mul(b.sdiv(b.sub(m1, start), _c64(r)), _c64(r))
            with _for(b, start, b.add(start, count), r, name=f"rr{r}") as r0:
              b.call(fn_r, [K, b.gep(Ab, [b.mul(r0, a_rs)]), a_rs, a_ks, b.gep(Bb, [n0]), ldb,
                            b.gep(Cb, [b.add(b.mul(r0, ldc), n0)]), ldc, b.sub(n1, n0),
                            b.add(rowbase, r0), n0, overwrite_c])
            start = b.add(start, count)
        with t_:
          tiled(bi, Ab, Bb, Cb, rowbase, m0, m1, n0, n1)

    def tiled(bi, Ab, Bb, Cb, rowbase, m0, m1, n0, n1):
      direct = b.and_(b.icmp_signed("==", tb, _c32(0)),
                      b.icmp_signed("<=", b.sub(m1, m0), direct_rows))
      # balanced mc: ceil(rows / ceil(rows/mc)) rounded up to mr
      rows = b.sub(m1, m0)
      nmb = _smax(b, one, _sdiv_up(b, rows, mc_))
      mstep = b.mul(_sdiv_up(b, _sdiv_up(b, rows, nmb), _c64(mr)), _c64(mr))
      mstep = _smax(b, mstep, _c64(mr))
      # one row block: each panel of B is used by that block alone, so it is packed just
      # before its row tiles run (one panel of scratch, in L1 when they read it) rather than
      # the whole column block first
      single = b.icmp_signed("==", nmb, one)
      one_panel = b.or_(direct, single)
      # one column panel: each row panel of A is used by that panel's tiles alone, so it is
      # packed just before its tiles run (mr x kc of scratch, in L1 when they read it) rather
      # than the whole row block first: the same packing, a fraction of the scratch
      a_micro = b.icmp_signed("<=", b.sub(n1, n0), _c64(nr))
      # B's panels of the column block all packed before the row blocks run (once for all
      # pieces, PACKED_B, or by this piece for its row blocks), or B read in place where a K
      # slice of its column block fits DIRECT_ROWS_FIRST_BYTES: a row panel of A is likewise
      # packed just before its tiles, which run across the block's column panels (B's from
      # L2), so A's scratch is one panel there too
      cols = b.sub(n1, n0)
      blk = b.mul(b.mul(_smin(b, nc_, b.mul(_sdiv_up(b, cols, _c64(nr)), _c64(nr))), kstep),
                  _c64(cx.size))
      direct_fits = b.and_(direct, b.icmp_signed("<=", blk, _c64(DIRECT_ROWS_FIRST_BYTES)))
      a_rows = b.and_(b.or_(b.or_(prepacked, direct_fits), b.not_(one_panel)),
                      b.not_(a_micro))
      # B's panels: a column block's (one panel when B is read in place or by one row block),
      # K slice deep; none when B is read in place and this piece's columns end at a whole
      # panel (only a partial last panel is packed)
      b_cols = b.select(one_panel, _c64(nr), _smin(b, nc_,
                                                   b.mul(_sdiv_up(b, cols, _c64(nr)), _c64(nr))))
      whole_panels = b.icmp_signed("==", b.srem(n1, _c64(nr)), _c64(0))
      b_cols = b.select(b.or_(prepacked, b.and_(direct, whole_panels)), _c64(0), b_cols)
      apk = b.gep(bpk, [b.mul(_sdiv_up(b, b.mul(b_cols, kstep), _c64(align)), _c64(align))])
      apk = b.select(b.and_(on_stack, b.or_(a_micro, a_rows)), a_stack, apk)
      with _for(b, n0, n1, nc_, name="jc") as jc:
        nb = _smin(b, nc_, b.sub(n1, jc))
        with _for(b, 0, klimit, kstep, name="pc") as pc:
          kb = _smin(b, kstep, b.sub(K, pc))
          kb = _smax(b, kb, _c64(0))
          first = b.and_(b.icmp_signed("==", pc, _c64(0)), overwrite_c)
          last = b.icmp_signed(">=", b.add(pc, kstep), K)
          src_b = b.gep(Bb, [b.add(b.mul(pc, b_ks), b.mul(jc, b_cs))])
          # unpacked B: only a partial last column panel is packed (zero-padded)
          nb_full = b.mul(b.sdiv(nb, _c64(nr)), _c64(nr))
          with _if(b, b.not_(prepacked), name="packs"):
            with b.if_else(direct) as (d_, p_):
              with d_:
                with _if(b, b.icmp_signed("<", nb_full, nb), name="edgeb"):
                  b.call(pack_b, [b.gep(src_b, [nb_full]), b_cs, b_ks, b.sub(nb, nb_full), kb,
                                  bpk])
              with p_:
                with _if(b, b.not_(single), name="blockb"):
                  b.call(pack_b, [src_b, b_cs, b_ks, nb, kb, bpk])
          with _for(b, m0, m1, mstep, name="ic") as ic:
            mb = _smin(b, mstep, b.sub(m1, ic))

            def pack_rows(r0, rows):
              """A's rows r0 .. r0+rows of this K slice into ``apk``."""
              def plain_pack():
                src_a = b.gep(Ab, [b.add(b.mul(r0, a_rs), b.mul(pc, a_ks))])
                b.call(pack_a, [src_a, a_rs, a_ks, rows, kb, apk])
              if conv is None:
                plain_pack()
              else:   # (batch is 1: A is the descriptor of one patch matrix and its packer)
                with b.if_else(conv) as (c_, m_):
                  with c_:
                    # (none when the tiles read the patches in place)
                    with _if(b, b.not_(direct_a), name="packconv"):
                      packer = b.load(b.gep(desc, [_c64(gemm_im2col.DESC_PACK)]), align=8)
                      b.call(b.inttoptr(packer, gemm_im2col.PACK_TYPE(cx.p).as_pointer()),
                             [desc, r0, pc, rows, kb, apk])
                  with m_:
                    plain_pack()
            with _if(b, b.not_(b.or_(a_micro, a_rows)), name="blocka"):
              pack_rows(ic, mb)

            def panel(jr):
              """What the tiles of column panel ``jr`` of this block read of B."""
              nvalid = _smin(b, _c64(nr), b.sub(nb, jr))
              unpacked = b.and_(direct, b.icmp_signed("<", jr, nb_full))
              bpanel = b.select(unpacked, b.gep(src_b, [jr]),
                                b.gep(bpk, [b.select(one_panel, _c64(0), b.mul(jr, kb))]))
              # (packed before the call: panel (jc + jr) / nr, from row pc)
              bpanel = b.select(prepacked, b.gep(Bb, [b.add(b.mul(b.add(jc, jr), klimit),
                                                           b.mul(pc, _c64(nr)))]), bpanel)
              bstride = b.select(unpacked, ldb, _c64(nr))
              is_narrow = b.icmp_signed("<=", nvalid, _c64(w)) if narrow else None
              return nvalid, bpanel, bstride, b.add(jc, jr), is_narrow

            def tile(pnl, ir_, apanel):
              """The tile of rows ic + ir_ .. (mr of them at most) of column panel ``pnl``."""
              nvalid, bpanel, bstride, col, is_narrow = pnl
              mv = _smin(b, _c64(mr), b.sub(mb, ir_))
              row = b.add(ic, ir_)
              cptr = b.gep(Cb, [b.add(b.mul(row, ldc), col)])

              def call(k_wide, k_narrow, ap_, c_, mv_, row_):
                args = [kb, ap_, bpanel, bstride, c_, ldc, mv_, nvalid, first, last,
                        b.add(rowbase, row_), col]
                if k_narrow is None:
                  b.call(k_wide, args)
                else:
                  with b.if_else(is_narrow) as (n_, w_):
                    with n_:
                      b.call(k_narrow, args)
                    with w_:
                      b.call(k_wide, args)

              def packed():
                if not ms:
                  call(uk, uk_n, apanel, cptr, mv, row)
                else:
                  with b.if_else(b.icmp_signed(">", mv, _c64(2 * ms))) as (big, small):
                    with big:
                      call(uk, uk_n, apanel, cptr, mv, row)
                    with small:  # a short edge tile: ceil(mv/ms) tiles of ms rows
                      with _for(b, 0, mv, ms, name="es") as r0:
                        call(uk_s, uk_sn, b.gep(apanel, [r0]), b.gep(cptr, [b.mul(r0, ldc)]),
                             _smin(b, _c64(ms), b.sub(mv, r0)), b.add(row, r0))
              if conv is None:
                packed()
              else:
                with b.if_else(direct_a) as (d_, p_):
                  with d_:     # (the patch rows read in place: batch is 1, rowbase 0)
                    args = [kb, desc, row, pc, bpanel, bstride, cptr, ldc, mv, nvalid, first,
                            last, row, col]
                    uk_c = b.load(b.gep(desc, [_c64(gemm_im2col.DESC_DIRECT)]), align=8)
                    b.call(b.inttoptr(uk_c, gemm_im2col.DIRECT_UKERNEL_TYPE(cx).as_pointer()),
                           args)
                  with p_:
                    packed()

            with b.if_else(a_rows) as (rows_first, panels_first):
              with rows_first:
                # (B packed once for all pieces: each row panel of A, packed once, runs
                # across the block's column panels)
                with _for(b, 0, mb, mr, name="ir") as ir_:
                  pack_rows(b.add(ic, ir_), _smin(b, _c64(mr), b.sub(mb, ir_)))
                  with _for(b, 0, nb, nr, name="jr") as jr:
                    tile(panel(jr), ir_, apk)
              with panels_first:
                with _for(b, 0, nb, nr, name="jr") as jr:
                  with _if(b, b.and_(single, b.not_(b.or_(direct, prepacked))), name="panelb"):
                    b.call(pack_b, [b.gep(src_b, [b.mul(jr, b_cs)]), b_cs, b_ks,
                                    _smin(b, _c64(nr), b.sub(nb, jr)), kb, bpk])
                  pnl = panel(jr)
                  with _for(b, 0, mb, mr, name="ir") as ir_:
                    with _if(b, a_micro, name="panela"):
                      pack_rows(b.add(ic, ir_), _smin(b, _c64(mr), b.sub(mb, ir_)))
                    tile(pnl, ir_, b.gep(apk, [b.select(a_micro, _c64(0), b.mul(ir_, kb))]))
            if conv is not None:
              # the rows' columns of this block are final: the block epilogue the
              # descriptor names, if any (gemm_im2col.py), while they are in cache
              with _if(b, b.and_(conv, last), name="convlast"):
                epi = b.load(b.gep(desc, [_c64(gemm_im2col.DESC_EPILOGUE)]), align=8)
                ctx = b.load(b.gep(desc, [_c64(gemm_im2col.DESC_EPILOGUE + 1)]), align=8)
                with _if(b, b.icmp_signed("!=", epi, _c64(0)), name="epi"):
                  b.call(b.inttoptr(epi, gemm_im2col.EPILOGUE_TYPE.as_pointer()),
                         [b.inttoptr(ctx, ir.IntType(8).as_pointer()), ic, mb, jc, nb])

    # work split: this piece's batch entries [b0, b1), each's rows [m0, m1) and columns
    # [n0, n1), chosen in one of two branches; the blocks' code after them, once (emitted in
    # each branch, it was twice the driver's IR and LLVM time)
    by_batch = b.and_(b.icmp_signed(">=", batch, nth), b.icmp_signed(">", nth, one))
    with b.if_else(by_batch) as (whole, split):
      with whole:
        wb0 = b.sdiv(b.mul(batch, tid), nth)
        wb1 = b.sdiv(b.mul(batch, b.add(tid, one)), nth)
        whole_end = b.block
      with split:
        # a grid of pm x pn pieces (pm * pn = nth): piece tid gets the row tiles of group
        # tid / pn and the column panels of group tid % pn, and packs just those rows of A and
        # columns of B.  The grid minimises a piece's cost per step of k (in half cycles): its
        # tiles' FMAs (mr * nv vector FMAs a tile, two a cycle), packing its rows of A (about a
        # cycle an element) and its column panels of B (a vector load and store each).
        tm = _sdiv_up(b, M, _c64(mr))
        tn = _sdiv_up(b, N, _c64(nr))
        eb = ir.IRBuilder(fn.entry_basic_block)
        eb.position_at_start(fn.entry_basic_block)
        best_cost, best_pm = eb.alloca(I64, name="best_cost"), eb.alloca(I64, name="best_pm")
        b.store(_c64(-1), best_cost)
        b.store(one, best_pm)
        with _for(b, 1, b.add(nth, one), name="pm") as pm:
          with _if(b, b.icmp_signed("==", b.srem(nth, pm), _c64(0)), name="divides"):
            sm = _sdiv_up(b, tm, pm)
            sn = _sdiv_up(b, tn, b.sdiv(nth, pm))
            cost = b.add(b.mul(b.mul(sm, sn), _c64(mr * bl.nv)),
                         b.add(b.mul(sm, _c64(2 * mr)), b.mul(sn, _c64(2 * bl.nv))))
            old = b.load(best_cost)
            better = b.or_(b.icmp_signed("<", old, _c64(0)), b.icmp_signed("<", cost, old))
            with _if(b, better, name="better"):
              b.store(cost, best_cost)
              b.store(pm, best_pm)
        pm = b.load(best_pm)
        pn = b.sdiv(nth, pm)
        gi, gj = b.sdiv(tid, pn), b.srem(tid, pn)

        def share(tiles, groups, g, tile, ext):
          lo = b.mul(b.sdiv(b.mul(tiles, g), groups), _c64(tile))
          hi = b.mul(b.sdiv(b.mul(tiles, b.add(g, one)), groups), _c64(tile))
          return lo, _smin(b, hi, ext)
        sm0, sm1 = share(tm, pm, gi, mr, M)
        sn0, sn1 = share(tn, pn, gj, nr, N)
        mine = b.and_(b.icmp_signed("<", sm0, sm1), b.icmp_signed("<", sn0, sn1))
        sb1 = b.select(mine, batch, _c64(0))
        split_end = b.block

    def joined(w_, s_):
      ph = b.phi(I64)
      ph.add_incoming(w_, whole_end)
      ph.add_incoming(s_, split_end)
      return ph
    b0, b1 = joined(wb0, _c64(0)), joined(wb1, sb1)
    m0, m1 = joined(_c64(0), sm0), joined(M, sm1)
    n0, n1 = joined(_c64(0), sn0), joined(N, sn1)
    with _for(b, b0, b1, name="bb") as bi:
      gemm_block(bi, m0, m1, n0, n1)
    b.ret_void()
    return fn

  return driver(name)


# --------------------------------------------------------------------------------------------
# its signature; calling it from another kernel: gemm_calls.py

def _signature(p: ir.Type) -> ir.FunctionType:
  """The kernel's type, ``p`` the element pointer type."""
  return ir.FunctionType(ir.VoidType(), [p, p, p, I64, I64, I64, I64, I64, I64, I32, I32,
                                         I64, I64, I64, I64, I64, I64, p, I64])


# the process-wide shared GEMMs (built, cached on disk, registered): gemm_library.py
from ourjax.backends.llvm.gemm_library import (prefetch_shared_gemm,  # noqa: E402,F401
                                               shared_gemm_symbol)
from ourjax.backends.llvm.gemm_calls import (declare_shared_gemm, emit_gemm_call,  # noqa: E402,F401,E501
                                             emit_pack_b_call, operand_layout)
# the scratch a call needs (how the driver cuts C into pieces, what a piece packs):
# gemm_scratch.py
from ourjax.backends.llvm.gemm_scratch import (pack_buffer_bytes,  # noqa: E402,F401
                                               pack_buffer_elements, packed_b_elements)
# the few-rows kernels (B streamed through 4/2/1-row axpys): gemm_rows.py
from ourjax.backends.llvm.gemm_rows import _emit_rows  # noqa: E402


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
