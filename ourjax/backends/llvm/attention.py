"""Fused attention on the CPU: ``AttentionKernel`` computes an ``attention(q, k, v)`` instruction
(``lowering/passes/attention.py``: ``softmax(f(q kᵀ * scale)) v`` over ``[B..., T, D]``
operands, ``f`` the optional scores computation: masks, biases) without writing the
``Tq x Tk`` scores or probabilities to memory, the way FlashAttention does on a GPU.

A *task* is one batch entry's block of ``BQ`` query rows (``tiles``); each of the kernel's
pieces (``chunks``) is one task where there are up to ``MAX_PIECES`` of them, and ``tiles``
makes at least 8 a thread for 16 threads where blocks of 32 rows or more allow, so that
threads claiming pieces one at a time finish within about one task of each other and a thread
the OS delays holds up little.  A task walks the keys in tiles of ``BK``:

* ``S = q_blk k_tileᵀ`` into a ``BQ x BK`` f32 tile on the thread's stack (64 KiB at most: in L2,
  mostly L1), by the process-wide packed GEMM (``gemm.py``, called serially, its packing buffer
  on the stack too);
* per row: ``s * scale`` (then ``f`` per score, through the shared elemental emitter, at the
  score's ``(batch..., row, key)``; without ``f``, a positive scale goes into the exponential's
  argument as one fused multiply-add instead), the tile's row max, the running max ``m``;
  ``P = exp(s - m)`` in place in the tile and its sum (the vector ``exp`` of ``math.py``, on
  vectors of the code target's width, in one process-wide function called once per row:
  ``row_math.py``), the running sum
  ``l = l * exp(m_old - m) + sum(P)``; the output row, already holding the earlier tiles'
  ``P v``, is scaled by ``exp(m_old - m)``;
* ``out_blk += P v_tile`` by the same GEMM (its ``ACCUMULATE`` bit; the first tile stores);
* at the end each output row is divided by its ``l``.

A causal mask (``passes/attention.causal``) ends a task's walk at the tile of its last row, and
the blocks with the most keys are claimed first.  Small shapes are fused too: at 2x2 heads of
8x4 up to 2x4 heads of 128x64 the fused kernel was as fast or faster than the three unfused
kernels (1 thread, this project's 2-core AVX-512 host), so ``refuses`` looks at types and head
sizes only.

Peak memory is q, k, v and the output; the per-thread stack holds the tile and the GEMM's packed
panels (``stack_bytes``).  Only float32 is fused (``refuses``): the shared GEMM multiplies f32
and f64, and 16-bit attention on the CPU is widened to f32 around unfused dots anyway.
``OURJAX_CPU_ATTENTION=0`` turns the fusion off.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import gemm as G
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm import math as M
from ourjax.backends.llvm.row_math import (_exp_and_sum, _fmax, _hreduce, _row_pass,
                                           _scale_row, _splat, exp_and_sum_call,
                                           prefetch_expsum)
from ourjax.backends.llvm.elemental import Emitter
from ourjax.backends.llvm.emitter import ForLoop, Index, alloca_entry, i64
from ourjax.config import env_switch
from ourjax.lowering.passes.attention import causal

F32 = np.dtype(np.float32)
#: Largest head size D / Dv fused: the GEMM's packed panels of a task live on the stack.
MAX_HEAD = 256
#: Bytes of the scores tile (BQ x BK f32), on the stack of each thread.
TILE_BYTES = 64 * 1024
#: Most keys per tile (longer key ranges are walked with the online softmax).
MAX_BK = 256
#: Tasks (query blocks) wanted per thread: threads claim them one at a time, so the slowest
#: thread finishes at most one task (an eighth of its share) after the others.
TASKS_PER_THREAD = 8
#: Most pieces the kernel is cut into (a piece is one or more whole tasks; claiming one is one
#: atomic add).
MAX_PIECES = 256


def enabled() -> bool:
  return env_switch("OURJAX_CPU_ATTENTION")


def refuses(dtype, q_dims, k_dims, v_dims, dots) -> str | None:
  """Why ``AttentionKernel`` does not compute this match (``Module.fused_attention``: the
  operands' dims as ``[B..., T, D]``), or None."""
  if np.dtype(dtype) != F32:
    return f"element type {np.dtype(dtype)} (the CPU kernel takes float32)"
  if 0 in tuple(q_dims) + tuple(k_dims) + tuple(v_dims):
    return "an empty operand"
  D, Dv = q_dims[-1], v_dims[-1]
  if D > MAX_HEAD or Dv > MAX_HEAD:
    return f"head sizes D={D}, Dv={Dv} (the CPU kernel takes up to {MAX_HEAD})"
  return None


def tiles(B: int, Tq: int, Tk: int):
  """``(BQ, BK)``: keys per tile (all of them up to ``MAX_BK``) and query rows per task: the
  tile within ``TILE_BYTES`` (BQ = 16 rows measured 2x slower than 64 on one core: K's tile is
  packed once per task), the query blocks of equal size (a multiple of 16 rows), and at least
  ``TASKS_PER_THREAD`` tasks for each of ``planning.MAX_THREADS`` threads where blocks of 32
  rows or more allow."""
  from ourjax.backends.llvm.planning import MAX_THREADS
  BK = min(Tk, MAX_BK)
  cap = max(16, TILE_BYTES // (4 * BK) // 16 * 16)
  nqb = -(-Tq // cap)
  while B * nqb < TASKS_PER_THREAD * MAX_THREADS and Tq // (nqb + 1) >= 32:
    nqb += 1
  BQ = -(-(-(-Tq // nqb)) // 16) * 16
  return min(BQ, Tq), BK


class AttentionKernel(K.Kernel):
  """``out[b] = softmax(f(q[b] k[b]ᵀ * scale)) v[b]`` for every batch entry ``b`` (row-major
  f32 ``[B, Tq, D]``, ``[B, Tk, D]``, ``[B, Tk, Dv]`` buffers); the module docstring says
  how."""

  def __init__(self, name, instr, q, k, v, out, leafmap=None):
    self.q, self.k, self.v, self.out = q, k, v, out
    self.scores = instr.attrs.get("calls")      # the scores' modification (masks, biases)
    # a causal mask: key tiles past a block's last row are not visited
    self.causal = self.scores is not None and causal(self.scores)
    self.leafmap = dict(leafmap or {})
    self.bdims = tuple(q.dims[:-2])
    self.B = int(np.prod(self.bdims, dtype=np.int64))
    self.Tq, self.D = q.dims[-2:]
    self.Tk, self.Dv = k.dims[-2], v.dims[-1]
    self.scale = float(instr.attrs["scale"])
    self.BQ, self.BK = tiles(self.B, self.Tq, self.Tk)
    # without a scores computation and with a positive scale, the scores are not scaled in
    # place: the row max is taken of the raw scores (then scaled) and exp(s * scale - m) is
    # one fused multiply-add in the exponential's argument
    self._exp_scale = self.scale if self.scores is None and self.scale > 0 else 1.0
    self.tasks = self.B * -(-self.Tq // self.BQ)
    super().__init__(name, [q, k, v] + K._leaf_bufs(self.leafmap), [out],
                     work=self.B * self.Tq * self.Tk * (self.D + self.Dv))

  @property
  def symbols(self) -> list:
    """The process-wide GEMM its code calls (its build started; and that of the softmax's row
    function, which the module's math lists, ``row_math.exp_and_sum_call``)."""
    prefetch_expsum()
    return [G.prefetch_shared_gemm("f32")]

  @property
  def chunks(self) -> int:
    """Whole tasks per piece, as many pieces as tasks up to ``MAX_PIECES`` (a piece costs one
    atomic claim; the results do not depend on how the tasks are cut)."""
    if not self.parallel:
      return 1
    return max(1, min(self.tasks, MAX_PIECES))

  def stack_bytes(self) -> int:
    """Stack space of a thread running a piece: the scores tile and the GEMM's panels."""
    return 4 * (self.BQ * self.BK + 2 * self.BQ + self._pack_elements())

  def _pack_elements(self) -> int:
    BQ, BK = self.BQ, self.BK
    return max(G.pack_buffer_elements("f32", BQ, BK, self.D),
               G.pack_buffer_elements("f32", BQ, self.Dv, BK))

  def body(self, b, ptr, tid, nthreads):
    F = ir.FloatType()
    BQ, BK, Tq, Tk, D, Dv = self.BQ, self.BK, self.Tq, self.Tk, self.D, self.Dv
    nqb = -(-Tq // BQ)
    W = G.vector_target().lanes["f32"]
    S = b.bitcast(alloca_entry(b, ir.ArrayType(F, BQ * BK), "scores"), F.as_pointer())
    pack = b.bitcast(alloca_entry(b, ir.ArrayType(F, self._pack_elements()), "pack"),
                     F.as_pointer())
    m_run = b.bitcast(alloca_entry(b, ir.ArrayType(F, BQ), "m"), F.as_pointer())
    l_run = b.bitcast(alloca_entry(b, ir.ArrayType(F, BQ), "l"), F.as_pointer())
    Q, Kp, V, O = ptr(self.q), ptr(self.k), ptr(self.v), ptr(self.out)
    gemm = G.declare_shared_gemm(b.module, "f32")
    lo, hi = K.partition(b, self.tasks, tid, nthreads)
    ninf, zero, one = (ir.Constant(F, x) for x in (-math.inf, 0.0, 1.0))

    def call_gemm(A, Bm, C, Mr, N, Kd, lda, ldb, ldc, trans_b, accumulate):
      args = [A, Bm, C, Mr, N, Kd, i64(lda), i64(ldb), i64(ldc),
              ir.Constant(E.I32, G.ACCUMULATE if accumulate else 0),
              ir.Constant(E.I32, 1 if trans_b else 0), i64(1), i64(0), i64(0), i64(0),
              i64(0), i64(1), pack, i64(0)]   # (tune 0: the kernel's own blocking)
      b.call(gemm, [a if isinstance(a, ir.Value) else i64(a) for a in args])

    with ForLoop(b, lo, hi, "task") as task:
      t = task.index
      bat = b.udiv(t, i64(nqb))
      qb = b.urem(t, i64(nqb))
      if self.causal:    # (the blocks with the most keys first: pieces are claimed in order)
        qb = b.sub(i64(nqb - 1), qb)
      r0 = b.mul(qb, i64(BQ))
      rows = _smin(b, i64(BQ), b.sub(i64(Tq), r0)) if Tq % BQ else i64(BQ)
      qrow = b.add(b.mul(bat, i64(Tq)), r0)
      Qb = b.gep(Q, [b.mul(qrow, i64(D))], inbounds=True)
      Ob = b.gep(O, [b.mul(qrow, i64(Dv))], inbounds=True)
      Kb = b.gep(Kp, [b.mul(bat, i64(Tk * D))], inbounds=True)
      Vb = b.gep(V, [b.mul(bat, i64(Tk * Dv))], inbounds=True)
      bmulti = list(E.delinearize(b, bat, self.bdims)) if self.bdims else []

      def tile(j, first):
        k0 = b.mul(j, i64(BK))
        nk = _smin(b, i64(BK), b.sub(i64(Tk), k0)) if Tk % BK else i64(BK)
        call_gemm(Qb, b.gep(Kb, [b.mul(k0, i64(D))], inbounds=True), S, rows, nk, i64(D),
                  D, D, BK, True, False)
        with ForLoop(b, i64(0), rows, "row") as rl:
          i = rl.index
          srow = b.gep(S, [b.mul(i, i64(BK))], inbounds=True)
          mx = self._scale_and_max(b, ptr, srow, nk, W, bmulti, b.add(r0, i), k0)
          mp, lp = b.gep(m_run, [i]), b.gep(l_run, [i])
          m_old = ninf if first else b.load(mp)
          m_new = _fmax(b, m_old, mx)
          base = b.select(b.fcmp_ordered("==", m_new, ninf), zero, m_new)
          total = exp_and_sum_call(b, srow, nk, base, self._exp_scale)
          if total is None:
            total = _exp_and_sum(b, srow, nk, W, base, self._exp_scale)
          if first:
            b.store(total, lp)
          else:
            alpha = M.emit_unary(b, "exp", b.fsub(m_old, base))
            b.store(b.fadd(b.fmul(b.load(lp), alpha), total), lp)
            _scale_row(b, b.gep(Ob, [b.mul(i, i64(Dv))], inbounds=True), Dv, W, alpha)
          b.store(m_new, mp)
        call_gemm(S, b.gep(Vb, [b.mul(k0, i64(Dv))], inbounds=True), Ob, rows, i64(Dv), nk,
                  BK, Dv, Dv, False, not first)

      tile(i64(0), True)
      nt = i64(-(-Tk // BK))
      if self.causal:     # (the tile of the block's last row is the last with a key to see)
        last = _smin(b, b.add(r0, b.sub(rows, i64(1))), i64(Tk - 1))
        nt = b.add(b.udiv(last, i64(BK)), i64(1))
      if Tk > BK:
        with ForLoop(b, i64(1), nt, "ktile") as kl:
          tile(kl.index, False)
      with ForLoop(b, i64(0), rows, "fin") as fl:
        i = fl.index
        inv = b.fdiv(one, b.load(b.gep(l_run, [i])))
        _scale_row(b, b.gep(Ob, [b.mul(i, i64(Dv))], inbounds=True), Dv, W, inv)

  def _scale_and_max(self, b, ptr, srow, nk, W, bmulti, row, k0):
    """Scale the tile row ``srow[0:nk]`` in place (and apply the scores computation); return
    its max."""
    F = ir.FloatType()
    c = ir.Constant(F, self.scale)
    if self.scores is None:
      # a positive scale is applied in the exponential's argument (the max of the raw scores,
      # scaled, is the max of the scaled ones); another one here, in place
      inplace = self._exp_scale == 1.0 and self.scale != 1.0

      def step(x, acc):
        if inplace:
          x = b.fmul(x, _splat(b, c, x.type))
        return (x if inplace else None), [_fmax(b, acc[0], x)]
      (acc,) = _row_pass(b, srow, nk, W, step, [-math.inf])
      mx = _hreduce(b, acc, _fmax)
      return b.fmul(mx, c) if self._exp_scale != 1.0 else mx
    # masks, biases: the scores computation per score, at (batch..., row, key)
    leaves = K._make_leaves(b, self.leafmap, ptr)
    sdims = self.bdims + (self.Tq, self.Tk)
    best = alloca_entry(b, F)
    b.store(ir.Constant(F, -math.inf), best)
    with ForLoop(b, i64(0), nk, "score") as sl:
      p = b.gep(srow, [sl.index], inbounds=True)
      idx = Index(b, sdims, multi=bmulti + [row, b.add(k0, sl.index)])
      em = Emitter(b, leaves)
      em.remember(self.scores.parameters[0], idx, b.fmul(b.load(p), c))
      x = em.value(self.scores.root, idx)
      b.store(x, p)
      b.store(_fmax(b, b.load(best), x), best)
    return b.load(best)


# -- helpers ---------------------------------------------------------------------------------------

def _smin(b, x, y):
  return b.select(b.icmp_signed("<", x, y), x, y)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
