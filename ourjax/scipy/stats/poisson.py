"""Poisson distribution (``mu``, ``loc``): logpmf, pmf, cdf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def logpmf(k, mu, loc=0):
  k, mu, loc = args("poisson.logpmf", k, mu, loc)
  y = k - loc
  ok = (y >= 0) & (y == jnp().floor(y))
  ys = jnp().where(ok, y, 0)
  return jnp().where(ok, special.xlogy(ys, mu) - special.gammaln(ys + 1) - mu, -np.inf)


def pmf(k, mu, loc=0):
  return jnp().exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
  k, mu, loc = args("poisson.cdf", k, mu, loc)
  y = k - loc
  return jnp().where(y >= 0, special.gammaincc(jnp().floor(jnp().maximum(y, 0)) + 1, mu), 0)
