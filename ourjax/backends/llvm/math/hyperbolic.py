"""tanh, logistic, sinh, cosh and the inverse hyperbolic functions asinh, acosh, atanh."""
from __future__ import annotations

import math as _pymath

from ourjax.backends.llvm.math.base import (_M, coefficients)
from ourjax.backends.llvm.math.explog import (_exp_bounds, _exp_pair, _log1p_series,
                                              _log1p_series_max, _log_combine, _log_split)

_co = coefficients(globals())

# tanh(x) = x + x*z*TANH(z), z = x^2, |x| <= 0.55
TANH_F32 = [-0.33333316445350647, 0.133325457572937, -0.05384785309433937, 0.02105250582098961,
            -0.00624606478959322]
TANH_F64 = [-0.333333333333333, 0.13333333333326625, -0.053968253963775324, 0.021869488386450985,
            -0.008863232612591206, 0.0035920921497606425, -0.001455543631696702,
            0.0005884477336858215, -0.00023338977732525565, 8.332807181575685e-05,
            -1.9501746709500566e-05]


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
  e_hi, e_lo = _exp_pair(m, m.add(axc, axc), normal=True)      # (2^n <= 2^73)
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
  # exp(-|x|) in (0, 1], its argument kept where no step underflows (each underflow is a
  # microcode assist, see explog._underflow): for x > 0 beyond 40 (f32: 20) the result rounds
  # to 1 from any e below 2^-55 (2^-26); for x < lo it is 0 (selected below)
  pos_cap = m.c(-40.0 if m.is64 else -20.0)
  under = m.lt(x, m.c(lo))
  arg = m.select(m.lt(x, m.c(0.0)), m.neg(ax), m.max_(m.neg(ax), pos_cap))
  e_hi, e_lo = _exp_pair(m, m.select(under, m.c(0.0), arg))
  d, d_lo = m.fast_two_sum(m.c(1.0), e_hi)
  d_lo = m.add(d_lo, e_lo)
  r = m.div(m.c(1.0), d)
  r_lo = m.mul(m.fma(m.neg(r), d_lo, m.fma(m.neg(r), d, m.c(1.0))), r)
  pos = m.add(r, r_lo)
  neg = m.fma(e_hi, r, m.fma(e_hi, r_lo, m.mul(e_lo, r)))
  res = m.select(m.lt(x, m.c(0.0)), m.select(under, m.c(0.0), neg), pos)
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
