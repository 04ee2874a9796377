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
their computations' kernels from the host, reading the predicate or branch index back.

Modules with what the native backends do not compile yet (complex or 8-bit float types, some
opcodes) and modules whose code generation fails run on the CPU backend instead, their arguments
copied to the host and results copied to the GPU (logged at debug level; a code generation
failure at warning level): never a wrong answer, only a slower one.
"""
from __future__ import annotations

import logging
import os
import threading

import numpy as np

from ourjax.backends.cuda import codegen, driver
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

class _Ready:
  """The event recorded after the work that produced some buffers."""
  __slots__ = ("event",)

  def __init__(self, event):
    self.event = event


class DeviceBuffer:
  """An array in GPU memory (``Array._device_buf``): ``shape``, ``dtype``, ``ptr``;
  ``to_host()`` copies it back, ``synchronize()`` waits until it has been computed."""
  __slots__ = ("device", "allocation", "shape", "dtype", "_ready", "__weakref__")

  def __init__(self, device, allocation, shape, dtype, ready: _Ready | None = None):
    self.device, self.allocation = device, allocation
    self.shape, self.dtype = tuple(shape), np.dtype(dtype)
    self._ready = ready

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


# ---------------------------------------------------------------------------------------------
# the executable
# ---------------------------------------------------------------------------------------------

class CudaExecutable:
  """A module compiled for the GPU: ``exe(*args) -> tuple of DeviceBuffer`` (``args``: Arrays,
  DeviceBuffers or host values).  ``ptx`` is the module's PTX text."""
  device_resident = True
  backend = "cuda"

  def __init__(self, module, ptx, llvm_ir, program, kernels, consts, param_specs, out_specs,
               arena_bytes, nslots):
    self.module, self.ptx, self.llvm_ir = module, ptx, llvm_ir
    self.program = program
    self.kernels = kernels               # GpuKernels launched (copies excluded), by index
    self.consts = consts                 # (slot, numpy value)
    self.param_specs, self.out_specs = param_specs, out_specs
    self.arena_bytes, self.nslots = arena_bytes, nslots
    self._dev = None

  def __repr__(self):
    return f"<CudaExecutable {self.module.name}: {len(self.kernels)} kernel(s)>"

  def _load(self):
    dev = driver.get_device(0)
    info = codegen.DeviceInfo(dev.arch, dev.multiprocessor_count)
    mod = dev.load_module(self.ptx, self.module.name)
    self._funcs = []
    for k in self.kernels:
      f = mod.function(k.name)
      grid, block, shared = k.launch(info)
      if shared > 48 * 1024:
        f.set_max_dynamic_shared(shared)
      self._funcs.append((f, tuple(int(x) for x in grid), tuple(int(x) for x in block),
                          int(shared)))
    self._module_handle = mod
    # per-launch parameter blocks, refilled in place on every call (the driver copies the
    # values at launch); a call that finds them in use (another thread) builds its own
    self._params = {}
    for op in _launch_ops(self.program):
      vals = np.zeros(len(op[2]), np.uint64)
      self._params[id(op)] = (vals, vals.ctypes.data + 8 * np.arange(len(vals), dtype=np.uint64))
    self._params_lock = threading.Lock()
    template = np.zeros(self.nslots, np.uint64)
    self._const_bufs = []
    for slot, value in self.consts:
      buf = DeviceBuffer.from_host(np.ascontiguousarray(value), dev)
      self._const_bufs.append(buf)
      template[slot] = buf.ptr
    self._template = template
    self._dev = dev
    return dev

  def __call__(self, *args):
    dev = self._dev or self._load()
    dev.make_current()
    if len(args) != len(self.param_specs):
      raise TypeError(f"{self.module.name}: expected {len(self.param_specs)} arguments, got "
                      f"{len(args)}")
    slots = self._template.copy()
    keep = []
    for k, (a, (dt, dims)) in enumerate(zip(args, self.param_specs)):
      slots[k] = _device_pointer(dev, a, dt, dims, keep)
    n = len(self.param_specs)
    outs = []
    alloc = dev.allocator.allocate
    for j, (dt, dims) in enumerate(self.out_specs):
      a = alloc(int(np.prod(dims, dtype=np.int64)) * dt.itemsize)
      outs.append((a, dt, dims))
      slots[n + j] = a.ptr
    arena = alloc(self.arena_bytes) if self.arena_bytes else None
    if arena is not None:
      slots[-1] = arena.ptr
    own = self._params_lock.acquire(blocking=False)
    try:
      self._run(dev, self.program, slots, self._params if own else None)
    finally:
      if own:
        self._params_lock.release()
    ready = _Ready(driver.Event(dev).record())
    # the arena and uploaded arguments return to the cache now: later work is stream-ordered
    del arena, keep
    return tuple(DeviceBuffer(dev, a, dims, dt, ready) for a, dt, dims in outs)

  def profile(self, *args, reps: int = 3):
    """Device milliseconds of each kernel launch of one call (median of ``reps`` calls):
    a list of (kernel name, kernel class, ms), copies included as ('copy', ...)."""
    dev = self._dev or self._load()
    runs = []
    for _ in range(reps + 1):           # the first call warms up
      timings = []
      self._timings = timings
      try:
        outs = self(*args)
      finally:
        self._timings = None
      for o in outs:
        o.synchronize()
      runs.append([(name, cls, e0.elapsed_ms(e1)) for name, cls, e0, e1 in timings])
    runs = runs[1:]
    return [(name, cls, float(np.median([r[i][2] for r in runs])))
            for i, (name, cls, _) in enumerate(runs[0])]

  _timings = None

  def _addr(self, slots, spec):
    slot, off = spec
    return int(slots[slot]) + off

  def _run(self, dev, program, slots, params=None):
    funcs = self._funcs
    for op in program:
      kind = op[0]
      timings = self._timings
      if timings is not None:
        e0 = driver.Event(dev, timing=True).record()
      if kind == "k":
        _, fi, idx, offs = op
        f, grid, block, shared = funcs[fi]
        if params is not None:
          vals, ptrs = params[id(op)]
          np.add(slots[idx], offs, out=vals)
          addr = ptrs.ctypes.data if len(vals) else 0
        else:
          keep, addr = driver.pointer_params(slots[idx] + offs)
        f.launch(grid, block, addr, shared)
        if timings is not None:
          timings.append((f.name, type(self.kernels[fi]).__name__, e0,
                          driver.Event(dev, timing=True).record()))
      elif kind == "copy":
        _, dst, src, nbytes = op
        dev.copy_device(self._addr(slots, dst), self._addr(slots, src), nbytes)
        if timings is not None:
          timings.append(("copy", f"{nbytes} B", e0, driver.Event(dev, timing=True).record()))
      elif kind == "while":
        _, cond, pred, body = op
        flag = np.zeros((), np.uint8)
        while True:
          self._run(dev, cond, slots, params)
          dev.copy_to_host(flag, self._addr(slots, pred))
          if not flag:
            break
          self._run(dev, body, slots, params)
      elif kind == "cond":
        _, sel, dt, branches = op
        v = np.zeros((), dt)
        dev.copy_to_host(v, self._addr(slots, sel))
        if dt == np.bool_:
          k = 0 if v else 1
        else:
          k = int(v)
          if not 0 <= k < len(branches):
            k = len(branches) - 1
        self._run(dev, branches[k], slots, params)
      else:   # pragma: no cover
        raise AssertionError(kind)


def _launch_ops(program):
  for op in program:
    if op[0] == "k":
      yield op
    elif op[0] == "while":
      yield from _launch_ops(op[1])
      yield from _launch_ops(op[3])
    elif op[0] == "cond":
      for br in op[3]:
        yield from _launch_ops(br)


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

  def __repr__(self):
    return f"<HostFallbackExecutable {self.module.name}: {self.reason}>"

  def __call__(self, *args):
    from ourjax.array import to_numpy
    dev = driver.get_device(0)
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

    def _add_kernel(self, steps, kernel):
      for g in codegen.translate(kernel, self.temp, info, cpu_be.MAX_THREADS):
        self.kernels.append(g)
        steps.append(cpu_be.KernelStep(g))

  return GpuPlanner(module)


def _plan(module: hlo.Module, info: codegen.DeviceInfo):
  cpu_be = _cpu_planning()
  planner = _make_planner(cpu_be, module, info)
  entry = module.entry
  params, outs, result = cpu_be.entry_buffers(entry)
  nparams = len(params)
  steps = planner.plan_computation(entry, params, result, direct=True)
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
        out.append(("while", program(s.cond_steps), spec(s.pred), program(s.body_steps)))
      elif isinstance(s, cpu_be.CondStep):
        out.append(("cond", spec(s.selector), np.dtype(s.selector.dtype),
                    [program(br) for br in s.branches]))
      else:   # pragma: no cover
        raise K.PlanError(f"unknown step {s!r}")
    return out

  prog = program(steps)
  param_specs = [(p.dtype, p.dims) for p in entry.parameters]
  out_specs = [(np.dtype(o.dtype), tuple(o.dims)) for o in outs]
  return prog, kernels, consts, param_specs, out_specs, arena_bytes, nslots


def emit(module: hlo.Module, info: codegen.DeviceInfo | None = None):
  """(plan, LLVM IR text, PTX text) of ``module``."""
  info = info or device_info()
  plan = _plan(module, info)
  kernels = plan[1]
  irmod = codegen.new_module(module.name or "ourjax", info.arch)
  for k in kernels:
    k.emit_gpu(irmod)
  ir_text = str(irmod)
  ptx = codegen.compile_ptx(ir_text, info.arch)
  return plan, ir_text, ptx


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
  _dump(module, ir_text, ptx)
  prog, kernels, consts, param_specs, out_specs, arena_bytes, nslots = plan
  return CudaExecutable(module, ptx, ir_text, prog, kernels, consts, param_specs, out_specs,
                        arena_bytes, nslots)
