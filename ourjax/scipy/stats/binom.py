"""Binomial distribution (``n``, ``p``, ``loc``): logpmf, pmf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def logpmf(k, n, p, loc=0):
  k, n, p, loc = args("binom.logpmf", k, n, p, loc)
  y = k - loc
  ok = (y >= 0) & (y <= n)
  ys = jnp().where(ok, y, 0)
  comb = special.gammaln(n + 1) - special.gammaln(ys + 1) - special.gammaln(n - ys + 1)
  return jnp().where(ok, comb + special.xlogy(ys, p) + special.xlog1py(n - ys, -p), -np.inf)


def pmf(k, n, p, loc=0):
  return jnp().exp(logpmf(k, n, p, loc))
