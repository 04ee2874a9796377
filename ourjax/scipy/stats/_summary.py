"""Summary statistics of ``jax.scipy.stats``: ``sem``, ``mode`` and ``rankdata``."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ourjax.scipy.stats._common import jnp


class ModeResult(NamedTuple):
  mode: Any
  count: Any


def _nan_policy(nan_policy, fname):
  if nan_policy not in ("propagate", "omit", "raise"):
    raise ValueError(f"{fname}: nan_policy must be 'propagate', 'omit' or 'raise'; got "
                     f"{nan_policy!r}")
  if nan_policy != "propagate":
    raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")


def sem(a, axis: int | None = 0, ddof: int = 1, nan_policy: str = "propagate", *,
        keepdims: bool = False):
  """The standard error of the mean: ``std(a, ddof) / sqrt(n)`` along ``axis`` (all of ``a``
  when None)."""
  _nan_policy(nan_policy, "sem")
  np_ = jnp()
  from ourjax.numpy import _util
  _util.check_arraylike("sem", a)
  a, = _util.promote_dtypes_inexact(np_.asarray(a))
  if axis is None:
    a, axis = a.ravel(), 0
  n = a.shape[axis]
  return np_.std(a, axis=axis, ddof=ddof, keepdims=keepdims) / np.sqrt(n)


def mode(a, axis: int | None = 0, nan_policy: str = "propagate", keepdims: bool = False):
  """The most frequent value along ``axis`` (the smallest of equally frequent ones) and its
  count, as a ``ModeResult``."""
  _nan_policy(nan_policy, "mode")
  np_ = jnp()
  a = np_.asarray(a)
  if axis is None:
    a, axis = a.ravel(), 0
  axis = axis % max(a.ndim, 1)
  x = np_.sort(np_.moveaxis(a, axis, -1), axis=-1)
  counts = np_.sum(x[..., :, None] == x[..., None, :], axis=-1).astype(np_.int32)
  idx = np_.argmax(counts, axis=-1)
  m = np_.take_along_axis(x, idx[..., None], axis=-1)[..., 0]
  c = np_.max(counts, axis=-1)
  if keepdims:
    m, c = np_.expand_dims(m, axis), np_.expand_dims(c, axis)
  return ModeResult(m, c)


def _rank_1d(x, method):
  np_ = jnp()
  n = x.shape[0]
  xs = np_.sort(x)
  left = np_.searchsorted(xs, x, side="left")
  right = np_.searchsorted(xs, x, side="right")
  if method == "average":
    r = (left + 1 + right) / 2
  elif method == "min":
    r = left + 1
  elif method == "max":
    r = right
  elif method == "dense":
    new = np_.concatenate([np_.ones((min(n, 1),), bool), xs[1:] != xs[:-1]])
    r = np_.cumsum(new)[left]
  else:   # ordinal: ties in order of appearance
    order = np_.argsort(x, stable=True)
    r = np_.zeros(n, np_.int32).at[order].set(np_.arange(1, n + 1, dtype=np_.int32))
  r = r.astype(np_.result_type(float))
  return np_.where(np_.any(np_.isnan(x)), np.nan, r) if np_.issubdtype(
      x.dtype, np_.inexact) else r


def rankdata(a, method: str = "average", *, axis: int | None = None,
             nan_policy: str = "propagate"):
  """Ranks (1-based) of the data, ties by ``method``: average, min, max, dense or ordinal;
  along ``axis`` or over the flattened array.  A NaN makes its slice's ranks NaN."""
  _nan_policy(nan_policy, "rankdata")
  if method not in ("average", "min", "max", "dense", "ordinal"):
    raise ValueError(f"unknown method '{method}'")
  np_ = jnp()
  a = np_.asarray(a)
  if axis is None:
    return _rank_1d(a.ravel(), method)
  from ourjax import vmap
  axis = axis % a.ndim
  moved = np_.moveaxis(a, axis, -1)
  flat = moved.reshape(-1, moved.shape[-1])
  out = vmap(lambda row: _rank_1d(row, method))(flat)
  return np_.moveaxis(out.reshape(moved.shape), -1, axis)
