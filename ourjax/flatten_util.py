"""``ourjax.flatten_util``: ``ravel_pytree``, a pytree of arrays as one flat vector and back."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes
from ourjax import numpy as jnp
from ourjax import lax
from ourjax._pytree import tree_flatten, tree_unflatten


def ravel_pytree(pytree):
  """``(flat, unravel)``: the leaves of ``pytree`` raveled and concatenated into one 1-D array
  of their promoted dtype (float32 when there are none), and ``unravel(flat)`` that rebuilds a
  pytree of the same structure, shapes and (when the leaves had several dtypes) dtypes.

  With a single leaf dtype ``unravel`` keeps the dtype of what it is given (so that it can
  unravel, say, a boolean mask); with several it requires the promoted dtype."""
  leaves, treedef = tree_flatten(pytree)
  arrays = [jnp.asarray(x) for x in leaves]
  shapes = [tuple(a.shape) for a in arrays]
  sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
  leaf_dtypes = [a.dtype for a in arrays]
  if not arrays:
    flat = jnp.zeros((0,), np.float32)
  else:
    flat_dtype = dtypes.result_type(*leaf_dtypes) if len(set(leaf_dtypes)) > 1 \
        else leaf_dtypes[0]
    flat = jnp.concatenate([jnp.ravel(a).astype(flat_dtype) for a in arrays]) \
        if len(arrays) > 1 else jnp.ravel(arrays[0])
  mixed = len(set(leaf_dtypes)) > 1
  total = sum(sizes)
  flat_dt = flat.dtype

  return flat, _Unravel(treedef, tuple(shapes), tuple(sizes), tuple(leaf_dtypes), mixed, total,
                       flat_dt)


class _Unravel:
  """The ``unravel`` of ``ravel_pytree``: equal (and hashing equal) for equal structures, shapes
  and dtypes, as JAX's, so that passing it as a static argument of a jit does not retrace."""

  def __init__(self, treedef, shapes, sizes, leaf_dtypes, mixed, total, flat_dt):
    self._key = (treedef, shapes, sizes, leaf_dtypes, mixed, total, flat_dt)

  def __eq__(self, other):
    return type(other) is _Unravel and self._key == other._key

  def __hash__(self):
    return hash(self._key)

  def __call__(self, v):
    treedef, shapes, sizes, leaf_dtypes, mixed, total, flat_dt = self._key
    v_shape = np.shape(v)
    if v_shape != (total,):
      raise ValueError(f"The unravel function expected an array of shape {(total,)}, got "
                       f"shape {v_shape}.")
    v = jnp.asarray(v)
    if mixed and v.dtype != flat_dt:
      raise TypeError(f"unravel function given array of dtype {v.dtype}, but expected dtype "
                      f"{flat_dt}")
    parts, start = [], 0
    for shape, size, dt in zip(shapes, sizes, leaf_dtypes):
      part = jnp.reshape(lax.slice(v, (start,), (start + size,)), shape)
      if mixed and part.dtype != dt:
        if dtypes.issubdtype(part.dtype, np.complexfloating) and \
            not dtypes.issubdtype(dt, np.complexfloating):
          part = jnp.real(part)
        part = part.astype(dt)
      parts.append(part)
      start += size
    return tree_unflatten(treedef, parts)
