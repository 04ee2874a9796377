"""Elementwise primitives, each followed by its rules: NumPy implementation, shape/dtype rule
(through ``standard_primitive``), JVP, transpose where linear, and batching.

lax's elementwise ops do not promote: operands must share a dtype, and shapes must be equal
except that rank-0 operands broadcast.  (``ourjax.numpy`` promotes and broadcasts first.)
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from ourjax import dtypes
from ourjax._keys import KeyDType, PRNGKeyArray
from ourjax.core import ShapedArray, Tracer, get_aval, impl_rules
from ourjax.interpreters import ad, batching
from ourjax.interpreters.ad import Zero, defjvp, defjvp2, defjvp_zero
from ourjax.backends import reference_ops as rops
from ourjax.lax._utils import (_any, as_array, _bool, _complex, _float, _fp, _int, _num, all_weak,
                               broadcasting_shape, check_dtypes, standard_primitive)

# ------------------------------------------------------------------------------------------------
# Declaring elementwise primitives


def _low_precision(fn):
  """Run a NumPy float function in float32 for float16/bfloat16/float8 inputs (as XLA does)."""
  def low(*xs, **params):
    out = fn(*[np.asarray(x, np.float32) for x in xs], **params)
    return np.asarray(out).astype(xs[0].dtype)

  def impl(*xs, **params):
    dt = xs[0].dtype
    # inf/NaN results are values here, not errors (rops.quietly: no floating-point warnings)
    if dt.itemsize < 4 and dtypes.is_float(dt):
      return rops.quietly(low, *xs, **params)
    return rops.quietly(fn, *xs, **params)
  impl.numpy_fn = fn     # (what an eager replay calls for operands of 32 bits or more, quietly)
  return impl


def unop(name: str, kinds, numpy_fn, result_dtype=None):
  """A unary elementwise primitive; ``result_dtype(dtype)`` for ops that change the dtype."""
  def dtype_rule(x, **_):
    check_dtypes(name, [x], kinds)
    return result_dtype(x.dtype) if result_dtype else x.dtype

  # as JAX's: weakly typed operands give a weakly typed result, also when the dtype changes
  # (comparisons, abs/real/imag of complex values, is_finite)
  weak = lambda x, **_: x.weak_type  # noqa: E731
  p = standard_primitive(name, lambda x, **_: x.shape, dtype_rule, weak)
  p.def_impl(_low_precision(numpy_fn))
  batching.defvectorized(p)
  return p


def binop(name: str, kinds, numpy_fn, result_dtype=None):
  def dtype_rule(*avals, **_):
    dt = check_dtypes(name, avals, kinds)
    return result_dtype(dt) if result_dtype else dt

  weak = all_weak
  p = standard_primitive(name, lambda *a, **_: broadcasting_shape(name, *a), dtype_rule, weak)
  p.def_impl(_low_precision(numpy_fn))
  batching.defbroadcasting(p)
  return p


def _bool_result(_):
  return np.dtype(np.bool_)


# ------------------------------------------------------------------------------------------------
# User-facing wrappers take arrays or Python scalars; no promotion happens here.


def _dtype_of(v):
  return get_aval(v).dtype


def _size_one_broadcast(x, y):
  """(x, y) broadcast to their common shape where they have the same rank and differ only in
  size-1 dimensions ((2, 3) with (2, 1)), as JAX's lax binary ops allow; other shapes are
  returned as they are (the shape rule accepts rank-0 operands and reports the rest)."""
  sx, sy = get_aval(x).shape, get_aval(y).shape
  if sx == sy or not sx or not sy or len(sx) != len(sy):
    return x, y
  if any(a != b and a != 1 and b != 1 for a, b in zip(sx, sy)):
    return x, y
  from ourjax.lax.structural import broadcast_in_dim
  shape = tuple(b if a == 1 else a for a, b in zip(sx, sy))
  dims = tuple(range(len(shape)))
  return tuple(v if s == shape else broadcast_in_dim(v, shape, dims)
               for v, s in ((x, sx), (y, sy)))


def neg(x): return neg_p.bind(x)
def sign(x): return sign_p.bind(x)
def floor(x): return floor_p.bind(x)
def ceil(x): return ceil_p.bind(x)
def is_finite(x): return is_finite_p.bind(x)
def exp(x, accuracy=None): return exp_p.bind(x)
def exp2(x, accuracy=None): return exp2_p.bind(x)
def log(x, accuracy=None): return log_p.bind(x)
def log1p(x, accuracy=None): return log1p_p.bind(x)
def expm1(x, accuracy=None): return expm1_p.bind(x)
def tanh(x, accuracy=None): return tanh_p.bind(x)
def logistic(x, accuracy=None): return logistic_p.bind(x)
def sin(x, accuracy=None): return sin_p.bind(x)
def cos(x, accuracy=None): return cos_p.bind(x)
def tan(x, accuracy=None): return tan_p.bind(x)
def asin(x): return asin_p.bind(x)
def acos(x): return acos_p.bind(x)
def atan(x): return atan_p.bind(x)
def sinh(x): return sinh_p.bind(x)
def cosh(x): return cosh_p.bind(x)
def asinh(x): return asinh_p.bind(x)
def acosh(x): return acosh_p.bind(x)
def atanh(x): return atanh_p.bind(x)
def sqrt(x, accuracy=None): return sqrt_p.bind(x)
def rsqrt(x, accuracy=None): return rsqrt_p.bind(x)
def cbrt(x, accuracy=None): return cbrt_p.bind(x)
def erf(x): return erf_p.bind(x)
def erfc(x): return erfc_p.bind(x)
def erf_inv(x): return erf_inv_p.bind(x)
def lgamma(x): return lgamma_p.bind(x)
def digamma(x): return digamma_p.bind(x)
def abs(x): return abs_p.bind(x)  # noqa: A001 (lax.abs shadows the builtin, as in JAX)
def square(x): return square_p.bind(x)
def not_(x): return not_p.bind(x)
def population_count(x): return population_count_p.bind(x)
def clz(x): return clz_p.bind(x)
def real(x): return real_p.bind(x)
def imag(x): return imag_p.bind(x)
def conj(x):
  """Complex conjugate.  As in JAX, a float32/float64 ``x`` gives its complex type (x + 0j);
  other real dtypes are refused."""
  aval = get_aval(x)
  if dtypes.is_complex(aval.dtype):
    return conj_p.bind(x)
  if aval.dtype not in (np.float32, np.float64):
    raise TypeError(f"conj does not accept dtype {np.dtype(aval.dtype).name}. Accepted "
                    "dtypes are subtypes of float32, complexfloating, float64.")
  return _convert_element_type(x, dtypes.to_complex_dtype(aval.dtype), aval.weak_type)
def add(x, y): return add_p.bind(*_size_one_broadcast(x, y))
def sub(x, y): return sub_p.bind(*_size_one_broadcast(x, y))
def mul(x, y, *, out_dtype=None):
  """``x * y``; with ``out_dtype`` the operands are converted to it first, so the product is
  formed in that (usually wider) type: int8 * int8 -> int32 without wrapping."""
  if out_dtype is not None:
    dt = dtypes.canonicalize_dtype(out_dtype)
    x, y = (v if get_aval(v).dtype == dt else convert_element_type(v, dt) for v in (x, y))
  return mul_p.bind(*_size_one_broadcast(x, y))
def div(x, y): return div_p.bind(*_size_one_broadcast(x, y))
def rem(x, y): return rem_p.bind(*_size_one_broadcast(x, y))
def pow(x, y):  # noqa: A001
  """x ** y; y may also be an integer array (any sign), as in JAX: it is converted to x's
  dtype, and where it is 0 the result is 1 with derivative 0 in x (JAX's integer-exponent
  rule: no 0 * inf at x == 0, where a float exponent 0 gives nan)."""
  x, y = _size_one_broadcast(x, y)
  xd, yd = np.result_type(_dtype_of(x)), np.result_type(_dtype_of(y))
  if yd.kind in "iu" and xd.kind in "fcV" and xd != yd:
    if not isinstance(y, Tracer) and not np.any(np.asarray(y) == 0):
      return pow_p.bind(x, convert_element_type(y, xd))
    yf = convert_element_type(y, xd)
    zero = eq(y, _const(y, 0))
    safe = pow_p.bind(x, select_n(zero, yf, _ones(yf)))
    return select_n(zero, safe, _ones(safe))
  return pow_p.bind(x, y)
def max(x, y): return max_p.bind(*_size_one_broadcast(x, y))  # noqa: A001
def min(x, y): return min_p.bind(*_size_one_broadcast(x, y))  # noqa: A001
def atan2(x, y): return atan2_p.bind(*_size_one_broadcast(x, y))
def nextafter(x1, x2): return nextafter_p.bind(*_size_one_broadcast(x1, x2))
def and_(x, y): return and_p.bind(*_size_one_broadcast(x, y))
def or_(x, y): return or_p.bind(*_size_one_broadcast(x, y))
def xor(x, y): return xor_p.bind(*_size_one_broadcast(x, y))
def shift_left(x, y): return shift_left_p.bind(*_size_one_broadcast(x, y))
def shift_right_arithmetic(x, y): return shift_right_arithmetic_p.bind(*_size_one_broadcast(x, y))
def shift_right_logical(x, y): return shift_right_logical_p.bind(*_size_one_broadcast(x, y))
def eq(x, y): return eq_p.bind(*_size_one_broadcast(x, y))
def ne(x, y): return ne_p.bind(*_size_one_broadcast(x, y))
def lt(x, y): return lt_p.bind(*_size_one_broadcast(x, y))
def le(x, y): return le_p.bind(*_size_one_broadcast(x, y))
def gt(x, y): return gt_p.bind(*_size_one_broadcast(x, y))
def ge(x, y): return ge_p.bind(*_size_one_broadcast(x, y))


def integer_pow(x, y: int):
  return integer_pow_p.bind(x, y=int(y))


class RoundingMethod:
  AWAY_FROM_ZERO = 0
  TO_NEAREST_EVEN = 1


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):  # noqa: A001
  return round_p.bind(x, rounding_method=int(rounding_method))


def convert_element_type(operand, new_dtype):
  x = operand
  if isinstance(new_dtype, KeyDType) or type(x) is PRNGKeyArray:
    _key_convert_error(x, new_dtype)
    return x
  if type(x) is int and dtypes.is_inexact(dtypes.canonicalize_dtype(new_dtype)) and not (
      -2 ** 31 <= x < 2 ** 31):
    # a Python int too large for any integer dtype still converts to a float (2 ** 100), as
    # in JAX (jnp's promotion, which goes through the default integer type, does not)
    x = float(x) if dtypes.is_float(dtypes.canonicalize_dtype(new_dtype)) else complex(x)
  elif type(x) is int and dtypes.is_integer(dtypes.canonicalize_dtype(new_dtype)):
    dt = dtypes.canonicalize_dtype(new_dtype)
    info = dtypes.iinfo(dt)
    if not info.min <= x <= info.max:
      # as JAX (through a 64-bit integer): wrapped modulo 2**bits, 2**32 -> int32 0
      if not -2 ** 63 <= x < 2 ** 64:
        raise OverflowError(f"Python int {x} too large to convert to {dt.name}")
      bits = info.bits
      x = np.array(x & ((1 << bits) - 1), f"uint{bits}").view(dt) if bits >= 8 else \
          np.array(x & ((1 << bits) - 1), np.uint8).astype(dt)
  return _convert_element_type(x, new_dtype, weak_type=False)


def _key_convert_error(x, new_dtype):
  """Key arrays convert to nothing and nothing converts to a key dtype (use key_data and
  wrap_key_data), as in JAX."""
  src = x.dtype if type(x) is PRNGKeyArray else dtypes.dtype(x, canonicalize=True)
  dst = new_dtype if isinstance(new_dtype, KeyDType) else dtypes.canonicalize_dtype(new_dtype)
  if src == dst:
    return
  raise ValueError(f"Cannot convert_element_type from {src} to {dst}")


def _convert_element_type(x, new_dtype, weak_type: bool = False):
  """Convert, keeping the result weakly typed if asked (used by jnp's promotion)."""
  new_dtype = dtypes.canonicalize_dtype(new_dtype)
  aval = get_aval(x)
  if aval.dtype == new_dtype and aval.weak_type == weak_type:
    return as_array(x)
  if not isinstance(x, Tracer) and getattr(x, "_device_buf", None) is None:
    # a constant converts now, so ``x + 1`` traces to ``add x 1.0:f32[]`` (no convert eqn);
    # an array on a GPU converts there (``_eager_device``)
    from ourjax.array import Array, to_numpy
    xv = to_numpy(x)
    v = _convert_impl(xv, new_dtype, weak_type)
    if isinstance(x, np.ndarray) and np.may_share_memory(v, x):   # (never the caller's array)
      v = np.array(v)
    return Array._from_result(v, ShapedArray(aval.shape, new_dtype, weak_type))
  return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=bool(weak_type))


def bitcast_convert_type(operand, new_dtype):
  new_dtype = dtypes.canonicalize_dtype(new_dtype)
  old = np.dtype(get_aval(operand).dtype)
  if old != new_dtype and (old == np.bool_ or new_dtype == np.bool_ or old.kind == "c" or
                           new_dtype.kind == "c"):
    raise TypeError("lax.bitcast_convert_type does not support bool or complex values unless "
                    f"the operand and destination types match. Got operand dtype={old}, "
                    f"new_dtype={new_dtype!r}. Consider using the arr.view() method instead.")
  return bitcast_convert_type_p.bind(operand, new_dtype=new_dtype)


def _bitcast_convert_type(operand, new_dtype):
  """``bitcast_convert_type`` without JAX's bool/complex check (``Array.view``, ``byteswap``)."""
  return bitcast_convert_type_p.bind(operand, new_dtype=dtypes.canonicalize_dtype(new_dtype))


def select_n(which, *cases):
  if not cases:
    raise ValueError("select_n must have at least one case")
  return select_n_p.bind(which, *cases)


def select(pred, on_true, on_false):
  """``on_true`` where ``pred`` (bool, scalar or of the cases' shape) holds, else ``on_false``
  (JAX's ``lax.select``: ``select_n(pred, on_false, on_true)``)."""
  return select_n(pred, on_false, on_true)


def clamp(min, x, max):  # noqa: A002
  return clamp_p.bind(min, x, max)


def _const(x, val):
  """A scalar of x's dtype, weakly typed when x is a weakly typed scalar (JAX's rule: then
  ``x * _const(x, 2)`` stays weak; for arrays the constant is strongly typed)."""
  aval = get_aval(x)
  v = np.array(val, dtype=aval.dtype)
  if aval.weak_type and not aval.shape:
    from ourjax.array import Array
    return Array._from_result(v, ShapedArray((), aval.dtype, True))
  return v


def _zeros(x):
  from ourjax.lax.structural import full_like
  return full_like(x, 0)


def _ones(x):
  from ourjax.lax.structural import full_like
  return full_like(x, 1)


# ------------------------------------------------------------------------------------------------
# Reference implementations: the NumPy semantics of XLA's ops live once, in
# ``backends/reference_ops.py``, shared by these eager impls and the HLO reference executor.


def _int_or_float(int_fn, float_fn):
  def impl(x, y):
    return int_fn(x, y) if dtypes.is_integer(x.dtype) else float_fn(x, y)
  return impl


def _round_impl(x, rounding_method):
  if rounding_method == RoundingMethod.TO_NEAREST_EVEN:
    return rops.round_half_to_even(x)
  return rops.round_half_away_from_zero(x)


def _negative_integer_pow(x, y):
  shape = ",".join(str(d) for d in np.shape(x))
  return TypeError(f"Integers cannot be raised to negative powers, got "
                   f"integer_pow({np.dtype(x.dtype).name}[{shape}], {y})")


def _integer_pow_dtype(x, y):
  out = check_dtypes("integer_pow", [x], _num)
  if dtypes.is_integer(x.dtype) and y < 0:      # (JAX's check, at trace time too)
    raise _negative_integer_pow(x, y)
  return out


def _integer_pow(x, y):
  """x**y for a static int y by repeated squaring in x's dtype (as the lowering does), then a
  reciprocal for negative y."""
  if (dtypes.is_integer(x.dtype) or x.dtype == np.bool_) and y < 0:
    raise _negative_integer_pow(x, y)
  if x.dtype == np.bool_:
    acc = rops.integer_pow(x, np.array(builtins.abs(y)))
  else:      # the exponent is static: its bits unrolled here, one multiply per step
    acc, base, n = None, x, builtins.abs(y)
    while n:
      if n & 1:
        acc = base if acc is None else acc * base
      n >>= 1
      if n:
        base = base * base
    acc = np.ones_like(x) if acc is None else np.asarray(acc, x.dtype)
  return (np.asarray(1, x.dtype) / acc).astype(x.dtype) if y < 0 else acc


def _nextafter(x, y):
  """The next representable value of x's own format towards y (for bf16/f8 too, where NumPy
  has no nextafter): step the bit pattern by one ulp away from or towards zero."""
  if x.dtype in (np.float16, np.float32, np.float64):
    return np.nextafter(x, y)
  x, y = np.broadcast_arrays(x, y)
  uint = np.dtype(f"u{x.dtype.itemsize}")
  xf, yf = x.astype(np.float32), y.astype(np.float32)
  bits = x.view(uint).astype(np.int64)
  away = (xf < yf) == (xf > 0)                      # the step moves away from zero
  stepped = np.where(away, bits + 1, bits - 1)
  tiny = np.where(yf < 0, 1 | (1 << (8 * x.dtype.itemsize - 1)), 1)   # +-smallest subnormal
  out = np.where(xf == 0, tiny, stepped).astype(uint).view(x.dtype)
  out = np.where(xf == yf, y, out)
  return np.where(np.isnan(xf) | np.isnan(yf), np.array(np.nan, x.dtype), out).astype(x.dtype)


def _convert_impl(x, new_dtype, weak_type=False):
  return rops.convert_element_type(x, new_dtype)


# ------------------------------------------------------------------------------------------------
# The primitives


neg_p = unop("neg", _num, np.negative)
sign_p = unop("sign", _num, rops.sign)   # (+-0 and NaN kept, as XLA; np.sign gives +0)
floor_p = unop("floor", _float, np.floor)
ceil_p = unop("ceil", _float, np.ceil)
round_p = unop("round", _float, _round_impl)
is_finite_p = unop("is_finite", _float, np.isfinite, result_dtype=_bool_result)
exp_p = unop("exp", _fp, np.exp)
exp2_p = unop("exp2", _fp, np.exp2)
log_p = unop("log", _fp, np.log)
log1p_p = unop("log1p", _fp, rops.log1p)
expm1_p = unop("expm1", _fp, np.expm1)
tanh_p = unop("tanh", _fp, np.tanh)
logistic_p = unop("logistic", _fp, rops.logistic)
sin_p = unop("sin", _fp, np.sin)
cos_p = unop("cos", _fp, np.cos)
tan_p = unop("tan", _fp, np.tan)
asin_p = unop("asin", _fp, np.arcsin)
acos_p = unop("acos", _fp, np.arccos)
atan_p = unop("atan", _fp, np.arctan)
sinh_p = unop("sinh", _fp, np.sinh)
cosh_p = unop("cosh", _fp, np.cosh)
asinh_p = unop("asinh", _fp, np.arcsinh)
acosh_p = unop("acosh", _fp, np.arccosh)
atanh_p = unop("atanh", _fp, np.arctanh)
sqrt_p = unop("sqrt", _fp, np.sqrt)
rsqrt_p = unop("rsqrt", _fp, lambda x: 1 / np.sqrt(x))
cbrt_p = unop("cbrt", _float, np.cbrt)
erf_p = unop("erf", _float, rops.erf)
erfc_p = unop("erfc", _float, rops.erfc)
erf_inv_p = unop("erf_inv", _float, rops.erf_inv)
lgamma_p = unop("lgamma", _float, rops.lgamma)
digamma_p = unop("digamma", _float, rops.digamma)
def _abs_dtype(d):
  if d.name in ("int1", "int2", "int4", "uint1", "uint2", "uint4"):
    raise TypeError(f"abs does not accept dtype {d.name}. Support for narrow-width integers "
                    "is platform-dependent and limited to a few specific operations, e.g. "
                    "basic arithmetic and type casting.")
  if d.kind == "u":
    raise TypeError(f"abs does not accept dtype {d.name}. Accepted dtypes are subtypes of "
                    "floating, complexfloating, signedinteger.")
  if dtypes.is_complex(d):
    return np.dtype(np.float32 if d == np.complex64 else np.float64)
  return d


abs_p = unop("abs", _num, np.abs, result_dtype=_abs_dtype)
square_p = unop("square", _num, np.square)
not_p = unop("not", _int + _bool, np.invert)
population_count_p = unop("population_count", _int, rops.population_count)
clz_p = unop("clz", _int, rops.count_leading_zeros)
real_p = unop("real", ("complex",), np.real, result_dtype=lambda d: np.dtype(
    np.float32 if d == np.complex64 else np.float64))
imag_p = unop("imag", ("complex",), np.imag, result_dtype=lambda d: np.dtype(
    np.float32 if d == np.complex64 else np.float64))
conj_p = unop("conj", _complex, np.conj)

add_p = binop("add", _num, np.add)
sub_p = binop("sub", _num, np.subtract)
mul_p = binop("mul", _num, np.multiply)
div_p = binop("div", _num, _int_or_float(rops.integer_div, np.divide))


def _div_impl(x, y):
  """Eager ``div``: a real float array divided by a scalar is multiplied by the scalar's
  reciprocal, as XLA's CPU computes a division by a broadcast (JAX's eager ops are compiled
  programs, so they get it too; ``lowering/xla_division.py`` does it for ``jit``): the
  reciprocal rounded to the type (float32's for bfloat16, which XLA computes in float32), then
  the product."""
  x, y = np.asarray(x), np.asarray(y)
  dt = x.dtype
  if not (y.ndim == 0 < x.ndim and dtypes.is_float(dt)) or dtypes.is_complex(dt):
    return _div_plain(x, y)
  def recip_product(x, y):
    wide = np.float64 if dt == np.float64 else np.float32
    r = np.divide(wide(1), np.asarray(y, wide))
    if dt in (np.float16, np.float32, np.float64):   # (bfloat16, float8: XLA's float32)
      r = np.asarray(r.astype(dt), wide)
    return np.multiply(np.asarray(x, wide), r).astype(dt)
  return rops.quietly(recip_product, x, y)


_div_plain = impl_rules[div_p]
impl_rules[div_p] = _div_impl
_div_impl.numpy_fn = _div_impl
rem_p = binop("rem", _int + _float, _int_or_float(rops.integer_rem, np.fmod))
pow_p = binop("pow", _fp, np.power)
# NaN-propagating, +0 above -0 in either order, complex lexicographic: XLA's (rops.maximum)
max_p = binop("max", _any, rops.maximum)
min_p = binop("min", _any, rops.minimum)
atan2_p = binop("atan2", _float, np.arctan2)
nextafter_p = binop("nextafter", _float, _nextafter)
impl_rules[nextafter_p] = _nextafter       # in the value's own format (not via float32)
and_p = binop("and", _int + _bool, np.bitwise_and)
or_p = binop("or", _int + _bool, np.bitwise_or)
xor_p = binop("xor", _int + _bool, np.bitwise_xor)
shift_left_p = binop("shift_left", _int, rops.shift_left)
shift_right_arithmetic_p = binop("shift_right_arithmetic", _int, rops.shift_right_arithmetic)
shift_right_logical_p = binop("shift_right_logical", _int, rops.shift_right_logical)
eq_p = binop("eq", _any, np.equal, result_dtype=_bool_result)
ne_p = binop("ne", _any, np.not_equal, result_dtype=_bool_result)
# ordered comparisons take no complex operands, as JAX's (jnp.less & co. compare complex numbers
# lexicographically with these on the real and imaginary parts)
lt_p = binop("lt", _bool + _int + _float, np.less, result_dtype=_bool_result)
le_p = binop("le", _bool + _int + _float, np.less_equal, result_dtype=_bool_result)
gt_p = binop("gt", _bool + _int + _float, np.greater, result_dtype=_bool_result)
ge_p = binop("ge", _bool + _int + _float, np.greater_equal, result_dtype=_bool_result)

# integer_pow: x ** y for a static Python int y
integer_pow_p = standard_primitive(
    "integer_pow", lambda x, y: x.shape,
    _integer_pow_dtype, lambda x, y: x.weak_type)
integer_pow_p.def_impl(_low_precision(_integer_pow))
batching.defvectorized(integer_pow_p)

# ------------------------------------------------------------------------------------------------
# JVP rules (in terms of the wrappers above, so they are differentiable again)

for _p in (sign_p, floor_p, ceil_p, round_p, is_finite_p, not_p, population_count_p, clz_p,
           and_p, or_p, xor_p, shift_left_p, shift_right_arithmetic_p, shift_right_logical_p,
           eq_p, ne_p, lt_p, le_p, gt_p, ge_p, nextafter_p):
  defjvp_zero(_p)

defjvp2(exp_p, lambda t, ans, x: mul(t, ans))
defjvp2(exp2_p, lambda t, ans, x: mul(log(_const(x, 2)), mul(t, ans)))   # (JAX's order)
defjvp(log_p, lambda t, x: div(t, x))
defjvp(log1p_p, lambda t, x: div(t, add(x, _const(x, 1))))
defjvp(expm1_p, lambda t, x: mul(t, exp(x)))   # exp(x), not expm1(x) + 1 (rounds)
# (t + t tanh)(1 - tanh), JAX's form: its rounding, and the sign of its zero where tanh is +-1
defjvp2(tanh_p, lambda t, ans, x: mul(add(t, mul(t, ans)), sub(_const(x, 1), ans)))
defjvp2(logistic_p, lambda t, ans, x: mul(t, mul(ans, sub(_const(x, 1), ans))))
defjvp(sin_p, lambda t, x: mul(t, cos(x)))
defjvp(cos_p, lambda t, x: neg(mul(t, sin(x))))
defjvp2(tan_p, lambda t, ans, x: mul(t, add(_const(x, 1), square(ans))))
defjvp(asin_p, lambda t, x: mul(t, rsqrt(sub(_const(x, 1), square(x)))))
defjvp(acos_p, lambda t, x: neg(mul(t, rsqrt(sub(_const(x, 1), square(x))))))
defjvp(atan_p, lambda t, x: div(t, add(_const(x, 1), square(x))))
defjvp(sinh_p, lambda t, x: mul(t, cosh(x)))
defjvp(cosh_p, lambda t, x: mul(t, sinh(x)))
defjvp(asinh_p, lambda t, x: mul(t, rsqrt(add(square(x), _const(x, 1)))))
defjvp(acosh_p, lambda t, x: mul(t, rsqrt(sub(square(x), _const(x, 1)))))   # (JAX's x^2 - 1)
defjvp(atanh_p, lambda t, x: mul(div(_const(x, 1), add(_const(x, 1), x)),   # (JAX's form)
                                 div(t, sub(_const(x, 1), x))))
defjvp2(sqrt_p, lambda t, ans, x: mul(t, div(_const(x, 0.5), ans)))   # inf at 0, as in JAX
defjvp2(rsqrt_p, lambda t, ans, x: mul(t, mul(_const(x, -0.5), div(ans, x))))
defjvp2(cbrt_p, lambda t, ans, x: mul(t, mul(_const(x, 1 / 3), integer_pow(ans, -2))))
defjvp(erf_p, lambda t, x: mul(t, mul(_const(x, 2 / math.sqrt(math.pi)), exp(neg(square(x))))))
defjvp(erfc_p, lambda t, x: mul(t, mul(_const(x, -2 / math.sqrt(math.pi)),
                                        exp(neg(square(x))))))
defjvp2(erf_inv_p, lambda t, ans, x: mul(t, mul(_const(x, math.sqrt(math.pi) / 2),
                                                 exp(square(ans)))))
defjvp(lgamma_p, lambda t, x: mul(t, digamma(x)))
defjvp(digamma_p, lambda t, x: mul(t, _polygamma1(x)))
# real abs: sign(x) t, so the derivative at 0 is 0 (the convention this project follows; older
# JAX releases used select(x >= 0, t, -t), i.e. 1 at 0); complex abs: Re(conj(x/|x|) t), with
# the direction of 0 taken as 0
# d|x| = t where x >= 0 and -t elsewhere: JAX's convention, so grad(abs)(0.) == 1.
defjvp(abs_p, lambda t, x: select_n(ge(x, _const(x, 0)), neg(t), t)
       if not dtypes.is_complex(get_aval(x).dtype)
       else real(mul(conj(div(x, _complex_abs_safe(x))), t)))
defjvp(square_p, lambda t, x: mul(t, mul(_const(x, 2), x)))
defjvp(integer_pow_p, lambda t, x, y: _zeros(t) if y == 0 else
       mul(t, mul(_const(x, y), integer_pow(x, y - 1) if y != 1 else _ones(x))))
defjvp(real_p, lambda t, x: real(t))
defjvp(imag_p, lambda t, x: imag(t))
defjvp(conj_p, lambda t, x: conj(t))


def _complex_abs_safe(x):
  """|x| as x's complex dtype, with 0 replaced by 1 (the direction of 0 is taken as 0)."""
  a = abs(x)
  a = select_n(eq(a, _zeros(a)), a, _ones(a))
  return convert_element_type(a, get_aval(x).dtype)


def _polygamma1(x):
  """Trigamma, for the derivative of digamma: computed from a series in primitives."""
  # psi'(x) = sum_{k<6} 1/(x+k)^2 + asymptotic tail at x+6 (x > 0); reflection otherwise
  acc = _zeros(x)
  z = x
  for _ in range(6):
    acc = add(acc, div(_const(x, 1), square(z)))
    z = add(z, _const(x, 1))
  iz = div(_const(x, 1), z)
  iz2 = square(iz)
  tail = mul(iz, add(_const(x, 1), mul(iz, add(_const(x, 0.5), mul(iz, add(
      _const(x, 1 / 6), mul(iz2, add(_const(x, -1 / 30), mul(iz2, _const(x, 1 / 42))))))))))
  return add(acc, tail)


def _replace_zero(x):
  """x with zeros replaced by ones (so log/div of it stay finite, and so do their gradients)."""
  return select_n(eq(x, _const(x, 0)), x, _ones(x))


def _pow_jvp_lhs(t, x, y):
  # d/dx x**y = y * x**(y-1), as JAX writes it: at x == 0, y == 0 that is 0 * inf = nan (JAX's
  # choice, kept); its own derivative in y at y == 0 is 1/x (JAX's issue 12033)
  return mul(t, mul(y, pow(x, sub(y, _const(y, 1)))))


def _pow_jvp_rhs(t, x, y):
  # d/dy x**y = log(x) * x**y, taken as 0 where x == 0 (log of 1 there, as JAX does)
  return mul(t, mul(log(_replace_zero(x)), pow(x, y)))


defjvp(pow_p, _pow_jvp_lhs, _pow_jvp_rhs)

defjvp(add_p, lambda t, x, y: _bcast_like(t, x, y), lambda t, x, y: _bcast_like(t, y, x))
defjvp(sub_p, lambda t, x, y: _bcast_like(t, x, y), lambda t, x, y: neg(_bcast_like(t, y, x)))
defjvp(mul_p, lambda t, x, y: mul(t, y), lambda t, x, y: mul(x, t))
# d(x/y)/dy = -x * y**-2 with integer_pow: its own derivatives lower the exponent by one each
# time, where x / square(y) squared y again at every order (y**64 by the sixth: overflow)
defjvp(div_p, lambda t, x, y: div(t, y),
       lambda t, x, y: mul(mul(neg(t), x), integer_pow(y, -2)))
defjvp(rem_p, lambda t, x, y: _bcast_like(t, x, y),
       lambda t, x, y: mul(neg(t), mul(sign(div(x, y)), floor(abs(div(x, y))))))
defjvp(atan2_p, lambda t, x, y: mul(t, div(y, add(square(x), square(y)))),
       lambda t, x, y: mul(t, div(neg(x), add(square(x), square(y)))))


def _balanced_eq(x, z, y):
  """1 where x is the winner, 0.5 on ties, 0 otherwise (how JAX splits max/min gradients);
  shaped like the result z."""
  from ourjax.lax.structural import full_like
  one, half, zero = full_like(z, 1), full_like(z, 0.5), full_like(z, 0)
  return select_n(eq(x, z), zero, select_n(eq(y, z), one, half))


# (mul broadcasts a rank-0 tangent or weight against the other, so every shape combination works)
defjvp2(max_p, lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
        lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)))
defjvp2(min_p, lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
        lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)))


def _bcast_to(v, like):
  from ourjax.lax.structural import broadcast_in_dim
  s = get_aval(like).shape
  if get_aval(v).shape == s:
    return v
  return broadcast_in_dim(v, s, ())


def _bcast_like(t, x, other):
  """The tangent of a rank-0 operand that broadcast against ``other``."""
  s = broadcasting_shape("add", get_aval(x), get_aval(other))
  return _bcast_to(t, _ShapeOnly(s)) if get_aval(t).shape != s else t


class _ShapeOnly:
  def __init__(self, shape):
    self.aval = ShapedArray(shape, np.float32)


# ------------------------------------------------------------------------------------------------
# Transposes of the linear ones


def _unbroadcast(ct, x):
  """Sum a cotangent back to the shape of an operand that was broadcast (rank-0)."""
  from ourjax.lax.reductions import reduce_sum
  if get_aval(x).shape == get_aval(ct).shape:
    return ct
  return reduce_sum(ct, tuple(range(get_aval(ct).ndim)))


def _add_transpose(ct, x, y):
  return [_unbroadcast(ct, x) if ad.is_undefined_primal(x) else None,
          _unbroadcast(ct, y) if ad.is_undefined_primal(y) else None]


def _sub_transpose(ct, x, y):
  return [_unbroadcast(ct, x) if ad.is_undefined_primal(x) else None,
          _unbroadcast(neg(ct), y) if ad.is_undefined_primal(y) else None]


def _mul_transpose(ct, x, y):
  if ad.is_undefined_primal(x):
    return [_unbroadcast(mul(ct, y), x), None]
  return [None, _unbroadcast(mul(x, ct), y)]


def _div_transpose(ct, x, y):
  assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(y)
  return [_unbroadcast(div(ct, y), x), None]


ad.transpose_rules[add_p] = ad._zero_aware_transpose(_add_transpose)
ad.transpose_rules[sub_p] = ad._zero_aware_transpose(_sub_transpose)
ad.transpose_rules[mul_p] = ad._zero_aware_transpose(_mul_transpose)
ad.transpose_rules[div_p] = ad._zero_aware_transpose(_div_transpose)
ad.transpose_rules[neg_p] = ad._zero_aware_transpose(lambda ct, x: [neg(ct)])
ad.transpose_rules[real_p] = ad._zero_aware_transpose(
    lambda ct, x: [convert_element_type(ct, x.aval.dtype)])
ad.transpose_rules[conj_p] = ad._zero_aware_transpose(lambda ct, x: [conj(ct)])
# imag(x) = Re(-i x), so its transpose maps a real ct to the complex -i ct
ad.transpose_rules[imag_p] = ad._zero_aware_transpose(
    lambda ct, x: [mul(convert_element_type(ct, x.aval.dtype), np.array(-1j, x.aval.dtype))])
ad.linear_primitives.update({add_p, sub_p, neg_p, real_p, imag_p, conj_p})
defjvp(neg_p, lambda t, x: neg(t))

# ------------------------------------------------------------------------------------------------
# convert_element_type / bitcast_convert_type


def _convert_dtype_rule(x, new_dtype, weak_type):
  return np.dtype(new_dtype)


convert_element_type_p = standard_primitive(
    "convert_element_type", lambda x, new_dtype, weak_type: x.shape, _convert_dtype_rule,
    lambda x, new_dtype, weak_type: weak_type)
convert_element_type_p.def_impl(_convert_impl)
batching.defvectorized(convert_element_type_p)


def _convert_jvp(primals, tangents, new_dtype, weak_type):
  (x,), (t,) = primals, tangents
  out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
  if type(t) is Zero or not dtypes.is_inexact(new_dtype) or not dtypes.is_inexact(
      get_aval(x).dtype):
    return out, Zero.from_primal_value(out)
  return out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type)


ad.jvp_rules[convert_element_type_p] = _convert_jvp
ad.transpose_rules[convert_element_type_p] = ad._zero_aware_transpose(
    lambda ct, x, new_dtype, weak_type: [
        convert_element_type_p.bind(ct, new_dtype=x.aval.dtype, weak_type=x.aval.weak_type)])
ad.linear_primitives.add(convert_element_type_p)


def _bitcast_shape(x, new_dtype):
  old, new = dtypes.bit_width(x.dtype), dtypes.bit_width(new_dtype)
  if old == new:
    return x.shape
  if old > new:
    return x.shape + (old // new,)
  if not x.shape or x.shape[-1] != new // old:
    raise TypeError(f"bitcast_convert_type from {x.dtype.name} to {np.dtype(new_dtype).name} "
                    f"requires the last dimension to be {new // old}, got shape {x.shape}")
  return x.shape[:-1]


bitcast_convert_type_p = standard_primitive(
    "bitcast_convert_type", _bitcast_shape, lambda x, new_dtype: np.dtype(new_dtype),
    lambda x, new_dtype: False)
bitcast_convert_type_p.def_impl(rops.bitcast_convert_type)
defjvp_zero(bitcast_convert_type_p)


def _bitcast_batch(vals, dims, new_dtype):
  # a narrowing bitcast consumes the last dimension: keep the batch dimension out of it
  (x,), (d,) = vals, dims
  if d == get_aval(x).ndim - 1:
    x, d = batching.moveaxis(x, d, 0), 0
  return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), d


batching.batch_rules[bitcast_convert_type_p] = _bitcast_batch

# ------------------------------------------------------------------------------------------------
# select_n(which, *cases): cases[which] elementwise; which is bool (2 cases) or int32


def _select_n_shape(which, *cases):
  shape = broadcasting_shape("select_n", *cases)
  if any(c.shape != shape for c in cases):
    raise TypeError(f"select_n cases must have the same shapes, got "
                    f"{[c.shape for c in cases]}.")
  if which.shape and which.shape != shape:
    raise TypeError(f"select_n `which` must be scalar or have the same shape as cases, got "
                    f"`which` shape {which.shape} but case shape {shape}.")
  return shape


def _select_n_dtype(which, *cases):
  if len({c.dtype for c in cases}) != 1:
    raise TypeError(f"select_n cases must have the same dtypes, got "
                    f"{[c.dtype.name for c in cases]}.")
  if which.dtype == np.bool_:
    if len(cases) > 2:
      raise TypeError("select with boolean `which` cannot have > 2 cases.")
  elif not dtypes.is_integer(which.dtype):     # (any integer type, as JAX's: int64 under x64)
    raise TypeError(f"select `which` must be boolean or integer type, got {which.dtype.name}.")
  return cases[0].dtype


_SELECT_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: elements from which a two-way select of one shape goes bitwise: NumPy's ``where`` branches
#: per element and a random mask mispredicts half of them (2-core AMD EPYC, float32: 64x64
#: 5.0 us either way, 128x128 17 against 10 us, 256x256 200 against 34 us)
_SELECT_BITS_MIN = 8192


def _select_bits(which, f, t):
  """``np.where(which, t, f)`` as bit operations on the values' bits (four passes without a
  branch): the same bits, NaN payloads and signed zeros included."""
  u = _SELECT_BITS[t.dtype.itemsize]
  m = which.astype(u)
  np.negative(m, out=m)         # 0 or all ones
  fb = f.view(u)
  r = np.bitwise_xor(t.view(u), fb)
  np.bitwise_and(r, m, out=r)
  np.bitwise_xor(r, fb, out=r)
  return r.view(t.dtype)


def _select_n_impl(which, *cases):
  if len(cases) == 1:
    return cases[0]
  if which.dtype == np.bool_:     # (two cases) one pass, where np.choose takes several
    f, t = cases
    if (which.size >= _SELECT_BITS_MIN and f.dtype == t.dtype and
        f.dtype.itemsize in _SELECT_BITS and which.shape == f.shape == t.shape):
      return _select_bits(which, f, t)
    return np.where(which, t, f)
  idx = which.astype(np.int64)
  return np.choose(np.broadcast_to(idx, np.broadcast_shapes(idx.shape, cases[0].shape)),
                   [np.broadcast_to(c, np.broadcast_shapes(idx.shape, c.shape)) for c in cases],
                   mode="clip")


select_n_p = standard_primitive("select_n", _select_n_shape, _select_n_dtype,
                                lambda which, *cases: all_weak(*cases))
select_n_p.def_impl(_select_n_impl)


def _select_n_jvp(primals, tangents):
  which, *cases = primals
  out = select_n_p.bind(which, *cases)
  case_ts = tangents[1:]
  if all(type(t) is Zero for t in case_ts):
    return out, Zero.from_primal_value(out)
  ts = [ad.instantiate_zeros(t) for t in case_ts]
  return out, select_n_p.bind(which, *ts)


def _select_n_transpose(ct, which, *cases):
  assert not ad.is_undefined_primal(which)
  zeros = _zeros(ct)
  out = [None]
  for i, c in enumerate(cases):
    if ad.is_undefined_primal(c):
      if len(cases) == 2 and get_aval(which).dtype == np.bool_:
        args = (zeros, ct) if i == 1 else (ct, zeros)
        out.append(select_n_p.bind(which, *args))
      else:
        out.append(select_n_p.bind(which, *[ct if j == i else zeros
                                            for j in range(len(cases))]))
    else:
      out.append(None)
  return out


ad.jvp_rules[select_n_p] = _select_n_jvp
ad.transpose_rules[select_n_p] = ad._zero_aware_transpose(_select_n_transpose)


def _select_n_batch(vals, dims):
  which, *cases = vals
  wd, *cds = dims
  # All operands with the batch dim at the front, unbatched ones broadcast.
  size = next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
  case_shape = batching.shape_without_bdim(cases[0], cds[0])
  cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cds)]
  if wd is None and get_aval(which).ndim == 0:
    return select_n_p.bind(which, *cases), 0
  which = batching.bdim_at_front(which, wd, size)
  if get_aval(which).ndim == 1 and case_shape:
    from ourjax.lax.structural import broadcast_in_dim
    which = broadcast_in_dim(which, (size,) + tuple(case_shape), (0,))
  return select_n_p.bind(which, *cases), 0


batching.batch_rules[select_n_p] = _select_n_batch

# ------------------------------------------------------------------------------------------------
# clamp(lo, x, hi)


def _clamp_shape(lo, x, hi):
  for b, nm in ((lo, "min"), (hi, "max")):
    if b.shape and b.shape != x.shape:
      raise TypeError(f"clamp requires {nm} to be a scalar or have the same shape as operand, "
                      f"got {nm} shape {b.shape} and operand shape {x.shape}.")
  return x.shape


clamp_p = standard_primitive("clamp", _clamp_shape,
                             lambda lo, x, hi: check_dtypes("clamp", [lo, x, hi], _any),
                             lambda lo, x, hi: x.weak_type)
clamp_p.def_impl(lambda lo, x, hi: rops.minimum(rops.maximum(x, lo), hi))


# JAX's convention: x gets the tangent strictly inside (lo, hi); lo where lo > x and lo < hi;
# hi where hi < x.  At a tie nobody does.
def _clamp_jvp_x(t, lo, x, hi):
  inside = and_(gt(x, lo), lt(x, hi))
  return select_n(inside, _zeros(t), t)


def _clamp_jvp_bound(which):
  def rule(t, lo, x, hi):
    hit = and_(gt(lo, x), lt(lo, hi)) if which == "lo" else lt(hi, x)
    tb = _bcast_to(t, x)
    return select_n(_bcast_to(hit, x), _zeros(tb), tb)
  return rule


defjvp(clamp_p, _clamp_jvp_bound("lo"), _clamp_jvp_x, _clamp_jvp_bound("hi"))


def _clamp_batch(vals, dims):
  lo, x, hi = vals
  size = next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
  xs = batching.bdim_at_front(x, dims[1], size)
  out = []
  for b, d in ((lo, dims[0]), (hi, dims[2])):
    if d is None and get_aval(b).ndim == 0:
      out.append(b)
    else:
      b = batching.bdim_at_front(b, d, size)
      if get_aval(b).ndim != get_aval(xs).ndim:
        from ourjax.lax.structural import broadcast_in_dim
        b = broadcast_in_dim(b, get_aval(xs).shape, (0,))
      out.append(b)
  return clamp_p.bind(out[0], xs, out[1]), 0


batching.batch_rules[clamp_p] = _clamp_batch


# ------------------------------------------------------------------------------------------------
# stop_gradient: identity whose tangent is zero


def stop_gradient(x):
  from ourjax import _pytree as tree_util
  return tree_util.tree_map(lambda v: stop_gradient_p.bind(v) if dtypes.is_inexact(
      get_aval(v).dtype) else v, x)


stop_gradient_p = standard_primitive("stop_gradient", lambda x: x.shape, lambda x: x.dtype,
                                     lambda x: x.weak_type)
stop_gradient_p.def_impl(lambda x: x)
defjvp_zero(stop_gradient_p)
batching.defvectorized(stop_gradient_p)


def copy_p_impl(x):
  return x.copy()


copy_p = standard_primitive("copy", lambda x: x.shape, lambda x: x.dtype, lambda x: x.weak_type)
copy_p.def_impl(copy_p_impl)
ad.deflinear(copy_p, lambda ct, x: [copy_p.bind(ct)])
batching.defvectorized(copy_p)
