"""Sorting and searching: sort, argsort (stable; descending), lexsort, partition/argpartition,
searchsorted, digitize, isin.  Floats sort in total order (NaN last), as NumPy and XLA do."""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import _as_operand, check_arraylike, promote_dtypes, static_argnames


def _arr(name, a):
  check_arraylike(name, a)
  return asarray(_as_operand(a))


def _sort_axis(name, a, axis):
  from ourjax.numpy._shape import ravel
  if axis is None:
    return ravel(a), 0
  nd = get_aval(a).ndim
  if nd == 0:
    raise ValueError(f"jnp.{name}: axis {axis} is out of bounds for array of dimension 0")
  axis = core.concrete_or_error(operator.index, axis, f"jnp.{name}: axis must be concrete")
  if not -nd <= axis < nd:
    raise ValueError(f"jnp.{name}: axis {axis} is out of bounds for array of dimension {nd}")
  return a, axis % nd


def _no_order(name, order):
  if order is not None:
    raise TypeError(f"'order' argument to {name} is not supported.")


@static_argnames("axis", "kind", "order", "stable", "descending")
def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
  """Sorted copy along ``axis`` (the flattened array for None)."""
  _no_order("sort", order)
  a, axis = _sort_axis("sort", _arr("sort", a), axis)
  if descending:
    return lax.rev(lax.sort(lax.rev(a, (axis,)), dimension=axis, is_stable=stable), (axis,))
  return lax.sort(a, dimension=axis, is_stable=stable)


@static_argnames("axis", "kind", "order", "stable", "descending")
def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False, dtype=None):
  """Indices that sort ``a`` along ``axis``; ties keep their order (also when descending).
  ``dtype``: the indices' dtype (the default integer type if None)."""
  _no_order("argsort", order)
  a, axis = _sort_axis("argsort", _arr("argsort", a), axis)
  aval = get_aval(a)
  idx_dt = dtypes.default_int_dtype() if dtype is None else \
      dtypes.canonicalize_dtype(dtypes.check_user_dtype(dtype, "argsort"))
  iota = lax.broadcasted_iota(idx_dt, aval.shape, axis)
  if descending and stable:
    # reverse first so that equal keys come out in their original order once reversed back
    a, iota = lax.rev(a, (axis,)), lax.rev(iota, (axis,))
  _, idx = lax.sort((a, iota), dimension=axis, is_stable=stable, num_keys=1)
  return lax.rev(idx, (axis,)) if descending else idx


@static_argnames("axis")
def lexsort(keys, axis=-1):
  """Indices that sort by the last key, then the one before it, and so on (stable)."""
  keys = tuple(keys)
  if not keys:
    raise TypeError("need sequence of keys with len > 0 in lexsort")
  check_arraylike("lexsort", *keys)
  keys = [asarray(_as_operand(k)) for k in keys]
  shapes = {get_aval(k).shape for k in keys}
  if len(shapes) != 1:
    raise ValueError(f"all keys need to be the same shape, got {sorted(shapes)}")
  shape = shapes.pop()
  if not shape:        # scalar keys: the one index there is (as NumPy and JAX)
    return lax.full((), 0, dtypes.default_int_dtype())
  axis = core.concrete_or_error(operator.index, axis, "lexsort axis must be concrete")
  if not -len(shape) <= axis < len(shape):
    raise ValueError(f"jnp.lexsort: axis {axis} is out of bounds for array of dimension "
                     f"{len(shape)}")
  axis %= len(shape)
  iota = lax.broadcasted_iota(dtypes.default_int_dtype(), shape, axis)
  outs = lax.sort(tuple(reversed(keys)) + (iota,), dimension=axis, is_stable=True,
                  num_keys=len(keys))
  return outs[-1]


@static_argnames("kth", "axis")
def partition(a, kth, axis=-1):
  """A rearrangement with the ``kth`` smallest element in place, smaller ones before it and
  larger ones after it (here: a full sort, which is one such arrangement)."""
  a = _arr("partition", a)
  _check_kth("partition", a, kth, axis)
  return sort(a, axis=axis)


@static_argnames("kth", "axis")
def argpartition(a, kth, axis=-1):
  a = _arr("argpartition", a)
  _check_kth("argpartition", a, kth, axis)
  return argsort(a, axis=axis)


def _check_kth(name, a, kth, axis):
  nd = get_aval(a).ndim
  if nd == 0:
    raise ValueError(f"jnp.{name}: input must be at least one-dimensional")
  axis = operator.index(axis)
  if not -nd <= axis < nd:
    raise ValueError(f"jnp.{name}: axis {axis} is out of bounds for array of dimension {nd}")
  n = get_aval(a).shape[axis % nd]
  k = core.concrete_or_error(operator.index, kth, f"jnp.{name}: kth must be a concrete int")
  if not -n <= k < n:
    raise ValueError(f"kth(={k}) out of bounds {n}")


def sort_complex(a):
  a = _arr("sort_complex", a)
  dt = dtypes.to_complex_dtype(get_aval(a).dtype)
  return lax.convert_element_type(sort(a, axis=-1), dt)   # the last axis, as NumPy and JAX


# ------------------------------------------------------------------------------------------------
# Searching


def _total_lt(x, y):
  """x < y in NumPy's sort order: NaN after everything (for floats)."""
  if dtypes.is_inexact(get_aval(x).dtype):
    from ourjax.numpy._ufuncs import isnan, _ordered
    return lax.or_(_ordered(lax.lt)(x, y), lax.and_(isnan(y), lax.not_(isnan(x))))
  return lax.lt(x, y)


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
  """Insertion points of ``v`` into the sorted 1-D ``a`` (counts of elements below each value,
  in sort order; ``side='right'`` counts ties too).  ``method``: ``'scan'`` (the default) and
  ``'sort'`` search each value in ceil(log2(n + 1)) halving steps of a loop,
  ``'scan_unrolled'`` the same steps unrolled, ``'compare_all'`` compares every value with
  every element (n x len(v) work: for small ``a``).  The results are the same."""
  if sorter is None:
    check_arraylike("searchsorted", a, v)
  else:
    check_arraylike("searchsorted", a, v, sorter)
  if side not in ("left", "right"):
    raise ValueError(f"{side!r} is an invalid value for keyword 'side'. Expected one of "
                     "['left', 'right'].")
  if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
    raise ValueError(f"{method!r} is an invalid value for keyword 'method'. Expected one of "
                     "['sort', 'scan', 'scan_unrolled', 'compare_all'].")
  a, v = asarray(_as_operand(a)), asarray(_as_operand(v))
  if get_aval(a).ndim != 1:
    raise ValueError("a should be 1-dimensional")
  a, v = promote_dtypes(a, v)
  if get_aval(a).shape[0] == 0:
    return lax.full(get_aval(v).shape, 0, np.int32)
  if sorter is not None:
    from ourjax.numpy._ufuncs import _take_1d
    a = _take_1d(a, lax.convert_element_type(asarray(sorter), np.int32))
  n = get_aval(a).shape[0]
  vs = get_aval(v).shape
  if n == 0:
    return lax.full(vs, 0, np.int32)
  # int32 positions, int64 past int32's range (as JAX: with x64 off that dtype is narrowed,
  # with its warning, and the count no longer fits)
  idx = np.dtype(np.int32)
  if n > np.iinfo(np.int32).max:
    idx = dtypes.check_user_dtype(np.int64, "searchsorted")
    if n > np.iinfo(idx).max:
      raise OverflowError(f"Python integer {n} out of bounds for {idx.name}")
  if method == "compare_all":
    shape = vs + (n,)
    ab = lax.broadcast_in_dim(a, shape, (len(vs),))
    vb = lax.broadcast_in_dim(v, shape, tuple(range(len(vs))))
    below = _total_lt(ab, vb) if side == "left" else lax.not_(_total_lt(vb, ab))
    return lax.reduce_sum(lax.convert_element_type(below, idx), (len(vs),))
  return _search_by_halving(a, v, side, idx, unrolled=method == "scan_unrolled")


def _search_by_halving(a, v, side, idx, unrolled):
  """Per value of ``v``, the first position i of ``a`` (sorted, length n) whose element is not
  below it ('left': a[i] >= v; 'right': a[i] > v, in sort order), by bisection of [lo, hi):
  ceil(log2(n + 1)) steps, each a gather of a[mid] for every value; a range already empty
  stays as it is."""
  from ourjax.numpy._ufuncs import _take_1d
  n = get_aval(a).shape[0]
  vs = get_aval(v).shape
  lo = lax.full(vs, 0, idx)
  hi = lax.full(vs, n, idx)
  one, last = lax.full(vs, 1, idx), lax.full(vs, n - 1, idx)

  def step(_, bounds):
    lo, hi = bounds
    mid = lax.div(lax.add(lo, hi), lax.full(vs, 2, idx))     # (lo + hi <= 2n: no overflow)
    x = _take_1d(a, lax.min(mid, last))
    below = _total_lt(x, v) if side == "left" else lax.not_(_total_lt(v, x))
    open_ = lax.lt(lo, hi)
    return (lax.select(lax.and_(open_, below), lax.add(mid, one), lo),
            lax.select(lax.and_(open_, lax.not_(below)), mid, hi))
  levels = int(np.ceil(np.log2(n + 1)))
  if unrolled:
    for i in range(levels):
      lo, hi = step(i, (lo, hi))
  else:
    lo, hi = lax.fori_loop(0, levels, step, (lo, hi))
  return lo


def digitize(x, bins, right: bool = False, *, method=None):
  """Index of the bin of each value (bins increasing or decreasing)."""
  check_arraylike("digitize", x, bins)
  x, bins = asarray(_as_operand(x)), asarray(_as_operand(bins))
  if get_aval(bins).ndim != 1:
    raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
  n = get_aval(bins).shape[0]
  if n == 0:
    return lax.full(get_aval(x).shape, 0, np.int32)
  side = "left" if right else "right"
  from ourjax.numpy._ufuncs import where, _take_1d
  inc = searchsorted(bins, x, side=side)
  rb = lax.rev(bins, (0,))
  dec = lax.sub(np.int32(n), searchsorted(rb, x, side=side))
  first, last = _take_1d(bins, np.zeros((), np.int32)), _take_1d(bins, np.full((), n - 1,
                                                                                  np.int32))
  from ourjax.numpy._ufuncs import _ordered
  return where(_ordered(lax.le)(first, last), inc, dec)


def isin(element, test_elements, assume_unique: bool = False, invert: bool = False, *,
         method="auto"):
  """Whether each element of ``element`` occurs in ``test_elements`` (compares all pairs)."""
  check_arraylike("isin", element, test_elements)
  from ourjax.numpy._shape import ravel
  e, t = promote_dtypes(asarray(_as_operand(element)), ravel(asarray(_as_operand(
      test_elements))))
  es = get_aval(e).shape
  m = get_aval(t).shape[0]
  shape = es + (m,)
  hit = lax.eq(lax.broadcast_in_dim(e, shape, tuple(range(len(es)))),
               lax.broadcast_in_dim(t, shape, (len(es),)))
  out = lax.reduce_or(hit, (len(es),)) if m else lax.full(es, False, np.bool_)
  return lax.not_(out) if invert else out

