"""Sharded ``jit``: the global jaxpr of a jitted function turned into a per-device jaxpr with
collectives (``jit(f, in_shardings=..., out_shardings=...)``, or a jitted function called on
arrays laid out over a mesh).

Every value of the global jaxpr gets a *spec*: per dimension, the tuple of mesh axes that split
it (empty: not split), as a ``PartitionSpec`` says.  ``partition`` walks the eqns once, in
order, tracing for one device (under ``parallel.spmd_axes`` of the mesh, so collectives stay in
the jaxpr as primitives) a program that computes each value's block:

* elementwise operations run on blocks laid out alike: operands laid out otherwise are
  resharded to the layout of the operand split the most (from a replicated value that is a
  local slice, no communication);
* ``reduce_sum``/``reduce_max``/``reduce_min`` reduce their blocks, then ``psum``/``pmax``/
  ``pmin`` over the mesh axes of the reduced dimensions;
* ``dot_general`` multiplies blocks: batch dimensions split alike on both sides, and free
  dimensions, stay split in the result; contracting dimensions split alike are summed with a
  ``psum`` over their axes (the all-reduce of a data-parallel gradient);
* ``broadcast_in_dim``, ``reshape`` (of dimensions it keeps), ``transpose``, ``squeeze``,
  ``convert_element_type`` and the like move the split with the dimensions;
* anything else (gathers, scatters, control flow, ...) gets its operands gathered whole
  (``all_gather``) and runs replicated: correct, not fast.

Resharding gathers the dimensions whose split changes (``all_gather(tiled=True)``) and slices
the ones newly split (``dynamic_slice`` at ``axis_index * block``).  The result is run by the
SPMD executor (``spmd.Program``) on the lanes of the mesh, as ``shard_map`` is.
"""
from __future__ import annotations

import numpy as np

from ourjax import core
from ourjax.array import Array
from ourjax.lax import parallel

Spec = tuple   # per dimension, a tuple of mesh axis names

_BEFORE_PSUM = {"transpose", "reshape", "squeeze"}
_REDUCE_COLLECTIVE = {"reduce_sum": "psum", "reduce_max": "pmax", "reduce_min": "pmin"}
_ELEMENTWISE: set | None = None


def _elementwise() -> set:
  global _ELEMENTWISE
  if _ELEMENTWISE is None:
    from ourjax.lax import elementwise as ew
    from ourjax.interpreters import ad
    _ELEMENTWISE = {p for p in vars(ew).values() if isinstance(p, core.Primitive)}
    _ELEMENTWISE.add(ad.add_any_p)
  return _ELEMENTWISE


def spec_of(pspec, ndim: int) -> Spec:
  """A ``PartitionSpec``'s axes per dimension of a rank-``ndim`` value."""
  return tuple(pspec._axes(ndim))


def replicated(ndim: int) -> Spec:
  return ((),) * ndim


class Partitioner:
  """Per-device code for a global jaxpr on ``mesh`` (see the module docstring)."""

  def __init__(self, mesh):
    self.mesh = mesh
    self.sizes = dict(mesh.shape)
    # id of a replicated broadcast_in_dim result -> (it, its eqn, its operand and spec): split
    # later, it is broadcast again to the block instead of sliced from the whole
    self.broadcasts: dict = {}

  def parts(self, axes) -> int:
    return int(np.prod([self.sizes[n] for n in axes], dtype=np.int64))

  def local_shape(self, shape, spec: Spec) -> tuple:
    return tuple(s // self.parts(a) for s, a in zip(shape, spec))

  # -- moving values between layouts ---------------------------------------------------------

  def reshard(self, x, src: Spec, dst: Spec, gshape):
    """The block of a value of global shape ``gshape`` laid out by ``dst``, from its block
    under ``src``."""
    from ourjax import lax
    if src == dst:
      return x
    made = self.broadcasts.get(id(x))
    if made is not None and made[0] is x and not any(src):
      _, e, (op, op_spec), op_shape = made
      shape, bdims = e.params["shape"], e.params["broadcast_dimensions"]
      want = tuple(dst[d] if op_shape[i] == shape[d] else () for i, d in enumerate(bdims))
      op = self.reshard(op, op_spec, want, op_shape)
      return e.primitive.bind(op, **dict(e.params, shape=self.local_shape(shape, dst)))
    for d, (a, b) in enumerate(zip(src, dst)):
      if a and a != b:
        x = lax.all_gather(x, a, axis=d, tiled=True)
    for d, (a, b) in enumerate(zip(src, dst)):
      if b and a != b:
        blk = gshape[d] // self.parts(b)
        start = lax.axis_index(b) * np.int32(blk)
        x = lax.dynamic_slice_in_dim(x, start, blk, axis=d)
    return x

  # -- the walk ------------------------------------------------------------------------------

  def run(self, jaxpr: core.Jaxpr, consts, args, in_specs, out_req):
    """The per-device outputs (and their specs) of ``jaxpr`` on per-device ``args`` laid out
    by ``in_specs``; an output with a requested spec in ``out_req`` (else None) is resharded
    to it."""
    env = {}
    for v, c in zip(jaxpr.constvars, consts):
      env[v] = (c, replicated(v.aval.ndim))
    for v, x, s in zip(jaxpr.invars, args, in_specs):
      env[v] = (x, s)

    def read(x):
      if isinstance(x, core.Literal):
        return x.value(), replicated(x.aval.ndim)
      return env[x]

    for e in jaxpr.eqns:
      ins = [read(x) for x in e.inputs]
      outs = self.eqn(e, ins)
      for v, o in zip(e.out_binders, outs):
        env[v] = o
    results, specs = [], []
    for v, req in zip(jaxpr.outvars, out_req):
      x, s = read(v)
      if req is not None:
        x, s = self.reshard(x, s, req, v.aval.shape), req
      results.append(x)
      specs.append(s)
    return results, specs

  def eqn(self, e, ins):
    name = e.primitive.name
    avals_in = [x.aval for x in e.inputs]
    if all(not any(s) for _, s in ins) and name != "broadcast_in_dim":
      return self.bind_replicated(e, ins)     # whole values: the eqn as it is
    rule = _RULES.get(name)
    if rule is None and e.primitive in _elementwise():
      rule = Partitioner.elementwise
    if rule is not None:
      out = rule(self, e, ins, avals_in)
      if out is not None:
        return out
    return self.fallback(e, ins, avals_in)

  def bind_replicated(self, e, ins):
    outs = e.primitive.bind(*[x for x, _ in ins], **e.params)
    outs = outs if e.primitive.multiple_results else [outs]
    return [(o, replicated(v.aval.ndim)) for o, v in zip(outs, e.out_binders)]

  def fallback(self, e, ins, avals_in):
    """Every operand gathered whole; the eqn runs as it is, its results replicated."""
    vals = [(self.reshard(x, s, replicated(len(s)), a.shape), replicated(len(s)))
            for (x, s), a in zip(ins, avals_in)]
    return self.bind_replicated(e, vals)

  # -- rules (None: not handled, fall back) ------------------------------------------------------

  def elementwise(self, e, ins, avals_in):
    out_shape = e.out_binders[0].aval.shape
    if any(v.aval.shape != out_shape for v in e.out_binders):
      return None
    if any(a.ndim and a.shape != out_shape for a in avals_in):
      return None
    target, best = replicated(len(out_shape)), 1
    for (_, s), a in zip(ins, avals_in):
      if a.ndim and self.parts(sum(s, ())) > best:
        target, best = s, self.parts(sum(s, ()))
    vals = [x if not a.ndim else self.reshard(x, s, target, a.shape)
            for (x, s), a in zip(ins, avals_in)]
    outs = e.primitive.bind(*vals, **e.params)
    outs = outs if e.primitive.multiple_results else [outs]
    return [(o, target) for o in outs]

  def reduce(self, e, ins, avals_in):
    (x, s), = ins
    axes = tuple(e.params["axes"])
    out = e.primitive.bind(x, **e.params)
    over = tuple(n for d in axes for n in s[d])
    if over:
      out = getattr(parallel, _REDUCE_COLLECTIVE[e.primitive.name])(out, over)
    return [(out, tuple(a for d, a in enumerate(s) if d not in axes))]

  def dot_general(self, e, ins, avals_in):
    from ourjax import lax
    (lhs, ls), (rhs, rs) = ins
    la, ra = avals_in
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    nl, nr = [()] * la.ndim, [()] * ra.ndim
    used: set = set()
    summed = []
    for pairs, contracting in ((zip(lb, rb), False), (zip(lc, rc), True)):
      for i, j in pairs:
        cand = ls[i] or rs[j]
        if cand and not set(cand) & used:
          nl[i] = nr[j] = cand
          used.update(cand)
          if contracting:
            summed.extend(cand)
    lfree = [d for d in range(la.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(ra.ndim) if d not in rc and d not in rb]
    for free, spec, new in ((lfree, ls, nl), (rfree, rs, nr)):
      for d in free:
        if spec[d] and not set(spec[d]) & used:
          new[d] = spec[d]
          used.update(spec[d])
    nl, nr = tuple(nl), tuple(nr)
    lhs = self.reshard(lhs, ls, nl, la.shape)
    rhs = self.reshard(rhs, rs, nr, ra.shape)
    out = e.primitive.bind(lhs, rhs, **e.params)
    if summed:
      out = lax.psum(out, tuple(summed))
    spec = tuple(nl[d] for d in lb) + tuple(nl[d] for d in lfree) + tuple(nr[d] for d in rfree)
    return [(out, spec)]

  def broadcast_in_dim(self, e, ins, avals_in):
    (x, s), = ins
    shape, bdims = e.params["shape"], e.params["broadcast_dimensions"]
    a = avals_in[0]
    keep = [s[i] if a.shape[i] == shape[d] else () for i, d in enumerate(bdims)]
    x = self.reshard(x, s, tuple(keep), a.shape)
    out_spec = [()] * len(shape)
    for i, d in enumerate(bdims):
      out_spec[d] = keep[i]
    out_spec = tuple(out_spec)
    params = dict(e.params, shape=self.local_shape(shape, out_spec))
    out = e.primitive.bind(x, **params)
    if not any(out_spec):
      self.broadcasts[id(out)] = (out, e, (x, tuple(keep)), a.shape)
    return [(out, out_spec)]

  def reshape(self, e, ins, avals_in):
    (x, s), = ins
    if e.params.get("dimensions") is not None:
      return None
    old, new = avals_in[0].shape, tuple(e.params["new_sizes"])
    out_spec = [()] * len(new)
    keep = list(s)
    last = max((d for d, axes in enumerate(s) if axes), default=-1)
    for d, axes in enumerate(s):
      if not axes:
        continue
      # the blocks of dimension d stay blocks of the output dimension k that starts where d
      # does: of the same size, or (when no split dimension follows) one that the split
      # divides, the blocks being contiguous runs of the elements from there on
      pre = int(np.prod(old[:d], dtype=np.int64))
      target = [k for k in range(len(new)) if int(np.prod(new[:k], dtype=np.int64)) == pre
                and (new[k] == old[d] or (d == last and new[k] % self.parts(axes) == 0))]
      if target:
        out_spec[target[0]] = axes
      else:
        keep[d] = ()
    x = self.reshard(x, s, tuple(keep), old)
    out_spec = tuple(out_spec)
    params = dict(e.params, new_sizes=self.local_shape(new, out_spec))
    return [(e.primitive.bind(x, **params), out_spec)]

  def slice(self, e, ins, avals_in):
    (x, s), = ins
    shape = avals_in[0].shape
    start, limit = e.params["start_indices"], e.params["limit_indices"]
    strides = e.params["strides"] or (1,) * len(shape)
    # split dimensions that the slice takes whole stay split; the others are gathered
    whole = [start[d] == 0 and limit[d] == shape[d] and strides[d] == 1
             for d in range(len(shape))]
    keep = tuple(a if w else () for a, w in zip(s, whole))
    x = self.reshard(x, s, keep, shape)
    local = self.local_shape(shape, keep)
    params = dict(e.params, limit_indices=tuple(
        local[d] if keep[d] else limit[d] for d in range(len(shape))))
    return [(e.primitive.bind(x, **params), keep)]

  def pad(self, e, ins, avals_in):
    (x, s), (v, _) = ins
    shape = avals_in[0].shape
    # split dimensions without padding stay split; the others are gathered
    keep = tuple(a if tuple(c) == (0, 0, 0) else ()
                 for a, c in zip(s, e.params["padding_config"]))
    x = self.reshard(x, s, keep, shape)
    return [(e.primitive.bind(x, v, **e.params), keep)]

  def concatenate(self, e, ins, avals_in):
    dim = e.params["dimension"]
    target = tuple(() if d == dim else a for d, a in enumerate(ins[0][1]))
    vals = [self.reshard(x, sp, target, a.shape) for (x, sp), a in zip(ins, avals_in)]
    return [(e.primitive.bind(*vals, **e.params), target)]

  def transpose(self, e, ins, avals_in):
    (x, s), = ins
    perm = e.params["permutation"]
    return [(e.primitive.bind(x, **e.params), tuple(s[p] for p in perm))]

  def squeeze(self, e, ins, avals_in):
    (x, s), = ins
    dims = {d % max(len(s), 1) for d in e.params["dimensions"]}
    return [(e.primitive.bind(x, **e.params), tuple(a for d, a in enumerate(s)
                                                  if d not in dims))]


_RULES = {
    "reduce_sum": Partitioner.reduce, "reduce_max": Partitioner.reduce,
    "reduce_min": Partitioner.reduce, "dot_general": Partitioner.dot_general,
    "broadcast_in_dim": Partitioner.broadcast_in_dim, "reshape": Partitioner.reshape,
    "transpose": Partitioner.transpose, "squeeze": Partitioner.squeeze,
    "slice": Partitioner.slice, "concatenate": Partitioner.concatenate,
    "pad": Partitioner.pad,
}


def _inline_all(closed: core.ClosedJaxpr):
  """The jaxpr with every call (jit, custom derivative, checkpoint) replaced by its body, so
  the partitioner sees the operations themselves."""
  from ourjax.interpreters import spmd
  return spmd._inline(closed.jaxpr, closed.consts, want=lambda j: True)


def partition(closed: core.ClosedJaxpr, mesh, in_specs, out_req, name: str):
  """``(per-device closed jaxpr, output specs)`` for the global ``closed`` whose inputs are
  laid out on ``mesh`` by ``in_specs``; ``out_req`` per output: a spec to lay the result out
  by, or None (whatever the partitioning gives)."""
  from ourjax.interpreters import partial_eval as pe
  jaxpr, consts = _inline_all(closed)
  part = Partitioner(mesh)
  local_avals = [v.aval.update(shape=part.local_shape(v.aval.shape, s))
                 for v, s in zip(jaxpr.invars, in_specs)]
  cell = []

  def per_device(*xs):
    outs, specs = part.run(jaxpr, consts, xs, in_specs, out_req)
    cell.append(specs)
    return outs
  with parallel.spmd_axes(part.sizes):
    local = pe.trace_to_jaxpr(per_device, local_avals, name)
  return core.ClosedJaxpr(_merge_psums(local.jaxpr), local.consts), cell[-1]


def _merge_psums(jaxpr: core.Jaxpr) -> core.Jaxpr:
  """``jaxpr`` with each psum moved down to just before the first eqn that reads its result,
  and the psums that meet there over the same axes made one (a data-parallel step's gradient
  psums, one per parameter, become one all-reduce of them all, after the backward pass)."""
  pending: list = []
  eqns: list = []

  def flush():
    by_axes: dict = {}
    for e in pending:
      by_axes.setdefault(e.params["axes"], []).append(e)
    for group in by_axes.values():
      eqns.append(group[0]._replace(inputs=[x for e in group for x in e.inputs],
                                    out_binders=[v for e in group for v in e.out_binders]))
    pending.clear()

  uses: dict = {}
  for e in jaxpr.eqns:
    for x in e.inputs:
      if isinstance(x, core.Var):
        uses[x] = uses.get(x, 0) + 1
  for v in jaxpr.outvars:
    if isinstance(v, core.Var):
      uses[v] = uses.get(v, 0) + 2
  waiting: dict = {}          # a pending psum's output -> (its eqn's index in pending, position)
  for e in jaxpr.eqns:
    hit = [x for x in e.inputs if isinstance(x, core.Var) and x in waiting]
    if hit and e.primitive.name in _BEFORE_PSUM and len(e.inputs) == 1 and uses[hit[0]] == 1:
      # a transpose or reshape of a sum is the sum of the transposed (reshaped) terms: it runs
      # first, and the psum waits on
      i, j = waiting.pop(hit[0])
      pe_ = pending[i]
      term = core.Var(e.out_binders[0].aval)
      eqns.append(e._replace(inputs=[pe_.inputs[j]], out_binders=[term]))
      ins, outs = list(pe_.inputs), list(pe_.out_binders)
      ins[j], outs[j] = term, e.out_binders[0]
      pending[i] = pe_._replace(inputs=ins, out_binders=outs)
      waiting[e.out_binders[0]] = (i, j)
      continue
    if hit:
      flush()
      waiting.clear()
    if e.primitive is parallel.psum_p:
      waiting.update({v: (len(pending), j) for j, v in enumerate(e.out_binders)})
      pending.append(e)
    else:
      eqns.append(e)
  flush()
  return core.Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars, jaxpr.debug_name)


# ------------------------------------------------------------------------------------------------
# jit with shardings


def _is_spec_leaf(x) -> bool:
  from ourjax.sharding import PartitionSpec, Sharding
  return x is None or isinstance(x, (Sharding, PartitionSpec))


def _prefix_leaves(prefix, value, what: str) -> list:
  """``prefix`` (a tree prefix of ``value`` whose leaves are shardings, specs or None) as one
  entry per leaf of ``value``."""
  from ourjax._pytree import broadcast_prefix
  try:
    return broadcast_prefix(prefix, value, _is_spec_leaf)
  except Exception as e:
    raise ValueError(f"jit {what} must be a tree prefix of the corresponding value: "
                     f"{e}") from None


def _resolve(s, what):
  """A NamedSharding (or SingleDeviceSharding, or None) for a requested sharding; a bare
  ``PartitionSpec`` takes the mesh of ``with mesh:``."""
  from ourjax.sharding import _with_current_mesh
  return _with_current_mesh(s, f"jit {what}")


def _jit_plan(jw, entry, leaves, args_kwargs):
  """``(mesh, in specs, requested out specs, requested out shardings)`` of a jitted call, or
  None when nothing in it is laid out over a mesh (the ordinary single-device call)."""
  from ourjax.sharding import NamedSharding, ShardedArray, SingleDeviceSharding
  from ourjax._pytree import tree_unflatten
  args, kwargs = args_kwargs
  fname = entry.sig.fun_name if entry.sig is not None else "fun"
  names = entry.sig.arg_names if entry.sig is not None else [str(i) for i in range(len(leaves))]
  in_req, out_req = jw._shardings or (None, None)
  n = len(leaves)
  n_pos = n - len(_kwarg_leaves(jw, args, kwargs))      # (keyword arguments: unspecified)
  if isinstance(in_req, (tuple, list)) and not _is_spec_leaf(in_req):
    dyn = _dyn_args(jw, args)
    if len(in_req) != len(dyn):
      raise ValueError(f"jit({fname}): in_shardings has {len(in_req)} entries but the function "
                       f"was called with {len(dyn)} positional arguments (besides static ones)")
    per_in = _prefix_leaves(tuple(in_req), tuple(dyn), "in_shardings")
  else:
    per_in = [in_req] * n_pos
  per_in = [_resolve(s, "in_shardings") for s in per_in] + [None] * (n - n_pos)
  out_avals = entry.closed.out_avals
  per_out = _prefix_leaves(out_req, tree_unflatten(entry.out_tree, list(out_avals)),
                           "out_shardings") if out_req is not None else [None] * len(out_avals)
  per_out = [_resolve(s, "out_shardings") for s in per_out]

  mesh, first = None, None
  others = []         # shardings that are not NamedShardings

  def use(sh, what):
    nonlocal mesh, first
    if not isinstance(sh, NamedSharding):
      others.append((sh, what))
      return
    m = sh.mesh
    if mesh is None:
      mesh, first = m, what
    elif m != mesh:
      raise ValueError(
          f"jit({fname}): mismatched meshes: {first} is laid out on {mesh!r} with device ids "
          f"{[int(i) for i in mesh.device_ids.flat]}, and {what} on {m!r} with device ids "
          f"{[int(i) for i in m.device_ids.flat]}; all the arguments and results of a jitted "
          "computation must share one mesh")

  committed = []
  for x, nm in zip(leaves, names):
    sh = x._sharding if type(x) is ShardedArray else None
    if isinstance(sh, NamedSharding):
      use(sh, f"argument {nm} ({x.aval.str_short()})")
    committed.append(sh)
  for s, nm in zip(per_in, names):
    if s is not None:
      use(s, f"in_shardings of argument {nm}")
  for j, s in enumerate(per_out):
    if s is not None:
      use(s, f"out_shardings of output {j}")
  if mesh is None:
    return None
  for sh, what in others:
    raise ValueError(f"jit({fname}): {what} is {sh!r}, but the computation is laid out on "
                     f"{mesh!r}: a sharded jit takes NamedShardings over one mesh")
  in_specs = []
  for x, req, com, nm in zip(leaves, per_in, committed, names):
    aval = core.get_aval(x)
    if isinstance(com, SingleDeviceSharding) and len(mesh.devices.flat) > 1 and \
        com._device not in list(mesh.devices.flat):
      raise ValueError(f"jit({fname}): argument {nm} ({aval.str_short()}) lies on "
                       f"{com._device}, outside the mesh {mesh!r}")
    if req is not None and isinstance(com, NamedSharding) and \
        not req.is_equivalent_to(com, aval.ndim):
      raise ValueError(f"jit({fname}): the sharding passed to jit does not match the sharding "
                       f"of argument {nm} ({aval.str_short()}): jit sharding {req!r}, argument "
                       f"sharding {com!r}")
    sh = req if req is not None else (com if isinstance(com, NamedSharding) else None)
    spec = replicated(aval.ndim) if sh is None else spec_of(sh.spec, aval.ndim)
    for d, axes in enumerate(spec):
      parts = int(np.prod([mesh.shape[a] for a in axes], dtype=np.int64))
      if aval.shape[d] % parts:
        raise ValueError(
            f"jit({fname}): argument {nm} ({aval.str_short()}) has the sharding {sh!r}, which "
            f"implies that its dimension {d} is split {parts} times (over mesh axes "
            f"{axes}), but the dimension size {aval.shape[d]} is not divisible by {parts}")
    in_specs.append(spec)
  out_specs = []
  for j, (s, a) in enumerate(zip(per_out, out_avals)):
    if s is None:
      out_specs.append(None)
      continue
    spec = spec_of(s.spec, a.ndim)
    for d, axes in enumerate(spec):
      parts = int(np.prod([mesh.shape[x] for x in axes], dtype=np.int64))
      if a.shape[d] % parts:
        raise ValueError(f"jit({fname}): out_shardings of output {j} ({a.str_short()}) split "
                         f"its dimension {d} {parts} times, which does not divide "
                         f"{a.shape[d]}")
    out_specs.append(spec)
  return mesh, tuple(in_specs), tuple(out_specs), per_out


def _dyn_args(jw, args):
  nargs = len(args)
  static = {i % nargs if i < 0 and nargs else i for i in jw.static_argnums}
  return [a for i, a in enumerate(args) if i not in static]


def _kwarg_leaves(jw, args, kwargs):
  from ourjax._pytree import tree_flatten
  return tree_flatten({k: v for k, v in kwargs.items() if k not in jw.static_argnames})[0]


def _to_pspec(spec: Spec):
  """The PartitionSpec of a spec, without trailing Nones (``P()`` when replicated), as JAX
  writes the shardings it propagates."""
  from ourjax.sharding import PartitionSpec
  entries = [a if a else None for a in spec]
  while entries and entries[-1] is None:
    entries.pop()
  return PartitionSpec(*entries)


class _Sharded:
  """A partitioned signature: the program, its lanes, the inputs' and outputs' shardings."""

  def __init__(self, entry, mesh, in_specs, out_req, requested, name, donated=None):
    from ourjax.interpreters import spmd
    from ourjax.sharding import NamedSharding
    self.closed = entry.closed          # (keeps the id the cache key names alive)
    local, out_specs = partition(entry.closed, mesh, in_specs, out_req, f"sharded({name})")
    self.local = local
    self.lanes = spmd.Lanes(mesh)
    # (a donated argument's block on each device may become the buffer of a result there)
    self.program = spmd.Program(local, spmd._backend_of(self.lanes.devices),
                                donated if donated and any(donated) else None)
    self.in_shardings = [NamedSharding(mesh, _to_pspec(s)) for s in in_specs]
    self.out_shardings = [r if r is not None else NamedSharding(mesh, _to_pspec(s))
                          for r, s in zip(requested, out_specs)]
    self.out_avals = list(entry.closed.out_avals)

  def __call__(self, leaves):
    from ourjax.interpreters import spmd
    lanes = self.lanes
    outs = spmd.run_on_blocks(self.program, leaves, self.in_shardings, lanes)
    return [spmd._assemble([outs[k][j] for k in range(len(lanes))], sh, aval)
            for j, (sh, aval) in enumerate(zip(self.out_shardings, self.out_avals))]


def call_sharded(jw, entry, leaves, args_kwargs):
  """The flat results of a jitted call whose arguments or results are laid out over a mesh
  (``in_shardings``, ``out_shardings`` or arguments already laid out so), or None when none
  is (the ordinary call)."""
  from ourjax.sharding import ShardedArray
  # the plan depends on the signature and on the shardings of the arguments laid out already
  # (the same objects call after call, when results feed the next step)
  committed = [x._sharding if type(x) is ShardedArray else None for x in leaves]
  memo_key = (id(entry.closed), tuple(map(id, committed)))
  memo = jw._plans.get(memo_key)
  if memo is not None and memo[0] is entry.closed and \
      all(a is b for a, b in zip(memo[1], committed)):
    plan = memo[2]
  else:
    plan = _jit_plan(jw, entry, leaves, args_kwargs)
    if len(jw._plans) > 256:      # (arguments laid out anew on every call)
      jw._plans.clear()
    jw._plans[memo_key] = (entry.closed, committed, plan)
  if plan is None:
    return None
  mesh, in_specs, out_specs, requested = plan
  key = (id(entry.closed), mesh, in_specs, out_specs)
  hit = jw._sharded.get(key)
  donated = entry.sig.donated if entry.sig is not None else ()
  if hit is None or hit.closed is not entry.closed:
    name = entry.sig.fun_name if entry.sig is not None else "fun"
    hit = jw._sharded[key] = _Sharded(entry, mesh, in_specs, out_specs, requested, name,
                                      donated)
  outs = hit(leaves)
  if any(donated):
    # donated arguments are deleted after the call, as JAX's are (each device's block taken
    # by a result of the same type where one is, ``spmd.Program``); those no result can use
    # are warned about (once, when the plan is made)
    d = getattr(hit, "donation", False)
    if d is False:
      from ourjax import _donation
      from ourjax.interpreters import partial_eval as pe
      closed = entry.closed
      used = [True] * len(closed.in_avals) if jw.keep_unused else \
          pe.dce_jaxpr(closed.jaxpr, keep_invars=False)[1]
      kept = [i for i, u in enumerate(used) if u]
      d = _donation.set_up([closed.in_avals[i] for i in kept], closed.out_avals,
                           [donated[i] for i in kept])
      hit.donation = None if d is None else tuple(kept[k] for k in d.deleted)
      d = hit.donation
    for i in d or ():
      if isinstance(leaves[i], Array):
        leaves[i]._delete()
  return outs
