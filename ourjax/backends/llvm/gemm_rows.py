"""The packed GEMM's few-rows kernels (``gemm.py``'s ``rows4``, ``rows2``, ``rows1``): a
product of at most ``Blocking.stream_rows`` rows streams whole rows of a row-major B through
4, 2 or 1-row axpys instead of register tiles.  Moved out of gemm.py (the driver calls them
from ``gemm_block``), which imports this module at its end."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import llvmlite.ir as ir

if TYPE_CHECKING:
  from ourjax.backends.llvm.gemm import Epilogue, _Ctx

__all__ = []


def _emit_rows(cx: _Ctx, name: str, R: int, chunk: int, epilogue: Optional[Epilogue],
               accumulate: bool) -> ir.Function:
  """``void rows(i64 K, T* A, i64 a_rs, i64 a_ks, T* B, i64 ldb, T* C, i64 ldc, i64 ncols,
  i64 row0, i64 col0, i1 zero)``: ``C[r, j] = sum_k A[r*a_rs + k*a_ks] * B[k*ldb + j]`` for
  ``r < R``, ``j < ncols`` (row-major B only; added to C unless ``zero``).

  For a handful of rows a register tile wastes most of its FMAs and reads B in column panels
  (a strided walk); here every k step streams whole rows of B (four k at a time) into R rows of
  C that stay in L1 (``chunk`` columns at once), i.e. about the speed of reading B.  Four k
  steps per pass over C: the 16 broadcast A values of 4 rows outnumber 16 registers (AVX2, SSE:
  a few live on the stack), but two steps per pass, which fit, ran 15-30% slower there (twice
  the loads and stores of C)."""
  from ourjax.backends.llvm.gemm import (I1, I64, _c32, _c64, _emit_epilogue_loop, _for, _if,
                                         _sdiv_up, _smin, _splat)
  w = cx.w
  fn = ir.Function(cx.module, ir.FunctionType(ir.VoidType(), [
      I64, cx.p, I64, I64, cx.p, I64, cx.p, I64, I64, I64, I64, I1]), name)
  fn.linkage = "internal"
  fn.attributes.add("noinline")
  K, a, a_rs, a_ks, bm, ldb, c, ldc, ncols, row0, col0, zero = fn.args
  for x in (a, bm, c):
    x.add_attribute("noalias")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  arow = [b.gep(a, [b.mul(_c64(r), a_rs)]) for r in range(R)]
  U = 4
  kmain = b.sub(K, b.srem(K, _c64(U)))
  all_lanes = ir.Constant(cx.mt, [1] * w)

  with _for(b, 0, ncols, chunk, name="ch") as j0:
    width = _smin(b, _c64(chunk), b.sub(ncols, j0))
    crow = [b.gep(c, [b.add(b.mul(_c64(r), ldc), j0)]) for r in range(R)]
    brow0 = b.gep(bm, [j0])
    nvec = _sdiv_up(b, width, _c64(w))

    def mask_at(j):
      return b.select(b.icmp_signed("<=", b.add(j, _c64(w)), width), all_lanes,
                      cx.lane_mask(b, b.sub(width, j)))

    if not accumulate:
      with _if(b, zero, name="zero"):
        with _for(b, 0, nvec, name="z") as v:
          j = b.mul(v, _c64(w))
          m = mask_at(j)
          for r in range(R):
            b.call(cx.mstore, [cx.vzero, b.gep(crow[r], [j]), _c32(cx.size), m])

    def ksteps(k0, n):
      """C[:, chunk] += the terms k0 .. k0+n-1 (n static)."""
      avals = [[_splat(b, b.load(b.gep(arow[r], [b.mul(b.add(k0, _c64(u)), a_ks)]),
                                 align=cx.size), w) for u in range(n)] for r in range(R)]
      brows = [b.gep(brow0, [b.mul(b.add(k0, _c64(u)), ldb)]) for u in range(n)]
      with _for(b, 0, nvec, name="v") as v:
        j = b.mul(v, _c64(w))
        m = mask_at(j)
        bv = [b.call(cx.mload, [b.gep(brows[u], [j]), _c32(cx.size), m, cx.vzero])
              for u in range(n)]
        for r in range(R):
          p = b.gep(crow[r], [j])
          acc = b.call(cx.mload, [p, _c32(cx.size), m, cx.vzero])
          for u in range(n):
            acc = cx.madd(b, avals[r][u], bv[u], acc)
          b.call(cx.mstore, [acc, p, _c32(cx.size), m])

    with _for(b, 0, kmain, U, name="k4") as k0:
      ksteps(k0, U)
    with _for(b, kmain, K, name="k1") as k0:
      ksteps(k0, 1)
    if epilogue is not None:
      _emit_epilogue_loop(b, cx, epilogue, b.gep(c, [j0]), ldc, _c64(R), width, row0,
                          b.add(col0, j0))
  b.ret_void()
  return fn


# --------------------------------------------------------------------------------------------
# driver
