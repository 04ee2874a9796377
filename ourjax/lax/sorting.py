"""Sorting: ``sort`` (several operands, lexicographic on the first ``num_keys``), ``sort_key_val``
and ``top_k``, each primitive followed by all of its rules.

lax.sort's order: ascending; -0.0 and +0.0 compare equal (a stable sort keeps their order) and
every NaN sorts after +inf; complex numbers sort by real part, then imaginary part.  top_k takes
the largest ``k`` along an axis in descending order, the lower index first among equal values,
NaN counted as the largest.  The derivatives of both move the tangents with the permutation the
sort applied (found by sorting an iota along)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ourjax import dtypes
from ourjax.core import Primitive, ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import canonicalize_axis

# ------------------------------------------------------------------------------------------------
# sort


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
  """Sort ``operand`` (an array, or a sequence of arrays of one shape, sorted together by the
  first ``num_keys`` of them) along ``dimension``."""
  if isinstance(operand, Sequence):
    if len(operand) == 0:
      raise TypeError("Sort requires at least one operand")
    if not 1 <= num_keys <= len(operand):
      raise ValueError(f"num_keys={num_keys} must be between 1 and len(operand)={len(operand)}")
    dimension = canonicalize_axis(dimension, get_aval(operand[0]).ndim, "dimension")
    return tuple(sort_p.bind(*operand, dimension=dimension, is_stable=bool(is_stable),
                             num_keys=int(num_keys)))
  if num_keys != 1:
    raise ValueError(f"num_keys={num_keys} must equal 1 for a single operand.")
  dimension = canonicalize_axis(dimension, get_aval(operand).ndim, "dimension")
  return sort_p.bind(operand, dimension=dimension, is_stable=bool(is_stable), num_keys=1)[0]


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
  """Sort ``keys`` along ``dimension`` and apply the same permutation to ``values``."""
  dimension = canonicalize_axis(dimension, get_aval(keys).ndim, "dimension")
  k, v = sort_p.bind(keys, values, dimension=dimension, is_stable=bool(is_stable), num_keys=1)
  return k, v


sort_p = Primitive("sort")
sort_p.multiple_results = True


def _sort_abstract_eval(*avals, dimension, is_stable, num_keys):
  if not avals:
    raise TypeError("Sort requires at least one operand")
  if any(a.shape != avals[0].shape for a in avals[1:]):
    raise TypeError(f"Arguments to sort must have equal shapes, got: "
                    f"{' '.join(str(a.shape) for a in avals)}")
  if not 0 <= dimension < max(avals[0].ndim, 1) or avals[0].ndim == 0:
    raise ValueError(f"sort dimension {dimension} is out of bounds for operands of shape "
                     f"{avals[0].shape}")
  if not 1 <= num_keys <= len(avals):
    raise ValueError(f"num_keys={num_keys} must be between 1 and the number of operands "
                     f"{len(avals)}")
  return list(avals)


def _sort_impl(*operands, dimension, is_stable, num_keys):
  from ourjax.backends import reference_ops
  return reference_ops.sort(list(operands), dimension=dimension, is_stable=is_stable,
                            num_keys=num_keys)


sort_p.def_abstract_eval(_sort_abstract_eval)
sort_p.def_impl(_sort_impl)


def _index_dtype(n: int):
  return np.dtype(np.int32) if n < np.iinfo(np.int32).max else np.dtype(np.int64)


def _sort_jvp(primals, tangents, dimension, is_stable, num_keys):
  from ourjax.lax.structural import broadcasted_iota
  shape = get_aval(primals[0]).shape
  iota = broadcasted_iota(_index_dtype(shape[dimension]), shape, dimension)
  *outs, perm = sort_p.bind(*primals, iota, dimension=dimension, is_stable=is_stable,
                            num_keys=num_keys)
  tangents_out = [ad.Zero.from_primal_value(o) if type(t) is ad.Zero
                  else _take_along(t, perm, dimension) for o, t in zip(outs, tangents)]
  return outs, tangents_out


def _take_along(x, idx, axis):
  """``out[..., i, ...] = x[..., idx[..., i, ...], ...]`` along ``axis``: a gather whose other
  dimensions are batching dimensions shared by ``x`` and ``idx`` (equal sizes there)."""
  from ourjax.lax import slicing
  from ourjax.lax.structural import expand_dims
  nd = get_aval(x).ndim
  if get_aval(x).size == 0 or get_aval(idx).size == 0:   # nothing to gather (no slice fits)
    from ourjax.lax.structural import full
    return full(get_aval(idx).shape, 0, get_aval(x).dtype)
  others = tuple(d for d in range(nd) if d != axis)
  dnums = slicing.GatherDimensionNumbers(
      offset_dims=(), collapsed_slice_dims=(axis,), start_index_map=(axis,),
      operand_batching_dims=others, start_indices_batching_dims=others)
  return slicing.gather(x, expand_dims(idx, (nd,)), dnums, (1,) * nd,
                        mode=slicing.GatherScatterMode.PROMISE_IN_BOUNDS)


ad.jvp_rules[sort_p] = _sort_jvp


def _sort_batch(vals, dims, dimension, is_stable, num_keys):
  # every operand gets the batch dim at the position of the first batched one
  proto, bd = next((v, d) for v, d in zip(vals, dims) if d is not None)
  shape = get_aval(proto).shape
  args = []
  for v, d in zip(vals, dims):
    if d is None:
      from ourjax.lax.structural import broadcast_in_dim
      args.append(broadcast_in_dim(v, shape, tuple(i for i in range(len(shape)) if i != bd)))
    else:
      args.append(batching.moveaxis(v, d, bd))
  outs = sort_p.bind(*args, dimension=dimension + (bd <= dimension), is_stable=is_stable,
                     num_keys=num_keys)
  return outs, [bd] * len(outs)


batching.batch_rules[sort_p] = _sort_batch

# ------------------------------------------------------------------------------------------------
# top_k


def top_k(operand, k: int, *, axis: int = -1):
  """The ``k`` largest entries along ``axis`` (the last by default), largest first, and their
  int32 indices."""
  k = int(k)
  axis = canonicalize_axis(axis, max(get_aval(operand).ndim, 1), "axis")
  v, i = top_k_p.bind(operand, k=k, axis=axis)
  return [v, i]   # a list, as JAX's


def approx_max_k(operand, k: int, reduction_dimension: int = -1, recall_target: float = 0.95,
                 reduction_input_size_override: int = -1, aggregate_to_topk: bool = True):
  """The ``k`` largest entries along ``reduction_dimension`` and their indices.  JAX's TPU
  version may return approximate results (``recall_target``); this one is exact (top_k)."""
  del recall_target, reduction_input_size_override, aggregate_to_topk
  return top_k(operand, k, axis=reduction_dimension)


def approx_min_k(operand, k: int, reduction_dimension: int = -1, recall_target: float = 0.95,
                 reduction_input_size_override: int = -1, aggregate_to_topk: bool = True):
  """The ``k`` smallest entries along ``reduction_dimension`` (smallest first) and their
  indices; exact (see ``approx_max_k``)."""
  del recall_target, reduction_input_size_override, aggregate_to_topk
  from ourjax import lax
  dt = get_aval(operand).dtype
  flip = lax.bitwise_not if np.issubdtype(dt, np.unsignedinteger) else lax.neg
  v, i = top_k(flip(operand), k, axis=reduction_dimension)
  return [flip(v), i]


top_k_p = Primitive("top_k")
top_k_p.multiple_results = True


def _top_k_abstract_eval(x, k, axis):
  if dtypes.is_complex(x.dtype):
    raise ValueError("top_k is not compatible with complex inputs.")
  if k < 0:
    raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
  if x.ndim == 0:
    raise TypeError(f"top_k operand must have >= 1 dimension, got {x.shape}")
  if not 0 <= axis < x.ndim:
    raise ValueError(f"axis argument out of range: axis={axis} for operand.shape={x.shape}")
  if x.shape[axis] > np.iinfo(np.int32).max:
    raise ValueError(f"top_k returns int32 indices, which will overflow for array dimensions "
                     f"larger than the maximum int32 ({np.iinfo(np.int32).max}). Got "
                     f"operand.shape={x.shape}")
  if x.shape[axis] < k:
    raise ValueError(f"k argument to top_k must be no larger than size along axis; got k={k} "
                     f"with shape={x.shape} and axis={axis}")
  shape = list(x.shape)
  shape[axis] = k
  return [ShapedArray(shape, x.dtype, x.weak_type), ShapedArray(shape, np.int32)]


def _top_k_impl(x, k, axis):
  from ourjax.backends import reference_ops
  moved = np.moveaxis(x, axis, -1)
  key = reference_ops.total_order_key(moved)   # NaN above +inf, +0 above -0
  # ~key reverses an integer order exactly; a stable ascending sort of it is a descending sort
  # with the lower index first among equal values.
  order = np.argsort(~key, axis=-1, kind="stable")[..., :k] if key.size else \
      np.zeros(key.shape[:-1] + (k,), np.intp)
  vals = np.take_along_axis(moved, order, axis=-1)
  return [np.ascontiguousarray(np.moveaxis(vals, -1, axis)),
          np.ascontiguousarray(np.moveaxis(order, -1, axis)).astype(np.int32)]


top_k_p.def_abstract_eval(_top_k_abstract_eval)
top_k_p.def_impl(_top_k_impl)


def _top_k_jvp(primals, tangents, k, axis):
  (x,), (t,) = primals, tangents
  vals, idx = top_k_p.bind(x, k=k, axis=axis)
  idx_zero = ad.Zero.from_primal_value(idx)
  if type(t) is ad.Zero:
    return [vals, idx], [ad.Zero.from_primal_value(vals), idx_zero]
  return [vals, idx], [_take_along(t, idx, axis), idx_zero]


ad.jvp_rules[top_k_p] = _top_k_jvp


def _top_k_batch(vals, dims, k, axis):
  (x,), (d,) = vals, dims
  outs = top_k_p.bind(x, k=k, axis=axis + (d <= axis))
  return outs, [d, d]


batching.batch_rules[top_k_p] = _top_k_batch


# ------------------------------------------------------------------------------------------------
# Lowerings.  sort: an HLO sort whose comparator orders the first ``num_keys`` operands
# lexicographically in lax's order (floats canonicalised -- -0 to +0, every NaN to +NaN -- then
# compared in the total order; complex by real, then imaginary part).  top_k: a stable sort of
# (operand, iota) by the total order descending, then the first k of both.


def _register_lowerings():
  from ourjax.lowering import hlo
  from ourjax.lowering.from_jaxpr import register_lowering

  def canonical(b, ctx, x, dt):
    zero, nan = ctx.constant(0, dt), ctx.constant(np.nan, dt)
    x = b.select(b.compare(x, zero, "EQ"), zero, x)
    return b.select(b.compare(x, x, "NE"), nan, x)

  def key_parts(b, ctx, x, dt):
    """Scalars compared lexicographically for one key, with their comparison type."""
    if dtypes.is_complex(dt):
      part = np.dtype(np.float32 if dt == np.complex64 else np.float64)
      return [(canonical(b, ctx, b.real(x), part), True),
              (canonical(b, ctx, b.imag(x), part), True)]
    if dtypes.is_float(dt):
      return [(canonical(b, ctx, x, dt), True)]
    return [(x, False)]

  def sort_comparator(ctx, op_dtypes, num_keys):
    def body(sub, params):
      b = sub.builder
      lhs, rhs = params[0::2], params[1::2]
      terms = []      # (less, equal) per scalar key part, most significant first
      for k in range(num_keys):
        dt = np.dtype(op_dtypes[k])
        for (l, total), (r, _) in zip(key_parts(b, sub, lhs[k], dt),
                                      key_parts(b, sub, rhs[k], dt)):
          terms.append((b.compare(l, r, "LT", total_order=total),
                        b.compare(l, r, "EQ", total_order=total)))
      less, _ = terms[-1]
      for lt, eq in reversed(terms[:-1]):
        less = b.or_(lt, b.and_(eq, less))
      return less
    shapes = [hlo.Shape(dt, ()) for dt in op_dtypes for _ in (0, 1)]
    key = ("sort_comparator", tuple(np.dtype(d) for d in op_dtypes), num_keys)
    return ctx.cached_computation(key, lambda: ctx.computation("sort_comparator", shapes, body))

  @register_lowering(sort_p)
  def _sort_lower(ctx, avals_in, avals_out, *operands, dimension, is_stable, num_keys):
    comp = sort_comparator(ctx, [a.dtype for a in avals_in], num_keys)
    out = ctx.builder.sort(list(operands), dimension, comp, is_stable=True)
    return [out] if len(operands) == 1 else ctx.unpack(out)

  def descending_comparator(ctx, dt):
    def body(sub, params):
      b = sub.builder
      return b.compare(params[0], params[1], "GT", total_order=dtypes.is_float(dt))
    shapes = [hlo.Shape(dt, ()), hlo.Shape(dt, ()), hlo.Shape(np.int32, ()),
              hlo.Shape(np.int32, ())]
    return ctx.cached_computation(("top_k_comparator", np.dtype(dt)), lambda: ctx.computation(
        "top_k_comparator", shapes, body))

  @register_lowering(top_k_p)
  def _top_k_lower(ctx, avals_in, avals_out, x, k, axis):
    b = ctx.builder
    aval = avals_in[0]
    idx = b.iota(hlo.Shape(np.int32, aval.shape), axis)
    # only the first k positions are read: a backend may select them (the CPU's, when an
    # insertion among the k kept, at most k moves, costs no more than the sort's log2(n) steps
    # per element several times over: k <= 4 log2(n))
    n = aval.shape[axis]
    partial = k if 0 < k < n and k <= 4 * max(1, int(np.log2(max(n, 2)))) else None
    vals, perm = ctx.unpack(b.sort([x, idx], axis, descending_comparator(ctx, aval.dtype),
                                   is_stable=True, top_k=partial))
    limit = list(aval.shape)
    limit[axis] = k
    start = [0] * len(limit)
    return [b.slice(vals, start, limit), b.slice(perm, start, limit)]


_register_lowerings()
