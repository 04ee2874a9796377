"""Slicing primitives: static and dynamic slices, dynamic updates, gather and the scatters
(``_scatter.py``, re-exported here).
Each primitive is followed by all of its rules (shape/dtype, NumPy implementation from
``backends/reference_ops.py``, JVP, transpose, batching).

Conventions, as in ``jax.lax``:

* Dynamic start indices are traced integer scalars. The wrappers read a negative index as
  counting from the end (``allow_negative_indices=True``); the primitives then clamp every start
  so that the slice lies inside the operand (XLA's semantics).
* gather/scatter take their index vectors in the last dimension of the indices array.
  ``mode`` says what happens to out-of-bounds windows: ``CLIP`` clamps them inside,
  ``FILL_OR_DROP`` fills gathered windows with ``fill_value`` and drops scattered ones, and
  ``PROMISE_IN_BOUNDS`` clamps gathers and drops scatters (what XLA does anyway).
  ``lax.gather`` defaults to ``PROMISE_IN_BOUNDS``, the scatters to ``FILL_OR_DROP``.
* Batching uses the ``operand_batching_dims``/``start_indices_batching_dims`` fields of the
  dimension numbers, so a vmapped gather or scatter is a single gather or scatter.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from ourjax import core, dtypes
from ourjax.core import Tracer, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters.ad import Zero
from ourjax.lax._utils import as_shape, canonicalize_axis, standard_primitive
from ourjax.lax import elementwise as _ew
from ourjax.lax import structural as _st


def _ref():
  from ourjax.backends import reference_ops
  return reference_ops


def _weak0(x, *_, **__):
  return x.weak_type


def _shape_of(x):
  return x.aval.shape if ad.is_undefined_primal(x) else get_aval(x).shape


def _zeros_of(x):
  """Zeros with x's shape and dtype (x may be an UndefinedPrimal)."""
  aval = x.aval if ad.is_undefined_primal(x) else get_aval(x)
  return _st.full(aval.shape, 0, aval.dtype)


# ------------------------------------------------------------------------------------------------
# slice: operand[start:limit:stride] per dimension, all static


def slice(operand, start_indices, limit_indices, strides=None):  # noqa: A001 (lax's name)
  start_indices = tuple(int(i) for i in start_indices)
  limit_indices = tuple(int(i) for i in limit_indices)
  strides = None if strides is None else tuple(int(s) for s in strides)
  return slice_p.bind(operand, start_indices=start_indices, limit_indices=limit_indices,
                      strides=strides)


def _slice_shape(x, start_indices, limit_indices, strides):
  if len(start_indices) != x.ndim:
    raise TypeError(f"slice start_indices must have length equal to the number of dimensions "
                    f"of the operand, got indices {start_indices} for operand shape {x.shape}.")
  if len(limit_indices) != len(start_indices):
    raise TypeError(f"slice limit_indices must have the same length as start_indices, got "
                    f"start_indices {start_indices} and limit_indices {limit_indices}.")
  if any(l > n for l, n in zip(limit_indices, x.shape)):
    raise TypeError(f"slice limit_indices must be less than or equal to operand shape, got "
                    f"limit_indices {limit_indices} for operand shape {x.shape}.")
  if any(s < 0 for s in start_indices):
    raise TypeError(f"slice start_indices must be greater than or equal to zero, got "
                    f"start_indices of {start_indices}.")
  if any(l < s for s, l in zip(start_indices, limit_indices)):
    raise TypeError(f"slice limit_indices must be greater than or equal to start_indices, got "
                    f"start_indices {start_indices} and limit_indices {limit_indices}.")
  diff = tuple(l - s for s, l in zip(start_indices, limit_indices))
  if strides is None:
    return diff
  if len(strides) != x.ndim:
    raise TypeError(f"slice strides must have length equal to the number of dimensions of the "
                    f"operand, got strides {strides} for operand shape {x.shape}.")
  if any(s <= 0 for s in strides):
    raise TypeError(f"slice strides must be positive, got {strides}")
  return tuple(0 if d == 0 else (d - 1) // s + 1 for d, s in zip(diff, strides))


slice_p = standard_primitive("slice", _slice_shape, lambda x, **_: x.dtype, _weak0)
slice_p.def_impl(lambda x, start_indices, limit_indices, strides:
                 _ref().slice(x, start_indices, limit_indices, strides))


def _slice_transpose(ct, x, start_indices, limit_indices, strides):
  # the cotangent goes back where the slice came from, with zeros between strided elements
  shape = x.aval.shape
  out_shape = get_aval(ct).shape
  strides = strides or (1,) * len(shape)
  config = []
  for n, s, st, k in zip(shape, start_indices, strides, out_shape):
    used = 0 if k == 0 else (k - 1) * st + 1
    config.append((s, n - s - used, st - 1))
  return [_st.pad(ct, np.zeros((), get_aval(ct).dtype), config)]


ad.deflinear(slice_p, _slice_transpose)


def _slice_batch(vals, dims, start_indices, limit_indices, strides):
  (x,), (d,) = vals, dims
  start, limit = list(start_indices), list(limit_indices)
  start.insert(d, 0)
  limit.insert(d, get_aval(x).shape[d])
  if strides is not None:
    strides = list(strides)
    strides.insert(d, 1)
  return slice(x, start, limit, strides), d


batching.batch_rules[slice_p] = _slice_batch


def slice_in_dim(operand, start_index, limit_index, stride: int = 1, axis: int = 0):
  """``operand[..., start:limit:stride]`` along ``axis``; ``None`` and negative indices are read
  as in Python."""
  shape = get_aval(operand).shape
  axis = canonicalize_axis(axis, len(shape))
  n = shape[axis]
  start = 0 if start_index is None else int(start_index)
  limit = n if limit_index is None else int(limit_index)
  start = start + n if start < 0 else start
  limit = limit + n if limit < 0 else limit
  starts = [0] * len(shape)
  limits = list(shape)
  strides = [1] * len(shape)
  starts[axis], limits[axis], strides[axis] = start, limit, int(stride)
  return slice(operand, starts, limits, strides)


def index_in_dim(operand, index, axis: int = 0, keepdims: bool = True):
  """``operand[..., index]`` along ``axis`` for a static integer index."""
  shape = get_aval(operand).shape
  axis = canonicalize_axis(axis, len(shape))
  index = int(index)
  n = shape[axis]
  wrapped = index + n if index < 0 else index
  if not 0 <= wrapped < n:
    raise IndexError(f"index {index} is out of bounds for axis {axis} with size {n}")
  out = slice_in_dim(operand, wrapped, wrapped + 1, 1, axis)
  return out if keepdims else _st.squeeze(out, (axis,))


# ------------------------------------------------------------------------------------------------
# Dynamic start indices


def _is_static_int(i) -> bool:
  """A concrete integer scalar (Python, NumPy or a concrete Array), read at trace time."""
  if isinstance(i, (Tracer, bool)):
    return False
  if isinstance(i, (int, np.integer)):
    return True
  try:
    aval = get_aval(i)
  except TypeError:
    return False
  return aval.ndim == 0 and dtypes.is_integer(aval.dtype)


def _dynamic_slice_indices(operand, start_indices, allow_negative_indices,
                           name="dynamic_slice"):
  """Scalar start indices of one integer dtype, negative ones counted from the end."""
  shape = get_aval(operand).shape
  if not isinstance(start_indices, (list, tuple)):
    aval = get_aval(start_indices)
    if aval.ndim != 1:
      raise ValueError(f"Slice indices must be a 1D sequence, got {aval.shape}")
    start_indices = [_st.reshape(slice(start_indices, (k,), (k + 1,)), ())
                     for k in range(aval.shape[0])]
  if len(start_indices) != len(shape):
    raise ValueError(f"Length of slice indices must match number of operand dimensions "
                     f"({len(start_indices)} vs {len(shape)})")
  if isinstance(allow_negative_indices, bool):
    allow_negative_indices = [allow_negative_indices] * len(shape)
  # the typed indices (arrays and NumPy scalars) must share one integer dtype, as JAX's; it is
  # the index dtype, which Python ints (and weakly typed values) follow
  typed = [get_aval(i) for i in start_indices if not isinstance(i, (int, np.ndarray))
           or isinstance(i, np.ndarray) and i.ndim == 0]
  typed = [a for a in typed if not a.weak_type]
  if len({a.dtype for a in typed}) > 1:
    raise TypeError(f"index arguments to {name} must be integers of the same type, got: "
                    f"{', '.join(a.dtype.name for a in typed)}")
  array_dtypes = [get_aval(i).dtype for i in start_indices if not _is_static_int(i)]
  array_dtypes = [d for d in array_dtypes if dtypes.is_integer(d)]
  idx_dtype = (array_dtypes[0] if array_dtypes else
               typed[0].dtype if typed and dtypes.is_integer(typed[0].dtype) else
               dtypes.canonicalize_dtype(np.int64))
  out = []
  for i, n, neg in zip(start_indices, shape, allow_negative_indices):
    if _is_static_int(i):
      v = int(np.asarray(i))
      if neg and v < 0:
        v += n
      info = np.iinfo(idx_dtype)
      out.append(np.array(min(max(v, int(info.min)), int(info.max)), idx_dtype))
      continue
    aval = get_aval(i)
    if neg and aval.ndim == 0 and np.issubdtype(aval.dtype, np.signedinteger):
      i = _ew.select_n(_ew.lt(i, np.zeros((), aval.dtype)), i,
                       _ew.add(i, np.array(n, aval.dtype)))
    out.append(i)
  return out


def _check_index_dtypes(name, idx_avals):
  if any(a.dtype != idx_avals[0].dtype or not dtypes.is_integer(a.dtype) for a in idx_avals):
    raise TypeError(f"index arguments to {name} must be integers of the same type, got: "
                    f"{', '.join(a.dtype.name for a in idx_avals)}")


# ------------------------------------------------------------------------------------------------
# dynamic_slice(operand, *start_indices, slice_sizes)


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
  idx = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
  return dynamic_slice_p.bind(operand, *idx, slice_sizes=as_shape(slice_sizes))


def _dynamic_slice_shape(x, *idx, slice_sizes):
  if len(idx) != x.ndim:
    raise TypeError(f"dynamic_slice start_indices must have length equal to the number of "
                    f"dimensions of the operand, got {len(idx)} indices for operand shape "
                    f"{x.shape}.")
  if len(slice_sizes) != len(idx):
    raise TypeError(f"dynamic_slice slice_sizes must have the same length as start_indices, got "
                    f"start_indices length {len(idx)} and slice_sizes {slice_sizes}.")
  if any(s > n for s, n in zip(slice_sizes, x.shape)):
    raise TypeError(f"slice slice_sizes must be less than or equal to operand shape, got "
                    f"slice_sizes {slice_sizes} for operand shape {x.shape}.")
  if any(s < 0 for s in slice_sizes):
    raise TypeError(f"slice slice_sizes must be greater than or equal to zero, got slice_sizes "
                    f"of {slice_sizes}.")
  if any(i.ndim != 0 for i in idx):
    raise TypeError(f"start_indices arguments to dynamic_slice must be scalars, got indices of "
                    f"shapes {[i.shape for i in idx]}")
  return tuple(slice_sizes)


def _dynamic_slice_dtype(x, *idx, slice_sizes):
  if idx:
    _check_index_dtypes("dynamic_slice", idx)
  return x.dtype


dynamic_slice_p = standard_primitive("dynamic_slice", _dynamic_slice_shape, _dynamic_slice_dtype,
                                     _weak0)
dynamic_slice_p.def_impl(lambda x, *idx, slice_sizes: _ref().dynamic_slice(x, idx, slice_sizes))
ad.defjvp(dynamic_slice_p,
          lambda t, x, *idx, slice_sizes: dynamic_slice_p.bind(t, *idx, slice_sizes=slice_sizes))


def _dynamic_slice_transpose(ct, x, *idx, slice_sizes):
  assert ad.is_undefined_primal(x) and not any(ad.is_undefined_primal(i) for i in idx)
  return [dynamic_update_slice_p.bind(_zeros_of(x), ct, *idx)] + [None] * len(idx)


ad.transpose_rules[dynamic_slice_p] = ad._zero_aware_transpose(_dynamic_slice_transpose)


def _batched_index_matrix(idx, dims, size):
  """Stack per-dimension scalar indices (each unbatched or batched at 0) into a (size, n)
  array of start indices."""
  cols = [_st.broadcast_in_dim(i, (size, 1), (0,) if d is not None else ())
          for i, d in zip(idx, dims)]
  return _st.concatenate(cols, 1)


def _dynamic_slice_batch(vals, dims, slice_sizes):
  x, *idx = vals
  dx, *didx = dims
  if all(d is None for d in didx):
    # only the operand is batched: slice it whole along its batch dimension
    zero = np.zeros((), get_aval(idx[0]).dtype if idx else np.int32)
    idx = list(idx)
    idx.insert(dx, zero)
    sizes = list(slice_sizes)
    sizes.insert(dx, get_aval(x).shape[dx])
    return dynamic_slice_p.bind(x, *idx, slice_sizes=tuple(sizes)), dx
  # batched start indices: one gather, clamping as dynamic_slice does
  size = next(get_aval(i).shape[0] for i, d in zip(idx, didx) if d is not None)
  n = len(slice_sizes)
  index = _batched_index_matrix(idx, didx, size)
  if dx is None:
    dnums = GatherDimensionNumbers(offset_dims=tuple(range(1, n + 1)), collapsed_slice_dims=(),
                                   start_index_map=tuple(range(n)))
    return gather(x, index, dnums, slice_sizes, mode=GatherScatterMode.CLIP), 0
  x = batching.moveaxis(x, dx, 0)
  dnums = GatherDimensionNumbers(offset_dims=tuple(range(1, n + 1)), collapsed_slice_dims=(),
                                 start_index_map=tuple(range(1, n + 1)),
                                 operand_batching_dims=(0,), start_indices_batching_dims=(0,))
  sizes = (min(1, size),) + tuple(slice_sizes)
  return gather(x, index, dnums, sizes, mode=GatherScatterMode.CLIP), 0


batching.batch_rules[dynamic_slice_p] = _dynamic_slice_batch


def dynamic_slice_in_dim(operand, start_index, slice_size: int, axis: int = 0, *,
                         allow_negative_indices: bool = True):
  shape = get_aval(operand).shape
  axis = canonicalize_axis(axis, len(shape))
  starts = [0] * len(shape)
  starts[axis] = start_index
  allow = [False] * len(shape)
  allow[axis] = allow_negative_indices
  sizes = list(shape)
  sizes[axis] = int(slice_size)
  return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(operand, index, axis: int = 0, keepdims: bool = True, *,
                         allow_negative_indices: bool = True):
  out = dynamic_slice_in_dim(operand, index, 1, axis,
                             allow_negative_indices=allow_negative_indices)
  if keepdims:
    return out
  return _st.squeeze(out, (canonicalize_axis(axis, get_aval(operand).ndim),))


# ------------------------------------------------------------------------------------------------
# dynamic_update_slice(operand, update, *start_indices)


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
  idx = _dynamic_slice_indices(operand, start_indices, allow_negative_indices,
                               "dynamic_update_slice")
  return dynamic_update_slice_p.bind(operand, update, *idx)


def _dynamic_update_slice_shape(x, u, *idx):
  if x.ndim != u.ndim:
    raise TypeError(f"dynamic_update_slice update must have the same rank as operand, got "
                    f"update shape {u.shape} for operand shape {x.shape}.")
  if len(idx) != x.ndim:
    raise TypeError(f"dynamic_update_slice start_indices must have length equal to the rank of "
                    f"operand, got {len(idx)} indices for operand shape {x.shape}.")
  if any(k > n for k, n in zip(u.shape, x.shape)):
    raise TypeError(f"dynamic_update_slice update shape must be smaller than operand shape, got "
                    f"update shape {u.shape} for operand shape {x.shape}.")
  if any(i.ndim != 0 for i in idx):
    raise TypeError(f"start_indices arguments to dynamic_update_slice must be scalars, got "
                    f"indices of shapes {[i.shape for i in idx]}")
  return x.shape


def _dynamic_update_slice_dtype(x, u, *idx):
  if x.dtype != u.dtype:
    raise TypeError(f"dynamic_update_slice requires arguments to have the same dtypes, got "
                    f"{x.dtype.name}, {u.dtype.name}.")
  if idx:
    _check_index_dtypes("dynamic_update_slice", idx)
  return x.dtype


dynamic_update_slice_p = standard_primitive(
    "dynamic_update_slice", _dynamic_update_slice_shape, _dynamic_update_slice_dtype,
    lambda *avals: all(a.weak_type for a in avals))
dynamic_update_slice_p.def_impl(lambda x, u, *idx: _ref().dynamic_update_slice(x, u, idx))


def _dynamic_update_slice_jvp(primals, tangents):
  x, u, *idx = primals
  tx, tu = tangents[:2]
  out = dynamic_update_slice_p.bind(x, u, *idx)
  if type(tx) is Zero and type(tu) is Zero:
    return out, Zero.from_primal_value(out)
  return out, dynamic_update_slice_p.bind(ad.instantiate_zeros(tx), ad.instantiate_zeros(tu),
                                          *idx)


def _dynamic_update_slice_transpose(ct, x, u, *idx):
  assert not any(ad.is_undefined_primal(i) for i in idx)
  u_shape = _shape_of(u)
  ct_x = (dynamic_update_slice_p.bind(ct, _st.full(u_shape, 0, get_aval(ct).dtype), *idx)
          if ad.is_undefined_primal(x) else None)
  ct_u = (dynamic_slice_p.bind(ct, *idx, slice_sizes=u_shape)
          if ad.is_undefined_primal(u) else None)
  return [ct_x, ct_u] + [None] * len(idx)


ad.jvp_rules[dynamic_update_slice_p] = _dynamic_update_slice_jvp
ad.transpose_rules[dynamic_update_slice_p] = ad._zero_aware_transpose(
    _dynamic_update_slice_transpose)


def _dynamic_update_slice_batch(vals, dims):
  x, u, *idx = vals
  dx, du, *didx = dims
  size = next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
  x = batching.bdim_at_front(x, dx, size)
  u = batching.bdim_at_front(u, du, size)
  if all(d is None for d in didx):
    zero = np.zeros((), get_aval(idx[0]).dtype if idx else np.int32)
    return dynamic_update_slice_p.bind(x, u, zero, *idx), 0
  # batched start indices: one scatter, clamping as dynamic_update_slice does
  n = len(idx)
  index = _batched_index_matrix(idx, didx, size)
  dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(1, n + 1)),
                                  inserted_window_dims=(),
                                  scatter_dims_to_operand_dims=tuple(range(1, n + 1)),
                                  operand_batching_dims=(0,), scatter_indices_batching_dims=(0,))
  return scatter(x, index, u, dnums, indices_are_sorted=True, unique_indices=True,
                 mode=GatherScatterMode.CLIP), 0


batching.batch_rules[dynamic_update_slice_p] = _dynamic_update_slice_batch


def dynamic_update_slice_in_dim(operand, update, start_index, axis: int, *,
                                allow_negative_indices: bool = True):
  nd = get_aval(operand).ndim
  axis = canonicalize_axis(axis, nd)
  starts = [0] * nd
  starts[axis] = start_index
  allow = [False] * nd
  allow[axis] = allow_negative_indices
  return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand, update, index, axis: int, *,
                                allow_negative_indices: bool = True):
  nd = get_aval(operand).ndim
  axis = canonicalize_axis(axis, nd)
  if get_aval(update).ndim != nd:
    if get_aval(update).ndim + 1 != nd:
      raise TypeError(f"dynamic_update_index_in_dim: update of shape {get_aval(update).shape} "
                      f"does not fit operand of shape {get_aval(operand).shape}")
    update = _st.expand_dims(update, (axis,))
  return dynamic_update_slice_in_dim(operand, update, index, axis,
                                     allow_negative_indices=allow_negative_indices)


# ------------------------------------------------------------------------------------------------
# Dimension numbers and modes


class GatherDimensionNumbers(NamedTuple):
  """How the dimensions of a gather's operand, indices and output correspond (XLA's gather;
  the index vector is always the last dimension of the indices).

  offset_dims: output dimensions holding the slice dimensions that are kept, in order.
  collapsed_slice_dims: operand dimensions of slice size 1 that have no output dimension.
  start_index_map: the operand dimension each entry of an index vector starts.
  operand_batching_dims / start_indices_batching_dims: operand and indices dimensions that
    correspond one to one (slice size 1 in the operand): the i-th indices batch row gathers from
    the i-th operand batch entry.
  """
  offset_dims: tuple
  collapsed_slice_dims: tuple
  start_index_map: tuple
  operand_batching_dims: tuple = ()
  start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
  """How the dimensions of a scatter's operand, indices and updates correspond (XLA's scatter;
  the index vector is always the last dimension of the indices).

  update_window_dims: updates dimensions that are window dimensions.
  inserted_window_dims: operand dimensions of window size 1 that updates do not have.
  scatter_dims_to_operand_dims: the operand dimension each entry of an index vector starts.
  operand_batching_dims / scatter_indices_batching_dims: as for gather.
  """
  update_window_dims: tuple
  inserted_window_dims: tuple
  scatter_dims_to_operand_dims: tuple
  operand_batching_dims: tuple = ()
  scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
  """What gather and scatter do with windows that do not lie inside the operand.

  CLIP: starts are clamped so the whole window is inside.
  FILL_OR_DROP: a gathered window that is partly outside is all ``fill_value``; a scattered one
    is dropped.
  PROMISE_IN_BOUNDS: the caller promises every window is inside; in practice gathers clamp and
    scatters drop (as XLA's), so the gradient of a gather drops the cotangents of windows
    outside (JAX's behaviour) and differs from its clamped forward values there.
  """
  CLIP = enum.auto()
  FILL_OR_DROP = enum.auto()
  PROMISE_IN_BOUNDS = enum.auto()

  @staticmethod
  def from_any(s):
    if isinstance(s, GatherScatterMode):
      return s
    if s == "clip":
      return GatherScatterMode.CLIP
    if s is None or s == "fill" or s == "drop":
      return GatherScatterMode.FILL_OR_DROP
    if s == "promise_in_bounds":
      return GatherScatterMode.PROMISE_IN_BOUNDS
    raise ValueError(f'Unknown gather mode "{s}"')


def _int_tuple(v, what):
  try:
    return tuple(int(d) for d in v)
  except TypeError:
    raise TypeError(f"{what} must be a sequence of integers, got {v!r}") from None


def _canon_gather_dnums(dn) -> GatherDimensionNumbers:
  if not isinstance(dn, GatherDimensionNumbers):
    if isinstance(dn, tuple) and 3 <= len(dn) <= 5:
      dn = GatherDimensionNumbers(*dn)
    else:
      raise TypeError(f"gather dimension_numbers must be a GatherDimensionNumbers, got {dn!r}")
  return GatherDimensionNumbers(*[_int_tuple(v, f"gather dimension_numbers.{name}")
                                  for name, v in zip(dn._fields, dn)])


def _canon_scatter_dnums(dn) -> ScatterDimensionNumbers:
  if not isinstance(dn, ScatterDimensionNumbers):
    if isinstance(dn, tuple) and 3 <= len(dn) <= 5:
      dn = ScatterDimensionNumbers(*dn)
    else:
      raise TypeError(f"scatter dimension_numbers must be a ScatterDimensionNumbers, got {dn!r}")
  return ScatterDimensionNumbers(*[_int_tuple(v, f"scatter dimension_numbers.{name}")
                                   for name, v in zip(dn._fields, dn)])


def _gather_dnums_of_scatter(dn: ScatterDimensionNumbers) -> GatherDimensionNumbers:
  """The gather that reads back the windows a scatter writes."""
  return GatherDimensionNumbers(
      offset_dims=dn.update_window_dims, collapsed_slice_dims=dn.inserted_window_dims,
      start_index_map=dn.scatter_dims_to_operand_dims,
      operand_batching_dims=dn.operand_batching_dims,
      start_indices_batching_dims=dn.scatter_indices_batching_dims)


def _scatter_dnums_of_gather(dn: GatherDimensionNumbers) -> ScatterDimensionNumbers:
  return ScatterDimensionNumbers(
      update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
      scatter_dims_to_operand_dims=dn.start_index_map,
      operand_batching_dims=dn.operand_batching_dims,
      scatter_indices_batching_dims=dn.start_indices_batching_dims)


def _scatter_slice_sizes(operand_shape, updates_shape, dn: ScatterDimensionNumbers):
  """Window size in every operand dimension of a scatter."""
  sizes, pos = [], 0
  for i in range(len(operand_shape)):
    if i in dn.inserted_window_dims or i in dn.operand_batching_dims:
      sizes.append(min(1, operand_shape[i]))
    else:
      sizes.append(updates_shape[dn.update_window_dims[pos]])
      pos += 1
  return tuple(sizes)


def _scatter_mode_of_gather(mode):
  """The mode of the scatter transposing a gather: the gather's own.  As in JAX, the transpose
  of a PROMISE_IN_BOUNDS gather (jnp indexing's default) is a PROMISE_IN_BOUNDS scatter-add,
  which drops the cotangents of windows outside the operand while the forward gather clamped
  them (x[7] of a length-5 x reads x[4], and its gradient goes nowhere); use mode="clip" for a
  gradient that follows the clamp."""
  return mode


def _gather_mode_of_scatter(mode):
  """The mode of the gather transposing a scatter: a PROMISE_IN_BOUNDS scatter drops windows
  outside, so its transpose reads zeros there."""
  return GatherScatterMode.FILL_OR_DROP if mode == GatherScatterMode.PROMISE_IN_BOUNDS else mode


# --- checks shared by the gather and scatter shape rules (XLA's, with JAX's wording) ---


def _check_sorted(dims, op, name):
  if list(dims) != sorted(dims):
    raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def _check_unique(dims, op, name):
  if len(set(dims)) != len(dims):
    raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def _check_in_range(dims, rank, op, name):
  for d in dims:
    if not 0 <= d < rank:
      raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); got: {d}.")


def _check_disjoint(a, b, op, name_a, name_b):
  if set(a) & set(b):
    raise TypeError(f"{name_a} and {name_b} in {op} op must be disjoint; got: {a} and {b}.")


def _check_index_operand(indices, op):
  if not dtypes.is_integer(indices.dtype):
    raise ValueError(f"{op} indices must have an integer type, got {indices.dtype.name}")
  if indices.ndim < 1:
    raise TypeError(f"{op} indices must have rank at least 1 (the index vector is the last "
                    f"dimension), got shape {indices.shape}")


def _check_operand_batching_dims(operand, operand_bdims, op):
  _check_unique(operand_bdims, op, "operand_batching_dims")
  _check_sorted(operand_bdims, op, "operand_batching_dims")
  _check_in_range(operand_bdims, operand.ndim, op, "operand_batching_dims")


def _check_batching_dims(operand, indices, operand_bdims, indices_bdims, op, iname):
  """(after ``_check_operand_batching_dims`` and the disjointness checks, JAX's order)"""
  _check_unique(indices_bdims, op, iname)
  _check_in_range(indices_bdims, indices.ndim, op, iname)
  if indices.ndim - 1 in indices_bdims:
    raise TypeError(f"{op.capitalize()} op cannot have the index vector dimension as a batching "
                    f"dimension; got {indices_bdims}.")
  if len(operand_bdims) != len(indices_bdims):
    raise TypeError(f"{op.capitalize()} op requires equal numbers of operand_batching_dims and "
                    f"{iname}, got {operand_bdims} and {indices_bdims}.")
  ob = tuple(operand.shape[d] for d in operand_bdims)
  ib = tuple(indices.shape[d] for d in indices_bdims)
  if ob != ib:
    raise TypeError(f"{op.capitalize()} op requires operand batching dimensions and indices "
                    f"batching dimensions to have the same shape, got {ob} and {ib}.")


# ------------------------------------------------------------------------------------------------
# gather


def _default_fill_value(dtype):
  dtype = np.dtype(dtype)
  if dtypes.is_inexact(dtype):
    return float("nan")
  if np.issubdtype(dtype, np.signedinteger):
    return int(np.iinfo(dtype).min)
  if np.issubdtype(dtype, np.unsignedinteger):
    return int(np.iinfo(dtype).max)
  if dtype == np.bool_:
    return True
  raise ValueError(f"Unsupported dtype for gather fill_value {dtype}")


def _as_static_scalar(v):
  v = core.concrete_or_error(None, v, "gather's fill_value must be a static scalar.")
  if isinstance(v, (bool, int, float, complex)):
    return v
  a = np.asarray(v)
  if a.ndim:
    raise TypeError(f"gather fill_value must be a scalar, got shape {a.shape}")
  return a.item()


def gather(operand, start_indices, dimension_numbers, slice_sizes, *,
           unique_indices: bool = False, indices_are_sorted: bool = False, mode=None,
           fill_value=None):
  parsed = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else \
      GatherScatterMode.from_any(mode)
  if parsed == GatherScatterMode.FILL_OR_DROP:
    fill_value = (_default_fill_value(get_aval(operand).dtype) if fill_value is None
                  else _as_static_scalar(fill_value))
  else:
    fill_value = None
  return gather_p.bind(operand, start_indices,
                       dimension_numbers=_canon_gather_dnums(dimension_numbers),
                       slice_sizes=as_shape(slice_sizes), unique_indices=bool(unique_indices),
                       indices_are_sorted=bool(indices_are_sorted), mode=parsed,
                       fill_value=fill_value)


def _gather_shape(x, idx, *, dimension_numbers, slice_sizes, unique_indices, indices_are_sorted,
                  mode, fill_value):
  dn = dimension_numbers
  _check_index_operand(idx, "gather")
  offset_dims, collapsed = dn.offset_dims, dn.collapsed_slice_dims
  out_rank = len(offset_dims) + idx.ndim - 1
  _check_sorted(offset_dims, "gather", "offset_dims")
  _check_unique(offset_dims, "gather", "offset_dims")
  for i, d in enumerate(offset_dims):
    if not 0 <= d < out_rank:
      raise TypeError(f"Offset dimension {i} in gather op is out of bounds; got {d}, but should "
                      f"have been in [0, {out_rank})")
  if len(dn.start_index_map) != idx.shape[-1]:
    raise TypeError(f"Gather op has {len(dn.start_index_map)} elements in start_index_map and "
                    f"the bound of dimension index_vector_dim={idx.ndim - 1} of indices is "
                    f"{idx.shape[-1]}. These two numbers must be equal.")
  for i, d in enumerate(dn.start_index_map):
    if not 0 <= d < x.ndim:
      raise TypeError(f"Invalid start_index_map; domain is [0, {x.ndim}), got: {i}->{d}.")
  _check_unique(dn.start_index_map, "gather", "start_index_map")
  _check_sorted(collapsed, "gather", "collapsed_slice_dims")
  _check_in_range(collapsed, x.ndim, "gather", "collapsed_slice_dims")
  _check_unique(collapsed, "gather", "collapsed_slice_dims")
  _check_operand_batching_dims(x, dn.operand_batching_dims, "gather")
  _check_disjoint(collapsed, dn.operand_batching_dims, "gather", "collapsed_slice_dims",
                  "operand_batching_dims")
  _check_disjoint(dn.start_index_map, dn.operand_batching_dims, "gather", "start_index_map",
                  "operand_batching_dims")
  _check_batching_dims(x, idx, dn.operand_batching_dims, dn.start_indices_batching_dims,
                       "gather", "start_indices_batching_dims")
  if len(slice_sizes) != x.ndim:
    raise TypeError(f"Gather op must have one slice size for every input dimension; got: "
                    f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={x.ndim}")
  if len(slice_sizes) != len(offset_dims) + len(collapsed) + len(dn.operand_batching_dims):
    raise TypeError(f"All components of the offset index in a gather op must either be a offset "
                    f"dimension or explicitly collapsed/batching; got "
                    f"len(slice_sizes)={len(slice_sizes)}, offset_dims={offset_dims}, "
                    f"collapsed_slice_dims={collapsed}, "
                    f"operand_batching_dims={dn.operand_batching_dims}.")
  for i, (s, n) in enumerate(zip(slice_sizes, x.shape)):
    # (no indices: no slice is taken, so any size is allowed, as JAX's: a gather of an empty
    # operand by empty indices)
    if idx.size and not 0 <= s <= n:
      raise TypeError(f"Slice size at index {i} in gather op is out of range, must be within "
                      f"[0, {n} + 1), got {s}.")
  for i, d in enumerate(collapsed):
    if slice_sizes[d] != 1:
      raise TypeError(f"Gather op can only collapse slice dims with bound 1, but bound is "
                      f"{slice_sizes[d]} for index {d} at position {i}.")
  for i, d in enumerate(dn.operand_batching_dims):
    if slice_sizes[d] > 1:
      raise TypeError(f"Gather op can only have operand batching dims with bound 0/1, but bound "
                      f"is {slice_sizes[d]} for index {d} at position {i}.")
  return _gather_out_shape(idx.shape, dn, slice_sizes)


def _gather_out_shape(idx_shape, dn, slice_sizes):
  batch = iter(idx_shape[:-1])
  kept = iter(s for i, s in enumerate(slice_sizes)
              if i not in dn.collapsed_slice_dims and i not in dn.operand_batching_dims)
  out_rank = len(dn.offset_dims) + len(idx_shape) - 1
  return tuple(next(kept) if i in dn.offset_dims else next(batch) for i in range(out_rank))


def _gather_impl(x, idx, *, dimension_numbers, slice_sizes, unique_indices, indices_are_sorted,
                 mode, fill_value):
  dn = dimension_numbers
  return _ref().gather(
      x, idx, offset_dims=dn.offset_dims, collapsed_slice_dims=dn.collapsed_slice_dims,
      start_index_map=dn.start_index_map, slice_sizes=slice_sizes,
      operand_batching_dims=dn.operand_batching_dims,
      start_indices_batching_dims=dn.start_indices_batching_dims,
      mode="fill" if mode == GatherScatterMode.FILL_OR_DROP else "clip", fill_value=fill_value)


gather_p = standard_primitive("gather", _gather_shape,
                              lambda x, idx, **p: (_check_index_operand(idx, "gather"), x.dtype)[1],
                              _weak0)
gather_p.def_impl(_gather_impl)


def _gather_jvp(t, x, idx, *, dimension_numbers, slice_sizes, unique_indices,
                indices_are_sorted, mode, fill_value):
  return gather(t, idx, dimension_numbers, slice_sizes, unique_indices=unique_indices,
                indices_are_sorted=indices_are_sorted, mode=mode, fill_value=0)


def _gather_transpose(ct, x, idx, *, dimension_numbers, slice_sizes, unique_indices,
                      indices_are_sorted, mode, fill_value):
  assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(idx)
  out = scatter_add(_zeros_of(x), idx, ct, _scatter_dnums_of_gather(dimension_numbers),
                    indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                    mode=_scatter_mode_of_gather(mode))
  return [out, None]


ad.defjvp(gather_p, _gather_jvp, None)
ad.transpose_rules[gather_p] = ad._zero_aware_transpose(_gather_transpose)


def _shift(dims, k=1):
  return tuple(d + k for d in dims)


def _gather_batch(vals, dims, *, dimension_numbers, slice_sizes, unique_indices,
                  indices_are_sorted, mode, fill_value):
  x, idx = vals
  dx, di = dims
  dn = dimension_numbers
  if di is None:
    # operand batched: its batch dimension is one more (whole) slice dimension, output dim 0
    x = batching.moveaxis(x, dx, 0)
    new = GatherDimensionNumbers(
        offset_dims=(0,) + _shift(dn.offset_dims), collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
        start_index_map=_shift(dn.start_index_map),
        operand_batching_dims=_shift(dn.operand_batching_dims),
        start_indices_batching_dims=dn.start_indices_batching_dims)
    sizes = (get_aval(x).shape[0],) + tuple(slice_sizes)
    return gather_p.bind(x, idx, dimension_numbers=new, slice_sizes=sizes,
                         unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                         mode=mode, fill_value=fill_value), 0
  idx = batching.moveaxis(idx, di, 0)
  if dx is None:
    # indices batched: one more batch dimension of the indices, which leads the output
    new = dn._replace(offset_dims=_shift(dn.offset_dims),
                      start_indices_batching_dims=_shift(dn.start_indices_batching_dims))
    return gather_p.bind(x, idx, dimension_numbers=new, slice_sizes=slice_sizes,
                         unique_indices=False, indices_are_sorted=False, mode=mode,
                         fill_value=fill_value), 0
  # both batched: pair them with a new operand/indices batching dimension
  x = batching.moveaxis(x, dx, 0)
  size = get_aval(x).shape[0]
  new = GatherDimensionNumbers(
      offset_dims=_shift(dn.offset_dims), collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
      start_index_map=_shift(dn.start_index_map),
      operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
      start_indices_batching_dims=(0,) + _shift(dn.start_indices_batching_dims))
  sizes = (min(1, size),) + tuple(slice_sizes)
  return gather_p.bind(x, idx, dimension_numbers=new, slice_sizes=sizes,
                       unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                       mode=mode, fill_value=fill_value), 0


batching.batch_rules[gather_p] = _gather_batch


def index_take(src, idxs, axes):
  """``src`` indexed on ``axes`` by the integer arrays ``idxs``, taken modulo the sizes as
  Python's ``%`` (the floor modulo: -1 is the last index)."""
  axes = tuple(int(a) for a in axes)
  shape = get_aval(src).shape
  indices = _st.concatenate([_st.expand_dims(i, (1,)) for i in idxs], 1)
  i_aval = get_aval(indices)
  sizes = np.array([shape[a] for a in axes], i_aval.dtype)
  n = _st.broadcast_in_dim(sizes, i_aval.shape, (1,))
  indices = _ew.rem(indices, n)
  if not np.issubdtype(i_aval.dtype, np.unsignedinteger):   # floor modulo: rem's sign -> n's
    indices = _ew.rem(_ew.add(indices, n), n)
  slice_sizes = list(shape)
  for a in axes:
    slice_sizes[a] = 1
  dnums = GatherDimensionNumbers(offset_dims=tuple(range(1, len(shape) - len(axes) + 1)),
                                 collapsed_slice_dims=axes, start_index_map=axes)
  return gather(src, indices, dnums, slice_sizes)


# ------------------------------------------------------------------------------------------------
# Lowerings: each primitive is one HLO instruction with the same semantics (starts clamped,
# gather modes 'clip'/'fill', scatter modes 'clip'/'drop').

def _register_slicing_lowerings():
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(slice_p)
  def _slice_lower(ctx, avals_in, avals_out, x, start_indices, limit_indices, strides):
    return ctx.builder.slice(x, start_indices, limit_indices, strides)

  @register_lowering(dynamic_slice_p)
  def _dynamic_slice_lower(ctx, avals_in, avals_out, x, *idx, slice_sizes):
    return ctx.builder.dynamic_slice(x, idx, slice_sizes)

  @register_lowering(dynamic_update_slice_p)
  def _dynamic_update_slice_lower(ctx, avals_in, avals_out, x, u, *idx):
    return ctx.builder.dynamic_update_slice(x, u, idx)

  @register_lowering(gather_p)
  def _gather_lower(ctx, avals_in, avals_out, x, idx, *, dimension_numbers, slice_sizes,
                    unique_indices, indices_are_sorted, mode, fill_value):
    dn = dimension_numbers
    if any(s > n for s, n in zip(slice_sizes, avals_in[0].shape)):
      # (only with no indices, which the gather_p rule checks: the result is empty, and HLO's
      # gather takes no slice larger than its operand)
      from ourjax.lowering import hlo
      out = avals_out[0]
      return ctx.builder.full(0, hlo.Shape(out.dtype, tuple(out.shape)))
    fill = mode == GatherScatterMode.FILL_OR_DROP
    return ctx.builder.gather(
        x, idx, offset_dims=dn.offset_dims, collapsed_slice_dims=dn.collapsed_slice_dims,
        start_index_map=dn.start_index_map, slice_sizes=slice_sizes,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.start_indices_batching_dims,
        mode="fill" if fill else "clip", fill_value=fill_value if fill else None)


_register_slicing_lowerings()


# (the scatters, after what they import from here: dimension numbers, modes, gather)
from ourjax.lax._scatter import (  # noqa: E402,F401
    scatter, scatter_add, scatter_max, scatter_min, scatter_mul, scatter_p, scatter_add_p,
    scatter_max_p, scatter_min_p, scatter_mul_p, scatter_sub, scatter_sub_p)

#: lax re-exports these wrappers from here (``_reexport``), though ``_scatter`` defines them
_REEXPORT = ("scatter", "scatter_add", "scatter_sub", "scatter_mul", "scatter_min",
             "scatter_max")
