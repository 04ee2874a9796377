"""The CUDA backend: an HLO module becomes one PTX module whose kernels are launched in order on
the device's stream; results are ``DeviceBuffer``s that stay on the GPU until read.

    exe = compile(module)        # CudaExecutable (no GPU needed: the PTX is made here)
    exe.ptx                      # Compiled.as_text(dialect="ptx")
    outs = exe(x, y)             # tuple of DeviceBuffer; the first call loads the module

Compilation (``planning.py``) reuses the shared planning of the entry computation
(``llvm/planning.py``: buffer assignment by live ranges) and the shared group planner
(``llvm/kernels.py``), turns every planned kernel into GPU kernels
(``codegen.translate``), merges independent ones into one launch (``horizontal.py``) and makes
the *launch program* (``program.py``).  Each kernel's LLVM module goes to LLVM as soon as it is
emitted, modules seen before in the process are not compiled again, and with a GPU present
the new ones are linked into cubins while the program compiles (``kernel_cache.py``; in the
phase log, LLVM's time then falls partly inside ``emit``, ``llvm`` being the wait after it).
A program an earlier process compiled is rebuilt from its disk cache entry instead, found by its
module as lowered (``cuda/cache.py``): this module imports the code generator and the planner
only in ``emit`` and ``compile``, so that such an executable runs without them.
Device arrays (``DeviceBuffer``) and the copies of host arguments to the GPUs (``Uploads``) are
in ``device_buffers.py``.  Temporaries live in one *arena* allocation per call; parameters,
outputs and the module's array constants (uploaded once, on the first call) have their own.
``while`` and ``conditional`` run their computations' kernels from the host, reading the
predicate or branch index back; a loop of known trip count (a scan, a fori_loop) reads nothing
back.  Loops are double-buffered: the next state is not copied into the state after each
iteration, odd iterations run the body with each state buffer and its next buffer exchanged
(``planning._double_buffer``).

A call's Python work is small and fixed: the *slot table* of buffer addresses, one gather that
computes every kernel's parameters from it, and the launches.  A program without host-driven
control flow and with at least ``GRAPH_MIN_LAUNCHES`` kernels is replayed as a CUDA graph from
its second call on (one ``cuGraphLaunch`` per call; nodes are updated only where buffer
addresses changed, see ``program._GraphReplay``, and a call's outputs are allocated at the
addresses of a kept graph where those blocks are free, so that a loop that feeds its results
back updates nothing); ``OURJAX_CUDA_GRAPHS=0`` launches kernel by kernel.
A *timed* call (``timed_call``: ``profile()``, ``ourjax.profiler`` via ``cuda/profiling.py``)
launches kernel by kernel, each launch between two timing events, and times the host round
trips of ``while``/``conditional`` on the host.

Modules with what the native backends do not compile yet (complex types, 8-bit floats other
than float8_e4m3fn and float8_e5m2, some opcodes) and modules whose code generation fails run
on the CPU backend instead, their arguments copied to the host and results copied to the GPU
(logged at debug level; a code generation failure at warning level): never a wrong answer,
only a slower one.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref

import numpy as np

from ourjax import _phases
from ourjax.backends.cuda import conditional, driver, kernel_cache, memory
from ourjax.backends.cuda import program as launch_program
# (device arrays and uploads: ``device_buffers``; imported here for this module and for the
# modules and tests that read them here)
from ourjax.backends.cuda.device_buffers import (  # noqa: F401
    _COMPUTED, DeviceBuffer, Uploads, _donated_blocks, _device_pointer, _Ready, _upload_args,
    device_put)
from ourjax.backends.cuda.program import (GRAPH_AFTER_CALLS, _addr, _GraphReplay, _iterations,
                                          _ParamBlock, _resolve, graph_unsuitable,
                                          graphs_enabled)
from ourjax.backends.cuda.target import DeviceInfo
from ourjax.errors import CompileError, DeviceError
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")
_LOAD_LOCK = threading.Lock()     # (CudaExecutable._load)

__all__ = ["compile", "CudaExecutable", "HostFallbackExecutable", "DeviceBuffer", "device_put",
           "device_info"]


def device_info() -> DeviceInfo:
  """What code generation targets: the GPU present, else an H100 (sm_90, 132 SMs)."""
  if driver.available():
    try:
      d = driver.get_device(0)
      return DeviceInfo(d.arch, d.multiprocessor_count)
    except DeviceError as e:   # pragma: no cover
      log.debug("cuda: could not query device 0 (%s); generating code for sm_90", e)
  return DeviceInfo()


# ---------------------------------------------------------------------------------------------
# the executable
# ---------------------------------------------------------------------------------------------

_EVENT_POOLS = weakref.WeakKeyDictionary()   # device -> events free for reuse


LINK_THREADS = 8
"""The most modules the driver's linker compiles at once (``_module_images``)."""


def _cubin_keys(ptx_modules, dev) -> list:
  """The compilation-cache key of each PTX module's cubin on ``dev``."""
  import hashlib
  target = f"sm_{dev.arch}\0{dev.driver_version}\0".encode()    # (the driver asked once)
  keys = []
  for ptx in ptx_modules:
    h = hashlib.sha256(b"ourjax-cubin-1\0")
    h.update(target)
    h.update(ptx.encode())
    keys.append("cuda-" + h.hexdigest())
  return keys


def _module_images(dev, ptx_modules, keys, name):
  """What to load for each PTX module: its cubin, from the compilation cache (``disk_cache``,
  keyed by the PTX, the GPU's architecture and the driver's version) or from the driver's
  linker, several modules at once on ``LINK_THREADS`` threads (loading the PTX itself makes the
  driver compile the modules one after the other: measured on an H100 with its cache off,
  ResNet inference's 25 modules 2.6 -> 0.4 s, the transformer step's 77 modules 5.0 -> 0.7 s).
  A module the linker fails on is loaded as PTX, whose error names the problem."""
  from ourjax.backends import disk_cache
  images = list(ptx_modules)
  todo = []
  for g, key in enumerate(keys):
    hit = disk_cache.read(key)
    if hit is not None:
      images[g] = hit[1]
      continue
    made = kernel_cache.precompiled(dev, key)     # (linked while the program compiled)
    if made:
      images[g] = made
      disk_cache.write(key, {"kind": "cubin", "arch": dev.arch}, made, "")
    elif made is None:
      todo.append(g)

  def link(g):
    try:
      return dev.link_ptx(ptx_modules[g], f"{name}.{g}")
    except Exception as e:   # (the PTX load that follows reports it, with the JIT's log)
      log.debug("cuda: linking %s.%d failed: %s", name, g, e)
      return None
  if len(todo) > 1 and LINK_THREADS > 1:
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(LINK_THREADS, len(todo), os.cpu_count() or 1)) as pool:
      cubins = list(pool.map(link, todo))
  else:
    cubins = [link(g) for g in todo]
  for g, cubin in zip(todo, cubins):
    if cubin is not None:
      images[g] = cubin
      disk_cache.write(keys[g], {"kind": "cubin", "arch": dev.arch}, cubin, "")
      kernel_cache.keep(dev, keys[g], cubin)
  return images


def _load_image(dev, image, ptx, key, name):
  """``dev.load_module(image)``; a cubin the driver refuses (a damaged or foreign cache entry)
  is dropped from the cache and the PTX loaded instead."""
  if isinstance(image, bytes):
    try:
      return dev.load_module(image, name)
    except DeviceError as e:
      log.warning("ourjax: the cached cubin of %s does not load (%s); loading its PTX", name,
                  str(e).splitlines()[0])
      from ourjax.backends import disk_cache
      disk_cache.remove(key)
      kernel_cache.forget_precompiled(dev, key)
  return dev.load_module(ptx, name)


class CudaExecutable:
  """A module compiled for the GPU: ``exe(*args) -> tuple of DeviceBuffer`` (``args``: Arrays,
  DeviceBuffers or host values).  ``ptx`` is the module's PTX text.

  A call fills the *slot table* (the address of every parameter, output, constant and the
  temporaries' arena), computes every kernel's parameters from it in one gather
  (``_ParamBlock``) and enqueues the program: as one CUDA graph launch when the program is a
  fixed sequence of at least ``GRAPH_MIN_LAUNCHES`` kernels, after ``GRAPH_AFTER_CALLS`` calls
  (``_GraphReplay``;
  ``OURJAX_CUDA_GRAPHS=0`` turns graphs off, and any failure of the graph API turns them off
  for the executable, which then launches kernel by kernel), else kernel by kernel.
  ``graph_reason`` says why an executable launches kernel by kernel (None: it replays a
  graph; empty before the first call)."""
  device_resident = True
  backend = "cuda"

  def __init__(self, module, ptx, llvm_ir, program, kernels, consts, param_specs, out_specs,
               arena_bytes, nslots, aliases=(), name=None):
    # ptx: the PTX of each module (kernel n lives in module n % len(ptx)), or one text
    self._ptx_modules = [ptx] if isinstance(ptx, str) else list(ptx)
    # ``module``: the optimised hlo.Module, or a function that makes it (an executable rebuilt
    # from the disk cache, ``cuda/cache.py``: its module and LLVM IR are made when asked for)
    if isinstance(module, hlo.Module):
      self._module, self._make_module = module, None
    else:
      self._module, self._make_module = None, module
    self.name = name if name is not None else module.name
    self._llvm_ir = llvm_ir
    # what runs (``kernels``, ``program``, ``ptx_modules``, ``consts`` show it, see there)
    self._program = program
    self._kernels = kernels              # GpuKernels launched (copies excluded), by index
    self._consts = consts                # (slot, numpy value)
    self.param_specs, self.out_specs = param_specs, out_specs
    self.arena_bytes, self.nslots = arena_bytes, nslots
    # (output j, parameter k): output j is written into argument k's device buffer, which the
    # caller donated (``backends/donation.py``), and returned in it
    self.aliases = [(j, k) for j, k, _ in aliases]
    self.code_bytes = sum(len(p) for p in self._ptx_modules)     # (PTX text)
    # per output: (bytes, dims, dtype), so that a call computes no sizes
    self._out_meta = [(int(np.prod(dims, dtype=np.int64)) * dt.itemsize, tuple(dims), dt)
                      for dt, dims in out_specs]
    # the outputs' and the arena's requests and block sizes, allocated in one go per call
    self._requests = [m[0] for m in self._out_meta] + ([arena_bytes] if arena_bytes else [])
    self._blocks = [memory.block_size(n) for n in self._requests]
    # where those blocks' addresses are in the slot table (a graph's preferred addresses)
    n = len(param_specs)
    self._prefer_at = np.array(list(range(n, n + len(out_specs))) +
                               ([nslots - 1] if arena_bytes else []), np.int64)
    self.graph_reason = ""
    self._graph = None
    self._dev = None

  _ordinal = 0      # the GPU this copy runs on (for_device)
  # (set by ``cuda/cache.rebuild``) the cubin of each PTX module from the disk cache entry
  # (None: none there), the (arch, SM count) its kernels' launches were made for, the entry's key
  _images = None
  _made_for = None
  _entry_key = None
  _again = None     # (``_shown``)

  @property
  def module(self) -> hlo.Module:
    """The optimised module this code was compiled from (made on first use when the code came
    from the disk cache)."""
    if self._module is None:
      self._module = self._make_module()
    return self._module

  def _shown(self) -> "CudaExecutable":
    """What ``kernels``, ``program``, ``ptx_modules``, ``consts`` and ``llvm_ir`` show: this
    executable, or for one rebuilt from the disk cache (which launches kernels as recorded,
    ``cuda/cache.py``), a compile of its module, made when first asked for (the same code;
    its kernels are the planner's, with all they tell, and its PTX entries their own)."""
    if self._made_for is None:
      return self
    if self._again is None:
      again = compile(self.module)
      self._again = again if isinstance(again, CudaExecutable) else self
    return self._again

  @property
  def kernels(self) -> list:
    """The GPU kernels the program launches, by index (copies excluded)."""
    return self._shown()._kernels

  @property
  def program(self) -> list:
    """The launch program (``program.py``)."""
    return self._shown()._program

  @property
  def ptx_modules(self) -> list:
    """The PTX of each module (kernel ``k`` lives in module ``k.ptx_entry[0]``)."""
    return self._shown()._ptx_modules

  @property
  def ptx(self) -> str:
    """The PTX of all modules (``MODULE_SEPARATOR`` between them)."""
    return MODULE_SEPARATOR.join(self.ptx_modules)

  @property
  def consts(self) -> list:
    """(slot, NumPy value) of each array constant."""
    return self._shown()._consts

  @property
  def llvm_ir(self) -> str | None:
    """The LLVM IR of the kernels' modules."""
    return self._shown()._llvm_ir

  def __repr__(self):
    return f"<CudaExecutable {self.name}: {len(self._kernels)} kernel(s)>"

  def for_device(self, ordinal: int) -> "CudaExecutable":
    """This program on GPU ``ordinal``: the same PTX, loaded there on its first call."""
    if ordinal == self._ordinal:
      return self
    import copy
    exe = copy.copy(self)
    exe._ordinal, exe._dev, exe._graph, exe.graph_reason = ordinal, None, None, ""
    return exe

  def _load(self):
    """Load the code on the device once (threads that call a fresh executable at once wait
    for the first: a second load replaced the parameter block and its lock while the first
    thread held them)."""
    with _LOAD_LOCK:
      if self._dev is not None:
        return self._dev
      return self._load_now()

  def _load_now(self):
    dev = driver.get_device(self._ordinal)
    if self._made_for is not None and self._made_for != (dev.arch, dev.multiprocessor_count):
      self._compile_again()    # (from the disk cache, made for another GPU than this one)
    info = DeviceInfo(dev.arch, dev.multiprocessor_count)
    # (on the first call, after the compile's log: with jax_log_compiles a line of its own)
    times = _phases.begin(f"{self.name} (PTX load, GPU {self._ordinal})")
    with _phases.collecting(times), _phases.phase("ptx_load"):
      mods = self._load_modules(dev)
    _phases.report(times)
    mod = mods[0] if len(mods) == 1 else tuple(mods)
    funcs = []
    for k in self._kernels:
      g, name = k.ptx_entry
      f = mods[g].function(name)
      grid, block, shared = k.launch(info)
      if shared > 48 * 1024:
        f.set_max_dynamic_shared(shared)
      funcs.append((f, tuple(int(x) for x in grid), tuple(int(x) for x in block), int(shared)))
    self._module_handle = mod
    # one parameter block for the whole program, refilled in place on every call (the driver
    # copies the values at launch); a call that finds it in use (another thread) makes its own
    self._params = _ParamBlock(self._program)
    self._ops = _resolve(self._program, funcs, self._params.start)
    self._params_lock = threading.Lock()
    template = np.zeros(self.nslots, np.uint64)
    self._const_bufs = []
    for slot, value in self._consts:
      buf = DeviceBuffer.from_host(np.ascontiguousarray(value), dev)
      self._const_bufs.append(buf)
      template[slot] = buf.ptr
    self._template = template
    if not graphs_enabled():
      self.graph_reason = "OURJAX_CUDA_GRAPHS=0"
    else:
      self.graph_reason = graph_unsuitable(self._ops, conditional.supported(dev))
    self._graph = None                   # built by a later call (GRAPH_AFTER_CALLS)
    self._plain_calls = 0
    events = _EVENT_POOLS.get(dev)
    if events is None:
      events = _EVENT_POOLS[dev] = []
    self._events = events
    self._dev = dev
    return dev

  def _load_modules(self, dev) -> list:
    """The loaded module of each PTX module: its cubin from the disk cache entry the executable
    came from, else as ``_module_images`` finds or makes it.  A cubin of the entry that the
    driver refuses drops the entry (the next process compiles again)."""
    images = self._images
    if images is None:
      keys = _cubin_keys(self._ptx_modules, dev)
      images = _module_images(dev, self._ptx_modules, keys, self.name)
      return [_load_image(dev, img, ptx, key, f"{self.name}.{g}")
              for g, (img, ptx, key) in enumerate(zip(images, self._ptx_modules, keys))]
    mods = [None] * len(images)
    todo = []                    # modules without a cubin there (or with one that fails)
    for g, img in enumerate(images):
      if img:
        try:
          mods[g] = dev.load_module(img, f"{self.name}.{g}")
          continue
        except DeviceError as e:
          log.warning("ourjax: the cached cubin of %s.%d does not load (%s); loading its PTX",
                      self.name, g, str(e).splitlines()[0])
          if self._entry_key is not None:
            from ourjax.backends import disk_cache
            disk_cache.remove(self._entry_key)
      todo.append(g)
    if todo:
      ptx = [self._ptx_modules[g] for g in todo]
      keys = _cubin_keys(ptx, dev)
      made = _module_images(dev, ptx, keys, self.name)
      for g, img, text, key in zip(todo, made, ptx, keys):
        mods[g] = _load_image(dev, img, text, key, f"{self.name}.{g}")
    return mods

  def _compile_again(self) -> None:
    """Become a fresh compile of the module (an executable from the disk cache asked to run on
    a GPU other than the one its kernels' code and launches were made for)."""
    again = compile(self.module)
    if not isinstance(again, CudaExecutable):
      raise DeviceError(f"{self.name}: its code for GPU {self._ordinal} falls back to the CPU "
                        f"backend ({getattr(again, 'reason', '')})")
    ordinal = self._ordinal
    self.__dict__.update(again.__dict__)
    self._ordinal = ordinal
    self._images = self._made_for = self._entry_key = self._again = None

  def __call__(self, *args):
    dev = self._dev or self._load()
    dev.make_current()
    specs = self.param_specs
    if len(args) != len(specs):
      raise TypeError(f"{self.name}: expected {len(specs)} arguments, got {len(args)}")
    slots = self._template.copy()
    keep = []                            # host arguments uploaded for this call
    pending = None
    for k, a in enumerate(args):
      buf = getattr(a, "_device_buf", None) if type(a) is not DeviceBuffer else a
      if buf is not None and buf.device is dev:
        slots[k] = buf.allocation.ptr
      else:
        if pending is None:
          pending = []
        pending.append((k, a) + tuple(specs[k]))
    ups = _upload_args(dev, pending, slots, keep) if pending else None
    if ups is None:
      return self._execute(dev, slots, _donated_blocks(self.aliases, args, slots, keep))
    try:
      return self._execute(dev, slots, _donated_blocks(self.aliases, args, slots, keep))
    finally:
      ups.finish()

  def fast_caller(self, kept, fixed, array_type):
    """``call(args) -> tuple of DeviceBuffer`` for ``jit``'s dispatch fast path
    (``backends.ModuleExecutable.fast_path``): ``args`` are the caller's positional arguments
    (Arrays or NumPy arrays of the compiled shapes and dtypes), ``kept`` the indices of those
    that are parameters 0.. (None: all of them, in order), ``fixed`` the values of the remaining
    parameters (hoisted constants: their device copies are made once, here), ``array_type``
    ourjax's Array class.  None when the arguments do not fit."""
    dev = self._dev or self._load()
    specs = self.param_specs
    nfixed = len(fixed)
    ndyn = len(specs) - nfixed
    kept = tuple(range(ndyn)) if kept is None else tuple(kept)
    if len(kept) != ndyn:
      return None
    template = self._template.copy()
    keep_fixed = [fixed]                 # the constants' device copies live as long as `call`
    for j, a in enumerate(fixed):
      dt, dims = specs[ndyn + j]
      template[ndyn + j] = _device_pointer(dev, a, dt, dims, keep_fixed)
    slot_of = tuple(enumerate(kept))
    execute = self._execute
    aliases = self.aliases

    def call(args):
      dev.make_current()
      slots = template.copy()
      keep = []
      pending = None
      for i, k in slot_of:
        a = args[k]
        buf = a._device_buf if type(a) is array_type else None
        if buf is not None and buf.device is dev:
          slots[i] = buf.allocation.ptr
        else:
          if pending is None:
            pending = []
          pending.append((i, a) + tuple(specs[i]))
      ups = _upload_args(dev, pending, slots, keep) if pending else None
      try:
        if aliases:
          return execute(dev, slots, _donated_blocks(aliases, [args[k] for k in kept], slots,
                                                     keep))
        return execute(dev, slots)
      finally:
        if ups is not None:
          ups.finish()
    call.keep = keep_fixed
    return call

  def _execute(self, dev, slots, donated=None):
    """Allocate the outputs and the arena into ``slots`` (parameters and constants already
    there), enqueue the program, and return the outputs.  ``donated``: {output: the donated
    argument's allocation it is written into}."""
    n = len(self.param_specs)
    if donated:
      alloc = dev.allocator.allocate
      outs = [donated.get(j) or alloc(m[0]) for j, m in enumerate(self._out_meta)]
      arena = alloc(self.arena_bytes) if self.arena_bytes else None
    else:
      g = self._graph
      prefer = None if g is None or g._held is None else g.preferred(slots, n)
      if prefer is not None:
        prefer = prefer[self._prefer_at].tolist()
      outs = dev.allocator.allocate_many(self._blocks, self._requests, prefer)
      arena = outs.pop() if self.arena_bytes else None
    for j, a in enumerate(outs):
      slots[n + j] = a.ptr
    if arena is not None:
      slots[-1] = arena.ptr
    params = self._params
    if self._params_lock.acquire(blocking=False):
      try:
        if not (self.graph_reason is None and self._timings is None
                and self._replay(dev, slots)):
          params.fill(slots)
          self._run(dev, self._ops, slots, params.base)
      finally:
        self._params_lock.release()
    else:                                # another thread holds the shared block
      vals, ptrs = params.new()
      params.fill(slots, vals)
      self._run(dev, self._ops, slots, int(ptrs.ctypes.data) if len(vals) else 0)
    ready = _Ready.record(dev, self._events)
    # the arena returns to the cache now: later work is stream-ordered after this call's
    del arena
    wrap = DeviceBuffer._wrap
    return tuple(wrap(dev, a, dims, dt, ready) for a, (_, dims, dt) in zip(outs, self._out_meta))

  def _replay(self, dev, slots) -> bool:
    """Enqueue the call as a graph replay; False when the caller is to launch it kernel by
    kernel: during the first ``GRAPH_AFTER_CALLS`` calls, and when the graph API fails (before
    anything of the call was enqueued; graphs are then off for this executable)."""
    try:
      g = self._graph
      if g is None:
        if self._plain_calls < GRAPH_AFTER_CALLS:
          self._plain_calls += 1
          return False
        self._params.fill(slots)
        g = self._graph = _GraphReplay(dev, self._module_handle, self._ops, self._params, slots,
                                       self._prefer_at if launch_program.KEEP_GRAPH_ADDRESSES
                                       else None)
        log.debug("cuda: %s replays a CUDA graph of %d nodes", self.name,
                  len(g.graph.nodes))
      g.replay(slots, self._params)
      return True
    except Exception as e:   # noqa: BLE001 - any failure of the graph path: launch one by one
      self._graph = None
      self.graph_reason = f"the CUDA graph API failed: {type(e).__name__}: {e}"
      log.warning("cuda: %s launches its kernels one by one from now on (%s)", self.name,
                  self.graph_reason)
      return False

  def profile(self, *args, reps: int = 3):
    """Device milliseconds of each kernel launch of one call (median of ``reps`` calls):
    a list of (kernel name, kernel class, ms), copies included as ('copy', ...).  The kernels
    are launched one by one (not as a graph), each between two timing events.  (The per-kernel
    table with host overheads is ``ourjax.profiler``'s, see ``cuda/profiling.py``.)"""
    runs = []
    for _ in range(reps + 1):           # the first call warms up
      timings = self.timed_call(args)[1]
      runs.append([(self._kernels[t[1]].name, _kind(self._kernels[t[1]]), t[2].elapsed_ms(
          t[3])) if t[0] == "k" else ("copy", f"{t[1]} B", t[2].elapsed_ms(t[3]))
          for t in timings if t[0] != "host"])
    runs = runs[1:]
    return [(name, cls, float(np.median([r[i][2] for r in runs])))
            for i, (name, cls, _) in enumerate(runs[0])]

  def timed_call(self, args):
    """``self(*args)`` with its launches one by one, each between two timing events, and its
    outputs waited for: (outputs, timings), timings in launch order: ``("k", kernel index, e0,
    e1)``, ``("copy", bytes, e0, e1)``, ``("host", what, t0_ns, t1_ns)`` (a predicate or branch
    index read back, timed on the host with ``time.perf_counter_ns``)."""
    timings = []
    self._timings = timings
    try:
      outs = self(*args)
    finally:
      self._timings = None
    self._dev.synchronize("a timed call")     # (every event done: their times can be read)
    return outs, timings

  _timings = None

  def _read_back(self, dev, host, addr, what):
    """Copy a control value to the host (a round trip: waits for the stream)."""
    timings = self._timings
    if timings is None:
      dev.copy_to_host(host, addr)
      return
    t0 = time.perf_counter_ns()
    dev.copy_to_host(host, addr)
    timings.append(("host", what, t0, time.perf_counter_ns()))

  def _run(self, dev, ops, slots, base: int):
    """Launch ``ops`` (``_resolve``d) kernel by kernel; kernel parameters are at ``base``."""
    for op in ops:
      kind = op[0]
      timings = self._timings
      if timings is not None and kind in ("k", "copy"):
        e0 = driver.Event(dev, timing=True).record()
      if kind == "k":
        start = op[5]
        f = op[1]
        f.launch(op[2], op[3], 0 if start is None else base + start, op[4])
        if timings is not None:
          timings.append(("k", op[6], e0, driver.Event(dev, timing=True).record()))
      elif kind == "copy":
        _, dst, src, nbytes = op
        dev.copy_device(_addr(slots, dst), _addr(slots, src), nbytes)
        if timings is not None:
          timings.append(("copy", nbytes, e0, driver.Event(dev, timing=True).record()))
      elif kind == "repeat":
        for prog in _iterations(op):
          self._run(dev, prog, slots, base)
      elif kind == "while":
        _, cond, pred, body, name, odd_cond, odd, fixup = op
        flag = np.zeros((), np.uint8)
        i = 0
        while True:
          swapped = i & 1 and odd is not None
          self._run(dev, odd_cond if swapped else cond, slots, base)
          self._read_back(dev, flag, _addr(slots, pred), name)
          if not flag:
            break
          self._run(dev, odd if swapped else body, slots, base)
          i += 1
        if i & 1 and odd is not None:
          self._run(dev, fixup, slots, base)
      elif kind == "cond":
        _, sel, dt, branches, name = op
        v = np.zeros((), dt)
        self._read_back(dev, v, _addr(slots, sel), name)
        if dt == np.bool_:
          k = 0 if v else 1
        else:
          k = int(v)
          if not 0 <= k < len(branches):
            k = len(branches) - 1
        self._run(dev, branches[k], slots, base)
      else:   # pragma: no cover
        raise AssertionError(kind)


def _kind(kernel) -> str:
  """A kernel's class name (that of the kernel it stands for, for one from the disk cache)."""
  d = getattr(kernel, "described", None)
  return d["kind"] if d else type(kernel).__name__


class HostFallbackExecutable:
  """A module the GPU backend does not compile: run by the CPU backend on host copies of the
  arguments, results uploaded to the GPU."""
  device_resident = True
  backend = "cuda"
  ptx = None

  def __init__(self, module, reason: str):
    from ourjax.backends.cpu import backend as cpu_backend
    self.module, self.reason = module, reason
    self.inner = cpu_backend.compile(module)
    self.llvm_ir = getattr(self.inner, "llvm_ir", None)

  _ordinal = 0

  def __repr__(self):
    return f"<HostFallbackExecutable {self.module.name}: {self.reason}>"

  def for_device(self, ordinal: int) -> "HostFallbackExecutable":
    import copy
    exe = copy.copy(self)
    exe._ordinal = ordinal
    return exe

  def __call__(self, *args):
    from ourjax.array import to_numpy
    dev = driver.get_device(self._ordinal)
    host = [to_numpy(a) for a in args]
    outs = self.inner(*host)
    return tuple(DeviceBuffer.from_host(np.asarray(o), dev) for o in outs)


#: Separates the PTX (and LLVM IR) texts of an executable's modules in ``exe.ptx``.
MODULE_SEPARATOR = "\n// ---- next module ----\n"


def emit(module: hlo.Module, info: DeviceInfo | None = None):
  """(plan, LLVM IR text, PTX texts) of ``module``: each kernel in an LLVM module of its own,
  kernels whose code is the same (a layer's dots and their gradients, repeated per layer) in
  one: a kernel's code depends on its buffers' shapes and types, not on where they are, since
  they are its parameters.  The distinct modules are turned into PTX on several threads, each
  as soon as it is emitted, a module compiled by an earlier executable of the process is not
  compiled again, and they are loaded as modules of their own (``kernel_cache``);
  ``kernel.ptx_entry`` is (module, function)."""
  from ourjax.backends.cuda import codegen
  from ourjax.backends.cuda.planning import _plan
  from ourjax.backends.llvm import dedupe
  info = info or device_info()
  with _phases.phase("plan"):
    plan = _plan(module, info)
  kernels = plan[1]
  builder = kernel_cache.ModuleBuilder(info.arch, module.name or "ourjax", len(kernels))
  try:
    with _phases.phase("emit"):
      # the dearest modules first (``GpuKernel.compile_cost``): their LLVM work and driver link
      # start while the rest is emitted, instead of making the compile's tail (program order
      # is kept for the launches: ``ptx_entry`` names each kernel's module)
      for k in sorted(kernels, key=lambda k: -getattr(k, "compile_cost", 1)):
        m = codegen.new_module(f"{module.name or 'ourjax'}.{k.name}", info.arch)
        k.emit_gpu(m)
        text = dedupe.module_text(m, {})     # (str(m), its functions printed faster)
        own = getattr(k, "function_names", lambda: [k.name])()
        k.ptx_entry = builder.add(kernel_cache.entry_key(text, own), text, k.name)
    with _phases.phase("llvm"):
      ptx = builder.results()
  finally:
    builder.close()
  return plan, MODULE_SEPARATOR.join(builder.texts), ptx


def _dump(module, ir_text, ptx):
  d = os.environ.get("OURJAX_DUMP")
  if not d:
    return
  try:
    os.makedirs(d, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in module.name)
    with open(os.path.join(d, f"{safe}.cuda.ll"), "w") as f:
      f.write(ir_text)
    with open(os.path.join(d, f"{safe}.ptx"), "w") as f:
      f.write(ptx)
  except OSError as e:   # pragma: no cover
    log.debug("cuda: could not dump %s: %s", module.name, e)


def compile(module: hlo.Module):  # noqa: A001  (backend API name)
  """A ``CudaExecutable`` for ``module``, or a ``HostFallbackExecutable`` when the GPU backend
  cannot compile it (see the module docstring)."""
  from ourjax.backends.cuda.planning import _cpu_planning
  from ourjax.backends.llvm import emitter as E
  from ourjax.backends.llvm import kernels as K
  with _phases.phase("verify"):
    hlo.verify(module)
  cpu_be = _cpu_planning()
  why = cpu_be.native_unsupported(module, cpu_be.NATIVE_OPCODES | {"attention", "attention-grad"},
                                  E.GPU_DTYPES)
  if why is not None:
    log.debug("cuda backend: %s runs on the CPU backend (%s)", module.name, why)
    return HostFallbackExecutable(module, why)
  try:
    plan, ir_text, ptx = emit(module)
  except (E.EmitterError, E.PrefetchMiss, K.PlanError) as e:
    log.debug("cuda backend: %s runs on the CPU backend (%s)", module.name, e)
    return HostFallbackExecutable(module, str(e))
  except CompileError as e:
    log.warning("cuda backend: code generation failed for %s; running it on the CPU backend: "
                "%s", module.name, str(e)[:2000])
    return HostFallbackExecutable(module, "code generation failed")
  _dump(module, ir_text, MODULE_SEPARATOR.join(ptx))
  prog, kernels, consts, param_specs, out_specs, arena_bytes, nslots, aliases = plan
  return CudaExecutable(module, ptx, ir_text, prog, kernels, consts, param_specs, out_specs,
                        arena_bytes, nslots, aliases)
