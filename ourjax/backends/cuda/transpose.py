"""Transposes through shared memory: elementwise kernels whose result reads an operand through a
``transpose`` that changes the minor dimension.

Evaluated element by element in the output's order (``codegen.Elementwise``), such a fusion
writes coalesced but reads the transposed operand down a column: each warp touches 32 rows.
Here the output is cut into ``TILE x TILE`` tiles over two of its dimensions, the last one
(``j``, where writes are contiguous) and the one the operand's last dimension maps to (``q``,
where its reads are contiguous). A block stages the tile of every such transpose (a *hero*)
in shared memory, reading along ``q``, then evaluates the fusion's outputs along ``j`` with the
heroes' elements taken from shared memory (``Emitter.remember``), so both sides of memory
traffic are coalesced. Everything else in the fusion is evaluated by the shared emitter as in
``Elementwise``; a hero reached through another index (a reshape, a broadcast) is computed there
directly, which is still correct.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from ourjax.backends.cuda.codegen import (GpuKernel, _store, _words, barrier, shared_array,
                                          shared_ptr, sreg64)
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I32, Emitter, Index, i64

__all__ = ["TiledTranspose", "plan"]

TILE = 32          # tile edge (one warp wide)
ROWS = 8           # warps per block: each thread moves TILE // ROWS elements per tile
MIN_EDGE = 16      # both tiled dimensions at least this long, else a plain loop is as good
MAX_HEROES = 4     # shared memory: TILE * (TILE + 1) words per hero and word


def _heroes(dims, outputs, leafmap):
  """The transposes of ``dims`` with one permutation moving the minor dimension, or None."""
  rank = len(dims)
  seen, stack, heroes = set(), [i for i, _ in outputs], []
  while stack:
    x = stack.pop()
    if id(x) in seen or x in leafmap:
      continue
    seen.add(id(x))
    if x.opcode == "transpose" and K._dims(x) == dims:
      perm = tuple(x.attrs["dimensions"])
      if perm[-1] != rank - 1:
        heroes.append(x)
        continue           # its operand is read in the staging phase
    stack.extend(x.operands)
  if not heroes or len(heroes) > MAX_HEROES:
    return None
  perm = tuple(heroes[0].attrs["dimensions"])
  if any(tuple(h.attrs["dimensions"]) != perm for h in heroes):
    return None
  return perm, heroes


def plan(name, dims, outputs, leafmap):
  """A ``TiledTranspose`` for an elementwise kernel, or None where it does not apply."""
  dims = tuple(dims)
  if len(dims) < 2 or any(K._dims(i) != dims or i.shape.is_tuple for i, _ in outputs):
    return None
  found = _heroes(dims, outputs, leafmap)
  if found is None:
    return None
  perm, heroes = found
  q = perm.index(len(dims) - 1)
  if dims[q] < MIN_EDGE or dims[-1] < MIN_EDGE:
    return None
  return TiledTranspose(name, dims, outputs, leafmap, heroes, q)


class TiledTranspose(GpuKernel):
  """Outputs of ``dims`` tile by tile (see the module docstring); ``q`` is the output dimension
  that is the heroes' operands' minor one.  Blocks of ``TILE x ROWS`` threads loop over the
  tiles (grid-stride)."""

  def __init__(self, name, dims, outputs, leafmap, heroes, q):
    self.dims, self.outputs, self.leafmap = tuple(dims), list(outputs), dict(leafmap)
    self.heroes, self.q = list(heroes), q
    self.others = [k for k in range(len(dims)) if k not in (q, len(dims) - 1)]
    self.ntq, self.ntj = -(-dims[q] // TILE), -(-dims[-1] // TILE)
    self.tiles = math.prod(dims[k] for k in self.others) * self.ntq * self.ntj
    super().__init__(name, K._leaf_bufs(self.leafmap), [buf for _, buf in outputs],
                     work=math.prod(dims))

  def launch(self, info):
    return (max(1, min(self.tiles, info.sm_count * 64)), 1, 1), (TILE * ROWS, 1, 1), 0

  def _out_multi(self, b, other, qq, jj):
    multi, it = [], iter(other)
    for k in range(len(self.dims)):
      multi.append(qq if k == self.q else jj if k == len(self.dims) - 1 else next(it))
    return multi

  def gpu_body(self, b, ptr):
    if self.tiles == 0:
      return
    em = Emitter(b, K._make_leaves(b, self.leafmap, ptr))
    dims, q, last = self.dims, self.q, len(self.dims) - 1
    tid = sreg64(b, "tid.x")
    tx = b.and_(tid, i64(TILE - 1))
    ty = b.lshr(tid, i64(5))
    stride = TILE + 1                    # a padded row: column reads hit 32 different banks
    slots = []                           # per hero: (shared arrays, one per 32-bit word)
    for n, h in enumerate(self.heroes):
      words = len(_words(b, ir.Constant(E.compute_type(h.dtype), 0))[0])
      slots.append([shared_array(b.module, I32, TILE * stride, f"{self.name}_t{n}_{w}", 4)
                    for w in range(words)])
    other_dims = [dims[k] for k in self.others]
    with E.ForLoop(b, sreg64(b, "ctaid.x"), self.tiles, "tile",
                   step=sreg64(b, "nctaid.x")) as t:
      tj = b.urem(t.index, i64(self.ntj))
      rest = b.udiv(t.index, i64(self.ntj))
      tq = b.urem(rest, i64(self.ntq))
      other = E.delinearize(b, b.udiv(rest, i64(self.ntq)), other_dims) if other_dims else []
      q0 = b.mul(tq, i64(TILE))
      j0 = b.mul(tj, i64(TILE))
      # stage: thread (tx, ty) reads the heroes' operands at q = q0 + tx (contiguous there)
      for s in range(TILE // ROWS):
        row = b.add(ty, i64(s * ROWS)) if s else ty
        qq, jj = b.add(q0, tx), b.add(j0, row)
        ok = b.and_(b.icmp_unsigned("<", qq, i64(dims[q])),
                    b.icmp_unsigned("<", jj, i64(dims[last])))
        with b.if_then(ok):
          em.push_scope()
          out = self._out_multi(b, other, qq, jj)
          for h, arrs in zip(self.heroes, slots):
            perm = h.attrs["dimensions"]
            src = h.operands[0]
            inv = [out[perm.index(d)] for d in range(len(dims))]
            v = em.value(src, Index(b, src.dims, multi=inv))
            pos = b.trunc(b.add(b.mul(row, i64(stride)), tx), I32)
            for w, arr in zip(_words(b, v)[0], arrs):
              b.store(w, shared_ptr(b, arr, pos))
          em.pop_scope()
      barrier(b)
      # write: thread (tx, ty) computes the outputs at j = j0 + tx (contiguous there)
      for s in range(TILE // ROWS):
        row = b.add(ty, i64(s * ROWS)) if s else ty
        qq, jj = b.add(q0, row), b.add(j0, tx)
        ok = b.and_(b.icmp_unsigned("<", qq, i64(dims[q])),
                    b.icmp_unsigned("<", jj, i64(dims[last])))
        with b.if_then(ok):
          em.push_scope()
          idx = Index(b, dims, multi=self._out_multi(b, other, qq, jj))
          pos = b.trunc(b.add(b.mul(tx, i64(stride)), row), I32)
          for h, arrs in zip(self.heroes, slots):
            proto = ir.Constant(E.compute_type(h.dtype), 0)
            back = _words(b, proto)[1]
            em.remember(h, idx, back([b.load(shared_ptr(b, arr, pos)) for arr in arrs]))
          _store(b, em, self.outputs, idx, ptr)
          em.pop_scope()
      barrier(b)                         # the next tile reuses the shared arrays


class StridedTranspose(GpuKernel):
  """``dst[b, r, c] = src[b s_b + r + c s_c]``: a strided matrix whose unit stride is along
  ``r`` copied row-major (``dst`` of dims ``(B, R, C)``), through ``TILE x TILE`` tiles in
  shared memory so that both the reads (along ``r``) and the writes (along ``c``) are
  coalesced.  Used to give a dot a K-major operand (``codegen._dot_kernels``); moves storage
  words as they are."""

  def __init__(self, name, src, dst, B, R, C, s_b, s_c):
    self.src, self.dst = src, dst
    self.B, self.R, self.C, self.s_b, self.s_c = B, R, C, s_b, s_c
    self.ntr, self.ntc = -(-R // TILE), -(-C // TILE)
    self.tiles = B * self.ntr * self.ntc
    super().__init__(name, [src], [dst], work=B * R * C)

  def launch(self, info):
    return (max(1, min(self.tiles, info.sm_count * 64)), 1, 1), (TILE * ROWS, 1, 1), 0

  def gpu_body(self, b, ptr):
    if self.tiles == 0:
      return
    src, dst = ptr(self.src), ptr(self.dst)
    ty_elem = E.storage_type(self.src.dtype)
    tile = shared_array(b.module, ty_elem, TILE * (TILE + 1), self.name + "_tile", 4)
    tid = sreg64(b, "tid.x")
    tx = b.and_(tid, i64(TILE - 1))
    ty = b.lshr(tid, i64(5))
    R, C = self.R, self.C
    with E.ForLoop(b, sreg64(b, "ctaid.x"), self.tiles, "tile",
                   step=sreg64(b, "nctaid.x")) as t:
      tc = b.urem(t.index, i64(self.ntc))
      rest = b.udiv(t.index, i64(self.ntc))
      tr = b.urem(rest, i64(self.ntr))
      bat = b.udiv(rest, i64(self.ntr))
      r0, c0 = b.mul(tr, i64(TILE)), b.mul(tc, i64(TILE))
      for s in range(TILE // ROWS):       # read along r
        row = b.add(ty, i64(s * ROWS)) if s else ty
        r, c = b.add(r0, tx), b.add(c0, row)
        ok = b.and_(b.icmp_unsigned("<", r, i64(R)), b.icmp_unsigned("<", c, i64(C)))
        with b.if_then(ok):
          at = b.add(b.add(b.mul(bat, i64(self.s_b)), r), b.mul(c, i64(self.s_c)))
          v = b.load(b.gep(src, [at], inbounds=True))
          b.store(v, shared_ptr(b, tile, b.trunc(b.add(b.mul(row, i64(TILE + 1)), tx), I32)))
      barrier(b)
      for s in range(TILE // ROWS):       # write along c
        row = b.add(ty, i64(s * ROWS)) if s else ty
        r, c = b.add(r0, row), b.add(c0, tx)
        ok = b.and_(b.icmp_unsigned("<", r, i64(R)), b.icmp_unsigned("<", c, i64(C)))
        with b.if_then(ok):
          v = b.load(shared_ptr(b, tile, b.trunc(b.add(b.mul(tx, i64(TILE + 1)), row), I32)))
          at = b.add(b.mul(b.add(b.mul(bat, i64(R)), r), i64(C)), c)
          b.store(v, b.gep(dst, [at], inbounds=True))
      barrier(b)
