"""Set operations: ``unique``, the array API's ``unique_values`` / ``unique_counts`` /
``unique_inverse`` / ``unique_all``, and the set functions of two arrays (flattened)
``union1d``, ``intersect1d``, ``setdiff1d`` and ``setxor1d``.

All of them sort, then keep some of the sorted positions.  ``unique`` sorts the values (or the
rows along ``axis``) and keeps the first of each run of equal ones; ``union1d`` is the
``unique`` of both arguments.  The other two-array functions sort the concatenated values by
(value, tag), the tag saying which argument a value came from, so that each run of equal values
holds the first argument's copies, then the second's; a boolean mask over the sorted positions
then states the function: an intersection keeps the runs holding both tags, a difference those
holding only tag 0, a symmetric difference those holding one tag.  ``assume_unique`` changes
nothing but JAX's error under jit without ``size``.

The kept positions are compacted to the front in order (``_index_functions._compact``: a cumsum and a
scatter, no shape that depends on values).  How many there are is the length of the result:
known for concrete inputs, unknown under a transformation, where these functions raise
ConcretizationTypeError unless a static ``size`` is given; the result is then cut to, or padded
up to, ``size`` entries of ``fill_value``, whose default is JAX's for each function.

NaNs are as in JAX and NumPy: each argument's NaNs first collapse into one (``unique``'s
``equal_nan``; the array-API functions keep every NaN), then NaN equals nothing: ``union1d``
keeps one NaN, ``setdiff1d`` keeps ``ar1``'s, ``setxor1d`` one per argument holding NaN, and
``intersect1d`` none.  Signed zeros are one value.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ourjax import dtypes, lax
from ourjax.core import Tracer, get_aval
from ourjax.errors import NonConcreteBooleanIndexError
from ourjax.numpy._creation import asarray
from ourjax.numpy._gathers import take_1d
from ourjax.numpy._index_functions import _compact, _count, _static_size
from ourjax.numpy._indexing import _rewriting_take, _scatter_update
from ourjax.numpy._util import (_as_operand, canonicalize_axis, check_arraylike,
                                check_static, promote_dtypes)


def _equal_rows(x, y, equal_nan):
  """Elementwise equality, NaNs equal to each other when ``equal_nan``."""
  eq = lax.eq(x, y)
  if equal_nan and dtypes.is_inexact(get_aval(x).dtype):
    from ourjax.numpy._ufuncs import isnan
    eq = lax.or_(eq, lax.and_(isnan(x), isnan(y)))
  return eq


def _first_of_runs(s, equal_nan):
  """True at the first of each run of equal rows of the sorted (n, r) ``s``."""
  n, r = get_aval(s).shape
  if n == 0:
    return lax.full((0,), True, np.bool_)
  same = _equal_rows(lax.slice_in_dim(s, 1, n, 1, 0), lax.slice_in_dim(s, 0, n - 1, 1, 0),
                     equal_nan)
  same = lax.reduce_and(same, (1,)) if r else lax.full((n - 1,), True, np.bool_)
  return lax.concatenate([lax.full((1,), True, np.bool_), lax.not_(same)], 0)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None, sorted=True):  # noqa: A002
  """The sorted unique elements of ``ar`` (flattened), or its unique slices along ``axis``,
  with optionally the first index of each, the inverse map (``ar``'s shape for axis=None) and
  the counts.  Under a transformation pass a static ``size``: results are cut or padded to it
  (values with ``fill_value``, by default the smallest unique value; counts with 0)."""
  return _unique("unique", ar, return_index, return_inverse, return_counts, axis,
                 equal_nan=equal_nan, size=size, fill_value=fill_value)


def _unique(name, ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
            *, equal_nan=True, size=None, fill_value=None):
  """``unique``, its errors naming the function ``name`` the user called."""
  check_arraylike(name, ar)
  from ourjax.numpy._shape import moveaxis, ravel
  from ourjax.numpy._sorting import argsort, lexsort
  ar = asarray(_as_operand(ar))
  shape = get_aval(ar).shape
  dt = dtypes.default_int_dtype()
  if axis is None:
    rows = lax.reshape(ravel(ar), (get_aval(ar).size, 1))
    axis_ = None
  else:
    axis_ = canonicalize_axis(axis, len(shape))
    moved = moveaxis(ar, axis_, 0)
    rest = get_aval(moved).shape[1:]
    rows = lax.reshape(moved, (shape[axis_], int(np.prod(rest, dtype=np.int64))))
  n, r = get_aval(rows).shape
  if r == 1:
    perm = argsort(lax.reshape(rows, (n,)), stable=True)
  elif r == 0:
    perm = lax.iota(dt, n)
  else:
    perm = lexsort([lax.reshape(lax.slice_in_dim(rows, j, j + 1, 1, 1), (n,))
                    for j in reversed(range(r))])
  s = _rewriting_take(rows, perm)
  is_new = _first_of_runs(s, equal_nan)
  k = _count(is_new, name) if size is None else _static_size(size, name)
  first, count = _compact(is_new, k)
  if n:
    values = _rewriting_take(s, first)                 # (k, r)
  else:
    if size is not None and k and fill_value is None:
      raise ValueError("jnp.unique: for zero-sized input with nonzero size argument, "
                       "fill_value must be specified")
    values = lax.full((k, r), 0, get_aval(s).dtype)
  if size is not None and k:
    if fill_value is None:      # the smallest unique value (row)
      fv = lax.broadcast_in_dim(lax.slice_in_dim(values, 0, 1, 1, 0), (k, r), (0, 1))
    else:
      fv = asarray(fill_value)
      if get_aval(fv).shape != ():
        raise ValueError(f"jnp.{name}: fill_value must be a scalar")
      fv = lax.broadcast_in_dim(lax.convert_element_type(fv, get_aval(values).dtype),
                                (k, r), ())
    valid = lax.broadcast_in_dim(lax.lt(lax.iota(dt, k), count), (k, r), (0,))
    values = lax.select_n(valid, fv, values)
  if axis_ is None:
    values = lax.reshape(values, (k,))
  else:
    values = moveaxis(lax.reshape(values, (k,) + tuple(rest)), 0, axis_)
  outs = [values]
  if return_index:
    outs.append(_rewriting_take(perm, first) if n else lax.full((k,), 0, dt))
  group = None
  if return_inverse or return_counts:
    group = lax.sub(lax.cumsum(lax.convert_element_type(is_new, dt), 0), np.ones((), dt))
  if return_inverse:
    inv = _scatter_update(lax.full((n,), 0, dt), (perm,), group, lax.scatter, "set",
                          unique_indices=True)
    outs.append(lax.reshape(inv, shape) if axis_ is None else inv)
  if return_counts:
    outs.append(_scatter_update(lax.full((k,), 0, dt), (group,), np.ones((), dt),
                                lax.scatter_add, "add"))
  return outs[0] if len(outs) == 1 else tuple(outs)


# ------------------------------------------------------------------------------------------------
# The array API's unique functions: unique with equal_nan=False, named results


class _UniqueAllResult(NamedTuple):
  values: object
  indices: object
  inverse_indices: object
  counts: object


class _UniqueCountsResult(NamedTuple):
  values: object
  counts: object


class _UniqueInverseResult(NamedTuple):
  values: object
  inverse_indices: object


def unique_values(x, /, *, size=None, fill_value=None):
  """The sorted unique values of ``x`` (flattened); every NaN is kept (the array API's
  ``equal_nan=False``)."""
  return _unique("unique_values", x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x, /, *, size=None, fill_value=None):
  """``(values, counts)``: the unique values of ``x`` and how often each occurs."""
  return _UniqueCountsResult(*_unique("unique_counts", x, return_counts=True, equal_nan=False,
                                      size=size, fill_value=fill_value))


def unique_inverse(x, /, *, size=None, fill_value=None):
  """``(values, inverse_indices)``: the unique values of ``x`` and, of ``x``'s shape, the
  position of each element of ``x`` among them."""
  return _UniqueInverseResult(*_unique("unique_inverse", x, return_inverse=True,
                                       equal_nan=False, size=size, fill_value=fill_value))


def unique_all(x, /, *, size=None, fill_value=None):
  """``(values, indices, inverse_indices, counts)``: ``unique`` with every optional result."""
  return _UniqueAllResult(*_unique("unique_all", x, return_index=True, return_inverse=True,
                                   return_counts=True, equal_nan=False, size=size,
                                   fill_value=fill_value))


# ------------------------------------------------------------------------------------------------
# Set functions of two arrays


def _flat_args(name, ar1, ar2, promote):
  from ourjax.numpy._shape import ravel
  check_arraylike(name, ar1, ar2)
  a1, a2 = asarray(_as_operand(ar1)), asarray(_as_operand(ar2))
  if promote:
    a1, a2 = promote_dtypes(a1, a2)
  return ravel(a1), ravel(a2)


def _size_arg(size, name, static_argument):
  """The static ``size``.  Where JAX takes it as a static argument of a jitted function, a
  traced one is the ValueError of an unhashable static argument, as there."""
  if static_argument:
    check_static(name, size=size)
  return _static_size(size, name)


class _Sorted(NamedTuple):
  """The concatenated values sorted by (value, tag): ``tag`` 0 for ``ar1``'s, 1 for ``ar2``'s;
  ``src`` the position of each in the concatenation; ``first`` whether it begins its run of
  equal values; ``last_tag`` the tag of the last value of its run (1 when the run holds an
  ``ar2`` value, since a run's tags are sorted)."""
  key: object
  tag: object
  src: object
  first: object
  last_tag: object


def _sort_tagged(a1, a2, equal_nan):
  """Sort the values of the 1-D ``a1`` and ``a2`` (one dtype) by (value, tag), stably.  The
  sort key has -0.0 made 0.0 and every NaN the same NaN, so that equal values sort together and
  their order is (tag, position)."""
  n1, n2 = get_aval(a1).shape[0], get_aval(a2).shape[0]
  n = n1 + n2
  x = lax.concatenate([a1, a2], 0)
  key = x
  if dtypes.is_inexact(get_aval(x).dtype):
    from ourjax.numpy._ufuncs import isnan
    zero = lax.full_like(x, 0)
    key = lax.select_n(lax.eq(x, zero), x, zero)
    key = lax.select_n(isnan(x), key, lax.full_like(x, np.nan))
  i32 = np.dtype(np.int32)
  tag = lax.concatenate([lax.full((n1,), 0, i32), lax.full((n2,), 1, i32)], 0)
  key, tag, src = lax.sort((key, tag, lax.iota(i32, n)), dimension=0, is_stable=True,
                           num_keys=2)
  first = _first_of_runs(lax.reshape(key, (n, 1)), equal_nan)
  if n == 0:
    return _Sorted(key, tag, src, first, tag)
  last = lax.concatenate([lax.slice_in_dim(first, 1, n, 1, 0), lax.full((1,), True, np.bool_)],
                         0)
  # the position where each run ends: the nearest `last` at or after each position
  end = lax.cummin(lax.select_n(last, lax.full((n,), n - 1, i32), lax.iota(i32, n)), 0,
                   reverse=True)
  return _Sorted(key, tag, src, first, take_1d(tag, end))


def _kept(name, keep, size, static_size_arg=False, boolean_index=False):
  """(positions, count, k): the first ``k`` kept positions (k = ``size``, or the number kept),
  zeros after the ``count`` kept ones.  Without ``size`` the count must be concrete: a
  ConcretizationTypeError otherwise (JAX's NonConcreteBooleanIndexError where JAX reaches this
  point through a boolean mask index, ``boolean_index``)."""
  if size is None:
    if boolean_index and isinstance(keep, Tracer) and keep.to_concrete_value() is None:
      raise NonConcreteBooleanIndexError(keep)
    k = _count(keep, name)
  else:
    k = _size_arg(size, name, static_size_arg)
  pos, count = _compact(keep, k)
  return pos, count, k


def _pad(values, count, fill):
  """``values`` with the entries from ``count`` on replaced by ``fill`` (jnp.where's
  promotion)."""
  from ourjax.numpy._ufuncs import where
  k = get_aval(values).shape[0]
  return where(lax.lt(lax.iota(get_aval(count).dtype, k), count), values, fill)


def _smallest_or_zero(values, count):
  """JAX's default padding of intersect1d and setxor1d: the smallest value of the result (NaN
  if it holds a NaN), 0 if it is empty."""
  aval = get_aval(values)
  k = aval.shape[0]
  if k == 0:
    return lax.full((), 0, aval.dtype)
  valid = lax.lt(lax.iota(get_aval(count).dtype, k), count)
  some = lax.select_n(valid, lax.broadcast_in_dim(lax.slice_in_dim(values, 0, 1, 1, 0), (k,),
                                                  (0,)), values)
  if aval.dtype == np.bool_:
    smallest = lax.reduce_and(some, (0,))
  elif dtypes.is_complex(aval.dtype):
    smallest = lax.reshape(lax.slice_in_dim(values, 0, 1, 1, 0), ())
  else:
    smallest = lax.reduce_min(some, (0,))
  return lax.select_n(lax.gt(count, lax.full_like(count, 0)), lax.full((), 0, aval.dtype),
                      smallest)


def union1d(ar1, ar2, *, size=None, fill_value=None):
  """The sorted unique values found in ``ar1`` or ``ar2`` (flattened).  Under a transformation
  pass a static ``size``: the result is cut or padded to it (with ``fill_value``, by default
  the smallest value)."""
  from ourjax.numpy._shape import concatenate
  check_arraylike("union1d", ar1, ar2)
  if size is not None:
    size = _static_size(size, "union1d")
  both = concatenate([asarray(_as_operand(ar1)), asarray(_as_operand(ar2))], axis=None)
  return _unique("union1d", both, size=size, fill_value=fill_value)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
  """The sorted unique values found in both ``ar1`` and ``ar2`` (flattened); with
  ``return_indices`` also the index in ``ar1`` and in ``ar2`` of each one's first occurrence.
  With a static ``size`` the result is cut or padded to it: values with ``fill_value`` (by
  default the smallest value, 0 if there is none), indices with each array's size."""
  a1, a2 = _flat_args("intersect1d", ar1, ar2, promote=True)
  n1, n2 = get_aval(a1).shape[0], get_aval(a2).shape[0]
  t = _sort_tagged(a1, a2, equal_nan=False)
  n = n1 + n2
  # the first ar2 value of each run that also holds an ar1 value (a NaN run holds one value)
  i32 = np.dtype(np.int32)
  if n:
    prev_tag = lax.concatenate([lax.full((1,), 1, i32), lax.slice_in_dim(t.tag, 0, n - 1, 1, 0)],
                               0)
    keep = lax.and_(lax.and_(lax.eq(t.tag, np.int32(1)), lax.eq(prev_tag, np.int32(0))),
                    lax.not_(t.first))
  else:
    keep = lax.full((0,), False, np.bool_)
  pos, count, k = _kept("intersect1d", keep, size, static_size_arg=True,
                        boolean_index=assume_unique)
  x = lax.concatenate([a1, a2], 0)
  dt = dtypes.default_int_dtype()
  if n:
    src2 = take_1d(t.src, pos)
    values = take_1d(x, src2)
    # ar1's first occurrence is where the run starts
    start = lax.cummax(lax.select_n(t.first, lax.full((n,), 0, i32), lax.iota(i32, n)), 0)
    idx1 = lax.convert_element_type(take_1d(t.src, take_1d(start, pos)), dt)
    idx2 = lax.convert_element_type(lax.sub(src2, np.int32(n1)), dt)
  else:
    values = lax.full((k,), 0, get_aval(x).dtype)
    idx1 = idx2 = lax.full((k,), 0, dt)
  if size is not None:
    values = _pad(values, count, _smallest_or_zero(values, count) if fill_value is None
                  else fill_value)
    idx1 = _pad(idx1, count, np.array(n1, dt))
    idx2 = _pad(idx2, count, np.array(n2, dt))
  return (values, idx1, idx2) if return_indices else values


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
  """The sorted unique values of ``ar1`` (flattened) not found in ``ar2``, of ``ar1``'s dtype.
  With a static ``size`` the result is cut or padded to it (with ``fill_value``, by default
  0)."""
  b1, b2 = _flat_args("setdiff1d", ar1, ar2, promote=False)
  a1, a2 = promote_dtypes(b1, b2)          # compared in the common dtype
  n1 = get_aval(a1).shape[0]
  aval = get_aval(b1)
  if size is not None:
    size = _static_size(size, "setdiff1d")
  fill = lax._convert_element_type(0 if fill_value is None else asarray(fill_value),
                                   aval.dtype, aval.weak_type)
  if n1 == 0:
    return lax.broadcast_in_dim(fill, (size or 0,), ())
  t = _sort_tagged(a1, a2, equal_nan=True)
  # runs of ar1 values alone; and of NaNs, the first of ar1's (NaN is never in ar2)
  from ourjax.numpy._ufuncs import isnan
  only1 = lax.eq(t.last_tag, np.int32(0))
  if dtypes.is_inexact(get_aval(a1).dtype):
    only1 = lax.or_(only1, isnan(t.key))
  keep = lax.and_(lax.and_(t.first, lax.eq(t.tag, np.int32(0))), only1)
  pos, count, k = _kept("setdiff1d", keep, size)
  values = take_1d(b1, take_1d(t.src, pos))
  if size is not None:
    values = lax.select_n(lax.lt(lax.iota(get_aval(count).dtype, k), count),
                          lax.broadcast_in_dim(fill, (k,), ()), values)
  return values


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
  """The sorted unique values found in exactly one of ``ar1`` and ``ar2`` (flattened).  With a
  static ``size`` the result is cut or padded to it (with ``fill_value``, by default the
  smallest value, 0 if there is none)."""
  a1, a2 = _flat_args("setxor1d", ar1, ar2, promote=True)
  n = get_aval(a1).shape[0] + get_aval(a2).shape[0]
  t = _sort_tagged(a1, a2, equal_nan=True)
  if n:
    # runs whose values all carry one tag; of a NaN run, the first NaN of each argument
    from ourjax.numpy._ufuncs import isnan
    keep = lax.and_(t.first, lax.eq(t.tag, t.last_tag))
    if dtypes.is_inexact(get_aval(a1).dtype):
      prev_tag = lax.concatenate([lax.full((1,), -1, np.int32),
                                  lax.slice_in_dim(t.tag, 0, n - 1, 1, 0)], 0)
      keep = lax.select_n(isnan(t.key), keep, lax.or_(t.first, lax.ne(t.tag, prev_tag)))
  else:
    keep = lax.full((0,), False, np.bool_)
  pos, count, k = _kept("setxor1d", keep, size, static_size_arg=True,
                        boolean_index=assume_unique)
  x = lax.concatenate([a1, a2], 0)
  values = take_1d(x, take_1d(t.src, pos)) if n else lax.full((k,), 0, get_aval(x).dtype)
  if size is not None:
    values = _pad(values, count, _smallest_or_zero(values, count) if fill_value is None
                  else fill_value)
  return values
