"""Indexing: ``x[idx]``, ``x.at[idx].<op>(...)`` and the index functions of ``jnp`` (take,
take_along_axis, put, nonzero/flatnonzero/argwhere, compress/extract, choose, ix_,
unravel_index, ravel_multi_index; select, bincount and histogram live in _misc.py, unique in
_setops.py).

How an index becomes primitives (JAX's ``_rewriting_take`` idea):

1. ``_parse_index`` reads the index against the array's shape: the Ellipsis is expanded, Python
   lists become arrays, a concrete boolean mask becomes the integer arrays of its ``nonzero``
   (a traced one cannot: its result shape would depend on its values), and every entry is one
   ``_Entry`` (a new axis, a normalised slice, a static int, a traced int scalar, an integer
   array, or a scalar boolean).
2. With no array among the entries, ``x[idx]`` is static slicing (``lax.slice`` and ``lax.rev``
   for negative steps), then ``dynamic_slice`` for traced scalars, then one reshape that drops
   the integer-indexed axes and inserts the new ones.
3. Otherwise the static slices are applied first, and a single ``gather`` does the rest;
   ``_plan`` works out its index array and dimension numbers, placing the advanced-index
   dimensions as NumPy does (where the first one was when they are adjacent in the index,
   scalar ints counting as advanced; in front otherwise).
4. ``x.at[idx].op(y)`` plans the same way without slicing first (slices become windows, or
   iota index columns for steps other than 1) and binds one scatter.

Out-of-bounds indices follow JAX: retrieval clamps (``mode=None`` is PROMISE_IN_BOUNDS, which
clamps), updates drop (FILL_OR_DROP); ``mode='fill'`` gathers ``fill_value`` instead.  Negative
indices are counted from the end once.
"""
from __future__ import annotations

import operator
import warnings
from typing import NamedTuple

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.config import config
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.errors import NonConcreteBooleanIndexError
from ourjax.lax import GatherDimensionNumbers, GatherScatterMode, ScatterDimensionNumbers
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, _broadcast_to, canonicalize_axis,
                                check_arraylike, promote_dtypes)

_NEW, _SLICE, _INT, _SCALAR, _ARRAY, _BOOL0 = "new", "slice", "int", "scalar", "array", "bool0"


class _Entry:
  """One entry of an expanded index.  ``axis`` is the operand axis it consumes (None for new
  axes and scalar booleans).  Slices are normalised to a positive ``step`` over ``size``
  elements from ``start``; ``rev`` says the user's slice lists them in decreasing order."""
  __slots__ = ("kind", "axis", "value", "n", "start", "size", "step", "rev", "dummy")

  def __init__(self, kind, axis=None, value=None, n=0, start=0, size=0, step=1, rev=False,
               dummy=False):
    self.kind, self.axis, self.value, self.n = kind, axis, value, n
    self.start, self.size, self.step, self.rev, self.dummy = start, size, step, rev, dummy

  def copy(self, **kw):
    e = _Entry(self.kind, self.axis, self.value, self.n, self.start, self.size, self.step,
               self.rev, self.dummy)
    for k, v in kw.items():
      setattr(e, k, v)
    return e

  @property
  def full(self):
    return self.kind == _SLICE and self.start == 0 and self.size == self.n and self.step == 1


# ------------------------------------------------------------------------------------------------
# Reading an index


def _concrete(x):
  """The NumPy value of ``x`` if it is known now (not traced), else None."""
  if isinstance(x, Tracer):
    v = x.to_concrete_value()
    if v is None:
      return None
    x = v
  return np.asarray(x)


def _slice_bound(v, s, pos):
  if v is None:
    return None
  if isinstance(v, Tracer) and v.to_concrete_value() is None:
    raise IndexError(f"Slice entries must be static integers. Got {s} at position {pos}")
  try:
    return operator.index(v)
  except TypeError:
    raise TypeError(f"slice indices must be integers or None, got {v!r} in {s} at position "
                    f"{pos}") from None


def _list_index(seq):
  """A list inside an index tuple is read as an array (NumPy's rule); an empty one is an
  integer array."""
  try:
    a = np.asarray(seq)
  except TypeError:          # it holds tracers
    return asarray(seq)
  if a.size == 0 and a.dtype.kind == "f":
    a = a.astype(np.intp)
  return a


class _ArrayInt(int):
  """A static index that came from a concrete 0-d array rather than a Python/NumPy integer
  (``jax_check_static_indices`` checks only the latter, as JAX does)."""


def _check_static_indices(entries, normalize_indices):
  """``jax_check_static_indices``: an out-of-bounds static integer index is an IndexError."""
  for e in entries:
    if e.kind == _INT and type(e.value) is int and not e.dummy:
      lo = -e.n if normalize_indices else 0
      if not lo <= e.value < e.n:
        raise IndexError(f"index {e.value} out of bounds for axis {e.axis} with size {e.n} "
                         f"(normalize_indices={normalize_indices})")


def _classify(i, pos):
  """(kind, value) of one user index entry; kinds are _Entry's plus "..." and "mask"."""
  if i is None:
    return _NEW, None
  if i is Ellipsis:
    return "...", None
  if isinstance(i, slice):
    return _SLICE, slice(_slice_bound(i.start, i, pos), _slice_bound(i.stop, i, pos),
                         _slice_bound(i.step, i, pos))
  if isinstance(i, (bool, np.bool_)):
    return _BOOL0, bool(i)
  if isinstance(i, (int, np.integer)):
    return _INT, int(i)
  if isinstance(i, str):
    raise TypeError(f"JAX does not support string indexing; got idx={i!r}")   # JAX's words
  if isinstance(i, (float, complex)):
    raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                    f"{np.dtype(type(i)).name} at position {pos}, indexer value {i}")
  if isinstance(i, (list, tuple)):
    i = _list_index(i)
  if hasattr(i, "__jax_array__") and not isinstance(i, (Array, Tracer)):
    i = i.__jax_array__()
  if not isinstance(i, (np.ndarray, np.generic, Array, Tracer)):
    raise TypeError(f"Indexing mode not yet supported. Got unsupported indexer {i!r} of type "
                    f"{type(i).__name__} at position {pos}")
  aval = get_aval(i)
  if aval.dtype == np.bool_:
    return "mask", i
  if not dtypes.is_integer(aval.dtype):
    raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                    f"{aval.dtype.name} at position {pos}, indexer value {i}")
  c = _concrete(i)
  if aval.ndim == 0:
    return (_INT, _ArrayInt(c)) if c is not None else (_SCALAR, i)
  return _ARRAY, (c if c is not None else i)


def _consumed(kind, value):
  if kind in (_SLICE, _INT, _SCALAR, _ARRAY):
    return 1
  if kind == "mask":
    return get_aval(value).ndim
  return 0


def _normalize_slice(s: slice, n: int):
  """(start, size, positive step, reversed) of the elements ``s`` selects from ``range(n)``."""
  start, stop, step = s.indices(n)      # ValueError for a zero step, as Python's
  size = len(range(start, stop, step))
  if size == 0:
    return 0, 0, 1, False
  if step > 0:
    return start, size, (step if size > 1 else 1), False
  first = start + (size - 1) * step
  return first, size, (-step if size > 1 else 1), size > 1


def _parse_index(shape, idx):
  """The list of _Entry that ``idx`` is for an array of ``shape``."""
  if not isinstance(idx, tuple):
    if isinstance(idx, list):
      raise TypeError("Using a non-tuple sequence for multidimensional indexing is not "
                      "allowed; use `arr[array(seq)]` instead of `arr[seq]`.")
    idx = (idx,)
  items = [(pos,) + _classify(i, pos) for pos, i in enumerate(idx)]
  n_ellipsis = sum(k == "..." for _, k, _ in items)
  if n_ellipsis > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  nd = len(shape)
  used = sum(_consumed(k, v) for _, k, v in items)
  if used > nd:
    raise IndexError(f"Too many indices: array is {nd}-dimensional, but {used} were indexed")
  rest = [(None, _SLICE, slice(None))] * (nd - used)
  if n_ellipsis:
    at = next(j for j, (_, k, _) in enumerate(items) if k == "...")
    items = items[:at] + rest + items[at + 1:]
  else:
    items = items + rest
  entries, axis = [], 0
  for pos, kind, v in items:
    if kind == _NEW:
      entries.append(_Entry(_NEW))
    elif kind == _BOOL0:
      entries.append(_Entry(_BOOL0, value=v))
    elif kind == "mask":
      m = _concrete(v)
      if m is None:
        raise NonConcreteBooleanIndexError(v)
      if m.ndim == 0:
        entries.append(_Entry(_BOOL0, value=bool(m)))
        continue
      expected = tuple(shape[axis:axis + m.ndim])
      # NumPy's rule: each mask axis has the indexed axis's size, or is empty (then the mask
      # selects nothing, whatever the other sizes)
      if len(expected) != m.ndim or any(a not in (b, 0) for a, b in zip(m.shape, expected)):
        raise IndexError(f"boolean index did not match shape of indexed array in index {pos}: "
                         f"got {m.shape}, expected {list(expected)}")
      for k, a in enumerate(np.nonzero(m)):
        entries.append(_Entry(_ARRAY, axis + k, a, shape[axis + k]))
      axis += m.ndim
    elif kind == _SLICE:
      n = shape[axis]
      start, size, step, rev = _normalize_slice(v, n)
      entries.append(_Entry(_SLICE, axis, n=n, start=start, size=size, step=step, rev=rev))
      axis += 1
    else:
      entries.append(_Entry(kind, axis, v, shape[axis]))
      axis += 1
  return entries


# ------------------------------------------------------------------------------------------------
# x[idx]


def _out_of_bounds_empty(axis, n):
  return IndexError(f"index is out of bounds for axis {axis} with size {n}")


def _apply_static_slices(x, entries, ints_too):
  """Slice ``x`` by the (static) slices, and the static ints if ``ints_too``; the slices become
  whole-dimension entries of the result (the ints stay, as size-1 axes)."""
  shape = get_aval(x).shape
  starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
  rev, out = [], []
  for e in entries:
    if e.kind == _SLICE:
      starts[e.axis] = e.start
      limits[e.axis] = e.start + (e.size - 1) * e.step + 1 if e.size else e.start
      strides[e.axis] = e.step
      if e.rev:
        rev.append(e.axis)
      out.append(e.copy(start=0, n=e.size, step=1, rev=False))
    elif e.kind == _INT and ints_too:
      if e.n == 0:
        raise _out_of_bounds_empty(e.axis, e.n)
      v = e.value + e.n if e.value < 0 else e.value
      v = min(max(v, 0), e.n - 1)         # clamped, as a gather would (JAX's semantics)
      starts[e.axis], limits[e.axis] = v, v + 1
      out.append(e)
    else:
      out.append(e)
  if starts != [0] * len(shape) or limits != list(shape) or strides != [1] * len(shape):
    x = lax.slice(x, starts, limits, None if strides == [1] * len(shape) else strides)
  if rev:
    x = lax.rev(x, tuple(rev))
  return x, out


def _index_dtype(columns, shape):
  """int32 unless a dimension or an index needs 64 bits (x64 only)."""
  wide = any(n >= 2 ** 31 - 1 for n in shape) or any(
      e.kind in (_SCALAR, _ARRAY) and not isinstance(e.value, np.ndarray)
      and (get_aval(e.value).dtype.itemsize == 8 or get_aval(e.value).dtype == np.uint32)
      for e in columns)
  return dtypes.canonicalize_dtype(np.int64) if wide else np.dtype(np.int32)


def _normalized_index(e, dt, wrap=True):
  """The index of an int/scalar/array entry in ``dt``, negatives counted from the end once
  (if ``wrap``).  Static indices are also clipped to [-1, n] (still out of bounds where they
  were), so that they fit ``dt``."""
  n = e.n
  if e.kind == _INT or isinstance(e.value, np.ndarray):
    v = np.asarray(e.value).astype(np.int64)
    if wrap:
      v = np.where(v < 0, v + n, v)
    return np.clip(v, -1, n).astype(dt)
  v = e.value
  src = get_aval(v).dtype
  if np.issubdtype(src, np.unsignedinteger) and src.itemsize >= dt.itemsize:
    v = lax.min(v, np.array(min(n, np.iinfo(src).max), src))   # large values stay positive
  if src != dt:
    v = lax.convert_element_type(v, dt)
  if wrap and np.issubdtype(src, np.signedinteger):
    v = lax.select_n(lax.lt(v, np.zeros((), dt)), v, lax.add(v, np.array(n, dt)))
  return v


def _bcast(v, shape, dims):
  """``v`` (a NumPy value or an array) placed at ``dims`` of ``shape``, size-1 dims stretched."""
  vshape = np.shape(v) if isinstance(v, np.ndarray) else get_aval(v).shape
  if isinstance(v, np.ndarray):
    full = [1] * len(shape)
    for d, s in zip(dims, vshape):
      full[d] = s
    return np.broadcast_to(v.reshape(full), shape)
  keep = [j for j, s in enumerate(vshape) if s == shape[dims[j]]]
  if len(keep) != len(vshape):
    v = lax.reshape(v, tuple(vshape[j] for j in keep))
  if tuple(get_aval(v).shape) == tuple(shape):
    return v
  return lax.broadcast_in_dim(v, tuple(shape), tuple(dims[j] for j in keep))


class _Plan(NamedTuple):
  dummy: bool            # a leading size-1 operand axis was added (no index consumed one)
  indices: object        # integer array: batch shape + (number of index columns,)
  offset_dims: tuple     # output positions of window dimensions
  collapsed: tuple       # operand axes with no output dimension
  start_index_map: tuple
  slice_sizes: tuple
  out_shape: tuple       # the gather's output (the scatter's updates) shape
  final_shape: tuple     # out_shape with the new axes
  rev_dims: tuple        # out_shape dimensions that the user's index lists in reverse
  empty_axes: tuple      # operand axes of size 0 that an index column reads


class _Const(NamedTuple):
  """An index column with one value everywhere (the start of a window)."""
  value: int


def _is_column(e):
  """Does this entry need an index column (a start per gathered window)?"""
  if e.kind in (_INT, _SCALAR, _ARRAY):
    return True
  return e.kind == _SLICE and not e.full


def _adv_shape(e):
  if e.kind == _ARRAY:
    return np.shape(e.value) if isinstance(e.value, np.ndarray) else get_aval(e.value).shape
  if e.kind == _BOOL0:
    return (int(e.value),)
  return ()


def _plan(shape, entries, normalize_indices=True) -> _Plan:
  """Index array and dimension numbers of the gather (or scatter) that ``entries`` describe.
  Slices of step 1 are windows (with a start column unless whole); slices of other steps are
  one iota column each with their own batch dimension."""
  shape = tuple(shape)
  entries = [e.copy() for e in entries]
  dummy = not any(_is_column(e) for e in entries)
  if dummy:
    shape = (1,) + shape
    for e in entries:
      if e.axis is not None:
        e.axis += 1
    entries.insert(0, _Entry(_INT, 0, 0, 1, dummy=True))
  has_arrays = any(e.kind in (_ARRAY, _BOOL0) for e in entries)
  adv = [j for j, e in enumerate(entries)
         if e.kind in (_ARRAY, _BOOL0) or (has_arrays and e.kind in (_INT, _SCALAR)
                                            and not e.dummy)]
  adjacent = bool(adv) and adv[-1] - adv[0] + 1 == len(adv)
  shapes = [_adv_shape(entries[j]) for j in adv]
  try:
    B = tuple(np.broadcast_shapes(*shapes)) if shapes else ()
  except ValueError:
    raise ValueError(f"Incompatible shapes for broadcasting: shapes={[tuple(s) for s in shapes]}"
                     " (the index arrays must broadcast together)") from None
  tokens = [("adv", None)] if adv and not adjacent else []
  for j, e in enumerate(entries):
    if e.kind == _NEW:
      tokens.append(("new", e))
    elif e.kind == _SLICE:
      tokens.append(("iota" if e.step > 1 else "win", e))
    elif adjacent and j == adv[0]:
      tokens.append(("adv", None))
  out_shape, final_shape, offset_dims, rev_dims, batch_shape = [], [], [], [], []
  adv_pos, iota_pos = 0, {}
  for kind, e in tokens:
    if kind == "new":
      final_shape.append(1)
      continue
    if kind == "adv":
      adv_pos = len(batch_shape)
      batch_shape += B
      out_shape += B
      final_shape += B
      continue
    if e.rev:
      rev_dims.append(len(out_shape))
    if kind == "win":
      offset_dims.append(len(out_shape))
    else:
      iota_pos[id(e)] = len(batch_shape)
      batch_shape.append(e.size)
    out_shape.append(e.size)
    final_shape.append(e.size)
  columns = sorted((e for e in entries if _is_column(e)), key=lambda e: e.axis)
  dt = _index_dtype(columns, shape)
  batch_shape = tuple(batch_shape)
  cols = []
  for e in columns:
    if e.kind == _SLICE and e.step > 1:
      c = lax.add(lax.mul(lax.iota(dt, e.size), np.array(e.step, dt)), np.array(e.start, dt))
      c = _bcast(c, batch_shape, (iota_pos[id(e)],))
    elif e.kind == _SLICE:
      c = _Const(e.start)
    else:
      c = _normalized_index(e, dt, normalize_indices)
      nd = len(_adv_shape(e))
      c = _bcast(c, batch_shape, tuple(range(adv_pos + len(B) - nd, adv_pos + len(B))))
    cols.append(c)
  if all(isinstance(c, (np.ndarray, _Const)) for c in cols):
    indices = np.stack([np.full(batch_shape, c.value, dt) if isinstance(c, _Const) else c
                        for c in cols], axis=-1)
  else:
    col_shape = batch_shape + (1,)
    indices = lax.concatenate(
        [lax.full(col_shape, c.value, dt) if isinstance(c, _Const)
         else lax.expand_dims(c, (len(batch_shape),)) for c in cols], len(batch_shape))
  collapsed = tuple(e.axis for e in columns if not (e.kind == _SLICE and e.step == 1))
  sizes = list(shape)
  for e in entries:
    if e.axis is not None:
      sizes[e.axis] = 1 if e.axis in collapsed else (e.size if e.kind == _SLICE else 1)
  empty = tuple(e.axis - dummy for e in columns if e.axis in collapsed and e.n == 0)
  return _Plan(dummy, indices, tuple(offset_dims), collapsed,
               tuple(e.axis for e in columns), tuple(sizes), tuple(out_shape),
               tuple(final_shape), tuple(rev_dims), empty)


def _gather_mode(mode):
  return GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else GatherScatterMode.from_any(mode)


def _check_index_dims(plan, n_out):
  if n_out and plan.empty_axes:
    raise _out_of_bounds_empty(plan.empty_axes[0], 0)


def _rewriting_take(x, idx, *, indices_are_sorted=False, unique_indices=False, mode=None,
                    fill_value=None, normalize_indices=True):
  """``x[idx]``: static slices, then dynamic slices or one gather.  Without
  ``normalize_indices``, negative indices are not counted from the end (so they are out of
  bounds)."""
  aval = get_aval(x)
  entries = _parse_index(aval.shape, idx)
  mode = _gather_mode(mode)
  if mode == GatherScatterMode.PROMISE_IN_BOUNDS and config.read("jax_check_static_indices"):
    _check_static_indices(entries, normalize_indices)
  fill = mode == GatherScatterMode.FILL_OR_DROP
  if not any(e.kind in (_ARRAY, _BOOL0) for e in entries) and not (
      (fill or not normalize_indices) and any(e.kind in (_INT, _SCALAR) for e in entries)):
    return _slice_take(x, entries)
  x, entries = _apply_static_slices(x, entries, ints_too=False)
  plan = _plan(get_aval(x).shape, entries, normalize_indices)
  n_out = int(np.prod(plan.final_shape, dtype=np.int64))
  if n_out == 0:
    return lax.full(plan.final_shape, 0, aval.dtype, weak_type=aval.weak_type)
  _check_index_dims(plan, n_out)
  if plan.dummy:
    x = lax.reshape(x, (1,) + get_aval(x).shape)
  dn = GatherDimensionNumbers(offset_dims=plan.offset_dims, collapsed_slice_dims=plan.collapsed,
                              start_index_map=plan.start_index_map)
  out = lax.gather(x, plan.indices, dn, plan.slice_sizes, unique_indices=unique_indices,
                   indices_are_sorted=indices_are_sorted, mode=mode, fill_value=fill_value)
  if plan.rev_dims:
    out = lax.rev(out, plan.rev_dims)
  return out if plan.final_shape == plan.out_shape else lax.reshape(out, plan.final_shape)


def _slice_take(x, entries):
  """Indexing without arrays: lax.slice (+rev), dynamic_slice for traced scalars, a reshape."""
  x, entries = _apply_static_slices(x, entries, ints_too=True)
  scalars = [e for e in entries if e.kind == _SCALAR]
  if scalars:
    shape = get_aval(x).shape
    for e in scalars:
      if e.n == 0:
        raise _out_of_bounds_empty(e.axis, e.n)
    dt = _index_dtype(scalars, shape)
    starts = [np.zeros((), dt)] * len(shape)
    sizes = list(shape)
    for e in scalars:
      v = e.value
      starts[e.axis] = v if get_aval(v).dtype == dt else lax.convert_element_type(v, dt)
      sizes[e.axis] = 1
    x = lax.dynamic_slice(x, starts, sizes)
  # the integer-indexed axes (size 1 now) are squeezed out, then the new axes inserted
  x = lax.squeeze(x, tuple(e.axis for e in entries if e.kind in (_INT, _SCALAR)))
  kept = [e for e in entries if e.kind in (_NEW, _SLICE)]
  new = tuple(j for j, e in enumerate(kept) if e.kind == _NEW)
  return lax.expand_dims(x, new) if new else x


# ------------------------------------------------------------------------------------------------
# x.at[idx].op(y)


def _updates_to(x, y, plan, op_name):
  """``y`` cast to the array's dtype and broadcast to the indexed shape, in the layout of the
  scatter's updates."""
  dt = get_aval(x).dtype
  if type(y) in (int, float, complex) and dtypes.result_type(y, x) == dt and (
      type(y) is not int or not dtypes.is_integer(dt)
      or np.iinfo(dt).min <= y <= np.iinfo(dt).max):
    # a weakly typed scalar that the array's dtype holds takes that dtype directly (so
    # 2**32 - 1 goes into uint32); other ints wrap from int32, as JAX's
    y = asarray(y, dtype=dt)
  y = asarray(y)
  y_aval = get_aval(y)
  if dtypes.result_type(y, x) != dt:
    warnings.warn(f"scatter inputs have incompatible types: cannot safely cast value from "
                  f"dtype={y_aval.dtype.name} to dtype={dt.name} with jax_numpy_dtype_promotion="
                  f"standard. In future JAX releases this will result in an error. (x.at[...].{op_name}: cast the values explicitly to "
                  "silence this warning.)", FutureWarning, stacklevel=4)
  if y_aval.dtype != dt:
    if dtypes.is_complex(y_aval.dtype) and not dtypes.is_complex(dt):
      y = lax.real(y)
    y = lax.convert_element_type(y, dt)
  ys, fs = tuple(y_aval.shape), plan.final_shape
  if len(ys) > len(fs):
    raise ValueError(f"x.at[...].{op_name}: cannot broadcast values of shape {ys} to the "
                     f"indexed shape {fs}, which has fewer dimensions")
  if any(a != b and a != 1 for a, b in zip(ys[::-1], fs[::-1])):
    raise ValueError(f"x.at[...].{op_name}: incompatible shapes for broadcasting: values of "
                     f"shape {ys} to the indexed shape {fs}")
  if ys != fs:
    y = _broadcast_to(y, fs)
  if fs != plan.out_shape:
    y = lax.reshape(y, plan.out_shape)
  if plan.rev_dims:
    y = lax.rev(y, plan.rev_dims)
  return y


def _scatter_update(x, idx, y, scatter_fn, op_name, *, indices_are_sorted=False,
                    unique_indices=False, mode=None, normalize_indices=True):
  """``x.at[idx].<op_name>(y)`` with ``scatter_fn``; without ``normalize_indices`` negative
  indices are not counted from the end (so their updates are out of bounds)."""
  x = asarray(x)
  aval = get_aval(x)
  if (aval.dtype == np.bool_ and scatter_fn in (lax.scatter_add, lax.scatter_mul)
      and dtypes.result_type(y) != np.bool_):
    # as JAX's: a bool array and non-bool values add/multiply in their promoted dtype, the
    # result cast back to bool (True + 1 is True, True * 0 and True + -1 are False); bool
    # values alone are an error (scatter-add has no bool)
    wide = lax.convert_element_type(x, dtypes.result_type(x, y))
    out = _scatter_update(wide, idx, y, scatter_fn, op_name, indices_are_sorted=indices_are_sorted,
                          unique_indices=unique_indices, mode=mode,
                          normalize_indices=normalize_indices)
    return lax.ne(out, lax.full_like(out, 0))
  plan = _plan(aval.shape, _parse_index(aval.shape, idx), normalize_indices)
  y = _updates_to(x, y, plan, op_name)
  n_out = int(np.prod(plan.out_shape, dtype=np.int64))
  if n_out == 0:
    return x
  if aval.size == 0:
    # every update lands outside; only an integer index into an empty axis is an error
    for e in _parse_index(aval.shape, idx):
      if e.kind in (_INT, _SCALAR) and e.n == 0:
        raise _out_of_bounds_empty(e.axis, 0)
    return x
  operand = lax.reshape(x, (1,) + aval.shape) if plan.dummy else x
  dn = ScatterDimensionNumbers(update_window_dims=plan.offset_dims,
                               inserted_window_dims=plan.collapsed,
                               scatter_dims_to_operand_dims=plan.start_index_map)
  out = scatter_fn(operand, plan.indices, y, dn, indices_are_sorted=indices_are_sorted,
                   unique_indices=unique_indices, mode=GatherScatterMode.from_any(mode))
  return lax.reshape(out, aval.shape) if plan.dummy else out


class _IndexUpdateHelper:
  """``x.at``: index it (``x.at[idx]``) to get the functional update operations."""
  __slots__ = ("array",)

  def __init__(self, array):
    self.array = array

  def __getitem__(self, index):
    return _IndexUpdateRef(self.array, index)

  def __repr__(self):
    return f"_IndexUpdateHelper({self.array!r})"


class _IndexUpdateRef:
  """``x.at[idx]``: each method returns a new array, ``x`` with the indexed elements replaced
  by the operation's result (out-of-bounds updates are dropped unless ``mode`` says otherwise;
  which of several updates to one element wins in ``set`` is unspecified)."""
  __slots__ = ("array", "index")

  def __init__(self, array, index):
    self.array = array
    self.index = index

  def __repr__(self):
    return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

  def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None,
          out_sharding=None, wrap_negative_indices=True):
    """``x[idx]``, with a choice of out-of-bounds ``mode`` ('fill' gathers ``fill_value``).
    With ``wrap_negative_indices=False`` negative indices are out of bounds instead of counted
    from the end (this holds for every method of ``x.at[idx]``)."""
    return _rewriting_take(self.array, self.index, indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode, fill_value=fill_value,
                           normalize_indices=wrap_negative_indices)

  def _scatter(self, fn, name, values, indices_are_sorted, unique_indices, mode, wrap=True):
    return _scatter_update(self.array, self.index, values, fn, name,
                           indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode, normalize_indices=wrap)

  def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
          wrap_negative_indices=True):
    return self._scatter(lax.scatter, "set", values, indices_are_sorted, unique_indices, mode,
                         wrap_negative_indices)

  def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
          wrap_negative_indices=True):
    return self._scatter(lax.scatter_add, "add", values, indices_are_sorted, unique_indices,
                         mode, wrap_negative_indices)

  def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
               wrap_negative_indices=True):
    return self._scatter(lax.scatter_sub, "subtract", values, indices_are_sorted,
                         unique_indices, mode, wrap_negative_indices)

  def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
               wrap_negative_indices=True):
    return self._scatter(lax.scatter_mul, "multiply", values, indices_are_sorted,
                         unique_indices, mode, wrap_negative_indices)

  mul = multiply

  def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
          wrap_negative_indices=True):
    return self._scatter(lax.scatter_min, "min", values, indices_are_sorted, unique_indices,
                         mode, wrap_negative_indices)

  def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
          wrap_negative_indices=True):
    return self._scatter(lax.scatter_max, "max", values, indices_are_sorted, unique_indices,
                         mode, wrap_negative_indices)

  def _factor(self, values, indices_are_sorted, unique_indices, mode, wrap):
    """Ones with the product of the values at the indexed places (the divisor/exponent of
    ``divide``/``power``, whose results have ``x / d``'s and ``x ** d``'s dtype, as JAX's)."""
    from ourjax.numpy._creation import ones_like
    ones = ones_like(self.array)
    return _scatter_update(ones, self.index, values, lax.scatter_mul, "multiply",
                           indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode, normalize_indices=wrap)

  def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
             wrap_negative_indices=True):
    from ourjax.numpy._ufuncs import true_divide
    return true_divide(self.array, self._factor(values, indices_are_sorted, unique_indices,
                                                mode, wrap_negative_indices))

  def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
    from ourjax.numpy._ufuncs import power
    return power(self.array, self._factor(values, indices_are_sorted, unique_indices, mode,
                                          wrap_negative_indices))

  def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
    """``func`` (elementwise) applied at the indexed places, once per occurrence of a place in
    the index (as JAX's scatter-apply)."""
    x = self.array
    kw = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
              normalize_indices=wrap_negative_indices)
    v = _rewriting_take(x, self.index, mode=GatherScatterMode.CLIP, **kw)
    v = asarray(func(v))
    if not unique_indices:
      # places listed k times get func applied k times; count the occurrences
      counts = _scatter_update(lax.full(get_aval(x).shape, 0, np.int32), self.index,
                               np.ones((), np.int32), lax.scatter_add, "add", mode=mode, **kw)
      c = _rewriting_take(counts, self.index, mode=GatherScatterMode.CLIP, **kw)
      top = _concrete(lax.reduce_max(c, tuple(range(get_aval(c).ndim)))) \
          if get_aval(c).size else np.int32(1)
      if top is not None:
        for r in range(1, int(top)):
          v = lax.select_n(lax.gt(c, np.int32(r)), v, asarray(func(v)))
      else:
        top = lax.reduce_max(c, tuple(range(get_aval(c).ndim)))
        v = lax.fori_loop(np.int32(1), top, lambda r, v: lax.select_n(
            lax.gt(c, r), v, lax.convert_element_type(asarray(func(v)), get_aval(v).dtype)), v)
    return _scatter_update(x, self.index, v, lax.scatter, "apply", mode=mode, **kw)


def _getitem(self, idx):
  return _rewriting_take(self, idx)


def _setitem(self, idx, value):
  raise TypeError(f"ourjax arrays are immutable and do not support in-place item assignment "
                  f"({type(self).__name__}[...] = ...). Instead of x[idx] = y, use "
                  "x = x.at[idx].set(y) or another .at[] method.")


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
  idx = _normalized_index(e, dt) if wrap_negative_indices else (
      indices if i_aval.dtype == dt else lax.convert_element_type(indices, dt))
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
  'clip' (the default), 'wrap', or 'fill'/'drop' (out-of-bounds positions are skipped)."""
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
  if mode is None or mode == "clip":
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
    raise ValueError(f"Invalid mode '{mode}' for np.put")
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
  dt = dtypes.result_type(dt, dtypes.default_int_dtype())    # (computed at least this wide)
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


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
  """Flat indices of the coordinate arrays ``multi_index`` into an array of shape ``dims``.
  ``mode``: 'raise' (coordinates must be concrete and in range), 'wrap' or 'clip'."""
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
          np.asarray, i, "The error occurred because ravel_multi_index was traced with "
          "mode='raise'. Use mode='wrap' or mode='clip' instead.")
      if np.any((c < 0) | (c >= d)):
        raise ValueError("invalid entry in coordinates array")
  elif mode == "wrap":
    idx = [remainder(i, np.array(d, get_aval(i).dtype)) for i, d in zip(idx, dims)]
  elif mode == "clip":
    idx = [clip(i, 0, d - 1) for i, d in zip(idx, dims)]
  else:
    raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', or 'clip'")
  dt = dtypes.check_user_dtype(dtype, "ravel_multi_index") if dtype is not None else \
      dtypes.result_type(*[get_aval(i).dtype for i in idx])
  if dt == np.bool_ or not dtypes.is_integer(dt):
    dt = dtypes.default_int_dtype()
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
