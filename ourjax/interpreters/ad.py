"""Automatic differentiation: forward mode (JVP), linearize, and transposition (reverse mode).

* ``JVPTrace`` carries (primal, tangent) pairs.  A tangent may be the symbolic ``Zero(aval)``, so
  values that do not depend on the inputs being differentiated cost nothing.
* ``linearize`` runs the JVP under ``PartialEvalTrace`` with the primals known and the tangents
  unknown: the primal computation happens now and the tangent computation is recorded as a
  jaxpr that is linear in the tangents.
* ``backward_pass`` transposes such a linear jaxpr, using each primitive's transpose rule; the
  cotangents of a value read several times are summed with ``add_any``.  vjp and grad are
  linearize followed by that transposition, as in JAX.

Rules are registered beside each primitive (``ourjax/lax``) with the helpers at the bottom of
this file: ``defjvp`` (one rule per argument), ``defjvp2``, ``deflinear``, ``defbilinear``.
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import (Primitive, ShapedArray, Trace, Tracer, full_raise, get_aval, new_main)
from ourjax.interpreters import partial_eval as pe

jvp_rules: dict = {}
transpose_rules: dict = {}
# primitives that are linear in all their inputs and need only cotangents (reshape, neg, ...)
linear_primitives: set = set()

# ------------------------------------------------------------------------------------------------
# Symbolic zeros and tangent spaces


class Zero:
  """A tangent or cotangent that is known to be zero."""
  __slots__ = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  def __repr__(self):
    return f"Zero({self.aval.str_short()})"

  @staticmethod
  def from_primal_value(x):
    return Zero(tangent_aval(get_aval(x)))


def tangent_dtype(dtype) -> np.dtype:
  """Tangents of integer and boolean values have dtype float0 (JAX's convention)."""
  dtype = np.dtype(dtype)
  if dtypes.is_inexact(dtype):
    return dtype
  return dtypes.float0


def tangent_aval(aval: ShapedArray) -> ShapedArray:
  return ShapedArray(aval.shape, tangent_dtype(aval.dtype), aval.weak_type)


def zeros_like_aval(aval: ShapedArray):
  from ourjax import lax
  if aval.dtype == dtypes.float0:
    return np.zeros(aval.shape, dtypes.float0)
  return lax.full(aval.shape, 0, aval.dtype, weak_type=aval.weak_type)


def instantiate_zeros(t):
  return zeros_like_aval(t.aval) if type(t) is Zero else t


def is_undefined_primal(x) -> bool:
  return type(x) is UndefinedPrimal


add_any_p = Primitive("add_any")


def add_tangents(x, y):
  if type(x) is Zero:
    return y
  if type(y) is Zero:
    return x
  return add_any_p.bind(x, y)


# ------------------------------------------------------------------------------------------------
# Forward mode


class JVPTracer(Tracer):
  __slots__ = ("primal", "tangent")

  def __init__(self, trace, primal, tangent):
    self._trace = trace
    self.primal = primal
    self.tangent = tangent

  @property
  def aval(self):
    return get_aval(self.primal)

  def to_concrete_value(self):
    p = self.primal
    return p.to_concrete_value() if isinstance(p, Tracer) else p


class JVPTrace(Trace):
  __slots__ = ()

  def pure(self, val):
    return JVPTracer(self, val, Zero.from_primal_value(val))

  lift = pure

  def process_primitive(self, primitive, tracers, params):
    primals = [t.primal for t in tracers]
    tangents = [t.tangent for t in tracers]
    if all(type(t) is Zero for t in tangents):
      out = primitive.bind(*primals, **params)
      if primitive.multiple_results:
        return [JVPTracer(self, o, Zero.from_primal_value(o)) for o in out]
      return JVPTracer(self, out, Zero.from_primal_value(out))
    rule = jvp_rules.get(primitive)
    if rule is None:
      raise NotImplementedError(f"Differentiation rule for '{primitive.name}' not implemented")
    primals_out, tangents_out = rule(primals, tangents, **params)
    if primitive.multiple_results:
      return [JVPTracer(self, p, t) for p, t in zip(primals_out, tangents_out)]
    return JVPTracer(self, primals_out, tangents_out)


def jvp_flat(f: Callable, primals: Sequence, tangents: Sequence, instantiate=True):
  """Push ``tangents`` forward through the flat function ``f(*primals) -> list``."""
  with new_main(JVPTrace, name=getattr(f, "__name__", "jvp")) as main:
    trace = JVPTrace(main)
    # an input whose tangent is a symbolic zero (integer inputs, nondifferentiated arguments)
    # is passed as it is, not wrapped, as JAX does: the function sees the caller's value
    tracers_in = [p if type(t) is Zero else JVPTracer(trace, p, t)
                  for p, t in zip(primals, tangents)]
    outs = f(*tracers_in)
    tracers_out = [full_raise(trace, o) for o in outs]
    primals_out = [t.primal for t in tracers_out]
    tangents_out = [t.tangent for t in tracers_out]
  if instantiate:
    tangents_out = [instantiate_zeros(t) for t in tangents_out]
  return primals_out, tangents_out


def jvp_jaxpr(closed: core.ClosedJaxpr, nonzeros: Sequence[bool], instantiate=True):
  """The JVP of a closed jaxpr as a new closed jaxpr taking primals then the nonzero tangents
  and returning primal outs then tangent outs.  Used by the rules of higher-order primitives."""
  n = len(closed.jaxpr.invars)
  tan_avals = [tangent_aval(a) for a, nz in zip(closed.in_avals, nonzeros) if nz]

  def fun(*args):
    primals, tans = args[:n], list(args[n:])
    tangents = [tans.pop(0) if nz else Zero(tangent_aval(get_aval(p)))
                for p, nz in zip(primals, nonzeros)]
    po, to = jvp_flat(lambda *xs: core.closed_call(closed, *xs), primals, tangents,
                      instantiate=instantiate)
    return list(po) + [t for t in to if type(t) is not Zero]

  return pe.trace_to_jaxpr(fun, list(closed.in_avals) + tan_avals, "jvp")


def jvp_jaxpr_nonzeros(closed: core.ClosedJaxpr, nonzeros: Sequence[bool],
                       instantiate: bool | Sequence[bool] = False):
  """Like ``jvp_jaxpr`` but keeps symbolic zeros: returns ``(jvp_closed, out_nonzeros)`` where
  the new jaxpr takes primals then the nonzero tangents and returns primal outs then only the
  tangents flagged in ``out_nonzeros``.  ``instantiate`` (one flag, or one per output) forces
  tangents to be materialized; tangents of integer outputs (dtype float0) never are, so no
  float0 value ever appears in a jaxpr."""
  n = len(closed.jaxpr.invars)
  n_out = len(closed.out_avals)
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * n_out
  tan_avals = [tangent_aval(a) for a, nz in zip(closed.in_avals, nonzeros) if nz]
  out_nz_cell: list = []

  def fun(*args):
    primals, tans = args[:n], iter(args[n:])
    tangents = [next(tans) if nz else Zero(tangent_aval(get_aval(p)))
                for p, nz in zip(primals, nonzeros)]
    po, to = jvp_flat(lambda *xs: core.closed_call(closed, *xs), primals, tangents,
                      instantiate=False)
    to = [instantiate_zeros(t) if inst and type(t) is Zero
          and tangent_dtype(t.aval.dtype) != dtypes.float0 else t
          for t, inst in zip(to, instantiate)]
    to = [Zero(t.aval) if type(t) is not Zero and get_aval(t).dtype == dtypes.float0 else t
          for t in to]
    out_nz_cell[:] = [type(t) is not Zero for t in to]
    return list(po) + [t for t in to if type(t) is not Zero]

  new = pe.trace_to_jaxpr(fun, list(closed.in_avals) + tan_avals, "jvp")
  return new, list(out_nz_cell)


# ------------------------------------------------------------------------------------------------
# Linearize and transposition


def linearize_flat(f: Callable, primals: Sequence):
  """Returns (primals_out, linear jaxpr, residual consts, out_tangent_pvals).  The jaxpr maps
  the input tangents to the output tangents."""
  pvals_in = ([pe.PartialVal.known(p) for p in primals]
              + [pe.PartialVal.unknown(tangent_aval(get_aval(p))) for p in primals])

  def f_jvp(*args):
    n = len(args) // 2
    # integer and boolean inputs have no tangent space: their tangent is a symbolic zero (the
    # linear jaxpr still takes a float0 input for them, which is never read)
    tans = [t if dtypes.is_inexact(get_aval(p).dtype) else Zero(tangent_aval(get_aval(p)))
            for p, t in zip(args[:n], args[n:])]
    # (those are known: the function gets their values, as JAX passes them unwrapped)
    prims = [p if type(t) is not Zero else _known_value(p) for p, t in zip(args[:n], tans)]
    po, to = jvp_flat(f, prims, tans)
    return list(po) + list(to)

  jaxpr, pvals_out, consts = pe.partial_eval_flat(f_jvp, pvals_in, name="linearize")
  n_out = len(pvals_out) // 2
  primal_pvals, tangent_pvals = pvals_out[:n_out], pvals_out[n_out:]
  if not all(p.is_known for p in primal_pvals):
    raise NotImplementedError(
        "Reverse-mode differentiation could not separate the primal computation from the "
        "tangent computation: a primal output depends on a tangent. A higher-order primitive "
        "with a mix of known and unknown inputs needs a partial evaluation rule (see "
        "partial_eval.partial_eval_rules and partial_eval.partial_eval_jaxpr_rules).")
  primals_out = [p.const for p in primal_pvals]
  return primals_out, jaxpr, consts, tangent_pvals


def _known_value(x):
  pval = getattr(x, "pval", None)
  return pval.const if pval is not None and pval.is_known else x


class UndefinedPrimal:
  """Marks a linear input of a jaxpr being transposed."""
  __slots__ = ("aval",)

  def __init__(self, aval):
    self.aval = aval

  def __repr__(self):
    return f"UndefinedPrimal({self.aval.str_short()})"


def backward_pass(jaxpr: core.Jaxpr, consts: Sequence, args: Sequence, cotangents: Sequence):
  """Transpose the linear jaxpr.  ``args`` holds values for the non-linear inputs and
  ``UndefinedPrimal`` for the linear ones; returns the cotangents of the linear inputs (``Zero``
  where nothing flowed)."""
  primal_env: dict = {}
  ct_env: dict = {}

  def read_primal(x):
    if isinstance(x, core.Literal):
      return x.value()
    return primal_env.get(x, UndefinedPrimal(x.aval))

  def write_cotangent(v, ct):
    if isinstance(v, core.Literal) or type(ct) is Zero or ct is None:
      return
    ct_env[v] = add_tangents(ct_env[v], ct) if v in ct_env else ct

  def read_cotangent(v):
    return ct_env.pop(v, Zero(tangent_aval(v.aval)))

  for v, c in zip(jaxpr.constvars, consts):
    primal_env[v] = c
  for v, a in zip(jaxpr.invars, args):
    if not is_undefined_primal(a):
      primal_env[v] = a
  # forward: evaluate the non-linear equations (those whose inputs are all defined); with online
  # partial evaluation this is usually nothing, but jaxprs from other sources may have some.
  lin_eqns = []
  for eqn in jaxpr.eqns:
    ins = [read_primal(x) for x in eqn.inputs]
    if any(is_undefined_primal(x) for x in ins):
      lin_eqns.append(eqn)
    else:
      outs = eqn.primitive.bind(*ins, **eqn.params)
      outs = outs if eqn.primitive.multiple_results else [outs]
      for v, o in zip(eqn.out_binders, outs):
        primal_env[v] = o
  for v, ct in zip(jaxpr.outvars, cotangents):
    write_cotangent(v, ct)
  for eqn in reversed(lin_eqns):
    ins = [read_primal(x) for x in eqn.inputs]
    cts_out = [read_cotangent(v) for v in eqn.out_binders]
    if all(type(c) is Zero for c in cts_out):
      continue
    rule = transpose_rules.get(eqn.primitive)
    if rule is None:
      raise NotImplementedError(f"Transpose rule (for reverse-mode differentiation) for "
                                f"'{eqn.primitive.name}' not implemented")
    cts_in = rule(cts_out if eqn.primitive.multiple_results else cts_out[0], *ins, **eqn.params)
    for x, ct in zip(eqn.inputs, cts_in):
      if isinstance(x, core.Var) and x not in primal_env:
        write_cotangent(x, ct)
  return [read_cotangent(v) for v, a in zip(jaxpr.invars, args) if is_undefined_primal(a)]


def vjp_flat(f: Callable, primals: Sequence):
  """Returns (primals_out, f_vjp) where ``f_vjp(cts_out) -> cts_in`` (cotangents may be Zero)."""
  primals_out, jaxpr, consts, tangent_pvals = linearize_flat(f, primals)
  in_avals = [tangent_aval(get_aval(p)) for p in primals]

  def f_vjp(cts_out):
    unknown_cts = [c for c, p in zip(cts_out, tangent_pvals) if not p.is_known]
    cts_in = backward_pass(jaxpr, consts, [UndefinedPrimal(a) for a in in_avals], unknown_cts)
    return cts_in

  return primals_out, f_vjp


# ------------------------------------------------------------------------------------------------
# Helpers for writing rules


def defjvp(primitive: Primitive, *jvprules):
  """One rule per argument: ``rule(tangent_i, *primals, **params) -> tangent contribution``, or
  None for arguments that are not differentiable.  Contributions are summed; rules of
  arguments whose tangent is Zero are not called."""
  jvp_rules[primitive] = partial(_standard_jvp, jvprules, primitive)


def _standard_jvp(jvprules, primitive, primals, tangents, **params):
  val_out = primitive.bind(*primals, **params)
  tangents_out = [rule(t, *primals, **params) for rule, t in zip(jvprules, tangents)
                  if rule is not None and type(t) is not Zero]
  tangent = Zero.from_primal_value(val_out)
  for t in tangents_out:
    tangent = add_tangents(tangent, t)
  return val_out, tangent


def defjvp2(primitive: Primitive, *jvprules):
  """Like defjvp, but each rule also receives the primal output:
  ``rule(tangent_i, ans, *primals, **params)``."""
  def rule(primals, tangents, **params):
    ans = primitive.bind(*primals, **params)
    tangent = Zero.from_primal_value(ans)
    for r, t in zip(jvprules, tangents):
      if r is not None and type(t) is not Zero:
        tangent = add_tangents(tangent, r(t, ans, *primals, **params))
    return ans, tangent
  jvp_rules[primitive] = rule


def defjvp_zero(primitive: Primitive):
  """Outputs do not depend differentiably on the inputs (comparisons, argmax, integer ops)."""
  def rule(primals, tangents, **params):
    out = primitive.bind(*primals, **params)
    if primitive.multiple_results:
      return out, [Zero.from_primal_value(o) for o in out]
    return out, Zero.from_primal_value(out)
  jvp_rules[primitive] = rule


def deflinear(primitive: Primitive, transpose_rule: Callable):
  """A primitive linear in its (single or every) argument: its JVP is itself applied to the
  tangents; ``transpose_rule(ct, *args, **params) -> list of cts``."""
  def jvp(primals, tangents, **params):
    out = primitive.bind(*primals, **params)
    if all(type(t) is Zero for t in tangents):
      return out, Zero.from_primal_value(out)
    tans = [instantiate_zeros(t) for t in tangents]
    return out, primitive.bind(*tans, **params)
  jvp_rules[primitive] = jvp
  transpose_rules[primitive] = _zero_aware_transpose(transpose_rule)
  linear_primitives.add(primitive)


def deflinear2(primitive: Primitive, transpose_rule: Callable):
  """Like deflinear, with the transpose rule given the (possibly undefined) primal inputs:
  ``transpose_rule(ct, *args, **params)``."""
  deflinear(primitive, transpose_rule)


def _zero_aware_transpose(rule):
  def transpose(ct, *args, **params):
    if type(ct) is Zero:
      return [Zero(tangent_aval(a.aval)) if is_undefined_primal(a) else None for a in args]
    return rule(ct, *args, **params)
  return transpose


def defbilinear(primitive: Primitive, lhs_rule: Callable, rhs_rule: Callable):
  """``primitive(x, y)`` linear in each of x and y separately (mul, dot_general, conv).
  ``lhs_rule(ct, x, y, **params)`` is the cotangent of x given y (x undefined), and the same
  for rhs.  The JVP is ``f(tx, y) + f(x, ty)``."""
  defjvp(primitive,
         lambda tx, x, y, **p: primitive.bind(tx, y, **p),
         lambda ty, x, y, **p: primitive.bind(x, ty, **p))

  def transpose(ct, x, y, **params):
    if type(ct) is Zero:
      return [Zero(tangent_aval(a.aval)) if is_undefined_primal(a) else None for a in (x, y)]
    ctx = lhs_rule(ct, x, y, **params) if is_undefined_primal(x) else None
    cty = rhs_rule(ct, x, y, **params) if is_undefined_primal(y) else None
    return [ctx, cty]
  transpose_rules[primitive] = transpose


# add_any: the sum of two tangents of the same type.
core.abstract_eval_rules[add_any_p] = lambda x, y: x
core.impl_rules[add_any_p] = lambda x, y: np.add(x, y) if x.dtype != dtypes.float0 else x
defjvp(add_any_p, lambda t, x, y: t, lambda t, x, y: t)
transpose_rules[add_any_p] = lambda ct, x, y: [ct, ct]
linear_primitives.add(add_any_p)

# (its batching rule is in interpreters/batching.py)
