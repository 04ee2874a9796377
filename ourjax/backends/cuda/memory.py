"""A caching device allocator.

``cuMemAlloc``/``cuMemFree`` are slow (they can synchronise the device), so freed blocks are
kept in free lists by *size class* and handed out again:

* requests up to 1 MiB round up to a multiple of 512 bytes;
* larger ones round up to a sixteenth of the next power of two (at most 6.25% waste beyond
  the 1/16 step), so a recurring size hits the same class.

A free list hands out its most recently freed block, or a block the caller prefers when that
one is free: ``allocate_many(..., prefer=)`` lets an executable ask for the addresses of one of
its earlier calls, so that a step that alternates between two sets of buffers (a training
loop's parameters in, new parameters out) sees the same addresses every other call and its CUDA
graph is launched as it is, without updating nodes (``program._GraphReplay``).  The addresses
that kept graphs hold are *wanted* (``want``/``unwant``): other requests take free blocks no
graph wants, and a new block from the driver rather than a wanted one while the cache holds
less than ``WANTED_CACHE_FRACTION`` of the device's memory (beyond that, memory comes first and
the graph that wanted the block updates its nodes).

A block is owned by an ``Allocation``; when the allocation is garbage-collected (or ``free()``
is called) the block goes back to its free list: it is queued (a deque append, no lock: a
training step's hundred outputs die at once) and the queue is moved into the free lists, with
the accounting, by the next allocation or ``memory_stats()``.  Reuse needs no synchronisation because
ourjax's device work is ordered on the device's main stream: whatever used the block before
was enqueued before whatever uses it next.  (The one exception, staged uploads' DMAs on a copy
stream, write blocks of their own, ``staging.Blocks``, fenced by events; they come back here
when ``empty_cache`` or running out of memory asks for them.)

When ``cuMemAlloc`` runs out of memory, the allocator waits for the stream, returns every
cached block to the driver and tries once more; if that fails too it raises
``DeviceOutOfMemoryError`` naming the bytes asked for, the bytes free and what ourjax holds.
Nothing that is in use is touched, so every live array stays intact.

``memory_stats()`` reports (JAX's names): ``bytes_in_use``, ``peak_bytes_in_use``,
``bytes_reserved`` (in use + cached), ``bytes_cached``, ``num_allocs`` (driver allocations),
``num_requests``, ``num_cache_hits``, ``largest_alloc_size``, ``bytes_limit`` (device total).
"""
from __future__ import annotations

import atexit
import collections
import threading

from ourjax.errors import DeviceError, DeviceOutOfMemoryError, format_bytes

__all__ = ["DeviceAllocator", "Allocation", "size_class"]

SMALL_LIMIT = 1 << 20
WANTED_CACHE_FRACTION = 0.25
SMALL_STEP = 512

_shutting_down = False


@atexit.register
def _at_exit():
  global _shutting_down
  _shutting_down = True


def block_size(nbytes: int) -> int:
  """The size of the block ``allocate(nbytes)`` hands out (``size_class``, of at least 512
  bytes; ``allocate`` inlines it for requests up to ``SMALL_LIMIT``)."""
  n = int(nbytes)
  return -(-n // SMALL_STEP) * SMALL_STEP if 0 < n <= SMALL_LIMIT else size_class(n)


def size_class(nbytes: int) -> int:
  """The block size a request of ``nbytes`` is served from (at least 512 bytes)."""
  n = max(int(nbytes), 1)
  if n <= SMALL_LIMIT:
    return -(-n // SMALL_STEP) * SMALL_STEP
  step = (1 << (n - 1).bit_length()) >> 4
  return -(-n // step) * step


class Allocation:
  """A device block in use: ``ptr`` (int), ``nbytes`` asked for, ``size`` of the block.
  Returned to the allocator's cache by ``free()`` or when garbage-collected."""
  __slots__ = ("ptr", "nbytes", "size", "_allocator", "__weakref__")

  def __init__(self, allocator, ptr: int, nbytes: int, size: int):
    self.ptr, self.nbytes, self.size, self._allocator = ptr, nbytes, size, allocator

  def free(self) -> None:
    a = self._allocator
    if a is not None:
      self._allocator = None
      a._returned.append((self.ptr, self.size, self.nbytes))

  def __del__(self):
    a = self._allocator
    if a is not None and not _shutting_down:
      self._allocator = None
      try:
        a._returned.append((self.ptr, self.size, self.nbytes))
      except Exception:   # pragma: no cover - never raise from a finaliser
        pass

  def __repr__(self):
    return f"<Allocation 0x{self.ptr:x} {self.nbytes} B (block {self.size} B)>"


class DeviceAllocator:
  """The caching allocator of one ``driver.Device``."""

  def __init__(self, device):
    self.device = device
    self._lock = threading.RLock()   # re-entrant: a finaliser may run while it is held
    self._free: dict[int, dict[int, None]] = {}   # size -> its free blocks, in freeing order
    self._returned = collections.deque()   # (ptr, size, nbytes) of blocks let go of
    self.bytes_in_use = 0          # sizes of blocks handed out
    self.requested_in_use = 0      # bytes asked for by those
    self.bytes_cached = 0
    self.peak_bytes_in_use = 0
    self.num_allocs = 0
    self.num_requests = 0
    self.num_cache_hits = 0
    self.largest_alloc_size = 0
    self._wanted: dict[int, int] = {}     # address -> how many kept graphs hold it
    #: functions that give back blocks held elsewhere (``staging.Blocks``) before the cache is
    #: emptied (``empty_cache``, or on running out of memory)
    self.reclaimers: list = []

  def want(self, ptrs) -> None:
    """Mark ``ptrs`` as held by a kept graph (see the module docstring)."""
    w = self._wanted
    with self._lock:
      for p in ptrs:
        w[p] = w.get(p, 0) + 1

  def unwant(self, ptrs) -> None:
    w = self._wanted
    with self._lock:
      for p in ptrs:
        c = w.get(p, 0)
        if c > 1:
          w[p] = c - 1
        else:
          w.pop(p, None)

  def _take(self, lst: dict) -> int:
    """A block from free list ``lst`` for a request with no preference: the most recently
    freed block no kept graph wants; else a new one (or, past ``WANTED_CACHE_FRACTION``, a
    wanted one).  0 when the caller is to allocate from the driver."""
    wanted = self._wanted
    if not lst:
      return 0
    if wanted:
      for p in reversed(lst):
        if p not in wanted:
          del lst[p]
          return p
      if self.bytes_cached + self.bytes_in_use < WANTED_CACHE_FRACTION * \
          self.device.total_memory:
        return 0
    return lst.popitem()[0]

  def allocate(self, nbytes: int) -> Allocation:
    """A block of at least ``nbytes`` (stream-ordered: usable by work enqueued from now on).
    (Called for every output of every call: kept to plain arithmetic and one dict lookup.)"""
    nbytes = int(nbytes)
    size = -(-nbytes // SMALL_STEP) * SMALL_STEP if 0 < nbytes <= SMALL_LIMIT else \
        size_class(nbytes)
    with self._lock:
      if self._returned:
        self._drain_locked()
      self.num_requests += 1
      ptr = self._take(self._free.get(size))
      if ptr:
        self.bytes_cached -= size
        self.num_cache_hits += 1
      else:
        ptr = self._driver_alloc(size, nbytes)
      used = self.bytes_in_use = self.bytes_in_use + size
      self.requested_in_use += nbytes
      if used > self.peak_bytes_in_use:
        self.peak_bytes_in_use = used
      if nbytes > self.largest_alloc_size:
        self.largest_alloc_size = nbytes
    return Allocation(self, ptr, nbytes, size)

  def allocate_many(self, sizes: list, nbytes: list, prefer=None) -> list:
    """``allocate`` of each of ``nbytes`` (``sizes``: their size classes, ``block_size``),
    under one acquisition of the lock (a call's outputs: a training step has a hundred).
    ``prefer``: per request, the address it would rather have (0: none), taken where that
    block is free; the others get their lists' most recently freed blocks."""
    new = object.__new__
    out = [None] * len(sizes)
    with self._lock:
      if self._returned:
        self._drain_locked()
      free = self._free
      hits = cached = 0
      if prefer is not None:        # first the preferred blocks, before others take them
        for i, (size, p) in enumerate(zip(sizes, prefer)):
          lst = free.get(size)
          if lst and p in lst:
            del lst[p]
            out[i] = p
            cached += size
            hits += 1
      for i, (size, n) in enumerate(zip(sizes, nbytes)):
        ptr = out[i]
        if ptr is None:
          ptr = self._take(free.get(size))
          if ptr:
            cached += size
            hits += 1
          else:
            ptr = self._driver_alloc(size, n)
        a = new(Allocation)
        a.ptr, a.nbytes, a.size, a._allocator = ptr, n, size, self
        out[i] = a
      self.num_requests += len(out)
      self.num_cache_hits += hits
      self.bytes_cached -= cached
      used = self.bytes_in_use = self.bytes_in_use + sum(sizes)
      self.requested_in_use += sum(nbytes)
      if used > self.peak_bytes_in_use:
        self.peak_bytes_in_use = used
      big = max(nbytes, default=0)
      if big > self.largest_alloc_size:
        self.largest_alloc_size = big
    return out

  def _driver_alloc(self, size: int, nbytes: int) -> int:
    try:
      ptr = self.device.mem_alloc(size)
    except DeviceOutOfMemoryError:
      self._empty_cache_locked()
      try:
        ptr = self.device.mem_alloc(size)
      except DeviceOutOfMemoryError:
        try:
          free, total = self.device.memory_info()
        except DeviceError:   # pragma: no cover
          free, total = -1, self.device.total_memory
        raise DeviceOutOfMemoryError(
            f"Out of memory on CUDA device {self.device.ordinal} ({self.device.name}) while "
            f"allocating {nbytes} bytes ({format_bytes(nbytes)}; block of {format_bytes(size)}): "
            f"the driver reports {free} bytes ({format_bytes(free)}) free of "
            f"{format_bytes(total)}; ourjax's live arrays hold {self.bytes_in_use} bytes "
            f"({format_bytes(self.bytes_in_use)}) in blocks. Existing arrays are intact; free "
            "some (del) or use smaller batches.", nbytes) from None
    self.num_allocs += 1
    return ptr

  def _drain_locked(self) -> None:
    """The blocks let go of since the last time into their free lists (``popleft`` until the
    queue is empty: a finaliser appending meanwhile is not lost)."""
    q, free = self._returned, self._free
    in_use = requested = 0
    while True:
      try:
        ptr, size, nbytes = q.popleft()
      except IndexError:
        break
      in_use += size
      requested += nbytes
      lst = free.get(size)
      if lst is None:
        free[size] = lst = {}
      lst[ptr] = None
    self.bytes_in_use -= in_use
    self.requested_in_use -= requested
    self.bytes_cached += in_use

  def _empty_cache_locked(self) -> None:
    for r in self.reclaimers:
      r()
    self._drain_locked()
    if not self.bytes_cached:
      return
    self.device.synchronize("freeing cached device memory")
    for size, lst in self._free.items():
      for ptr in lst:
        self.device.mem_free(ptr)
      lst.clear()
    self._free.clear()
    self.bytes_cached = 0

  def empty_cache(self) -> None:
    """Return every cached (unused) block to the driver."""
    with self._lock:
      self._empty_cache_locked()

  def memory_stats(self) -> dict:
    with self._lock:
      self._drain_locked()
      return {
          "bytes_in_use": self.bytes_in_use,
          "bytes_requested_in_use": self.requested_in_use,
          "peak_bytes_in_use": self.peak_bytes_in_use,
          "bytes_cached": self.bytes_cached,
          "bytes_reserved": self.bytes_in_use + self.bytes_cached,
          "num_allocs": self.num_allocs,
          "num_requests": self.num_requests,
          "num_cache_hits": self.num_cache_hits,
          "largest_alloc_size": self.largest_alloc_size,
          "bytes_limit": self.device.total_memory,
      }


def memory_stats(ordinal: int = 0) -> dict:
  """The allocator statistics of CUDA device ``ordinal``."""
  from ourjax.backends.cuda import driver
  return driver.get_device(ordinal).allocator.memory_stats()


def empty_cache(ordinal: int = 0) -> None:
  from ourjax.backends.cuda import driver
  driver.get_device(ordinal).allocator.empty_cache()
