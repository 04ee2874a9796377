"""Exponential distribution (``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf, ppf."""
import numpy as np

from ourjax.scipy.stats._common import args, jnp


def _z(name, x, loc, scale):
  x, loc, scale = args(name, x, loc, scale)
  return (x - loc) / scale, scale


def logpdf(x, loc=0, scale=1):
  z, scale = _z("expon.logpdf", x, loc, scale)
  return jnp().where(z >= 0, -z - jnp().log(scale), -np.inf)


def pdf(x, loc=0, scale=1):
  return jnp().exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  z, _ = _z("expon.cdf", x, loc, scale)
  return jnp().where(z >= 0, -jnp().expm1(-z), 0)


def logcdf(x, loc=0, scale=1):
  z, _ = _z("expon.logcdf", x, loc, scale)
  return jnp().where(z >= 0, jnp().log(-jnp().expm1(-jnp().maximum(z, 0))), -np.inf)


def sf(x, loc=0, scale=1):
  z, _ = _z("expon.sf", x, loc, scale)
  return jnp().where(z >= 0, jnp().exp(-z), 1)


def logsf(x, loc=0, scale=1):
  z, _ = _z("expon.logsf", x, loc, scale)
  return jnp().where(z >= 0, -z, 0)


def ppf(q, loc=0, scale=1):
  q, loc, scale = args("expon.ppf", q, loc, scale)
  return jnp().where((q >= 0) & (q <= 1), -jnp().log1p(-q) * scale + loc, np.nan)
