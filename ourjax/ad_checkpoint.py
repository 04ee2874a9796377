"""Rematerialization: ``checkpoint`` (alias ``remat``).

``checkpoint(f)`` computes the same values and derivatives as ``f``; what changes is what
reverse mode keeps between the forward and the backward pass.  Without it, linearize saves every
intermediate the tangent computation reads (``cos x`` for ``sin x``, ...).  With it, only the
inputs of ``f`` are saved and the forward computation of ``f`` runs again inside the backward
pass.  A ``policy`` chooses intermediates that may be saved after all
(``checkpoint_policies``).

The primitive, ``checkpoint`` (``remat_p``), carries the traced jaxpr of ``f`` (closed-over
constants become leading operands).  Its rules:

* eager/jit: evaluate the jaxpr (lowering inlines it);
* jvp: bind ``remat_p`` again on the JVP of the jaxpr, so the whole tangent computation stays
  inside the checkpointed region;
* partial evaluation (what linearize does to it): split the jaxpr into a known part, run now
  for the primal outputs, and an unknown part that *recomputes* every non-saveable known value
  it needs from the saved inputs (``_partial_eval_remat``, a policy-aware variant of
  ``partial_eval.partial_eval_jaxpr``).  The unknown part is staged as another ``remat_p``;
* transpose: transpose the unknown part's jaxpr (``backward_pass`` evaluates its non-linear
  recomputation first) and bind the result as ``remat_p`` too;
* vmap: batch the jaxpr.  DCE prunes inside.
"""
from __future__ import annotations

import functools
import weakref
from typing import Callable, Sequence

import numpy as np

from ourjax import core
from ourjax.core import ClosedJaxpr, Jaxpr, Primitive, Var, get_aval
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import tree_flatten, tree_unflatten

__all__ = ["checkpoint", "remat", "checkpoint_policies", "remat_p", "checkpoint_name"]

remat_p = Primitive("checkpoint")
remat_p.multiple_results = True


# ------------------------------------------------------------------------------------------------
# Policies: ``policy(prim, *avals, **params) -> bool``, True when the primitive's outputs may be
# saved as residuals instead of recomputed.


def nothing_saveable(prim, *avals, **params) -> bool:
  return False


def everything_saveable(prim, *avals, **params) -> bool:
  return True


def _is_dot(prim) -> bool:
  return prim.name in ("dot_general", "conv_general_dilated")


def dots_saveable(prim, *avals, **params) -> bool:
  return _is_dot(prim)


def dots_with_no_batch_dims_saveable(prim, *avals, **params) -> bool:
  if prim.name != "dot_general":
    return False
  (_, _), (lhs_b, rhs_b) = params["dimension_numbers"]
  return not lhs_b and not rhs_b


def save_anything_except_these_names(*names):
  names = set(names)

  def policy(prim, *avals, **params):
    return not (prim is name_p and params.get("name") in names)
  return policy


def save_only_these_names(*names):
  names = set(names)

  def policy(prim, *avals, **params):
    return prim is name_p and params.get("name") in names
  return policy


def save_any_names_but_these(*names):
  """Values tagged with ``checkpoint_name`` may be saved, except those named in ``names``;
  untagged values are recomputed."""
  names = set(names)

  def policy(prim, *avals, **params):
    return prim is name_p and params.get("name") not in names
  return policy


def save_from_both_policies(policy_1, policy_2):
  """What either policy saves."""
  def policy(prim, *avals, **params):
    return policy_1(prim, *avals, **params) or policy_2(prim, *avals, **params)
  return policy


class checkpoint_policies:
  """The policies JAX names (``jax.checkpoint_policies``)."""
  nothing_saveable = staticmethod(nothing_saveable)
  everything_saveable = staticmethod(everything_saveable)
  dots_saveable = staticmethod(dots_saveable)
  checkpoint_dots = staticmethod(dots_saveable)
  dots_with_no_batch_dims_saveable = staticmethod(dots_with_no_batch_dims_saveable)
  checkpoint_dots_with_no_batch_dims = staticmethod(dots_with_no_batch_dims_saveable)
  save_anything_except_these_names = staticmethod(save_anything_except_these_names)
  save_only_these_names = staticmethod(save_only_these_names)
  save_any_names_but_these = staticmethod(save_any_names_but_these)
  save_from_both_policies = staticmethod(save_from_both_policies)


# ------------------------------------------------------------------------------------------------
# checkpoint_name: an identity that tags a value for the name-based policies


name_p = Primitive("name")


def checkpoint_name(x, name: str):
  """Tag ``x`` (a pytree) with ``name``; the name-based policies decide on it."""
  return tree_unflatten(tree_flatten(x)[1],
                        [name_p.bind(v, name=name) for v in tree_flatten(x)[0]])


name_p.def_abstract_eval(lambda x, name: x)
name_p.def_custom_impl(lambda x, name: x)
ad.deflinear(name_p, lambda ct, x, name: [ct])
batching.batch_rules[name_p] = lambda vals, dims, name: (name_p.bind(vals[0], name=name),
                                                         dims[0])


# ------------------------------------------------------------------------------------------------
# The user-facing wrapper


def checkpoint(fun: Callable | None = None, *, prevent_cse: bool = True,
               policy: Callable | None = None, static_argnums: int | Sequence[int] = ()):
  """Make ``fun`` recompute its internals in the backward pass instead of saving them.

  ``prevent_cse`` is recorded on the equation (it asks the compiler not to merge the
  recomputation with the forward pass); ``policy`` names values that may be saved after all;
  ``static_argnums`` are arguments passed through as Python values (not traced)."""
  if fun is None:
    return functools.partial(checkpoint, prevent_cse=prevent_cse, policy=policy,
                             static_argnums=static_argnums)
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  static_argnums = tuple(static_argnums)
  if isinstance(prevent_cse, (list, tuple)):
    prevent_cse = tuple(prevent_cse)
  elif not isinstance(prevent_cse, (bool, np.bool_)):
    raise TypeError("prevent_cse must be a bool or tuple of bools, got "
                    f"type(prevent_cse)={type(prevent_cse)}")
  else:
    prevent_cse = bool(prevent_cse)

  @functools.wraps(fun, updated=())
  def fun_remat(*args, **kwargs):
    nargs = len(args)
    static = {i % nargs if nargs else i for i in static_argnums}
    for i in static:
      if i >= nargs:
        raise ValueError(f"checkpoint static_argnums {static_argnums} out of range for "
                         f"{nargs} positional arguments")
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)

    def f_dyn(*dyn, **kw):
      it = iter(dyn)
      return fun(*[args[i] if i in static else next(it) for i in range(nargs)], **kw)

    leaves, in_tree = tree_flatten((dyn_args, kwargs))
    avals = [get_aval(x) for x in leaves]
    key = _trace_key(in_tree, avals, [args[i] for i in sorted(static)])
    cache = _trace_cache(fun) if key is not None else None
    hit = cache.get(key) if cache is not None else None
    if hit is None:
      out_tree_cell: list = []

      def flat(*xs):
        a, kw = tree_unflatten(in_tree, list(xs))
        out_leaves, out_tree = tree_flatten(f_dyn(*a, **kw))
        out_tree_cell[:] = [out_tree]
        return out_leaves

      closed = pe.trace_to_jaxpr(flat, avals, getattr(fun, "__name__", "checkpoint"))
      hit = (pe.convert_constvars_jaxpr(closed.jaxpr), list(closed.consts), out_tree_cell[0])
      # a trace that closed over another transformation's tracers is only good for this call
      if cache is not None and not any(isinstance(c, core.Tracer) for c in hit[1]):
        cache[key] = hit
    jaxpr, consts, out_tree = hit
    cse = prevent_cse
    if isinstance(cse, tuple):
      # one flag per operand: the argument flags broadcast over their leaves (constants never)
      from ourjax._pytree import broadcast_prefix
      cse_args = (tuple(dyn_args), kwargs) if kwargs else tuple(dyn_args)
      cse = (False,) * len(consts) + tuple(bool(c) for c in broadcast_prefix(cse, cse_args))
    outs = remat_p.bind(*consts, *leaves, jaxpr=jaxpr, prevent_cse=cse,
                        differentiated=False, policy=policy)
    return tree_unflatten(out_tree, outs)

  return fun_remat


remat = checkpoint

# Traces of checkpointed functions, per function (weakly held) and argument signature, as JAX
# caches them: calling a checkpointed function again with the same argument types does not
# trace it again.
_TRACES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _trace_cache(fun):
  try:
    return _TRACES.setdefault(fun, {})
  except TypeError:          # not weakly referenceable: no cache
    return None


def _trace_key(in_tree, avals, static_vals):
  from ourjax.config import config
  key = (in_tree, tuple(avals), tuple((type(v), v) for v in static_vals), config.x64_enabled)
  try:
    hash(key)
  except TypeError:          # an unhashable static argument: no cache
    return None
  return key


# ------------------------------------------------------------------------------------------------
# Rules


def _closed(jaxpr: Jaxpr) -> ClosedJaxpr:
  return ClosedJaxpr(jaxpr, [])


def _open(closed: ClosedJaxpr):
  """(jaxpr without constvars, consts to pass as leading operands)."""
  return pe.convert_constvars_jaxpr(closed.jaxpr), list(closed.consts)


@remat_p.def_abstract_eval
def _remat_abstract_eval(*avals, jaxpr, prevent_cse, differentiated, policy):
  return [v.aval for v in jaxpr.outvars]


@remat_p.def_custom_impl
def _remat_impl(*args, jaxpr, prevent_cse, differentiated, policy):
  return core.eval_jaxpr(jaxpr, [], *args)


def _remat_jvp(primals, tangents, *, jaxpr, prevent_cse, differentiated, policy):
  nonzeros = [type(t) is not ad.Zero for t in tangents]
  jvp_closed, out_nz = ad.jvp_jaxpr_nonzeros(_closed(jaxpr), nonzeros, instantiate=False)
  jvp_jaxpr, consts = _open(jvp_closed)
  nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
  outs = remat_p.bind(*consts, *primals, *nz_tangents, jaxpr=jvp_jaxpr,
                      prevent_cse=_cse(prevent_cse, pre=len(consts), post=len(nz_tangents)),
                      differentiated=True, policy=policy)
  n = len(jaxpr.outvars)
  tans = iter(outs[n:])
  return outs[:n], [next(tans) if nz else ad.Zero(ad.tangent_aval(v.aval))
                    for nz, v in zip(out_nz, jaxpr.outvars)]


ad.jvp_rules[remat_p] = _remat_jvp


_SAVEABLE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _saveable(policy):
  """The equation test of ``policy``; one object per policy, so that the splits of the jaxprs
  nested in a checkpoint (``_split_cached``) are cached per policy."""
  pol = policy or nothing_saveable
  try:
    hit = _SAVEABLE.get(pol)
  except TypeError:
    hit = None
  if hit is not None:
    return hit

  def saveable(eqn) -> bool:
    return bool(pol(eqn.primitive, *[x.aval for x in eqn.inputs], **eqn.params))
  try:
    _SAVEABLE[pol] = saveable
  except TypeError:      # (not weakly referenceable: not cached)
    pass
  return saveable


# The splits of the jaxprs nested in a checkpoint (calls, conds, scans), per jaxpr object and
# (unknowns, policy): a checkpointed function differentiated again splits the same jaxprs into
# the same objects, so the executables compiled for them are reused.
_SPLITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _split_cached(owner, key, make):
  try:
    per = _SPLITS.setdefault(owner, {})
  except TypeError:
    return make()
  hit = per.get(key)
  if hit is None:
    hit = per[key] = make()
  return hit


def _partial_eval_remat(jaxpr: Jaxpr, in_unknowns: Sequence[bool], saveable):
  """Split ``jaxpr`` (no constvars) for rematerialization.

  Returns ``(jaxpr_known, jaxpr_unknown, out_unknowns, num_res)`` like
  ``partial_eval.partial_eval_jaxpr``: ``jaxpr_known: known ins -> known outs + residuals`` and
  ``jaxpr_unknown: residuals + unknown ins -> unknown outs``.  The difference: a known equation
  whose outputs are not ``saveable`` is *also* placed on the unknown side, so the residuals are
  only known inputs and outputs of saveable equations; everything else is recomputed."""
  jk, ju, out_unknowns, _, num_res = _split_remat(jaxpr, in_unknowns, saveable)
  return jk, ju, out_unknowns, num_res


def _split_remat(jaxpr: Jaxpr, in_unknowns: Sequence[bool], saveable, instantiate=None,
                 force_unknown=None):
  """``_partial_eval_remat`` with two options: ``instantiate[i]``: the unknown side also
  computes output i when it is known (recomputed, or read from a residual); ``force_unknown[i]``:
  output i counts as unknown (is left out of the known outputs) even when it is known.

  Returns ``(jaxpr_known, jaxpr_unknown, out_unknowns, out_staged, num_res)``: jaxpr_known
  computes the outputs that are not unknown, then the residuals; jaxpr_unknown the outputs that
  are unknown or instantiated (``out_staged``)."""
  n_out = len(jaxpr.outvars)
  instantiate = list(instantiate) if instantiate is not None else [False] * n_out
  force_unknown = list(force_unknown) if force_unknown is not None else [False] * n_out
  unknown: set = {v for v, u in zip(jaxpr.invars, in_unknowns) if u}
  known_eqns: list = []
  staged: list = []          # the unknown side before DCE: unknown and recomputable eqns
  for eqn in jaxpr.eqns:
    eqn_unknowns = [isinstance(x, Var) and x in unknown for x in eqn.inputs]
    special = _REMAT_SPLIT_RULES.get(eqn.primitive.name)
    if special is not None and not all(eqn_unknowns) and (any(eqn_unknowns)
                                                          or not saveable(eqn)):
      # control flow and calls split themselves by the policy, equation by equation inside:
      # a known equation (outputs and residuals) and a staged one recomputing every output
      # (bound to the same variables; DCE drops what nothing reads)
      split = special(eqn, eqn_unknowns, saveable)
      if split is not None:
        eqn_k, eqns_u, outs_unknown = split
        known_eqns.append(eqn_k)
        staged.extend(eqns_u)
        unknown.update(v for v, u in zip(eqn.out_binders, outs_unknown) if u)
        continue
    rule = pe.partial_eval_jaxpr_rules.get(eqn.primitive)
    if any(eqn_unknowns) and rule is not None and not all(eqn_unknowns):
      eqn_k, eqn_u, outs_unknown = rule(eqn, eqn_unknowns)
      if eqn_k is not None:
        known_eqns.append(eqn_k)
        if not saveable(eqn_k):
          staged.append(eqn_k)
      if eqn_u is not None:
        staged.append(eqn_u)
      unknown.update(v for v, u in zip(eqn.out_binders, outs_unknown) if u)
    elif any(eqn_unknowns):
      staged.append(eqn)
      unknown.update(eqn.out_binders)
    else:
      known_eqns.append(eqn)
      if not saveable(eqn):
        staged.append(eqn)
  out_unknowns = [(isinstance(v, Var) and v in unknown) or f
                  for v, f in zip(jaxpr.outvars, force_unknown)]
  out_staged = [u or i for u, i in zip(out_unknowns, instantiate)]
  unknown_outs = [v for v, u in zip(jaxpr.outvars, out_staged) if u]
  staged_jaxpr, _ = pe.dce_jaxpr(Jaxpr([], [], staged, unknown_outs))
  # residuals: what the unknown side reads but does not compute itself (and is not an
  # unknown input)
  defined = {v for e in staged_jaxpr.eqns for v in e.out_binders}
  defined.update(v for v, u in zip(jaxpr.invars, in_unknowns) if u)
  residuals: list = []
  seen: set = set()
  for e in staged_jaxpr.eqns:
    for x in e.inputs:
      if isinstance(x, Var) and x not in defined and x not in seen:
        seen.add(x)
        residuals.append(x)
  for x in unknown_outs:
    if isinstance(x, Var) and x not in defined and x not in seen:
      seen.add(x)
      residuals.append(x)
  known_invars = [v for v, u in zip(jaxpr.invars, in_unknowns) if not u]
  known_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if not u]
  jaxpr_known, _ = pe.dce_jaxpr(Jaxpr([], known_invars, known_eqns, known_outs + residuals))
  res_vars = [Var(v.aval) for v in residuals]
  ren = dict(zip(residuals, res_vars))

  def r(x):
    return ren.get(x, x) if isinstance(x, Var) else x

  unknown_invars = [v for v, u in zip(jaxpr.invars, in_unknowns) if u]
  eqns_u = [e._replace(inputs=[r(x) for x in e.inputs]) for e in staged_jaxpr.eqns]
  jaxpr_unknown = Jaxpr([], res_vars + unknown_invars, eqns_u, [r(v) for v in unknown_outs])
  return jaxpr_known, jaxpr_unknown, out_unknowns, out_staged, len(residuals)


def _split_call(eqn, in_unknowns, saveable):
  """A jit call inside a checkpoint: its jaxpr is split by the policy (so values it computes
  are saved or recomputed one by one, not the call as a whole)."""
  p = eqn.params
  closed = p["jaxpr"]
  if closed.consts or closed.jaxpr.constvars:
    return None
  n_out = len(eqn.out_binders)

  def make():
    jk, ju, out_uk, _, num_res = _split_remat(closed.jaxpr, in_unknowns, saveable,
                                              instantiate=[True] * n_out)
    n_known = len(jk.outvars) - num_res
    res = jk.outvars[n_known:]
    # a residual that is one of the call's known operands is read by the staged call from the
    # operand itself (the enclosing split decides whether that is saved or recomputed)
    pos = {v: i for i, v in enumerate(jk.invars)}
    fwd = tuple(pos.get(v) if isinstance(v, Var) else None for v in res)
    jk2 = Jaxpr([], jk.invars, jk.eqns,
                jk.outvars[:n_known] + [v for v, f in zip(res, fwd) if f is None])
    res_avals = [v.aval for v, f in zip(res, fwd) if f is None]
    return ClosedJaxpr(jk2, []), ClosedJaxpr(ju, []), out_uk, fwd, res_avals
  ck, cu, out_uk, fwd, res_avals = _split_cached(closed, (tuple(in_unknowns), saveable), make)
  res_vars = [Var(a) for a in res_avals]
  known_in = [x for x, u in zip(eqn.inputs, in_unknowns) if not u]
  it = iter(res_vars)
  staged_res = [next(it) if f is None else known_in[f] for f in fwd]
  base = {k: v for k, v in p.items() if k != "donated_invars"}
  eqn_k = eqn._replace(inputs=known_in, params=dict(base, jaxpr=ck),
                       out_binders=[b for b, u in zip(eqn.out_binders, out_uk) if not u]
                       + res_vars)
  eqn_u = eqn._replace(inputs=staged_res + [x for x, u in zip(eqn.inputs, in_unknowns) if u],
                       params=dict(base, jaxpr=cu), out_binders=list(eqn.out_binders))
  return eqn_k, _halves(eqn_u, out_uk), out_uk


def _halves(eqn_u, out_uk):
  """A staged equation computing every output, in two: the recomputation of the known outputs
  (from residuals only: non-linear, so a transpose evaluates it first) and the unknown
  outputs."""
  out = []
  for want in ([not u for u in out_uk], list(out_uk)):
    if any(want):
      out.append(pe.dce_rules[eqn_u.primitive](eqn_u, want)[1])
  return out


def _split_cond(eqn, in_unknowns, saveable):
  """A cond inside a checkpoint: each branch is split by the policy; the known cond returns
  every branch's residuals (zeros for the branches not taken), the staged cond reads its own."""
  from ourjax import lax
  p = eqn.params
  branches = p["branches"]
  if in_unknowns[0] or any(b.consts or b.jaxpr.constvars for b in branches):
    return None          # (an unknown index: the whole cond is staged, as without a policy)
  ops_uk = list(in_unknowns[1:])
  n_out = len(eqn.out_binders)

  def make():
    force = [False] * n_out
    for _ in range(2):     # an output unknown in one branch is unknown in all
      splits = [_split_remat(b.jaxpr, ops_uk, saveable, instantiate=[True] * n_out,
                             force_unknown=force) for b in branches]
      union = [any(sp[2][i] for sp in splits) for i in range(n_out)]
      if union == force:
        break
      force = union
    out_uk = force
    n_known = n_out - sum(out_uk)
    # a residual that is one of the cond's known operands is read from the operand itself by
    # the staged cond (the enclosing split decides whether that is saved or recomputed)
    fwds = []
    for sp in splits:
      pos = {v: i for i, v in enumerate(sp[0].invars)}
      fwds.append([pos.get(v) if isinstance(v, Var) else None
                   for v in sp[0].outvars[n_known:]])
    res_avals = [[v.aval for v, f in zip(sp[0].outvars[n_known:], fw) if f is None]
                 for sp, fw in zip(splits, fwds)]
    offsets = np.cumsum([0] + [len(r) for r in res_avals]).tolist()
    known_avals = [branches[0].jaxpr.invars[i].aval for i, u in enumerate(ops_uk) if not u]
    unknown_avals = [branches[0].jaxpr.invars[i].aval for i, u in enumerate(ops_uk) if u]
    all_res = [a for r in res_avals for a in r]
    n_kops = len(known_avals)

    def known_branch(i):
      jk = splits[i][0]

      def f(*xs):
        outs = core.eval_jaxpr(jk, [], *xs)
        own = [r for r, fw in zip(outs[n_known:], fwds[i]) if fw is None]
        res = []
        for j, avals in enumerate(res_avals):
          res += (own if j == i else
                  [lax.full(a.shape, np.zeros((), a.dtype)[()], a.dtype) for a in avals])
        return list(outs[:n_known]) + res
      return f

    def unknown_branch(i):
      ju = splits[i][1]

      def f(*xs):
        res, known, rest = (xs[:len(all_res)], xs[len(all_res):len(all_res) + n_kops],
                            xs[len(all_res) + n_kops:])
        own = iter(res[offsets[i]:offsets[i + 1]])
        full = [next(own) if fw is None else known[fw] for fw in fwds[i]]
        return core.eval_jaxpr(ju, [], *full, *rest)
      return f

    try:
      kbs = [pe.trace_to_jaxpr(known_branch(i), known_avals, "cond_known")
             for i in range(len(branches))]
      ubs = [pe.trace_to_jaxpr(unknown_branch(i), all_res + known_avals + unknown_avals,
                               "cond_staged")
             for i in range(len(branches))]
    except Exception:      # noqa: BLE001  (a residual of a type zeros cannot be made of)
      return None
    if any(c.consts for c in kbs + ubs):
      return None
    return tuple(kbs), tuple(ubs), out_uk, all_res

  plan = _split_cached(branches[0], (branches, tuple(in_unknowns), saveable), make)
  if plan is None:
    return None
  kbs, ubs, out_uk, all_res = plan
  res_vars = [Var(a) for a in all_res]
  idx = eqn.inputs[0]
  ops = eqn.inputs[1:]
  eqn_k = eqn._replace(inputs=[idx] + [x for x, u in zip(ops, ops_uk) if not u],
                       params=dict(p, branches=kbs),
                       out_binders=[b for b, u in zip(eqn.out_binders, out_uk) if not u]
                       + res_vars)
  eqn_u = eqn._replace(inputs=[idx] + res_vars + [x for x, u in zip(ops, ops_uk) if not u]
                       + [x for x, u in zip(ops, ops_uk) if u],
                       params=dict(p, branches=ubs), out_binders=list(eqn.out_binders))
  return eqn_k, _halves(eqn_u, out_uk), out_uk


def _split_scan(eqn, in_unknowns, saveable):
  """A scan inside a checkpoint, with some unknown operands (JAX's scan partial_eval_jaxpr_custom
  rule): its body is split by the policy.  The known scan computes the known outputs and
  stacks the body's saved intermediates (residuals that are loop constants or slices of the
  scanned operands are read from them instead); the staged scan carries the known carries too,
  recomputing them step by step (they are not saved), and reads the stacked residuals."""
  p = eqn.params
  closed = p["jaxpr"]
  if closed.consts or closed.jaxpr.constvars or not any(in_unknowns):
    return None          # (a fully known scan is recomputed whole if not saveable)
  nc, nk, length = p["num_consts"], p["num_carry"], p["length"]

  def make():
    body = closed.jaxpr
    ny = len(body.outvars) - nk
    const_uk = list(in_unknowns[:nc])
    carry_uk = list(in_unknowns[nc:nc + nk])
    xs_uk = list(in_unknowns[nc + nk:])
    while True:          # a carry is unknown if its output is unknown after some iteration
      out_uk = _split_remat(body, const_uk + carry_uk + xs_uk, saveable,
                            force_unknown=carry_uk + [False] * ny)[2]
      new = [a or b for a, b in zip(carry_uk, out_uk[:nk])]
      if new == carry_uk:
        break
      carry_uk = new
    in_uk = const_uk + carry_uk + xs_uk
    # every carry output is also computed on the staged side (the known ones recomputed)
    jk, ju, out_uk, _, nres = _split_remat(body, in_uk, saveable,
                                           instantiate=[True] * nk + [False] * ny,
                                           force_unknown=carry_uk + [False] * ny)
    n_kc, n_kk = nc - sum(const_uk), nk - sum(carry_uk)
    n_known_out = len(jk.outvars) - nres
    res = jk.outvars[n_known_out:]
    const_pos = {v: i for i, v in enumerate(jk.invars[:n_kc])}
    carry_pos = {v: i for i, v in enumerate(jk.invars[n_kc:n_kc + n_kk])}
    x_pos = {v: i for i, v in enumerate(jk.invars[n_kc + n_kk:])}
    kind = ["c" if v in const_pos else "k" if v in carry_pos else "x" if v in x_pos else "s"
            for v in res]
    stacked = [v for v, k in zip(res, kind) if k == "s"]
    loop_jk, _ = pe.dce_jaxpr(Jaxpr([], jk.invars, jk.eqns,
                                    jk.outvars[:n_known_out] + stacked))
    # the staged body: consts = residuals that are loop constants + unknown consts; carry =
    # every carry (the known ones as the residuals that read them); xs = unknown xs +
    # residuals that are scanned slices + stacked residuals
    res_in, rest = ju.invars[:nres], ju.invars[nres:]
    nuc, nuk = sum(const_uk), sum(carry_uk)
    u_consts, u_carry, u_xs = rest[:nuc], rest[nuc:nuc + nuk], rest[nuc + nuk:]
    rc = [(r, const_pos[v]) for r, v, k in zip(res_in, res, kind) if k == "c"]
    rx = [(r, x_pos[v]) for r, v, k in zip(res_in, res, kind) if k == "x"]
    rk = {carry_pos[v]: r for r, v, k in zip(res_in, res, kind) if k == "k"}
    rs = [r for r, k in zip(res_in, kind) if k == "s"]
    known_carry_avals = [v.aval for v in jk.invars[n_kc:n_kc + n_kk]]
    carry_in, it_u, j = [], iter(u_carry), 0
    for u in carry_uk:
      if u:
        carry_in.append(next(it_u))
      else:
        carry_in.append(rk.get(j) or Var(known_carry_avals[j]))
        j += 1
    body_u = Jaxpr([], [r for r, _ in rc] + list(u_consts) + carry_in + list(u_xs)
                   + [r for r, _ in rx] + rs, ju.eqns, ju.outvars)
    stacked_avals = [core.ShapedArray((length,) + v.aval.shape, v.aval.dtype,
                                      v.aval.weak_type) for v in stacked]
    return dict(in_uk=in_uk, out_uk=out_uk, carry_uk=carry_uk, n_kc=n_kc, n_kk=n_kk,
                n_uc=nuc, loop=ClosedJaxpr(loop_jk, []), body_u=ClosedJaxpr(body_u, []),
                rc=[i for _, i in rc], rx=[i for _, i in rx], stacked_avals=stacked_avals)

  plan = _split_cached(closed, (tuple(in_unknowns), saveable), make)
  in_uk, out_uk, carry_uk = plan["in_uk"], plan["out_uk"], plan["carry_uk"]
  outer_in = list(eqn.inputs)
  k_outer = [x for x, u in zip(outer_in, in_uk) if not u]
  n_kc, n_kk = plan["n_kc"], plan["n_kk"]
  stacked_vars = [Var(a) for a in plan["stacked_avals"]]
  known_binders = [b for b, u in zip(eqn.out_binders, out_uk) if not u]
  eqn_k = eqn._replace(inputs=k_outer, out_binders=known_binders + stacked_vars, params=dict(
      p, jaxpr=plan["loop"], num_consts=n_kc, num_carry=n_kk, linear=(False,) * len(k_outer)))
  k_consts_outer, k_xs_outer = k_outer[:n_kc], k_outer[n_kc + n_kk:]
  consts_in, init_in, xs_in = outer_in[:nc], outer_in[nc:nc + nk], outer_in[nc + nk:]
  inputs_u = ([k_consts_outer[i] for i in plan["rc"]]
              + [x for x, u in zip(consts_in, in_uk[:nc]) if u] + list(init_in)
              + [x for x, u in zip(xs_in, in_uk[nc + nk:]) if u]
              + [k_xs_outer[i] for i in plan["rx"]] + stacked_vars)
  # (the recomputed known carries' final values are not used: fresh binders, DCE drops them)
  carry_binders = [b if u else Var(b.aval) for b, u in zip(eqn.out_binders[:nk], carry_uk)]
  ys_binders = [b for b, u in zip(eqn.out_binders[nk:], out_uk[nk:]) if u]
  eqn_u = eqn._replace(inputs=inputs_u, out_binders=carry_binders + ys_binders,
                       params=dict(p, jaxpr=plan["body_u"],
                                   num_consts=len(plan["rc"]) + plan["n_uc"],
                                   num_carry=nk, linear=(False,) * len(inputs_u)))
  if not any(out_uk):
    return eqn_k, [], out_uk
  return eqn_k, [pe.dce_rules[eqn_u.primitive](eqn_u, [u for u in carry_uk]
                                               + [True] * len(ys_binders))[1]], out_uk


_REMAT_SPLIT_RULES = {"jit": _split_call, "cond": _split_cond, "scan": _split_scan}


def _remat_partial_eval(trace, tracers, *, jaxpr, prevent_cse, differentiated, policy):
  in_unknowns = [not t.pval.is_known for t in tracers]
  jk, ju, out_unknowns, num_res = _partial_eval_remat(jaxpr, in_unknowns, _saveable(policy))
  known_vals = [t.pval.const for t in tracers if t.pval.is_known]
  known_outs = core.eval_jaxpr(jk, [], *known_vals)
  n_known = len(known_outs) - num_res
  outs_k, residuals = known_outs[:n_known], known_outs[n_known:]
  res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
  unk_tracers = [t for t in tracers if not t.pval.is_known]
  outs_u = trace.default_process_primitive(
      remat_p, res_tracers + unk_tracers,
      dict(jaxpr=ju, prevent_cse=_staged_cse(prevent_cse, jk, num_res, in_unknowns),
           differentiated=True, policy=policy))
  _log_residuals(jk, num_res)
  outs_k, outs_u = iter(outs_k), iter(outs_u)
  return [next(outs_u) if u else trace.pure(next(outs_k)) for u in out_unknowns]


def _log_residuals(jk: Jaxpr, num_res: int) -> None:
  """What a differentiated checkpoint saves, in JAX's words: a DEBUG record (a WARNING with
  ``jax_log_checkpoint_residuals``) naming the saved inputs' shapes and the saved
  intermediates with the primitive that computed each."""
  import logging
  from ourjax.config import config
  logger = logging.getLogger("ourjax")
  level = logging.WARNING if config.jax_log_checkpoint_residuals else logging.DEBUG
  if not logger.isEnabledFor(level):
    return
  res = jk.outvars[len(jk.outvars) - num_res:]
  invars = set(jk.invars)
  producer = {v: e for e in jk.eqns for v in e.out_binders}
  inputs = [v for v in res if isinstance(v, Var) and v in invars]
  inter = [(v, producer[v]) for v in res if isinstance(v, Var) and v in producer]
  if not inputs and not inter:
    return
  logger.log(level,
             "remat-decorated function " + "saving inputs with shapes:\n" * bool(inputs)
             + "  %s\n" * len(inputs) + "and " * (bool(inputs) and bool(inter))
             + "saving these intermediates:\n" * bool(inter) + "  %s from %s\n" * len(inter),
             *[v.aval.str_short() for v in inputs],
             *[x for v, e in inter for x in (
                 v.aval.str_short(), f"the output of {e.primitive.name}"
                 + (f" at {e.source_info}" if e.source_info else ""))])


pe.partial_eval_rules[remat_p] = _remat_partial_eval


def _remat_partial_eval_jaxpr(eqn, in_unknowns):
  """The offline split (a checkpoint inside a jitted function, under grad)."""
  p = eqn.params
  jk, ju, out_unknowns, num_res = _partial_eval_remat(p["jaxpr"], in_unknowns,
                                                      _saveable(p["policy"]))
  res_vars = [Var(v.aval) for v in jk.outvars[len(jk.outvars) - num_res:]]
  known_outs = [v for v, u in zip(eqn.out_binders, out_unknowns) if not u]
  cse = p["prevent_cse"]
  eqn_k = eqn._replace(inputs=[x for x, u in zip(eqn.inputs, in_unknowns) if not u],
                       params=dict(p, jaxpr=jk, differentiated=True,
                                   prevent_cse=_cse(cse, keep=[not u for u in in_unknowns])),
                       out_binders=known_outs + res_vars)
  eqn_u = eqn._replace(inputs=res_vars + [x for x, u in zip(eqn.inputs, in_unknowns) if u],
                       params=dict(p, jaxpr=ju, differentiated=True,
                                   prevent_cse=_staged_cse(cse, jk, num_res, in_unknowns)),
                       out_binders=[v for v, u in zip(eqn.out_binders, out_unknowns) if u])
  return eqn_k, eqn_u, out_unknowns


pe.partial_eval_jaxpr_rules[remat_p] = _remat_partial_eval_jaxpr


def _remat_transpose(cts, *args, jaxpr, prevent_cse, differentiated, policy):
  undefined = [ad.is_undefined_primal(a) for a in args]
  defined_vals = [a for a in args if not ad.is_undefined_primal(a)]
  ct_mask = [type(c) is not ad.Zero for c in cts]
  nz_cts = [c for c in cts if type(c) is not ad.Zero]
  out_avals = [v.aval for v in jaxpr.outvars]

  # The jaxpr is split first into its non-linear part (what it recomputes from the defined
  # operands) and its linear part (as JAX's transpose_jaxpr does): a loop that carries both
  # recomputed primal values and tangents is split into a forward loop and a linear one.
  jk, ju, out_unknown, num_res = pe.partial_eval_jaxpr(jaxpr, undefined)

  def backward(*xs):
    vals, cs = list(xs[:len(defined_vals)]), iter(xs[len(defined_vals):])
    known = core.eval_jaxpr(jk, [], *vals)
    residuals = known[len(known) - num_res:]
    # (an output computed from defined operands only has no linear part: its cotangent goes
    # nowhere)
    full_cts = [next(cs) if m else ad.Zero(ad.tangent_aval(a)) for m, a in zip(ct_mask, out_avals)]
    lin_cts = [c for c, u in zip(full_cts, out_unknown) if u]
    lin_args = list(residuals) + [ad.UndefinedPrimal(a.aval) for a, u in zip(args, undefined)
                                  if u]
    res = ad.backward_pass(ju, [], lin_args, lin_cts)
    return [ad.instantiate_zeros(r) for r in res]

  in_avals = [get_aval(v) for v in defined_vals] + [get_aval(c) for c in nz_cts]
  bwd_jaxpr, consts = _open(pe.trace_to_jaxpr(backward, in_avals, "transpose(checkpoint)"))
  cse = _cse(prevent_cse, pre=len(consts), keep=[not u for u in undefined], post=len(nz_cts))
  outs = iter(remat_p.bind(*consts, *defined_vals, *nz_cts, jaxpr=bwd_jaxpr,
                           prevent_cse=cse, differentiated=True, policy=policy))
  return [next(outs) if u else None for u in undefined]


ad.transpose_rules[remat_p] = _remat_transpose


def _remat_batch(vals, dims, *, jaxpr, prevent_cse, differentiated, policy, axis_size):
  new_closed, out_dims = batching.vmap_jaxpr(_closed(jaxpr), axis_size, dims)
  new_jaxpr, consts = _open(new_closed)
  outs = remat_p.bind(*consts, *vals, jaxpr=new_jaxpr,
                      prevent_cse=_cse(prevent_cse, pre=len(consts)),
                      differentiated=differentiated, policy=policy)
  return outs[:], list(out_dims)


batching.register_rule_with_axis_size(remat_p, _remat_batch)


def _remat_dce(eqn, used_outputs):
  new, used_inputs = pe.dce_jaxpr(eqn.params["jaxpr"], used_outputs, keep_invars=False)
  return used_inputs, eqn._replace(
      params=dict(eqn.params, jaxpr=new,
                  prevent_cse=_cse(eqn.params["prevent_cse"], keep=used_inputs)),
      inputs=[x for x, u in zip(eqn.inputs, used_inputs) if u],
      out_binders=[v for v, u in zip(eqn.out_binders, used_outputs) if u])


pe.dce_rules[remat_p] = _remat_dce


def _cse(cse, *, pre: int = 0, keep=None, post: int = 0, pre_flag: bool = False):
  """The per-operand ``prevent_cse`` flags of a new remat equation made from one with flags
  ``cse``: ``pre`` new leading operands (flagged ``pre_flag``: constants are not, residuals
  are), the old operands where ``keep`` (all if None), ``post`` new trailing operands (tangents
  and cotangents, flagged).  A bool stays a bool (it flags every operand)."""
  if isinstance(cse, bool):
    return cse
  kept = cse if keep is None else tuple(c for c, k in zip(cse, keep) if k)
  return (pre_flag,) * pre + tuple(kept) + (True,) * post


def _staged_cse(cse, jk: Jaxpr, num_res: int, in_unknowns):
  """The flags of the staged half of a split remat equation (residuals, then the unknown
  operands): a residual that is one of the known operands keeps that operand's flag (as JAX
  passes known operands to the staged side as they are), other residuals are flagged."""
  if isinstance(cse, bool):
    return cse
  known_flags = dict(zip(jk.invars, (c for c, u in zip(cse, in_unknowns) if not u)))
  res = jk.outvars[len(jk.outvars) - num_res:]
  return (tuple(known_flags.get(v, True) if isinstance(v, Var) else True for v in res)
          + tuple(c for c, u in zip(cse, in_unknowns) if u))


def _barrier_flags(prevent_cse, n: int) -> list:
  """Which of ``n`` operands go through the optimization barrier."""
  if isinstance(prevent_cse, bool):
    return [prevent_cse] * n
  flags = list(prevent_cse)
  return flags if len(flags) == n else [any(flags)] * n


def _is_constant(instr) -> bool:
  while instr.opcode == "broadcast":
    instr = instr.operands[0]
  return instr.opcode in ("constant", "iota")


def _register_lowering():
  from ourjax.lowering import from_jaxpr, hlo

  @from_jaxpr.register_lowering(remat_p)
  def _lower(ctx, avals_in, avals_out, *args, jaxpr, prevent_cse, differentiated, **_):
    # The recomputation of a differentiated checkpoint reads its inputs through an optimization
    # barrier (as JAX lowers it), so that CSE cannot merge it with the forward pass it repeats.
    # Constants (and splats of them) are left outside: merging those loses nothing, and the
    # simplifier still folds them (x * 1.0 of a cotangent of ones).
    args = list(args)
    flags = _barrier_flags(prevent_cse, len(args))
    if differentiated and any(flags):
      guard = [i for i, (a, f) in enumerate(zip(args, flags)) if f and
               isinstance(a, hlo.Instruction) and not a.shape.is_tuple and not _is_constant(a)]
      if guard:
        for i, g in zip(guard, ctx.builder.opt_barrier([args[i] for i in guard])):
          args[i] = g
    return from_jaxpr.lower_eqns(ctx, jaxpr, [], args)

  @from_jaxpr.register_lowering(name_p)
  def _lower_name(ctx, avals_in, avals_out, x, **_):
    return x


_register_lowering()
