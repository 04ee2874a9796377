"""Communicators: the collectives of ``lax.psum`` & co. run across the devices of an SPMD
computation (``interpreters/spmd.py``).

Every method takes ``groups`` (tuples of lane numbers; a collective runs among the lanes of
each group, in the group's order) and per-lane values (single-device Arrays, lane k's on
``devices[k]``), and returns the per-lane results.  The operations work on the leading axis, as
NCCL's do:

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
between the kernels of the computation, handing NCCL device pointers; several collectives in a
row form one NCCL group.  ``for_devices(devices)`` picks the communicator.
"""
from __future__ import annotations

import numpy as np

from ourjax.array import Array


def _aval(x):
  return x.aval


class HostCommunicator:
  """Collectives among CPU devices of one process, computed with NumPy."""

  def __init__(self, devices):
    self.devices = list(devices)

  @staticmethod
  def _np(x):
    return np.asarray(x._value) if isinstance(x, Array) else np.asarray(x)

  @staticmethod
  def _out(value, like):
    return Array._from_result(np.array(value, order="C"),
                              like.aval.update(shape=np.shape(value), weak_type=False)
                              if isinstance(like, Array) else like)

  def all_reduce(self, groups, vals, op):
    red = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    outs = [None] * len(vals)
    for g in groups:
      per = []
      for i in range(len(vals[g[0]])):
        acc = self._np(vals[g[0]][i])
        for k in g[1:]:
          acc = red(acc, self._np(vals[k][i])).astype(acc.dtype, copy=False)
        per.append(self._out(acc, vals[g[0]][i]))
      for k in g:
        outs[k] = list(per)
    return outs

  def all_gather(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      stacked = np.stack([self._np(vals[k]) for k in g])
      for k in g:
        outs[k] = self._out(stacked, vals[k])
    return outs

  def reduce_scatter(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      total = self._np(vals[g[0]]).copy()
      for k in g[1:]:
        total = (total + self._np(vals[k])).astype(total.dtype, copy=False)
      for p, k in enumerate(g):
        outs[k] = self._out(total[p], vals[k])
    return outs

  def all_to_all(self, groups, vals):
    outs = [None] * len(vals)
    for g in groups:
      xs = [self._np(vals[k]) for k in g]
      for p, k in enumerate(g):
        outs[k] = self._out(np.stack([x[p] for x in xs]), vals[k])
    return outs

  def ppermute(self, groups, vals, perm):
    outs = [None] * len(vals)
    for g in groups:
      for k in g:
        outs[k] = self._out(np.zeros_like(self._np(vals[k])), vals[k])
      for s, d in perm:
        outs[g[d]] = self._out(self._np(vals[g[s]]), vals[g[d]])
    return outs


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

  def _buffer(self, k, x):
    """Lane k's value as a DeviceBuffer on its GPU."""
    from ourjax.backends import put_on
    buf = getattr(x, "_device_buf", None)
    dev = self._drv(k)
    if buf is None or buf.device is not dev:
      x = put_on(x, self.devices[k])
      buf = x._device_buf
    return buf

  def _empty(self, k, shape, dtype):
    from ourjax.backends.cuda.backend import DeviceBuffer
    dev = self._drv(k)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return DeviceBuffer._wrap(dev, dev.allocator.allocate(max(nbytes, 1)), tuple(shape),
                              np.dtype(dtype), None)

  def _dtype(self, dt):
    name = np.dtype(dt).name
    if name == "bool":
      name = "uint8"
    t = _NCCL_TYPES.get(name)
    if t is None:
      raise TypeError(f"NCCL collectives do not take {name} arrays")
    return t

  def _run(self, calls):
    """``calls``: (lane, fn(comm, stream)) pairs, enqueued as one NCCL group."""
    nccl = self._nccl
    nccl.group_start()
    try:
      for k, comm, fn in calls:
        fn(comm, self._drv(k).stream_handle)
    finally:
      nccl.group_end()

  def _result(self, k, buf, like_aval):
    from ourjax.backends.cuda.backend import _Ready, _EVENT_POOLS
    dev = self._drv(k)
    pool = _EVENT_POOLS.setdefault(dev, [])
    buf._ready = _Ready.record(dev, pool)
    return Array._from_device(buf, like_aval)

  def all_reduce(self, groups, vals, op):
    nccl = self._nccl
    outs = [None] * len(vals)
    calls = []
    for g in groups:
      comms = self._group_comms(g)
      for r, k in enumerate(g):
        outs[k] = []
        for x in vals[k]:
          src = self._buffer(k, x)
          dst = self._empty(k, src.shape, src.dtype)
          n = int(np.prod(src.shape, dtype=np.int64))
          dt = self._dtype(src.dtype)
          if src.dtype == np.bool_:
            opc = _NCCL_OPS["max" if op in ("sum", "max") else "min"]
          else:
            opc = _NCCL_OPS[op]
          calls.append((k, comms[r], lambda c, s, a=src.ptr, b=dst.ptr, n=n, dt=dt, o=opc:
                        nccl.all_reduce(a, b, n, dt, o, c, s)))
          outs[k].append((dst, x.aval.update(weak_type=False) if op != "sum" else x.aval))
    self._run(calls)
    return [[self._result(k, b, a) for b, a in outs[k]] for k in range(len(vals))]

  def all_gather(self, groups, vals):
    nccl = self._nccl
    outs = [None] * len(vals)
    calls = []
    for g in groups:
      comms = self._group_comms(g)
      for r, k in enumerate(g):
        src = self._buffer(k, vals[k])
        dst = self._empty(k, (len(g),) + src.shape, src.dtype)
        n = int(np.prod(src.shape, dtype=np.int64))
        dt = self._dtype(src.dtype)
        calls.append((k, comms[r], lambda c, s, a=src.ptr, b=dst.ptr, n=n, dt=dt:
                      nccl.all_gather(a, b, n, dt, c, s)))
        outs[k] = (dst, vals[k].aval.update(shape=dst.shape, weak_type=False))
    self._run(calls)
    return [self._result(k, b, a) for k, (b, a) in enumerate(outs)]

  def reduce_scatter(self, groups, vals):
    nccl = self._nccl
    outs = [None] * len(vals)
    calls = []
    for g in groups:
      comms = self._group_comms(g)
      for r, k in enumerate(g):
        src = self._buffer(k, vals[k])
        dst = self._empty(k, src.shape[1:], src.dtype)
        n = int(np.prod(src.shape[1:], dtype=np.int64))
        dt = self._dtype(src.dtype)
        calls.append((k, comms[r], lambda c, s, a=src.ptr, b=dst.ptr, n=n, dt=dt:
                      nccl.reduce_scatter(a, b, n, dt, _NCCL_OPS["sum"], c, s)))
        outs[k] = (dst, vals[k].aval.update(shape=dst.shape, weak_type=False))
    self._run(calls)
    return [self._result(k, b, a) for k, (b, a) in enumerate(outs)]

  def all_to_all(self, groups, vals):
    nccl = self._nccl
    outs = [None] * len(vals)
    calls = []
    for g in groups:
      comms = self._group_comms(g)
      for r, k in enumerate(g):
        src = self._buffer(k, vals[k])
        dst = self._empty(k, src.shape, src.dtype)
        n = int(np.prod(src.shape[1:], dtype=np.int64))
        dt = self._dtype(src.dtype)
        calls.append((k, comms[r], lambda c, s, a=src.ptr, b=dst.ptr, n=n, dt=dt:
                      nccl.allto_all(a, b, n, dt, c, s)))
        outs[k] = (dst, vals[k].aval.update(weak_type=False))
    self._run(calls)
    return [self._result(k, b, a) for k, (b, a) in enumerate(outs)]

  def ppermute(self, groups, vals, perm):
    nccl = self._nccl
    outs = [None] * len(vals)
    calls = []
    for g in groups:
      comms = self._group_comms(g)
      bufs = [self._buffer(k, vals[k]) for k in g]
      dsts = [self._empty(k, b.shape, b.dtype) for k, b in zip(g, bufs)]
      receivers = {d for _, d in perm}
      for p, k in enumerate(g):
        if p not in receivers:
          self._drv(k).memset8(dsts[p].ptr, 0, max(dsts[p].nbytes, 1))
        outs[k] = (dsts[p], vals[k].aval)
      for s, d in perm:
        n = int(np.prod(bufs[s].shape, dtype=np.int64))
        dt = self._dtype(bufs[s].dtype)
        calls.append((g[s], comms[s], lambda c, st, a=bufs[s].ptr, n=n, dt=dt, peer=d:
                      nccl.send(a, n, dt, peer, c, st)))
        calls.append((g[d], comms[d], lambda c, st, b=dsts[d].ptr, n=n, dt=dt, peer=s:
                      nccl.recv(b, n, dt, peer, c, st)))
    self._run(calls)
    return [self._result(k, b, a) for k, (b, a) in enumerate(outs)]


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
