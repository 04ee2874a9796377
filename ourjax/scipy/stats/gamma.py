"""Gamma distribution (shape ``a``, ``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def _y(name, x, a, loc, scale):
  x, a, loc, scale = args(name, x, a, loc, scale)
  return (x - loc) / scale, a, scale


def logpdf(x, a, loc=0, scale=1):
  y, a, scale = _y("gamma.logpdf", x, a, loc, scale)
  ys = jnp().where(y >= 0, y, 1)
  out = special.xlogy(a - 1, ys) - ys - special.gammaln(a) - jnp().log(scale)
  return jnp().where(y >= 0, out, -np.inf)


def pdf(x, a, loc=0, scale=1):
  return jnp().exp(logpdf(x, a, loc, scale))


def cdf(x, a, loc=0, scale=1):
  y, a, _ = _y("gamma.cdf", x, a, loc, scale)
  return special.gammainc(a, jnp().maximum(y, 0))


def logcdf(x, a, loc=0, scale=1):
  return jnp().log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
  y, a, _ = _y("gamma.sf", x, a, loc, scale)
  return special.gammaincc(a, jnp().maximum(y, 0))


def logsf(x, a, loc=0, scale=1):
  return jnp().log(sf(x, a, loc, scale))
