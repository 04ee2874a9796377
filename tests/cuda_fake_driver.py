"""A stand-in for ``cuda.bindings.driver`` that runs the CUDA backend's host side without a GPU.

``FakeDriver`` answers the driver calls ``ourjax/backends/cuda/driver.py`` makes, with the same
calling conventions (a status first in every returned tuple) and the bindings' own struct and
handle types (``CUDA_KERNEL_NODE_PARAMS``, ``CUDA_MEMCPY3D``, ``CUfunction``), so that what the
backend writes into them is checked by the real bindings.  Device memory is a bump allocator;
nothing runs on a device, but every launch is *recorded* as it would execute:

    ("kernel", name, grid, block, shared, parameter values)     # cuLaunchKernel or a graph node
    ("copy", dst, src, nbytes)                                  # cuMemcpyDtoDAsync or a node

in ``executed``, in stream order (events record a fake clock that advances a microsecond per
record); a graph launch appends its nodes' records with the parameters
the executable graph holds at that moment.  Host-to-device copies land in a sparse device
memory (``read_device``): from pageable memory at once (the driver stages them before it
returns), from pinned memory (``cuMemHostAlloc``) only when the stream is synchronised or an
event recorded after the copy is waited for, reading the pinned bytes *then*, as a DMA would;
so a pinned buffer rewritten too early uploads the wrong bytes.  ``device_count`` sets how many
devices there are (each with streams of its own).  Two runs of one scenario, one replaying graphs and
one launching kernel by kernel, must therefore record the same list.  ``calls`` counts every
driver entry point used; ``fail`` names entry points that return an error (to test fallbacks).

    with installed() as fake: ...      # swaps it into ourjax.backends.cuda.driver, restores after
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import gc
import re
from collections import Counter

from cuda.bindings import driver as _real


class CUresult(enum.IntEnum):
  CUDA_SUCCESS = 0
  CUDA_ERROR_INVALID_VALUE = 1
  CUDA_ERROR_OUT_OF_MEMORY = 2
  CUDA_ERROR_NOT_READY = 600
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
  CUDA_ERROR_INVALID_IMAGE = 200


class _Handle:
  """An opaque handle that the real bindings reject (no ``__int__``): a fake handle that leaked
  into the real driver raises TypeError instead of reaching it."""

  def __init__(self, kind, **kw):
    self.kind = kind
    self.__dict__.update(kw)

  def __repr__(self):
    return f"<fake {self.kind}>"


class _Stream(_Handle):
  def __int__(self):
    return 0


def _entries(ptx: str) -> dict:
  """{kernel name: number of parameters} of a PTX module."""
  return {m.group(1): m.group(2).count(".param")
          for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx)}


def _read_params(address: int, n: int) -> tuple:
  """The 64-bit parameter values behind a ``kernelParams`` array of ``n`` pointers."""
  if n == 0:
    return ()
  assert address, "kernel parameters missing"
  ptrs = (ctypes.c_uint64 * n).from_address(address)
  return tuple(ctypes.c_uint64.from_address(p).value for p in ptrs)


class FakeDriver:
  """The driver entry points the backend uses (see the module docstring)."""

  def __init__(self):
    self.executed: list = []
    self.calls = Counter()
    self.fail: set = set()
    self.next_ptr = 1 << 32
    self.cubins: list = []        # (the fake linker's outputs, alive while it is)
    self.functions: dict = {}     # int(CUfunction) -> (name, nparams)
    self._nfunc = 0x1000
    self.clock_ms = 0.0           # the time of the last event recorded (cuEventRecord)
    self.device_count = 1
    self.pinned: dict = {}        # address -> its ctypes buffer (cuMemHostAlloc)
    self.writes: list = []        # (device address, bytes): host-to-device copies, in order
    self.htod: list = []          # (device address, host address, nbytes, pinned?) as enqueued
    self.htod_streams: list = []  # the stream of each of ``htod``
    self.waits: list = []         # (waiting stream, event's stream, its position): StreamWaitEvent
    self.gates_passed = 0         # cuStreamWaitValue32 waits that the host's word let through

  def __getattr__(self, name):
    # enums and structs (CUdevice_attribute, CUDA_KERNEL_NODE_PARAMS, ...) are the real ones
    if name.startswith("cu"):
      raise AttributeError(f"the fake driver has no {name}")
    return getattr(_real, name)

  CUresult = CUresult

  def _ok(self, name, *values):
    self.calls[name] += 1
    if name in self.fail:
      return (CUresult.CUDA_ERROR_INVALID_VALUE,) + (None,) * len(values)
    return (CUresult.CUDA_SUCCESS,) + values

  # -- errors, init, device --------------------------------------------------------------------
  def cuGetErrorName(self, err):
    return CUresult.CUDA_SUCCESS, CUresult(int(err)).name.encode()

  def cuGetErrorString(self, err):
    return CUresult.CUDA_SUCCESS, b"fake driver error"

  def cuInit(self, flags):
    return self._ok("cuInit")

  def cuDeviceGetCount(self):
    return self._ok("cuDeviceGetCount", self.device_count)

  def cuDeviceGet(self, ordinal):
    return self._ok("cuDeviceGet", _Handle("device"))

  def cuDevicePrimaryCtxRetain(self, dev):
    return self._ok("cuDevicePrimaryCtxRetain", _Handle("context"))

  def cuCtxSetCurrent(self, ctx):
    return self._ok("cuCtxSetCurrent")

  def cuDeviceGetName(self, n, dev):
    return self._ok("cuDeviceGetName", b"Fake GPU\0")

  def cuDeviceGetAttribute(self, attr, dev):
    A = _real.CUdevice_attribute
    return self._ok("cuDeviceGetAttribute", {
        A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
        A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
        A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
        A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
        A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
        A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 50 << 20}.get(attr, 0))

  def cuDeviceTotalMem(self, dev):
    return self._ok("cuDeviceTotalMem", 80 << 30)

  def cuStreamCreate(self, flags):
    return self._ok("cuStreamCreate", _Stream("stream"))

  def cuStreamSynchronize(self, stream):
    self._resolve(stream)
    self._flush(stream, None)
    return self._ok("cuStreamSynchronize")

  def cuStreamQuery(self, stream):
    if getattr(stream, "pending", None) or any(
        any(seq < upto for seq, *_ in getattr(src, "pending", ()))
        for src, upto in getattr(stream, "waits", ())):
      self.calls["cuStreamQuery"] += 1
      return (CUresult.CUDA_ERROR_NOT_READY,)
    return self._ok("cuStreamQuery")

  def cuStreamWaitEvent(self, stream, event, flags):
    """Work enqueued on ``stream`` from now on runs after ``event``'s record: the DMAs pending
    on the event's stream before it land before the next launch, copy or synchronisation on
    ``stream`` (``_resolve``)."""
    src = getattr(event, "stream", None)
    self.waits.append((stream, src, getattr(event, "upto", 0)))
    if src is not None and src is not stream:
      stream.waits = getattr(stream, "waits", []) + [(src, event.upto)]
    return self._ok("cuStreamWaitEvent")

  def _resolve(self, stream):
    """The DMAs that ``stream``'s waits (``cuStreamWaitEvent``) are for, landed."""
    waits = getattr(stream, "waits", None)
    if waits:
      stream.waits = []
      for src, upto in waits:
        self._resolve(src)
        self._flush(src, upto)

  def _flush(self, stream, upto):
    """Run the stream's pending DMAs (those enqueued before position ``upto``; None: all).
    A gate (``cuStreamWaitValue32``) among them is waited for, as the device would, until
    the host word holds its value: a gate not opened within ``gate_timeout_s`` would stall
    the stream for ever, and raises AssertionError."""
    pend = getattr(stream, "pending", None)
    if not pend:
      return
    keep = []
    for seq, dst, src, n, data in pend:
      if upto is None or seq < upto:
        if dst is None:
          self._wait_gate(src, n)
          continue
        self.writes.append((dst, ctypes.string_at(src, n) if data is None else data))
      else:
        keep.append((seq, dst, src, n, data))
    stream.pending = keep

  gate_timeout_s = 10.0

  def _wait_gate(self, addr, value):
    import time
    t0 = time.monotonic()
    while ctypes.c_uint32.from_address(addr).value != value:
      assert time.monotonic() - t0 < self.gate_timeout_s, \
          f"a stream waits for ever for the host word at {addr:#x} to be {value}"
      time.sleep(1e-4)                  # (lets the host threads that open gates run)
    self.gates_passed += 1

  def cuStreamWaitValue32(self, stream, addr, value, flags):
    """A gate on ``stream``: what is enqueued after it runs once the 32-bit host word at
    ``addr`` equals ``value`` (flags: CU_STREAM_WAIT_VALUE_EQ only)."""
    res = self._ok("cuStreamWaitValue32")
    if int(res[0]) != 0:
      return res
    assert int(flags) == int(_real.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ), flags
    addr = int(addr)
    assert self._is_pinned(addr, 4), "a gate on a word that is not mapped host memory"
    self._resolve(stream)
    stream.seq = getattr(stream, "seq", 0) + 1
    stream.pending = getattr(stream, "pending", []) + [(stream.seq, None, addr, int(value), None)]
    return res

  def cuMemHostGetDevicePointer(self, p, flags):
    return self._ok("cuMemHostGetDevicePointer", int(p))   # (unified addressing)

  def read_device(self, ptr: int, n: int) -> bytes:
    """The ``n`` bytes at device address ``ptr`` as the completed copies left them (zeros
    where none wrote)."""
    out = bytearray(n)
    for dst, data in self.writes:
      lo, hi = max(dst, ptr), min(dst + len(data), ptr + n)
      if lo < hi:
        out[lo - ptr:hi - ptr] = data[lo - dst:hi - dst]
    return bytes(out)

  def _is_pinned(self, src: int, n: int) -> bool:
    return any(p <= src and src + n <= p + len(b) for p, b in self.pinned.items())

  # -- memory ----------------------------------------------------------------------------------
  def cuMemGetInfo(self):
    return self._ok("cuMemGetInfo", 40 << 30, 80 << 30)

  def cuMemAlloc(self, n):
    p = self.next_ptr
    self.next_ptr += -(-int(n) // 256) * 256
    return self._ok("cuMemAlloc", p)

  def cuMemFree(self, p):
    return self._ok("cuMemFree")

  def cuMemcpyHtoDAsync(self, dst, src, n, stream):
    dst, src, n = int(dst), int(src), int(n)
    res = self._ok("cuMemcpyHtoDAsync")
    if int(res[0]) != 0:
      return res
    pinned = self._is_pinned(src, n)
    self._resolve(stream)
    self.htod.append((dst, src, n, pinned))
    self.htod_streams.append(stream)
    # a DMA from pinned memory reads it when the stream gets to it; pageable memory is staged
    # by the driver before it returns (and written in stream order)
    data = None if pinned else ctypes.string_at(src, n)
    if pinned or getattr(stream, "pending", None):
      stream.seq = getattr(stream, "seq", 0) + 1
      stream.pending = getattr(stream, "pending", []) + [(stream.seq, dst, src, n, data)]
    else:
      self.writes.append((dst, data))
    return res

  def cuMemHostAlloc(self, n, flags):
    buf = ctypes.create_string_buffer(int(n))
    self.pinned[ctypes.addressof(buf)] = buf
    return self._ok("cuMemHostAlloc", ctypes.addressof(buf))

  def cuMemFreeHost(self, p):
    self.pinned.pop(int(p), None)
    return self._ok("cuMemFreeHost")

  def cuMemcpyDtoHAsync(self, dst, src, n, stream):
    # reads the device memory as the copies ordered before it on ``stream`` left it
    self._resolve(stream)
    self._flush(stream, None)
    ctypes.memmove(dst, self.read_device(int(src), int(n)), n)
    return self._ok("cuMemcpyDtoHAsync")

  def cuMemcpyDtoDAsync(self, dst, src, n, stream):
    self._resolve(stream)
    self.executed.append(("copy", int(dst), int(src), int(n)))
    return self._ok("cuMemcpyDtoDAsync")

  def cuMemsetD8Async(self, dst, value, n, stream):
    return self._ok("cuMemsetD8Async")

  # -- modules, kernels ------------------------------------------------------------------------
  def cuModuleLoadDataEx(self, image, nopts, opts, vals):
    ptx = bytes(image).rstrip(b"\0").decode()
    return self._ok("cuModuleLoadDataEx", _Handle("module", entries=_entries(ptx)))

  # the linker: a "cubin" is the PTX behind a marker, kept alive for ctypes.string_at
  def cuLinkCreate(self, nopts, opts, vals):
    return self._ok("cuLinkCreate", _Handle("link", ptx=None, out=None))

  def cuLinkAddData(self, state, kind, data, size, name, nopts, opts, vals):
    assert kind == _real.CUjitInputType.CU_JIT_INPUT_PTX and len(data) == size
    state.ptx = bytes(data).rstrip(b"\0")
    return self._ok("cuLinkAddData")

  def cuLinkComplete(self, state):
    import ctypes
    state.out = ctypes.create_string_buffer(b"FAKECUBIN\n" + state.ptx, len(state.ptx) + 10)
    self.cubins.append(state.out)
    return self._ok("cuLinkComplete", ctypes.addressof(state.out), len(state.ptx) + 10)

  def cuLinkDestroy(self, state):
    return self._ok("cuLinkDestroy")

  def cuModuleLoadData(self, image):
    image = bytes(image)
    if not image.startswith(b"FAKECUBIN\n"):
      self.calls["cuModuleLoadData"] += 1
      return (CUresult.CUDA_ERROR_INVALID_IMAGE, None)
    return self._ok("cuModuleLoadData",
                    _Handle("module", entries=_entries(image[10:].decode())))

  def cuDriverGetVersion(self):
    return self._ok("cuDriverGetVersion", 1)   # (no real driver's: cache keys of its own)

  def cuModuleGetFunction(self, module, name):
    name = name.decode()
    assert name in module.entries, name
    self._nfunc += 1
    self.functions[self._nfunc] = (name, module.entries[name])
    return self._ok("cuModuleGetFunction", _real.CUfunction(self._nfunc))

  def cuModuleUnload(self, module):
    return self._ok("cuModuleUnload")

  def cuFuncSetAttribute(self, f, attr, value):
    return self._ok("cuFuncSetAttribute")

  def cuFuncGetAttribute(self, attr, f):
    return self._ok("cuFuncGetAttribute", 0)

  def _kernel_record(self, f, grid, block, shared, params):
    name, n = self.functions[int(f)]
    return ("kernel", name, tuple(int(g) for g in grid), tuple(int(b) for b in block),
            int(shared), _read_params(int(params or 0), n))

  def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    assert isinstance(stream, _Stream) and extra == 0
    self._resolve(stream)
    rec = self._kernel_record(f, (gx, gy, gz), (bx, by, bz), shared, params)
    res = self._ok("cuLaunchKernel")
    if int(res[0]) == 0:
      self.executed.append(rec)
    return res

  # -- events ----------------------------------------------------------------------------------
  def cuEventCreate(self, flags):
    return self._ok("cuEventCreate", _Handle("event"))

  def _dead(self, name, event):
    """The error a real driver gives for an event that was destroyed (its memory reused)."""
    self.calls[name] += 1
    return (CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,)

  def cuEventRecord(self, event, stream):
    if getattr(event, "destroyed", False):
      return self._dead("cuEventRecord", event)
    # a fake device clock: every record is one microsecond after the one before it, so that
    # elapsed times are positive and in stream order
    self.clock_ms += 0.001
    event.ms = self.clock_ms
    event.stream, event.upto = stream, getattr(stream, "seq", 0) + 1
    return self._ok("cuEventRecord")

  def cuEventQuery(self, event):
    stream = getattr(event, "stream", None)
    if stream is not None and any(seq < event.upto for seq, *_ in getattr(stream, "pending", ())):
      self.calls["cuEventQuery"] += 1
      return (CUresult.CUDA_ERROR_NOT_READY,)
    return self._ok("cuEventQuery")

  def cuEventSynchronize(self, event):
    stream = getattr(event, "stream", None)
    if stream is not None:
      self._resolve(stream)
      self._flush(stream, event.upto)
    return self._ok("cuEventSynchronize")

  def cuEventElapsedTime(self, a, b):
    return self._ok("cuEventElapsedTime", getattr(b, "ms", 0.001) - getattr(a, "ms", 0.0))

  def cuEventDestroy(self, event):
    if getattr(event, "destroyed", False):
      return self._dead("cuEventDestroy", event)
    event.destroyed = True
    return self._ok("cuEventDestroy")

  # -- graphs ----------------------------------------------------------------------------------
  def cuGraphCreate(self, flags):
    return self._ok("cuGraphCreate", _Handle("graph", nodes=[]))

  def _add_node(self, name, graph, deps, ndeps, rec):
    deps = list(deps or [])
    assert len(deps) == ndeps and all(d in graph.nodes for d in deps), (deps, ndeps)
    res = self._ok(name, _Handle("node", graph=graph, deps=deps, rec=rec))
    if int(res[0]) == 0:
      graph.nodes.append(res[1])
    return res

  def cuGraphAddDependencies(self, graph, frm, to, edges, n):
    assert len(frm) == len(to) == len(edges) == n
    for a, b, e in zip(frm, to, edges):
      assert a in graph.nodes and b in graph.nodes and a not in b.deps, (a, b)
      b.deps.append(a)
      b.edge_types = getattr(b, "edge_types", []) + [(int(e.type), int(e.from_port))]
    return self._ok("cuGraphAddDependencies")

  def _kernel_node_record(self, p):
    assert int(p.extra or 0) == 0
    return self._kernel_record(p.func, (p.gridDimX, p.gridDimY, p.gridDimZ),
                               (p.blockDimX, p.blockDimY, p.blockDimZ), p.sharedMemBytes,
                               p.kernelParams)

  def cuGraphAddKernelNode(self, graph, deps, ndeps, p):
    return self._add_node("cuGraphAddKernelNode", graph, deps, ndeps,
                          self._kernel_node_record(p))

  def _copy_record(self, p):
    dev = _real.CUmemorytype.CU_MEMORYTYPE_DEVICE
    assert p.srcMemoryType == dev and p.dstMemoryType == dev
    assert p.Height == 1 and p.Depth == 1 and p.srcPitch >= p.WidthInBytes
    return ("copy", int(p.dstDevice), int(p.srcDevice), int(p.WidthInBytes))

  def cuGraphAddMemcpyNode(self, graph, deps, ndeps, p, ctx):
    return self._add_node("cuGraphAddMemcpyNode", graph, deps, ndeps, self._copy_record(p))

  def cuGraphInstantiate(self, graph, flags):
    order, seen = [], set()

    def visit(n):                      # nodes in dependency order
      if id(n) in seen:
        return
      seen.add(id(n))
      for d in n.deps:
        visit(d)
      order.append(n)
    for n in graph.nodes:
      visit(n)
    return self._ok("cuGraphInstantiate",
                    _Handle("exec", graph=graph, order=order, recs={id(n): n.rec for n in order},
                            alive=True))

  def cuGraphUpload(self, exe, stream):
    return self._ok("cuGraphUpload")

  def cuGraphExecKernelNodeSetParams(self, exe, node, p):
    rec = self._kernel_node_record(p)
    assert exe.alive and exe.recs[id(node)][1] == rec[1], "a node's kernel changed"
    res = self._ok("cuGraphExecKernelNodeSetParams")
    if int(res[0]) == 0:
      exe.recs[id(node)] = rec
    return res

  def cuGraphExecMemcpyNodeSetParams(self, exe, node, p, ctx):
    rec = self._copy_record(p)
    assert exe.alive and exe.recs[id(node)][3] == rec[3], "a copy's size changed"
    res = self._ok("cuGraphExecMemcpyNodeSetParams")
    if int(res[0]) == 0:
      exe.recs[id(node)] = rec
    return res

  def cuGraphLaunch(self, exe, stream):
    assert exe.alive and isinstance(stream, _Stream)
    self._resolve(stream)
    res = self._ok("cuGraphLaunch")
    if int(res[0]) == 0:
      self.executed.extend(exe.recs[id(n)] for n in exe.order)
    return res

  def cuGraphExecDestroy(self, exe):
    exe.alive = False
    return self._ok("cuGraphExecDestroy")

  def cuGraphDestroy(self, graph):
    return self._ok("cuGraphDestroy")


@contextlib.contextmanager
def installed():
  """``FakeDriver`` as ``ourjax.backends.cuda.driver``'s bindings (a fresh device 0, graphs and
  module caches of earlier executables not reused); the previous state is restored after, once
  every object made with the fake is gone."""
  from ourjax import backends
  from ourjax.backends.cuda import driver
  saved = (driver._drv, driver._avail, driver._avail_reason, dict(driver._devices),
           list(backends._GPUS))
  fake = FakeDriver()
  driver._drv, driver._avail, driver._avail_reason = fake, True, ""
  driver._devices.clear()
  backends._GPUS.clear()               # ourjax.devices("cuda") lists the fake's, not a real GPU
  driver._tls.current = None
  try:
    yield fake
  finally:
    driver._devices.clear()
    from ourjax import _eager_device
    _eager_device.clear_cache()          # (its per-value scalars on the fake's devices)
    gc.collect()
    driver._drv, driver._avail, driver._avail_reason = saved[:3]
    driver._devices.update(saved[3])
    backends._GPUS[:] = saved[4]       # (the fake's devices must not outlive it)
    driver._tls.current = None
