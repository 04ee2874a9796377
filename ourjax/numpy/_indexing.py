"""Indexing: ``x[idx]`` and ``x.at[idx].<op>(...)`` (the index functions of ``jnp`` that bind the
same primitives, take, put, nonzero and the rest, are in ``_index_functions.py``).

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

import collections.abc
import operator
import warnings
from typing import NamedTuple

import numpy as np

from ourjax import dtypes, lax
from ourjax.config import config
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.errors import NonConcreteBooleanIndexError
from ourjax.lax import GatherDimensionNumbers, GatherScatterMode, ScatterDimensionNumbers
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import _broadcast_to

_NEW, _SLICE, _INT, _SCALAR, _ARRAY, _BOOL0 = "new", "slice", "int", "scalar", "array", "bool0"


class _Entry:
  """One entry of an expanded index.  ``axis`` is the operand axis it consumes (None for new
  axes and scalar booleans).  Slices are normalised to a positive ``step`` over ``size``
  elements from ``start``; ``rev`` says the user's slice lists them in decreasing order."""
  __slots__ = ("kind", "axis", "value", "n", "start", "size", "step", "rev", "dummy", "gap")

  def __init__(self, kind, axis=None, value=None, n=0, start=0, size=0, step=1, rev=False,
               dummy=False, gap=False):
    self.kind, self.axis, self.value, self.n = kind, axis, value, n
    self.start, self.size, self.step, self.rev, self.dummy = start, size, step, rev, dummy
    self.gap = gap     # an Ellipsis that stood for no axes came just before (see _plan)

  def copy(self, **kw):
    e = _Entry(self.kind, self.axis, self.value, self.n, self.start, self.size, self.step,
               self.rev, self.dummy, self.gap)
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
    if isinstance(idx, collections.abc.Sequence) and not isinstance(idx, (str, np.ndarray)):
      # NumPy's old rule read some lists as tuples and others as arrays; JAX (and ourjax)
      # refuses them all, suggesting the reading that the list's items point to.
      as_tuple = any(isinstance(i, (collections.abc.Sequence, slice)) or i is None
                     or i is Ellipsis or (hasattr(i, "shape") and np.ndim(i) != 0)
                     for i in idx)
      fix = "arr[tuple(seq)]" if as_tuple else "arr[array(seq)]"
      raise TypeError("Using a non-tuple sequence for multidimensional indexing is not "
                      f"allowed; use `{fix}` instead of `arr[seq]`.")
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
  gap = None      # (the item after an Ellipsis that stands for no axes)
  first = None    # (the first entry made from that item)
  if n_ellipsis:
    at = next(j for j, (_, k, _) in enumerate(items) if k == "...")
    items = items[:at] + rest + items[at + 1:]
    if not rest:
      gap = at
  else:
    items = items + rest
  entries, axis = [], 0
  for j, (pos, kind, v) in enumerate(items):
    if j == gap:
      first = len(entries)
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
  if first is not None and first < len(entries):
    entries[first].gap = True
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
    v = np.asarray(e.value)
    if v.dtype.kind == "u" and wrap and v.dtype.itemsize >= dt.itemsize:
      # as a traced unsigned index below: converted to ``dt`` first (one too large turns
      # negative), never counted from the end
      v = v.astype(dt).astype(np.int64)
    else:
      v = v.astype(np.int64)
      if wrap:
        v = np.where(v < 0, v + n, v)
    return np.clip(v, -1, n).astype(dt)
  v = e.value
  src = get_aval(v).dtype
  if np.issubdtype(src, np.unsignedinteger) and src.itemsize >= dt.itemsize and not wrap:
    # unnormalized (jnp.take's clip mode): JAX gathers in the unsigned type, so a large
    # index clamps to the last element; kept below ``dt``'s range before the conversion
    v = lax.min(v, np.array(min(n, np.iinfo(src).max), src))
  # otherwise an unsigned index converts to ``dt`` as it is (JAX's order): one too large for
  # ``dt`` turns negative there and is not counted from the end (a clamping gather reads 0)
  signed = wrap and np.issubdtype(src, np.signedinteger)
  if signed and n <= np.iinfo(src).max:
    # negatives counted from the end in the index's own type (n fits it), then converted, as
    # JAX orders it
    v = lax.select_n(lax.lt(v, np.zeros((), src)), v, lax.add(v, np.array(n, src)))
    signed = False
  if src != dt:
    v = lax.convert_element_type(v, dt)
  if signed:
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
  # (NumPy's and JAX's rule: an Ellipsis between them separates them even where it stands
  # for no axes)
  adjacent = (bool(adv) and adv[-1] - adv[0] + 1 == len(adv)
              and not any(entries[j].gap for j in adv[1:]))
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
      av = get_aval(v)     # (a weakly typed index becomes a strong one, as in JAX's jaxpr)
      starts[e.axis] = v if av.dtype == dt and not av.weak_type else \
          lax.convert_element_type(v, dt)
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
  if (scatter_fn in (lax.scatter_add, lax.scatter_sub, lax.scatter_mul, lax.scatter_min,
                     lax.scatter_max) and aval.dtype != np.bool_
      and dtypes.result_type(x, y) != aval.dtype):
    # values the array's dtype cannot hold safely (x.at[i].mul(2.5) of an int array): as JAX,
    # the operation in the promoted dtype and the result cast back (2 * 2.5 is 5, not 2 * 2),
    # with the FutureWarning _updates_to gives
    wide_dt = dtypes.result_type(x, y)
    if not dtypes.is_complex(wide_dt) or dtypes.is_complex(aval.dtype):
      _updates_to(x, y, _plan(aval.shape, _parse_index(aval.shape, idx), normalize_indices),
                  op_name)                                  # (the checks and the warning)
      wide = lax.convert_element_type(x, wide_dt)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        out = _scatter_update(wide, idx, y, scatter_fn, op_name,
                              indices_are_sorted=indices_are_sorted,
                              unique_indices=unique_indices, mode=mode,
                              normalize_indices=normalize_indices)
      from ourjax.lax.elementwise import _convert_element_type
      return _convert_element_type(out, aval.dtype, aval.weak_type)
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
