"""``lax`` special functions as elementwise primitives, each followed by its rules:
``igamma`` / ``igammac`` (regularized incomplete gamma functions P(a, x), Q(a, x)),
``igamma_grad_a`` (dP/da), ``betainc`` (regularized incomplete beta function I_x(a, b), JAX's
``regularized_incomplete_beta``) and ``bessel_i0e`` / ``bessel_i1e`` (exp(-|x|) I_0(x),
exp(-|x|) I_1(x)).

Each is one lax composition evaluated in float64 whatever the operands' float dtype (the series
and continued fractions lose a few ulps on the way) and rounded once, so float32 results are
correctly rounded or one ulp off: eagerly the composition runs op by op under x64 (the NumPy
implementation), under jit it is traced in float64 and inlined (like JAX's ``lower_fun``).
Iteration counts are fixed (``fori_loop``) and every branch is evaluated and the right one
selected.  Derivatives: closed forms in x (the Bessel functions' in terms of each other, so
every order works), ``igamma_grad_a`` for a (a central difference of the float64 expansion, good
to ~1e-9 relative), and for betainc's a and b the same central difference (no primitive of its
own: JAX has none either).

Algorithms: the power series of P(a, x) for x < a + 1 and the Legendre continued fraction of
Q(a, x) otherwise (Lentz's method); the continued fraction of I_x(a, b) on the side of
x < (a + 1) / (a + b + 2), using I_x(a, b) = 1 - I_{1-x}(b, a) on the other; the power series of
I_0, I_1 up to |x| = 30 and their asymptotic expansions beyond.
"""
from __future__ import annotations

import numpy as np

from ourjax import dtypes
from ourjax.core import Primitive, ShapedArray
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import broadcasting_shape, all_weak

__all__ = ["igamma", "igammac", "igamma_grad_a", "betainc", "regularized_incomplete_beta",
           "bessel_i0e", "bessel_i1e", "igamma_p", "igammac_p", "igamma_grad_a_p",
           "regularized_incomplete_beta_p", "bessel_i0e_p", "bessel_i1e_p"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


_ITERS = 200     # series / continued-fraction terms (convergence in float64 for moderate a, x)


def _fori(n, body, init):
  from ourjax.lax.control_flow import fori_loop
  return fori_loop(0, n, body, init)


_TINY = 1e-300


def _lentz(a_fn, b_fn, b0, n):
  """Modified Lentz evaluation of b0 + a1/(b1 + a2/(b2 + ...)), terms from a_fn(i), b_fn(i)
  (i = 1..n)."""
  jnp = _jnp()

  def fix(v):
    return jnp.where(jnp.abs(v) < _TINY, _TINY, v)

  f0 = fix(b0)

  def body(i, carry):
    f, c, d = carry
    k = (i + 1).astype(np.float64)
    ai, bi = a_fn(k), b_fn(k)
    d = 1 / fix(bi + ai * d)
    c = fix(bi + ai / c)
    return f * c * d, c, d
  f, _, _ = _fori(n, body, (f0, f0, jnp.zeros_like(f0)))
  return f


def _igamma_parts(a, x):
  """(P, Q) for a > 0, x >= 0 finite; each accurate where it is the smaller... both returned
  from one expansion: the series (x < a + 1) or the continued fraction."""
  jnp = _jnp()
  from ourjax.lax import elementwise as ew
  lgam = ew.lgamma(a)
  logpre = a * jnp.log(jnp.where(x > 0, x, 1)) - x - lgam      # log(x^a e^-x / Gamma(a))
  # series: P = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))
  def sbody(i, carry):
    term, total = carry
    term = term * x / (a + (i + 1).astype(np.float64))
    return term, total + term
  _, total = _fori(_ITERS, sbody, (jnp.ones_like(x), jnp.ones_like(x)))
  p_series = jnp.exp(logpre) * total / a
  # continued fraction: Q = x^a e^-x / Gamma(a) * 1 / (x + 1 - a - 1(1 - a)/(x + 3 - a - ...))
  cf = _lentz(lambda k: -k * (k - a), lambda k: x + 2 * k + 1 - a, x + 1 - a, _ITERS)
  q_cf = jnp.exp(logpre) / cf
  use_series = x < a + 1
  p = jnp.where(use_series, p_series, 1 - q_cf)
  q = jnp.where(use_series, 1 - p_series, q_cf)
  p = jnp.where(x == 0, 0.0, p)
  q = jnp.where(x == 0, 1.0, q)
  return p, q


def _igamma_edges(a, x, val, want_p):
  jnp = _jnp()
  bad = jnp.isnan(a) | jnp.isnan(x) | (a <= 0) | (x < 0)
  val = jnp.where(jnp.isinf(x), 1.0 if want_p else 0.0, val)
  val = jnp.where(jnp.isinf(a) & ~jnp.isinf(x), 0.0 if want_p else 1.0, val)
  return jnp.where(bad, jnp.nan, val)


def _igamma_f64(a, x, want_p):
  jnp = _jnp()
  a, x = jnp.broadcast_arrays(a, x)
  xs = jnp.where(jnp.isfinite(x) & (x >= 0), x, 0.0)
  as_ = jnp.where(jnp.isfinite(a) & (a > 0), a, 1.0)
  p, q = _igamma_parts(as_, xs)
  return _igamma_edges(a, x, p if want_p else q, want_p)


def _betainc_cf(a, b, x):
  """I_x(a, b) from its continued fraction (accurate for x < (a + 1) / (a + b + 2))."""
  jnp = _jnp()
  from ourjax.lax import elementwise as ew
  logfront = (ew.lgamma(a + b) - ew.lgamma(a) - ew.lgamma(b)
              + a * jnp.log(x) + b * jnp.log1p(-x))

  # d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
  # d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m));  I = front / a / (1 + d1/(1 + d2/(1 + ...)))
  def coef(k):
    m = jnp.floor(k / 2)
    odd = (k - 2 * m) == 1
    d_odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
    d_even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
    return jnp.where(odd, d_odd, d_even)
  cf = _lentz(coef, lambda k: jnp.ones_like(x), jnp.ones_like(x), _ITERS)
  return jnp.exp(logfront) / (a * cf)


def _betainc_f64(a, b, x):
  jnp = _jnp()
  a, b, x = jnp.broadcast_arrays(a, b, x)
  ok = (a > 0) & (b > 0) & (x >= 0) & (x <= 1)
  inner = (x > 0) & (x < 1) & ok
  xs = jnp.where(inner, x, 0.5)
  as_, bs = jnp.where(ok, a, 1.0), jnp.where(ok, b, 1.0)
  flip = xs > (as_ + 1) / (as_ + bs + 2)
  direct = _betainc_cf(as_, bs, jnp.where(flip, 0.5, xs))
  other = 1 - _betainc_cf(bs, as_, jnp.where(flip, 1 - xs, 0.5))
  val = jnp.where(flip, other, direct)
  val = jnp.where(x == 0, 0.0, jnp.where(x == 1, 1.0, val))
  return jnp.where(ok, val, jnp.nan)


_BESSEL_SWITCH = 30.0


def _bessel_ie(x, nu):
  """exp(-|x|) I_nu(|x|) for nu in (0, 1): the power series up to |x| = 30, the asymptotic
  expansion beyond."""
  jnp = _jnp()
  ax = jnp.abs(x)
  small = jnp.minimum(ax, _BESSEL_SWITCH)
  q = (small / 2) ** 2
  lead = jnp.ones_like(ax) if nu == 0 else small / 2

  def sbody(i, carry):     # term_k = q^k / (k! (k + nu)!)
    term, total = carry
    k = (i + 1).astype(np.float64)
    term = term * q / (k * (k + nu))
    return term, total + term
  _, total = _fori(120, sbody, (jnp.ones_like(ax), jnp.ones_like(ax)))
  series = lead * total * jnp.exp(-small)
  big = jnp.maximum(ax, _BESSEL_SWITCH)
  mu = 4.0 * nu * nu

  def abody(i, carry):     # term_k = term_{k-1} * -(mu - (2k - 1)^2) / (8 k x)
    term, total = carry
    k = (i + 1).astype(np.float64)
    term = -term * (mu - (2 * k - 1) ** 2) / (8 * k * big)
    return term, total + term
  _, asum = _fori(40, abody, (jnp.ones_like(ax), jnp.ones_like(ax)))
  asym = asum / jnp.sqrt(2 * np.pi * big)
  return jnp.where(ax <= _BESSEL_SWITCH, series, asym)


def _i0e_f64(x):
  return _bessel_ie(x, 0)


def _i1e_f64(x):
  return _jnp().sign(x) * _bessel_ie(x, 1)


def _central(fn, args, i):
  """d fn / d args[i] by a central difference in float64 (step 1e-6 relative)."""
  jnp = _jnp()
  h = 1e-6 * jnp.maximum(jnp.abs(args[i]), 1e-3)
  up = list(args)
  dn = list(args)
  up[i], dn[i] = args[i] + h, args[i] - h
  return (fn(*up) - fn(*dn)) / (2 * h)


_F64 = {
    "igamma": lambda a, x: _igamma_f64(a, x, True),
    "igammac": lambda a, x: _igamma_f64(a, x, False),
    "igamma_grad_a": lambda a, x: _central(lambda a, x: _igamma_f64(a, x, True), (a, x), 0),
    "regularized_incomplete_beta": _betainc_f64,
    "betainc_grad_a": lambda a, b, x: _central(_betainc_f64, (a, b, x), 0),
    "betainc_grad_b": lambda a, b, x: _central(_betainc_f64, (a, b, x), 1),
    "bessel_i0e": _i0e_f64,
    "bessel_i1e": _i1e_f64,
}


_JITTED: dict = {}


def _eval_f64(name, *args):
  """The float64 composition on NumPy operands (compiled once per name and shapes, under x64),
  rounded to their dtype."""
  import ourjax
  from ourjax.config import enable_x64
  dt = args[0].dtype
  fn = _JITTED.get(name)
  if fn is None:
    fn = _JITTED[name] = ourjax.jit(_F64[name])
  with enable_x64(True):
    out = fn(*[np.asarray(a, np.float64) for a in args])
    return np.asarray(out).astype(dt)


def _special_prim(name, nargs):
  def dtype_rule(*avals):
    dts = {a.dtype for a in avals}
    if len(dts) != 1:
      raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                      f"{', '.join(str(a.dtype) for a in avals)}.")
    dt = avals[0].dtype
    if not dtypes.is_float(dt):
      at = " at position 0" if len(avals) > 1 else ""
      raise TypeError(f"{name} does not accept dtype {dt}{at}. Accepted dtypes{at} are "
                      f"subtypes of floating.")
    return dt

  p = Primitive(name)

  def abstract_eval(*avals):
    if len(avals) != nargs:
      raise TypeError(f"lax.{name} takes {nargs} operands, got {len(avals)}")
    return ShapedArray(broadcasting_shape(name, *avals), dtype_rule(*avals), all_weak(*avals))
  p.def_abstract_eval(abstract_eval)
  p.def_impl(lambda *xs: _eval_f64(name, *xs))
  batching.defbroadcasting(p)

  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(p)
  def _lower(ctx, avals_in, avals_out, *operands):
    from ourjax.config import enable_x64
    from ourjax.interpreters import partial_eval as pe
    from ourjax.lax.elementwise import convert_element_type
    from ourjax.lax.structural import broadcast_in_dim

    def flat(*args):
      with enable_x64(True):
        shape = avals_out[0].shape
        wide = [convert_element_type(a, np.float64) for a in args]
        wide = [broadcast_in_dim(a, shape, ()) if a.ndim == 0 and shape else a for a in wide]
        return [convert_element_type(_F64[name](*wide), avals_out[0].dtype)]
    closed = pe.trace_to_jaxpr(flat, list(avals_in), name)
    return ctx.inline(closed, list(operands))[0]
  return p


igamma_p = _special_prim("igamma", 2)
igammac_p = _special_prim("igammac", 2)
igamma_grad_a_p = _special_prim("igamma_grad_a", 2)
regularized_incomplete_beta_p = _special_prim("regularized_incomplete_beta", 3)
_betainc_grad_a_p = _special_prim("betainc_grad_a", 3)
_betainc_grad_b_p = _special_prim("betainc_grad_b", 3)
bessel_i0e_p = _special_prim("bessel_i0e", 1)
bessel_i1e_p = _special_prim("bessel_i1e", 1)


def _size_one_broadcast(*xs):
  """Operands of one rank that differ only in size-1 dimensions broadcast to their common
  shape, as JAX's lax elementwise ops allow; others are left for the shape rule."""
  from ourjax.core import get_aval
  from ourjax.lax.structural import broadcast_in_dim
  shapes = [get_aval(x).shape for x in xs]
  if len({len(sh) for sh in shapes}) != 1 or len(set(shapes)) == 1 or not shapes[0]:
    return xs
  out = tuple(max(ds) for ds in zip(*shapes))
  if any(d not in (1, o) for sh in shapes for d, o in zip(sh, out)):
    return xs
  dims = tuple(range(len(out)))
  return tuple(x if sh == out else broadcast_in_dim(x, out, dims) for x, sh in zip(xs, shapes))


def igamma(a, x):
  """Regularized lower incomplete gamma function P(a, x) = gamma(a, x) / Gamma(a)."""
  return igamma_p.bind(*_size_one_broadcast(a, x))


def igammac(a, x):
  """Regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
  return igammac_p.bind(*_size_one_broadcast(a, x))


def igamma_grad_a(a, x):
  """dP(a, x) / da."""
  return igamma_grad_a_p.bind(*_size_one_broadcast(a, x))


def regularized_incomplete_beta(a, b, x):
  """Regularized incomplete beta function I_x(a, b)."""
  return regularized_incomplete_beta_p.bind(*_size_one_broadcast(a, b, x))


betainc = regularized_incomplete_beta


def bessel_i0e(x):
  """Exponentially scaled modified Bessel function of order 0: exp(-|x|) I_0(x)."""
  return bessel_i0e_p.bind(x)


def bessel_i1e(x):
  """Exponentially scaled modified Bessel function of order 1: exp(-|x|) I_1(x)."""
  return bessel_i1e_p.bind(x)


def _dx_igamma(t, a, x):
  from ourjax.lax import elementwise as ew
  # x^(a-1) e^-x / Gamma(a)
  return ew.mul(t, ew.exp(ew.sub(ew.sub(ew.mul(ew.sub(a, ew._const(a, 1)), ew.log(x)), x),
                                 ew.lgamma(a))))


def _dx_betainc(t, a, b, x):
  from ourjax.lax import elementwise as ew
  one = ew._const(a, 1)
  logd = ew.add(ew.sub(ew.add(ew.mul(ew.sub(a, one), ew.log(x)),
                              ew.mul(ew.sub(b, one), ew.log1p(ew.neg(x)))),
                       ew.add(ew.lgamma(a), ew.lgamma(b))), ew.lgamma(ew.add(a, b)))
  return ew.mul(t, ew.exp(logd))


ad.defjvp(igamma_p, lambda t, a, x: _mul(t, igamma_grad_a(a, x)), _dx_igamma)
ad.defjvp(igammac_p, lambda t, a, x: _neg(_mul(t, igamma_grad_a(a, x))),
          lambda t, a, x: _neg(_dx_igamma(t, a, x)))
ad.defjvp(igamma_grad_a_p,
          lambda t, a, x: _mul(t, _central_prim(igamma_grad_a_p, (a, x), 0)),
          lambda t, a, x: _mul(t, _central_prim(igamma_grad_a_p, (a, x), 1)))
ad.defjvp(regularized_incomplete_beta_p,
          lambda t, a, b, x: _mul(t, _betainc_grad_a_p.bind(a, b, x)),
          lambda t, a, b, x: _mul(t, _betainc_grad_b_p.bind(a, b, x)),
          _dx_betainc)
for _p in (_betainc_grad_a_p, _betainc_grad_b_p):
  ad.defjvp(_p, *[lambda t, *args, p=_p, i=i: _mul(t, _central_prim(p, args, i))
                  for i in range(3)])


def _mul(t, y):
  from ourjax.lax import elementwise as ew
  return ew.mul(t, y)


def _neg(t):
  from ourjax.lax import elementwise as ew
  return ew.neg(t)


def _central_prim(p, args, i):
  """d p / d args[i] by a central difference of the primitive itself (second derivatives of
  the parameters; a coarser step, as the primitive is rounded to the operands' dtype)."""
  from ourjax.lax import elementwise as ew
  a = args[i]
  h = ew.mul(ew.max(ew.abs(a), ew._const(a, 1e-2)), ew._const(a, 1e-3))
  up, dn = list(args), list(args)
  up[i], dn[i] = ew.add(a, h), ew.sub(a, h)
  return ew.div(ew.sub(p.bind(*up), p.bind(*dn)), ew.mul(h, ew._const(a, 2)))


def _i0e_jvp(t, x):
  from ourjax.lax import elementwise as ew
  # i1e(x) - sign(x) i0e(x)
  return ew.mul(t, ew.sub(bessel_i1e(x), ew.mul(ew.sign(x), bessel_i0e(x))))


def _i1e_jvp(t, x):
  # i0e(x) - i1e(x) (sign(x) + 1/x); 1/2 at 0
  jnp = _jnp()
  zero = x == 0
  d = bessel_i0e(x) - bessel_i1e(x) * (jnp.sign(x) + 1 / jnp.where(zero, 1, x).astype(x.dtype))
  return t * jnp.where(zero, 0.5, d).astype(x.dtype)


ad.defjvp(bessel_i0e_p, _i0e_jvp)
ad.defjvp(bessel_i1e_p, _i1e_jvp)


def zeta(x, q):
  """The Hurwitz zeta function (``scipy.special.zeta``)."""
  from ourjax.scipy._special_more import zeta as _zeta
  return _zeta(x, q)


def polygamma(m, x):
  """The m-th derivative of digamma (``scipy.special.polygamma``)."""
  from ourjax.scipy._special_more import polygamma as _polygamma
  return _polygamma(m, x)
