"""``ourjax.ops``: segment reductions, as ``jax.ops``.

``segment_<op>(data, segment_ids, num_segments)`` reduces the rows of ``data`` (its leading axis)
that share a segment id into row ``id`` of a ``(num_segments,) + data.shape[1:]`` result; empty
segments hold the reduction's identity (0, 1, the dtype's largest / smallest value, True / False
for booleans).  Ids outside ``[0, num_segments)`` -- negative ones included, which are not
wrapped -- are dropped, as JAX's FILL_OR_DROP scatter does.  Without ``num_segments`` it is
``max(segment_ids) + 1``, which needs concrete ids.  Written with ``.at[]`` scatters, so jit, grad
and vmap follow from theirs; ``bucket_size``, ``indices_are_sorted`` and ``unique_indices`` are
hints that do not change the result.
"""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _identity(op, dtype):
  dtype = np.dtype(dtype)
  if op == "sum":
    return 0
  if op == "prod":
    return 1
  big = op == "min"
  if dtype == np.bool_:
    return big
  if dtypes.is_integer(dtype):
    info = np.iinfo(dtype)
    return info.max if big else info.min
  return np.inf if big else -np.inf


def _segment(op, data, segment_ids, num_segments, indices_are_sorted, unique_indices,
             bucket_size, mode):
  jnp = _jnp()
  name = f"segment_{op}"
  data, segment_ids = jnp.asarray(data), jnp.asarray(segment_ids)
  if not dtypes.is_integer(segment_ids.dtype):
    raise TypeError(f"{name}: segment_ids must be integers, got {segment_ids.dtype}")
  if data.ndim < 1 or segment_ids.shape != data.shape[:1]:
    raise ValueError(f"{name}: segment_ids must have shape (data.shape[0],) = "
                     f"{data.shape[:1]}, got {segment_ids.shape}")
  if num_segments is None:
    num_segments = core.concrete_or_error(
        int, jnp.max(segment_ids), f"{name}: num_segments must be given when segment_ids are "
        f"traced") + 1 if segment_ids.size else 0
  num_segments = int(num_segments)
  if num_segments < 0:
    raise ValueError(f"{name}: num_segments must be non-negative, got {num_segments}")
  # out-of-range ids go to one extra row, dropped at the end
  ok = (segment_ids >= 0) & (segment_ids < num_segments)
  ids = jnp.where(ok, segment_ids, num_segments)
  out = jnp.full((num_segments + 1,) + data.shape[1:], _identity(op, data.dtype), data.dtype)
  at = out.at[ids]
  kw = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices)
  if op == "sum":
    out = at.add(data, **kw)
  elif op == "prod":
    out = at.multiply(data, **kw)
  elif op == "max":
    out = at.max(data, **kw)
  else:
    out = at.min(data, **kw)
  return out[:num_segments]


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted: bool = False,
                unique_indices: bool = False, bucket_size=None, mode=None, out_sharding=None):
  """Sum of the rows of ``data`` in each segment (0 for empty ones)."""
  return _segment("sum", data, segment_ids, num_segments, indices_are_sorted, unique_indices,
                  bucket_size, mode)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted: bool = False,
                 unique_indices: bool = False, bucket_size=None, mode=None, out_sharding=None):
  """Product of the rows of ``data`` in each segment (1 for empty ones)."""
  return _segment("prod", data, segment_ids, num_segments, indices_are_sorted, unique_indices,
                  bucket_size, mode)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted: bool = False,
                unique_indices: bool = False, bucket_size=None, mode=None, out_sharding=None):
  """Maximum of the rows of ``data`` in each segment (-inf / the dtype's minimum / False for
  empty ones)."""
  return _segment("max", data, segment_ids, num_segments, indices_are_sorted, unique_indices,
                  bucket_size, mode)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted: bool = False,
                unique_indices: bool = False, bucket_size=None, mode=None, out_sharding=None):
  """Minimum of the rows of ``data`` in each segment (inf / the dtype's maximum / True for
  empty ones)."""
  return _segment("min", data, segment_ids, num_segments, indices_are_sorted, unique_indices,
                  bucket_size, mode)
