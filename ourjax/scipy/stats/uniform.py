"""Uniform distribution on [loc, loc + scale]: logpdf, pdf, cdf, ppf."""
import numpy as np

from ourjax.scipy.stats._common import args, jnp


def logpdf(x, loc=0, scale=1):
  x, loc, scale = args("uniform.logpdf", x, loc, scale)
  inside = (x >= loc) & (x <= loc + scale)
  return jnp().where(inside, -jnp().log(scale), -np.inf)


def pdf(x, loc=0, scale=1):
  return jnp().exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  x, loc, scale = args("uniform.cdf", x, loc, scale)
  return jnp().clip((x - loc) / scale, 0, 1)


def ppf(q, loc=0, scale=1):
  q, loc, scale = args("uniform.ppf", q, loc, scale)
  return jnp().where((q >= 0) & (q <= 1), loc + q * scale, np.nan)
