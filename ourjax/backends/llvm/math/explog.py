"""exp, exp2, expm1; log, log2, log10, log1p; pow (methods: the package docstring)."""
from __future__ import annotations

import math as _pymath

from ourjax.backends.llvm.math.base import (_LN2, _LN2_HI_32, _LN2_HI_64, _LN2_LO_32, _LN2_LO_64,
                                            _LOG2E, _M, _SHIFT_32, _SHIFT_64, _f32, _hex,
                                            _ln2_parts, coefficients)

_co = coefficients(globals())

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


def _exp_pair(m: _M, x, extra_scale=0, tag=None, normal=False):
  """exp(x) * 2**(-extra_scale) as an unrounded pair (hi, lo); x clamped to the finite range.
  Where the result is a denormal both parts are rounded (the pair then carries no extra bits).
  ``normal``: the caller's x keeps 2^n in the normal range (|n| < 126 for float32), so one
  multiply by 2^n scales each part (exactly, as the two steps of ``_M.scale`` would)."""
  _, ni, r_hi, r_lo = _exp_reduce(m, x)
  u, tail = _exp_poly(m, r_hi, r_lo, tag)
  hi, lo = m.fast_two_sum(u, tail)
  if extra_scale:
    ni = m.isub(ni, m.ci(extra_scale))
  if normal:
    s = m.pow2i(ni)
    return m.mul(hi, s), m.mul(lo, s)
  return m.scale(hi, ni), m.scale(lo, ni)


def _exp_bounds(m: _M):
  # below LO the result rounds to 0, above HI it overflows; inputs are clamped to [LO, HI]
  return (-104.0, 89.0) if not m.is64 else (-746.0, 710.0)


def _underflow(m: _M, x, lo):
  """(x < lo or NaN, x with 0 in those lanes): where a result is known to round to 0 the
  evaluation gets a harmless argument instead, and the caller selects 0.  On x86 every
  instruction that produces a denormal or underflows to 0 costs a microcode assist (~100+
  cycles; whole-vector), so evaluating exp(-1e9) (a masked softmax) to get 0 took 10x longer
  than a normal exp.  Results that are denormal by themselves still pay it."""
  under = m.b.fcmp_unordered("<", x, m.c(lo))
  return under, m.select(under, m.c(0.0), x)


def _exp(m: _M, x):
  lo, hi = _exp_bounds(m)
  under, xs = _underflow(m, x, lo)
  res = m.select(under, m.c(0.0), _exp_finite(m, m.min_(xs, m.c(hi))))
  return m.select(m.isnan(x), x, res)


def _exp2(m: _M, x):
  lo, hi = _exp_bounds(m)
  lo, hi = lo * _LOG2E, hi * _LOG2E
  under, xs = _underflow(m, x, lo)
  xc = m.min_(xs, m.c(hi))
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
  res = m.select(under, m.c(0.0), m.scale(p, ni))
  return m.select(m.isnan(x), x, res)


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
  under, ps = _underflow(m, p, lo)
  pc = m.min_(ps, m.c(hi))
  p_lo = m.select(m.eq(pc, p), p_lo, m.c(0.0))
  _, ni, r_hi, r_lo = _exp_reduce(m, pc)
  u, tail = _exp_poly(m, r_hi, m.add(r_lo, p_lo), tag)
  return m.select(under, m.c(0.0), m.scale(m.add(u, tail), ni))


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
    # below -104 the float32 result rounds to 0: 0 in double, not a tiny double whose
    # narrowing underflows (a microcode assist, see _underflow)
    mag = m.narrow(_exp_of_pair(w, w.select(w.lt(pd, w.c(-104.0)), w.c(-_pymath.inf), pd),
                                w.c(0.0), "x32"))
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
