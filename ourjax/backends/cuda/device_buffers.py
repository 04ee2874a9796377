"""Arrays in GPU memory and the copies that put host data there, for the CUDA backend's calls:
``DeviceBuffer`` (a block of one device's memory with a shape and dtype, and the ``_Ready``
event of the work that computes it, recycled through its device's event pool), ``Uploads``
(one call's host-to-device copies to several GPUs, made at once: pinned staging for the large
ones, pageable copies on threads for the rest), ``device_put``, and how a call's arguments
become device addresses (``_device_pointer``, ``_upload_args``; ``_donated_blocks``: the
blocks of donated arguments).  ``backend`` imports these names back (``backend.DeviceBuffer``,
``backend.Uploads`` ... still work).  Its settings (``PARALLEL_UPLOAD_BYTES``) change how data
is copied, not the compiled code: not part of the disk-cache keys."""
from __future__ import annotations

import threading

import numpy as np

from ourjax.backends.cuda import driver
from ourjax.lowering import hlo

__all__ = ["DeviceBuffer", "Uploads", "device_put"]

_EVENT_POOL_MAX = 64


class _Ready:
  """The event recorded after the work that produced some buffers.  When the last of them lets
  go of it, the event returns to its device's pool for a later call to record again (creating
  and destroying an event per call would cost two more driver calls).  ``done``: a wait on the
  event has returned, so the other buffers of the call need no driver call of their own (a
  training step's 100-odd outputs are waited for with one ``cuEventSynchronize``)."""
  __slots__ = ("event", "_pool", "done")

  def __init__(self, event, pool=None):
    self.event, self._pool, self.done = event, pool, False

  def wait(self, what: str) -> None:
    if not self.done:
      self.event.synchronize(what)
      self.done = True

  @classmethod
  def record(cls, dev, pool: list) -> "_Ready":
    """An event recorded on ``dev``'s stream now, taken from ``pool`` when it has one."""
    event = None
    while pool and event is None:
      event = pool.pop()
      if not event.alive:          # finalized along with a garbage cycle (``Event.alive``)
        event = None
    if event is None:
      event = driver.Event(dev)
    return cls(event.record(), pool)

  def __del__(self):
    try:
      pool = self._pool
      if pool is not None and len(pool) < _EVENT_POOL_MAX and self.event.alive:
        pool.append(self.event)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


#: The ``_ready`` of a buffer known to be computed (waited for once already).
_COMPUTED = _Ready(None)
_COMPUTED.done = True


def _pageable_copy(dev):
  """``dev``'s host -> device copy from pageable memory (a stand-in device without
  ``copy_pageable`` copies through ``copy_to_device``)."""
  return getattr(dev, "copy_pageable", None) or dev.copy_to_device


class DeviceBuffer:
  """An array in GPU memory (``Array._device_buf``): ``shape``, ``dtype``, ``ptr``;
  ``to_host()`` copies it back, ``synchronize()`` waits until it has been computed."""
  __slots__ = ("device", "allocation", "shape", "dtype", "_ready", "__weakref__")

  def __init__(self, device, allocation, shape, dtype, ready: _Ready | None = None):
    self.device, self.allocation = device, allocation
    self.shape, self.dtype = tuple(shape), np.dtype(dtype)
    self._ready = ready

  @classmethod
  def _wrap(cls, device, allocation, shape: tuple, dtype: np.dtype, ready: _Ready | None):
    """``DeviceBuffer(...)`` for a shape that is a tuple and a dtype that is an np.dtype."""
    b = object.__new__(cls)
    b.device, b.allocation, b.shape, b.dtype, b._ready = device, allocation, shape, dtype, ready
    return b

  @property
  def ptr(self) -> int:
    return self.allocation.ptr

  @property
  def nbytes(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

  @property
  def platform(self) -> str:
    return "gpu"

  @classmethod
  def from_host(cls, host, device=None) -> "DeviceBuffer":
    dev = device or driver.get_device(0)
    host = np.ascontiguousarray(host)
    from ourjax.backends.cuda import staging
    alloc, staged = staging.allocate(dev, host.nbytes)
    if staged:
      staging.upload([(dev, alloc.ptr, host)])
    else:
      _pageable_copy(dev)(alloc.ptr, host)
    return cls(dev, alloc, host.shape, host.dtype)

  def to_host(self) -> np.ndarray:
    out = np.empty(self.shape, self.dtype)
    self.device.copy_to_host(out, self.ptr)
    return out

  def synchronize(self) -> None:
    r = self._ready
    if r is None:            # (produced without an event: wait for the whole stream)
      self.device.synchronize("an array's computation")
    elif r is not _COMPUTED:
      r.wait("an array's computation")
    self._ready = _COMPUTED

  def is_ready(self) -> bool:
    r = self._ready
    if r is None or r.done:
      return True
    if r.event.query():
      r.done = True
      return True
    return False

  def __repr__(self):
    return f"<DeviceBuffer {hlo.dtype_name(self.dtype)}{list(self.shape)} on gpu:{self.device.ordinal}>"


PARALLEL_UPLOAD_BYTES = 256 << 10
"""The fewest bytes ``Uploads`` hands to other threads: a copy from pageable host memory keeps
its thread busy while the driver stages it (about 20 GB/s), and handing work to a thread costs
tens of microseconds, so copies to other GPUs run at once only when they are larger than that."""

_upload_pool = None
_upload_pool_lock = threading.Lock()


def _pool():
  global _upload_pool
  if _upload_pool is None:
    with _upload_pool_lock:
      if _upload_pool is None:
        from concurrent.futures import ThreadPoolExecutor
        _upload_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ourjax-upload")
  return _upload_pool


class Uploads:
  """The host-to-device copies of one call's host arguments to several GPUs (a pmap'd batch,
  one block per device), run at once.  ``put`` allocates a block and returns its
  ``DeviceBuffer`` at once; ``run`` makes the copies and returns when every one is enqueued on
  its device's stream (a staged one on the copy stream, the main stream made to wait for it),
  before anything that reads them is launched (so stream order holds), and when no host array
  is read any more (they may change after ``run``).

  Large blocks (``staging.allocate`` decides, by ``worth_staging``) go through the devices'
  pinned pools, every device's pieces on the staging threads at once (``staging.upload``;
  with ``start`` and ``finish`` instead of ``run`` the copies go on while the caller enqueues
  the call that reads them, see ``staging.py``'s overlapped uploads); the
  others are pageable copies, made meanwhile: each GPU's on a thread of its own when the other
  GPUs' come to ``PARALLEL_UPLOAD_BYTES`` (the driver releases the GIL while it stages
  pageable memory), the first GPU's on the calling thread."""

  def __init__(self):
    self._jobs: dict = {}               # device -> [(address, host array, staged?)]
    #: host Arrays given a buffer of this Uploads as their device copy: forgotten again if
    #: ``run`` fails (their copy never made)
    self.cached: list = []
    self._in_flight = None              # start's staging.InFlight, until finish

  def put(self, host, dev) -> DeviceBuffer:
    host = np.ascontiguousarray(host)
    from ourjax.backends.cuda import staging
    alloc, staged = staging.allocate(dev, host.nbytes)
    self._jobs.setdefault(dev, []).append((alloc.ptr, host, staged))
    return DeviceBuffer(dev, alloc, host.shape, host.dtype)

  @staticmethod
  def _copy(dev, jobs):
    copy = _pageable_copy(dev)
    for ptr, host in jobs:
      copy(ptr, host)

  def run(self) -> None:
    try:
      self._run()
    except BaseException:
      self._forget()
      raise
    finally:
      self.cached = []

  def start(self) -> None:
    """``run``, except that the large (staged) copies may still be running when it returns:
    their DMAs are enqueued behind gates that open as the copies finish
    (``staging.upload(overlap=True)``), so that the caller enqueues the work that reads the
    uploads meanwhile.  The caller must then call ``finish`` (in a ``finally``) before it
    returns to its own caller; until then the host arrays are still being read."""
    try:
      self._in_flight = self._run(overlap=True)
    except BaseException:
      self._forget()
      self.cached = []
      raise

  def finish(self) -> None:
    """Wait for ``start``'s copies (the host arrays are read no more); raise their error."""
    job, self._in_flight = self._in_flight, None
    try:
      if job is not None:
        job.finish()
    except BaseException:
      self._forget()
      raise
    finally:
      self.cached = []

  def _forget(self) -> None:
    for a in self.cached:
      a._device_buf = None

  def _run(self, overlap: bool = False):
    from ourjax.backends.cuda import staging
    groups, self._jobs = list(self._jobs.items()), {}
    if not groups:
      return None
    staged, plain = [], []
    for dev, jobs in groups:
      small = []
      for ptr, host, stage in jobs:
        if stage:
          staged.append((dev, ptr, host))
        else:
          small.append((ptr, host))
      if small:
        plain.append((dev, small))
    if staged:
      return staging.upload(staged, also=(lambda: self._run_plain(plain)) if plain else None,
                            overlap=overlap)
    self._run_plain(plain)
    return None

  def _run_plain(self, groups) -> None:
    if not groups:
      return
    rest = sum(h.nbytes for _, jobs in groups[1:] for _, h in jobs)
    if len(groups) == 1 or rest < PARALLEL_UPLOAD_BYTES:
      for dev, jobs in groups:
        self._copy(dev, jobs)
      return
    futures = [_pool().submit(self._copy, dev, jobs) for dev, jobs in groups[1:]]
    try:
      self._copy(*groups[0])
    finally:
      for f in futures:
        f.result()


def device_put(value, ordinal: int = 0) -> DeviceBuffer:
  return DeviceBuffer.from_host(np.asarray(value), driver.get_device(ordinal))

def _device_pointer(dev, a, dtype, dims, keep, uploads=None):
  """Device address of argument ``a`` (uploading host data; a host ``Array`` keeps its copy).
  ``uploads``: an ``Uploads`` that makes the copy when it runs (before the call launches)."""
  from ourjax.array import Array, to_numpy
  if isinstance(a, Array):
    buf = a._device_buf
    if buf is not None and buf.device is dev:
      return buf.ptr
    if uploads is not None:
      buf = uploads.put(a._value, dev)
      uploads.cached.append(a)
    else:
      buf = DeviceBuffer.from_host(a._value, dev)
    a._device_buf = buf
    return buf.ptr
  if isinstance(a, DeviceBuffer):
    return a.ptr
  host = to_numpy(a)
  if host.dtype != dtype:
    host = host.astype(dtype)
  if host.shape != tuple(dims):
    raise ValueError(f"cuda executable: argument of shape {host.shape} where "
                     f"{hlo.dtype_name(dtype)}{list(dims)} is expected")
  buf = uploads.put(host, dev) if uploads is not None else DeviceBuffer.from_host(host, dev)
  keep.append(buf)
  return buf.ptr


def _upload_args(dev, pending, slots, keep):
  """Fill ``slots`` with the device addresses of a call's host arguments ``pending`` ((slot,
  value, dtype, dims)): one alone as ``_device_pointer`` copies it, several through one
  ``Uploads``, their copies made at once (the large ones' pinned pieces on the staging
  threads, the small ones meanwhile) and possibly still running (``Uploads.start``): that
  ``Uploads`` is returned (None for one argument), and the caller calls its ``finish`` once
  it has enqueued the call, before it returns."""
  if len(pending) == 1:
    i, a, dt, dims = pending[0]
    slots[i] = _device_pointer(dev, a, dt, dims, keep)
    return None
  ups = Uploads()
  for i, a, dt, dims in pending:
    slots[i] = _device_pointer(dev, a, dt, dims, keep, ups)
  ups.start()
  return ups


def _donated_blocks(aliases, args, slots, uploaded):
  """{output j: the allocation of the argument k it is aliased to} for a call whose parameter
  slots are filled (``uploaded``: the buffers the call made for host arguments), or None."""
  if not aliases:
    return None
  out = {}
  for j, k in aliases:
    a, ptr = args[k], int(slots[k])
    buf = a if type(a) is DeviceBuffer else getattr(a, "_device_buf", None)
    if buf is None or buf.ptr != ptr:
      buf = next(b for b in uploaded if b.ptr == ptr)
    out[j] = buf.allocation
  return out
