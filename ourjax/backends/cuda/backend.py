"""The CUDA backend: an HLO module becomes one PTX module whose kernels are launched in order on
the device's stream; results are ``DeviceBuffer``s that stay on the GPU until read.

    exe = compile(module)        # CudaExecutable (no GPU needed: the PTX is made here)
    exe.ptx                      # Compiled.as_text(dialect="ptx")
    outs = exe(x, y)             # tuple of DeviceBuffer; the first call loads the module

Compilation reuses the CPU backend's planning of the entry computation (``cpu/backend.py``:
``_Planner``, buffer assignment by live ranges) and the shared group planner
(``llvm/kernels.py``), and turns every planned kernel into GPU kernels (``codegen.translate``).
Temporaries live in one *arena* allocation per call; parameters, outputs and the module's array
constants (uploaded once, on the first call) have their own.  ``while`` and ``conditional`` run
their computations' kernels from the host, reading the predicate or branch index back; a loop
of known trip count (a scan, a fori_loop) reads nothing back.  Loops are double-buffered: the
next state is not copied into the state after each iteration, odd iterations run the body with
each state buffer and its next buffer exchanged (``_double_buffer``).

A call's Python work is small and fixed: the *slot table* of buffer addresses, one gather that
computes every kernel's parameters from it, and the launches.  A program without host-driven
control flow and with at least ``GRAPH_MIN_LAUNCHES`` kernels is replayed as a CUDA graph from
its second call on (one ``cuGraphLaunch`` per call; nodes are updated only where buffer
addresses changed, see ``_GraphReplay``); ``OURJAX_CUDA_GRAPHS=0`` launches kernel by kernel.
A *timed* call (``timed_call``: ``profile()``, ``ourjax.profiler`` via ``cuda/profiling.py``)
launches kernel by kernel, each launch between two timing events, and times the host round
trips of ``while``/``conditional`` on the host.

Modules with what the native backends do not compile yet (complex or 8-bit float types, some
opcodes) and modules whose code generation fails run on the CPU backend instead, their arguments
copied to the host and results copied to the GPU (logged at debug level; a code generation
failure at warning level): never a wrong answer, only a slower one.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
import weakref

import numpy as np

from ourjax import _phases
from ourjax.backends.cuda import codegen, driver, horizontal
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.errors import CompileError, DeviceError
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")

__all__ = ["compile", "CudaExecutable", "HostFallbackExecutable", "DeviceBuffer", "device_put",
           "device_info"]


# ---------------------------------------------------------------------------------------------
# device buffers
# ---------------------------------------------------------------------------------------------

_EVENT_POOL_MAX = 64


class _Ready:
  """The event recorded after the work that produced some buffers.  When the last of them lets
  go of it, the event returns to its device's pool for a later call to record again (creating
  and destroying an event per call would cost two more driver calls)."""
  __slots__ = ("event", "_pool")

  def __init__(self, event, pool=None):
    self.event, self._pool = event, pool

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
    alloc = dev.allocator.allocate(host.nbytes)
    dev.copy_to_device(alloc.ptr, host)
    return cls(dev, alloc, host.shape, host.dtype)

  def to_host(self) -> np.ndarray:
    out = np.empty(self.shape, self.dtype)
    self.device.copy_to_host(out, self.ptr)
    return out

  def synchronize(self) -> None:
    if self._ready is not None:
      self._ready.event.synchronize("an array's computation")
      self._ready = None
    else:
      self.device.synchronize("an array's computation")

  def is_ready(self) -> bool:
    return self._ready is None or self._ready.event.query()

  def __repr__(self):
    return f"<DeviceBuffer {hlo.dtype_name(self.dtype)}{list(self.shape)} on gpu:{self.device.ordinal}>"


def device_put(value, ordinal: int = 0) -> DeviceBuffer:
  return DeviceBuffer.from_host(np.asarray(value), driver.get_device(ordinal))


def device_info() -> codegen.DeviceInfo:
  """What code generation targets: the GPU present, else an H100 (sm_90, 132 SMs)."""
  if driver.available():
    try:
      d = driver.get_device(0)
      return codegen.DeviceInfo(d.arch, d.multiprocessor_count)
    except DeviceError as e:   # pragma: no cover
      log.debug("cuda: could not query device 0 (%s); generating code for sm_90", e)
  return codegen.DeviceInfo()


def _device_pointer(dev, a, dtype, dims, keep):
  """Device address of argument ``a`` (uploading host data; a host ``Array`` keeps its copy)."""
  from ourjax.array import Array, to_numpy
  if isinstance(a, Array):
    buf = a._device_buf
    if buf is not None and buf.device is dev:
      return buf.ptr
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
  buf = DeviceBuffer.from_host(host, dev)
  keep.append(buf)
  return buf.ptr


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


# ---------------------------------------------------------------------------------------------
# launch programs: kernel parameters and CUDA graphs
# ---------------------------------------------------------------------------------------------

# Kernel parameters: every launch of a program reads its 64-bit parameters (buffer addresses:
# a slot's address plus an offset) from one packed block, refilled by one gather per call.

class _ParamBlock:
  """The parameter values of every kernel launch in a program, packed in one array, and the
  array of pointers to them that ``cuLaunchKernel`` and graph kernel nodes take (launch ``i``'s
  pointers start ``start[i]`` bytes into it).  ``fill(slots)`` computes every value of a call
  at once (``slots[idx] + offset``)."""

  def __init__(self, program):
    idx, offs = [], []
    self.start = {}                  # id(launch op) -> byte offset of its pointers, None if none
    for op in _launch_ops(program):
      n = len(op[2])
      self.start[id(op)] = 8 * len(idx) if n else None
      idx.extend(int(i) for i in op[2])
      offs.extend(int(o) for o in op[3])
    self.idx = np.array(idx, np.int64)
    self.offs = np.array(offs, np.uint64)
    self.vals, self._ptrs = self.new()
    self.base = int(self._ptrs.ctypes.data) if len(idx) else 0

  def new(self):
    """A fresh (values, pointers) pair laid out like this block's."""
    vals = np.zeros(len(self.idx), np.uint64)
    ptrs = vals.ctypes.data + 8 * np.arange(len(vals), dtype=np.uint64)
    return vals, ptrs

  def fill(self, slots, vals=None) -> None:
    np.add(slots[self.idx], self.offs, out=self.vals if vals is None else vals)


def _launch_ops(program):
  for op in program:
    if op[0] == "k":
      yield op
    elif op[0] in ("while", "repeat"):
      for prog in _loop_programs(op):
        yield from _launch_ops(prog)
    elif op[0] == "cond":
      for br in op[3]:
        yield from _launch_ops(br)


def _loop_programs(op):
  """The programs inside a ``repeat`` or ``while`` op: its body (and condition), their
  double-buffered odd versions where there are, and the fix-up copies."""
  if op[0] == "repeat":
    return [p for p in (op[2], op[3], op[4]) if p is not None]
  return [p for p in (op[1], op[3], op[5], op[6], op[7]) if p is not None]


def _resolve(program, funcs, starts):
  """``program`` with each kernel launch resolved to what launching it needs:
  ("k", Function, grid, block, shared bytes, parameter offset, kernel index, slots read).
  A kernel whose grid is empty (its arrays have no elements) is left out."""
  out = []
  for op in program:
    kind = op[0]
    if kind == "k":
      _, fi, idx, _offs = op
      f, grid, block, shared = funcs[fi]
      if 0 in grid:
        continue
      out.append(("k", f, grid, block, shared, starts[id(op)], fi, tuple(int(i) for i in idx)))
    elif kind == "copy":
      out.append(op)
    elif kind == "while":
      out.append(("while", _resolve(op[1], funcs, starts), op[2],
                  _resolve(op[3], funcs, starts), op[4],
                  None if op[5] is None else _resolve(op[5], funcs, starts),
                  None if op[6] is None else _resolve(op[6], funcs, starts), op[7]))
    elif kind == "repeat":
      out.append(("repeat", op[1], _resolve(op[2], funcs, starts),
                  None if op[3] is None else _resolve(op[3], funcs, starts), op[4]))
    elif kind == "cond":
      out.append(("cond", op[1], op[2], [_resolve(b, funcs, starts) for b in op[3]], op[4]))
    else:   # pragma: no cover
      raise AssertionError(kind)
  return out


# CUDA graphs: an executable whose program is a fixed sequence of launches is replayed as one
# graph launch instead of one cuLaunchKernel per kernel.

GRAPH_MIN_LAUNCHES = 2
"""The fewest kernel launches for which an executable is replayed as a CUDA graph.  Launching a
graph costs the host about what one ``cuLaunchKernel`` does, so a single kernel gains nothing
(and would hold a graph's device memory); each kernel beyond the first saves a launch."""

GRAPH_AFTER_CALLS = 1
"""Calls an executable makes kernel by kernel before it builds its graph: building and
instantiating a graph costs far more than launching its kernels once, so an executable that is
called only once never builds one."""

GRAPH_INSTANCES = 2
"""Executable graphs kept per executable, each holding the buffer addresses of a recent call.
A loop ``y = f(x)`` gets its outputs in two alternating blocks (the previous result is alive
while the next one is allocated), so two instances replay such a loop without updating a node."""


def graphs_enabled() -> bool:
  """False when ``OURJAX_CUDA_GRAPHS`` is 0/false/no/off (read when an executable is loaded)."""
  return os.environ.get("OURJAX_CUDA_GRAPHS", "1").strip().lower() not in ("0", "false", "no",
                                                                             "off")


GRAPH_MAX_COPY_BYTES = (1 << 31) - 1
"""The largest copy a graph's copy node takes: the node describes it as one row of a 3-D copy,
whose pitch the driver limits to 2^31 - 1 bytes (a copy that large runs for milliseconds,
so launching it directly costs nothing that matters)."""


GRAPH_MAX_NODES = 20000
"""The most nodes a graph gets.  A loop of known trip count (``repeat``) is laid out in the
graph once per iteration, so a 1000-step scan of a few kernels replays as one launch; building
and instantiating a graph costs the host about a microsecond per node, once per executable."""


def _flat_program(program):
  """The launches and copies of ``program`` in order, each loop of known trip count laid out
  once per iteration; yields ("while" | "cond", ...) ops as they are (the host drives them)."""
  for op in program:
    if op[0] == "repeat":
      yield from _iterations(op, _flat_program)
    else:
      yield op


def _iterations(op, run):
  """``run(program)`` for each iteration of the ``repeat`` op ``op`` (alternating with its
  double-buffered odd body when it has one), then its fix-up copies when due; yields what
  each ``run`` yields."""
  _, n, body, odd, fixup = op
  for i in range(n):
    r = run(odd if (i & 1 and odd is not None) else body)
    if r is not None:
      yield from r
  if odd is not None and n & 1:
    r = run(fixup)
    if r is not None:
      yield from r


def _count_flat(program) -> tuple:
  """(nodes, host-driven kinds) of ``_flat_program(program)``, without laying it out."""
  nodes, host = 0, set()
  for op in program:
    if op[0] == "repeat":
      n, h = _count_flat(op[2])
      nodes += op[1] * n + (len(op[4]) if op[3] is not None and op[1] & 1 else 0)
      host |= h
    elif op[0] in ("while", "cond"):
      host.add(op[0])
    else:
      nodes += 1
  return nodes, host


def graph_unsuitable(program) -> str | None:
  """Why an executable's ``program`` is not replayed as a CUDA graph, or None when it is: it
  must be a fixed sequence of kernel launches and copies (no ``while``/``cond``, which the host
  drives by reading values back; loops of known trip count are laid out iteration by
  iteration) of at most ``GRAPH_MAX_NODES`` nodes, with at least ``GRAPH_MIN_LAUNCHES``
  kernels."""
  nodes, host = _count_flat(program)
  for kind in ("while", "cond"):
    if kind in host:
      return f"host-driven control flow ({kind})"
  if nodes > GRAPH_MAX_NODES:
    return f"{nodes} nodes (loops laid out), more than GRAPH_MAX_NODES={GRAPH_MAX_NODES}"
  flat = list(_flat_program(program))
  big = [op[3] for op in flat if op[0] == "copy" and op[3] > GRAPH_MAX_COPY_BYTES]
  if big:
    return f"a copy of {big[0]} bytes, more than GRAPH_MAX_COPY_BYTES"
  n = sum(1 for op in flat if op[0] == "k")
  if n < GRAPH_MIN_LAUNCHES:
    return f"{n} kernel launch(es), fewer than GRAPH_MIN_LAUNCHES={GRAPH_MIN_LAUNCHES}"
  return None


def _addr(slots, spec) -> int:
  slot, off = spec
  return int(slots[slot]) + off


class _GraphReplay:
  """One executable's launch program as a CUDA graph (``driver.Graph``: a chain of kernel and
  copy nodes), built on the first call from that call's buffer addresses and replayed on every
  call after.

  The addresses a call uses, its *slot table* (parameters, outputs, constants, the arena), may
  differ from call to call.  Up to ``GRAPH_INSTANCES`` executable instances are kept, each with
  the slot table its nodes were last given: a call whose table equals an instance's launches
  that instance as it is; otherwise the least recently used instance is updated first, only in
  the nodes that read a slot whose address changed (``cuGraphExecKernelNodeSetParams`` /
  ``cuGraphExecMemcpyNodeSetParams``).  A node's parameters are a function of the slot table
  alone, so equal tables mean equal launches."""

  def __init__(self, dev, module, ops, params: _ParamBlock, slots):
    graph = dev.new_graph(keep=module)
    users = [set() for _ in range(len(slots))]
    self._copies = {}                # node -> (dst spec, src spec)
    for op in _flat_program(ops):
      if op[0] == "k":
        _, f, grid, block, shared, start, _fi, idx = op
        n = graph.add_kernel(f, grid, block, shared, 0 if start is None else params.base + start)
        for s in idx:
          users[s].add(n)
      else:
        _, dst, src, nbytes = op
        n = graph.add_copy(_addr(slots, dst), _addr(slots, src), nbytes)
        self._copies[n] = (dst, src)
        users[dst[0]].add(n)
        users[src[0]].add(n)
    self.graph = graph
    self.slot_users = [tuple(sorted(u)) for u in users]
    self._built = slots                # the table the graph's own nodes hold
    self._lru: list = []               # [GraphExec, slot table, key], least recently used first
    self._by_key: dict = {}
    self.updates = 0                   # nodes updated so far (for tests and profiling)

  def replay(self, slots, params: _ParamBlock) -> None:
    key = slots.tobytes()
    inst = self._by_key.get(key)
    if inst is None:
      inst = self._retarget(slots, key, params)
    elif self._lru[-1] is not inst:
      self._lru.remove(inst)
      self._lru.append(inst)
    inst[0].launch()

  def _retarget(self, slots, key, params):
    """An instance whose nodes hold ``slots``: a new one while fewer than GRAPH_INSTANCES
    exist, else the least recently used, updated where its addresses differ."""
    if len(self._lru) < GRAPH_INSTANCES:
      inst = [self.graph.instantiate(), self._built, None]
    else:
      inst = self._lru.pop(0)
      del self._by_key[inst[2]]
    changed = np.flatnonzero(inst[1] != slots)
    if len(changed):
      params.fill(slots)
      nodes = sorted({n for s in changed.tolist() for n in self.slot_users[s]})
      exe = inst[0]
      for n in nodes:
        c = self._copies.get(n)
        if c is None:
          exe.set_kernel(n)
        else:
          exe.set_copy(n, _addr(slots, c[0]), _addr(slots, c[1]))
      self.updates += len(nodes)
    inst[1], inst[2] = slots, key
    self._lru.append(inst)
    self._by_key[key] = inst
    return inst


# ---------------------------------------------------------------------------------------------
# the executable
# ---------------------------------------------------------------------------------------------

_EVENT_POOLS = weakref.WeakKeyDictionary()   # device -> events free for reuse


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
               arena_bytes, nslots, aliases=()):
    # ptx: the PTX of each module (kernel n lives in module n % len(ptx)), or one text
    self.ptx_modules = [ptx] if isinstance(ptx, str) else list(ptx)
    self.ptx = MODULE_SEPARATOR.join(self.ptx_modules)
    self.module, self.llvm_ir = module, llvm_ir
    self.program = program
    self.kernels = kernels               # GpuKernels launched (copies excluded), by index
    self.consts = consts                 # (slot, numpy value)
    self.param_specs, self.out_specs = param_specs, out_specs
    self.arena_bytes, self.nslots = arena_bytes, nslots
    # (output j, parameter k): output j is written into argument k's device buffer, which the
    # caller donated (``backends/donation.py``), and returned in it
    self.aliases = [(j, k) for j, k, _ in aliases]
    self.code_bytes = sum(len(p) for p in self.ptx_modules)      # (PTX text)
    # per output: (bytes, dims, dtype), so that a call computes no sizes
    self._out_meta = [(int(np.prod(dims, dtype=np.int64)) * dt.itemsize, tuple(dims), dt)
                      for dt, dims in out_specs]
    self.graph_reason = ""
    self._graph = None
    self._dev = None

  _ordinal = 0      # the GPU this copy runs on (for_device)

  def __repr__(self):
    return f"<CudaExecutable {self.module.name}: {len(self.kernels)} kernel(s)>"

  def for_device(self, ordinal: int) -> "CudaExecutable":
    """This program on GPU ``ordinal``: the same PTX, loaded there on its first call."""
    if ordinal == self._ordinal:
      return self
    import copy
    exe = copy.copy(self)
    exe._ordinal, exe._dev, exe._graph, exe.graph_reason = ordinal, None, None, ""
    return exe

  def _load(self):
    dev = driver.get_device(self._ordinal)
    info = codegen.DeviceInfo(dev.arch, dev.multiprocessor_count)
    # (on the first call, after the compile's log: with jax_log_compiles a line of its own)
    times = _phases.begin(f"{self.module.name} (PTX load, GPU {self._ordinal})")
    with _phases.collecting(times), _phases.phase("ptx_load"):
      mods = [dev.load_module(p, f"{self.module.name}.{g}")
              for g, p in enumerate(self.ptx_modules)]
    _phases.report(times)
    mod = mods[0] if len(mods) == 1 else tuple(mods)
    funcs = []
    for k in self.kernels:
      g, name = k.ptx_entry
      f = mods[g].function(name)
      grid, block, shared = k.launch(info)
      if shared > 48 * 1024:
        f.set_max_dynamic_shared(shared)
      funcs.append((f, tuple(int(x) for x in grid), tuple(int(x) for x in block), int(shared)))
    self._module_handle = mod
    # one parameter block for the whole program, refilled in place on every call (the driver
    # copies the values at launch); a call that finds it in use (another thread) makes its own
    self._params = _ParamBlock(self.program)
    self._ops = _resolve(self.program, funcs, self._params.start)
    self._params_lock = threading.Lock()
    template = np.zeros(self.nslots, np.uint64)
    self._const_bufs = []
    for slot, value in self.consts:
      buf = DeviceBuffer.from_host(np.ascontiguousarray(value), dev)
      self._const_bufs.append(buf)
      template[slot] = buf.ptr
    self._template = template
    if not graphs_enabled():
      self.graph_reason = "OURJAX_CUDA_GRAPHS=0"
    else:
      self.graph_reason = graph_unsuitable(self._ops)
    self._graph = None                   # built by a later call (GRAPH_AFTER_CALLS)
    self._plain_calls = 0
    events = _EVENT_POOLS.get(dev)
    if events is None:
      events = _EVENT_POOLS[dev] = []
    self._events = events
    self._dev = dev
    return dev

  def __call__(self, *args):
    dev = self._dev or self._load()
    dev.make_current()
    specs = self.param_specs
    if len(args) != len(specs):
      raise TypeError(f"{self.module.name}: expected {len(specs)} arguments, got {len(args)}")
    slots = self._template.copy()
    keep = []                            # host arguments uploaded for this call
    for k, a in enumerate(args):
      buf = getattr(a, "_device_buf", None) if type(a) is not DeviceBuffer else a
      if buf is not None and buf.device is dev:
        slots[k] = buf.allocation.ptr
      else:
        dt, dims = specs[k]
        slots[k] = _device_pointer(dev, a, dt, dims, keep)
    return self._execute(dev, slots, _donated_blocks(self.aliases, args, slots, keep))

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
      for i, k in slot_of:
        a = args[k]
        buf = a._device_buf if type(a) is array_type else None
        if buf is not None and buf.device is dev:
          slots[i] = buf.allocation.ptr
        else:
          dt, dims = specs[i]
          slots[i] = _device_pointer(dev, a, dt, dims, keep)
      if aliases:
        return execute(dev, slots, _donated_blocks(aliases, [args[k] for k in kept], slots,
                                                   keep))
      return execute(dev, slots)
    call.keep = keep_fixed
    return call

  def _execute(self, dev, slots, donated=None):
    """Allocate the outputs and the arena into ``slots`` (parameters and constants already
    there), enqueue the program, and return the outputs.  ``donated``: {output: the donated
    argument's allocation it is written into}."""
    n = len(self.param_specs)
    alloc = dev.allocator.allocate
    outs = []
    for j, (nbytes, dims, dt) in enumerate(self._out_meta):
      a = (donated.get(j) if donated else None) or alloc(nbytes)
      outs.append(a)
      slots[n + j] = a.ptr
    arena = alloc(self.arena_bytes) if self.arena_bytes else None
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
        g = self._graph = _GraphReplay(dev, self._module_handle, self._ops, self._params, slots)
        log.debug("cuda: %s replays a CUDA graph of %d nodes", self.module.name,
                  len(g.graph.nodes))
      g.replay(slots, self._params)
      return True
    except Exception as e:   # noqa: BLE001 - any failure of the graph path: launch one by one
      self._graph = None
      self.graph_reason = f"the CUDA graph API failed: {type(e).__name__}: {e}"
      log.warning("cuda: %s launches its kernels one by one from now on (%s)", self.module.name,
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
      runs.append([(self.kernels[t[1]].name, type(self.kernels[t[1]]).__name__, t[2].elapsed_ms(
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
        for _ in _iterations(op, lambda prog: self._run(dev, prog, slots, base)):
          pass
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


# ---------------------------------------------------------------------------------------------
# planning and compiling
# ---------------------------------------------------------------------------------------------

def _cpu_planning():
  from ourjax.backends.cpu import backend as cpu_backend
  return cpu_backend


def _make_planner(cpu_be, module, info):
  class GpuPlanner(cpu_be._Planner):
    """The CPU backend's planner whose kernels become GPU kernels as they are added."""
    widen_narrow_dots = False   # bf16/f16 dots run on the tensor cores as they are
    concat_kernels = False      # (no GPU translation of concat.ConcatKernel yet)

    def _group_kernels(self, instrs, outputs, leafmap):
      # a dot's elementwise consumer (bias, activation) runs in the dot's kernel
      from ourjax.backends.cuda.dots import fuse_dot_epilogues
      kernels = fuse_dot_epilogues(super()._group_kernels(instrs, outputs, leafmap), outputs)
      # sibling column reductions (a batchnorm gradient's sums) read their input once
      return codegen.merge_column_reductions(kernels)

    def _plan_group(self, instr, vals, steps, want, last_use, pos, comp):
      patches = self._implicit_patches(instr, vals, steps, want, comp)
      if patches is not None:
        return patches
      return super()._plan_group(instr, vals, steps, want, last_use, pos, comp)

    def _implicit_patches(self, instr, vals, steps, want, comp):
      """Convolution patch matrices that their dots read in place from the input
      (``implicit_gemm``): only the inputs are planned (a kernel writes them unless they are
      buffers already) and an ``Im2colBuf`` stands for each matrix (a tuple of them for a
      tuple-rooted fusion of batch chunks); None for other groups."""
      from ourjax.backends.cuda import implicit_gemm as IG
      if instr.opcode != "fusion" or comp.root is instr or instr in want or \
         any(isinstance(k, tuple) and k[1] is instr for k in want):
        return None
      geos = IG.match(instr)
      if geos is None:
        return None
      users = [u for u in comp.instructions if any(o is instr for o in u.operands)]
      if instr.shape.is_tuple:   # each element read by one gte, read by one dot
        if any(u.opcode != "get-tuple-element" for u in users) or \
           sorted(u.attrs["index"] for u in users) != list(range(len(geos))):
          return None
        readers = {u.attrs["index"]: u for u in users}
      else:
        readers = {0: instr}
      for k, geo in enumerate(geos):
        x = readers[k]
        dots = [u for u in comp.instructions if any(o is x for o in u.operands)]
        if len(dots) != 1 or not IG.accepts(dots[0], x, geo, info):
          return None
      fc = instr.attrs["calls"]
      leafmap = {p: vals[o] for p, o in zip(fc.parameters, instr.operands)}
      srcs, todo = {}, []
      for geo in geos:
        base = geo.v
        while base.opcode == "reshape":
          base = base.operands[0]
        src = leafmap.get(base) if base.opcode == "parameter" else None
        if isinstance(src, K.Buf) and not isinstance(src, IG.Im2colBuf):
          srcs[id(geo.v)] = src
        elif id(geo.v) not in srcs:
          srcs[id(geo.v)] = self.temp(geo.v.dtype, geo.v.dims, f"{instr.name}.input")
          todo.append((geo.v, srcs[id(geo.v)]))
      if todo:
        needed = K._reachable([v for v, _ in todo], leafmap)
        instrs = [i for i in fc.instructions if id(i) in needed]
        for i in instrs:
          if i.opcode == "constant" and i.attrs["value"].ndim > 0:
            leafmap[i] = self.const_buf(i)
        for kern in self._group_kernels(instrs, todo, leafmap):
          self._add_kernel(steps, kern)
      self.module.note("implicit_gemm", f"%{instr.name}: {len(geos)} patch matri"
                       f"{'ces' if len(geos) > 1 else 'x'} read in place from "
                       f"{list(geos[0].in_dims)} ({geos[0].taps} kernel positions)")
      out = [IG.Im2colBuf(srcs[id(g.v)], g, r.dims, f"{instr.name}.{k}")
             for k, (g, r) in enumerate(zip(geos, (fc.root.operands if instr.shape.is_tuple
                                                   else [fc.root])))]
      return tuple(out) if instr.shape.is_tuple else out[0]

    def _plan_while(self, instr, vals, steps, want, last_use, pos):
      state = super()._plan_while(instr, vals, steps, want, last_use, pos)
      _double_buffer(steps[-1])
      return state

    def _add_kernel(self, steps, kernel):
      self._tag(kernel)
      for g in codegen.translate(kernel, self.temp, info, cpu_be.MAX_THREADS):
        self.kernels.append(self._tag(g, source=kernel))
        steps.append(cpu_be.KernelStep(g))

  return GpuPlanner(module)


def _double_buffer(step) -> None:
  """Run the while loop ``step`` double-buffered when it copies a next state back: the copies
  (a device copy per carried array per iteration, e.g. a scan's hidden state or a gradient
  accumulator) give way to renaming, iterations alternating which buffer of each pair holds
  the state (``_plan``'s ``loop``).  ``OURJAX_CUDA_DOUBLE_BUFFER=0`` keeps the copies."""
  if os.environ.get("OURJAX_CUDA_DOUBLE_BUFFER", "1").strip().lower() in ("0", "false", "no",
                                                                           "off"):
    return
  step.double_buffered = bool(step.copies_back)


def _renamed(program, swap):
  """``program`` with every buffer address spec in ``swap`` replaced by its partner (the same
  iteration run with each state buffer and its next buffer exchanged)."""
  out = []
  for op in program:
    kind = op[0]
    if kind == "k":
      pairs = [swap.get((int(i), int(o)), (int(i), int(o))) for i, o in zip(op[2], op[3])]
      out.append(("k", op[1], np.array([x[0] for x in pairs], np.int64),
                  np.array([x[1] for x in pairs], np.uint64)))
    elif kind == "copy":
      out.append(("copy", swap.get(op[1], op[1]), swap.get(op[2], op[2]), op[3]))
    elif kind == "repeat":
      out.append(("repeat", op[1], _renamed(op[2], swap),
                  None if op[3] is None else _renamed(op[3], swap), _renamed(op[4], swap)))
    elif kind == "while":
      out.append(("while", _renamed(op[1], swap), swap.get(op[2], op[2]),
                  _renamed(op[3], swap), op[4],
                  None if op[5] is None else _renamed(op[5], swap),
                  None if op[6] is None else _renamed(op[6], swap), _renamed(op[7], swap)))
    elif kind == "cond":
      out.append(("cond", swap.get(op[1], op[1]), op[2],
                  [_renamed(b, swap) for b in op[3]], op[4]))
    else:   # pragma: no cover
      raise AssertionError(kind)
  return out


def _merge_horizontal(planner, steps, info, cpu_be):
  """``steps`` with independent neighbouring kernels launched as one (``horizontal.py``); the
  planner's kernel list follows."""
  gone, first = set(), {}

  def replaced(merged, parts):
    merged.hlo_group = getattr(parts[0], "hlo_group", None)
    first[id(parts[0])] = merged
    gone.update(id(p) for p in parts)

  def name_of(parts):
    return parts[0].name + "_h"

  steps = horizontal.merge_steps(steps, info, cpu_be.KernelStep, name_of, replaced)
  if gone:
    kernels = []
    for k in planner.kernels:
      if id(k) in first:
        kernels.append(first[id(k)])
      if id(k) not in gone:
        kernels.append(k)
    planner.kernels = kernels
  return steps


def _plan(module: hlo.Module, info: codegen.DeviceInfo):
  cpu_be = _cpu_planning()
  entry = module.entry
  planner, steps, params, outs, aliases = cpu_be.plan_entry(
      module, lambda m: _make_planner(cpu_be, m, info), copy_kinds=(codegen.Copy,),
      elementwise_kinds=(codegen.Elementwise,))
  nparams = len(params)
  # (after donation's planning: an output in a donated parameter's buffer is that parameter's
  # Buf, so merging sees the kernels that read it and the one that writes over it)
  if horizontal.enabled():
    steps = _merge_horizontal(planner, steps, info, cpu_be)
  arena_bytes = cpu_be._assign(planner, steps)
  slot = nparams + len(outs)
  consts = []
  for c in planner.consts:
    c.slot = slot
    consts.append((slot, c.const_value))
    slot += 1
  arena_slot = slot
  nslots = slot + 1
  kernels = [k for k in planner.kernels if not k.is_copy]
  index = {id(k): n for n, k in enumerate(kernels)}

  def spec(buf):
    if buf.kind in ("param", "output", "const"):
      return (buf.slot, 0)
    return (arena_slot, int(buf.offset))

  def program(steps):
    out = []
    for s in steps:
      if isinstance(s, cpu_be.KernelStep):
        k = s.kernel
        if k.is_copy:
          if k.dst.nbytes:
            out.append(("copy", spec(k.dst), spec(k.src), k.dst.nbytes))
          continue
        sp = [spec(x) for x in k.buffers]
        out.append(("k", index[id(k)], np.array([x[0] for x in sp], np.int64),
                    np.array([x[1] for x in sp], np.uint64)))
      elif isinstance(s, cpu_be.WhileStep):
        out.append(loop(s))
      elif isinstance(s, cpu_be.CondStep):
        out.append(("cond", spec(s.selector), np.dtype(s.selector.dtype),
                    [program(br) for br in s.branches], s.name))
      else:   # pragma: no cover
        raise K.PlanError(f"unknown step {s!r}")
    return out

  def loop(s):
    """A ``repeat`` (trip count known) or host-driven ``while`` op.  A double-buffered loop
    (``_double_buffer``) leaves out the copies of its next state into the state: its odd
    iterations run the body with each (state, next) buffer pair swapped, and ``fixup``
    copies the state into place after an odd number of iterations."""
    skip = {(id(c.src), id(c.dst)) for c in s.copies_back} if s.double_buffered else set()
    body = program([x for x in s.body_steps
                    if not (isinstance(x, cpu_be.KernelStep) and x.kernel.is_copy
                            and (id(x.kernel.src), id(x.kernel.dst)) in skip)])
    cond = program(s.cond_steps)
    odd = odd_cond = None
    fixup = []
    if skip:
      swap = {}
      for c in s.copies_back:
        a, b = spec(c.src), spec(c.dst)
        swap[a], swap[b] = b, a
        fixup.append(("copy", b, a, c.dst.nbytes))
      odd, odd_cond = _renamed(body, swap), _renamed(cond, swap)
    if s.trip_count is not None:
      return ("repeat", s.trip_count, body, odd, fixup)
    return ("while", cond, spec(s.pred), body, s.name, odd_cond, odd, fixup)

  prog = program(steps)
  param_specs = [(p.dtype, p.dims) for p in entry.parameters]
  out_specs = [(np.dtype(o.dtype), tuple(o.dims)) for o in outs]
  return prog, kernels, consts, param_specs, out_specs, arena_bytes, nslots, aliases


#: Separates the PTX (and LLVM IR) texts of an executable's modules in ``exe.ptx``.
MODULE_SEPARATOR = "\n// ---- next module ----\n"


def emit(module: hlo.Module, info: codegen.DeviceInfo | None = None):
  """(plan, LLVM IR text, PTX texts) of ``module``: each kernel in an LLVM module of its own,
  kernels whose code is the same (a layer's dots and their gradients, repeated per layer) in
  one: a kernel's code depends on its buffers' shapes and types, not on where they are, since
  they are its parameters.  The distinct modules are turned into PTX at once on several
  threads and loaded as modules of their own; ``kernel.ptx_entry`` is (module, function)."""
  info = info or device_info()
  with _phases.phase("plan"):
    plan = _plan(module, info)
  kernels = plan[1]
  texts, names, first = [], [], {}
  with _phases.phase("emit"):
    for k in kernels:
      m = codegen.new_module(f"{module.name or 'ourjax'}.{k.name}", info.arch)
      k.emit_gpu(m)
      text = str(m)
      key = text
      for own in getattr(k, "function_names", lambda: [k.name])():
        key = re.sub(re.escape(own) + r"(?![0-9])", "\x00", key)
      if key not in first:
        first[key] = len(texts)
        texts.append(text)
        names.append(k.name)
      n = first[key]
      k.ptx_entry = (n, names[n])
  with _phases.phase("llvm"):
    ptx = codegen.compile_ptx_modules(texts, info.arch)
  return plan, MODULE_SEPARATOR.join(texts), ptx


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
  with _phases.phase("verify"):
    hlo.verify(module)
  cpu_be = _cpu_planning()
  why = cpu_be.native_unsupported(module)
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
