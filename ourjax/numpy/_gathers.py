"""Three small gathers the jnp functions need internally (the user-facing ``take`` and
``take_along_axis`` live with the indexing functions).  Indices are int32 and clipped into
range."""
from __future__ import annotations

import numpy as np

from ourjax import lax
from ourjax.core import get_aval

def _mode():
  return lax.GatherScatterMode.CLIP


def _int32(idx):
  return lax.convert_element_type(idx, np.int32) if get_aval(idx).dtype != np.int32 else idx


def take_1d(arr, idx):
  """``arr[idx]`` for a 1-D ``arr`` and an integer index array of any shape."""
  idx = _int32(idx)
  ishape = get_aval(idx).shape
  dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
  return lax.gather(arr, lax.reshape(idx, ishape + (1,)), dn, (1,), mode=_mode())


def take_axis(x, idx, axis: int):
  """``x`` taken at the 1-D indices ``idx`` (traced or not) along ``axis``."""
  idx = _int32(idx)
  aval = get_aval(x)
  m = get_aval(idx).shape[0]
  offset = tuple(range(axis)) + tuple(range(axis + 1, aval.ndim))
  dn = lax.GatherDimensionNumbers(offset_dims=offset, collapsed_slice_dims=(axis,),
                                  start_index_map=(axis,))
  sizes = tuple(1 if i == axis else d for i, d in enumerate(aval.shape))
  return lax.gather(x, lax.reshape(idx, (m, 1)), dn, sizes, mode=_mode())


def take_along_last(s, idx):
  """``s[..., idx[...]]``: one element of each last-axis row of ``s`` (``idx`` has ``s``'s
  leading shape)."""
  idx = _int32(idx)
  aval = get_aval(s)
  k = aval.ndim - 1
  batch = tuple(range(k))
  dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(k,), start_index_map=(k,),
                                  operand_batching_dims=batch, start_indices_batching_dims=batch)
  return lax.gather(s, lax.reshape(idx, get_aval(idx).shape + (1,)), dn, (1,) * aval.ndim,
                    mode=_mode())
