"""Three small gathers the jnp functions need internally (the user-facing ``take`` and
``take_along_axis`` live with the indexing functions; indices are int32 and clipped into
range), and ``take_along_axis``'s one-hot form (a masked contraction instead of a gather)."""
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


def take_along_one_hot(arr, idx, axis, others):
  """``take_along_axis(arr, idx, axis, mode='one_hot')`` for ``arr`` and ``idx`` already
  broadcast in every dimension but ``axis`` (negatives already wrapped): a one-hot mask of the
  indices contracted with ``arr`` along ``axis`` (batched over ``others``) at full precision.
  An out-of-bounds index selects nothing (0); a NaN or inf in a row reaches every result of it,
  as any product with the mask does."""
  a_aval = get_aval(arr)
  out_shape = get_aval(idx).shape
  nd = len(out_shape)
  n = a_aval.shape[axis]
  idt = get_aval(idx).dtype
  full = out_shape + (n,)
  mask = lax.eq(lax.broadcast_in_dim(idx, full, tuple(range(nd))),
                lax.broadcasted_iota(idt, full, nd))
  cdt = np.dtype(np.int32) if a_aval.dtype == np.bool_ else a_aval.dtype
  a = arr if a_aval.dtype == cdt else lax.convert_element_type(arr, cdt)
  out = lax.dot_general(lax.convert_element_type(mask, cdt), a,
                        (((nd,), (axis,)), (tuple(others), tuple(others))),
                        precision=lax.Precision.HIGHEST, preferred_element_type=cdt)
  # dot_general puts the batch dimensions first and the gathered one last
  perm = list(range(nd - 1))
  perm.insert(axis, nd - 1)
  out = lax.transpose(out, tuple(perm))
  return lax.ne(out, lax._const(out, 0)) if a_aval.dtype == np.bool_ else out
