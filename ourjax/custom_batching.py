"""``ourjax.custom_batching``: functions with a custom vmap rule, as ``jax.custom_batching``.

``custom_vmap(fun)`` behaves as ``fun`` except under ``vmap``, where the rule registered with
``def_vmap`` runs instead: ``rule(axis_size, in_batched, *args) -> (out, out_batched)``, with
the batched arguments carrying the batch along axis 0, ``in_batched`` a pytree of bools like
``args`` and ``out_batched`` one like ``out``.  ``sequential_vmap(f)`` is the rule that maps
``f`` over the batch one example at a time (``lax.map``).

Under ``jvp`` the result is again a custom_vmap function: its primal is the JVP of ``fun``, its
rule the JVP of the rule (primal and tangent leaves batched together).  Reverse mode
linearises that JVP; where part of the call is known and part is not (partial evaluation, as
in ``grad``), the function's own body stands in for the call, as JAX does.  Under ``jit`` the
call is its body, inlined."""
from __future__ import annotations

import functools
from typing import Callable

from ourjax import core
from ourjax import custom_derivatives as _cd
from ourjax.core import ClosedJaxpr, Primitive, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import (flatten_fun_nokwargs, tree_flatten, tree_map, tree_structure,
                            tree_unflatten)

__all__ = ["custom_vmap", "sequential_vmap"]

custom_vmap_call_p = Primitive("custom_vmap_call")
custom_vmap_call_p.multiple_results = True


def _fun_name(f):
  return getattr(f, "__name__", type(f).__name__)


class custom_vmap:
  """A function with a custom batching rule (see the module docstring)."""

  def __init__(self, fun: Callable):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.vmap_rule = None

  def def_vmap(self, vmap_rule: Callable) -> Callable:
    """Register ``vmap_rule(axis_size, in_batched, *args) -> (out, out_batched)``."""
    self.vmap_rule = vmap_rule
    return vmap_rule

  def __call__(self, *args, **kwargs):
    if kwargs:
      raise TypeError(f"custom_vmap function {_fun_name(self.fun)} takes positional arguments "
                      f"only; got keyword arguments {sorted(kwargs)}")
    if self.vmap_rule is None:
      raise AttributeError(f"No batching rule defined for custom_vmap function "
                           f"{_fun_name(self.fun)} using def_vmap.")
    leaves, in_tree = tree_flatten(args)
    from ourjax.api import _check_arg
    for x in leaves:
      _check_arg(x, f"custom_vmap({_fun_name(self.fun)})")
    return _bind(self.fun, self.vmap_rule, in_tree, leaves, _fun_name(self.fun))


def _bind(fun, rule, in_tree, leaves, name):
  flat_fun, out_tree_cell = flatten_fun_nokwargs(fun, in_tree)
  closed = pe.trace_to_jaxpr(flat_fun, [get_aval(x) for x in leaves], name)
  jaxpr = pe.convert_constvars_jaxpr(closed.jaxpr)
  consts = list(closed.consts)
  outs = custom_vmap_call_p.bind(
      *consts, *leaves, call_jaxpr=ClosedJaxpr(jaxpr, []), rule=rule, in_tree=in_tree,
      out_tree=out_tree_cell[0], num_consts=len(consts), name=name)
  return tree_unflatten(out_tree_cell[0], outs)


@custom_vmap_call_p.def_abstract_eval
def _abstract_eval(*avals, call_jaxpr, **_):
  return list(call_jaxpr.out_avals)


@custom_vmap_call_p.def_custom_impl
def _impl(*args, call_jaxpr, **_):
  return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


def _call_rule(rule, axis_size, in_batched, args, out_tree, name):
  """Run the rule; returns (flat outputs, flat out_batched) checked against ``out_tree``."""
  out = rule(axis_size, in_batched, *args)
  if not (isinstance(out, tuple) and len(out) == 2):
    raise ValueError(f"the vmap rule of custom_vmap function {name} must return a pair "
                     f"(outputs, out_batched); got {type(out).__name__}")
  out, out_batched = out
  out_leaves, tree = tree_flatten(out)
  if tree != out_tree:
    raise ValueError(f"structure of output value and output batching specification returned "
                     f"by custom vmap rule ({name}) do not match: the function returns "
                     f"{out_tree}, the rule {tree}")
  try:
    batched = tree_flatten(tree_map(lambda b, _: bool(b), out_batched, out))[0]
  except (ValueError, TypeError):
    raise ValueError(f"structure of output value and output batching specification returned "
                     f"by custom vmap rule ({name}) do not match") from None
  for x, b in zip(out_leaves, batched):
    shape = get_aval(x).shape
    if b and (not shape or shape[0] != axis_size):
      raise ValueError(f"the vmap rule of custom_vmap function {name} says an output is "
                       f"batched, but its shape {shape} does not lead with the axis size "
                       f"{axis_size}")
  return out_leaves, batched


def _batch(vals, dims, *, call_jaxpr, rule, in_tree, out_tree, num_consts, name, axis_size):
  if any(d is not None for d in dims[:num_consts]):
    raise NotImplementedError(
        f"vmap of custom_vmap function {name} with respect to a value it closes over is not "
        "supported; pass the value as an argument")
  vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
  args = tree_unflatten(in_tree, vals[num_consts:])
  in_batched = tree_unflatten(in_tree, [d is not None for d in dims[num_consts:]])
  if isinstance(in_batched, tuple):
    in_batched = list(in_batched)          # (JAX hands the rule a list, one entry per argument)
  outs, batched = _call_rule(rule, axis_size, in_batched, args, out_tree, name)
  return outs, [0 if b else None for b in batched]


batching.register_rule_with_axis_size(custom_vmap_call_p, _batch)


def _jvp(primals, tangents, *, call_jaxpr, rule, in_tree, out_tree, num_consts, name):
  consts, args = list(primals[:num_consts]), list(primals[num_consts:])
  if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
    # differentiating a closed-over value: the body alone (its rule cannot see the value)
    from ourjax.api import jvp
    return jvp(lambda *xs: core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *xs),
               tuple(primals), tuple(ad.instantiate_zeros(t) for t in tangents))
  arg_tangents = [ad.instantiate_zeros(t) for t in tangents[num_consts:]]
  from ourjax.api import jvp as api_jvp

  def body(ps, ts):
    return api_jvp(lambda *xs: core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts,
                                               *consts, *xs), tuple(ps), tuple(ts))

  def jvp_rule(axis_size, in_batched, ps, ts):
    # a leaf batched in its primal or its tangent is batched in both
    ps_b, ts_b = in_batched
    both = [a or b for a, b in zip(ps_b, ts_b)]
    ps = [p if b0 or not b else batching.broadcast(p, axis_size, 0)
          for p, b0, b in zip(ps, ps_b, both)]
    ts = [t if b0 or not b else batching.broadcast(t, axis_size, 0)
          for t, b0, b in zip(ts, ts_b, both)]
    batched_args = tree_unflatten(in_tree, both)
    out_batched_cell: list = []

    def primal_rule(*xs):
      outs, batched = _call_rule(rule, axis_size, batched_args,
                                 tree_unflatten(in_tree, list(xs)), out_tree, name)
      out_batched_cell[:] = [batched]
      return outs

    p_out, t_out = api_jvp(primal_rule, tuple(ps), tuple(ts))
    batched = out_batched_cell[0]
    return (list(p_out), list(t_out)), (batched, batched)

  return _bind_pair(body, jvp_rule, args, arg_tangents, name)


def _bind_pair(body, jvp_rule, args, tangents, name):
  """Bind the custom_vmap call of the JVP: arguments (primals list, tangents list), results
  (primal outputs, tangent outputs) as lists."""
  k = len(args)

  def fun(ps, ts):
    p_out, t_out = body(ps, ts)
    return list(p_out), list(t_out)
  in_tree = tree_structure(([0] * k, [0] * k))
  return _bind(fun, jvp_rule, in_tree, list(args) + list(tangents), f"jvp({name})")


ad.jvp_rules[custom_vmap_call_p] = _jvp


# (as a custom_jvp/vjp call's: the primal jaxpr's known parts run now, the rest is staged;
# transposed through the primal jaxpr)
pe.partial_eval_rules[custom_vmap_call_p] = _cd._custom_call_partial_eval
pe.partial_eval_jaxpr_rules[custom_vmap_call_p] = _cd._custom_call_partial_eval_jaxpr
ad.transpose_rules[custom_vmap_call_p] = _cd._custom_call_transpose


def _register_lowering():
  import numpy as np
  from ourjax.lowering import from_jaxpr

  @from_jaxpr.register_lowering(custom_vmap_call_p)
  def _inline(ctx, avals_in, avals_out, *args, call_jaxpr, **_):
    consts = [ctx.constant(np.asarray(c), v.aval.dtype)
              for v, c in zip(call_jaxpr.jaxpr.constvars, call_jaxpr.consts)]
    return from_jaxpr.lower_eqns(ctx, call_jaxpr.jaxpr, consts, args)


_register_lowering()


def sequential_vmap(f: Callable) -> custom_vmap:
  """``f`` with a vmap rule that maps it over the batch one example at a time (``lax.map``),
  for functions without a batched form."""
  f = custom_vmap(f)

  @f.def_vmap
  def rule(axis_size, in_batched, *args):
    from ourjax import lax
    args_flat, tree = tree_flatten(args)
    batched_flat = tree_flatten(in_batched)[0]
    mapped = [a for a, b in zip(args_flat, batched_flat) if b]

    def one(xs):
      it = iter(xs)
      full = [next(it) if b else a for a, b in zip(args_flat, batched_flat)]
      return f.fun(*tree_unflatten(tree, full))

    out = lax.map(one, mapped)
    return out, tree_map(lambda _: True, out)
  return f
