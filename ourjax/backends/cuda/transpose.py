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

from ourjax.backends.cuda.codegen import (GpuKernel, _words, barrier, shared_array,
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
    super().__init__(name, K._leaf_bufs(self.leafmap), K.output_bufs(outputs),
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
    dims = self.dims
    slots = []                           # per hero: (shared arrays, one per 32-bit word)
    for n, h in enumerate(self.heroes):
      words = len(_words(b, ir.Constant(E.compute_type(h.dtype), 0))[0])
      slots.append([shared_array(b.module, I32, TILE * (TILE + 1), f"{self.name}_t{n}_{w}", 4)
                    for w in range(words)])

    def stage(other, qq, jj, pos):       # the heroes' operands, read along q
      em.push_scope()
      out = self._out_multi(b, other, qq, jj)
      for h, arrs in zip(self.heroes, slots):
        perm, src = h.attrs["dimensions"], h.operands[0]
        v = em.value(src, Index(b, src.dims, multi=[out[perm.index(d)]
                                                     for d in range(len(dims))]))
        for w, arr in zip(_words(b, v)[0], arrs):
          b.store(w, shared_ptr(b, arr, pos))
      em.pop_scope()

    def write(other, qq, jj, pos):       # the outputs, written along j
      em.push_scope()
      idx = Index(b, dims, multi=self._out_multi(b, other, qq, jj))
      for h, arrs in zip(self.heroes, slots):
        back = _words(b, ir.Constant(E.compute_type(h.dtype), 0))[1]
        em.remember(h, idx, back([b.load(shared_ptr(b, arr, pos)) for arr in arrs]))
      K.store_outputs(b, em, self.outputs, idx, ptr)
      em.pop_scope()

    _tile_loop(b, [dims[k] for k in self.others], dims[self.q], dims[-1], stage, write)


def _tile_loop(b, batch_dims, nq, nj, stage, write):
  """The tile loop of both kernels: blocks of ``TILE x ROWS`` threads loop (grid-stride) over
  ``TILE x TILE`` tiles of a (batch..., q, j) space.  Per tile, ``stage(batch, qq, jj, pos)``
  runs for the elements thread (tx, ty) reads along q (qq = q0 + tx), then, after a barrier,
  ``write(batch, qq, jj, pos)`` for those it writes along j (jj = j0 + tx); both only inside
  the bounds.  ``batch`` is the tile's index per batch dimension; ``pos`` (i32) is the slot of
  element (qq, jj) in a padded ``TILE x (TILE + 1)`` shared tile, the same in both phases, where
  column accesses hit 32 different banks."""
  ntq, ntj = -(-nq // TILE), -(-nj // TILE)
  tid = sreg64(b, "tid.x")
  tx = b.and_(tid, i64(TILE - 1))
  ty = b.lshr(tid, i64(5))
  tiles = math.prod(batch_dims) * ntq * ntj
  with E.ForLoop(b, sreg64(b, "ctaid.x"), tiles, "tile", step=sreg64(b, "nctaid.x")) as t:
    tj = b.urem(t.index, i64(ntj))
    rest = b.udiv(t.index, i64(ntj))
    tq = b.urem(rest, i64(ntq))
    batch = E.delinearize(b, b.udiv(rest, i64(ntq)), batch_dims) if batch_dims else []
    q0, j0 = b.mul(tq, i64(TILE)), b.mul(tj, i64(TILE))
    for phase, fn in ((0, stage), (1, write)):
      for s in range(TILE // ROWS):
        row = b.add(ty, i64(s * ROWS)) if s else ty
        dq, dj = (tx, row) if phase == 0 else (row, tx)
        qq, jj = b.add(q0, dq), b.add(j0, dj)
        ok = b.and_(b.icmp_unsigned("<", qq, i64(nq)), b.icmp_unsigned("<", jj, i64(nj)))
        with b.if_then(ok):
          fn(batch, qq, jj, b.trunc(b.add(b.mul(dj, i64(TILE + 1)), dq), I32))
      barrier(b)                         # (after the writes: the next tile reuses the tile)


class StridedTranspose(GpuKernel):
  """``dst[b, r, c] = src[b s_b + r + c s_c]``: a strided matrix whose unit stride is along
  ``r`` copied row-major (``dst`` of dims ``(B, R, C)``), through ``TILE x TILE`` tiles in
  shared memory so that both the reads (along ``r``) and the writes (along ``c``) are
  coalesced.  Used to give a dot a K-major operand (``dots._dot_kernels``); moves storage
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
    tile = shared_array(b.module, E.storage_type(self.src.dtype), TILE * (TILE + 1),
                        self.name + "_tile", 4)

    def stage(batch, r, c, pos):         # read along r (unit stride in src)
      at = b.add(b.add(b.mul(batch[0], i64(self.s_b)), r), b.mul(c, i64(self.s_c)))
      b.store(b.load(b.gep(src, [at], inbounds=True)), shared_ptr(b, tile, pos))

    def write(batch, r, c, pos):         # write along c (row-major dst)
      at = b.add(b.mul(b.add(b.mul(batch[0], i64(self.R)), r), i64(self.C)), c)
      b.store(b.load(shared_ptr(b, tile, pos)), b.gep(dst, [at], inbounds=True))

    _tile_loop(b, [self.B], self.R, self.C, stage, write)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
