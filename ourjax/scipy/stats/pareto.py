"""Pareto distribution (shape ``b``, ``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf,
ppf."""
import numpy as np

from ourjax.scipy.stats._common import args, jnp


def _z(name, x, b, loc, scale):
  x, b, loc, scale = args(name, x, b, loc, scale)
  return (x - loc) / scale, b, scale


def logpdf(x, b, loc=0, scale=1):
  z, b, scale = _z("pareto.logpdf", x, b, loc, scale)
  zs = jnp().where(z >= 1, z, 1)
  return jnp().where(z >= 1, jnp().log(b) - (b + 1) * jnp().log(zs) - jnp().log(scale), -np.inf)


def pdf(x, b, loc=0, scale=1):
  return jnp().exp(logpdf(x, b, loc, scale))


def logsf(x, b, loc=0, scale=1):
  z, b, _ = _z("pareto.logsf", x, b, loc, scale)
  return jnp().where(z >= 1, -b * jnp().log(jnp().where(z >= 1, z, 1)), 0)


def sf(x, b, loc=0, scale=1):
  return jnp().exp(logsf(x, b, loc, scale))


def logcdf(x, b, loc=0, scale=1):
  z, b, _ = _z("pareto.logcdf", x, b, loc, scale)
  zs = jnp().where(z >= 1, z, 1)
  return jnp().where(z >= 1, jnp().log1p(-jnp().power(zs, -b)), -np.inf)


def cdf(x, b, loc=0, scale=1):
  z, b, _ = _z("pareto.cdf", x, b, loc, scale)
  zs = jnp().where(z >= 1, z, 1)
  return jnp().where(z >= 1, -jnp().expm1(-b * jnp().log(zs)), 0)


def ppf(q, b, loc=0, scale=1):
  q, b, loc, scale = args("pareto.ppf", q, b, loc, scale)
  return jnp().where((q >= 0) & (q <= 1), scale * jnp().power(1 - q, -1 / b) + loc, np.nan)
