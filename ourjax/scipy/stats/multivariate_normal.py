"""Multivariate normal distribution: logpdf, pdf (``x`` with the variables on the last axis;
``cov`` a scalar, or an (n, n) matrix, batched like ``x``)."""
import numpy as np

from ourjax.scipy.stats._common import dtype_args as args, jnp


def logpdf(x, mean, cov, allow_singular=None):
  if allow_singular is not None:
    raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
  x, mean, cov = args("multivariate_normal.logpdf", x, mean, cov)
  np_ = jnp()
  if not mean.shape:
    return (-0.5 * np_.square(x - mean) / cov
            - 0.5 * (float(np.log(2 * np.pi)) + np_.log(cov)))
  n = mean.shape[-1]
  y = x - mean
  if not cov.shape:
    return (-0.5 * np_.einsum("...i,...i->...", y, y) / cov
            - n / 2 * (float(np.log(2 * np.pi)) + np_.log(cov)))
  if cov.ndim < 2 or cov.shape[-2:] != (n, n):
    raise ValueError("multivariate_normal.logpdf got incompatible shapes")
  from ourjax.scipy.linalg import solve_triangular
  L = np_.linalg.cholesky(cov)
  batch = np.broadcast_shapes(y.shape[:-1], L.shape[:-2])
  Lb = np_.broadcast_to(L, batch + (n, n))
  yb = np_.broadcast_to(y, batch + (n,))
  z = solve_triangular(Lb, yb[..., None], lower=True)[..., 0]
  return (-0.5 * np_.sum(z * z, axis=-1) - n / 2 * float(np.log(2 * np.pi))
          - np_.sum(np_.log(np_.diagonal(L, axis1=-2, axis2=-1)), axis=-1))


def pdf(x, mean, cov):
  return jnp().exp(logpdf(x, mean, cov))
