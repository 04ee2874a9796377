"""8-bit floats (ml_dtypes' ``float8_e4m3fn`` and ``float8_e5m2``) in emitted code: stored as
one byte, computed in float32 like float16/bfloat16 (``emitter.from_storage``/``to_storage``).

The conversions are integer arithmetic on the float32 bits, so the same IR serves every target
and needs no float8 instructions:

* ``decode`` (byte -> float32) is exact: a normal code's exponent and mantissa fields move into
  float32's (rebiased), a subnormal code is its mantissa times 2^-9 (e4m3fn) or 2^-16 (e5m2),
  so no float32 subnormal (which a GPU may flush) is ever formed.  e4m3fn's S.1111.111 is NaN
  (it has no infinity); e5m2's exponent 31 is infinity (mantissa 0) or NaN.
* ``encode`` (float32 -> byte) rounds to nearest, ties to even, as ml_dtypes' casts (and JAX's
  ``astype``) do, with their overflow: e4m3fn has no infinity, so a value that rounds past 448
  (|x| > 464), an infinity or a NaN becomes NaN (0x7f with the sign); e5m2 overflows to
  infinity (|x| >= 61440) and keeps NaN NaN (0x7e with the sign).  Normal results round the
  float32 bits (adding half an ulp of the 8-bit type less one, plus the kept lowest bit);
  subnormal results come from one float32 addition, |x| + 2^14 (e4m3fn) or |x| + 2^7 (e5m2),
  whose ulp is the 8-bit type's subnormal step, so the hardware's own rounding to nearest even
  does it.  (PTX's ``cvt.rn.satfinite.e4m3x2.f32`` saturates instead: not ml_dtypes' result.)
"""
from __future__ import annotations

import llvmlite.ir as ir
import ml_dtypes
import numpy as np

I8, I32 = ir.IntType(8), ir.IntType(32)
FLT = ir.FloatType()

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
FP8 = frozenset((E4M3, E5M2))


class _Format:
  """``mant``: mantissa bits; ``bias``: exponent bias; ``magic``: the float32 whose ulp is the
  subnormal step; ``top``: the largest finite code (magnitude); ``over``: the code an overflow
  gives; ``nan``: the NaN code."""

  def __init__(self, mant, bias, top, over, nan):
    self.mant, self.bias, self.top, self.over, self.nan = mant, bias, top, over, nan
    self.shift = 23 - mant                        # float32 mantissa bits dropped
    self.rebias = 127 - bias
    # subnormal step 2^(1 - bias - mant); its float32 binade starts at 2^(1 - bias - mant + 23)
    self.magic = float(2.0 ** (1 - bias - mant + 23))
    self.min_normal_bits = (1 + self.rebias) << 23      # float32 bits of the smallest normal


FORMATS = {E4M3: _Format(3, 7, 0x7E, 0x7F, 0x7F), E5M2: _Format(2, 15, 0x7B, 0x7C, 0x7E)}


def _c(v):
  return ir.Constant(I32, v)


def decode(b: ir.IRBuilder, byte, dt):
  """The float32 value of the 8-bit float ``byte`` (an i8) of type ``dt``; exact."""
  f = FORMATS[np.dtype(dt)]
  x = b.zext(byte, I32)
  sign = b.shl(b.and_(x, _c(0x80)), _c(24))
  m = b.and_(x, _c(0x7F))
  normal = b.bitcast(b.add(b.shl(m, _c(f.shift)), _c(f.rebias << 23)), FLT)
  sub = b.fmul(b.uitofp(m, FLT), ir.Constant(FLT, float(2.0 ** (1 - f.bias - f.mant))))
  v = b.select(b.icmp_unsigned("<", m, _c(1 << f.mant)), sub, normal)
  if f.over != f.nan:                               # e5m2: infinity, then NaNs
    v = b.select(b.icmp_unsigned("==", m, _c(f.over)), ir.Constant(FLT, float("inf")), v)
    v = b.select(b.icmp_unsigned(">", m, _c(f.over)), ir.Constant(FLT, float("nan")), v)
  else:                                             # e4m3fn: one NaN code
    v = b.select(b.icmp_unsigned("==", m, _c(f.nan)), ir.Constant(FLT, float("nan")), v)
  out = b.bitcast(b.or_(b.bitcast(v, I32), sign), FLT)
  out._ojx_fp8_code = (byte, np.dtype(dt))     # (``encode`` of it is ``byte``)
  return out


def encode(b: ir.IRBuilder, v, dt):
  """``v`` (float32) rounded to the 8-bit float type ``dt``, as its i8 code (see the module
  docstring)."""
  f = FORMATS[np.dtype(dt)]
  known = getattr(v, "_ojx_fp8_code", None)
  if known is not None and known[1] == np.dtype(dt):
    # ``v`` was decoded from a code of this type (a rounded value being stored): that code
    # (a NaN keeps its own NaN code)
    return known[0]
  bits = b.bitcast(v, I32)
  sign = b.and_(b.lshr(bits, _c(24)), _c(0x80))
  a = b.and_(bits, _c(0x7FFFFFFF))
  # normal: round the float32 bits to ``mant`` mantissa bits (nearest, ties to even)
  keep = b.and_(b.lshr(a, _c(f.shift)), _c(1))
  r = b.add(b.add(a, _c((1 << (f.shift - 1)) - 1)), keep)
  normal = b.sub(b.lshr(r, _c(f.shift)), _c(f.rebias << f.mant))
  # subnormal: one float32 addition rounds |x| to a multiple of the subnormal step
  mg = ir.Constant(FLT, f.magic)
  sub = b.sub(b.bitcast(b.fadd(b.bitcast(a, FLT), mg), I32), _c(int(np.float32(f.magic)
                                                                        .view(np.uint32))))
  code = b.select(b.icmp_unsigned("<", a, _c(f.min_normal_bits)), sub, normal)
  # overflow (also infinity and NaN, whose codes are larger still)
  code = b.select(b.icmp_signed(">", code, _c(f.top)), _c(f.over), code)
  if f.over != f.nan:
    code = b.select(b.icmp_unsigned(">", a, _c(0x7F800000)), _c(f.nan), code)
  return b.trunc(b.or_(code, sign), I8)


def round_to(b: ir.IRBuilder, v, dt):
  """``v`` (float32) rounded to ``dt`` and back: the float32 value of its 8-bit float."""
  return decode(b, encode(b, v, dt), dt)
