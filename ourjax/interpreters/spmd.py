"""SPMD execution over several devices: the ``Program`` that ``pmap`` (``pmap.py``),
``shard_map`` (``shard_map.py``) and sharded ``jit`` (``partition.py``) run.

A function mapped over devices is traced once, for one device, into a *per-device jaxpr* in
which the collectives (``lax.psum`` & co. over the mapped axes) are primitives
(``lax/parallel.py``).  ``Program`` cuts that jaxpr at its collectives:

    [compute segment] -> collective -> [compute segment] -> collective -> ...

The eqns are put in the order of ``spmd_schedule``: the collectives in as few rounds as their
dependences allow, a round's reductions over the same axes one eqn over packed operands.
Each compute segment is an ordinary jaxpr, compiled once by the backend like any jitted
function (on the GPU, loaded once per device); each collective runs through the communicator of
the device set (``backends/collectives.py``: NCCL between GPUs, NumPy between CPU devices).
A call runs every step on every device (*lane*) in turn; on GPUs each step only enqueues work
on the device's stream, so the devices compute concurrently and NCCL orders itself between
their kernels.  Calls to jitted functions, custom-derivative functions and checkpoints whose
bodies hold collectives are inlined first; a ``cond``, ``while`` or ``scan`` whose body holds
collectives is run step by step, its body again a ``Program``.

A ``pmap`` call (``pmap.py``) whose arguments have the structure and the types of the last
call with that structure takes a fast path: the structure is matched by generated code
(``_pytree_codegen``), each leaf's type checked against the plan's, and a pmap result along
the same axis over the same devices gives its lanes' values as they are (no avals built, no
key hashed); the results' tree is built by generated code too.

``Lanes`` is the device set: the devices in mesh order, the mesh axis names and sizes, and the
communicator; a collective over some axes runs within the *groups* of lanes that differ only
along those axes.

Under a transformation (pmap or shard_map called on tracers: inside ``jit``, ``grad``,
``vmap``) the mapped function is evaluated by its definition instead, as ``vmap`` with named
axes over the devices' blocks, so it composes with everything; the devices' parallelism is for
concrete calls.
"""
from __future__ import annotations

import operator

import numpy as np

from ourjax import _donation, core, errors
from ourjax.array import Array
from ourjax.lax import parallel
from ourjax._pytree import tree_flatten, tree_unflatten

# eqns whose params hold a body called with the eqn's inputs: inlined when it has collectives
_CALL_BODIES = {"jit": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
                "checkpoint": "jaxpr", "name": "jaxpr"}
_COLLECTIVES = set(parallel.COLLECTIVES)


def _open(j):
  """``(jaxpr, consts)`` of a ClosedJaxpr or Jaxpr."""
  if isinstance(j, core.ClosedJaxpr):
    return j.jaxpr, j.consts
  return j, []


def _sub_jaxprs(params):
  for v in params.values():
    if isinstance(v, (core.ClosedJaxpr, core.Jaxpr)):
      yield _open(v)[0]
    elif isinstance(v, (tuple, list)):
      for x in v:
        if isinstance(x, (core.ClosedJaxpr, core.Jaxpr)):
          yield _open(x)[0]


def has_collectives(jaxpr: core.Jaxpr) -> bool:
  return any(e.primitive in _COLLECTIVES or
             any(has_collectives(j) for j in _sub_jaxprs(e.params)) for e in jaxpr.eqns)


def _inline(jaxpr: core.Jaxpr, consts, want=has_collectives) -> tuple[core.Jaxpr, list]:
  """``jaxpr`` with the call eqns (jit, custom derivatives, checkpoint) whose bodies hold
  collectives (or, given ``want``, those bodies ``want`` says) replaced by their bodies' eqns;
  returns ``(jaxpr, consts)``."""
  if not want(jaxpr):
    return jaxpr, list(consts)
  constvars, consts = list(jaxpr.constvars), list(consts)
  eqns = []
  outer = {}       # a call's outputs -> the body's outputs, renamed into this jaxpr
  ro = lambda x: outer.get(x, x) if isinstance(x, core.Var) else x  # noqa: E731
  for e in jaxpr.eqns:
    key = _CALL_BODIES.get(e.primitive.name)
    body = e.params.get(key) if key else None
    inner = _open(body)[0] if body is not None else None
    if inner is None or not want(inner) or \
        (len(inner.invars), len(inner.outvars)) != (len(e.inputs), len(e.out_binders)):
      eqns.append(e._replace(inputs=[ro(x) for x in e.inputs]) if outer else e)
      continue
    inner, inner_consts = _inline(inner, _open(body)[1], want)
    # rename the body's variables into this jaxpr
    sub = {}
    for v, c in zip(inner.constvars, inner_consts):
      nv = core.Var(v.aval)
      constvars.append(nv)
      consts.append(c)
      sub[v] = nv
    for v, x in zip(inner.invars, e.inputs):
      sub[v] = ro(x)
    rd = lambda x: sub.get(x, x) if isinstance(x, core.Var) else x  # noqa: E731
    for ie in inner.eqns:
      outs = [core.Var(v.aval) for v in ie.out_binders]
      for v, nv in zip(ie.out_binders, outs):
        sub[v] = nv
      eqns.append(ie._replace(inputs=[rd(x) for x in ie.inputs], out_binders=outs))
    for ov, iv in zip(e.out_binders, inner.outvars):
      outer[ov] = rd(iv)
  return core.Jaxpr(constvars, jaxpr.invars, eqns, [ro(v) for v in jaxpr.outvars],
                    jaxpr.debug_name), consts


class Lanes:
  """The devices of an SPMD computation: ``mesh``'s, one lane each in mesh order.  Under
  ``ourjax.distributed`` a mesh may hold other processes' devices: the lanes are then this
  process's devices of the mesh (``lane_ids``: their positions among ``all_devices``, the
  mesh's devices in order), each at its coordinates in the whole mesh, and the communicator
  spans the processes (``collectives.for_lanes``)."""

  def __init__(self, mesh):
    from ourjax.sharding import _process_index
    self.mesh = mesh
    self.all_devices = list(mesh.devices.flat)
    every = mesh.coords()
    me = _process_index()
    self.lane_ids = [i for i, d in enumerate(self.all_devices)
                     if getattr(d, "process_index", 0) == me]
    self.multi_process = len(self.lane_ids) != len(self.all_devices)
    self.devices = [self.all_devices[i] for i in self.lane_ids]
    self.coords = [every[i] for i in self.lane_ids]
    self._all_coords = every
    self._comm = None
    if not self.devices:
      raise ValueError(f"an SPMD computation over {mesh!r} (devices {self.all_devices}) has no "
                       f"device of this process ({me})")
    self.platform = self.devices[0].platform
    self._groups: dict = {}
    # (the local numbers: CUDA ordinals of GPUs)
    self._ordinals = [d.local_hardware_id for d in self.devices]

  @property
  def comm(self):
    """The communicator, made when a collective first runs: a computation without
    collectives (a pmap over one GPU, say) needs no NCCL."""
    if self._comm is None:
      from ourjax.backends import collectives
      self._comm = collectives.for_lanes(self)
    return self._comm

  @comm.setter
  def comm(self, value):
    self._comm = value

  def __len__(self):
    return len(self.devices)

  def position(self, lane, axes) -> int:
    """The lane's position in its group for ``axes``: row-major over their coordinates."""
    pos, c = 0, self.coords[lane]
    for n in axes:
      pos = pos * self.mesh.shape[n] + c[n]
    return pos

  def groups(self, axes) -> list[tuple]:
    """The groups of lanes a collective over ``axes`` runs in (the lanes that differ only
    along those axes), each in position order; over several processes the groups of the
    whole mesh, in its lane numbers (``all_devices``' positions)."""
    g = self._groups.get(axes)
    if g is None:
      groups: dict = {}
      for lane, c in enumerate(self._all_coords):
        key = tuple(v for n, v in c.items() if n not in axes)
        pos = 0
        for n in axes:
          pos = pos * self.mesh.shape[n] + c[n]
        groups.setdefault(key, {})[pos] = lane
      g = self._groups[axes] = [tuple(m[p] for p in sorted(m)) for m in groups.values()]
    return g

  def put(self, lane, value, uploads=None):
    """``value`` (host or device) as an Array on the lane's device.  ``uploads``: a GPU
    call's ``Uploads``, which copies host data to the devices at once when it runs (before
    the call launches anything)."""
    if not isinstance(value, Array):
      value = Array(value)
    if self.platform == "cpu":
      return value if type(value) is Array else Array._from_result(value._value, value.aval)
    buf = value._device_buf
    if buf is not None and type(value) is Array and buf.device.ordinal == self._ordinals[lane]:
      return value
    if uploads is not None and buf is None and type(value) is Array:
      from ourjax.backends.cuda import driver
      return Array._from_device(uploads.put(value._value, driver.get_device(
          self._ordinals[lane])), value.aval)
    from ourjax.backends import put_on
    return put_on(value, self.devices[lane])

  def uploads(self):
    """A new ``Uploads`` for a call's host arguments (None on CPU devices)."""
    if self.platform == "cpu":
      return None
    from ourjax.backends.cuda.backend import Uploads
    return Uploads()


class _Compute:
  """A segment of eqns compiled as one executable (per GPU, loaded on each).  ``donated``: a
  bool per input, whose buffer the segment may take for a result (``jit``'s donation, see
  ``_donation``: on each lane the executable writes the result into the input's block when
  the lane's Array owns it alone, and deletes the Array)."""

  def __init__(self, eqns, in_vars, out_vars, backend, donated=None):
    jaxpr = core.Jaxpr([], in_vars, eqns, out_vars, "spmd_segment")
    self.closed = core.ClosedJaxpr(jaxpr, [])
    self.in_vars, self.out_vars = in_vars, out_vars
    self.backend = backend
    self.donated = None
    if donated and any(donated):
      # only the inputs a result takes (the others would be deleted for nothing, or warned
      # about: pmap and jit warn once, about the whole computation)
      from ourjax import _donation
      d = _donation.set_up(self.closed.in_avals, self.closed.out_avals, donated, warn=False)
      if d is not None and d.aliases:
        taken = set(d.aliases.values())
        self.donated = tuple(k in taken for k in range(len(in_vars)))
    self._exe = None
    self._callers: dict = {}

  def executable(self, device):
    """The segment's executable on ``device`` (compiled once; on a GPU, loaded there once:
    ``backends.for_device`` keeps the per-device copies)."""
    from ourjax import backends
    if self._exe is None:
      self._exe = backends.compile_jaxpr(self.closed, self.backend, "spmd_segment", cache=False,
                                         donated=self.donated)
    return backends.for_device(self._exe, device)

  def caller(self, device):
    """``call(args) -> list of Arrays`` on ``device``: the executable's dispatch fast path (as
    ``jit``'s: the segment's arguments always have its parameters' types), falling back to the
    general call when the backend has none or it refuses the arguments."""
    call = self._callers.get(device.id)
    if call is None:
      exe = self.executable(device)
      fast = exe.fast_path() if hasattr(exe, "fast_path") else None
      if fast is None:
        call = lambda args: exe(*args)  # noqa: E731
      else:
        def call(args, fast=fast, exe=exe):
          outs = fast(args)
          return exe(*args) if outs is None else outs
      self._callers[device.id] = call
    return call


_VIEWS = ("reshape", "squeeze")


class _View:
  """A segment of reshapes only: each lane's result is its input with another shape, sharing
  the data (no kernel, no copy: a collective's leading-axis layout costs nothing)."""

  def __init__(self, eqns):
    self.eqns = eqns

  def run(self, env, slot):
    for e in self.eqns:
      x = e.inputs[0]
      v = x.value() if isinstance(x, core.Literal) else env[slot[x]]
      env[slot[e.out_binders[0]]] = _reshaped(v if isinstance(v, Array) else Array(v),
                                              e.out_binders[0].aval.shape)


def _getter(slots):
  """``get(env) -> tuple`` of ``env``'s values at ``slots`` (one C call: ``itemgetter``)."""
  if len(slots) > 1:
    return operator.itemgetter(*slots)
  if slots:
    s = slots[0]
    return lambda env: (env[s],)
  return lambda env: ()


class Program:
  """A per-device jaxpr cut into compute segments and collectives (see the module docstring).
  The collectives run in as few rounds as their dependences allow, those of a round over the
  same axes as one (``spmd_schedule``).  Each lane's values live in a list, one slot per
  variable (and literal), the slots each step reads and writes fixed here, once."""

  def __init__(self, closed: core.ClosedJaxpr, backend: str, donated=None):
    from ourjax.interpreters import spmd_schedule
    jaxpr, consts = _inline(closed.jaxpr, closed.consts)
    jaxpr = _without_lone_reductions(jaxpr)
    self.jaxpr, self.consts, self.backend = jaxpr, consts, backend
    # the inputs whose lanes' buffers may hold results (``donate_argnums``): each goes to the
    # last segment that reads it, unless a collective or the outputs read it after that
    self._donated = {v for v, d in zip(jaxpr.invars, donated or ()) if d}
    self.steps = self._cut(spmd_schedule.schedule(jaxpr, _is_barrier))
    taken = {v for st in self.steps if isinstance(st, _Compute) and st.donated
             for v, d in zip(st.in_vars, st.donated) if d}
    #: the inputs whose lanes' buffers a segment takes (see ``_unshared``)
    self.donated_args = tuple(i for i, v in enumerate(jaxpr.invars) if v in taken)
    self._lane_envs: dict = {}
    self._plan()

  def _cut(self, eqns):
    steps, seg = [], []
    for e in eqns:
      if _is_barrier(e):
        if seg:
          steps.append(seg)
          seg = []
        steps.append(e)
      else:
        seg.append(e)
    if seg:
      steps.append(seg)
    # which variables each later step (and the outputs) reads: a segment returns only those
    later_reads: set = {v for v in self.jaxpr.outvars if isinstance(v, core.Var)}
    out = []
    for step in reversed(steps):
      if isinstance(step, list):
        defined = {v for e in step for v in e.out_binders}
        reads = []
        for e in step:
          for x in e.inputs:
            if isinstance(x, core.Var) and x not in defined and x not in reads:
              reads.append(x)
        outs = [v for e in step for v in e.out_binders if v in later_reads]
        if outs:
          views = all(e.primitive.name in _VIEWS for e in step)
          donated = [v in self._donated and v not in later_reads for v in reads]
          out.append(_View(step) if views else
                     _Compute(step, reads, outs, self.backend, donated))
          later_reads.update(reads)
      else:
        out.append(step)
        later_reads.update(x for x in step.inputs if isinstance(x, core.Var))
    out.reverse()
    return out

  def _plan(self):
    """Slot numbers: constants, inputs, then every value a step reads or writes; literals get
    slots of their own, filled once per lane set."""
    slot: dict = {}
    literals = []

    def at(x):
      if isinstance(x, core.Literal):
        literals.append((len(slot), x))
        slot[object()] = len(slot)
        return literals[-1][0]
      s = slot.get(x)
      if s is None:
        s = slot[x] = len(slot)
      return s
    self._const_slots = [at(v) for v in self.jaxpr.constvars]
    self._in_slots = [at(v) for v in self.jaxpr.invars]
    lo = self._in_slots[0] if self._in_slots else 0
    if self._in_slots != list(range(lo, lo + len(self._in_slots))):
      raise AssertionError("spmd: the inputs' slots are not contiguous")
    self._in_range = (lo, lo + len(self._in_slots))
    plan = []
    for step in self.steps:
      if isinstance(step, _Compute):
        plan.append((0, step, [at(v) for v in step.in_vars], [at(v) for v in step.out_vars]))
      elif isinstance(step, _View):
        for e in step.eqns:
          for x in [*e.inputs, *e.out_binders]:
            if isinstance(x, core.Var):
              at(x)
        plan.append((1, step, slot, None))
      else:
        plan.append((2, step, [at(x) for x in step.inputs], [at(v) for v in step.out_binders]))
    self._steps_plan = plan
    self._out_slots = [at(v) for v in self.jaxpr.outvars]
    self._get_outs = _getter(self._out_slots)
    # (the outputs that are literals: their lanes' values are NumPy or Python scalars)
    self.literal_outs = {j for j, v in enumerate(self.jaxpr.outvars)
                         if isinstance(v, core.Literal)}
    # outputs whose lanes' Arrays are not made fresh by a segment of this call (an input or
    # constant returned as it is, a value returned twice, a collective's or control flow's
    # result): each call returns new Arrays over their data, so that two results never share
    # an Array, which a donating call would delete from under the other (``_donation``
    # reuses a buffer only when one Array holds it)
    fresh = set()
    for step in self.steps:
      if isinstance(step, _Compute):
        fresh.update(step.out_vars)
      elif isinstance(step, _View):
        fresh.update(e.out_binders[0] for e in step.eqns)
    seen: set = set()
    shared = []
    for j, v in enumerate(self.jaxpr.outvars):
      if isinstance(v, core.Var) and (v not in fresh or v in seen):
        shared.append(j)
      seen.add(v)
    self._shared_outs = tuple(shared)
    self._literals = literals
    self._nslots = len(slot)

  def _lane_plan(self, lanes):
    """Per lane set (made once): each lane's slot list with its constants and literals filled
    in, and the steps with their per-lane callers resolved: ``(0, callers, get_ins, (lo,
    hi))`` for a compute segment (its arguments gathered by ``get_ins``, its results stored
    into the slots ``lo:hi``), ``(1, view, slots, None)``, ``(2, eqn, in slots, out slots)``."""
    key = tuple(lanes._ordinals)
    hit = self._lane_envs.get(key)
    if hit is None:
      envs = []
      for k in range(len(lanes)):
        env = [None] * self._nslots
        for s, c in zip(self._const_slots, self.consts):
          env[s] = lanes.put(k, c)
        for s, lit in self._literals:
          env[s] = lit.value()
        envs.append(env)
      steps = []
      for kind, step, ins, outs in self._steps_plan:
        if kind == 0:
          callers = [step.caller(d) for d in lanes.devices]
          lo = outs[0] if outs else 0
          if outs != list(range(lo, lo + len(outs))):
            raise AssertionError("spmd: a segment's output slots are not contiguous")
          steps.append((0, callers, _getter(ins), (lo, lo + len(outs))))
        elif kind == 2 and step.primitive in _COLLECTIVES and \
            step.primitive is not parallel.axis_index_p:
          steps.append((3, _Collective(step, lanes), _getter(ins), outs))
        else:
          steps.append((kind, step, ins, outs))
      hit = self._lane_envs[key] = (envs, steps)
    return hit

  def run(self, lanes: Lanes, args_per_lane):
    """Per-lane outputs for per-lane arguments (lists of Arrays).  Each step runs on the lanes
    in turn: on GPUs a call only enqueues work on its device's stream, so the devices compute
    at once.  (One host thread per GPU was measured slower on 2 and 4 H100s: the Python
    between driver calls holds the GIL.)"""
    envs0, steps = self._lane_plan(lanes)
    lo, hi = self._in_range
    if self.donated_args:
      args_per_lane = _unshared(args_per_lane, self.donated_args)
    envs = []
    for env, args in zip(envs0, args_per_lane):
      env = env.copy()
      env[lo:hi] = args
      envs.append(env)
    for kind, step, ins, outs in steps:
      if kind == 0:
        olo, ohi = outs
        for env, call in zip(envs, step):
          env[olo:ohi] = call(ins(env))
      elif kind == 3:
        res = step([ins(env) for env in envs])
        for env, rs in zip(envs, res):
          for s, r in zip(outs, rs):
            env[s] = r
      elif kind == 1:
        for env in envs:
          step.run(env, ins)
      else:
        res = _run_eqn(step, lanes, [[env[s] for s in ins] for env in envs], self.backend)
        for env, rs in zip(envs, res):
          for s, r in zip(outs, rs):
            env[s] = r
    get, nslots = self._get_outs, self._nslots
    for env in envs:          # (a slice stored with another length would shift the slots)
      if len(env) != nslots:
        raise AssertionError("spmd: a step returned another number of values than planned")
    outs = [list(get(env)) for env in envs]
    if self._shared_outs:
      for o in outs:
        for j in self._shared_outs:
          o[j] = _alias(o[j])
    return outs


def _alias(v):
  """A new Array over ``v``'s data (no copy)."""
  if not isinstance(v, Array):
    return v
  if v._npy is None and v._device_buf is not None:
    return Array._from_device(v._device_buf, v.aval)
  return Array._from_result(v._value, v.aval)


def _unshared(rows, donated):
  """``rows`` (per lane, its arguments) with each donated argument's value copied where the
  same Array stands elsewhere too (another argument, or another lane: a replicated host value
  on CPU devices, or the results of a computation that returned one value twice), so that a
  segment writing a result into its buffer changes nothing that is read later."""
  count: dict = {}
  for row in rows:
    for v in row:
      count[id(v)] = count.get(id(v), 0) + 1
  if all(count[id(row[i])] == 1 for row in rows for i in donated):
    return rows
  out = []
  for row in rows:
    row = list(row)
    for i in donated:
      v = row[i]
      if count[id(v)] > 1 and isinstance(v, Array):
        row[i] = Array._from_result(np.array(v._value), v.aval)
    out.append(row)
  return out


def _without_lone_reductions(jaxpr: core.Jaxpr) -> core.Jaxpr:
  """``jaxpr`` without its psum/pmax/pmin eqns over one device (each result its operand): the
  eqns around them are one segment (a pmap over one GPU runs the step as jit does)."""
  if not any(e.primitive in _REDUCTIONS and e.params.get("size") == 1 for e in jaxpr.eqns):
    return jaxpr
  sub: dict = {}
  rd = lambda x: sub.get(x, x) if isinstance(x, core.Var) else x  # noqa: E731
  eqns = []
  for e in jaxpr.eqns:
    if e.primitive in _REDUCTIONS and e.params.get("size") == 1:
      sub.update(zip(e.out_binders, [rd(x) for x in e.inputs]))
    else:
      eqns.append(e._replace(inputs=[rd(x) for x in e.inputs]) if sub else e)
  return core.Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [rd(v) for v in jaxpr.outvars],
                    jaxpr.debug_name)


def _is_barrier(e) -> bool:
  """Whether ``e`` needs the lanes together: a collective, or an eqn whose body holds one."""
  return e.primitive in _COLLECTIVES or any(has_collectives(j) for j in _sub_jaxprs(e.params))


def _run_eqn(e, lanes: Lanes, ins, backend):
  """Per-lane outputs (lists) of a collective or of a control-flow eqn holding collectives."""
  p, params = e.primitive, e.params
  n = len(lanes)
  if p is parallel.axis_index_p:
    return [[Array(np.int32(lanes.position(k, params["axes"])))] for k in range(n)]
  if p in _COLLECTIVES:
    return _Collective(e, lanes)(ins)
  if p.name == "cond":
    return _run_cond(e, lanes, ins, backend)
  if p.name == "while":
    return _run_while(e, lanes, ins, backend)
  if p.name == "scan":
    return _run_scan(e, lanes, ins, backend)
  raise NotImplementedError(f"pmap/shard_map: collectives inside '{p.name}' are not supported "
                            "by ourjax")


_REDUCTIONS = {parallel.psum_p: "sum", parallel.pmax_p: "max", parallel.pmin_p: "min"}
_MOVES = {parallel.all_gather_p: "all_gather", parallel.reduce_scatter_p: "reduce_scatter",
          parallel.all_to_all_p: "all_to_all"}


class _Collective:
  """A collective eqn over ``lanes``, what every call needs decided once (its groups, the
  communicator's operation, the results' types): ``step(ins) -> outs``, per lane its
  operands and its results (Arrays)."""

  def __init__(self, e, lanes: Lanes):
    p, params = e.primitive, e.params
    self.e, self.lanes = e, lanes
    self.lone = p in _REDUCTIONS and params["size"] == 1
    self.groups = lanes.groups(params["axes"])
    self.avals = [v.aval for v in e.out_binders]
    if p in _REDUCTIONS:
      self.method, self.extra, self.many = "all_reduce", (_REDUCTIONS[p],), True
    elif p is parallel.ppermute_p:
      self.method, self.extra, self.many = "ppermute", (params["perm"],), False
    else:
      self.method, self.extra, self.many = _MOVES[p], (), False
    # (operands come from the lanes' slots, on their devices already; literals and, on GPUs,
    # values an eager operation made elsewhere are put there)
    self.put = lanes.platform != "cpu" or any(isinstance(x, core.Literal) for x in e.inputs)
    self._call = None

  def __call__(self, ins):
    lanes = self.lanes
    if self.put:
      ins = [[lanes.put(k, x) for x in xs] for k, xs in enumerate(ins)]
    if self.lone:
      return ins            # (a reduction over one device: its operands; no communicator)
    call = self._call
    if call is None:
      call = self._call = getattr(lanes.comm, self.method)
    try:
      if self.many:
        raw = call(self.groups, ins, *self.extra)
      else:
        raw = [[o] for o in call(self.groups, [i[0] for i in ins], *self.extra)]
    except errors.CollectiveTimeoutError as err:
      e = self.e
      types = ", ".join(v.aval.str_short() for v in e.inputs)
      raise errors.CollectiveTimeoutError(
          f"lax.{e.primitive.name} over axes {e.params['axes']} of {types} did not complete: "
          f"{err}") from None
    # typed as the jaxpr says (the communicators return NumPy arrays or device buffers)
    avals = self.avals
    if raw and raw[0] and isinstance(raw[0][0], np.ndarray):
      wrap = Array._from_result
      return [[wrap(r, a) for r, a in zip(rs, avals)] for rs in raw]
    return [[_typed(r, a) for r, a in zip(rs, avals)] for rs in raw]


def _typed(raw, aval) -> Array:
  if isinstance(raw, np.ndarray):
    return Array._from_result(raw, aval)
  return Array._from_device(raw, aval)


_programs: dict = {}


def _program(closed, backend) -> Program:
  key = (id(closed), backend)
  hit = _programs.get(key)
  if hit is None or hit[0] is not closed:
    hit = _programs[key] = (closed, Program(closed, backend))
  return hit[1]


def _agree(values, what):
  vals = [int(np.asarray(v)) for v in values]
  if len(set(vals)) != 1:
    raise ValueError(f"pmap/shard_map: {what} differs between devices ({vals}), but its body "
                     "holds collectives, which every device must take part in")
  return vals[0]


def _run_cond(e, lanes, ins, backend):
  branches = e.params["branches"]
  i = _agree([x[0] for x in ins], "the branch index of lax.cond")
  i = min(max(i, 0), len(branches) - 1)
  return _program(branches[i], backend).run(lanes, [x[1:] for x in ins])


def _run_while(e, lanes, ins, backend):
  p = e.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  cond, body = _program(p["cond_jaxpr"], backend), _program(p["body_jaxpr"], backend)
  cconsts = [x[:nc] for x in ins]
  bconsts = [x[nc:nc + nb] for x in ins]
  carry = [x[nc + nb:] for x in ins]
  while True:
    preds = cond.run(lanes, [cc + c for cc, c in zip(cconsts, carry)])
    if not _agree([pr[0] for pr in preds], "the condition of lax.while_loop"):
      return carry
    carry = body.run(lanes, [bc + c for bc, c in zip(bconsts, carry)])


def _run_scan(e, lanes, ins, backend):
  from ourjax import numpy as jnp
  p = e.params
  nconst, ncarry, length = p["num_consts"], p["num_carry"], p["length"]
  body = _program(p["jaxpr"], backend)
  n = len(lanes)
  consts = [x[:nconst] for x in ins]
  carry = [x[nconst:nconst + ncarry] for x in ins]
  xs = [x[nconst + ncarry:] for x in ins]
  ys = [[] for _ in range(n)]
  order = range(length - 1, -1, -1) if p["reverse"] else range(length)
  for t in order:
    outs = body.run(lanes, [consts[k] + carry[k] + [x[t] for x in xs[k]] for k in range(n)])
    for k in range(n):
      carry[k] = outs[k][:ncarry]
      ys[k].append(outs[k][ncarry:])
  out = []
  for k in range(n):
    steps = ys[k][::-1] if p["reverse"] else ys[k]
    nys = len(p["jaxpr"].out_avals) - ncarry
    stacked = [jnp.stack([s[j] for s in steps]) if steps else
               jnp.zeros((0,) + p["jaxpr"].out_avals[ncarry + j].shape,
                         p["jaxpr"].out_avals[ncarry + j].dtype) for j in range(nys)]
    out.append(list(carry[k]) + [lanes.put(k, s) for s in stacked])
  return out


# ------------------------------------------------------------------------------------------------
# Moving blocks between global arrays and lanes


_RESHAPED_AVALS: dict = {}


def _reshaped_aval(aval, shape):
  """``aval`` with ``shape`` (made once per pair: a data-parallel step reshapes every parameter's
  block on every call, in and out)."""
  key = (aval, shape)
  a = _RESHAPED_AVALS.get(key)
  if a is None:
    if len(_RESHAPED_AVALS) > 4096:
      _RESHAPED_AVALS.clear()
    a = _RESHAPED_AVALS[key] = aval.update(shape=shape)
  return a


def _reshaped(x: Array, shape) -> Array:
  """``x`` with another shape of the same size, without copying (device data included)."""
  shape = tuple(shape)
  if x.shape == shape:
    return x
  buf = x._device_buf
  aval = _reshaped_aval(x.aval, shape)
  if buf is not None and x._npy is None:
    from ourjax.backends.cuda.backend import DeviceBuffer
    nb = DeviceBuffer._wrap(buf.device, buf.allocation, shape, buf.dtype, buf._ready)
    return Array._from_device(nb, aval)
  return Array._from_result(x._value.reshape(shape), aval)


def _blocks_of(value, sharding, lanes: Lanes, uploads=None):
  """Per lane, its block of the global ``value`` under ``sharding`` (a NamedSharding over the
  lanes' devices; ``sharding.shard_value`` lays it out, reusing the shards of a value already
  laid out so; host blocks for GPUs go through ``uploads`` when given, see ``Lanes.put``)."""
  from ourjax.sharding import ShardedArray, shard_value
  v = shard_value(value if isinstance(value, Array) else Array(value), sharding, uploads)
  shards = v._shards if isinstance(v, ShardedArray) else [v]
  return [lanes.put(k, s, uploads) for k, s in enumerate(shards)]


def run_on_blocks(program, values, shardings, lanes: Lanes):
  """``program.run`` on the lanes' blocks of ``values`` (``_blocks_of`` of each), the host
  data of all of them copied to the GPUs at once (``Lanes.uploads``), the large copies
  running while the program is enqueued (``Uploads.start``) and done before this returns."""
  blocks, uploads = _blocks_uploading(values, shardings, lanes)
  if uploads is None:
    return program.run(lanes, blocks)
  uploads.start()
  try:
    return program.run(lanes, blocks)
  finally:
    uploads.finish()


def _blocks_uploading(values, shardings, lanes: Lanes):
  uploads = lanes.uploads()
  per_arg = [_blocks_of(x, sh, lanes, uploads) for x, sh in zip(values, shardings)]
  return [[b[k] for b in per_arg] for k in range(len(lanes))], uploads


def _assemble(per_lane, sharding, global_aval):
  from ourjax.sharding import ShardedArray
  return ShardedArray._from_shards(per_lane, sharding, global_aval)


# ------------------------------------------------------------------------------------------------
# Tracing for one device (pmap: ``interpreters/pmap.py``; shard_map: ``shard_map.py``)


def _trace_per_device(fn, in_tree, avals, axis_sizes: dict, name: str):
  """The per-device jaxpr of ``fn`` (taking the pytree ``in_tree`` of values of ``avals``)
  under the SPMD axes ``axis_sizes``, and its output pytree."""
  from ourjax.interpreters import partial_eval as pe
  out_tree_cell = []

  def flat(*xs):
    out_leaves, out_tree = tree_flatten(fn(*tree_unflatten(in_tree, xs)))
    out_tree_cell.append(out_tree)
    return out_leaves
  with parallel.spmd_axes(axis_sizes):
    closed = pe.trace_to_jaxpr(flat, avals, name)
  return closed, out_tree_cell[0]


def _backend_of(devs) -> str:
  return "cuda" if devs[0].platform == "gpu" else "cpu"
