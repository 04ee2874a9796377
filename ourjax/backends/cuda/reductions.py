"""The GPU's reduction kernels (``codegen.translate`` picks them; the table in ``codegen``'s
docstring says which planned kernel becomes which):

* ``RowReduce``: one block per output row, each reduction of the row computed cooperatively
  (strided loop, warp butterfly shuffles, one shared-memory step across warps) and memoised for
  the emitter; rows that fit stay in registers between the passes (softmax, layernorm);
* ``SplitPartials`` + ``SplitFinish``: few long reductions, ``G`` blocks per output writing
  partials that a finishing pass combines (a thread per output, or a block per output for many
  partials) and computes the outputs and serial tails from;
* ``ColumnReduce`` (+ ``ColumnFinish`` / ``ColumnOutputsFinish``): reductions over leading
  dimensions, coalesced across the kept minor dimensions, split into partials when there are
  few outputs.

``_Reducer`` says how one ``reduce`` combines; ``_block_allreduce`` gives every thread of a
block the combination of all threads' values.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.cuda.codegen import (VEC, GpuKernel, _pow2_at_least, _words, barrier,
                                          shared_array, shared_ptr, shfl_bfly, sreg, sreg64)
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I32, Emitter, Index, i64

__all__ = ["RowReduce", "SplitPartials", "SplitFinish", "ColumnReduce", "ColumnFinish",
           "ColumnOutputsFinish"]


class _Reducer:
  """How one ``reduce`` combines on the GPU: simple reducers (add, max, ...) start every thread
  from the neutral element and apply the init value once at the end (the reference's result up
  to reassociation); other reducers (variadic, e.g. argmax) use the init value as the identity,
  as XLA does."""

  def __init__(self, b, em, r):
    self.b, self.em, self.r = b, em, r
    n = len(r.operands) // 2
    self.n = n
    self.ops, self.inits = r.operands[:n], r.operands[n:]
    self.comp = r.attrs["to_apply"]
    self.op = E.simple_reducer(self.comp) if n == 1 else None
    self.dtypes = [o.dtype for o in self.ops]
    self.init_vals = [em.scalar(i) for i in self.inits]
    if self.op is not None:
      self.ident = [E.const(self.dtypes[0], K._neutral(self.op, self.dtypes[0]))]
    else:
      self.ident = list(self.init_vals)

  def combine(self, accs, xs):
    if self.op is not None:
      return [E.reassociating_combine(self.b, self.op, accs[0], xs[0], self.dtypes[0])]
    return self.em.combine(self.comp, list(accs), list(xs), self.dtypes)

  def finish(self, accs):
    if self.op is not None:
      return [E.reassociating_combine(self.b, self.op, self.init_vals[0], accs[0],
                                      self.dtypes[0])]
    return list(accs)

  def result(self, vals):
    return tuple(vals) if self.n > 1 else vals[0]

  @property
  def rdims(self):
    return sorted(self.r.attrs["dimensions"])

  @property
  def count(self):
    src = self.ops[0].dims
    return math.prod(src[d] for d in self.rdims)

  def trailing(self):
    src, rd = self.ops[0].dims, self.rdims
    return rd == list(range(len(src) - len(rd), len(src)))

  def source_index(self, oidx, k):
    """Index into the operands of reduced position ``k`` (i64) at output index ``oidx``."""
    b = self.b
    src = self.ops[0].dims
    rd = self.rdims
    red = E.delinearize(b, k, [src[d] for d in rd])
    multi = [None] * len(src)
    kept = [d for d in range(len(src)) if d not in rd]
    for d, m in zip(kept, oidx.multi):
      multi[d] = m
    for d, m in zip(rd, red):
      multi[d] = m
    if self.trailing():
      lin = b.add(b.mul(oidx.linear, i64(self.count), flags=["nuw", "nsw"]), k,
                  flags=["nuw", "nsw"]) if kept else k
      return Index(b, src, linear=lin, multi=multi)
    return Index(b, src, multi=multi)


def _accumulate(b, em, red: _Reducer, oidx, start, step, vec: int, accs):
  """Fold the reduced positions start, start+step, ... (in vectors of ``vec``) into the allocas
  ``accs``."""
  count = red.count
    # vectors of `vec` consecutive positions, then the tail one by one
  nvec = count // vec
  if nvec:
    with E.ForLoop(b, start, nvec, "rv", step=step) as lp:
      base = b.mul(lp.index, i64(vec), flags=["nuw", "nsw"])
      for k in range(vec):
        em.push_scope()
        kk = b.add(base, i64(k), flags=["nuw", "nsw"]) if k else base
        idx = red.source_index(oidx, kk)
        xs = [em.value(o, idx) for o in red.ops]
        new = red.combine([b.load(a) for a in accs], xs)
        for a, v in zip(accs, new):
          b.store(v, a)
        em.pop_scope()
  if count % vec:
    with E.ForLoop(b, b.add(start, i64(nvec * vec)), count, "rt", step=step) as lp:
      em.push_scope()
      idx = red.source_index(oidx, lp.index)
      xs = [em.value(o, idx) for o in red.ops]
      new = red.combine([b.load(a) for a in accs], xs)
      for a, v in zip(accs, new):
        b.store(v, a)
      em.pop_scope()


def _warp_allreduce(b, red: _Reducer, vals, lane):
  for off in (16, 8, 4, 2, 1):
    others = []
    for v in vals:
      ws, back = _words(b, v)
      others.append(back([shfl_bfly(b, w, off) for w in ws]))
    upper = b.icmp_unsigned("!=", b.and_(lane, ir.Constant(I32, off)), ir.Constant(I32, 0))
    first = [b.select(upper, o, v) for v, o in zip(vals, others)]
    second = [b.select(upper, v, o) for v, o in zip(vals, others)]
    vals = red.combine(first, second)
  return vals


def _block_allreduce(b, red: _Reducer, vals, block: int, tag: str):
  """Every thread of the block gets the combination of all threads' ``vals``."""
  tid = sreg(b, "tid.x")
  lane = b.and_(tid, ir.Constant(I32, 31))
  vals = _warp_allreduce(b, red, vals, lane)
  if block <= 32:
    return vals
  warp = b.lshr(tid, ir.Constant(I32, 5))
  nw = block // 32
  words = []
  backs = []
  for v in vals:
    ws, back = _words(b, v)
    words.append(ws)
    backs.append(back)
  arrays = [[shared_array(b.module, I32, 32, f"{tag}_s{k}_{j}", 4) for j in range(len(ws))]
            for k, ws in enumerate(words)]
  with b.if_then(b.icmp_unsigned("==", lane, ir.Constant(I32, 0))):
    for ws, arrs in zip(words, arrays):
      for w, arr in zip(ws, arrs):
        b.store(w, shared_ptr(b, arr, warp))
  barrier(b)
  valid = b.icmp_unsigned("<", lane, ir.Constant(I32, nw))
  loaded = []
  for arrs, back, ident in zip(arrays, backs, red.ident):
    v = back([b.load(shared_ptr(b, arr, lane)) for arr in arrs])
    loaded.append(b.select(valid, v, ident))
  vals = _warp_allreduce(b, red, loaded, lane)
  barrier(b)     # the shared words may be reused by the next reduction
  return vals


def _row_block(count: int) -> int:
  return max(32, min(512, _pow2_at_least(-(-count // 8))))


class RowReduce(GpuKernel):
  """One block per output row (``outer_dims``): each prefetched reduction of the row is
  computed by the whole block, then ``outer_outs`` (the row's own values, thread 0) and
  ``inner_outs`` (``outer_dims + (n,)``) are written.

  *Resident* rows (every reduction over the row's last dimension, at most ``RESIDENT_VECS``
  vectors of ``VEC`` elements per thread): each thread's elements get one index each, used by
  every pass in one memo scope, so the row is read from memory once and every fused value
  (``exp(x - max)`` of a softmax) is computed once and kept in registers between the
  reductions and the outputs.  Threads past the row's end work on a clamped copy of the last
  vector: it is left out of the reductions and its stores write the same bits as its owner.
  Other rows loop over the row once per pass."""
  RESIDENT_VECS = 4

  def __init__(self, name, outer_dims, n, inner_outs, outer_outs, prefetch, leafmap):
    self.outer_dims, self.n = tuple(outer_dims), n
    self.inner_outs, self.outer_outs = list(inner_outs), list(outer_outs)
    self.prefetch, self.leafmap = list(prefetch), dict(leafmap)
    self.rows = math.prod(self.outer_dims)
    longest = max([_red_count(r) for r in self.prefetch] + [n or 1])
    self.resident = self._resident_plan()
    self.block = self.resident[2] if self.resident else _row_block(longest)
    super().__init__(name, K._leaf_bufs(self.leafmap),
                     K.output_bufs(self.inner_outs + self.outer_outs), work=self.rows * longest)

  def _resident_plan(self):
    """(L, V, T, vectors per thread) for resident rows, or None."""
    rank = len(self.outer_dims)
    L = self.n
    for r in self.prefetch:
      src = r.operands[0]
      if sorted(r.attrs["dimensions"]) != [rank] or src.dims[:rank] != self.outer_dims:
        return None
      if L is None:
        L = src.dims[rank]
      if src.dims != self.outer_dims + (L,):
        return None
    if not L or not self.prefetch:
      return None
    V = VEC if L % VEC == 0 else 1
    nv_total = L // V
    T = max(32, min(1024, _pow2_at_least(-(-nv_total // 2))))
    per = -(-nv_total // T)
    if per > self.RESIDENT_VECS:
      return None
    return L, V, T, per

  def launch(self, info):
    return (max(1, min(self.rows, 65535 * 4)), 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.rows == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    tid = sreg64(b, "tid.x")
    with E.ForLoop(b, sreg64(b, "ctaid.x"), self.rows, "row",
                   step=sreg64(b, "nctaid.x")) as row:
      em.push_scope()
      omulti = E.delinearize(b, row.index, self.outer_dims)
      oidx = Index(b, self.outer_dims, linear=row.index, multi=omulti)
      if self.resident:
        self._resident_row(b, em, ptr, row.index, omulti, oidx, tid)
      else:
        self._looped_row(b, em, ptr, row.index, omulti, oidx, tid)
      em.pop_scope()

  def _outer(self, b, em, ptr, oidx, tid):
    if self.outer_outs:
      em.push_scope()
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        K.store_outputs(b, em, self.outer_outs, oidx, ptr)
      em.pop_scope()

  def _looped_row(self, b, em, ptr, row, omulti, oidx, tid):
    T = self.block
    for j, r in enumerate(self.prefetch):
      red = _Reducer(b, em, r)
      if red.count == 0:
        em.remember(r, oidx, red.result(red.init_vals))
        continue
      accs = [E.alloca_entry(b, v.type) for v in red.ident]
      for a, v in zip(accs, red.ident):
        b.store(v, a)
      vec = VEC if (red.trailing() and red.count % VEC == 0 and red.count >= VEC * T) else 1
      _accumulate(b, em, red, oidx, tid, i64(T), vec, accs)
      vals = _block_allreduce(b, red, [b.load(a) for a in accs], T, f"{self.name}_r{j}")
      em.remember(r, oidx, red.result(red.finish(vals)))
    self._outer(b, em, ptr, oidx, tid)
    if self.inner_outs and self.n:
      dims = self.outer_dims + (self.n,)
      base = b.mul(row, i64(self.n), flags=["nuw", "nsw"])
      with E.ForLoop(b, tid, self.n, "col", step=i64(T)) as col:
        em.push_scope()
        idx = Index(b, dims, linear=b.add(base, col.index, flags=["nuw", "nsw"]),
                    multi=list(omulti) + [col.index])
        K.store_outputs(b, em, self.inner_outs, idx, ptr)
        em.pop_scope()

  def _resident_row(self, b, em, ptr, row, omulti, oidx, tid):
    L, V, T, per = self.resident
    dims = self.outer_dims + (L,)
    nvec = L // V
    base_row = b.mul(row, i64(L), flags=["nuw", "nsw"])
    elems = []      # (Index, valid or None) of this thread's elements
    for i in range(per):
      j = b.add(tid, i64(i * T), flags=["nuw", "nsw"]) if i else tid
      valid = None
      if (i + 1) * T > nvec:
        valid = b.icmp_signed("<", j, i64(nvec))
        j = b.select(valid, j, i64(nvec - 1))
      c0 = b.mul(j, i64(V), flags=["nuw", "nsw"]) if V > 1 else j
      for k in range(V):
        col = b.add(c0, i64(k), flags=["nuw", "nsw"]) if k else c0
        idx = Index(b, dims, linear=b.add(base_row, col, flags=["nuw", "nsw"]),
                    multi=list(omulti) + [col])
        elems.append((idx, valid))
    for jr, r in enumerate(self.prefetch):
      red = _Reducer(b, em, r)
      acc = list(red.ident)
      for idx, valid in elems:
        new = red.combine(acc, [em.value(o, idx) for o in red.ops])
        acc = new if valid is None else [b.select(valid, n_, a) for n_, a in zip(new, acc)]
      vals = _block_allreduce(b, red, acc, T, f"{self.name}_r{jr}")
      em.remember(r, oidx, red.result(red.finish(vals)))
    self._outer(b, em, ptr, oidx, tid)
    for idx, _ in elems:      # clamped copies store their owner's values again: no branch
      K.store_outputs(b, em, self.inner_outs, idx, ptr)


def _red_count(r) -> int:
  src = r.operands[0].dims
  return math.prod(src[d] for d in r.attrs["dimensions"])


def _partial_dtype(dt):
  dt = np.dtype(dt)
  return np.dtype(np.float32) if E._is_narrow(dt) else dt


class SplitPartials(GpuKernel):
  """Pass 1 of a split reduction: block ``g`` of output ``o`` folds positions
  g*T*VEC + ..., stride G*T*VEC of each reduction into ``partials[r][o * G + g]``."""

  def __init__(self, name, dims, prefetch, partials, leafmap, groups, block):
    self.dims, self.prefetch, self.partials = tuple(dims), list(prefetch), list(partials)
    self.leafmap, self.groups, self.block = dict(leafmap), groups, block
    self.nout = math.prod(self.dims)
    flat = [p for ps in self.partials for p in ps]
    super().__init__(name, K._leaf_bufs(self.leafmap), flat,
                     work=self.nout * max(_red_count(r) for r in self.prefetch))

  def launch(self, info):
    return (self.groups * self.nout, 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    G, T = self.groups, self.block
    blk = sreg64(b, "ctaid.x")
    o = b.udiv(blk, i64(G))
    g = b.urem(blk, i64(G))
    tid = sreg64(b, "tid.x")
    oidx = Index(b, self.dims, linear=o)
    for j, (r, parts) in enumerate(zip(self.prefetch, self.partials)):
      red = _Reducer(b, em, r)
      accs = [E.alloca_entry(b, v.type) for v in red.ident]
      for a, v in zip(accs, red.ident):
        b.store(v, a)
      vec = VEC if (red.trailing() and red.count % VEC == 0) else 1
      start = b.add(b.mul(g, i64(T)), tid)
      _accumulate(b, em, red, oidx, start, i64(G * T), vec, accs)
      vals = _block_allreduce(b, red, [b.load(a) for a in accs], T, f"{self.name}_r{j}")
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        pos = b.add(b.mul(o, i64(G)), g)
        for v, p, dt in zip(vals, parts, red.dtypes):
          v = E.convert_value(b, v, dt, p.dtype) if p.dtype != np.dtype(dt) else v
          E.store_element(b, v, ptr(p), pos, p.dtype)


class SplitFinish(GpuKernel):
  """Pass 2: one thread per output combines the ``G`` partials of each reduction (then the
  init value), memoises them and writes the outputs; from ``WIDE_GROUPS`` partials on, one
  block per output does.

  ``tails``: serial kernels (``Kernel``s of one thread) that followed it and are run by the
  thread that computed the only output, after its stores (``horizontal.fold_finish_epilogues``:
  a scan step's ``ys[t] = mean(...)`` stored into its stacked slice by the same launch)."""
  BLOCK = 128

  def __init__(self, name, dims, outputs, prefetch, partials, leafmap, groups, tails=()):
    self.dims, self.outputs = tuple(dims), list(outputs)
    self.prefetch, self.partials = list(prefetch), list(partials)
    self.leafmap, self.groups = dict(leafmap), groups
    self.tails = list(tails)
    self.nout = math.prod(self.dims)
    assert not self.tails or self.nout == 1, "serial tails follow a single output"
    flat = [p for ps in self.partials for p in ps]
    reads = flat + K._leaf_bufs(self.leafmap) + [x for t in self.tails for x in t.reads]
    writes = K.output_bufs(outputs) + [x for t in self.tails for x in t.writes]
    super().__init__(name, reads, writes, work=self.nout * groups)

  #: From this many partials per output, a block per output combines them (its threads
  #: striding over them, then a block reduction) instead of one thread per output: one thread
  #: adding hundreds of partials one after the other (a large sum's, or a stencil chain's one
  #: per tile) took longer than the launch.
  WIDE_GROUPS = 32
  WIDE_BLOCK = 128

  @property
  def wide(self) -> bool:
    return self.groups >= self.WIDE_GROUPS and self.nout <= 65535

  def launch(self, info):
    if self.wide:
      return (self.nout, 1, 1), (self.WIDE_BLOCK, 1, 1), 0
    return (-(-self.nout // self.BLOCK), 1, 1), (self.BLOCK, 1, 1), 0

  def helpers(self):
    return list(self.tails)

  def _fold(self, b, ptr, red, parts, o, start, step):
    """This thread's combination of partials ``start, start + step, ...`` of output ``o``."""
    G = self.groups
    accs = [E.alloca_entry(b, v.type) for v in red.ident]
    for a, v in zip(accs, red.ident):
      b.store(v, a)
    with E.ForLoop(b, start, G, "g", step=step) as g:
      pos = b.add(b.mul(o, i64(G)), g.index)
      xs = []
      for p, dt in zip(parts, red.dtypes):
        x = E.load_element(b, ptr(p), pos, p.dtype)
        xs.append(E.convert_value(b, x, p.dtype, dt) if p.dtype != np.dtype(dt) else x)
      new = red.combine([b.load(a) for a in accs], xs)
      for a, v in zip(accs, new):
        b.store(v, a)
    return [b.load(a) for a in accs]

  def _outputs(self, b, em, oidx, ptr):
    K.store_outputs(b, em, self.outputs, oidx, ptr)
    for t in self.tails:      # (this thread's own stores are visible to it)
      b.call(b.module.globals[t.name], [ptr(x) for x in t.buffers] + [i64(0), i64(1)])

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    if self.wide:              # a block per output
      T = self.WIDE_BLOCK
      o = sreg64(b, "ctaid.x")
      tid = sreg64(b, "tid.x")
      oidx = Index(b, self.dims, linear=o)
      for j, (r, parts) in enumerate(zip(self.prefetch, self.partials)):
        red = _Reducer(b, em, r)
        vals = _block_allreduce(b, red, self._fold(b, ptr, red, parts, o, tid, i64(T)), T,
                                f"{self.name}_w{j}")
        em.remember(r, oidx, red.result(red.finish(vals)))
      with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
        self._outputs(b, em, oidx, ptr)
      return
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      oidx = Index(b, self.dims, linear=o)
      for r, parts in zip(self.prefetch, self.partials):
        red = _Reducer(b, em, r)
        em.remember(r, oidx, red.result(red.finish(self._fold(b, ptr, red, parts, o, 0, 1))))
      self._outputs(b, em, oidx, ptr)


class ColumnReduce(GpuKernel):
  """The ``reduces`` (sibling reductions over the same contiguous middle block ``red`` of
  ``pre + red + post``; often one, several for a multi-output fusion such as a batchnorm
  gradient's sums): thread (s, p, j) folds chunk ``s`` of the reduced block for output (p, j)
  of each, their common operands read and computed once per element; with one chunk it folds
  the whole block in order into ``outs``, else into ``partials[n][s, p*post + j]`` for
  ``ColumnFinish``."""
  BLOCK = 256

  def __init__(self, name, reduces, outs, leafmap, pre, red, post, splits=1, partials=None):
    self.reduces, self.outs = list(reduces), list(outs)
    self.partials = list(partials) if partials is not None else None
    self.leafmap = dict(leafmap)
    self.pre, self.red, self.post = tuple(pre), tuple(red), tuple(post)
    self.splits = splits
    self.nout = math.prod(self.pre) * math.prod(self.post)
    self.partial = partials is not None
    super().__init__(name, K._leaf_bufs(self.leafmap),
                     self.partials if self.partial else self.outs,
                     work=self.nout * math.prod(self.red) * len(self.reduces))

  def launch(self, info):
    n = self.nout * self.splits
    return (max(1, -(-n // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    nred, npost = math.prod(self.red), math.prod(self.post)
    if self.nout == 0:
      return
    S = self.splits
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr), fast_reductions=self.partial)
    t = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", t, i64(self.nout * S))):
      s = b.udiv(t, i64(self.nout))
      rest = b.urem(t, i64(self.nout))
      p = b.udiv(rest, i64(npost))
      j = b.urem(rest, i64(npost))
      if self.partial:
        reds = [_Reducer(b, em, r) for r in self.reduces]
        acc0s = [red.ident[0] for red in reds]
        csize = -(-nred // S)
        klo = b.mul(s, i64(csize))
        khi = b.add(klo, i64(csize))
        khi = b.select(b.icmp_signed(">", khi, i64(nred)), i64(nred), khi)
      else:
        reds = None
        acc0s = [em.scalar(r.operands[1]) for r in self.reduces]
        klo, khi = i64(0), i64(nred)
      accs = []
      for a0 in acc0s:
        acc = E.alloca_entry(b, a0.type)
        b.store(a0, acc)
        accs.append(acc)
      pmulti = E.delinearize(b, p, self.pre)
      jmulti = E.delinearize(b, j, self.post)
      with E.ForLoop(b, klo, khi, "k") as k:
        em.push_scope()
        for n, (r, acc) in enumerate(zip(self.reduces, accs)):
          src = r.operands[0]
          lin = b.add(b.mul(b.add(b.mul(p, i64(nred)), k.index), i64(npost)), j)
          idx = Index(b, src.dims, linear=lin,
                      multi=pmulti + E.delinearize(b, k.index, self.red) + jmulti)
          x = em.value(src, idx)
          if self.partial:
            new = reds[n].combine([b.load(acc)], [x])[0]
          else:
            new = em.combine(r.attrs["to_apply"], [b.load(acc)], [x], [r.dtype])[0]
          b.store(new, acc)
        em.pop_scope()
      for n, (r, acc) in enumerate(zip(self.reduces, accs)):
        if self.partial:
          part = self.partials[n]
          E.store_element(b, b.load(acc), ptr(part), t, part.dtype)
        else:
          E.store_element(b, b.load(acc), ptr(self.outs[n]), rest, r.dtype)


class ColumnFinish(GpuKernel):
  """out[o] = init (+) fold over s of partials[s, o]: one block per output, its threads folding
  every ``BLOCK``-th partial, then a warp-shuffle and shared-memory combine (a column
  reduction with few outputs has thousands of partials each: one thread per output folding
  them in turn took 60 us for 64 outputs of 4,224 partials)."""
  BLOCK = 256

  def __init__(self, name, reduce, out, partials, leafmap, splits, epilogues=()):
    self.reduce, self.out, self.partials = reduce, out, partials
    self.leafmap, self.splits = dict(leafmap), splits
    # elementwise kernels over the outputs that read them at their own index (an optimizer's
    # update of a bias from its gradient): computed here by the thread that finishes ``out[o]``
    # (``horizontal.fold_finish_epilogues``)
    self.epilogues = list(epilogues)
    self.nout = out.size
    self.block = min(self.BLOCK, max(32, _pow2_at_least(splits)))
    reads = [partials] + K._leaf_bufs(self.leafmap)
    writes = [out]
    for e in self.epilogues:
      reads += [x for x in e.reads if x is not out]
      writes += e.writes
    super().__init__(name, reads, writes, work=self.nout * splits)

  def launch(self, info):
    return (max(1, self.nout), 1, 1), (self.block, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.nout == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    o = sreg64(b, "ctaid.x")
    red = _Reducer(b, em, self.reduce)
    acc = E.alloca_entry(b, red.ident[0].type)
    b.store(red.ident[0], acc)
    with E.ForLoop(b, sreg64(b, "tid.x"), self.splits, "s", step=self.block) as s:
      x = E.load_element(b, ptr(self.partials), b.add(b.mul(s.index, i64(self.nout)), o),
                         self.partials.dtype)
      b.store(red.combine([b.load(acc)], [x])[0], acc)
    total = _block_allreduce(b, red, [b.load(acc)], self.block, self.name)
    with b.if_then(b.icmp_unsigned("==", sreg(b, "tid.x"), ir.Constant(I32, 0))):
      v = red.finish(total)[0]
      E.store_element(b, v, ptr(self.out), o, self.reduce.dtype)
      for e in self.epilogues:
        em_e = Emitter(b, K._make_leaves(b, e.leafmap, ptr))
        oidx = Index(b, e.dims, linear=o)
        for leaf, buf in e.leafmap.items():
          if buf is self.out:
            em_e.remember(leaf, oidx, v)
        K.store_outputs(b, em_e, e.outputs, oidx, ptr)


class ColumnOutputsFinish(GpuKernel):
  """The outputs of ``dims`` computed from reductions over leading/middle dimensions: one
  thread per output element combines each reduction's column partials
  (``partials[j][s * nout + o]``, written by ``ColumnReduce``), memoises the result and writes
  the outputs (a bias update ``b - lr * sum(g, axis=0)`` in one pass after the partials)."""
  BLOCK = 256

  def __init__(self, name, dims, outputs, reduces, partials, leafmap, splits):
    self.dims, self.outputs = tuple(dims), list(outputs)
    self.reduces, self.partials = list(reduces), list(partials)
    self.leafmap, self.splits = dict(leafmap), splits
    self.nout = math.prod(self.dims)
    super().__init__(name, list(self.partials) + K._leaf_bufs(self.leafmap),
                     K.output_bufs(outputs), work=self.nout * splits)

  def launch(self, info):
    return (max(1, -(-self.nout // self.BLOCK)), 1, 1), (self.BLOCK, 1, 1), 0

  def gpu_body(self, b, ptr):
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    o = b.add(b.mul(sreg64(b, "ctaid.x"), i64(self.BLOCK)), sreg64(b, "tid.x"))
    with b.if_then(b.icmp_signed("<", o, i64(self.nout))):
      oidx = Index(b, self.dims, linear=o)
      for r, part in zip(self.reduces, self.partials):
        red = _Reducer(b, em, r)
        acc = E.alloca_entry(b, red.ident[0].type)
        b.store(red.ident[0], acc)
        with E.ForLoop(b, 0, self.splits, "s") as sl:
          x = E.load_element(b, ptr(part), b.add(b.mul(sl.index, i64(self.nout)), o), part.dtype)
          b.store(red.combine([b.load(acc)], [x])[0], acc)
        em.remember(r, oidx, red.finish([b.load(acc)])[0])
      K.store_outputs(b, em, self.outputs, oidx, ptr)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
