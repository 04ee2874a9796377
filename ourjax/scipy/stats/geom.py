"""Geometric distribution (``p``, ``loc``; support 1, 2, ...): logpmf, pmf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def logpmf(k, p, loc=0):
  k, p, loc = args("geom.logpmf", k, p, loc)
  y = k - loc
  return jnp().where(y >= 1, special.xlog1py(y - 1, -p) + jnp().log(p), -np.inf)


def pmf(k, p, loc=0):
  return jnp().exp(logpmf(k, p, loc))
