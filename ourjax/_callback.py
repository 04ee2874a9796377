"""Host callbacks: Python functions called with array values from inside traced code.

Three primitives, each with its rules:

* ``debug_callback_p`` (``debug.callback``) and ``debug_print_p`` (``debug.print``): no
  results, an effect.
* ``pure_callback_p`` (``pure_callback``): results of declared shapes and dtypes, no effect
  (unused results let it be removed; JAX may also call it more than once or not at all).
* ``io_callback_p`` (``experimental.io_callback``): results and an effect.

An equation whose primitive is in ``core.effectful_primitives`` (or whose sub-jaxprs hold one)
is never dropped for having unused results.  The compiler has no host-call instruction: a
jitted function whose jaxpr has callbacks runs through the jaxpr evaluator (each primitive's
own implementation, ``backends.compile_jaxpr``), so callbacks happen in program order, once
per execution, with concrete values.
"""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes
from ourjax.core import Primitive, ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax._pytree import tree_flatten, tree_unflatten


class _Fn:
  """A callback with the pytree structure of its arguments; compared by identity (so that
  jaxpr parameters stay hashable) and printed by the function's name."""
  __slots__ = ("fn", "in_tree", "static", "out_tree")

  def __init__(self, fn, in_tree, static, out_tree=None):
    self.fn, self.in_tree, self.static, self.out_tree = fn, in_tree, static, out_tree

  def call(self, dynamic):
    it = iter(dynamic)
    leaves = [next(it) if s is _DYNAMIC else s for s in self.static]
    args, kwargs = tree_unflatten(self.in_tree, leaves)
    return self.fn(*args, **kwargs)

  def __repr__(self):
    return getattr(self.fn, "__name__", type(self.fn).__name__)


class _Dynamic:
  def __repr__(self):
    return "<dynamic>"


_DYNAMIC = _Dynamic()


def _is_array_like(x) -> bool:
  from ourjax.array import Array
  return isinstance(x, (core.Tracer, Array, np.ndarray, np.generic, bool, int, float, complex))


def _split(fn, args, kwargs):
  """(the callback wrapper, the array leaves passed as operands)."""
  leaves, tree = tree_flatten((args, kwargs))
  dynamic = [x for x in leaves if _is_array_like(x)]
  static = [_DYNAMIC if _is_array_like(x) else x for x in leaves]
  return _Fn(fn, tree, static), dynamic


def _as_arrays(vals):
  from ourjax.array import Array
  from ourjax import numpy as jnp
  return [v if isinstance(v, Array) else jnp.asarray(v) for v in vals]


def _results(out, fn: _Fn, result_avals, what):
  """The callback's results as Arrays of the declared shapes and dtypes."""
  from ourjax.array import Array
  leaves, tree = tree_flatten(out)
  if fn.out_tree is not None and tree != fn.out_tree:
    raise TypeError(f"{what}: the callback returned a value of structure {tree}, but "
                    f"result_shape_dtypes has structure {fn.out_tree}")
  res = []
  for i, (x, a) in enumerate(zip(leaves, result_avals)):
    x = np.asarray(x)
    if x.shape != a.shape:
      raise RuntimeError(f"{what}: incorrect output shape for return value #{i}: expected "
                         f"{a.shape}, got {x.shape}")
    res.append(Array._from_result(x.astype(a.dtype, copy=False), a))
  return res


def _sequential(prim, vals, dims, axis_size, params):
  """Calls the primitive once per batch entry, stacking any results."""
  from ourjax import numpy as jnp
  from ourjax.lax.slicing import index_in_dim
  outs_per = []
  for i in range(axis_size):
    args = [v if d is batching.not_mapped else index_in_dim(v, i, d, keepdims=False)
            for v, d in zip(vals, dims)]
    outs_per.append(prim.bind(*args, **params))
  if not prim_results(prim, params):
    return [], []
  outs = [jnp.stack(list(col)) for col in zip(*outs_per)]
  return outs, [0] * len(outs)


def prim_results(prim, params):
  return params.get("result_avals", ())


# ------------------------------------------------------------------------------------------------
# debug_callback_p


def _debug_primitive(name: str) -> Primitive:
  """A callback primitive with no results, an effect: ``debug_callback`` (``debug.callback``)
  and ``debug_print`` (``debug.print``, as JAX names it in jaxprs) share these rules."""
  p = Primitive(name)
  p.multiple_results = True
  core.effectful_primitives.add(p)
  p.def_abstract_eval(lambda *avals, callback, ordered: [])

  def impl(*args, callback, ordered):
    callback.call(_as_arrays(args))
    return []
  p.def_custom_impl(impl)

  def jvp(primals, tangents, *, callback, ordered):
    p.bind(*primals, callback=callback, ordered=ordered)
    return [], []
  ad.jvp_rules[p] = jvp
  ad.transpose_rules[p] = lambda cts, *args, **params: [None] * len(args)

  def batch(vals, dims, *, axis_size, **params):
    return _sequential(p, vals, dims, axis_size, params)
  batching.register_rule_with_axis_size(p, batch)
  return p


debug_callback_p = _debug_primitive("debug_callback")
debug_print_p = _debug_primitive("debug_print")


# ------------------------------------------------------------------------------------------------
# pure_callback_p and io_callback_p


def _result_abstract_eval(*avals, callback, result_avals, **_):
  return list(result_avals)


pure_callback_p = Primitive("pure_callback")
pure_callback_p.multiple_results = True
pure_callback_p.def_abstract_eval(_result_abstract_eval)


def _pure_impl(*args, callback, result_avals, vmap_method):
  return _results(callback.call(_as_arrays(args)), callback, result_avals, "pure_callback")


pure_callback_p.def_custom_impl(_pure_impl)


def _pure_jvp(primals, tangents, **params):
  raise ValueError("Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use "
                   "callbacks while taking gradients.")


ad.jvp_rules[pure_callback_p] = _pure_jvp


def _pure_batch(vals, dims, *, axis_size, callback, result_avals, vmap_method):
  from ourjax import numpy as jnp
  params = dict(callback=callback, result_avals=result_avals, vmap_method=vmap_method)
  if vmap_method in ("sequential", "sequential_unrolled"):
    return _sequential(pure_callback_p, vals, dims, axis_size, params)
  if vmap_method not in ("expand_dims", "broadcast_all", "legacy_vectorized"):
    raise NotImplementedError(
        "vmap is only supported for the pure_callback primitive when vmap_method is one of "
        "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
        f"'legacy_vectorized'. Got vmap_method={vmap_method!r}.")
  args = []
  for v, d in zip(vals, dims):
    if d is not batching.not_mapped:
      args.append(batching.moveaxis(v, d, 0))
    elif vmap_method == "expand_dims":
      args.append(jnp.expand_dims(v, 0))
    elif vmap_method == "broadcast_all":
      args.append(jnp.broadcast_to(v, (axis_size,) + get_aval(v).shape))
    else:
      args.append(v)
  new_avals = tuple(ShapedArray((axis_size,) + a.shape, a.dtype) for a in result_avals)
  outs = pure_callback_p.bind(*args, callback=callback, result_avals=new_avals,
                              vmap_method=vmap_method)
  return outs, [0] * len(outs)


batching.register_rule_with_axis_size(pure_callback_p, _pure_batch)


io_callback_p = Primitive("io_callback")
io_callback_p.multiple_results = True
core.effectful_primitives.add(io_callback_p)
io_callback_p.def_abstract_eval(_result_abstract_eval)


def _io_impl(*args, callback, result_avals, ordered):
  return _results(callback.call(_as_arrays(args)), callback, result_avals, "io_callback")


io_callback_p.def_custom_impl(_io_impl)


def _io_jvp(primals, tangents, **params):
  raise ValueError("IO callbacks do not support JVP.")


ad.jvp_rules[io_callback_p] = _io_jvp


def _io_batch(vals, dims, *, axis_size, callback, result_avals, ordered):
  if ordered:
    raise ValueError("Cannot `vmap` ordered IO callback.")
  return _sequential(io_callback_p, vals, dims, axis_size,
                     dict(callback=callback, result_avals=result_avals, ordered=ordered))


batching.register_rule_with_axis_size(io_callback_p, _io_batch)


# ------------------------------------------------------------------------------------------------
# Public functions


def _result_avals(result_shape_dtypes):
  leaves, tree = tree_flatten(result_shape_dtypes)
  avals = []
  for x in leaves:
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
      raise TypeError(f"result_shape_dtypes leaves must have .shape and .dtype, got {x!r}")
    avals.append(ShapedArray(tuple(x.shape), dtypes.canonicalize_dtype(np.dtype(x.dtype))))
  return tuple(avals), tree


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  **kwargs):
  """Calls the Python function ``callback(*args, **kwargs)`` on concrete arrays, also from
  inside ``jit``/``vmap``/loops; it must return arrays of the shapes and dtypes of
  ``result_shape_dtypes`` (a pytree of ``ShapeDtypeStruct``-likes) and have no side effects
  that matter (its call may be dropped when its results are unused).  ``vmap_method`` says
  how ``vmap`` calls it: ``'sequential'`` once per element, ``'expand_dims'`` once with
  unbatched arguments given a leading 1, ``'broadcast_all'`` once with every argument
  broadcast, ``'legacy_vectorized'`` once with unbatched arguments as they are."""
  fn, dynamic = _split(callback, args, kwargs)
  avals, out_tree = _result_avals(result_shape_dtypes)
  fn.out_tree = out_tree
  outs = pure_callback_p.bind(*dynamic, callback=fn, result_avals=avals,
                              vmap_method=vmap_method)
  return tree_unflatten(out_tree, outs)


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered: bool = False,
                **kwargs):
  """Like ``pure_callback`` for a callback with side effects: it is called once per execution
  and never dropped; ``ordered=True`` keeps calls in program order (they always are here) and
  forbids ``vmap``."""
  fn, dynamic = _split(callback, args, kwargs)
  avals, out_tree = _result_avals(result_shape_dtypes)
  fn.out_tree = out_tree
  outs = io_callback_p.bind(*dynamic, callback=fn, result_avals=avals, ordered=ordered)
  return tree_unflatten(out_tree, outs)


def debug_callback(callback, *args, ordered: bool = False, _primitive=None, **kwargs):
  """Calls ``callback(*args, **kwargs)`` for its side effect with concrete arrays, from eager
  code and from inside jit, grad (forward values) and vmap (once per element)."""
  fn, dynamic = _split(callback, args, kwargs)
  (_primitive or debug_callback_p).bind(*dynamic, callback=fn, ordered=ordered)


def jaxpr_has_effects(jaxpr) -> bool:
  """True if ``jaxpr`` (or a jaxpr in an equation's parameters) has an effectful equation."""
  return core.jaxpr_has_effects(jaxpr)


core.host_callback_primitives.update((debug_callback_p, debug_print_p, pure_callback_p,
                                     io_callback_p))
