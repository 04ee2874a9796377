"""User-defined derivative rules: ``custom_jvp`` and ``custom_vjp``.

Both decorate a Python function and bind a primitive whose parameters hold the function as a
jaxpr plus the user's rules as Python callables, so every transformation sees one equation:

* ``custom_jvp_call``: ``call_jaxpr`` (the primal function, its closed-over constants passed as
  the first ``num_consts`` operands) and ``jvp``, a flat callable
  ``jvp(*operands, *tangents) -> primals_out + tangents_out`` that runs the user's rule.  Only
  inexact (float/complex) arguments and outputs have tangents in this flat protocol; integer
  ones have float0 tangents, which the wrappers create and drop.
  Eagerly and under jit the jaxpr runs; under ``jvp`` the rule runs instead (and linearize, grad
  and vjp are built on jvp, so the rule's output is what gets transposed); under ``vmap`` the
  jaxpr and the rule are batched together.
* ``custom_vjp_call``: ``call_jaxpr`` as above, ``fwd`` (flat: ``fwd(*args) -> outs + residuals``)
  and ``bwd`` (flat: ``bwd(res_tree, *residuals, *cts_out) -> cts_in``).  Its JVP rule runs fwd
  on the primals and binds ``custom_lin`` on the residuals and the input tangents: a linear
  primitive with no forward-mode rule of its own (``jvp`` of a custom_vjp function is an error, as
  in JAX) whose transpose calls bwd.  So ``grad`` = linearize (fwd now, custom_lin staged into
  the linear jaxpr) + transpose (bwd).

Python callables in params are fine here: jaxprs are never hashed or serialised, and the
rules are only called by the interpreters in this package.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import ClosedJaxpr, Primitive, get_aval
from ourjax.errors import UnexpectedTracerError
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import (flatten_fun_nokwargs, register_pytree_node, tree_flatten,
                            tree_flatten_with_path, tree_map, tree_structure, tree_unflatten,
                            keystr)

__all__ = ["custom_jvp", "custom_vjp", "custom_gradient", "closure_convert", "linear_call",
           "SymbolicZero", "CustomVJPPrimal",
           "CustomJVPException", "CustomVJPException",
           "custom_jvp_call_p", "custom_vjp_call_p", "custom_lin_p"]


# ------------------------------------------------------------------------------------------------
# Helpers


def _fun_name(f) -> str:
  return getattr(f, "__name__", None) or type(f).__name__


def _inexact(aval) -> bool:
  return dtypes.is_inexact(aval.dtype)


def _resolve_kwargs(fun, args, kwargs):
  """Positional arguments for ``fun(*args, **kwargs)`` (defaults filled in), as JAX does."""
  try:
    sig = inspect.signature(fun)
  except (TypeError, ValueError):
    if kwargs:
      raise TypeError("keyword arguments could not be resolved to positions") from None
    return tuple(args)
  try:
    ba = sig.bind(*args, **kwargs)
  except TypeError as e:
    raise TypeError(str(e)) from None
  ba.apply_defaults()
  if ba.kwargs:
    raise TypeError("keyword arguments could not be resolved to positions")
  return ba.args


def _is_eager(leaves) -> bool:
  """True when binding now would run eagerly (no transformation is tracing)."""
  return isinstance(core.find_top_trace(leaves), core.EvalTrace)


def _trace_closed(flat_fun, avals, name):
  """Trace ``flat_fun`` and closure-convert: returns (jaxpr without consts, consts).  Constants
  (possibly tracers of enclosing transformations) become leading operands, so no tracer is
  ever stored inside a parameter."""
  closed = pe.trace_to_jaxpr(flat_fun, avals, name)
  jaxpr = pe.convert_constvars_jaxpr(closed.jaxpr)
  return ClosedJaxpr(jaxpr, []), list(closed.consts)


def _stop_gradient_leaves(x):
  from ourjax import lax
  def stop(v):
    if isinstance(v, (core.Tracer,)) and _inexact(get_aval(v)):
      return lax.stop_gradient(v)
    return v
  return tree_map(stop, x)


def _float0_zeros(aval):
  return np.zeros(aval.shape, dtypes.float0)


def _type_str(aval) -> str:
  return aval.str_short()


def _vmap_out0(f, in_dims, axis_size, args, name):
  """Run the flat function ``f`` over a batch (arguments batched at ``in_dims``) when the
  number of its outputs is only known after the call: every output comes back batched along
  axis 0."""
  vals, dims = batching.trace_batched(f, in_dims, batching.AxisData(None, axis_size), args,
                                      name)
  return [batching.matchaxis(axis_size, d, 0, v) for v, d in zip(vals, dims)]


def _move_bdims_front(vals, dims):
  vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
  return vals, [0 if d is not None else None for d in dims]


class CustomJVPException(Exception):
  def __init__(self):
    super().__init__(
        "Detected differentiation of a custom_jvp function with respect to a closed-over "
        "value. That isn't supported because the custom JVP rule only specifies how to "
        "differentiate the custom_jvp function with respect to explicit input parameters. Try "
        "passing the closed-over value into the custom_jvp function as an argument, and "
        "adapting the custom_jvp rule.")


class CustomVJPException(Exception):
  def __init__(self):
    super().__init__(
        "Detected differentiation of a custom_vjp function with respect to a closed-over "
        "value. That isn't supported because the custom VJP rule only specifies how to "
        "differentiate the custom_vjp function with respect to explicit input parameters. Try "
        "passing the closed-over value into the custom_vjp function as an argument, and "
        "adapting the custom_vjp fwd and bwd rules.")


# (No DCE rules: the rule callables return every output, so a call is kept whole.)


class SymbolicZero:
  """A zero (co)tangent not materialised: what a ``symbolic_zeros=True`` rule receives in place
  of an all-zeros array.  Attributes (``shape``, ``dtype``, ...) are those of its ``aval``."""

  def __init__(self, aval):
    self.aval = aval

  def __repr__(self):
    return "SymbolicZero"

  def __getattr__(self, name):
    if name == "aval":
      raise AttributeError(name)
    return getattr(self.aval, name)

  @staticmethod
  def from_primal_value(val) -> "SymbolicZero":
    return SymbolicZero(ad.tangent_aval(get_aval(val)))

  def instantiate(self):
    from ourjax import lax
    if self.aval.dtype == dtypes.float0:
      return np.zeros(self.aval.shape, dtypes.float0)
    return lax.full(self.aval.shape, 0, self.aval.dtype)


@dataclasses.dataclass(slots=True)
class CustomVJPPrimal:
  """A primal argument of a ``custom_vjp`` fwd rule defined with ``symbolic_zeros=True``: its
  value and whether it is perturbed (has a nonzero tangent)."""
  value: Any
  perturbed: bool


# which arguments of the custom_vjp being differentiated are perturbed, and which output
# cotangents of the custom_lin being transposed are symbolic zeros: set around the calls of the
# flat fwd/bwd (which may run under vmap wrappers) for rules with symbolic_zeros=True
_PERTURBED: list = []
_ZERO_CTS: list = []
_ZERO_TANS: list = []      # (the same for the tangents a custom_jvp rule is called with)


# ------------------------------------------------------------------------------------------------
# custom_jvp


custom_jvp_call_p = Primitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True


@custom_jvp_call_p.def_abstract_eval
def _custom_jvp_call_abstract_eval(*avals, call_jaxpr, jvp, num_consts, symbolic_zeros):
  return list(call_jaxpr.out_avals)


@custom_jvp_call_p.def_custom_impl
def _custom_jvp_call_impl(*args, call_jaxpr, jvp, num_consts, symbolic_zeros):
  return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


def _custom_jvp_call_jvp(primals, tangents, *, call_jaxpr, jvp, num_consts, symbolic_zeros):
  # Only the arguments' tangents reach the rule: differentiating with respect to a closed-over
  # value (a constant operand) is an error, as in JAX.
  if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
    raise CustomJVPException()
  args = primals[num_consts:]
  arg_tangents = [t for t, p in zip(tangents[num_consts:], args) if _inexact(get_aval(p))]
  tans = [ad.instantiate_zeros(t) for t in arg_tangents]
  _ZERO_TANS.append([type(t) is ad.Zero for t in arg_tangents] if symbolic_zeros else None)
  try:
    outs = jvp(*primals, *tans)
  finally:
    _ZERO_TANS.pop()
  n = len(call_jaxpr.out_avals)
  primals_out, touts = outs[:n], iter(outs[n:])
  tangents_out = [next(touts) if _inexact(a) else ad.Zero(ad.tangent_aval(a))
                  for a in call_jaxpr.out_avals]
  return primals_out, tangents_out


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_call_jvp


def _custom_jvp_call_batch(vals, dims, *, call_jaxpr, jvp, num_consts, symbolic_zeros,
                           axis_size):
  vals, dims = _move_bdims_front(vals, dims)
  new_call, _ = batching.vmap_jaxpr(call_jaxpr, axis_size, dims)
  arg_avals = call_jaxpr.in_avals[num_consts:]
  tan_dims = [d for d, a in zip(dims[num_consts:], arg_avals) if _inexact(a)]

  def batched_jvp(*xs):
    return _vmap_out0(jvp, list(dims) + tan_dims, axis_size, xs, "vmap(custom_jvp)")

  outs = custom_jvp_call_p.bind(*vals, call_jaxpr=new_call, jvp=batched_jvp,
                                num_consts=num_consts, symbolic_zeros=symbolic_zeros)
  return outs, [0] * len(outs)


batching.register_rule_with_axis_size(custom_jvp_call_p, _custom_jvp_call_batch)


class custom_jvp:
  """Set up a JAX-transformable function for a custom JVP rule definition.

  ``@custom_jvp`` on ``f``, then ``@f.defjvp`` on ``f_jvp(primals, tangents) -> (primal_out,
  tangent_out)`` (or ``f.defjvps(*per_argument_rules)``).  With ``nondiff_argnums`` those
  arguments are passed to the rule first: ``f_jvp(*nondiff_args, primals, tangents)``."""

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = (),
               symbolic_zeros: bool = False):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(nondiff_argnums)
    self.jvp = None
    self.symbolic_zeros = symbolic_zeros

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
    """Define the rule: ``jvp(primals, tangents) -> (primal_out, tangent_out)``, where primals
    and tangents are tuples with one entry per (differentiable) argument.  Returns ``jvp``.
    With ``symbolic_zeros`` zero tangents reach the rule as ``SymbolicZero`` objects (and the
    rule may return them)."""
    self.jvp = jvp
    self.symbolic_zeros = bool(symbolic_zeros)
    return jvp

  def defjvps(self, *jvps: Callable | None):
    """One rule per argument: ``jvps[i](tangent_i, primal_out, *primals) -> tangent_out
    contribution`` (None for arguments with no contribution); the contributions are summed."""
    if self.nondiff_argnums:
      raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

    def jvp(primals, tangents):
      primal_out = self(*primals)
      zeros = tree_map(lambda x: ad.zeros_like_aval(ad.tangent_aval(get_aval(x))), primal_out)
      tangent_out = zeros
      for rule, t in zip(jvps, tangents):
        if rule is None:
          continue
        contrib = rule(t, primal_out, *primals)
        tangent_out = tree_map(lambda a, b: a + b, tangent_out, contrib)
      return primal_out, tangent_out

    self.defjvp(jvp)

  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.jvp is None:
      raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
    args = _resolve_kwargs(self.fun, args, kwargs)
    nondiff = set(i % len(args) if args else i for i in self.nondiff_argnums)
    for i in nondiff:
      if i >= len(args):
        raise TypeError(f"custom_jvp function {name} has nondiff_argnums "
                        f"{self.nondiff_argnums} but was called with {len(args)} arguments")
    static_args = [_stop_gradient_leaves(args[i]) for i in sorted(nondiff)]
    dyn_idx = [i for i in range(len(args)) if i not in nondiff]
    dyn_args = tuple(args[i] for i in dyn_idx)

    def call_fun(*dyn):
      full, it = [], iter(dyn)
      for i in range(len(args)):
        full.append(static_args[sorted(nondiff).index(i)] if i in nondiff else next(it))
      return self.fun(*full)

    leaves, in_tree = tree_flatten(dyn_args)
    from ourjax.api import _check_arg
    for x in leaves:
      _check_arg(x, f"custom_jvp({name})")
    if _is_eager(leaves):
      return call_fun(*dyn_args)

    flat_fun, out_tree_cell = flatten_fun_nokwargs(call_fun, in_tree)

    in_avals = [get_aval(x) for x in leaves]
    call_jaxpr, consts = _trace_closed(flat_fun, in_avals, name)
    out_tree = out_tree_cell[0]
    out_avals = call_jaxpr.out_avals
    jvp_flat = _make_flat_jvp(self.jvp, name, static_args, in_tree, in_avals, out_tree,
                              out_avals, len(consts))
    outs = custom_jvp_call_p.bind(*consts, *leaves, call_jaxpr=call_jaxpr, jvp=jvp_flat,
                                  num_consts=len(consts), symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


def _make_flat_jvp(rule, name, static_args, in_tree, in_avals, out_tree, out_avals,
                   num_consts):
  rule_name = _fun_name(rule)

  def jvp_flat(*xs):
    primals = xs[num_consts:num_consts + len(in_avals)]
    tans = iter(xs[num_consts + len(in_avals):])
    tangents = [next(tans) if _inexact(a) else _float0_zeros(a) for a in in_avals]
    py_primals = tree_unflatten(in_tree, list(primals))
    py_tangents = tree_unflatten(in_tree, tangents)
    zero_tans = _ZERO_TANS[-1] if _ZERO_TANS else None
    if zero_tans is not None:
      zero = iter(zero_tans)
      py_tangents = _as_symbolic_zeros(py_tangents, [not _inexact(a) or bool(next(zero))
                                                     for a in in_avals])
    res = rule(*static_args, tuple(py_primals), tuple(py_tangents))
    if not isinstance(res, (list, tuple)) or len(res) != 2:
      raise TypeError(f"Custom JVP rule {rule_name} for function {name} must produce a pair "
                      f"(list or tuple of length two) representing primal and tangent outputs, "
                      f"but got {res}.")
    p_out, t_out = res
    if zero_tans is not None:   # SymbolicZero tangents out: zeros of the primal output's type
      t_out = tree_map(lambda t: t.instantiate() if isinstance(t, SymbolicZero) else t, t_out,
                       is_leaf=lambda t: isinstance(t, SymbolicZero))
    p_leaves, p_tree = tree_flatten(p_out)
    t_leaves, t_tree = tree_flatten(t_out)
    if p_tree != t_tree:
      raise TypeError(f"Custom JVP rule {rule_name} for function {name} must produce primal and "
                      f"tangent outputs with equal container (pytree) structures, but got "
                      f"{p_tree} and {t_tree} respectively.")
    if p_tree != out_tree:
      raise TypeError(f"Custom JVP rule {rule_name} for function {name} must produce a primal "
                      f"output with the same container (pytree) structure as the output of the "
                      f"custom_jvp-decorated function {name}, but the rule produced {p_tree} "
                      f"while the function produced {out_tree}.")
    from ourjax import lax
    primals_out, tangents_out = [], []
    for p, t, a in zip(p_leaves, t_leaves, out_avals):
      pa, ta = get_aval(p), get_aval(t)
      if pa.shape != a.shape or pa.dtype != a.dtype:
        if pa.shape != a.shape or not pa.weak_type:
          raise TypeError(f"Custom JVP rule {rule_name} for function {name} must produce primal "
                          f"outputs with the same shapes and dtypes as the function {name}: "
                          f"expected {_type_str(a)} but got {_type_str(pa)}.")
        p = lax.convert_element_type(p, a.dtype)
      primals_out.append(p)
      if not _inexact(a):
        continue
      expected = ad.tangent_aval(a)
      if ta.shape != expected.shape:
        raise ValueError(f"Custom JVP rule {rule_name} for function {name} must produce primal "
                         f"and tangent outputs with corresponding shapes, but got primal shape "
                         f"{a.shape} and tangent shape {ta.shape}.")
      if ta.dtype != expected.dtype:
        if not ta.weak_type:
          raise TypeError(f"Custom JVP rule {rule_name} for function {name} must produce primal "
                          f"and tangent outputs with corresponding dtypes: expected tangent "
                          f"dtype {expected.dtype.name} (the tangent type of the primal output "
                          f"{_type_str(a)}), but got {ta.dtype.name}.")
        t = lax.convert_element_type(t, expected.dtype)
      tangents_out.append(t)
    return primals_out + tangents_out

  jvp_flat.__name__ = f"jvp({rule_name})"
  return jvp_flat


# ------------------------------------------------------------------------------------------------
# custom_vjp


custom_vjp_call_p = Primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True


@custom_vjp_call_p.def_abstract_eval
def _custom_vjp_call_abstract_eval(*avals, call_jaxpr, fwd, bwd, num_consts, symbolic_zeros):
  return list(call_jaxpr.out_avals)


@custom_vjp_call_p.def_custom_impl
def _custom_vjp_call_impl(*args, call_jaxpr, fwd, bwd, num_consts, symbolic_zeros):
  return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


def _custom_vjp_call_jvp(primals, tangents, *, call_jaxpr, fwd, bwd, num_consts,
                         symbolic_zeros):
  if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
    raise CustomVJPException()
  args = primals[num_consts:]
  arg_tangents = tangents[num_consts:]
  out_avals = call_jaxpr.out_avals
  if all(type(t) is ad.Zero for t in arg_tangents):
    return (core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *primals),
            [ad.Zero(ad.tangent_aval(a)) for a in out_avals])
  _PERTURBED.append([type(t) is not ad.Zero for t in arg_tangents])
  try:
    outs = fwd(*args)
  finally:
    _PERTURBED.pop()
  res_tree = fwd.res_tree[0]
  n = len(out_avals)
  primals_out, res = outs[:n], outs[n:]
  tans = [ad.instantiate_zeros(t) for t, p in zip(arg_tangents, args) if _inexact(get_aval(p))]
  lin_outs = custom_lin_p.bind(
      *res, *tans, num_res=len(res), bwd=bwd, res_tree=res_tree,
      out_avals=tuple(ad.tangent_aval(a) for a in out_avals if _inexact(a)),
      symbolic_zeros=symbolic_zeros)
  lin_outs = iter(lin_outs)
  return primals_out, [next(lin_outs) if _inexact(a) else ad.Zero(ad.tangent_aval(a))
                       for a in out_avals]


ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_call_jvp


class _BatchedFwd:
  """``fwd`` mapped over a batch: outputs and residuals all batched along axis 0."""

  def __init__(self, fwd, in_dims, axis_size):
    self.fwd, self.in_dims, self.axis_size = fwd, in_dims, axis_size
    self.res_tree = fwd.res_tree       # the same cell: set when the inner fwd runs

  def __call__(self, *args):
    return _vmap_out0(self.fwd, self.in_dims, self.axis_size, args, "vmap(custom_vjp fwd)")


def _custom_vjp_call_batch(vals, dims, *, call_jaxpr, fwd, bwd, num_consts, symbolic_zeros,
                           axis_size):
  # Differentiable arguments are made batched (broadcast if need be): then every cotangent bwd
  # returns is per-example, and the broadcast's transpose sums the unbatched ones.
  vals, dims = _move_bdims_front(vals, dims)
  vals, dims = list(vals), list(dims)
  for i in range(num_consts, len(vals)):
    if dims[i] is None and _inexact(get_aval(vals[i])):
      vals[i], dims[i] = batching.broadcast(vals[i], axis_size, 0), 0
  new_call, _ = batching.vmap_jaxpr(call_jaxpr, axis_size, dims)
  batched_fwd = _BatchedFwd(fwd, dims[num_consts:], axis_size)

  def batched_bwd(res_tree, *xs):
    return _vmap_out0(functools.partial(bwd, res_tree), [0] * len(xs), axis_size, xs,
                      "vmap(custom_vjp bwd)")

  outs = custom_vjp_call_p.bind(*vals, call_jaxpr=new_call, fwd=batched_fwd, bwd=batched_bwd,
                                num_consts=num_consts, symbolic_zeros=symbolic_zeros)
  return outs, [0] * len(outs)


batching.register_rule_with_axis_size(custom_vjp_call_p, _custom_vjp_call_batch)


# custom_lin: the linear stand-in for a custom_vjp function's tangent map.  Operands are the
# residuals then the tangents of the inexact arguments; results are the tangents of the inexact
# outputs.  It is only ever transposed.
custom_lin_p = Primitive("custom_lin")
custom_lin_p.multiple_results = True


@custom_lin_p.def_abstract_eval
def _custom_lin_abstract_eval(*avals, num_res, bwd, res_tree, out_avals, symbolic_zeros):
  return list(out_avals)


def _custom_lin_no_jvp(*args, **params):
  raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


custom_lin_p.def_custom_impl(_custom_lin_no_jvp)
ad.jvp_rules[custom_lin_p] = lambda primals, tangents, **params: _custom_lin_no_jvp()


def _custom_lin_transpose(cts, *args, num_res, bwd, res_tree, out_avals, symbolic_zeros):
  res = args[:num_res]
  _ZERO_CTS.append([type(c) is ad.Zero for c in cts] if symbolic_zeros else None)
  try:
    cts_in = bwd(res_tree, *res, *[ad.instantiate_zeros(c) for c in cts])
  finally:
    _ZERO_CTS.pop()
  return [None] * num_res + list(cts_in)


ad.transpose_rules[custom_lin_p] = _custom_lin_transpose


def _custom_lin_batch(vals, dims, *, num_res, bwd, res_tree, out_avals, symbolic_zeros,
                      axis_size):
  # (reached only when custom_lin itself is vmapped, e.g. vmap of a linearized function)
  vals = [batching.bdim_at_front(v, d, axis_size) for v, d in zip(vals, dims)]

  def batched_bwd(res_tree, *xs):
    return _vmap_out0(functools.partial(bwd, res_tree), [0] * len(xs), axis_size, xs,
                      "vmap(custom_vjp bwd)")

  new_avals = tuple(a.update(shape=(axis_size,) + a.shape) for a in out_avals)
  outs = custom_lin_p.bind(*vals, num_res=num_res, bwd=batched_bwd, res_tree=res_tree,
                           out_avals=new_avals, symbolic_zeros=symbolic_zeros)
  return outs, [0] * len(outs)


batching.register_rule_with_axis_size(custom_lin_p, _custom_lin_batch)


class custom_vjp:
  """Set up a JAX-transformable function for a custom VJP rule definition.

  ``@custom_vjp`` on ``f``, then ``f.defvjp(f_fwd, f_bwd)`` where ``f_fwd(*args) -> (out,
  residuals)`` and ``f_bwd(residuals, cotangent_out) -> tuple of cotangents, one per argument``
  (``None`` for a zero cotangent).  With ``nondiff_argnums`` those arguments come first in
  ``f_bwd(*nondiff_args, residuals, cotangent_out)`` and get no cotangent."""

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = tuple(nondiff_argnums)
    self.fwd = None
    self.bwd = None
    self.symbolic_zeros = False

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
             optimize_remat: bool = False) -> None:
    self.fwd, self.bwd = fwd, bwd
    self.symbolic_zeros = bool(symbolic_zeros)

  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.fwd is None or self.bwd is None:
      raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
    args = _resolve_kwargs(self.fun, args, kwargs)
    nondiff = sorted(set(i % len(args) if args else i for i in self.nondiff_argnums))
    for i in nondiff:
      if i >= len(args):
        raise TypeError(f"custom_vjp function {name} has nondiff_argnums "
                        f"{self.nondiff_argnums} but was called with {len(args)} arguments")
      for leaf in tree_flatten(args[i])[0]:
        if isinstance(leaf, core.Tracer):
          raise UnexpectedTracerError(
              "Found a JAX Tracer object passed as an argument to a custom_vjp function in a "
              "position indicated by nondiff_argnums as non-differentiable. Tracers cannot be "
              "passed as non-differentiable arguments to custom_vjp functions; instead, "
              "nondiff_argnums should only be used for arguments that can't be or contain JAX "
              "tracers, e.g. function-valued arguments. In particular, array-valued arguments "
              "should typically not be indicated as nondiff_argnums.")
    static_args = [args[i] for i in nondiff]
    dyn_idx = [i for i in range(len(args)) if i not in nondiff]
    dyn_args = tuple(args[i] for i in dyn_idx)

    def with_static(f):
      def g(*dyn):
        full, it, st = [], iter(dyn), iter(static_args)
        for i in range(len(args)):
          full.append(next(st) if i in nondiff else next(it))
        return f(*full)
      return g

    leaves, in_tree = tree_flatten(dyn_args)
    from ourjax.api import _check_arg
    for x in leaves:
      _check_arg(x, f"custom_vjp({name})")
    if _is_eager(leaves):
      return with_static(self.fun)(*dyn_args)

    flat_fun, out_tree_cell = flatten_fun_nokwargs(with_static(self.fun), in_tree)

    in_avals = [get_aval(x) for x in leaves]
    call_jaxpr, consts = _trace_closed(flat_fun, in_avals, name)
    out_tree = out_tree_cell[0]
    fwd = _make_flat_fwd(with_static(self.fwd), _fun_name(self.fwd), name, in_tree, out_tree,
                         call_jaxpr.out_avals)
    fwd.symbolic_zeros = self.symbolic_zeros
    bwd = _make_flat_bwd(self.bwd, _fun_name(self.bwd), name, static_args, in_tree, in_avals,
                         out_tree, call_jaxpr.out_avals, self.symbolic_zeros)
    outs = custom_vjp_call_p.bind(*consts, *leaves, call_jaxpr=call_jaxpr, fwd=fwd, bwd=bwd,
                                  num_consts=len(consts), symbolic_zeros=self.symbolic_zeros)
    return tree_unflatten(out_tree, outs)


class _FlatFwd:
  """The user's fwd on flat arguments: returns outs + residual leaves; the residuals' tree is
  left in ``res_tree[0]`` for the rule that called it."""

  def __init__(self, fwd, fwd_name, name, in_tree, out_tree, out_avals):
    self.fwd, self.fwd_name, self.name = fwd, fwd_name, name
    self.in_tree, self.out_tree, self.out_avals = in_tree, out_tree, out_avals
    self.res_tree: list = []
    self.symbolic_zeros = False
    self.__name__ = f"fwd({fwd_name})"

  def __call__(self, *xs):
    args = tree_unflatten(self.in_tree, list(xs))
    if self.symbolic_zeros:
      args = _as_vjp_primals(args, _PERTURBED[-1] if _PERTURBED else [True] * len(xs))
    res = self.fwd(*args)
    if not isinstance(res, (list, tuple)) or len(res) != 2:
      raise TypeError(f"Custom VJP fwd rule {self.fwd_name} for function {self.name} must "
                      f"produce a pair (list or tuple of length two) where the first element "
                      f"represents the primal output (equal to the output of the "
                      f"custom_vjp-decorated function {self.name}) and the second element "
                      f"represents residuals (i.e. values stored from the forward pass for use "
                      f"on the backward pass), but instead the fwd rule output had type "
                      f"{type(res).__name__}.")
    out, residuals = res
    out_leaves, out_tree = tree_flatten(out)
    if out_tree != self.out_tree:
      raise TypeError(f"Custom VJP fwd rule {self.fwd_name} for function {self.name} must "
                      f"produce a pair (list or tuple of length two) where the first element "
                      f"represents the primal output (equal in value to the output of the "
                      f"custom_vjp-decorated function {self.name}, and in particular of the "
                      f"same container/pytree structure), but instead the fwd rule output's "
                      f"first element had container/pytree structure:\n    {out_tree}\nwhile "
                      f"the custom_vjp-decorated function {self.name} had output "
                      f"container/pytree structure:\n    {self.out_tree}.")
    for o, a in zip(out_leaves, self.out_avals):
      oa = get_aval(o)
      if oa.shape != a.shape or (oa.dtype != a.dtype and not oa.weak_type):
        raise TypeError(f"Custom VJP fwd rule {self.fwd_name} for function {self.name} must "
                        f"produce primal outputs with the same shapes and dtypes as the "
                        f"custom_vjp-decorated function: expected {_type_str(a)} but got "
                        f"{_type_str(oa)}.")
    from ourjax import lax
    out_leaves = [lax.convert_element_type(o, a.dtype) if get_aval(o).dtype != a.dtype else o
                  for o, a in zip(out_leaves, self.out_avals)]
    res_leaves, res_tree = tree_flatten(residuals)
    from ourjax.api import _check_arg
    for r in res_leaves:
      _check_arg(r, f"custom_vjp fwd rule {self.fwd_name} residual")
    self.res_tree[:] = [res_tree]
    return out_leaves + res_leaves


def _as_vjp_primals(args, perturbed):
  """``args`` with each leaf as the user sees leaves (a key array is one) wrapped in a
  ``CustomVJPPrimal``, perturbed when any of its flat leaves is."""
  from ourjax import tree_util as _tu
  leaves, tree = _tu.tree_flatten(args)
  flags, out = iter(perturbed), []
  for leaf in leaves:
    n = len(tree_flatten(leaf)[0])
    out.append(CustomVJPPrimal(leaf, any([bool(next(flags)) for _ in range(n)])))
  return tree_unflatten(tree, out)


def _as_symbolic_zeros(cts, is_zero):
  """``cts`` with each leaf as the user sees leaves whose flat leaves are all zero replaced by a
  ``SymbolicZero`` (a key array's cotangent is a float0 one of the key array's shape)."""
  from ourjax import tree_util as _tu
  from ourjax._keys import PRNGKeyArray
  leaves, tree = _tu.tree_flatten(cts)
  flags, out = iter(is_zero), []
  for leaf in leaves:
    n = len(tree_flatten(leaf)[0])
    if all([next(flags) for _ in range(n)]):
      aval = (core.ShapedArray(leaf.shape, dtypes.float0) if type(leaf) is PRNGKeyArray
              else ad.tangent_aval(get_aval(leaf)))
      leaf = SymbolicZero(aval)
    out.append(leaf)
  return tree_unflatten(tree, out)


def _make_flat_fwd(fwd, fwd_name, name, in_tree, out_tree, out_avals):
  return _FlatFwd(fwd, fwd_name, name, in_tree, out_tree, out_avals)


def _make_flat_bwd(bwd, bwd_name, name, static_args, in_tree, in_avals, out_tree, out_avals,
                   symbolic_zeros=False):
  """``bwd_flat(res_tree, *residuals, *cts of inexact outputs) -> cts of inexact inputs``.
  With ``symbolic_zeros`` the zero cotangents reach ``bwd`` as ``SymbolicZero`` objects."""
  def bwd_flat(res_tree, *xs):
    from ourjax import lax
    n_res = res_tree.num_leaves
    res = tree_unflatten(res_tree, list(xs[:n_res]))
    cts = iter(xs[n_res:])
    ct_leaves = [next(cts) if _inexact(a) else _float0_zeros(a) for a in out_avals]
    py_ct = tree_unflatten(out_tree, ct_leaves)
    if symbolic_zeros:
      zero = iter(_ZERO_CTS[-1] if _ZERO_CTS and _ZERO_CTS[-1] is not None else
                  [False] * len(ct_leaves))
      py_ct = _as_symbolic_zeros(py_ct, [not _inexact(a) or bool(next(zero))
                                         for a in out_avals])
    cts_in = bwd(*static_args, res, py_ct)
    # None stands for a zero cotangent of a whole subtree (as in JAX); otherwise the output must
    # have the structure of the args tuple.
    dummy = tree_unflatten(in_tree, list(range(in_tree.num_leaves)))
    flat: list = [None] * in_tree.num_leaves
    ok = isinstance(cts_in, tuple) and len(cts_in) == len(dummy)
    if ok:
      try:
        c_leaves, c_tree = tree_flatten(
            cts_in, is_leaf=lambda x: x is None or isinstance(x, SymbolicZero))
        for c, sub in zip(c_leaves, c_tree.flatten_up_to(dummy)):
          if c is None or isinstance(c, SymbolicZero):
            continue
          if not isinstance(sub, int):
            raise ValueError
          flat[sub] = c
      except (ValueError, TypeError):
        ok = False
    if not ok:
      raise TypeError(
          "Custom VJP bwd rule must produce an output with the same container (pytree) "
          "structure as the args tuple of the primal function, and in particular must produce "
          "a tuple of length equal to the number of arguments to the primal function, but got "
          f"bwd output structure {tree_structure(cts_in)} for primal input structure "
          f"{in_tree}.")
    paths = [keystr(p) for p, _ in tree_flatten_with_path(dummy)[0]]
    out = []
    for path, a, c in zip(paths, in_avals, flat):
      if not _inexact(a):
        continue
      ta = ad.tangent_aval(a)
      if c is None:
        out.append(lax.full(a.shape, 0, ta.dtype))
        continue
      from ourjax.api import _check_arg
      _check_arg(c, f"custom_vjp bwd rule {bwd_name}")
      ca = get_aval(c)
      # (as JAX, a cotangent of another dtype is accepted for an inexact input of its shape:
      # bwd may give bfloat16 for a float8 input; here it is cast to the input's tangent type)
      if ca.shape != a.shape:
        raise ValueError(
            f"Custom VJP bwd rule must produce an output with the same shape/dtypes as the args "
            f"tuple of the primal function {name}, but at output{path} the bwd rule produced an "
            f"output of shape/dtype {_type_str(ca)} corresponding to an input of shape/dtype "
            f"{_type_str(a)}.")
      if ca.dtype != ta.dtype:
        c = lax.convert_element_type(c, ta.dtype)
      out.append(c)
    return out

  bwd_flat.__name__ = f"bwd({bwd_name})"
  return bwd_flat


# ------------------------------------------------------------------------------------------------
# closure_convert


def closure_convert(fun: Callable, *example_args):
  """Hoist the array constants ``fun`` closes over into explicit arguments.

  Returns ``(converted, consts)`` where ``converted(*args, *consts)`` computes ``fun(*args)``;
  useful to pass a closure to a ``custom_vjp`` function (whose bwd can then return cotangents
  for the constants)."""
  leaves, in_tree = tree_flatten(example_args)
  flat_fun, out_tree_cell = flatten_fun_nokwargs(fun, in_tree)

  closed = pe.trace_to_jaxpr(flat_fun, [get_aval(x) for x in leaves], _fun_name(fun))
  out_tree = out_tree_cell[0]
  # inexact array constants become arguments; the others stay inside
  hoist = [isinstance(c, core.Tracer) or _inexact(get_aval(c)) for c in closed.consts]
  jaxpr = closed.jaxpr
  kept_vars = [v for v, h in zip(jaxpr.constvars, hoist) if not h]
  kept_vals = [c for c, h in zip(closed.consts, hoist) if not h]
  hoisted_vars = [v for v, h in zip(jaxpr.constvars, hoist) if h]
  hoisted_vals = [c for c, h in zip(closed.consts, hoist) if h]
  new = core.Jaxpr(kept_vars, list(jaxpr.invars) + hoisted_vars, jaxpr.eqns, jaxpr.outvars)
  n = len(leaves)

  def converted(*args_and_consts):
    args, consts = args_and_consts[:len(example_args)], args_and_consts[len(example_args):]
    xs, tree = tree_flatten(tuple(args))
    if tree != in_tree or len(consts) != len(hoisted_vals):
      raise TypeError(f"closure_convert'd function of {_fun_name(fun)} expects arguments like "
                      f"{in_tree} followed by {len(hoisted_vals)} constants")
    outs = core.eval_jaxpr(new, kept_vals, *xs, *consts)
    return tree_unflatten(out_tree, outs)

  converted.__name__ = _fun_name(fun)
  assert n == len(jaxpr.invars)
  return converted, hoisted_vals


class _GradRule:
  """A custom_gradient rule carried as a custom_vjp residual: the closure-converted rule is
  static (pytree aux data), the array constants it closes over are the residual arrays."""

  def __init__(self, rule, consts):
    self.rule, self.consts = rule, consts


register_pytree_node(_GradRule, lambda r: (tuple(r.consts), r.rule),
                     lambda rule, consts: _GradRule(rule, list(consts)))


def custom_gradient(fun: Callable) -> Callable:
  """``fun(*args)`` returns ``(out, rule)`` where ``rule(ct_out)`` gives the cotangents of the
  arguments (a tuple, or a single value when there is one argument); the result is a function
  whose VJP is ``rule`` (a ``custom_vjp`` underneath), as ``jax.custom_gradient``."""
  @custom_vjp
  def wrapped(*args, **kwargs):
    out, _ = fun(*args, **kwargs)
    return out

  def fwd(*args, **kwargs):
    out, rule = fun(*args, **kwargs)
    example = tree_map(lambda x: _ct_example(get_aval(x)), out)
    converted, consts = closure_convert(rule, example)
    return out, _GradRule(converted, consts)

  def bwd(res, ct):
    cts_in = res.rule(ct, *res.consts)
    if not isinstance(cts_in, tuple):
      cts_in = (cts_in,)
    return cts_in

  wrapped.defvjp(fwd, bwd)
  try:
    functools.update_wrapper(wrapped, fun)
  except Exception:
    pass
  return wrapped


def _ct_example(aval):
  ta = ad.tangent_aval(aval)
  return np.zeros(ta.shape, ta.dtype)


def linear_call(*args, **kwargs):
  raise NotImplementedError("ourjax.custom_derivatives.linear_call is not implemented")


# ------------------------------------------------------------------------------------------------
# Partial evaluation and transposition.  Under a JVP the rules above replace the calls, so a
# call with a mix of known and unknown inputs, or a call to transpose, only arises when a
# function is staged without differentiating it (linear_transpose, or a user's partial
# evaluation).  Then, as in JAX, the custom rule is dropped and the primal function stands in.


def _custom_call_partial_eval(trace, tracers, *, call_jaxpr, **_):
  # evaluate the primal jaxpr on the partial-evaluation tracers: known parts run now, unknown
  # parts are staged equation by equation
  return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *tracers)


def _custom_call_partial_eval_jaxpr(eqn, in_unknowns):
  # the offline split, as a call of the primal jaxpr (pjit's rule does the work)
  from ourjax.interpreters.pjit import pjit_p
  as_call = eqn._replace(primitive=pjit_p, params=dict(
      jaxpr=eqn.params["call_jaxpr"], name=eqn.primitive.name, backend=None))
  return pe.partial_eval_jaxpr_rules[pjit_p](as_call, in_unknowns)


def _custom_call_transpose(cts, *args, call_jaxpr, **_):
  cts_in = iter(ad.backward_pass(call_jaxpr.jaxpr, call_jaxpr.consts, list(args), list(cts)))
  return [next(cts_in) if ad.is_undefined_primal(a) else None for a in args]


for _p in (custom_jvp_call_p, custom_vjp_call_p):
  pe.partial_eval_rules[_p] = _custom_call_partial_eval
  pe.partial_eval_jaxpr_rules[_p] = _custom_call_partial_eval_jaxpr
  ad.transpose_rules[_p] = _custom_call_transpose
del _p


# ------------------------------------------------------------------------------------------------
# Lowering: under jit both calls are their primal jaxpr, inlined.


def _register_lowering():
  from ourjax.lowering import from_jaxpr

  def inline(ctx, avals_in, avals_out, *args, call_jaxpr, **_):
    consts = [ctx.constant(np.asarray(c), v.aval.dtype)
              for v, c in zip(call_jaxpr.jaxpr.constvars, call_jaxpr.consts)]
    return from_jaxpr.lower_eqns(ctx, call_jaxpr.jaxpr, consts, args)

  from_jaxpr.register_lowering(custom_jvp_call_p)(inline)
  from_jaxpr.register_lowering(custom_vjp_call_p)(inline)


_register_lowering()


def _register_custom_lin_lowering():
  # custom_lin only ever reaches a compiled program through forward mode of a custom_vjp
  # function, which is an error (as JAX says at this point too)
  from ourjax.lowering import from_jaxpr
  from_jaxpr.register_lowering(custom_lin_p)(
      lambda ctx, avals_in, avals_out, *args, **params: _custom_lin_no_jvp())


_register_custom_lin_lowering()
