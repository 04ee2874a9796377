"""The order an SPMD program (``interpreters/spmd.py``) runs a per-device jaxpr in: as few
rounds of collectives as its dependences allow, the collectives of a round that reduce over the
same axes made one.

Each collective (or control-flow eqn holding collectives: a *barrier*) runs in the earliest
round its inputs allow: round 0 after the eqns that need no collective's result, round r after
those that need one of round r - 1.  Every other eqn runs as late as its readers allow (right
before the first round whose collective reads it, or in the last segment), so that values do
not cross more segments than they must.  The program is then, per round r, the compute eqns of
segment r followed by round r's collectives; the ``psum``/``pmax``/``pmin`` eqns of a round
with the same parameters become one eqn over all their operands (one all-reduce: a
data-parallel step's gradient ``pmean`` and its loss's become one collective between two
segments, where the traced order had two collectives and three segments).  Its operands of one
dtype are then packed: each flattened and all concatenated at the end of the segment before,
the reduction runs on the concatenation, and the next segment slices the results out (one
all-reduce of one buffer: one NCCL call and one output buffer a device where a step's 24
gradients took 24; the sums are those of the separate operands, element by element).

A jaxpr with effects (host callbacks) keeps its traced order (its reductions packed).
"""
from __future__ import annotations

from ourjax import core
from ourjax.lax import parallel

_MERGEABLE = (parallel.psum_p, parallel.pmax_p, parallel.pmin_p)
#: the most operands packed into one buffer
PACK_PARTS = 32


def _merge_key(e):
  if e.primitive not in _MERGEABLE:
    return None
  try:
    return (e.primitive, tuple(sorted(e.params.items())))
  except TypeError:              # (an unhashable or unorderable parameter: not merged)
    return None


def schedule(jaxpr: core.Jaxpr, is_barrier) -> list:
  """``jaxpr``'s eqns in the order to run them (see the module docstring); ``is_barrier(eqn)``
  says which need the devices together."""
  eqns = list(jaxpr.eqns)
  barrier = [bool(is_barrier(e)) for e in eqns]
  if sum(barrier) < 2 or core.jaxpr_has_effects(jaxpr):
    return [q for e in eqns for q in (_packed(e) if e.primitive in _MERGEABLE else [e])]
  producer: dict = {}
  asap = [0] * len(eqns)
  for i, e in enumerate(eqns):
    p = 0
    for x in e.inputs:
      j = producer.get(x) if isinstance(x, core.Var) else None
      if j is not None:
        p = max(p, asap[j] + barrier[j])
    asap[i] = p
    for v in e.out_binders:
      producer[v] = i
  last = max(a + b for a, b in zip(asap, barrier))
  phase = list(asap)
  late: dict = {v: last for v in jaxpr.outvars if isinstance(v, core.Var)}
  for i in reversed(range(len(eqns))):
    e = eqns[i]
    if not barrier[i]:
      lims = [late[v] for v in e.out_binders if v in late]
      phase[i] = min(lims) if lims else asap[i]
    q = phase[i]
    for x in e.inputs:
      if isinstance(x, core.Var):
        late[x] = min(late.get(x, q), q)
  out = []
  for r in range(last + 1):
    out.extend(e for e, p, b in zip(eqns, phase, barrier) if p == r and not b)
    groups: dict = {}
    order = []
    for e, p, b in zip(eqns, phase, barrier):
      if p != r or not b:
        continue
      key = _merge_key(e)
      if key is None:
        order.append([e])
      elif key in groups:
        groups[key].append(e)
      else:
        groups[key] = [e]
        order.append(groups[key])
    for g in order:
      e = g[0] if len(g) == 1 else g[0]._replace(
          inputs=[x for e in g for x in e.inputs],
          out_binders=[v for e in g for v in e.out_binders])
      out.extend(_packed(e) if e.primitive in _MERGEABLE else [e])
  return out


def _packed(e) -> list:
  """A reduction eqn as eqns: its operands of each (dtype, weak type), two or more (up to
  ``PACK_PARTS`` a pack), flattened and concatenated; the reduction; its results sliced out and
  reshaped back.  (Literal and empty operands are left as they are.)"""
  groups: dict = {}
  for j, x in enumerate(e.inputs):
    a = x.aval
    if isinstance(x, core.Var) and a.size:
      groups.setdefault((a.dtype, a.weak_type), []).append(j)
  # (at most PACK_PARTS operands a pack: a GPU loop kernel finds an element's part through a
  # chain of branches, one a part)
  packs = [(k, g[i:i + PACK_PARTS]) for k, g in groups.items()
           for i in range(0, len(g), PACK_PARTS)]
  packs = [(k, g) for k, g in packs if len(g) > 1]
  if not packs:
    return [e]
  packed = {j for _, g in packs for j in g}
  ins = [x for j, x in enumerate(e.inputs) if j not in packed]
  outs = [v for j, v in enumerate(e.out_binders) if j not in packed]
  before, after = [], []
  for (dt, weak), g in packs:
    xs = [e.inputs[j] for j in g]
    sizes = [x.aval.size for x in xs]
    flat = core.Var(core.ShapedArray((sum(sizes),), dt, weak))
    total = core.Var(flat.aval)
    before += _spliced(_pack, xs, [flat])
    after += _spliced(lambda f, xs=xs, sizes=sizes: _unpack(f, xs, sizes), [total],
                      [e.out_binders[j] for j in g])
    ins.append(flat)
    outs.append(total)
  return before + [e._replace(inputs=ins, out_binders=outs)] + after


def _pack(*xs):
  from ourjax import lax
  return [lax.concatenate([lax.reshape(x, (x.size,)) for x in xs], 0)]


def _unpack(flat, xs, sizes):
  from ourjax import lax
  outs, at = [], 0
  for x, n in zip(xs, sizes):
    outs.append(lax.reshape(lax.slice(flat, (at,), (at + n,)), x.aval.shape))
    at += n
  return outs


def _spliced(fn, in_vars, out_vars) -> list:
  """The eqns of ``fn`` traced on ``in_vars``' types, reading ``in_vars`` and defining
  ``out_vars`` (each an output of its own eqn)."""
  from ourjax.interpreters import partial_eval as pe
  closed = pe.trace_to_jaxpr(fn, [v.aval for v in in_vars], "spmd_pack")
  j = closed.jaxpr
  assert not j.constvars and len(set(j.outvars)) == len(j.outvars) and \
      not set(j.outvars) & set(j.invars), j
  sub = dict(zip(j.invars, in_vars))
  sub.update(zip(j.outvars, out_vars))
  ren = lambda x: sub.setdefault(x, core.Var(x.aval)) if isinstance(x, core.Var) else x  # noqa
  return [q._replace(inputs=[ren(x) for x in q.inputs], out_binders=[ren(v) for v in q.out_binders])
          for q in j.eqns]
