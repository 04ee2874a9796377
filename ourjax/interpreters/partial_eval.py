"""Tracing to jaxprs, and partial evaluation.

* ``JaxprTrace`` records every primitive bound on its tracers as a jaxpr equation.  It is made
  the *dynamic* trace while a function is traced, so even operations on constants are recorded
  (JAX's omnistaging).  ``trace_to_jaxpr(fun, in_avals)`` returns a ``ClosedJaxpr``.
* ``PartialEvalTrace`` splits a computation into a known part, evaluated now (on concrete values
  or on tracers of an enclosing trace), and an unknown part, recorded as a jaxpr.  Linearize is
  JVP under this trace: primals known, tangents unknown (``interpreters/ad.py``).
* ``partial_eval_jaxpr`` does the same split offline, on a jaxpr; ``dce_jaxpr`` drops unused
  equations.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from ourjax import _gc, core
from ourjax import ref as _ref
from ourjax.core import (ClosedJaxpr, Jaxpr, JaxprEqn, Literal, ShapedArray, Trace, Tracer, Var,
                         get_aval, new_dynamic, new_main, user_frame)

# ------------------------------------------------------------------------------------------------
# Building jaxprs


class JaxprTracer(Tracer):
  __slots__ = ("_aval",)

  def __init__(self, trace, aval):
    self._trace = trace
    self._aval = aval

  @property
  def aval(self):
    return self._aval


class JaxprBuilder:
  """Accumulates equations, variables and constants while a function is traced."""

  def __init__(self):
    self.eqns: list[JaxprEqn] = []
    self.tracer_to_var: dict[int, Var] = {}
    self.const_tracers: dict[int, JaxprTracer] = {}   # id(const value) -> tracer
    self.constvals: dict[Var, object] = {}
    self.tracers: list[JaxprTracer] = []              # keep tracers alive: ids stay unique

  def new_tracer(self, trace, aval) -> JaxprTracer:
    t = JaxprTracer(trace, aval)
    self.tracers.append(t)
    return t

  def add_var(self, tracer) -> Var:
    v = self.tracer_to_var[id(tracer)] = Var(tracer.aval)
    return v

  def getvar(self, tracer) -> Var:
    return self.tracer_to_var[id(tracer)]

  def add_const(self, tracer, val) -> Var:
    v = self.add_var(tracer)
    self.constvals[v] = val
    return v

  def build(self, in_tracers, out_tracers, debug_name="") -> ClosedJaxpr:
    invars = [self.getvar(t) for t in in_tracers]
    outvars = [self.getvar(t) for t in out_tracers]
    constvars, constvals = list(self.constvals.keys()), list(self.constvals.values())
    jaxpr = Jaxpr(constvars, invars, self.eqns, outvars, debug_name)
    return inline_literals(ClosedJaxpr(jaxpr, constvals))


class JaxprTrace(Trace):
  __slots__ = ()

  @property
  def builder(self) -> JaxprBuilder:
    return self.main.payload

  def new_arg(self, aval) -> JaxprTracer:
    t = self.builder.new_tracer(self, aval)
    self.builder.add_var(t)
    return t

  def get_or_make_const_tracer(self, val):
    b = self.builder
    t = b.const_tracers.get(id(val))
    if t is None:
      t = b.new_tracer(self, get_aval(val))
      b.add_const(t, val)
      b.const_tracers[id(val)] = t
      b.tracers.append(val)        # keep the value alive so its id is not reused
    return t

  pure = lift = get_or_make_const_tracer

  def abstract_const(self, sds) -> JaxprTracer:
    """A constant of the jaxpr that has only a type (a ``ShapeDtypeStruct`` a jitted function
    was called with while staging, as JAX allows): evaluating the jaxpr fails, abstract
    evaluation (``eval_shape``) does not need it."""
    b = self.builder
    t = b.const_tracers.get(id(sds))
    if t is None:
      t = b.new_tracer(self, ShapedArray(tuple(sds.shape), sds.dtype, bool(sds.weak_type)))
      b.add_const(t, sds)
      b.const_tracers[id(sds)] = t
      b.tracers.append(sds)
    return t

  def process_primitive(self, primitive, tracers, params):
    avals_in = [t.aval for t in tracers]
    out = primitive.abstract_eval(*avals_in, **params)
    avals_out = out if primitive.multiple_results else [out]
    b = self.builder
    out_tracers = [b.new_tracer(self, a) for a in avals_out]
    inputs = [b.getvar(t) for t in tracers]
    outvars = [b.add_var(t) for t in out_tracers]
    b.eqns.append(JaxprEqn(primitive, inputs, params, outvars, user_frame()))
    return out_tracers if primitive.multiple_results else out_tracers[0]


def trace_to_jaxpr(fun: Callable, in_avals: Sequence[ShapedArray], debug_name: str = ""
                   ) -> ClosedJaxpr:
  """Trace the flat function ``fun(*args) -> list`` on abstract arguments."""
  builder = JaxprBuilder()
  with _gc.paused(), _ref.staged_frame(debug_name), \
       new_main(JaxprTrace, builder, name=debug_name or getattr(fun, "__name__", "")) as main:
    with new_dynamic(main):
      trace = JaxprTrace(main)
      tracers_in = [trace.new_arg(a) for a in in_avals]
      outs = fun(*tracers_in)
      tracers_out = [core.full_raise(trace, o) for o in outs]
      closed = builder.build(tracers_in, tracers_out, debug_name)
  from ourjax.config import config
  if config.jax_check_tracer_leaks:
    del tracers_in, tracers_out, outs, trace
    _check_leaks(builder, debug_name or getattr(fun, "__name__", ""))
  return closed


def _check_leaks(builder: JaxprBuilder, name: str) -> None:
  """Raise if a tracer of a finished trace is still referenced from outside it (the traced
  function stored it somewhere): such a tracer would fail later, far from its cause."""
  import gc
  import sys
  tracers = [t for t in builder.tracers if isinstance(t, JaxprTracer)]
  builder.tracers.clear()
  builder.const_tracers.clear()
  gc.collect()
  # references: the list above, getrefcount's argument and the loop variable
  leaked = [t for t in tracers if sys.getrefcount(t) > 3]
  if leaked:
    from ourjax.errors import UnexpectedTracerError
    refs = [type(r).__name__ for r in gc.get_referrers(leaked[0]) if r is not tracers and r is not leaked]
    # (JAX's words first: "Leaked trace DynamicJaxprTrace" names the kind of trace that leaked)
    raise UnexpectedTracerError(
        f"Leaked trace DynamicJaxprTrace (the jaxpr trace of {name or 'a function'}): "
        f"{len(leaked)} tracer(s) created while "
        f"tracing it are still referenced after the trace ended (first: {leaked[0].aval}, held by {', '.join(refs) or 'an unknown object'}). A traced function must not store "
        "its intermediate values outside itself (in a list, a global or an attribute).")


def _is_scalar_literal(x) -> bool:
  if isinstance(x, (bool, int, float, complex)):
    return True
  if isinstance(x, np.generic):
    return True
  if isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "biufc":
    return True
  from ourjax.array import Array
  if isinstance(x, Array) and x.shape == () and x.dtype.kind in "biufcV":
    return x.dtype.kind != "V"
  return False


def inline_literals(closed: ClosedJaxpr) -> ClosedJaxpr:
  """Turn scalar constants into literals written inline (``add a 1.0:f32[]``)."""
  from ourjax.array import to_numpy
  jaxpr = closed.jaxpr
  lits: dict = {}
  constvars, consts = [], []
  for v, c in zip(jaxpr.constvars, closed.consts):
    if _is_scalar_literal(c) and not isinstance(c, Tracer):
      lits[v] = Literal(to_numpy(c)[()], v.aval)
    else:
      constvars.append(v)
      consts.append(c)
  if not lits:
    return closed

  def sub(x):
    return lits.get(x, x) if isinstance(x, Var) else x

  eqns = [e._replace(inputs=[sub(x) for x in e.inputs]) for e in jaxpr.eqns]
  new = Jaxpr(constvars, jaxpr.invars, eqns, [sub(x) for x in jaxpr.outvars], jaxpr.debug_name)
  return ClosedJaxpr(new, consts)


def convert_constvars_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
  """Make constvars leading invars."""
  return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, jaxpr.outvars, jaxpr.debug_name)


def close_jaxpr(jaxpr: Jaxpr) -> ClosedJaxpr:
  return ClosedJaxpr(jaxpr, [])


# ------------------------------------------------------------------------------------------------
# Online partial evaluation


class PartialVal(NamedTuple):
  aval: ShapedArray
  const: object | None    # the known value, or None when unknown

  @classmethod
  def known(cls, val):
    return PartialVal(get_aval(val), val)

  @classmethod
  def unknown(cls, aval):
    return PartialVal(aval, None)

  is_known = property(lambda self: self.const is not None)


class _LambdaBinding:
  pass


class _ConstRecipe(NamedTuple):
  val: object


class _EqnRecipe(NamedTuple):
  prim: object
  tracers_in: list
  params: dict
  avals_out: list
  tracer_refs_out: list
  source_info: str | None


class PartialEvalTracer(Tracer):
  __slots__ = ("pval", "recipe")

  def __init__(self, trace, pval: PartialVal, recipe):
    self._trace = trace
    self.pval = pval
    self.recipe = recipe

  @property
  def aval(self):
    return self.pval.aval

  def full_lower(self):
    if self.pval.is_known:
      return core.full_lower(self.pval.const)
    return self

  def to_concrete_value(self):
    if self.pval.is_known:
      c = self.pval.const
      return c.to_concrete_value() if isinstance(c, Tracer) else c
    return None


class PartialEvalTrace(Trace):
  __slots__ = ()

  def new_arg(self, pval: PartialVal) -> PartialEvalTracer:
    return PartialEvalTracer(self, pval, _LambdaBinding())

  def pure(self, val):
    return PartialEvalTracer(self, PartialVal.known(val), None)

  lift = pure

  def instantiate_const(self, tracer: PartialEvalTracer) -> PartialEvalTracer:
    if tracer.pval.is_known:
      return PartialEvalTracer(self, PartialVal.unknown(get_aval(tracer.pval.const)),
                               _ConstRecipe(tracer.pval.const))
    return tracer

  def process_primitive(self, primitive, tracers, params):
    if all(t.pval.is_known for t in tracers):
      return primitive.bind(*[t.pval.const for t in tracers], **params)
    rule = partial_eval_rules.get(primitive)
    if rule is not None:
      return rule(self, tracers, **params)
    return self.default_process_primitive(primitive, tracers, params)

  def default_process_primitive(self, primitive, tracers, params):
    tracers_in = [self.instantiate_const(t) for t in tracers]
    avals_in = [t.aval for t in tracers_in]
    out = primitive.abstract_eval(*avals_in, **params)
    avals_out = out if primitive.multiple_results else [out]
    tracers_out = [PartialEvalTracer(self, PartialVal.unknown(a), None) for a in avals_out]
    recipe = _EqnRecipe(primitive, tracers_in, params, avals_out, tracers_out, user_frame())
    for t in tracers_out:
      t.recipe = recipe
    return tracers_out if primitive.multiple_results else tracers_out[0]


# primitive -> rule(trace, tracers, **params) for primitives whose partial evaluation is not
# "everything unknown if any input is" (remat, control flow, custom derivatives).
partial_eval_rules: dict = {}


def partial_eval_flat(f: Callable, pvals_in: Sequence[PartialVal], name: str = "partial_eval"):
  """Run ``f`` on partially known inputs.  Returns (jaxpr of the unknown part, out pvals,
  residuals) where the jaxpr takes ``residuals + unknown inputs``."""
  with new_main(PartialEvalTrace, name=name) as main:
    trace = PartialEvalTrace(main)
    tracers_in = [trace.new_arg(p) for p in pvals_in]
    outs = f(*tracers_in)
    tracers_out = [core.full_raise(trace, o) for o in outs]
    pvals_out = [t.pval for t in tracers_out]
    unk_in = [t for t in tracers_in if not t.pval.is_known]
    unk_out = [t for t in tracers_out if not t.pval.is_known]
    jaxpr, consts = tracers_to_jaxpr(unk_in, unk_out)
  return jaxpr, pvals_out, consts


def tracers_to_jaxpr(tracers_in, tracers_out):
  """Build the jaxpr recorded in the recipes between ``tracers_in`` and ``tracers_out``.
  Known values the unknown part needs become constvars (the residuals)."""
  tracer_to_var = {id(t): Var(t.aval) for t in tracers_in}
  constvar_to_val: dict = {}
  constid_to_var: dict = {}
  processed: set = set()
  eqns = []
  for t in _toposort(tracers_out):
    r = t.recipe
    if isinstance(r, _LambdaBinding):
      if id(t) not in tracer_to_var:
        raise core.UnexpectedTracerError("a partial-evaluation input was not listed")
    elif isinstance(r, _ConstRecipe):
      var = constid_to_var.get(id(r.val))
      if var is None:
        var = constid_to_var[id(r.val)] = Var(t.aval)
        constvar_to_val[var] = r.val
      tracer_to_var[id(t)] = var
    elif isinstance(r, _EqnRecipe):
      if id(r) not in processed:
        for tout in r.tracer_refs_out:
          tracer_to_var[id(tout)] = Var(tout.aval)
        eqns.append(JaxprEqn(r.prim, [tracer_to_var[id(x)] for x in r.tracers_in], r.params,
                             [tracer_to_var[id(x)] for x in r.tracer_refs_out], r.source_info))
        processed.add(id(r))
    else:
      raise TypeError(f"unknown recipe {r!r}")
  constvars, constvals = list(constvar_to_val.keys()), list(constvar_to_val.values())
  invars = [tracer_to_var[id(t)] for t in tracers_in]
  outvars = [tracer_to_var[id(t)] for t in tracers_out]
  return Jaxpr(constvars, invars, eqns, outvars), constvals


def _parents(t):
  r = t.recipe
  return r.tracers_in if isinstance(r, _EqnRecipe) else []


def _toposort(out_nodes):
  """Parents before children, iteratively (deep programs must not hit the recursion limit)."""
  order, seen = [], set()
  for root in out_nodes:
    if id(root) in seen:
      continue
    stack = [(root, False)]
    while stack:
      node, done = stack.pop()
      if done:
        order.append(node)
        continue
      if id(node) in seen:
        continue
      seen.add(id(node))
      stack.append((node, True))
      for p in _parents(node):
        if id(p) not in seen:
          stack.append((p, False))
  return order


# ------------------------------------------------------------------------------------------------
# Offline partial evaluation and DCE on jaxprs


def partial_eval_jaxpr(jaxpr: Jaxpr, in_unknowns: Sequence[bool],
                       instantiate: bool | Sequence[bool] = False):
  """Split ``jaxpr`` (constvars must be empty; see ``convert_constvars_jaxpr``) into
  ``jaxpr_known: known ins -> known outs + residuals`` and
  ``jaxpr_unknown: residuals + unknown ins -> unknown outs``.
  Returns ``(jaxpr_known, jaxpr_unknown, out_unknowns, num_res)``."""
  assert not jaxpr.constvars
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(jaxpr.outvars)
  unknown: set = {v for v, u in zip(jaxpr.invars, in_unknowns) if u}
  known_eqns, unknown_eqns = [], []
  for eqn in jaxpr.eqns:
    eqn_unknowns = [isinstance(x, Var) and x in unknown for x in eqn.inputs]
    rule = partial_eval_jaxpr_rules.get(eqn.primitive)
    if rule is not None and any(eqn_unknowns) and not all(eqn_unknowns):
      # a sub-jaxpr primitive splits itself: a known eqn (also returning residuals) and an
      # unknown eqn reading them, so its known outputs stay known
      eqn_known, eqn_unknown, outs_unknown = rule(eqn, eqn_unknowns)
      if eqn_known is not None:
        known_eqns.append(eqn_known)
      if eqn_unknown is not None:
        unknown_eqns.append(eqn_unknown)
      unknown.update(v for v, u in zip(eqn.out_binders, outs_unknown) if u)
    elif any(eqn_unknowns):
      unknown_eqns.append(eqn)
      unknown.update(eqn.out_binders)
    else:
      known_eqns.append(eqn)
  out_unknowns = [(isinstance(v, Var) and v in unknown) or inst
                  for v, inst in zip(jaxpr.outvars, instantiate)]
  # residuals: known vars read by the unknown side (including known outputs to instantiate)
  residuals: list = []
  seen: set = set()

  def need(x):
    if isinstance(x, Var) and x not in unknown and x not in seen:
      seen.add(x)
      residuals.append(x)

  for eqn in unknown_eqns:
    for x in eqn.inputs:
      need(x)
  for v, u in zip(jaxpr.outvars, out_unknowns):
    if u:
      need(v)
  known_invars = [v for v, u in zip(jaxpr.invars, in_unknowns) if not u]
  known_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if not u]
  jaxpr_known = Jaxpr([], known_invars, known_eqns, known_outs + residuals)
  # the unknown side gets fresh binders for the residuals
  res_vars = [Var(v.aval) for v in residuals]
  ren = dict(zip(residuals, res_vars))

  def r(x):
    return ren.get(x, x) if isinstance(x, Var) else x

  unknown_invars = [v for v, u in zip(jaxpr.invars, in_unknowns) if u]
  eqns_u = [e._replace(inputs=[r(x) for x in e.inputs]) for e in unknown_eqns]
  jaxpr_unknown = Jaxpr([], res_vars + unknown_invars, eqns_u,
                        [r(v) for v, u in zip(jaxpr.outvars, out_unknowns) if u])
  return jaxpr_known, jaxpr_unknown, out_unknowns, len(residuals)


# primitive -> rule(eqn, in_unknowns) -> (eqn_known or None, eqn_unknown or None, out_unknowns)
# for sub-jaxpr primitives (pjit, checkpoint) in ``partial_eval_jaxpr``: the known equation
# computes the known outputs plus fresh residual variables, which the unknown equation reads.
partial_eval_jaxpr_rules: dict = {}


# primitive -> rule(eqn, used_outputs) -> (used_inputs, new_eqn or None); for primitives with
# sub-jaxprs whose unused outputs and inputs can be pruned inside (scan, cond, while, pjit).
# The new equation has only the used outputs as binders and only the used inputs as inputs.
dce_rules: dict = {}


def dce_jaxpr(jaxpr: Jaxpr, used_outputs: Sequence[bool] | None = None,
              keep_invars: bool = True):
  """Drop equations whose results are unused, unless they have an effect.  Returns
  ``(new_jaxpr, used_inputs)``."""
  if used_outputs is None:
    used_outputs = [True] * len(jaxpr.outvars)
  outvars = [v for v, u in zip(jaxpr.outvars, used_outputs) if u]
  live = {v for v in outvars if isinstance(v, Var)}
  new_eqns = []
  for eqn in reversed(jaxpr.eqns):
    used = [v in live for v in eqn.out_binders]
    if not any(used):
      if core.effectful_primitives and core.eqn_has_effects(eqn):
        # a host callback (or a loop/call holding one) runs for its effect
        live.update(x for x in eqn.inputs if isinstance(x, Var))
        new_eqns.append(eqn)
      continue
    rule = dce_rules.get(eqn.primitive)
    if rule is not None:
      _, eqn = rule(eqn, used)     # the rule returns the equation with its inputs pruned
      if eqn is None:
        continue
    live.update(x for x in eqn.inputs if isinstance(x, Var))
    new_eqns.append(eqn)
  new_eqns.reverse()
  used_inputs = [v in live for v in jaxpr.invars]
  invars = jaxpr.invars if keep_invars else [v for v, u in zip(jaxpr.invars, used_inputs) if u]
  constvars = [v for v in jaxpr.constvars if v in live] if not keep_invars else jaxpr.constvars
  return Jaxpr(constvars, invars, new_eqns, outvars, jaxpr.debug_name), used_inputs
