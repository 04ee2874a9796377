"""``ourjax.scipy.stats``: distributions as modules of functions (``norm.logpdf`` ...)."""
from ourjax.scipy.stats import norm, logistic, bernoulli  # noqa: F401
from ourjax.scipy.stats import (uniform, expon, laplace, cauchy, gamma, chi2, beta, t,  # noqa
                                pareto, poisson, binom, geom, multivariate_normal, dirichlet)
from ourjax.scipy.stats._summary import ModeResult, mode, rankdata, sem  # noqa: F401
