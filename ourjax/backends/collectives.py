"""Communicators: the collectives of ``lax.psum`` & co. run across the devices of an SPMD
computation (``interpreters/spmd.py``).

Every method takes ``groups`` (tuples of lane numbers; a collective runs among the lanes of
each group, in the group's order) and per-lane values (single-device Arrays, lane k's on
``devices[k]``), and returns the per-lane results as the backend holds them (NumPy arrays, or
``DeviceBuffer``s on the lanes' GPUs); the SPMD executor types them as the collective's jaxpr
says.  The operations work on the leading axis, as NCCL's do:

* ``all_reduce(groups, vals, op)``: ``vals[k]`` is a list of arrays; each is reduced ('sum',
  'max', 'min') elementwise over the group;
* ``all_gather``: lane k gets ``stack([vals[j] for j in group])``;
* ``reduce_scatter``: ``vals[k]`` has a leading axis of the group size; lane at position p gets
  the sum over the group of ``vals[j][p]``;
* ``all_to_all``: lane at position p gets ``stack([vals[j][p] for j in group])``;
* ``ppermute(groups, vals, perm)``: ``(src, dst)`` group positions; a lane nothing is sent to
  gets zeros.

``HostCommunicator`` computes them in process with NumPy (CPU devices: all lanes live in this
process).  ``NcclCommunicator`` runs them with NCCL (``nccl4py``) on each GPU's ourjax stream,
between the kernels of the computation, handing NCCL device pointers; the arrays of one
collective form one NCCL group.  ``for_devices(devices)`` picks the communicator.

When the lanes belong to several processes (``ourjax.distributed``: a mesh over every
process's devices), the group tuples hold *global* lane numbers (the mesh's devices in
order) and the values and results are those of this process's lanes only:
``ProcessCommunicator`` (CPU devices, through the coordinator) and
``NcclProcessCommunicator`` (GPUs); ``for_lanes(lanes)`` picks.
"""
from __future__ import annotations

import functools
import math
import os
import time

import numpy as np

from ourjax.backends import reference_ops as rops

_REDUCERS = {"sum": np.add, "max": rops.maximum, "min": rops.minimum}


class HostCommunicator:
  """Collectives among CPU devices of one process, computed with NumPy."""

  def __init__(self, devices):
    self.devices = list(devices)

  @staticmethod
  def _fold(xs, op):
    """The elementwise reduction of ``xs`` in their order, in their dtype."""
    acc = np.array(xs[0], order="C")
    for x in xs[1:]:
      acc = np.asarray(_REDUCERS[op](acc, x), acc.dtype)   # (0-d: an array, not a scalar)
    return acc

  def all_reduce(self, groups, vals, op):
    outs = [None] * len(vals)
    for g in groups:
      per = [self._fold([vals[k][i]._value for k in g], op) for i in range(len(vals[g[0]]))]
      for k in g:
        outs[k] = list(per)
    return outs

  def all_gather(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      stacked = np.stack([vals[k]._value for k in g])
      for k in g:
        outs[k] = stacked
    return outs

  def reduce_scatter(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      total = self._fold([vals[k]._value for k in g], "sum")
      for p, k in enumerate(g):
        outs[k] = np.array(total[p], order="C")
    return outs

  def all_to_all(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      xs = [vals[k]._value for k in g]
      for p, k in enumerate(g):
        outs[k] = np.stack([x[p] for x in xs])
    return outs

  def ppermute(self, groups, vals, perm):
    outs = [None] * len(vals)
    for g in groups:
      for k in g:
        outs[k] = np.zeros_like(vals[k]._value)
      for s, d in perm:
        outs[g[d]] = vals[g[s]]._value
    return outs


class _Block:
  """A NumPy array where HostCommunicator reads an Array (``._value``)."""
  __slots__ = ("_value",)

  def __init__(self, v):
    self._value = v


def _pack(arrays) -> bytes:
  import io
  buf = io.BytesIO()
  np.savez(buf, *[np.ascontiguousarray(a) for a in arrays])
  return buf.getvalue()


def _unpack(data: bytes) -> list:
  import io
  with np.load(io.BytesIO(data), allow_pickle=False) as z:
    return [z[f"arr_{i}"] for i in range(len(z.files))]


class ProcessCommunicator:
  """Collectives among the CPU devices of several processes (``ourjax.distributed``), over a
  mesh whose lanes (``spmd.Lanes``) belong to different processes.  ``groups`` name global
  lane numbers (the mesh's devices in order); the values are this process's lanes'
  (``lanes.lane_ids``).  Each collective posts this process's blocks to the coordinator once,
  reads those of the processes it shares a group with (waiting at most
  ``OURJAX_COLLECTIVE_TIMEOUT`` seconds for each), and computes its own lanes' results with
  HostCommunicator's NumPy: every process runs every collective, in the same order."""

  def __init__(self, lanes, state):
    self.state = state
    self.mine = list(lanes.lane_ids)
    self.owner = [d.process_index for d in lanes.all_devices]
    self.n = len(self.owner)
    self.host = HostCommunicator(lanes.all_devices)
    self._by_process = {}
    for k, q in enumerate(self.owner):
      self._by_process.setdefault(q, []).append(k)

  def _exchange(self, groups, per_local: list[list], what: str):
    """``(the groups this process takes part in, per global lane of theirs its list of NumPy
    arrays)``: this process's from ``per_local``, the others' read from the coordinator."""
    from ourjax import distributed
    st = self.state
    me = st.process_id
    key = st.next_key("collective")        # (every process draws one key per collective)
    mine = set(self.mine)
    groups = [g for g in groups if mine.intersection(g)]
    peers = sorted({self.owner[k] for g in groups for k in g} - {me})
    glob: list = [None] * self.n
    for k, vals in zip(self.mine, per_local):
      glob[k] = vals
    if peers:
      # (a process reads this one's blocks exactly when this one reads its: the groups are
      # the same on both sides)
      st.client.set(f"{key}/{me}", _pack([a for lane in per_local for a in lane]),
                    reads=len(peers))
      m = len(per_local[0]) if per_local else 0
      timeout = distributed.collective_timeout()
      for q in peers:
        data = _unpack(st.client.get(
            f"{key}/{q}", timeout, f"{what}: process {me} waited for process {q}'s blocks"))
        for j, k in enumerate(self._by_process[q]):
          glob[k] = data[j * m:(j + 1) * m]
    return groups, glob

  def _run(self, method, groups, vals, what, *extra, many=False):
    per_local = [[v._value for v in lane] if many else [lane._value] for lane in vals]
    groups, glob = self._exchange(groups, per_local, what)
    boxed = [None if g is None else [_Block(a) for a in g] if many else _Block(g[0])
             for g in glob]
    res = getattr(self.host, method)(groups, boxed, *extra)
    return [res[k] for k in self.mine]

  def all_reduce(self, groups, vals, op):
    return self._run("all_reduce", groups, vals, f"all-reduce ({op})", op, many=True)

  def all_gather(self, groups, vals):
    return self._run("all_gather", groups, vals, "all-gather")

  def reduce_scatter(self, groups, vals):
    return self._run("reduce_scatter", groups, vals, "reduce-scatter")

  def all_to_all(self, groups, vals):
    return self._run("all_to_all", groups, vals, "all-to-all")

  def ppermute(self, groups, vals, perm):
    return self._run("ppermute", groups, vals, "ppermute", perm)


# ------------------------------------------------------------------------------------------------
# NCCL


_NCCL_TYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
               "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
               "float8_e4m3fn": 10, "float8_e5m2": 11}
_NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def nccl_unavailable_reason() -> str | None:
  """None when NCCL can be used, else why not."""
  try:
    from nccl.bindings import nccl  # noqa: F401
  except Exception as e:   # pragma: no cover - depends on the machine
    return (f"NCCL is not available ({type(e).__name__}: {e}); install ourjax's 'multigpu' "
            "extra (nccl4py with the NCCL runtime wheel)")
  return None


class NcclCommunicator:
  """Collectives among GPUs of this process through NCCL.  One NCCL communicator per group of
  devices (made on first use with ``ncclCommInitAll``), one rank per device."""

  def __init__(self, devices):
    from nccl.bindings import nccl
    self._nccl = nccl
    self.devices = list(devices)
    self._comms: dict = {}
    # (what every call would look up again: per lane its driver device, per group its
    # communicators and local members, per dtype NCCL's type code)
    self._drvs: dict = {}
    self._by_group: dict = {}
    self._members: dict = {}
    self._types: dict = {}

  def _drv(self, k):
    """Lane ``k``'s driver device, made current (as ``driver.get_device`` does)."""
    d = self._drvs.get(k)
    if d is None:
      from ourjax.backends.cuda import driver
      d = self._drvs[k] = driver.get_device(self.devices[k].local_hardware_id)
    else:
      d.make_current()
    return d

  def _comms_of(self, g):
    c = self._by_group.get(g)
    if c is None:
      c = self._by_group[g] = self._group_comms(g)
    return c

  def _members_of(self, g) -> list:
    m = self._members.get(g)
    if m is None:
      m = self._members[g] = self._local_members(g)
    return m

  def _group_comms(self, g):
    """The NCCL communicators of group ``g``'s members in this process, by rank."""
    key = tuple(self.devices[k].id for k in g)
    comms = self._comms.get(key)
    if comms is None:
      for k in g:
        self._drv(k)          # contexts and streams exist before NCCL binds to the devices
      comms = list(self._nccl.comm_init_all(
          len(key), [self.devices[k].local_hardware_id for k in g]))
      self._comms[key] = comms
    return comms

  def _local_members(self, g) -> list:
    """``(rank, lane)`` of group ``g``'s members in this process: all of them (``lane``
    indexes the values a collective gets)."""
    return list(enumerate(g))

  def _empty(self, k, shape, dtype):
    from ourjax.backends.cuda.backend import DeviceBuffer
    # (no context switch: the caching allocator makes the device current itself when it asks
    # the driver for memory; the lanes alternate, so each switch is a cuCtxSetCurrent)
    dev = self._drvs.get(k) or self._drv(k)
    dtype = np.dtype(dtype)
    nbytes = _size(shape) * dtype.itemsize
    return DeviceBuffer._wrap(dev, dev.allocator.allocate(max(nbytes, 1)), tuple(shape),
                              dtype, None)

  def _dtype(self, dt):
    t = self._types.get(dt)
    if t is None:
      name = np.dtype(dt).name
      t = _NCCL_TYPES.get("uint8" if name == "bool" else name)
      if t is None:
        raise TypeError(f"NCCL collectives do not take {name} arrays")
      self._types[dt] = t
    return t

  def _plan(self, groups, vals, out_shape, issue, calls, outs):
    """For each member k of each group, a fresh buffer of ``out_shape(input shape, group
    size)`` appended to ``outs[k]``, and the NCCL call ``issue(src, dst, nccl dtype, comm,
    stream)`` that fills it appended to ``calls``."""
    for g in groups:
      local = self._members_of(g)
      if not local:
        continue            # (a group of other processes' GPUs only)
      comms = self._comms_of(g)
      for r, k in local:
        src = vals[k]._device_buf
        dst = self._empty(k, out_shape(src.shape, len(g)), src.dtype)
        calls.append((k, functools.partial(issue, src, dst, self._dtype(src.dtype), comms[r])))
        outs[k].append(dst)

  def _run(self, calls, outs):
    """Enqueue ``calls`` ((lane, fn(stream)) pairs) as one NCCL group; each lane's outputs are
    ready when one event recorded after them on its stream is."""
    from ourjax.backends.cuda.backend import _Ready, _EVENT_POOLS
    nccl = self._nccl
    nccl.group_start()
    try:
      for k, fn in calls:
        fn(self._drv(k).stream_handle)
    finally:
      nccl.group_end()
    readies = []
    # (the lanes' events in reverse: the last lane issued is the current context, one
    # cuCtxSetCurrent fewer)
    for k in range(len(outs) - 1, -1, -1):
      bufs = outs[k]
      if bufs:
        dev = self._drv(k)
        ready = _Ready.record(dev, _EVENT_POOLS.setdefault(dev, []))
        readies.append(ready)
        for b in bufs:
          b._ready = ready
    if os.environ.get("OURJAX_COLLECTIVE_TIMEOUT"):
      self._await(readies)
    return outs

  def _await(self, readies):
    """Wait for the collective's events until ``OURJAX_COLLECTIVE_TIMEOUT`` seconds pass, then
    abort every NCCL communicator of this set (``ncclCommAbort``: NCCL's kernels that wait for
    a peer return) and raise.  Only when that variable is set: polling makes each collective
    wait for the device.  (Written without a GPU to run it on: untested.)"""
    from ourjax import distributed, errors
    timeout = distributed.collective_timeout()
    deadline = time.monotonic() + timeout
    while not all(r.event.query() for r in readies):
      if time.monotonic() > deadline:
        comms = [c for cs in self._comms.values()
                 for c in (cs.values() if isinstance(cs, dict) else cs)]
        self._comms.clear()
        self._by_group.clear()
        for c in comms:
          try:
            self._nccl.comm_abort(c)
          except Exception:     # pragma: no cover - already broken
            pass
        raise errors.CollectiveTimeoutError(
            f"a NCCL collective over {len(self.devices)} GPUs did not complete within "
            f"{timeout:g} s (OURJAX_COLLECTIVE_TIMEOUT); its communicators were aborted "
            "(ncclCommAbort)")
      time.sleep(0.0002)

  def _one(self, groups, vals, out_shape, issue):
    calls, outs = [], [[] for _ in vals]
    self._plan(groups, vals, out_shape, issue, calls, outs)
    return [o[0] for o in self._run(calls, outs)]

  def all_reduce(self, groups, vals, op):
    nccl = self._nccl

    def issue(src, dst, dt, comm, stream):
      # a boolean "sum" is an "or": the maximum of 0/1 bytes
      o = _NCCL_OPS[("max" if op == "sum" else op) if src.dtype == np.bool_ else op]
      nccl.all_reduce(src.ptr, dst.ptr, _size(src.shape), dt, o, comm, stream)
    calls, outs = [], [[] for _ in vals]
    for i in range(len(vals[0])):
      self._plan(groups, [v[i] for v in vals], lambda s, n: s, issue, calls, outs)
    return self._run(calls, outs)

  def all_gather(self, groups, vals):
    nccl = self._nccl
    return self._one(groups, vals, lambda s, n: (n,) + s, lambda src, dst, dt, c, st:
                     nccl.all_gather(src.ptr, dst.ptr, _size(src.shape), dt, c, st))

  def reduce_scatter(self, groups, vals):
    nccl = self._nccl
    return self._one(groups, vals, lambda s, n: s[1:], lambda src, dst, dt, c, st:
                     nccl.reduce_scatter(src.ptr, dst.ptr, _size(dst.shape), dt,
                                         _NCCL_OPS["sum"], c, st))

  def all_to_all(self, groups, vals):
    nccl = self._nccl
    return self._one(groups, vals, lambda s, n: s, lambda src, dst, dt, c, st:
                     nccl.allto_all(src.ptr, dst.ptr, _size(src.shape[1:]), dt, c, st))

  def ppermute(self, groups, vals, perm):
    nccl = self._nccl
    outs = [[] for _ in vals]
    calls = []
    receivers = {d for _, d in perm}
    for g in groups:
      local = dict(self._members_of(g))       # rank -> lane
      if not local:
        continue
      comms = self._comms_of(g)
      bufs = {p: vals[k]._device_buf for p, k in local.items()}
      dsts = {p: self._empty(k, bufs[p].shape, bufs[p].dtype) for p, k in local.items()}
      for p, k in local.items():
        if p not in receivers:
          self._drv(k).memset8(dsts[p].ptr, 0, max(dsts[p].nbytes, 1))
        outs[k].append(dsts[p])
      for s, d in perm:      # (each side where its rank lives; the shapes are the same)
        if s in local:
          n, dt = _size(bufs[s].shape), self._dtype(bufs[s].dtype)
          calls.append((local[s], functools.partial(nccl.send, bufs[s].ptr, n, dt, d,
                                                    comms[s])))
        if d in local:
          n, dt = _size(dsts[d].shape), self._dtype(dsts[d].dtype)
          calls.append((local[d], functools.partial(nccl.recv, dsts[d].ptr, n, dt, s,
                                                    comms[d])))
    return [o[0] for o in self._run(calls, outs)]


class NcclProcessCommunicator(NcclCommunicator):
  """NCCL between the GPUs of several processes (``ourjax.distributed``), over a mesh whose
  lanes belong to different processes: ``groups`` name global lane numbers, the values are
  this process's lanes' (``lanes.lane_ids``).  Each group gets one NCCL communicator, made
  with ``ncclCommInitRank`` (inside one NCCL group when this process has several of its
  GPUs) from the unique id that the process of the group's first member draws
  (``ncclGetUniqueId``) and posts to the coordinator; a member's rank is its position in
  the group.  Run on two H100s, one process each (``tests/test_distributed.py``'s worker
  program, psum/all_gather/pmax/pmean of a gradient, with the one-group layout of pmap);
  several GPUs per process and groups of a multi-axis mesh are written for, not run."""

  def __init__(self, lanes, state):
    super().__init__(lanes.devices)
    self.state = state
    self.owner = [d.process_index for d in lanes.all_devices]
    self.ids = [d.id for d in lanes.all_devices]
    self.local_of = {k: j for j, k in enumerate(lanes.lane_ids)}
    self._keep = []

  def _local_members(self, g) -> list:
    return [(r, self.local_of[k]) for r, k in enumerate(g) if k in self.local_of]

  def _group_comms(self, g):
    key = tuple(self.ids[k] for k in g)
    comms = self._comms.get(key)
    if comms is None:
      import pickle
      from nccl import core as nccl_core
      from ourjax import distributed
      st = self.state
      seqs = st.__dict__.setdefault("nccl_groups", {})
      seqs[key] = seqs.get(key, 0) + 1      # (the same count in every member's process)
      ukey = f"nccl-unique-id/{','.join(map(str, key))}/{seqs[key]}"
      first = self.owner[g[0]]
      if st.process_id == first:
        uid = nccl_core.get_unique_id()
        readers = len({self.owner[k] for k in g} - {first})
        if readers:
          st.client.set(ukey, pickle.dumps(uid), reads=readers)
      else:
        uid = pickle.loads(st.client.get(ukey, distributed.collective_timeout(),
                                         f"the NCCL unique id from process {first}"))
      local = self._local_members(g)
      made = {}
      if len(local) > 1:
        self._nccl.group_start()
      try:
        for r, j in local:
          self._drv(j).make_current()
          made[r] = nccl_core.Communicator.init(len(g), r, uid)
      finally:
        if len(local) > 1:
          self._nccl.group_end()
      self._keep.extend(made.values())
      # (the bindings' collectives take their Comm handle, which wraps the communicator's)
      comms = self._comms[key] = {r: self._nccl.Comm(c.ptr) for r, c in made.items()}
    return comms


def _size(shape) -> int:
  return math.prod(shape)


def for_lanes(lanes):
  """The communicator for an SPMD computation over ``lanes`` (``spmd.Lanes``): in process,
  or, when the lanes belong to several processes, through ``ourjax.distributed``."""
  if not lanes.multi_process:
    return for_devices(lanes.devices)
  from ourjax import distributed
  st = distributed.state()
  if st is None:
    raise RuntimeError(f"an SPMD computation over devices of several processes "
                       f"({lanes.all_devices}) needs ourjax.distributed.initialize")
  if all(d.platform == "cpu" for d in lanes.all_devices):
    return ProcessCommunicator(lanes, st)
  if all(d.platform == "gpu" for d in lanes.all_devices):
    why = nccl_unavailable_reason()
    if why is not None:
      raise RuntimeError(f"collectives across the GPUs of several processes need NCCL: {why}")
    return NcclProcessCommunicator(lanes, st)
  raise ValueError(f"an SPMD computation cannot mix CPU and GPU devices: {lanes.all_devices}")


def for_devices(devices):
  """The communicator for an SPMD computation over ``devices`` of this process."""
  if all(d.platform == "cpu" for d in devices):
    return HostCommunicator(devices)
  if all(d.platform == "gpu" for d in devices):
    why = nccl_unavailable_reason()
    if why is not None:
      raise RuntimeError(f"collectives across {len(devices)} GPUs need NCCL: {why}")
    return NcclCommunicator(devices)
  raise ValueError(f"an SPMD computation cannot mix CPU and GPU devices: {devices}")
