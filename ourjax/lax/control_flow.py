"""Structured control flow: ``cond``/``switch``, ``while_loop``/``fori_loop``, ``scan``/``map``.

Each construct is one primitive whose parameters hold closed jaxprs of the user's functions
(``cond_p`` with ``branches``, ``while_p`` with ``cond_jaxpr``/``body_jaxpr``, ``scan_p`` with
``jaxpr``), so a jaxpr stays a flat list of equations and every transformation handles a loop by
transforming its body once:

* JVP: the body's JVP, with the tangents as extra operands/carries.  For loops, which carries
  get a nonzero tangent is found by a fixed point (a carry whose tangent starts at zero may pick
  one up in the body).
* Partial evaluation (reverse mode): ``cond`` and ``scan`` split their sub-jaxprs into a known
  part, run now, and an unknown part, staged.  ``scan`` saves the residuals the unknown part
  needs as stacked per-iteration outputs of the known scan (loop-invariant residuals are
  computed once, outside the loop).  ``while_loop`` computes its known carries with a known loop
  and stages the whole loop for the rest; it has no transpose (reverse mode raises JAX's error).
* Transposition: ``cond`` transposes each branch; ``scan`` runs the transposed body backwards,
  accumulating the cotangents of linear loop constants in the carry.
* Batching: each body is batched, again with a fixed point over which carries are batched; a
  batched ``cond`` predicate becomes a ``select_n`` of the branches' outputs, and a batched
  ``while_loop`` predicate runs until every lane is done, freezing finished lanes.
* DCE: unused outputs (and the carries nothing needs) are dropped from the bodies.

Closed jaxprs stored in parameters never hold constants: constants (including tracers of
enclosing transformations that a body closes over) are hoisted into explicit operands, so every
transformation sees them.  Eager evaluation (``def_custom_impl``) runs the bodies with Python
loops over ``core.eval_jaxpr``: that is the reference semantics.  The HLO lowerings are in
``_control_flow_lowering.py``; the traced bodies are cached by the user functions' identity
(``_trace_cache.py``), as JAX caches them.
"""
from __future__ import annotations

import builtins
import inspect
import weakref
from typing import Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.config import config
from ourjax.core import ClosedJaxpr, Jaxpr, Literal, Primitive, ShapedArray, Var, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import (keystr, tree_flatten, tree_flatten_with_path, tree_unflatten)
from ourjax.lax import _loop_forwarding as _lf
from ourjax.lax import _mismatch as _mm
from ourjax.lax import _trace_cache

_any = builtins.any
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


def _trace_branches(funs, ops_tree, ops_avals, describe, join_weak: bool = True):
  """Trace each branch on the operand avals; check that their outputs agree (up to weak types,
  which are joined: an output is weak only if it is weak in every branch; with ``join_weak``
  False, as JAX's ``switch`` does, the outputs take the first branch's weak types).  Cached
  by the branch functions' identity (``_trace_cache``)."""
  hit, store = _trace_cache.lookup("branches", funs, (ops_tree, tuple(ops_avals), join_weak))
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
  joined = [a.update(weak_type=_all(t[2][k].weak_type for t in traced)) if join_weak else a
            for k, a in enumerate(avals0)]
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


# ------------------------------------------------------------------------------------------------
# cond / switch
#
# cond_p(index, *operands; branches): runs branches[clamp(index)] on the operands.  The
# operands include the branches' hoisted constants.


cond_p = Primitive("cond")
cond_p.multiple_results = True


def _cond_abstract_eval(index, *ops, branches):
  if index.shape != () or index.dtype != np.int32:
    raise TypeError(f"cond: the branch index must be an int32 scalar, got {index.str_short()}")
  for i, b in enumerate(branches):
    _check_operands("cond", f"branch {i}", b.in_avals, ops)
  for i, b in enumerate(branches[1:], 1):
    if not _all(_map(core.typematch, branches[0].out_avals, b.out_avals)):
      raise TypeError(f"cond: branches 0 and {i} have different output types")
  return list(branches[0].out_avals)


cond_p.def_abstract_eval(_cond_abstract_eval)


def _cond_impl(index, *ops, branches):
  from ourjax.array import to_numpy
  i = int(np.clip(int(to_numpy(index)), 0, len(branches) - 1))
  b = branches[i]
  return _as_arrays(core.eval_jaxpr(b.jaxpr, b.consts, *ops), b.out_avals)


cond_p.def_custom_impl(_cond_impl)


def _bind_cond(index, ops, closeds):
  branches, consts = _join_consts(closeds)
  return cond_p.bind(index, *consts, *ops, branches=tuple(branches))


_no_operand = object()


def cond(*args, **kwargs):
  """``cond(pred, true_fun, false_fun, *operands)``: ``true_fun(*operands)`` if ``pred`` else
  ``false_fun(*operands)``, staged as one ``cond`` primitive (both branches are traced).  The
  older form ``cond(pred, true_operand, true_fun, false_operand, false_fun)`` is accepted."""
  if (len(args) == 5 and not kwargs and not (callable(args[1]) and callable(args[2]))
      and callable(args[2]) and callable(args[4])):
    pred, t_op, t_fun, f_op, f_fun = args
    return _cond(pred, lambda ops: t_fun(ops[0]), lambda ops: f_fun(ops[1]), (t_op, f_op))
  return _cond(*args, **kwargs)


def _cond(pred, true_fun: Callable, false_fun: Callable, *operands, operand=_no_operand):
  from ourjax.lax.elementwise import _const, convert_element_type, ne
  if not (callable(true_fun) and callable(false_fun)):
    raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
  if operand is not _no_operand:
    if operands:
      raise TypeError("if 'operand' keyword is passed then no positional operands can be "
                      f"passed, got operand={operand} and positional operands {operands}")
    operands = (operand,)
  if pred is None:
    raise TypeError("cond predicate is None")
  if isinstance(pred, (list, tuple, str)):
    raise TypeError(f"Pred must be a scalar, got {pred} of type {type(pred)}")
  try:
    pa = get_aval(pred)
  except TypeError:
    raise TypeError(f"Pred type must be either boolean or number, got {pred}.") from None
  if pa.shape != ():
    raise TypeError(f"Pred must be a scalar, got {pred} of shape {pa.shape}.")
  if pa.dtype != np.bool_:
    if dtypes.is_integer(pa.dtype) or dtypes.is_float(pa.dtype):
      pred = ne(pred, _const(pred, 0))        # any nonzero number is true, as JAX
    else:
      raise TypeError(f"Pred type must be either boolean or number, got {pa.dtype.name}.")
  if config.jax_disable_jit and core.is_concrete(pred):
    return true_fun(*operands) if bool(pred) else false_fun(*operands)
  ops, ops_tree = tree_flatten(operands)
  ops_avals = [get_aval(x) for x in ops]
  closeds, out_tree = _trace_branches((true_fun, false_fun), ops_tree, ops_avals,
                                      lambda i: ("cond", ("true_fun", "false_fun")))
  index = convert_element_type(pred, np.int32)
  return tree_unflatten(out_tree, _bind_cond_forwarding(index, ops, closeds[::-1]))


def _forwarded_operands(closeds):
  """For each output: the operand index that every branch returns unchanged there, or None."""
  fwd = []
  for k in range(len(closeds[0].jaxpr.outvars)):
    idx = set()
    for c in closeds:
      v = c.jaxpr.outvars[k]
      j = next((i for i, w in enumerate(c.jaxpr.invars) if w is v), None)
      idx.add(j)
    j = idx.pop() if len(idx) == 1 else None
    fwd.append(j if j is not None and
               core.typematch(closeds[0].out_avals[k], closeds[0].in_avals[j]) and
               closeds[0].out_avals[k].weak_type == closeds[0].in_avals[j].weak_type
               else None)
  return fwd


def _bind_cond_forwarding(index, ops, closeds):
  """``_bind_cond``, with the outputs that every branch passes through unchanged taken from
  the operands directly (as JAX forwards them): they stay the operands themselves, and stay
  unbatched under vmap when the operand is."""
  fwd = _forwarded_operands(closeds)
  if not any(j is not None for j in fwd):
    return _bind_cond(index, ops, closeds)
  keep = [k for k, j in enumerate(fwd) if j is None]
  slim = [_with_io(c.jaxpr, c.jaxpr.invars, [c.jaxpr.outvars[k] for k in keep]) if not c.consts
          else ClosedJaxpr(Jaxpr(c.jaxpr.constvars, c.jaxpr.invars, c.jaxpr.eqns,
                                 [c.jaxpr.outvars[k] for k in keep], c.jaxpr.debug_name),
                           c.consts) for c in closeds]
  outs = iter(_bind_cond(index, ops, slim) if keep else [])
  return [_forwarded(ops[j], closeds[0].in_avals[j]) if j is not None else next(outs)
          for j in fwd]


def _forwarded(x, aval):
  """An operand returned as an output: itself when it is an array or tracer, else (a Python
  or NumPy scalar) the Array it stands for."""
  if isinstance(x, core.Tracer):
    return x
  from ourjax.array import Array
  return x if isinstance(x, Array) and x.aval == aval else _as_arrays([x], [aval])[0]


def switch(index, branches: Sequence[Callable], *operands, operand=_no_operand):
  """``branches[clamp(index, 0, len(branches) - 1)](*operands)``."""
  from ourjax.lax.elementwise import clamp, convert_element_type
  if not isinstance(branches, (list, tuple)) or not _all(_map(callable, branches)):
    raise TypeError("lax.switch: branches argument should be a sequence of callables.")
  if operand is not _no_operand:
    if operands:
      raise TypeError("if 'operand' keyword is passed then no positional operands can be "
                      f"passed, got operand={operand} and positional operands {operands}")
    operands = (operand,)
  if isinstance(index, (list, tuple)):
    raise TypeError(f"Branch index must be scalar, got {index} of shape {np.shape(index)}.")
  try:
    ia = get_aval(index)
  except TypeError:
    raise TypeError(f"Index type must be an integer, got {index}.") from None
  if ia.shape != ():
    raise TypeError(f"Branch index must be scalar, got {index} of shape {ia.shape}.")
  if not dtypes.is_integer(ia.dtype):
    raise TypeError(f"Index type must be an integer, got {index} as {ia.dtype.name}")
  branches = tuple(branches)
  if not branches:
    raise ValueError("Empty branch sequence")
  if len(branches) == 1:
    return branches[0](*operands)
  index = convert_element_type(index, np.int32)
  index = clamp(np.int32(0), index, np.int32(len(branches) - 1))
  if config.jax_disable_jit and core.is_concrete(index):
    return branches[int(index)](*operands)
  ops, ops_tree = tree_flatten(operands)
  ops_avals = [get_aval(x) for x in ops]
  closeds, out_tree = _trace_branches(branches, ops_tree, ops_avals,
                                      lambda i: ("switch", ("branch 0", f"branch{i}")),
                                      join_weak=False)
  return tree_unflatten(out_tree, _bind_cond(index, ops, closeds))


def _cond_jvp(primals, tangents, *, branches):
  index, *ops = primals
  _, *ops_dot = tangents
  nout = len(branches[0].out_avals)
  ops_nz = [type(t) is not ad.Zero for t in ops_dot]
  out_nz = [False] * nout
  for b in branches:
    out_nz = _or(out_nz, _jvp_jaxpr(b, ops_nz, [False] * nout)[1])
  jvps = [_jvp_jaxpr(b, ops_nz, out_nz)[0] for b in branches]
  outs = _bind_cond(index, list(ops) + [t for t in ops_dot if type(t) is not ad.Zero], jvps)
  primals_out, tans = outs[:nout], iter(outs[nout:])
  return primals_out, [next(tans) if nz else ad.Zero.from_primal_value(p)
                       for p, nz in zip(primals_out, out_nz)]


ad.jvp_rules[cond_p] = _cond_jvp


def _merge_residual_slots(res_avals):
  """Residual slots shared by branches: ``(slot avals, per branch the slot of each of its
  residuals)``; a slot holds one type, and as many slots of a type as the branch that needs
  most of them."""
  slots, assign = [], []
  for avals in res_avals:
    used, idx = set(), []
    for a in avals:
      j = next((k for k, sa in enumerate(slots) if k not in used and sa == a), None)
      if j is None:
        slots.append(a)
        j = len(slots) - 1
      used.add(j)
      idx.append(j)
    assign.append(idx)
  return slots, assign


def _cond_partial_eval(trace, tracers, *, branches):
  if not tracers[0].pval.is_known:     # unknown index: stage the whole cond
    return trace.default_process_primitive(cond_p, tracers, dict(branches=branches))
  ops_uk = [not t.pval.is_known for t in tracers[1:]]
  nout = len(branches[0].out_avals)
  out_uk = [False] * nout
  for b in branches:
    out_uk = _or(out_uk, _pe_jaxpr(b, ops_uk, [False] * nout)[2])
  splits = [_pe_jaxpr(b, ops_uk, out_uk) for b in branches]
  # the branches' residuals share slots (as JAX merges them): a residual goes to a slot of its
  # type that its branch does not use yet; a branch returns zeros in the slots it does not use
  res_avals = [list(jk.out_avals[len(jk.out_avals) - nres:]) for jk, _, _, nres in splits]
  slots, assign = _merge_residual_slots(res_avals)
  n_known_out = nout - sum(out_uk)
  known_avals = [t.aval for t in tracers[1:] if t.pval.is_known]
  knowns, unknowns = [], []
  for i, (jk, ju, _, nres) in enumerate(splits):
    def known_fun(*xs, jk=jk, i=i):
      outs = core.closed_call(jk, *xs)
      vals = [None] * len(slots)
      for r, j in zip(outs[n_known_out:], assign[i]):
        vals[j] = r
      return outs[:n_known_out] + [ad.zeros_like_aval(a) if v is None else v
                                   for v, a in zip(vals, slots)]
    knowns.append(pe.trace_to_jaxpr(known_fun, known_avals, "known"))
    res_vars, unk_vars = ju.invars[:nres], ju.invars[nres:]
    lead = [Var(a) for a in slots]
    for v, j in zip(res_vars, assign[i]):
      lead[j] = v
    unknowns.append(_with_io(ju, lead + unk_vars))
  index = tracers[0].pval.const
  known_ops = [t.pval.const for t in tracers[1:] if t.pval.is_known]
  outs = _bind_cond(index, known_ops, knowns)
  outs_k, res = outs[:n_known_out], outs[n_known_out:]
  outs_u = []
  if _any(out_uk):
    in_tracers = ([trace.instantiate_const(tracers[0])]
                  + [trace.instantiate_const(trace.pure(r)) for r in res]
                  + [t for t in tracers[1:] if not t.pval.is_known])
    outs_u = trace.default_process_primitive(cond_p, in_tracers,
                                             dict(branches=tuple(unknowns)))
  outs_k, outs_u = iter(outs_k), iter(outs_u)
  return [next(outs_u) if uk else trace.pure(next(outs_k)) for uk in out_uk]


pe.partial_eval_rules[cond_p] = _cond_partial_eval


def _cond_transpose(cts, index, *ops, branches):
  if ad.is_undefined_primal(index):
    raise ValueError("cond: cannot transpose with respect to the branch index")
  lin = [ad.is_undefined_primal(x) for x in ops]
  res = [x for x in ops if not ad.is_undefined_primal(x)]
  ct_nz = [type(c) is not ad.Zero for c in cts]
  cts_nz = [c for c in cts if type(c) is not ad.Zero]
  in_avals = [get_aval(r) for r in res] + [get_aval(c) for c in cts_nz]

  def make_bwd(b):
    def bwd(*args):
      rs, cs = iter(args[:len(res)]), iter(args[len(res):])
      full = [ad.UndefinedPrimal(x.aval) if l else next(rs) for x, l in zip(ops, lin)]
      full_cts = [next(cs) if nz else ad.Zero(ad.tangent_aval(a))
                  for a, nz in zip(b.out_avals, ct_nz)]
      return [ad.instantiate_zeros(c) for c in ad.backward_pass(b.jaxpr, b.consts, full,
                                                                full_cts)]
    return pe.trace_to_jaxpr(bwd, in_avals, "transpose")

  outs = iter(_bind_cond(index, res + cts_nz, [make_bwd(b) for b in branches]))
  return [None] + [next(outs) if l else None for l in lin]


ad.transpose_rules[cond_p] = _cond_transpose


def _bcast_to(which, like):
  """Broadcast a (B,) selector to the shape of ``like`` (B, ...)."""
  from ourjax.lax.structural import broadcast_in_dim
  shape = get_aval(like).shape
  return which if len(shape) == 1 else broadcast_in_dim(which, shape, (0,))


def _cond_batch(vals, dims, *, axis_size, branches):
  from ourjax.lax.elementwise import _const, eq, select_n, stop_gradient
  index, *ops = vals
  index_dim, *op_dims = dims
  nout = len(branches[0].out_avals)
  if index_dim is not None:
    # a per-lane branch index: run every branch on all lanes and select the outputs lane-wise
    index, *ops = [batching.bdim_at_front(x, d, axis_size) for x, d in zip(vals, dims)]
    outs_per_branch = []
    for i, b in enumerate(branches):
      bj, _ = _batch_jaxpr(b, axis_size, [True] * len(ops), [True] * nout)
      taken = eq(index, _const(index, i))
      # lanes that do not take branch i see constants: no gradient flows through them
      ops_i = [select_n(_bcast_to(taken, x), stop_gradient(x), x)
               if dtypes.is_inexact(get_aval(x).dtype) else x for x in ops]
      bj, consts = _hoist(bj)
      outs_per_branch.append(core.eval_jaxpr(bj.jaxpr, [], *consts, *ops_i))
    outs = [select_n(_bcast_to(index, outs[0]), *outs) for outs in zip(*outs_per_branch)]
    return outs, [0] * nout
  ops_b = [d is not None for d in op_dims]
  ops = [batching.moveaxis(x, d, 0) if d is not None else x for x, d in zip(ops, op_dims)]
  out_b = [False] * nout
  for b in branches:
    out_b = _or(out_b, _batch_jaxpr(b, axis_size, ops_b, [False] * nout)[1])
  batched = [_batch_jaxpr(b, axis_size, ops_b, out_b)[0] for b in branches]
  outs = _bind_cond(index, ops, batched)
  return outs, [0 if b else None for b in out_b]


batching.register_rule_with_axis_size(cond_p, _cond_batch)


def _cond_dce(eqn, used_outputs):
  branches = eqn.params["branches"]
  dced = [pe.dce_jaxpr(b.jaxpr, used_outputs) for b in branches]
  used_ops = [False] * len(branches[0].in_avals)
  for _, used in dced:
    used_ops = _or(used_ops, used)
  new_branches = tuple(_prune_invars(j, used_ops) for j, _ in dced)
  index, *ops = eqn.inputs
  new_eqn = eqn._replace(
      inputs=[index] + [x for x, u in zip(ops, used_ops) if u],
      out_binders=[v for v, u in zip(eqn.out_binders, used_outputs) if u],
      params=dict(eqn.params, branches=new_branches))
  return [True] + used_ops, new_eqn


pe.dce_rules[cond_p] = _cond_dce

# ------------------------------------------------------------------------------------------------
# while_loop / fori_loop
#
# while_p(*cond_consts, *body_consts, *init; cond_jaxpr, body_jaxpr, cond_nconsts,
# body_nconsts): while cond_jaxpr(*cond_consts, *carry): carry = body_jaxpr(*body_consts, *carry)


while_p = Primitive("while")
while_p.multiple_results = True


def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  cconsts, bconsts, carry = _split(avals, [cond_nconsts, body_nconsts])
  _check_operands("while", "cond_jaxpr", cond_jaxpr.in_avals, cconsts + carry)
  _check_operands("while", "body_jaxpr", body_jaxpr.in_avals, bconsts + carry)
  pred = cond_jaxpr.out_avals
  if len(pred) != 1 or pred[0].shape != () or pred[0].dtype != np.bool_:
    raise TypeError(f"while: cond_jaxpr must return a boolean scalar, got "
                    f"{[a.str_short() for a in pred]}")
  if not _all(_map(core.typematch, body_jaxpr.out_avals, carry)):
    raise TypeError("while: body_jaxpr output types differ from the carry types")
  return list(body_jaxpr.out_avals)


while_p.def_abstract_eval(_while_abstract_eval)


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  from ourjax.array import to_numpy
  cconsts, bconsts, carry = _split(args, [cond_nconsts, body_nconsts])
  while True:
    pred, = core.eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *cconsts, *carry)
    if not bool(to_numpy(pred)):
      break
    carry = core.eval_jaxpr(body_jaxpr.jaxpr, body_jaxpr.consts, *bconsts, *carry)
  return _as_arrays(carry, body_jaxpr.out_avals)


while_p.def_custom_impl(_while_impl)


def _bind_while(cond_closed, cconsts, body_closed, bconsts, init):
  cond_closed, c_extra = _hoist(cond_closed)
  body_closed, b_extra = _hoist(body_closed)
  cconsts = c_extra + list(cconsts)
  bconsts = b_extra + list(bconsts)
  return while_p.bind(*cconsts, *bconsts, *init, cond_jaxpr=cond_closed,
                      body_jaxpr=body_closed, cond_nconsts=len(cconsts),
                      body_nconsts=len(bconsts))


def _leaves_as_arrays(tree):
  from ourjax.array import Array
  leaves, treedef = tree_flatten(tree)
  return tree_unflatten(treedef, [x if isinstance(x, (Array, core.Tracer)) else Array(
      np.array(x, dtype=get_aval(x).dtype), weak_type=get_aval(x).weak_type) for x in leaves])


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
  """``while cond_fun(val): val = body_fun(val)``; returns the final ``val``.  Forward-mode
  differentiable (reverse mode needs a static trip count: use ``scan`` or ``fori_loop``)."""
  if not (callable(cond_fun) and callable(body_fun)):
    raise TypeError("lax.while_loop: body_fun and cond_fun arguments should be callable.")
  if config.jax_disable_jit:
    # a Python loop over arrays (NumPy leaves become Arrays, so a body that updates its carry
    # in place cannot alias it); a traced predicate (under vmap, ...) falls back to the
    # primitive, as in JAX
    try:
      val = _leaves_as_arrays(init_val)
      while cond_fun(val):
        val = _leaves_as_arrays(body_fun(val))
      return val
    except core.ConcretizationTypeError:
      pass
  init_flat, init_tree = tree_flatten(init_val)
  args_tree = tree_flatten((init_val,))[1]
  in_avals = [get_aval(x) for x in init_flat]

  def trace(in_avals):      # (cached by the functions' identity: _trace_cache)
    hit, store = _trace_cache.lookup("while_loop", (cond_fun, body_fun),
                                     (args_tree, tuple(in_avals)))
    if hit is not None:
      return hit
    cc, bc = [], []
    cond_closed = pe.trace_to_jaxpr(_flatten_call(cond_fun, args_tree, cc), in_avals,
                                    "cond_fun")
    body_closed = pe.trace_to_jaxpr(_flatten_call(body_fun, args_tree, bc, in_avals),
                                    in_avals, "body_fun")
    return store((cond_closed, cc, body_closed, bc), (cond_closed, body_closed))

  cond_closed, cc, body_closed, bc = trace(in_avals)
  if bc[0] != init_tree:
    _check_carry("while_loop body", _carry_name(body_fun), init_tree, in_avals, bc[0],
                 bc[1])
  init_flat, in_avals, changed = _promote_weak_carries(init_flat, in_avals, bc[1])
  if changed:
    cond_closed, cc, body_closed, bc = trace(in_avals)
  _check_carry("while_loop body", _carry_name(body_fun), init_tree, in_avals, bc[0], bc[1])
  pred_tree, pred_avals = cc
  if pred_tree.num_leaves != 1 or len(pred_avals) != 1:
    raise TypeError(f"cond_fun must return a boolean scalar, but got pytree {pred_tree}.")
  if pred_avals[0].shape != () or pred_avals[0].dtype != np.bool_:
    raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                    f"[{pred_avals[0]!r}].")
  # carries the body returns unchanged and cond_fun does not read are loop constants of the
  # body (see _loop_forwarding)
  move = _lf.forwarded_carries(body_closed, len(init_flat))
  if _any(move):
    cond_dce, unread = _lf.unused_by(cond_closed)
    move = [m and u for m, u in zip(move, unread)]
  if _any(move):
    cond_closed = _lf.drop_inputs(cond_dce, move)
    body_closed = _lf.carries_to_consts(body_closed, move)
  fixed, carried = _lf.split(init_flat, move)
  outs = _bind_while(cond_closed, [], body_closed, fixed, carried)
  kept = [_forwarded(x, a) for x, a, m in zip(init_flat, in_avals, move) if m]
  outs = _lf.merge(move, kept, outs)
  return tree_unflatten(init_tree, _loop_result_types(outs, in_avals, bc[1]))


_FORI_BODIES = weakref.WeakKeyDictionary()


def _fori_body(kind: str, body_fun):
  """The scan body ('scan') or while_loop body ('while') running ``body_fun(i, x)``: one
  function object per ``body_fun`` (so that the loop's trace is cached, as JAX's), holding it
  only weakly (a cached wrapper must not keep its key alive)."""
  from ourjax.lax.elementwise import _const, add
  try:
    hit = _FORI_BODIES.get(body_fun)
  except TypeError:            # not weakly referenceable / hashable: a wrapper of its own
    hit, ref = None, (lambda f=body_fun: f)
  else:
    ref = weakref.ref(body_fun)
  if hit is not None and kind in hit:
    return hit[kind]
  if kind == "scan":
    def wrapper(carry, _):
      i, x = carry
      return (add(i, _const(i, 1)), ref()(i, x)), None
  else:
    def wrapper(c):
      i, hi, x = c
      return add(i, _const(i, 1)), hi, ref()(i, x)
  try:
    _FORI_BODIES.setdefault(body_fun, {})[kind] = wrapper
  except TypeError:
    pass
  return wrapper


def _fori_cond(c):
  from ourjax.lax.elementwise import lt
  i, hi, _ = c
  return lt(i, hi)


def fori_loop(lower, upper, body_fun: Callable, init_val, *, unroll=None):
  """``for i in range(lower, upper): val = body_fun(i, val)``.  With concrete bounds this is a
  ``scan`` (reverse-mode differentiable); with traced bounds a ``while_loop``."""
  from ourjax.lax.elementwise import convert_element_type
  if not callable(body_fun):
    raise TypeError("lax.fori_loop: body_fun argument should be callable.")
  la, ua = get_aval(lower), get_aval(upper)
  if la.shape != () or ua.shape != ():
    raise TypeError(f"lax.fori_loop: lower and upper must be scalars, got shapes {la.shape} "
                    f"and {ua.shape}")
  if la.dtype != ua.dtype and not (la.weak_type or ua.weak_type):
    raise TypeError(f"lower and upper arguments to fori_loop must have equal types, got "
                    f"{la.dtype.name} and {ua.dtype.name}")
  if core.is_concrete(lower) and core.is_concrete(upper):
    # as JAX: the trip count is static and the loop index starts from ``int(lower)``, a Python
    # int (so it is weakly typed, whatever the bounds' dtype)
    from ourjax.array import to_numpy
    lo, hi = int(to_numpy(lower)), int(to_numpy(upper))
    if config.jax_disable_jit and hi <= lo:
      return init_val      # (scan without jit refuses zero trips; the loop runs none)
    (_, result), _ = scan(_fori_body("scan", body_fun), (lo, init_val), None,
                          length=max(hi - lo, 0), unroll=1 if unroll is None else unroll)
    return result
  if la.dtype != ua.dtype:       # one is weakly typed: it takes the other's dtype
    dt = ua.dtype if la.weak_type else la.dtype
    lower, upper = convert_element_type(lower, dt), convert_element_type(upper, dt)
  if unroll is not None and unroll is not False and unroll != 1:
    raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are statically "
                     "known.")

  _, _, result = while_loop(_fori_cond, _fori_body("while", body_fun), (lower, upper, init_val))
  return result


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  nk = len(body_jaxpr.out_avals)
  cconsts, bconsts, init = _split(primals, [cond_nconsts, body_nconsts])
  _, bconst_dot, init_dot = _split(tangents, [cond_nconsts, body_nconsts])
  bconst_nz = [type(t) is not ad.Zero for t in bconst_dot]
  carry_nz = [type(t) is not ad.Zero for t in init_dot]
  carry_nz = _fixpoint(carry_nz, lambda nz: _jvp_jaxpr(body_jaxpr, bconst_nz + nz, nz)[1])
  body_jvp, _ = _jvp_jaxpr(body_jaxpr, bconst_nz + carry_nz, carry_nz)
  # the JVP body takes (consts, carry, const tangents, carry tangents); while_p wants the
  # consts first: (consts, const tangents, carry, carry tangents)
  p_b, p_k, t_b, t_k = _split(body_jvp.jaxpr.invars, [body_nconsts, nk, sum(bconst_nz)])
  body_jvp = ClosedJaxpr(Jaxpr(body_jvp.jaxpr.constvars, p_b + t_b + p_k + t_k,
                               body_jvp.jaxpr.eqns, body_jvp.jaxpr.outvars), body_jvp.consts)
  cj = cond_jaxpr.jaxpr
  tan_avals = [ad.tangent_aval(a) for a, nz in zip(body_jaxpr.out_avals, carry_nz) if nz]
  cond_jvp = _with_io(cj, cj.invars + [Var(a) for a in tan_avals])
  init_t = [ad.instantiate_zeros(t) for t, nz in zip(init_dot, carry_nz) if nz]
  outs = _bind_while(cond_jvp, cconsts, body_jvp,
                     bconsts + [t for t in bconst_dot if type(t) is not ad.Zero],
                     list(init) + init_t)
  primals_out, tans = outs[:nk], iter(outs[nk:])
  return primals_out, [next(tans) if nz else ad.Zero.from_primal_value(p)
                       for p, nz in zip(primals_out, carry_nz)]


ad.jvp_rules[while_p] = _while_jvp


def _while_partial_eval(trace, tracers, *, cond_jaxpr, body_jaxpr, cond_nconsts,
                        body_nconsts):
  """Known carries are computed now by a loop over the known part of the body; the whole loop
  is staged for the unknown ones (it is not transposable, so reverse mode stops there)."""
  params = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                body_nconsts=body_nconsts)
  nk = len(body_jaxpr.out_avals)
  uk = [not t.pval.is_known for t in tracers]
  cconst_uk, bconst_uk, carry_uk = _split(uk, [cond_nconsts, body_nconsts])
  if _any(cconst_uk):
    return trace.default_process_primitive(while_p, tracers, params)
  carry_uk = _fixpoint(carry_uk,
                       lambda c: _pe_jaxpr(body_jaxpr, bconst_uk + c, c)[2])
  cond_k, _, cond_out_uk, cond_nres = _pe_jaxpr(cond_jaxpr, cconst_uk + carry_uk, [False])
  if cond_out_uk[0] or _all(carry_uk):
    return trace.default_process_primitive(while_p, tracers, params)
  body_k, _, _, body_nres = _pe_jaxpr(body_jaxpr, bconst_uk + carry_uk, carry_uk)
  nkk = nk - sum(carry_uk)
  cond_k = _dce_outputs(cond_k, [True] + [False] * cond_nres)
  body_k = _dce_outputs(body_k, [True] * nkk + [False] * body_nres)
  cconsts, bconsts, init = _split(tracers, [cond_nconsts, body_nconsts])
  known = lambda ts: [t.pval.const for t in ts if t.pval.is_known]
  outs_k = _bind_while(cond_k, known(cconsts), body_k, known(bconsts),
                       [t.pval.const for t, u in zip(init, carry_uk) if not u])
  outs_u = trace.default_process_primitive(while_p, tracers, params)
  outs_k = iter(outs_k)
  return [o if u else trace.pure(next(outs_k)) for o, u in zip(outs_u, carry_uk)]


pe.partial_eval_rules[while_p] = _while_partial_eval


def _while_transpose_error(*_, **__):
  raise ValueError("Reverse-mode differentiation does not work for lax.while_loop or "
                   "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or using "
                   "fori_loop with static start/stop.")


ad.transpose_rules[while_p] = _while_transpose_error


def _while_batch(vals, dims, *, axis_size, cond_jaxpr, body_jaxpr, cond_nconsts,
                 body_nconsts):
  from ourjax.lax.elementwise import select_n
  from ourjax.lax.reductions import reduce_or
  nk = len(body_jaxpr.out_avals)
  bat = [d is not None for d in dims]
  cconst_b, bconst_b, carry_b = _split(bat, [cond_nconsts, body_nconsts])
  carry_b = _fixpoint(carry_b,
                      lambda c: _batch_jaxpr(body_jaxpr, axis_size, bconst_b + c, c)[1])
  _, (pred_b,) = _batch_jaxpr(cond_jaxpr, axis_size, cconst_b + carry_b, [False])
  if pred_b:
    carry_b = [True] * nk      # lanes finish at different times: every carry is per-lane
  vals = [batching.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
  cconsts, bconsts, init = _split(vals, [cond_nconsts, body_nconsts])
  init = [batching.broadcast(x, axis_size, 0) if b and not b0 else x
          for x, b, b0 in zip(init, carry_b, bat[cond_nconsts + body_nconsts:])]
  body_b, _ = _batch_jaxpr(body_jaxpr, axis_size, bconst_b + carry_b, carry_b)
  if not pred_b:
    cond_b, _ = _batch_jaxpr(cond_jaxpr, axis_size, cconst_b + carry_b, [False])
    outs = _bind_while(cond_b, cconsts, body_b, bconsts, init)
    return outs, [0 if b else None for b in carry_b]
  cond_b, _ = _batch_jaxpr(cond_jaxpr, axis_size, cconst_b + carry_b, [True])
  cond_b, cc_extra = _hoist(cond_b)
  body_b, bc_extra = _hoist(body_b)
  cconsts = cc_extra + cconsts
  bconsts = bc_extra + bconsts
  nc, nb = len(cconsts), len(bconsts)

  def new_cond(*args):
    pred, = core.eval_jaxpr(cond_b.jaxpr, [], *args)
    return [reduce_or(pred, (0,))]

  def new_body(*args):
    cc, bc, carry = _split(args, [nc, nb])
    pred, = core.eval_jaxpr(cond_b.jaxpr, [], *cc, *carry)
    new = core.eval_jaxpr(body_b.jaxpr, [], *bc, *carry)
    return [select_n(_bcast_to(pred, n), old, n) for old, n in zip(carry, new)]

  avals = lambda xs: [get_aval(x) for x in xs]
  cond_c = pe.trace_to_jaxpr(new_cond, avals(cconsts) + avals(init), "cond")
  body_c = pe.trace_to_jaxpr(new_body, avals(cconsts) + avals(bconsts) + avals(init), "body")
  outs = _bind_while(cond_c, cconsts, body_c, cconsts + bconsts, init)
  return outs, [0] * nk


batching.register_rule_with_axis_size(while_p, _while_batch)


def _while_dce(eqn, used_outputs):
  p = eqn.params
  cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  _, cond_used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
  cconst_used, cond_carry_used = cond_used[:nc], cond_used[nc:]
  used_carry = _or(used_outputs, cond_carry_used)
  used_carry = _fixpoint(used_carry,
                         lambda u: pe.dce_jaxpr(body_jaxpr.jaxpr, u)[1][nb:])
  body_j, body_used = pe.dce_jaxpr(body_jaxpr.jaxpr, used_carry)
  bconst_used = body_used[:nb]
  new_body = _prune_invars(body_j, bconst_used + used_carry)
  new_cond = _prune_invars(cond_jaxpr.jaxpr, cconst_used + used_carry)
  used_inputs = cconst_used + bconst_used + used_carry
  new_eqn = eqn._replace(
      inputs=[x for x, u in zip(eqn.inputs, used_inputs) if u],
      out_binders=[v for v, u in zip(eqn.out_binders, used_carry) if u],
      params=dict(p, cond_jaxpr=new_cond, body_jaxpr=new_body, cond_nconsts=sum(cconst_used),
                  body_nconsts=sum(bconst_used)))
  return used_inputs, new_eqn


pe.dce_rules[while_p] = _while_dce

# ------------------------------------------------------------------------------------------------
# scan / map
#
# scan_p(*consts, *init, *xs; jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
# jaxpr maps (consts, carry, x slices) to (new carry, y slices); the ys are stacked along a new
# leading axis of size length.  With reverse=True the iterations run from the last slice to the
# first (ys keep their positions).


scan_p = Primitive("scan")
scan_p.multiple_results = True


def _scan_abstract_eval(*avals, jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
  consts, carry, xs = _split(avals, [num_consts, num_carry])
  if len(linear) != len(avals):
    raise TypeError(f"scan: linear has {len(linear)} entries for {len(avals)} operands")
  for x in xs:
    if not x.shape or x.shape[0] != length:
      raise TypeError(f"scan: scanned operand of type {x.str_short()} does not have leading "
                      f"axis of size length={length}")
  _check_operands("scan", "jaxpr", jaxpr.in_avals,
                  consts + carry + [_slice_aval(x) for x in xs])
  carry_out, ys = _split(jaxpr.out_avals, [num_carry])
  if not _all(_map(core.typematch, carry_out, carry)):
    raise TypeError("scan: jaxpr carry output types differ from the carry input types")
  return carry_out + [_stack_aval(y, length) for y in ys]


scan_p.def_abstract_eval(_scan_abstract_eval)
# printed like JAX's scan, which has no ``linear`` parameter
core.pp_param_rules[scan_p] = lambda params: [(k, v) for k, v in sorted(params.items())
                                              if k != "linear"]


def _scan_impl(*args, jaxpr, length, reverse, num_consts, num_carry, linear, unroll):
  from ourjax.array import Array, to_numpy
  consts, carry, xs = _split(args, [num_consts, num_carry])
  xs_np = [to_numpy(x) for x in xs]
  x_avals = jaxpr.in_avals[num_consts + num_carry:]
  y_avals = jaxpr.out_avals[num_carry:]
  ys = [np.zeros((length,) + a.shape, a.dtype) for a in y_avals]
  for k in range(length):
    i = length - 1 - k if reverse else k
    x_i = [Array._from_result(x[i], a) for x, a in zip(xs_np, x_avals)]
    outs = core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *consts, *carry, *x_i)
    carry = outs[:num_carry]
    for y, o in zip(ys, outs[num_carry:]):
      y[i] = to_numpy(o)
  carry_avals = jaxpr.out_avals[:num_carry]
  return _as_arrays(carry, carry_avals) + [Array._from_result(y, _stack_aval(a, length))
                                           for y, a in zip(ys, y_avals)]


scan_p.def_custom_impl(_scan_impl)


def _bind_scan(closed, consts, init, xs, *, length, reverse, unroll, linear=None):
  closed, extra = _hoist(closed)
  consts = extra + list(consts)
  operands = consts + list(init) + list(xs)
  if linear is None:
    linear = (False,) * len(operands)
  else:
    linear = (False,) * len(extra) + tuple(linear)
  return scan_p.bind(*operands, jaxpr=closed, length=length, reverse=reverse,
                     num_consts=len(consts), num_carry=len(init), linear=tuple(linear),
                     unroll=unroll)


def scan(f: Callable, init, xs=None, length=None, reverse: bool = False, unroll=1,
         _split_transpose: bool = False):
  """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``; returns the final carry
  and the ``y``s stacked along a new leading axis.  Equivalent to::

    def scan(f, init, xs, length=None):
      carry, ys = init, []
      for x in (xs if xs is not None else [None] * length):
        carry, y = f(carry, x)
        ys.append(y)
      return carry, np.stack(ys)
  """
  if not callable(f):
    raise TypeError("lax.scan: f argument should be a callable.")
  xs_flat, xs_tree = tree_flatten(xs)
  xs_avals = [get_aval(x) for x in xs_flat]
  for x, a in zip(xs_flat, xs_avals):
    if not a.shape:
      raise ValueError(f"scan got value with no leading axis to scan over: {x}.")
  lengths = [a.shape[0] for a in xs_avals]
  if length is not None:
    length = core.concrete_or_error(
        int, length, "The `length` argument to `scan` expects a concrete `int` value.")
    if not _all(n == length for n in lengths):
      raise ValueError(f"scan got `length` argument of {length} which disagrees with leading "
                       f"axis sizes {lengths}.")
  else:
    if len(set(lengths)) > 1:
      paths = [keystr(p) for p, _ in tree_flatten_with_path(xs)[0]]
      sizes = ", ".join(f"xs{p} has leading axis size {n}" for p, n in zip(paths, lengths))
      raise ValueError(f"scan got values with different leading axis sizes: {sizes}.")
    if not lengths:
      raise ValueError("scan got no values to scan over and `length` not provided.")
    length = lengths[0]
  unroll = core.concrete_or_error(
      None, unroll, "The `unroll` argument to `scan` expects a concrete `int` or `bool` value.")
  if isinstance(unroll, bool):
    unroll = max(length, 1) if unroll else 1
  unroll = int(unroll)
  if unroll < 0:     # (0, like True, unrolls the whole loop)
    raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")
  if config.jax_disable_jit:
    return _scan_in_python(f, init, xs_flat, xs_tree, length, reverse)
  x_avals = [_slice_aval(a) for a in xs_avals]
  init_flat, init_tree = tree_flatten(init)
  in_avals = [get_aval(x) for x in init_flat]
  n = len(init_flat)

  def trace(carry_avals):      # (cached by the function's identity: _trace_cache)
    hit, store = _trace_cache.lookup(
        "scan", (f,), (init_tree, xs_tree, tuple(carry_avals), tuple(x_avals)))
    if hit is not None:
      return hit
    cell = []

    def body(*args):
      carry = tree_unflatten(init_tree, args[:n])
      x = tree_unflatten(xs_tree, args[n:])
      out = f(carry, x)
      if not isinstance(out, (tuple, list)) or len(out) != 2:
        try:
          what = get_aval(out).str_short(short_dtypes=False)    # JAX names the type
        except TypeError:
          what = out
        raise TypeError(f"scan body output must be a pair, got {what}.")
      c_flat, c_tree = tree_flatten(out[0])
      y_flat, y_tree = tree_flatten(out[1])
      c_avals = [get_aval(c) for c in c_flat]
      for y in y_flat:
        get_aval(y)
      cell[:] = [c_tree, c_avals, y_tree]
      if len(c_flat) == n:
        c_flat = [_match_weak(c, a) for c, a in zip(c_flat, carry_avals)]
      return list(c_flat) + list(y_flat)

    closed = pe.trace_to_jaxpr(body, list(carry_avals) + x_avals, "scan_body")
    return store((closed, cell), (closed,))

  closed, cell = trace(in_avals)
  if cell[0] != init_tree:
    _check_carry("scan body", _carry_name(f), init_tree, in_avals, cell[0],
                 cell[1])
  init_flat, in_avals, changed = _promote_weak_carries(init_flat, in_avals, cell[1])
  if changed:
    closed, cell = trace(in_avals)
  _check_carry("scan body", _carry_name(f), init_tree, in_avals, cell[0],
               cell[1])
  # carries the body returns unchanged are loop constants (see _loop_forwarding)
  move = _lf.forwarded_carries(closed, n)
  if _any(move):
    closed = _lf.carries_to_consts(closed, move)
  fixed, carried = _lf.split(init_flat, move)
  # ys that are an x as it came in are that xs array itself, not a loop output (as in JAX)
  closed, y_from_x = _lf.forward_xs_to_ys(closed, len(carried), len(xs_flat))
  outs = _bind_scan(closed, fixed, carried, xs_flat, length=length, reverse=bool(reverse),
                    unroll=unroll)
  if _any(k is not None for k in y_from_x):
    rest = iter(outs[len(carried):])
    outs = list(outs[:len(carried)]) + [xs_flat[k] if k is not None else next(rest)
                                        for k in y_from_x]
  n_left = len(carried)
  kept = [_forwarded(x, a) for x, a, m in zip(init_flat, in_avals, move) if m]
  outs = _lf.merge(move, kept, outs[:n_left]) + list(outs[n_left:])
  carry_out, ys = _loop_result_types(outs[:n], in_avals, cell[1]), outs[n:]
  return tree_unflatten(init_tree, carry_out), tree_unflatten(cell[2], ys)


def _scan_in_python(f, init, xs_flat, xs_tree, length, reverse):
  """scan with jit disabled, as JAX's: the body runs in Python on each slice, the ys stacked;
  a zero-length scan is an error (the type of its ys is unknown without tracing)."""
  from ourjax.lax.slicing import index_in_dim
  from ourjax.lax.structural import concatenate, expand_dims
  from ourjax._pytree import tree_map
  if length == 0:
    raise ValueError("zero-length scan is not supported in disable_jit() mode because the "
                     "output type is unknown.")
  carry, ys = init, []
  order = range(length - 1, -1, -1) if reverse else range(length)
  for i in order:
    x = tree_unflatten(xs_tree, [index_in_dim(x, i, keepdims=False) for x in xs_flat])
    carry, y = f(carry, x)
    ys.append(y)
  if reverse:
    ys.reverse()
  stacked = tree_map(lambda *y: concatenate([expand_dims(v, (0,)) for v in y], 0), *ys)
  return carry, stacked


def map(f: Callable, xs, *, batch_size: int | None = None):  # noqa: A001 (lax.map, as in JAX)
  """``f`` applied to each slice of ``xs`` along its leading axis, stacked; with
  ``batch_size``, slices are processed ``batch_size`` at a time with ``vmap``."""
  if batch_size is None:
    _, ys = scan(lambda _, x: ((), f(x)), (), xs)
    return ys
  from ourjax import api
  from ourjax.lax.slicing import slice_in_dim
  from ourjax.lax.structural import concatenate, reshape
  from ourjax._pytree import tree_map
  batch_size = int(batch_size)
  if batch_size < 1:
    raise ValueError(f"lax.map: batch_size must be a positive integer, got {batch_size}")
  leaves = tree_flatten(xs)[0]
  if not leaves:
    raise ValueError("lax.map got no values to map over")
  n = get_aval(leaves[0]).shape[0]
  nb, rem = divmod(n, batch_size)
  vf = api.vmap(f)
  parts = []
  if nb:
    main = tree_map(lambda x: reshape(slice_in_dim(x, 0, nb * batch_size),
                                      (nb, batch_size) + get_aval(x).shape[1:]), xs)
    _, ys = scan(lambda _, x: ((), vf(x)), (), main)
    parts.append(tree_map(lambda y: reshape(y, (nb * batch_size,) + get_aval(y).shape[2:]),
                          ys))
  if rem:
    parts.append(vf(tree_map(lambda x: slice_in_dim(x, nb * batch_size, n), xs)))
  if len(parts) == 1:
    return parts[0]
  return tree_map(lambda a, b: concatenate([a, b], 0), *parts)


def _scan_jvp(primals, tangents, *, jaxpr, length, reverse, num_consts, num_carry, linear,
              unroll):
  nc, nk = num_consts, num_carry
  nx = len(primals) - nc - nk
  ny = len(jaxpr.out_avals) - nk
  nz = [type(t) is not ad.Zero for t in tangents]
  const_nz, carry_nz, xs_nz = _split(nz, [nc, nk])
  carry_nz = _fixpoint(carry_nz, lambda c: _jvp_jaxpr(jaxpr, const_nz + c + xs_nz,
                                                      c + [False] * ny)[1][:nk])
  jvp, out_nz = _jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, carry_nz + [False] * ny)
  ys_nz = out_nz[nk:]
  j = jvp.jaxpr
  p_c, p_k, p_x, t_c, t_k, t_x = _split(j.invars, [nc, nk, nx, sum(const_nz), sum(carry_nz)])
  o_k, o_y, ot_k, ot_y = _split(j.outvars, [nk, ny, sum(carry_nz)])
  jvp = ClosedJaxpr(Jaxpr(j.constvars, p_c + t_c + p_k + t_k + p_x + t_x, j.eqns,
                          o_k + ot_k + o_y + ot_y), jvp.consts)
  consts, init, xs = _split(primals, [nc, nk])
  c_dot, k_dot, x_dot = _split(tangents, [nc, nk])
  c_dot = [t for t in c_dot if type(t) is not ad.Zero]
  k_dot = [ad.instantiate_zeros(t) for t, z in zip(k_dot, carry_nz) if z]
  x_dot = [t for t in x_dot if type(t) is not ad.Zero]
  lc, lk, lx = _split(linear, [nc, nk])
  new_linear = (lc + [True] * len(c_dot) + lk + [True] * len(k_dot) + lx
                + [True] * len(x_dot))
  outs = _bind_scan(jvp, consts + c_dot, init + k_dot, xs + x_dot, length=length,
                    reverse=reverse, unroll=unroll, linear=new_linear)
  carry, carry_dot, ys, ys_dot = _split(outs, [nk, len(k_dot), ny])
  carry_dot, ys_dot = iter(carry_dot), iter(ys_dot)
  t_out = ([next(carry_dot) if z else ad.Zero.from_primal_value(p)
            for p, z in zip(carry, carry_nz)]
           + [next(ys_dot) if z else ad.Zero.from_primal_value(p) for p, z in zip(ys, ys_nz)])
  return carry + ys, t_out


ad.jvp_rules[scan_p] = _scan_jvp


def _invariant_vars(jaxpr: Jaxpr, invariant_invars) -> set:
  """Variables of ``jaxpr`` that depend only on the given inputs (and constants)."""
  inv = set(jaxpr.constvars) | set(invariant_invars)
  for eqn in jaxpr.eqns:
    if _all(isinstance(x, Literal) or x in inv for x in eqn.inputs):
      inv.update(eqn.out_binders)
  return inv


def _scan_partial_eval(trace, tracers, *, jaxpr, length, reverse, num_consts, num_carry,
                       linear, unroll):
  nc, nk = num_consts, num_carry
  ny = len(jaxpr.out_avals) - nk
  unknowns = [not t.pval.is_known for t in tracers]
  const_uk, carry_uk, xs_uk = _split(unknowns, [nc, nk])
  carry_uk = _fixpoint(carry_uk, lambda c: _pe_jaxpr(jaxpr, const_uk + c + xs_uk,
                                                     c + [False] * ny)[2][:nk])
  jk, ju, out_uk, nres = _pe_jaxpr(jaxpr, const_uk + carry_uk + xs_uk, carry_uk + [False] * ny)
  ys_uk = out_uk[nk:]
  consts, init, xs = _split(tracers, [nc, nk])
  known = lambda ts, uks: [t.pval.const for t, u in zip(ts, uks) if not u]
  k_consts = list(jk.consts) + known(consts, const_uk)
  k_init, k_xs = known(init, carry_uk), known(xs, xs_uk)
  jk, _ = _hoist(jk)
  j = jk.jaxpr
  nkc = len(k_consts)
  # residuals that depend only on loop constants are computed once, outside the loop
  inv = _invariant_vars(j, j.invars[:nkc])
  n_known_out = len(j.outvars) - nres
  res_vars = j.outvars[n_known_out:]
  res_inv = [isinstance(v, Literal) or v in inv for v in res_vars]
  if _any(res_inv):
    hoisted, _ = pe.dce_jaxpr(Jaxpr([], j.invars[:nkc], j.eqns,
                                    [v for v, i in zip(res_vars, res_inv) if i]))
    inv_vals = core.eval_jaxpr(hoisted, [], *k_consts)
  else:
    inv_vals = []
  # residuals that are slices of known xs are read from those xs, not stacked again
  nkk = nk - sum(carry_uk)
  x_pos = {v: k for k, v in enumerate(j.invars[nkc + nkk:])}
  res_x = [None if i else x_pos.get(v) for v, i in zip(res_vars, res_inv)]
  stacked = [v for v, i, x in zip(res_vars, res_inv, res_x) if not i and x is None]
  loop_j, _ = pe.dce_jaxpr(Jaxpr([], j.invars, j.eqns, j.outvars[:n_known_out] + stacked))
  k_outs = _bind_scan(ClosedJaxpr(loop_j, []), k_consts, k_init, k_xs, length=length,
                      reverse=reverse, unroll=unroll)
  k_carry, k_ys, stacked_vals = _split(k_outs, [nkk, ny - sum(ys_uk)])
  stacked_vals = iter(stacked_vals)
  var_res = [k_xs[x] if x is not None else next(stacked_vals)
             for i, x in zip(res_inv, res_x) if not i]
  # the staged scan: consts = invariant residuals + unknown consts; carry = unknown carries;
  # xs = unknown xs + stacked residuals
  res_in, u_c, u_k, u_x = _split(ju.invars, [nres, sum(const_uk), sum(carry_uk)])
  res_in_inv = [v for v, i in zip(res_in, res_inv) if i]
  res_in_var = [v for v, i in zip(res_in, res_inv) if not i]
  staged = _with_io(ju, res_in_inv + u_c + u_k + u_x + res_in_var)
  lc, lk, lx = _split(linear, [nc, nk])
  new_linear = ([False] * len(res_in_inv) + [l for l, u in zip(lc, const_uk) if u]
                + [l for l, u in zip(lk, carry_uk) if u] + [l for l, u in zip(lx, xs_uk) if u]
                + [False] * len(res_in_var))
  unk = lambda ts, uks: [t for t, u in zip(ts, uks) if u]
  in_tracers = ([trace.instantiate_const(trace.pure(v)) for v in inv_vals]
                + unk(consts, const_uk) + [trace.instantiate_const(t) for t in unk(init, carry_uk)]
                + unk(xs, xs_uk) + [trace.instantiate_const(trace.pure(r)) for r in var_res])
  if _any(out_uk):
    u_outs = trace.default_process_primitive(
        scan_p, in_tracers,
        dict(jaxpr=staged, length=length, reverse=reverse,
             num_consts=len(res_in_inv) + sum(const_uk), num_carry=sum(carry_uk),
             linear=tuple(new_linear), unroll=unroll))
  else:
    u_outs = []
  k_it, u_it = iter(k_carry + k_ys), iter(u_outs)
  return [next(u_it) if u else trace.pure(next(k_it)) for u in carry_uk + ys_uk]


pe.partial_eval_rules[scan_p] = _scan_partial_eval


def _scan_transpose(cts, *args, jaxpr, length, reverse, num_consts, num_carry, linear,
                    unroll):
  nc, nk = num_consts, num_carry
  consts, init, xs = _split(args, [nc, nk])
  undef = ad.is_undefined_primal
  const_lin = [undef(x) for x in consts]
  xs_lin = [undef(x) for x in xs]
  res_c = [x for x in consts if not undef(x)]
  res_x = [x for x in xs if not undef(x)]
  in_avals = jaxpr.in_avals
  c_avals, k_avals, x_avals = _split(in_avals, [nc, nk])
  y_avals = jaxpr.out_avals[nk:]
  ct_carry, ct_ys = cts[:nk], cts[nk:]
  ct_carry = [ad.instantiate_zeros(c) if type(c) is ad.Zero else c for c in ct_carry]
  ys_nz = [type(c) is not ad.Zero for c in ct_ys]
  ct_ys = [c for c in ct_ys if type(c) is not ad.Zero]
  lin_c_avals = [ad.tangent_aval(a) for a, l in zip(c_avals, const_lin) if l]
  acc0 = [ad.zeros_like_aval(a) for a in lin_c_avals]
  n_rc, n_lc = len(res_c), len(lin_c_avals)

  def bwd(*args):
    rc, acc, ctk, cty, rx = _split(args, [n_rc, n_lc, nk, len(ct_ys)])
    rc, rx, cty = iter(rc), iter(rx), iter(cty)
    full = ([ad.UndefinedPrimal(a) if l else next(rc) for a, l in zip(c_avals, const_lin)]
            + [ad.UndefinedPrimal(a) for a in k_avals]
            + [ad.UndefinedPrimal(a) if l else next(rx) for a, l in zip(x_avals, xs_lin)])
    full_cts = list(ctk) + [next(cty) if z else ad.Zero(ad.tangent_aval(a))
                            for a, z in zip(y_avals, ys_nz)]
    cts_in = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, full, full_cts)
    ct_c, ct_k, ct_x = _split(cts_in, [n_lc, nk])
    new_acc = [ad.add_tangents(a, c) for a, c in zip(acc, ct_c)]
    return (list(new_acc) + [ad.instantiate_zeros(c) for c in ct_k]
            + [ad.instantiate_zeros(c) for c in ct_x])

  avals = ([get_aval(r) for r in res_c] + lin_c_avals + [get_aval(c) for c in ct_carry]
           + [_slice_aval(get_aval(c)) for c in ct_ys] + [_slice_aval(get_aval(r)) for r in res_x])
  bwd_closed = pe.trace_to_jaxpr(bwd, avals, "scan_transpose")
  outs = _bind_scan(bwd_closed, res_c, acc0 + ct_carry, ct_ys + res_x, length=length,
                    reverse=not reverse, unroll=unroll,
                    linear=[False] * n_rc + [True] * (n_lc + nk + len(ct_ys))
                    + [False] * len(res_x))
  ct_c, ct_k, ct_x = _split(outs, [n_lc, nk])
  ct_c, ct_x = iter(ct_c), iter(ct_x)
  return ([next(ct_c) if l else None for l in const_lin]
          + [c if undef(x) else None for c, x in zip(ct_k, init)]
          + [next(ct_x) if l else None for l in xs_lin])


ad.transpose_rules[scan_p] = _scan_transpose


def _scan_batch(vals, dims, *, axis_size, jaxpr, length, reverse, num_consts, num_carry,
                linear, unroll):
  nc, nk = num_consts, num_carry
  ny = len(jaxpr.out_avals) - nk
  bat = [d is not None for d in dims]
  const_b, carry_b, xs_b = _split(bat, [nc, nk])
  carry_b = _fixpoint(carry_b, lambda c: _batch_jaxpr(jaxpr, axis_size, const_b + c + xs_b,
                                                      c + [False] * ny)[1][:nk])
  body, out_b = _batch_jaxpr(jaxpr, axis_size, const_b + carry_b + xs_b, carry_b + [False] * ny)
  consts, init, xs = _split(vals, [nc, nk])
  c_dims, k_dims, x_dims = _split(dims, [nc, nk])
  consts = [batching.moveaxis(x, d, 0) if d is not None else x for x, d in zip(consts, c_dims)]
  init = [batching.bdim_at_front(x, d, axis_size) if b else x
          for x, d, b in zip(init, k_dims, carry_b)]
  # the scanned axis stays first; the batch axis goes second so that slices are batched at 0
  xs = [batching.moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, x_dims)]
  outs = _bind_scan(body, consts, init, xs, length=length, reverse=reverse, unroll=unroll,
                    linear=linear)
  return outs, [0 if b else None for b in carry_b] + [1 if b else None for b in out_b[nk:]]


batching.register_rule_with_axis_size(scan_p, _scan_batch)


def _scan_dce(eqn, used_outputs):
  p = eqn.params
  jaxpr, nc, nk = p["jaxpr"].jaxpr, p["num_consts"], p["num_carry"]
  used_carry, used_ys = used_outputs[:nk], list(used_outputs[nk:])
  used_carry = _fixpoint(used_carry,
                         lambda u: pe.dce_jaxpr(jaxpr, u + used_ys)[1][nc:nc + nk])
  new_j, used_in = pe.dce_jaxpr(jaxpr, used_carry + used_ys)
  used_c, _, used_x = _split(used_in, [nc, nk])
  used_inputs = used_c + used_carry + used_x
  new_eqn = eqn._replace(
      inputs=[x for x, u in zip(eqn.inputs, used_inputs) if u],
      out_binders=[v for v, u in zip(eqn.out_binders, used_carry + used_ys) if u],
      params=dict(p, jaxpr=_prune_invars(new_j, used_inputs), num_consts=sum(used_c),
                  num_carry=sum(used_carry),
                  linear=tuple(l for l, u in zip(p["linear"], used_inputs) if u)))
  return used_inputs, new_eqn


pe.dce_rules[scan_p] = _scan_dce

# ------------------------------------------------------------------------------------------------
# Offline partial evaluation (``partial_eval.partial_eval_jaxpr``, used when a jitted function
# is differentiated): an equation with some unknown inputs is split with the online rules above,
# run on a jaxpr holding just that equation.


def _as_eqn(closed: ClosedJaxpr, inputs, binders, like, name):
  """One equation computing ``closed`` on the outer ``inputs``: its first outputs bind to
  ``binders``, the rest (residuals) to fresh variables, or to outer atoms where the jaxpr just
  forwards an input or a literal.  A jaxpr that is not a single equation becomes a call.
  Returns (equation or None, atoms of the residual outputs)."""
  from ourjax.interpreters.pjit import pjit_p
  j = closed.jaxpr
  env = dict(zip(j.invars, inputs))
  nb = len(binders)
  outer = lambda x: x if isinstance(x, Literal) else env.get(x)
  if not closed.consts and not j.constvars and len(j.eqns) <= 1:
    e = j.eqns[0] if j.eqns else None
    produced = list(e.out_binders) if e else []
    main_ok = (len(set(j.outvars[:nb])) == nb
               and _all(isinstance(v, Var) and v in produced for v in j.outvars[:nb]))
    ins_ok = e is None or _all(isinstance(x, Literal) or x in env for x in e.inputs)
    if main_ok and ins_ok:
      ren = {v: b for v, b in zip(j.outvars[:nb], binders)}
      new_outs = [ren.get(v) or Var(v.aval) for v in produced]
      ren.update(zip(produced, new_outs))
      res = [ren[v] if isinstance(v, Var) and v in ren else outer(v) for v in j.outvars[nb:]]
      if e is None:
        return None, res
      return e._replace(inputs=[outer(x) for x in e.inputs], out_binders=new_outs), res
  res = [Var(v.aval) for v in j.outvars[nb:]]
  return like._replace(primitive=pjit_p, inputs=list(inputs), out_binders=list(binders) + res,
                       params=dict(jaxpr=closed, name=name, backend=None)), res


def _partial_eval_jaxpr_rule(eqn, in_unknowns):
  sub, uniq, uk = {}, [], []
  for x, u in zip(eqn.inputs, in_unknowns):
    if isinstance(x, Var) and x not in sub:
      sub[x] = Var(x.aval)
      uniq.append(x)
      uk.append(u)
  inner = eqn._replace(inputs=[sub[x] if isinstance(x, Var) else x for x in eqn.inputs])
  single = ClosedJaxpr(Jaxpr([], [sub[x] for x in uniq], [inner], eqn.out_binders), [])
  jk, ju, out_uk, _ = _pe_jaxpr(single, uk, [False] * len(eqn.out_binders))
  k_binders = [v for v, u in zip(eqn.out_binders, out_uk) if not u]
  u_binders = [v for v, u in zip(eqn.out_binders, out_uk) if u]
  name = eqn.primitive.name
  eqn_k, res = _as_eqn(jk, [x for x, u in zip(uniq, uk) if not u], k_binders, eqn,
                       f"{name}_known")
  eqn_u, _ = _as_eqn(ClosedJaxpr(ju, []), res + [x for x, u in zip(uniq, uk) if u],
                     u_binders, eqn, f"{name}_unknown")
  return eqn_k, eqn_u, out_uk


if hasattr(pe, "partial_eval_jaxpr_rules"):
  for _p in (cond_p, while_p, scan_p):
    pe.partial_eval_jaxpr_rules[_p] = _partial_eval_jaxpr_rule
  del _p


# the lowerings of cond_p, while_p and scan_p (registered on import)
from ourjax.lax import _control_flow_lowering  # noqa: E402,F401


# mutable references (ourjax.ref) that the bodies touch are threaded through as carries/operands
from ourjax.lax import _control_flow_refs as _cfr  # noqa: E402
scan = _cfr.scan(scan)
while_loop = _cfr.while_loop(while_loop)
_cond = _cfr.cond(_cond)
switch = _cfr.switch(switch)
