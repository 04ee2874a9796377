"""Pure NumPy implementations of the operations whose semantics are more than one NumPy call.

These functions know nothing about the IR: they take and return NumPy arrays, and every
parameter that is not an operand is keyword-only and spelled the way ``jax.lax`` spells it. They
are the semantics of record for two clients: the HLO reference executor
(``backends/reference.py``) and the reference implementations of the lax primitives.  The ops
over whole arrays and windows (reduce, reduce-window, dot, convolution, gather, scatter, fft,
sort) are in ``reference_ops_array``, re-exported here.

Conventions (XLA's, where XLA defines them):

* 16-bit and 8-bit floats (float16, bfloat16, float8_*) are computed in float32 and rounded back
  after every operation (``compute_dtype``/``round_to``).
* Integer arithmetic wraps. Integer division truncates toward zero; ``x / 0`` is ``-1`` (all
  bits set, so the maximum value for unsigned types) and ``x % 0`` is ``x``; ``INT_MIN / -1`` is
  ``INT_MIN`` and ``INT_MIN % -1`` is ``0``.
* Shift amounts are read as unsigned: shifting by ``>= bitwidth`` gives 0 for the left and the
  logical right shift and the sign fill for the arithmetic right shift.
* Float to integer conversion truncates toward zero and saturates; NaN converts to 0.
* Dots and convolutions accumulate, starting from +0, in the wider of the input and output types
  (float32 at least for floats), then round to the output type.
* Dynamic slices clamp their start indices so that the slice lies inside the operand.
"""
from __future__ import annotations

import builtins
import functools
import math
from typing import Callable

import ml_dtypes
import numpy as np

__all__ = [
    "compute_dtype", "round_to", "elementwise", "is_float", "is_integer", "is_signed",
    "is_unsigned", "is_complex", "is_bool", "bitwidth", "iinfo_min", "iinfo_max",
    "round_half_away_from_zero", "round_half_to_even", "sign", "integer_div", "integer_rem",
    "integer_pow", "float_pow", "shift_left", "shift_right_logical", "shift_right_arithmetic",
    "population_count", "count_leading_zeros", "erf", "erfc", "erf_inv", "lgamma", "digamma",
    "logistic", "convert_element_type", "bitcast_convert_type", "broadcast_in_dim", "iota", "pad",
    "slice",
    "dynamic_slice", "dynamic_update_slice", "concatenate", "reduce", "reduce_window",
    "dot_general", "conv_general_dilated", "gather", "scatter", "fft", "sort",
    "sort_by_comparator",
    "total_order_key", "compare", "clamp", "maximum", "minimum",
]

# ---------------------------------------------------------------------------------------------
# dtype classification
# ---------------------------------------------------------------------------------------------

_F32 = np.dtype(np.float32)
_LOW_PRECISION_FLOATS = {np.dtype(t) for t in (
    np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)}
_FLOATS = _LOW_PRECISION_FLOATS | {np.dtype(np.float32), np.dtype(np.float64)}


def is_float(dtype) -> bool:
  """Real floating point, including the ml_dtypes types (whose numpy ``kind`` is 'V')."""
  return np.dtype(dtype) in _FLOATS


def is_complex(dtype) -> bool:
  return np.dtype(dtype).kind == "c"


def is_bool(dtype) -> bool:
  return np.dtype(dtype) == np.bool_


_SUBBYTE_SIGNED = frozenset(np.dtype(getattr(ml_dtypes, n)) for n in ("int2", "int4")
                            if hasattr(ml_dtypes, n))
_SUBBYTE_UNSIGNED = frozenset(np.dtype(getattr(ml_dtypes, n)) for n in ("uint2", "uint4")
                              if hasattr(ml_dtypes, n))


def is_signed(dtype) -> bool:
  dt = np.dtype(dtype)
  return dt.kind == "i" or dt in _SUBBYTE_SIGNED


def is_unsigned(dtype) -> bool:
  dt = np.dtype(dtype)
  return dt.kind == "u" or dt in _SUBBYTE_UNSIGNED


def is_integer(dtype) -> bool:
  return is_signed(dtype) or is_unsigned(dtype)


def bitwidth(dtype) -> int:
  return 1 if is_bool(dtype) else np.dtype(dtype).itemsize * 8


def iinfo_min(dtype):
  return ml_dtypes.iinfo(dtype).min


def iinfo_max(dtype):
  return ml_dtypes.iinfo(dtype).max


def _finfo(dtype):
  return ml_dtypes.finfo(dtype) if np.dtype(dtype) in _LOW_PRECISION_FLOATS else np.finfo(dtype)


def compute_dtype(dtype) -> np.dtype:
  """The type arithmetic on ``dtype`` is carried out in: float32 for the narrow floats."""
  dtype = np.dtype(dtype)
  return _F32 if dtype in _LOW_PRECISION_FLOATS else dtype


def _contiguous(x) -> np.ndarray:
  """A C-contiguous array of ``x`` (unlike ``np.ascontiguousarray``, keeps 0-d arrays 0-d)."""
  x = np.asarray(x)
  return x if x.flags.c_contiguous else np.array(x, order="C")


def round_to(x, dtype) -> np.ndarray:
  """Round (cast) a computed result back to ``dtype`` as a contiguous array."""
  return _contiguous(np.asarray(x).astype(dtype, copy=False))


def elementwise(fn: Callable, *xs, out_dtype=None) -> np.ndarray:
  """Apply a NumPy elementwise function the way XLA types it: in the compute type of the first
  operand (float32 for the narrow floats, so one rounding per operation), then rounded to
  ``out_dtype`` (default: the first operand's type). Floating-point warnings are silenced."""
  xs = tuple(np.asarray(x) for x in xs)
  in_dt = xs[0].dtype
  cdt = compute_dtype(in_dt)
  if cdt != in_dt:
    xs = tuple(x.astype(cdt) for x in xs)
  with np.errstate(all="ignore"):
    return np.asarray(fn(*xs)).astype(in_dt if out_dtype is None else out_dtype, copy=False)


_SAME_WIDTH = {k: {n: np.dtype(f"{k}{n}") for n in (1, 2, 4, 8)} for k in "ui"}


def _unsigned_of(dtype) -> np.dtype:
  return _SAME_WIDTH["u"][np.dtype(dtype).itemsize]


def _signed_of(dtype) -> np.dtype:
  return _SAME_WIDTH["i"][np.dtype(dtype).itemsize]


try:   # NumPy >= 2: the error state is a context variable; setting it directly is cheaper
  from numpy._core.umath import _extobj_contextvar, _make_extobj
  _IGNORE_ALL = _make_extobj(all="ignore")
except ImportError:    # pragma: no cover (older NumPy)
  _extobj_contextvar = None


def quietly(fn, *args, **kwargs):
  """``fn(*args, **kwargs)`` with NumPy's floating-point warnings off (as in
  ``np.errstate(all="ignore")``, which costs a few microseconds more per call): inf and NaN
  results are values here, not errors."""
  if _extobj_contextvar is None:
    with np.errstate(all="ignore"):
      return fn(*args, **kwargs)
  token = _extobj_contextvar.set(_IGNORE_ALL)
  try:
    return fn(*args, **kwargs)
  finally:
    _extobj_contextvar.reset(token)


def _ignore_fp_errors(fn):
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    return quietly(fn, *args, **kwargs)
  return wrapper


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

@_ignore_fp_errors
def round_half_away_from_zero(x):
  """XLA round-nearest-afz: halfway cases round away from zero; -0.3 -> -0, inf/NaN unchanged."""
  x = np.asarray(x)
  t = np.trunc(x)
  frac = x - t  # exact; NaN for +-inf, which compares False below
  return np.where(np.abs(frac) >= 0.5, t + np.copysign(np.ones_like(x), x), t).astype(x.dtype)


def round_half_to_even(x):
  """XLA round-nearest-even (IEEE roundTiesToEven), NumPy's ``rint``."""
  x = np.asarray(x)
  return np.rint(x).astype(x.dtype)


@_ignore_fp_errors
def sign(x):
  """XLA sign: -1/0/+1 for integers; for floats +-1, with +-0 and NaN returned unchanged."""
  x = np.asarray(x)
  if is_unsigned(x.dtype):
    return (x != 0).astype(x.dtype)
  if is_integer(x.dtype):
    return np.sign(x).astype(x.dtype)
  if is_complex(x.dtype):
    mag = np.abs(x)
    return np.where(mag == 0, x, x / np.where(mag == 0, 1, mag)).astype(x.dtype)
  one = np.copysign(np.ones_like(x), x)
  return np.where(np.isnan(x) | (x == 0), x, one).astype(x.dtype)


def _broadcast_same(x, y):
  x, y = np.asarray(x), np.asarray(y)
  if x.shape != y.shape:
    x, y = np.broadcast_arrays(x, y)
  return x, y


@_ignore_fp_errors
def integer_div(x, y):
  """Integer division truncating toward zero, with XLA's values for the undefined cases:
  ``x / 0 == -1`` (all ones: the maximum for unsigned types), ``INT_MIN / -1 == INT_MIN``."""
  x, y = _broadcast_same(x, y)
  dt = x.dtype
  if dt in _SUBBYTE_SIGNED or dt in _SUBBYTE_UNSIGNED:   # in the byte type, wrapped back
    return _in_byte_type(integer_div, x, y)
  zero = y == 0
  if is_unsigned(dt):
    safe = np.where(zero, np.ones_like(y), y)
    return np.where(zero, np.array(iinfo_max(dt), dt), x // safe).astype(dt)
  overflow = (x == iinfo_min(dt)) & (y == -1)
  safe = np.where(zero | overflow, np.ones_like(y), y)
  r = np.fmod(x, safe)               # C remainder: sign of the dividend
  q = (x - r) // safe                # exact division, so floor == trunc
  return np.where(zero, np.array(-1, dt), q).astype(dt)


def _in_byte_type(fn, x, y):
  wide = np.uint8 if is_unsigned(x.dtype) else np.int8
  out = fn(x.astype(wide), y.astype(wide))
  bits = int(ml_dtypes.iinfo(x.dtype).bits)
  lo = out.astype(np.int64) & ((1 << bits) - 1)          # wrap to the narrow type's width
  if not is_unsigned(x.dtype):
    lo = np.where(lo >= 1 << (bits - 1), lo - (1 << bits), lo)
  return lo.astype(x.dtype)


@_ignore_fp_errors
def integer_rem(x, y):
  """Integer remainder with the sign of the dividend (C's ``%``); ``x % 0 == x``,
  ``INT_MIN % -1 == 0``."""
  x, y = _broadcast_same(x, y)
  dt = x.dtype
  if dt in _SUBBYTE_SIGNED or dt in _SUBBYTE_UNSIGNED:   # in the byte type, wrapped back
    return _in_byte_type(integer_rem, x, y)
  zero = y == 0
  if is_unsigned(dt):
    safe = np.where(zero, np.ones_like(y), y)
    return np.where(zero, x, x % safe).astype(dt)
  overflow = (x == iinfo_min(dt)) & (y == -1)
  safe = np.where(zero | overflow, np.ones_like(y), y)
  return np.where(zero, x, np.fmod(x, safe)).astype(dt)


@_ignore_fp_errors
def integer_pow(x, y):
  """``x ** y`` for integers by repeated squaring, wrapping. A negative exponent gives 0 unless
  ``x`` is 1 (1) or -1 (+-1 by the parity of ``y``)."""
  x, y = _broadcast_same(x, y)
  dt = x.dtype
  if is_bool(dt):
    return (x | ~y.astype(bool)).astype(dt)
  acc = np.ones_like(x)
  base = x.copy()
  e = np.where(y < 0, 0, y).astype(_unsigned_of(y.dtype))
  while np.any(e):
    acc = np.where((e & 1) == 1, acc * base, acc)
    base = base * base
    e = e >> np.array(1, e.dtype)
  if is_signed(y.dtype):
    odd = (y & 1) == 1
    neg_result = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0)).astype(dt) \
        if is_signed(dt) else np.where(x == 1, 1, 0).astype(dt)
    acc = np.where(y < 0, neg_result, acc)
  return acc.astype(dt)


@_ignore_fp_errors
def float_pow(x, y):
  """C ``pow`` for floats. Types up to 32 bits are evaluated in float64 and rounded once, which
  makes e.g. ``pow(x, 2)`` equal to the correctly rounded ``x * x``."""
  x, y = _broadcast_same(x, y)
  dt = x.dtype
  if is_complex(dt):
    return np.power(x, y).astype(dt)
  if np.dtype(dt).itemsize <= 4:
    return np.power(x.astype(np.float64), y.astype(np.float64)).astype(dt)
  return np.power(x, y).astype(dt)


_INT4 = frozenset((np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)))


def _nibble(x):
  """A 4-bit integer array's bit patterns (ml_dtypes keeps them in the low half of a byte)."""
  return x.view(np.uint8) & np.uint8(0xF)


def _int4_bits(op, x, y=None):
  """The bit-level ops on int4/uint4 (the byte-wide code below would see the storage byte):
  each on the 4-bit pattern, the result wrapped back into the dtype."""
  nib = _nibble(x).astype(np.int16)
  if y is not None:
    amount = y.astype(np.int16)
    too_big = (amount < 0) | (amount >= 4)
    s = np.where(too_big, 0, amount)
  if op == "shl":
    r = np.where(too_big, 0, nib << s)
  elif op == "shr_logical":
    r = np.where(too_big, 0, nib >> s)
  elif op == "shr_arithmetic":
    r = ((nib ^ 8) - 8) >> np.where(too_big, 3, s)
  elif op == "popcnt":
    r = np.bitwise_count(nib.astype(np.uint8)).astype(np.int16)
  else:        # clz
    r = 4 - np.select([nib >= 8, nib >= 4, nib >= 2, nib >= 1], [4, 3, 2, 1], 0)
  return (r & 0xF).astype(np.uint8).astype(x.dtype)


def _shift_amount(x, y):
  bits = bitwidth(x.dtype)
  yu = y.astype(_unsigned_of(y.dtype), copy=False) if is_signed(y.dtype) else y
  too_big = yu >= bits
  return too_big, np.where(too_big, 0, yu).astype(_unsigned_of(x.dtype)), bits


def _scalar_shift(x, y, kind):
  """A shift of ``x`` by one amount (a 0-d ``y``): one NumPy shift of the bit pattern, or None
  where the general path is needed (int4 operands)."""
  x = np.asarray(x)
  if x.dtype in _INT4 or x.dtype.kind not in "iu":
    return None
  bits = bitwidth(x.dtype)
  s = int(y)                     # (a negative amount is a huge one as unsigned)
  if kind == "arithmetic":
    t = _signed_of(x.dtype)
    s = s if 0 <= s < bits else bits - 1     # (all sign bits)
    return np.asarray(x.view(t) >> t.type(s)).view(x.dtype)
  if not 0 <= s < bits:
    return np.zeros_like(x)
  t = _unsigned_of(x.dtype)
  xu = x.view(t)
  return np.asarray(xu << t.type(s) if kind == "left" else xu >> t.type(s)).view(x.dtype)


@_ignore_fp_errors
def shift_left(x, y):
  """``x << y``; amounts ``>= bitwidth`` (as unsigned) give 0."""
  if np.ndim(y) == 0:
    r = _scalar_shift(x, y, "left")
    if r is not None:
      return r
  x, y = _broadcast_same(x, y)
  if x.dtype in _INT4:
    return _int4_bits("shl", x, y)
  too_big, s, _ = _shift_amount(x, y)
  xu = x.view(_unsigned_of(x.dtype))
  return np.where(too_big, 0, xu << s).astype(_unsigned_of(x.dtype)).view(x.dtype)


@_ignore_fp_errors
def shift_right_logical(x, y):
  """Zero-filling right shift of the bit pattern; amounts ``>= bitwidth`` give 0."""
  if np.ndim(y) == 0:
    r = _scalar_shift(x, y, "logical")
    if r is not None:
      return r
  x, y = _broadcast_same(x, y)
  if x.dtype in _INT4:
    return _int4_bits("shr_logical", x, y)
  too_big, s, _ = _shift_amount(x, y)
  xu = x.view(_unsigned_of(x.dtype))
  return np.where(too_big, 0, xu >> s).astype(_unsigned_of(x.dtype)).view(x.dtype)


@_ignore_fp_errors
def shift_right_arithmetic(x, y):
  """Sign-filling right shift of the bit pattern (also for unsigned types); amounts
  ``>= bitwidth`` fill every bit with the sign bit."""
  if np.ndim(y) == 0:
    r = _scalar_shift(x, y, "arithmetic")
    if r is not None:
      return r
  x, y = _broadcast_same(x, y)
  if x.dtype in _INT4:
    return _int4_bits("shr_arithmetic", x, y)
  too_big, s, bits = _shift_amount(x, y)
  xs = x.view(_signed_of(x.dtype))
  s = np.where(too_big, bits - 1, s).astype(_signed_of(x.dtype))
  return (xs >> s).astype(_signed_of(x.dtype)).view(x.dtype)


def population_count(x):
  """Number of set bits of each element's bit pattern (two's complement for signed types)."""
  x = np.asarray(x)
  if x.dtype in _INT4:
    return _int4_bits("popcnt", x)
  return np.bitwise_count(x.view(_unsigned_of(x.dtype))).astype(x.dtype)


def count_leading_zeros(x):
  """Number of leading zero bits of each element's bit pattern (``bitwidth`` for 0)."""
  x = np.asarray(x)
  if x.dtype in _INT4:
    return _int4_bits("clz", x)
  bits = bitwidth(x.dtype)
  v = x.view(_unsigned_of(x.dtype)).astype(np.uint64)
  length = np.zeros(x.shape, np.int64)
  for s in (32, 16, 8, 4, 2, 1):
    if s >= bits:
      continue
    high = (v >> np.uint64(s)) != 0
    length += np.where(high, s, 0)
    v = np.where(high, v >> np.uint64(s), v)
  length += (v != 0)
  return (bits - length).astype(x.dtype)


@_ignore_fp_errors
def logistic(x):
  """``1 / (1 + exp(-x))`` in ``x``'s (compute) type."""
  x = np.asarray(x)
  one = np.ones((), x.dtype)
  return (one / (one + np.exp(-x))).astype(x.dtype)


_erf_f64 = np.frompyfunc(math.erf, 1, 1)
_erfc_f64 = np.frompyfunc(math.erfc, 1, 1)


def _lgamma_scalar(v: float) -> float:
  try:
    return math.lgamma(v)
  except ValueError:  # poles at 0, -1, -2, ...
    return math.inf


_lgamma_f64 = np.frompyfunc(_lgamma_scalar, 1, 1)


def erf(x):
  """Error function; evaluated in float64 and rounded to ``x``'s type."""
  x = np.asarray(x)
  return np.asarray(_erf_f64(x.astype(np.float64)), np.float64).astype(x.dtype)


def erfc(x):
  """Complementary error function 1 - erf(x), accurate in relative terms in the tail (its own
  evaluation, not 1 - erf); float64, rounded to ``x``'s type."""
  x = np.asarray(x)
  return np.asarray(_erfc_f64(x.astype(np.float64)), np.float64).astype(x.dtype)


@_ignore_fp_errors
def log1p(x):
  """log(1 + x); for complex x accurate near 0 too (NumPy forms 1 + x first, which loses
  small x): the real part is 0.5 * log1p(x.re * (2 + x.re) + x.im**2) (log|1 + x| where that
  would overflow), the imaginary part atan2(x.im, 1 + x.re); in float64 for complex64."""
  x = np.asarray(x)
  if not np.iscomplexobj(x):
    return np.log1p(x)
  z = x.astype(np.complex128)
  re, im = z.real, z.imag
  big = np.maximum(np.abs(re), np.abs(im)) > 1e150
  small_re = 0.5 * np.log1p(np.where(big, 0.0, re * (2.0 + re) + im * im))
  out_re = np.where(big, np.log(np.abs(np.where(big, z, 0.0) + 1.0)), small_re)
  return (out_re + 1j * np.arctan2(im, 1.0 + re)).astype(x.dtype)


@_ignore_fp_errors
def erf_inv(x):
  """Inverse error function on (-1, 1); +-inf at +-1 and NaN outside. Float64 Newton steps from
  Winitzki's closed-form start, on erfc near the tails to keep the precision."""
  x = np.asarray(x)
  v = x.astype(np.float64)
  a = 0.147
  ln = np.log1p(-v * v)
  t = 2.0 / (math.pi * a) + ln / 2.0
  y = np.copysign(np.sqrt(np.sqrt(t * t - ln / a) - t), v)
  two_over_sqrt_pi = 2.0 / math.sqrt(math.pi)
  av = np.abs(v)
  ay = np.abs(y)
  for _ in range(4):
    # Newton on erfc(|y|) = 1 - |v| (exact for |v| >= 0.5), and on erf otherwise.
    deriv = two_over_sqrt_pi * np.exp(-ay * ay)
    ok = np.isfinite(ay) & (deriv > 0)
    safe = np.where(ok, ay, 0.0)
    tail = av >= 0.5
    resid = np.where(tail, -(np.asarray(_erfc_f64(safe), np.float64) - (1.0 - av)),
                     np.asarray(_erf_f64(safe), np.float64) - av)
    ay = np.where(ok, ay - resid / np.where(ok, deriv, 1.0), ay)
  y = np.copysign(ay, v)
  y = np.where(av == 1.0, np.copysign(np.inf, v), y)
  y = np.where((av > 1.0) | np.isnan(v), np.nan, y)
  y = np.where(v == 0.0, v, y)
  return y.astype(x.dtype)


def lgamma(x):
  """log|Gamma(x)|; +inf at the poles. Float64, rounded to ``x``'s type."""
  x = np.asarray(x)
  return np.asarray(_lgamma_f64(x.astype(np.float64)), np.float64).astype(x.dtype)


@_ignore_fp_errors
def digamma(x):
  """The digamma function psi(x) = d/dx log Gamma(x); NaN at 0 and the negative integers.
  Float64: reflection below 1/2, recurrence up to 10, then the asymptotic series to its z^-14
  term (truncated at z^-10 it was 2e-14 off, 1e-12 relative near the zero x0 = 1.4616...); the
  recurrence's terms are summed with their rounding errors (Neumaier), so that the absolute
  error stays near an ulp of the largest term, as the compiled kernel's."""
  x = np.asarray(x)
  v = x.astype(np.float64)
  pole = (v <= 0) & (v == np.floor(v))
  reflect = v < 0.5
  z = np.where(reflect, 1.0 - v, v)
  acc = np.zeros_like(z)
  comp = np.zeros_like(z)
  for _ in range(10):
    small = z < 10.0
    term = np.where(small, -1.0 / np.where(small, z, 1.0), 0.0)
    t = acc + term
    comp += np.where(np.abs(acc) >= np.abs(term), (acc - t) + term, (term - t) + acc)
    acc = t
    z = np.where(small, z + 1.0, z)
  zi2 = 1.0 / (z * z)
  tail = zi2 * (1 / 12 - zi2 * (1 / 120 - zi2 * (1 / 252 - zi2 * (1 / 240 - zi2 * (
      1 / 132 - zi2 * (691 / 32760 - zi2 * (1 / 12)))))))
  series = np.log(z) - (0.5 / z + tail)
  res = acc + (series + comp)
  # psi(1 - x) - psi(x) = pi / tan(pi x); reduce pi x to (-pi/2, pi/2] for accuracy.
  r = v - np.round(v)
  refl = math.pi / np.tan(math.pi * r)
  res = np.where(reflect, res - refl, res)
  res = np.where(pole | np.isnan(v) | (v == -np.inf), np.nan, res)
  res = np.where(v == np.inf, np.inf, res)
  return res.astype(x.dtype)


class MinMax:
  """XLA's ``maximum``/``minimum`` as a ufunc-like object (call, ``reduce``, ``at``).

  Floats follow IEEE 754-2019 maximum/minimum: a NaN operand gives NaN, and +0 is greater
  than -0 (``max(+0, -0) == max(-0, +0) == +0``, ``min`` of them ``-0``), the same in either
  operand order; NumPy's ufuncs return one operand at such a tie by position.  Complex numbers
  compare lexicographically (real parts, then imaginary parts at equal real parts), and the
  first operand is returned where that comparison holds, else the second (so a NaN in the first
  gives the second), as JAX lowers complex max/min.  Integers and bools: NumPy's ufunc."""

  def __init__(self, ufunc, greater: bool):
    self.ufunc, self.greater = ufunc, greater
    self.__name__ = ufunc.__name__
    # at a zero result, whether the -0 wins: for max only when every operand has its sign bit
    # set (all are <= 0 there, a +0 among them wins); for min when any has
    self._neg_zero = np.logical_and if greater else np.logical_or

  def __repr__(self):
    return f"rops.{self.__name__}"

  nin, nout = 2, 1

  def resolve_dtypes(self, dtypes):
    return self.ufunc.resolve_dtypes(dtypes)

  def __call__(self, x, y, out=None):
    """``out``: an array the result is written to (as a ufunc's ``out``), and returned."""
    r = self.ufunc(x, y)        # (the ufunc first: an eager max of small operands stays cheap)
    kind = r.dtype.kind
    if kind == "c":
      r = self._complex(np.asarray(x), np.asarray(y))
    elif (kind == "f" or (kind == "V" and is_float(r.dtype))) and \
        np.count_nonzero(r) != np.size(r):     # (a zero somewhere: the cheapest test)
      zero = r == 0
      neg = self._neg_zero(np.signbit(x), np.signbit(y))
      r = np.where(zero, np.where(neg, -0.0, 0.0).astype(r.dtype), r)
    if type(r) is not np.ndarray:
      r = np.asarray(r)
    if out is not None:
      out[...] = r
      return out
    return r

  def _complex(self, x, y):
    rx, ry = np.real(x), np.real(y)
    cmp = np.greater if self.greater else np.less
    with np.errstate(invalid="ignore"):
      which = np.where(rx == ry, cmp(np.imag(x), np.imag(y)), cmp(rx, ry))
    return np.where(which, x, y)

  def reduce(self, x, axis=0, dtype=None, **kw):
    """As ``ufunc.reduce`` (``axis`` an int or a tuple, ``initial`` too)."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
      return self._complex_reduce(x, axis, kw.get("initial"))
    r = np.asarray(self.ufunc.reduce(x, axis=axis, dtype=dtype, **kw))
    if not is_float(x.dtype):
      return r
    zero = r == 0
    if zero.any():
      neg = self._neg_zero.reduce(np.signbit(x), axis=axis)
      if kw.get("initial") is not None:
        neg = self._neg_zero(neg, np.signbit(kw["initial"]))
      r = np.where(zero, np.where(neg, -0.0, 0.0).astype(r.dtype), r)
    return r

  def accumulate(self, x, axis=0, dtype=None):
    """As ``ufunc.accumulate``."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
      out = np.moveaxis(np.array(x, copy=True), axis, 0)
      for k in range(1, out.shape[0]):
        out[k] = self._complex(out[k - 1], out[k])
      return np.moveaxis(out, 0, axis)
    r = np.asarray(self.ufunc.accumulate(x, axis=axis, dtype=dtype))
    if not is_float(x.dtype):
      return r
    zero = r == 0
    if zero.any():
      neg = self._neg_zero.accumulate(np.signbit(x), axis=axis)
      r = np.where(zero, np.where(neg, -0.0, 0.0).astype(r.dtype), r)
    return r

  def _complex_reduce(self, x, axis, initial):
    axes = tuple(range(x.ndim)) if axis is None else \
        tuple(a % x.ndim for a in ((axis,) if np.ndim(axis) == 0 else axis))
    kept = [d for d in range(x.ndim) if d not in axes]
    n = int(np.prod([x.shape[d] for d in axes]))  # explicit: -1 is ambiguous for a 0-size kept dim
    flat = x.transpose(kept + list(axes)).reshape([x.shape[d] for d in kept] + [n])
    acc = flat[..., 0] if initial is None else np.full(flat.shape[:-1], initial, x.dtype)
    for k in range(0 if initial is not None else 1, flat.shape[-1]):
      acc = self._complex(acc, flat[..., k])
    return acc

  def at(self, result, index, values):
    """In place, as ``ufunc.at``: every value combined into its target of ``result``."""
    values = np.asarray(values)
    if result.dtype.kind == "c":
      for pos in range(values.size if values.ndim else 1):
        idx = tuple(int(np.asarray(g).reshape(-1)[pos]) for g in index)
        result[idx] = self._complex(result[idx], values.reshape(-1)[pos])
      return
    if not is_float(result.dtype):
      self.ufunc.at(result, index, values)
      return
    neg = np.signbit(result)
    self._neg_zero.at(neg, index, np.signbit(values))
    self.ufunc.at(result, index, values)
    zero = result == 0
    result[zero] = np.where(neg[zero], -0.0, 0.0).astype(result.dtype)


maximum = MinMax(np.maximum, greater=True)
minimum = MinMax(np.minimum, greater=False)


def clamp(lo, x, hi):
  """XLA clamp: ``min(max(x, lo), hi)`` (NaN-propagating, +0 above -0); ``lo``/``hi`` may be
  scalars."""
  with np.errstate(all="ignore"):
    return minimum(maximum(x, lo), hi).astype(np.asarray(x).dtype)


# ---------------------------------------------------------------------------------------------
# comparison and conversion
# ---------------------------------------------------------------------------------------------

def total_order_key(x):
  """Integer keys ordering floats totally: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN.
  Integers and booleans are returned as (unchanged / uint8) keys."""
  x = np.asarray(x)
  if is_bool(x.dtype):
    return x.astype(np.uint8)
  if not is_float(x.dtype):
    return x
  bits = x.view(_signed_of(x.dtype))
  flip = np.array(np.iinfo(bits.dtype).max, bits.dtype)
  return np.where(bits < 0, bits ^ flip, bits)


_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


def compare(x, y, *, direction: str, total_order: bool = False):
  """Elementwise comparison (IEEE: any comparison with NaN is False except NE), or, with
  ``total_order``, the comparison of ``total_order_key``s (XLA's TOTALORDER)."""
  x, y = np.asarray(x), np.asarray(y)
  if total_order and is_float(x.dtype):
    x, y = total_order_key(x), total_order_key(y)
  with np.errstate(invalid="ignore"):
    return np.asarray(_COMPARE[direction](x, y), np.bool_)


@_ignore_fp_errors
def _indefinite_casts() -> frozenset:
  """The integer dtypes to which NumPy's cast of NaN and of out-of-range float32/float64 values
  gives the dtype's minimum on this machine (x86's cvtt instructions do; a machine whose casts
  saturate or wrap is not listed, and its conversions check the range first)."""
  bad = [np.nan, 3e9, -3e9, 1e19, -1e19, np.inf, -np.inf]
  out = []
  for dt in (np.int32, np.int64):
    info = np.iinfo(dt)
    ok = True
    for src in (np.float32, np.float64):
      for n in (1, 7, 64):       # (scalar and vector loops)
        v = np.array(bad * n, src)
        keep = np.abs(np.nan_to_num(v, nan=np.inf)) >= float(info.max) + 1.0
        with np.errstate(all="ignore"):
          ok &= bool(np.all(v.astype(dt)[keep] == info.min))
    if ok:
      out.append(np.dtype(dt))
  return frozenset(out)


_INDEFINITE_CASTS = _indefinite_casts()


def convert_element_type(x, new_dtype):
  """XLA convert: to bool is ``x != 0``; float to int truncates and saturates (NaN -> 0);
  complex to real keeps the real part; everything else is NumPy's cast."""
  x = np.asarray(x)
  new_dtype = np.dtype(new_dtype)
  src = x.dtype
  if src == new_dtype:
    return x.copy()
  if is_bool(new_dtype):
    return x != 0
  if is_complex(src) and not is_complex(new_dtype):
    x = x.real
    src = x.dtype
  if is_integer(new_dtype) and (is_float(src)):
    info = ml_dtypes.iinfo(new_dtype)
    hi = float(info.max) + 1.0  # a power of two, exactly representable
    lo = float(info.min)
    if src.kind == "f" and x.size and new_dtype in _INDEFINITE_CASTS:
      # C's cast truncates toward 0; this machine's casts give the type's minimum (x86's
      # "integer indefinite") for NaN and values out of range: one pass to cast and one to look
      # for that minimum, where checking the range first would take two
      out = quietly(x.astype, new_dtype)
      if out.min() != info.min:
        return out
    elif src.kind == "f" and x.size and lo <= x.min() and x.max() < hi:
      # every value in range (no NaN: it fails the comparisons): C's cast truncates toward 0
      return x.astype(new_dtype)
    v = x.astype(np.float64)
    t = np.trunc(np.where(np.isnan(v), 0.0, v))
    inside = (t >= lo) & (t < hi)
    out = np.where(inside, t, 0.0).astype(new_dtype)
    out = np.where(t >= hi, info.max, out)
    out = np.where(t < lo, info.min, out)
    return out.astype(new_dtype)
  subbyte = _SUBBYTE_SIGNED | _SUBBYTE_UNSIGNED
  if is_integer(src) and is_integer(new_dtype) and (src in subbyte or new_dtype in subbyte):
    # (ml_dtypes casts between its narrow integers and the others only through a wide one)
    info = ml_dtypes.iinfo(new_dtype)
    span = 1 << int(info.bits)
    v = x.astype(np.int64)
    return ((v - int(info.min)) % span + int(info.min)).astype(new_dtype)   # wrapped
  if src == np.float64 and new_dtype.itemsize == 1 and is_float(new_dtype):
    # float64 -> 8-bit float: rounded once, as JAX does (ml_dtypes' cast goes through float32,
    # rounding twice: 400.00000000004 became 384 in float8_e4m3fn, not 416)
    x = _round_to_odd_f32(x)
  return x.astype(new_dtype)


def _round_to_odd_f32(x):
  """float64 -> float32 rounded to odd (toward zero, the last bit set where inexact): rounding
  that to a type of 21 mantissa bits or fewer is the correctly rounded conversion of ``x``."""
  t = np.asarray(x.astype(np.float32))
  bits = t.view(np.int32).copy()
  with np.errstate(invalid="ignore"):
    back = t.astype(np.float64)
    bits[np.abs(back) > np.abs(x)] -= 1
    bits[(back != x) & ~np.isnan(x)] |= 1
  return bits.view(np.float32)


def bitcast_convert_type(x, new_dtype):
  """Reinterpret the bits. Same width: same shape. To a narrower type a trailing dimension of
  size ``ratio`` is added; to a wider type the trailing dimension (of size ``ratio``) is removed.
  Little endian, as XLA; sub-byte types (int4, float4_e2m1fn, ...) count their own bits, packed
  low bits first."""
  from ourjax.dtypes import bit_width
  x = _contiguous(x)
  new_dtype = np.dtype(new_dtype)
  src, dst = bit_width(x.dtype), bit_width(new_dtype)
  if src % 8 == 0 and dst % 8 == 0:
    if src == dst:
      return x.view(new_dtype).copy()
    if src > dst:
      return x.reshape(-1).view(new_dtype).reshape(x.shape + (src // dst,)).copy()
    if not x.shape or x.shape[-1] != dst // src:
      raise ValueError(f"bitcast_convert_type: last dimension must be {dst // src}, got shape "
                       f"{x.shape}")
    return x.reshape(-1).view(new_dtype).reshape(x.shape[:-1]).copy()
  if src > 64:      # (a 128-bit complex to a sub-byte type: through its bytes)
    parts = bitcast_convert_type(bitcast_convert_type(x, np.uint8), new_dtype)
    return parts.reshape(x.shape + (src // dst,))
  if dst > 64:
    if not x.shape or x.shape[-1] != dst // src:
      raise ValueError(f"bitcast_convert_type: last dimension must be {dst // src}, got shape "
                       f"{x.shape}")
    byte_parts = x.reshape(x.shape[:-1] + (dst // 8, 8 // src))
    return bitcast_convert_type(bitcast_convert_type(byte_parts, np.uint8), new_dtype)
  # a sub-byte side: through the unsigned bit patterns (<= 64 bits each), regrouped
  bits = _bit_patterns(x, src)
  if src == dst:
    return _from_bit_patterns(bits, new_dtype, dst)
  if src > dst:
    ratio = src // dst
    shifts = np.arange(ratio, dtype=np.uint64) * np.uint64(dst)
    parts = (bits[..., None] >> shifts) & np.uint64((1 << dst) - 1)
    return _from_bit_patterns(parts, new_dtype, dst)
  ratio = dst // src
  if not x.shape or x.shape[-1] != ratio:
    raise ValueError(f"bitcast_convert_type: last dimension must be {ratio}, got shape {x.shape}")
  shifts = np.arange(ratio, dtype=np.uint64) * np.uint64(src)
  return _from_bit_patterns(np.bitwise_or.reduce(bits << shifts, axis=-1), new_dtype, dst)


def _bit_patterns(x, width):
  """The elements' bits as uint64 (sub-byte types keep their low ``width`` bits)."""
  if width % 8 == 0:
    return x.view(f"u{width // 8}").astype(np.uint64)
  return x.view(np.uint8).astype(np.uint64) & np.uint64((1 << width) - 1)


def _from_bit_patterns(bits, dtype, width):
  if width % 8 == 0:
    return bits.astype(f"u{width // 8}").view(dtype)
  return bits.astype(np.uint8).view(dtype)


# ---------------------------------------------------------------------------------------------
# structural
# ---------------------------------------------------------------------------------------------

def broadcast_in_dim(x, shape, broadcast_dimensions):
  """Operand dimension i becomes output dimension ``broadcast_dimensions[i]`` (size equal, or 1
  which is repeated); the other output dimensions repeat the operand."""
  x = np.asarray(x)
  shape = tuple(shape)
  expanded = [1] * len(shape)
  for i, d in enumerate(broadcast_dimensions):
    expanded[d] = x.shape[i]
  return _contiguous(np.broadcast_to(x.reshape(expanded), shape))


def iota(dtype, shape, dimension):
  """Counts 0, 1, ... along ``dimension`` of an array of ``shape``."""
  shape = tuple(shape)
  r = np.arange(shape[dimension]).astype(dtype)
  return broadcast_in_dim(r, shape, (dimension,))


def pad(x, padding_value, padding_config):
  """``padding_config`` is one ``(low, high, interior)`` per dimension. ``interior`` elements go
  between neighbours; negative ``low``/``high`` remove elements from that edge."""
  x = np.asarray(x)
  padding_value = np.asarray(padding_value, x.dtype)
  if len(padding_config) != x.ndim:
    raise ValueError(f"pad: {len(padding_config)} padding entries for rank {x.ndim}")
  grown_shape, place, crop = [], [], []
  for n, (lo, hi, interior) in zip(x.shape, padding_config):
    if interior < 0:
      raise ValueError("pad: interior padding must be >= 0")
    core = n + max(n - 1, 0) * interior
    total = max(lo, 0) + core + max(hi, 0)
    grown_shape.append(total)
    place.append(builtins.slice(max(lo, 0), max(lo, 0) + core, interior + 1))
    size = lo + core + hi
    if size < 0:
      raise ValueError(f"pad: negative output size {size}")
    start = -min(lo, 0)
    crop.append(builtins.slice(start, start + size))
  out = np.full(grown_shape, padding_value, x.dtype)
  out[tuple(place)] = x
  return _contiguous(out[tuple(crop)])


def slice(x, start_indices, limit_indices, strides=None):  # noqa: A001  (lax's name)
  """Static strided slice ``x[start:limit:stride]`` per dimension."""
  x = np.asarray(x)
  strides = strides or (1,) * x.ndim
  idx = tuple(builtins.slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))
  return _contiguous(x[idx])


def _clamped_starts(start_indices, shape, sizes):
  out = []
  for s, n, k in zip(start_indices, shape, sizes):
    s = int(np.asarray(s).astype(np.int64))
    out.append(min(max(s, 0), n - k))
  return out


def dynamic_slice(x, start_indices, slice_sizes):
  """``x[s:s+size]`` per dimension with each start clamped to ``[0, dim - size]``."""
  x = np.asarray(x)
  starts = _clamped_starts(start_indices, x.shape, slice_sizes)
  idx = tuple(builtins.slice(s, s + k) for s, k in zip(starts, slice_sizes))
  return _contiguous(x[idx])


def dynamic_update_slice(x, update, start_indices):
  """A copy of ``x`` with ``update`` written at the (clamped, as ``dynamic_slice``) starts."""
  x = np.array(x, copy=True)
  update = np.asarray(update, x.dtype)
  starts = _clamped_starts(start_indices, x.shape, update.shape)
  idx = tuple(builtins.slice(s, s + k) for s, k in zip(starts, update.shape))
  x[idx] = update
  return x


def concatenate(operands, dimension):
  return _contiguous(np.concatenate([np.asarray(o) for o in operands], axis=dimension))


# (the ops over whole arrays and windows: a module of their own, re-exported here; imported
# last, as it builds on the functions above)
from ourjax.backends.reference_ops_array import (  # noqa: E402,F401
    _as_tuple_combine, _full_starts, _lax_sort_keys, _window_output_size, accumulation_dtype,
    conv_general_dilated, dot_general, fft, gather, reduce, reduce_window, scatter, sort,
    sort_by_comparator, tuple_combine)
