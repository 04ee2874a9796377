"""Logistic distribution: logpdf, pdf, cdf, sf, ppf, isf, logcdf (standard, loc/scale)."""
from ourjax.numpy import _util
from ourjax.scipy import special


def _args(name, *xs):
  _util.check_arraylike(name, *xs)
  return _util.promote_args_inexact(name, *xs)


def logpdf(x, loc=0, scale=1):
  import ourjax.numpy as jnp
  from ourjax import nn
  x, loc, scale = _args("logistic.logpdf", x, loc, scale)
  z = (x - loc) / scale
  a = jnp.abs(z)
  return -a - 2 * nn.softplus(-a) - jnp.log(scale)


def pdf(x, loc=0, scale=1):
  import ourjax.numpy as jnp
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  x, loc, scale = _args("logistic.cdf", x, loc, scale)
  return special.expit((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
  x, loc, scale = _args("logistic.logcdf", x, loc, scale)
  return special.log_expit((x - loc) / scale)


def sf(x, loc=0, scale=1):
  x, loc, scale = _args("logistic.sf", x, loc, scale)
  return special.expit((loc - x) / scale)


def ppf(q, loc=0, scale=1):
  q, loc, scale = _args("logistic.ppf", q, loc, scale)
  return special.logit(q) * scale + loc


def isf(q, loc=0, scale=1):
  q, loc, scale = _args("logistic.isf", q, loc, scale)
  return loc - special.logit(q) * scale
