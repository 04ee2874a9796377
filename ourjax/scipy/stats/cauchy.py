"""Cauchy distribution (``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf, ppf, isf."""
import numpy as np

from ourjax.scipy.stats._common import args, jnp


def logpdf(x, loc=0, scale=1):
  x, loc, scale = args("cauchy.logpdf", x, loc, scale)
  z = (x - loc) / scale
  return -float(np.log(np.pi)) - jnp().log(scale) - jnp().log1p(z * z)


def pdf(x, loc=0, scale=1):
  return jnp().exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  x, loc, scale = args("cauchy.cdf", x, loc, scale)
  return 0.5 + jnp().arctan2(x - loc, scale) / np.pi


def logcdf(x, loc=0, scale=1):
  return jnp().log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
  x, loc, scale = args("cauchy.sf", x, loc, scale)
  return 0.5 - jnp().arctan2(x - loc, scale) / np.pi


def logsf(x, loc=0, scale=1):
  return jnp().log(sf(x, loc, scale))


def ppf(q, loc=0, scale=1):
  """``loc + scale tan(pi (q - 1/2))`` (as JAX: not masked outside [0, 1])."""
  q, loc, scale = args("cauchy.ppf", q, loc, scale)
  return loc + scale * jnp().tan(np.pi * (q - 0.5))


def isf(q, loc=0, scale=1):
  """``loc + scale tan(pi (1/2 - q))``."""
  q, loc, scale = args("cauchy.isf", q, loc, scale)
  return loc + scale * jnp().tan(np.pi * (0.5 - q))
