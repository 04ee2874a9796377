"""Fused attention on the GPU: ``FlashAttention`` computes an ``attention(q, k, v)`` instruction
(``lowering/passes/attention.py``: ``softmax(q kᵀ * scale) v`` over ``[B..., T, D]`` operands)
in one kernel, the way FlashAttention-2 does, never writing the ``Tq x Tk`` scores to memory.

One block of 4 warps takes 64 query rows of one batch entry (16 rows a warp, on the tensor
cores' ``mma.sync.m16n8k8`` tf32 tiles) and walks the keys in tiles of ``BK``:

* q's rows stay in registers as mma A fragments for the whole walk, scaled by
  ``scale * log2(e)`` once, so that the softmax runs on ``ex2``;
* each tile of k and of v is copied global -> shared with ``cp.async`` (16-byte chunks, rows
  padded by 4 words so that the fragment reads hit 32 distinct banks; rows past ``Tk`` are
  zero-filled): v's tile is in flight while the scores are multiplied, the next k tile while
  the softmax and ``p v`` run;
* the scores ``S = q kᵀ`` of the warp's 16 rows live in mma accumulators; the online softmax
  keeps each row's running max ``m`` and each thread's part of the running sum ``l``,
  rescales the output accumulators by ``2^(m_old - m_new)`` when the max grows, and turns
  ``S`` into ``P = 2^(S - m)`` in place;
* ``P`` is the A operand of ``P v`` as it sits in the accumulators: the C fragment of an
  m16n8 tile holds columns ``2t, 2t+1`` where an A fragment wants ``t, t+4``, so the key order
  within each 8-key step is permuted (key ``2t`` plays ``t``, ``2t+1`` plays ``t+4``) and v's
  rows are read in the same order: a sum over keys does not depend on their order;
* at the end each row is divided by its sum (the quad's parts added with shuffles).

f32 operands are multiplied in tf32, JAX's default precision for f32 contractions on tensor
cores: q and ``P`` are rounded (``cvt.rna``), k and v, read from shared memory for every
fragment, are truncated by the tensor cores (rounding them too cost 12% of the kernel's time on
an H100, for a normwise error of 0.04% against 0.09% at 64x1024 per head); a dot asking for the
highest precision is not fused (``refuses``).  Registers are held to what 3 blocks an SM leave
(``.minnctapersm``).
``OURJAX_CUDA_ATTENTION=0`` turns the fusion off.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.codegen import (GpuKernel, barrier, launch_bounds, shared_array,
                                          shared_ptr, shfl_bfly, sreg64)
from ourjax.backends.cuda.dots import _asm, _mma, _saddr
from ourjax.backends.cuda.mma_kinds import _tf32_allowed
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.elemental import Emitter
from ourjax.backends.llvm.emitter import Index
from ourjax.backends.llvm.emitter import I32, I64, i64
from ourjax.config import env_switch
from ourjax.lowering.passes.attention import causal  # noqa: F401  (the kernel's; tests')

F32 = np.dtype(np.float32)
MAX_HEAD = 128      # largest D and Dv: q's fragments and the output accumulators are registers
MIN_BLOCKS = 3      # blocks an SM: ptxas keeps the registers at 168 or fewer


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_ATTENTION")


def refuses(dtype, q_dims, k_dims, v_dims, dots) -> str | None:
  """Why ``FlashAttention`` cannot compute this match (``Module.fused_attention``: the
  operands' dims as ``[B..., T, D]``), or None."""
  if dtype not in (F32, E.BF16, E.F16):
    return f"element type {dtype} (the kernel takes float32, bfloat16 and float16)"
  if dtype == F32 and not all(_tf32_allowed(d) for d in dots):
    return "a dot asks for the highest precision (the kernel multiplies in tf32)"
  if 0 in tuple(q_dims) + tuple(k_dims) + tuple(v_dims):
    return "an empty operand"
  D, Dv = q_dims[-1], v_dims[-1]
  step = 8 if dtype == F32 else 16
  if D % step or Dv % 8 or D > MAX_HEAD or Dv > MAX_HEAD:
    return (f"head sizes D={D}, Dv={Dv} (the kernel takes multiples of {step} and 8 up to "
            f"{MAX_HEAD})")
  return None


def _ex2(b, x):
  return _asm(b, "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], ret=ir.FloatType(),
              side_effect=False)


def _rna(b, x):
  return _asm(b, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], ret=I32, side_effect=False)


def _fmax(b, x, y):
  fn = b.module.globals.get("llvm.maxnum.f32")
  if fn is None:
    F = ir.FloatType()
    fn = ir.Function(b.module, ir.FunctionType(F, [F, F]), name="llvm.maxnum.f32")
  return b.call(fn, [x, y])


def _quad(b, x, op):
  """``op`` over the 4 lanes of ``x``'s quad (the lanes holding one row of an mma tile)."""
  F = ir.FloatType()
  for mask in (1, 2):
    y = b.bitcast(shfl_bfly(b, b.bitcast(x, I32), mask), F)
    x = op(x, y)
  return x


def tile_copies(b, tid, threads: int, rows: int, limit: int, narrow: bool):
  """``(issue, commit, wait)`` of the attention kernels' tile copies: ``issue(tile, S, G, base,
  width, ld)`` starts this thread's 16-byte ``cp.async`` copies of rows ``tile*rows ...`` (of
  ``width`` values, from element ``base`` of ``G``) into the shared tile ``S`` of rows padded
  to ``ld`` values, rows at or past ``limit`` zero-filled; ``commit()`` closes a group,
  ``wait(n)`` waits until at most ``n`` groups are in flight."""
  def copy16(dst, src, nbytes):
    _asm(b, "{ .reg .u64 g; cvta.to.global.u64 g, $1; "
         "cp.async.cg.shared.global [$0], [g], 16, $2; }",
         "l,l,r,~{memory}", [_saddr(b, dst), b.ptrtoint(src, I64), nbytes])

  def commit():
    _asm(b, "cp.async.commit_group;", "~{memory}", [])

  def wait(n):
    _asm(b, f"cp.async.wait_group {n};", "~{memory}", [])

  def issue(tile, S, G, base, width, ld):
    epv = 8 if narrow else 4
    per_row = width // epv
    for n in range(-(-rows * per_row // threads)):
      ch = b.add(tid, i64(n * threads))
      ok_ch = b.icmp_unsigned("<", ch, i64(rows * per_row))
      r = b.udiv(ch, i64(per_row))
      e = b.mul(b.urem(ch, i64(per_row)), i64(epv))
      row = b.add(b.mul(tile, i64(rows)), r)
      ok = b.and_(ok_ch, b.icmp_unsigned("<", row, i64(limit)))
      src = b.add(base, b.add(b.mul(b.select(ok, row, i64(0)), i64(width)), e))
      dst = shared_ptr(b, S, b.trunc(b.select(ok_ch, b.add(b.mul(r, i64(ld)), e), i64(0)),
                                     I32))
      nbytes = b.select(ok, ir.Constant(I32, 16), ir.Constant(I32, 0))
      if rows * per_row % threads:       # (the last round's spare threads copy nothing)
        with b.if_then(ok_ch):
          copy16(dst, b.gep(G, [src], inbounds=True), nbytes)
      else:
        copy16(dst, b.gep(G, [src], inbounds=True), nbytes)
  return issue, commit, wait


def a_fragments(b, G, base, width: int, t, inside, clamped, narrow: bool, mul=None) -> list:
  """mma A fragments of a thread's two rows (``clamped``, zeros where not ``inside``) of the
  row-major matrix at element ``base`` of ``G`` (rows of ``width``), one list of 4 registers
  per k step: tf32, a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) of each 8 columns,
  times ``mul`` and rounded (``cvt.rna``); 16-bit, words of two values a0 (g, 2t..), a1
  (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..) of each 16 columns (``mul`` unused: the
  kernels scale the products)."""
  out = []
  if narrow:
    Gw = b.bitcast(G, I32.as_pointer())
    for kk in range(width // 16):
      regs = []
      for h, dk in ((0, 0), (1, 0), (0, 8), (1, 8)):
        off = b.add(base, b.add(b.mul(clamped[h], i64(width)),
                                b.add(b.mul(t, i64(2)), i64(16 * kk + dk))))
        w = b.load(b.gep(Gw, [b.udiv(off, i64(2))], inbounds=True))
        regs.append(b.select(inside[h], w, ir.Constant(I32, 0)))
      out.append(regs)
    return out
  zero = ir.Constant(ir.FloatType(), 0.0)
  for kk in range(width // 8):
    regs = []
    for h, dk in ((0, 0), (1, 0), (0, 4), (1, 4)):
      off = b.add(base, b.add(b.mul(clamped[h], i64(width)), b.add(t, i64(8 * kk + dk))))
      x = b.load(b.gep(G, [off], inbounds=True))
      if mul is not None:
        x = b.fmul(x, mul)
      regs.append(_rna(b, b.select(inside[h], x, zero)))
    out.append(regs)
  return out


def fragment_rows(b, nblocks: int, rows_per_block: int, reverse: bool):
  """Where this thread works in a kernel of blocks of ``rows_per_block`` rows, ``nblocks`` of
  them per batch entry, a warp per 16 rows holding ``mma`` fragments: (thread index, its
  fragment row ``g`` and column pair ``t``, the batch entry, the block's index along the rows
  (counted from the last one when ``reverse``), this thread's two rows)."""
  tid = sreg64(b, "tid.x")
  lane = b.urem(tid, i64(32))
  warp = b.udiv(tid, i64(32))
  g = b.udiv(lane, i64(4))
  t = b.urem(lane, i64(4))
  bid = sreg64(b, "ctaid.x")
  bat = b.udiv(bid, i64(nblocks))
  block = b.urem(bid, i64(nblocks))
  if reverse:
    block = b.sub(i64(nblocks - 1), block)
  row0 = b.add(b.mul(block, i64(rows_per_block)), b.add(b.mul(warp, i64(16)), g))
  return tid, g, t, bat, block, [row0, b.add(row0, i64(8))]


def row_pair(b, S, ld, row, col):
  """Two 16-bit values of row ``row`` of shared tile ``S`` (``col`` even) as one word."""
  p = shared_ptr(b, S, b.trunc(b.add(b.mul(row, i64(ld)), col), I32))
  return b.load(b.bitcast(p, ir.PointerType(I32, addrspace=3)))


def column_pair(b, S, ld, row, col):
  """``S[row][col]`` (the low half) and ``S[row + 1][col]`` of a 16-bit shared tile as one
  word."""
  lo, hi = (b.zext(b.load(shared_ptr(b, S, b.trunc(b.add(b.mul(r, i64(ld)), col), I32))), I32)
            for r in (row, b.add(row, i64(1))))
  return b.or_(lo, b.shl(hi, ir.Constant(I32, 16)))


def pack_pair(b, kind: str, lo, hi):
  """Two f32 values rounded into one word of two ``kind`` (bf16, f16) values."""
  return _asm(b, f"cvt.rn.{kind}x2.f32 $0, $2, $1;", "=r,f,f", [lo, hi], ret=I32,
              side_effect=False)


class FlashAttention(GpuKernel):
  """``out[b] = softmax(q[b] k[b]ᵀ * scale) v[b]`` for every batch entry ``b`` (row-major
  ``[B, Tq, D]``, ``[B, Tk, D]``, ``[B, Tk, Dv]`` buffers, any ``Tq`` and ``Tk``); the module
  docstring says how."""
  compile_cost = 64
  BQ = 64           # query rows per block: 4 warps of 16
  THREADS = 128

  def __init__(self, name, instr, q, k, v, out, leafmap=None):
    self.instr, self.q, self.k, self.v, self.out = instr, q, k, v, out
    self.scores = instr.attrs.get("calls")      # the scores' modification (masks, biases)
    self.causal = self.scores is not None and causal(self.scores)
    self.leafmap = dict(leafmap or {})
    self.B = int(np.prod(q.dims[:-2], dtype=np.int64))
    self.Tq, self.D = q.dims[-2:]
    self.Tk, self.Dv = k.dims[-2], v.dims[-1]
    self.scale = float(instr.attrs["scale"])
    # 16-bit operands: m16n8k16 tiles (bf16/f16 products, f32 sums); f32: m16n8k8 tf32
    self.kind = {F32: "tf32", E.BF16: "bf16", E.F16: "f16"}[np.dtype(q.dtype)]
    # keys per tile: two tiles of padded rows in the 48 KB of static shared memory
    self.BK = 64 if max(self.D, self.Dv) <= 64 else 32
    super().__init__(name, [q, k, v] + K._leaf_bufs(self.leafmap), [out],
                     work=self.B * self.Tq * self.Tk * (self.D + self.Dv))

  def launch(self, info):
    nq = -(-self.Tq // self.BQ)
    return (nq * self.B, 1, 1), (self.THREADS, 1, 1), 0

  def emit_gpu(self, module):
    fn = super().emit_gpu(module)
    # ptxas keeps the registers low enough for MIN_BLOCKS blocks an SM (latency hiding)
    launch_bounds(module, fn, self.THREADS, MIN_BLOCKS)
    return fn

  def gpu_body(self, b, ptr):
    F = ir.FloatType()
    Tq, Tk, D, Dv, BQ, BK, T = self.Tq, self.Tk, self.D, self.Dv, self.BQ, self.BK, self.THREADS
    narrow = self.kind != "tf32"
    pad = 8 if narrow else 4                       # (16 bytes a row: conflict-free fragments)
    ldk, ldv = D + pad, Dv + pad
    mod = b.module
    ety = E.I16 if narrow else F
    Ks = shared_array(mod, ety, BK * ldk, self.name + "_K")
    Vs = shared_array(mod, ety, BK * ldv, self.name + "_V")
    # (causal: the blocks with the most keys first, they finish last otherwise)
    tid, g, t, bat, qblock, rows = fragment_rows(b, -(-Tq // BQ), BQ, self.causal)
    Q, Kp, Vp, O = ptr(self.q), ptr(self.k), ptr(self.v), ptr(self.out)
    q_base = b.mul(bat, i64(Tq * D))
    k_base = b.mul(bat, i64(Tk * D))
    v_base = b.mul(bat, i64(Tk * Dv))
    o_base = b.mul(bat, i64(Tq * Dv))
    zero = ir.Constant(F, 0.0)
    ninf = ir.Constant(F, -math.inf)

    # q's A fragments, scaled for ex2 (with a scores computation, after it): a0 (g, t),
    # a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
    log2e = math.log2(math.e)
    c = ir.Constant(F, float(np.float32(self.scale * (1.0 if self.scores else log2e))))
    inside = [b.icmp_unsigned("<", r, i64(Tq)) for r in rows]
    clamped = [b.select(ok, r, i64(Tq - 1)) for ok, r in zip(inside, rows)]
    qfr = a_fragments(b, Q, q_base, D, t, inside, clamped, narrow, None if narrow else c)

    issue, commit, wait = tile_copies(b, tid, T, BK, Tk, narrow)

    def ks(row, col):
      return b.load(shared_ptr(b, Ks, b.trunc(b.add(b.mul(row, i64(ldk)), col), I32)))

    def vs(row, col):
      return b.load(shared_ptr(b, Vs, b.trunc(b.add(b.mul(row, i64(ldv)), col), I32)))

    def kv_word(x):     # (the tensor cores read the tf32 bits of the f32 word: truncation)
      return b.bitcast(x, I32)

    def k_pair(row, col):     # two 16-bit values of a K row (col even) as one word
      return row_pair(b, Ks, ldk, row, col)

    def v_pair(row, col):     # v[row][col] (low half) and v[row + 1][col]
      return column_pair(b, Vs, ldv, row, col)

    def pack(lo, hi):         # two f32 values rounded into one word of 16-bit values
      return pack_pair(b, self.kind, lo, hi)

    NI, ND = BK // 8, Dv // 8
    if self.scores is not None:
      em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
      bdims = tuple(self.q.dims[:-2])
      bmulti = list(E.delinearize(b, bat, bdims)) if bdims else []
    m_run = [E.alloca_entry(b, F) for _ in range(2)]
    l_run = [E.alloca_entry(b, F) for _ in range(2)]
    acc = [[E.alloca_entry(b, F) for _ in range(4)] for _ in range(ND)]
    for h in range(2):
      b.store(ninf, m_run[h])
      b.store(zero, l_run[h])
    for row in acc:
      for a in row:
        b.store(zero, a)

    NT = -(-Tk // BK)
    if self.causal:     # key tiles past the block's last row are masked whole: not visited
      last = b.add(b.mul(qblock, i64(BQ)), i64(BQ - 1))
      NT = b.add(b.udiv(b.select(b.icmp_unsigned("<", last, i64(Tk - 1)), last, i64(Tk - 1)),
                        i64(BK)), i64(1))
    else:
      NT = i64(NT)
    issue(i64(0), Ks, Kp, k_base, D, ldk)
    commit()
    with E.ForLoop(b, i64(0), NT, "kv") as loop:
      j = loop.index
      issue(j, Vs, Vp, v_base, Dv, ldv)
      commit()
      wait(1)
      barrier(b)
      # S = q kᵀ: B fragment b0 = k[key 8ni+g][8kk+t], b1 = ... [8kk+t+4]
      S = []
      for ni in range(NI):
        cur = [zero] * 4
        key = b.add(g, i64(8 * ni))
        if narrow:   # b0 = k[key][16kk+2t..], b1 = k[key][16kk+8+2t..]; the scale after
          for kk in range(D // 16):
            bfr = [k_pair(key, b.add(b.mul(t, i64(2)), i64(16 * kk + dk))) for dk in (0, 8)]
            cur = _mma(b, self.kind, qfr[kk], bfr, cur)
          cur = [b.fmul(x, c) for x in cur]
        else:
          for kk in range(D // 8):
            bfr = [kv_word(ks(key, b.add(t, i64(8 * kk + dk)))) for dk in (0, 4)]
            cur = _mma(b, "tf32", qfr[kk], bfr, cur)
        S.append(cur)
      barrier(b)
      nxt = b.add(j, i64(1))
      with b.if_then(b.icmp_unsigned("<", nxt, NT)):
        issue(nxt, Ks, Kp, k_base, D, ldk)
      commit()
      # the key of S[ni][e]: column 8ni + 2t + e % 2 of tile j
      first = b.add(b.mul(j, i64(BK)), b.mul(t, i64(2)))
      keys = [[b.add(first, i64(8 * ni + e % 2)) for e in range(4)] for ni in range(NI)]
      if self.scores is not None:   # masks, biases: f(scores) at (batch..., row, key)
        sdims = tuple(self.q.dims[:-1]) + (Tk,)
        for ni in range(NI):
          for e in range(4):
            col = keys[ni][e]
            col = b.select(b.icmp_unsigned("<", col, i64(Tk)), col, i64(Tk - 1))
            idx = Index(b, sdims, multi=bmulti + [clamped[e // 2], col])
            em.push_scope()
            em.remember(self.scores.parameters[0], idx, S[ni][e])
            S[ni][e] = b.fmul(em.value(self.scores.root, idx), ir.Constant(F, log2e))
            em.pop_scope()
      if Tk % BK:     # keys past Tk (the last tile's zero rows) take no part
        for ni in range(NI):
          for e in range(4):
            S[ni][e] = b.select(b.icmp_unsigned("<", keys[ni][e], i64(Tk)), S[ni][e], ninf)
      # online softmax, row h's values are S[ni][2h], S[ni][2h+1]
      for h in range(2):
        mx = S[0][2 * h]
        for ni in range(NI):
          for e in range(2):
            if ni or e:
              mx = _fmax(b, mx, S[ni][2 * h + e])
        mx = _quad(b, mx, lambda x, y: _fmax(b, x, y))
        m_old = b.load(m_run[h])
        m_new = _fmax(b, m_old, mx)
        base = b.select(b.fcmp_ordered("==", m_new, ninf), zero, m_new)
        alpha = _ex2(b, b.fsub(m_old, base))
        rs = zero
        for ni in range(NI):
          for e in range(2):
            p = _ex2(b, b.fsub(S[ni][2 * h + e], base))
            S[ni][2 * h + e] = p
            rs = b.fadd(rs, p)
        b.store(b.fadd(b.fmul(b.load(l_run[h]), alpha), rs), l_run[h])
        b.store(m_new, m_run[h])
        for nd in range(ND):
          for e in range(2):
            a = acc[nd][2 * h + e]
            b.store(b.fmul(b.load(a), alpha), a)
      wait(1)
      barrier(b)
      # O += P v: in 8-key step kk, key 2t plays t and 2t+1 plays t+4 (module docstring);
      # 16-bit: 16-key step kk, the C fragments of tiles 2kk and 2kk+1 are its A fragment
      for kk in range(NI // 2 if narrow else NI):
        if narrow:
          afr = [pack(S[2 * kk + u][2 * h], S[2 * kk + u][2 * h + 1])
                 for u, h in ((0, 0), (0, 1), (1, 0), (1, 1))]
          krow = b.add(b.mul(t, i64(2)), i64(16 * kk))
        else:
          afr = [_rna(b, S[kk][x]) for x in (0, 2, 1, 3)]
          krow = b.add(b.mul(t, i64(2)), i64(8 * kk))
        for nd in range(ND):
          col = b.add(g, i64(8 * nd))
          if narrow:
            bfr = [v_pair(krow, col), v_pair(b.add(krow, i64(8)), col)]
          else:
            bfr = [kv_word(vs(krow, col)), kv_word(vs(b.add(krow, i64(1)), col))]
          cur = [b.load(a) for a in acc[nd]]
          for a, x in zip(acc[nd], _mma(b, self.kind, afr, bfr, cur)):
            b.store(x, a)
      barrier(b)
    wait(0)
    # each row divided by its sum; c0,c1 at (g, 8nd+2t..), c2,c3 at (g+8, ...)
    for h in range(2):
      total = _quad(b, b.load(l_run[h]), b.fadd)
      inv = b.fdiv(ir.Constant(F, 1.0), total)
      with b.if_then(inside[h]):
        for nd in range(ND):
          off = b.add(o_base, b.add(b.mul(rows[h], i64(Dv)), b.add(b.mul(t, i64(2)),
                                                                    i64(8 * nd))))
          for e in range(2):
            x = b.fmul(b.load(acc[nd][2 * h + e]), inv)
            E.store_element(b, E.convert_value(b, x, F32, self.out.dtype), O,
                            b.add(off, i64(e)) if e else off, self.out.dtype)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
