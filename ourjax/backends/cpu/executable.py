"""The CPU executable: object code of a compiled module and the Python that calls it.

    exe = CpuExecutable(module_or_maker, code, meta, llvm_ir)   # (cpu.backend.compile makes it)
    outs = exe(x, y)                   # tuple of numpy arrays
    call = exe.fast_caller(kept, fixed, Array)   # jit's dispatch path

What running a compiled program needs and nothing more (no emitter, planner or LLVM): an
executable found in the disk cache by a new process (``cpu/cache.py``: ``load_by_source``) is
made from its entry's meta and loaded code alone, without importing the compiler.  The entry
function is ``int ourjax_entry(void** slots, i64 tid, i64 nthreads)`` (``cpu/entry.py`` emits
it): slots hold the parameters, the outputs, the constants, the arena and (a parallel
program's, put there by the thread pool for each call) the dispatch's control block, as NumPy
array objects (``OBJECT_MODE``) or their data pointers.
"""
from __future__ import annotations

import base64
import ctypes
import math

import numpy as np

from ourjax.backends.cpu.threads import get_pool
from ourjax.lowering import hlo

__all__ = ["CpuExecutable", "ENTRY", "OBJECT_MODE", "ARENA_HEADER"]

#: The name of every program's native entry point.
ENTRY = "ourjax_entry"

# ---------------------------------------------------------------------------------------------
# NumPy arrays as objects
# ---------------------------------------------------------------------------------------------
# Reading ``a.ctypes.data`` costs microseconds; the entry function instead receives the
# addresses of the NumPy array objects (``id(a)``) and reads the data pointer and the flags from
# the ``PyArrayObject`` struct (NumPy's stable ABI: ``data`` right after the object header,
# ``flags`` after nd/dimensions/strides/base/descr).  The layout is checked once at import; when
# the check fails, slots carry data pointers instead.

_DATA_OFFSET = 16
_FLAGS_OFFSET = 64
_C_CONTIGUOUS_ALIGNED = 0x0001 | 0x0100


def _probe_object_layout() -> bool:
  try:
    if ctypes.sizeof(ctypes.c_void_p) != 8:
      return False
    samples = [np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((), np.int8),
               np.ones((2, 3), np.float64).T, np.arange(10, dtype=np.int16)[1::2],
               np.empty((0, 3), np.uint8)]
    for a in samples:
      data = ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0
      flags = ctypes.c_int32.from_address(id(a) + _FLAGS_OFFSET).value
      if a.size and data != a.ctypes.data:
        return False
      want = a.flags.c_contiguous and a.flags.aligned
      if bool((flags & _C_CONTIGUOUS_ALIGNED) == _C_CONTIGUOUS_ALIGNED) != want:
        return False
      if bool(flags & 0x0400) != a.flags.writeable:
        return False
    return True
  except Exception:  # pragma: no cover
    return False


OBJECT_MODE = _probe_object_layout()


# ---------------------------------------------------------------------------------------------
# recycled output blocks
# ---------------------------------------------------------------------------------------------

class _Owner:
  """Owns a pooled block while any array views it (NumPy keeps the object that exported the
  ``__array_interface__`` as the base of every view); returns it to the pool when freed."""
  __slots__ = ("__array_interface__", "_mem", "_pool")

  def __del__(self):
    try:
      self._pool._release(self._mem)
    except Exception:   # pragma: no cover - interpreter shutdown
      pass


class _OutputPool:
  """Large output arrays come from recycled blocks: a fresh ``np.empty`` of many megabytes
  page-faults on first touch (the kernel zeroes every page), which costs as much as a fast
  elementwise kernel; a block a dead result leaves behind is handed to the next result of the
  same size.  At most ``MAX_BLOCKS`` blocks per size and ``MAX_BYTES`` in all are kept."""
  MIN_BYTES = 1 << 20
  MAX_BLOCKS = 4
  MAX_BYTES = 1 << 30

  def __init__(self):
    self.free: dict = {}
    self.kept = 0

  def empty(self, shape, dtype):
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < self.MIN_BYTES:
      return np.empty(shape, dtype)
    lst = self.free.get(nbytes)
    mem = None
    while lst:
      try:
        mem = lst.pop()
        self.kept -= nbytes
        break
      except IndexError:   # pragma: no cover - raced with another thread
        break
    if mem is None:
      # (64-byte aligned: the planner may place a packed B, read with aligned vectors, in an
      # output this large before the output is written, arena._hosted's ``aligned_min``)
      raw = np.empty(nbytes + DEFAULT_ALIGN, np.uint8)
      mem = (raw, raw.ctypes.data + -raw.ctypes.data % DEFAULT_ALIGN, nbytes)
    owner = _Owner()
    owner._mem, owner._pool = mem, self
    owner.__array_interface__ = {"data": (mem[1], False), "shape": (nbytes,), "typestr": "|u1",
                                 "version": 3}
    return np.asarray(owner).view(dtype).reshape(shape)

  def _release(self, mem):
    n = mem[2]
    lst = self.free.setdefault(n, [])
    if len(lst) < self.MAX_BLOCKS and self.kept + n <= self.MAX_BYTES:
      lst.append(mem)
      self.kept += n


_outputs = _OutputPool()

#: The least arena a call allocates (an arena of no bytes still gets an aligned address).
ARENA_HEADER = 64

#: The alignment of the arena's buffers (``planning.ALIGN``, which compiled programs record in
#: their meta as ``align``).
DEFAULT_ALIGN = 64


# ---------------------------------------------------------------------------------------------
# the executable
# ---------------------------------------------------------------------------------------------

class CpuExecutable:
  """A module compiled for the CPU: ``exe(*arrays) -> tuple of numpy arrays``.

  ``fast_caller(kept, fixed)`` returns the dispatch fast path used by ``jit``: a function of the
  caller's arguments (NumPy arrays or ourjax Arrays already of the parameter types and shapes)
  returning the list of output arrays, or None when an argument is not C-contiguous (then the
  caller takes the general path)."""

  def __init__(self, module, compiled, meta: dict, llvm_ir: str | None):
    # ``module``: the optimised hlo.Module, or a function that makes it (an executable loaded
    # by its source key: ``load_by_source``; then the parameters and constants come from meta)
    if isinstance(module, hlo.Module):
      self._module, self._make_module = module, None
    else:
      self._module, self._make_module = None, module
    self.compiled = compiled
    self.meta = meta
    self.llvm_ir = llvm_ir
    addr = compiled.address(ENTRY)
    self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)(addr)
    self._fn_addr = addr
    if self._module is not None:
      self.param_shapes = [(p.dtype, p.dims) for p in module.entry.parameters]
      consts = {}
      for comp in module.computations:
        for i in comp.instructions:
          if i.opcode == "constant":
            consts[i.name] = i.attrs["value"]
    else:
      self.param_shapes = [(hlo.to_dtype(d), tuple(s)) for d, s in meta["params"]]
      consts = {n: np.frombuffer(base64.b64decode(data), np.dtype(d)).reshape(s)
                for n, (d, s, data) in meta["const_values"].items()}
    self.nparams = len(self.param_shapes)
    self.name = meta.get("name") or (module.name if self._module is not None else "")
    self.out_specs = [(tuple(s), hlo.to_dtype(d)) for d, s in meta["outputs"]]
    self.parallel = bool(meta["parallel"])
    # (the dispatch's control words: the thread pool's, in the last slot, threads.Pool.run)
    self.control_bytes = int(meta["control_bytes"])
    self.object_mode = bool(meta.get("object_mode"))
    self.arena_bytes = int(meta["arena_bytes"])
    self.nslots = int(meta["nslots"])
    self._consts = []
    for slot, name in meta["consts"]:
      v = consts[name]
      v = v if v.flags.c_contiguous and v.flags.aligned else np.array(v, order="C")
      self._consts.append((slot, v))
    self._free = []   # (slots, slots address, arena) triples not in use
    self.result_is_tuple = bool(meta["tuple_result"])
    # (output j, parameter k): output j is written into argument k's buffer and returned as it
    self.aliases = [tuple(a) for a in meta.get("aliases", ())]
    self.code_bytes = int(meta.get("code_bytes", 0))     # (the object code's size)
    self.align = int(meta.get("align", DEFAULT_ALIGN))

  @property
  def module(self) -> hlo.Module:
    """The optimised module this code was compiled from (made on first use when the code came
    from the disk cache by its source key)."""
    if self._module is None:
      self._module = self._make_module()
    return self._module

  def _new_resources(self, fixed=()):
    slots = (ctypes.c_void_p * self.nslots)()
    try:
      n = max(self.arena_bytes, ARENA_HEADER)
      align = self.align
      raw = np.zeros(n + align, np.uint8)
      # (64-byte aligned, as the planner aligns offsets: a packed B is stored and read with
      # aligned vectors, gemm.emit_pack_b_call)
      skip = -raw.ctypes.data % align
      arena = raw[skip:skip + n]
    except MemoryError:
      raise self._exhausted(self.arena_bytes, None) from None
    for slot, v in self._consts:
      slots[slot] = v.ctypes.data
    slots[self.nslots - 2] = arena.ctypes.data     # (the control block's follows: _run)
    for k, a in fixed:
      slots[k] = id(a) if self.object_mode else a.ctypes.data
    return slots, ctypes.addressof(slots), arena

  def _run(self, res) -> int:
    if self.parallel:
      # (the pool puts its control block, zeroed, in the last slot before any thread starts)
      return get_pool().run(self._fn, res[1], self._fn_addr,
                            (res[0], self.nslots - 1, self.control_bytes))
    return self._fn(res[1], 0, 1)

  def __call__(self, *args):
    res, outs, keep = self._bind(args)     # (keep: the arguments, alive through the call)
    rc = self._run(res)
    self._free.append(res)
    if rc:
      raise RuntimeError(f"{self.name}: the native entry refused its arguments")
    return tuple(outs)

  def _bind(self, args):
    """(resources, outputs, arguments) of a call: a slot table holding ``args`` (converted to
    the parameter types: the arrays returned last, which must live until the call returns)
    and fresh output arrays."""
    if len(args) != self.nparams:
      raise TypeError(f"{self.name}: expected {self.nparams} arguments, got {len(args)}")
    keep = []
    for k, (a, (dt, dims)) in enumerate(zip(args, self.param_shapes)):
      if not isinstance(a, np.ndarray) or a.dtype != dt:
        a = np.asarray(a, dtype=dt)
      if not (a.flags.c_contiguous and a.flags.aligned):
        a = np.array(a, order="C")
      if a.shape != dims:
        raise ValueError(f"{self.name}: argument {k} must be "
                         f"{hlo.dtype_name(dt)}{list(dims)}, got {a.dtype}{list(a.shape)}")
      keep.append(a)
    try:
      res = self._free.pop()
    except IndexError:
      res = self._new_resources()
    slots = res[0]
    om = self.object_mode
    for k, a in enumerate(keep):
      slots[k] = id(a) if om else a.ctypes.data
    try:
      if self.aliases:
        outs = self._aliased_outputs(keep)
      else:
        outs = [_outputs.empty(s, d) for s, d in self.out_specs]
    except MemoryError:
      raise self._exhausted_output() from None
    n = self.nparams
    for j, o in enumerate(outs):
      slots[n + j] = id(o) if om else o.ctypes.data
    return res, outs, keep

  def _aliased_outputs(self, params):
    """The output arrays of a call: argument k's own array for an output aliased to it (the
    caller donated it), fresh ones for the others."""
    alias = dict(self.aliases)
    outs = []
    for j, (s, d) in enumerate(self.out_specs):
      k = alias.get(j)
      if k is None:
        outs.append(_outputs.empty(s, d))
      else:
        a = params[k]
        outs.append(a if a.shape == s and a.dtype == d else a.view(d).reshape(s))
    return outs

  def _exhausted_output(self):
    """The error for a result that could not be allocated: the first one that still cannot
    be (asked again, on this error path only)."""
    for j, (shape, dtype) in enumerate(self.out_specs):
      try:
        _outputs.empty(shape, dtype)
      except MemoryError:
        return self._exhausted(math.prod(shape) * dtype.itemsize, j)
    return self._exhausted(sum(math.prod(s) * d.itemsize for s, d in self.out_specs), None)

  def _exhausted(self, nbytes: int, output):
    """``errors.ResourceExhaustedError`` for ``nbytes`` for result ``output`` (None: the
    temporaries, named by the largest values of the module)."""
    from ourjax.errors import ResourceExhaustedError, format_bytes
    if output is not None:
      shape, dtype = self.out_specs[output]
      what = f"result {output} ({hlo.dtype_name(dtype)}{list(shape)})"
    else:
      from ourjax.lowering.passes.buffer_assignment import nbytes as shape_bytes
      values = [i for c in self.module.computations for i in c.instructions
                if not i.shape.is_tuple]
      largest = sorted(values, key=lambda i: -shape_bytes(i.shape))[:3]
      what = ("its temporaries; the largest values: " + ", ".join(
          f"{i.opcode} {hlo.dtype_name(i.shape.dtype)}{list(i.shape.dims)} "
          f"({format_bytes(shape_bytes(i.shape))})" for i in largest))
    return ResourceExhaustedError(
        f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {nbytes} bytes "
        f"({format_bytes(nbytes)}) for {what} of {self.module.name}", nbytes, output)

  def fast_caller(self, kept, fixed, array_type):
    """The per-signature dispatch path (see the class docstring).  ``kept``: indices of the
    caller's arguments that are parameters 0.. (None: all of them, in order); ``fixed``: arrays
    passed as the remaining parameters (hoisted constants); ``array_type``: ourjax's Array
    class (its NumPy value is ``._npy``, or ``._value`` when it lives elsewhere).  Outputs
    aliased to parameters (``aliases``) are returned in the arguments' own arrays: the caller
    donates them (``backends.ModuleExecutable.fast_path`` checks that it may)."""
    if not self.object_mode:
      return None
    nparams = self.nparams
    nfixed = len(fixed)
    ndyn = nparams - nfixed
    kept = tuple(range(ndyn)) if kept is None else tuple(kept)
    if len(kept) != ndyn:
      return None
    fixed = [(ndyn + k, np.asarray(a)) for k, a in enumerate(fixed)]
    for k, a in fixed:
      dt, dims = self.param_shapes[k]
      if a.dtype != dt or a.shape != dims or not a.flags.c_contiguous:
        return None
    free = []
    new = self._new_resources
    out_specs = self.out_specs
    empty = _outputs.empty
    run = self._run
    slot_of = list(enumerate(kept))
    out_slots = list(range(nparams, nparams + len(out_specs)))
    if self.aliases:
      return self._aliased_fast_caller(fixed, slot_of, out_slots, array_type)

    def call(args):
      try:
        res = free.pop()
      except IndexError:
        res = new(fixed)
      slots = res[0]
      held = None
      for i, k in slot_of:
        a = args[k]
        t = type(a)
        if t is array_type:
          a = a._npy if a._npy is not None else a._value
        elif t is not np.ndarray:      # (a NumPy scalar: its 0-d array, alive until done)
          a = np.asarray(a)
          held = (held or []) + [a]
        slots[i] = id(a)
      try:
        outs = [empty(s, d) for s, d in out_specs]
      except MemoryError:
        raise self._exhausted_output() from None
      for j, o in zip(out_slots, outs):
        slots[j] = id(o)
      rc = run(res)
      free.append(res)
      return None if rc else outs
    call.resources = free      # (the last call's arena is [-1]: the profiler reads it)
    return call

  def _aliased_fast_caller(self, fixed, slot_of, out_slots, array_type):
    """``fast_caller``'s call for an executable with aliased outputs."""
    free = []
    new = self._new_resources
    empty = _outputs.empty
    run = self._run
    alias = dict(self.aliases)
    specs = [(s, d, alias.get(j)) for j, (s, d) in enumerate(self.out_specs)]
    nslots = len(slot_of)

    def call(args):
      try:
        res = free.pop()
      except IndexError:
        res = new(fixed)
      slots = res[0]
      vals = [None] * nslots
      for i, k in slot_of:
        a = args[k]
        t = type(a)
        if t is array_type:
          a = a._npy if a._npy is not None else a._value
        elif t is not np.ndarray:      # (a NumPy scalar: its 0-d array)
          a = np.asarray(a)
        vals[i] = a
        slots[i] = id(a)
      outs = []
      try:
        for s, d, k in specs:
          if k is None:
            outs.append(empty(s, d))
          else:
            a = vals[k]
            outs.append(a if a.shape == s and a.dtype == d else a.view(d).reshape(s))
      except MemoryError:
        raise self._exhausted_output() from None
      for j, o in zip(out_slots, outs):
        slots[j] = id(o)
      rc = run(res)
      free.append(res)
      return None if rc else outs
    call.resources = free
    return call

  def profile(self):
    """When compiled with profiling (``compile(module, profile=True)`` or
    ``OURJAX_CPU_PROFILE=1``): (cycles, "Kind name") of every kernel and loop of the last call
    as thread 0 saw them (a parallel kernel ends when all its pieces are done; a loop's cycles
    include its kernels'), most expensive first; [] without profiling.  ``ourjax.profiler``
    turns these into times per kernel."""
    if not self.meta.get("profile") or not self._free:
      return []
    from ourjax.backends.cpu import profiling
    counters = profiling.read_counters(self, self._free[-1][2])
    labels = [f"{it['kind']} {it['name']}" for it in self.meta["profile"]["items"]]
    return sorted(zip(counters.cycles.tolist(), labels), reverse=True)

  def __repr__(self):
    return f"<CpuExecutable {self.meta.get('name') or self.module.name}>"
