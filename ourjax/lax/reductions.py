"""Reductions over axes, each primitive followed by all of its rules."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes
from ourjax.core import ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import _any, _num, check_dtypes, standard_primitive


def _reduce_shape(x, axes, **_):
  for a in axes:
    if not 0 <= a < x.ndim:
      raise ValueError(f"reduction axis {a} is out of bounds for array of dimension {x.ndim}")
  if len(set(axes)) != len(axes):
    raise ValueError(f"duplicate value in 'axes' of reduction: {axes}")
  return tuple(s for i, s in enumerate(x.shape) if i not in axes)


def _reducer(name, kinds, numpy_fn):
  p = standard_primitive(name, _reduce_shape,
                         lambda x, axes, **_: check_dtypes(name, [x], kinds),
                         lambda x, **_: x.weak_type)

  def impl(x, axes, **_):
    if dtypes.is_float(x.dtype) and x.dtype.itemsize < 4:
      return numpy_fn(x.astype(np.float32), axis=axes).astype(x.dtype)
    with np.errstate(all="ignore"):
      return np.asarray(numpy_fn(x, axis=axes)).astype(x.dtype)
  p.def_impl(impl)

  def batch(vals, dims, axes, **params):
    (x,), (d,) = vals, dims
    new_axes = tuple(a + (a >= d) for a in axes)
    out_d = d - sum(a < d for a in new_axes)
    return p.bind(x, axes=new_axes, **params), out_d
  batching.batch_rules[p] = batch
  return p


def _canon_axes(x, axes):
  nd = get_aval(x).ndim
  return tuple(sorted(int(a) % nd if nd else int(a) for a in axes))


def reduce_sum(operand, axes):
  return reduce_sum_p.bind(operand, axes=_canon_axes(operand, axes), out_sharding=None)


def reduce_prod(operand, axes):
  return reduce_prod_p.bind(operand, axes=_canon_axes(operand, axes), out_sharding=None)


def reduce_max(operand, axes):
  return reduce_max_p.bind(operand, axes=_canon_axes(operand, axes), out_sharding=None)


def reduce_min(operand, axes):
  return reduce_min_p.bind(operand, axes=_canon_axes(operand, axes), out_sharding=None)


def reduce_and(operand, axes):
  return reduce_and_p.bind(operand, axes=_canon_axes(operand, axes))


def reduce_or(operand, axes):
  return reduce_or_p.bind(operand, axes=_canon_axes(operand, axes))


def reduce_xor(operand, axes):
  return reduce_xor_p.bind(operand, axes=_canon_axes(operand, axes))


reduce_sum_p = _reducer("reduce_sum", _num, np.sum)
reduce_prod_p = _reducer("reduce_prod", _num, np.prod)
reduce_max_p = _reducer("reduce_max", _any, np.max)
reduce_min_p = _reducer("reduce_min", _any, np.min)
reduce_and_p = _reducer("reduce_and", ("bool", "int"), np.bitwise_and.reduce)
reduce_or_p = _reducer("reduce_or", ("bool", "int"), np.bitwise_or.reduce)
reduce_xor_p = _reducer("reduce_xor", ("bool", "int"), np.bitwise_xor.reduce)

for _p in (reduce_and_p, reduce_or_p, reduce_xor_p):
  ad.defjvp_zero(_p)


def _unreduce(v, x_shape, axes):
  """Broadcast a reduced value back over the reduced axes."""
  from ourjax.lax.structural import broadcast_in_dim
  kept = tuple(i for i in range(len(x_shape)) if i not in axes)
  return broadcast_in_dim(v, x_shape, kept)


def _reduce_sum_transpose(ct, x, axes, out_sharding):
  return [_unreduce(ct, x.aval.shape, axes)]


ad.deflinear(reduce_sum_p, _reduce_sum_transpose)


def _reduce_prod_jvp(primals, tangents, axes, out_sharding):
  # d prod = sum_i t_i * prod_{j != i} x_j; computed with exclusive products so zeros are exact.
  from ourjax.lax import elementwise as ew
  (x,), (t,) = primals, tangents
  ans = reduce_prod_p.bind(x, axes=axes, out_sharding=out_sharding)
  if type(t) is ad.Zero:
    return ans, ad.Zero.from_primal_value(ans)
  others = _prod_of_others(x, axes)
  return ans, reduce_sum(ew.mul(t, others), axes)


def _prod_of_others(x, axes):
  """prod_{j != i} x_j along ``axes`` for each i, without division (exact with zeros)."""
  from ourjax.lax import elementwise as ew
  from ourjax.lax.structural import reshape, transpose
  shape = get_aval(x).shape
  kept = [i for i in range(len(shape)) if i not in axes]
  perm = tuple(kept) + tuple(axes)
  xt = transpose(x, perm)
  n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
  flat = reshape(xt, tuple(shape[i] for i in kept) + (n,))
  # prod of others = exclusive cumprod from the left * exclusive cumprod from the right
  from ourjax.lax import cumulative
  left = cumulative.cumprod(flat, axis=len(kept), reverse=False)
  right = cumulative.cumprod(flat, axis=len(kept), reverse=True)
  one = ew._ones(_slice_last(flat, 0, 1))
  left_ex = _concat_last(one, _slice_last(left, 0, n - 1))
  right_ex = _concat_last(_slice_last(right, 1, n), one)
  out = ew.mul(left_ex, right_ex)
  out = reshape(out, tuple(shape[i] for i in kept) + tuple(shape[a] for a in axes))
  return transpose(out, tuple(np.argsort(perm)))


def _slice_last(x, start, stop):
  from ourjax.lax.slicing import slice_in_dim
  return slice_in_dim(x, start, stop, axis=get_aval(x).ndim - 1)


def _concat_last(a, b):
  from ourjax.lax.structural import concatenate
  return concatenate([a, b], get_aval(a).ndim - 1)


ad.jvp_rules[reduce_prod_p] = _reduce_prod_jvp


def _reduce_chooser_jvp(primals, tangents, axes, out_sharding, prim):
  # gradient split evenly among the positions that attain the max/min (JAX's convention)
  from ourjax.lax import elementwise as ew
  (x,), (t,) = primals, tangents
  ans = prim.bind(x, axes=axes, out_sharding=out_sharding)
  if type(t) is ad.Zero:
    return ans, ad.Zero.from_primal_value(ans)
  shape = get_aval(x).shape
  location = ew.convert_element_type(ew.eq(x, _unreduce(ans, shape, axes)), get_aval(t).dtype)
  counts = reduce_sum(location, axes)
  return ans, ew.div(reduce_sum(ew.mul(t, location), axes), counts)


ad.jvp_rules[reduce_max_p] = lambda p, t, **kw: _reduce_chooser_jvp(p, t, prim=reduce_max_p, **kw)
ad.jvp_rules[reduce_min_p] = lambda p, t, **kw: _reduce_chooser_jvp(p, t, prim=reduce_min_p, **kw)
