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
import weakref
from typing import Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.config import config
from ourjax.core import ClosedJaxpr, Jaxpr, Literal, Primitive, Var, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import tree_flatten, tree_unflatten
from ourjax.lax import _loop_forwarding as _lf
from ourjax.lax import _trace_cache

_any = builtins.any
_all = builtins.all
_map = builtins.map
from ourjax.lax._control_flow_base import (_as_arrays, _batch_jaxpr, _carry_name, _check_carry,
    _check_operands, _dce_outputs, _fixpoint, _flatten_call, _forwarded, _hoist, _join_consts,
    _jvp_jaxpr, _loop_result_types, _or, _pe_jaxpr, _promote_weak_carries, _prune_invars,
    _split, _trace_branches, _with_io)
from ourjax.lax._scan import map, scan, scan_p  # noqa: F401  (re-exported, as JAX's lax has them)

# names defined in another module that ``lax`` re-exports from this one (``_reexport``)
_REEXPORT = ("scan", "map")


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
  # (with operands on a GPU too: the index is read, the branch's operations run there one by
  # one; a compiled cond would read the index as well, and each call joins its branches'
  # constants into new jaxprs, so a compile would not be reused)
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
  # (the outputs' weak types are false_fun's: JAX's branch 0)
  closeds, out_tree = _trace_branches((true_fun, false_fun), ops_tree, ops_avals,
                                      lambda i: ("cond", ("true_fun", "false_fun")), weak_from=1)
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
                                      lambda i: ("switch", ("branch 0", f"branch{i}")))
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


def _while_impl(*args, **params):
  from ourjax import _eager_device
  dev = _eager_device.gpu_of(args, while_p)
  if dev is not None:        # an operand on a GPU: compiled for it (``_eager_device``)
    return _eager_device.apply_custom(while_p, args, params, dev, _while_host)
  return _while_host(*args, **params)


def _while_host(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
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
