"""GPU dot kernels: ``SimtDot`` (shared-memory tiles on the CUDA cores, split along K when
there are few output tiles), ``MmaDot`` (``mma.sync``) and ``TensorCoreDot`` (wmma-era tiles),
and ``_dot_kernels``: the choice among them and ``wgmma.WgmmaDot`` (Hopper) for one planned dot.
``codegen.translate`` calls it; the table in codegen's docstring says which kernel a dot gets.
The fused ``Epilogue`` of a dot's elementwise consumers (its planning, ``fuse_dot_epilogues``,
and where the kernels store C's elements, ``dot_writer``) is in ``dot_epilogues.py``."""
from __future__ import annotations

import copy
import os

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.codegen import (DeviceInfo, Elementwise, GpuKernel, barrier,
                                          shared_array, shared_ptr, sreg64)
# (the fused epilogue, ``dot_epilogues``: imported here for these kernels and for the
# modules and tests that read it here)
from ourjax.backends.cuda.dot_epilogues import (  # noqa: F401
    Epilogue, FusedDot, _dot_buffers, _gpu_dot_ok, dot_evaluator, dot_writer,
    fuse_dot_epilogues, single_result)
from ourjax.backends.cuda.mma_kinds import BYTE_KINDS, _tf32_allowed, mma_kind
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I32, I64, i64


class SimtDot(GpuKernel):
  """C[b] = A[b] @ B[b] over strided operand buffers: 64x64 output tiles per block of 256
  threads (4x4 outputs each), 16-deep k slices through shared memory; any sizes and strides
  (bounds are clamped and masked), float accumulation (double for f64)."""
  compile_cost = 8
  BM = BN = 64
  BK = 16

  def __init__(self, name, dot, lhs, rhs, out, spec=None, out_dtype=None):
    """``spec``: another batching of the operands than the dot's own (split-K partials);
    ``out_dtype``: the type C is written in (the dot's by default)."""
    self.dot, self.spec = dot, spec or K.DotSpec(dot)
    self.lhs, self.rhs, self.out = lhs, rhs, out
    s = self.spec
    self.acc_dt = E.accumulation_dtype(dot.operands[0].dtype, dot.operands[1].dtype, dot.dtype)
    self.out_dt = np.dtype(out_dtype or dot.dtype)
    super().__init__(name, [lhs, rhs], [out], work=s.B * s.M * s.N * s.K)

  def launch(self, info):
    s = self.spec
    return (-(-s.N // self.BN), -(-s.M // self.BM), s.B), (256, 1, 1), 0

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    if s.B * M * N == 0:
      return
    adt, bdt = self.dot.operands[0].dtype, self.dot.operands[1].dtype
    acc_dt = self.acc_dt
    cty = E.compute_type(acc_dt)
    BM, BN, BK = self.BM, self.BN, self.BK
    mod = b.module
    As = shared_array(mod, cty, BK * (BM + 1), self.name + "_As")
    Bs = shared_array(mod, cty, BK * (BN + 1), self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    tx = b.urem(tid, i64(16))
    ty = b.udiv(tid, i64(16))
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm, C = ptr(self.lhs), ptr(self.rhs), ptr(self.out)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    zero = E.const(acc_dt, 0)
    accs = [[E.alloca_entry(b, cty) for _ in range(4)] for _ in range(4)]
    for row in accs:
      for a in row:
        b.store(zero, a)

    def clamp(v, hi):
      return b.select(b.icmp_signed(">", v, i64(hi)), i64(hi), v)

    def load_tile(src, base, dt, major_fast, rows_total, cols_total, r0, s_r, s_c, dst, width,
                  k0):
      # tile of BK (k) x width (m or n) into dst[k * (width + 1) + x]
      for q in range(4):
        if major_fast:   # stride 1 along k: consecutive threads take consecutive k
          kk = b.urem(tid, i64(BK))
          xx = b.add(b.udiv(tid, i64(BK)), i64(16 * q))
        else:
          xx = b.urem(tid, i64(width))
          kk = b.add(b.udiv(tid, i64(width)), i64(4 * q))
        gx = b.add(r0, xx)
        gk = b.add(k0, kk)
        ok = b.and_(b.icmp_signed("<", gx, i64(rows_total)), b.icmp_signed("<", gk,
                                                                            i64(cols_total)))
        off = b.add(base, b.add(b.mul(clamp(gx, rows_total - 1), i64(s_r)),
                                b.mul(clamp(gk, cols_total - 1), i64(s_c))))
        v = E.convert_value(b, E.load_element(b, src, off, dt), dt, acc_dt)
        v = b.select(ok, v, zero)
        b.store(v, shared_ptr(b, dst, b.trunc(b.add(b.mul(kk, i64(width + 1)), xx), I32)))

    fl = ["contract"] if E._is_float(acc_dt) else []
    with E.ForLoop(b, 0, -(-Kd // BK), "kt") as kt:
      k0 = b.mul(kt.index, i64(BK))
      load_tile(A, a_base, adt, s.a_sk == 1, M, Kd, m0, s.a_sm, s.a_sk, As, BM, k0)
      load_tile(Bm, b_base, bdt, s.b_sk == 1 and s.b_sn != 1, N, Kd, n0, s.b_sn, s.b_sk, Bs,
                BN, k0)
      barrier(b)
      for kk in range(BK):
        av = [b.load(shared_ptr(b, As, b.trunc(b.add(i64(kk * (BM + 1) + 16 * i), ty), I32)))
              for i in range(4)]
        bv = [b.load(shared_ptr(b, Bs, b.trunc(b.add(i64(kk * (BN + 1) + 16 * j), tx), I32)))
              for j in range(4)]
        for i in range(4):
          for j in range(4):
            a = accs[i][j]
            if E._is_float(acc_dt):
              b.store(b.fadd(b.load(a), b.fmul(av[i], bv[j], flags=fl), flags=fl), a)
            else:
              b.store(b.add(b.load(a), b.mul(av[i], bv[j])), a)
      barrier(b)
    c_base = b.mul(bat, i64(M * N))
    for i in range(4):
      gm = b.add(m0, b.add(ty, i64(16 * i)))
      for j in range(4):
        gn = b.add(n0, b.add(tx, i64(16 * j)))
        ok = b.and_(b.icmp_signed("<", gm, i64(M)), b.icmp_signed("<", gn, i64(N)))
        with b.if_then(ok):
          v = E.convert_value(b, b.load(accs[i][j]), acc_dt, self.out_dt)
          E.store_element(b, v, C, b.add(c_base, b.add(b.mul(gm, i64(N)), gn)), self.out_dt)


SPLIT_K_MIN = 256         # shortest contraction split into partial products
SPLIT_K_CHUNK = 64        # shortest contraction of one partial product


def _split_k(dot, info: DeviceInfo):
  """(S, spec of S partial products over K/S each) for a dot with too few 64x64 output tiles
  to fill the GPU and a long enough contraction (a convolution's weight gradient: 288x64
  outputs of 25088 products each; a classifier layer's 1024x10 outputs of 512 products, 16
  blocks that each ran a K loop of 32 shared-memory steps, 32 us on an H100), else None.
  S divides K."""
  s = K.DotSpec(dot)
  if not s.ok or s.B != 1 or not E._is_float(dot.dtype) or s.K < SPLIT_K_MIN:
    return None
  tiles = -(-s.M // SimtDot.BM) * -(-s.N // SimtDot.BN)
  if 2 * tiles >= info.sm_count:
    return None
  want = min(-(-2 * info.sm_count // tiles), s.K // SPLIT_K_CHUNK)
  S = next((d for d in range(want, 1, -1) if s.K % d == 0), None)
  if S is None:
    return None
  staged = copy.copy(s)
  staged.B, staged.K = S, s.K // S
  staged.a_sb, staged.b_sb = staged.K * s.a_sk, staged.K * s.b_sk
  return S, staged


class SplitKSum(GpuKernel):
  """C = the sum of ``S`` partial products (``parts``: [S, B, M, N] in the accumulation type),
  converted to the dot's type and stored through ``dot_writer`` (so a fused epilogue applies
  here): one thread per element of C, the partials read coalesced."""
  BLOCK = 256

  def __init__(self, name, dot, parts, out, S, epilogue=None):
    self.dot, self.parts, self.out, self.S, self.epilogue = dot, parts, out, S, epilogue
    self.spec = K.DotSpec(dot)
    self.nout = self.spec.B * self.spec.M * self.spec.N
    reads, writes = _dot_buffers(parts, parts, out, epilogue)
    super().__init__(name, reads, writes, work=self.nout * S)

  def launch(self, info):
    return (max(1, -(-self.nout // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.nout == 0:
      return
    acc_dt = np.dtype(self.parts.dtype)
    store = dot_writer(b, ptr, self)
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      P = ptr(self.parts)
      acc = E.alloca_entry(b, E.compute_type(acc_dt))
      b.store(E.const(acc_dt, 0), acc)
      with E.ForLoop(b, 0, self.S, "s") as sl:
        x = E.load_element(b, P, b.add(b.mul(sl.index, i64(self.nout)), o), acc_dt)
        b.store(b.fadd(b.load(acc), x), acc)
      v = E.convert_value(b, b.load(acc), acc_dt, self.dot.dtype)
      M, N = self.spec.M, self.spec.N
      mn = b.urem(o, i64(M * N))
      store(v, o, (b.udiv(o, i64(M * N)), b.udiv(mn, i64(N)), b.urem(mn, i64(N))))


class TensorCoreDot(GpuKernel):
  """C[b] = A[b] @ B[b] on the tensor cores (``mma.sync``, f32 accumulation): 128x128 block
  tiles, 8 warps of 64x32, k slices of 32 through padded (bank-conflict-free) shared memory,
  the next slice loaded into registers (16-byte vector loads) while the current one is
  multiplied.  f32 operands are rounded to tf32 (``cvt.rna``) as they enter shared memory;
  bf16/f16 use m16n8k16.  Needs M, N % 128 == 0, K % 32 == 0 and unit stride along k or along
  m (A) / n (B)."""
  compile_cost = 32
  BM = BN = 128
  BK = 32
  WM, WN = 64, 32       # warp tile
  THREADS = 256

  def __init__(self, name, dot, lhs, rhs, out, kind: str, epilogue=None):
    self.dot, self.spec, self.kind = dot, K.DotSpec(dot), kind   # kind: tf32 | bf16 | f16
    self.lhs, self.rhs, self.out, self.epilogue = lhs, rhs, out, epilogue
    s = self.spec
    super().__init__(name, *_dot_buffers(lhs, rhs, out, epilogue), work=s.B * s.M * s.N * s.K)

  @classmethod
  def fits(cls, dot) -> bool:
    """Whether this kernel's tiles divide ``dot`` and its operands' layouts suit it."""
    s = K.DotSpec(dot)
    if not s.ok:
      return False
    dt = dot.operands[0].dtype
    if s.M % cls.BM or s.N % cls.BN or s.K % cls.BK or s.K == 0:
      return False
    if not (s.a_sk == 1 or s.a_sm == 1) or not (s.b_sn == 1 or s.b_sk == 1):
      return False
    per_vec = 16 // dt.itemsize          # 16-byte accesses need every stride to keep alignment
    strides = [s.a_sm if s.a_sk == 1 else s.a_sk, s.b_sk if s.b_sn == 1 else s.b_sn]
    if s.B > 1:
      strides += [s.a_sb, s.b_sb]
    return not any(x % per_vec for x in strides)

  def launch(self, info):
    s = self.spec
    return (s.N // self.BN, s.M // self.BM, s.B), (self.THREADS, 1, 1), 0

  # -- helpers ---------------------------------------------------------------------------------
  def _mma(self, b, afr, bfr, acc):
    F = ir.FloatType()
    shape = "m16n8k8" if self.kind == "tf32" else "m16n8k16"
    ty = {"tf32": "tf32", "bf16": "bf16", "f16": "f16"}[self.kind]
    asm = (f"mma.sync.aligned.{shape}.row.col.f32.{ty}.{ty}.f32 "
           "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
    fty = ir.FunctionType(ir.LiteralStructType([F] * 4), [I32] * 6 + [F] * 4)
    call = b.asm(fty, asm, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", list(afr) + list(bfr) + list(acc),
                 side_effect=False)
    return [b.extract_value(call, i) for i in range(4)]

  def _tf32(self, b, x):
    fty = ir.FunctionType(I32, [ir.FloatType()])
    return b.asm(fty, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False)

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    BM, BN, BK, T = self.BM, self.BN, self.BK, self.THREADS
    narrow = self.kind != "tf32"
    mod = b.module
    # shared tiles: 32-bit words (tf32) or 16-bit halves (bf16/f16), padded rows
    if narrow:
      ety, ldk = E.I16, BK + 8          # A: [m][k], B: [n][k]   (k contiguous, 80-byte rows)
      As = shared_array(mod, ety, BM * ldk, self.name + "_As")
      Bs = shared_array(mod, ety, BN * ldk, self.name + "_Bs")
    else:
      ety = I32
      lda, ldb = BK + 4, BN + 8         # A: [m][k], B: [k][n]
      As = shared_array(mod, ety, BM * lda, self.name + "_As")
      Bs = shared_array(mod, ety, BK * ldb, self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    lane = b.urem(tid, i64(32))
    warp = b.udiv(tid, i64(32))
    wm = b.udiv(warp, i64(BN // self.WN))       # 0..1
    wn = b.urem(warp, i64(BN // self.WN))       # 0..3
    g = b.udiv(lane, i64(4))
    t4 = b.urem(lane, i64(4))
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm = ptr(self.lhs), ptr(self.rhs)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    edt = self.dot.operands[0].dtype
    sty = E.storage_type(edt)
    per_vec = 16 // edt.itemsize                # elements per 16-byte vector
    vty = ir.VectorType(sty, per_vec)
    nvec_a = BM * BK // per_vec // T            # vectors per thread per tile
    nvec_b = BN * BK // per_vec // T
    F = ir.FloatType()
    zero = ir.Constant(F, 0.0)
    MI, NI = self.WM // 16, self.WN // 8
    accs = [[[E.alloca_entry(b, F) for _ in range(4)] for _ in range(NI)] for _ in range(MI)]
    for row in accs:
      for c in row:
        for a in c:
          b.store(zero, a)
    regs_a = [E.alloca_entry(b, vty) for _ in range(nvec_a)]
    regs_b = [E.alloca_entry(b, vty) for _ in range(nvec_b)]

    # which (row, col) of the tile vector q of this thread covers, per operand layout
    def a_coords(q):
      v = b.add(tid, i64(q * T))
      if s.a_sk == 1:     # vectors along k
        per_row = BK // per_vec
        return b.udiv(v, i64(per_row)), b.mul(b.urem(v, i64(per_row)), i64(per_vec)), True
      per_row = BM // per_vec   # vectors along m
      return b.mul(b.urem(v, i64(per_row)), i64(per_vec)), b.udiv(v, i64(per_row)), False

    def b_coords(q):
      v = b.add(tid, i64(q * T))
      if s.b_sn == 1:     # vectors along n
        per_row = BN // per_vec
        return b.mul(b.urem(v, i64(per_row)), i64(per_vec)), b.udiv(v, i64(per_row)), True
      per_row = BK // per_vec   # vectors along k
      return b.udiv(v, i64(per_row)), b.mul(b.urem(v, i64(per_row)), i64(per_vec)), False

    def vload(base_ptr, off):
      p = b.gep(base_ptr, [off], inbounds=True)
      return b.load(b.bitcast(p, vty.as_pointer()), align=16)

    def load_global(k0):
      for q in range(nvec_a):
        mm, kk, _ = a_coords(q)
        off = b.add(a_base, b.add(b.mul(b.add(m0, mm), i64(s.a_sm)),
                                  b.mul(b.add(k0, kk), i64(s.a_sk))))
        b.store(vload(A, off), regs_a[q])
      for q in range(nvec_b):
        nn, kk, _ = b_coords(q)
        off = b.add(b_base, b.add(b.mul(b.add(n0, nn), i64(s.b_sn)),
                                  b.mul(b.add(k0, kk), i64(s.b_sk))))
        b.store(vload(Bm, off), regs_b[q])

    def to_word(x):
      if narrow:
        return x                       # i16 storage bits
      return self._tf32(b, x)          # f32 -> tf32 bits (i32)

    def sidx(v):
      return b.trunc(v, I32)

    def store_shared():
      for q in range(nvec_a):
        mm, kk, along_k = a_coords(q)
        vec = b.load(regs_a[q])
        for e in range(per_vec):
          x = b.extract_element(vec, ir.Constant(I32, e))
          m_e, k_e = (mm, b.add(kk, i64(e))) if along_k else (b.add(mm, i64(e)), kk)
          pos = b.add(b.mul(m_e, i64(ldk if narrow else lda)), k_e)
          b.store(to_word(x), shared_ptr(b, As, sidx(pos)))
      for q in range(nvec_b):
        nn, kk, along_n = b_coords(q)
        vec = b.load(regs_b[q])
        for e in range(per_vec):
          x = b.extract_element(vec, ir.Constant(I32, e))
          n_e, k_e = (b.add(nn, i64(e)), kk) if along_n else (nn, b.add(kk, i64(e)))
          if narrow:
            pos = b.add(b.mul(n_e, i64(ldk)), k_e)
          else:
            pos = b.add(b.mul(k_e, i64(ldb)), n_e)
          b.store(to_word(x), shared_ptr(b, Bs, sidx(pos)))

    def load_pair(arr, pos):
      """Two consecutive 16-bit elements at even ``pos`` as one i32."""
      p = shared_ptr(b, arr, sidx(pos))
      return b.load(b.bitcast(p, ir.PointerType(I32, addrspace=3)), align=4)

    def compute():
      kstep = 8 if not narrow else 16
      for ks in range(BK // kstep):
        kb = ks * kstep
        afr = []
        for mi in range(MI):
          r0 = b.add(b.add(b.mul(wm, i64(self.WM)), i64(mi * 16)), g)
          r1 = b.add(r0, i64(8))
          if narrow:
            c0 = b.add(i64(kb), b.mul(t4, i64(2)))
            c1 = b.add(c0, i64(8))
            afr.append([load_pair(As, b.add(b.mul(r, i64(ldk)), c))
                        for r, c in ((r0, c0), (r1, c0), (r0, c1), (r1, c1))])
          else:
            c0 = b.add(i64(kb), t4)
            c1 = b.add(c0, i64(4))
            afr.append([b.load(shared_ptr(b, As, sidx(b.add(b.mul(r, i64(lda)), c))))
                        for r, c in ((r0, c0), (r1, c0), (r0, c1), (r1, c1))])
        bfr = []
        for ni in range(NI):
          col = b.add(b.add(b.mul(wn, i64(self.WN)), i64(ni * 8)), g)
          if narrow:
            k0_ = b.add(i64(kb), b.mul(t4, i64(2)))
            bfr.append([load_pair(Bs, b.add(b.mul(col, i64(ldk)), k0_)),
                        load_pair(Bs, b.add(b.mul(col, i64(ldk)), b.add(k0_, i64(8))))])
          else:
            k0_ = b.add(i64(kb), t4)
            bfr.append([b.load(shared_ptr(b, Bs, sidx(b.add(b.mul(k0_, i64(ldb)), col)))),
                        b.load(shared_ptr(b, Bs, sidx(b.add(b.mul(b.add(k0_, i64(4)),
                                                                  i64(ldb)), col))))])
        for mi in range(MI):
          for ni in range(NI):
            cur = [b.load(a) for a in accs[mi][ni]]
            new = self._mma(b, afr[mi], bfr[ni], cur)
            for a, v in zip(accs[mi][ni], new):
              b.store(v, a)

    KT = Kd // BK
    load_global(i64(0))
    store_shared()
    barrier(b)
    with E.ForLoop(b, 0, KT, "kt") as kt:
      more = b.icmp_signed("<", b.add(kt.index, i64(1)), i64(KT))
      with b.if_then(more):
        load_global(b.mul(b.add(kt.index, i64(1)), i64(BK)))
      compute()
      barrier(b)
      with b.if_then(more):
        store_shared()
      barrier(b)
    _store_mma_accumulators(b, accs, dot_writer(b, ptr, self), self.dot.dtype, bat=bat, M=M,
                            N=N, m0=m0, n0=n0, wm=wm, wn=wn, WM=self.WM, WN=self.WN, g=g,
                            t4=t4, MI=MI, NI=NI)


def _store_mma_accumulators(b, accs, store, out_dt, *, bat, M, N, m0, n0, wm, wn, WM, WN, g,
                            t4, MI, NI):
  """The epilogue of both tensor-core kernels: a warp's f32 accumulators, converted to the
  result type, to ``store`` (``dot_writer``).  In each 16x8 tile, c0,c1 sit at (g, 2t..2t+1)
  and c2,c3 at (g+8, 2t..2t+1)."""
  c_base = b.mul(bat, i64(M * N))
  for mi in range(MI):
    for ni in range(NI):
      r0 = b.add(m0, b.add(b.add(b.mul(wm, i64(WM)), i64(mi * 16)), g))
      col = b.add(n0, b.add(b.add(b.mul(wn, i64(WN)), i64(ni * 8)), b.mul(t4, i64(2))))
      for h in range(2):
        row = b.add(r0, i64(8 * h)) if h else r0
        base = b.add(c_base, b.add(b.mul(row, i64(N)), col))
        for e in range(2):
          v = E.convert_value(b, b.load(accs[mi][ni][2 * h + e]), E.F32, out_dt)
          store(v, b.add(base, i64(e)) if e else base,
                (bat, row, b.add(col, i64(e)) if e else col))


def _asm(b, text, constraints, args, ret=None, side_effect=True):
  fty = ir.FunctionType(ret or ir.VoidType(), [a.type for a in args])
  return b.asm(fty, text, constraints, list(args), side_effect=side_effect)


def _saddr(b, p):
  """The .shared-space address (i64) of an addrspace(3) pointer."""
  return b.ptrtoint(p, I64)


class MmaDot(GpuKernel):
  """C[b] = A[b] @ B[b] on the tensor cores (``mma.sync``, f32 accumulation), second version:
  128x128 block tiles, 8 warps of 64x32; k slices (32 deep for bf16/f16, 16 for tf32) are
  copied global -> shared with ``cp.async`` (16 bytes each, no registers) into two stages, the
  next slice in flight while the current one is multiplied.  Shared tiles keep each operand's
  contiguous dimension (rows padded by 16 bytes: conflict-free), and fragments are read with
  ``ldmatrix`` (``.trans`` where the tile is stored the other way round; plain 32-bit loads for
  the tf32 tiles ldmatrix cannot transpose).  f32 fragments are rounded to tf32 (``cvt.rna``).
  Same conditions as ``TensorCoreDot``."""
  compile_cost = 48
  BM = BN = 128
  WM, WN = 64, 32
  THREADS = 256

  def __init__(self, name, dot, lhs, rhs, out, kind: str, epilogue=None):
    self.dot, self.spec, self.kind = dot, K.DotSpec(dot), kind
    self.lhs, self.rhs, self.out, self.epilogue = lhs, rhs, out, epilogue
    self.BK = 16 if kind == "tf32" else 32
    s = self.spec
    super().__init__(name, *_dot_buffers(lhs, rhs, out, epilogue), work=s.B * s.M * s.N * s.K)

  def launch(self, info):
    s = self.spec
    return (s.N // self.BN, s.M // self.BM, s.B), (self.THREADS, 1, 1), 0

  def gpu_body(self, b, ptr):
    s = self.spec
    M, N, Kd = s.M, s.N, s.K
    BM, BN, BK, T = self.BM, self.BN, self.BK, self.THREADS
    tf32 = self.kind == "tf32"
    edt = self.dot.operands[0].dtype
    esz = edt.itemsize
    epv = 16 // esz                       # elements per 16-byte chunk
    ety = I32 if tf32 else E.I16
    a_kmaj = s.a_sk == 1                  # A tile stored [m][k] (else [k][m])
    b_nmaj = s.b_sn == 1                  # B tile stored [k][n] (else [n][k])
    pad_k = 4 if tf32 else 8
    # (rows, row length) of each stage's tiles
    a_rows, a_ld = (BM, BK + pad_k) if a_kmaj else (BK, BM + 8)
    b_rows, b_ld = (BK, BN + 8) if b_nmaj else (BN, BK + pad_k)
    a_stage, b_stage = a_rows * a_ld, b_rows * b_ld
    mod = b.module
    As = shared_array(mod, ety, 2 * a_stage, self.name + "_As")
    Bs = shared_array(mod, ety, 2 * b_stage, self.name + "_Bs")
    tid = sreg64(b, "tid.x")
    lane = b.urem(tid, i64(32))
    warp = b.udiv(tid, i64(32))
    wm = b.udiv(warp, i64(BN // self.WN))
    wn = b.urem(warp, i64(BN // self.WN))
    g = b.udiv(lane, i64(4))
    t4 = b.urem(lane, i64(4))
    li = b.udiv(lane, i64(8))             # which 8x8 matrix this lane addresses in ldmatrix
    lr = b.urem(lane, i64(8))             # which row of it
    n0 = b.mul(sreg64(b, "ctaid.x"), i64(BN))
    m0 = b.mul(sreg64(b, "ctaid.y"), i64(BM))
    bat = sreg64(b, "ctaid.z")
    A, Bm = ptr(self.lhs), ptr(self.rhs)
    a_base = b.mul(bat, i64(s.a_sb))
    b_base = b.mul(bat, i64(s.b_sb))
    F = ir.FloatType()
    MI, NI = self.WM // 16, self.WN // 8
    accs = [[[E.alloca_entry(b, F) for _ in range(4)] for _ in range(NI)] for _ in range(MI)]
    for row in accs:
      for c in row:
        for a in c:
          b.store(ir.Constant(F, 0.0), a)

    def sp(arr, idx):
      return shared_ptr(b, arr, b.trunc(idx, I32))

    def gaddr(base_ptr, off):
      return b.ptrtoint(b.gep(base_ptr, [off], inbounds=True), I64)

    def copy16(dst_ptr, src_addr):
      _asm(b, "{ .reg .u64 g; cvta.to.global.u64 g, $1; cp.async.cg.shared.global [$0], [g], 16; }",
           "l,l,~{memory}", [_saddr(b, dst_ptr), src_addr])

    def issue(stage, k0):
      """This thread's 16-byte chunks of the A and B slices at k0 into ``stage``."""
      a_off = b.mul(stage, i64(a_stage))
      b_off = b.mul(stage, i64(b_stage))
      a_chunks_row = (BK if a_kmaj else BM) // epv
      b_chunks_row = (BN if b_nmaj else BK) // epv
      for q in range(a_rows * a_chunks_row // T):
        c = b.add(tid, i64(q * T))
        r = b.udiv(c, i64(a_chunks_row))
        e = b.mul(b.urem(c, i64(a_chunks_row)), i64(epv))
        if a_kmaj:   # r = m, e = k
          src = b.add(a_base, b.add(b.mul(b.add(m0, r), i64(s.a_sm)), b.add(k0, e)))
        else:        # r = k, e = m
          src = b.add(a_base, b.add(b.mul(b.add(k0, r), i64(s.a_sk)), b.add(m0, e)))
        copy16(sp(As, b.add(a_off, b.add(b.mul(r, i64(a_ld)), e))), gaddr(A, src))
      for q in range(b_rows * b_chunks_row // T):
        c = b.add(tid, i64(q * T))
        r = b.udiv(c, i64(b_chunks_row))
        e = b.mul(b.urem(c, i64(b_chunks_row)), i64(epv))
        if b_nmaj:   # r = k, e = n
          src = b.add(b_base, b.add(b.mul(b.add(k0, r), i64(s.b_sk)), b.add(n0, e)))
        else:        # r = n, e = k
          src = b.add(b_base, b.add(b.mul(b.add(n0, r), i64(s.b_sn)), b.add(k0, e)))
        copy16(sp(Bs, b.add(b_off, b.add(b.mul(r, i64(b_ld)), e))), gaddr(Bm, src))
      _asm(b, "cp.async.commit_group;", "~{memory}", [])

    R4 = ir.LiteralStructType([I32] * 4)

    def ldmatrix(p, trans):
      op = "ldmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16"
      r = _asm(b, op + " {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,l,~{memory}",
               [_saddr(b, p)], ret=R4)
      return [b.extract_value(r, i) for i in range(4)]

    def rna(w):
      if not tf32:
        return w
      return _asm(b, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [b.bitcast(w, F)], ret=I32,
                  side_effect=False)

    def compute(stage):
      a_off = b.mul(stage, i64(a_stage))
      b_off = b.mul(stage, i64(b_stage))
      kstep = 8 if tf32 else 16
      for ks in range(BK // kstep):
        kb = ks * kstep
        afr = []
        for mi in range(MI):
          mbase = b.add(b.mul(wm, i64(self.WM)), i64(mi * 16))
          if tf32 and not a_kmaj:     # [k][m] words: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3
            regs = []
            for dm, dk in ((0, 0), (8, 0), (0, 4), (8, 4)):
              pos = b.add(b.mul(b.add(i64(kb + dk), t4), i64(a_ld)),
                          b.add(mbase, b.add(g, i64(dm))))
              regs.append(b.load(sp(As, b.add(a_off, pos))))
          elif a_kmaj:                  # [m][k]: plain ldmatrix
            m = b.add(mbase, b.add(b.mul(b.urem(li, i64(2)), i64(8)), lr))
            k = b.add(i64(kb), b.mul(b.udiv(li, i64(2)), i64(4 if tf32 else 8)))
            regs = ldmatrix(sp(As, b.add(a_off, b.add(b.mul(m, i64(a_ld)), k))), False)
          else:                         # [k][m] halves: ldmatrix.trans
            k = b.add(i64(kb), b.add(b.mul(b.udiv(li, i64(2)), i64(8)), lr))
            m = b.add(mbase, b.mul(b.urem(li, i64(2)), i64(8)))
            regs = ldmatrix(sp(As, b.add(a_off, b.add(b.mul(k, i64(a_ld)), m))), True)
          afr.append([rna(x) for x in regs])
        bfr = []
        for nj in range(0, NI, 2):      # two n8 tiles per step
          nbase = b.add(b.mul(wn, i64(self.WN)), i64(nj * 8))
          if tf32 and b_nmaj:           # [k][n] words: b0 (k t, n g), b1 (k t+4, n g)
            for d in (0, 8):
              col = b.add(nbase, b.add(g, i64(d)))
              pair = []
              for dk in (0, 4):
                pos = b.add(b.mul(b.add(i64(kb + dk), t4), i64(b_ld)), col)
                pair.append(rna(b.load(sp(Bs, b.add(b_off, pos)))))
              bfr.append(pair)
            continue
          if b_nmaj:                    # [k][n] halves: ldmatrix.trans
            k = b.add(i64(kb), b.add(b.mul(b.urem(li, i64(2)), i64(8)), lr))
            n = b.add(nbase, b.mul(b.udiv(li, i64(2)), i64(8)))
            regs = ldmatrix(sp(Bs, b.add(b_off, b.add(b.mul(k, i64(b_ld)), n))), True)
          else:                         # [n][k]: plain ldmatrix
            n = b.add(nbase, b.add(b.mul(b.udiv(li, i64(2)), i64(8)), lr))
            k = b.add(i64(kb), b.mul(b.urem(li, i64(2)), i64(4 if tf32 else 8)))
            regs = ldmatrix(sp(Bs, b.add(b_off, b.add(b.mul(n, i64(b_ld)), k))), False)
          regs = [rna(x) for x in regs]
          bfr.append([regs[0], regs[1]])
          bfr.append([regs[2], regs[3]])
        for mi in range(MI):
          for ni in range(NI):
            cur = [b.load(a) for a in accs[mi][ni]]
            new = _mma(b, self.kind, afr[mi], bfr[ni], cur)
            for a, v in zip(accs[mi][ni], new):
              b.store(v, a)

    KT = Kd // BK
    issue(i64(0), i64(0))
    with E.ForLoop(b, 0, KT, "kt") as kt:
      nxt = b.add(kt.index, i64(1))
      with b.if_then(b.icmp_signed("<", nxt, i64(KT))):
        issue(b.and_(nxt, i64(1)), b.mul(nxt, i64(BK)))
      with b.if_then(b.icmp_signed(">=", nxt, i64(KT))):
        _asm(b, "cp.async.commit_group;", "~{memory}", [])
      _asm(b, "cp.async.wait_group 1;", "~{memory}", [])
      barrier(b)
      compute(b.and_(kt.index, i64(1)))
      barrier(b)
    _asm(b, "cp.async.wait_group 0;", "~{memory}", [])
    _store_mma_accumulators(b, accs, dot_writer(b, ptr, self), self.dot.dtype, bat=bat, M=M,
                            N=N, m0=m0, n0=n0, wm=wm, wn=wn, WM=self.WM, WN=self.WN, g=g,
                            t4=t4, MI=MI, NI=NI)


def _mma(b, kind, afr, bfr, acc):
  F = ir.FloatType()
  shape = "m16n8k8" if kind == "tf32" else "m16n8k16"
  asm = (f"mma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32 "
         "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
  fty = ir.FunctionType(ir.LiteralStructType([F] * 4), [I32] * 6 + [F] * 4)
  call = b.asm(fty, asm, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", list(afr) + list(bfr) + list(acc),
               side_effect=False)
  return [b.extract_value(call, i) for i in range(4)]



def _dot_kernels(name, dot, lhs, rhs, out, info: DeviceInfo, new_temp, epilogue=None) -> list:
  """The kernels computing ``dot`` into ``out`` (or, with a fused ``Epilogue``, its outputs).

  Tensor-core dots use ``WgmmaDot`` (wgmma.py, Hopper) wherever its operand layouts fit, at any
  sizes (``_wgmma_kernels``); elsewhere ``MmaDot`` where its tiles divide the problem.
  ``OURJAX_CUDA_MMA=v2`` keeps them on MmaDot, ``v1`` on ``TensorCoreDot``.  Other dots use
  ``SimtDot``, which has no epilogue: its epilogue becomes an elementwise kernel reading C; a
  SimtDot with too few output tiles for the GPU and a long contraction is split along K
  (``_split_k``: partial products, then ``SplitKSum``, which applies the epilogue)."""
  from ourjax.backends.cuda.implicit_gemm import Im2colBuf
  kind = mma_kind(dot, info, _tf32_allowed(dot))
  choice = os.environ.get("OURJAX_CUDA_MMA", "wgmma")
  if kind is not None and choice == "wgmma":
    ks = _wgmma_kernels(name, dot, lhs, rhs, out, kind, info, new_temp, epilogue)
    if ks is not None:
      return ks
  if isinstance(lhs, Im2colBuf):     # (implicit_gemm.accepts promised a WgmmaDot)
    raise K.PlanError(f"%{dot.name}: no WgmmaDot for a patch matrix read in place")
  if kind in BYTE_KINDS:             # (only WgmmaDot multiplies 8-bit types on the tensor cores)
    kind = None
  main = None
  if kind is not None and TensorCoreDot.fits(dot):
    if choice == "v1":
      main = TensorCoreDot(name, dot, lhs, rhs, out, kind, epilogue)
    else:
      main = MmaDot(name, dot, lhs, rhs, out, kind, epilogue)
  else:
    split = _split_k(dot, info)
    if split is not None:
      S, staged = split
      acc_dt = E.accumulation_dtype(dot.operands[0].dtype, dot.operands[1].dtype, dot.dtype)
      parts = new_temp(acc_dt, (S, staged.M, staged.N), f"{name}.k_parts")
      return [SimtDot(name + "_p", dot, lhs, rhs, parts, spec=staged, out_dtype=acc_dt),
              SplitKSum(name, dot, parts, out, S, epilogue)]
    main = SimtDot(name, dot, lhs, rhs, out)
  post = []
  if epilogue is not None and getattr(main, "epilogue", None) is None:
    post = [Elementwise(name + "_e", dot.dims, epilogue.outputs,
                        {**epilogue.leafmap, dot: out})]
  return [main] + post


def _k_major(spec, s, which: int):
  """``spec`` with operand ``which`` (0: A, 1: B) read from a K-major copy of it (``s``: the
  dot's own layout)."""
  staged = copy.copy(spec)
  if which == 0:
    staged.a_sb, staged.a_sm, staged.a_sk = s.M * s.K, s.K, 1
  else:
    staged.b_sb, staged.b_sk, staged.b_sn = s.N * s.K, 1, s.K
  return staged


def _k_major_copy(name, s, which: int, buf, new_temp):
  """(the K-major copy of operand ``which`` (0: A in ``buf``, 1: B), the ``StridedTranspose``
  that makes it): [B, M, K] or [B, N, K], read along the operand's unit stride."""
  from ourjax.backends.cuda.transpose import StridedTranspose
  if which == 0:
    dst = new_temp(buf.dtype, (s.B, s.M, s.K), f"{name}.lhs_k_major")
    return dst, StridedTranspose(name + "_t", buf, dst, s.B, s.M, s.K, s.a_sb, s.a_sk)
  dst = new_temp(buf.dtype, (s.B, s.N, s.K), f"{name}.rhs_k_major")
  return dst, StridedTranspose(name + "_tb", buf, dst, s.B, s.N, s.K, s.b_sb, s.b_sk)


def narrow_b_form(spec, how) -> str:
  """How a tf32 dot that ``WgmmaDot.supports`` as ``how`` = ("rs_t", Q, warpgroups) -- B stored
  N-major, so the transposed register form -- runs instead: ``"rs_t"`` (as it is), ``"ss"`` or
  ``"ss_t"`` (B copied K-major first by a ``StridedTranspose``, then a shared-memory form:
  A's rows by B's, or B's rows by A's written transposed).

  The cost model.  At run time the register form loads and rounds its operand fragment by
  fragment in every k step (H100, the 28x28x256 convolution: 0.384 ms against 0.297 for the
  copy and the shared-memory form of the same 128 x 256 tile), while the copy costs a pass
  over B; at compile time the register form is the largest kernel the driver's JIT compiles
  (ptxas -arch=sm_90a: 0.36 s against 0.14 for the 256-wide shared-memory form and 0.06 for
  the 128-wide one).  So B is copied where it is at most 1/32 of A (the copy at most ~3% of
  the traffic of A; a convolution's weights against its patch matrix: 1/49 to 1/1568 in
  benchmarks/models.py, where a transformer's weights are 1/8 to 1/16 of its activations and
  keep the register form) and the product has one matrix (a batch would copy B per matrix):
  ``"ss"`` where B is wide enough for the 256-wide tile along n (``q_tile``), else ``"ss_t"``,
  which keeps the register form's tile (128 values of n by 256 of m; ``"ss"`` would give 128 x
  128 tiles, 0.398 against 0.380 ms at 56x56x128).  A B of 64 columns or fewer (one
  warpgroup's rows in the register form) with many rows of A goes to ``"ss"`` whatever its
  size: its 128-row X operand of two warpgroups and a narrow Y tile beat the one-warpgroup
  blocks.  ``OURJAX_CUDA_WGMMA_COPY_B``: ``0`` keeps the register form (but for that last
  case), ``1`` copies B for ``"ss"`` wherever B is at most an eighth of A (the 15th session's
  switch), ``auto`` (the default) as above."""
  from ourjax.backends.cuda.wgmma import q_tile
  _, _, wg = how
  if wg == 1 and spec.M >= 16 * 64:
    return "ss"
  mode = os.environ.get("OURJAX_CUDA_WGMMA_COPY_B", "auto").strip().lower()
  if spec.B != 1 or mode in ("0", "off", "no", "false"):
    return "rs_t"
  if mode in ("1", "on", "yes", "true"):
    return "ss" if 8 * spec.N <= spec.M else "rs_t"
  if 32 * spec.N > spec.M:
    return "rs_t"
  return "ss" if q_tile(spec.N) == 256 else "ss_t"


def _wgmma_kernels(name, dot, lhs, rhs, out, kind, info, new_temp, epilogue):
  """``WgmmaDot`` for ``dot`` (None where its layouts do not fit): where A is stored M-major
  and B N-major (``x.T @ dy``, every weight gradient) the smaller of the two is first copied
  K-major by a ``StridedTranspose`` (one pass over it; wgmma then runs at about twice MmaDot's
  rate; an M-major f32 A with a K-major B needs no copy); 8-bit operands not stored K-major are
  copied so (they have no transposed form); a dot with few output tiles and a long contraction
  is split along k (``wgmma.split_count``) into partial products that ``SplitKSum`` adds up
  (and applies the epilogue to).  (8-bit operands: int8/uint8 and float8.)"""
  from ourjax.backends.cuda.wgmma import WgmmaDot, split_count
  s = K.DotSpec(dot)
  spec, a, pre = s, lhs, []
  how = WgmmaDot.supports(dot, info, kind)
  if how is None and kind in BYTE_KINDS and s.ok:
    if (s.a_sk != 1 and s.a_sm != 1) or (s.b_sk != 1 and s.b_sn != 1):
      return None
    if s.a_sk != 1:
      spec = _k_major(spec, s, 0)
      a, k = _k_major_copy(name, s, 0, lhs, new_temp)
      pre.append(k)
    if s.b_sk != 1:
      spec = _k_major(spec, s, 1)
      rhs, k = _k_major_copy(name, s, 1, rhs, new_temp)
      pre.append(k)
    how = WgmmaDot.supports(dot, info, kind, spec)
    if how is None:
      return None
  elif how is None and s.ok and s.a_sm == 1 and s.a_sk != 1 and s.M > 1:
    # both operands stored k-outermost (a weight gradient): the smaller is copied K-major,
    # A (then B is the transposed form's register operand) or, for tf32, B (then A is)
    staged = _k_major(s, s, 0)
    options = [(s.M, 0, staged, WgmmaDot.supports(dot, info, kind, staged))]
    if s.b_sn == 1 and s.b_sk != 1 and s.N > 1:
      staged = _k_major(s, s, 1)
      options.append((s.N, 1, staged, WgmmaDot.supports(dot, info, kind, staged)))
    options = [o for o in options if o[3] is not None]
    if options:
      _, which, spec, how = min(options, key=lambda o: o[:2])
      copied, k = _k_major_copy(name, s, which, lhs if which == 0 else rhs, new_temp)
      pre = [k]
      if which == 0:
        a = copied
      else:
        rhs = copied
  form = "rs_t"
  if how is not None and how[0] == "rs_t":
    form = narrow_b_form(spec, how)
  if form != "rs_t":
    # B copied K-major first (``narrow_b_form``: a convolution's weights), then a
    # shared-memory form
    staged = _k_major(spec, s, 1)
    alt = WgmmaDot.supports(dot, info, kind, staged) if form == "ss" else \
        WgmmaDot.transposed_form(dot, info, kind, staged)
    if alt is not None:
      rhs, k = _k_major_copy(name, s, 1, rhs, new_temp)
      pre = pre + [k]
      spec, how = staged, alt
  if how is None:
    return None
  S = split_count(spec, how, kind, info)
  if S > 1:
    parts = new_temp(E.F32, (S, s.B * s.M, s.N), f"{name}.k_parts")
    return pre + [WgmmaDot(name + "_p", dot, a, rhs, parts, kind, *how, split=S, spec=spec),
                  SplitKSum(name, dot, parts, out, S, epilogue)]
  return pre + [WgmmaDot(name, dot, a, rhs, out, kind, *how, epilogue=epilogue, spec=spec)]


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
