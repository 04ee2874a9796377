"""The index functions of ``jnp``: take, take_along_axis, put, put_along_axis, place,
nonzero/flatnonzero/argwhere, compress/extract, choose, ix_, unravel_index and
ravel_multi_index (select, bincount and histogram live in _misc.py, unique in _setops.py).  They
bind what ``x[idx]`` and ``x.at[idx]`` bind (``_indexing.py``: ``_rewriting_take`` and
``_scatter_update``, one gather or scatter each)."""
from __future__ import annotations

import math
import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.lax import GatherDimensionNumbers, GatherScatterMode, ScatterDimensionNumbers
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, _broadcast_to, canonicalize_axis,
                                check_arraylike, promote_dtypes)
from ourjax.numpy._indexing import (_ARRAY, _Entry, _concrete, _index_dtype, _list_index,
                                    _normalized_index, _out_of_bounds_empty, _rewriting_take,
                                    _scatter_update)


# ------------------------------------------------------------------------------------------------
# take, take_along_axis, put


def _int_array(name, a):
  a = asarray(_as_operand(a))
  if not dtypes.is_integer(get_aval(a).dtype):
    raise ValueError(f"{name}: indices must have an integer type, got "
                     f"{get_aval(a).dtype.name}")
  return a


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
  """Elements of ``a`` at ``indices`` along ``axis`` (the flattened array for None).
  ``mode``: 'fill' (the default; out-of-bounds indices give ``fill_value``, NaN for inexact
  types; negative indices count from the end), 'clip' (indices clipped into range, negative
  ones to 0, as NumPy's) or 'wrap' (indices modulo the size)."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
  check_arraylike("take", a, indices)
  a = asarray(_as_operand(a))
  indices = _int_array("take", indices)
  if axis is None:
    from ourjax.numpy._shape import ravel
    a, axis = ravel(a), 0
  else:
    axis = canonicalize_axis(axis, get_aval(a).ndim)
  normalize = True
  if mode is None or mode == "fill":
    mode = "fill"
  elif mode == "raise":
    raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
  elif mode == "wrap":
    n = get_aval(a).shape[axis]
    if n:
      from ourjax.numpy._ufuncs import remainder
      indices = remainder(indices, np.array(n, get_aval(indices).dtype))
    mode = "clip"
  elif mode == "clip":
    normalize = False          # NumPy's clip mode: negative indices clip to 0
  else:
    raise ValueError(f"Invalid mode '{mode}' for np.take")
  if get_aval(a).shape[axis] == 0 and get_aval(indices).size:
    raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
  idx = (slice(None),) * axis + (indices,)
  return _rewriting_take(a, idx, mode=mode, fill_value=fill_value,
                         unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                         normalize_indices=normalize)


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None, *,
                    wrap_negative_indices=None):
  """``out[..., i, ...] = arr[..., indices[..., i, ...], ...]`` along ``axis``; the other
  dimensions of ``arr`` and ``indices`` broadcast.  ``mode`` as ``take``'s (default 'fill'), or
  'one_hot' (a one-hot mask contracted with ``arr``; out-of-bounds indices give 0).
  Negative indices count from the end unless ``wrap_negative_indices`` is False; its default
  (None) wraps them except in mode 'promise_in_bounds', which promises indices in [0, n)."""
  check_arraylike("take_along_axis", arr, indices)
  arr = asarray(_as_operand(arr))
  indices = asarray(_as_operand(indices))
  i_aval = get_aval(indices)
  if not dtypes.is_integer(i_aval.dtype):
    raise TypeError(f"take_along_axis indices must be of integer type, got {i_aval.dtype.name}")
  if axis is None:
    if i_aval.ndim != 1:
      raise ValueError(f"take_along_axis indices must be 1D if axis=None, got shape "
                       f"{i_aval.shape}")
    from ourjax.numpy._shape import ravel
    arr, axis = ravel(arr), 0
  a_aval = get_aval(arr)
  if i_aval.ndim != a_aval.ndim:
    raise ValueError(f"indices and arr must have the same number of dimensions; "
                     f"{i_aval.ndim} vs. {a_aval.ndim}")
  axis = canonicalize_axis(axis, a_aval.ndim)
  nd = a_aval.ndim
  others = [d for d in range(nd) if d != axis]
  try:
    common = [np.broadcast_shapes((a_aval.shape[d],), (i_aval.shape[d],))[0] for d in others]
  except ValueError:
    raise ValueError(f"Incompatible shapes for broadcasting: shapes="
                     f"{[tuple(i_aval.shape), tuple(a_aval.shape)]} (take_along_axis "
                     f"broadcasts all dimensions but axis {axis})") from None
  a_shape, i_shape = list(a_aval.shape), list(i_aval.shape)
  for d, s in zip(others, common):
    a_shape[d] = i_shape[d] = s
  if tuple(a_shape) != a_aval.shape:
    arr = _broadcast_to(arr, tuple(a_shape))
  if tuple(i_shape) != i_aval.shape:
    indices = _broadcast_to(indices, tuple(i_shape))
  one_hot = isinstance(mode, str) and mode == "one_hot"
  mode = None if one_hot else GatherScatterMode.from_any("fill" if mode is None else mode)
  out_shape = tuple(i_shape)
  n = a_shape[axis]
  if int(np.prod(out_shape, dtype=np.int64)) == 0 or (one_hot and n == 0):
    return lax.full(out_shape, 0, a_aval.dtype, weak_type=a_aval.weak_type)
  if n == 0:
    if mode != GatherScatterMode.FILL_OR_DROP:
      raise _out_of_bounds_empty(axis, 0)
    fv = lax.slicing._default_fill_value(a_aval.dtype) if fill_value is None else fill_value
    return lax.full(out_shape, fv, a_aval.dtype, weak_type=a_aval.weak_type)
  e = _Entry(_ARRAY, axis, indices, n)
  dt = _index_dtype([e], a_shape)
  if wrap_negative_indices is None:
    wrap_negative_indices = mode != GatherScatterMode.PROMISE_IN_BOUNDS
  # unwrapped indices keep their dtype (as JAX's: an int8 index gathers as int8); wrapping
  # adds the axis size, so it first widens them to ``dt``
  idx = _normalized_index(e, dt) if wrap_negative_indices else indices
  if one_hot:
    from ourjax.numpy._gathers import take_along_one_hot
    return take_along_one_hot(arr, asarray(idx), axis, others)
  idx = lax.reshape(idx, out_shape + (1,)) if not isinstance(idx, np.ndarray) else \
      idx.reshape(out_shape + (1,))
  dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(axis,),
                              start_index_map=(axis,), operand_batching_dims=tuple(others),
                              start_indices_batching_dims=tuple(others))
  return lax.gather(arr, idx, dn, (1,) * nd, mode=mode, fill_value=fill_value)


def put(a, ind, v, mode=None, *, inplace=True):
  """``a`` with the flat positions ``ind`` set to ``v`` (repeated to ``ind``'s size).  ``mode``:
  None (the default: negative indices count from the end, others are clipped into range),
  'clip' (NumPy's: every index clipped into [0, size), negative ones to 0), 'wrap', or
  'fill'/'drop' (out-of-bounds positions are skipped)."""
  if inplace:
    raise ValueError("jnp.put cannot modify arrays in-place, because ourjax arrays are "
                     "immutable. Pass inplace=False to instead return an updated array.")
  check_arraylike("put", a, ind, v)
  from ourjax.numpy._shape import ravel
  a = asarray(_as_operand(a))
  ind = ravel(_int_array("put", ind))
  v = ravel(asarray(_as_operand(v)))
  m, k = get_aval(ind).shape[0], get_aval(v).shape[0]
  if m == 0 or k == 0:
    return a
  if k != m:
    v = _rewriting_take(v, np.arange(m) % k)
  flat = ravel(a)
  size = get_aval(flat).shape[0]
  if mode is None:
    smode = GatherScatterMode.CLIP
  elif mode == "clip":       # (NumPy's and JAX's: a negative index is clipped to 0, not wrapped)
    from ourjax.numpy._ufuncs import clip
    ind = clip(ind, 0, size - 1)
    smode = GatherScatterMode.CLIP
  elif mode == "wrap":
    from ourjax.numpy._ufuncs import remainder
    ind = remainder(ind, np.array(max(size, 1), get_aval(ind).dtype))
    smode = GatherScatterMode.CLIP
  elif mode in ("fill", "drop"):
    smode = GatherScatterMode.FILL_OR_DROP
  elif mode == "raise":
    raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
  else:
    raise ValueError(f"mode should be one of 'wrap' or 'clip'; got {mode=}")
  out = _scatter_update(flat, (ind,), v, lax.scatter, "set", mode=smode)
  return lax.reshape(out, get_aval(a).shape)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
  """``arr`` with ``out[..., indices[..., i, ...], ...] = values[..., i, ...]`` along ``axis``
  (the flattened ``arr`` for None): the inverse of ``take_along_axis``.  ``values`` broadcast
  to ``indices``' shape, whose other dimensions broadcast against ``arr``'s; ``mode`` as
  ``x.at[...].set``'s (out-of-bounds positions are dropped by default)."""
  if inplace:
    raise ValueError("jnp.put_along_axis cannot modify arrays in-place, because ourjax arrays "
                     "are immutable. Pass inplace=False to instead return an updated array.")
  check_arraylike("put_along_axis", arr, indices, values)
  arr = asarray(_as_operand(arr))
  indices = asarray(_as_operand(indices))
  values = asarray(_as_operand(values))
  shape = get_aval(arr).shape
  if axis is None:
    from ourjax.numpy._shape import ravel
    arr, axis = ravel(arr), 0
  nd, i_shape = get_aval(arr).ndim, get_aval(indices).shape
  if len(i_shape) != nd:
    raise ValueError(f"put_along_axis arguments 'arr' and 'indices' must have same ndim. Got "
                     f"arr.ndim={nd} and indices.ndim={len(i_shape)}.")
  axis = canonicalize_axis(axis, nd)
  v_shape = get_aval(values).shape
  try:
    if tuple(np.broadcast_shapes(v_shape, i_shape)) != tuple(i_shape):
      raise ValueError
  except ValueError:
    raise ValueError(f"put_along_axis argument 'values' must be broadcastable to 'indices'. "
                     f"Got values.shape={v_shape} and indices.shape={i_shape}.") from None
  if v_shape != i_shape:
    values = _broadcast_to(values, i_shape)
  # the other axes are indexed by broadcasting aranges (NumPy's indices(sparse=True))
  idx = tuple(indices if d == axis else
              np.arange(n).reshape((1,) * d + (n,) + (1,) * (nd - d - 1))
              for d, n in enumerate(get_aval(arr).shape))
  out = _scatter_update(arr, idx, values, lax.scatter, "set", mode=mode)
  return lax.reshape(out, shape) if get_aval(out).shape != shape else out


def place(arr, mask, vals, *, inplace=True):
  """``arr`` with the elements where ``mask`` is true (in C order) set to the values of
  ``vals`` in turn, repeated as needed (NumPy's ``place``, returning the result)."""
  check_arraylike("place", arr, mask, vals)
  from ourjax.numpy._shape import ravel
  data = asarray(_as_operand(arr))
  mask = asarray(_as_operand(mask))
  vals = ravel(asarray(_as_operand(vals)))
  if inplace:
    raise ValueError("jnp.place cannot modify arrays in-place, because ourjax arrays are "
                     "immutable. Pass inplace=False to instead return an updated array.")
  n, m = get_aval(data).size, get_aval(vals).shape[0]
  if n != get_aval(mask).size:
    raise ValueError(f"place: arr and mask must be the same size (got shapes "
                     f"{get_aval(data).shape} and {get_aval(mask).shape})")
  if not m:
    raise ValueError("Cannot place values from an empty array")
  if not n:
    return data
  pos, count = _compact(lax.reshape(_as_mask(mask), (n,)), n)
  dt = get_aval(pos).dtype
  pos = lax.select_n(lax.lt(lax.iota(dt, n), count), lax.full((n,), n, dt), pos)  # dropped
  v = vals if m == n else _rewriting_take(vals, np.arange(n) % m)
  out = _scatter_update(ravel(data), (pos,), v, lax.scatter, "set",
                        mode=GatherScatterMode.FILL_OR_DROP)
  return lax.reshape(out, get_aval(data).shape)


# ------------------------------------------------------------------------------------------------
# nonzero and friends


def _static_size(size, name):
  size = core.concrete_or_error(operator.index, size,
                                f"The size argument of jnp.{name} must be static.")
  if size < 0:
    raise ValueError(f"jnp.{name}: size must be non-negative, got {size}")
  return size


def _count(mask_flat, name):
  """The number of True values of a concrete mask (for results whose size it is)."""
  c = _concrete(mask_flat)
  if c is None:
    raise core.ConcretizationTypeError(
        mask_flat, f"The size argument of jnp.{name} must be statically specified to use "
        f"jnp.{name} within transformations (jit, vmap, ...): its result shape depends on the "
        "values of its input.")
  return int(np.count_nonzero(c))


def _compact(mask_flat, size):
  """(positions, count): the indices of the first ``size`` True entries of the 1-D boolean
  ``mask_flat`` in order (zeros after the last one), and the number of True entries."""
  dt = dtypes.default_int_dtype()
  n = get_aval(mask_flat).shape[0]
  if n == 0 or size == 0:
    return lax.full((size,), 0, dt), lax.full((), 0, dt)
  m = lax.convert_element_type(mask_flat, dt)
  slot = lax.sub(lax.cumsum(m, 0), np.ones((), dt))
  slot = lax.select_n(mask_flat, np.full((n,), size, dt), slot)   # False entries: dropped
  dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                               scatter_dims_to_operand_dims=(0,))
  pos = lax.scatter(lax.full((size,), 0, dt), lax.reshape(slot, (n, 1)), lax.iota(dt, n), dn,
                    mode=GatherScatterMode.FILL_OR_DROP)
  return pos, lax.reduce_sum(m, (0,))


def _as_mask(a):
  a = asarray(a)
  aval = get_aval(a)
  return a if aval.dtype == np.bool_ else lax.ne(a, lax.full((), 0, aval.dtype))


def nonzero(a, *, size=None, fill_value=None):
  """Tuple of index arrays, one per dimension, of the nonzero elements of ``a`` (in C order).
  Under a transformation, pass a static ``size``: the result holds the first ``size`` indices,
  padded with ``fill_value`` (0, or one value per dimension)."""
  check_arraylike("nonzero", a)
  a = asarray(_as_operand(a))
  aval = get_aval(a)
  if aval.ndim == 0:
    raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                     "jnp.atleast_1d(scalar).nonzero() instead.")
  mask = lax.reshape(_as_mask(a), (aval.size,))
  size = _count(mask, "nonzero") if size is None else _static_size(size, "nonzero")
  pos, count = _compact(mask, size)
  dt = get_aval(pos).dtype
  fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * aval.ndim
  if len(fills) != aval.ndim:
    raise ValueError(f"fill_value must be a scalar or a tuple of length {aval.ndim}; got "
                     f"{fill_value}")
  valid = lax.lt(lax.iota(dt, size), count) if fill_value is not None else None
  out = []
  for j, (d, fv) in enumerate(zip(aval.shape, fills)):
    stride = int(np.prod(aval.shape[j + 1:], dtype=np.int64))
    c = pos if stride <= 1 else lax.div(pos, np.array(stride, dt))
    if len(out):                      # the first coordinate is below its size already
      c = lax.rem(c, np.array(max(d, 1), dt))
    if valid is not None and fv is not None:
      fv = asarray(fv)
      if get_aval(fv).shape != ():
        raise ValueError(f"fill_value must be a scalar or a tuple of scalars; got {fill_value}")
      fv = lax.broadcast_in_dim(lax.convert_element_type(fv, dt), (size,), ())
      c = lax.select_n(valid, fv, c)
    out.append(c)
  return tuple(out)


def flatnonzero(a, *, size=None, fill_value=None):
  """Indices of the nonzero elements of the flattened ``a``."""
  from ourjax.numpy._shape import ravel
  check_arraylike("flatnonzero", a)
  return nonzero(ravel(asarray(_as_operand(a))), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
  """The indices of the nonzero elements of ``a``, one row per element (shape (N, a.ndim))."""
  check_arraylike("argwhere", a)
  a = asarray(_as_operand(a))
  aval = get_aval(a)
  if aval.ndim == 0:
    n = _count(lax.reshape(_as_mask(a), (1,)), "argwhere") if size is None else \
        _static_size(size, "argwhere")
    return lax.full((n, 0), 0, dtypes.default_int_dtype())
  cols = nonzero(a, size=size, fill_value=fill_value)
  n = get_aval(cols[0]).shape[0]
  return lax.concatenate([lax.reshape(c, (n, 1)) for c in cols], 1)


def _fill_where(valid, x, fill_value, axis):
  """``x`` with the slices along ``axis`` where ``valid`` is False set to ``fill_value``."""
  aval = get_aval(x)
  fv = asarray(fill_value)
  if get_aval(fv).shape != ():
    raise ValueError(f"fill_value must be a scalar, got shape {get_aval(fv).shape}")
  fv = lax.broadcast_in_dim(lax.convert_element_type(fv, aval.dtype), aval.shape, ())
  return lax.select_n(lax.broadcast_in_dim(valid, aval.shape, (axis,)), fv, x)


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
  """The slices of ``a`` along ``axis`` where the 1-D ``condition`` is true (the flattened
  ``a`` for None).  With ``size``, the first ``size`` of them, padded with ``fill_value``."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.compress is not supported.")
  check_arraylike("compress", condition, a)
  from ourjax.numpy._shape import ravel
  condition = asarray(_as_operand(condition))
  a = asarray(_as_operand(a))
  if get_aval(condition).ndim != 1:
    raise ValueError("condition must be a 1D array")
  if axis is None:
    a, axis = ravel(a), 0
  else:
    axis = canonicalize_axis(axis, get_aval(a).ndim)
  cond = _as_mask(condition)
  n, m = get_aval(a).shape[axis], get_aval(cond).shape[0]
  if m > n:
    extra = _concrete(lax.slice(cond, (n,), (m,)))
    if extra is not None and extra.any():
      raise ValueError("condition contains entries that are out of bounds")
    cond = lax.slice(cond, (0,), (n,))
  elif m < n:
    a = lax.slice_in_dim(a, 0, m, 1, axis)
  k = _count(cond, "compress") if size is None else _static_size(size, "compress")
  aval = get_aval(a)
  if aval.shape[axis] == 0:           # nothing to take: all fill
    shape = aval.shape[:axis] + (k,) + aval.shape[axis + 1:]
    return lax.full(shape, fill_value if k else 0, aval.dtype, weak_type=aval.weak_type)
  pos, count = _compact(cond, k)
  res = _rewriting_take(a, (slice(None),) * axis + (pos,))
  if size is not None:
    res = _fill_where(lax.lt(lax.iota(get_aval(pos).dtype, k), count), res, fill_value, axis)
  return res


def extract(condition, arr, *, size=None, fill_value=0):
  """The elements of the flattened ``arr`` where the flattened ``condition`` is true."""
  from ourjax.numpy._shape import ravel
  check_arraylike("extract", condition, arr)
  return compress(ravel(asarray(_as_operand(condition))), ravel(asarray(_as_operand(arr))),
                  size=size, fill_value=fill_value)


# ------------------------------------------------------------------------------------------------
# choose


def choose(a, choices, out=None, mode="raise"):
  """``choices[a[i]][i]`` elementwise (all broadcast together).  ``mode``: 'raise' (``a`` must
  be concrete and in range), 'wrap' or 'clip'."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.choose is not supported.")
  check_arraylike("choose", a)
  a = asarray(_as_operand(a))
  if not dtypes.is_integer(get_aval(a).dtype):
    raise TypeError(f"jnp.choose: a must be an integer array, got {get_aval(a).dtype.name}")
  if isinstance(choices, (Array, Tracer, np.ndarray)):
    choices = [choices[i] for i in range(np.shape(choices)[0] if isinstance(choices, np.ndarray)
                                         else get_aval(choices).shape[0])]
  choices = list(choices)
  if not choices:
    raise ValueError("jnp.choose: choices must be non-empty")
  check_arraylike("choose", *choices)
  n = len(choices)
  from ourjax.numpy._ufuncs import clip, remainder
  if mode == "raise":
    c = core.concrete_or_error(
        np.asarray, a, "The error occurred because jnp.choose was traced with mode='raise'. "
        "Use mode='wrap' or mode='clip' instead.")
    if np.any((c < 0) | (c >= n)):
      raise ValueError("invalid entry in choice array")
  elif mode == "wrap":
    a = remainder(a, np.array(n, get_aval(a).dtype))
  elif mode == "clip":
    a = clip(a, 0, n - 1)
  else:
    raise ValueError(f"invalid mode {mode!r} for jnp.choose; expected 'raise', 'wrap' or "
                     "'clip'")
  values = promote_dtypes(*[_as_operand(v) for v in choices])
  shape = tuple(np.broadcast_shapes(get_aval(a).shape, *[get_aval(v).shape for v in values]))
  values = [v if get_aval(v).shape == shape else _broadcast_to(v, shape) for v in values]
  which = lax.convert_element_type(a, np.int32)
  which = which if get_aval(which).shape == shape else _broadcast_to(which, shape)
  return lax.select_n(which, *values)


# ------------------------------------------------------------------------------------------------
# ix_, unravel_index, ravel_multi_index


def ix_(*args):
  """Open-mesh index arrays: the i-th of k 1-D inputs reshaped to have its length on axis i."""
  k = len(args)
  out = []
  for i, a in enumerate(args):
    check_arraylike("ix_", a)
    a = asarray(_as_operand(a)) if not isinstance(a, (list, tuple)) else asarray(_list_index(a))
    aval = get_aval(a)
    if aval.ndim != 1:
      raise ValueError(f"Arguments to jnp.ix_ must be 1-dimensional, got shape "
                       f"{aval.shape}")
    if aval.dtype == np.bool_:
      raise NotImplementedError("Boolean arguments to jnp.ix_ are not implemented")
    out.append(lax.reshape(a, (1,) * i + aval.shape + (1,) * (k - i - 1)))
  return tuple(out)


def _shape_arg(shape, name):
  shape = (shape,) if np.ndim(shape) == 0 else shape
  return tuple(core.concrete_or_error(operator.index, d, f"jnp.{name}: dims must be static")
               for d in shape)


def unravel_index(indices, shape):
  """The coordinates in an array of ``shape`` of the flat ``indices``.  As JAX's: negative
  indices count from the end, and indices out of range are clipped to the first or last
  element."""
  check_arraylike("unravel_index", indices)
  indices = asarray(_as_operand(indices))
  dt = get_aval(indices).dtype
  if not dtypes.is_integer(dt):
    raise TypeError(f"unravel_index: only integer indices are allowed, got {dt.name}")
  out_dt = dt                   # the indices' dtype, as JAX's (the shape is weakly typed)
  # computed at least as wide as the default int (NumPy's promotion: an internal widening, not
  # the user-visible lattice, so it holds under jax_numpy_dtype_promotion='strict' too)
  dt = dtypes.canonicalize_dtype(np.promote_types(dt, dtypes.default_int_dtype()))
  dims = list(shape) if isinstance(shape, (tuple, list)) or np.ndim(shape) == 1 else [shape]
  if any(isinstance(d, Tracer) and not core.is_concrete(d) for d in dims):
    return _unravel_traced_shape(indices, dims)
  shape = _shape_arg(shape, "unravel_index")
  if any(d < 0 for d in shape):
    raise ValueError(f"unravel_index: dimensions must be non-negative, got {shape}")
  size = int(np.prod(shape, dtype=np.int64))
  if size == 0:
    raise ValueError("unravel_index: cannot unravel into an empty shape "
                     f"{shape}")
  i = lax.convert_element_type(indices, dt)
  if np.issubdtype(dt, np.signedinteger):     # into [-size, size), negatives from the end
    i = lax.clamp(np.array(-size, dt), i, np.array(size - 1, dt))
    i = lax.select_n(lax.lt(i, np.zeros((), dt)), i, lax.add(i, np.array(size, dt)))
  else:
    i = lax.min(i, np.array(size - 1, dt))
  out = []
  for d in reversed(shape):
    out.append(lax.rem(i, np.array(d, dt)))
    i = lax.div(i, np.array(d, dt))
  return tuple(o if out_dt == dt else lax.convert_element_type(o, out_dt)
               for o in reversed(out))


def _unravel_traced_shape(indices, dims):
  """``unravel_index`` into a shape given by traced sizes (a jitted call that passes the shape
  as an argument): the coordinates by repeated divmod, out-of-range indices clipped to the
  last (or first) element, as JAX's."""
  from ourjax.numpy._ufuncs import divmod as _divmod, where, greater, less, subtract
  if any(np.ndim(d) != 0 for d in dims):
    raise ValueError("unravel_index: shape should be a scalar or 1D sequence.")
  out = [None] * len(dims)
  rest = indices
  for k in reversed(range(len(dims))):
    rest, out[k] = _divmod(rest, dims[k])
  over = greater(rest, 0)
  under = less(rest, -1) if not np.issubdtype(get_aval(indices).dtype, np.unsignedinteger) else \
      lax.full_like(over, False)
  return tuple(where(over, subtract(d, 1), where(under, 0, c)).astype(get_aval(indices).dtype)
               for d, c in zip(dims, out))


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
  """Flat indices of the coordinate arrays ``multi_index`` into an array of shape ``dims``.
  ``mode``: 'raise' (coordinates must be concrete and in range), 'wrap', 'clip' or 'ignore'
  (coordinates used as they are).  ``dtype``: of the result (default: the coordinates')."""
  dims = _shape_arg(dims, "ravel_multi_index")
  multi_index = tuple(multi_index)
  if len(multi_index) != len(dims):
    raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
  check_arraylike("ravel_multi_index", *multi_index)
  idx = [asarray(_as_operand(i)) for i in multi_index]
  for i in idx:
    if not dtypes.is_integer(get_aval(i).dtype):
      raise TypeError(f"only int indices permitted, got {get_aval(i).dtype.name}")
  if order not in ("C", "F"):
    raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
  from ourjax.numpy._ufuncs import clip, remainder
  if mode == "raise":
    for i, d in zip(idx, dims):
      c = core.concrete_or_error(
          np.asarray, i, "The error occurred because ravel_multi_index was jit-compiled with "
          "mode='raise'. Use mode='wrap' or mode='clip' instead.")
      if np.any((c < 0) | (c >= d)):
        raise ValueError("invalid entry in coordinates array")
  elif mode == "wrap":
    idx = [remainder(i, np.array(d, get_aval(i).dtype)) for i, d in zip(idx, dims)]
  elif mode == "clip":
    idx = [clip(i, 0, d - 1) for i, d in zip(idx, dims)]
  elif mode != "ignore":
    raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or 'ignore'.")
  if dtype is not None:
    dt = dtypes.check_user_dtype(dtype, "ravel_multi_index")
    if not dtypes.is_integer(dt) or dt == np.bool_:
      raise ValueError(f"dtype={dt} is not an integer type.")
  else:
    dt = dtypes.result_type(*[get_aval(i).dtype for i in idx])
    if dt == np.bool_ or not dtypes.is_integer(dt):
      dt = dtypes.default_int_dtype()
  if math.prod(dims) - 1 > np.iinfo(dt).max:
    raise ValueError(f"jnp.ravel_multi_index: dtype={dt} not large enough to hold flattened "
                     f"index for dims={dims}. Use the dtype argument to pass a suitable dtype "
                     "(e.g. dtype=np.min_scalar_type(prod(dims))).")
  strides, s = [], 1
  for d in (reversed(dims) if order == "C" else dims):
    strides.append(s)
    s *= d
  if order == "C":
    strides.reverse()
  shape = tuple(np.broadcast_shapes(*[get_aval(i).shape for i in idx]))
  out = lax.full(shape, 0, dt)
  for i, st in zip(idx, strides):
    i = lax.convert_element_type(i, dt)
    if get_aval(i).shape != shape:
      i = _broadcast_to(i, shape)
    out = lax.add(out, lax.mul(i, np.array(st, dt)))
  return out
