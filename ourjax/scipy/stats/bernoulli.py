"""Bernoulli distribution: logpmf, pmf, cdf, ppf."""
from ourjax.numpy import _util
from ourjax.scipy import special


def logpmf(k, p, loc=0):
  import ourjax.numpy as jnp
  _util.check_arraylike("bernoulli.logpmf", k, p, loc)
  k, p, loc = _util.promote_args_inexact("bernoulli.logpmf", k, p, loc)
  x = k - loc
  from ourjax import lax
  # (1 - x with a strongly typed 1, as JAX's: the log-probabilities are strongly typed)
  log_probs = special.xlogy(x, p) + special.xlog1py(lax.sub(lax._const(x, 1), x), -p)
  return jnp.where((x < 0) | (x > 1), -jnp.inf, log_probs)


def pmf(k, p, loc=0):
  import ourjax.numpy as jnp
  return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
  import ourjax.numpy as jnp
  k, p = _util.promote_args_inexact("bernoulli.cdf", k, p)
  return jnp.where(k < 0, 0.0, jnp.where(k < 1, 1 - p, 1.0)).astype(k.dtype)


def ppf(q, p):
  import ourjax.numpy as jnp
  q, p = _util.promote_args_inexact("bernoulli.ppf", q, p)
  return jnp.where((q < 0) | (q > 1) | jnp.isnan(q), jnp.nan,
                   jnp.where(q <= 1 - p, 0.0, 1.0)).astype(q.dtype)
