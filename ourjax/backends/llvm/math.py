"""Inline math: straight-line LLVM IR for transcendental functions, shared by the CPU and GPU.

LLVM lowers ``llvm.exp``/``llvm.log``/... to calls into libm, which stops the loop vectorizer and
does not exist on NVPTX.  The emitters here write the whole function as plain arithmetic (range
reduction, polynomial, reconstruction) plus intrinsics that are single instructions on x86 and
NVPTX (``llvm.fma``, ``llvm.fabs``, ``llvm.floor``, ``llvm.trunc``, ``llvm.rint``, ``llvm.sqrt``,
``llvm.copysign``), and handle special values with ``select`` instead of branches, so one loop
body vectorizes to AVX-512 and the same IR serves the GPU.

API::

    emit_unary(builder, "exp", x)        # x: float or double value (scalar or vector)
    emit_unary(builder, "sin", x, variant="gpu")   # force a variant (tests); default: by target
    emit_binary(builder, "pow", x, y)
    SUPPORTED_UNARY, SUPPORTED_BINARY    # the accepted names

The semantics follow NumPy: NaN in, NaN out; infinities and signed zeros as C99 Annex F.  The
functions assume round-to-nearest and that the target has a fused multiply-add (``llvm.fma`` on a
CPU without FMA becomes a libm call: correct but slow).

Polynomial coefficients were fitted for this file (weighted minimax by Lawson iteration in
80-bit arithmetic, the coefficients rounded one at a time and the rest refitted).

Methods (everything branch-free; "pair" = an unrounded hi + lo sum, "dd" = double-double):

  exp exp2 expm1     n = round(x/ln2) through the 1.5*2^p shifter, r = x - n*ln2 (Cody-Waite, the
                     high part exact), polynomial, 1 + r summed error-free, 2^n applied in two
                     steps (denormal results round once, overflow gives inf)
  log log2 log10     x = 2^k (1+f), 1+f in [sqrt(1/2), sqrt(2)); log(1+f) = f - f^2/2 +
  log1p              s(f^2/2 + R(s^2)), s = f/(2+f); k*C + f*D summed error-free; log1p adds
                     (x - (u-1))/u and uses a short series below 2^-8 (f32) / 2^-14 (f64)
  tanh logistic      polynomial near 0, else from exp(2|x|) / exp(-|x|) kept as a pair, the
  sinh cosh          quotient's rounding error compensated
  sin cos tan        reduction in double by pi/2 in three parts (first product exact), kept as a
                     pair; polynomials on |r| <= pi/4; tan = sin/cos of pairs.  For |x| >= 2^48
                     (both types) a Payne-Hanek reduction: x 2/pi mod 4 = M' D mod 4 with M' an
                     integer-valued double and D = 2^k 2/pi mod 4 (four doubles per 16
                     exponents, from the 2/pi bits table), products split exactly; scalar code
                     selects it (evaluated always, so loops still vectorize), vector code and
                     the GPU branch to it once per vector in a cold block.  Full accuracy over
                     the whole range
  atan atan2         ranges t, (t-1)/(t+1), -1/t with the quotient's rounding error carried
  asin acos          polynomial for |x| <= 1/2, else 2*asin(sqrt((1-|x|)/2)) with sqrt's residual
  asinh acosh atanh  one log/log1p of an argument chosen per range, with correction terms
  erf erfc           x + x*P(x^2) below 0.84375; above, erfc = exp(-x^2) G(1/x) / x with x^2
                     exact and one polynomial G up to the underflow point
  erf_inv            w = -log((1-x)(1+x)) (exact product), polynomials in w or sqrt(w) per piece;
                     float64 adds one Newton step on erf/erfc
  cbrt               exponent split by 3, quadratic guess, Halley step(s), Newton step with an
                     exact residual
  rsqrt              1/sqrt(x) with both roundings compensated
  pow                float32: log and exp in double; float64: dd log (relative error ~2^-63),
                     y*log(x) as a pair, exp of the pair
  lgamma digamma     recurrence up to z >= 8, Stirling / asymptotic series there, polynomials
                     around the zeros (1 and 2 / 1.4616...), reflection for x < 0; dd for float64

float32 versions of tan, asinh, acosh, erfc, erf_inv, pow, lgamma and digamma (and the sin/cos
reduction) run in double, with polynomials sized for float32.  Not provided: ``rem`` (C fmod is
exact but needs a reduction of up to ~2100 bits, i.e. a loop); emit LLVM's ``frem`` for it (on
x86 it becomes a call to fmod/fmodf).

GPU variants.  Where the builder's module targets NVPTX (``module.triple`` starts with
``nvptx``), float32 exp, expm1, log, log1p, logistic, tanh, erf, sin and cos (``GPU_VARIANTS``)
use versions written
for a GPU, where double runs at a fraction of float speed, a division is a dozen instructions and
the budget at memory speed is a few dozen instructions per element: everything in float32
(``llvm.fma`` and integer bit operations, no target intrinsics, so the same IR compiles for the
host and tests/test_llvm_math.py measures it there), fewer compensation terms where the error
stays bounded:

  exp                exp(x) = p 2^n, p = 1 + r GEXP(r) on |r| <= ln2/2 (Cody-Waite with the
                     1.5*2^23 shifter, whose low bits are n), 2^n added to p's exponent with a
                     2^(+-32) step so that denormal results round once and large ones overflow
  expm1              2^n - 1 + 2^n (r_hi + r_lo) + 2^n r^2 Q(r), the first two terms summed
                     error-free; |x| < 2^-24 gives x
  log                x = 2^k (1+f) as above, log(1+f) = f + f^2 GLOG(f) (no division), k ln2_hi + f
                     summed error-free
  log1p              u = 1 + x = 2^k (1+f), 1 + x = u + d exactly; k = 0: the log polynomial at x
                     itself, else as log plus d 2^-k / (1+f) with 1/(1+f) ~ 1.06 - f
  logistic           e = exp(-|x|) kept as a pair (p's rounding error), 1/(1+e) or e/(1+e) with
                     the rounding errors of 1+e and of the quotient compensated; no division:
                     1/(1+e) from a linear guess and two Newton steps; the pair and the quotient
                     scaled by 2^32 (the low part stays accurate where e is tiny)
  tanh               the float32 polynomial below 0.55, else 1 - e w, e = exp(-2|x|) (the -2
                     folded into exp's constants), w = 2/(1+e) from a linear guess in e and
                     two Newton steps (no division)
  erf                the float32 polynomial below 0.84375 (x + x P(x^2) as one fma), else
                     1 - exp(-a^2 + GERFC(a)) up to 3.925 (beyond, erf rounds to +-1)
  sin cos            |x| = q pi/2 + r in float32: pi/2 in three parts, the first product exact
                     (fma), q F2 as an exact pair summed error-free with the remainder, r kept as
                     a pair into the float32 polynomials (cos compensates 1 - r^2/2).  Full
                     accuracy for |x| < 2^17; larger |x|, inf and NaN branch to a cold block
                     that calls the CPU variant (double reduction, an out-of-line function), and
                     the builder continues in a new basic block (LLVM merges loads and stores
                     into vector accesses only within one block: codegen.Elementwise loads
                     before evaluating and stores after, and under collect_slow_paths takes
                     the conditions of a vector's elements to branch once per vector)

The CPU (every other target) keeps the branch-free code above; float64 is the same on both.

Special values: NaN in gives NaN out (except pow(x, 0) = pow(1, y) = 1); infinities and signed
zeros follow NumPy/C99 Annex F (tanh(-0) = -0, log(0) = -inf, log(-1) = NaN, exp(-inf) = 0,
pow(-0, -1) = -inf, atan2 on all signed-zero/inf quadrants, erf_inv(+-1) = +-inf, ...);
lgamma is +inf at 0 and the negative integers; digamma is NaN there (as JAX) and at -inf.

Accuracy: max error in ulp of the result type, measured over 0.3 to 4 million inputs per function
and type (random bit patterns, log-spaced magnitudes over the whole range, uniform samples of the
interesting intervals, edge cases; tests/test_llvm_math.py holds the samplers) against float64
references for float32 and 80-bit long double (with series and continued fractions for
erf/erfc/erf_inv/lgamma/digamma) for float64, and for the float32 GPU variants (column gpu;
'-': the GPU uses the CPU variant) over every float32 input (sin, cos, tan: the whole range,
huge arguments sampled):

  function   float32  float64   gpu     function   float32  float64   gpu
  exp         0.77     0.76    0.90    sinh        0.73     0.70       -
  exp2        0.77     0.75       -    cosh        0.88     0.88       -
  expm1       0.87     0.88    1.09    asinh       0.50     1.07       -
  log         0.84     0.87    0.88    acosh       0.50     0.87       -
  log2        0.99     1.13       -    atanh       0.87     0.87       -
  log10       1.01     0.88       -    erf         0.76     0.80    1.08
  log1p       0.83     0.82    0.97    erfc        0.76     1.26       -
  tanh        0.67     0.69    1.51    erf_inv     0.51     0.98       -
  logistic    0.79     0.78    0.89    cbrt        0.50     0.50       -
  sin         0.70     0.69    0.75    rsqrt       0.50     0.50       -
  cos         0.70     0.69    0.72    lgamma      0.51     1.06       -
  tan         0.50     0.81       -    digamma     0.50     0.56       -
  asin        0.69     0.71       -    pow         0.50     0.74       -
  acos        0.65     0.72       -    atan2       0.99     0.81       -
  atan        0.62     0.61       -

For x < 0, lgamma and digamma are differences of larger terms that cancel near their zeros; there
the error is bounded in ulp of max(|f(x)|, |lgamma(|x|)| or log(1+|x|), 1): 0.50 / 0.57
(lgamma) and 0.50 / 0.78 (digamma), while the plain relative error near those zeros is unbounded.
"""
from __future__ import annotations

import contextlib as _contextlib
import math as _pymath
import struct as _struct

import llvmlite.ir as ir

__all__ = ["emit_unary", "emit_binary", "SUPPORTED_UNARY", "SUPPORTED_BINARY", "GPU_VARIANTS",
           "collect_slow_paths"]


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


# ---------------------------------------------------------------------------------------------
# Coefficients (tag "f32": float32 evaluation; "f64": float64; "x32": float64 evaluation aiming at
# float32 accuracy, for float32 functions computed in double).
# ---------------------------------------------------------------------------------------------
# exp(r) = 1 + r + r^2 * EXP(r), |r| <= ln2/2
EXP_F32 = [0.4999999403953552, 0.1666652113199234, 0.04166828840970993, 0.008368703536689281,
           0.0013818938750773668]
EXP_F64 = [0.5000000000000011, 0.16666666666666424, 0.041666666666526284, 0.008333333333487083,
           0.0013888888944648711, 0.00019841269522769258, 2.480149202897276e-05,
           2.7557571417513536e-06, 2.763063759271287e-07, 2.500501685811206e-08]
EXP_X32 = [0.5000000068441746, 0.16666665860033605, 0.041666292150042146, 0.008333498271162148,
           0.0013944869896327105, 0.0001979017313647403]
# expm1(r) = r + r^2/2 + r^3 * EXPM1(r), |r| <= ln2/2
EXPM1_F32 = [0.1666666567325592, 0.04166649281978607, 0.008333543315529823,
             0.0013932364527136087, 0.00019764331227634102]
EXPM1_F64 = [0.16666666666666677, 0.04166666666666669, 0.008333333333321674,
             0.001388888888888434, 0.0001984126988581921, 2.480158730500349e-05,
             2.7557244554269453e-06, 2.755730295057528e-07, 2.5108927953052e-08,
             2.0903092510913583e-09]
# log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f), R(z) = z*LOG[0] + z^2*LOG[1] + ...
LOG_F32 = [0.6666677594184875, 0.39977526664733887, 0.2987337112426758]
LOG_F64 = [0.6666666666666738, 0.3999999999938715, 0.28571428748839917, 0.2222219787822314,
           0.18183601945573383, 0.15313054659220443, 0.14806209137317458]
LOG_X32 = [0.6666666563059102, 0.40000338989460044, 0.28537043158801784, 0.2358759760117955]
# tanh(x) = x + x*z*TANH(z), z = x^2, |x| <= 0.55
TANH_F32 = [-0.33333316445350647, 0.133325457572937, -0.05384785309433937, 0.02105250582098961,
            -0.00624606478959322]
TANH_F64 = [-0.333333333333333, 0.13333333333326625, -0.053968253963775324, 0.021869488386450985,
            -0.008863232612591206, 0.0035920921497606425, -0.001455543631696702,
            0.0005884477336858215, -0.00023338977732525565, 8.332807181575685e-05,
            -1.9501746709500566e-05]
# sin(r) = r + r*z*SIN(z), cos(r) = 1 - z/2 + z^2*COS(z), |r| <= pi/4
SIN_F32 = [-0.1666666716337204, 0.008333379402756691, -0.00019853065896313637,
           2.832539621522301e-06]
SIN_F64 = [-0.16666666666666666, 0.008333333333333037, -0.00019841269840954582,
           2.7557319069678216e-06, -2.5052069826933968e-08, 1.6054178997961425e-10,
           -7.383301235537172e-13]
SIN_X32 = [-0.16666666666629618, 0.008333333324944745, -0.0001984126365495529,
           2.7555323797704298e-06, -2.47592909496288e-08]
COS_F32 = [0.0416666679084301, -0.0013888978864997625, 2.4821523766149767e-05,
           -2.882972296447406e-07]
COS_F64 = [0.041666666666666664, -0.0013888888888889278, 2.480158730229997e-05,
           -2.755731959852101e-07, 2.087684651622364e-09, -1.1480842627599192e-11,
           5.2050368156411535e-14]
COS_X32 = [0.0416666666665951, -0.0013888888877427172, 2.4801580626713516e-05,
           -2.755550853761894e-07, 2.0644183924735114e-09]


def _co(m: _M, name: str, tag: str = None):
  return globals()[f"{name}_{(tag or m.tag).upper()}"]


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


# ---------------------------------------------------------------------------------------------
# exp family
# ---------------------------------------------------------------------------------------------

def _exp_reduce(m: _M, x):
  """n = round(x/ln2) (as float and int), and x - n*ln2 as r_hi (exact) + r_lo."""
  shift = m.c(_SHIFT_64 if m.is64 else _SHIFT_32)
  t = m.fma(x, m.c(_LOG2E), shift)
  nf = m.sub(t, shift)
  ni = m.isub(m.bits(t), m.bits(shift))
  hi, lo = _ln2_parts(m)
  r_hi = m.fma(m.neg(nf), hi, x)
  r_lo = m.mul(m.neg(nf), lo)
  return nf, ni, r_hi, r_lo


def _exp_poly(m: _M, r_hi, r_lo, tag=None):
  """exp(r_hi + r_lo) for |r| <= ln2/2 as a pair (u, tail): value = u + tail."""
  r = m.add(r_hi, r_lo)
  q = m.poly(r, _co(m, "EXP", tag))
  u, e1 = m.fast_two_sum(m.c(1.0), r_hi)
  tail = m.add(e1, m.fma(m.mul(r, r), q, r_lo))
  return u, tail


def _exp_finite(m: _M, x, tag=None, extra_scale=0):
  """exp(x) * 2**(-extra_scale) for x already clamped to the finite working range."""
  _, ni, r_hi, r_lo = _exp_reduce(m, x)
  u, tail = _exp_poly(m, r_hi, r_lo, tag)
  p = m.add(u, tail)
  if extra_scale:
    ni = m.isub(ni, m.ci(extra_scale))
  return m.scale(p, ni)


def _exp_pair(m: _M, x, extra_scale=0, tag=None):
  """exp(x) * 2**(-extra_scale) as an unrounded pair (hi, lo); x clamped to the finite range.
  Where the result is a denormal both parts are rounded (the pair then carries no extra bits)."""
  _, ni, r_hi, r_lo = _exp_reduce(m, x)
  u, tail = _exp_poly(m, r_hi, r_lo, tag)
  hi, lo = m.fast_two_sum(u, tail)
  if extra_scale:
    ni = m.isub(ni, m.ci(extra_scale))
  return m.scale(hi, ni), m.scale(lo, ni)


def _exp_bounds(m: _M):
  # below LO the result rounds to 0, above HI it overflows; inputs are clamped to [LO, HI]
  return (-104.0, 89.0) if not m.is64 else (-746.0, 710.0)


def _exp(m: _M, x):
  lo, hi = _exp_bounds(m)
  xc = m.clamp(x, lo, hi)
  return m.select(m.isnan(x), x, _exp_finite(m, xc))


def _exp2(m: _M, x):
  lo, hi = _exp_bounds(m)
  lo, hi = lo * _LOG2E, hi * _LOG2E
  xc = m.clamp(x, lo, hi)
  nf = m.rint(xc)
  ni = m.f2i(nf)
  t = m.sub(xc, nf)                                 # exact, |t| <= 1/2
  ln2 = m.c(_LN2)
  ln2_lo = m.c(_LN2 - _f32(_LN2) if not m.is64 else 2.3190468138462996e-17)
  r_hi = m.mul(t, ln2)
  r_lo = m.fma(t, ln2, m.neg(r_hi))
  r_lo = m.fma(t, ln2_lo, r_lo)
  u, tail = _exp_poly(m, r_hi, r_lo)
  p = m.add(u, tail)
  return m.select(m.isnan(x), x, m.scale(p, ni))


def _expm1(m: _M, x):
  p = 52 if m.is64 else 23
  lo, hi = _exp_bounds(m)
  xc = m.clamp(x, -60.0, hi)
  nf, ni, r_hi, r_lo = _exp_reduce(m, xc)
  r = m.add(r_hi, r_lo)
  z = m.mul(r, r)
  # expm1(r) = r_hi + tail
  h = m.fma(m.mul(z, r), m.poly(r, _co(m, "EXPM1")), m.mul(z, m.c(0.5)))
  tail = m.add(r_lo, h)
  # small n: 2^n*expm1(r) + (2^n - 1), summed with one error-free step
  n_small = m.b.icmp_signed("<=", ni, m.ci(p + 1))
  ni_s = m.select(n_small, ni, m.ci(0))
  s = m.pow2i(ni_s)
  a = m.sub(s, m.c(1.0))                            # exact for n in [-p-1, p+1]
  bq = m.mul(s, r_hi)
  u, e = m.two_sum(a, bq)
  res_small = m.add(u, m.fma(s, tail, e))
  # large n: (expm1(r) - 2^-n + 1) * 2^n, scaled in two steps (overflow)
  ni_c = m.select(m.b.icmp_signed("<", ni, m.ci(100)), ni, m.ci(100))
  em1 = m.add(r_hi, tail)
  y = m.add(m.sub(em1, m.pow2i(m.isub(m.ci(0), ni_c))), m.c(1.0))
  res_big = m.scale(y, ni)
  res = m.select(n_small, res_small, res_big)
  res = m.select(m.eq(x, m.c(0.0)), x, res)         # expm1(-0) = -0
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# log family
# ---------------------------------------------------------------------------------------------

def _log_split(m: _M, x):
  """x > 0 finite (denormals included) -> (k as float, f) with x = 2^k * (1 + f),
  1 + f in [sqrt(1/2), sqrt(2)) and f exact."""
  tiny = m.lt(x, m.c(2.0 ** (-1022 if m.is64 else -126)))
  up = 54 if m.is64 else 25
  xs = m.select(tiny, m.mul(x, m.c(2.0 ** up)), x)
  kadj = m.select(tiny, m.ci(-up), m.ci(0))
  sqrt_half_bits = 0x3FE6A09E667F3BCD if m.is64 else 0x3F3504F3
  ix = m.isub(m.bits(xs), m.ci(sqrt_half_bits))
  k = m.iadd(m.iashr(ix, m.mant), kadj)
  mbits = m.iadd(m.iand(ix, (1 << m.mant) - 1), m.ci(sqrt_half_bits))
  f = m.sub(m.from_bits(mbits), m.c(1.0))
  return m.i2f(k), f


def _log1p_tail(m: _M, f, tag=None):
  """log(1 + f) - f for f in [sqrt(1/2)-1, sqrt(2)-1], as one value with small relative error."""
  s = m.div(f, m.add(m.c(2.0), f))
  z = m.mul(s, s)
  R = m.mul(z, m.poly(z, _co(m, "LOG", tag)))
  hfsq = m.mul(m.mul(f, f), m.c(0.5))
  return m.fma(s, m.add(hfsq, R), m.neg(hfsq))


# (C_hi, C_lo, D_hi, D_lo): log_b(x) = k*C + log(1+f)*D
_LOG_BASES = {
    "log": ((_LN2_HI_64, _LN2_LO_64, 1.0, 0.0), (_LN2_HI_32, _LN2_LO_32, 1.0, 0.0)),
    "log2": ((1.0, 0.0, 1.4426950408889634, 2.0355273740931033e-17),
             (1.0, 0.0, _f32(1.4426950408889634), 1.4426950408889634 - _f32(1.4426950408889634))),
    "log10": ((_hex("0x1.34413509f8000p-2"), -8.532344317057107e-14,
               0.4342944819032518, 1.098319650216765e-17),
              (_hex("0x1.344000p-2"), 0.30102999566398120 - _hex("0x1.344000p-2"),
               _f32(0.4342944819032518), 0.4342944819032518 - _f32(0.4342944819032518))),
}


def _log_combine(m: _M, kf, f, corr, base="log", tag=None):
  """k*C + (log(1+f) + corr)*D summed with error-free steps (corr: a small additive term)."""
  c_hi, c_lo, d_hi, d_lo = [m.c(v) for v in _LOG_BASES[base][0 if m.is64 else 1]]
  t = _log1p_tail(m, f, tag)
  if corr is not None:
    t = m.add(t, corr)
  if base == "log":
    p, pe = f, None
    small = m.fma(kf, c_lo, t)
  else:
    p, pe = m.two_prod(f, d_hi)
    small = m.fma(kf, c_lo, m.fma(f, d_lo, m.fma(t, d_hi, pe)))
  kc = m.mul(kf, c_hi)                                 # exact
  u, e = m.two_sum(kc, p)
  return m.add(u, m.add(e, small))


def _log_specials(m: _M, x, res, zero_is=-_pymath.inf):
  res = m.select(m.eq(x, m.c(_pymath.inf)), x, res)
  res = m.select(m.lt(x, m.c(0.0)), m.c(_pymath.nan), res)
  res = m.select(m.eq(x, m.c(0.0)), m.c(zero_is), res)
  return m.select(m.isnan(x), x, res)


def _log_any(base):
  def emit(m: _M, x):
    kf, f = _log_split(m, x)
    return _log_specials(m, x, _log_combine(m, kf, f, None, base))
  return emit


def _log1p_series(m: _M, v, v_lo):
  """log1p(v + v_lo) for |v| < _LOG1P_SERIES_MAX (where log(1 + v) would lose the low bits)."""
  if m.is64:
    p = m.poly(v, [-0.5, 1.0 / 3, -0.25, 0.2, -1.0 / 6])
  else:
    p = m.poly(v, [-0.5, 1.0 / 3, -0.25])
  return m.add(v, m.fma(m.mul(v, v), p, m.fma(m.neg(v), v_lo, v_lo)))


def _log1p_series_max(m: _M):
  return m.c(2.0 ** -14 if m.is64 else 2.0 ** -8)


def _log1p_parts(m: _M, x):
  """For x > -1: (k, f, corr) with log1p(x) = k*ln2 + log(1+f) + corr."""
  u = m.add(m.c(1.0), x)
  kf, f = _log_split(m, u)
  c = m.div(m.sub(x, m.sub(u, m.c(1.0))), u)
  return kf, f, c


def _log1p(m: _M, x):
  kf, f, c = _log1p_parts(m, x)
  res = _log_combine(m, kf, f, c)
  res = m.select(m.lt(m.abs(x), _log1p_series_max(m)), _log1p_series(m, x, m.c(0.0)), res)
  res = m.select(m.eq(x, m.c(_pymath.inf)), x, res)
  res = m.select(m.lt(x, m.c(-1.0)), m.c(_pymath.nan), res)
  res = m.select(m.eq(x, m.c(-1.0)), m.c(-_pymath.inf), res)
  res = m.select(m.eq(x, m.c(0.0)), x, res)
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# hyperbolic
# ---------------------------------------------------------------------------------------------

def _tanh(m: _M, x):
  ax = m.abs(x)
  small = m.lt(ax, m.c(0.55))
  z = m.mul(x, x)
  rs = m.fma(m.mul(x, z), m.poly(z, _co(m, "TANH")), x)
  # |x| >= 0.55: 1 - 2/(e+1), e = exp(2|x|) kept as an unrounded pair, the quotient carrying
  # its rounding error
  axc = m.min_(ax, m.c(25.0 if m.is64 else 12.0))
  e_hi, e_lo = _exp_pair(m, m.add(axc, axc))
  d, d_lo = m.fast_two_sum(e_hi, m.c(1.0))
  d_lo = m.add(d_lo, e_lo)
  q = m.div(m.c(2.0), d)
  # the quotient's residual over d (1/d ~ q/2: a multiply instead of a second division)
  q_lo = m.mul(m.fma(m.neg(q), d_lo, m.fma(m.neg(q), d, m.c(2.0))), m.mul(q, m.c(0.5)))
  u, u_lo = m.fast_two_sum(m.c(1.0), m.neg(q))
  rb = m.add(u, m.sub(u_lo, q_lo))
  res = m.copysign(m.select(small, rs, rb), x)
  return m.select(m.isnan(x), x, res)


def _logistic(m: _M, x):
  lo, hi = _exp_bounds(m)
  ax = m.abs(x)
  e_hi, e_lo = _exp_pair(m, m.max_(m.neg(ax), m.c(lo)))   # exp(-|x|) in (0, 1]
  d, d_lo = m.fast_two_sum(m.c(1.0), e_hi)
  d_lo = m.add(d_lo, e_lo)
  r = m.div(m.c(1.0), d)
  r_lo = m.mul(m.fma(m.neg(r), d_lo, m.fma(m.neg(r), d, m.c(1.0))), r)
  pos = m.add(r, r_lo)
  neg = m.fma(e_hi, r, m.fma(e_hi, r_lo, m.mul(e_lo, r)))
  res = m.select(m.lt(x, m.c(0.0)), neg, pos)
  return m.select(m.isnan(x), x, res)


def _cosh(m: _M, x):
  lo, hi = _exp_bounds(m)
  ax = m.min_(m.abs(x), m.c(hi + 1.0))
  h, h_lo = _exp_pair(m, ax, extra_scale=1)             # exp(|x|)/2
  res = m.add(h, m.add(h_lo, m.div(m.c(0.25), h)))
  return m.select(m.isnan(x), x, res)


# sinh(x) = x + x*z*SINH(z), |x| < 1
SINH_F32 = [0.1666666716337204, 0.00833331048488617, 0.00019842895562760532,
            2.7822131869470468e-06]
SINH_F64 = [0.16666666666666669, 0.008333333333332908, 0.00019841269841597075,
            2.7557319105232373e-06, 2.505213129639734e-08, 1.6056631998595834e-10,
            7.777534502869669e-13]


def _sinh(m: _M, x):
  lo, hi = _exp_bounds(m)
  ax = m.min_(m.abs(x), m.c(hi + 1.0))
  z = m.mul(x, x)
  rs = m.fma(m.mul(x, z), m.poly(z, _co(m, "SINH")), x)
  h, h_lo = _exp_pair(m, ax, extra_scale=1)
  rb = m.copysign(m.add(h, m.sub(h_lo, m.div(m.c(0.25), h))), x)
  res = m.select(m.lt(ax, m.c(1.0)), rs, rb)
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# trigonometric
# ---------------------------------------------------------------------------------------------
# pi/2 = P1 + P2 + P3 (each the double rounding of the remainder)
_PIO2_1 = _hex("0x1.921fb54442d18p+0")
_PIO2_2 = _hex("0x1.1a62633145c07p-54")
_PIO2_3 = _hex("-0x1.f1976b7ed8fbcp-110")
_TWO_OVER_PI = 0.6366197723675814
_TRIG_LIMIT = 2.0 ** 48          # |x| below this: the Cody-Waite reduction (f32 and f64)


def _two_over_pi_bits(n: int) -> int:
  """floor(2/pi * 2^n), from pi by Machin's formula in integer arithmetic (64 guard bits)."""
  g = n + 96
  one = 1 << g

  def atan_inv(k):                     # atan(1/k) * 2^g
    total, term, i, k2 = 0, one // k, 0, k * k
    while term:
      total += term // (2 * i + 1) if i % 2 == 0 else -(term // (2 * i + 1))
      term //= k2
      i += 1
    return total

  pi = 16 * atan_inv(5) - 4 * atan_inv(239)          # pi * 2^g, off by a few units
  return (1 << (n + 1 + g)) // pi


_TWO_OVER_PI_NBITS = 1280
#: floor(2/pi * 2^1280): the bits of 2/pi (0xA2F9836E4E44152...) the huge-argument reduction
#: takes its table from
TWO_OVER_PI_BITS = _two_over_pi_bits(_TWO_OVER_PI_NBITS)
_PH_STEP = 16                    # table entry j serves exponents 16j .. 16j+15
_PH_ROWS = 64                    # up to 2^1024
_PH_PARTS = 4


def _ph_table():
  """Row j: D_j = (2^(16j - 52) * 2/pi) mod 4 as four doubles (each the rounding of the rest):
  about 210 bits, enough that M * D_j with a 68-bit integer M keeps 2^-140 absolute."""
  from fractions import Fraction
  rows = []
  den = 1 << (_TWO_OVER_PI_NBITS + 52)
  for j in range(_PH_ROWS):
    rest = Fraction((TWO_OVER_PI_BITS << (_PH_STEP * j)) % (4 * den), den)
    row = []
    for _ in range(_PH_PARTS):
      v = float(rest)
      row.append(v)
      rest -= Fraction(v)
    rows.append(row)
  return rows


_PH_TABLE = _ph_table()


def _ph_rows(m: _M, j):
  """The table's four doubles at row j (an i64 value or vector), loaded element by element."""
  mod = m.b.module
  name = "ojx_m_two_over_pi_rows"
  g = mod.globals.get(name)
  dbl = ir.DoubleType()
  row_ty = ir.ArrayType(dbl, _PH_PARTS)
  if g is None:
    ty = ir.ArrayType(row_ty, _PH_ROWS)
    g = ir.GlobalVariable(mod, ty, name)
    g.global_constant = True
    g.linkage = "internal"
    g.initializer = ir.Constant(ty, [ir.Constant(row_ty, [ir.Constant(dbl, v) for v in r])
                                     for r in _PH_TABLE])
  b, i32 = m.b, ir.IntType(32)
  zero = ir.Constant(i32, 0)

  def load(jj, k):
    return b.load(b.gep(g, [zero, jj, ir.Constant(i32, k)], inbounds=True))
  if not m.lanes:
    return [load(j, k) for k in range(_PH_PARTS)]
  out = [ir.Constant(m.ty, ir.Undefined) for _ in range(_PH_PARTS)]
  for lane in range(m.lanes):
    jj = b.extract_element(j, ir.Constant(i32, lane))
    for k in range(_PH_PARTS):
      out[k] = b.insert_element(out[k], load(jj, k), ir.Constant(i32, lane))
  return out


def _trig_reduce_huge(m: _M, ax):
  """Payne-Hanek: |x| (double, >= 2^48, finite) -> (r_hi, r_lo, j) as _trig_reduce.

  x = M' 2^(16i - 52) with i = e >> 4 (e the exponent) and M' = x 2^(52 - 16i) an integer below
  2^69; x 2/pi mod 4 = M' D_i mod 4 (M' is an integer), D_i = 2^(16i - 52) 2/pi mod 4 from the
  table.  The products M' d_k are split exactly (two_prod), the large ones reduced mod 4 exactly,
  and the fraction f = x 2/pi - q (|f| <= 1/2) summed as a pair, then r = f pi/2."""
  e = m.isub(m.iashr(m.bits(ax), 52), m.ci(1023))
  i = m.iashr(e, 4)
  i = m.select(m.b.icmp_signed("<", i, m.ci(3)), m.ci(3), i)
  i = m.select(m.b.icmp_signed(">", i, m.ci(_PH_ROWS - 1)), m.ci(_PH_ROWS - 1), i)
  scale = m.from_bits(m.ishl(m.isub(m.ci(1023 + 52), m.ishl(i, 4)), 52))   # 2^(52 - 16i)
  mm = m.mul(ax, scale)                                                    # exact
  d0, d1, d2, d3 = _ph_rows(m, i)
  four, quarter = m.c(4.0), m.c(0.25)

  def mod4(v):                                      # v - 4 rint(v/4) in [-2, 2]: exact
    return m.sub(v, m.mul(four, m.rint(m.mul(v, quarter))))
  p0, e0 = m.two_prod(mm, d0)                       # < 2^71, < 2^18
  p1, e1 = m.two_prod(mm, d1)                       # < 2^18, < 2^-35
  p2, e2 = m.two_prod(mm, d2)                       # < 2^-35, < 2^-88
  h, l1 = m.two_sum(mod4(p0), e0)
  h, l2 = m.two_sum(mod4(h), p1)
  h = mod4(h)
  q = m.rint(h)
  f, lo = m.sub(h, q), m.c(0.0)                     # exact
  for v in (l1, l2, e1, p2, e2, m.mul(mm, d3)):
    f, err = m.two_sum(f, v)
    lo = m.add(lo, err)
  f, lo = m.fast_two_sum(f, lo)
  r_hi, r_err = m.two_prod(f, m.c(_PIO2_1))
  r_lo = m.fma(f, m.c(_PIO2_2), m.fma(lo, m.c(_PIO2_1), r_err))
  r_hi, r_lo = m.fast_two_sum(r_hi, r_lo)
  j = m.sub(q, m.mul(four, m.floor(m.mul(q, quarter))))
  return r_hi, r_lo, j


def _trig_reduce(m: _M, ax):
  """|x| (double) -> (r_hi, r_lo, j) with |x| = (q + j...)*pi/2 + r, j = q mod 4 (float).

  Below 2^48 Cody-Waite with pi/2 in three parts; beyond (finite), Payne-Hanek
  (_trig_reduce_huge).  Scalar code selects between the two, both evaluated (a loop over it
  still vectorizes); vector code and the GPU branch, once per vector, to a cold block that runs
  the huge-argument reduction only where some lane needs it; so does the scalar version of an
  out-of-line function (``emitter.MathLib``, which no loop vectorizes: it runs where the work
  is scalar: with the select a while loop's scalar sin took ~80 ns a call, with the branch
  ~33 ns)."""
  q = m.rint(m.mul(ax, m.c(_TWO_OVER_PI)))
  t1 = m.fma(m.neg(q), m.c(_PIO2_1), ax)             # exact for q < 2^53
  p, pe = m.two_prod(q, m.c(_PIO2_2))
  t2, e = m.two_sum(t1, m.neg(p))
  lo = m.sub(m.sub(e, pe), m.mul(q, m.c(_PIO2_3)))
  r_hi, r_lo = m.fast_two_sum(t2, lo)
  j = m.sub(q, m.mul(m.c(4.0), m.floor(m.mul(q, m.c(0.25)))))
  fast = (r_hi, r_lo, j)
  big = m.b.and_(m.gt(ax, m.c(_TRIG_LIMIT)), m.isfinite(ax))
  outlined = getattr(m.b.function, "ojx_outlined_math", False)
  if not m.lanes and not targets_gpu(m.b) and not outlined:
    huge = _trig_reduce_huge(m, ax)
    return tuple(m.select(big, h, f) for h, f in zip(huge, fast))
  b = m.b
  entry = b.block
  cold = b.append_basic_block("trig.huge")
  done = b.append_basic_block("trig.reduced")
  b.cbranch(_any_lane(m, big), cold, done).set_weights([1, 1 << 20])
  b.position_at_end(cold)
  huge = [m.select(big, h, f) for h, f in zip(_trig_reduce_huge(m, ax), fast)]
  cold_end = b.block
  b.branch(done)
  b.position_at_end(done)
  out = []
  for h, f in zip(huge, fast):
    phi = b.phi(m.ty)
    phi.add_incoming(f, entry)
    phi.add_incoming(h, cold_end)
    out.append(phi)
  return tuple(out)


def _sincos_kernels(m: _M, r_hi, r_lo, tag=None):
  """sin(r), cos(r) for r = r_hi + r_lo, |r| <= pi/4, each rounded once at the end."""
  z = m.mul(r_hi, r_hi)
  z_lo = m.fma(r_hi, r_hi, m.neg(z))
  s_tail = m.fma(m.mul(r_hi, z), m.poly(z, _co(m, "SIN", tag)),
                 m.fma(m.mul(m.c(-0.5), z), r_lo, r_lo))
  sin_v = m.add(r_hi, s_tail)
  hz = m.mul(z, m.c(0.5))
  w = m.sub(m.c(1.0), hz)
  c_tail = m.add(m.sub(m.sub(m.c(1.0), w), hz),
                 m.fma(m.mul(z, z), m.poly(z, _co(m, "COS", tag)),
                       m.fma(m.neg(r_hi), r_lo, m.mul(z_lo, m.c(-0.5)))))
  cos_v = m.add(w, c_tail)
  return sin_v, cos_v, (r_hi, s_tail), (w, c_tail)


def _trig_args(m: _M, x):
  """Reduce |x| in double; returns (mw, r_hi, r_lo, j as int of m's width) where mw is the
  working _M (float: the f32 kernels get r rounded to float plus its residual)."""
  if m.is64:
    r_hi, r_lo, j = _trig_reduce(m, m.abs(x))
    return r_hi, r_lo, m.f2i(j)
  w = m.wide()
  r_hi, r_lo, j = _trig_reduce(w, w.ext(m.abs(x)))
  r = w.add(r_hi, r_lo)
  rf = m.narrow(r)
  rf_lo = m.narrow(w.sub(r, w.ext(rf)))
  return rf, rf_lo, m.b.fptosi(j, m.ity)


def _sin_cos(kind):
  def emit(m: _M, x):
    r_hi, r_lo, j = _trig_args(m, x)
    s, c, _, _ = _sincos_kernels(m, r_hi, r_lo)
    odd = m.b.icmp_signed("!=", m.iand(j, 1), m.ci(0))
    if kind == "sin":
      v = m.select(odd, c, s)
      negate = m.b.icmp_signed("!=", m.iand(j, 2), m.ci(0))
      res = m.xorsign(m.flip_sign(v, negate), x)
    else:
      v = m.select(odd, s, c)
      negate = m.b.icmp_signed("!=", m.iand(m.iadd(j, m.ci(1)), 2), m.ci(0))
      res = m.flip_sign(v, negate)
    res = m.select(m.isfinite(x), res, m.c(_pymath.nan))
    return m.select(m.isnan(x), x, res)
  return emit


def _div_pairs(m: _M, nh, nl, dh, dl, pair=False):
  """(nh + nl) / (dh + dl) rounded (or as a pair), with the first rounding errors compensated."""
  N, Ne = m.fast_two_sum(nh, nl)
  D, De = m.fast_two_sum(dh, dl)
  q = m.div(N, D)
  rem = m.fma(m.neg(q), D, N)                        # exact
  rem = m.fma(m.neg(q), De, m.add(rem, Ne))
  if pair:
    return q, m.div(rem, D)
  return m.add(q, m.div(rem, D))


def _tan(m: _M, x):
  if m.is64:
    r_hi, r_lo, j = _trig_args(m, x)
    _, _, sp, cp = _sincos_kernels(m, r_hi, r_lo)
    odd = m.b.icmp_signed("!=", m.iand(j, 1), m.ci(0))
    nh = m.select(odd, cp[0], sp[0])
    nl = m.select(odd, cp[1], sp[1])
    dh = m.select(odd, sp[0], cp[0])
    dl = m.select(odd, sp[1], cp[1])
    t = _div_pairs(m, nh, nl, dh, dl)
    t = m.flip_sign(t, odd)
  else:
    w = m.wide()
    r_hi, r_lo, jf = _trig_reduce(w, w.ext(m.abs(x)))
    s, c, _, _ = _sincos_kernels(w, r_hi, r_lo, "x32")
    oddw = w.or_(w.eq(jf, w.c(1.0)), w.eq(jf, w.c(3.0)))
    t = m.narrow(w.select(oddw, w.neg(w.div(c, s)), w.div(s, c)))
  res = m.xorsign(t, x)
  res = m.select(m.isfinite(x), res, m.c(_pymath.nan))
  res = m.select(m.eq(x, m.c(0.0)), x, res)
  return m.select(m.isnan(x), x, res)



# ---------------------------------------------------------------------------------------------
# inverse trigonometric
# ---------------------------------------------------------------------------------------------
# atan(t) = t + t*z*ATAN(z), |t| <= tan(pi/8)
ATAN_F32 = [-0.33333316445350647, 0.19998526573181152, -0.14244344830513, 0.10598728060722351,
            -0.060887355357408524]
ATAN_F64 = [-0.3333333333333319, 0.19999999999952317, -0.1428571428007921, 0.1111111077800895,
            -0.09090897610357881, 0.07692057726273321, -0.0666307697950965, 0.05847699591769161,
            -0.05038477018058861, 0.03804411289158221, -0.017885360325341593]
# asin(x) = x + x*z*ASIN(z), |x| <= 1/2
ASIN_F32 = [0.16666752099990845, 0.0749531015753746, 0.045469019562006, 0.024185502901673317,
            0.04215701296925545]
ASIN_F64 = [0.1666666666666541, 0.07500000000336574, 0.044642856828637, 0.03038195912589044,
            0.022371758285978604, 0.017359701566342527, 0.013885264227308227,
            0.012169037972297425, 0.006528671443860147, 0.019526488014509215,
            -0.016221637371243307, 0.03191058074149657]

_PI_HI, _PI_LO = 3.141592653589793, 1.2246467991473532e-16
_PIO2_HI, _PIO2_LO = 1.5707963267948966, 6.123233995736766e-17
_PIO4_HI, _PIO4_LO = 0.7853981633974483, 3.061616997868383e-17


def _cpair(m: _M, hi, lo):
  """A constant as (hi, lo) in m's precision."""
  h = hi if m.is64 else _f32(hi)
  return m.c(h), m.c((hi - h) + lo)


def _pair_rsub(m: _M, c, u, t):
  """C - (u + t) as an unnormalised pair, for a constant pair C and |u| <= |C_hi|."""
  s, e = m.fast_two_sum(c[0], m.neg(u))
  return s, m.add(e, m.sub(c[1], t))


def _atan_core(m: _M, t, t_lo=None):
  """atan(t + t_lo) for 0 <= t <= 2^60 as a pair (u, tail)."""
  one = m.c(1.0)
  in_b = m.gt(t, m.c(0.41421356237309503))
  in_c = m.gt(t, m.c(2.414213562373095))
  # range B: (t - 1)/(t + 1), range C: -1/t, range A: t / 1
  nb, nb_lo = m.two_sum(t, m.c(-1.0))
  db, db_lo = m.two_sum(t, one)
  n = m.select(in_c, m.c(-1.0), m.select(in_b, nb, t))
  d = m.select(in_c, t, m.select(in_b, db, one))
  zero = m.c(0.0)
  n_lo = m.select(in_c, zero, m.select(in_b, nb_lo, zero))
  d_lo = m.select(in_c, zero, m.select(in_b, db_lo, zero))
  if t_lo is not None:
    n_lo = m.select(in_c, zero, m.add(n_lo, t_lo))
    d_lo = m.select(in_c, t_lo, m.select(in_b, m.add(d_lo, t_lo), zero))
  a = m.div(n, d)
  a_lo = m.div(m.fma(m.neg(a), d_lo, m.add(m.fma(m.neg(a), d, n), n_lo)), d)
  z = m.mul(a, a)
  tail = m.fma(m.mul(a, z), m.poly(z, _co(m, "ATAN")), m.fma(m.neg(a_lo), z, a_lo))
  b4, b4_lo = _cpair(m, _PIO4_HI, _PIO4_LO)
  b2, b2_lo = _cpair(m, _PIO2_HI, _PIO2_LO)
  base = m.select(in_c, b2, m.select(in_b, b4, zero))
  base_lo = m.select(in_c, b2_lo, m.select(in_b, b4_lo, zero))
  u, e = m.fast_two_sum(base, a)
  return u, m.add(e, m.add(tail, base_lo))


def _atan(m: _M, x):
  t = m.min_(m.abs(x), m.c(2.0 ** 60))
  u, tail = _atan_core(m, t)
  res = m.copysign(m.add(u, tail), x)
  return m.select(m.isnan(x), x, res)


def _atan2(m: _M, y, x):
  ax, ay = m.abs(x), m.abs(y)
  swap = m.gt(ay, ax)
  mx = m.select(swap, ay, ax)
  mn = m.select(swap, ax, ay)
  a = m.div(mn, mx)
  a_lo = m.div(m.fma(m.neg(a), mx, mn), mx)
  same = m.eq(ax, ay)                                # 0/0 and inf/inf
  a = m.select(same, m.select(m.eq(ax, m.c(0.0)), m.c(0.0), m.c(1.0)), a)
  fin = m.lt(mx, m.c(_pymath.inf))
  a_lo = m.select(m.and_(fin, m.not_(same)), a_lo, m.c(0.0))
  a_lo = m.select(m.gt(mx, m.c(0.0)), a_lo, m.c(0.0))
  u, t = _atan_core(m, a, a_lo)
  pio2 = _cpair(m, _PIO2_HI, _PIO2_LO)
  pi = _cpair(m, _PI_HI, _PI_LO)
  su, st = _pair_rsub(m, pio2, u, t)
  u = m.select(swap, su, u)
  t = m.select(swap, st, t)
  neg_x = m.signbit(x)
  pu, pt = _pair_rsub(m, pi, u, t)
  u = m.select(neg_x, pu, u)
  t = m.select(neg_x, pt, t)
  res = m.copysign(m.add(u, t), y)
  return m.select(m.or_(m.isnan(x), m.isnan(y)), m.add(x, y), res)


def _asin_big(m: _M, ax):
  """For 1/2 <= ax <= 1: asin(sqrt((1-ax)/2)) as (s, tail)."""
  z2 = m.mul(m.sub(m.c(1.0), ax), m.c(0.5))         # exact
  s = m.sqrt(z2)
  s_lo = m.div(m.fma(m.neg(s), s, z2), m.add(s, s))
  s_lo = m.select(m.eq(s, m.c(0.0)), m.c(0.0), s_lo)
  return s, m.fma(m.mul(s, z2), m.poly(z2, _co(m, "ASIN")), s_lo)


def _asin(m: _M, x):
  ax = m.abs(x)
  z = m.mul(x, x)
  rs = m.fma(m.mul(x, z), m.poly(z, _co(m, "ASIN")), x)
  s, tail = _asin_big(m, ax)
  u, t = _pair_rsub(m, _cpair(m, _PIO2_HI, _PIO2_LO), m.add(s, s), m.add(tail, tail))
  rb = m.copysign(m.add(u, t), x)
  res = m.select(m.le(ax, m.c(0.5)), rs, rb)
  res = m.select(m.gt(ax, m.c(1.0)), m.c(_pymath.nan), res)
  return m.select(m.isnan(x), x, res)


def _acos(m: _M, x):
  ax = m.abs(x)
  z = m.mul(x, x)
  ts = m.mul(m.mul(x, z), m.poly(z, _co(m, "ASIN")))
  su, st = _pair_rsub(m, _cpair(m, _PIO2_HI, _PIO2_LO), x, ts)
  rs = m.add(su, st)
  s, tail = _asin_big(m, ax)
  s2, t2 = m.add(s, s), m.add(tail, tail)
  pu, pt = _pair_rsub(m, _cpair(m, _PI_HI, _PI_LO), s2, t2)
  rb = m.select(m.lt(x, m.c(0.0)), m.add(pu, pt), m.add(s2, t2))
  res = m.select(m.le(ax, m.c(0.5)), rs, rb)
  res = m.select(m.gt(ax, m.c(1.0)), m.c(_pymath.nan), res)
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# inverse hyperbolic (one log each, its argument chosen per range)
# ---------------------------------------------------------------------------------------------

def _log1p_of_pair(m: _M, v, v_lo):
  """(u, corr) with log1p(v + v_lo) = log(u) + corr."""
  u = m.add(m.c(1.0), v)
  return u, m.div(m.add(m.sub(v, m.sub(u, m.c(1.0))), v_lo), u)


def _asinh(m: _M, x, tag=None):
  if not m.is64:
    w = m.wide()
    return m.narrow(_asinh(w, w.ext(x), "x32"))
  ax = m.abs(x)
  huge = 2.0 ** (28 if m.is64 else 12)
  one = m.c(1.0)
  # |x| < 2: log1p(ax + ax^2/(1 + sqrt(1 + ax^2)))
  x2 = m.mul(ax, ax)
  sq = m.sqrt(m.add(one, x2))
  v, v_lo = m.two_sum(ax, m.div(x2, m.add(one, sq)))
  u_s, c_s = _log1p_of_pair(m, v, v_lo)
  # 2 <= |x| < huge: log(2ax + 1/(sqrt(x^2+1) + ax)); beyond: log(ax) + ln2
  w, w_lo = m.fast_two_sum(m.add(ax, ax), m.div(one, m.add(sq, ax)))
  is_huge = m.gt(ax, m.c(huge))
  small = m.lt(ax, m.c(2.0))
  arg = m.select(small, u_s, m.select(is_huge, ax, w))
  corr = m.select(small, c_s, m.select(is_huge, m.c(0.0), m.div(w_lo, w)))
  kf, f = _log_split(m, arg)
  kf = m.add(kf, m.select(is_huge, one, m.c(0.0)))
  res = _log_combine(m, kf, f, corr, "log", tag)
  res = m.select(m.lt(ax, _log1p_series_max(m)), _log1p_series(m, v, v_lo), res)
  res = m.copysign(res, x)
  res = m.select(m.isinf(x), x, res)
  return m.select(m.isnan(x), x, res)


def _acosh(m: _M, x, tag=None):
  if not m.is64:
    w = m.wide()
    return m.narrow(_acosh(w, w.ext(x), "x32"))
  one = m.c(1.0)
  huge = 2.0 ** (28 if m.is64 else 12)
  # 1 <= x < 2: log1p(t + sqrt(t*(2+t))), t = x - 1 (exact)
  t = m.sub(x, one)
  a, a_lo = m.fast_two_sum(m.c(2.0), t)
  w, w_lo = m.two_prod(t, a)
  w_lo = m.fma(t, a_lo, w_lo)
  sq = m.sqrt(w)
  sq_lo = m.div(m.add(m.fma(m.neg(sq), sq, w), w_lo), m.add(sq, sq))
  sq_lo = m.select(m.gt(sq, m.c(0.0)), sq_lo, m.c(0.0))
  v, v_lo = m.fast_two_sum(sq, t)
  u_s, c_s = _log1p_of_pair(m, v, m.add(v_lo, sq_lo))
  # 2 <= x < huge: log(2x - 1/(x + sqrt(x^2-1))); beyond: log(x) + ln2
  wb, wb_lo = m.fast_two_sum(m.add(x, x),
                             m.neg(m.div(one, m.add(x, m.sqrt(m.fma(x, x, m.c(-1.0)))))))
  is_huge = m.gt(x, m.c(huge))
  small = m.lt(x, m.c(2.0))
  arg = m.select(small, u_s, m.select(is_huge, x, wb))
  corr = m.select(small, c_s, m.select(is_huge, m.c(0.0), m.div(wb_lo, wb)))
  kf, f = _log_split(m, m.select(m.lt(arg, one), one, arg))
  kf = m.add(kf, m.select(is_huge, one, m.c(0.0)))
  res = _log_combine(m, kf, f, corr, "log", tag)
  res = m.select(m.eq(x, m.c(_pymath.inf)), x, res)
  res = m.select(m.lt(x, one), m.c(_pymath.nan), res)
  return m.select(m.isnan(x), x, res)


def _atanh(m: _M, x):
  ax = m.abs(x)
  one = m.c(1.0)
  # atanh = 1/2 log1p(2ax/(1-ax)), the quotient and its argument with their rounding errors
  d, d_lo = m.fast_two_sum(one, m.neg(ax))
  n = m.add(ax, ax)
  q = m.div(n, d)
  q_lo = m.div(m.fma(m.neg(q), d_lo, m.fma(m.neg(q), d, n)), d)
  ok = m.lt(ax, one)
  q = m.select(ok, q, m.c(0.0))
  q_lo = m.select(ok, q_lo, m.c(0.0))
  u, corr = _log1p_of_pair(m, q, q_lo)
  kf, f = _log_split(m, u)
  res = _log_combine(m, kf, f, corr)
  res = m.select(m.lt(q, _log1p_series_max(m)), _log1p_series(m, q, q_lo), res)
  res = m.mul(res, m.c(0.5))
  res = m.select(m.eq(ax, one), m.c(_pymath.inf), res)
  res = m.select(m.gt(ax, one), m.c(_pymath.nan), res)
  res = m.copysign(res, x)
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# roots
# ---------------------------------------------------------------------------------------------

def _rsqrt(m: _M, x):
  tiny = m.lt(x, m.c(2.0 ** (-900 if m.is64 else -100)))
  kk = 128 if m.is64 else 32
  x0 = x
  x = m.select(tiny, m.mul(x, m.c(2.0 ** (2 * kk))), x)
  s = m.sqrt(x)
  r = m.div(m.c(1.0), s)
  s_lo = m.mul(m.fma(m.neg(s), s, x), m.mul(r, m.c(0.5)))      # (x - s^2) / (2s)
  r_lo = m.mul(m.fma(m.neg(r), s_lo, m.fma(m.neg(r), s, m.c(1.0))), r)
  res = m.mul(m.add(r, r_lo), m.select(tiny, m.c(2.0 ** kk), m.c(1.0)))
  x = x0
  res = m.select(m.eq(x, m.c(_pymath.inf)), m.c(0.0), res)
  res = m.select(m.eq(x, m.c(0.0)), m.copysign(m.c(_pymath.inf), x), res)
  res = m.select(m.lt(x, m.c(0.0)), m.c(_pymath.nan), res)
  return m.select(m.isnan(x), x, res)



# cbrt(m) ~ CBRT0(m) on [1, 2] (relative error 2^-10.6), refined by Halley and Newton steps
_CBRT0 = [0.6215152740478516, 0.4394393563270569, -0.06031852960586548]


def _cbrt(m: _M, x):
  ax = m.abs(x)
  tiny = m.lt(ax, m.c(2.0 ** (-1022 if m.is64 else -126)))
  up = 54 if m.is64 else 24
  axs = m.select(tiny, m.mul(ax, m.c(2.0 ** up)), ax)
  ib = m.bits(axs)
  e = m.i2f(m.isub(m.iashr(ib, m.mant), m.ci(m.bias)))
  e = m.sub(e, m.select(tiny, m.c(float(up)), m.c(0.0)))
  mant = m.from_bits(m.b.or_(m.iand(ib, (1 << m.mant) - 1), m.ci(m.bias << m.mant)))
  q = m.floor(m.fma(e, m.c(1.0 / 3.0), m.c(1e-3)))    # e = 3q + r, r in {0, 1, 2}
  r = m.fma(q, m.c(-3.0), e)
  r1 = m.eq(r, m.c(1.0))
  r2 = m.eq(r, m.c(2.0))
  v = m.mul(mant, m.select(r1, m.c(2.0), m.select(r2, m.c(4.0), m.c(1.0))))   # in [1, 8)
  y = m.mul(m.poly(mant, _CBRT0),
            m.select(r1, m.c(2.0 ** (1 / 3)), m.select(r2, m.c(4.0 ** (1 / 3)), m.c(1.0))))
  for _ in range(2 if m.is64 else 1):                 # Halley: y (y^3 + 2v) / (2y^3 + v)
    y3 = m.mul(m.mul(y, y), y)
    y = m.div(m.mul(y, m.fma(m.c(2.0), v, y3)), m.fma(m.c(2.0), y3, v))
  # Newton with an accurate residual: y - (y^3 - v) / (3 y^2)
  y2, y2_lo = m.two_prod(y, y)
  res3 = m.fma(y2_lo, y, m.fma(y2, y, m.neg(v)))
  y = m.sub(y, m.div(res3, m.mul(m.c(3.0), y2)))
  res = m.mul(y, m.pow2i(m.f2i(q)))
  res = m.copysign(res, x)
  res = m.select(m.or_(m.eq(ax, m.c(0.0)), m.eq(ax, m.c(_pymath.inf))), x, res)
  return m.select(m.isnan(x), x, res)



# ---------------------------------------------------------------------------------------------
# error function
# ---------------------------------------------------------------------------------------------
# erf(x) = x + x*ERF(x^2), |x| < 0.84375
ERF_F32 = [0.12837916612625122, -0.37612593173980713, 0.11282911896705627, -0.026809535920619965,
           0.0050618816167116165, -0.000637496414128691]
ERF_F64 = [0.12837916709551256, -0.37612638903183265, 0.11283791670929295, -0.026866170639713045,
           0.005223977566636325, -0.0008548323277075872, 0.00012055183387661302,
           -1.4921791528002676e-05, 1.6397654477412827e-06, -1.5687970918238365e-07,
           1.0651606766538424e-08]
# erfc(x) = exp(-x^2) * G(1/x) / x for x >= 0.84375, G(t) = sum ERFC_G[i] * (t - ERFC_C)^i with
# the constant term as a (hi, lo) pair; up to x = 10.1 (f32) / 27.3 (f64), where erfc underflows
ERFC_C_F32 = 0.642097532749176
ERFC_G_F32 = [(0.48659107089042664, -1.1428848145644821e-10), -0.17156822979450226,
              0.002269664080813527, 0.0669093132019043, -0.07386386394500732,
              0.04842241108417511, -0.012294929474592209, -0.018805747851729393,
              0.03412875533103943, -0.04114817455410957, 0.05209193751215935,
              -0.02167660929262638, -0.05774633213877678, 0.058290306478738785]
ERFC_C_F64 = 0.6109076109076109
ERFC_G_F64 = [(0.4919423774191785, 1.3796472644878044e-17), -0.17150532487854533,
              -0.004437196596214403, 0.07660019807346088, -0.08156093314165194,
              0.050343931704184094, -0.0074139894789555525, -0.029849215264957044,
              0.051151961400203984, -0.05275762719108358, 0.03646573449373605,
              -0.008180198355990901, -0.023812776182103604, 0.05067532814011415,
              -0.06468840716425103, 0.06099199441202721, -0.040216773333922304,
              0.005437019831853814, 0.054436234267701875, -0.12511880532731998,
              0.04498312041621705, 0.14546143578889667, 0.4687107681812282, -1.4627141729246944,
              -1.4239591930870197, 5.761218661328984, 3.1798232355716274, -15.59251097782979,
              -5.553439010798834, 31.72298657945678, 2.74343407888201, -40.09833040676031,
              4.54242088505982, 26.134327494884673, -4.511695340045282, -6.283738116027003]


ERFC_C_X32, ERFC_G_X32, ERF_X32 = ERFC_C_F32, ERFC_G_F32, ERF_F32


def _erfc_big(m: _M, ax, tag=None):
  """erfc(ax) for ax >= 0.84375 (any larger value, inf included)."""
  tag = tag or m.tag
  axc = m.min_(ax, m.c(27.3 if tag == "f64" else 10.1))
  h, h_lo = m.two_prod(axc, axc)
  e, e_lo = _exp_pair(m, m.max_(m.neg(h), m.c(_exp_bounds(m)[0])), tag=tag)
  t = m.div(m.c(1.0), axc)
  co = _co(m, "ERFC_G", tag)
  u = m.sub(t, m.c(_co(m, "ERFC_C", tag)))
  gh, gl = m.two_sum(m.c(co[0][0]), m.mul(u, m.poly(u, co[1:])))
  gl = m.add(gl, m.c(co[0][1]))
  # N = e*(1 - h_lo)*(gh + gl) as a pair, then N / x with the quotient's rounding compensated
  nh, nl = m.two_prod(e, gh)
  nl = m.fma(e, gl, m.fma(m.fma(m.neg(e), h_lo, e_lo), gh, nl))
  q = m.div(nh, axc)
  return m.add(q, m.mul(m.add(m.fma(m.neg(q), axc, nh), nl), t))


def _erf_small(m: _M, x, tag=None):
  """(x, x*P): erf(x) = x + x*P for |x| < 0.84375."""
  return x, m.mul(x, m.poly(m.mul(x, x), _co(m, "ERF", tag)))


def _erf(m: _M, x):
  ax = m.abs(x)
  a, b = _erf_small(m, x)
  rs = m.add(a, b)
  rb = m.copysign(m.sub(m.c(1.0), _erfc_big(m, ax)), x)
  res = m.select(m.lt(ax, m.c(0.84375)), rs, rb)
  return m.select(m.isnan(x), x, res)


def _erfc(m: _M, x, tag=None):
  if not m.is64:  # relative accuracy down to 1e-45: the float32 fits, evaluated in double
    w = m.wide()
    return m.narrow(_erfc(w, w.ext(x), "x32"))
  ax = m.abs(x)
  a, b = _erf_small(m, x, tag)
  s, e = m.fast_two_sum(m.c(1.0), m.neg(a))
  rs = m.add(s, m.sub(e, b))                           # 1 - erf(x)
  big = _erfc_big(m, ax, tag)
  rb = m.select(m.lt(x, m.c(0.0)), m.sub(m.c(2.0), big), big)
  res = m.select(m.lt(ax, m.c(0.84375)), rs, rb)
  return m.select(m.isnan(x), x, res)



# ---------------------------------------------------------------------------------------------
# pow
# ---------------------------------------------------------------------------------------------
# log(1+f) = 2s + s^3 (2/3 + z*POWLOG(z)), s = f/(2+f), z = s^2 (float64, for a double-double log)
POWLOG_F64 = [0.39999999999999986, 0.28571428571440705, 0.22222222218454235, 0.18181818773158154,
              0.1538456262096998, 0.13336124745646027, 0.11678234598977529, 0.11964118661722412]
_TWO3_HI, _TWO3_LO = 0.6666666666666666, 3.700743415417188e-17


def _log_dd(m: _M, x):
  """log(x) as a double-double (hi, lo), relative error ~2^-66, for finite x > 0."""
  kf, f = _log_split(m, x)
  d, d_lo = m.fast_two_sum(m.c(2.0), f)
  s = m.div(f, d)
  s_lo = m.div(m.fma(m.neg(s), d_lo, m.fma(m.neg(s), d, f)), d)
  z, z_lo = m.two_prod(s, s)
  z_lo = m.fma(m.add(s, s), s_lo, z_lo)
  c, c_lo = m.two_prod(s, z)                          # s^3
  c_lo = m.fma(s, z_lo, m.fma(s_lo, z, c_lo))
  k, k_lo = m.fast_two_sum(m.c(_TWO3_HI), m.mul(z, m.poly(z, POWLOG_F64)))
  k_lo = m.add(k_lo, m.c(_TWO3_LO))
  b, b_lo = m.two_prod(c, k)
  b_lo = m.fma(c, k_lo, m.fma(c_lo, k, b_lo))
  a = m.add(s, s)
  l1, l1_lo = m.fast_two_sum(a, b)
  l1_lo = m.add(l1_lo, m.add(m.add(s_lo, s_lo), b_lo))
  hi, lo = _ln2_parts(m)
  h, h_lo = m.two_sum(m.mul(kf, hi), l1)
  return m.fast_two_sum(h, m.add(h_lo, m.fma(kf, lo, l1_lo)))


def _exp_of_pair(m: _M, p, p_lo, tag=None):
  """exp(p + p_lo), overflowing to inf and underflowing to 0 (p may be +-inf, not NaN)."""
  lo, hi = _exp_bounds(m)
  pc = m.clamp(p, lo, hi)
  p_lo = m.select(m.eq(pc, p), p_lo, m.c(0.0))
  _, ni, r_hi, r_lo = _exp_reduce(m, pc)
  u, tail = _exp_poly(m, r_hi, m.add(r_lo, p_lo), tag)
  return m.scale(m.add(u, tail), ni)


def _pow(m: _M, x, y):
  ax = m.abs(x)
  if m.is64:
    lh, ll = _log_dd(m, ax)
    ph, pl = m.two_prod(y, lh)
    pl = m.fma(y, ll, pl)
    finite_p = m.isfinite(ph)
    pl = m.select(finite_p, pl, m.c(0.0))
    mag = _exp_of_pair(m, ph, pl)
  else:  # float32: log and exp in double with float32-grade polynomials
    w = m.wide()
    axd = w.ext(ax)
    kf, f = _log_split(w, axd)
    ld = _log_combine(w, kf, f, None, "log", "x32")
    pd = w.mul(w.ext(y), ld)
    mag = m.narrow(_exp_of_pair(w, pd, w.c(0.0), "x32"))
  # special operands of the logarithm: 0 -> -inf, inf -> inf
  zero_x = m.eq(ax, m.c(0.0))
  inf_x = m.eq(ax, m.c(_pymath.inf))
  ypos = m.gt(y, m.c(0.0))
  big = m.select(ypos, m.c(_pymath.inf), m.c(0.0))
  small = m.select(ypos, m.c(0.0), m.c(_pymath.inf))
  mag = m.select(zero_x, small, m.select(inf_x, big, mag))
  # y = +-inf: |x| < 1 and |x| > 1 cases
  inf_y = m.isinf(y)
  lt1 = m.lt(ax, m.c(1.0))
  mag = m.select(inf_y, m.select(m.eq(ax, m.c(1.0)), m.c(1.0),
                                 m.select(m.b.icmp_unsigned("==", lt1, ypos), m.c(0.0),
                                          m.c(_pymath.inf))), mag)
  # sign and domain: y odd integer -> sign of x; x < 0 finite and y not an integer -> NaN
  yint = m.eq(m.trunc(y), y)
  half = m.mul(y, m.c(0.5))
  yodd = m.and_(yint, m.b.fcmp_unordered("!=", m.trunc(half), half))
  res = m.flip_sign(mag, m.and_(yodd, m.signbit(x)))
  bad = m.and_(m.and_(m.lt(x, m.c(0.0)), m.isfinite(x)), m.and_(m.not_(yint), m.isfinite(y)))
  res = m.select(bad, m.c(_pymath.nan), res)
  res = m.select(m.or_(m.isnan(x), m.isnan(y)), m.add(x, y), res)
  one = m.or_(m.eq(x, m.c(1.0)), m.eq(y, m.c(0.0)))
  return m.select(one, m.c(1.0), res)



# ---------------------------------------------------------------------------------------------
# inverse error function
# ---------------------------------------------------------------------------------------------
# erf_inv(x) = x * P(v) with w = -log((1-x)(1+x)) and, per piece, v = w - 2.5 (w < 5),
# v = sqrt(w) - 3 (w < 16.7), v = sqrt(w) - 5 (w >= 16.7); relative errors 2^-31, 2^-30, 2^-36.
# Evaluated in double; float64 adds one Newton step on erf/erfc.
_ERFINV_A = [1.5014093516925355, 0.24664027578548922, -0.004177324636405417,
             -0.0012527048763460464, 0.00021826355776341174, -4.998760257183957e-06,
             -3.426012291554439e-06, 4.796990385888702e-07, 1.6457254551401638e-08,
             -1.1023244472273443e-08, 4.370295510531205e-10, 1.328607879951801e-10]
_ERFINV_B = [2.832976798553431, 1.0016752501560333, 0.009445531577317633, -0.007643024883629656,
             0.005684935079728283, -0.0035652706251581255, 0.0014867388710343803,
             -0.00012680746514700283, -0.00029765206467652724, 0.00017310688239963252,
             -1.7080078557549774e-05, -8.729267456293814e-06]
_ERFINV_C = [4.849906401473527, 1.0103004647907525, -0.0001387227727723515, -0.000215028884983702,
             7.602447394435773e-05, -1.9690235395650102e-05, 4.440997964900736e-06,
             -9.654582054228365e-07, 3.2528333180562645e-07, -1.0570741358107498e-07]
_SQRT_PI_2 = 0.886226925452758                       # sqrt(pi)/2


def _poly_pieces(m: _M, v, pieces):
  """Horner on v with coefficients chosen per element: pieces = [(cond or None, coeffs), ...],
  the first piece whose cond holds wins (the last has cond None)."""
  n = max(len(c) for _, c in pieces)
  def coef(i):
    val = m.c(pieces[-1][1][i] if i < len(pieces[-1][1]) else 0.0)
    for cond, cs in reversed(pieces[:-1]):
      val = m.select(cond, m.c(cs[i] if i < len(cs) else 0.0), val)
    return val
  r = coef(n - 1)
  for i in range(n - 2, -1, -1):
    r = m.fma(r, v, coef(i))
  return r


def _erf_inv(m: _M, x):
  if not m.is64:
    w = m.wide()
    return m.narrow(_erf_inv_wide(w, w.ext(x), "x32"))
  return _erf_inv_wide(m, x, "f64")


def _erf_inv_wide(m: _M, x, tag):
  ax = m.abs(x)
  one = m.c(1.0)
  a, a_lo = m.fast_two_sum(one, m.neg(ax))
  b, b_lo = m.fast_two_sum(one, ax)
  p, p_lo = m.two_prod(a, b)
  p_lo = m.fma(a, b_lo, m.fma(a_lo, b, p_lo))
  ok = m.lt(ax, one)
  p = m.select(ok, p, one)
  kf, f = _log_split(m, p)
  w = m.neg(_log_combine(m, kf, f, m.div(m.select(ok, p_lo, m.c(0.0)), p), "log", tag))
  sw = m.sqrt(w)
  in_a = m.lt(w, m.c(5.0))
  in_b = m.lt(w, m.c(16.7))
  v = m.select(in_a, m.sub(w, m.c(2.5)), m.sub(sw, m.select(in_b, m.c(3.0), m.c(5.0))))
  y = m.mul(ax, _poly_pieces(m, v, [(in_a, _ERFINV_A), (in_b, _ERFINV_B), (None, _ERFINV_C)]))
  if tag == "f64":
    # Newton: y -= (erf(y) - ax) / (2/sqrt(pi) exp(-y^2)); the residual via erfc near 1
    e0, e1 = _erf_small(m, y)
    r_small = m.add(m.sub(e0, ax), e1)
    r_big = m.sub(a, _erfc_big(m, y))
    r = m.select(m.lt(y, m.c(0.84375)), r_small, r_big)
    y = m.sub(y, m.mul(m.mul(r, m.c(_SQRT_PI_2)), _exp_finite(m, m.min_(m.mul(y, y), m.c(700.0)))))
  res = m.select(m.eq(ax, one), m.c(_pymath.inf), y)
  res = m.select(m.gt(ax, one), m.c(_pymath.nan), res)
  res = m.copysign(res, x)
  return m.select(m.isnan(x), x, res)



# ---------------------------------------------------------------------------------------------
# lgamma, digamma
# ---------------------------------------------------------------------------------------------
# Both run in double (float32 inputs are widened): a recurrence lifts 0 < a < 8 to z = a + n >= 8
# where the asymptotic series converges to better than 2^-64, polynomials cover the zeros (1 and
# 2 for lgamma, x0 = 1.4616... for digamma), and x < 0 goes through the reflection formula.  For
# float64 the sums and products are double-double ("dd"); for float32 plain double suffices.
#
# lgamma(1+u) = u*LG1(u), lgamma(2+u) = u*LG2(u), psi(x0+u) = u*PSI0(u), |u| <= 0.1, the
# constant term as a (hi, lo) pair for float64
LG1_F64 = [(-0.5772156649015329, 4.933119884809045e-18), 0.8224670334241132, -0.40068563438653104,
           0.27058080842781285, -0.20738555102952178, 0.16955717698126252, -0.14404989617460476,
           0.12550967357128848, -0.11133445362602287, 0.10009899314936306, -0.09092442608923093,
           0.08337053199716976, -0.07919981787508926, 0.07233788047119881]
LG1_X32 = [(-0.57721566491227, 0.0), 0.8224670473432756, -0.40068562743462904, 0.2705696833726062,
           -0.2073808236947511, 0.17177563010045568, -0.1456754412265316]
LG2_F64 = [(0.42278433509846713, 4.960224939121183e-18), 0.3224670334241132, -0.0673523010531982,
           0.02058080842781413, -0.007385551028578398, 0.0028905103146048385,
           -0.0011927539457698786, 0.0005096731361063243, -0.00022314934916369797,
           9.910235823526082e-05, -4.5307012612050786e-05, 3.3290120306523934e-05]
LG2_X32 = [(0.42278433506115687, 0.0), 0.32246703366340457, -0.06735223383356642,
           0.02058069034925103, -0.007403474624634543, 0.002905318415383856]
PSI0_F64 = [(0.9676722454476212, -3.366447745567491e-17), -0.4427631689835921, 0.2584997609556495,
            -0.1639427054424638, 0.10782405069293655, -0.07219956121642981,
            0.048804287471419294, -0.0331611389879147, 0.022597779601291883,
            -0.015422811051865205, 0.010527003932392243, -0.007353593501859263,
            0.005355071298422355, 0.0010318353840970838]
PSI0_X32 = [(0.9676722454464534, 0.0), -0.4427631726425514, 0.25849976555114534,
            -0.1639397808810359, 0.10782149716210661, -0.07278334504761069, 0.0492394829972903]
# lgamma(z) = (z-1/2) log z - z + log(2 pi)/2 + t*STIRLING(t^2), t = 1/z, z >= 8
STIRLING_F64 = [0.08333333333333333, -0.002777777777766673, 0.000793650785922401,
                -0.0005952357144345448, 0.0008413718696957755, -0.0018847940758643144,
                0.004922564397954898, 0.0010571204783103286]
STIRLING_X32 = [0.08333333333172187, -0.002777776391738414, 0.0007933280868066682,
                -0.0005671793673319287]
# psi(z) = log z - 1/(2z) - t^2*PSIASYM(t^2), t = 1/z, z >= 8
PSIASYM_F64 = [0.08333333333333333, -0.008333333333322888, 0.003968253960540021,
               -0.004166663948596199, 0.0075752286280476415, -0.021032385693839587,
               0.07924922995274011, -0.28651623913848057]
PSIASYM_X32 = [0.08333333330521844, -0.008333315691729161, 0.003964799884636682,
               -0.0038972111821025733]
_PSI_X0 = (1.4616321449683622, 9.549995429965697e-17)
_LOGPI = (1.1447298858494002, 1.0265951162707826e-17)
_HALF_LOG_2PI = (0.9189385332046728, -3.8782941580672414e-17)
_EULER = (0.5772156649015329, -4.942915152430645e-18)
_LIFT = 8.0


class _DD:
  """Double-double helpers that degrade to plain arithmetic (lo = 0) when dd is False."""

  def __init__(self, m: _M, dd: bool, tag: str):
    self.m, self.dd, self.tag = m, dd, tag
    self.zero = m.c(0.0)

  def const(self, pair):
    return self.m.c(pair[0]), self.m.c(pair[1] if self.dd else 0.0)

  def add(self, a, b):
    m = self.m
    if not self.dd:
      return m.add(a[0], b[0]), self.zero
    s, e = m.two_sum(a[0], b[0])
    return s, m.add(e, m.add(a[1], b[1]))

  def neg(self, a):
    return self.m.neg(a[0]), self.m.neg(a[1])

  def mul(self, a, b):
    m = self.m
    if not self.dd:
      return m.mul(a[0], b[0]), self.zero
    p, e = m.two_prod(a[0], b[0])
    return p, m.fma(a[0], b[1], m.fma(a[1], b[0], e))

  def recip(self, a):
    m = self.m
    r = m.div(m.c(1.0), a[0])
    if not self.dd:
      return r, self.zero
    return r, m.mul(m.fma(m.neg(r), a[1], m.fma(m.neg(r), a[0], m.c(1.0))), r)

  def log(self, a):
    """log(a_hi + a_lo) for a_hi > 0 finite."""
    m = self.m
    if not self.dd:
      kf, f = _log_split(m, a[0])
      return _log_combine(m, kf, f, None, "log", self.tag), self.zero
    h, l = _log_dd(m, a[0])
    return h, m.add(l, m.div(a[1], a[0]))

  def value(self, a):
    return self.m.add(a[0], a[1])

  def select(self, cond, a, b):
    return self.m.select(cond, a[0], b[0]), self.m.select(cond, a[1], b[1])

  def local_poly(self, u, coeffs, u_lo=None):
    """(u + u_lo) * (c0 + u*P(u)) with c0 a (hi, lo) pair, rounded once at the end."""
    m = self.m
    (c0, c0_lo), rest = coeffs[0], coeffs[1:]
    uu = u if u_lo is None else m.add(u, u_lo)
    tail = m.mul(uu, m.fma(uu, m.poly(uu, rest), m.c(c0_lo)))
    if u_lo is not None:
      tail = m.fma(u_lo, m.c(c0), tail)
    return m.fma(u, m.c(c0), tail)


def _lift(d: _DD, a):
  """z = a + n >= _LIFT (a pair) and the factors a + k, k < n, as (active, pair) tuples."""
  m = d.m
  z = (a, d.zero)
  factors = []
  for k in range(1, int(_LIFT) + 1):
    act = m.lt(z[0], m.c(_LIFT))
    factors.append((act, z))
    nz = m.two_sum(a, m.c(float(k))) if d.dd else (m.add(a, m.c(float(k))), d.zero)
    z = d.select(act, nz, z)
  return z, factors


def _sinpi_cospi(d: _DD, a):
  """For a >= 0: (sin(pi r), cos(pi r)) as pairs and 'odd' with a = j/2 + r, |r| <= 1/4,
  odd = j is odd."""
  m = d.m
  j = m.rint(m.add(a, a))
  r = m.fma(j, m.c(-0.5), a)                           # exact
  rh, rl = m.two_prod(m.c(_PI_HI), r)
  rl = m.fma(m.c(_PI_LO), r, rl)
  _, _, sp, cp = _sincos_kernels(m, rh, rl, d.tag)
  sp = m.fast_two_sum(*sp)
  cp = m.fast_two_sum(*cp)
  odd = m.eq(m.sub(j, m.mul(m.c(2.0), m.floor(m.mul(j, m.c(0.5))))), m.c(1.0))
  return sp, cp, odd


def _lgamma_pos(d: _DD, a):
  """lgamma(a) for a > 0 finite, as a pair."""
  m = d.m
  z, factors = _lift(d, a)
  p = d.const((1.0, 0.0))
  for act, f in factors:
    p = d.select(act, d.mul(p, f), p)
  lz = d.log(z)
  w = d.add(z, (m.c(-0.5), d.zero))
  t = m.div(m.c(1.0), z[0])
  corr = m.mul(t, m.poly(m.mul(t, t), _co(m, "STIRLING", d.tag)))
  res = d.add(d.mul(w, lz), d.neg(z))
  res = d.add(res, d.const(_HALF_LOG_2PI))
  res = d.add(res, d.neg(d.log(p)))
  if not d.dd:
    return m.add(res[0], corr), d.zero
  return res[0], m.add(res[1], corr)


def _lgamma(m: _M, x):
  if not m.is64:
    w = m.wide()
    return m.narrow(_lgamma_w(_DD(w, False, "x32"), w.ext(x)))
  return _lgamma_w(_DD(m, True, "f64"), x)


def _lgamma_w(d: _DD, x):
  m = d.m
  ax = m.abs(x)
  axc = m.min_(ax, m.c(2.0 ** 1000))
  pos = _lgamma_pos(d, axc)
  res_pos = d.value(pos)
  res_pos = m.select(m.lt(m.abs(m.sub(ax, m.c(1.0))), m.c(0.1)),
                     d.local_poly(m.sub(ax, m.c(1.0)), _co(m, "LG1", d.tag)), res_pos)
  res_pos = m.select(m.lt(m.abs(m.sub(ax, m.c(2.0))), m.c(0.1)),
                     d.local_poly(m.sub(ax, m.c(2.0)), _co(m, "LG2", d.tag)), res_pos)
  # beyond 2^1000: x (log x - 1) - log(x)/2 (plain double is enough; overflows to inf)
  lh, ll = d.log((m.min_(ax, m.c(1.7976931348623157e308)), d.zero))
  a_hi, a_lo = m.fast_two_sum(lh, m.c(-1.0))
  big = m.fma(ax, a_hi, m.fma(ax, m.add(a_lo, ll), m.mul(m.c(-0.5), lh)))
  res_pos = m.select(m.gt(ax, m.c(2.0 ** 1000)), big, res_pos)
  # x < 0: lgamma(x) = log(pi) - log|x sin(pi x)| - lgamma(|x|)
  sp, cp, odd = _sinpi_cospi(d, ax)
  s = d.select(odd, cp, sp)
  s = (m.abs(s[0]), m.xorsign(s[1], s[0]))
  q = d.mul((axc, d.zero), s)
  lq = d.log(q)
  neg = d.add(d.const(_LOGPI), d.neg(d.add(lq, (pos[0], pos[1]))))
  res_neg = d.value(neg)
  # |x| < 2^-60: lgamma(-t) = lgamma(t) + 2*euler*t + ..., and x*sin(pi x) would underflow
  res = m.select(m.and_(m.lt(x, m.c(0.0)), m.ge(ax, m.c(2.0 ** -60))), res_neg, res_pos)
  pole = m.and_(m.le(x, m.c(0.0)), m.eq(m.floor(x), x))
  res = m.select(m.or_(pole, m.isinf(x)), m.c(_pymath.inf), res)
  return m.select(m.isnan(x), x, res)


def _digamma_pos(d: _DD, a):
  """psi(a) for finite a >= 2^-60, as a pair."""
  m = d.m
  z, factors = _lift(d, a)
  acc = (d.zero, d.zero)
  for act, f in factors:
    acc = d.select(act, d.add(acc, d.recip(f)), acc)
  lz = d.log(z)
  h = d.recip(z)
  h = (m.mul(h[0], m.c(0.5)), m.mul(h[1], m.c(0.5)))
  t = m.div(m.c(1.0), z[0])
  t2 = m.mul(t, t)
  asym = m.mul(t2, m.poly(t2, _co(m, "PSIASYM", d.tag)))
  res = d.add(lz, d.neg(d.add(h, acc)))
  if not d.dd:
    return m.sub(res[0], asym), d.zero
  return res[0], m.sub(res[1], asym)


def _digamma(m: _M, x):
  if not m.is64:
    w = m.wide()
    return m.narrow(_digamma_w(_DD(w, False, "x32"), w.ext(x)))
  return _digamma_w(_DD(m, True, "f64"), x)


def _digamma_w(d: _DD, x):
  m = d.m
  ax = m.abs(x)
  tiny = m.lt(ax, m.c(2.0 ** -60))
  axc = m.min_(m.max_(ax, m.c(2.0 ** -60)), m.c(2.0 ** 1000))
  pos = _digamma_pos(d, axc)
  u = m.sub(ax, m.c(_PSI_X0[0]))                       # exact near x0
  u_lo = m.c(-_PSI_X0[1]) if d.dd else None
  res_pos = m.select(m.lt(m.abs(u), m.c(0.1)), d.local_poly(u, _co(m, "PSI0", d.tag), u_lo),
                     d.value(pos))
  # x < 0: psi(x) = psi(|x|) + 1/|x| + pi*cot(pi*|x|)
  sp, cp, odd = _sinpi_cospi(d, axc)
  nh = m.select(odd, sp[0], cp[0])
  nl = m.select(odd, sp[1], cp[1])
  dh = m.select(odd, cp[0], sp[0])
  dl = m.select(odd, cp[1], sp[1])
  if d.dd:
    cot = _div_pairs(m, nh, nl, dh, dl, pair=True)
  else:
    cot = (m.div(m.add(nh, nl), m.add(dh, dl)), d.zero)
  cot = (m.flip_sign(cot[0], odd), m.flip_sign(cot[1], odd))
  pc = d.mul(d.const((_PI_HI, _PI_LO)), cot)
  neg = d.add(d.add(pos, d.recip((axc, d.zero))), pc)
  res = m.select(m.lt(x, m.c(0.0)), d.value(neg), res_pos)
  # tiny |x|: -1/x - euler
  res = m.select(tiny, m.sub(m.div(m.c(-1.0), x), m.c(_EULER[0])), res)
  big = d.log((m.min_(ax, m.c(1.7976931348623157e308)), d.zero))[0]
  res = m.select(m.gt(ax, m.c(2.0 ** 1000)), m.select(m.gt(x, m.c(0.0)), big,
                                                    m.c(_pymath.nan)), res)
  pole = m.and_(m.le(x, m.c(0.0)), m.eq(m.floor(x), x))
  res = m.select(pole, m.c(_pymath.nan), res)
  res = m.select(m.eq(x, m.c(_pymath.inf)), x, res)
  return m.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# GPU float32 variants (see the module docstring: used when the module targets NVPTX)
# ---------------------------------------------------------------------------------------------
# exp(r) = 1 + r*GEXP(r), |r| <= ln2/2 (relative error 2^-28)
GEXP_F32 = [1.0, 0.5, 0.16666533052921295, 0.04166724160313606, 0.008367607370018959,
            0.0013863741187378764]
# log(erfc(a)) = -a^2 + GERFC(a), 0.84375 <= a <= 3.925 (erf's absolute error 2^-28.9)
GERFC_F32 = [-0.00010787283099489287, -1.1280449628829956, 0.36345016956329346,
             -0.1044953241944313, 0.022502606734633446, -0.0031133086886256933,
             0.00020317206508480012]
# log(1+f) = f + f^2*GLOG(f), sqrt(1/2)-1 <= f <= sqrt(2)-1 (relative error 2^-27.3)
GLOG_F32 = [-0.5, 0.3333333134651184, -0.2500081956386566, 0.20001240074634552,
            -0.16623401641845703, 0.14201611280441284, -0.13159756362438202,
            0.12762095034122467, -0.07635851949453354]
# pi/2 = F1 + F2 + F3 (+ 1.1e-23), each the float32 rounding of the remainder
_PIO2_F1 = _hex("0x1.921fb6p+0")
_PIO2_F2 = _hex("-0x1.777a5cp-25")
_PIO2_F3 = _hex("-0x1.ee59dap-50")
_GPU_TRIG_MAX = 2.0 ** 17       # |x| below: the float32 reduction keeps full accuracy
# 2/(1+e) ~ W0 + W1 e on 0 <= e <= exp(-1.1), relative error 1.03% (equioscillating)
_TANH_W0, _TANH_W1 = 1.9794309, -1.4850881
# 1/(1+e) ~ Y0 + Y1 e on 0 <= e <= 1, relative error 1/17 (equioscillating)
_LOGISTIC_Y0, _LOGISTIC_Y1 = 16 / 17, -8 / 17


def _any_lane(m: _M, cond):
  """One i1: cond holds in some lane (cond itself for scalars)."""
  if not m.lanes:
    return cond
  ity = ir.IntType(m.lanes)
  return m.b.icmp_unsigned("!=", m.b.bitcast(cond, ity), ir.Constant(ity, 0))


def _out_of_line(module: ir.Module, name: str, ty, nargs: int):
  """(function, builder at its new entry block) for an internal noinline readnone function
  named ``name`` in ``module``; (function, None) when the module has it already."""
  fn = module.globals.get(name)
  if fn is not None:
    return fn, None
  fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name=name)
  fn.linkage = "internal"
  for a in ("noinline", "nounwind", "readnone"):
    fn.attributes.add(a)
  return fn, ir.IRBuilder(fn.append_basic_block("entry"))


_GUARDS = "_ojx_slow_path_guards"      # the builder attribute collect_slow_paths sets


@_contextlib.contextmanager
def collect_slow_paths(builder: ir.IRBuilder):
  """Within the ``with`` block, functions with a rare slow path (the GPU sin and cos) emit only
  their fast path on ``builder`` and append the condition under which it is wrong (an i1) to
  the yielded list instead of branching.  The caller branches once on any of them to a copy of
  its computation emitted outside the block (e.g. once per vector of elements instead of once
  per element: ``codegen.Elementwise``).  Only code in the basic block where the ``with``
  starts hands its condition over (it dominates the caller's branch); code the computation
  emits in other blocks (the body of an inner reduction loop) takes its own slow path."""
  prev = getattr(builder, _GUARDS, None)
  guards = []
  setattr(builder, _GUARDS, (guards, builder.block))
  try:
    yield guards
  finally:
    setattr(builder, _GUARDS, prev)


def _with_slow_path(m: _M, x, fast, bound: float, name: str):
  """``fast`` where |x| < bound, else (also for NaN) the accurate (CPU) variant of ``name`` at x.

  A branch (weighted as rare) to a cold block that calls the accurate variant, defined once per
  module as an out-of-line function (its float64 code stays out of the hot path); the builder
  continues in the join block.  The branch splits the caller's basic block: kernels that want
  16-byte loads and stores (LLVM merges accesses only within one block) issue their loads
  before evaluating and their stores after (``codegen.Elementwise``).  Under
  ``collect_slow_paths`` only ``fast`` is emitted, the condition handed to the caller."""
  tag = _M.tag_of(x.type)
  acc, ab = _out_of_line(m.b.module, f"ojx_m_{name}_{tag}_accurate", x.type, 1)
  if ab is not None:
    ab.ret(_UNARY[name](_M(ab, x.type), acc.args[0]))
  b = m.b
  slow = b.fcmp_unordered(">=", m.abs(x), m.c(bound))
  collect = getattr(b, _GUARDS, None)
  if collect is not None and collect[1] is b.block:
    collect[0].append(_any_lane(m, slow))
    return fast
  entry = b.block
  cold = b.append_basic_block(f"{name}.slow")
  done = b.append_basic_block(f"{name}.done")
  b.cbranch(_any_lane(m, slow), cold, done).set_weights([1, 1 << 20])
  b.position_at_end(cold)
  v = b.call(acc, [x])
  if m.lanes:
    v = b.select(slow, v, fast)
  b.branch(done)
  b.position_at_end(done)
  res = b.phi(x.type)
  res.add_incoming(fast, entry)
  res.add_incoming(v, cold)
  return res


def _gexp_parts(m: _M, x, pair=False, scale=1.0):
  """exp(scale x) = p * 2^n for |scale x| <= 104: (p, t) with p in [2^-1/2, 2^1/2] and n << 23
  equal to bits(t) << 23 (t = n + 1.5*2^23); with ``pair`` (p, p_lo, t), p_lo the rounding error
  of p.  ``scale`` (a power of two) is folded into the constants: the reduced argument is
  r/scale and the polynomial's coefficients carry the powers of scale, every rounding the same
  as for exp(x') at x' = scale x, without the multiply."""
  shift = m.c(_SHIFT_32)
  t = m.fma(x, m.c(_LOG2E * scale), shift)
  nf = m.sub(t, shift)
  r = m.fma(m.neg(nf), m.c(_LN2_HI_32 / scale), x)
  r = m.fma(m.neg(nf), m.c(_LN2_LO_32 / scale), r)
  q = m.poly(r, [c * scale ** (k + 1) for k, c in enumerate(GEXP_F32)])
  p = m.fma(r, q, m.c(1.0))
  if pair:
    return p, m.fma(r, q, m.sub(m.c(1.0), p)), t
  return p, t


def _gexp_scaled(m: _M, x, k: int, scale=1.0):
  """exp(scale x) * 2^-k as p * 2^(n - k) by an exponent addition: exact while that is normal."""
  p, t = _gexp_parts(m, x, scale=scale)
  return m.from_bits(m.iadd(m.bits(p), m.iadd(m.ishl(m.bits(t), m.mant), m.ci(-k << m.mant))))


def _gpu_exp(m: _M, x):
  xc = m.clamp(x, -104.0, 89.0)
  # p * 2^(n -+ 32) is normal for n in [-150, 128]; the multiply by 2^(+-32) rounds once
  neg = m.lt(xc, m.c(0.0))
  p, t = _gexp_parts(m, xc)
  nk = m.iadd(m.ishl(m.bits(t), m.mant), m.select(neg, m.ci(32 << 23), m.ci(-32 << 23)))
  res = m.mul(m.from_bits(m.iadd(m.bits(p), nk)), m.select(neg, m.c(2.0 ** -32), m.c(2.0 ** 32)))
  return m.select(m.isnan(x), x, res)


def _gpu_trig_reduce(m: _M, ax):
  """|x| -> (r_hi, r_lo, t): |x| = q pi/2 + r_hi + r_lo, q mod 4 in the low bits of bits(t); q*F2
  is kept as an exact pair and summed error-free (valid for |x| < _GPU_TRIG_MAX)."""
  shift = m.c(_SHIFT_32)
  t = m.fma(ax, m.c(_TWO_OVER_PI), shift)
  q = m.sub(t, shift)
  r1 = m.fma(q, m.c(-_PIO2_F1), ax)                 # exact
  p = m.mul(q, m.c(-_PIO2_F2))
  p_lo = m.fma(q, m.c(-_PIO2_F2), m.neg(p))         # exact: -q*F2 = p + p_lo
  # r1 + p exactly: fast two-sum is exact also where |r1| < |p| (r1 is a multiple of ulp(p))
  r_hi, e = m.fast_two_sum(r1, p)
  r_lo = m.fma(q, m.c(-_PIO2_F3), m.add(e, p_lo))
  return r_hi, r_lo, t


def _gpu_sin_cos(kind):
  def emit(m: _M, x):
    ax = m.abs(x)
    r, r_lo, t = _gpu_trig_reduce(m, ax)
    z = m.mul(r, r)
    # sin(r + r_lo) = r + r^3 S(z) + r_lo (1 - z/2)
    s = m.add(r, m.fma(m.mul(r, z), m.poly(z, SIN_F32), m.fma(m.mul(z, m.c(-0.5)), r_lo, r_lo)))
    # cos(r + r_lo) = w + (1 - w - z/2) + z^2 C(z) - r r_lo - z_lo/2, w = 1 - z/2 rounded
    hz = m.mul(z, m.c(0.5))
    w = m.sub(m.c(1.0), hz)
    w_lo = m.sub(m.sub(m.c(1.0), w), hz)              # exact
    z_lo = m.fma(r, r, m.neg(z))
    c_tail = m.fma(m.mul(z, z), m.poly(z, COS_F32),
                   m.fma(m.neg(r), r_lo, m.mul(z_lo, m.c(-0.5))))
    c = m.add(w, m.add(w_lo, c_tail))
    j = m.bits(t)
    odd = m.b.icmp_signed("!=", m.iand(j, 1), m.ci(0))
    if kind == "sin":
      v = m.select(odd, c, s)
      sign = m.iand(m.ixor(m.ishl(j, 30), m.bits(x)), 1 << 31)
    else:
      v = m.select(odd, s, c)
      sign = m.iand(m.ishl(m.iadd(j, m.ci(1)), 30), 1 << 31)
    fast = m.from_bits(m.ixor(m.bits(v), sign))
    return _with_slow_path(m, x, fast, _GPU_TRIG_MAX, kind)
  return emit


def _gpu_tanh(m: _M, x):
  ax = m.abs(x)
  z = m.mul(x, x)
  rs = m.fma(m.mul(ax, z), m.poly(z, TANH_F32), ax)
  # |x| >= 0.55: 1 - e w, e = exp(-2|x|), w = 1/h = 2/(1+e) without a division: a linear
  # guess in e (1% off) and two Newton steps w += w (1 - h w); beyond 9.1 the result rounds to 1
  e = _gexp_scaled(m, m.min_(ax, m.c(9.1)), 0, scale=-2.0)
  h = m.fma(e, m.c(0.5), m.c(0.5))
  w = m.fma(e, m.c(_TANH_W1), m.c(_TANH_W0))
  for _ in range(2):
    w = m.fma(w, m.fma(m.neg(h), w, m.c(1.0)), w)
  rb = m.fma(m.neg(e), w, m.c(1.0))
  # NaN takes the polynomial (not |x| >= 0.55), which keeps it NaN
  small = m.b.fcmp_unordered("<", ax, m.c(0.55))
  return m.copysign(m.select(small, rs, rb), x)


def _gpu_logistic(m: _M, x):
  # exp(-|x|) = (e' + e_lo') 2^-32 (e' = p 2^(n+32) exact, normal down to -104: the scaled pair
  # keeps e_lo' accurate where e 2^-24 would be denormal), e = e' 2^-32 (to 0 below -104), then
  # 2^32/(1+e) or e'/(1+e), the rounding errors of 1+e and of the quotient compensated, times 2^-32
  # (one rounding for denormal results)
  p, p_lo, t = _gexp_parts(m, m.max_(m.neg(m.abs(x)), m.c(-104.0)), pair=True)
  k = m.iadd(m.ishl(m.bits(t), m.mant), m.ci(32 << 23))          # (n + 32) << 23
  es = m.from_bits(m.iadd(m.bits(p), k))
  e = m.mul(es, m.c(2.0 ** -32))
  es_lo = m.mul(p_lo, m.from_bits(m.iadd(k, m.ci(127 << 23))))
  d, d_lo = m.fast_two_sum(m.c(1.0), e)
  d_lo = m.fma(es_lo, m.c(2.0 ** -32), d_lo)
  neg = m.lt(x, m.c(0.0))
  num = m.select(neg, es, m.c(2.0 ** 32))
  # y = 1/(1+e) without a division: a linear guess in e (6% off) and two Newton steps
  # y += y (1 - d y) (2^-16); q = num y, then q + (num - q d + num_lo - q d_lo) y
  y = m.fma(e, m.c(_LOGISTIC_Y1), m.c(_LOGISTIC_Y0))
  for _ in range(2):
    y = m.fma(y, m.fma(m.neg(d), y, m.c(1.0)), y)
  q = m.mul(num, y)
  corr = m.fma(m.neg(q), d_lo, m.add(m.fma(m.neg(q), d, num), m.select(neg, es_lo, m.c(0.0))))
  res = m.mul(m.fma(corr, y, q), m.c(2.0 ** -32))
  return m.select(m.isnan(x), x, res)


def _gpu_erf(m: _M, x):
  ax = m.abs(x)
  rs = m.fma(x, m.poly(m.mul(x, x), ERF_F32), x)
  # |x| >= 0.84375: 1 - exp(-a^2 + GERFC(a)); beyond 3.925 the result rounds to 1
  a = m.min_(ax, m.c(3.925))
  e = _gexp_scaled(m, m.fma(a, m.neg(a), m.poly(a, GERFC_F32)), 0)
  rb = m.copysign(m.sub(m.c(1.0), e), x)
  # NaN takes the polynomial (not |x| >= 0.84375), which keeps it NaN
  return m.select(m.b.fcmp_unordered("<", ax, m.c(0.84375)), rs, rb)


def _gpu_expm1(m: _M, x):
  # exp(x) - 1 = 2 ((s - 1/2) + s r + s r^2 Q(r)), s = 2^(n-1) (normal for x in [-25, 89]),
  # r = r_hi + r_lo, Q = GEXP without its constant term; s - 1/2 + s r_hi summed error-free
  # (|s - 1/2| >= |s r_hi| or n = 0).  Below 2^-24 in magnitude expm1 rounds to x (also -0 and
  # denormals).
  xc = m.clamp(x, -25.0, 89.0)
  shift = m.c(_SHIFT_32)
  t = m.fma(xc, m.c(_LOG2E), shift)
  nf = m.sub(t, shift)
  hi, lo = _ln2_parts(m)
  r_hi = m.fma(m.neg(nf), hi, xc)                    # exact
  r_lo = m.mul(m.neg(nf), lo)
  r = m.add(r_hi, r_lo)
  sc = m.from_bits(m.iadd(m.ishl(m.bits(t), m.mant), m.ci(126 << 23)))
  u, e = m.fast_two_sum(m.sub(sc, m.c(0.5)), m.mul(sc, r_hi))
  tail = m.fma(m.mul(m.mul(sc, r), r), m.poly(r, GEXP_F32[1:]), m.fma(sc, r_lo, e))
  res = m.mul(m.add(u, tail), m.c(2.0))
  res = m.select(m.lt(m.abs(x), m.c(2.0 ** -24)), x, res)
  return m.select(m.isnan(x), x, res)


def _gpu_log(m: _M, x):
  # x = 2^k (1+f) as on the CPU; log(1+f) by a polynomial in f (no division), k*ln2_hi + f
  # summed error-free (|k ln2_hi| >= |f| or k = 0)
  kf, f = _log_split(m, x)
  s, e = m.fast_two_sum(m.mul(kf, m.c(_LN2_HI_32)), f)
  tail = m.fma(m.mul(f, f), m.poly(f, GLOG_F32), m.mul(kf, m.c(_LN2_LO_32)))
  return _log_specials(m, x, m.add(s, m.add(e, tail)))


def _gpu_log1p(m: _M, x):
  # u = 1 + x = 2^k (1+f) (f exact), 1 + x = u + d (d exact); for k = 0 log1p(x) is the
  # polynomial at x itself, else k ln2 + log(1+f) + d 2^-k / (1+f), 1/(1+f) ~ 1.06 - f (3%: the
  # term is below 2 ulp of the result there)
  u = m.add(m.c(1.0), x)
  ix = m.isub(m.bits(u), m.ci(0x3F3504F3))
  kk = m.iand(ix, -(1 << 23))                                       # k << 23
  small = m.b.icmp_signed("==", kk, m.ci(0))
  f = m.sub(m.from_bits(m.iadd(m.iand(ix, (1 << 23) - 1), m.ci(0x3F3504F3))), m.c(1.0))
  d = m.sub(x, m.sub(u, m.c(1.0)))
  kc = m.select(m.b.icmp_signed("<", kk, m.ci(127 << 23)), kk, m.ci(127 << 23))
  sc = m.from_bits(m.isub(m.ci(0x3F800000), kc))                    # 2^-k
  corr = m.mul(m.mul(d, sc), m.sub(m.c(1.06), f))
  v = m.select(small, x, f)
  corr = m.select(small, m.c(0.0), corr)
  kf = m.i2f(m.iashr(ix, m.mant))
  s, e = m.fast_two_sum(m.mul(kf, m.c(_LN2_HI_32)), v)
  tail = m.fma(m.mul(v, v), m.poly(v, GLOG_F32), m.fma(kf, m.c(_LN2_LO_32), corr))
  res = m.add(s, m.add(e, tail))
  res = m.select(m.eq(x, m.c(_pymath.inf)), x, res)
  res = m.select(m.lt(x, m.c(-1.0)), m.c(_pymath.nan), res)
  res = m.select(m.eq(x, m.c(-1.0)), m.c(-_pymath.inf), res)
  res = m.select(m.eq(x, m.c(0.0)), x, res)
  return m.select(m.isnan(x), x, res)


_GPU_F32 = {
    "exp": _gpu_exp, "expm1": _gpu_expm1, "log": _gpu_log, "log1p": _gpu_log1p,
    "logistic": _gpu_logistic, "tanh": _gpu_tanh, "erf": _gpu_erf,
    "sin": _gpu_sin_cos("sin"), "cos": _gpu_sin_cos("cos"),
}


# ---------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------

_UNARY = {
    "exp": _exp, "exp2": _exp2, "expm1": _expm1,
    "log": _log_any("log"), "log2": _log_any("log2"), "log10": _log_any("log10"),
    "log1p": _log1p,
    "tanh": _tanh, "logistic": _logistic, "cosh": _cosh, "sinh": _sinh,
    "sin": _sin_cos("sin"), "cos": _sin_cos("cos"), "tan": _tan,
    "atan": _atan, "asin": _asin, "acos": _acos,
    "asinh": _asinh, "acosh": _acosh, "atanh": _atanh, "rsqrt": _rsqrt,
    "cbrt": _cbrt, "erf": _erf, "erfc": _erfc, "erf_inv": _erf_inv,
    "lgamma": _lgamma, "digamma": _digamma,
}
_BINARY = {"atan2": _atan2, "pow": _pow}

SUPPORTED_UNARY = frozenset(_UNARY)
SUPPORTED_BINARY = frozenset(_BINARY)
GPU_VARIANTS = frozenset(_GPU_F32)                  # float32 functions with a GPU variant


def emit_unary(builder: ir.IRBuilder, name: str, x: ir.Value, variant: str = None) -> ir.Value:
  """Emit ``name(x)`` inline at the builder's position; ``x`` is a float or double value
  (or a vector of them).  ``variant``: "cpu" or "gpu" (see the module docstring); by default
  "gpu" when the builder's module targets NVPTX.  The GPU sin/cos also define an out-of-line
  helper function in the builder's module and branch to it, leaving the builder in a new block
  (see ``collect_slow_paths``).  Raises ValueError for an unknown name or variant, TypeError for
  other types."""
  fn = _UNARY.get(name)
  if fn is None:
    raise ValueError(f"inline math has no unary function {name!r}; supported: "
                     f"{', '.join(sorted(SUPPORTED_UNARY))}")
  m = _M(builder, x.type)
  if _variant(builder, variant) == "gpu" and not m.is64:
    fn = _GPU_F32.get(name, fn)
  return fn(m, x)


def targets_gpu(builder: ir.IRBuilder) -> bool:
  """Whether the builder's module is for NVPTX (the GPU variants' switch)."""
  return str(builder.module.triple or "").startswith("nvptx")


def _variant(builder: ir.IRBuilder, variant):
  if variant is None:
    return "gpu" if targets_gpu(builder) else "cpu"
  if variant not in ("cpu", "gpu"):
    raise ValueError(f"inline math variant must be 'cpu' or 'gpu', not {variant!r}")
  return variant


def emit_binary(builder: ir.IRBuilder, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
  """Emit ``name(x, y)`` inline; x and y have the same float type.  Argument order is NumPy's:
  ``pow(x, y) = x**y`` and ``atan2(x, y) = arctan2(x, y)`` (the angle of the point (y, x))."""
  fn = _BINARY.get(name)
  if fn is None:
    raise ValueError(f"inline math has no binary function {name!r}; supported: "
                     f"{', '.join(sorted(SUPPORTED_BINARY))}")
  if x.type != y.type:
    raise TypeError(f"{name}: operand types differ ({x.type} vs {y.type})")
  return fn(_M(builder, x.type), x, y)
