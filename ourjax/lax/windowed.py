"""Reductions over sliding windows -- reduce_window_sum, reduce_window_max, reduce_window_min and
the general reduce_window with any computation -- each primitive followed by all of its rules,
and ``reduce_window``, the wrapper that picks one of them (pooling layers call it:
``reduce_window(x, 0., lax.add, ...)`` is an average pool's sum, ``reduce_window(x, -inf,
lax.max, ...)`` a max pool).

The windows are XLA's ReduceWindow: the operand is dilated by ``base_dilation`` (holes between
neighbours) and padded by ``padding`` ((low, high) per dimension, negative crops); a window of
``window_dimensions`` whose elements are ``window_dilation`` apart moves over it by
``window_strides``.  Each output element starts from the init value and combines the elements
its window covers in row-major window order (XLA leaves the order unspecified: a computation
should be associative and commutative); positions on padding or holes are skipped (this
matters only when the init value is not the computation's identity).  A string padding
('VALID', 'SAME', 'SAME_LOWER') is turned into pairs from the operand's shape and the dilated
window, as JAX does.

Derivatives:

* reduce_window_sum is linear; its transpose pads the cotangent (holes of ``stride - 1``, the
  edges of a convolution's input gradient) and sums windows again with the base dilation as
  the stride -- JAX's rule.
* reduce_window_max/min: the tangent of each output is the tangent of the element its window
  selects, gathered by position, so reverse mode is the gather's transpose (a scatter-add).
  The selection is JAX's gradient convention (its ``select_and_scatter_add``): padding and holes
  are candidates holding the identity (-inf for max), the window is scanned in row-major order
  and a later candidate replaces the current one unless ``current >= candidate`` (``<=`` for
  min): the first maximum wins a tie, and a maximum that is padding gives nothing.  (JAX's
  forward mode differs from its own gradient only on windows whose maximum is -inf; ourjax
  follows the gradient there too.)
* the general reduce_window: the JVP reduces windows of (primal, tangent) pairs with the JVP of
  the computation (as JAX); like JAX's, it has no transpose.
"""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes
from ourjax.backends import reference_ops as rops
from ourjax.core import Primitive, ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import standard_primitive

_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")

# ------------------------------------------------------------------------------------------------
# Shapes and parameters


def _dilate_shape(shape, dilation):
  if not all(d >= 1 for d in dilation):
    raise TypeError(f"All dilations must be positive, got {tuple(dilation)}.")
  return tuple(0 if n == 0 else 1 + r * (n - 1) for n, r in zip(shape, dilation))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None) -> tuple:
  """The output shape of a reduce_window (JAX's ``lax.reduce_window_shape_tuple``)."""
  if base_dilation is not None:
    operand_shape = _dilate_shape(operand_shape, base_dilation)
  if window_dilation is not None:
    window_dimensions = _dilate_shape(window_dimensions, window_dilation)
  padded = [n + lo + hi for n, (lo, hi) in zip(operand_shape, padding)]
  return tuple(0 if p < w else (p - w) // s + 1
               for p, w, s in zip(padded, window_dimensions, window_strides))


def _int_tuple(what, v):
  """A shape-like parameter as a tuple of ints (JAX's ``_check_shapelike`` messages)."""
  if not isinstance(v, (tuple, list, np.ndarray)):
    raise TypeError(f"reduce_window {what} must be of type tuple/list/ndarray, got {type(v)}.")
  if np.ndim(v) > 1:
    raise TypeError(f"reduce_window {what} must be 1-dimensional, got {np.ndim(v)}.")
  out = []
  for d in v:
    if isinstance(d, (float, np.floating)) and float(d).is_integer():
      d = int(d)
    try:
      out.append(operator.index(d))
    except TypeError:
      raise TypeError(f"reduce_window {what} must have every element be an integer type, got "
                      f"{tuple(map(type, v))}.") from None
  return tuple(out)


def _padding_pairs(padding):
  try:
    return tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
  except (TypeError, ValueError):
    raise TypeError(f"reduce_window padding must be 'VALID', 'SAME', 'SAME_LOWER' or a sequence "
                    f"of (low, high) integer pairs, got {padding!r}.") from None


def _canonical_window(shape, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation) -> dict:
  """The window parameters as tuples, with defaults filled in and string padding resolved."""
  wd = _int_tuple("window_dimensions", window_dimensions)
  ones = (1,) * len(wd)
  st = ones if window_strides is None else _int_tuple("window_strides", window_strides)
  bd = ones if base_dilation is None else _int_tuple("base_dilation", base_dilation)
  wdil = ones if window_dilation is None else _int_tuple("window_dilation", window_dilation)
  if isinstance(padding, str):
    from ourjax.lax.dot import padtype_to_pads
    # (the operand's own shape, not the base-dilated one, as in JAX)
    padding = padtype_to_pads(shape, _dilate_shape(wd, wdil) if len(wdil) == len(wd) else wd,
                              st if len(st) == len(wd) else ones, padding)
  return dict(window_dimensions=wd, window_strides=st, padding=_padding_pairs(padding),
              base_dilation=bd, window_dilation=wdil)


def _window_shape(x, *, window_dimensions, window_strides, padding, base_dilation,
                  window_dilation, **_):
  """The shape rule shared by every reduce_window primitive (JAX's checks and messages)."""
  for what, v in (("window_dimensions", window_dimensions), ("window_strides", window_strides)):
    if not all(d >= 1 for d in v):
      raise TypeError(f"reduce_window {what} must have every element be strictly positive, got "
                      f"{v}.")
  for what, v in (("base_dilation", base_dilation), ("window_dilation", window_dilation)):
    if not all(d >= 0 for d in v):
      raise TypeError(f"reduce_window {what} must have every element be nonnegative, got {v}.")
  if x.ndim != len(window_dimensions):
    raise TypeError(f"reduce_window got the wrong number of window_dimensions for operand: got "
                    f"operand shape {x.shape} with window_dimensions {window_dimensions}.")
  for what, v in (("window_strides", window_strides), ("base_dilation", base_dilation),
                  ("window_dilation", window_dilation)):
    if len(v) != len(window_dimensions):
      raise TypeError(f"reduce_window got inconsistent {what} and window_dimensions: got {what} "
                      f"{v} and window_dimensions {window_dimensions}.")
  if len(padding) != len(window_dimensions):
    raise ValueError(f"reduce_window got the wrong number of padding pairs for operand: got "
                     f"operand shape {x.shape} with padding {padding}.")
  return reduce_window_shape_tuple(x.shape, window_dimensions, window_strides, padding,
                                   base_dilation, window_dilation)


def _with_unit_dim(params, d):
  """The window parameters with a size-1, unpadded window dimension inserted at ``d``."""
  def ins(v, one):
    return v[:d] + (one,) + v[d:]
  return dict(window_dimensions=ins(params["window_dimensions"], 1),
              window_strides=ins(params["window_strides"], 1),
              padding=ins(params["padding"], (0, 0)),
              base_dilation=ins(params["base_dilation"], 1),
              window_dilation=ins(params["window_dilation"], 1))


# ------------------------------------------------------------------------------------------------
# The wrapper


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None,
                  padding="VALID", base_dilation=None, window_dilation=None):
  """Reduce every window of ``operand`` (an array or a pytree of same-shaped arrays) with the
  binary ``computation``, starting from ``init_value`` (scalars in the same pytree structure).

  A single operand whose computation is add, max or min (recognised by tracing it on scalars)
  with a concrete init value equal to that operation's identity binds reduce_window_sum / _max /
  _min, which have derivatives in both modes; anything else binds the general ``reduce_window``
  primitive, which carries the computation as a jaxpr (forward mode only, like JAX's)."""
  from ourjax import _pytree as tree_util
  from ourjax.lax.reductions import flatten_operands
  flat_ops, flat_inits, op_tree = flatten_operands(
      operand, init_value, "reduce_window must have at least one operand.", gap="  ")
  init_tree = op_tree
  if any(get_aval(v).shape != () for v in flat_inits):
    raise TypeError(f"reduce_window expected init_values to be scalars but init_values have "
                    f"shapes {[get_aval(v).shape for v in flat_inits]}.")
  params = _canonical_window(get_aval(flat_ops[0]).shape, window_dimensions, window_strides,
                             padding, base_dilation, window_dilation)
  if len(flat_ops) == 1:
    prim = _monoid_window_primitive(computation, flat_inits[0], init_tree)
    if prim is not None:
      return tree_util.tree_unflatten(op_tree, [prim.bind(flat_ops[0], **params)])
  closed = _window_jaxpr(computation, init_tree,
                         [get_aval(v).strip_weak_type() for v in flat_inits])
  outs = reduce_window_p.bind(*flat_ops, *flat_inits, jaxpr=closed, **params)
  return tree_util.tree_unflatten(op_tree, outs)


def _monoid_window_primitive(computation, init, tree):
  """reduce_window_sum_p / _max_p / _min_p when ``computation`` is add / max / min and ``init``
  is concretely its identity in the init value's own dtype (as JAX decides); else None."""
  from ourjax.lax import elementwise as ew
  from ourjax.lax.reductions import _identity_value, _monoid_primitive
  aval = get_aval(init)
  if aval.shape != () or not core.is_concrete(init):
    return None
  prim = {ew.add: ew.add_p, ew.max: ew.max_p, ew.min: ew.min_p}.get(computation) or \
      _monoid_primitive(computation, aval.dtype, tree)
  window_prim = {ew.add_p: reduce_window_sum_p, ew.max_p: reduce_window_max_p,
                 ew.min_p: reduce_window_min_p}.get(prim)
  if window_prim is None:
    return None
  from ourjax.array import to_numpy
  value = np.asarray(to_numpy(core.concrete_or_error(None, init)))
  return window_prim if bool(value == _identity_value(prim, aval.dtype)) else None


def _window_jaxpr(computation, tree, init_avals):
  """``computation`` traced on scalars of the init values' types: a closed jaxpr taking
  (accumulators..., elements...) and returning the new accumulators."""
  from ourjax.lax.reductions import trace_combiner
  closed, out_tree = trace_combiner(computation, tree, init_avals, "reduce_window_computation")
  if out_tree != tree:
    raise ValueError(f"reduce_window output must have the same tree structure as the operands "
                     f"{tree} vs. {out_tree}")
  for out, want in zip(closed.out_avals, init_avals):
    if out.shape != () or out.dtype != want.dtype:
      raise ValueError(f"reduce_window computation must return scalars of the init values' "
                       f"types {[a.str_short() for a in init_avals]}, got "
                       f"{[a.str_short() for a in closed.out_avals]}")
  return closed


# ------------------------------------------------------------------------------------------------
# reduce_window_sum, reduce_window_max, reduce_window_min


def _reduce_window_sum(operand, **params):
  return reduce_window_sum_p.bind(operand, **params)


def _sum_dtype(x, **_):
  if x.dtype == np.bool_ or not (dtypes.is_integer(x.dtype) or dtypes.is_inexact(x.dtype)):
    raise TypeError(f"operand to reduce_window_sum must have a number dtype, got "
                    f"{np.dtype(x.dtype).name}")
  return x.dtype


def _chooser_identity(is_max, dtype):
  from ourjax.lax.reductions import _chooser_identity as ident
  return np.asarray(ident(is_max, dtype)).astype(dtype)


def _window_impl(ufunc, init):
  """The NumPy implementation: the reference reduce-window with a ufunc; narrow floats are
  summed in float32 and rounded once (as ourjax's reductions do)."""
  def impl(x, **params):
    dt = x.dtype
    acc = np.dtype(np.float32) if ufunc is np.add and dtypes.is_float(dt) and dt.itemsize < 4 \
        else dt
    out = rops.reduce_window(x.astype(acc), init(acc), computation=ufunc, **params)
    return np.asarray(out).astype(dt)
  return impl


def _window_primitive(name, dtype_rule, ufunc, init):
  p = standard_primitive(name, _window_shape, dtype_rule, lambda x, **_: x.weak_type)
  p.def_impl(_window_impl(ufunc, init))

  def batch(vals, dims, **params):
    (x,), (d,) = vals, dims
    return p.bind(x, **_with_unit_dim(params, d)), d
  batching.batch_rules[p] = batch
  return p


reduce_window_sum_p = _window_primitive("reduce_window_sum", _sum_dtype, np.add,
                                        lambda dt: np.zeros((), dt))
reduce_window_max_p = _window_primitive("reduce_window_max", lambda x, **_: x.dtype,
                                        rops.maximum,
                                        lambda dt: _chooser_identity(True, dt))
reduce_window_min_p = _window_primitive("reduce_window_min", lambda x, **_: x.dtype,
                                        rops.minimum,
                                        lambda dt: _chooser_identity(False, dt))


def _reduce_window_sum_transpose(ct, x, *, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
  """Each input element received the sum's cotangent once per window covering it: holes of
  ``stride - 1`` between the cotangents put them back at their windows' origins (and edges as
  for a convolution's input gradient), then windows strided by the base dilation sum them."""
  from ourjax.lax.dot import _vjp_lhs_padding
  from ourjax.lax.elementwise import _zeros
  from ourjax.lax.structural import pad
  in_shape = x.aval.shape
  pads = _vjp_lhs_padding(in_shape, window_dimensions, window_strides, get_aval(ct).shape,
                          padding, base_dilation, window_dilation)
  config = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, window_strides)]
  padded = pad(ct, _zeros(np.zeros((), get_aval(ct).dtype)), config)
  ones = (1,) * len(in_shape)
  out = _reduce_window_sum(padded, window_dimensions=window_dimensions,
                           window_strides=base_dilation, padding=((0, 0),) * len(in_shape),
                           base_dilation=ones, window_dilation=window_dilation)
  assert get_aval(out).shape == in_shape, (get_aval(out).shape, in_shape)
  return [out]


ad.deflinear2(reduce_window_sum_p, _reduce_window_sum_transpose)


def _selected_positions(x, is_max, *, window_dimensions, window_strides, padding, base_dilation,
                        window_dilation):
  """For each window, the flat index into ``x`` of the element the gradient convention selects
  (see the module docstring), or -1 where it selects padding or a hole."""
  from ourjax.lax import elementwise as ew
  from ourjax.lax import structural as st
  aval = get_aval(x)
  n = int(np.prod(aval.shape, dtype=np.int64))
  pos = st.reshape(st.iota(np.int32, n), aval.shape)
  # padding and holes become explicit candidates: the identity at position -1
  config = [(lo, hi, d - 1) for (lo, hi), d in zip(padding, base_dilation)]
  values = st.pad(x, _chooser_identity(is_max, aval.dtype), config)
  pos = st.pad(pos, np.int32(-1), config)
  keep = ew.ge if is_max else ew.le

  def pick(acc, cand):   # the current choice stays unless the candidate beats it
    k = keep(acc[0], cand[0])
    return ew.select(k, acc[0], cand[0]), ew.select(k, acc[1], cand[1])
  # the scan starts from NaN, which keeps nothing: the window's first candidate replaces it
  start = np.array(np.nan, aval.dtype) if dtypes.is_inexact(aval.dtype) else \
      _chooser_identity(is_max, aval.dtype)
  ones = (1,) * aval.ndim
  _, chosen = reduce_window((values, pos), (start, np.int32(-1)), pick, window_dimensions,
                            window_strides, ((0, 0),) * aval.ndim, ones, window_dilation)
  return chosen


def _chooser_jvp(is_max):
  def jvp(t, x, **params):
    from ourjax.lax import elementwise as ew
    from ourjax.lax import slicing as sl
    from ourjax.lax import structural as st
    t_aval = get_aval(t)
    out_shape = _window_shape(get_aval(x), **params)
    n = int(np.prod(t_aval.shape, dtype=np.int64))
    if n == 0 or 0 in out_shape:
      return st.full(out_shape, 0, t_aval.dtype)
    chosen = _selected_positions(ew.stop_gradient(x), is_max, **params)
    dn = sl.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                   start_index_map=(0,))
    # position -1 (padding, a hole) is out of bounds: it gathers the fill value 0
    return sl.gather(st.reshape(t, (n,)), st.reshape(chosen, out_shape + (1,)), dn, (1,),
                     mode="fill", fill_value=0)
  return jvp


ad.defjvp(reduce_window_max_p, _chooser_jvp(True))
ad.defjvp(reduce_window_min_p, _chooser_jvp(False))

# ------------------------------------------------------------------------------------------------
# The general reduce_window: operands..., init values... -> results...; ``jaxpr`` maps
# (accumulators..., elements...) to the new accumulators, all scalars.

reduce_window_p = Primitive("reduce_window")
reduce_window_p.multiple_results = True


def _reduce_window_abstract_eval(*avals, jaxpr, **params):
  n = len(avals) // 2
  ops, inits = avals[:n], avals[n:]
  if any(o.dtype != i.dtype for o, i in zip(ops, inits)):
    raise TypeError(f"reduce_window got inconsistent dtypes for operands and init_values: got "
                    f"operand dtypes {[o.dtype for o in ops]} and init_value dtypes "
                    f"{[i.dtype for i in inits]}.")
  if any(i.shape != () for i in inits):
    raise TypeError(f"reduce_window expected init_values to be scalars but init_values have "
                    f"shapes {[i.shape for i in inits]}.")
  if any(o.shape != ops[0].shape for o in ops):
    raise ValueError(f"reduce_window operands must all have the same shape, got "
                     f"{[o.shape for o in ops]}.")
  shape = _window_shape(ops[0], **params)
  return [ShapedArray(shape, o.dtype) for o in ops]


reduce_window_p.def_abstract_eval(_reduce_window_abstract_eval)


def _reduce_window_impl(*args, jaxpr, **params):
  from ourjax.api import vmap
  from ourjax.array import to_numpy
  n = len(args) // 2
  ops, inits = list(args[:n]), list(args[n:])
  dts = [i.dtype for i in inits]

  def combine(accs, xs):   # arrays of the output's shape; the jaxpr is vmapped over them
    shape = np.shape(accs[0])
    flat = [np.reshape(np.asarray(a, dt), (-1,)) for a, dt in zip(list(accs) + list(xs), dts * 2)]
    if flat[0].shape[0] == 0:
      return tuple(np.zeros(shape, dt) for dt in dts)
    outs = vmap(lambda *ys: core.closed_call(jaxpr, *ys))(*flat)
    return tuple(np.reshape(to_numpy(o), shape) for o in outs)
  return list(rops.reduce_window(ops, inits, computation=rops.tuple_combine(combine),
                                 **params))


reduce_window_p.def_impl(_reduce_window_impl)


def _reduce_window_pp(params):
  # printed like JAX's: the computation's constants, then the jaxpr and the window
  return sorted([(k, v) for k, v in params.items()] + [("consts", tuple(params["jaxpr"].consts))],
                key=lambda kv: kv[0])


core.pp_param_rules[reduce_window_p] = _reduce_window_pp


def _reduce_window_batch(vals, dims, jaxpr, axis_size, **params):
  n = len(vals) // 2
  if any(d is not None for d in dims[n:]):
    raise NotImplementedError("reduce_window batching is not implemented for initial values")
  ops = [batching.bdim_at_front(v, d, axis_size) for v, d in zip(vals[:n], dims[:n])]
  outs = reduce_window_p.bind(*ops, *vals[n:], jaxpr=jaxpr, **_with_unit_dim(params, 0))
  return outs, [0] * n


batching.register_rule_with_axis_size(reduce_window_p, _reduce_window_batch)


def _reduce_window_jvp(primals, tangents, jaxpr, **params):
  """Windows of (primal, tangent) pairs reduced with the computation's JVP.  Operands of integer
  or boolean type have no tangent (their tangents are float0)."""
  n = len(primals) // 2
  ops, inits = list(primals[:n]), list(primals[n:])
  if any(type(t) is not ad.Zero for t in tangents[n:]):
    raise TypeError("reduce_window jvp does not support non-zero init_value_tangent.")
  if all(type(t) is ad.Zero for t in tangents[:n]):
    outs = reduce_window_p.bind(*primals, jaxpr=jaxpr, **params)
    return outs, [ad.Zero.from_primal_value(o) for o in outs]
  nz = [dtypes.is_inexact(get_aval(o).dtype) for o in ops]
  jvp_closed, out_nz = ad.jvp_jaxpr_nonzeros(jaxpr, nz * 2, instantiate=nz)
  assert out_nz == nz, (out_nz, nz)
  k = sum(nz)

  def computation(acc, elem):   # (primals..., tangents...) each
    return core.closed_call(jvp_closed, *acc[:n], *elem[:n], *acc[n:], *elem[n:])
  tans = [ad.instantiate_zeros(t) for t, z in zip(tangents[:n], nz) if z]
  tan_inits = [np.zeros((), get_aval(o).dtype) for o, z in zip(ops, nz) if z]
  res = reduce_window(ops + tans, inits + tan_inits, computation, params["window_dimensions"],
                      params["window_strides"], params["padding"], params["base_dilation"],
                      params["window_dilation"])
  tangents_out = iter(res[n:n + k])
  return res[:n], [next(tangents_out) if z else ad.Zero.from_primal_value(o)
                   for o, z in zip(res[:n], nz)]


ad.jvp_rules[reduce_window_p] = _reduce_window_jvp


# ------------------------------------------------------------------------------------------------
# Lowerings: one HLO reduce-window each.  The sum of narrow floats is taken in float32 and
# rounded once, like the impl; max/min start from the identity.


def _register_lowerings():
  from ourjax.lowering.from_jaxpr import is_narrow_float, register_lowering

  def window_attrs(params):
    return [params[k] for k in _PARAMS]

  def monoid_rule(opcode, init):
    def rule(ctx, avals_in, avals_out, x, **params):
      b = ctx.builder
      dt = np.dtype(avals_in[0].dtype)
      acc = np.dtype(np.float32) if opcode == "add" and is_narrow_float(dt) else dt
      if acc != dt:
        x = b.convert(x, acc)
      out = b.reduce_window([x], [ctx.constant(init(acc), acc)],
                            ctx.scalar_computation(opcode, acc), *window_attrs(params))
      return b.convert(out, dt) if acc != dt else out
    return rule

  register_lowering(reduce_window_sum_p)(monoid_rule("add", lambda dt: np.zeros((), dt)))
  register_lowering(reduce_window_max_p)(
      monoid_rule("maximum", lambda dt: _chooser_identity(True, dt)))
  register_lowering(reduce_window_min_p)(
      monoid_rule("minimum", lambda dt: _chooser_identity(False, dt)))

  @register_lowering(reduce_window_p)
  def _generic(ctx, avals_in, avals_out, *args, jaxpr, **params):
    n = len(args) // 2
    scalars = [ShapedArray((), a.dtype) for a in avals_in[n:]]
    comp = ctx.lower_sub_jaxpr(jaxpr, "reduce_window_computation", scalars * 2,
                               tuple_root=n > 1)
    out = ctx.builder.reduce_window(list(args[:n]), list(args[n:]), comp, *window_attrs(params))
    return [out] if n == 1 else ctx.unpack(out)


_register_lowerings()
