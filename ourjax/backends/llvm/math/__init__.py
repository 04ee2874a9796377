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
                     the whole range.  float32 sin/cos (CPU): that reduction, then short double
                     polynomials rounded once; the out-of-line scalar version (``MathLib``)
                     skips the reduction below pi/4 and takes two FMAs below 2^24
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

float32 versions of sin, cos (CPU), tan, asinh, acosh, erfc, erf_inv, pow, lgamma and digamma
(and the GPU's sin/cos reduction) run in double, with polynomials sized for float32.  Not provided: ``rem`` (C fmod is
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

Underflow: denormals are kept (NumPy's results, not flushed to zero).  On x86 an instruction
that produces a denormal or underflows costs a microcode assist (~100+ cycles, for the whole
vector), so where a result is known to round to 0 or +-1 (exp, exp2, pow below their bounds,
logistic's tails, erf beyond 4 / 6, erfc beyond 10.1 / 27.3) the code selects it and
evaluates a harmless argument instead (``explog._underflow``); denormal results still pay.

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

Layout: ``base`` (the expression helper ``_M``, shared constants), ``explog`` (exp, log, pow),
``hyperbolic`` (tanh, logistic, sinh, cosh, asinh, acosh, atanh), ``trig`` (sin, cos, tan and
the inverse functions), ``special`` (rsqrt, cbrt, erf, erfc, erf_inv, lgamma, digamma), ``gpu``
(the float32 GPU variants and ``collect_slow_paths``); this module holds the registry.
"""
from __future__ import annotations

import os as _os

import llvmlite.ir as ir

from ourjax.backends.llvm.math.base import _M, targets_gpu
from ourjax.backends.llvm.math.explog import (_exp, _exp2, _expm1, _log1p, _log_any, _pow)
from ourjax.backends.llvm.math.hyperbolic import (_acosh, _asinh, _atanh, _cosh, _logistic, _sinh,
                                                  _tanh)
from ourjax.backends.llvm.math.trig import (_acos, _asin, _atan, _atan2, _sin_cos, _tan)
from ourjax.backends.llvm.math.special import (_cbrt, _digamma, _erf, _erf_inv, _erfc, _lgamma,
                                               _rsqrt)
from ourjax.backends.llvm.math.gpu import _GPU_F32, collect_slow_paths
from ourjax.backends.llvm.math import trig as _trig

__all__ = ["emit_unary", "emit_binary", "SUPPORTED_UNARY", "SUPPORTED_BINARY", "GPU_VARIANTS",
           "collect_slow_paths", "targets_gpu", "SOURCES"]

TWO_OVER_PI_BITS, _PH_TABLE = _trig.TWO_OVER_PI_BITS, _trig._PH_TABLE   # (for the tests)

# The package's source files (part of the disk cache keys of code that inlines these functions).
SOURCES = tuple(sorted(_os.path.join(_os.path.dirname(__file__), f)
                       for f in _os.listdir(_os.path.dirname(__file__)) if f.endswith(".py")))


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
