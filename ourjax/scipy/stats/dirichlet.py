"""Dirichlet distribution: logpdf, pdf (``x`` with the K categories on the first axis, or K-1
of them, the last then being 1 minus their sum)."""
import numpy as np

from ourjax.scipy import special
from ourjax.scipy.stats._common import dtype_args as args, jnp


def logpdf(x, alpha):
  x, alpha = args("dirichlet.logpdf", x, alpha)
  np_ = jnp()
  if alpha.ndim != 1:
    raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
  K = alpha.shape[0]
  if x.shape[0] not in (K, K - 1):
    raise ValueError(f"`x` must have either the same number of entries as `alpha` or one "
                     f"entry fewer; got x.shape={x.shape}, alpha.shape={alpha.shape}")
  if x.shape[0] == K - 1:
    x = np_.concatenate([x, 1 - np_.sum(x, axis=0, keepdims=True)], axis=0)
  a = alpha.reshape((K,) + (1,) * (x.ndim - 1))
  normalize = np_.sum(special.gammaln(alpha)) - special.gammaln(np_.sum(alpha))
  log_probs = np_.sum(special.xlogy(a - 1, x), axis=0) - normalize
  ok = np_.all((x >= 0) & (x <= 1), axis=0) & np_.isclose(np_.sum(x, axis=0), 1)
  return np_.where(ok, log_probs, -np.inf)


def pdf(x, alpha):
  return jnp().exp(logpdf(x, alpha))
