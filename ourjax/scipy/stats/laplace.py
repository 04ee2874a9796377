"""Laplace distribution (``loc``/``scale``): logpdf, pdf, cdf."""
from ourjax.scipy.stats._common import args, jnp


def logpdf(x, loc=0, scale=1):
  x, loc, scale = args("laplace.logpdf", x, loc, scale)
  return -jnp().log(2 * scale) - jnp().abs(x - loc) / scale


def pdf(x, loc=0, scale=1):
  return jnp().exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  x, loc, scale = args("laplace.cdf", x, loc, scale)
  z = (x - loc) / scale
  return jnp().where(z <= 0, 0.5 * jnp().exp(jnp().minimum(z, 0)),
                     1 - 0.5 * jnp().exp(-jnp().maximum(z, 0)))
