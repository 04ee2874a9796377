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
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

_REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


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
  """Collectives among the CPU devices of several processes (``ourjax.distributed``): this
  process's lanes are positions ``process_index * n + k`` of one global group of
  ``process_count * n`` members.  Each collective posts this process's blocks to the
  coordinator, reads the other processes' (waiting at most ``OURJAX_COLLECTIVE_TIMEOUT``
  seconds for each) and computes its own lanes' results with HostCommunicator's NumPy.  The
  ``groups`` the executor passes are this process's lanes; every collective spans all
  processes (a pmap axis)."""

  def __init__(self, devices, state):
    self.devices = list(devices)
    self.state = state
    self.n = len(self.devices)
    self.host = HostCommunicator(devices)

  def _global(self, per_lane: list[list], what: str) -> list[list]:
    """Per global lane, its list of NumPy arrays (this process's from ``per_lane``)."""
    from ourjax import distributed
    st = self.state
    key = st.next_key("collective")
    n_proc, me = st.num_processes, st.process_id
    flat = [a for lane in per_lane for a in lane]
    st.client.set(f"{key}/{me}", _pack(flat), reads=n_proc - 1)
    per_proc = {me: flat}
    timeout = distributed.collective_timeout()
    for q in range(n_proc):
      if q != me:
        per_proc[q] = _unpack(st.client.get(
            f"{key}/{q}", timeout, f"{what}: process {me} waited for process {q}'s blocks"))
    m = len(per_lane[0]) if per_lane else 0
    out = []
    for q in range(n_proc):
      for k in range(self.n):
        out.append(per_proc[q][k * m:(k + 1) * m])
    return out

  def _run(self, method, vals, what, *extra, many=False):
    per_lane = [[v._value for v in lane] if many else [lane._value] for lane in vals]
    glob = self._global(per_lane, what)
    boxed = [[_Block(a) for a in g] if many else _Block(g[0]) for g in glob]
    res = getattr(self.host, method)([tuple(range(len(glob)))], boxed, *extra)
    base = self.state.process_id * self.n
    return [res[base + k] for k in range(self.n)]

  def all_reduce(self, groups, vals, op):
    return self._run("all_reduce", vals, f"all-reduce ({op})", op, many=True)

  def all_gather(self, groups, vals):
    return self._run("all_gather", vals, "all-gather")

  def reduce_scatter(self, groups, vals):
    return self._run("reduce_scatter", vals, "reduce-scatter")

  def all_to_all(self, groups, vals):
    return self._run("all_to_all", vals, "all-to-all")

  def ppermute(self, groups, vals, perm):
    return self._run("ppermute", vals, "ppermute", perm)


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

  def _drv(self, k):
    from ourjax.backends.cuda import driver
    return driver.get_device(self.devices[k].id)

  def _group_comms(self, g) -> list:
    key = tuple(self.devices[k].id for k in g)
    comms = self._comms.get(key)
    if comms is None:
      for k in g:
        self._drv(k)          # contexts and streams exist before NCCL binds to the devices
      comms = list(self._nccl.comm_init_all(len(key), list(key)))
      self._comms[key] = comms
    return comms

  def _members(self, g) -> int:
    """How many ranks a collective of group ``g`` spans."""
    return len(g)

  def _empty(self, k, shape, dtype):
    from ourjax.backends.cuda.backend import DeviceBuffer
    dev = self._drv(k)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return DeviceBuffer._wrap(dev, dev.allocator.allocate(max(nbytes, 1)), tuple(shape),
                              np.dtype(dtype), None)

  @staticmethod
  def _dtype(dt):
    name = np.dtype(dt).name
    t = _NCCL_TYPES.get("uint8" if name == "bool" else name)
    if t is None:
      raise TypeError(f"NCCL collectives do not take {name} arrays")
    return t

  def _plan(self, groups, vals, out_shape, issue, calls, outs):
    """For each member k of each group, a fresh buffer of ``out_shape(input shape, group
    size)`` appended to ``outs[k]``, and the NCCL call ``issue(src, dst, nccl dtype, comm,
    stream)`` that fills it appended to ``calls``."""
    for g in groups:
      comms = self._group_comms(g)
      for r, k in enumerate(g):
        src = vals[k]._device_buf
        dst = self._empty(k, out_shape(src.shape, self._members(g)), src.dtype)
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
    for k, bufs in enumerate(outs):
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
        comms = [c for cs in self._comms.values() for c in cs]
        self._comms.clear()
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
      comms = self._group_comms(g)
      bufs = [vals[k]._device_buf for k in g]
      dsts = [self._empty(k, b.shape, b.dtype) for k, b in zip(g, bufs)]
      for p, k in enumerate(g):
        if p not in receivers:
          self._drv(k).memset8(dsts[p].ptr, 0, max(dsts[p].nbytes, 1))
        outs[k].append(dsts[p])
      for s, d in perm:
        n, dt = _size(bufs[s].shape), self._dtype(bufs[s].dtype)
        calls.append((g[s], functools.partial(nccl.send, bufs[s].ptr, n, dt, d, comms[s])))
        calls.append((g[d], functools.partial(nccl.recv, dsts[d].ptr, n, dt, s, comms[d])))
    return [o[0] for o in self._run(calls, outs)]


class NcclProcessCommunicator(NcclCommunicator):
  """NCCL between the GPUs of several processes (``ourjax.distributed``), one GPU per process:
  one communicator over all of them, made with ``ncclCommInitRank`` from the unique id that
  process 0 draws (``ncclGetUniqueId``) and posts to the coordinator.  Every collective spans
  all processes; ppermute is not supported.  Run on two H100s, one process each
  (``tests/test_distributed.py``'s worker program, psum/all_gather/pmax/pmean of a gradient).
  """

  def __init__(self, devices, state):
    super().__init__(devices)
    if len(self.devices) != 1:
      raise NotImplementedError("NCCL across processes: ourjax runs one GPU per process")
    self.state = state

  def _members(self, g) -> int:
    return self.state.num_processes

  def _group_comms(self, g):
    comms = self._comms.get("world")
    if comms is None:
      import pickle
      from nccl import core as nccl_core
      from ourjax import distributed
      st = self.state
      key = st.next_key("nccl-unique-id")
      if st.process_id == 0:
        uid = nccl_core.get_unique_id()
        st.client.set(key, pickle.dumps(uid), reads=st.num_processes - 1)
      else:
        uid = pickle.loads(st.client.get(key, distributed.collective_timeout(),
                                         "the NCCL unique id from process 0"))
      self._drv(0).make_current()
      comm = nccl_core.Communicator.init(st.num_processes, st.process_id, uid)
      # (the bindings' collectives take their Comm handle, which wraps the communicator's)
      comms = self._comms["world"] = [self._nccl.Comm(comm.ptr)]
      self._keep = comm
    return comms

  def ppermute(self, groups, vals, perm):
    raise NotImplementedError("lax.ppermute between the GPUs of several processes is not "
                              "supported by ourjax")


def _size(shape) -> int:
  return int(np.prod(shape, dtype=np.int64))


def for_devices(devices):
  """The communicator for an SPMD computation over ``devices``."""
  if all(d.platform == "cpu" for d in devices):
    return HostCommunicator(devices)
  if all(d.platform == "gpu" for d in devices):
    why = nccl_unavailable_reason()
    if why is not None:
      raise RuntimeError(f"collectives across {len(devices)} GPUs need NCCL: {why}")
    return NcclCommunicator(devices)
  raise ValueError(f"an SPMD computation cannot mix CPU and GPU devices: {devices}")
