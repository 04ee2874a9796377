"""Student's t distribution (``df``, ``loc``/``scale``): logpdf, pdf."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import args, jnp


def logpdf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("t.logpdf", x, df, loc, scale)
  z = (x - loc) / scale
  return (special.gammaln((df + 1) / 2) - special.gammaln(df / 2)
          - 0.5 * jnp().log(df * np.pi) - jnp().log(scale)
          - (df + 1) / 2 * jnp().log1p(z * z / df))


def pdf(x, df, loc=0, scale=1):
  return jnp().exp(logpdf(x, df, loc, scale))
