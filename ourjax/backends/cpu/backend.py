"""The native CPU backend: an HLO module becomes one LLVM module with one entry function.

    exe = compile(module)        # CpuExecutable (or the reference executable, see below)
    outs = exe(x, y)             # tuple of numpy arrays
    exe.llvm_ir                  # the LLVM IR text (Compiled.as_text(dialect="llvm"))

Compilation:

1. *Planning* (``llvm/planning.py``, shared with the GPU backend; ``_Planner`` sizes kernel
   pieces for this backend's threads): every instruction of the entry computation gets a buffer (tree):
   parameters and outputs are passed in by Python, array constants live in NumPy arrays the
   executable keeps, everything else is a temporary in one *arena*.  ``reshape``,
   ``get-tuple-element`` and ``tuple`` are aliases; each fusion or other op becomes kernels
   (``llvm/kernels.py``: ``plan_group``); ``while`` and ``conditional`` become control flow around
   the kernels of their computations.  Values that are outputs are computed straight into the
   output arrays; a ``dynamic-update-slice`` whose operand is a temporary at its last use
   updates that buffer in place.  Outputs aliased to donated parameters
   (``module.input_output_alias``, ``jit``'s donation) live in those parameters' buffers
   (``plan_entry``, ``backends/donation.py``; the GPU backend plans the same way), and a call
   returns the donated argument's own array for them.
2. *Buffer assignment* (``llvm/arena.py``: ``_assign``): temporaries get arena offsets by a
   first-fit over their live ranges (64-byte aligned; a buffer used inside a loop lives for the
   whole loop).  In a program with loops whose kernels are beside the entry, the small
   temporaries only thread 0 touches (a loop's scalar carries and predicate) are allocas of the
   entry instead (``entry.stack_buffers``), which LLVM keeps in registers across iterations.
3. *Emission* (``cpu/entry.py``): one function per kernel (noalias pointer parameters, so
   loops vectorize) and the entry ``int ourjax_entry(void** slots, i64 tid, i64 nthreads)``
   calling them in order;
   identical kernels are emitted once and called for each: a kernel whose planned
   description (``llvm/kernel_key.py``) was met before is not emitted at all, and the others
   are also keyed by their IR text once the name is blanked (``llvm/dedupe.py``).  A program
   of many kernels, or of a few and no loop or conditional (at least a module per core), puts
   them in several LLVM modules (``compile_groups``, consecutive runs of about equal size),
   optimised and code-generated at once on
   several threads outside llvmlite's lock (``jit.ObjectBuilds``: the kernel modules start as
   soon as their kernels are emitted, while the entry is) and loaded together; the entry,
   then in a module of its own, is not optimised (``ENTRY_SPEED_LEVEL``), nor is a kernel that
   only calls a shared GEMM (``entry._only_calls_out``).  The llvmlite modules are released
   once their text is taken (``irtools.release``: freed by reference counting, not by one
   large cyclic collection at the end of the compile).  The objects are
   packed into one cache entry.  The shared GEMMs a program's dots call start building from
   the module as lowered (``libraries.prefetch_for``), beside the passes.
   ``OURJAX_LOG_COMPILES=1`` logs the time of each phase (``ourjax/_phases.py``).
4. *Threads* (the entry's code: ``cpu/entry.py``; the pool: ``cpu/threads.py``, native
   workers that never take the GIL): every thread of the pool calls the entry at once.  A kernel with enough work is cut into a fixed number of
   pieces that the threads claim with an atomic counter; thread 0 runs the steps in order,
   opens each parallel step and waits for its pieces (not for threads: a thread the OS has not
   scheduled holds up only the pieces it claimed), waiting threads spin briefly then sleep on
   a futex.  Small kernels and the control flow run on thread 0; the large kernels inside
   loops and conditionals are *jobs* thread 0 publishes as it reaches them, whose pieces the
   other threads claim meanwhile.  A module without large kernels is called on the caller's
   thread only.  Piece boundaries do not depend on the thread count, so neither do results.
   ``compile(module, profile=True)`` (what ``ourjax.profiler`` and ``Compiled.profile`` ask
   for; ``OURJAX_CPU_PROFILE=1`` makes it the default) instruments the entry: thread 0 reads
   the cycle counter around every kernel and loop (``cpu/profiling.py``; ``exe.profile()``
   lists the last call's cycles).  The instrumented code is cached apart from the plain one.
5. *Caching* (``backends/disk_cache.py``): the object code is kept on disk under
   ``OURJAX_CACHE_DIR`` (default ``~/.cache/ourjax``; ``OURJAX_CACHE_DIR=off`` disables it),
   keyed by the module text, the constants' bytes, this backend's source, the LLVM version and
   the host CPU; entries are written atomically (temporary file + ``os.replace``), record
   their own key and are checked (length, SHA-256, key) when read: a damaged or foreign entry
   is logged and recompiled.  A jitted program is first looked up by its module as lowered,
   before the passes (``source_key``: that text, the sources and settings of the passes and
   this backend), under which its code is stored with the parameters and constants of its
   optimised module: a program an earlier process compiled skips the passes as well as LLVM
   (``load_by_source``), and its optimised module is made again only if asked for.

A module with something this backend does not compile yet (complex or 8-bit float types, opcodes
outside ``NATIVE_OPCODES``) runs on the reference backend instead (logged at debug level);
``native_unsupported(module)`` says why.  (The emitter handles float8_e4m3fn/e5m2, for the CUDA
backend; here they would need the GEMM and the vectorized paths checked first.)
"""
from __future__ import annotations

import base64
import ctypes
import hashlib
import logging
import math
import os
import sys

import numpy as np

from ourjax import _phases
from ourjax.backends.cpu import entry as _entry
from ourjax.backends.cpu import profiling
from ourjax.backends.cpu.libraries import (_ensure_runtime_symbols, _link_symbols,
                                           _provided_symbols, RUNTIME)
from ourjax.backends.cpu.entry import ENTRY, OBJECT_MODE
from ourjax.backends.cpu.threads import get_pool, num_threads, set_num_threads
from ourjax.backends import disk_cache
from ourjax.backends.llvm import dedupe
from ourjax.backends.llvm import irtools
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm import planning
from ourjax.backends.llvm.arena import _assign, _control_bytes, _profile_offset
from ourjax.backends.llvm.planning import MAX_THREADS, KernelStep, plan_entry
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")

__all__ = ["compile", "CpuExecutable", "native_unsupported", "NATIVE_OPCODES", "set_num_threads",
           "num_threads", "cache_dir"]

#: Opcodes the native backend compiles (anything else falls back to the reference backend).
NATIVE_OPCODES = frozenset(E.ELEMENTAL_OPS | K.HARD_OPS | {
    "parameter", "constant", "tuple", "get-tuple-element", "fusion", "while", "conditional",
    "copy", "attention"})


def native_unsupported(module: hlo.Module, opcodes=None, dtypes=None) -> str | None:
  """Why ``module`` cannot be compiled natively (None when it can); ``opcodes``, ``dtypes``:
  those the backend takes (default ``NATIVE_OPCODES`` and ``emitter.SUPPORTED_DTYPES``, the
  CPU's)."""
  opcodes = NATIVE_OPCODES if opcodes is None else opcodes
  dtypes = E.SUPPORTED_DTYPES if dtypes is None else dtypes
  entry = module.entry
  for p in entry.parameters:
    if p.shape.is_tuple:
      return f"tuple-shaped entry parameter %{p.name}"
  root = entry.root.shape
  for s in (root.tuple_shapes if root.is_tuple else (root,)):
    if s.is_tuple:
      return "nested tuple result"
  for comp in module.reachable_computations():
    for instr in comp.instructions:
      if instr.opcode not in opcodes:
        return f"opcode {instr.opcode} (%{instr.name})"
      for s in _leaf_shapes(instr.shape):
        if s.dtype not in dtypes:
          return f"element type {hlo.dtype_name(s.dtype)} (%{instr.name})"
  return None


def _leaf_shapes(shape):
  if shape.is_tuple:
    for s in shape.tuple_shapes:
      yield from _leaf_shapes(s)
  else:
    yield shape



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
      raw = np.empty(nbytes, np.uint8)
      mem = (raw, raw.ctypes.data)
    owner = _Owner()
    owner._mem, owner._pool = mem, self
    owner.__array_interface__ = {"data": (mem[1], False), "shape": (nbytes,), "typestr": "|u1",
                                 "version": 3}
    return np.asarray(owner).view(dtype).reshape(shape)

  def _release(self, mem):
    n = mem[0].nbytes
    lst = self.free.setdefault(n, [])
    if len(lst) < self.MAX_BLOCKS and self.kept + n <= self.MAX_BYTES:
      lst.append(mem)
      self.kept += n


_outputs = _OutputPool()


#: LLVM's loop unroller (OURJAX_CPU_UNROLL=0 turns it off: ~30% less compile time for
#: kernel-heavy modules, ~8% slower MLP steps, no change on large elementwise kernels).
LOOP_UNROLLING = os.environ.get("OURJAX_CPU_UNROLL", "1") not in ("0", "")



class _Planner(planning.Planner):
  """The shared planner (``llvm/planning.py``) cutting kernels into pieces for this backend's
  thread pool."""

  #: convolution patch matrices packed by the GEMM from the input (``llvm/gemm_im2col.py``);
  #: the GPU's subclass reads them in place its own way (``cuda/implicit_gemm.py``)
  implicit_im2col = True
  #: a loop's accumulators updated elementwise are computed in their state buffers (no copy)
  state_updates_in_place = True
  #: ... and an accumulator's dot adds into it (the shared GEMM adding into C)
  dot_accumulate = True
  #: values computed in the buffers of values that die where they are read elementwise
  reuse_buffers = True
  #: a dot's pieces read B packed once by a kernel of its own (dots.share_b)
  share_packed_b = True
  #: a loop's next state computed over a value of the body that dies there, copied back from it
  share_loop_next = True

  def threads(self) -> int:
    return num_threads()

  def _plan_group(self, instr, vals, steps, want, last_use, pos, comp):
    if instr.opcode == "attention":
      return self._attention(instr, vals, steps, want)
    if self.implicit_im2col:
      from ourjax.backends.llvm import gemm_im2col
      # (an input computed from a convolution output that dies here, or that later groups
      # read only through that input, is computed over it: im2col.plan_sources)
      def dying(x):
        if planning._dies_at(x, comp, last_use, pos):
          return None
        if x.parent is not comp or x.opcode in ("parameter", "constant", "while",
                                                "conditional", "tuple") or \
           planning._reshape_view(x) is not None or x.opcode in ("reshape", "get-tuple-element"):
          return False
        order = {i: k for k, i in enumerate(comp.instructions)}
        return [u for u in x.users if order.get(u, -1) > pos]
      patches = gemm_im2col.plan_patches(self, instr, vals, steps, want, comp,
                                         dying if self.reuse_buffers else None)
      if patches is not None:
        return patches
    return super()._plan_group(instr, vals, steps, want, last_use, pos, comp)

  def _attention(self, instr, vals, steps, want):
    """An ``attention`` instruction (``lowering/passes/attention.py``) as one
    ``AttentionKernel`` (``llvm/attention.py``) over its operands' buffers."""
    from ourjax.backends.llvm.attention import AttentionKernel
    (q, k, v), leafmap = self._attention_operands(instr, vals, steps, 3)
    out = want.get(instr) or self.temp(instr.dtype, instr.dims, instr.name)
    kern = AttentionKernel(self._kname(), instr, q, k, v, out, leafmap)
    self.module.note("attention", f"%{instr.name}: {kern.tasks} blocks of {kern.BQ} query rows "
                     f"x key tiles of {kern.BK}{' (causal)' if kern.causal else ''} in "
                     f"{kern.chunks} piece(s), {kern.stack_bytes() // 1024} KiB of stack a thread")
    self._add_kernel(steps, kern)
    return out

  def _add_kernel(self, steps, kernel):
    # the elementwise consumer of an implicit-im2col dot planned just before it (conv +
    # scale, shift, residual, relu) runs on each block the GEMM finishes, not as a pass of
    # its own (``gemm_im2col.fusable_epilogue``; OURJAX_CPU_GEMM_EPILOGUE=0: not)
    prev = steps[-1].kernel if steps and isinstance(steps[-1], planning.KernelStep) else None
    if self.implicit_im2col and isinstance(prev, K.Im2colDotKernel) and \
       isinstance(kernel, K.LoopKernel) and \
       os.environ.get("OURJAX_CPU_GEMM_EPILOGUE", "1") != "0" and prev.fuse_epilogue(kernel):
      self._tag(kernel)
      self.module.note("implicit_im2col", f"{kernel.name} ({getattr(kernel.hlo_group, 'name', '')}"
                       f") runs on the blocks of {prev.name} as the GEMM finishes them")
      return
    super()._add_kernel(steps, kernel)


# ---------------------------------------------------------------------------------------------
# buffer assignment
# ---------------------------------------------------------------------------------------------

ARENA_HEADER = 64


#: Profiling instrumentation for every module compiled without an explicit ``profile``.
PROFILE = bool(os.environ.get("OURJAX_CPU_PROFILE"))


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
    self.control_bytes = int(meta.get("control_bytes", ARENA_HEADER))
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
      raw = np.zeros(n + planning.ALIGN, np.uint8)
      # (64-byte aligned, as the planner aligns offsets: a packed B is stored and read with
      # aligned vectors, gemm.emit_pack_b_call)
      skip = -raw.ctypes.data % planning.ALIGN
      arena = raw[skip:skip + n]
    except MemoryError:
      raise self._exhausted(self.arena_bytes, None) from None
    for slot, v in self._consts:
      slots[slot] = v.ctypes.data
    slots[self.nslots - 1] = arena.ctypes.data
    for k, a in fixed:
      slots[k] = id(a) if self.object_mode else a.ctypes.data
    return slots, ctypes.addressof(slots), arena

  def _run(self, res) -> int:
    if self.parallel:
      res[2][:self.control_bytes] = 0    # (before any thread starts)
      return get_pool().run(self._fn, res[1], self._fn_addr)
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
    counters = profiling.read_counters(self, self._free[-1][2])
    labels = [f"{it['kind']} {it['name']}" for it in self.meta["profile"]["items"]]
    return sorted(zip(counters.cycles.tolist(), labels), reverse=True)

  def __repr__(self):
    return f"<CpuExecutable {self.meta.get('name') or self.module.name}>"




# ---------------------------------------------------------------------------------------------
# compile + cache
# ---------------------------------------------------------------------------------------------

_source_hash = None


def _backend_source_hash() -> str:
  """The SHA-256 of the sources that make the object code: the shared LLVM emitter and planner
  (``backends/llvm``, its math library included), this backend (``backends/cpu``) and the
  donation planner.  Listed by directory, not by importing them: a warm start that finds its
  program in the disk cache loads only what running it needs (importing the emitter's modules
  to ask for their file names cost a new process 60 ms)."""
  global _source_hash
  if _source_hash is None:
    backends = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = []
    for sub in ("llvm", "cpu"):
      for d, dirs, files in os.walk(os.path.join(backends, sub)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    paths.append(os.path.join(backends, "donation.py"))
    h = hashlib.sha256()
    for path in paths:
      with open(path, "rb") as f:
        h.update(os.path.relpath(path, backends).encode() + b"\0" + f.read())
    _source_hash = h.hexdigest()
  return _source_hash


def _hash_module(h, module: hlo.Module) -> None:
  """Feed ``module``'s text and its constants' bytes to the hash ``h``."""
  h.update(module.to_string().encode())
  for comp in module.computation_post_order():
    for i in comp.instructions:
      if i.opcode == "constant":
        v = np.ascontiguousarray(i.attrs["value"])
        h.update(f"{i.name}:{v.dtype.str}:{v.shape}".encode())
        h.update(v.tobytes())


def _host_tag(profile: bool) -> bytes:
  """What the object code depends on besides the module: LLVM, the host CPU, the thread
  counts and the code-generation settings."""
  import llvmlite
  import llvmlite.binding as llvm
  from ourjax.backends.cpu import jit
  from ourjax.backends.llvm import gemm_tune
  return (f"{llvmlite.__version__}/{llvm.llvm_version_info}/{jit.cpu_name()}/"
          f"{jit.cpu_features()}/{MAX_THREADS}/{num_threads()}/{OBJECT_MODE}/{LOOP_UNROLLING}/"
          f"{bool(profile)}/{os.environ.get('OURJAX_CPU_IMPLICIT_GEMM', '1')}/"
          f"{os.environ.get('OURJAX_CPU_GEMM_EPILOGUE', '1')}/"
          f"{os.environ.get('OURJAX_CPU_HORIZONTAL', '1')}/"
          f"{os.environ.get('OURJAX_CPU_ATTENTION', '1')}/{gemm_tune.cache_tag()}").encode()


def cache_key(module: hlo.Module, profile: bool = False) -> str:
  h = hashlib.sha256()
  _hash_module(h, module)
  h.update(_backend_source_hash().encode())
  h.update(repr(sorted((getattr(module, "input_output_alias", None) or {}).items())).encode())
  h.update(_host_tag(profile))
  return h.hexdigest()


# A warm start by the program's source: the key of the module as lowered, before the passes
# (``source_key``), finds an entry that holds what running the passes would give the backend
# (the code, the parameters and the constants of the optimised module), so a program compiled
# by an earlier process skips its optimisation passes too, not only LLVM.  Its optimised
# module is made again only when something asks for it (``CpuExecutable.module``).

_pipeline_hash = None


def _pipeline_source_hash() -> str:
  """The backend's source hash and that of everything between a lowered module and the
  backend (the HLO IR, the pipeline and its passes)."""
  global _pipeline_hash
  if _pipeline_hash is None:
    from ourjax.lowering import pipeline
    h = hashlib.sha256(_backend_source_hash().encode())
    root = os.path.dirname(pipeline.__file__)
    for d, dirs, files in sorted(os.walk(root)):
      dirs.sort()
      for fn in sorted(files):
        if fn.endswith(".py"):
          with open(os.path.join(d, fn), "rb") as f:
            h.update(fn.encode() + f.read())
    _pipeline_hash = h.hexdigest()
  return _pipeline_hash


def _settings() -> str:
  """The module-level settings the passes, the planner and the emitter read (upper-case
  scalars, which tests and users may change, and the pipeline's pass lists)."""
  from ourjax.backends.llvm import attention, concat, dots
  from ourjax.lowering import pipeline
  from ourjax.lowering import passes as _passes
  mods = [pipeline, sys.modules[__name__], _entry, K, E, concat, dots, attention]
  mods += [m for n, m in sorted(vars(_passes).items()) if type(m) is type(os)]
  parts = [f"{os.cpu_count()}/{os.environ.get('OURJAX_CPU_SIMPLE_DOT', '')}"]
  for m in mods:
    parts.extend(f"{m.__name__}.{k}={v!r}" for k, v in vars(m).items()
                 if k.isupper() and isinstance(v, (bool, int, float, str)))
  for k, v in vars(pipeline).items():
    if k.isupper() and isinstance(v, (list, tuple)):
      parts.append(f"{k}=" + ",".join(f"{n}:{getattr(f, '__module__', '')}."
                                      f"{getattr(f, '__qualname__', '')}" for n, f in v))
  return "\n".join(parts)


def source_key(module: hlo.Module, profile: bool = False) -> str:
  """The disk-cache key of ``module`` as lowered (before the passes): its text and constants,
  the sources and settings of the passes and the backend, and what ``cache_key`` adds."""
  h = hashlib.sha256(b"source\n")
  _hash_module(h, module)
  h.update(_pipeline_source_hash().encode())
  h.update(_settings().encode())
  h.update(_host_tag(profile))
  return "src-" + h.hexdigest()


def _blockings_hold(meta: dict) -> bool:
  """Whether a cached program's GEMM blockings are still the ones its classes would get
  (``gemm_tune.choices_hold``: a class tuned since it was compiled makes it again)."""
  chosen = meta.get("gemm_blockings")
  if not chosen:
    return True
  from ourjax.backends.llvm import gemm_tune
  return gemm_tune.choices_hold(chosen)


def load_by_source(key: str, make_module):
  """The executable cached under source key ``key`` (None: no such entry, or it would not
  load); ``make_module()`` makes its optimised module when something asks for it."""
  from ourjax.backends.cpu import jit
  with _phases.phase("cache_read"):
    hit = disk_cache.read(key)
  if hit is None or not _blockings_hold(hit[0]):
    return None
  meta, obj, ir_text = hit
  try:
    _ensure_runtime_symbols()
    _link_symbols(meta.get("symbols", ()))
    with _phases.phase("load"):
      cm = jit.load_object(obj, [ENTRY])
    return CpuExecutable(make_module, cm, meta, ir_text)
  except Exception as e:   # noqa: BLE001  (compiled again by the caller)
    log.warning("ourjax: compilation cache entry %s could not be loaded (%s); recompiling",
                key, e)
    return None


def store_by_source(key: str, exe) -> None:
  """Cache ``exe`` (a ``CpuExecutable`` fresh from ``compile``) under source key ``key``, with
  the parameters and the constants of its optimised module."""
  if not isinstance(exe, CpuExecutable) or not disk_cache.cache_dir():
    return
  obj = getattr(exe.compiled, "_object", None)
  if obj is None:
    return
  module = exe.module
  want = {name for _, name in exe.meta["consts"]}
  values = {}
  for comp in module.computations:
    for i in comp.instructions:
      if i.opcode == "constant" and i.name in want:
        v = np.ascontiguousarray(i.attrs["value"])
        values[i.name] = [v.dtype.str, list(v.shape), base64.b64encode(v.tobytes()).decode()]
  meta = dict(exe.meta, name=module.name, const_values=values,
              params=[[hlo.dtype_name(d), list(s)] for d, s in exe.param_shapes])
  with _phases.phase("cache_write"):
    disk_cache.write(key, meta, bytes(obj), exe.llvm_ir or "")


# the disk cache itself (entry format, atomic writes, checks: disk_cache.read / write) serves
# both native targets
cache_dir = disk_cache.cache_dir


def _step_label(step) -> str:
  if isinstance(step, KernelStep):
    k = step.kernel
    outs = ",".join(f"{w.name}{list(w.dims)}" for w in k.writes[:2])
    par = f" x{k.chunks}" if k.parallel else ""
    return f"{type(k).__name__} {k.name}{par} -> {outs}"
  return type(step).__name__


def _plan_and_emit(module: hlo.Module, profile: bool = False, early: dict | None = None):
  """(meta, LLVM IR texts, kernel names) for ``module`` (with profiling instrumentation when
  ``profile``): the entry's module first, then the kernel modules (``compile_groups``), whose
  kernels the entry's module declares by those names (none when there is one module).
  ``early``: a dict of ``jit.ObjectBuilds`` options; given, a program of several modules has
  its kernel modules compiling (``early["builds"]``, that ObjectBuilds) as soon as they are
  complete, while the entry is emitted (the caller then submits the entry's, ``texts[0]``)."""
  with _phases.phase("plan"):
    planner, steps, params, outs, aliases = plan_entry(module, _Planner, reorder=True)
    if os.environ.get("OURJAX_CPU_HORIZONTAL", "1") != "0":
      # independent serial in-place updates in a row run side by side (llvm/horizontal.py)
      from ourjax.backends.llvm import horizontal
      steps = horizontal.merge_steps(steps, planner, KernelStep)
    nparams = len(params)
    planner.n_params, planner.n_outputs = nparams, len(outs)
    # (the control block: the top-level steps' words, the loop regions' (cpu/entry.py), then
    # the profiling counters)
    groups = compile_groups(len(planner.kernels), _entry.has_control_flow(steps))
    region_bytes = _entry.control_bytes(steps, groups > 0) - _profile_offset(steps)
    prof_meta, prof_index = profiling.plan_items(steps, _entry.control_bytes(steps, groups > 0)) \
        if profile else (None, None)
    extra = region_bytes + profiling.counter_bytes(prof_meta)
    # (small temporaries of thread 0 in a program with loops live on its stack, where LLVM
    # keeps them in registers: the kernels beside the entry are inlined into it)
    stack = _entry.stack_buffers(steps) if not groups else set()
    arena = _assign(planner, steps, extra, skip=stack)
  slot = nparams + len(outs)
  consts = []
  for c in planner.consts:
    c.slot = slot
    consts.append([slot, c.name])
    slot += 1
  arena_slot = slot
  nslots = slot + 1
  gemms = sorted({sym for k in planner.kernels for sym in getattr(k, "symbols", ())})
  submitted = {}      # id(kernel module) -> its text, submitted to ``builds``
  builds = None
  if early is not None and groups:
    from ourjax.backends.cpu import jit
    builds = early["builds"] = jit.ObjectBuilds(groups + 1, **early)

  def kernels_done(em, m):
    # a complete kernel module to LLVM now, with the names of the process-wide code it calls
    # (its math libraries start building too)
    syms = gemms + sorted({"math:%s:%s:%d" % u for u in E.math_symbols(m)})
    _link_symbols(syms, wait=False)
    with _phases.phase("emit.text"):
      text = dedupe.module_text(m, em.texts.get(id(m), {}), E.finalize_module_text)
    builds.submit(text, KERNEL_SPEED_LEVEL, _provided_symbols(syms) + list(em.helpers))
    submitted[id(m)] = text

  with _phases.phase("emit"):
    em = _entry._Emission(planner, steps, arena_slot, groups,
                          OBJECT_MODE, ENTRY_OPTNONE,
                          None if prof_meta is None else (prof_meta["offset"], prof_index),
                          kernels_done if builds is not None else None, stack)
  # (the pool runs a module with a parallel kernel at the top level or in its control flow)
  parallel = any(s.parallel for s in steps) or em.n_regions > 0
  symbols = list(gemms)
  symbols += sorted({"math:%s:%s:%d" % u for m in [em.mod] + em.kernel_mods
                     for u in E.math_symbols(m)})
  if em.runtime:
    symbols.append(RUNTIME)      # (the entry calls the runtime library's waiting helpers)
  meta = {"outputs": [[hlo.dtype_name(o.dtype), list(o.dims)] for o in outs], "consts": consts,
          "symbols": symbols,
          "control_bytes": _control_bytes(steps, extra),
          "steps": [_step_label(st) for st in steps], "profile": prof_meta,
          "arena_bytes": arena, "nslots": nslots, "parallel": parallel,
          "object_mode": OBJECT_MODE,
          "tuple_result": module.entry.root.shape.is_tuple, "kernels": len(planner.kernels),
          "aliases": [[j, k] for j, k, _ in aliases],
          "alias_kinds": [kind for _, _, kind in aliases],
          "distinct_kernels": em.n_distinct, "unemitted_kernels": em.n_unemitted,
          "loops": _entry.has_loops(steps),
          "regions": em.n_regions}
  _link_symbols(symbols, wait=False)
  with _phases.phase("emit.text"):
    texts = [submitted.get(id(m)) or
             dedupe.module_text(m, em.texts.get(id(m), {}), E.finalize_module_text)
             for m in [em.mod] + em.kernel_mods]
  # (the names the modules define for one another: the kernels, and the helpers they share)
  names = ([em.fns[id(k)].name for k in planner.kernels] + list(em.helpers)
           if em.kernel_mods else [])
  for m in [em.mod] + em.kernel_mods:
    irtools.release(m)
  return meta, texts, names


#: Kernels per module when a program's kernels are compiled in several modules at once: LLVM
#: optimises and generates code for one module on one thread, and whole programs of tens to
#: hundreds of kernels spent most of their compile time there.  A program with loops or
#: conditionals of fewer kernels than twice this stays in one module, where its kernels are
#: inlined into the loops and branches that call them (apart, each parallel kernel there runs
#: as a job of its region, ``entry._is_job``, which cost small loop bodies time).
KERNELS_PER_MODULE = 8


def compile_groups(n_kernels: int, control_flow: bool = False) -> int:
  """How many kernel modules a program of ``n_kernels`` kernels is compiled in (0: one module
  with the entry): one per ``KERNELS_PER_MODULE`` kernels, at most two per core, none below
  twice that.  (Each module goes to LLVM as soon as its kernels are emitted,
  ``entry._Emission``: smaller ones start sooner and even out the threads' shares; a module
  costs LLVM 1-2 ms of its own.)

  A program without control flow (``control_flow`` False: no loop, no conditional) gets at
  least one module per core, as far as its kernels go: its entry only calls the kernels in
  order, unoptimised (``ENTRY_OPTNONE``), so a kernel compiles to the same loop beside it or
  apart (its piece bounds computed from its arguments instead of constants), and a kernel
  takes 1-30 ms of LLVM: in one module a few kernels took turns on one core while the others
  idled (a 16-core host compiled the 8 kernels of a per-example-gradients step no faster
  than 2 cores did)."""
  cores = os.cpu_count() or 1
  if cores < 2 or n_kernels < 2:
    return 0
  groups = 0
  if n_kernels >= 2 * KERNELS_PER_MODULE:
    groups = max(2, min(2 * cores, n_kernels // KERNELS_PER_MODULE))
  if not control_flow and ENTRY_OPTNONE:
    groups = max(groups, min(cores, n_kernels))
  return groups


def _dump(d: str, name: str, ir_text: str, optimized: str) -> None:
  """``OURJAX_DUMP=dir``: the LLVM IR as emitted and as optimized, next to the pass dumps."""
  try:
    os.makedirs(d, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    for suffix, text in ((".ll", ir_text), (".opt.ll", optimized)):
      with open(os.path.join(d, safe + suffix), "w") as f:
        f.write(text)
  except OSError as e:   # pragma: no cover
    log.debug("cpu backend: could not dump LLVM IR to %s: %s", d, e)


_MODULE_SEPARATOR = "\n; ---- next module ----\n"

#: LLVM's optimisation level for an entry compiled in a module of its own (its kernels in
#: others, ``compile_groups``): 0, code generated at -O0 too (``jit.compile_to_objects``).
ENTRY_SPEED_LEVEL = 0

#: An entry compiled in one module with its kernels is marked ``optnone``: it only calls kernels
#: and waits for threads, and at O3 it was a sixth to a quarter of the LLVM time of small
#: programs (a convolution, an attention), for no faster step.
ENTRY_OPTNONE = True

#: The level of an entry that runs loops (``while``: scans, fori loops), whose own code (the
#: loop, each step's dispatch to the threads and the wait) runs once per iteration and kernel:
#: left unoptimised it cost an RK4 scan of 1000 steps of 8 small kernels a fifth of its time
#: (34.2 ms against 27.7 ms, 2-core AVX-512 host).
LOOP_ENTRY_SPEED_LEVEL = 2


#: LLVM's optimisation level for the kernels (and for a program compiled as one module).
KERNEL_SPEED_LEVEL = 3


def compile(module: hlo.Module, *, profile: bool | None = None,  # noqa: A001  (backend API)
            verified: bool = False):
  """Compile ``module`` for this CPU (``CpuExecutable``), or return the reference backend's
  executable when something in it is not native yet (see ``native_unsupported``).  ``profile``
  adds the profiling instrumentation (default: ``OURJAX_CPU_PROFILE``); ``verified``: the
  caller has just verified ``module`` (``pipeline.optimize`` does, last), so it is not again."""
  profile = PROFILE if profile is None else bool(profile)
  from ourjax.backends import reference
  from ourjax.backends.cpu import jit
  if not verified:
    with _phases.phase("verify"):
      hlo.verify(module)
  _ensure_runtime_symbols()
  why = native_unsupported(module)
  if why is not None:
    log.debug("cpu backend: %s runs on the reference backend (%s)", module.name, why)
    return reference.compile(module)
  # (no key without a cache: hashing a large module's text costs tens of milliseconds)
  cached = disk_cache.cache_dir() is not None
  key = hit = None
  if cached:
    with _phases.phase("cache_key"):
      key = cache_key(module, profile)
    with _phases.phase("cache_read"):
      hit = disk_cache.read(key)
  if hit is not None and not _blockings_hold(hit[0]):
    hit = None
  if hit is not None:
    meta, obj, ir_text = hit
    try:
      _link_symbols(meta.get("symbols", ()))
      with _phases.phase("load"):
        cm = jit.load_object(obj, [ENTRY])
      return CpuExecutable(module, cm, meta, ir_text)
    except Exception as e:
      log.warning("ourjax: compilation cache entry %s could not be loaded (%s); recompiling",
                  key, e)
  dump = os.environ.get("OURJAX_DUMP")
  # (a program of several modules: LLVM starts on its kernel modules while the entry is
  # emitted, see _plan_and_emit)
  early = {"loop_unrolling": LOOP_UNROLLING, "keep_ir": bool(dump)}
  from ourjax.backends.llvm import gemm_tune
  try:
    with gemm_tune.recording() as chosen:
      meta, texts, kernel_names = _plan_and_emit(module, profile, early)
    meta["gemm_blockings"] = chosen
  except (E.EmitterError, E.PrefetchMiss) as e:
    builds = early.get("builds")
    if builds is not None:
      builds.abandon()
    log.debug("cpu backend: %s runs on the reference backend (%s)", module.name, e)
    return reference.compile(module)
  builds = early.get("builds")
  ir_text = _MODULE_SEPARATOR.join(texts)
  try:
    with _phases.phase("llvm"):
      # an entry in a module of its own only calls kernels and waits for threads: it is not
      # optimised (at O3 it took a third of a transformer step's LLVM time; unoptimised, a
      # tenth of that, and the step runs as fast)
      entry_level = LOOP_ENTRY_SPEED_LEVEL if meta["loops"] else ENTRY_SPEED_LEVEL
      levels = ([entry_level] + [KERNEL_SPEED_LEVEL] * (len(texts) - 1) if kernel_names
                else [KERNEL_SPEED_LEVEL])
      # (the shared GEMMs and the math libraries build meanwhile on threads of their own:
      # linked before loading)
      provided = list(kernel_names) + _provided_symbols(meta["symbols"])
      if builds is not None and builds.futures:
        # the kernel modules are under way: the entry's joins them (objects in module order)
        builds.submit(texts[0], levels[0], provided)
        objs = builds.results()
        objs = objs[-1:] + objs[:-1]
      else:
        if builds is not None:
          builds.abandon()
        objs = jit.compile_to_objects(texts, loop_unrolling=LOOP_UNROLLING, provided=provided,
                                      keep_ir=bool(dump), speed_levels=levels)
    _link_symbols(meta["symbols"])
    obj = jit.pack_objects([o for o, _ in objs])
    optimized = _MODULE_SEPARATOR.join(t for _, t in objs)
    with _phases.phase("load"):
      cm = jit.load_object(obj, [ENTRY])
    if dump:
      _dump(dump, module.name, ir_text, optimized)
  except jit.CompileError as e:
    log.warning("cpu backend: LLVM failed on %s; running it on the reference backend: %s",
                module.name, str(e)[:2000])
    return reference.compile(module)
  meta["code_bytes"] = len(obj)
  if cached:
    with _phases.phase("cache_write"):
      disk_cache.write(key, meta, obj, ir_text)
  return CpuExecutable(module, cm, meta, ir_text)
