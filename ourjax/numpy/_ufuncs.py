"""Elementwise ``ourjax.numpy`` functions: promote and broadcast the arguments, then apply the
lax primitive.  Most are one line in the tables below."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._util import (promote_args, promote_args_inexact, promote_args_numeric,
                                check_arraylike, _as_operand)


def _unary(name, lax_fn, promote=promote_args_inexact):
  def fn(x, /):
    x, = promote(name, x)
    return lax_fn(x)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = f"Elementwise {name}, as ``numpy.{name}`` (computed by ``lax``)."
  return fn


def _binary(name, lax_fn, promote=promote_args):
  def fn(x, y, /):
    x, y = promote(name, x, y)
    return lax_fn(x, y)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = f"Elementwise {name}, as ``numpy.{name}`` (computed by ``lax``)."
  return fn


# float functions: integer inputs are promoted to the default float dtype
sin = _unary("sin", lax.sin)
cos = _unary("cos", lax.cos)
tan = _unary("tan", lax.tan)
arcsin = asin = _unary("arcsin", lax.asin)
arccos = acos = _unary("arccos", lax.acos)
arctan = atan = _unary("arctan", lax.atan)
sinh = _unary("sinh", lax.sinh)
cosh = _unary("cosh", lax.cosh)
tanh = _unary("tanh", lax.tanh)
arcsinh = asinh = _unary("arcsinh", lax.asinh)
arccosh = acosh = _unary("arccosh", lax.acosh)
arctanh = atanh = _unary("arctanh", lax.atanh)
exp = _unary("exp", lax.exp)
exp2 = _unary("exp2", lax.exp2)
expm1 = _unary("expm1", lax.expm1)
log = _unary("log", lax.log)
log1p = _unary("log1p", lax.log1p)
sqrt = _unary("sqrt", lax.sqrt)
cbrt = _unary("cbrt", lax.cbrt)
arctan2 = atan2 = _binary("arctan2", lax.atan2, promote_args_inexact)
true_divide = divide = _binary("divide", lax.div, promote_args_inexact)
nextafter = _binary("nextafter", lax.nextafter, promote_args_inexact)

# dtype-preserving functions
negative = _unary("negative", lax.neg, promote_args_numeric)
add = _binary("add", lambda x, y: lax.or_(x, y) if get_aval(x).dtype == np.bool_
              else lax.add(x, y))
subtract = _binary("subtract", lax.sub, promote_args_numeric)
multiply = _binary("multiply", lambda x, y: lax.and_(x, y) if get_aval(x).dtype == np.bool_
                   else lax.mul(x, y))
maximum = _binary("maximum", lax.max)
minimum = _binary("minimum", lax.min)
bitwise_and = _binary("bitwise_and", lax.and_)
bitwise_or = _binary("bitwise_or", lax.or_)
bitwise_xor = _binary("bitwise_xor", lax.xor)
logical_and = _binary("logical_and", lambda x, y: lax.and_(_to_bool(x), _to_bool(y)))
logical_or = _binary("logical_or", lambda x, y: lax.or_(_to_bool(x), _to_bool(y)))
logical_xor = _binary("logical_xor", lambda x, y: lax.xor(_to_bool(x), _to_bool(y)))
left_shift = bitwise_left_shift = _binary("left_shift", lax.shift_left)
equal = _binary("equal", lax.eq)
not_equal = _binary("not_equal", lax.ne)
less = _binary("less", lax.lt)
less_equal = _binary("less_equal", lax.le)
greater = _binary("greater", lax.gt)
greater_equal = _binary("greater_equal", lax.ge)


def _to_bool(x):
  return x if get_aval(x).dtype == np.bool_ else lax.ne(x, lax._const(x, 0))


def logical_not(x, /):
  x, = promote_args("logical_not", x)
  return lax.not_(_to_bool(x))


def invert(x, /):
  x, = promote_args("invert", x)
  return lax.not_(x)


bitwise_not = bitwise_invert = invert


def right_shift(x, y, /):
  x, y = promote_args("right_shift", x, y)
  if dtypes.issubdtype(get_aval(x).dtype, np.unsignedinteger):
    return lax.shift_right_logical(x, y)
  return lax.shift_right_arithmetic(x, y)


bitwise_right_shift = right_shift


def positive(x, /):
  x, = promote_args("positive", x)
  return x


def absolute(x, /):
  x, = promote_args("absolute", x)
  dt = get_aval(x).dtype
  if dt == np.bool_ or dtypes.issubdtype(dt, np.unsignedinteger):
    return x
  return lax.abs(x)


abs = absolute  # noqa: A001


def sign(x, /):
  x, = promote_args("sign", x)
  if get_aval(x).dtype == np.bool_:
    return x
  return lax.sign(x)


def square(x, /):
  x, = promote_args_numeric("square", x)
  return lax.square(x)


def reciprocal(x, /):
  x, = promote_args_inexact("reciprocal", x)
  return lax.div(lax._const(x, 1), x)


def floor(x, /):
  x, = promote_args("floor", x)
  return x if not dtypes.is_float(get_aval(x).dtype) else lax.floor(x)


def ceil(x, /):
  x, = promote_args("ceil", x)
  return x if not dtypes.is_float(get_aval(x).dtype) else lax.ceil(x)


def trunc(x, /):
  x, = promote_args("trunc", x)
  if not dtypes.is_float(get_aval(x).dtype):
    return x
  return lax.select_n(lax.lt(x, lax._const(x, 0)), lax.floor(x), lax.ceil(x))


fix = trunc


def rint(x, /):
  x, = promote_args_inexact("rint", x)
  return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)


def round(a, decimals: int = 0, out=None):  # noqa: A001
  a, = promote_args("round", a)
  dt = get_aval(a).dtype
  if not dtypes.is_inexact(dt):
    return a if decimals >= 0 else _round_int(a, decimals)
  if decimals == 0:
    return lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN)
  factor = lax._const(a, 10.0 ** decimals)
  return lax.div(lax.round(lax.mul(a, factor), lax.RoundingMethod.TO_NEAREST_EVEN), factor)


def _round_int(a, decimals):
  f = float(10 ** -decimals)
  af = lax.convert_element_type(a, dtypes.default_float_dtype())
  r = lax.mul(lax.round(lax.div(af, lax._const(af, f)), lax.RoundingMethod.TO_NEAREST_EVEN),
              lax._const(af, f))
  return lax.convert_element_type(r, get_aval(a).dtype)


around = round


def power(x1, x2, /):
  """x1 ** x2 with NumPy's dtype rules; a concrete integer exponent uses integer_pow."""
  check_arraylike("power", x1, x2)
  from ourjax.core import Tracer
  if isinstance(x2, int) and not isinstance(x2, bool) or (
      isinstance(x2, np.integer)):
    x1, = promote_args_numeric("power", x1)
    return lax.integer_pow(x1, int(x2))
  x1, x2 = promote_args_numeric("power", x1, x2)
  dt = get_aval(x1).dtype
  if dtypes.is_integer(dt):
    return _integer_power(x1, x2)
  return lax.pow(x1, x2)


def _integer_power(x, y):
  """x ** y for integer arrays by repeated squaring over the bits of y (y >= 0)."""
  from ourjax.numpy._util import promote_shapes
  x, y = promote_shapes("power", x, y)
  acc = lax.full_like(x, 1) if get_aval(x).shape else lax._const(x, 1)
  if get_aval(y).shape and not get_aval(acc).shape:
    acc = lax.full_like(y, 1)
  bits = get_aval(x).dtype.itemsize * 8
  for _ in range(bits):
    odd = lax.ne(lax.and_(y, lax._const(y, 1)), lax._const(y, 0))
    acc = lax.select_n(odd, acc, lax.mul(acc, x))
    x = lax.mul(x, x)
    y = lax.shift_right_logical(y, lax._const(y, 1))
  return acc


pow = power  # noqa: A001


def float_power(x1, x2, /):
  x1, x2 = promote_args_inexact("float_power", x1, x2)
  dt = dtypes.canonicalize_dtype(np.float64)
  return lax.pow(lax.convert_element_type(x1, dt), lax.convert_element_type(x2, dt))


def floor_divide(x1, x2, /):
  x1, x2 = promote_args_numeric("floor_divide", x1, x2)
  dt = get_aval(x1).dtype
  if dtypes.is_integer(dt):
    q = lax.div(x1, x2)
    r = lax.rem(x1, x2)
    zero = lax._const(x1, 0)
    adjust = lax.and_(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
    return lax.select_n(adjust, q, lax.sub(q, lax._const(q, 1)))
  return lax.floor(lax.div(x1, x2))


def remainder(x1, x2, /):
  x1, x2 = promote_args_numeric("remainder", x1, x2)
  r = lax.rem(x1, x2)
  zero = lax._const(r, 0)
  fix_sign = lax.and_(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
  return lax.select_n(fix_sign, r, lax.add(r, x2))


mod = remainder


def fmod(x1, x2, /):
  x1, x2 = promote_args_numeric("fmod", x1, x2)
  return lax.rem(x1, x2)


def divmod(x1, x2, /):  # noqa: A001
  return floor_divide(x1, x2), remainder(x1, x2)


def isfinite(x, /):
  x, = promote_args("isfinite", x)
  dt = get_aval(x).dtype
  if not dtypes.is_float(dt):
    return lax.full_like(x, True, dtype=np.bool_)
  return lax.is_finite(x)


def isinf(x, /):
  x, = promote_args("isinf", x)
  dt = get_aval(x).dtype
  if not dtypes.is_float(dt):
    return lax.full_like(x, False, dtype=np.bool_)
  return lax.eq(lax.abs(x), lax._const(x, np.inf))


def isnan(x, /):
  x, = promote_args("isnan", x)
  return lax.ne(x, x)


def isposinf(x, /):
  x, = promote_args("isposinf", x)
  return lax.eq(x, lax._const(x, np.inf)) if dtypes.is_float(get_aval(x).dtype) else \
      lax.full_like(x, False, dtype=np.bool_)


def isneginf(x, /):
  x, = promote_args("isneginf", x)
  return lax.eq(x, lax._const(x, -np.inf)) if dtypes.is_float(get_aval(x).dtype) else \
      lax.full_like(x, False, dtype=np.bool_)


def signbit(x, /):
  x, = promote_args("signbit", x)
  dt = get_aval(x).dtype
  if dtypes.is_integer(dt):
    return lax.lt(x, lax._const(x, 0))
  if dt == np.bool_:
    return lax.full_like(x, False, dtype=np.bool_)
  itype = {2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize]
  return lax.lt(lax.bitcast_convert_type(x, itype), np.array(0, itype))


def copysign(x1, x2, /):
  x1, x2 = promote_args_inexact("copysign", x1, x2)
  return lax.select_n(signbit(x2), lax.abs(x1), lax.neg(lax.abs(x1)))


def logaddexp(x1, x2, /):
  x1, x2 = promote_args_inexact("logaddexp", x1, x2)
  amax = lax.max(x1, x2)
  delta = lax.sub(x1, x2)
  both_inf = lax.and_(lax.eq(x1, x2), lax.eq(lax.abs(x1), lax._const(x1, np.inf)))
  safe = lax.select_n(lax.ne(delta, delta), lax.log1p(lax.exp(lax.neg(lax.abs(delta)))),
                      lax.add(x1, x2))
  out = lax.add(amax, safe)
  return lax.select_n(both_inf, out, amax)


def logaddexp2(x1, x2, /):
  x1, x2 = promote_args_inexact("logaddexp2", x1, x2)
  ln2 = lax._const(x1, np.log(2))
  return lax.div(logaddexp(lax.mul(x1, ln2), lax.mul(x2, ln2)), ln2)


def log2(x, /):
  x, = promote_args_inexact("log2", x)
  return lax.div(lax.log(x), lax._const(x, np.log(2)))


def log10(x, /):
  x, = promote_args_inexact("log10", x)
  return lax.div(lax.log(x), lax._const(x, np.log(10)))


def deg2rad(x, /):
  x, = promote_args_inexact("deg2rad", x)
  return lax.mul(x, lax._const(x, np.pi / 180))


def rad2deg(x, /):
  x, = promote_args_inexact("rad2deg", x)
  return lax.mul(x, lax._const(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def hypot(x1, x2, /):
  x1, x2 = promote_args_inexact("hypot", x1, x2)
  a, b = lax.abs(x1), lax.abs(x2)
  hi, lo = lax.max(a, b), lax.min(a, b)
  safe_hi = lax.select_n(lax.eq(hi, lax._const(hi, 0)), hi, lax._const(hi, 1))
  r = lax.div(lo, safe_hi)
  out = lax.mul(hi, lax.sqrt(lax.add(lax._const(r, 1), lax.mul(r, r))))
  return lax.select_n(lax.eq(hi, lax._const(hi, np.inf)), out, hi)


def sinc(x, /):
  x, = promote_args_inexact("sinc", x)
  pix = lax.mul(x, lax._const(x, np.pi))
  is_zero = lax.eq(x, lax._const(x, 0))
  safe = lax.select_n(is_zero, pix, lax._const(x, 1))
  return lax.select_n(is_zero, lax.div(lax.sin(safe), safe), lax._const(x, 1))


def heaviside(x1, x2, /):
  x1, x2 = promote_args_inexact("heaviside", x1, x2)
  zero = lax._const(x1, 0)
  return where_(lax.lt(x1, zero), zero, where_(lax.eq(x1, zero), x2, lax._const(x1, 1)))


def where_(c, x, y):
  from ourjax.numpy import where
  return where(c, x, y)


def real(x, /):
  x, = promote_args("real", x)
  return lax.real(x) if dtypes.is_complex(get_aval(x).dtype) else x


def imag(x, /):
  x, = promote_args("imag", x)
  return lax.imag(x) if dtypes.is_complex(get_aval(x).dtype) else lax.full_like(x, 0)


def conjugate(x, /):
  x, = promote_args("conjugate", x)
  return lax.conj(x) if dtypes.is_complex(get_aval(x).dtype) else x


conj = conjugate
