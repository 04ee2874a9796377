"""A Hopper (sm_90a) matrix product on the warpgroup tensor-core instructions
(``wgmma.mma_async``): ``WgmmaDot``.

C[b] = A[b] @ B[b] with f32 accumulation, for f32 operands rounded to tf32 (when the configured
precision allows it), for bf16/f16 operands and for float8_e4m3fn/float8_e5m2 ones
(``m64nQk32.f32.e4m3.e5m2``, A's type then B's, either with either), and with int32
accumulation for int8/uint8 operands (``m64nQk32.s32.s8.s8``; 8-bit operands of either kind
must both be K-major, which ``dots._wgmma_kernels`` arranges by copying; an integer result
narrower than 32 bits wraps as the reference's sum does), output in the dot's dtype.  The PTX
of a module that holds this kernel targets ``sm_90a`` (``codegen.compile_ptx`` switches the
target when the IR contains ``wgmma``), so it runs on compute capability 9.0 only.

How it works.  A block of two warpgroups (256 threads; one for 64 rows or fewer) computes a
128 x Q tile of a product D[p, q] = X[p, :] . Y[:, q]: each warpgroup issues ``m64nQk8`` (tf32)
or ``m64nQk16`` (bf16/f16) instructions for its 64 rows, Q = 256, 128, 64 or 32 (``q_tile``), the
64 x Q f32 accumulators (Q/2 per thread) in registers.  At the problem's edges the copies of
rows or k chunks past it write zeros (cp.async with a source size of 0) and the epilogue stores
only elements inside it; a dot with few output tiles and a long contraction is split along k
(``split_count``) into f32 partial products.  The k dimension goes by slices of 128 bytes (32 f32
or 64 bf16 values) through a 4-stage shared-memory ring filled with ``cp.async`` (16 bytes per
copy, every thread copies), two slices in flight while one is multiplied: per slice, each thread
waits for its own copies, fences them for the tensor cores' proxy
(``fence.proxy.async.shared::cta``), a block barrier publishes the slice, the warpgroups issue
their instructions (asynchronously), the copies of slice ``kt + 2`` start, and
``wgmma.wait_group 1`` lets the previous slice's instructions finish, so the stage copied next
is never one the tensor cores still read.  Blocks take their tiles in groups of 16 rows of p
tiles (``RASTER_GROUP``, ``_tile_of_block``), so the ~132 blocks in flight share rows of X and
columns of Y in L2: on an H100 (device time) 8192^3 f32 went from 303 to 353 TFLOP/s, bf16 from
706 to 778, 4096^3 f32 from 333 to 351, 4096^3 bf16 unchanged (711-717).

Operands in shared memory use the canonical 128-byte-swizzled layouts of the PTX ISA: a K-major
operand is stored as rows of 128 bytes (one row per m or n), the 16-byte chunk ``c`` of row ``r``
at chunk ``c ^ (r % 8)``, stages aligned to 1024 bytes; its matrix descriptor holds the start
address >> 4, stride byte offset 1024 (between groups of 8 rows) and the 128-byte swizzle mode;
successive k steps advance the start address by 32 bytes inside the swizzled row.  A bf16/f16
B stored N-major (row-major [K, N], the usual case) is staged MN-major -- blocks of 64 n values
(128 bytes) by the slice's k rows, swizzled by k row, the leading byte offset the distance
between blocks of 64 n -- and multiplied with the instruction's transpose flag.

tf32 has no transpose flag: both operands must be K-major.  A row-major B [K, N] (N-major) is
therefore handled by computing the transposed product, C^T = B^T A^T: the warpgroups' operand X
is B^T, read from a padded (bank-conflict-free) [k][n] tile into registers (the instruction's
A-from-registers form) and rounded to tf32 (nearest, ties away: ``RNA_TF32``), and Y is A,
K-major as it comes; the epilogue writes the accumulators transposed.  An A stored M-major (row-major [K, M],
``x.T @ y``) with a K-major B is the same register form without the transposition: X is A, read
from a [k][m] tile, and Y is B.  A register operand must stay intact until
its instructions complete, which is one slice later here, so the k loop holds two copies of the
step: consecutive slices read different (PTX) registers (with one copy, the next slice's
fragment loads overwrote registers that slice kt's 256-wide instructions were still reading:
about 3% error at 4096^3).  In the shared-memory forms the hardware reads f32 values as tf32 by
dropping the low mantissa bits.  The register form's time between a slice's barrier and its
first instruction shows in the rate (an H100, 4096^3, device time, 16-row raster: 339-342
TFLOP/s with cvt.rna on all 16 fragment values first, 360 with none of the rounding): so each
k step's fragment is loaded and rounded just before its instruction (a ``wgmma.fence`` between),
the rounding is two instructions rather than cvt.rna's three (the same bits), and the
instruction's rows g and g + 8 are adjacent tile columns (one 8-byte load for both): 360
TFLOP/s with rounding (JAX 369 in the same process; the shared-memory form, ``x @ y.T``: 376).

The block's tile of C goes out through shared memory in 16-byte row chunks (``staged_store``:
C, or a fused epilogue's one output of C's shape): on an H100 that took 4096^3 bf16 from 613
to 691 TFLOP/s (JAX, cuBLAS, wall clock: 691-707) and 8192^3 from 666 to 706 (JAX 703).  A
fused epilogue may then be evaluated in the loop over the chunks (``late_epilogue``, off by
default: fewer copies of its code, but slower steps) rather than at each accumulator.

Large products with 16-bit results run persistent (``persistent``): one block per SM walks its
tiles in the raster order, the next tile's first slices copied while the current one's results
go out.  Back to back, an H100 runs 4096^3 bf16 at its 700 W power cap (nvidia-smi: SW power
cap, SM clock ~1400 MHz for ours and cuBLAS alike), so there the rate follows the work per
joule: persistent 0.2066 ms a call against 0.2117 launched per tile (JAX 0.1990, same process,
alternating rounds).

Back-to-back calls (``benchmarks/gpu.py``, ``wgmma_variants.py``'s call timing) run slower than
the kernel's own event time, for both libraries: under sustained load the card's clock falls.
On an H100 at 4096^3, 200 calls a round, the three interleaved: bf16 0.207 ms a call through
jit, 0.207 through the executable directly, events around the batch agreeing with the wall
clock and the host enqueueing a call in 0.03-0.04 ms, JAX 0.198 (the kernels alone in short
bursts: 0.193 and 0.193-0.201); f32 0.430, 0.426, JAX 0.399 (short bursts: 0.381 and 0.373).
No time goes to dispatch, allocation or synchronisation; what is left is the kernel's own
rate under the card's power limit, where cuBLAS's kernels keep more of theirs.

Compile time.  The driver's JIT (ptxas) spends most of a kernel's time on its wgmma
instructions of Q/2 accumulators a thread: the shared-memory forms issue a slice's 4 k steps
from a loop around one instruction (``k_loop``, tf32 only), the k loop is marked not to unroll
(ptxas unrolled short ones whole), and with ``late_epilogue`` the epilogue's code is a few
copies, not Q/2 of them.

int8 at 4096^3 on an H100 (``wgmma_check.py --time-int8``): 0.124 ms in WgmmaDot plus 0.028
in the copy of B K-major (905 TOP/s together) against JAX's 0.255 ms wall clock (540).

Measured on an H200 (benchmarks/wgmma_check.py, CUDA events, median of 20): 4096^3 f32 (tf32)
349 TFLOP/s, bf16 659 TFLOP/s (MmaDot: 145 and 279; cuBLAS through JAX, wall clock: 355 and
642); 8192^3: 344 and 705 (cuBLAS 359 and 702).  Norm-relative error against float64 at 4096^3
f32: 4.2e-4 (MmaDot, rounding both operands: 2.6e-4).

Conditions (``WgmmaDot.supports``): compute capability 9.0; A K-major (unit stride along k),
or M-major f32 with a K-major B; B K-major or N-major (N-major f32 uses the transposed form);
16-byte aligned rows and batch strides (so K a multiple of 16 bytes); any sizes.  Where both
operands are stored with k outermost (a weight gradient ``x.T @ dy``) the smaller is copied
K-major first, and a narrow N-major f32 B too (``dots.narrow_b_form`` decides: then the
shared-memory form, or its transposed twin ``ss_t`` -- X = B, Y = A, C written transposed --
where B is narrower than a 256-wide tile); A may also be a convolution's patch
matrix read in place from the input (``implicit_gemm``).  Everything else stays on ``MmaDot``
or ``SimtDot``.  A fused epilogue (``dots.Epilogue``) is applied where C's elements are
stored.
"""
from __future__ import annotations

import os

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.codegen import GpuKernel, DeviceInfo, barrier, sreg64
from ourjax.backends.cuda.dots import _asm, _dot_buffers, dot_writer, single_result
from ourjax.backends.cuda.mma_kinds import BYTE_KINDS, INT_KINDS, operand_types
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I32, I64, i64

F = ir.FloatType()
STAGES = 4             # shared-memory ring of k slices
AHEAD = STAGES - 2     # slices in flight while one is multiplied (see the module docstring)
RASTER_GROUP = 16      # blocks walk this many rows of tiles before the next column (0: plain order)
ROW = 128              # bytes of k per slice (one swizzled row)
SW128 = 1 << 62        # descriptor: 128-byte swizzle
# The tf32 A fragment of the register form, per warp: registers a0..a3 hold rows (g, g + 8) x
# k (t, t + 4) of the warp's 16 rows (the layout of mma.sync m16n8k8's A); the instruction's
# rows g and g + 8 are the [k][p] tile's columns 2g and 2g + 1 (``WgmmaDot._p_rows``), so one
# 8-byte load reads both.  Rounding to tf32, nearest with ties away, in the 19 bits the tensor cores read (they drop the
# low 13): half a unit of the last tf32 place added to finite values; Inf and NaN stay as they
# are.  (The same bits as cvt.rna.tf32.f32, which ptxas makes three instructions.)
RNA_TF32 = ("{ .reg .pred p; .reg .f32 a; abs.f32 a, $1; setp.lt.f32 p, a, 0f7F800000; "
            "mov.b32 $0, $1; @p add.s32 $0, $0, 4096; }")


def _elem_bytes(kind: str) -> int:
  """Bytes of an operand element of tensor-core type ``kind``."""
  return 1 if kind in BYTE_KINDS else {"tf32": 4, "bf16": 2, "f16": 2}[kind]


def mn_major_offsets(bk: int):
  """(leading, stride) byte offsets >> 4 of the swizzled MN-major B stage: leading = between
  blocks of 64 n (each ``bk`` rows of 128 bytes), stride = between groups of 8 k rows."""
  return bk * ROW >> 4, 1024 >> 4


class WgmmaDot(GpuKernel):
  """``wgmma.mma_async`` dot (see the module docstring).  ``mode`` is ``"ss"`` (X = A, Y = B,
  both from shared memory; ``b_mn``: B staged N-major, transpose flag set), ``"rs_t"`` (tf32
  with N-major B: X = B^T from registers, Y = A, C written transposed), ``"ss_t"`` (both
  K-major, X = B and Y = A from shared memory, C written transposed: ``transposed_form``) or
  ``"rs"`` (tf32 with
  M-major A and K-major B: X = A from registers, read from a [k][m] tile, Y = B).  ``q_tile``: the tile's
  width Q (256, 128, 64 or 32), ``wg``: warpgroups (the tile's height is 64 ``wg``), ``split``:
  blocks per output tile along k (``out`` then holds ``split`` f32 partial products
  [split, B, M, N], which ``dots.SplitKSum`` adds up)."""

  def __init__(self, name, dot, lhs, rhs, out, kind: str, mode: str, q_tile: int, wg: int = 2,
               split: int = 1, epilogue=None, spec=None, c_layout=None):
    """``spec``: the operands' layout when it is not the dot's own (an operand staged in
    another layout by an earlier kernel); ``epilogue``: a ``dots.Epilogue``; ``c_layout``:
    (batch stride, row stride) of C in ``out`` (or in the epilogue's one output) where it is
    not row-major [B, M, N] (a transpose of C folded into its store, ``fold_transposes``)."""
    self.dot, self.kind, self.mode, self.Q, self.WG, self.S = dot, kind, mode, q_tile, wg, split
    assert c_layout is None or split == 1
    self.spec = spec or K.DotSpec(dot)
    self.lhs, self.rhs, self.out, self.epilogue = lhs, rhs, out, epilogue
    assert split == 1 or epilogue is None
    s = self.spec
    self.c_sb, self.c_sm = c_layout or (s.M * s.N, s.N)
    self.b_mn = mode == "ss" and s.b_sk != 1
    self.pairs = mode in ("rs", "rs_t")      # (fragment rows from adjacent columns: _p_rows)
    self.esz = _elem_bytes(kind)
    self.BK = ROW // self.esz
    self.P_TILE, self.THREADS = 64 * wg, 128 * wg
    from ourjax.backends.cuda.implicit_gemm import Im2colBuf
    # A as a convolution's patch matrix read in place from its input (implicit_gemm.py)
    self.im2col = lhs if isinstance(lhs, Im2colBuf) else None
    a_buf = lhs.source if self.im2col is not None else lhs
    super().__init__(name, *_dot_buffers(a_buf, rhs, out, epilogue), work=s.B * s.M * s.N * s.K)

  @classmethod
  def supports(cls, dot, info: DeviceInfo, kind: str | None, spec=None):
    """(mode, Q tile, warpgroups) for ``dot`` with tensor-core ``kind``
    (``mma_kinds.mma_kind``), or None when the kernel does not apply.  ``spec``: as for the
    constructor.

    Any sizes: tiles at the edges of the problem load zeros beyond it and store only inside it.
    What it needs is the operands' layout: A K-major (unit stride along k), B K-major or
    N-major, every row and batch stride (and so K) a multiple of 16 bytes; a 16-bit B stored
    N-major also needs Q >= 64 (its 128-byte swizzle atom is 64 values of n)."""
    if kind is None or info.arch != "90":
      return None
    s = spec or K.DotSpec(dot)
    if not s.ok or s.K == 0 or s.M == 0 or s.N == 0:
      return None
    esz = _elem_bytes(kind)
    epv = 16 // esz
    if esz == 1 and (s.a_sk != 1 or s.b_sk != 1):
      return None                     # (8-bit operands: both K-major, no transposed form)
    if s.a_sk != 1:
      # tf32, A stored M-major (row-major [K, M]: x.T @ y) with a K-major B: A is the
      # register operand, read from a [k][m] tile like the transposed form's B
      if kind != "tf32" or s.a_sm != 1 or s.b_sk != 1:
        return None
      mode, p, q = "rs", s.M, s.N
    elif s.b_sk == 1:
      mode, p, q = "ss", s.M, s.N
    elif s.b_sn == 1:
      mode, p, q = ("rs_t", s.N, s.M) if kind == "tf32" else ("ss", s.M, s.N)
    else:
      return None
    if s.K % epv:
      return None
    strides = [s.a_sk if mode == "rs" else s.a_sm, s.b_sn if s.b_sk == 1 else s.b_sk]
    if s.B > 1:
      strides += [s.a_sb, s.b_sb]
    if any(x % epv for x in strides):
      return None
    qt = q_tile(q)
    if mode == "ss" and s.b_sk != 1 and qt < 64:
      qt = 64
    return mode, qt, 1 if p <= 64 else 2

  @classmethod
  def transposed_form(cls, dot, info: DeviceInfo, kind: str | None, spec=None):
    """(``"ss_t"``, Q tile, warpgroups) for ``dot`` with both operands K-major (``spec``: as
    for the constructor), or None: the shared-memory form of the transposed product C^T =
    B^T A^T -- X = B (the tile's rows run along n), Y = A (its columns along m), both read
    from shared memory through descriptors.  For a narrow B (a convolution's weights, copied
    K-major) this gives the register form's tile (64 ``wg`` values of n by Q = 256 of m)
    without its per-fragment shared loads and conversions, at about half its PTX."""
    how = cls.supports(dot, info, kind, spec)
    s = spec or K.DotSpec(dot)
    if how is None or how[0] != "ss" or s.b_sk != 1:
      return None
    return "ss_t", q_tile(s.M), 1 if s.N <= 64 else 2

  @property
  def compile_cost(self) -> int:
    return self.Q // 2 + 16              # (its accumulators a thread, the copies' code)

  @property
  def k_loop(self) -> bool:
    """Whether a k slice's 4 instructions are a loop around one (the shared-memory forms:
    their operands are descriptors, computed from the step): ptxas's time goes mostly to each
    wgmma instruction of 128 accumulators a thread (0.136 -> 0.101 s for the 56x56x128
    convolution's ``ss_t`` kernel), and the IR shrinks as much; the instructions are
    asynchronous, the loop's few integer operations run while they do.  tf32 operands only:
    16- and 8-bit instructions run two and four times as fast, and the loop's gaps between them
    show (an H100, 4096^3 bf16 through jit: 0.236 ms a call looped against 0.213 unrolled; the
    convolutions' tf32 steps within 2%).  ``OURJAX_CUDA_WGMMA_KLOOP=0``: unrolled."""
    from ourjax.config import env_switch
    return (self.mode in ("ss", "ss_t") and self.esz == 4
            and env_switch("OURJAX_CUDA_WGMMA_KLOOP"))

  @property
  def transposed(self) -> bool:
    """Whether the tile is of C^T (rows along n, columns along m): ``rs_t`` and ``ss_t``."""
    return self.mode in ("rs_t", "ss_t")

  # -- shared-memory plan ------------------------------------------------------------------------
  @property
  def x_bytes(self):
    if self.mode in ("rs", "rs_t"):          # [k][n] f32 rows of 64 wg + 8 words (conflict-free fragments)
      return self.BK * self.x_ld * 4
    return self.P_TILE * ROW

  @property
  def x_ld(self):
    return self.P_TILE + 8

  @property
  def stage_bytes(self):
    # (a multiple of 1024 bytes: each stage's operands start on a swizzle-pattern boundary)
    return -(-(self.x_bytes + self.Q * ROW) // 1024) * 1024

  def launch(self, info):
    gx, gy, gz = self._tiles()
    if self.persistent:
      return ((min(gx * gy * gz, (info or DeviceInfo()).sm_count), 1, 1), (self.THREADS, 1, 1),
              STAGES * self.stage_bytes + 1024)
    return (gx, gy, gz), (self.THREADS, 1, 1), STAGES * self.stage_bytes + 1024

  @property
  def raster(self) -> int:
    """``RASTER_GROUP``, or ``OURJAX_CUDA_WGMMA_RASTER`` where set (0: plain order)."""
    return int(os.environ.get("OURJAX_CUDA_WGMMA_RASTER", RASTER_GROUP))

  @property
  def persistent(self) -> bool:
    """Whether the kernel is persistent: one block per SM (at most), each taking tiles
    ``ctaid.x``, ``ctaid.x + nctaid.x``, ... in the raster order, the stage ring's slices
    numbered across its tiles, and the next tile's first ``AHEAD`` slices copied while the
    current tile's results go out, so the copies' latency at a tile's start is hidden behind
    the previous tile's stores instead of exposed at every block's start.  The shared-memory
    form (``ss``) with its results staged, non-transposed, unsplit, each warpgroup's 64 rows of
    the tile fitting in one stage (16-bit results of a 256-wide tile), and more tiles than
    twice the SMs.  ``OURJAX_CUDA_WGMMA_PERSISTENT=0``: off.

    On an H100 at 4096^3 bf16 (results bit for bit the same): the kernel alone 0.1909 ms
    against 0.1924, back-to-back calls 0.2162 against 0.2202 ms (medians of 15 alternating
    rounds of 200 calls; JAX 0.2027).  Back to back the card runs at its 700 W power cap (SM
    clock ~1400 MHz for both libraries, nvidia-smi), so what decides is the work per joule."""
    from ourjax.config import env_switch
    if not env_switch("OURJAX_CUDA_WGMMA_PERSISTENT"):
      return False
    if self.mode != "ss" or self.S != 1 or self.im2col is not None or not self.staged_store:
      return False
    result = single_result(self)
    _, cols, pitch = self._c_tile(self._tile_dtype(result[0]).itemsize)
    gx, gy, gz = self._tiles()
    return 64 * pitch <= self.stage_bytes and gx * gy * gz > 2 * DeviceInfo().sm_count


  def _tiles(self):
    """(q tiles, p tiles, batch x split) of the product: the grid of a launch of one block per
    tile."""
    s = self.spec
    p, q = (s.N, s.M) if self.transposed else (s.M, s.N)
    return -(-q // self.Q), -(-p // self.P_TILE), s.B * self.S

  def _tile_of_block(self, b, lin=None):
    """(q tile, p tile) of this block (or of the tile numbered ``lin`` among one batch's
    q x p tiles: the persistent kernel's): consecutive blocks walk down ``RASTER_GROUP`` (G)
    rows of p tiles before moving to the next q tile, so the blocks in flight at once (a wave
    of 132 on an H100: G x 8 tiles rather than 4 x 32 at 8192^3) share their rows of X and
    columns of Y in L2 (fewer bytes from device memory)."""
    gx, gy, _ = self._tiles()
    G = self.raster
    if lin is None:
      bx, by = sreg64(b, "ctaid.x"), sreg64(b, "ctaid.y")
      if G <= 1 or gy <= G or gx == 1:
        return bx, by
      lin = b.add(b.mul(by, i64(gx)), bx)
    elif G <= 1 or gy <= G or gx == 1:
      return b.urem(lin, i64(gx)), b.udiv(lin, i64(gx))
    width = G * gx
    first = b.mul(b.udiv(lin, i64(width)), i64(G))
    left = b.sub(i64(gy), first)
    gs = b.select(b.icmp_unsigned("<", left, i64(G)), left, i64(G))
    r = b.urem(lin, i64(width))
    return b.udiv(r, gs), b.add(first, b.urem(r, gs))

  # -- the kernel --------------------------------------------------------------------------------
  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    Q, BK, esz, PT, NT = self.Q, self.BK, self.esz, self.P_TILE, self.THREADS
    epv = 16 // esz
    rs = self.mode in ("rs", "rs_t")        # X from registers
    P, Qn = (N, M) if self.transposed else (M, N)        # rows of X and of Y
    mod = b.module
    smem = ir.GlobalVariable(mod, ir.ArrayType(ir.IntType(8), 0), self.name + "_smem",
                             addrspace=3)
    smem.align = 1024
    # the ring starts at the first 1024-byte boundary of the dynamic shared memory
    base = b.and_(b.add(b.ptrtoint(smem, I64), i64(1023)), i64(~1023))
    tid = sreg64(b, "tid.x")
    wg = b.udiv(tid, i64(128))
    warp = b.urem(b.udiv(tid, i64(32)), i64(4))
    lane = b.urem(tid, i64(32))
    g = b.udiv(lane, i64(4))
    t4 = b.urem(lane, i64(4))
    persistent = self.persistent
    A = ptr(self.im2col.source if self.im2col is not None else self.lhs)
    Bm = ptr(self.rhs)
    KT = -(-Kd // BK)                       # k slices of the whole contraction
    KTB = KT // self.S                      # ... of this block's share

    def tile_at(qb, pb, bat, g0):
      """The per-tile values the copies and the epilogue read: the tile's first q and p, its
      batch, the operands' batch offsets and ``g0``, the ring's count of slices before the
      tile's first (the persistent kernel numbers them across its tiles)."""
      return dict(q0=b.mul(qb, i64(Q)), p0=b.mul(pb, i64(PT)), bat=bat, g0=g0,
                  a_base=b.mul(bat, i64(s.a_sb)), b_base=b.mul(bat, i64(s.b_sb)))

    part = None
    if persistent:
      gx, gy, _ = self._tiles()
      per_batch, ntiles = gx * gy, gx * gy * s.B

      def tile_of(t, done):
        qb, pb = self._tile_of_block(b, b.urem(t, i64(per_batch)))
        return tile_at(qb, pb, b.udiv(t, i64(per_batch)), b.mul(done, i64(KTB)))
      first = sreg64(b, "ctaid.x")
      stride = sreg64(b, "nctaid.x")
      cur = tile_of(first, i64(0))
    else:
      qb, pb = self._tile_of_block(b)
      z = sreg64(b, "ctaid.z")
      bat, part = (b.udiv(z, i64(self.S)), b.urem(z, i64(self.S))) if self.S > 1 else (z, None)
      cur = tile_at(qb, pb, bat, i64(0))
    kt0 = b.mul(part, i64(KTB)) if part is not None else i64(0)
    k_edge = Kd % BK != 0                   # the last slice reads zeros beyond K

    def gaddr(p_, off):
      return b.ptrtoint(b.gep(p_, [off], inbounds=True), I64)

    def copy16(dst, src_ptr, off, ok):
      """16 bytes at element ``off`` of ``src_ptr`` into shared ``dst``; zeros where ``ok`` is
      false (an i1, or None: always copied; the source is then not read)."""
      if ok is None:
        _asm(b, "{ .reg .u64 g; cvta.to.global.u64 g, $1; "
             "cp.async.cg.shared.global [$0], [g], 16; }", "l,l,~{memory}",
             [dst, gaddr(src_ptr, off)])
        return
      n = b.select(ok, ir.Constant(I32, 16), ir.Constant(I32, 0))
      src = gaddr(src_ptr, b.select(ok, off, i64(0)))
      _asm(b, "{ .reg .u64 g; cvta.to.global.u64 g, $1; "
           "cp.async.cg.shared.global [$0], [g], 16, $2; }", "l,l,r,~{memory}", [dst, src, n])

    def both(x, y):
      return y if x is None else x if y is None else b.and_(x, y)

    def below(v, bound, edge):
      return b.icmp_unsigned("<", v, i64(bound)) if edge else None

    def copy_kmajor(dst, src_ptr, src_base, row_stride, row0, rows, bound, k0, gather=None):
      """``rows`` rows (from ``row0``; those at or past ``bound`` are zeros) of 128 bytes of k
      (unit stride) into the swizzled K-major layout.  ``gather(row, k)``: (offset, in
      bounds) of the 16 bytes at (row, k), for a matrix that is not stored as such."""
      edge = bound % rows != 0
      for i in range(rows * 8 // NT):
        cid = b.add(tid, i64(i * NT))
        r = b.udiv(cid, i64(8))
        c = b.urem(cid, i64(8))
        k = b.add(k0, b.mul(c, i64(epv)))
        if gather is not None:
          src, inside = gather(b.add(row0, r), k)
          ok = both(inside, below(k, Kd, k_edge))
        else:
          ok = both(below(b.add(row0, r), bound, edge), below(k, Kd, k_edge))
          src = b.add(src_base, b.add(b.mul(r, row_stride), k))
        sw = b.xor(c, b.urem(r, i64(8)))
        copy16(b.add(dst, b.add(b.mul(r, i64(ROW)), b.mul(sw, i64(16)))), src_ptr, src, ok)

    def copy_mnmajor(dst, k0, t):
      """B's slice (BK rows of k, Q values of n each) into the swizzled MN-major layout: blocks
      of 64 n (128 bytes) x BK rows, each row's chunks swizzled by the row (tile ``t``)."""
      q0, b_base = t["q0"], t["b_base"]
      per_row = Q // epv
      for i in range(BK * per_row // NT):
        cid = b.add(tid, i64(i * NT))
        r = b.udiv(cid, i64(per_row))
        cc = b.urem(cid, i64(per_row))
        blk = b.udiv(cc, i64(8))
        c = b.urem(cc, i64(8))
        n = b.add(q0, b.mul(cc, i64(epv)))
        ok = both(below(b.add(k0, r), Kd, k_edge), below(n, N, N % Q != 0))
        src = b.add(b_base, b.add(b.mul(b.add(k0, r), i64(s.b_sk)), n))
        off = b.add(b.mul(blk, i64(BK * ROW)),
                    b.add(b.mul(r, i64(ROW)), b.mul(b.xor(c, b.urem(r, i64(8))), i64(16))))
        copy16(b.add(dst, off), Bm, src, ok)

    def copy_padded(dst, k0, t):
      """X's slice as [k][p] f32 rows of ``x_ld`` words: B's (the transposed form) or A's
      (``rs``: A stored M-major), of tile ``t``."""
      p0, a_base, b_base = t["p0"], t["a_base"], t["b_base"]
      per_row = PT // 4
      src_ptr, xbase, k_stride = (A, a_base, s.a_sk) if self.mode == "rs" else \
          (Bm, b_base, s.b_sk)
      for i in range(BK * per_row // NT):
        cid = b.add(tid, i64(i * NT))
        r = b.udiv(cid, i64(per_row))
        c = b.urem(cid, i64(per_row))
        n = b.add(p0, b.mul(c, i64(4)))
        ok = both(below(b.add(k0, r), Kd, k_edge), below(n, P, P % PT != 0))
        src = b.add(xbase, b.add(b.mul(b.add(k0, r), i64(k_stride)), n))
        copy16(b.add(dst, b.add(b.mul(r, i64(self.x_ld * 4)), b.mul(c, i64(16)))), src_ptr,
               src, ok)

    gather = None
    if self.im2col is not None:
      from ourjax.backends.cuda.implicit_gemm import chunk_source
      gather = lambda row, k: chunk_source(b, self.im2col, row, k, mod,   # noqa: E731
                                           cur["bat"])

    def stage_of(kt, t):
      """The shared address of the stage of tile ``t``'s k slice ``kt``."""
      g = b.add(t["g0"], kt)
      return b.add(base, b.mul(b.and_(g, i64(STAGES - 1)), i64(self.stage_bytes)))

    def issue(kt, t=None):
      """The copies of k slice ``kt`` (of this block's share) of tile ``t`` (the current one
      by default) into its stage (one commit group)."""
      t = t or cur
      q0, p0, a_base, b_base = t["q0"], t["p0"], t["a_base"], t["b_base"]
      stage = stage_of(kt, t)
      xs, ys = stage, b.add(stage, i64(self.x_bytes))
      k0 = b.mul(b.add(kt0, kt), i64(BK))
      if self.mode == "rs":
        copy_padded(xs, k0, t)
        copy_kmajor(ys, Bm, b.add(b_base, b.mul(q0, i64(s.b_sn))), i64(s.b_sn), q0, Q, N, k0)
      elif self.mode == "ss_t":             # X = B's rows (n), Y = A's rows (m)
        copy_kmajor(xs, Bm, b.add(b_base, b.mul(p0, i64(s.b_sn))), i64(s.b_sn), p0, PT, N, k0)
        copy_kmajor(ys, A, b.add(a_base, b.mul(q0, i64(s.a_sm))), i64(s.a_sm), q0, Q, M, k0,
                    gather)
      elif rs:
        copy_padded(xs, k0, t)
        copy_kmajor(ys, A, b.add(a_base, b.mul(q0, i64(s.a_sm))), i64(s.a_sm), q0, Q, M, k0,
                    gather)
      else:
        copy_kmajor(xs, A, b.add(a_base, b.mul(p0, i64(s.a_sm))), i64(s.a_sm), p0, PT, M, k0,
                    gather)
        if self.b_mn:
          copy_mnmajor(ys, k0, t)
        else:
          copy_kmajor(ys, Bm, b.add(b_base, b.mul(q0, i64(s.b_sn))), i64(s.b_sn), q0, Q, N,
                      k0)

    def commit():
      _asm(b, "cp.async.commit_group;", "~{memory}", [])

    def desc(addr, lbo, sbo):
      hi = SW128 | (sbo << 32) | (lbo << 16)
      return b.or_(i64(hi), b.and_(b.lshr(addr, i64(4)), i64(0x3FFF)))

    nacc = Q // 2
    ty = self.kind
    integer = ty in INT_KINDS
    acc_ty = I32 if integer else F
    shape = f"m64n{Q}k{32 // esz}"
    outs = ",".join(f"${i}" for i in range(nacc))
    acc_cons = ",".join([("=r" if integer else "=f")] * nacc + [str(i) for i in range(nacc)])
    # (a named type: the IR prints "%acc" where each use would spell out Q/2 members, which
    # made most of the module's text and of the emitter's and LLVM's parsing time)
    RET = mod.context.get_identified_type(f"ojx.acc{nacc}")
    if RET.is_opaque:
      RET.set_body(*([acc_ty] * nacc))
    ta, tb = operand_types(ty)
    dtype = f"{'s32' if integer else 'f32'}.{ta}.{tb}"

    def wgmma(accs, xop, ydesc):
      # scale-d is a predicate (true: accumulate), then the scales of A and B (+1) and, for
      # 16-bit types in the shared-memory form, the transpose flags of A and B; the operands
      # after the outputs and their tied inputs are numbered from 2 * nacc
      n = 2 * nacc
      if rs:
        ops = f"{{${n},${n + 1},${n + 2},${n + 3}}}, ${n + 4}, p, 1, 1"
        cons = acc_cons + ",r,r,r,r,l,~{memory}"
        args = list(accs) + list(xop) + [ydesc]
      else:
        # (integer forms have no operand scales, 8-bit and tf32 ones no transpose flags)
        ops = f"${n}, ${n + 1}, p" + ("" if integer else ", 1, 1") + \
            (f", 0, {int(self.b_mn)}" if esz == 2 else "")
        cons = acc_cons + ",l,l,~{memory}"
        args = list(accs) + [xop, ydesc]
      text = ("{ .reg .pred p; setp.ne.b32 p, 1, 0; "
              f"wgmma.mma_async.sync.aligned.{shape}.{dtype} {{{outs}}}, {ops}; }}")
      r = _asm(b, text, cons, args, ret=RET)
      return [b.extract_value(r, i) for i in range(nacc)]

    def x_operand(xs, ks):
      """Slice step ``ks``'s X operand: a descriptor, or in the register form the fragment of
      rows (g, g + 8) x k (t, t + 4), those rows at tile columns 2g and 2g + 1 (one 8-byte
      load per k), rounded to tf32."""
      if not rs:
        return desc(b.add(xs, b.add(b.mul(wg, i64(64 * ROW)), i64(ks * 32))), 1, 64)
      row = b.add(b.add(b.mul(wg, i64(64)), b.mul(warp, i64(16))), b.mul(g, i64(2)))
      frag = []
      for dk in (0, 4):
        k = b.add(t4, i64(ks * 8 + dk))
        a = b.add(xs, b.mul(b.add(b.mul(k, i64(self.x_ld)), row), i64(4)))
        v = b.load(b.inttoptr(a, ir.VectorType(F, 2).as_pointer(3)), align=8)
        frag += [_asm(b, RNA_TF32, "=r,f", [b.extract_element(v, ir.Constant(I32, j))],
                      ret=I32, side_effect=False) for j in (0, 1)]
      return frag

    def carried(loop, init):
      """Phis in ``loop``'s header for values carried around it (the accumulators), entering
      as ``init``; ``close(phis, values)`` at the end of its body adds the values that go
      round.  (SSA values rather than stack slots: LLVM then has Q/2 fewer loads and stores
      per use to clean up.)"""
      here = b.block
      b.position_at_start(loop.header)
      phis = [b.phi(v.type) for v in init]
      for p_, v in zip(phis, init):
        p_.add_incoming(v, loop.pre)
      b.position_at_end(here)
      return phis

    def close(phis, values):
      for p_, v in zip(phis, values):
        p_.add_incoming(v, b.block)

    def compute_looped(xs, ys, accs):
      """The slice's 4 k steps as a loop around one instruction (``k_loop``)."""
      _asm(b, "wgmma.fence.sync.aligned;", "~{memory}", [])
      with E.ForLoop(b, 0, 4, "ks", unroll=False) as loop:
        ks = loop.index
        phis = carried(loop, accs)
        xd = desc(b.add(xs, b.add(b.mul(wg, i64(64 * ROW)), b.mul(ks, i64(32)))), 1, 64)
        if self.b_mn:
          yd = desc(b.add(ys, b.mul(ks, i64(16 * ROW))), *mn_major_offsets(BK))
        else:
          yd = desc(b.add(ys, b.mul(ks, i64(32))), 1, 64)
        close(phis, wgmma(phis, xd, yd))
      _asm(b, "wgmma.commit_group.sync.aligned;", "~{memory}", [])
      return phis

    def compute(kt, accs):
      stage = stage_of(kt, cur)
      xs, ys = stage, b.add(stage, i64(self.x_bytes))
      if self.k_loop:
        return compute_looped(xs, ys, accs)
      # the register form loads each k step's fragment just before its instruction (a fence
      # between the two), so the first instruction waits for one fragment, not four
      xops = [None if rs else x_operand(xs, ks) for ks in range(4)]
      if not rs:
        _asm(b, "wgmma.fence.sync.aligned;", "~{memory}", [])
      for ks in range(4):                       # 4 k steps of 32 bytes per slice
        if self.b_mn:    # k step = 16 rows of 128 bytes; leading offset: between 64-n blocks
          yd = desc(b.add(ys, i64(ks * 16 * ROW)), *mn_major_offsets(BK))
        else:
          yd = desc(b.add(ys, i64(ks * 32)), 1, 64)
        if rs:
          xops[ks] = x_operand(xs, ks)
          _asm(b, "wgmma.fence.sync.aligned;", "~{memory}", [])
        accs = wgmma(accs, xops[ks], yd)
      _asm(b, "wgmma.commit_group.sync.aligned;", "~{memory}", [])
      return accs

    zero = [ir.Constant(acc_ty, 0 if integer else 0.0)] * nacc
    for j in range(AHEAD):
      if j < KTB:
        issue(i64(j))
      commit()

    def step(kt, accs):
      """One k slice: publish its stage, issue its instructions, start the copies of slice
      kt + AHEAD, let slice kt - 1's instructions finish; the accumulators after it."""
      _asm(b, f"cp.async.wait_group {AHEAD - 1};", "~{memory}", [])
      _asm(b, "fence.proxy.async.shared::cta;", "~{memory}", [])
      barrier(b)
      accs = compute(kt, accs)
      nxt = b.add(kt, i64(AHEAD))
      with b.if_then(b.icmp_signed("<", nxt, i64(KTB))):
        issue(nxt)
      commit()
      _asm(b, "wgmma.wait_group.sync.aligned 1;", "~{memory}", [])
      return accs

    def products():
      """The k loop of the current tile; its accumulators once every instruction is done."""
      if rs:
        # the register operand of slice kt must stay intact until its instructions complete,
        # i.e. while slice kt + 1 is issued: two copies of the step give consecutive slices
        # different (PTX) registers
        with E.ForLoop(b, 0, KTB // 2, "kt", unroll=False) as loop:
          kt = b.mul(loop.index, i64(2))
          phis = carried(loop, zero)
          close(phis, step(b.add(kt, i64(1)), step(kt, phis)))
        accs = phis
        if KTB % 2:
          accs = step(i64(KTB - 1), accs)
      else:
        with E.ForLoop(b, 0, KTB, "kt", unroll=False) as loop:
          phis = carried(loop, zero)
          close(phis, step(loop.index, phis))
        accs = phis
      _asm(b, "wgmma.wait_group.sync.aligned 0;", "~{memory}", [])
      _asm(b, "cp.async.wait_group 0;", "~{memory}", [])
      # the accumulators pass through an empty volatile asm after the wait, so no use of them
      # can be scheduled before the instructions that write them have completed
      r = _asm(b, "", acc_cons, accs, ret=RET)
      return [b.extract_value(r, i) for i in range(nacc)]

    if persistent:
      # tiles first, first + stride, ...; the first one's leading slices were issued above
      with E.ForLoop(b, first, ntiles, "tile", step=stride, unroll=False) as tl:
        done = b.udiv(b.sub(tl.index, first), stride)
        cur = tile_of(tl.index, done)
        accs = products()
        barrier(b)                          # every warpgroup is done reading the ring
        nxt = b.add(tl.index, stride)
        nt = tile_of(nxt, b.add(done, i64(1)))
        for j in range(AHEAD):              # the next tile's first slices, while this one's
          if j < KTB:                       # results go out through the other stages
            with b.if_then(b.icmp_signed("<", nxt, i64(ntiles))):
              issue(i64(j), nt)
          commit()
        g_free = b.add(nt["g0"], i64(AHEAD))

        def row_off(r):
          # warpgroup w's 64 rows in the stage of ring slice g_free + w
          w = b.udiv(r, i64(64))
          st = b.and_(b.add(g_free, w), i64(STAGES - 1))
          return b.add(b.mul(st, i64(self.stage_bytes)), b.mul(b.urem(r, i64(64)), i64(pitch)))
        _, _, pitch = self._c_tile(self._tile_dtype(single_result(self)[0]).itemsize)
        self._store_staged(b, ptr, accs, base, tid, cur["bat"], cur["p0"], cur["q0"], wg, warp,
                           g, t4, row_off)
      return
    accs = products()
    bat, p0, q0 = cur["bat"], cur["p0"], cur["q0"]
    if part is not None:     # partial products: f32 into slab ``part`` of [S, B, M, N]
      C = ptr(self.out)
      slab = b.mul(part, i64(s.B * M * N))

      def store(v, linear, where):
        E.store_element(b, v, C, b.add(slab, linear), E.F32)
    elif self.staged_store:
      self._store_staged(b, ptr, accs, base, tid, bat, p0, q0, wg, warp, g, t4)
      return
    else:
      store = dot_writer(b, ptr, self)
    self._epilogue(b, accs, store, bat, p0, q0, wg, warp, g, t4, P % PT != 0, Qn % Q != 0)

  def _p_rows(self, b, wg, warp, g):
    """(row of the tile, offset of the second row) of a thread's accumulators d[4i + e]:
    row 16 warp + g of its warpgroup's 64 (+ 8 for e >= 2), or in the register forms, whose
    fragment rows g and g + 8 come from adjacent tile columns, 16 warp + 2g (+ 1)."""
    base = b.add(b.mul(wg, i64(64)), b.mul(warp, i64(16)))
    if self.pairs:
      return b.add(base, b.mul(g, i64(2))), 1
    return b.add(base, g), 8

  # -- the output tile through shared memory ----------------------------------------------------
  @property
  def acc_dtype(self):
    """The accumulators' dtype: int32 for 8-bit integer operands, else float32."""
    return np.dtype(np.int32) if self.kind in INT_KINDS else E.F32

  def _c_tile(self, esz: int):
    """(rows, columns) of the block's tile of C, and its row pitch in shared memory for
    values of ``esz`` bytes (the row's bytes + 16, so that the fragments' rows fall on
    different banks)."""
    rows, cols = (self.Q, self.P_TILE) if self.transposed else (self.P_TILE, self.Q)
    return rows, cols, cols * esz + 16

  @property
  def late_epilogue(self) -> bool:
    """Whether a fused epilogue is evaluated after the tile of C went through shared memory,
    in the loop over its 16-byte chunks (a few copies of the epilogue's code), rather than at
    each of a thread's Q/2 accumulators (Q/2 copies: most of the kernel's code, of the
    emitter's, LLVM's and the driver's compile time).  Off unless
    ``OURJAX_CUDA_LATE_EPILOGUE=1``: it buys compile time with run time, and run time is paid
    at every call.  On an H100 (16th session) it took the LSTM step (dots with fused epilogues
    in a 100-step scan) from 5.40 to 6.18 ms (one process per setting) and ResNet inference's
    from 1.15 to 1.22 ms (alternating calls in one process), while the 56x56x128
    convolution's first call went from 0.62 to 0.33 s."""
    from ourjax.config import _env_bool
    return self.epilogue is not None and not self.c_swapped and \
        _env_bool("OURJAX_CUDA_LATE_EPILOGUE", False)

  @property
  def c_swapped(self) -> bool:
    """Whether C (or the epilogue's output) is stored in another layout than row-major
    [B, M, N] (``c_layout``): the epilogue is then evaluated at (batch, m, n), and its result
    stored at C's position in that layout (``dots.dot_writer``)."""
    return (self.c_sb, self.c_sm) != (self.spec.M * self.spec.N, self.spec.N)

  @property
  def staged_store(self) -> bool:
    """Whether the block's tile of results goes to memory through shared memory, in 16-byte
    stores along its rows (``_store_staged``), rather than as each thread's accumulators (two
    values at a time, eight rows per warp instruction: a fraction of every 32-byte sector
    written, about a tenth of a 4096^3 bf16 product's time).  For C or a fused epilogue's one
    output of C's shape (``dots.dot_evaluator``; several outputs and partial products store
    element by element); the rows must be 16-byte aligned and the tile must fit in the
    operand ring, which is free once the products are done.  ``OURJAX_CUDA_STAGED_STORE=0``:
    never."""
    from ourjax.config import env_switch
    result = single_result(self)
    if self.S > 1 or not env_switch("OURJAX_CUDA_STAGED_STORE") or result is None:
      return False
    esz = result[0].itemsize
    rows, cols, pitch = self._c_tile(self._tile_dtype(result[0]).itemsize)
    return (all((x * esz) % 16 == 0 for x in (self.spec.N, self.c_sm, self.c_sb))
            and rows * pitch <= STAGES * self.stage_bytes)

  def _tile_dtype(self, out_dt):
    """What the shared tile of C holds: C's elements in the dot's type where the epilogue
    comes after it (``late_epilogue``), else the results (``out_dt``)."""
    return np.dtype(self.dot.dtype) if self.late_epilogue else np.dtype(out_dt)

  def _store_staged(self, b, ptr, accs, base, tid, bat, p0, q0, wg, warp, g, t4,
                    row_off=None):
    """The tile of results through shared memory (``staged_store``); ``row_off(r)``: the
    byte offset from ``base`` of the tile's row ``r`` (rows one after another by default)."""
    from ourjax.backends.cuda.dots import dot_evaluator
    s = self.spec
    M, N = s.M, s.N
    value, dt, out = dot_evaluator(b, ptr, self)
    late = self.late_epilogue
    esz = dt.itemsize
    tdt = self._tile_dtype(dt)                # the tile's element type
    acc_dt = self.acc_dtype
    rows, cols, pitch = self._c_tile(tdt.itemsize)
    m0, n0 = (q0, p0) if self.transposed else (p0, q0)
    ldc = self.c_sm
    c_base = b.add(b.mul(bat, i64(self.c_sb)), b.add(b.mul(m0, i64(ldc)), n0))
    # every warpgroup is done with the ring (its last instructions waited for): the tile over
    # it.  Each result is evaluated (through the epilogue, unless ``late``) where its
    # accumulator is and kept in the tile; the stores to memory come after every result is
    # evaluated (an output may be written over a donated input that the epilogue reads at the
    # same element; ``late``: each chunk's elements are read and written by one thread, the
    # reads first)
    barrier(b)
    tile = b.inttoptr(base, E.storage_type(tdt).as_pointer(3))
    prow, hi = self._p_rows(b, wg, warp, g)
    qcol = b.mul(t4, i64(2))
    per_row = pitch // tdt.itemsize

    def row_byte(r):
      return b.mul(r, i64(pitch)) if row_off is None else row_off(r)

    def row_at(r):      # the tile's element index of row r's first element
      return b.mul(r, i64(per_row)) if row_off is None else \
          b.udiv(row_off(r), i64(tdt.itemsize))
    for i in range(self.Q // 8):
      for e in range(4):
        p = b.add(prow, i64(hi)) if e >= 2 else prow
        q = b.add(qcol, i64(8 * i + e % 2))
        r, c = (q, p) if self.transposed else (p, q)
        v = accs[4 * i + e]
        if self.dot.dtype != acc_dt:
          v = E.convert_value(b, v, acc_dt, self.dot.dtype)
        if self.epilogue is not None and not late:
          m, n = b.add(m0, r), b.add(n0, c)
          lin = (lambda r=r, c=c: b.add(c_base, b.add(b.mul(r, i64(ldc)), c)))  # noqa: E731
          where = (bat, m, n)
          if M % rows or N % cols:
            lin = lin()
            # (outside C the epilogue's reads would pass its inputs' ends: those lanes read
            # the element at (0, 0) and their results are never stored)
            inside = b.and_(b.icmp_unsigned("<", m, i64(M)), b.icmp_unsigned("<", n, i64(N)))
            lin = b.select(inside, lin, b.mul(bat, i64(self.c_sb)))
            where = (bat, b.select(inside, m, i64(0)), b.select(inside, n, i64(0)))
          v = value(v, lin, where)
        E.store_element(b, v, tile, b.add(row_at(r), c), tdt)
    barrier(b)
    # 16-byte chunks along the tile's rows; a chunk that passes C's last column goes element
    # by element
    V = ir.VectorType(I32, 4)
    chunks = cols * esz // 16
    per = 16 // esz
    C = ptr(out)
    cbytes = b.ptrtoint(C, I64)
    total = rows * chunks
    row_edge, col_edge = M % rows != 0, N % cols != 0

    def result_at(r, col, linear, m, n):
      """Result element at the tile's (r, col) (C's (m, n), ``linear``), a compute value of
      ``dt`` (``late``: the epilogue evaluated here)."""
      w = E.load_element(b, tile, b.add(row_at(r), col), tdt)
      return value(w, linear, (bat, m, n)) if late else w

    # (a loop, not unrolled: the emitted code stays small, so does its compile time)
    with E.ForLoop(b, 0, -(-total // self.THREADS), "chunk") as loop:
      cid = b.add(tid, b.mul(loop.index, i64(self.THREADS)))
      with b.if_then(b.icmp_unsigned("<", cid, i64(total))):
        r = b.udiv(cid, i64(chunks))
        ch = b.urem(cid, i64(chunks))
        m, n = b.add(m0, r), b.add(n0, b.mul(ch, i64(per)))
        linear = b.add(c_base, b.add(b.mul(r, i64(ldc)), b.mul(ch, i64(per))))

        def whole_chunk():
          if late:
            st = E.storage_type(dt)
            vec = ir.Constant(ir.VectorType(st, per), None)
            for x in range(per):
              w = result_at(r, b.add(b.mul(ch, i64(per)), i64(x)), b.add(linear, i64(x)),
                            m, b.add(n, i64(x)))
              vec = b.insert_element(vec, E.to_storage(b, w, dt), ir.Constant(I32, x))
            val = b.bitcast(vec, V)
          else:
            src = b.add(base, b.add(row_byte(r), b.mul(ch, i64(16))))
            val = b.load(b.inttoptr(src, V.as_pointer(3)), align=16)
          dst = b.add(cbytes, b.mul(linear, i64(esz)))
          b.store(val, b.inttoptr(dst, V.as_pointer()), align=16)
        inside = (b.icmp_unsigned("<", m, i64(M)) if row_edge
                  else ir.Constant(ir.IntType(1), 1))
        if not col_edge:
          with b.if_then(inside):
            whole_chunk()
        else:
          whole = b.and_(inside, b.icmp_unsigned("<=", b.add(n, i64(per)), i64(N)))
          with b.if_else(whole) as (then, otherwise):
            with then:
              whole_chunk()
            with otherwise:
              # the chunk passing C's last column: its elements inside C one by one
              with b.if_then(inside), E.ForLoop(b, 0, per, "x") as xl:
                x = xl.index
                with b.if_then(b.icmp_unsigned("<", b.add(n, x), i64(N))):
                  w = result_at(r, b.add(b.mul(ch, i64(per)), x), b.add(linear, x), m,
                                b.add(n, x))
                  E.store_element(b, w, C, b.add(linear, x), dt)

  def _epilogue(self, b, accs, store, bat, p0, q0, wg, warp, g, t4, p_edge, q_edge):
    """Accumulator d[4i + e] sits at (p, q) = (row + 8 (e >= 2), 8i + 2t + e % 2) of the
    warpgroup's 64 x Q tile, row = 16 warp + g (``_p_rows``: in the register forms row =
    16 warp + 2g and the second row is row + 1); C[m, n] = D[p, q] (or D[q, p] transposed).
    Where the tile passes the problem's edge (``p_edge``, ``q_edge``) only elements inside it
    are stored."""
    s = self.spec
    M, N = s.M, s.N
    P, Qn = (N, M) if self.transposed else (M, N)
    acc_dt = self.acc_dtype
    out_dt = E.F32 if self.S > 1 else self.dot.dtype
    c_base = b.mul(bat, i64(self.c_sb))
    prow, hi = self._p_rows(b, wg, warp, g)
    prow = b.add(p0, prow)
    qcol = b.add(q0, b.mul(t4, i64(2)))
    for i in range(self.Q // 8):
      for e in range(4):
        p = b.add(prow, i64(hi)) if e >= 2 else prow
        q = b.add(qcol, i64(8 * i + e % 2))
        m, n = (q, p) if self.transposed else (p, q)
        v = accs[4 * i + e] if out_dt == acc_dt else E.convert_value(b, accs[4 * i + e],
                                                                     acc_dt, out_dt)
        ok = None
        if p_edge:
          ok = b.icmp_unsigned("<", p, i64(P))
        if q_edge:
          c = b.icmp_unsigned("<", q, i64(Qn))
          ok = c if ok is None else b.and_(ok, c)
        if ok is None:
          store(v, b.add(c_base, b.add(b.mul(m, i64(self.c_sm)), n)), (bat, m, n))
        else:
          with b.if_then(ok):
            store(v, b.add(c_base, b.add(b.mul(m, i64(self.c_sm)), n)), (bat, m, n))


def q_tile(q: int) -> int:
  """The tile width for ``q`` columns: 256 or 128 where it divides, else the narrowest of 256,
  128, 64, 32 that wastes at most an eighth of the tile row at the edge (the smallest that
  holds a narrow ``q`` whole)."""
  for t in (256, 128):
    if q % t == 0:
      return t
  for t in (256, 128, 64, 32):
    if q >= t and (-q) % t <= t // 8:
      return t
  return next(t for t in (32, 64, 128, 256) if t >= q) if q <= 256 else 64


def split_count(spec, how, kind: str, info: DeviceInfo) -> int:
  """Blocks per output tile along k for a dot of layout ``spec`` planned as ``how`` (what
  ``WgmmaDot.supports`` returned): enough blocks for about two per SM when the output has few
  tiles and the contraction is long (a weight gradient: M x N outputs summing over the batch
  and the image), each block keeping at least 8 k slices; a divisor of the slice count, so
  every block multiplies the same number of slices (a batched dot's tiles counted over its
  batch: a grouped convolution's weight gradient, a few tiles per group)."""
  mode, qt, wg = how
  p, q = (spec.N, spec.M) if mode in ("rs_t", "ss_t") else (spec.M, spec.N)
  tiles = spec.B * -(-p // (64 * wg)) * -(-q // qt)
  kt = -(-spec.K // (ROW // _elem_bytes(kind)))
  # (integer dots: the partial products would be f32, which does not hold int32 sums exactly)
  if 2 * tiles >= info.sm_count or kt < 16 or kind in INT_KINDS:
    return 1
  want = min(-(-2 * info.sm_count // tiles), kt // 8)
  return next((d for d in range(want, 1, -1) if kt % d == 0), 1)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
