"""``ourjax.scipy.special``: special functions written with lax / jnp ops (differentiable,
jittable, vmappable through the existing rules).

``erfc`` (``lax.erfc``) keeps relative precision in the upper tail, and ``log_ndtr`` uses a
continued fraction for ``log(erfc(z))``, ``z >= 1.5``, evaluated in log space, so
``ndtr``/``log_ndtr`` are accurate far into the lower tail.  ``ndtri`` starts from the Abramowitz & Stegun 26.2.23 rational guess and takes
Newton steps on ``log_ndtr``.
"""
from __future__ import annotations

import numpy as np

from ourjax import lax
from ourjax.numpy import _util

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "gammaln", "digamma", "expit", "logit", "xlogy",
           "xlog1py", "log_ndtr", "ndtr", "ndtri", "softmax", "log_softmax", "entr", "gamma",
           "betaln", "beta", "log_expit", "polygamma", "multigammaln", "sinc", "gammainc",
           "gammaincc", "betainc", "i0e", "i1e", "i0", "i1", "rel_entr", "kl_div", "factorial",
           "comb", "poch", "boxcox", "boxcox1p", "gammasgn", "loggamma", "bernoulli", "zeta",
           "erfcx"]

_CF_START = 1.5     # erfc switches from 1 - erf to the continued fraction here
_CF_TERMS = 60


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _f(name, *xs):
  _util.check_arraylike(name, *xs)
  out = _util.promote_args_inexact(name, *xs)
  return out[0] if len(xs) == 1 else out


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False,
              where=None):
  from ourjax import nn
  return nn.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign,
                      where=where)


def softmax(x, axis=-1):
  from ourjax import nn
  return nn.softmax(x, axis=axis)


def log_softmax(x, axis=-1):
  from ourjax import nn
  return nn.log_softmax(x, axis=axis)


def erf(x):
  return lax.erf(_f("erf", x))


def erfinv(x):
  return lax.erf_inv(_f("erfinv", x))


def gammaln(x):
  return lax.lgamma(_f("gammaln", x))


def digamma(x):
  return lax.digamma(_f("digamma", x))


def _log_erfc_cf(z):
  """log(erfc(z)) for z >= _CF_START: -z^2 - log(sqrt(pi)) - log(z + K(z)), K the continued
  fraction 1/2 / (z + 1 / (z + 3/2 / (z + ...))) evaluated backwards.  z^2 is split as
  zh^2 + (z - zh)(z + zh) with zh on a 1/16 grid so it keeps its relative precision."""
  jnp = _jnp()
  z = jnp.where(z >= _CF_START, z, _CF_START).astype(z.dtype)
  f = jnp.zeros_like(z)
  for k in range(_CF_TERMS, 0, -1):
    f = (k / 2) / (z + f)
  zh = jnp.floor(z * 16) / 16
  return -(zh * zh) - (z - zh) * (z + zh) - 0.5 * np.log(np.pi) - jnp.log(z + f)


def erfc(x):
  """Complementary error function with relative precision in the upper tail (``lax.erfc``)."""
  return lax.erfc(_f("erfc", x))


def ndtr(x):
  """Standard normal CDF."""
  jnp = _jnp()
  x = _f("ndtr", x)
  z = x * np.sqrt(0.5)
  return jnp.where(z < 0, 0.5 * erfc(-z), 1 - 0.5 * erfc(z)).astype(x.dtype)


def log_ndtr(x, series_order: int = 3):
  """log of the standard normal CDF, stable in both tails: the continued fraction in log space
  for x far below 0, ``log1p(-ndtr(-x))`` above 0."""
  jnp = _jnp()
  x = _f("log_ndtr", x)
  z = x * np.sqrt(0.5)
  lower = np.log(0.5) + _log_erfc_cf(-z)          # valid for -z >= 1.5
  mid = jnp.log(0.5 * erfc(-jnp.where(z < 0, z, 0).astype(x.dtype)))
  upper = jnp.log1p(-0.5 * erfc(jnp.where(z >= 0, z, 0).astype(x.dtype)))
  return jnp.where(-z >= _CF_START, lower, jnp.where(z < 0, mid, upper)).astype(x.dtype)


def _norm_logpdf(x):
  return -0.5 * x * x - 0.5 * np.log(2 * np.pi)


def ndtri(p):
  """Inverse of ``ndtr``.  0 -> -inf, 1 -> inf, outside [0, 1] -> nan."""
  jnp = _jnp()
  p = _f("ndtri", p)
  dt = p.dtype
  q = jnp.minimum(p, 1 - p)
  qs = jnp.clip(q, jnp.finfo(dt).tiny, 0.5)
  t = jnp.sqrt(-2 * jnp.log(qs))
  x = -(t - (2.515517 + 0.802853 * t + 0.010328 * t * t)
        / (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t))
  x = x.astype(dt)
  logq = jnp.log(qs)
  for _ in range(4 if dt.itemsize <= 4 else 6):
    ln = log_ndtr(x)
    x = x - (ln - logq) * jnp.exp(ln - _norm_logpdf(x))
  x = jnp.where(p > 0.5, -x, x)
  # the centre: sqrt(2) erfinv(2p - 1), 2p - 1 exact there, so the result is accurate relative
  # to itself (the Newton steps on log ndtr leave an absolute error of a few 1e-8: ndtri(0.5)
  # was 1.4e-8 instead of 0)
  centre = jnp.abs(p - 0.5) < 0.425
  z = jnp.where(centre, 2 * p - 1, jnp.zeros_like(p))
  x = jnp.where(centre, (np.sqrt(2) * lax.erf_inv(z)).astype(dt), x)
  x = jnp.where(p == 0, -np.inf, jnp.where(p == 1, np.inf, x))
  return jnp.where((p < 0) | (p > 1) | jnp.isnan(p), np.nan, x).astype(dt)


def expit(x):
  return lax.logistic(_f("expit", x))


def log_expit(x):
  from ourjax import nn
  return nn.log_sigmoid(_f("log_expit", x))


def logit(x):
  jnp = _jnp()
  x = _f("logit", x)
  return jnp.log(x / (1 - x))


def _xlogy_raw(x, y):
  jnp = _jnp()
  safe_y = jnp.where(x == 0, jnp.ones_like(y), y)
  return jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(safe_y))


def _xlog1py_raw(x, y):
  jnp = _jnp()
  safe_y = jnp.where(x == 0, jnp.zeros_like(y), y)
  return jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log1p(safe_y))


def _with_jvp(raw, dlog):
  """``raw`` with JAX's derivative ``x' log(y) + y' x / y`` (``dlog``: log and its argument's
  offset): the where() that makes x == 0 give 0 would otherwise give a zero x-derivative
  there, where the true one is log(y)."""
  from ourjax.custom_derivatives import custom_jvp
  f = custom_jvp(raw)

  def rule(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    log_y, one_plus = dlog(y)
    out = f(x, y)
    return out, (x_dot * log_y + y_dot * x / one_plus).astype(out.dtype)
  f.defjvp(rule)
  return f


_xlogy_jvp = None
_xlog1py_jvp = None


def xlogy(x, y):
  """``x * log(y)``, 0 where x == 0 (derivative in x: log(y), as JAX)."""
  global _xlogy_jvp
  if _xlogy_jvp is None:
    _xlogy_jvp = _with_jvp(_xlogy_raw, lambda y: (_jnp().log(y), y))
  x, y = _f("xlogy", x, y)
  return _xlogy_jvp(x, y)


def xlog1py(x, y):
  """``x * log1p(y)``, 0 where x == 0 (derivative in x: log1p(y), as JAX)."""
  global _xlog1py_jvp
  if _xlog1py_jvp is None:
    _xlog1py_jvp = _with_jvp(_xlog1py_raw, lambda y: (_jnp().log1p(y), 1 + y))
  x, y = _f("xlog1py", x, y)
  return _xlog1py_jvp(x, y)


def entr(x):
  """``-x log x`` for x > 0, 0 at 0, -inf for x < 0."""
  jnp = _jnp()
  x = _f("entr", x)
  safe = jnp.where(x > 0, x, jnp.ones_like(x))
  # (0 at 0 is -0.0, JAX's: -(0 * log 0) with the product taken as 0)
  return jnp.where(x > 0, -x * jnp.log(safe),
                   jnp.where(x == 0, -jnp.zeros_like(x), -np.inf)).astype(x.dtype)


def gamma(x):
  """Gamma for real x: ``sign * exp(gammaln(x))``; +-inf at +-0, nan at the negative
  integers."""
  jnp = _jnp()
  x = _f("gamma", x)
  sign = jnp.where(x > 0, 1.0, jnp.where(jnp.ceil(-x) % 2 == 0, 1.0, -1.0)).astype(x.dtype)
  out = sign * jnp.exp(lax.lgamma(x))
  out = jnp.where((x < 0) & (x == jnp.floor(x)), np.nan, out)
  # +-0: +-inf (as JAX and scipy), the poles at the negative integers: nan
  return jnp.where(x == 0, jnp.copysign(np.inf, x), out).astype(x.dtype)


def betaln(a, b):
  a, b = _f("betaln", a, b)
  return lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)


def beta(a, b):
  a, b = _f("beta", a, b)
  return _jnp().exp(betaln(a, b))


def multigammaln(a, d: int):
  a = _f("multigammaln", a)
  out = d * (d - 1) / 4 * np.log(np.pi)
  for j in range(d):
    out = out + lax.lgamma(a - j / 2)
  return out.astype(a.dtype)


def sinc(x):
  return _jnp().sinc(x)


def gammainc(a, x):
  """Regularized lower incomplete gamma function (``lax.igamma``)."""
  a, x = _f("gammainc", a, x)
  return lax.igamma(a, x)


def gammaincc(a, x):
  """Regularized upper incomplete gamma function (``lax.igammac``)."""
  a, x = _f("gammaincc", a, x)
  return lax.igammac(a, x)


def betainc(a, b, x):
  """Regularized incomplete beta function (``lax.betainc``)."""
  a, b, x = _f("betainc", a, b, x)
  return lax.betainc(a, b, x)


def i0e(x):
  """exp(-|x|) I_0(x)."""
  return lax.bessel_i0e(_f("i0e", x))


def i1e(x):
  """exp(-|x|) I_1(x)."""
  return lax.bessel_i1e(_f("i1e", x))


def i0(x):
  """Modified Bessel function of order 0."""
  x = _f("i0", x)
  return _jnp().exp(_jnp().abs(x)) * lax.bessel_i0e(x)


def i1(x):
  """Modified Bessel function of order 1."""
  x = _f("i1", x)
  return _jnp().exp(_jnp().abs(x)) * lax.bessel_i1e(x)


from ourjax.scipy._special_more import (rel_entr, kl_div, factorial, comb, poch,  # noqa: E402,F401
                                        boxcox, boxcox1p, gammasgn, loggamma, bernoulli, zeta,
                                        polygamma, erfcx)
