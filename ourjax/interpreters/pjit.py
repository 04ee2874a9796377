"""``pjit_p`` (printed ``jit``): the primitive a jitted function binds.  Its single parameter of substance is the
closed jaxpr of the function; its rules transform that jaxpr and bind pjit again, so a jitted
function stays one compiled call under vmap, and under jvp.  ``donated_invars`` (present only
when something is donated: a bool per input) carries ``jit``'s donation through the rules as
JAX's does: primal inputs keep it under jvp and vmap (so the arrays are deleted when the call
finally runs), tangents, residuals and cotangents are never donated.

Eagerly (``impl``) the jaxpr is compiled by a backend (``ourjax.backends``) and the executable
is cached on the jaxpr object."""
from __future__ import annotations

import collections
import functools
import threading
import weakref

from ourjax import core
from ourjax.config import config
from ourjax.core import ClosedJaxpr, Primitive
from ourjax.interpreters import ad, batching
from ourjax.interpreters import partial_eval as pe

pjit_p = Primitive("jit")          # JAX prints this primitive as ``jit[name=... jaxpr=...]``
pjit_p.multiple_results = True
jit_p = pjit_p
core.call_primitives.add(pjit_p)
core.pp_param_rules[pjit_p] = lambda params: (
    [("name", params["name"])]
    + [("donated_invars", params.get("donated_invars"))] * ("donated_invars" in params)
    + [("jaxpr", params["jaxpr"])])


def _pjit_abstract_eval(*avals, jaxpr: ClosedJaxpr, name: str, **_):
  return list(jaxpr.out_avals)


pjit_p.def_abstract_eval(_pjit_abstract_eval)


def _pjit_impl(*args, jaxpr: ClosedJaxpr, name: str, backend=None, donated_invars=None, **_):
  from ourjax.backends import compile_jaxpr
  exe = compile_jaxpr(jaxpr, backend=backend, name=name, donated=donated_invars)
  return exe(*args)


# The rules' transformed jaxprs, per (rule, jaxpr object, discrete arguments): the same jitted
# function under grad/vmap gets the same jvp/known/unknown/transposed/batched jaxpr objects on
# every call, so the executables compiled for them (cached per jaxpr object) are reused, as
# JAX's weakref caches of jvp_jaxpr, partial_eval_jaxpr_nounits, ... do.  An entry holds its
# jaxpr weakly: when the jaxpr dies (its jitted function's cache cleared, the function gone),
# its entries go, and with them the constants they hold (device arrays a closure captured);
# besides, the least recently used go first.
_XFORM_CACHE: collections.OrderedDict = collections.OrderedDict()
_XFORM_KEYS: dict = {}        # id(jaxpr) -> (weakref to it, keys of its entries)
_XFORM_DEAD: list = []        # ids of jaxprs that died (appended by the weakref callbacks)
_XFORM_MAX = 512
_XFORM_LOCK = threading.Lock()


def _purge_dead(dead=_XFORM_DEAD, keys=_XFORM_KEYS, cache=_XFORM_CACHE):
  while dead:
    cid, wref = dead.pop()
    entry = keys.get(cid)
    if entry is not None and entry[0] is wref:
      del keys[cid]
      for k in entry[1]:
        cache.pop(k, None)


def _xform_died(cid, wref, dead=_XFORM_DEAD, lock=_XFORM_LOCK, purge=_purge_dead):
  # (the containers bound at definition: this weakref callback may run at interpreter exit,
  # after the module's globals were cleared)
  dead.append((cid, wref))
  if lock.acquire(blocking=False):   # (a collection inside the locked region waits)
    try:
      purge()
    finally:
      lock.release()


def _cached_transform(kind: str, closed: ClosedJaxpr, key, make):
  if any(isinstance(c, core.Tracer) for c in closed.consts):
    return make()            # it closes over an enclosing transformation's values: not reusable
  k = (kind, id(closed), key, config.x64_enabled)
  with _XFORM_LOCK:
    _purge_dead()
    hit = _XFORM_CACHE.get(k)
    if hit is not None and hit[0]() is closed:
      _XFORM_CACHE.move_to_end(k)
      return hit[1]
  val = make()
  with _XFORM_LOCK:
    _purge_dead()
    entry = _XFORM_KEYS.get(id(closed))
    if entry is None or entry[0]() is not closed:
      for stale in (entry[1] if entry is not None else ()):   # (a dead jaxpr of the same id)
        _XFORM_CACHE.pop(stale, None)
      entry = _XFORM_KEYS[id(closed)] = (
          weakref.ref(closed, functools.partial(_xform_died, id(closed))), set())
    entry[1].add(k)
    _XFORM_CACHE[k] = (entry[0], val)
    while len(_XFORM_CACHE) > _XFORM_MAX:
      old, (wref, _) = _XFORM_CACHE.popitem(last=False)
      e = _XFORM_KEYS.get(old[1])
      if e is not None and e[0] is wref:
        e[1].discard(old)
  return val


def _binds_axis_names(jaxpr) -> bool:
  """Does ``jaxpr`` (or a jaxpr in its equations' parameters) name a mapped axis (psum, axis_index
  ...)?  Batching such a jaxpr depends on the enclosing axes, so it is not cached."""
  for eqn in jaxpr.eqns:
    axes = eqn.params.get("axes")
    if "axis_name" in eqn.params or (isinstance(axes, tuple) and any(
        not isinstance(a, int) for a in axes)):      # a collective's axes are names
      return True
    for v in eqn.params.values():
      for sub in (v if isinstance(v, (tuple, list)) else (v,)):
        inner = sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub
        if isinstance(inner, core.Jaxpr) and _binds_axis_names(inner):
          return True
  return False


def _donating(params, flags):
  """``params`` with ``donated_invars`` set to ``flags`` (removed when none is donated)."""
  params = {k: v for k, v in params.items() if k != "donated_invars"}
  if flags is not None and any(flags):
    params["donated_invars"] = tuple(bool(f) for f in flags)
  return params


pjit_p.def_custom_impl(_pjit_impl)


def _pjit_jvp(primals, tangents, *, jaxpr: ClosedJaxpr, name: str, **params):
  nonzeros = [type(t) is not ad.Zero for t in tangents]
  # symbolic zeros stay symbolic across the call (and float0 tangents never enter the jaxpr)
  jvp_closed, out_nz = _cached_transform(
      "jvp", jaxpr, tuple(nonzeros),
      lambda: ad.jvp_jaxpr_nonzeros(jaxpr, nonzeros, instantiate=False))
  nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
  donated = params.get("donated_invars")
  params = _donating(params, None if donated is None else
                     tuple(donated) + (False,) * len(nz_tangents))
  outs = pjit_p.bind(*primals, *nz_tangents, jaxpr=jvp_closed, name=f"jvp({name})", **params)
  n = len(jaxpr.out_avals)
  tans = iter(outs[n:])
  return outs[:n], [next(tans) if nz else ad.Zero(ad.tangent_aval(a))
                    for nz, a in zip(out_nz, jaxpr.out_avals)]


ad.jvp_rules[pjit_p] = _pjit_jvp


def _pjit_partial_eval(trace, tracers, *, jaxpr: ClosedJaxpr, name: str, **params):
  """Split the call into a known call (run now, returning residuals too) and an unknown call
  staged into the linear jaxpr.  This is what keeps grad(jit(f)) compiled."""
  in_unknowns = [not t.pval.is_known for t in tracers]

  def split():
    flat = pe.convert_constvars_jaxpr(jaxpr.jaxpr)
    unknowns = [False] * len(jaxpr.consts) + in_unknowns
    jk, ju, out_unknowns, num_res = pe.partial_eval_jaxpr(flat, unknowns, instantiate=False)
    return ClosedJaxpr(jk, []), ClosedJaxpr(ju, []), out_unknowns, num_res
  jk_closed, ju_closed, out_unknowns, num_res = _cached_transform(
      "partial_eval", jaxpr, tuple(in_unknowns), split)
  known_ins = list(jaxpr.consts) + [t.pval.const for t in tracers if t.pval.is_known]
  donated = params.get("donated_invars")
  known_params = _donating(params, None if donated is None else
                           [False] * len(jaxpr.consts) +
                           [d for d, t in zip(donated, tracers) if t.pval.is_known])
  params = _donating(params, None)
  known_outs = pjit_p.bind(*known_ins, jaxpr=jk_closed, name=name, **known_params)
  n_known_out = len(known_outs) - num_res
  outs_k, residuals = known_outs[:n_known_out], known_outs[n_known_out:]
  res_tracers = [trace.instantiate_const(trace.pure(r)) for r in residuals]
  unk_tracers = [t for t in tracers if not t.pval.is_known]
  outs_u = trace.default_process_primitive(
      pjit_p, res_tracers + unk_tracers, dict(jaxpr=ju_closed, name=name, **params))
  outs_k, outs_u = iter(outs_k), iter(outs_u)
  return [next(outs_u) if u else trace.pure(next(outs_k)) for u in out_unknowns]


pe.partial_eval_rules[pjit_p] = _pjit_partial_eval


def _pjit_partial_eval_jaxpr(eqn, in_unknowns):
  """The offline split of a pjit equation (a jit inside a jitted function, under grad)."""
  closed = eqn.params["jaxpr"]
  nc = len(closed.consts)

  def split():
    flat = pe.convert_constvars_jaxpr(closed.jaxpr)
    jk, ju, out_unknowns, num_res = pe.partial_eval_jaxpr(flat, [False] * nc + list(in_unknowns))
    jk_closed = ClosedJaxpr(core.Jaxpr(jk.invars[:nc], jk.invars[nc:], jk.eqns, jk.outvars),
                            closed.consts)
    return jk_closed, ClosedJaxpr(ju, []), out_unknowns, num_res
  jk_closed, ju_closed, out_unknowns, num_res = _cached_transform(
      "partial_eval_jaxpr", closed, tuple(in_unknowns), split)
  res_vars = [core.Var(v.aval) for v in jk_closed.jaxpr.outvars[
      len(jk_closed.jaxpr.outvars) - num_res:]]
  known_outs = [v for v, u in zip(eqn.out_binders, out_unknowns) if not u]
  donated = eqn.params.get("donated_invars")
  eqn_k = eqn._replace(inputs=[x for x, u in zip(eqn.inputs, in_unknowns) if not u],
                       params=_donating(dict(eqn.params, jaxpr=jk_closed), None if donated is None
                                        else [d for d, u in zip(donated, in_unknowns) if not u]),
                       out_binders=known_outs + res_vars)
  eqn_u = eqn._replace(inputs=res_vars + [x for x, u in zip(eqn.inputs, in_unknowns) if u],
                       params=_donating(dict(eqn.params, jaxpr=ju_closed), None),
                       out_binders=[v for v, u in zip(eqn.out_binders, out_unknowns) if u])
  return eqn_k, eqn_u, list(out_unknowns)


pe.partial_eval_jaxpr_rules[pjit_p] = _pjit_partial_eval_jaxpr


def _pjit_transpose(cts, *args, jaxpr: ClosedJaxpr, name: str, **params):
  """Transpose the linear call by tracing the backward pass of its jaxpr into a new jaxpr."""
  undefined = [ad.is_undefined_primal(a) for a in args]
  defined_vals = [a for a in args if not ad.is_undefined_primal(a)]
  nz_cts = [c for c in cts if type(c) is not ad.Zero]
  ct_mask = [type(c) is not ad.Zero for c in cts]

  def backward(*xs):
    vals, cs = xs[:len(defined_vals)], list(xs[len(defined_vals):])
    it = iter(vals)
    full_args = [ad.UndefinedPrimal(a.aval) if u else next(it) for a, u in zip(args, undefined)]
    full_cts = [cs.pop(0) if m else ad.Zero(ad.tangent_aval(a))
                for m, a in zip(ct_mask, jaxpr.out_avals)]
    res = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, full_args, full_cts)
    return [ad.instantiate_zeros(r) for r in res]

  in_avals = [core.get_aval(v) for v in defined_vals] + [core.get_aval(c) for c in nz_cts]
  key = (tuple(undefined), tuple(ct_mask),
         tuple((a.shape, a.dtype, a.weak_type) for a in in_avals))
  bwd = _cached_transform("transpose", jaxpr, key, lambda: pe.trace_to_jaxpr(
      backward, in_avals, f"transpose({name})"))
  params = _donating(params, None)
  outs = pjit_p.bind(*defined_vals, *nz_cts, jaxpr=bwd, name=f"transpose({name})", **params)
  outs = iter(outs)
  return [next(outs) if u else None for u in undefined]


ad.transpose_rules[pjit_p] = _pjit_transpose


def _pjit_batch(vals, dims, *, jaxpr: ClosedJaxpr, name: str, axis_size, **params):
  # outputs that do not depend on the batch stay unbatched (vmap's out_axes=None needs that)
  def batch():
    return batching.batch_jaxpr(jaxpr, axis_size, dims, instantiate=False)
  if _binds_axis_names(jaxpr.jaxpr):
    new_jaxpr, out_dims = batch()
  else:
    new_jaxpr, out_dims = _cached_transform("batch", jaxpr, (axis_size, tuple(dims)), batch)
  out_dims = list(out_dims)
  outs = pjit_p.bind(*vals, jaxpr=new_jaxpr, name=f"vmap({name})", **params)
  return outs, out_dims


batching.register_rule_with_axis_size(pjit_p, _pjit_batch)


def _pjit_dce(eqn, used_outputs):
  closed = eqn.params["jaxpr"]

  def dce():
    new, used_inputs = pe.dce_jaxpr(closed.jaxpr, used_outputs, keep_invars=False)
    new_closed = ClosedJaxpr(new, closed.consts if new.constvars else [])
    if new.constvars != closed.jaxpr.constvars:
      keep = set(new.constvars)
      new_closed = ClosedJaxpr(new, [c for v, c in zip(closed.jaxpr.constvars, closed.consts)
                                     if v in keep])
    return new_closed, used_inputs
  new_closed, used_inputs = _cached_transform("dce", closed, tuple(used_outputs), dce)
  outs = [v for v, u in zip(eqn.out_binders, used_outputs) if u]
  ins = [x for x, u in zip(eqn.inputs, used_inputs) if u]
  donated = eqn.params.get("donated_invars")
  params = _donating(dict(eqn.params, jaxpr=new_closed), None if donated is None else
                     [d for d, u in zip(donated, used_inputs) if u])
  new_eqn = eqn._replace(params=params, out_binders=outs, inputs=ins)
  return list(used_inputs), new_eqn


pe.dce_rules[pjit_p] = _pjit_dce
