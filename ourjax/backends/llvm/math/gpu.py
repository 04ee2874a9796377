"""The float32 GPU variants (used when the module targets NVPTX; see the package docstring)
and the slow-path machinery (``collect_slow_paths``)."""
from __future__ import annotations

import contextlib as _contextlib
import math as _pymath

import llvmlite.ir as ir

from ourjax.backends.llvm.math.base import (_LN2_HI_32, _LN2_LO_32, _LOG2E, _M, _SHIFT_32, _hex,
                                            _any_lane, _ln2_parts)
from ourjax.backends.llvm.math.explog import (_log_specials, _log_split)
from ourjax.backends.llvm.math.hyperbolic import TANH_F32
from ourjax.backends.llvm.math.trig import COS_F32, SIN_F32, _TWO_OVER_PI, _sin_cos
from ourjax.backends.llvm.math.special import ERF_F32

# ---------------------------------------------------------------------------------------------
# GPU float32 variants (see the package docstring: used when the module targets NVPTX)
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
    ab.ret(_sin_cos(name)(_M(ab, x.type), acc.args[0]))
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
