"""Kernels that move data (``kernels.py``'s ``Kernel``s): copies, in-place dynamic updates,
scatter (``ScatterGeometry``: its windows and indices, shared with the CUDA backend) and sort.
``kernels`` re-exports their names."""
from __future__ import annotations

import math
from typing import Sequence

import llvmlite.ir as ir

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm.emitter import (I1, I64, Emitter, ForLoop, Index, alloca_entry,
                                          i64)
from ourjax.backends.llvm.kernels import Buf, Kernel, _leaf_bufs, _make_leaves, partition


class CopyKernel(Kernel):
  """dst = src (same element count and type)."""

  def __init__(self, name, src: Buf, dst: Buf):
    self.src, self.dst = src, dst
    super().__init__(name, [src], [dst], work=dst.size)

  def body(self, b, ptr, tid, nthreads):
    n = self.dst.size
    if n == 0:
      return
    lo, hi = partition(b, n, tid, nthreads, align=64 if n >= 256 else 1)
    s, d = ptr(self.src), ptr(self.dst)
    with ForLoop(b, lo, hi, "i") as i:
      b.store(b.load(b.gep(s, [i.index], inbounds=True)), b.gep(d, [i.index], inbounds=True))


class DynamicUpdateInPlace(Kernel):
  """``dynamic-update-slice`` whose operand buffer is the result buffer: writes the window."""

  def __init__(self, name, dus, buf: Buf, leafmap):
    self.dus, self.buf, self.leafmap = dus, buf, dict(leafmap)
    super().__init__(name, _leaf_bufs(leafmap), [buf], work=dus.operands[1].shape.size)

  def key_leaves(self):
    """Where ``kernel_key`` stops: the leaves, and the operand updated in place (never read)."""
    return list(self.leafmap) + [self.dus.operands[0]]

  def body(self, b, ptr, tid, nthreads):
    dus = self.dus
    u = dus.operands[1]
    if u.shape.size == 0:
      return
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr))
    starts = em._starts(dus.operands[2:], dus.dims, u.dims)
    lo, hi = partition(b, u.shape.size, tid, nthreads)
    out = ptr(self.buf)
    with ForLoop(b, lo, hi, "u") as loop:
      em.push_scope()
      uidx = Index(b, u.dims, linear=loop.index)
      v = em.value(u, uidx)
      tgt = [b.add(m, s) for m, s in zip(uidx.multi, starts)]
      E.store_element(b, v, out, E.linearize(b, tgt, dus.dims), dus.dtype)
      em.pop_scope()


class ScatterGeometry:
  """Where the elements of an XLA scatter's updates go (shared by the CPU's serial kernel and
  the GPU's parallel one): ``sdims`` are the update dimensions that index ``indices``, the
  others (``uwd``) run along the operand's window dimensions (``wod``); ``max_start`` bounds each
  window start; ``clip`` clamps starts (else an out-of-bounds window is dropped whole)."""

  def __init__(self, scatter):
    operand, self.indices, updates = scatter.operands
    a = scatter.attrs
    self.operand_dims, self.updates_dims = tuple(operand.dims), tuple(updates.dims)
    self.uwd = list(a["update_window_dims"])
    iwd = set(a["inserted_window_dims"])
    self.obatch = list(a.get("input_batching_dims", ()))
    self.ibatch = list(a.get("scatter_indices_batching_dims", ()))
    self.sd2od = list(a["scatter_dims_to_operand_dims"])
    self.sdims = [d for d in range(updates.shape.rank) if d not in self.uwd]
    self.wod = [d for d in range(operand.shape.rank) if d not in iwd and d not in self.obatch]
    window = [1] * operand.shape.rank
    for od, ud in zip(self.wod, self.uwd):
      window[od] = updates.dims[ud]
    self.max_start = [n - w for n, w in zip(operand.dims, window)]
    self.clip = a.get("mode", "drop") == "clip"
    # nothing to do: no updates, an empty operand, or (clip) a window that cannot fit
    self.empty = (updates.shape.size == 0 or operand.shape.size == 0
                  or (self.clip and any(m < 0 for m in self.max_start)))

  def target(self, b, em, umulti):
    """(valid i1, operand index per dimension) of the update element at ``umulti``."""
    batch = [umulti[d] for d in self.sdims]
    starts = [i64(0)] * len(self.operand_dims)
    for k, od in enumerate(self.sd2od):
      v = em.value(self.indices, Index(b, self.indices.dims, multi=batch + [i64(k)]))
      starts[od] = E._index_value(b, v, self.indices.dtype)
    for od, idim in zip(self.obatch, self.ibatch):
      starts[od] = batch[idim]
    valid = ir.Constant(I1, 1)
    for d in range(len(self.operand_dims)):
      if self.clip:
        starts[d] = E._clamp_i64(b, starts[d], 0, max(self.max_start[d], 0))
      else:
        valid = b.and_(valid, b.and_(b.icmp_signed(">=", starts[d], i64(0)),
                                     b.icmp_signed("<=", starts[d], i64(self.max_start[d]))))
    tgt = list(starts)
    for od, ud in zip(self.wod, self.uwd):
      tgt[od] = b.add(starts[od], umulti[ud])
    return valid, tgt


class ScatterKernel(Kernel):
  """XLA scatter, applied in the reference's order (scatter dimensions outer, window
  dimensions inner); ``out`` already holds the operand."""
  serial_only = True

  def __init__(self, name, scatter, out: Buf, leafmap):
    self.scatter, self.out, self.leafmap = scatter, out, dict(leafmap)
    super().__init__(name, _leaf_bufs(leafmap) + [out], [out],
                     work=scatter.operands[2].shape.size)

  def body(self, b, ptr, tid, nthreads):
    sc = self.scatter
    _, _, updates = sc.operands
    geo = ScatterGeometry(sc)
    if geo.empty:
      return
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr))
    comp = sc.attrs["to_apply"]
    overwrite = comp.root is comp.parameters[1]
    dt = sc.dtype
    out = ptr(self.out)
    loops = []
    for d in geo.sdims + geo.uwd:
      loop = ForLoop(b, 0, updates.dims[d], f"u{d}")
      loop.__enter__()
      loops.append(loop)
    uvar = {d: lp.index for d, lp in zip(geo.sdims + geo.uwd, loops)}
    umulti = [uvar[d] for d in range(updates.shape.rank)]
    valid, tgt = geo.target(b, em, umulti)
    then = b.function.append_basic_block("scatter.do")
    cont = b.function.append_basic_block("scatter.skip")
    b.cbranch(valid, then, cont)
    b.position_at_end(then)
    lin = E.linearize(b, tgt, geo.operand_dims)
    upd = em.value(updates, Index(b, updates.dims, multi=umulti))
    if overwrite:
      new = upd
    else:
      old = E.load_element(b, out, lin, dt)
      new = em.call(comp, [old, upd])
    E.store_element(b, new, out, lin, dt)
    b.branch(cont)
    b.position_at_end(cont)
    for loop in reversed(loops):
      loop.__exit__(None, None, None)


class SortKernel(Kernel):
  """Stable sort of every row along ``dimension``: a bottom-up merge sort of row positions
  (insertion-sorted runs of 16 first) under the comparator computation, then a gather of every
  operand by the sorted positions.  Scratch: two i64 position arrays per thread.

  A sort with ``top_k=k`` (``lax.top_k``'s, whose users read only its first k positions)
  selects instead: the row's positions go by one at a time past the k kept in order, each
  compared with the last one kept and, when it comes before it, inserted where a binary search
  puts it (after the equal ones: stable); only the first k positions of the outputs are
  written.  That is one comparison an element for most, against log2(n) for the sort."""

  RUN = 16

  def __init__(self, name, sort, ins: Sequence[Buf], outs: Sequence[Buf], scratch: Buf):
    self.sort, self.ins, self.outs = sort, list(ins), list(outs)
    dims = sort.operands[0].dims
    d = sort.attrs.get("dimension", 0) if dims else 0
    self.n = dims[d] if dims else 1
    self.inner = math.prod(dims[d + 1:]) if dims else 1
    self.rows = (math.prod(dims) // max(self.n, 1)) if dims else 1
    k = sort.attrs.get("top_k")
    self.top_k = k if k is not None and 0 < k < self.n else None
    steps = max(1, int(math.log2(max(self.n if self.top_k is None else self.top_k, 2))))
    super().__init__(name, self.ins, self.outs, [scratch], work=math.prod(dims) * steps * 4)

  def body(self, b, ptr, tid, nthreads):
    n, inner = self.n, self.inner
    if self.rows * n == 0:
      return
    comp = self.sort.attrs["to_apply"]
    dts = [o.dtype for o in self.sort.operands]
    ins = [ptr(x) for x in self.ins]
    outs = [ptr(x) for x in self.outs]
    scratch = b.bitcast(ptr(self.scratch[0]), I64.as_pointer())
    mine = b.gep(scratch, [b.mul(tid, i64(2 * n))])
    pa, pb = mine, b.gep(mine, [i64(n)])
    em = Emitter(b, {})
    lo, hi = partition(b, self.rows, tid, nthreads)

    def elem_pos(row_base, pos):
      return b.add(row_base, b.mul(pos, i64(inner)))

    def less(row_base, p, q):
      args = []
      for x, dt in zip(ins, dts):
        args.append(E.load_element(b, x, elem_pos(row_base, p), dt))
        args.append(E.load_element(b, x, elem_pos(row_base, q), dt))
      return em.call(comp, args)

    with ForLoop(b, lo, hi, "row") as row:
      outer = b.udiv(row.index, i64(inner))
      col = b.urem(row.index, i64(inner))
      row_base = b.add(b.mul(outer, i64(n * inner)), col)
      cur = alloca_entry(b, I64.as_pointer())
      oth = alloca_entry(b, I64.as_pointer())
      b.store(pa, cur)
      b.store(pb, oth)
      if self.top_k is not None:
        self._select(b, pa, n, self.top_k, lambda x, y: less(row_base, x, y))
        kept = self.top_k
      else:
        with ForLoop(b, 0, n, "p") as p:
          b.store(p.index, b.gep(pa, [p.index]))
        if n > 1:
          self._insertion_runs(b, pa, n, lambda x, y: less(row_base, x, y))
          self._merge_passes(b, cur, oth, n, lambda x, y: less(row_base, x, y))
        kept = n
      src = b.load(cur)
      with ForLoop(b, 0, kept, "p") as p:
        q = b.load(b.gep(src, [p.index]))
        for x, o in zip(ins, outs):
          b.store(b.load(b.gep(x, [elem_pos(row_base, q)])), b.gep(o, [elem_pos(row_base, p.index)]))

  def _select(self, b, perm, n, k, less):
    """The first k positions of the row in sorted order into perm[0:k) (see the class
    docstring): positions 0..k-1 insertion-sorted first, then each later position p that
    comes before perm[k-1] inserted at the first j with less(p, perm[j])."""
    fn = b.function
    with ForLoop(b, 0, k, "p") as p:
      b.store(p.index, b.gep(perm, [p.index]))
    self._insertion_runs(b, perm, k, less, run=k)
    lo_slot, hi_slot = alloca_entry(b, I64), alloca_entry(b, I64)
    with ForLoop(b, k, n, "p") as p:
      last = b.load(b.gep(perm, [i64(k - 1)]))
      take = fn.append_basic_block("sel.take")
      skip = fn.append_basic_block("sel.skip")
      b.cbranch(less(p.index, last), take, skip)
      b.position_at_end(take)
      # binary search: the first j in [0, k-1] with less(p, perm[j]) (perm[k-1] is one)
      b.store(i64(0), lo_slot)
      b.store(i64(k - 1), hi_slot)
      head = fn.append_basic_block("sel.search")
      step = fn.append_basic_block("sel.step")
      found = fn.append_basic_block("sel.found")
      b.branch(head)
      b.position_at_end(head)
      lo, hi = b.load(lo_slot), b.load(hi_slot)
      b.cbranch(b.icmp_signed("<", lo, hi), step, found)
      b.position_at_end(step)
      mid = b.lshr(b.add(lo, hi), i64(1))
      before = less(p.index, b.load(b.gep(perm, [mid])))
      b.store(b.select(before, lo, b.add(mid, i64(1))), lo_slot)
      b.store(b.select(before, mid, hi), hi_slot)
      b.branch(head)
      b.position_at_end(found)
      at = b.load(lo_slot)
      with ForLoop(b, 0, b.sub(i64(k - 1), at), "mv") as mv:     # shift perm[at:k-1] up
        j = b.sub(i64(k - 2), mv.index)
        b.store(b.load(b.gep(perm, [j])), b.gep(perm, [b.add(j, i64(1))]))
      b.store(p.index, b.gep(perm, [at]))
      b.branch(skip)
      b.position_at_end(skip)

  def _insertion_runs(self, b, perm, n, less, run=None):
    """Stable insertion sort of each run of ``run`` (default ``RUN``) positions of perm[0:n)."""
    run = run or self.RUN
    nruns = -(-n // run)
    with ForLoop(b, 0, nruns, "run") as r:
      rlo = b.mul(r.index, i64(run))
      rhi = b.add(rlo, i64(run))
      rhi = b.select(b.icmp_signed(">", rhi, i64(n)), i64(n), rhi)
      with ForLoop(b, b.add(rlo, i64(1)), rhi, "ii") as i:
        key = b.load(b.gep(perm, [i.index]))
        jslot = alloca_entry(b, I64)
        b.store(b.sub(i.index, i64(1)), jslot)
        fn = b.function
        head = fn.append_basic_block("ins.head")
        check = fn.append_basic_block("ins.check")
        shift = fn.append_basic_block("ins.shift")
        done = fn.append_basic_block("ins.done")
        b.branch(head)
        b.position_at_end(head)
        j = b.load(jslot)
        b.cbranch(b.icmp_signed(">=", j, rlo), check, done)
        b.position_at_end(check)
        pj = b.load(b.gep(perm, [j]))
        b.cbranch(less(key, pj), shift, done)
        b.position_at_end(shift)
        b.store(pj, b.gep(perm, [b.add(j, i64(1))]))
        b.store(b.sub(j, i64(1)), jslot)
        b.branch(head)
        b.position_at_end(done)
        b.store(key, b.gep(perm, [b.add(b.load(jslot), i64(1))]))

  def _merge_passes(self, b, cur, oth, n, less):
    fn = b.function
    wslot = alloca_entry(b, I64)
    b.store(i64(self.RUN), wslot)
    head = fn.append_basic_block("merge.width")
    body = fn.append_basic_block("merge.pass")
    done = fn.append_basic_block("merge.done")
    b.branch(head)
    b.position_at_end(head)
    w = b.load(wslot)
    b.cbranch(b.icmp_signed("<", w, i64(n)), body, done)
    b.position_at_end(body)
    src, dst = b.load(cur), b.load(oth)
    npairs = b.sdiv(b.add(i64(n), b.sub(b.mul(w, i64(2)), i64(1))), b.mul(w, i64(2)))
    with ForLoop(b, 0, npairs, "pair") as pr:
      lo = b.mul(pr.index, b.mul(w, i64(2)))
      mid = b.add(lo, w)
      mid = b.select(b.icmp_signed(">", mid, i64(n)), i64(n), mid)
      hi = b.add(mid, w)
      hi = b.select(b.icmp_signed(">", hi, i64(n)), i64(n), hi)
      islot, jslot = alloca_entry(b, I64), alloca_entry(b, I64)
      b.store(lo, islot)
      b.store(mid, jslot)
      with ForLoop(b, lo, hi, "k") as k:
        i, j = b.load(islot), b.load(jslot)
        left_done = b.icmp_signed(">=", i, mid)
        right_ok = b.icmp_signed("<", j, hi)
        ic = b.select(left_done, b.sub(mid, i64(1)), i)
        jc = b.select(right_ok, j, b.sub(hi, i64(1)))
        pi = b.load(b.gep(src, [ic]))
        pj = b.load(b.gep(src, [jc]))
        # take the right element when the left run is used up, or it is strictly less
        lt_block = b.block
        cmpb = fn.append_basic_block("merge.cmp")
        joinb = fn.append_basic_block("merge.join")
        decided = b.or_(left_done, b.not_(right_ok))
        b.cbranch(decided, joinb, cmpb)
        b.position_at_end(cmpb)
        lt = less(pj, pi)
        cmp_end = b.block
        b.branch(joinb)
        b.position_at_end(joinb)
        take_r = b.phi(I1)
        take_r.add_incoming(left_done, lt_block)
        take_r.add_incoming(lt, cmp_end)
        b.store(b.select(take_r, pj, pi), b.gep(dst, [k.index]))
        b.store(b.select(take_r, b.add(j, i64(1)), j), jslot)
        b.store(b.select(take_r, i, b.add(i, i64(1))), islot)
    b.store(dst, cur)
    b.store(src, oth)
    b.store(b.mul(w, i64(2)), wslot)
    b.branch(head)
    b.position_at_end(done)
