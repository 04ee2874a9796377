"""The expression helper ``_M`` over IRBuilder (generic in the float type, scalar or vector),
the constants shared by the function families and the coefficient lookup ``coefficients``."""
from __future__ import annotations

import math as _pymath
import struct as _struct

import llvmlite.ir as ir



# ---------------------------------------------------------------------------------------------
# A small expression helper over IRBuilder, generic in the float type (scalar or vector).
# ---------------------------------------------------------------------------------------------

def _f32(v: float) -> float:
  return _struct.unpack("f", _struct.pack("f", v))[0]


class _M:
  """Arithmetic on values of one float type, with matching integer type and constants."""

  def __init__(self, b: ir.IRBuilder, ty):
    self.b = b
    self.ty = ty
    self.lanes = ty.count if isinstance(ty, ir.VectorType) else None
    st = ty.element if self.lanes else ty
    if isinstance(st, ir.DoubleType):
      self.is64, self.mant, self.bias, bits = True, 52, 1023, 64
    elif isinstance(st, ir.FloatType):
      self.is64, self.mant, self.bias, bits = False, 23, 127, 32
    else:
      raise TypeError(f"inline math supports float and double values, not {ty}")
    self.sty = st
    self.sity = ir.IntType(bits)
    self.ity = ir.VectorType(self.sity, self.lanes) if self.lanes else self.sity
    self.tag = "f64" if self.is64 else "f32"

  @staticmethod
  def tag_of(ty) -> str:
    """"f32"/"f64" plus "_v<N>" for vector types (a name suffix)."""
    if isinstance(ty, ir.VectorType):
      return f"{_M.tag_of(ty.element)}_v{ty.count}"
    return "f64" if isinstance(ty, ir.DoubleType) else "f32"

  # constants ---------------------------------------------------------------------------------
  def c(self, v) -> ir.Constant:
    if not self.is64:
      v = _f32(v)
    s = ir.Constant(self.sty, v)
    return ir.Constant(self.ty, [s] * self.lanes) if self.lanes else s

  def ci(self, v: int) -> ir.Constant:
    s = ir.Constant(self.sity, v)
    return ir.Constant(self.ity, [s] * self.lanes) if self.lanes else s

  # intrinsics --------------------------------------------------------------------------------
  def _suffix(self, ty):
    if isinstance(ty, ir.VectorType):
      return f"v{ty.count}" + self._suffix(ty.element)
    if isinstance(ty, ir.DoubleType):
      return "f64"
    if isinstance(ty, ir.FloatType):
      return "f32"
    return f"i{ty.width}"

  def intr(self, name: str, *args):
    ty = args[0].type
    full = f"llvm.{name}.{self._suffix(ty)}"
    mod = self.b.module
    fn = mod.globals.get(full)
    if fn is None:
      fn = ir.Function(mod, ir.FunctionType(ty, [ty] * len(args)), name=full)
    return self.b.call(fn, list(args))

  # arithmetic --------------------------------------------------------------------------------
  def add(self, a, b): return self.b.fadd(a, b)
  def sub(self, a, b): return self.b.fsub(a, b)
  def mul(self, a, b): return self.b.fmul(a, b)
  def div(self, a, b): return self.b.fdiv(a, b)
  def neg(self, a): return self.b.fneg(a)
  def fma(self, a, b, c): return self.intr("fma", a, b, c)
  def abs(self, a): return self.intr("fabs", a)
  def floor(self, a): return self.intr("floor", a)
  def ceil(self, a): return self.intr("ceil", a)
  def trunc(self, a): return self.intr("trunc", a)
  def rint(self, a): return self.intr("rint", a)
  def sqrt(self, a): return self.intr("sqrt", a)
  def copysign(self, mag, sgn): return self.intr("copysign", mag, sgn)

  def select(self, cond, a, b): return self.b.select(cond, a, b)
  def lt(self, a, b): return self.b.fcmp_ordered("<", a, b)
  def le(self, a, b): return self.b.fcmp_ordered("<=", a, b)
  def gt(self, a, b): return self.b.fcmp_ordered(">", a, b)
  def ge(self, a, b): return self.b.fcmp_ordered(">=", a, b)
  def eq(self, a, b): return self.b.fcmp_ordered("==", a, b)
  def ne_or_nan(self, a, b): return self.b.fcmp_unordered("!=", a, b)
  def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)
  def or_(self, a, b): return self.b.or_(a, b)
  def and_(self, a, b): return self.b.and_(a, b)
  def not_(self, a): return self.b.not_(a)

  def isinf(self, a): return self.eq(self.abs(a), self.c(_pymath.inf))
  def isfinite(self, a): return self.lt(self.abs(a), self.c(_pymath.inf))

  def min_(self, a, b):
    """min(a, b) when b is not NaN; returns b where a is NaN (a clamp that kills NaN)."""
    return self.select(self.lt(a, b), a, b)

  def max_(self, a, b):
    return self.select(self.gt(a, b), a, b)

  def clamp(self, a, lo, hi):
    return self.min_(self.max_(a, self.c(lo)), self.c(hi))

  def signbit(self, a):
    return self.b.icmp_signed("<", self.bits(a), self.ci(0))

  # bit views ---------------------------------------------------------------------------------
  def bits(self, a): return self.b.bitcast(a, self.ity)
  def from_bits(self, i): return self.b.bitcast(i, self.ty)
  def iadd(self, a, b): return self.b.add(a, b)
  def isub(self, a, b): return self.b.sub(a, b)
  def ishl(self, a, n): return self.b.shl(a, self.ci(n) if isinstance(n, int) else n)
  def iashr(self, a, n): return self.b.ashr(a, self.ci(n) if isinstance(n, int) else n)
  def iand(self, a, mask): return self.b.and_(a, self.ci(mask) if isinstance(mask, int) else mask)
  def ixor(self, a, b): return self.b.xor(a, b)
  def f2i(self, a): return self.b.fptosi(a, self.ity)
  def i2f(self, i): return self.b.sitofp(i, self.ty)

  def flip_sign(self, a, cond):
    """-a where cond, a elsewhere (exact, keeps NaN payloads)."""
    sb = self.ci(1 << (63 if self.is64 else 31))
    mask = self.select(cond, sb, self.ci(0))
    return self.from_bits(self.ixor(self.bits(a), mask))

  def xorsign(self, a, s):
    """a with its sign flipped where s has its sign bit set (a * sign(s) without a multiply)."""
    sb = self.iand(self.bits(s), 1 << (63 if self.is64 else 31))
    return self.from_bits(self.ixor(self.bits(a), sb))

  # polynomials and exact arithmetic ----------------------------------------------------------
  def poly(self, x, coeffs):
    """Horner with FMA: coeffs[0] + coeffs[1]*x + ... (coeffs are Python floats or values)."""
    cs = [self.c(v) if isinstance(v, (int, float)) else v for v in coeffs]
    r = cs[-1]
    for cv in reversed(cs[:-1]):
      r = self.fma(r, x, cv)
    return r

  def two_sum(self, a, b):
    """s + e == a + b exactly (Knuth)."""
    s = self.add(a, b)
    bb = self.sub(s, a)
    e = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
    return s, e

  def fast_two_sum(self, a, b):
    """s + e == a + b exactly, given |a| >= |b| (or a == 0)."""
    s = self.add(a, b)
    return s, self.sub(b, self.sub(s, a))

  def two_prod(self, a, b):
    p = self.mul(a, b)
    return p, self.fma(a, b, self.neg(p))

  def pow2i(self, n):
    """2**n as a float for an integer value n in the normal exponent range."""
    return self.from_bits(self.ishl(self.iadd(n, self.ci(self.bias)), self.mant))

  def scale(self, v, n):
    """v * 2**n for integer n in [-2*bias+2, 2*bias], rounding once (denormals, overflow)."""
    n1 = self.iashr(n, 1)
    n2 = self.isub(n, n1)
    return self.mul(self.mul(v, self.pow2i(n1)), self.pow2i(n2))

  def ext(self, a):
    """float -> double (for evaluating f32 functions in f64)."""
    ty = ir.VectorType(ir.DoubleType(), self.lanes) if self.lanes else ir.DoubleType()
    return self.b.fpext(a, ty)

  def narrow(self, a):
    return self.b.fptrunc(a, self.ty)

  def wide(self):
    ty = ir.VectorType(ir.DoubleType(), self.lanes) if self.lanes else ir.DoubleType()
    return _M(self.b, ty)


def _hex(s: str) -> float:
  return float.fromhex(s)




def coefficients(ns: dict):
  """The coefficient lookup of a module whose tables are in ``ns`` (its globals()):
  ``_co(m, "EXP")`` is ``ns["EXP_F32"]`` for a float32 ``m``; ``tag`` overrides m's."""
  def _co(m: _M, name: str, tag: str = None):
    return ns[f"{name}_{(tag or m.tag).upper()}"]
  return _co


# constants
_LN2 = _pymath.log(2.0)
_LN2_HI_64 = _hex("0x1.62e42fee00000p-1")        # 21 significant bits: k*hi is exact
_LN2_LO_64 = _hex("0x1.a39ef35793c76p-33")
_LN2_HI_32 = _hex("0x1.62e400p-1")               # 0x3f317200
_LN2_LO_32 = _hex("0x1.7f7d1cp-20")              # 0x35bfbe8e
_LOG2E = 1.4426950408889634
_SHIFT_64 = 6755399441055744.0                  # 1.5 * 2**52
_SHIFT_32 = 12582912.0                          # 1.5 * 2**23


def _ln2_parts(m: _M):
  if m.is64:
    return m.c(_LN2_HI_64), m.c(_LN2_LO_64)
  return m.c(_LN2_HI_32), m.c(_LN2_LO_32)


def _any_lane(m: _M, cond):
  """One i1: cond holds in some lane (cond itself for scalars)."""
  if not m.lanes:
    return cond
  ity = ir.IntType(m.lanes)
  return m.b.icmp_unsigned("!=", m.b.bitcast(cond, ity), ir.Constant(ity, 0))


def targets_gpu(builder: ir.IRBuilder) -> bool:
  """Whether the builder's module is for NVPTX (the GPU variants' switch)."""
  return str(builder.module.triple or "").startswith("nvptx")
