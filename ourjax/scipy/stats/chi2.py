"""Chi-squared distribution (``df``, ``loc``/``scale``): logpdf, pdf, cdf, logcdf, sf, logsf."""
from ourjax.scipy.stats import gamma as _gamma
from ourjax.scipy.stats._common import args


def logpdf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.logpdf", x, df, loc, scale)
  return _gamma.logpdf(x, df / 2, loc, 2 * scale)


def pdf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.pdf", x, df, loc, scale)
  return _gamma.pdf(x, df / 2, loc, 2 * scale)


def cdf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.cdf", x, df, loc, scale)
  return _gamma.cdf(x, df / 2, loc, 2 * scale)


def logcdf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.logcdf", x, df, loc, scale)
  return _gamma.logcdf(x, df / 2, loc, 2 * scale)


def sf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.sf", x, df, loc, scale)
  return _gamma.sf(x, df / 2, loc, 2 * scale)


def logsf(x, df, loc=0, scale=1):
  x, df, loc, scale = args("chi2.logsf", x, df, loc, scale)
  return _gamma.logsf(x, df / 2, loc, 2 * scale)
