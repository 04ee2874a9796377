"""rsqrt, cbrt, erf, erfc, erf_inv, lgamma and digamma."""
from __future__ import annotations

import math as _pymath

from ourjax.backends.llvm.math.base import (_M, coefficients)
from ourjax.backends.llvm.math.explog import (_exp_bounds, _exp_finite, _exp_pair, _log_combine,
                                              _log_dd, _log_split)
from ourjax.backends.llvm.math.trig import (_PI_HI, _PI_LO, _div_pairs, _sincos_kernels)

_co = coefficients(globals())

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
  # beyond 6 (f32: 4) erf rounds to +-1 (erfc < 2^-55, 2^-26): erfc evaluated there instead of
  # at large |x|, where exp(-x^2) underflows (a microcode assist per instruction, see
  # explog._underflow)
  rb = m.copysign(m.sub(m.c(1.0), _erfc_big(m, m.min_(ax, m.c(6.0 if m.is64 else 4.0)))), x)
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
  # where erfc(|x|) rounds to 0 (beyond 10.1 for float32, 27.3 for float64; erfc(x) is then 0
  # or 2) 0 is selected and the evaluation gets 1 instead: its underflowing steps would each
  # cost a microcode assist (and for float32, a tiny double's narrowing too; see
  # explog._underflow)
  zero = m.gt(ax, m.c(27.3 if (tag or m.tag) == "f64" else 10.1))
  big = m.select(zero, m.c(0.0), _erfc_big(m, m.select(zero, m.c(1.0), ax), tag))
  rb = m.select(m.lt(x, m.c(0.0)), m.sub(m.c(2.0), big), big)
  res = m.select(m.lt(ax, m.c(0.84375)), rs, rb)
  return m.select(m.isnan(x), x, res)



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
