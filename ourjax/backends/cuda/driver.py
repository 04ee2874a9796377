"""The CUDA driver, through ``cuda.bindings.driver``: one primary context and one stream per
device, modules from PTX, kernel launches, copies, events, and graphs (``Graph``: a chain of
kernel and copy nodes, instantiated as ``GraphExec``s that are replayed with one
``cuGraphLaunch`` and whose nodes' parameters can be changed between replays).

Every driver call goes through ``_check``, which turns a failing status into an
``ourjax.errors.DeviceError`` naming the call, what it was doing and the driver's own name and
description of the error.  Nothing here is imported until a GPU is asked for: ``available()``
is the cheap probe (import the bindings, ``cuInit``, count devices) and never raises.

Work is ordered on one main stream per device (``Device.stream``): kernels, uploads and
downloads are enqueued there, so buffers that are freed and reused need no further
synchronisation (the caching allocator in ``memory.py`` relies on this).  The exception: the
DMAs of large staged uploads run on a second stream (``Device.copy_stream``, ``staging.py``),
so that they overlap the kernels already enqueued; the main stream waits for an event behind
them (``wait_event``) before anything that follows.  Asynchronous errors of a kernel surface at
the next synchronisation and are reported there, naming the last kernels launched.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections import deque

import numpy as np

from ourjax.errors import DeviceError

log = logging.getLogger("ourjax")

__all__ = ["available", "device_count", "get_device", "Device", "Module", "Function", "Event",
           "Graph", "GraphExec", "DeviceError"]

_drv = None            # the cuda.bindings.driver module, once imported
_avail: bool | None = None
_avail_reason = ""
_lock = threading.RLock()
_devices: dict = {}
_tls = threading.local()


def _driver():
  global _drv
  if _drv is None:
    from cuda.bindings import driver as d   # noqa: PLC0415 (imported only when a GPU is used)
    _drv = d
  return _drv


def _error_text(err) -> str:
  d = _driver()
  try:
    _, name = d.cuGetErrorName(err)
    _, desc = d.cuGetErrorString(err)
    name = name.decode() if isinstance(name, bytes) else str(name)
    desc = desc.decode() if isinstance(desc, bytes) else str(desc)
    return f"{name}: {desc}"
  except Exception:   # pragma: no cover - the error-string calls themselves failed
    return str(err)


def _check(result, what: str):
  """``result`` is the tuple a binding returns (status first); raise ``DeviceError`` naming
  ``what`` unless the status is success; return the remaining values (one value unwrapped)."""
  err = result[0]
  if int(err) != 0:
    name = getattr(err, "name", str(err))
    if name == "CUDA_ERROR_OUT_OF_MEMORY":
      from ourjax.errors import DeviceOutOfMemoryError
      raise DeviceOutOfMemoryError(f"CUDA {what} failed: {_error_text(err)}")
    raise DeviceError(f"CUDA {what} failed: {_error_text(err)}")
  rest = result[1:]
  if not rest:
    return None
  return rest[0] if len(rest) == 1 else rest


def _probe_libcuda() -> None:
  """Raise OSError when the CUDA driver library cannot be loaded: a machine without it learns
  so in a millisecond instead of importing the bindings (a tenth of a second of a CPU-only
  program's first jit call)."""
  import sys
  ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")


def available() -> bool:
  """Whether a CUDA GPU can be used: the bindings import, the driver initialises and reports at
  least one device.  Cached; never raises."""
  global _avail, _avail_reason
  if _avail is not None:
    return _avail
  with _lock:
    if _avail is not None:
      return _avail
    try:
      if _drv is None:
        _probe_libcuda()
      d = _driver()
      _check(d.cuInit(0), "cuInit")
      n = _check(d.cuDeviceGetCount(), "cuDeviceGetCount")
      _avail = int(n) > 0
      _avail_reason = "" if _avail else "the driver reports no CUDA device"
    except Exception as e:   # no bindings, no libcuda, no device, driver too old...
      _avail = False
      _avail_reason = f"{type(e).__name__}: {e}"
    if not _avail:
      log.debug("ourjax: no CUDA GPU (%s)", _avail_reason)
    return _avail


def unavailable_reason() -> str:
  available()
  return _avail_reason


def device_count() -> int:
  if not available():
    return 0
  return int(_check(_driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def get_device(ordinal: int = 0) -> "Device":
  """The ``Device`` of ``ordinal`` (its primary context retained and made current on first
  use)."""
  dev = _devices.get(ordinal)
  if dev is None:
    with _lock:
      dev = _devices.get(ordinal)
      if dev is None:
        if not available():
          raise DeviceError(f"no CUDA device is available ({_avail_reason})")
        dev = Device(ordinal)
        _devices[ordinal] = dev
  dev.make_current()
  return dev


class Device:
  """One GPU: its primary context, a non-blocking stream for all of ourjax's work, its
  properties, and the caching allocator (``memory.DeviceAllocator``)."""

  def __init__(self, ordinal: int):
    d = _driver()
    n = device_count()
    if not 0 <= ordinal < n:
      raise DeviceError(f"CUDA device {ordinal} does not exist ({n} device(s) present)")
    self.ordinal = ordinal
    self.handle = _check(d.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
    self.context = _check(d.cuDevicePrimaryCtxRetain(self.handle),
                          f"cuDevicePrimaryCtxRetain(device {ordinal})")
    _check(d.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
    _tls.current = self.ordinal
    name = _check(d.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
    self.name = (name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name))
    A = d.CUdevice_attribute
    attr = lambda a: int(_check(d.cuDeviceGetAttribute(a, self.handle),  # noqa: E731
                                f"cuDeviceGetAttribute({a.name})"))
    self.compute_capability = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                               attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    self.multiprocessor_count = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    self.max_threads_per_block = attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    self.max_shared_per_block_optin = attr(
        A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    self.l2_bytes = attr(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
    self.total_memory = int(_check(d.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem"))
    flags = int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
    self.stream = _check(d.cuStreamCreate(flags), "cuStreamCreate")
    self.stream_handle = int(self.stream)
    self._copy_stream = None
    self.recent_kernels = deque(maxlen=4)     # names, for messages about asynchronous errors
    from ourjax.backends.cuda.memory import DeviceAllocator
    self.allocator = DeviceAllocator(self)

  def __repr__(self):
    return f"<cuda Device {self.ordinal}: {self.name} sm_{self.arch}>"

  @property
  def arch(self) -> str:
    return f"{self.compute_capability[0]}{self.compute_capability[1]}"

  @property
  def copy_stream(self):
    """A second non-blocking stream, for staged host -> device DMAs (``staging.py``): they run
    while the main stream's kernels do; whatever reads their results waits on an event
    recorded behind them (``wait_event``).  Created on first use."""
    s = self._copy_stream
    if s is None:
      with _lock:
        if self._copy_stream is None:
          self.make_current()
          flags = int(_driver().CUstream_flags.CU_STREAM_NON_BLOCKING)
          self._copy_stream = _check(_driver().cuStreamCreate(flags), "cuStreamCreate (copies)")
        s = self._copy_stream
    return s

  def wait_event(self, event: "Event", stream=None) -> None:
    """Make work enqueued later on ``stream`` (default: the main stream) wait, on the device,
    for ``event``'s most recent record (``cuStreamWaitEvent``; the host does not wait)."""
    self.make_current()
    _check(_driver().cuStreamWaitEvent(self.stream if stream is None else stream,
                                       event.handle, 0), "cuStreamWaitEvent")

  def busy(self) -> bool:
    """Whether work enqueued on the main stream has not finished (``cuStreamQuery``)."""
    self.make_current()
    res = _driver().cuStreamQuery(self.stream)
    if int(res[0]) == 0:
      return False
    if getattr(res[0], "name", "") == "CUDA_ERROR_NOT_READY":
      return True
    _check(res, "cuStreamQuery")
    return True

  def make_current(self) -> None:
    """Make this device's context current on the calling thread (contexts are per thread)."""
    if getattr(_tls, "current", None) != self.ordinal:
      _check(_driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
      _tls.current = self.ordinal

  # -- synchronisation -------------------------------------------------------------------------
  def _async_error(self, e: DeviceError, what: str):
    kernels = ", ".join(self.recent_kernels) or "none"
    return DeviceError(f"{e} (while waiting for {what}; the error may come from earlier "
                       f"asynchronous work on the stream: last kernels launched: {kernels})")

  def synchronize(self, what: str = "the device stream", stream=None) -> None:
    """Wait for the work enqueued so far on ``stream`` (default: the main stream)."""
    self.make_current()
    try:
      _check(_driver().cuStreamSynchronize(self.stream if stream is None else stream),
             "cuStreamSynchronize")
    except DeviceError as e:
      raise self._async_error(e, what) from None

  def memory_info(self) -> tuple[int, int]:
    """(free, total) bytes of device memory as the driver reports them."""
    self.make_current()
    free, total = _check(_driver().cuMemGetInfo(), "cuMemGetInfo")
    return int(free), int(total)

  # -- raw memory ------------------------------------------------------------------------------
  def mem_alloc(self, nbytes: int) -> int:
    self.make_current()
    return int(_check(_driver().cuMemAlloc(int(nbytes)), f"cuMemAlloc({nbytes} bytes)"))

  def mem_free(self, ptr: int) -> None:
    self.make_current()
    _check(_driver().cuMemFree(int(ptr)), "cuMemFree")

  def copy_to_device(self, dst: int, host: np.ndarray) -> None:
    """Enqueue host -> device (``host`` must be C-contiguous).  ``host`` may be changed or
    released once this returns: a large array is copied into pinned staging memory before
    the call returns (``staging.py``: several threads, its DMAs enqueued as its chunks fill),
    a small one is staged by the driver itself (a pageable copy, staged before the call
    returns)."""
    n = host.nbytes
    if n == 0:
      return
    from ourjax.backends.cuda import staging
    if staging.worth_staging(self, n):
      staging.upload([(self, int(dst), host)])
      return
    self.copy_pageable(dst, host)

  def copy_pageable(self, dst: int, host: np.ndarray) -> None:
    """Enqueue host -> device from pageable memory: the driver copies ``host`` into buffers of
    its own on the calling thread before it returns (about 16 GB/s on an H200's host)."""
    n = host.nbytes
    if n == 0:
      return
    self.make_current()
    _check(_driver().cuMemcpyHtoDAsync(int(dst), host.ctypes.data, n, self.stream),
           f"cuMemcpyHtoDAsync({n} bytes)")

  def copy_from_pinned(self, dst: int, src: int, nbytes: int, stream=None) -> None:
    """Enqueue host -> device from page-locked memory at ``src`` (``host_alloc``) on
    ``stream`` (default: the main stream): the copy is a DMA that reads ``src`` later, while
    the stream runs; ``src`` must not be written until an event recorded after it has
    completed."""
    self.make_current()
    _check(_driver().cuMemcpyHtoDAsync(int(dst), int(src), int(nbytes),
                                       self.stream if stream is None else stream),
           f"cuMemcpyHtoDAsync({nbytes} bytes from pinned memory)")

  def host_alloc(self, nbytes: int, mapped: bool = False) -> int:
    """``nbytes`` of page-locked host memory (``cuMemHostAlloc``, portable to every context);
    its address.  ``mapped``: also mapped into the device's address space (see
    ``host_device_pointer``).  Free it with ``host_free``."""
    self.make_current()
    flags = 1 | (2 if mapped else 0)     # CU_MEMHOSTALLOC_PORTABLE (| _DEVICEMAP)
    return int(_check(_driver().cuMemHostAlloc(int(nbytes), flags),
                      f"cuMemHostAlloc({nbytes} bytes)"))

  def host_device_pointer(self, ptr: int) -> int:
    """The device's address of mapped page-locked host memory at ``ptr`` (``host_alloc(...,
    mapped=True)``)."""
    self.make_current()
    return int(_check(_driver().cuMemHostGetDevicePointer(int(ptr), 0),
                      "cuMemHostGetDevicePointer"))

  def wait_host_value(self, addr: int, value: int, stream) -> None:
    """Make work enqueued later on ``stream`` wait, on the device, until the 32-bit word at
    device address ``addr`` (mapped host memory: ``host_device_pointer``) equals ``value``
    (``cuStreamWaitValue32``; the host does not wait).  The host must write that value
    eventually, whatever happens: until then the stream and all that waits on it stall."""
    d = _driver()
    self.make_current()
    _check(d.cuStreamWaitValue32(stream, int(addr), int(value),
                                 int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ)),
           "cuStreamWaitValue32")

  def host_free(self, ptr: int) -> None:
    self.make_current()
    _check(_driver().cuMemFreeHost(int(ptr)), "cuMemFreeHost")

  def copy_to_host(self, host: np.ndarray, src: int) -> None:
    """Device -> host into ``host`` (C-contiguous), waiting for it (and all earlier work)."""
    n = host.nbytes
    self.make_current()
    if n:
      _check(_driver().cuMemcpyDtoHAsync(host.ctypes.data, int(src), n, self.stream),
             f"cuMemcpyDtoHAsync({n} bytes)")
    self.synchronize("a device-to-host copy")

  def copy_device(self, dst: int, src: int, nbytes: int) -> None:
    if nbytes == 0:
      return
    self.make_current()
    _check(_driver().cuMemcpyDtoDAsync(int(dst), int(src), int(nbytes), self.stream),
           f"cuMemcpyDtoDAsync({nbytes} bytes)")

  def memset8(self, dst: int, value: int, nbytes: int) -> None:
    if nbytes == 0:
      return
    self.make_current()
    _check(_driver().cuMemsetD8Async(int(dst), int(value) & 0xFF, int(nbytes), self.stream),
           f"cuMemsetD8Async({nbytes} bytes)")

  # -- modules ---------------------------------------------------------------------------------
  def load_module(self, image, name: str = "module") -> "Module":
    """A ``Module`` from PTX text (compiled by the driver's JIT as it loads) or a cubin
    (``bytes``, from ``link_ptx``)."""
    return Module(self, image, name)

  def link_ptx(self, ptx: str, name: str = "module") -> bytes:
    """The cubin of ``ptx`` for this device, from the driver's JIT linker (``cuLink*``).
    Unlike loading PTX, which the driver compiles one module at a time however many threads
    load, linking runs on the calling thread: several modules compile at once from several
    threads.  Raises ``DeviceError`` with the linker's log."""
    d = _driver()
    self.make_current()
    size = 1 << 16
    log_buf = bytearray(size)
    opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
            d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    state = _check(d.cuLinkCreate(len(opts), opts, [log_buf, size]),
                   f"cuLinkCreate (module {name!r})")
    try:
      data = ptx.encode() + b"\0"
      res = d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data),
                            name.encode(), 0, [], [])
      if int(res[0]) == 0:
        res = d.cuLinkComplete(state)
      if int(res[0]) != 0:
        jit_log = bytes(log_buf).split(b"\0", 1)[0].decode(errors="replace").strip()
        raise DeviceError(f"CUDA linking module {name!r} failed: {_error_text(res[0])}\n"
                          f"JIT log:\n{jit_log or '(empty)'}")
      _, ptr, nbytes = res
      return ctypes.string_at(int(ptr), int(nbytes))
    finally:
      d.cuLinkDestroy(state)

  @property
  def driver_version(self) -> int:
    return int(_check(_driver().cuDriverGetVersion(), "cuDriverGetVersion"))

  def new_graph(self, keep=None) -> "Graph":
    """An empty ``Graph`` for work on this device's stream (``keep``: what must outlive it)."""
    return Graph(self, keep)


class Module:
  """A loaded module, from PTX text or a cubin (``bytes``).  Loading failures raise
  ``DeviceError`` with the JIT's error log."""

  def __init__(self, device: Device, ptx, name: str = "module"):
    d = _driver()
    device.make_current()
    self.device, self.name = device, name
    if isinstance(ptx, bytes):
      self.handle = _check(d.cuModuleLoadData(ptx), f"cuModuleLoadData (cubin of {name!r})")
      self._functions: dict = {}
      return
    image = ptx.encode() + b"\0"
    size = 1 << 16
    log_buf = bytearray(size)
    opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
            d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    try:
      res = d.cuModuleLoadDataEx(image, len(opts), opts, [log_buf, size])
    except TypeError:   # bindings that do not take a bytearray log buffer: load without it
      log_buf = None
      res = d.cuModuleLoadDataEx(image, 0, [], [])
    if int(res[0]) != 0:
      jit_log = ""
      if log_buf is not None:
        jit_log = bytes(log_buf).split(b"\0", 1)[0].decode(errors="replace").strip()
      if not jit_log:
        jit_log = _ptxas_log(ptx, device.arch)
      raise DeviceError(f"CUDA cuModuleLoadDataEx of module {name!r} failed: "
                        f"{_error_text(res[0])}\nJIT log:\n{jit_log or '(empty)'}")
    self.handle = res[1]
    self._functions: dict = {}

  def function(self, name: str) -> "Function":
    f = self._functions.get(name)
    if f is None:
      h = _check(_driver().cuModuleGetFunction(self.handle, name.encode()),
                 f"cuModuleGetFunction({name!r}) in module {self.name!r}")
      f = self._functions[name] = Function(self, h, name)
    return f

  def __del__(self):
    try:
      if _drv is not None and getattr(self, "handle", None) is not None:
        self.device.make_current()
        _drv.cuModuleUnload(self.handle)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


def _ptxas_log(ptx: str, arch: str) -> str:
  """The error output of ``ptxas`` on ``ptx`` when the JIT gave no log and ptxas is installed."""
  import shutil
  import subprocess
  import tempfile
  exe = shutil.which("ptxas")
  if exe is None:
    return ""
  with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
    f.write(ptx)
    path = f.name
  try:
    r = subprocess.run([exe, f"-arch=sm_{arch}", path, "-o", "/dev/null"], capture_output=True,
                       text=True, timeout=120)
    return (r.stderr or r.stdout).strip()
  except Exception as e:   # pragma: no cover
    return f"(ptxas could not run: {e})"
  finally:
    import os
    os.unlink(path)


class Function:
  """A kernel of a loaded module."""

  def __init__(self, module: Module, handle, name: str):
    self.module, self.handle, self.name = module, handle, name
    self.device = module.device

  def set_max_dynamic_shared(self, nbytes: int) -> None:
    d = _driver()
    attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    _check(d.cuFuncSetAttribute(self.handle, attr, int(nbytes)),
           f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) of {self.name}")

  def attribute(self, name: str) -> int:
    d = _driver()
    attr = getattr(d.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + name)
    return int(_check(d.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({name})"))

  def launch(self, grid, block, params_address: int, shared: int = 0) -> None:
    """Enqueue on the device stream.  ``params_address`` is the address of an array of
    pointers, one per kernel parameter, each to the parameter's value."""
    dev = self.device
    res = _driver().cuLaunchKernel(self.handle, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], shared, dev.stream, params_address, 0)
    if int(res[0]) != 0:
      raise DeviceError(f"CUDA cuLaunchKernel of {self.name} (grid {tuple(grid)}, block "
                        f"{tuple(block)}, {shared} bytes shared) failed: {_error_text(res[0])}")
    dev.recent_kernels.append(self.name)


class Event:
  """A CUDA event on a device's stream (``timing=True`` for ``elapsed_ms``)."""

  def __init__(self, device: Device, timing: bool = False):
    d = _driver()
    device.make_current()
    flags = int(d.CUevent_flags.CU_EVENT_DEFAULT if timing else
                d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    self.device = device
    self.handle = _check(d.cuEventCreate(flags), "cuEventCreate")

  def record(self, stream=None) -> "Event":
    """Record the event on ``stream`` (default: its device's main stream)."""
    _check(_driver().cuEventRecord(self.handle, self.device.stream if stream is None
                                   else stream), "cuEventRecord")
    return self

  def query(self) -> bool:
    res = _driver().cuEventQuery(self.handle)
    name = getattr(res[0], "name", "")
    if int(res[0]) == 0:
      return True
    if name == "CUDA_ERROR_NOT_READY":
      return False
    _check(res, "cuEventQuery")
    return False

  def synchronize(self, what: str = "an event") -> None:
    self.device.make_current()
    try:
      _check(_driver().cuEventSynchronize(self.handle), "cuEventSynchronize")
    except DeviceError as e:
      raise self.device._async_error(e, what) from None

  def elapsed_ms(self, later: "Event") -> float:
    return float(_check(_driver().cuEventElapsedTime(self.handle, later.handle),
                        "cuEventElapsedTime"))

  @property
  def alive(self) -> bool:
    """False once the event is destroyed: an event can be finalized and still be reachable
    (the garbage collector runs the finalizers of a whole cycle, e.g. an array, its
    ``_Ready`` and this event, before it finds that ``_Ready``'s finalizer put the event back
    in its pool)."""
    return self.handle is not None

  def __del__(self):
    try:
      h = getattr(self, "handle", None)
      self.handle = None
      if _drv is not None and h is not None:
        _drv.cuEventDestroy(h)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


class Graph:
  """A CUDA graph built node by node from kernel launches and device-to-device copies, each node
  depending on the one before it (the stream order of the launches it stands for), and
  conditional nodes (``add_conditional``; their bodies are filled inside ``with g.body(b):``).

      g = Graph(device, keep=module)          # ``keep``: what must outlive the graph
      i = g.add_kernel(function, grid, block, shared, params_address)
      j = g.add_copy(dst, src, nbytes)
      exe = g.instantiate()                   # a GraphExec; more than one may be made
      exe.launch()                            # on the device's stream

  A kernel node's ``CUDA_KERNEL_NODE_PARAMS`` is kept, pointing at the caller's parameter block
  (``params_address``, laid out as for ``Function.launch``): ``GraphExec.set_kernel(i)`` hands
  the driver the values found there *now* (it copies them), so the caller refills its block
  and calls it for the nodes whose pointers changed."""

  def __init__(self, device: Device, keep=None):
    d = _driver()
    device.make_current()
    self.device, self._keep = device, keep
    self.handle = _check(d.cuGraphCreate(0), "cuGraphCreate")
    self.nodes: list = []         # node handles, in order
    self.params: list = []        # per node: its CUDA_KERNEL_NODE_PARAMS or CUDA_MEMCPY3D
    self.names: list = []         # per node: kernel name, "copy" or "conditional"
    self._programmatic = programmatic_launch(device)   # (kernel -> kernel edges)
    # where the next node goes: [graph handle, the node it follows (None: none), its name];
    # ``body`` moves it into a conditional node's body graph
    self._cursor = [self.handle, None, None]

  def _add(self, node, params, name) -> int:
    self.nodes.append(node)
    self.params.append(params)
    self.names.append(name)
    self._cursor[1:] = [node, name]
    return len(self.nodes) - 1

  def _deps(self):
    return [] if self._cursor[1] is None else [self._cursor[1]]

  def conditional_handle(self):
    """A new conditional handle of this graph (set by kernels calling
    ``cudaGraphSetConditional``; ``conditional.py``), for conditional nodes in it or in its
    bodies.  Its value is whatever a kernel last set: every use sets it first."""
    d = _driver()
    return _check(d.cuGraphConditionalHandleCreate(self.handle, self.device.context, 0, 0),
                  "cuGraphConditionalHandleCreate")

  def add_conditional(self, kind: str, handle, size: int = 1) -> list:
    """Append a conditional node (``kind``: "while", "if" or "switch" with ``size`` bodies)
    on ``handle``; returns its body graphs, to fill inside ``with graph.body(b):``."""
    d = _driver()
    T = d.CUgraphConditionalNodeType
    p = d.CUgraphNodeParams()
    p.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    p.conditional.handle = handle
    p.conditional.type = {"while": T.CU_GRAPH_COND_TYPE_WHILE, "if": T.CU_GRAPH_COND_TYPE_IF,
                          "switch": T.CU_GRAPH_COND_TYPE_SWITCH}[kind]
    p.conditional.size = int(size)
    p.conditional.ctx = self.device.context
    deps = self._deps()
    node = _check(d.cuGraphAddNode(self._cursor[0], deps, None, len(deps), p),
                  f"cuGraphAddNode(a {kind} conditional node)")
    self._add(node, p, "conditional")
    return list(p.conditional.phGraph_out)[:int(size)]

  @contextlib.contextmanager
  def body(self, body_graph):
    """Add the nodes appended inside the block to ``body_graph`` (a conditional node's body,
    from ``add_conditional``), chained from its start; afterwards appending goes on after the
    conditional node."""
    saved = self._cursor
    self._cursor = [body_graph, None, None]
    try:
      yield
    finally:
      self._cursor = saved

  def add_kernel(self, function: "Function", grid, block, shared: int,
                 params_address: int, programmatic: bool = True) -> int:
    """Append a launch of ``function``; returns the node's index.  After another kernel the
    edge is programmatic where the device allows it (``programmatic_launch``) and
    ``programmatic`` is true: ``function`` then waits for its predecessor's completion itself
    (``codegen.grid_dependency_prologue``) before reading what that wrote."""
    d = _driver()
    p = d.CUDA_KERNEL_NODE_PARAMS()
    p.func = function.handle
    p.gridDimX, p.gridDimY, p.gridDimZ = (int(g) for g in grid)
    p.blockDimX, p.blockDimY, p.blockDimZ = (int(b) for b in block)
    p.sharedMemBytes = int(shared)
    p.kernelParams = int(params_address) or None
    what = (f"cuGraphAddKernelNode({function.name}, grid {tuple(grid)}, block "
            f"{tuple(block)}, {shared} bytes shared)")
    deps = self._deps()
    where = self._cursor[0]
    if deps and self._cursor[2] not in ("copy", "conditional", "empty") and self._programmatic \
       and programmatic and self._cursor[0] is self.handle:
      node = _check(d.cuGraphAddKernelNode(where, [], 0, p), what)
      e = d.CUgraphEdgeData()
      e.type = int(d.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
      e.from_port = int(d.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC)
      _check(d.cuGraphAddDependencies(where, deps, [node], [e], 1),
             f"cuGraphAddDependencies (a programmatic edge {self._cursor[2]} -> "
             f"{function.name})")
    else:
      node = _check(d.cuGraphAddKernelNode(where, deps, len(deps), p), what)
    return self._add(node, p, function.name)

  def add_copy(self, dst: int, src: int, nbytes: int) -> int:
    """Append a device-to-device copy of ``nbytes`` (> 0); returns the node's index."""
    d = _driver()
    p = _copy_params(d, dst, src, nbytes)
    deps = self._deps()
    node = _check(d.cuGraphAddMemcpyNode(self._cursor[0], deps, len(deps), p,
                                         self.device.context),
                  f"cuGraphAddMemcpyNode({nbytes} bytes)")
    return self._add(node, p, "copy")

  def add_empty(self) -> int:
    """Append a node that does nothing (the whole of an otherwise empty conditional body)."""
    d = _driver()
    deps = self._deps()
    node = _check(d.cuGraphAddEmptyNode(self._cursor[0], deps, len(deps)),
                  "cuGraphAddEmptyNode")
    return self._add(node, None, "empty")

  def instantiate(self) -> "GraphExec":
    return GraphExec(self)

  def __del__(self):
    try:
      if _drv is not None and getattr(self, "handle", None) is not None:
        _drv.cuGraphDestroy(self.handle)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


def programmatic_launch(device: "Device") -> bool:
  """Whether graph edges between two kernels on ``device`` are programmatic (Hopper's
  programmatic dependent launch: the second kernel's blocks are scheduled while the first
  runs and wait in their prologue, ``codegen.grid_dependency_prologue``, for its completion).
  Off below compute capability 9.0 and with ``OURJAX_CUDA_PDL=0``."""
  from ourjax.config import env_switch
  return env_switch("OURJAX_CUDA_PDL") and device.compute_capability[0] >= 9


def _copy_params(d, dst: int, src: int, nbytes: int):
  """A ``CUDA_MEMCPY3D`` for a 1-D device-to-device copy (one row of ``nbytes``)."""
  p = d.CUDA_MEMCPY3D()
  dev = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
  p.srcMemoryType, p.dstMemoryType = dev, dev
  p.srcDevice, p.dstDevice = int(src), int(dst)
  p.srcPitch = p.dstPitch = p.WidthInBytes = int(nbytes)
  p.srcHeight = p.dstHeight = p.Height = p.Depth = 1
  return p


class GraphExec:
  """An executable instance of a ``Graph``: launched on the device's stream, its nodes'
  parameters changeable between launches (the change applies to later launches only, so an
  instance may be updated while an earlier launch of it still runs)."""

  def __init__(self, graph: Graph):
    d = _driver()
    dev = graph.device
    dev.make_current()
    self.graph, self.device = graph, dev     # (the graph outlives its instances)
    self.handle = _check(d.cuGraphInstantiate(graph.handle, 0),
                         f"cuGraphInstantiate (a graph of {len(graph.nodes)} nodes)")
    _check(d.cuGraphUpload(self.handle, dev.stream), "cuGraphUpload")
    kernels = [n for n in graph.names if n not in ("copy", "conditional", "empty")]
    self._label = (f"graph of {len(kernels)} kernels ({kernels[0]}..{kernels[-1]})" if kernels
                   else f"graph of {len(graph.names)} copies")

  def set_kernel(self, i: int) -> None:
    """Give node ``i`` (a kernel) the parameter values now in its parameter block."""
    g = self.graph
    _check(_driver().cuGraphExecKernelNodeSetParams(self.handle, g.nodes[i], g.params[i]),
           f"cuGraphExecKernelNodeSetParams({g.names[i]})")

  def set_copy(self, i: int, dst: int, src: int) -> None:
    """Point node ``i`` (a copy) at new addresses."""
    g = self.graph
    d = _driver()
    p = _copy_params(d, dst, src, g.params[i].WidthInBytes)
    _check(d.cuGraphExecMemcpyNodeSetParams(self.handle, g.nodes[i], p, self.device.context),
           f"cuGraphExecMemcpyNodeSetParams({p.WidthInBytes} bytes)")

  def launch(self) -> None:
    """Enqueue one replay on the device's stream."""
    dev = self.device
    res = _driver().cuGraphLaunch(self.handle, dev.stream)
    if int(res[0]) != 0:
      raise DeviceError(f"CUDA cuGraphLaunch of a {self._label} failed: {_error_text(res[0])}")
    dev.recent_kernels.append(self._label)

  def __del__(self):
    try:
      if _drv is not None and getattr(self, "handle", None) is not None:
        _drv.cuGraphExecDestroy(self.handle)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


def pointer_params(values) -> tuple:
  """(keep-alive, address) of a kernel-parameter array for 64-bit ``values`` (pointers and
  integers): the values in one uint64 array, and an array of pointers to its elements."""
  vals = np.asarray(values, dtype=np.uint64)
  n = len(vals)
  if n == 0:
    return (vals,), 0
  ptrs = vals.ctypes.data + 8 * np.arange(n, dtype=np.uint64)
  return (vals, ptrs), ptrs.ctypes.data


_ = ctypes   # (ctypes kept for callers that build parameter blocks by hand)
