"""Helpers shared by the control-flow primitives (``control_flow.py``: cond, switch,
while_loop, fori_loop; ``_scan.py``: scan, map): lists and jaxprs, the transformations of a body
(JVP, batching, partial evaluation, DCE) and tracing the user's functions."""
from __future__ import annotations

import builtins
import inspect
from typing import Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import ClosedJaxpr, Jaxpr, ShapedArray, Var, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import tree_flatten, tree_flatten_with_path, tree_unflatten
from ourjax.lax import _mismatch as _mm
from ourjax.lax import _trace_cache

_all = builtins.all
_map = builtins.map

# ------------------------------------------------------------------------------------------------
# Helpers on lists and jaxprs


def _split(xs, sizes):
  """``_split(xs, [a, b])`` -> ``[xs[:a], xs[a:a+b], xs[a+b:]]``."""
  xs = list(xs)
  out, i = [], 0
  for s in sizes:
    out.append(xs[i:i + s])
    i += s
  out.append(xs[i:])
  return out


def _or(a, b):
  return [x or y for x, y in zip(a, b)]


def _fixpoint(flags, step):
  """Grow the boolean list ``flags`` with ``step(flags)`` until it stops changing."""
  flags = list(flags)
  for _ in range(len(flags) + 1):
    new = _or(flags, step(flags))
    if new == flags:
      break
    flags = new
  return flags


def _hoist(closed: ClosedJaxpr):
  """(closed jaxpr without constants, the constants) -- the constants become leading inputs."""
  if not closed.consts and not closed.jaxpr.constvars:
    return closed, []
  j = closed.jaxpr
  return ClosedJaxpr(Jaxpr([], j.constvars + j.invars, j.eqns, j.outvars, j.debug_name),
                     []), list(closed.consts)


def _join_consts(closed_list):
  """Hoist the constants of several jaxprs that take the same operands (cond branches): each
  gets leading inputs for *all* the constants, of which it reads its own."""
  closed_list = [ClosedJaxpr(c.jaxpr, c.consts) for c in closed_list]
  # a value several branches close over (the same object: a tracer of the enclosing trace) is
  # one operand, as JAX's common consts are
  slot, all_consts, avals, per = {}, [], [], []
  for c in closed_list:
    seen: dict = {}
    entries = []
    for v, x in zip(c.jaxpr.constvars, c.consts):
      n = seen[id(x)] = seen.get(id(x), -1) + 1
      key = (id(x), n)
      if key not in slot:
        slot[key] = len(all_consts)
        all_consts.append(x)
        avals.append(v.aval)
      entries.append((v, slot[key]))
    per.append(entries)
  out = []
  for c, entries in zip(closed_list, per):
    lead = [None] * len(all_consts)
    for v, k in entries:
      lead[k] = v
    lead = [v if v is not None else Var(a) for v, a in zip(lead, avals)]
    j = c.jaxpr
    out.append(ClosedJaxpr(Jaxpr([], lead + j.invars, j.eqns, j.outvars, j.debug_name), []))
  return out, all_consts


def _with_io(jaxpr: Jaxpr, invars, outvars=None) -> ClosedJaxpr:
  """The same equations with the inputs (and outputs) relisted -- used to reorder them."""
  return ClosedJaxpr(Jaxpr([], list(invars), jaxpr.eqns,
                           list(jaxpr.outvars if outvars is None else outvars),
                           jaxpr.debug_name), [])


def _as_arrays(vals, avals):
  """Eager results as Arrays typed like the primitive's abstract outputs."""
  from ourjax.array import Array, to_numpy
  out = []
  for v, a in zip(vals, avals):
    if isinstance(v, Array):
      out.append(v if v.aval == a else Array._from_result(v._value, a))
    else:
      out.append(Array._from_result(np.array(to_numpy(v)), a))
  return out


def _slice_aval(a: ShapedArray) -> ShapedArray:
  return a.update(shape=a.shape[1:])


def _stack_aval(a: ShapedArray, n: int) -> ShapedArray:
  return a.update(shape=(n,) + a.shape)


def _batched_aval(a: ShapedArray, size: int) -> ShapedArray:
  return a.update(shape=(size,) + a.shape)


def _check_operands(name, what, expected, got):
  if len(expected) != len(got) or not _all(_map(core.typematch, expected, got)):
    exp = ", ".join(a.str_short() for a in expected)
    act = ", ".join(a.str_short() for a in got)
    raise TypeError(f"{name}: {what} takes operands of types ({exp}) but got ({act})")


# ------------------------------------------------------------------------------------------------
# Transforming closed jaxprs (the tools every rule below uses)


def _jvp_jaxpr(closed: ClosedJaxpr, nonzeros: Sequence[bool], instantiate: Sequence[bool]):
  """JVP of ``closed``: takes primals then the nonzero tangents, returns primal outputs then
  the nonzero output tangents.  Returns (closed jaxpr, which output tangents are nonzero)."""
  n = len(closed.in_avals)
  tan_avals = [ad.tangent_aval(a) for a, nz in zip(closed.in_avals, nonzeros) if nz]
  cell = []

  def fun(*args):
    primals, tans = args[:n], iter(args[n:])
    tangents = [next(tans) if nz else ad.Zero(ad.tangent_aval(a))
                for a, nz in zip(closed.in_avals, nonzeros)]
    po, to = ad.jvp_flat(lambda *xs: core.closed_call(closed, *xs), primals, tangents,
                         instantiate=False)
    to = [ad.instantiate_zeros(t) if inst else t for t, inst in zip(to, instantiate)]
    cell.append([type(t) is not ad.Zero for t in to])
    return list(po) + [t for t in to if type(t) is not ad.Zero]

  jaxpr = pe.trace_to_jaxpr(fun, list(closed.in_avals) + tan_avals, "jvp")
  return jaxpr, cell[-1]


def _batch_jaxpr(closed: ClosedJaxpr, axis_size: int, in_batched: Sequence[bool],
                 instantiate: Sequence[bool]):
  """Batch ``closed`` along a leading axis of the inputs marked batched.  Outputs are batched
  at 0 where they depend on a batched input or are marked ``instantiate``.  Returns (closed
  jaxpr, which outputs are batched)."""
  new, out_dims = batching.batch_jaxpr(closed, axis_size, [0 if b else None for b in in_batched],
                                       list(instantiate))
  return new, [d is not None for d in out_dims]


def _pe_jaxpr(closed: ClosedJaxpr, unknowns: Sequence[bool], instantiate: Sequence[bool]):
  """Split ``closed`` into the part computable from its known inputs and the rest, by running
  it under partial evaluation (so control flow nested in it is split by its own rules).

  Returns ``(jaxpr_known, jaxpr_unknown, out_unknowns, num_res)``: ``jaxpr_known`` (a closed
  jaxpr, possibly with constants) maps the known inputs to the known outputs followed by
  ``num_res`` residuals; ``jaxpr_unknown`` (a Jaxpr without constvars) maps the residuals
  followed by the unknown inputs to the unknown outputs."""
  in_avals = closed.in_avals
  cell = {}

  def fun(*known_vals):
    it = iter(known_vals)
    pvals = [pe.PartialVal.unknown(a) if uk else pe.PartialVal.known(next(it))
             for a, uk in zip(in_avals, unknowns)]
    with core.new_main(pe.PartialEvalTrace, name="partial_eval") as main:
      trace = pe.PartialEvalTrace(main)
      tin = [trace.new_arg(p) for p in pvals]
      outs = core.closed_call(closed, *tin)
      touts = [core.full_raise(trace, o) for o in outs]
      touts = [trace.instantiate_const(t) if inst else t for t, inst in zip(touts, instantiate)]
      unk_in = [t for t in tin if not t.pval.is_known]
      unk_out = [t for t in touts if not t.pval.is_known]
      jaxpr_u, res = pe.tracers_to_jaxpr(unk_in, unk_out)
      known_out = [t.pval.const for t in touts if t.pval.is_known]
      out_uk = [not t.pval.is_known for t in touts]
    # scalar constants the unknown side reads become literals rather than residuals
    cu = pe.inline_literals(ClosedJaxpr(jaxpr_u, res))
    cell.update(out_uk=out_uk, jaxpr_u=pe.convert_constvars_jaxpr(cu.jaxpr),
                num_res=len(cu.consts))
    return known_out + list(cu.consts)

  known_avals = [a for a, uk in zip(in_avals, unknowns) if not uk]
  jk = pe.trace_to_jaxpr(fun, known_avals, "known")
  return jk, cell["jaxpr_u"], cell["out_uk"], cell["num_res"]


def _dce_outputs(closed: ClosedJaxpr, used_outputs) -> ClosedJaxpr:
  """Keep only the used outputs (all inputs stay)."""
  j, _ = pe.dce_jaxpr(closed.jaxpr, used_outputs)
  return ClosedJaxpr(j, closed.consts)


def _prune_invars(jaxpr: Jaxpr, used_inputs) -> ClosedJaxpr:
  return _with_io(jaxpr, [v for v, u in zip(jaxpr.invars, used_inputs) if u])


# ------------------------------------------------------------------------------------------------
# Tracing the user's functions


def _flatten_call(f, in_tree, out_cell, out_fix=None):
  """``flat(*leaves)`` calling ``f(*unflatten(in_tree, leaves))``; the output treedef and the
  raw output avals go to ``out_cell``.  ``out_fix`` (avals) casts outputs that differ from it
  only in weak type to it."""
  def flat(*leaves):
    args = tree_unflatten(in_tree, leaves)
    out = f(*args)
    out_leaves, out_tree = tree_flatten(out)
    for x in out_leaves:
      get_aval(x)     # a TypeError for values that are not arrays
    out_cell[:] = [out_tree, [get_aval(x) for x in out_leaves]]
    if out_fix is not None and len(out_fix) == len(out_leaves):
      out_leaves = [_match_weak(x, a) for x, a in zip(out_leaves, out_fix)]
    return out_leaves
  return flat


def _match_weak(x, aval: ShapedArray):
  xa = get_aval(x)
  if xa.weak_type == aval.weak_type or not core.typematch(xa, aval):
    return x
  from ourjax.lax.elementwise import _convert_element_type
  return _convert_element_type(x, aval.dtype, aval.weak_type)


def _trace_branches(funs, ops_tree, ops_avals, describe, weak_from: int = 0):
  """Trace each branch on the operand avals; check that their outputs agree (up to weak types:
  the outputs take branch ``weak_from``'s, as JAX's ``cond`` and ``switch`` give their
  branch 0's (for ``cond``, ``false_fun``)).  Cached by the branch functions' identity
  (``_trace_cache``)."""
  hit, store = _trace_cache.lookup("branches", funs, (ops_tree, tuple(ops_avals), weak_from))
  if hit is not None:
    return hit
  traced = []
  for f in funs:
    cell = []
    closed = pe.trace_to_jaxpr(_flatten_call(f, ops_tree, cell), ops_avals, "branch")
    traced.append((closed, cell[0], cell[1]))
  tree0, avals0 = traced[0][1], traced[0][2]
  for i, (_, tree, avals) in enumerate(traced[1:], 1):
    kind, names = describe(i)
    err = _mm.branch_mismatch(kind, names, (funs[0], funs[i]), tree0, avals0, tree, avals)
    if err is not None:
      raise err
  joined = [a.update(weak_type=traced[weak_from][2][k].weak_type) for k, a in enumerate(avals0)]
  closeds = []
  for f, (closed, _, avals) in zip(funs, traced):
    if [a.weak_type for a in avals] != [a.weak_type for a in joined]:
      closed = pe.trace_to_jaxpr(_flatten_call(f, ops_tree, [], joined), ops_avals, "branch")
    closeds.append(closed)
  return store((closeds, tree0), closeds)


def _carry_name(fun, index=0):
  try:
    params = list(inspect.signature(fun).parameters)
    return params[index] if len(params) > index else None
  except (TypeError, ValueError):
    return None


def _check_carry(what, carry_name, init_tree, in_avals, out_tree, out_avals):
  """The body's carry output must have the carry input's structure and types (``what``: 'scan
  body', 'while_loop body'; the messages are JAX's)."""
  name = carry_name or ""

  def comp(path):
    return (f"the input carry component {name}{_mm.path_str(path)}" if path
            else f"the input carry {name}".rstrip())
  if out_tree != init_tree:
    items = [f"{comp(p)} is {da} but the corresponding component of the carry output is {db}, "
             f"so {why}" for p, da, db, why in _mm.structure_diffs(init_tree, out_tree)]
    raise TypeError(f"{what} function carry input and carry output must have the same pytree "
                    f"structure, but they differ:\n\n{_mm.join(items)}\n\nRevise the function "
                    "so that the carry output has the same pytree structure as the carry input.")
  paths = [p for p, _ in tree_flatten_with_path(tree_unflatten(init_tree, in_avals))[0]]
  items = [f"{comp(path)} has type {_mm.aval_str(a)} but the corresponding output carry "
           f"component has type {_mm.aval_str(b)}, so {_mm.type_reason(a, b)}"
           for path, a, b in zip(paths, in_avals, out_avals) if not core.typematch(a, b)]
  if items:
    raise TypeError(f"{what} function carry input and carry output must have equal types, but "
                    f"they differ:\n\n{_mm.join(items)}\n\nRevise the function so that all "
                    "output types match the corresponding input types.")


def _promote_weak_carries(init_flat, in_avals, out_avals):
  """As JAX: a weakly typed initial carry (a Python scalar) whose type differs from the body's
  output carry (``0`` with a float body) is converted to ``result_type(init, out)`` (strongly
  typed) and the body traced again.  One that differs only in weak type stays weak in the body
  (see ``_loop_result_types``).  Returns (init_flat, in_avals, changed)."""
  from ourjax.lax.elementwise import _convert_element_type
  changed = False
  new_init, new_avals = [], []
  for x, a, b in zip(init_flat, in_avals, out_avals):
    if a.weak_type and not core.typematch(a, b):
      x = _convert_element_type(x, dtypes.result_type(x, b), False)
      a = get_aval(x)
      changed = True
    new_init.append(x)
    new_avals.append(a)
  return new_init, new_avals, changed


def _loop_result_types(outs, in_avals, out_avals):
  """A loop's final carry has the type of the body's output carry, as in JAX: a weak initial
  carry that the body makes strong (``0.0`` plus a float32 array) comes out strong, though the
  body (and what it computes from the carry) saw it weak."""
  from ourjax.lax.elementwise import _convert_element_type
  return [_convert_element_type(x, b.dtype, False)
          if a.weak_type and not b.weak_type and core.typematch(a, b) else x
          for x, a, b in zip(outs, in_avals, out_avals)]


def _forwarded(x, aval):
  """An operand returned as an output: itself when it is an array or tracer, else (a Python
  or NumPy scalar) the Array it stands for."""
  if isinstance(x, core.Tracer):
    return x
  from ourjax.array import Array
  return x if isinstance(x, Array) and x.aval == aval else _as_arrays([x], [aval])[0]
