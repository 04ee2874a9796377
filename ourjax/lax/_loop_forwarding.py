"""Loop carries that the body returns unchanged become loop constants, as in JAX.

``scan`` and ``while_loop`` look at the traced body: a carry whose output is its own input
(``(a + b, b)`` for the carry ``(a, b)``) is read-only, so it is passed to the loop primitive as
a constant and the loop's result for it is the initial value itself.  ``while_loop`` does this
only for the carries its ``cond_fun`` does not read.  Under ``vmap`` such a carry then stays
unbatched when only other inputs are batched, also when a ``while_loop`` predicate is batched
(which batches every remaining carry).
"""
from __future__ import annotations

from ourjax.core import ClosedJaxpr, Jaxpr
from ourjax.interpreters import partial_eval as pe


def forwarded_carries(body: ClosedJaxpr, n: int) -> list[bool]:
  """For each of the ``n`` leading carries of ``body`` (inputs and outputs 0..n-1): whether
  the body returns that input unchanged."""
  j = body.jaxpr
  return [j.outvars[k] is j.invars[k] for k in range(n)]


def unused_by(cond: ClosedJaxpr) -> tuple[ClosedJaxpr, list[bool]]:
  """``cond`` without its dead equations, and which of its inputs it does not read."""
  j, used = pe.dce_jaxpr(cond.jaxpr)
  return ClosedJaxpr(j, cond.consts), [not u for u in used]


def carries_to_consts(body: ClosedJaxpr, move) -> ClosedJaxpr:
  """``body`` (inputs: carries then the rest; outputs: carries then the rest) with the carries
  marked in ``move`` taken as leading inputs and dropped from the outputs."""
  j, n = body.jaxpr, len(move)
  lead = [v for v, m in zip(j.invars, move) if m]
  carry = [v for v, m in zip(j.invars, move) if not m]
  outs = [v for v, m in zip(j.outvars, move) if not m] + j.outvars[n:]
  return ClosedJaxpr(Jaxpr(j.constvars, lead + carry + j.invars[n:], j.eqns, outs,
                           j.debug_name), body.consts)


def drop_inputs(closed: ClosedJaxpr, drop) -> ClosedJaxpr:
  """``closed`` without the inputs marked in ``drop`` (which it must not read)."""
  j = closed.jaxpr
  return ClosedJaxpr(Jaxpr(j.constvars, [v for v, d in zip(j.invars, drop) if not d], j.eqns,
                           j.outvars, j.debug_name), closed.consts)


def forward_xs_to_ys(body: ClosedJaxpr, n_carry: int, n_xs: int):
  """A scan body (outputs: ``n_carry`` carries then the ys; last ``n_xs`` inputs: the xs)
  without the ys that are an x input returned as it is, and for each y the index of the x it
  is (None for the ys the loop still computes)."""
  j = body.jaxpr
  xs_vars = j.invars[len(j.invars) - n_xs:] if n_xs else []
  where = {id(v): k for k, v in enumerate(xs_vars)}
  ys = j.outvars[n_carry:]
  y_from_x = [where.get(id(v)) for v in ys]
  if all(k is None for k in y_from_x):
    return body, y_from_x
  outs = j.outvars[:n_carry] + [v for v, k in zip(ys, y_from_x) if k is None]
  return ClosedJaxpr(Jaxpr(j.constvars, j.invars, j.eqns, outs, j.debug_name),
                     body.consts), y_from_x


def split(vals, move):
  """(the values marked in ``move``, the others)."""
  return ([v for v, m in zip(vals, move) if m], [v for v, m in zip(vals, move) if not m])


def merge(move, moved, rest):
  """Inverse of ``split``."""
  moved, rest = iter(moved), iter(rest)
  return [next(moved) if m else next(rest) for m in move]
