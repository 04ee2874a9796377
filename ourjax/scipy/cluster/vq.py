"""``ourjax.scipy.cluster.vq``: assign observations to their nearest code-book entries."""
from __future__ import annotations

__all__ = ["vq"]


def vq(obs, code_book, check_finite: bool = True):
  """For each observation (row of ``obs``) the index of the nearest code (row of
  ``code_book``, Euclidean distance) and that distance; returns ``(codes, distances)``."""
  import ourjax.numpy as jnp
  from ourjax.numpy import _util
  _util.check_arraylike("vq", obs, code_book)
  obs, code_book = _util.promote_dtypes_inexact(obs, code_book)
  if obs.ndim != code_book.ndim:
    raise ValueError("Observation and code_book should have the same rank")
  if obs.ndim == 1:
    obs, code_book = obs[..., None], code_book[..., None]
  if obs.ndim != 2:
    raise ValueError("ndim different than 1 or 2 are not supported")
  dist = jnp.linalg.norm(obs[:, None, :] - code_book[None, :, :], axis=-1)
  code = jnp.argmin(dist, axis=-1)
  return code, jnp.min(dist, axis=-1)
