"""Which tensor-core instruction type a dot gets (``mma_kind``), from its dtypes and the
configured precision; shared by the dot kernels (``dots.py``, ``wgmma.py``), the implicit GEMM
and attention."""
from __future__ import annotations

import numpy as np

from ourjax.backends.cuda.codegen import DeviceInfo, F16
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import fp8


def _tf32_allowed(dot=None) -> bool:
  """float32 operands may be rounded to tf32 (JAX's default on tensor cores) unless the dot or
  the configured default asks for "highest" precision."""
  if dot is not None and "highest" in dot.attrs.get("operand_precision", ()):
    return False
  from ourjax.config import config
  p = config.read("jax_default_matmul_precision") if hasattr(config, "read") else \
      getattr(config, "jax_default_matmul_precision", None)
  return str(p).lower() not in ("highest", "float32", "precision.highest")


INT_KINDS = ("s8", "u8")
"""Tensor-core types of 8-bit integer dots: s32 accumulation on ``WgmmaDot`` only."""

_FP8_NAMES = {fp8.E4M3: "e4m3", fp8.E5M2: "e5m2"}
FP8_KINDS = ("e4m3", "e5m2", "e4m3.e5m2", "e5m2.e4m3")
"""Tensor-core types of 8-bit float dots (A's type, then B's where they differ): f32
accumulation on ``WgmmaDot`` only."""

BYTE_KINDS = INT_KINDS + FP8_KINDS
"""Kinds of 8-bit operands: K-major only (no transposed form), ``WgmmaDot`` only."""


def operand_types(kind: str) -> tuple[str, str]:
  """The PTX types of A and B for tensor-core ``kind``."""
  a, _, b = kind.partition(".")
  return a, b or a


def mma_kind(dot, info: DeviceInfo, allow_tf32: bool) -> str | None:
  """The tensor-core instruction type of ``dot`` (``"tf32"``, ``"bf16"``, ``"f16"``; ``"s8"``,
  ``"u8"``: int8/uint8 operands with an integer result of 32 bits or fewer, summed in int32,
  which wraps as the result type's own arithmetic would; ``FP8_KINDS``: float8_e4m3fn /
  float8_e5m2 operands, either with either, with a float result other than f64, summed in
  f32) from its dtypes alone, or None (f64, other mixed operand types, other integers, before
  compute capability 8.0 (9.0 for 8-bit operands), or f32 at the highest precision)."""
  if info.cc < 80:
    return None
  lhs, rhs = dot.operands
  if lhs.dtype in _FP8_NAMES and rhs.dtype in _FP8_NAMES:
    if info.cc < 90 or not E._is_float(dot.dtype) or dot.dtype == E.F64:
      return None
    a, b = _FP8_NAMES[lhs.dtype], _FP8_NAMES[rhs.dtype]
    return a if a == b else f"{a}.{b}"
  if lhs.dtype != rhs.dtype:
    return None
  if E._is_int(lhs.dtype):
    out = np.dtype(dot.dtype)
    if lhs.dtype.itemsize == 1 and E._is_int(out) and out.itemsize <= 4 and info.cc >= 90:
      return "s8" if E._is_signed(lhs.dtype) else "u8"
    return None
  if not E._is_float(dot.dtype) or dot.dtype == E.F64:
    return None
  return {E.F32: "tf32" if allow_tf32 else None, E.BF16: "bf16", F16: "f16"}.get(lhs.dtype)
