"""Reductions over axes, each primitive followed by all of its rules."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes
from ourjax.backends import reference_ops as rops
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


def _check_f16_sum(x, axes) -> None:
  """With ``jax_allow_f16_reductions=False``, a float16/bfloat16 sum over an axis longer than
  1 is refused (checked by the abstract rule, and by ``reduce_sum`` itself: eager calls cache
  their abstract evaluation per signature, not per flag value)."""
  if x.dtype in (np.float16, dtypes.bfloat16):
    from ourjax.config import config
    if not config.jax_allow_f16_reductions and any(x.shape[a] != 1 for a in axes):
      raise ValueError(f"reduce_sum on operand {x.str_short(short_dtypes=True)} is not "
                       "allowed when jax_allow_f16_reductions=False.")


def _reduce_dtype(name, kinds):
  def rule(x, axes, **_):
    dt = check_dtypes(name, [x], kinds)
    if name == "reduce_sum":
      _check_f16_sum(x, axes)
    return dt
  return rule


def _reducer(name, kinds, numpy_fn):
  p = standard_primitive(name, _reduce_shape, _reduce_dtype(name, kinds),
                         lambda x, **_: x.weak_type)

  # the ufunc's reduce is np.sum/np.max... without their Python wrapper
  # (max/min: XLA's, +0 above -0 whatever the order, rops.maximum)
  reduce_fn = {np.sum: np.add.reduce, np.prod: np.multiply.reduce, np.max: rops.maximum.reduce,
               np.min: rops.minimum.reduce}.get(numpy_fn, numpy_fn)

  chooser = numpy_fn in (np.max, np.min)

  def impl(x, axes, **_):
    if x.size and all(x.shape[a] == 1 for a in axes):
      # one element per result: that element (XLA makes such a reduce a reshape, so JAX's
      # sum of [-0.0] is -0.0, not 0 + -0.0)
      return np.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))
    kw = {}
    if chooser and x.size == 0:   # an empty reduction gives the identity, as in XLA
      kw["initial"] = _chooser_identity(numpy_fn is np.max, x.dtype)
    dt = x.dtype
    if dt.itemsize < 4 and dt.kind in "fV" and dtypes.is_float(dt):
      return reduce_fn(x.astype(np.float32), axis=axes, **kw).astype(dt)
    out = rops.quietly(reduce_fn, x, axis=axes, **kw)
    if type(out) is not np.ndarray:
      out = np.asarray(out)
    return out if out.dtype == dt else out.astype(dt)
  impl.reduce_fn, impl.chooser = reduce_fn, chooser     # (for an eager replay's plan)
  p.def_impl(impl)

  def batch(vals, dims, axes, **params):
    (x,), (d,) = vals, dims
    new_axes = tuple(a + (a >= d) for a in axes)
    out_d = d - sum(a < d for a in new_axes)
    return p.bind(x, axes=new_axes, **params), out_d
  batching.batch_rules[p] = batch
  return p


def _chooser_identity(is_max: bool, dtype):
  """The identity of max (the lowest value) or min (the highest) for ``dtype``."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return not is_max
  if dtypes.is_integer(dtype):
    info = np.iinfo(dtype)
    return info.min if is_max else info.max
  if dtypes.is_complex(dtype):
    return np.array(-np.inf if is_max else np.inf, dtype)
  if not dtypes.supports_inf(dtype):
    # (float8_e4m3fn has no infinity: -inf would convert to NaN, which max propagates)
    info = dtypes.finfo(dtype)
    return np.array(info.min if is_max else info.max, dtype)
  return -np.inf if is_max else np.inf


def _canon_axes(x, axes):
  nd = get_aval(x).ndim
  return tuple(sorted(int(a) % nd if nd else int(a) for a in axes))


def reduce_sum(operand, axes):
  axes = _canon_axes(operand, axes)
  _check_f16_sum(get_aval(operand), axes)
  return reduce_sum_p.bind(operand, axes=axes, out_sharding=None)


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


def _pp_without_none_sharding(params):
  # printed like JAX's, whose reduce_prod/max/min have no out_sharding parameter
  return [(k, v) for k, v in sorted(params.items()) if not (k == "out_sharding" and v is None)]


for _p in (reduce_prod_p, reduce_max_p, reduce_min_p):
  core.pp_param_rules[_p] = _pp_without_none_sharding
del _p
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
  if n == 0:   # nothing is reduced: x is empty, and so is the result
    return x
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

# ------------------------------------------------------------------------------------------------
# argmax / argmin: the index of the first maximal (minimal) element along one axis.  A NaN counts
# as larger and smaller than everything, so the first NaN wins either way (JAX's and NumPy's rule).


def argmax(operand, axis, index_dtype):
  return argmax_p.bind(operand, axes=(int(axis),),
                       index_dtype=dtypes.canonicalize_dtype(index_dtype))


def argmin(operand, axis, index_dtype):
  return argmin_p.bind(operand, axes=(int(axis),),
                       index_dtype=dtypes.canonicalize_dtype(index_dtype))


def _argminmax(name, numpy_fn):
  def shape_rule(x, axes, index_dtype):
    axis, = axes
    if not 0 <= axis < x.ndim:
      raise ValueError(f"Invalid axis {axis} for operand shape {x.shape} in {name}")
    if x.shape[axis] < 1:
      raise ValueError(f"argmin and argmax require non-empty reduced dimension. "
                       f"operand.shape={x.shape} axis={axis}")
    return tuple(s for i, s in enumerate(x.shape) if i != axis)

  def dtype_rule(x, axes, index_dtype):
    check_dtypes(name, [x], ("bool", "int", "float"))
    if not dtypes.is_integer(index_dtype):
      raise TypeError(f"index_dtype must be an integer type, but got {np.dtype(index_dtype).name}")
    return np.dtype(index_dtype)

  p = standard_primitive(name, shape_rule, dtype_rule, lambda x, **_: False)

  def impl(x, axes, index_dtype):
    if dtypes.is_float(x.dtype) and x.dtype.itemsize < 4:
      x = x.astype(np.float32)
    return numpy_fn(x, axis=axes[0]).astype(index_dtype)
  p.def_impl(impl)
  ad.defjvp_zero(p)

  def batch(vals, dims, axes, index_dtype):
    (x,), (d,) = vals, dims
    axis = axes[0] + (axes[0] >= d)
    return p.bind(x, axes=(axis,), index_dtype=index_dtype), d - (axis < d)
  batching.batch_rules[p] = batch
  return p


argmax_p = _argminmax("argmax", np.argmax)
argmin_p = _argminmax("argmin", np.argmin)

# ------------------------------------------------------------------------------------------------
# lax.reduce(operands, init_values, computation, dimensions)
#
# A computation that is one of the monoids (add, mul, max, min, and, or, xor) -- recognised by
# tracing it on two scalars -- maps to the reduce_* primitive; with an init value that is not the
# monoid's identity, the init value is combined with the reduction afterwards (the monoids are
# associative and commutative).  Any other computation binds the general ``reduce`` primitive,
# which carries the computation as a jaxpr.


def flatten_operands(operands, init_values, none_error: str, gap: str = " "):
  """(flat operands, flat init values, their tree) of a reduction over pytrees, with JAX's
  errors (``none_error`` when there are no operands; ``gap``: JAX's spacing in its count error,
  which differs between reduce and reduce_window)."""
  from ourjax import _pytree as tree_util
  flat_ops, op_tree = tree_util.tree_flatten(operands)
  flat_inits, init_tree = tree_util.tree_flatten(init_values)
  if op_tree != init_tree:
    raise ValueError(f"Operands must have the same tree structure as init_values: {op_tree} vs. "
                     f"{init_tree}")
  if len(flat_ops) != len(flat_inits):
    raise ValueError(f"Must have same total number of operands as init_values:{gap}"
                     f"{len(flat_ops)} vs. {len(flat_inits)}")
  if not flat_ops:
    raise ValueError(none_error)
  return flat_ops, flat_inits, op_tree


def reduce(operands, init_values, computation, dimensions):  # noqa: A001 (lax's name)
  from ourjax import _pytree as tree_util
  flat_ops, flat_inits, init_tree = flatten_operands(operands, init_values,
                                                     "reduce requires at least one operand")
  dims = tuple(int(d) for d in dimensions)
  shapes = [get_aval(v).shape for v in flat_inits]
  if any(shapes):
    raise ValueError(f"reduce found non-scalar initial value: {shapes}")
  if len(flat_ops) == 1:
    out = _monoid_reduce(flat_ops[0], flat_inits[0], computation, dims, init_tree)
    if out is not None:
      return tree_util.tree_unflatten(init_tree, [out])
  closed, out_tree = _reduction_jaxpr(computation, init_tree,
                                      tuple(get_aval(v).strip_weak_type() for v in flat_inits))
  outs = reduce_p.bind(*flat_ops, *flat_inits, computation=computation, jaxpr=closed,
                       dimensions=dims)
  return tree_util.tree_unflatten(out_tree, outs)


def _monoid_reduce(x, init, computation, dims, tree):
  from ourjax import core
  from ourjax.lax import elementwise as ew
  dtype = get_aval(x).dtype
  prim = _monoid_primitive(computation, dtype, tree)
  if prim is None or get_aval(init).shape != ():
    return None
  reducer, combine = _monoids()[prim]
  if isinstance(init, (bool, int, float, complex)):
    init = ew._convert_element_type(init, dtype, get_aval(init).weak_type)
  elif get_aval(init).dtype != dtype:
    raise TypeError(f"reduce: init value dtype {get_aval(init).dtype.name} does not match "
                    f"operand dtype {dtype.name}")
  out = reducer(x, dims)
  is_identity = False
  if core.is_concrete(init):
    v = np.asarray(core.concrete_or_error(None, init))
    ident = _identity_value(prim, dtype)
    # -0.0 is the identity of add, +0.0 is not (-0.0 + 0.0 = +0.0), but a sum of nothing is +0.0
    # in XLA, so either zero is fine here.
    is_identity = bool(np.array_equal(v, ident))
  if not is_identity:
    out = combine(out, init)
  weak = get_aval(x).weak_type and get_aval(init).weak_type
  return ew._convert_element_type(out, dtype, weak)


def _identity_value(prim, dtype):
  from ourjax.lax import elementwise as ew
  dtype = np.dtype(dtype)
  if prim is ew.add_p:
    return np.zeros((), dtype)
  if prim is ew.mul_p:
    return np.ones((), dtype)
  if prim is ew.max_p:
    return np.asarray(_chooser_identity(True, dtype), dtype)
  if prim is ew.min_p:
    return np.asarray(_chooser_identity(False, dtype), dtype)
  if prim is ew.and_p:
    return np.asarray(True if dtype == np.bool_ else -1).astype(dtype)
  return np.zeros((), dtype)   # or, xor


def _monoid_primitive(computation, dtype, tree):
  """The elementwise primitive that ``computation(a, b)`` applies to two scalars of ``dtype``,
  if that is all it does; else None."""
  from ourjax import _pytree as tree_util
  from ourjax.interpreters import partial_eval as pe
  aval = ShapedArray((), dtype)

  out_trees = []

  def fun(a, b):
    out = computation(tree_util.tree_unflatten(tree, [a]), tree_util.tree_unflatten(tree, [b]))
    out_trees.append(tree_util.tree_structure(out))
    return tree_util.tree_leaves(out)
  try:
    closed = pe.trace_to_jaxpr(fun, [aval, aval], "reduce_computation")
  except Exception:   # not traceable as a scalar function: leave it to the general reduce
    return None
  if out_trees != [tree]:     # (a result of another structure: the general path reports it)
    return None
  jaxpr = closed.jaxpr
  if len(jaxpr.eqns) != 1 or len(jaxpr.outvars) != 1 or closed.consts:
    return None
  eqn = jaxpr.eqns[0]
  if (eqn.primitive not in _monoids() or len(eqn.inputs) != 2
      or set(map(id, eqn.inputs)) != set(map(id, jaxpr.invars))
      or jaxpr.outvars[0] is not eqn.out_binders[0]
      or eqn.out_binders[0].aval.dtype != dtype):
    return None
  return eqn.primitive


def trace_combiner(computation, tree, init_avals, name: str):
  """(closed jaxpr, output tree) of the binary ``computation`` of a reduction over pytrees
  (``tree``), traced on scalars of the init values' types: it takes (accumulators...,
  elements...) flat.  The callers check the result's structure with their own errors."""
  from ourjax import _pytree as tree_util
  from ourjax.interpreters import partial_eval as pe
  n = len(init_avals)
  out_trees = []

  def fun(*args):
    a = tree_util.tree_unflatten(tree, list(args[:n]))
    b = tree_util.tree_unflatten(tree, list(args[n:]))
    flat, out_tree = tree_util.tree_flatten(computation(a, b))
    out_trees.append(out_tree)
    return flat
  closed = pe.trace_to_jaxpr(fun, list(init_avals) * 2, name)
  return closed, out_trees[0]


def _reduction_jaxpr(computation, tree, init_avals):
  closed, out_tree = trace_combiner(computation, tree, init_avals, "reduce_computation")
  if out_tree != tree:
    raise TypeError(f"reduce: the computation must return the structure of the init values "
                    f"{tree}, got {out_tree}")
  for a, b in zip(closed.out_avals, init_avals):
    if a.shape != () or a.dtype != b.dtype:
      raise TypeError(f"reduce: the computation must return scalars of the init values' types "
                      f"{[v.str_short() for v in init_avals]}, got "
                      f"{[v.str_short() for v in closed.out_avals]}")
  return closed, out_tree


_MONOID_TABLE: dict = {}


def _monoids() -> dict:
  """primitive -> (reducer, binary op) for the computations ``lax.reduce`` maps to reduce_*."""
  if not _MONOID_TABLE:
    from ourjax.lax import elementwise as ew
    _MONOID_TABLE.update({
        ew.add_p: (reduce_sum, ew.add), ew.mul_p: (reduce_prod, ew.mul),
        ew.max_p: (reduce_max, ew.max), ew.min_p: (reduce_min, ew.min),
        ew.and_p: (reduce_and, ew.and_), ew.or_p: (reduce_or, ew.or_),
        ew.xor_p: (reduce_xor, ew.xor)})
  return _MONOID_TABLE


# The general reduce primitive: operands..., init_values... -> results...; ``jaxpr`` maps
# (accumulators..., elements...) to new accumulators, all scalars.
from ourjax.core import Primitive  # noqa: E402

reduce_p = Primitive("reduce")
reduce_p.multiple_results = True


def _reduce_abstract_eval(*avals, computation, jaxpr, dimensions):
  n = len(avals) // 2
  ops, inits = avals[:n], avals[n:]
  for a in ops[1:]:
    if a.shape != ops[0].shape:
      raise ValueError(f"reduce operands must all have the same shape, got "
                       f"{[o.shape for o in ops]}")
  for o, i in zip(ops, inits):
    if i.shape != ():
      raise ValueError(f"reduce init values must be scalars, got shape {i.shape}")
    if o.dtype != i.dtype:
      raise TypeError(f"reduce operand dtype {o.dtype.name} does not match init value dtype "
                      f"{i.dtype.name}")
  shape = _reduce_shape(ops[0], dimensions)
  return [ShapedArray(shape, o.dtype, o.weak_type and i.weak_type) for o, i in zip(ops, inits)]


reduce_p.def_abstract_eval(_reduce_abstract_eval)


def _reduce_impl(*args, computation, jaxpr, dimensions):
  from ourjax import core
  from ourjax.array import to_numpy
  from ourjax.backends import reference_ops
  from ourjax.api import vmap
  n = len(args) // 2
  ops, inits = list(args[:n]), list(args[n:])
  dtypes_ = [i.dtype for i in inits]

  def combine(accs, xs):   # accs/xs: arrays of the kept shape; the jaxpr is vmapped over them
    shape = np.shape(accs[0])
    flat = [np.reshape(np.asarray(a, dt), (-1,)) for a, dt in zip(list(accs) + list(xs),
                                                                  dtypes_ * 2)]
    m = flat[0].shape[0]
    if m == 0:
      return tuple(np.zeros(shape, dt) for dt in dtypes_)
    outs = vmap(lambda *ys: core.closed_call(jaxpr, *ys))(*flat)
    return tuple(np.reshape(to_numpy(o), shape) for o in outs)
  res = reference_ops.reduce(ops, inits, computation=reference_ops.tuple_combine(combine),
                             dimensions=dimensions)
  return list(res)


reduce_p.def_impl(_reduce_impl)


def _reduce_batch(vals, dims, computation, jaxpr, dimensions, axis_size):
  n = len(vals) // 2
  if any(d is not None for d in dims[n:]):
    raise NotImplementedError("vmap of lax.reduce with batched init values is not implemented")
  ops = [batching.bdim_at_front(v, d, axis_size) for v, d in zip(vals[:n], dims[:n])]
  new_dims = tuple(d + 1 for d in dimensions)
  outs = reduce_p.bind(*ops, *vals[n:], computation=computation, jaxpr=jaxpr,
                       dimensions=new_dims)
  return outs, [0] * n


batching.register_rule_with_axis_size(reduce_p, _reduce_batch)


def _reduce_jvp(primals, tangents, computation, jaxpr, dimensions):
  """Differentiate a general (associative) reduction by reducing pairs in a balanced tree with
  the JVP of the computation."""
  from ourjax import core
  from ourjax.api import jvp, vmap
  from ourjax.lax import structural as st
  n = len(primals) // 2
  xs, inits = list(primals[:n]), list(primals[n:])
  if any(type(t) is not ad.Zero for t in tangents[n:]):
    raise NotImplementedError("Gradient of general lax.reduce with non-zero tangents for the "
                              "initial values is not implemented")
  shape = get_aval(xs[0]).shape
  kept = tuple(i for i in range(len(shape)) if i not in dimensions)
  perm = tuple(dimensions) + kept
  count = int(np.prod([shape[d] for d in dimensions], dtype=np.int64))
  new_shape = (count,) + tuple(shape[i] for i in kept)
  tans = [ad.instantiate_zeros(t) for t in tangents[:n]]
  xs = [st.reshape(st.transpose(x, perm), new_shape) for x in xs]
  tans = [st.reshape(st.transpose(t, perm), new_shape) for t in tans]
  fn = lambda *a: core.closed_call(jaxpr, *a)  # noqa: E731
  for _ in range(len(kept) + 1):
    fn = vmap(fn)

  def tree_reduce(*vs):
    vs = list(vs)
    from ourjax import lax
    while get_aval(vs[0]).shape[0] > 1:
      m = get_aval(vs[0]).shape[0]
      h = (m + 1) // 2
      a = [lax.slice_in_dim(v, 0, h, axis=0) for v in vs]
      b = [lax.slice_in_dim(v, h, m, axis=0) for v in vs]
      if m - h != h:   # odd: pad the second half with the init values
        b = [st.concatenate([u, st.broadcast_in_dim(i, (1,) + get_aval(u).shape[1:], ())], 0)
             for u, i in zip(b, inits)]
      vs = list(fn(*a, *b))
    if get_aval(vs[0]).shape[0] == 0:
      return [st.broadcast_in_dim(i, new_shape[1:], ()) for i in inits]
    return [st.reshape(v, new_shape[1:]) for v in vs]
  outs, out_tans = jvp(tree_reduce, tuple(xs), tuple(tans))
  return list(outs), list(out_tans)


ad.jvp_rules[reduce_p] = _reduce_jvp


# ------------------------------------------------------------------------------------------------
# Lowerings.  argmax/argmin: a variadic HLO reduce of (value, index) pairs whose reducer keeps
# the better pair -- NaN first, then the larger (smaller) value, then the lower index -- a total
# order, so the result does not depend on the reduction order.  The general reduce: an HLO
# reduce whose reducer is the computation's jaxpr (accumulators first, as the impl calls it).


def _register_lowerings():
  from ourjax.lowering import hlo
  from ourjax.lowering.from_jaxpr import register_lowering

  def argminmax_reducer(ctx, dtype, index_dtype, direction):
    def body(sub, params):
      b = sub.builder
      av, ai, bv, bi = params
      lower_index = b.compare(ai, bi, "LT")
      if dtypes.is_float(dtype):
        a_nan, b_nan = b.compare(av, av, "NE"), b.compare(bv, bv, "NE")
        better = b.compare(av, bv, direction)
        tie = b.compare(av, bv, "EQ")
        # a wins: a is NaN and (b is not, or a comes first); neither is NaN and a is better
        # or equal and first
        pick_a = b.select(a_nan, b.or_(b.not_(b_nan), lower_index),
                          b.and_(b.not_(b_nan), b.or_(better, b.and_(tie, lower_index))))
      else:
        pick_a = b.or_(b.compare(av, bv, direction),
                       b.and_(b.compare(av, bv, "EQ"), lower_index))
      return b.tuple([b.select(pick_a, av, bv), b.select(pick_a, ai, bi)])
    name = f"arg{'max' if direction == 'GT' else 'min'}_{hlo.dtype_name(dtype)}"
    shapes = [hlo.Shape(dtype, ()), hlo.Shape(index_dtype, ())] * 2
    return ctx.cached_computation((name, np.dtype(index_dtype)),
                                  lambda: ctx.computation(name, shapes, body))

  def argminmax_rule(is_max):
    def rule(ctx, avals_in, avals_out, x, axes, index_dtype):
      b = ctx.builder
      aval = avals_in[0]
      axis, = axes
      idx = b.iota(hlo.Shape(index_dtype, aval.shape), axis)
      init_v = ctx.constant(_chooser_identity(is_max, aval.dtype), aval.dtype)
      init_i = ctx.constant(0, index_dtype)
      comp = argminmax_reducer(ctx, aval.dtype, index_dtype, "GT" if is_max else "LT")
      out = b.reduce([x, idx], [init_v, init_i], (axis,), comp)
      return b.get_tuple_element(out, 1)
    return rule

  register_lowering(argmax_p)(argminmax_rule(True))
  register_lowering(argmin_p)(argminmax_rule(False))

  @register_lowering(reduce_p)
  def _reduce_lower(ctx, avals_in, avals_out, *args, computation, jaxpr, dimensions):
    n = len(args) // 2
    b = ctx.builder
    scalars = [ShapedArray((), a.dtype) for a in avals_in[n:]]
    comp = ctx.lower_sub_jaxpr(jaxpr, "reduce_computation", scalars * 2, tuple_root=n > 1)
    out = b.reduce(list(args[:n]), list(args[n:]), tuple(dimensions), comp)
    return [out] if n == 1 else ctx.unpack(out)


_register_lowerings()

# ------------------------------------------------------------------------------------------------
# reduce_precision: round a float to a narrower format (exponent_bits, mantissa_bits) and back,
# as XLA does: round to nearest even on the mantissa, overflow to infinity, values below the
# narrow format's smallest normal flushed to (signed) zero, NaN kept.


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int):
  return reduce_precision_p.bind(operand, exponent_bits=int(exponent_bits),
                                 mantissa_bits=int(mantissa_bits))


def _reduce_precision_dtype(x, exponent_bits, mantissa_bits):
  check_dtypes("reduce_precision", [x], ("float",))
  if exponent_bits < 1:
    raise ValueError(f"reduce_precision: exponent_bits must be positive; got {exponent_bits}")
  if mantissa_bits < 0:
    raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                     f"{mantissa_bits}")
  return x.dtype


def _reduce_precision_impl(x, exponent_bits, mantissa_bits):
  dt = x.dtype
  fi = dtypes.finfo(dt)
  src_m, src_e = int(fi.nmant), int(fi.nexp)
  nbits = dt.itemsize * 8
  ut = np.dtype(f"u{dt.itemsize}")
  bits = np.ascontiguousarray(x).view(ut).astype(np.uint64)
  one = np.uint64(1)
  if mantissa_bits < src_m:
    shift = np.uint64(src_m - mantissa_bits)
    last = one << shift
    bias = (bits & last) >> shift
    bits = (bits + bias + ((last >> one) - one)) & ~(last - one)
  if exponent_bits < src_e:
    exp_mask = np.uint64(((1 << src_e) - 1) << src_m)
    sign = bits & np.uint64(1 << (nbits - 1))
    src_bias = (1 << (src_e - 1)) - 1
    red_bias = (1 << (exponent_bits - 1)) - 1
    exp = bits & exp_mask
    over = exp > np.uint64((src_bias + red_bias) << src_m)
    under = exp <= np.uint64((src_bias - red_bias) << src_m)
    bits = np.where(over, sign | exp_mask, np.where(under, sign, bits))
  bits = bits & np.uint64((1 << nbits) - 1)
  out = bits.astype(ut).view(dt).reshape(x.shape)
  return np.where(np.isnan(x), x, out)


reduce_precision_p = standard_primitive("reduce_precision", lambda x, **_: x.shape,
                                        _reduce_precision_dtype, lambda x, **_: x.weak_type)
reduce_precision_p.def_impl(_reduce_precision_impl)
ad.deflinear(reduce_precision_p, lambda ct, x, **params: [reduce_precision(ct, **params)])
batching.defvectorized(reduce_precision_p)


def _register_reduce_precision_lowering():
  # (HLO here has no reduce-precision opcode: the impl's integer arithmetic on the bits, in the
  # unsigned type of the float's width)
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(reduce_precision_p)
  def _lower(ctx, avals_in, avals_out, x, exponent_bits, mantissa_bits):
    b = ctx.builder
    aval = avals_in[0]
    dt = np.dtype(aval.dtype)
    fi = dtypes.finfo(dt)
    src_m, src_e = int(fi.nmant), int(fi.nexp)
    nbits = dt.itemsize * 8
    ut = np.dtype(f"u{dt.itemsize}")
    dims = aval.shape

    def c(v):
      return ctx.splat(np.array(v, np.uint64).astype(ut), ut, dims)
    bits = b.bitcast_convert(x, ut)
    if mantissa_bits < src_m:
      shift = src_m - mantissa_bits
      last = 1 << shift
      bias = b.shift_right_logical(b.and_(bits, c(last)), c(shift))
      bits = b.and_(b.add(b.add(bits, bias), c((last >> 1) - 1)), c(~(last - 1) % (1 << nbits)))
    if exponent_bits < src_e:
      exp_mask = ((1 << src_e) - 1) << src_m
      sign = b.and_(bits, c(1 << (nbits - 1)))
      src_bias = (1 << (src_e - 1)) - 1
      red_bias = (1 << (exponent_bits - 1)) - 1
      exp = b.and_(bits, c(exp_mask))
      over = b.compare(exp, c((src_bias + red_bias) << src_m), "GT")
      under = b.compare(exp, c((src_bias - red_bias) << src_m), "LE")
      bits = b.select(over, b.or_(sign, c(exp_mask)), b.select(under, sign, bits))
    out = b.bitcast_convert(bits, dt)
    return b.select(b.compare(x, x, "NE"), x, out)


_register_reduce_precision_lowering()
