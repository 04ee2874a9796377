"""Host -> GPU uploads of large NumPy arrays through pinned (page-locked) staging memory.

A copy from pageable memory (``cuMemcpyHtoDAsync`` of a NumPy array's address) makes the
driver copy the data into small pinned buffers of its own on the calling thread, chunk after
chunk, each waiting for the DMA of the one before: about 16 GB/s on an H200's host (a 16.8 MB
batch in 1.04 ms), and the uploads to two GPUs take turns on that thread.  Here instead:

* each device has a *pool* of pinned chunks (``CHUNK_BYTES`` each, at most ``POOL_BYTES``,
  allocated once, as needed, with ``cuMemHostAlloc``);
* an upload is cut into *pieces* of at most a chunk (``piece_bytes``: smaller for an upload of
  a few chunks, so that every thread gets some); worker threads (``threads_for``: one per
  ``THREAD_BYTES`` of the upload, at most ``THREADS``, the calling thread among them, alone
  below ``2 * THREAD_BYTES``) copy each piece into a chunk (NumPy's copy releases the GIL, so
  the host copies of several pieces, and of several devices' uploads, run at once) and enqueue
  its DMA from the chunk on the device's *copy stream* as soon as it is filled, so DMAs run
  while later pieces are still being copied;
* a chunk is reused only after the event recorded behind its last DMA has completed (a DMA
  reads the chunk while the stream runs, after the call has returned);
* the uploads of several devices (a pmap's batch, a sharded array's blocks) are pieces of one
  job list, run at once.

**Streams.**  The DMAs run on a second stream per device (``Device.copy_stream``), so that a
step's batch is uploaded while the previous step's kernels, already enqueued on the main
stream, still run (in a loop that does not wait for each step).  Behind an upload's last DMA
an event is recorded and the main stream is made to wait for it (``_publish``,
``cuStreamWaitEvent``): everything enqueued on the main stream afterwards (the call that reads
the upload, a read back, a later use of the block) runs after the upload, and nothing needs to
know which buffers came from the copy stream.  The other direction is ``Blocks``: the block an
upload writes must not be one that work enqueued earlier on the main stream still uses.

**Overlapped uploads** (``upload(overlap=True)``, ``Uploads.start`` / ``finish``: a pmap's
or a sharded call's batch, a call's several host arguments).  A step that uploads its batch
and then enqueues its kernels costs the host the copies *plus* the enqueueing (on the 2xH100
host: 1.65 ms for two 16.8 MB blocks, then some 0.6 ms of launches, more than the 2.74 ms the
two GPUs take for the step).  Here the DMAs are enqueued at once, each behind a *gate*: the
copy stream waits (``cuStreamWaitValue32``) until a word of mapped pinned memory, one per
chunk (``Pool.flags``), holds the chunk's next value; the worker threads copy the pieces and
set each chunk's word when it is filled (``InFlight``), while the calling thread goes on to
enqueue the step, whose kernels wait (on the device) for the DMAs.  The caller calls
``finish`` before it returns, so the host arrays are still read only during the call.  A gate
is opened whatever happens (a failed copy, a failed enqueue): no stream waits for ever.  Off
with ``OURJAX_UPLOAD_OVERLAP=0``, on a driver without stream memory operations (probed once
per device), and for an upload of more pieces than a pool has chunks.

**When the host array may change.**  ``upload`` returns once every piece has been copied into
pinned memory and its DMA enqueued: the caller's array is no longer read, so it may be changed
or freed at once (JAX's ``device_put`` copies; so does this).  Only the pinned chunks are read
later, by the DMAs, and they are guarded by their events.

**Which arrays are staged** (``worth_staging``; measured on a 2xH100 host whose pageable copies
run at about 5 GB/s).  A pageable copy costs about ``n / Bp`` on the calling thread and, when
the device's main stream is busy, may have to wait for it (the driver reuses its few staging
buffers only as their DMAs, queued behind the stream's work, complete; not measured in
isolation); a staged one costs a fixed ``c`` (driver
calls, and some 0.3 ms when pieces are handed to other threads: a 1 MB upload took 0.53 ms
staged on 8 threads against 0.22 ms pageable) plus its copies, and never waits for the main
stream.  So: on an idle device, arrays from ``IDLE_MIN_BYTES`` (4 MiB) are staged (16.8 MB:
2.9 ms staged against 3.2 ms pageable, waited); while the device is busy, arrays from
``MIN_BYTES`` (also 4 MiB: measured, a 2.1 MB batch was slower staged even behind a busy
stream, see ``MIN_BYTES``), since the pageable copy would wait; below 8 MiB in all (two
``THREAD_BYTES``) the calling thread copies alone, without the hand-off.
``OURJAX_STAGED_UPLOAD_IDLE_BYTES`` and ``OURJAX_STAGED_UPLOAD_BYTES`` set the thresholds,
``OURJAX_UPLOAD_THREAD_MB`` the bytes per thread, ``OURJAX_STAGED_UPLOADS=0`` turns staging off
(every upload pageable, on the main stream, as before), ``OURJAX_UPLOAD_THREADS`` the most
threads (default: up to 4, no more than the CPUs).

A pool's chunks are freed when its device object goes (process exit): pinned memory is
bounded by ``POOL_BYTES`` per device (``OURJAX_STAGING_MB``, default 64).
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections import deque

import numpy as np

from ourjax.errors import DeviceOutOfMemoryError

CHUNK_BYTES = int(float(os.environ.get("OURJAX_UPLOAD_CHUNK_MB", "4")) * (1 << 20))
"""Bytes per pinned chunk: a piece's host copy, DMA and event.  Large enough that the per-piece
Python and driver calls (a gate, a DMA and an event on the calling thread in an overlapped
upload, some 10 us each; a GIL hand-off per piece from the copying thread) are small beside
its copy (4 MiB: some 0.4 ms), small enough that a 16 MB batch is 4 pieces to spread over
threads and the first DMA starts early.  Measured on the 2xH100 host (``dp_why.py
--variants``, back-to-back data-parallel steps, 16.8 MB per device, overlapped): 2 MiB chunks
on 8 threads 3.09-3.31 ms a two-GPU step, 4 MiB on 8 2.88, 4 MiB on 4 2.81 (one GPU: 2.67, 2.69,
2.70)."""

MIN_BYTES = int(os.environ.get("OURJAX_STAGED_UPLOAD_BYTES", str(4 << 20)))
"""The fewest bytes an upload stages, when the device's main stream is busy (see the module
docstring's cost model).  4 MiB, as on an idle device: on the 2xH100 host, back-to-back
data-parallel steps uploading 2.1 MB per device took 1.42 ms staged against 1.18 pageable on
two GPUs (0.78 against 0.71 on one), while 16.8 MB per device took 2.81 against 3.93 ms on one
GPU and 3.41 against 4.45 on two."""

IDLE_MIN_BYTES = int(os.environ.get("OURJAX_STAGED_UPLOAD_IDLE_BYTES", str(4 << 20)))
"""The fewest bytes an upload stages when the device's main stream is idle."""

POOL_BYTES = int(float(os.environ.get("OURJAX_STAGING_MB", "64")) * (1 << 20))
"""The most pinned bytes a device's pool holds; a larger upload reuses its chunks in waves."""


def _threads() -> int:
  v = os.environ.get("OURJAX_UPLOAD_THREADS")
  if v:
    return max(1, int(v))
  return max(1, min(4, os.cpu_count() or 1))


THREADS = _threads()
"""Threads that copy pieces (the calling thread is one of them, except in an overlapped
upload).  No more than 4 however many cores: the copies are bound by the host's memory, not
its cores (``benchmarks/upload_threads.py`` on the 32-core 2xH100 host, 33.6 MB into pinned
memory: 9.5 GB/s on 1 thread, 31 on 4, 37.6 on 8, then fewer: 31.7 on 12, 25.4 on 16, 19.0 on
24), and in an overlapped upload the copying threads share the memory and the GIL with the
thread enqueueing the step: there 4 threads did better than 8 (see ``CHUNK_BYTES``)."""


def enabled() -> bool:
  from ourjax.config import env_switch
  return env_switch("OURJAX_STAGED_UPLOADS")


def worth_staging(dev, nbytes: int) -> bool:
  """Whether an upload of ``nbytes`` to ``dev`` goes through the pinned pool and the copy
  stream: staging on, ``dev`` a driver device (one that allocates pinned memory), and at least
  ``IDLE_MIN_BYTES``, or at least ``MIN_BYTES`` while the device's main stream is busy (a
  pageable copy would wait behind its work; the staged one runs beside it)."""
  if nbytes < MIN_BYTES or not hasattr(dev, "host_alloc") or not enabled():
    return False
  return nbytes >= IDLE_MIN_BYTES or dev.busy()


class _Chunk:
  """A pinned chunk: its address, a NumPy view of its bytes, the event recorded behind the
  last DMA that read it (None: none yet), and its gate: the word ``slot`` of its pool's
  ``flags`` and the value (``seq``) that releases its latest DMA (``upload``'s overlapped
  form)."""
  __slots__ = ("ptr", "view", "event", "pending", "slot", "seq")

  def __init__(self, ptr: int, nbytes: int, slot: int = 0):
    self.ptr = ptr
    self.view = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), np.uint8)
    self.event = None
    self.pending = False      # a DMA reading it may not have run yet
    self.slot = slot
    self.seq = 0

  def wait(self) -> None:
    """Block until the DMA that last read the chunk has run (it may then be written)."""
    if self.pending:
      self.event.synchronize("a pinned staging chunk's upload")
      self.pending = False


class Pool:
  """A device's pinned chunks (``Pool.of(dev)``), handed out oldest first: the chunk handed out
  next is the one whose DMA was enqueued longest ago, so waiting for it is rarely needed."""

  def __init__(self, dev, chunk_bytes: int | None = None, max_bytes: int | None = None):
    self.dev = dev
    self.chunk_bytes = int(chunk_bytes or CHUNK_BYTES)
    self.max_chunks = max(1, int(max_bytes or POOL_BYTES) // self.chunk_bytes)
    self.chunks: deque = deque()     # oldest DMA first
    self.lock = threading.Lock()     # held by an upload while it uses the pool's chunks
    self._made = 0                   # chunks made (each has its own gate word)
    self._gated = None               # gates usable on this device (None: not probed yet)
    self.flags = None                # the gate words (uint32, mapped pinned memory)
    self.flags_ptr = self.flags_dev = 0     # their host and device addresses
    self.gate_error = None           # why the probe found no gates

  def gated(self) -> bool:
    """Whether DMAs on the device's copy stream can wait for words the host writes
    (``Device.wait_host_value``, ``cuStreamWaitValue32``): probed once per pool (a word
    already set is waited for, the copy stream synchronised); on failure uploads are never
    overlapped here."""
    if self._gated is None:
      self._gated = self._probe_gates()
    return self._gated

  def _probe_gates(self) -> bool:
    from ourjax.backends.cuda import driver
    dev = self.dev
    if not hasattr(driver._driver(), "cuStreamWaitValue32"):
      return False
    n = self.max_chunks + 1          # (the last word: the probe's)
    ptr = 0
    try:
      ptr = dev.host_alloc(max(4096, 4 * n), mapped=True)
      flags = np.frombuffer((ctypes.c_uint32 * n).from_address(ptr), np.uint32)
      flags[:] = 0
      flags[-1] = 1
      addr = dev.host_device_pointer(ptr)
      dev.wait_host_value(addr + 4 * (n - 1), 1, dev.copy_stream)
      dev.synchronize("the staging copy stream", dev.copy_stream)
    except Exception as e:     # (a driver without stream memory operations)
      import logging
      logging.getLogger("ourjax").info("staging: no overlapped uploads on %s: %s", dev, e)
      self.gate_error = f"{type(e).__name__}: {e}"
      if ptr:
        try:
          dev.host_free(ptr)
        except Exception:     # pragma: no cover
          pass
      return False
    self.flags, self.flags_ptr, self.flags_dev = flags, ptr, addr
    return True

  @staticmethod
  def of(dev) -> "Pool":
    return _per_device(dev, "_staging_pool", Pool)

  def take(self, k: int) -> list:
    """``k`` (<= ``max_chunks``) distinct chunks for one wave of pieces, oldest DMA first: a
    chunk whose DMA may still be running is replaced by a new one while the pool is below its
    size (so back-to-back uploads overlap instead of waiting); at full size it is handed out
    all the same (its piece waits for it).  Hold ``lock``."""
    if k > self.max_chunks:
      raise ValueError(f"staging: {k} chunks asked of a pool of {self.max_chunks}")
    chunks, out = self.chunks, []
    for j in range(k):
      c = chunks[0] if j < len(chunks) else None
      if c is not None and c.pending and c.event.query():
        c.pending = False
      if c is None or (c.pending and len(chunks) < self.max_chunks):
        from ourjax.backends.cuda import driver
        c = _Chunk(self.dev.host_alloc(self.chunk_bytes), self.chunk_bytes, self._made)
        self._made += 1
        c.event = driver.Event(self.dev)
      else:
        chunks.popleft()
      chunks.append(c)
      out.append(c)
    return out

  def __del__(self):
    try:
      for c in self.chunks:
        c.wait()
        self.dev.host_free(c.ptr)
      if self.flags_ptr:
        self.dev.host_free(self.flags_ptr)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


class Blocks:
  """The device memory that staged uploads write into (``allocate``), per device
  (``Blocks.of(dev)``).

  A staged upload's DMAs run on the device's *copy stream*, not in the main stream's order, so
  the block they write must not be one that work already enqueued on the main stream still
  reads or writes (a block the caching allocator has just handed back, e.g. the previous
  step's batch).  Blocks released by uploads' arrays therefore come back here, not to the
  allocator: when they are next asked for, an event (the *fence*) is recorded on the main
  stream behind everything enqueued so far, which covers every use they had.  A block is
  handed out oldest release first among those whose fence has passed, the copy stream made
  to wait (on the device) for its fence; while none has passed and the pool holds fewer than
  ``PER_SIZE`` blocks of the size, a new one is taken from the allocator instead (one the
  driver has just allocated needs no fence; one from the allocator's cache is fenced by an
  event recorded now).  In a loop that uploads a batch per step, the block of two steps ago
  is taken, whose fence passed when that step finished: the DMAs of step k + 1's batch run
  while step k computes.  At most ``KEEP`` free blocks are kept; older ones go back to the
  allocator (which counts this pool's blocks as in use, free or not)."""

  KEEP = 6
  PER_SIZE = 3

  def __init__(self, dev):
    self.dev = dev
    self._returned = deque()   # (ptr, size, nbytes) of blocks let go of (``Allocation.free``)
    self.free: list = []       # [ptr, size, fence event], oldest release first
    self.fenced: set = set()   # handed out, copy stream fenced, no upload into them yet
    self.owned: dict = {}      # ptr -> bytes the allocator was asked for (its accounting)
    self.sizes: dict = {}      # ptr -> block size
    self.lock = threading.Lock()
    dev.allocator.reclaimers.append(self.give_back)

  def give_back(self) -> None:
    """Return every free block to the allocator (which is emptying its cache: out of
    memory).  Their last DMAs are waited for by the main stream, which the allocator
    synchronises before it frees anything.  Skipped while an ``allocate`` holds the lock."""
    if not self.lock.acquire(blocking=False):
      return
    try:
      self._give_back_locked()
    finally:
      self.lock.release()

  def _give_back_locked(self) -> None:
    while self._returned:
      ptr, size, _ = self._returned.popleft()
      self.free.append([ptr, size, None])
    for ptr, size, _ in self.free:
      self.sizes.pop(ptr, None)
      self.fenced.discard(ptr)
      self.dev.allocator._returned.append((ptr, size, self.owned.pop(ptr)))
    self.free.clear()

  @staticmethod
  def of(dev) -> "Blocks":
    return _per_device(dev, "_upload_blocks", Blocks)

  def _fence_returned(self) -> None:
    from ourjax.backends.cuda import driver
    got = []
    while True:
      try:
        got.append(self._returned.popleft())
      except IndexError:
        break
    self.fenced.difference_update(p for p, _, _ in got)   # (freed without an upload)
    fence = driver.Event(self.dev).record()      # behind every use of the blocks got back
    self.free.extend([ptr, size, fence] for ptr, size, _ in got)
    while len(self.free) > self.KEEP:
      ptr, size, _ = self.free.pop(0)
      self.sizes.pop(ptr, None)
      self.dev.allocator._returned.append((ptr, size, self.owned.pop(ptr)))

  def allocate(self, nbytes: int):
    """A block of at least ``nbytes`` for a staged upload (an ``Allocation`` that comes back
    here when freed), the copy stream already made to wait for its earlier uses: the oldest
    free block of its size whose fence has passed; else a new one while this pool holds fewer
    than ``PER_SIZE`` of the size; else the oldest (its DMAs then wait on the device)."""
    from ourjax.backends.cuda import driver
    from ourjax.backends.cuda.memory import Allocation, block_size
    size = block_size(nbytes)
    dev = self.dev
    with self.lock:
      if self._returned:
        self._fence_returned()
      same = [i for i, e in enumerate(self.free) if e[1] == size]
      pick = next((i for i in same if self.free[i][2].query()), None)
      if pick is None and same and \
          sum(1 for p in self.owned if self.sizes.get(p) == size) >= self.PER_SIZE:
        pick = same[0]
      if pick is not None:
        ptr, size, fence = self.free.pop(pick)
        dev.wait_event(fence, dev.copy_stream)
      else:
        al = dev.allocator
        with al._lock:
          n0 = al.num_allocs
          try:
            a = al.allocate(nbytes)
          except DeviceOutOfMemoryError:
            if not self.free and not self._returned:
              raise
            self._give_back_locked()      # (the allocator could not: this lock is held)
            a = al.allocate(nbytes)
          fresh = al.num_allocs > n0
        ptr, size, a._allocator = a.ptr, a.size, None     # (now this pool's)
        self.owned[ptr] = nbytes
        self.sizes[ptr] = size
        if not fresh:            # a cached block: enqueued work may still use it
          dev.wait_event(driver.Event(dev).record(), dev.copy_stream)
      self.fenced.add(ptr)
    return Allocation(self, ptr, nbytes, size)

  def take_fenced(self, dst: int) -> bool:
    """Whether ``dst`` is a block of ``allocate`` not uploaded into yet (then it no longer
    is): its upload needs no fence of its own."""
    with self.lock:
      if dst in self.fenced:
        self.fenced.discard(dst)
        return True
      return False


def allocate(dev, nbytes: int):
  """``(allocation, staged)``: the device block for an upload of ``nbytes`` to ``dev`` and
  whether the upload is to be staged (``worth_staging``, decided once, here): then the block
  is from ``Blocks`` (its copy stream fenced), else from the device's caching allocator (a
  pageable copy on the main stream)."""
  if worth_staging(dev, nbytes):
    return Blocks.of(dev).allocate(nbytes), True
  return dev.allocator.allocate(nbytes), False


_POOLS_LOCK = threading.Lock()


def _per_device(dev, attr: str, make):
  """``dev``'s object kept at attribute ``attr``, made (``make(dev)``) on first use, once."""
  obj = getattr(dev, attr, None)
  if obj is None:
    with _POOLS_LOCK:
      obj = getattr(dev, attr, None)
      if obj is None:
        obj = make(dev)
        setattr(dev, attr, obj)
  return obj
_workers = None
_workers_lock = threading.Lock()


def _executor():
  global _workers
  if _workers is None:
    with _workers_lock:
      if _workers is None:
        from concurrent.futures import ThreadPoolExecutor
        # (THREADS of them: an overlapped upload's copies are all theirs, see InFlight)
        _workers = ThreadPoolExecutor(max_workers=max(1, THREADS),
                                      thread_name_prefix="ourjax-staging")
  return _workers


def _run_piece(piece) -> None:
  """Copy one piece into its chunk (after the chunk's last DMA has run) and enqueue its DMA
  and the chunk's event behind it on the device's copy stream."""
  dev, dst, src, chunk = piece
  chunk.wait()
  n = src.nbytes
  np.copyto(chunk.view[:n], src)                 # (releases the GIL)
  cs = dev.copy_stream
  dev.copy_from_pinned(dst, chunk.ptr, n, cs)
  chunk.event.record(cs)
  chunk.pending = True


def _drain(todo: deque) -> None:
  while True:
    try:
      piece = todo.popleft()                     # (atomic: threads share the deque)
    except IndexError:
      return
    _run_piece(piece)


MIN_PIECE_BYTES = 256 << 10
"""The smallest piece an upload is cut into to give every thread some of it (below this the
hand-off to a thread costs more than the copy it takes off the calling thread)."""


THREAD_BYTES = int(float(os.environ.get("OURJAX_UPLOAD_THREAD_MB", "4")) * (1 << 20))
"""Bytes of upload per thread that copies: handing pieces to another thread costs some
0.3 ms (measured on a 2xH100 host: a 1 MB upload staged on 8 threads took 0.53 ms, a pageable
copy 0.22 ms), about the time one thread copies a few MB, so an upload of less than
``2 * THREAD_BYTES`` is copied on the calling thread alone, one of ``k * THREAD_BYTES`` on k."""


def threads_for(nbytes: int) -> int:
  """The threads (the calling one among them) that copy an upload of ``nbytes`` in all."""
  return max(1, min(THREADS, int(nbytes) // max(1, THREAD_BYTES)))


def piece_bytes(nbytes: int, ndevices: int, chunk_bytes: int, threads: int | None = None) -> int:
  """The piece size of an upload of ``nbytes`` when ``ndevices`` devices' uploads run at once:
  small enough that the pieces of all of them keep ``threads`` (default ``THREADS``) threads
  busy, at least ``MIN_PIECE_BYTES`` (a multiple of 64 KiB), at most a chunk."""
  share = -(-nbytes * ndevices // max(1, threads or THREADS))
  share = -(-share // (64 << 10)) * (64 << 10)
  return max(1, min(chunk_bytes, max(MIN_PIECE_BYTES, share)))


def pieces(jobs, chunk_bytes: int | None = None, threads: int | None = None) -> list:
  """``[(dev, dst, bytes of host)]`` pieces of the uploads ``jobs`` (``(dev, dst, host)``,
  host C-contiguous), of ``chunk_bytes`` each (None: ``piece_bytes`` for ``threads``, no
  larger than the device's pool's chunks), devices interleaved (piece i of every device before
  piece i + 1 of any, so that every device's first DMA starts early)."""
  per_dev: dict = {}
  ndev = len({j[0] for j in jobs})
  for dev, dst, host in jobs:
    flat = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
    step = chunk_bytes or piece_bytes(flat.nbytes, ndev, Pool.of(dev).chunk_bytes, threads)
    lst = per_dev.setdefault(dev, [])
    for off in range(0, flat.nbytes, step):
      lst.append((dev, dst + off, flat[off:off + step]))
  out = []
  lists = list(per_dev.values())
  for i in range(max((len(v) for v in lists), default=0)):
    out.extend(v[i] for v in lists if i < len(v))
  return out


def _fence(jobs) -> None:
  """Make each device's copy stream wait for the main stream's work so far where one of its
  destinations is not a fenced block of ``Blocks.allocate`` (it may be one that enqueued
  work still uses)."""
  from ourjax.backends.cuda import driver
  need = {}
  for dev, dst, _ in jobs:
    if not Blocks.of(dev).take_fenced(int(dst)):
      need[dev] = True
  for dev in need:
    dev.wait_event(driver.Event(dev).record(), dev.copy_stream)


def _publish(devs) -> None:
  """Record an event behind every DMA enqueued on each device's copy stream and make its main
  stream wait for it: whatever is enqueued there from now on (the call that reads the upload,
  a read back, a later reuse of the block) runs after the upload; what is enqueued already
  (the previous step) is not held up."""
  from ourjax.backends.cuda import driver
  for dev in devs:
    ev = getattr(dev, "_upload_done", None)
    if ev is None:
      ev = dev._upload_done = driver.Event(dev)
    dev.make_current()
    ev.record(dev.copy_stream)
    dev.wait_event(ev)


def overlap_enabled() -> bool:
  """``OURJAX_UPLOAD_OVERLAP=0`` turns the overlapped uploads off (``upload(overlap=True)``
  then copies before it returns, as ``upload`` does)."""
  from ourjax.config import env_switch
  return env_switch("OURJAX_UPLOAD_OVERLAP")


def upload(jobs, also=None, overlap: bool = False):
  """Enqueue the uploads ``jobs`` (``(device, dst address, host array)``, host C-contiguous)
  through the devices' pinned pools and copy streams, on ``threads_for`` threads at once, and
  return once every host array has been copied into pinned memory and every DMA is enqueued
  (the host arrays may then change; see the module docstring); each device's main stream
  waits for them (``_publish``).  ``also``: a function run on the calling thread while the
  workers copy (the small uploads that take the plain path).

  ``overlap=True``: the copies may still be running when this returns, which it does as soon
  as the DMAs are enqueued, each behind a *gate* (``Device.wait_host_value``) that the thread
  copying its chunk opens when the chunk is filled; it returns an ``InFlight`` whose
  ``finish()`` the caller must call (in a ``finally``) before it returns to its own caller:
  only then has every host array been read.  In between the caller enqueues the work that
  reads the uploads (a step's kernels), while the copies run (``_upload_gated``).  None when
  the upload was made in full here (overlap off, no gates on a device, or more pieces than a
  pool has chunks)."""
  total = sum(int(h.nbytes) for _, _, h in jobs)
  nthreads = threads_for(total)
  todo = pieces(jobs, threads=nthreads)
  if not todo:
    if also is not None:
      also()
    return None
  pools = sorted({Pool.of(p[0]) for p in todo}, key=lambda pl: id(pl.dev))
  if overlap and overlap_enabled() and _one_wave(todo) and all(pl.gated() for pl in pools):
    return _upload_gated(jobs, todo, pools, also, nthreads)
  for pl in pools:           # (in one order: two uploads never wait for each other's pools)
    pl.lock.acquire()
  try:
    _fence(jobs)
    start = 0
    try:
      while start < len(todo):
        # a wave: as many pieces per device as its pool has chunks
        wave, used = [], {}
        i = start
        while i < len(todo):
          d = todo[i][0]
          pl = Pool.of(d)
          if used.get(pl, 0) == pl.max_chunks:
            break
          used[pl] = used.get(pl, 0) + 1
          wave.append(todo[i])
          i += 1
        start = i
        got = {pl: deque(pl.take(k)) for pl, k in used.items()}
        q = deque((d, dst, src, got[Pool.of(d)].popleft()) for d, dst, src in wave)
        _run_wave(q, also, nthreads)
        also = None
    finally:
      _publish([pl.dev for pl in pools])
  finally:
    for pl in pools:
      pl.lock.release()


def _run_wave(q: deque, also, nthreads: int = THREADS) -> None:
  nworkers = min(nthreads - 1, len(q) - 1 if also is None else len(q))
  futures = []
  for _ in range(max(0, nworkers)):
    try:
      futures.append(_executor().submit(_drain, q))
    except RuntimeError:     # (at interpreter shutdown: the calling thread copies them all)
      break
  err = None
  try:
    if also is not None:
      also()
    _drain(q)
  except BaseException as e:       # (the workers are waited for before anything is raised)
    err = e
    q.clear()
  for f in futures:
    try:
      f.result()
    except BaseException as e:
      if err is None:
        err = e
  if err is not None:
    raise err


# ------------------------------------------------------------------------------------------------
# Overlapped uploads: DMAs enqueued at once behind gates, the copies made meanwhile


def _one_wave(todo) -> bool:
  """Whether every device's pieces fit its pool's chunks at once (no chunk reused within the
  upload: an overlapped upload's chunks are all handed out before any is filled)."""
  per: dict = {}
  for dev, _, _ in todo:
    per[dev] = per.get(dev, 0) + 1
  return all(k <= Pool.of(dev).max_chunks for dev, k in per.items())


def _upload_gated(jobs, todo, pools, also, nthreads) -> "InFlight":
  """``upload``'s overlapped form.  With the pools locked: each piece gets a chunk (whose
  last DMA is waited for first, on the host: it is about to be rewritten), and on the copy
  stream a wait for the chunk's gate word to reach its next value, the DMA from the chunk and
  the chunk's event; the pieces go to the workers (``InFlight``), which open each gate once
  its chunk is filled; ``also`` runs (its pageable copies on the main stream come before the
  main stream's wait for the gated DMAs, which ``_publish`` enqueues last).  Should anything
  fail, every gate enqueued is opened before the error is raised (their DMAs then move bytes
  nobody reads), so no stream waits for ever."""
  for pl in pools:
    pl.lock.acquire()
  items, job = [], None
  try:
    _fence(jobs)
    used: dict = {}
    for d, _, _ in todo:
      pl = Pool.of(d)
      used[pl] = used.get(pl, 0) + 1
    got = {pl: deque(pl.take(k)) for pl, k in used.items()}
    for dev, dst, src in todo:
      pl = Pool.of(dev)
      c = got[pl].popleft()
      c.wait()
      c.seq = c.seq % 0xFFFFFFFF + 1           # (1 .. 2**32 - 1; the word starts at 0)
      cs = dev.copy_stream
      dev.wait_host_value(pl.flags_dev + 4 * c.slot, c.seq, cs)
      items.append((src, c, pl))
      dev.copy_from_pinned(dst, c.ptr, src.nbytes, cs)
      c.event.record(cs)
      c.pending = True
    job = InFlight(items, nthreads)
    if also is not None:
      also()
  except BaseException:
    if job is None:
      for _, c, pl in items:
        pl.flags[c.slot] = c.seq
    else:
      job.finish(raise_errors=False)
    raise
  finally:
    try:
      _publish([pl.dev for pl in pools])
    finally:
      for pl in pools:
        pl.lock.release()
  return job


def _fill(chunk, src) -> None:
  """Copy ``src`` (bytes) into the start of ``chunk`` (releases the GIL)."""
  np.copyto(chunk.view[:src.nbytes], src)


class InFlight:
  """The copies of an overlapped upload (``upload(overlap=True)``), on up to ``nthreads``
  worker threads from the moment it is made: each piece's bytes go into its chunk, then its
  gate word is set to the chunk's value, which lets its DMA run.  A gate is opened whatever
  happens (a failed copy opens it too, and the remaining copies are skipped), so the device
  never waits for ever; the error is raised by ``finish``.

  The word is written after the copy returned: NumPy's copy ends (glibc's memmove ends its
  non-temporal stores with a store fence) and the worker takes the GIL again (an atomic
  operation, a full barrier on x86) before it stores the word, so the chunk's bytes are
  visible to the device's DMA before the gate opens."""

  def __init__(self, items, nthreads: int):
    self._q = deque(items)
    self._errors: list = []
    self._futures = []
    self._done = False
    for _ in range(max(0, min(nthreads, len(items)))):
      try:
        self._futures.append(_executor().submit(self._drain))
      except RuntimeError:     # (at interpreter shutdown: the caller copies them in finish)
        break

  def _drain(self) -> None:
    q, errors = self._q, self._errors
    while True:
      try:
        src, c, pl = q.popleft()                 # (atomic: threads share the deque)
      except IndexError:
        return
      try:
        if not errors:
          _fill(c, src)
      except BaseException as e:
        errors.append(e)
      finally:
        pl.flags[c.slot] = c.seq                 # the gate: its DMA may run

  def finish(self, raise_errors: bool = True) -> None:
    """Return once every piece has been copied (the host arrays are read no more and may
    change); the calling thread copies those no worker has started.  Raises the first copy's
    error (its upload's blocks hold wrong bytes).  Idempotent."""
    if self._done:
      return
    self._done = True
    self._drain()
    for f in self._futures:
      f.result()
    if self._errors and raise_errors:
      raise self._errors[0]
