"""The scratch of the packed GEMM's calls (``gemm.py``): how its driver cuts C into pieces for
``nthreads`` callers (:func:`_grid`, :func:`_pieces`, the same choice as the driver's work
split), what one piece packs (:func:`_piece_elements`, the layout of ``tiled`` in the driver:
B's panels, then A's), and so how many elements a call's ``pack`` must hold
(:func:`pack_buffer_elements`) and a ``PACK_B`` call's packed B (:func:`packed_b_elements`).
The planner sizes each dot's per-thread scratch with these (``dots.dot_scratch_bytes``), the
autotuner its timed calls' (``gemm_tune.py``); a change to the driver's packing must change
them with it (``tests/test_gemm.py`` calls every kernel with exactly this much scratch and
guard elements after it)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
  from ourjax.backends.llvm.gemm import Blocking

# (gemm.py imports this module at its end: its names are looked up when a function runs)

__all__ = ["pack_buffer_elements", "pack_buffer_bytes", "packed_b_elements"]


def _cdiv(a, b):
  return -(-a // b)


def _grid(M: int, N: int, nth: int, bl: Blocking, w: int):
  """(pm, pn): the grid of row-tile groups x column-panel groups that ``nth`` pieces of an
  ``M x N`` product are cut into (the driver's choice, see its work split)."""
  tm, tn = _cdiv(M, bl.mr), _cdiv(N, bl.nv * w)
  best = None
  for pm in range(1, nth + 1):
    if nth % pm:
      continue
    sm, sn = _cdiv(tm, pm), _cdiv(tn, nth // pm)
    cost = sm * sn * bl.mr * bl.nv + sm * 2 * bl.mr + sn * 2 * bl.nv
    if best is None or cost < best[0]:
      best = cost, pm
  return best[1], nth // best[1]


def _pieces(M: int, N: int, nth: int, batch: int, bl: Blocking, w: int):
  """The (rows, columns) of C that each piece of an ``nth``-way split computes (per batch
  entry), as the driver cuts them."""
  if nth <= 1 or batch >= nth:
    return [(M, N)]
  pm, pn = _grid(M, N, nth, bl, w)
  tm, tn = _cdiv(M, bl.mr), _cdiv(N, bl.nv * w)

  def share(tiles, groups, g, tile, ext):
    return min(tiles * (g + 1) // groups * tile, ext) - tiles * g // groups * tile
  return sorted({(share(tm, pm, gi, bl.mr, M), share(tn, pn, gj, bl.nv * w, N))
                 for gi in range(pm) for gj in range(pn)})


def packed_b_elements(dtype: str, N: int, K: int, blocking: Optional[Blocking] = None,
                      isa: Optional[str] = None) -> int:
  """Elements of T of op(B) packed by a ``PACK_B`` call for ``PACKED_B`` calls: every
  ``nr``-wide column panel, K deep."""
  vt = _gemm().vector_target(isa)
  nr = (blocking or vt.blocking[dtype]).nv * vt.lanes[dtype]
  return _cdiv(max(N, 1), nr) * nr * max(K, 1)


def _piece_elements(dtype, rows: int, cols: int, K: int, bl: Blocking, w: int,
                    direct: bool, b_packed: bool = False, edge: bool = True,
                    direct_a: bool = False) -> int:
  """Scratch elements of a piece of ``rows x cols`` (the driver's layout in ``tiled``): B's
  panels of a column block (only one panel when the piece is one row block, which packs each
  panel as its tiles need it, or B is read in place, ``direct``, which packs only a partial
  last panel: none unless ``edge``, N not whole panels), then one row panel of A (the driver
  packs each just before its tiles, which run across the column panels: on the call's stack,
  not here, where it fits ``gemm.A_PANEL_STACK_BYTES``), or A's panels of a
  row block when B is packed a panel at a time (one row block) or read in place in column
  blocks wider than ``gemm.DIRECT_ROWS_FIRST_BYTES``, each K slice deep, and the slack to
  align the start to 64 bytes; ``direct_a``: A is a patch matrix the tiles read in place
  (``gemm_im2col.emit_direct_ukernel``), no panel of it is packed (nothing at all when B
  is not either)."""
  if rows <= 0 or cols <= 0:
    return 0
  nr, align = bl.nv * w, 64 // _gemm()._TYPES[dtype][1]
  nc = _cdiv(bl.nc, nr) * nr          # (the driver's: whole panels)
  kstep = max(1, _cdiv(K, max(1, _cdiv(K, bl.kc))))
  nmb = max(1, _cdiv(rows, bl.mc))
  mstep = max(bl.mr, _cdiv(_cdiv(rows, nmb), bl.mr) * bl.mr)
  b_cols = 0 if b_packed or (direct and not edge) else \
      nr if direct or nmb == 1 else min(nc, _cdiv(cols, nr) * nr)
  size = _gemm()._TYPES[dtype][1]
  rows_first = direct and \
      min(nc, _cdiv(cols, nr) * nr) * kstep * size <= _gemm().DIRECT_ROWS_FIRST_BYTES
  a_elements = mstep * kstep
  if cols <= nr or b_packed or rows_first or b_cols > nr:
    # (one column panel, all of B's panels packed first, or B read in place in blocks that
    # fit DIRECT_ROWS_FIRST_BYTES: A packed a row panel at a time, on the call's stack where
    # it fits gemm.A_PANEL_STACK_BYTES)
    a_elements = 0 if bl.mr * kstep * size <= _gemm().A_PANEL_STACK_BYTES else bl.mr * kstep
  if direct_a:
    a_elements = 0
  b_elements = _cdiv(b_cols * kstep, align) * align
  return b_elements + a_elements + align if b_elements or a_elements else 0


def pack_buffer_elements(dtype: str, M: int, N: int, K: int, nthreads: int = 1,
                         blocking: Optional[Blocking] = None, isa: Optional[str] = None, *,
                         trans_b: Optional[bool] = None, batch: int = 1,
                         im2col: bool = False, b_packed: bool = False,
                         direct_a: bool = False) -> int:
  """Elements of T that one call's ``pack`` must hold (each call running at once has its own)
  for these sizes cut ``nthreads`` ways (of a kernel emitted with the same ``blocking`` and
  ``isa``): the most any piece of the split packs.  ``trans_b``: whether B is passed transposed
  (None: either); ``batch``: batch entries (at least ``nthreads`` of them: whole entries a
  piece); ``im2col``: A is a patch matrix (packed, unless ``direct_a``: read in place by the
  tiles, ``gemm_im2col.direct_a``); ``b_packed``: B is passed packed
  (``PACKED_B``: only A's panels)."""
  vt = _gemm().vector_target(isa)
  bl = blocking or vt.blocking[dtype]
  w = vt.lanes[dtype]
  row_major_b = trans_b is False and not b_packed
  if row_major_b and not im2col and 0 < bl.stream_rows and M <= bl.stream_rows:
    return 0          # (the few-rows kernels stream B: nothing is packed)
  # (B of either layout: a row-major one may be read in place, with A's row block packed
  # whole, and a transposed one packed by column blocks, with A a row panel at a time)
  either = trans_b is None and not b_packed
  # (B read in place packs only a partial last column panel: none when N is whole panels)
  edge = N % (bl.nv * w) != 0
  return max(_piece_elements(dtype, r, c, K, bl, w, direct, b_packed, edge,
                            im2col and direct_a)
             for r, c in _pieces(max(M, 1), max(N, 1), max(nthreads, 1), batch, bl, w)
             for direct in ({False, r <= bl.direct_b_rows} if either else
                            {row_major_b and r <= bl.direct_b_rows}))


def pack_buffer_bytes(dtype: str, M: int, N: int, K: int, nthreads: int = 1,
                      blocking: Optional[Blocking] = None, isa: Optional[str] = None,
                      **kw) -> int:
  return pack_buffer_elements(dtype, M, N, K, nthreads, blocking, isa, **kw) * \
      _gemm()._TYPES[dtype][1]


def _gemm():
  from ourjax.backends.llvm import gemm
  return gemm
