"""Normal distribution: logpdf, pdf, cdf, logcdf, ppf, sf, logsf, isf (``loc``/``scale``)."""
import numpy as np

from ourjax.numpy import _util
from ourjax.scipy import special


def _args(name, *xs):
  _util.check_arraylike(name, *xs)
  return _util.promote_args_inexact(name, *xs)


def logpdf(x, loc=0, scale=1):
  import ourjax.numpy as jnp
  x, loc, scale = _args("norm.logpdf", x, loc, scale)
  z = (x - loc) / scale
  # a Python float: a weakly typed x gives a weakly typed density, as in JAX
  return -0.5 * z * z - jnp.log(scale) - 0.5 * float(np.log(2 * np.pi))


def pdf(x, loc=0, scale=1):
  import ourjax.numpy as jnp
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
  x, loc, scale = _args("norm.cdf", x, loc, scale)
  return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
  x, loc, scale = _args("norm.logcdf", x, loc, scale)
  return special.log_ndtr((x - loc) / scale)


def sf(x, loc=0, scale=1):
  x, loc, scale = _args("norm.sf", x, loc, scale)
  return special.ndtr((loc - x) / scale)


def logsf(x, loc=0, scale=1):
  x, loc, scale = _args("norm.logsf", x, loc, scale)
  return special.log_ndtr((loc - x) / scale)


def ppf(q, loc=0, scale=1):
  q, loc, scale = _args("norm.ppf", q, loc, scale)
  return special.ndtri(q) * scale + loc


def isf(q, loc=0, scale=1):
  q, loc, scale = _args("norm.isf", q, loc, scale)
  return loc - special.ndtri(q) * scale
