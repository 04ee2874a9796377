"""The helpers of the algebraic simplifier's rules (``simplify``, ``simplify_sinks``): what a
value is known to be (a splat of one value), its operands' kinds, and which conversions are
lossless."""
from __future__ import annotations

import numpy as np

from ourjax.backends import reference_ops as rops
from ourjax.lowering import hlo
from ourjax.lowering.hlo import Instruction, Shape

def _bits(a: np.ndarray) -> np.ndarray:
  """The elements' bit patterns, as unsigned integers (as opaque 16-byte values for complex128,
  which no unsigned type is wide enough for)."""
  a = np.ascontiguousarray(a)
  if a.dtype == np.bool_:
    return a.view(np.uint8)
  return a.view(f"u{a.dtype.itemsize}" if a.dtype.itemsize <= 8 else f"V{a.dtype.itemsize}")


def splat_value(instr: Instruction):
  """The single value (0-d array) every element of ``instr`` has, if that is known: a constant
  whose elements are bitwise equal, or a broadcast of one."""
  if instr.shape.is_tuple:
    return None
  if instr.opcode == "constant":
    v = instr.value
    if v.size == 0:
      return None
    if v.size == 1:     # (most splats: a scalar, broadcast)
      return np.asarray(v.reshape(-1)[0])
    flat = _bits(v).reshape(-1)
    if np.all(flat == flat[0]):
      return np.asarray(v.reshape(-1)[0])
    return None
  if instr.opcode in ("broadcast", "reshape") and instr.shape.size > 0:
    return splat_value(instr.operands[0])
  return None


def is_splat(instr: Instruction, value) -> bool:
  """Every element of ``instr`` is bitwise ``value`` (converted to its type; so -0.0 is not
  0.0)."""
  v = splat_value(instr)
  if v is None:
    return False
  return bool(_bits(v) == _want_bits(value, instr.dtype))


_WANT: dict = {}     # (type, value (a float by its bits: -0.0 is not 0.0), dtype) -> bits


def _want_bits(value, dtype) -> np.ndarray:
  """The bits of ``value`` converted to ``dtype`` (the rules ask for a few constants, 0, 1,
  -1, ..., thousands of times per program: converted once)."""
  t = type(value)
  key = None
  if t is int or t is bool or t is float:
    key = (t, value.hex() if t is float else value, dtype)
    hit = _WANT.get(key)
    if hit is not None:
      return hit
  with np.errstate(all="ignore"):
    want = _bits(np.asarray(value).astype(dtype))
  if key is not None:
    _WANT[key] = want
  return want


def _is_float(dt) -> bool:
  return rops.is_float(dt)


def _is_int(dt) -> bool:
  return rops.is_integer(dt)


def _full(ctx, value, shape: Shape) -> Instruction:
  return ctx.b.full(value, shape)


def _scalar_operand(instr: Instruction):
  """For broadcast(x) with x a scalar (or all-size-1), x; else None."""
  if instr.opcode == "broadcast" and instr.operands[0].shape.size == 1:
    return instr.operands[0]
  return None


_FLOAT_DIGITS = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53, "f8e4m3fn": 4, "f8e5m2": 3}
_FLOAT_RANGE = {"f16": 15, "bf16": 127, "f32": 127, "f64": 1023, "f8e4m3fn": 8, "f8e5m2": 15}
_FLOAT_MIN_EXP = {"f16": -24, "bf16": -133, "f32": -149, "f64": -1074, "f8e4m3fn": -9,
                  "f8e5m2": -16}


def is_lossless_conversion(src, dst) -> bool:
  """Whether every value of ``src`` converts to ``dst`` exactly (so converting on from ``dst``
  gives what converting directly would)."""
  src, dst = np.dtype(src), np.dtype(dst)
  if src == dst or src == np.bool_:
    return True
  if dst == np.bool_:
    return False
  sn, dn = hlo.dtype_name(src), hlo.dtype_name(dst)
  if rops.is_complex(src):
    return rops.is_complex(dst) and dst.itemsize >= src.itemsize
  if rops.is_complex(dst):
    comp = "f32" if dn == "c64" else "f64"
    return is_lossless_conversion(src, hlo.to_dtype(comp))
  if sn in _FLOAT_DIGITS:
    return (dn in _FLOAT_DIGITS and _FLOAT_DIGITS[dn] >= _FLOAT_DIGITS[sn]
            and _FLOAT_RANGE[dn] >= _FLOAT_RANGE[sn] and _FLOAT_MIN_EXP[dn] <= _FLOAT_MIN_EXP[sn])
  # integers
  bits = src.itemsize * 8
  if dn in _FLOAT_DIGITS:
    needed = bits - 1 if rops.is_signed(src) else bits
    return _FLOAT_DIGITS[dn] >= needed and _FLOAT_RANGE[dn] >= bits
  if rops.is_signed(src):
    return rops.is_signed(dst) and dst.itemsize >= src.itemsize
  return dst.itemsize > src.itemsize if rops.is_signed(dst) else dst.itemsize >= src.itemsize
