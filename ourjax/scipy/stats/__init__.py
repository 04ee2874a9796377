"""``ourjax.scipy.stats``: distributions as modules of functions (``norm.logpdf`` ...)."""
from ourjax.scipy.stats import norm, logistic, bernoulli  # noqa: F401
