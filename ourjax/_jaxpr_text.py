"""The JAX text format of a jaxpr (``str(jaxpr)``, ``core.pp_jaxpr``), moved out of core.py.

Layout follows JAX's pretty-printer (width ``core.PP_WIDTH``): a jaxpr goes on one line when it
fits, otherwise one equation per line; an equation whose parameters do not fit puts each
parameter on its own line.  Binders nobody reads print as ``_``.  Nested jaxprs share the naming
of the enclosing one, except that a call primitive's jaxpr names its inputs and outputs like the
call's own operands and results (as JAX prints ``jit``).  Primitives register how their
parameters print in ``core.pp_param_rules``; jit-like ones are listed in ``core.call_primitives``.
"""
from __future__ import annotations

import numpy as np

from ourjax.core import (PP_WIDTH, ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Primitive, Var,
                         call_primitives, pp_param_rules)


def _alpha_name(n: int) -> str:
  s = ""
  while not s or n:
    n, i = divmod(n, 26)
    s = chr(97 + i) + s
  return s


class _Namer:
  def __init__(self):
    self.names: dict = {}
    self.count = 0

  def __call__(self, v) -> str:
    if isinstance(v, Literal):
      return v.pp()
    n = self.names.get(v)
    if n is None:
      n = self.names[v] = _alpha_name(self.count)
      self.count += 1
    return n

  def alias(self, v, name: str):
    self.names.setdefault(v, name)


def _used_vars(jaxpr: "Jaxpr") -> set:
  used = {x for e in jaxpr.eqns for x in e.inputs if isinstance(x, Var)}
  used.update(x for x in jaxpr.outvars if isinstance(x, Var))
  return used


_FLAT = -10 ** 9   # a column from which everything fits: renders a value on one line


def _fits(col: int, text: str) -> bool:
  return "\n" not in text and col + len(text) <= PP_WIDTH


def _pp_value(v, namer, col, indent) -> str:
  if isinstance(v, ClosedJaxpr):
    v = v.jaxpr
  if isinstance(v, Jaxpr):
    return _pp_jaxpr(v, namer, col, indent)
  if isinstance(v, (tuple, list)) and v and all(isinstance(x, (Jaxpr, ClosedJaxpr)) for x in v):
    flat = "(" + " ".join(_pp_value(x, namer, _FLAT, indent) for x in v) + ")"
    if _fits(col, flat):
      return flat
    body = "".join("\n" + " " * (indent + 2) + _pp_value(x, namer, indent + 2, indent + 2)
                   for x in v)
    return "(" + body + "\n" + " " * indent + ")"
  if isinstance(v, np.dtype):
    return v.name
  if isinstance(v, type) and issubclass(v, np.generic):
    return np.dtype(v).name
  if isinstance(v, Primitive):
    return v.name
  if callable(v) and hasattr(v, "__name__"):
    return v.__name__
  return str(v)


def _pp_eqn(eqn: "JaxprEqn", namer, used, col, indent) -> str:
  outs = " ".join((namer(v) if v in used else "_") + f":{v.aval.str_short()}"
                  for v in eqn.out_binders)
  rule = pp_param_rules.get(eqn.primitive)
  params = rule(eqn.params) if rule else sorted(eqn.params.items())
  if eqn.primitive in call_primitives and "jaxpr" in eqn.params:
    inner = eqn.params["jaxpr"]
    inner = inner.jaxpr if isinstance(inner, ClosedJaxpr) else inner
    for iv, x in zip(inner.invars, eqn.inputs):
      if isinstance(x, Var):
        namer.alias(iv, namer(x))
    for iv in inner.invars:
      namer(iv)
    for ov, b in zip(inner.outvars, eqn.out_binders):
      if isinstance(ov, Var) and ov not in inner.invars and b in used:
        namer.alias(ov, namer(b))
  args = " ".join(namer(x) for x in eqn.inputs)
  # as JAX's: an equation without results prints no ' = '
  head = f"{outs} = {eqn.primitive.name}" if eqn.out_binders else eqn.primitive.name
  tail = f" {args}"     # as JAX's: the space is there also when there are no operands
  if not params:
    return head + tail
  flat = head + "[" + " ".join(f"{k}={_pp_value(v, namer, _FLAT, indent)}"
                               for k, v in params) + "]" + tail
  if _fits(col, flat):
    return flat
  pad = " " * (indent + 2)
  lines = [f"{pad}{k}={_pp_value(v, namer, indent + 2 + len(k) + 1, indent + 2)}"
           for k, v in params]
  return head + "[\n" + "\n".join(lines) + "\n" + " " * indent + "]" + tail


def _pp_jaxpr(jaxpr: "Jaxpr", namer: _Namer, col: int, indent: int) -> str:
  used = _used_vars(jaxpr)
  binder = lambda v: f"{namer(v)}:{v.aval.str_short()}"
  consts = " ".join(binder(v) for v in jaxpr.constvars)
  ins = " ".join(binder(v) for v in jaxpr.invars)
  head = f"{{ lambda {consts}; {ins}. let"
  eqns_flat = [_pp_eqn(e, namer, used, _FLAT, indent + 4) for e in jaxpr.eqns]
  outs = ", ".join(namer(x) for x in jaxpr.outvars)
  outs = f"({outs}{',' if len(jaxpr.outvars) == 1 else ''})"
  flat = f"{head} {'; '.join(eqns_flat)} in {outs} }}"
  if _fits(col, flat):
    return flat
  pad = " " * (indent + 4)
  lines = [pad + _pp_eqn(e, namer, used, indent + 4, indent + 4) for e in jaxpr.eqns]
  body = ("\n" + "\n".join(lines)) if lines else " "
  return f"{head}{body}\n{' ' * (indent + 2)}in {outs} }}"


def pp_jaxpr(jaxpr: Jaxpr) -> str:
  return _pp_jaxpr(jaxpr, _Namer(), 0, 0)
