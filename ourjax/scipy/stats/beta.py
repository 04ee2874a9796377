"""Beta distribution (``a``, ``b``, ``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def _y(name, x, a, b, loc, scale):
  x, a, b, loc, scale = args(name, x, a, b, loc, scale)
  return (x - loc) / scale, a, b, scale


def logpdf(x, a, b, loc=0, scale=1):
  y, a, b, scale = _y("beta.logpdf", x, a, b, loc, scale)
  inside = (y >= 0) & (y <= 1)
  ys = jnp().where(inside, y, 0.5)
  out = (special.xlogy(a - 1, ys) + special.xlog1py(b - 1, -ys) - special.betaln(a, b)
         - jnp().log(scale))
  return jnp().where(inside, out, -np.inf)


def pdf(x, a, b, loc=0, scale=1):
  return jnp().exp(logpdf(x, a, b, loc, scale))


def cdf(x, a, b, loc=0, scale=1):
  y, a, b, _ = _y("beta.cdf", x, a, b, loc, scale)
  return special.betainc(a, b, jnp().clip(y, 0, 1))


def logcdf(x, a, b, loc=0, scale=1):
  return jnp().log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
  y, a, b, _ = _y("beta.sf", x, a, b, loc, scale)
  return special.betainc(b, a, 1 - jnp().clip(y, 0, 1))


def logsf(x, a, b, loc=0, scale=1):
  return jnp().log(sf(x, a, b, loc, scale))
