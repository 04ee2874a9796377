"""The reduction kernels (``kernels.py``'s ``Kernel``s that ``group_planner.py`` plans for a
``reduce`` the loop kernel does not compute in its loop): a *column* kernel that accumulates
whole output rows in order over a middle or leading block of dimensions, and a long reduction
to few outputs *split* across threads into ``kernels.SPLIT_CHUNKS`` partials, then combined.
``kernels`` re-exports their names."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import Emitter, ForLoop, Index, alloca_entry, i64
from ourjax.backends.llvm.kernels import (Buf, Kernel, _cost_per_element, _leaf_bufs,
                                          _make_leaves, partition)


class ColumnReduceKernel(Kernel):
  """``reduce`` over a contiguous block of dimensions [p, q) with kept dimensions after it:
  out[pre, post] = op(... op(op(init, x[pre, 0, post]), x[pre, 1, post]) ...), accumulating
  whole output rows in the output buffer, in the reference's (row-major) order."""

  def __init__(self, name, reduce, out: Buf, leafmap):
    self.reduce, self.out, self.leafmap = reduce, out, dict(leafmap)
    src = reduce.operands[0].dims
    rd = sorted(reduce.attrs["dimensions"])
    self.pre = src[:rd[0]]
    self.red = src[rd[0]:rd[-1] + 1]
    self.post = src[rd[-1] + 1:]
    work = math.prod(src) * max(1, _cost_per_element([(reduce, out)], leafmap) //
                                max(1, math.prod(self.red)))
    super().__init__(name, _leaf_bufs(leafmap), [out], work=work)

  def body(self, b, ptr, tid, nthreads):
    r = self.reduce
    total_pre, nred, npost = math.prod(self.pre), math.prod(self.red), math.prod(self.post)
    if total_pre * npost == 0:
      return
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr), fast_reductions=False)
    comp = r.attrs["to_apply"]
    dt = r.dtype
    src = r.operands[0]
    out = ptr(self.out)
    init = em.scalar(r.operands[1])
    # threads share pre x post-chunks; a thread's units of one `pre` index are one span of
    # columns, accumulated row after row (a chunk at a time, each walk down the rows read a
    # cache line or four of every row: with rows of 4 KiB, a page a row; a 1024 x 1024 f32
    # column sum took 154 us on one core, twice XLA's)
    chunks = max(1, min(npost // 64, 64)) if npost >= 128 else 1
    csize = -(-npost // chunks)
    lo, hi = partition(b, total_pre * chunks, tid, nthreads)
    empty = b.icmp_signed(">=", lo, hi)
    plo = b.udiv(lo, i64(chunks))
    plast = b.select(empty, plo, b.udiv(b.sub(hi, i64(1)), i64(chunks)))
    phi = b.select(empty, plo, b.add(plast, i64(1)))

    def upto(x, n):
      return b.select(b.icmp_signed(">", x, i64(n)), i64(n), x)
    with ForLoop(b, plo, phi, "t") as t:
      p = t.index
      first = b.mul(b.urem(lo, i64(chunks)), i64(csize))
      last = upto(b.mul(b.add(b.urem(b.sub(hi, i64(1)), i64(chunks)), i64(1)), i64(csize)),
                  npost)
      jlo = b.select(b.icmp_signed("==", p, plo), first, i64(0))
      jhi = b.select(b.icmp_signed("==", p, plast), last, i64(npost))
      obase = b.mul(p, i64(npost))
      with ForLoop(b, jlo, jhi, "j") as j:
        E.store_element(b, init, out, b.add(obase, j.index), dt)
      if nred:
        with ForLoop(b, 0, nred, "k") as k:
          sbase = b.mul(b.add(b.mul(p, i64(nred)), k.index), i64(npost))
          pmulti = E.delinearize(b, p, self.pre)
          kmulti = E.delinearize(b, k.index, self.red)
          with ForLoop(b, jlo, jhi, "j") as j:
            em.push_scope()
            jmulti = E.delinearize(b, j.index, self.post)
            idx = Index(b, src.dims, linear=b.add(sbase, j.index),
                        multi=pmulti + kmulti + jmulti)
            x = em.value(src, idx)
            o = b.add(obase, j.index)
            acc = E.load_element(b, out, o, dt)
            new = em.combine(comp, [acc], [x], [dt])[0]
            E.store_element(b, new, out, o, dt)
            em.pop_scope()


_NEUTRAL = {"add": 0, "multiply": 1, "or": 0, "xor": 0}


def _neutral(op, dt):
  dt = np.dtype(dt)
  if op in ("maximum", "minimum"):
    if E._is_float(dt):
      if dt == E.fp8.E4M3:     # (no infinity: its lowest and highest values)
        info = ml_dtypes.finfo(dt)
        return float(info.min if op == "maximum" else info.max)
      return -np.inf if op == "maximum" else np.inf
    if dt == E.BOOL:
      return op == "minimum"
    info = np.iinfo(dt)
    return info.min if op == "maximum" else info.max
  if op == "and":
    return True if dt == E.BOOL else -1
  if op == "add" and E._is_float(dt):
    return -0.0
  return _NEUTRAL[op]




class SplitReducePartials(Kernel):
  """First half of a split reduction over trailing dimensions: the reduced range is cut into
  ``SPLIT_CHUNKS`` fixed chunks; threads share the chunks and reduce each (from the reducer's
  neutral value) into ``partials[chunk, out]``."""

  def __init__(self, name, reduce, partials: Buf, leafmap):
    self.reduce, self.partials, self.leafmap = reduce, partials, dict(leafmap)
    src = reduce.operands[0]
    work = src.shape.size * max(1, _cost_per_element([(reduce, partials)], leafmap) //
                                max(1, src.shape.size // max(1, reduce.shape.size)))
    super().__init__(name, _leaf_bufs(leafmap), [partials], work=work)

  def body(self, b, ptr, tid, nthreads):
    r = self.reduce
    src = r.operands[0]
    op = E.simple_reducer(r.attrs["to_apply"])
    dt = r.dtype
    nout = r.shape.size
    count = src.shape.size // max(1, nout)
    chunk = -(-count // K.SPLIT_CHUNKS)
    chunk = -(-chunk // 64) * 64
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr))
    part = ptr(self.partials)
    clo, chi = partition(b, K.SPLIT_CHUNKS, tid, nthreads)
    rdims = [src.dims[d] for d in sorted(r.attrs["dimensions"])]
    with ForLoop(b, clo, chi, "c") as c:
      lo = b.mul(c.index, i64(chunk))
      lo = b.select(b.icmp_signed(">", lo, i64(count)), i64(count), lo)
      hi = b.add(lo, i64(chunk))
      hi = b.select(b.icmp_signed(">", hi, i64(count)), i64(count), hi)
      with ForLoop(b, 0, nout, "o") as o:
        slot = alloca_entry(b, E.compute_type(dt))
        b.store(E.const(dt, _neutral(op, dt)), slot)
        omulti = E.delinearize(b, o.index, r.dims)
        base = b.mul(o.index, i64(count))
        with ForLoop(b, lo, hi, "r") as k:
          em.push_scope()
          idx = Index(b, src.dims, linear=b.add(base, k.index),
                      multi=omulti + E.delinearize(b, k.index, rdims))
          x = em.value(src, idx)
          b.store(E.reassociating_combine(b, op, b.load(slot), x, dt), slot)
          em.pop_scope()
        E.store_element(b, b.load(slot), part, b.add(b.mul(c.index, i64(nout)), o.index), dt)


class SplitReduceFinish(Kernel):
  """Second half: out[o] = op(init, op(partials[0, o], partials[1, o], ...)) in chunk order."""
  serial_only = True

  def __init__(self, name, reduce, partials: Buf, out: Buf, leafmap):
    self.reduce, self.partials, self.out, self.leafmap = reduce, partials, out, dict(leafmap)
    super().__init__(name, [partials] + _leaf_bufs(leafmap), [out], work=reduce.shape.size)

  def body(self, b, ptr, tid, nthreads):
    r = self.reduce
    op = E.simple_reducer(r.attrs["to_apply"])
    dt = r.dtype
    nout = r.shape.size
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr))
    init = em.scalar(r.operands[1])
    part = ptr(self.partials)
    with ForLoop(b, 0, nout, "o") as o:
      slot = alloca_entry(b, E.compute_type(dt))
      b.store(E.const(dt, _neutral(op, dt)), slot)
      with ForLoop(b, 0, K.SPLIT_CHUNKS, "t") as t:
        x = E.load_element(b, part, b.add(b.mul(t.index, i64(nout)), o.index), dt)
        b.store(E.reassociating_combine(b, op, b.load(slot), x, dt), slot)
      res = E.reassociating_combine(b, op, init, b.load(slot), dt)
      E.store_element(b, res, ptr(self.out), o.index, dt)
