"""sin, cos, tan (Cody-Waite and Payne-Hanek reductions) and atan, atan2, asin, acos."""
from __future__ import annotations

import math as _pymath

import llvmlite.ir as ir

from ourjax.backends.llvm.math.base import (_M, _any_lane, _f32, _hex, coefficients,
                                            targets_gpu)

_co = coefficients(globals())

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


#: float32 sin/cos (CPU): below this |x| the reduction is two FMAs in double
#: (``_sin_cos_f32``).  The reduced argument's error is then under 2^-53 (2|r| + q 2^-53 pi/2)
#: with q < 2^24 2/pi, relative ~2^-52 for every |r| the float32 arguments below reach.
_F32_MEDIUM = 2.0 ** 24

# float32 sin/cos evaluated in double: sin r = r + r^3 SIN(r^2), cos r = 1 + r^2 COS(r^2) on
# |r| <= pi/4, relative errors 2^-37.6 and 2^-33.9 (weighted minimax, Lawson iteration in long
# double, coefficients rounded to double)
SIN_D32 = [-0.16666666641426495, 0.00833332936227925, -0.00019839327136512343,
           2.718237278241088e-06]
COS_D32 = [-0.4999999969195904, 0.04166662007282151, -0.0013886672664406713,
           2.4382721784081794e-05]


def _estrin4(m: _M, z, c):
  """c0 + c1 z + c2 z^2 + c3 z^3 in two steps of latency (Estrin) instead of three (Horner)."""
  return m.fma(m.mul(z, z), m.fma(m.c(c[3]), z, m.c(c[2])), m.fma(m.c(c[1]), z, m.c(c[0])))


def _sin_d32(m: _M, r):
  z = m.mul(r, r)
  return m.fma(m.mul(r, z), _estrin4(m, z, SIN_D32), r)


def _cos_d32(m: _M, r):
  z = m.mul(r, r)
  return m.fma(z, _estrin4(m, z, COS_D32), m.c(1.0))


def _sin_cos_f32(m: _M, x, kind):
  """float32 sin/cos on the CPU, evaluated in double and rounded once (max error 0.5000001 ulp,
  every float32 argument checked below 2^25, a sample beyond): ``_trig_reduce``'s reduction
  (pi/2 in three parts, Payne-Hanek beyond 2^48) and short double polynomials.  The
  out-of-line scalar version (``emitter.MathLib``: what runs where the work is scalar, e.g. a
  while loop's carry, and where latency counts) branches instead: |x| < pi/4 needs no
  reduction (as glibc's sinf), |x| < ``_F32_MEDIUM`` takes two FMAs, only larger or special
  arguments the full reduction (a scalar sin's latency: ~90 cycles before, ~25 on |x| < pi/4)."""
  w = m.wide()
  b = m.b
  outlined = getattr(b.function, "ojx_outlined_math", False)

  def value(r, jf):
    s, c = _sin_d32(w, r), _cos_d32(w, r)
    j = b.fptosi(jf, w.ity)
    odd = b.icmp_signed("!=", w.iand(j, 1), w.ci(0))
    if kind == "sin":
      v = w.flip_sign(w.select(odd, c, s), b.icmp_signed("!=", w.iand(j, 2), w.ci(0)))
    else:
      v = w.flip_sign(w.select(odd, s, c),
                      b.icmp_signed("!=", w.iand(w.iadd(j, w.ci(1)), 2), w.ci(0)))
    res = m.narrow(v)
    if kind == "sin":
      res = m.xorsign(res, x)
    res = m.select(m.isfinite(x), res, m.c(_pymath.nan))
    return m.select(m.isnan(x), x, res)

  def reduced(ax):
    r_hi, r_lo, jf = _trig_reduce(w, ax)
    return w.add(r_hi, r_lo), jf
  if m.lanes or not outlined:
    return value(*reduced(w.ext(m.abs(x))))
  xd = w.ext(x)
  ax = w.abs(xd)
  small_blk = b.append_basic_block("sincos.small")
  reduce_blk = b.append_basic_block("sincos.reduce")
  medium_blk = b.append_basic_block("sincos.medium")
  full_blk = b.append_basic_block("sincos.full")
  kern_blk = b.append_basic_block("sincos.kernels")
  done = b.append_basic_block("sincos.done")
  b.cbranch(w.lt(ax, w.c(_PIO4_HI)), small_blk, reduce_blk)
  b.position_at_end(small_blk)                   # |x| < pi/4: r = x (sin odd, cos even)
  res_small = m.narrow(_sin_d32(w, xd) if kind == "sin" else _cos_d32(w, xd))
  b.branch(done)
  b.position_at_end(reduce_blk)
  b.cbranch(w.lt(ax, w.c(_F32_MEDIUM)), medium_blk, full_blk)
  b.position_at_end(medium_blk)
  q = w.rint(w.mul(ax, w.c(_TWO_OVER_PI)))
  r_med = w.fma(w.neg(q), w.c(_PIO2_2), w.fma(w.neg(q), w.c(_PIO2_1), ax))
  j_med = w.sub(q, w.mul(w.c(4.0), w.floor(w.mul(q, w.c(0.25)))))
  b.branch(kern_blk)
  b.position_at_end(full_blk)
  r_full, j_full = reduced(ax)
  full_end = b.block
  b.branch(kern_blk)
  b.position_at_end(kern_blk)
  r, jf = b.phi(w.ty), b.phi(w.ty)
  for phi, med, fu in ((r, r_med, r_full), (jf, j_med, j_full)):
    phi.add_incoming(med, medium_blk)
    phi.add_incoming(fu, full_end)
  res_red = value(r, jf)
  red_end = b.block
  b.branch(done)
  b.position_at_end(done)
  res = b.phi(m.ty)
  res.add_incoming(res_small, small_blk)
  res.add_incoming(res_red, red_end)
  return res


def _sin_cos(kind):
  def emit(m: _M, x):
    if not m.is64 and not targets_gpu(m.b):
      return _sin_cos_f32(m, x, kind)
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
