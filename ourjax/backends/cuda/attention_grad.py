"""The backward of fused attention on the GPU: an ``attention-grad`` instruction
(``lowering/passes/attention_grad.py``: ``(dq, dk, dv)`` of ``o = softmax(f(q kᵀ * scale)) v``
for the cotangent ``dO``) as two kernels, the way FlashAttention-2's backward works, neither
writing the ``Tq x Tk`` scores, probabilities or their gradients to memory:

* ``FlashAttentionGrad(mode="q")``, one block of 4 warps per 64 query rows (16 a warp, on
  ``mma.sync.m16n8k8`` tf32 tiles, as the forward kernel ``attention.py``): a first walk over
  the keys computes each row's log-sum-exp (base 2) ``L`` of the scores, and ``Δ = rowsum(dO ∘
  o)`` (which equals ``rowsum(P ∘ dP)``, ``o`` being ``P v``) comes from the rows of ``o`` and
  ``dO``; both are stored for the second kernel.  A second walk recomputes ``P = 2^(S - L)``
  and ``dP = dO vᵀ`` tile by tile, forms ``dS = g(P ∘ (dP - Δ))`` (``g`` the instruction's
  gradient computation: the transposed mask and scale) and accumulates ``dq += dS k``.
* ``FlashAttentionGrad(mode="kv")``, one block per 64 keys (16 a warp): walks the query rows in
  tiles, recomputing ``Sᵀ = k qᵀ`` and ``Pᵀ`` from the stored ``L``, ``dPᵀ = v dOᵀ`` and ``dSᵀ``
  the same way, and accumulates ``dv += Pᵀ dO`` and ``dk += dSᵀ q`` in registers; nothing is
  added across blocks (no atomics).

The score-shaped values live in mma accumulators and become A operands in place with the
forward kernel's key permutation (within each 8-key step key ``2t`` plays ``t``, ``2t+1`` plays
``t+4``, and the B rows are read in that order).  The tile copies are ``cp.async`` into shared
memory (rows padded by 4 words: conflict-free fragment reads), both operands of a step at once.
A causal mask (``attention.causal``) skips the key tiles past a query block's last row in
``q`` mode and the query tiles before a key block's first key in ``kv`` mode.

f32 operands are multiplied in tf32 (JAX's default precision for f32 dots on tensor cores),
bf16 and f16 on ``m16n8k16`` tiles (P and dS rounded to the type as the A operand, f32 sums;
head sizes multiples of 16).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.attention import (F32, _ex2, _fmax, _quad, _rna, a_fragments, causal,
                                            column_pair, fragment_rows, pack_pair,
                                            refuses as refuses_forward, row_pair, tile_copies)
from ourjax.backends.cuda.codegen import (GpuKernel, barrier, launch_bounds, shared_array,
                                          shared_ptr)
from ourjax.backends.cuda.dots import _asm, _mma
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.elemental import Emitter
from ourjax.backends.llvm.emitter import Index
from ourjax.backends.llvm.emitter import I32, i64

ROWS = 64           # rows a block (4 warps of 16)
THREADS = 128


def refuses(dtype, q_dims, k_dims, v_dims, dots) -> str | None:
  """Why the backward kernels cannot compute this match (``Module.fused_attention_grad``), or
  None; the forward must be fused too (``attention.refuses``)."""
  why = refuses_forward(dtype, q_dims, k_dims, v_dims, dots)
  if why:
    return why
  if dtype != F32 and (v_dims[-1] % 16 or q_dims[-1] % 16):
    return (f"head sizes D={q_dims[-1]}, Dv={v_dims[-1]} (16-bit backward kernels take "
            f"multiples of 16)")
  return None


class FlashAttentionGrad(GpuKernel):
  """One of the two kernels of an ``attention-grad`` (module docstring): ``mode="q"`` writes
  ``dq`` and the rows' statistics ``stats`` (``[B*Tq, 2]`` f32: ``L``, ``Δ``), ``mode="kv"``
  reads them and writes ``dk`` and ``dv``.  Operands are row-major ``[B, T, D]`` buffers."""
  compile_cost = 96

  def __init__(self, name, instr, mode, q, k, v, o, do, stats, outs, leafmap=None):
    self.instr, self.mode = instr, mode
    self.q, self.k, self.v, self.o, self.do, self.stats = q, k, v, o, do, stats
    self.outs = list(outs)
    self.scores = instr.attrs.get("calls")
    self.grad = instr.attrs.get("grad_calls")
    self.causal = self.scores is not None and causal(self.scores)
    self.leafmap = dict(leafmap or {})
    self.B = int(np.prod(q.dims[:-2], dtype=np.int64))
    self.Tq, self.D = q.dims[-2:]
    self.Tk, self.Dv = k.dims[-2], v.dims[-1]
    self.scale = float(instr.attrs["scale"])
    # 16-bit operands: m16n8k16 tiles (bf16/f16 products, f32 sums); f32: m16n8k8 tf32
    self.kind = {F32: "tf32", E.BF16: "bf16", E.F16: "f16"}[np.dtype(q.dtype)]
    # rows of the walked operand per tile: two padded tiles in the 48 KB of static shared memory
    self.BT = 64 if max(self.D, self.Dv) <= 64 else 32
    reads = [q, k, v, do] + ([o] if mode == "q" else [stats])
    writes = self.outs + ([stats] if mode == "q" else [])
    work = self.B * self.Tq * self.Tk * (self.D + self.Dv)
    super().__init__(name, reads + K._leaf_bufs(self.leafmap), writes, work=work)

  def launch(self, info):
    T = self.Tq if self.mode == "q" else self.Tk
    return (-(-T // ROWS) * self.B, 1, 1), (THREADS, 1, 1), 0

  def emit_gpu(self, module):
    fn = super().emit_gpu(module)
    launch_bounds(module, fn, THREADS, 1 if self.mode == "kv" else 2)
    return fn

  def gpu_body(self, b, ptr):
    F = ir.FloatType()
    kv = self.mode == "kv"
    Tq, Tk, D, Dv, BT = self.Tq, self.Tk, self.D, self.Dv, self.BT
    # this block's own rows (queries in q mode, keys in kv mode) and the walked ones
    Trow, Twalk = (Tk, Tq) if kv else (Tq, Tk)
    mod = b.module
    narrow = self.kind != "tf32"
    pad = 8 if narrow else 4                        # (16 bytes a row: conflict-free fragments)
    ety = E.I16 if narrow else F
    # walked tiles: q mode walks k (width D) and v (Dv); kv mode walks q (D) and dO (Dv)
    ld1, ld2 = D + pad, Dv + pad
    S1 = shared_array(mod, ety, BT * ld1, self.name + "_T1")
    S2 = shared_array(mod, ety, BT * ld2, self.name + "_T2")
    # (causal q mode: the blocks with the most keys first)
    tid, g, t, bat, rblock, rows = fragment_rows(b, -(-Trow // ROWS), ROWS,
                                                 self.causal and not kv)
    inside = [b.icmp_unsigned("<", r, i64(Trow)) for r in rows]
    clamped = [b.select(ok, r, i64(Trow - 1)) for ok, r in zip(inside, rows)]
    Qp, Kp, Vp, DOp = ptr(self.q), ptr(self.k), ptr(self.v), ptr(self.do)
    ST = ptr(self.stats)
    q_base = b.mul(bat, i64(Tq * D))
    k_base = b.mul(bat, i64(Tk * D))
    v_base = b.mul(bat, i64(Tk * Dv))
    o_base = b.mul(bat, i64(Tq * Dv))
    zero = ir.Constant(F, 0.0)
    ninf = ir.Constant(F, -math.inf)
    log2e = ir.Constant(F, math.log2(math.e))
    # the scores' factor folded into the first A operand: scale (and log2 e without a scores
    # computation, which is applied to the scaled scores and followed by log2 e)
    c = ir.Constant(F, float(np.float32(self.scale * (1.0 if self.scores else math.log2(math.e)))))

    def frags(G, base, width, mul=None):
      return a_fragments(b, G, base, width, t, inside, clamped, narrow, mul)

    cq = None if narrow else c             # (16-bit: the scale multiplies the products)
    cs = c if narrow else None
    if kv:
      afr1 = frags(Kp, k_base, D, cq)      # Sᵀ = k qᵀ
      afr2 = frags(Vp, v_base, Dv)         # dPᵀ = v dOᵀ
      G1, G2, base1, base2 = Qp, DOp, q_base, o_base
    else:
      afr1 = frags(Qp, q_base, D, cq)      # S = q kᵀ
      afr2 = frags(DOp, o_base, Dv)        # dP = dO vᵀ
      G1, G2, base1, base2 = Kp, Vp, k_base, v_base

    issue, commit, wait = tile_copies(b, tid, THREADS, BT, Twalk, narrow)

    def sh(S, ld, row, col):
      return b.bitcast(b.load(shared_ptr(b, S, b.trunc(b.add(b.mul(row, i64(ld)), col), I32))),
                       I32)

    def sh_pair(S, ld, row, col):     # two 16-bit values of a row (col even) as one word
      return row_pair(b, S, ld, row, col)

    def sh_column_pair(S, ld, row, col):   # S[row][col] (low half) and S[row + 1][col]
      return column_pair(b, S, ld, row, col)

    def pack(lo, hi):                 # two f32 values rounded into one word of 16-bit values
      return pack_pair(b, self.kind, lo, hi)

    NI = BT // 8

    def products(afr, S, ld, width, mul=None):
      """Accumulators of (this warp's 16 rows) x (the tile's BT walked rows)ᵀ over ``width``:
      element e of tile ni is at row g + 8 (e // 2), walked row 8ni + 2t + e % 2 (times
      ``mul``, for 16-bit operands whose fragments are not scaled)."""
      out = []
      for ni in range(NI):
        cur = [zero] * 4
        wrow = b.add(g, i64(8 * ni))
        if narrow:
          for kk in range(width // 16):
            bfr = [sh_pair(S, ld, wrow, b.add(b.mul(t, i64(2)), i64(16 * kk + dk)))
                   for dk in (0, 8)]
            cur = _mma(b, self.kind, afr[kk], bfr, cur)
          if mul is not None:
            cur = [b.fmul(x, mul) for x in cur]
        else:
          for kk in range(width // 8):
            bfr = [sh(S, ld, wrow, b.add(t, i64(8 * kk + dk))) for dk in (0, 4)]
            cur = _mma(b, "tf32", afr[kk], bfr, cur)
        out.append(cur)
      return out

    def accumulate(acc, P, S, ld, width):
      """``acc`` (alloca'd C fragments over ``width`` columns) += P (accumulators as A: for
      tf32 with the key permutation, for 16-bit the C fragments of tiles 2kk and 2kk+1 as
      the A fragment of 16-key step kk) times the tile's rows."""
      for kk in range(NI // 2 if narrow else NI):
        if narrow:
          afr = [pack(P[2 * kk + u][2 * h], P[2 * kk + u][2 * h + 1])
                 for u, h in ((0, 0), (0, 1), (1, 0), (1, 1))]
          krow = b.add(b.mul(t, i64(2)), i64(16 * kk))
        else:
          afr = [_rna(b, P[kk][x]) for x in (0, 2, 1, 3)]
          krow = b.add(b.mul(t, i64(2)), i64(8 * kk))
        for nd in range(width // 8):
          col = b.add(g, i64(8 * nd))
          if narrow:
            bfr = [sh_column_pair(S, ld, krow, col),
                   sh_column_pair(S, ld, b.add(krow, i64(8)), col)]
          else:
            bfr = [sh(S, ld, krow, col), sh(S, ld, b.add(krow, i64(1)), col)]
          cur = [b.load(a) for a in acc[nd]]
          for a, x in zip(acc[nd], _mma(b, self.kind, afr, bfr, cur)):
            b.store(x, a)

    em = None
    if self.scores is not None or self.grad is not None:
      em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
      bdims = tuple(self.q.dims[:-2])
      bmulti = list(E.delinearize(b, bat, bdims)) if bdims else []
    sdims = tuple(self.q.dims[:-1]) + (Tk,)

    def apply(comp, x, row, walked):
      """``comp`` (the scores' or the gradient's computation) at (batch, query, key) for
      this thread's row ``row`` and walked index ``walked``."""
      wc = b.select(b.icmp_unsigned("<", walked, i64(Twalk)), walked, i64(Twalk - 1))
      qi, ki = (wc, row) if kv else (row, wc)
      idx = Index(b, sdims, multi=bmulti + [qi, ki])
      em.push_scope()
      em.remember(comp.parameters[0], idx, x)
      y = em.value(comp.root, idx)
      em.pop_scope()
      return y

    def scores(tile, Sv):
      """The base-2 scores of the tile's accumulators ``Sv`` (in place), -inf past the end."""
      first = b.add(b.mul(tile, i64(BT)), b.mul(t, i64(2)))
      walked = [[b.add(first, i64(8 * ni + e % 2)) for e in range(4)] for ni in range(NI)]
      for ni in range(NI):
        for e in range(4):
          x = Sv[ni][e]
          if self.scores is not None:
            x = b.fmul(apply(self.scores, x, clamped[e // 2], walked[ni][e]), log2e)
          if Twalk % BT:
            x = b.select(b.icmp_unsigned("<", walked[ni][e], i64(Twalk)), x, ninf)
          Sv[ni][e] = x
      return walked

    # the walk's extent: all tiles, or (causal) those a block's rows can see
    NT = -(-Twalk // BT)
    start, stop = i64(0), i64(NT)
    if self.causal:
      if kv:        # queries before the block's first key see none of its keys
        start = b.udiv(b.mul(rblock, i64(ROWS)), i64(BT))
      else:         # keys past the block's last row
        last = b.add(b.mul(rblock, i64(ROWS)), i64(ROWS - 1))
        stop = b.add(b.udiv(b.select(b.icmp_unsigned("<", last, i64(Tk - 1)), last,
                                     i64(Tk - 1)), i64(BT)), i64(1))

    stat_L = [E.alloca_entry(b, F) for _ in range(2)]
    stat_D = [E.alloca_entry(b, F) for _ in range(2)]
    if not kv:
      # walk 1: each row's base-2 log-sum-exp L (online max and sum over the key tiles)
      m_run = [E.alloca_entry(b, F) for _ in range(2)]
      l_run = [E.alloca_entry(b, F) for _ in range(2)]
      for h in range(2):
        b.store(ninf, m_run[h])
        b.store(zero, l_run[h])
      with E.ForLoop(b, start, stop, "lse") as loop:
        j = loop.index
        issue(j, S1, G1, base1, D, ld1)
        commit()
        wait(0)
        barrier(b)
        Sv = products(afr1, S1, ld1, D, cs)
        barrier(b)
        scores(j, Sv)
        for h in range(2):
          mx = Sv[0][2 * h]
          for ni in range(NI):
            for e in range(2):
              if ni or e:
                mx = _fmax(b, mx, Sv[ni][2 * h + e])
          mx = _quad(b, mx, lambda x, y: _fmax(b, x, y))
          m_old = b.load(m_run[h])
          m_new = _fmax(b, m_old, mx)
          base = b.select(b.fcmp_ordered("==", m_new, ninf), zero, m_new)
          rs = zero
          for ni in range(NI):
            for e in range(2):
              rs = b.fadd(rs, _ex2(b, b.fsub(Sv[ni][2 * h + e], base)))
          b.store(b.fadd(b.fmul(b.load(l_run[h]), _ex2(b, b.fsub(m_old, base))), rs),
                  l_run[h])
          b.store(m_new, m_run[h])
      Op = ptr(self.o)
      lg2 = lambda x: _asm(b, "lg2.approx.ftz.f32 $0, $1;", "=f,f", [x],  # noqa: E731
                           ret=F, side_effect=False)
      for h in range(2):
        total = _quad(b, b.load(l_run[h]), b.fadd)
        L = b.fadd(b.load(m_run[h]), lg2(total))
        # Δ = rowsum(dO ∘ o): this thread's columns t, t+4, ... of its row, then the quad's
        delta = zero
        for cc in range(Dv // 4):
          off = b.add(o_base, b.add(b.mul(clamped[h], i64(Dv)), b.add(t, i64(4 * cc))))
          x = E.convert_value(b, E.load_element(b, Op, off, self.o.dtype), self.o.dtype, F32)
          y = E.convert_value(b, E.load_element(b, DOp, off, self.do.dtype), self.do.dtype,
                              F32)
          delta = b.fadd(delta, b.fmul(x, y))
        delta = _quad(b, delta, b.fadd)
        b.store(L, stat_L[h])
        b.store(delta, stat_D[h])
        with b.if_then(b.and_(inside[h], b.icmp_unsigned("==", t, i64(0)))):
          at = b.mul(b.add(b.mul(bat, i64(Tq)), rows[h]), i64(2))
          b.store(L, b.gep(ST, [at], inbounds=True))
          b.store(delta, b.gep(ST, [b.add(at, i64(1))], inbounds=True))
      # (walk 1's last tile is read by every warp before walk 2 overwrites it)
      barrier(b)

    # walk 2: P, dP, dS tile by tile; q mode: dq += dS k; kv mode: dv += Pᵀ dO, dk += dSᵀ q
    W1, W2 = (D, Dv)
    if kv:
      accs = {"dv": [[E.alloca_entry(b, F) for _ in range(4)] for _ in range(Dv // 8)],
              "dk": [[E.alloca_entry(b, F) for _ in range(4)] for _ in range(D // 8)]}
    else:
      accs = {"dq": [[E.alloca_entry(b, F) for _ in range(4)] for _ in range(D // 8)]}
    for acc in accs.values():
      for row in acc:
        for a in row:
          b.store(zero, a)
    with E.ForLoop(b, start, stop, "grad") as loop:
      j = loop.index
      issue(j, S1, G1, base1, W1, ld1)
      issue(j, S2, G2, base2, W2, ld2)
      commit()
      wait(0)
      barrier(b)
      Sv = products(afr1, S1, ld1, W1, cs)
      dP = products(afr2, S2, ld2, W2)
      walked = scores(j, Sv)
      if kv:      # the walked rows' statistics (this thread's columns)
        Ls, Ds = [], []
        for ni in range(NI):
          for e in range(2):
            wq = walked[ni][e]
            wc = b.select(b.icmp_unsigned("<", wq, i64(Tq)), wq, i64(Tq - 1))
            at = b.mul(b.add(b.mul(bat, i64(Tq)), wc), i64(2))
            Ls.append(b.load(b.gep(ST, [at], inbounds=True)))
            Ds.append(b.load(b.gep(ST, [b.add(at, i64(1))], inbounds=True)))
      dS = []
      for ni in range(NI):
        row_p, row_s = [], []
        for e in range(4):
          if kv:
            L, dl = Ls[2 * ni + e % 2], Ds[2 * ni + e % 2]
          else:
            L, dl = b.load(stat_L[e // 2]), b.load(stat_D[e // 2])
          p = _ex2(b, b.fsub(Sv[ni][e], L))
          w = b.fmul(p, b.fsub(dP[ni][e], dl))
          if self.grad is not None:
            w = apply(self.grad, w, clamped[e // 2], walked[ni][e])
          row_p.append(p)
          row_s.append(w)
        Sv[ni] = row_p
        dS.append(row_s)
      if kv:
        accumulate(accs["dv"], Sv, S2, ld2, Dv)
        accumulate(accs["dk"], dS, S1, ld1, D)
      else:
        accumulate(accs["dq"], dS, S1, ld1, D)
      barrier(b)

    # stores: c0, c1 at (g, 8nd + 2t ..), c2, c3 at (g + 8, ...)
    for name, acc in accs.items():
      out = self.outs[{"dq": 0, "dk": 0, "dv": 1}[name]]
      width = Dv if name == "dv" else D
      Op = ptr(out)
      obase = b.mul(bat, i64(Trow * width))
      for h in range(2):
        with b.if_then(inside[h]):
          for nd in range(width // 8):
            off = b.add(obase, b.add(b.mul(rows[h], i64(width)),
                                     b.add(b.mul(t, i64(2)), i64(8 * nd))))
            for e in range(2):
              x = b.load(acc[nd][2 * h + e])
              E.store_element(b, E.convert_value(b, x, F32, out.dtype), Op,
                              b.add(off, i64(e)) if e else off, out.dtype)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
