"""Calling the packed GEMM (``gemm.py``) from a fused kernel: :func:`emit_gemm_call` turns
static sizes and element strides into the kernel's arguments (:func:`operand_layout`), calling
the process-wide kernel (``gemm_library.py``) or one emitted with an epilogue;
:func:`emit_pack_b_call` packs a B once for every piece of a product to read.  Split from
``gemm.py``, which re-exports these names."""
from __future__ import annotations

from typing import Optional

import llvmlite.ir as ir

from ourjax.backends.llvm.gemm import (ACCUMULATE, IM2COL, PACK_B, PACKED_B, _TYPES, Blocking,
                                       Epilogue, _c32, _c64, _signature, emit_gemm, tune_word)
from ourjax.backends.llvm.gemm_library import prefetch_shared_gemm

__all__ = ["operand_layout", "declare_shared_gemm", "emit_gemm_call", "emit_pack_b_call"]


def operand_layout(outer: int, K: int, outer_stride: int, k_stride: int):
  """How a strided ``outer x K`` operand (element (i, k) at ``i*outer_stride + k*k_stride``)
  reads as a kernel operand: ``(k_contiguous, ld)``, or None when neither stride is 1 (and no
  dimension is trivial), i.e. the operand must be copied first.  For A: ``transA = not
  k_contiguous``; for B (outer = N): ``transB = k_contiguous``; ``ld`` is the leading dim."""
  if K <= 1 and outer <= 1:
    return True, 1
  if k_stride == 1 or K <= 1:
    return True, (outer_stride if outer > 1 else max(K, 1))
  if outer_stride == 1 or outer <= 1:
    return False, (k_stride if K > 1 else max(outer, 1))
  return None


def declare_shared_gemm(module: ir.Module, dtype: str) -> ir.Function:
  """Declare the process-wide kernel (see :func:`shared_gemm_symbol`) in ``module`` (its code
  is built meanwhile: :func:`prefetch_shared_gemm`)."""
  sym = prefetch_shared_gemm(dtype)
  fn = module.globals.get(sym)
  if fn is None:
    fn = ir.Function(module, _signature(_TYPES[dtype][0]().as_pointer()), sym)
  return fn


def emit_gemm_call(b: ir.IRBuilder, dtype: str, A, B, C, *, M: int, N: int, K: int,
                   a_strides, b_strides, tid, nthreads, scratch, batch: int = 1,
                   batch_strides=None, ldc: Optional[int] = None,
                   epilogue: Optional[Epilogue] = None, accumulate: bool = False,
                   shared: bool = True, name: Optional[str] = None, im2col: bool = False,
                   b_packed: bool = False, blocking: Optional[Blocking] = None):
  """Emit a call computing ``C[b] = A[b] @ B[b]`` for static sizes and element strides.

  ``a_strides = (stride of m, stride of k)`` and ``b_strides = (stride of k, stride of n)`` in
  elements; ``batch_strides = (A, B, C)`` in elements (default ``(M*K, K*N, M*ldc)``: contiguous
  batches; 0 broadcasts an operand); ``ldc`` defaults to N.  ``A``, ``B``, ``C``
  and ``scratch`` are pointers (any pointee type: they are bitcast), ``tid``/``nthreads`` i64
  values; ``scratch`` is this call's own :func:`pack_buffer_elements` ``(dtype, M, N, K,
  nthreads)`` elements (calls running at once pass different ones).  ``b_packed``: ``B``
  holds op(B) packed by :func:`emit_pack_b_call` (``PACKED_B``; ``b_strides`` unread, batch
  1).  With no epilogue (and ``shared``) the
  call goes to the process-wide kernel (``accumulate``: ``C[b] += ...``, its ``ACCUMULATE``
  bit); otherwise a kernel is emitted into ``b.module`` (named ``name`` or a fresh
  ``gemm.N``).  Raises ValueError for strides the kernel
  cannot read (neither unit); copy such an operand first.  ``blocking``: the cache blocking
  of this call (``gemm_tune.choose``; ``scratch`` sized for it), passed as the kernel's
  ``tune`` word; default the kernel's own.  ``im2col``: ``A`` is the descriptor
  of a convolution's patch matrix (``gemm_im2col.emit_call``), read by the shared kernel
  (``transA == IM2COL``; no epilogue, no accumulation, batch 1)."""
  if im2col and (epilogue is not None or accumulate or not shared or batch != 1):
    raise ValueError("emit_gemm_call: the implicit-im2col GEMM is shared, without epilogue or "
                     "accumulation, of batch 1")
  if b_packed and batch != 1:
    raise ValueError("emit_gemm_call: a packed B is of batch 1")
  la = operand_layout(M, K, *a_strides)
  lb = (True, 1) if b_packed else operand_layout(N, K, b_strides[1], b_strides[0])
  if la is None or lb is None:
    raise ValueError(f"emit_gemm_call: an operand has no unit stride (A strides {a_strides}, "
                     f"B strides {b_strides}); copy it to a contiguous buffer first")
  ldc = N if ldc is None else ldc
  if batch_strides is None:
    batch_strides = (M * K, K * N, M * ldc)
  module = b.module
  ptr_t = _TYPES[dtype][0]().as_pointer()
  flags = 0
  if epilogue is None and shared:
    fn = declare_shared_gemm(module, dtype)
    flags = ACCUMULATE if accumulate else 0
  else:
    if name is None:
      i = 0
      while f"gemm.{i}" in module.globals:
        i += 1
      name = f"gemm.{i}"
    fn = emit_gemm(module, name, dtype, epilogue=epilogue, accumulate=accumulate)
  p = lambda v: b.bitcast(v, ptr_t)  # noqa: E731
  args = [p(A), p(B), p(C), _c64(M), _c64(N), _c64(K), _c64(la[1]), _c64(lb[1]), _c64(ldc),
          _c32(IM2COL if im2col else (0 if la[0] else 1) | flags),
          _c32(PACKED_B if b_packed else 1 if lb[0] else 0), _c64(batch),
          *(_c64(s) for s in batch_strides), tid, nthreads, p(scratch),
          _c64(0 if blocking is None else tune_word(blocking, dtype))]
  return b.call(fn, args)


def emit_pack_b_call(b: ir.IRBuilder, dtype: str, B, dst, *, N: int, K: int, b_strides,
                     tid, nthreads):
  """Emit the shared kernel's ``PACK_B`` call: piece ``tid`` of ``nthreads`` packs its share
  of the column panels of B (``b_strides = (stride of k, stride of n)``, one of them 1) into
  ``dst`` (:func:`packed_b_elements` elements, 64-byte aligned: the panels are stored and read
  with aligned vectors), for calls with ``b_packed`` to read."""
  lb = operand_layout(N, K, b_strides[1], b_strides[0])
  if lb is None:
    raise ValueError(f"emit_pack_b_call: B has no unit stride ({b_strides})")
  fn = declare_shared_gemm(b.module, dtype)
  ptr_t = _TYPES[dtype][0]().as_pointer()
  p = lambda v: b.bitcast(v, ptr_t)  # noqa: E731
  nul = ir.Constant(ptr_t, None)
  args = [nul, p(B), p(dst), _c64(1), _c64(N), _c64(K), _c64(1), _c64(lb[1]), _c64(N),
          _c32(PACK_B), _c32(1 if lb[0] else 0), _c64(1), _c64(0), _c64(0), _c64(0),
          tid, nthreads, nul, _c64(0)]
  return b.call(fn, args)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
