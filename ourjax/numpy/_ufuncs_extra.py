"""More elementwise ``ourjax.numpy`` functions: fabs, fmax/fmin, frexp/ldexp/modf, gcd/lcm,
the complex predicates (angle, iscomplex, isreal, ...), bitwise_count and interp.  Split from
``_ufuncs`` (which re-exports every name here, and which this module builds on)."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes, lax
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.numpy._ufuncs import (
    _broadcast_to, _ordered, _refuse_complex, _select, absolute, add, divide, floor_divide, isinf,
    isnan, multiply, rad2deg, remainder, trunc, where)
from ourjax.numpy._util import (_as_operand, check_arraylike, promote_args, promote_args_inexact,
                                static_argnames)


# ------------------------------------------------------------------------------------------------
# More elementwise functions


def fabs(x, /):
  x, = promote_args_inexact("fabs", x)
  if dtypes.is_complex(get_aval(x).dtype):
    raise TypeError("ufunc 'fabs' does not support complex dtypes")
  return lax.abs(x)


def fmax(x1, x2, /):
  """Elementwise maximum ignoring NaN (NaN only where both are NaN)."""
  x1, x2 = promote_args("fmax", x1, x2)
  return where(lax.or_(_ordered(lax.gt)(x1, x2), isnan(x2)), x1, x2)


def fmin(x1, x2, /):
  """Elementwise minimum ignoring NaN (NaN only where both are NaN)."""
  x1, x2 = promote_args("fmin", x1, x2)
  return where(lax.or_(_ordered(lax.lt)(x1, x2), isnan(x2)), x1, x2)


def _int_type_of(dt):
  return np.dtype({2: np.int16, 4: np.int32, 8: np.int64}[np.dtype(dt).itemsize])


def _exact_pow2(n, dt):
  """2.0 ** n exactly for an int32 array n within the normal exponent range of ``dt``."""
  info = dtypes.finfo(dt)
  itype = _int_type_of(dt)
  bias = -int(info.minexp) + 1
  e = lax.convert_element_type(lax.add(n, np.int32(bias)), itype)
  return lax.bitcast_convert_type(lax.shift_left(e, lax._const(e, int(info.nmant))), dt)


def frexp(x, /):
  """Split ``x`` into a mantissa in [0.5, 1) (sign kept) and an int32 exponent:
  ``x == m * 2 ** e``.  Zero, inf and NaN give ``(x, 0)``.  The mantissa's derivative is
  ``2 ** -e`` (the exponent is piecewise constant)."""
  x, = promote_args_inexact("frexp", x)
  if dtypes.is_complex(get_aval(x).dtype):
    raise TypeError("frexp does not support complex-valued inputs")
  return _frexp_mantissa()(x), _frexp_bits(x)[1]


_FREXP = []


def _frexp_mantissa():
  if not _FREXP:
    from ourjax.custom_derivatives import custom_jvp
    f = custom_jvp(lambda x: _frexp_bits(x)[0])

    @f.defjvp
    def _jvp(primals, tangents):
      (x,), (t,) = primals, tangents
      m, e = _frexp_bits(x)
      return m, lax.mul(t, ldexp(lax.full_like(t, 1), lax.neg(e)))
    _FREXP.append(f)
  return _FREXP[0]


def _frexp_bits(x):
  """(mantissa, exponent) of a real float array, read off its bits."""
  dt = get_aval(x).dtype
  if dt.itemsize < 2 or dt not in (np.dtype(np.float16), np.dtype(np.float32),
                                   np.dtype(np.float64), np.dtype(dtypes.bfloat16)):
    m, e = _frexp_bits(lax.convert_element_type(x, np.float32))
    return lax.convert_element_type(m, dt), e
  info = dtypes.finfo(dt)
  itype = _int_type_of(dt)
  nmant, nexp = int(info.nmant), int(info.nexp)
  bias = -int(info.minexp) + 1
  # scale subnormals up so the exponent field is meaningful
  tiny = lax.lt(lax.abs(x), lax._const(x, info.tiny))
  xs = _select(tiny, x, lax.mul(x, lax._const(x, 2.0 ** nmant)))
  extra = _select(tiny, lax.full_like(xs, 0, np.int32), lax.full_like(xs, -nmant, np.int32))
  bits = lax.bitcast_convert_type(xs, itype)
  mask = (1 << nexp) - 1
  field = lax.and_(lax.shift_right_logical(bits, lax._const(bits, nmant)), lax._const(bits, mask))
  e = lax.add(lax.convert_element_type(field, np.int32), lax.add(extra, np.int32(-bias + 1)))
  clear = ~(mask << nmant)
  clear = int(np.array(clear).astype(itype))
  mbits = lax.or_(lax.and_(bits, lax._const(bits, clear)), lax._const(bits, (bias - 1) << nmant))
  m = lax.bitcast_convert_type(mbits, dt)
  special = lax.or_(lax.or_(isinf(x), isnan(x)), lax.eq(x, lax._const(x, 0)))
  return (_select(special, m, x),
          _select(special, e, lax.full_like(e, 0)))


def ldexp(x1, x2, /):
  """``x1 * 2 ** x2`` for an integer ``x2``, without intermediate overflow."""
  check_arraylike("ldexp", x1, x2)
  d1, d2 = (dtypes.dtype(_as_operand(x), canonicalize=True) for x in (x1, x2))
  if dtypes.is_complex(d1) or dtypes.is_inexact(d2):   # (a bool x2 is 0 or 1, as JAX's)
    raise ValueError(f"ldexp not supported for input types {(d1, d2)}")
  x1, = promote_args_inexact("ldexp", x1)
  dt = get_aval(x1).dtype
  from ourjax.numpy._util import promote_shapes
  x2 = lax.convert_element_type(_as_operand(x2), np.int32)
  x1, x2 = promote_shapes("ldexp", x1, x2)
  info = dtypes.finfo(dt)
  lo, hi = int(info.minexp), int(info.maxexp) - 1
  span = 3 * (hi - lo)
  n = lax.clamp(np.int32(-span), x2, np.int32(span))
  out = x1
  # three factors, each an exact power of two within the normal range
  for _ in range(3):
    step = lax.clamp(np.int32(lo), n, np.int32(hi))
    out = lax.mul(out, _exact_pow2(step, dt))
    n = lax.sub(n, step)
  return out


def modf(x, /):
  """Fractional and integral parts, both with the sign of ``x``."""
  x, = promote_args_inexact("modf", x)
  _refuse_complex("modf", x)
  whole = trunc(x)
  return lax.sub(x, whole), whole


def _gcd_steps(dt) -> int:
  # Euclid needs at most ~1.44 * bits iterations (consecutive Fibonacci numbers are worst)
  return {1: 12, 2: 24, 4: 47, 8: 93}[np.dtype(dt).itemsize]


def _integer_args(name, x1, x2):
  """``x1``, ``x2`` promoted and their dtype, which must be an integer one (bools stay bools:
  an error, as JAX's)."""
  x1, x2 = promote_args(name, x1, x2)
  dt = get_aval(x1).dtype
  if not dtypes.is_integer(dt):
    raise ValueError(f"Arguments to jax.numpy.{name} must be integers, got dtype {dt.name}")
  return x1, x2, dt


def gcd(x1, x2, /):
  """Greatest common divisor of integer arrays (Euclid's algorithm, unrolled)."""
  x1, x2, dt = _integer_args("gcd", x1, x2)
  a, b = absolute(x1), absolute(x2)
  shape = np.broadcast_shapes(get_aval(a).shape, get_aval(b).shape)
  a = _broadcast_to(a, shape) if get_aval(a).shape != shape else a
  b = _broadcast_to(b, shape) if get_aval(b).shape != shape else b
  zero, one = lax._const(a, 0), lax._const(a, 1)
  for _ in range(_gcd_steps(dt)):
    nz = lax.ne(b, zero)
    safe_b = _select(nz, one, b)
    a, b = _select(nz, a, b), _select(nz, b, lax.rem(a, safe_b))
  return a


def lcm(x1, x2, /):
  """Least common multiple of integer arrays (0 if either is 0)."""
  x1, x2, _ = _integer_args("lcm", x1, x2)
  x1, x2 = absolute(x1), absolute(x2)
  d = gcd(x1, x2)
  zero = lax._const(d, 0)
  is_zero = lax.eq(d, zero)
  safe_d = _select(is_zero, d, lax._const(d, 1))
  # |x1| * (|x2| // d), wrapping where it overflows, as JAX's
  return where(is_zero, zero, multiply(x1, floor_divide(x2, safe_d)))


@static_argnames("deg")
def angle(z, deg: bool = False):
  """Argument of a complex number (0 or pi for reals), in radians or degrees."""
  z, = promote_args("angle", z)
  dt = get_aval(z).dtype
  if dtypes.is_complex(dt):
    re, im = lax.real(z), lax.imag(z)
  else:
    re, im = z, lax.full_like(z, 0)
  if not dtypes.is_inexact(dt) or (dtypes.is_float(dt) and get_aval(z).ndim == 0):
    # as JAX's: integers and 0-d real floats convert to the default float (strongly typed)
    fdt = dtypes.default_float_dtype()
    re, im = lax.convert_element_type(re, fdt), lax.convert_element_type(im, fdt)
  out = lax.atan2(im, re)
  return rad2deg(out) if deg else out


def iscomplexobj(x) -> bool:
  if x is None:
    return False
  try:
    return dtypes.is_complex(dtypes.dtype(x))
  except Exception:  # e.g. a list holding tracers: its dtype is the array it makes
    from ourjax.numpy._creation import asarray
    return dtypes.is_complex(asarray(x).dtype)


def isrealobj(x) -> bool:
  return not iscomplexobj(x)


def iscomplex(x, /):
  from ourjax.numpy._creation import asarray
  x = asarray(x)
  if dtypes.is_complex(get_aval(x).dtype):
    return lax.ne(lax.imag(x), lax._const(lax.imag(x), 0))
  aval = get_aval(x)
  return lax.full(aval.shape, False, np.bool_, weak_type=aval.weak_type)


def isreal(x, /):
  from ourjax.numpy._creation import asarray
  x = asarray(x)
  if dtypes.is_complex(get_aval(x).dtype):
    return lax.eq(lax.imag(x), lax._const(lax.imag(x), 0))
  aval = get_aval(x)
  return lax.full(aval.shape, True, np.bool_, weak_type=aval.weak_type)


def isscalar(element) -> bool:
  """True for Python/NumPy scalars and 0-d arrays (as ``jnp.isscalar``)."""
  if hasattr(element, "__jax_array__"):
    element = element.__jax_array__()
  if isinstance(element, (Array, Tracer, np.ndarray)):
    return np.ndim(element) == 0 if isinstance(element, np.ndarray) else \
        get_aval(element).ndim == 0
  return dtypes.is_python_scalar(element) or np.isscalar(element)


def bitwise_count(x, /):
  x, = promote_args("bitwise_count", x)
  if get_aval(x).dtype == np.bool_:
    return lax.convert_element_type(x, np.uint8)
  return lax.convert_element_type(lax.population_count(absolute(x)), np.uint8)


def _take_1d(arr, idx):
  """``arr[idx]`` for a 1-D ``arr`` and an integer index array of any shape."""
  from ourjax.numpy._gathers import take_1d
  return take_1d(arr, idx)


def interp(x, xp, fp, left=None, right=None, period=None):
  """Piecewise-linear interpolation of the points ``(xp, fp)`` (``xp`` increasing) at ``x``.
  Outside ``xp``: ``left``/``right`` (default the end values of ``fp``), or the end segments'
  lines continued for ``'extrapolate'``."""
  from ourjax.numpy._creation import asarray
  check_arraylike("interp", x, xp, fp)
  if np.ndim(xp) != 1 or np.ndim(fp) != 1 or np.shape(xp)[0] != np.shape(fp)[0]:
    raise ValueError("xp and fp must be one-dimensional arrays of equal size")
  for side, v in (("left", left), ("right", right)):
    if isinstance(v, str) and v != "extrapolate":
      raise ValueError(f"the only valid string value of `{side}` is 'extrapolate', but got: "
                       f"{v!r}")
  if np.shape(xp)[0] == 0:
    raise ValueError("xp and fp must not be empty")
  from ourjax.numpy._util import promote_dtypes_inexact
  x, xp = promote_dtypes_inexact(_as_operand(x), _as_operand(xp))
  fp, = promote_dtypes_inexact(_as_operand(fp))
  if dtypes.is_complex(get_aval(x).dtype):
    raise ValueError("jnp.interp: complex x values not supported.")
  x, xp, fp = asarray(x), asarray(xp), asarray(fp)
  if period is not None:
    if np.ndim(period) != 0:
      raise ValueError(f"period must be a scalar; got {period}")
    period = absolute(period)
    x = remainder(x, period)
    xp = remainder(xp, period)
    from ourjax.numpy._sorting import argsort
    order = lax.convert_element_type(argsort(xp), np.int32)
    m = get_aval(xp).shape[0]
    # extend by one point on each side, shifted by a period
    idx = np.concatenate([[m - 1], np.arange(m), [0]]).astype(np.int32)
    shift = np.zeros(m + 2)
    shift[0], shift[-1] = -1, 1
    xs = _take_1d(xp, _take_1d(order, idx))
    xp = add(xs, multiply(period, shift.astype(get_aval(xs).dtype)))
    fp = _take_1d(fp, _take_1d(order, idx))
  from ourjax.numpy._sorting import searchsorted
  n = get_aval(xp).shape[0]
  if n == 1:
    i = lax.full_like(x, 0, np.int32)
    im1 = i
  else:
    i = lax.clamp(np.int32(1), lax.convert_element_type(searchsorted(xp, x, side="right"),
                                                        np.int32), np.int32(n - 1))
    im1 = lax.sub(i, np.int32(1))
  xi, xim1 = _take_1d(xp, i), _take_1d(xp, im1)
  fi, fim1 = _take_1d(fp, i), _take_1d(fp, im1)
  df = lax.sub(fi, fim1)
  dx = lax.sub(xi, xim1)
  delta = lax.sub(x, xim1)
  eps = np.spacing(dtypes.finfo(get_aval(dx).dtype).eps)
  dx0 = lax.le(lax.abs(dx), lax._const(dx, eps))
  safe_dx = _select(dx0, dx, lax.full_like(dx, 1))
  f = where(dx0, fim1, add(fim1, multiply(divide(delta, safe_dx), df)))
  if period is None:
    first = _take_1d(fp, np.zeros((), np.int32))
    last = _take_1d(fp, np.full((), n - 1, np.int32))
    left = first if left is None else left
    right = last if right is None else right
    # 'extrapolate': the end segments' lines continue (what f already holds there)
    if not isinstance(left, str):
      f = where(lax.lt(x, _take_1d(xp, np.zeros((), np.int32))), left, f)
    if not isinstance(right, str):
      f = where(lax.gt(x, _take_1d(xp, np.full((), n - 1, np.int32))), right, f)
  return f
