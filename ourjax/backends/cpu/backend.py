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
   whole loop), or live in an output not yet written, dots' per-thread packing scratch too, and
   packed B in outputs of at least ``_OutputPool.MIN_BYTES`` (allocated 64-byte aligned).  In a
   program with loops whose kernels are beside the entry, the small
   temporaries only thread 0 touches (a loop's scalar carries and predicate) are allocas of the
   entry instead (``entry.stack_buffers``), which LLVM keeps in registers across iterations.
3. *Emission* (``cpu/entry.py``): one function per kernel (noalias pointer parameters, so
   loops vectorize) and the entry ``int ourjax_entry(void** slots, i64 tid, i64 nthreads)``
   calling them in order;
   identical kernels are emitted once and called for each: a kernel whose planned
   description (``llvm/kernel_key.py``) was met before is not emitted at all, and the others
   are also keyed by their IR text once the name is blanked (``llvm/dedupe.py``).  A program
   of many kernels, or of a few and no loop or conditional, or loops of large kernels
   (``SPLIT_HEAVY_LOOPS``: at least a module per core), puts
   them in several LLVM modules (``compile_groups``, consecutive runs of about equal size),
   optimised and code-generated at once on
   several threads outside llvmlite's lock (``jit.ObjectBuilds``: the entry's module first,
   ``ENTRY_FIRST``, then each kernel module as soon as its kernels are emitted) and loaded
   together; the entry,
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
5. *Caching* (``backends/disk_cache.py``; keys and warm starts: ``cpu/cache.py``): the object
   code is kept on disk under ``OURJAX_CACHE_DIR`` (default ``~/.cache/ourjax``;
   ``OURJAX_CACHE_DIR=off`` disables it), keyed by the module text, the constants' bytes, this
   backend's source, the settings that differ from their modules' import and the ``OURJAX_*``
   environment (``backends/settings.py``), LLVM and the CPU code is generated for
   (``cpu/host.py``); entries are written atomically (temporary file + ``os.replace``), record
   their own key and are checked (length, SHA-256, key) when read: a damaged or foreign entry
   is logged and recompiled.  A jitted program is first looked up by its module as lowered,
   before the passes (``source_key``: that text, the sources and settings of the passes and
   this backend), under which its code is stored with the parameters and constants of its
   optimised module and the entries of the libraries it calls: a program an earlier process
   compiled skips the passes as well as LLVM (``load_by_source``), imports neither (its
   executable, ``cpu/executable.py``, needs none of the compiler) and is loaded without LLVM
   (``cpu/loader.py``); its optimised module is made again only if asked for.

A module with something this backend does not compile yet (complex or 8-bit float types, opcodes
outside ``NATIVE_OPCODES``) runs on the reference backend instead (logged at debug level);
``native_unsupported(module)`` says why.  (The emitter handles float8_e4m3fn/e5m2, for the CUDA
backend; here they would need the GEMM and the vectorized paths checked first.)
"""
from __future__ import annotations

import logging
import os

from ourjax import _phases
from ourjax.backends.cpu import entry as _entry
from ourjax.backends.cpu import host, loader, profiling
from ourjax.backends.cpu.cache import (_blockings_hold, _link_recorded, cache_key,  # noqa: F401
                                       library_entries, load_by_source, source_key,
                                       store_by_source, tuned_entries)
from ourjax.backends.cpu.executable import ARENA_HEADER, CpuExecutable, _OutputPool  # noqa: F401
from ourjax.backends.cpu.libraries import (_ensure_runtime_symbols, _link_symbols,
                                           _provided_symbols, RUNTIME)
from ourjax.backends.cpu.entry import ENTRY, OBJECT_MODE
from ourjax.backends.cpu.threads import num_threads, set_num_threads
from ourjax.backends import disk_cache
from ourjax.backends.llvm import dedupe
from ourjax.backends.llvm import irtools
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm import planning
from ourjax.backends.llvm.arena import _assign
from ourjax.backends.llvm.planning import MAX_THREADS, KernelStep, plan_entry  # noqa: F401
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



#: Profiling instrumentation for every module compiled without an explicit ``profile``.
PROFILE = bool(os.environ.get("OURJAX_CPU_PROFILE"))


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# compile + cache
# ---------------------------------------------------------------------------------------------

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
  its modules compiling (``early["builds"]``, that ObjectBuilds) as soon as they are complete:
  the entry's first (``ENTRY_FIRST``: ``early["entry_submitted"]``), then the kernel modules
  as the kernels are emitted (without ``ENTRY_FIRST`` the caller submits the entry's,
  ``texts[0]``, last)."""
  with _phases.phase("plan"):
    planner, steps, params, outs, aliases = plan_entry(module, _Planner, reorder=True)
    if os.environ.get("OURJAX_CPU_HORIZONTAL", "1") != "0":
      # independent serial in-place updates in a row run side by side (llvm/horizontal.py)
      from ourjax.backends.llvm import horizontal
      steps = horizontal.merge_steps(steps, planner, KernelStep)
    nparams = len(params)
    planner.n_params, planner.n_outputs = nparams, len(outs)
    # (the arena starts with the profiling counters, when profiling; the dispatch's control
    # words are the thread pool's, cpu/entry.py)
    # (a program whose loops run large kernels is split as one without control flow is)
    groups = compile_groups(len(planner.kernels), _entry.has_control_flow(steps) and not (
        SPLIT_HEAVY_LOOPS and _entry.heavy_control_flow(steps)))
    apart = all_jobs(len(planner.kernels), groups)
    prof_meta, prof_index = profiling.plan_items(steps, 0) if profile else (None, None)
    extra = profiling.counter_bytes(prof_meta)
    # (small temporaries of thread 0 in a program with loops live on its stack, where LLVM
    # keeps them in registers: the kernels beside the entry are inlined into it)
    stack = _entry.stack_buffers(steps) if not groups else set()
    # (outputs from the pool's size up are 64-byte aligned: packed B may live in them too)
    arena = _assign(planner, steps, extra, skip=stack, host_scratch=True,
                    aligned_min=_OutputPool.MIN_BYTES)
  slot = nparams + len(outs)
  consts = []
  for c in planner.consts:
    c.slot = slot
    consts.append([slot, c.name])
    slot += 1
  arena_slot = slot
  nslots = slot + 2       # (the last: the control block, cpu/entry.py)
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
    builds.submit(text, KERNEL_SPEED_LEVEL, _provided_symbols(syms) + list(em.helpers)
                  + [f.name for f in em.fns.values()])    # (thunks call kernels elsewhere)
    submitted[id(m)] = text

  def entry_done(em):
    # the entry's module to LLVM first, while the kernels are emitted (it only declares them:
    # at O2, the entry of a program with loops took longer than any kernel module, and came
    # last); it defines nothing the kernel modules call
    with _phases.phase("emit.text"):
      text = dedupe.module_text(em.mod, {}, E.finalize_module_text)
    provided = ([f.name for f in em.fns.values()] + [w.name for w in em.wrappers.values()]
                + (_provided_symbols([RUNTIME]) if em.runtime else []))
    level = LOOP_ENTRY_SPEED_LEVEL if _entry.has_loops(steps) else ENTRY_SPEED_LEVEL
    builds.submit(text, level, provided)
    submitted[id(em.mod)] = text
    early["entry_submitted"] = True

  with _phases.phase("emit"):
    em = _entry._Emission(planner, steps, arena_slot, groups,
                          OBJECT_MODE, ENTRY_OPTNONE,
                          None if prof_meta is None else (prof_meta["offset"], prof_index),
                          kernels_done if builds is not None else None, stack, apart,
                          entry_done if builds is not None and ENTRY_FIRST else None)
  # (the pool runs a module with a parallel kernel at the top level or in its control flow)
  parallel = any(s.parallel for s in steps) or em.n_regions > 0
  symbols = list(gemms)
  symbols += sorted({"math:%s:%s:%d" % u for m in [em.mod] + em.kernel_mods
                     for u in E.math_symbols(m)})
  if em.runtime:
    symbols.append(RUNTIME)      # (the entry calls the runtime library's waiting helpers)
  meta = {"outputs": [[hlo.dtype_name(o.dtype), list(o.dims)] for o in outs], "consts": consts,
          "symbols": symbols,
          "control_bytes": _entry.control_bytes(steps, apart),
          "steps": [_step_label(st) for st in steps], "profile": prof_meta,
          "arena_bytes": arena, "nslots": nslots, "parallel": parallel,
          "object_mode": OBJECT_MODE,
          "tuple_result": module.entry.root.shape.is_tuple, "kernels": len(planner.kernels),
          "aliases": [[j, k] for j, k, _ in aliases],
          "alias_kinds": [kind for _, _, kind in aliases],
          "distinct_kernels": em.n_distinct, "unemitted_kernels": em.n_unemitted,
          "loops": _entry.has_loops(steps),
          "regions": em.n_regions, "align": planning.ALIGN}
  _link_symbols(symbols, wait=False)
  with _phases.phase("emit.text"):
    texts = [submitted.get(id(m)) or
             dedupe.module_text(m, em.texts.get(id(m), {}), E.finalize_module_text)
             for m in [em.mod] + em.kernel_mods]
  # (the names the modules define for one another: the kernels, and the helpers they share)
  names = (list(dict.fromkeys(em.fns[id(k)].name for k in planner.kernels if id(k) in em.fns))
           + list(em.helpers) + [w.name for w in em.wrappers.values()]
           if em.kernel_mods else [])
  for m in [em.mod] + em.kernel_mods:
    irtools.release(m)
  return meta, texts, names


# the disk cache itself (entry format, atomic writes, checks: disk_cache.read / write) serves
# both native targets
cache_dir = disk_cache.cache_dir


#: Kernels per module when a program's kernels are compiled in several modules at once: LLVM
#: optimises and generates code for one module on one thread, and whole programs of tens to
#: hundreds of kernels spent most of their compile time there.  A program with loops or
#: conditionals of fewer kernels than twice this stays in one module, where its kernels are
#: inlined into the loops and branches that call them (apart, each parallel kernel there runs
#: as a job of its region, ``entry._is_job``, which cost small loop bodies time), unless its
#: loops run large kernels (``SPLIT_HEAVY_LOOPS``).
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
  than 2 cores did).  So does a program with control flow whose kernels are apart anyway
  (many of them): the LSTM's 73 kernels went in 9 modules on 16 cores, its compile ending
  with the last module's ~8 kernels on one core."""
  cores = os.cpu_count() or 1
  if cores < 2 or n_kernels < 2:
    return 0
  groups = 0
  if n_kernels >= 2 * KERNELS_PER_MODULE:
    groups = max(2, min(2 * cores, n_kernels // KERNELS_PER_MODULE))
  if groups or (not control_flow and ENTRY_OPTNONE):
    groups = max(groups, min(cores, n_kernels))
  return groups


def all_jobs(n_kernels: int, groups: int) -> bool:
  """Whether every parallel kernel inside a loop or conditional runs as a job of its region
  (``entry._is_job``): where many kernels are compiled apart (``compile_groups``).  A loop
  program of fewer kernels compiled apart (``SPLIT_HEAVY_LOOPS``) keeps the jobs it would have
  beside its entry."""
  return groups > 0 and n_kernels >= 2 * KERNELS_PER_MODULE


#: A program of a few kernels whose loops or conditionals run kernels large enough to run in
#: parallel (``entry.heavy_control_flow``) is compiled as one without control flow is, a module
#: per core (``compile_groups``), instead of one module with its kernels inlined into its
#: loops: each kernel its loops call whole gets a wrapper beside it that computes its
#: pointers as the entry would (``entry._Emission._wrapper``), so LLVM compiles it as it did
#: inlined (the RK4 scan's two large kernels, apart with only their noalias arguments,
#: vectorised their rolls with gathers: 11 -> 30 ms a step).  LLVM's 135 ms of CPU on the RK4
#: scan's one module became 10 + 66 + 76 ms in three (2-core host, thread time), the step
#: as fast; loops of small kernels (scalar while loops) stay inlined, where their state lives
#: in registers.
SPLIT_HEAVY_LOOPS = True


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

#: A program compiled in several modules hands its entry's module to LLVM first, before its
#: kernels are emitted (``entry._Emission``: the entry declares each kernel by its own name, a
#: kernel alike an earlier one being a thunk to it): the entry of a program with loops is
#: optimised (``LOOP_ENTRY_SPEED_LEVEL``) and was the last and longest module of the LSTM's
#: compile (136 ms of LLVM against at most 99 for a kernel module, 2-core host).
ENTRY_FIRST = True


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
  key = None
  if cached:
    with _phases.phase("cache_key"):
      key = cache_key(module, profile)
    exe = load_by_source(key, module)
    if exe is not None:
      return exe
  dump = os.environ.get("OURJAX_DUMP")
  # (a program of several modules: LLVM starts on its entry's module and its kernel modules
  # while the kernels are emitted, see _plan_and_emit)
  early = {"loop_unrolling": LOOP_UNROLLING, "keep_ir": bool(dump)}
  from ourjax.backends.llvm import gemm_tune
  try:
    with gemm_tune.recording() as chosen:
      meta, texts, kernel_names = _plan_and_emit(module, profile, early)
    meta["gemm_blockings"] = chosen
    meta["gemm_tuned"] = tuned_entries(chosen)
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
      if builds is not None and early.get("entry_submitted"):
        objs = builds.results()     # (the entry's module first, then the kernel modules)
      elif builds is not None and builds.futures:
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
      cm = loader.load_object(obj, [ENTRY])
    if dump:
      _dump(dump, module.name, ir_text, optimized)
  except jit.CompileError as e:
    log.warning("cpu backend: LLVM failed on %s; running it on the reference backend: %s",
                module.name, str(e)[:2000])
    return reference.compile(module)
  meta["code_bytes"] = len(obj)
  # (the libraries' own entries, so that a warm start loads them without their builders)
  meta["libraries"] = library_entries(meta["symbols"])
  if cached and host.consistent():
    with _phases.phase("cache_write"):
      disk_cache.write(key, meta, obj, ir_text)
  return CpuExecutable(module, cm, meta, ir_text)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
