"""The CPU backend's native entry function: ``int ourjax_entry(void** slots, i64 tid, i64 n)``.

Every thread of the pool (``threads.Pool``) calls the entry at once with its ``tid`` of ``n``;
``_Emission`` emits it from the planned steps (``llvm/planning.py``):

* *Top level* (``emit_top``): thread 0 runs the steps in order.  A parallel kernel is cut into a
  fixed number of pieces (``Kernel.chunks``, independent of the thread count, so results are
  too); thread 0 opens it (a gate word counts the parallel steps opened so far), every thread
  claims pieces with an atomic counter of its own step, and thread 0 waits for the pieces to be
  finished (not for threads: a thread the OS has not scheduled holds up only pieces it has
  claimed) before anything that may read them.  Serial kernels run on thread 0 alone.
* *Loops and conditionals* (``while``/``conditional`` steps: scans, fori and while loops, cond
  and switch): thread 0 runs the control flow and the serial kernels inside it.  When parallel
  kernels that are worth it (``_is_job``) are inside, the stretch of top-level steps holding
  that control flow is a *region*: the other threads run a dispatch loop (``emit_worker``)
  while thread 0 publishes each such kernel it reaches as a *job*.  A job is one 64-bit claim word
  ``generation << 32 | site << 16 | pieces claimed`` (``site``: which kernel of the region);
  any thread claims a piece by compare-and-swap on it (so a thread that is late, having read
  an older job, can never claim a piece of a newer one), runs it and counts it finished, and
  thread 0 waits for ``chunks`` finished pieces before going on.  The region ends with an
  exit job.  Called with one thread, thread 0 runs a second copy of the region's code, the
  code it had without regions (kernels called whole, so LLVM inlines and specialises them
  where they are beside the entry: a job's kernel gets a function of its own for its pieces).
* Per-thread scratch (``Buf.slot_bytes``: a dot's packing buffers, ``dots.dot_scratch``): the
  buffer holds one area per thread that may run the kernel's pieces at once (thread 0's, which
  also runs kernels whole, may be larger), and each call passes the calling thread's own
  area, which the thread reuses for every piece it claims; a thread beyond the areas (a pool
  larger than the thread count the program was planned for) claims none of that kernel's
  pieces.
* Waiting (``waiting.py``: ``_emit_sync``): threads spin ``SPIN_PAUSES`` pauses on a word, then yield their
  CPU between checks, then sleep on a futex (Linux; elsewhere they keep yielding); whoever
  changes a word that has sleepers wakes them.

The control block: i32 words of the dispatch, in a block of the thread pool's own that the
caller puts in the slot after the arena's (``threads.Pool.run``), zeroed before a parallel call
(``control_bytes``): ``[0]`` gate, ``[1]`` its sleepers, ``[4 + 4p .. 6 + 4p]`` claimed,
finished, sleepers of top-level parallel step ``p``; then ``REGION_BYTES`` per region.  It is
runtime state of the pool (reused by every call, as XLA's executor keeps its own), not a
buffer of the program: the arena holds only the program's temporaries (after the profiling
counters, ``cpu/profiling.py``, when profiling).
"""
from __future__ import annotations

import numpy as np

from ourjax.backends.cpu import profiling, threads
from ourjax.backends.llvm import dedupe, gemm_im2col, irtext
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernel_key as _kk
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.kernel_key import kernel_key
from ourjax.backends.llvm.planning import CondStep, KernelStep, WhileStep

__all__ = ["ENTRY", "OBJECT_MODE", "WAIT_SPINS", "REGION_BYTES", "regions", "control_bytes",
           "has_loops", "has_control_flow", "stack_buffers"]

from ourjax.backends.cpu.executable import ENTRY  # noqa: E402  (the entry point's name)
# (how the threads wait for one another: cpu/waiting.py; its names are the entry's too)
from ourjax.backends.cpu.waiting import (  # noqa: E402,F401
    SPIN_PAUSES, WAIT_SPINS, _declare_sync, _emit_sync, _emit_wait, _futex_syscall)

# ---------------------------------------------------------------------------------------------
# NumPy arrays as objects: the layout probe lives with the executable (``executable.py``)
# ---------------------------------------------------------------------------------------------
from ourjax.backends.cpu.executable import (  # noqa: E402
    _C_CONTIGUOUS_ALIGNED, _DATA_OFFSET, _FLAGS_OFFSET, OBJECT_MODE)

# ---------------------------------------------------------------------------------------------
# regions: stretches of the top level whose loops or conditionals hold parallel kernels
# ---------------------------------------------------------------------------------------------

#: Bytes of a region's words in the control block: i32 generation (jobs published), i32 its
#: sleepers, i64 claim word, i32 finished pieces, i32 their sleepers (padded to 32).
REGION_BYTES = 32

#: The site of the exit job (a region has fewer kernels than this).
EXIT_SITE = 0xFFFF

#: Least work (``Kernel.work``) of a parallel kernel inside a loop or conditional that runs as a
#: job when the kernels are beside the entry (a program of few kernels, ``_is_job``); smaller
#: ones run whole on thread 0, inlined into the loop.  A job costs thread 0 its publication,
#: the claims and the wait for the last piece at every iteration, and its piece function is not
#: inlined and specialised in the loop: the RK4 scan's kernels of work 155k-975k (2-11 us each)
#: took 9-26 us each as jobs on the 2-core test host with its other core busy, 26 -> 36 ms a
#: call with yielding waits (its largest kernel, inlined, vectorizes a roll with plain loads;
#: its piece function with gathers).  Where the kernels are compiled apart (the LSTM's 73), every
#: parallel kernel is a job: the LSTM's backward loop kernel of work 671k took 106 us on one
#: thread, 60 us on two (profile, idle host).
LOOP_JOB_MIN_WORK = 1 << 20
#: Least bytes of a parallel copy inside a loop or conditional that runs as a job (a copy's
#: work counts elements: moving a scan's 1 MiB carry back took 48 us, as long as an elementwise
#: kernel of 4M work).
LOOP_JOB_MIN_COPY_BYTES = 1 << 20


def _scratch_slots(kernel):
  """How many threads at once ``kernel``'s per-thread scratch serves (the fewest of its
  buffers with ``slot_bytes``), or None when it has no such scratch."""
  n = [1 + (x.nbytes - (x.first_slot_bytes or x.slot_bytes)) // x.slot_bytes
       for x in kernel.scratch if x.slot_bytes]
  return min(n) if n else None


def _is_job(kernel, apart: bool) -> bool:
  """Whether ``kernel``, inside a loop or conditional, runs as a job of its region.  ``apart``:
  the program's many kernels are compiled in modules of their own (``backend.all_jobs``),
  where no call of them is inlined anyway: there every parallel kernel is a job."""
  if not kernel.parallel:
    return False
  if apart:
    return True
  if isinstance(kernel, K.CopyKernel):
    return kernel.dst.nbytes >= LOOP_JOB_MIN_COPY_BYTES
  return kernel.work >= LOOP_JOB_MIN_WORK


def _inner_kernels(steps, keep=lambda kernel: True) -> list:
  """The kernels inside the loops and conditionals of ``steps`` (any depth) that ``keep``."""
  out = []

  def walk(steps, inner):
    for s in steps:
      if isinstance(s, KernelStep):
        if inner and keep(s.kernel):
          out.append(s.kernel)
      elif isinstance(s, WhileStep):
        walk(s.cond_steps, True)
        walk(s.body_steps, True)
      elif isinstance(s, CondStep):
        for br in s.branches:
          walk(br, True)
  walk(steps, False)
  return out


def _inner_whole_kernels(steps, apart: bool) -> set:
  """ids of the kernels that loops and conditionals call whole (not jobs, ``_is_job``)."""
  return {id(k) for k in _inner_kernels(steps) if not _is_job(k, apart)}


def heavy_control_flow(steps) -> bool:
  """Whether a loop or conditional among ``steps`` runs a kernel large enough to run in
  parallel (``Kernel.parallel``): its program is compiled in several modules
  (``backend.SPLIT_HEAVY_LOOPS``)."""
  return any(k.parallel for k in _inner_kernels(steps))


def has_control_flow(steps) -> bool:
  """Whether ``steps`` hold a loop or a conditional (whose kernels, beside the entry, are
  inlined into it: ``backend.compile_groups``)."""
  return any(isinstance(s, (WhileStep, CondStep)) for s in steps)


def has_loops(steps) -> bool:
  """Whether ``steps`` (or the steps of a conditional among them) include a loop."""
  for s in steps:
    if isinstance(s, WhileStep):
      return True
    if isinstance(s, CondStep) and any(has_loops(b) for b in s.branches):
      return True
  return False


#: Largest temporary that lives on thread 0's stack instead of in the arena (``stack_buffers``).
STACK_MAX_BYTES = 64
#: Most bytes of such temporaries in one entry.
STACK_TOTAL_BYTES = 4096


def stack_buffers(steps) -> set:
  """ids of the small temporaries that live in the entry's own stack frame (allocas) rather
  than in the arena: a program with loops whose kernels are beside the entry (inlined into
  it), temporaries of at most ``STACK_MAX_BYTES`` that only thread 0 touches (serial kernels,
  loop predicates, conditional selectors; never a parallel kernel's, whose pieces other
  threads run).  LLVM then keeps a loop's scalar carry, its predicate and the values between
  its kernels in registers: in the arena, a store to one buffer may alias a load of another,
  so every iteration stored its state and loaded it again."""
  if not has_loops(steps):
    return set()
  bad, small = set(), {}

  def note(buf, serial):
    if buf.kind != "temp" or buf.slot_bytes is not None or buf.nbytes > STACK_MAX_BYTES:
      return
    small[id(buf)] = buf
    if not serial:
      bad.add(id(buf))

  def walk(steps):
    for s in steps:
      if isinstance(s, KernelStep):
        for buf in s.kernel.buffers:
          note(buf, not s.kernel.parallel)
      elif isinstance(s, WhileStep):
        note(s.pred, True)
        walk(s.cond_steps)
        walk(s.body_steps)
      elif isinstance(s, CondStep):
        note(s.selector, True)
        for br in s.branches:
          walk(br)
  walk(steps)
  out, total = set(), 0
  for k, buf in small.items():
    if k in bad:
      continue
    size = (max(buf.nbytes, 1) + 7) // 8 * 8
    if total + size > STACK_TOTAL_BYTES:
      break
    total += size
    out.add(k)
  return out


def _inner_parallel(steps, apart: bool) -> bool:
  """Whether a loop or conditional among ``steps`` has a job inside (``_is_job``, any
  depth)."""
  def any_parallel(steps):
    for s in steps:
      if isinstance(s, KernelStep) and _is_job(s.kernel, apart):
        return True
      if isinstance(s, WhileStep) and (any_parallel(s.cond_steps) or
                                       any_parallel(s.body_steps)):
        return True
      if isinstance(s, CondStep) and any(any_parallel(b) for b in s.branches):
        return True
    return False
  return any(isinstance(s, (WhileStep, CondStep)) and any_parallel([s]) for s in steps)


def _job_kernels(steps, apart: bool) -> list:
  """The parallel kernels inside the control flow of the regions of ``steps`` (the jobs)."""
  out = []
  for i, j in _serial_runs(steps):
    if _inner_parallel(steps[i:j], apart):
      out += _inner_kernels(steps[i:j], lambda kernel: _is_job(kernel, apart))
  return out


def _serial_runs(steps):
  """(i, j) of each maximal run ``steps[i:j]`` of steps that are not parallel kernels (what
  thread 0 runs alone at the top level), in order."""
  i = 0
  while i < len(steps):
    if steps[i].parallel:
      i += 1
      continue
    j = i
    while j < len(steps) and not steps[j].parallel:
      j += 1
    yield i, j
    i = j


def regions(steps, apart: bool) -> int:
  """How many regions the top-level ``steps`` have (serial runs with parallel kernels inside
  their control flow)."""
  return sum(1 for i, j in _serial_runs(steps) if _inner_parallel(steps[i:j], apart))


def _region_offset(steps) -> int:
  """Byte offset of the regions' words in the control block: after the gate and the words of
  the top-level parallel steps."""
  return 16 + 16 * sum(1 for s in steps if s.parallel)


def control_bytes(steps, apart: bool) -> int:
  """Bytes of the control block (the pool's, ``threads.Pool.run``): the top-level words and
  the regions', rounded up to 64."""
  n = _region_offset(steps) + REGION_BYTES * regions(steps, apart)
  return (n + 63) // 64 * 64


def _only_calls_out(fn) -> bool:
  """Whether kernel ``fn`` only calls code compiled elsewhere: one block, no loop, that calls
  a function its module does not define (a shared GEMM, with the descriptor of a convolution's
  patches and its block epilogue's context filled in beside it).  Such a kernel is marked
  ``optnone``: LLVM's O3 pipeline and code generator skip it (its -O0 code stores the same
  words and makes the same call), which was a tenth of the LLVM time of a ResNet's kernels."""
  import llvmlite.ir as ir
  if len(fn.blocks) != 1:
    return False
  outside = False
  for ins in fn.blocks[0].instructions:
    if isinstance(ins, ir.CallInstr):
      callee = ins.callee
      if not isinstance(callee, ir.Function) or not callee.is_declaration or \
         callee.name.startswith("llvm."):
        return False
      outside = True
  return outside


def _size_estimates(kernels, pkeys) -> list:
  """A size estimate of each kernel's IR before it is emitted, to cut the kernels into
  modules of about equal size (``_Emission``): the HLO instructions it evaluates
  (``kernel_info.covered``) and a few for its loops; nothing for a kernel alike to an earlier
  one (its planned key in ``pkeys`` met before: not emitted)."""
  from ourjax.backends.llvm import kernel_info
  seen, est = set(), []
  for k, key in zip(kernels, pkeys):
    if key is not None and key in seen:
      est.append(0)
      continue
    if key is not None:
      seen.add(key)
    est.append(len(kernel_info.covered(k)) + 4)
  return est


def _uses_threads(steps) -> bool:
  """Whether any step (in loops and conditionals too) runs a kernel in parallel: only then
  does the entry wait for or wake threads."""
  for s in steps:
    if isinstance(s, KernelStep):
      if s.parallel:
        return True
    elif isinstance(s, WhileStep):
      if _uses_threads(s.cond_steps) or _uses_threads(s.body_steps):
        return True
    elif isinstance(s, CondStep):
      if any(_uses_threads(br) for br in s.branches):
        return True
    elif getattr(s, "parallel", False):
      return True
  return False


# ---------------------------------------------------------------------------------------------
# emission
# ---------------------------------------------------------------------------------------------

class _Region:
  """The words of one region (byte ``offset`` in the control block) and its kernels' sites."""

  def __init__(self, em, offset: int):
    b = em.b
    self.em = em
    base = b.gep(em.control, [E.i64(offset)])
    i32p, i64p = E.I32.as_pointer(), E.I64.as_pointer()
    self.gen = b.bitcast(base, i32p)
    self.gen_sleepers = b.bitcast(b.gep(em.control, [E.i64(offset + 4)]), i32p)
    self.claim = b.bitcast(b.gep(em.control, [E.i64(offset + 8)]), i64p)
    self.finished = b.bitcast(b.gep(em.control, [E.i64(offset + 16)]), i32p)
    self.fin_sleepers = b.bitcast(b.gep(em.control, [E.i64(offset + 20)]), i32p)
    self.sites = {}     # id(kernel) -> site
    self.kernels = []   # by site

  def site(self, kernel) -> int:
    s = self.sites.get(id(kernel))
    if s is None:
      s = self.sites[id(kernel)] = len(self.kernels)
      self.kernels.append(kernel)
      if s >= EXIT_SITE:
        raise E.EmitterError(f"a loop region of more than {EXIT_SITE - 1} parallel kernels")
    return s


class _Emission:
  """The entry of a planned module (``steps``, the kernels of ``planner``): ``groups`` kernel
  modules besides the entry's (``backend.compile_groups``), ``object_mode``: parameter and
  output slots hold NumPy array objects, ``optnone``: an entry beside its kernels and without
  loops is left unoptimised (``backend.ENTRY_OPTNONE``), ``profile``: (counter offset,
  {id(kernel or step): item}) of the profiling instrumentation.  ``kernels_done(emission,
  module)``, when given, is called for each kernel module as soon as it is complete (the
  kernels are emitted in order, each module taking the next run of them: the backend starts
  compiling a module while the next ones are emitted).  ``apart``: every parallel kernel in a
  loop or conditional is a job (``backend.all_jobs``; default: when there are kernel
  modules).  ``entry_done(emission)``, when given with kernel modules, is called once the
  entry is emitted, before the kernels (``backend.ENTRY_FIRST``)."""

  def __init__(self, planner, steps, arena_slot: int, groups: int, object_mode: bool,
               optnone: bool, profile=None, kernels_done=None, stack=frozenset(),
               apart=None, entry_done=None):
    import llvmlite.ir as ir
    from ourjax.backends.cpu import jit
    self.ir = ir
    self.mod = jit.new_module(planner.module.name or "ourjax")
    E.use_outlined_math(self.mod, "shared")
    self.steps = steps
    self.arena_slot = arena_slot
    self.fns = {}
    self.piece_fns = {}     # (beside the entry: the jobs' piece functions, below)
    # kernels in modules of their own (compiled at once on several threads), the entry calling
    # them by name; a small module keeps its kernels beside the entry
    self.kernel_mods = []
    self.apart = bool(groups) if apart is None else apart
    self.object_mode = object_mode
    # a program with control flow compiled apart without making every parallel kernel in it a
    # job (``backend.SPLIT_HEAVY_LOOPS``): each kernel its loops and conditionals call whole
    # is emitted afresh beside a wrapper (``_wrapper``, what the entry calls) that computes its
    # pointers as the entry would, so LLVM inlines it there and compiles it as it did inlined
    # into the entry; a parallel one among them is emitted whole (``kernels.WHOLE_ATTR``)
    self.wrappers = {}      # id(kernel) -> the entry's declaration of its wrapper
    wrap = _inner_whole_kernels(steps, self.apart) if groups and not self.apart else set()
    # helper functions that kernels in several modules call (block epilogues alike): defined
    # in one module, declared in the others (gemm_im2col.HELPERS_ATTR)
    self.helpers = {}
    for g in range(groups):
      m = jit.new_module(f"{planner.module.name or 'ourjax'}.k{g}")
      E.use_outlined_math(m, "shared")
      setattr(m, gemm_im2col.HELPERS_ATTR, self.helpers)
      # (without loops and conditionals a parallel kernel is only called in its pieces,
      # emit_top: its piece count is a constant of its code, as beside the entry)
      setattr(m, K.PIECES_ONLY_ATTR, not has_control_flow(steps))
      setattr(m, K.WHOLE_ATTR, wrap)
      self.kernel_mods.append(m)
    # identical kernels (same body on the same shapes) are emitted once and shared: a kernel
    # whose planned description (kernel_key) was met before is not emitted at all, and the
    # others are keyed by their IR text too (dedupe.function_key).  The kernel modules take
    # consecutive runs of the kernels, of about equal size (``_size_estimates``, corrected as
    # the kernels are emitted; LLVM's time grows with a module's instructions, and the modules
    # compile at once), so that each is handed to LLVM (``kernels_done``) as soon as its run is
    # emitted, while the next ones are emitted
    kept, memos, planned, key_memo = {}, {}, {}, {}
    self.texts = {}         # id(module) -> {kernel name: its IR text} (printed once)
    self.n_distinct = 0
    self.n_unemitted = 0    # (kernels found alike before emission, not emitted)
    # (a kernel whose class and buffers no other kernel shares is alike to none: not keyed)
    heads = {}
    for k in planner.kernels:
      h = _kk.kernel_head(k)
      heads[h] = heads.get(h, 0) + 1
    pkeys = [kernel_key(k, key_memo) if h is not None and heads[h] > 1 and id(k) not in wrap
             else None for k, h in ((k, _kk.kernel_head(k)) for k in planner.kernels)]
    est = _size_estimates(planner.kernels, pkeys) if groups else []
    # a program compiled apart: its entry is emitted first and handed to LLVM (``entry_done``)
    # while the kernels are emitted; it calls each kernel by the kernel's own name, declared
    # here, or a kernel whose planned description an earlier one has (``kernel_key``: not
    # emitted) by that one's (a kernel found alike only by its IR text is a thunk to the
    # earlier one, ``_thunk``: the transformer's step had 49 thunks of the first kind, ~1 ms
    # of LLVM each)
    names = [k.name for k in planner.kernels]
    self.entry_first = bool(groups) and len(set(names)) == len(names)
    aliased = set()           # (kernels the entry calls by an earlier alike kernel's name)
    if self.entry_first:
      first_of = {}
      for k, pkey in zip(planner.kernels, pkeys):
        fty = ir.FunctionType(ir.VoidType(), [K._ptr_type(x) for x in k.buffers] + [E.I64] * 2)
        if id(k) in wrap:
          self.wrappers[id(k)] = ir.Function(
              self.mod, ir.FunctionType(ir.VoidType(), [E.I8.as_pointer().as_pointer(), E.I64]),
              name=k.name + "_w")
        elif pkey is not None and pkey in first_of and not _kk.CHECK:
          self.fns[id(k)] = self.fns[id(first_of[pkey])]
          aliased.add(id(k))
        else:
          self.fns[id(k)] = ir.Function(self.mod, fty, name=k.name)
          if pkey is not None:
            first_of.setdefault(pkey, k)
      self._emit_entry(planner, steps, object_mode, optnone, profile, stack)
      if entry_done is not None:
        entry_done(self)
    left = sum(est)           # (estimated size of the kernels not emitted yet)
    done_est = done = 0       # (estimated and actual size, in instructions, of those emitted)
    g = 0
    for k, pkey, e in zip(planner.kernels, pkeys, est or [0] * len(pkeys)):
      # module g's run ends once it holds its share of the projected total (the estimates of
      # the kernels left scaled by how the emitted ones came out)
      while (groups and g < groups - 1 and done and
             done * groups >= (g + 1) * (done + left * done / max(done_est, 1))):
        if kernels_done is not None:
          kernels_done(self, self.kernel_mods[g])
        g += 1
      left -= e
      done_est += e
      if id(k) in wrap:       # (emitted afresh, not shared: its wrapper has its pointers)
        m = self.kernel_mods[g]
        fn = k.emit(m)
        if _only_calls_out(fn):
          fn.attributes.add("noinline")
          fn.attributes.add("optnone")
        w = self._wrapper(m, k, fn)
        self.n_distinct += 1
        done += sum(len(blk.instructions) for blk in fn.blocks)
        if not self.entry_first:
          self.wrappers[id(k)] = ir.Function(self.mod, w.function_type, name=w.name)
        continue
      first = planned.get(pkey) if pkey is not None else None
      if first is not None and not _kk.CHECK:
        if self.entry_first:
          if id(k) not in aliased:
            self._thunk(self.kernel_mods[g], k, first)
        else:
          self.fns[id(k)] = first
        self.n_unemitted += 1
        continue
      m = self.kernel_mods[g] if groups else self.mod
      fn = k.emit(m)
      if _only_calls_out(fn):
        fn.attributes.add("noinline")
        fn.attributes.add("optnone")
      if groups:
        fn.linkage = ""                     # (external: the entry's module calls it)
      text = irtext.function_text(fn)
      key = dedupe.function_key(fn, memos.setdefault(id(m), {}), text)
      same = kept.get(key)
      if first is not None and same is not first:
        raise AssertionError(f"kernel_key gave kernels {k.name} and {first.name} one key, "
                             f"but their IR differs:\n{text}\n--- {first.name}:\n"
                             f"{self._text_of(first)}")
      if same is not None:
        if self.entry_first:
          self._thunk(m, k, same, fn)
        else:
          dedupe.drop_function(fn)
          self.fns[id(k)] = same
        if pkey is not None:
          planned.setdefault(pkey, same)
        continue
      self.n_distinct += 1
      self.texts.setdefault(id(m), {})[fn.name] = text
      if self.entry_first:
        done += sum(len(blk.instructions) for blk in fn.blocks)
        fn = self.fns[id(k)]                # (the entry's declaration, by the same name)
      elif groups:
        done += sum(len(blk.instructions) for blk in fn.blocks)
        fn = ir.Function(self.mod, fn.function_type, name=fn.name)
      kept[key] = self.fns[id(k)] = fn
      if pkey is not None:
        planned[pkey] = fn
    # a kernel that runs as a job of a region gets a second function for its pieces when the
    # kernels are beside the entry: the serial copy of the region's code then calls the first
    # from one place, and LLVM inlines and specialises it there as without the region
    while groups and g < groups:
      if kernels_done is not None:
        kernels_done(self, self.kernel_mods[g])
      g += 1
    if not groups:
      for k in _job_kernels(steps, False):
        if id(self.fns[id(k)]) in self.piece_fns:
          continue
        name, k.name = k.name, k.name + "_pieces"
        try:
          fn = k.emit(self.mod)
        finally:
          k.name = name
        self.piece_fns[id(self.fns[id(k)])] = fn
    if not self.entry_first:
      self._emit_entry(planner, steps, object_mode, optnone, profile, stack)

  def _text_of(self, fn) -> str:
    """The IR text of the kernel function named as ``fn``, as it was emitted (in whichever
    kernel module), or ``fn``'s own (a declaration) where none was."""
    for texts in self.texts.values():
      if fn.name in texts:
        return texts[fn.name]
    return irtext.function_text(fn)

  def _thunk(self, m, kernel, target, fn=None) -> None:
    """Define ``kernel``'s name in module ``m`` as a call of ``target`` (the entry's
    declaration of the alike kernel that is emitted), declared in ``m`` where needed; ``fn``:
    the kernel's own function in ``m``, emitted and found alike, whose body it replaces."""
    ir = self.ir
    fty = target.function_type
    callee = m.globals.get(target.name)
    if callee is None:
      callee = ir.Function(m, fty, name=target.name)
    if fn is None:
      fn = ir.Function(m, fty, name=kernel.name)
    else:
      fn.blocks.clear()
    fn.linkage = ""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(callee, list(fn.args))
    b.ret_void()

  def _emit_entry(self, planner, steps, object_mode, optnone, profile, stack) -> None:
    """The entry function ``ENTRY`` in ``self.mod``: the steps in order (``emit_top``),
    calling the kernels through ``self.fns`` and ``self.wrappers``."""
    ir = self.ir
    # (a program with parallel steps calls the waiting helpers of the process's runtime
    # library, cpu/threads.py, declared here: compiling a copy per program cost ~20 ms of LLVM)
    self.runtime = _uses_threads(steps) and threads.runtime_library() is not None
    if self.runtime:
      self.wait_fn, self.wait_ne_fn, self.wake_fn = _declare_sync(self.mod)
    else:
      self.wait_fn, self.wait_ne_fn, self.wake_fn = _emit_sync(self.mod)
    fty = ir.FunctionType(E.I32, [E.I8.as_pointer().as_pointer(), E.I64, E.I64])
    entry = ir.Function(self.mod, fty, name=ENTRY)
    self.entry = entry
    if optnone and not self.kernel_mods and not has_loops(steps):
      # (beside its kernels in one module: left unoptimised as in a module of its own, see
      # backend.ENTRY_SPEED_LEVEL; LLVM's O3 pipeline and code generator skip an optnone
      # function)
      entry.attributes.add("noinline")
      entry.attributes.add("optnone")
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    self.b = b
    args, self.tid, self.nthreads = entry.args
    self.args = args
    self.arena = b.load(b.gep(args, [E.i64(self.arena_slot)]))
    # (the control block: the slot after the arena's, see the module's docstring)
    self.control = b.load(b.gep(args, [E.i64(self.arena_slot + 1)]))
    self.ctl = b.bitcast(self.control, E.I32.as_pointer())
    self.ptr_cache = {}
    self.stack = stack      # ids of the temporaries on thread 0's stack (stack_buffers)
    self.data = {}
    if object_mode:
      # slots of parameters and outputs hold NumPy array objects: read their data pointers,
      # and refuse (return 1) parameters that are not C-contiguous and aligned
      fn = entry
      ok = ir.Constant(E.I1, 1)
      for slot in range(planner.n_params + planner.n_outputs):
        obj = b.load(b.gep(args, [E.i64(slot)]))
        self.data[slot] = b.load(b.bitcast(b.gep(obj, [E.i64(_DATA_OFFSET)]),
                                           E.I8.as_pointer().as_pointer()))
        if slot < planner.n_params:
          flags = b.load(b.bitcast(b.gep(obj, [E.i64(_FLAGS_OFFSET)]), E.I32.as_pointer()))
          good = b.icmp_unsigned("==", b.and_(flags, E.i32(_C_CONTIGUOUS_ALIGNED)),
                                 E.i32(_C_CONTIGUOUS_ALIGNED))
          ok = b.and_(ok, good)
      run = fn.append_basic_block("run")
      bad = fn.append_basic_block("bad_args")
      b.cbranch(ok, run, bad)
      b.position_at_end(bad)
      b.ret(E.i32(1))
      b.position_at_end(run)
    self.body_start = b.block
    self.region_offset = _region_offset(steps)     # (the regions' words follow the steps')
    self.region = None                             # the _Region being emitted
    self.n_regions = 0
    # (profile: (offset, {id(kernel or step): item}) of the counters, see cpu/profiling.py)
    self.prof = None if profile is None else profiling.Instrumentation(self, *profile)
    self.emit_top(steps)
    b.ret(E.i32(0))

  def ptr(self, buf):
    p = self.ptr_cache.get(id(buf))
    if p is not None:
      return p
    b = self.b
    saved = b.block
    # compute pointers where the body starts (they dominate every use)
    blk = self.body_start
    if blk.instructions:
      b.position_before(blk.instructions[0])
    else:
      b.position_at_start(blk)
    if buf.kind in ("param", "output") and buf.slot in self.data:
      raw = self.data[buf.slot]
    elif buf.kind in ("param", "output", "const"):
      raw = b.load(b.gep(self.args, [E.i64(buf.slot)]))
    elif id(buf) in self.stack:    # (an alloca of the entry's frame, in its first block)
      first = b.function.entry_basic_block
      if first.instructions:
        b.position_before(first.instructions[0])
      else:
        b.position_at_start(first)
      raw = b.alloca(self.ir.ArrayType(E.I8, max(buf.nbytes, 1)))
      raw.align = 64
      raw = b.bitcast(raw, E.I8.as_pointer())
    elif buf.home is not None:     # (a temporary inside an output not yet written)
      home = self.data.get(buf.home)
      if home is None:
        home = b.load(b.gep(self.args, [E.i64(buf.home)]))
      raw = b.gep(b.bitcast(home, E.I8.as_pointer()), [E.i64(buf.offset)])
    else:
      raw = b.gep(self.arena, [E.i64(buf.offset)])
    p = b.bitcast(raw, K._ptr_type(buf))
    b.position_at_end(saved)
    self.ptr_cache[id(buf)] = p
    return p

  def _wrapper(self, m, kernel, fn):
    """``void <kernel>_w(i8** slots, i64 tid)`` in module ``m``, beside ``fn`` (the kernel,
    made internal): calls it whole with the pointers ``ptr`` computes in the entry (from the
    slots the entry is called with: parameters' and outputs' data, constants, the arena),
    and the calling thread's area of per-thread scratch (``call_kernel``)."""
    ir = self.ir
    fn.linkage = "internal"
    w = ir.Function(m, ir.FunctionType(ir.VoidType(), [E.I8.as_pointer().as_pointer(), E.I64]),
                    name=kernel.name + "_w")
    b = ir.IRBuilder(w.append_basic_block("entry"))
    args, tid = w.args
    data, arena = {}, []

    def slot_data(slot):
      if slot not in data:
        obj = b.load(b.gep(args, [E.i64(slot)]))
        if self.object_mode:      # (the slot holds a NumPy array: its data pointer)
          obj = b.load(b.bitcast(b.gep(obj, [E.i64(_DATA_OFFSET)]),
                                 E.I8.as_pointer().as_pointer()))
        data[slot] = obj
      return data[slot]
    ptrs = []
    for x in kernel.buffers:
      if x.kind in ("param", "output"):
        raw = slot_data(x.slot)
      elif x.kind == "const":
        raw = b.load(b.gep(args, [E.i64(x.slot)]))
      elif x.home is not None:
        raw = b.gep(b.bitcast(slot_data(x.home), E.I8.as_pointer()), [E.i64(x.offset)])
      else:
        if not arena:
          arena.append(b.load(b.gep(args, [E.i64(self.arena_slot)])))
        raw = b.gep(arena[0], [E.i64(x.offset)])
      p = b.bitcast(raw, K._ptr_type(x))
      if x.slot_bytes is not None:
        off = b.mul(tid, E.i64(x.slot_bytes))
        extra = (x.first_slot_bytes or x.slot_bytes) - x.slot_bytes
        if extra:
          off = b.add(off, b.select(b.icmp_signed(">", tid, E.i64(0)), E.i64(extra),
                                    E.i64(0)))
        p = b.gep(p, [off])
      ptrs.append(p)
    b.call(fn, ptrs + [E.i64(0), E.i64(1)])
    b.ret_void()
    return w

  def call_kernel(self, kernel, tid, nthreads, pieces=False):
    """Call ``kernel``'s piece ``tid`` of ``nthreads`` (``pieces``: a piece of a region's job,
    through the kernel's piece function where it has one).  Scratch of one area per thread
    (``Buf.slot_bytes``) is passed as the calling thread's own area (the thread claims pieces
    only if it has one: ``_scratch_slots``)."""
    w = self.wrappers.get(id(kernel))
    if w is not None and not pieces:
      self.b.call(w, [self.args, self.tid])
      return
    fn = self.fns[id(kernel)]
    if pieces:
      fn = self.piece_fns.get(id(fn), fn)
    b = self.b
    args = []
    for x in kernel.buffers:
      p = self.ptr(x)
      if x.slot_bytes is not None:
        off = b.mul(self.tid, E.i64(x.slot_bytes))
        extra = (x.first_slot_bytes or x.slot_bytes) - x.slot_bytes
        if extra:       # (thread 0's area, first, is larger)
          off = b.add(off, b.select(b.icmp_signed(">", self.tid, E.i64(0)), E.i64(extra),
                                    E.i64(0)))
        p = b.gep(p, [off])
      args.append(p)
    b.call(fn, args + [tid, nthreads])

  def _mine(self, kernel):
    """Whether this thread may run pieces of ``kernel`` (i1): it has an area of the kernel's
    per-thread scratch (an executable planned for fewer threads than the pool runs leaves the
    others out; thread 0 always has one), or None when every thread may."""
    n = _scratch_slots(kernel)
    if n is None:
      return None
    return self.b.icmp_signed("<", self.tid, E.i64(n))

  # -- the control block (i32 words of the pool's, zeroed by the caller) ---------------------
  #   [0] gate: parallel steps opened so far    [1] sleepers on the gate
  #   [4 + 4p] claimed pieces of parallel step p, [5 + 4p] finished pieces, [6 + 4p] sleepers
  #   then REGION_BYTES per region (_Region)
  def _word(self, k):
    return self.b.gep(self.ctl, [E.i32(k)])

  def _wait_done(self, p, chunks):
    self.b.call(self.wait_fn, [self._word(5 + 4 * p), E.i32(chunks),
                               self._word(6 + 4 * p)])

  def emit_top(self, steps):
    """Top level.  Thread 0 runs the steps in order: it waits for the pieces of the previous
    parallel step to be finished before anything that may read them, runs serial steps alone,
    and opens each parallel step (the gate) for the others.  Every thread claims pieces of an
    open parallel step until none is left, so a thread that is late (not scheduled) holds up
    nothing but the pieces it has already claimed.  A serial run whose control flow holds
    parallel kernels is a region: meanwhile the other threads serve its jobs (``emit_job``,
    ``emit_worker``)."""
    ir, b = self.ir, self.b
    i32 = E.I32
    is0 = b.icmp_signed("==", self.tid, E.i64(0))
    prev = None       # (p, chunks) of a parallel step thread 0 has not waited for
    p = 0
    i = 0
    prof = self.prof
    if prof is not None:
      with b.if_then(is0):
        prof.begin()
    while i < len(steps):
      s = steps[i]
      if s.parallel:
        k = s.kernel
        chunks = k.chunks
        with b.if_else(is0) as (first, other):
          with first:
            if prev is not None:
              self._wait_done(*prev)
            if prof is not None:
              prof.mark()
            b.store_atomic(ir.Constant(i32, p + 1), self._word(0), "seq_cst", 4)
            b.call(self.wake_fn, [self._word(0), self._word(1)])
          with other:
            b.call(self.wait_fn, [self._word(0), ir.Constant(i32, p + 1), self._word(1)])
        fn = b.function
        head, body, done = (fn.append_basic_block(f"step{p}.{x}")
                            for x in ("claim", "run", "done"))
        mine = self._mine(k)
        if mine is None:
          b.branch(head)
        else:
          b.cbranch(mine, head, done)
        b.position_at_end(head)
        c = b.atomic_rmw("add", self._word(4 + 4 * p), ir.Constant(i32, 1), "seq_cst")
        b.cbranch(b.icmp_signed("<", c, ir.Constant(i32, chunks)), body, done)
        b.position_at_end(body)
        self.call_kernel(k, b.sext(c, E.I64), E.i64(chunks))
        d = b.atomic_rmw("add", self._word(5 + 4 * p), ir.Constant(i32, 1), "seq_cst")
        with b.if_then(b.icmp_signed("==", d, ir.Constant(i32, chunks - 1))):
          b.call(self.wake_fn, [self._word(5 + 4 * p), self._word(6 + 4 * p)])
        b.branch(head)
        b.position_at_end(done)
        prev = (p, chunks)
        p += 1
        i += 1
        if prof is not None:   # the step ends when its last piece does
          with b.if_then(is0):
            self._wait_done(*prev)
            prof.account(k, prof.marked())
          prev = None
        continue
      j = i
      while j < len(steps) and not steps[j].parallel:
        j += 1
      if _inner_parallel(steps[i:j], self.apart):
        region = _Region(self, self.region_offset + REGION_BYTES * self.n_regions)
        self.n_regions += 1
        with b.if_else(is0) as (first, other):
          with first:
            if prev is not None:
              self._wait_done(*prev)
            # (alone, thread 0 runs the code it would run without the region: its kernels
            # whole; with other threads, the region's jobs)
            with b.if_else(b.icmp_signed("==", self.nthreads, E.i64(1))) as (alone, shared):
              with alone:
                self.emit_serial(steps[i:j])
              with shared:
                self.region = region
                self.emit_serial(steps[i:j])
                self.region = None
                self._publish(region, E.i64(EXIT_SITE << 16))
          with other:
            self.emit_worker(region)
      else:
        with b.if_then(is0):
          if prev is not None:
            self._wait_done(*prev)
          self.emit_serial(steps[i:j])
      prev = None
      i = j
    if prev is not None:
      with b.if_then(is0):
        self._wait_done(*prev)
    if prof is not None:
      with b.if_then(is0):
        prof.end()

  def emit_serial(self, steps):
    ir, b = self.ir, self.b
    one, zero = E.i64(1), E.i64(0)
    prof = self.prof
    for s in steps:
      t0 = None if prof is None else prof.now()
      if isinstance(s, KernelStep):
        if self.region is not None and _is_job(s.kernel, self.apart):
          self.emit_job(s.kernel)
        else:
          self.call_kernel(s.kernel, zero, one)
      elif isinstance(s, WhileStep):
        fn = b.function
        head = fn.append_basic_block("while.cond")
        body = fn.append_basic_block("while.body")
        done = fn.append_basic_block("while.done")
        b.branch(head)
        b.position_at_end(head)
        self.emit_serial(s.cond_steps)
        pred = b.load(self.ptr(s.pred))
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(E.I8, 0)), body, done)
        b.position_at_end(body)
        self.emit_serial(s.body_steps)
        b.branch(head)
        b.position_at_end(done)
      elif isinstance(s, CondStep):
        fn = b.function
        sel = b.load(self.ptr(s.selector))
        nb = len(s.branches)
        if s.selector.dtype == np.bool_:
          k = b.select(b.icmp_unsigned("!=", sel, ir.Constant(E.I8, 0)), zero, one)
        else:
          k = b.sext(sel, E.I64)
          bad = b.or_(b.icmp_signed("<", k, zero), b.icmp_signed(">=", k, E.i64(nb)))
          k = b.select(bad, E.i64(nb - 1), k)
        done = fn.append_basic_block("cond.done")
        blocks = [fn.append_basic_block(f"cond.b{n}") for n in range(nb)]
        sw = b.switch(k, blocks[-1])
        for n, blk in enumerate(blocks[:-1]):
          sw.add_case(E.i64(n), blk)
        for blk, br in zip(blocks, s.branches):
          b.position_at_end(blk)
          self.emit_serial(br)
          b.branch(done)
        b.position_at_end(done)
      if prof is not None:
        prof.account(s.kernel if isinstance(s, KernelStep) else s, t0)

  # -- jobs of a region -----------------------------------------------------------------------
  #   a region's words (_Region): gen (i32, jobs published), its sleepers, the claim word
  #   (i64: gen << 32 | site << 16 | pieces claimed), finished pieces (i32), their sleepers

  def _publish(self, region, site_bits):
    """Thread 0: publish the next job of ``region`` (``site_bits``: i64 ``site << 16``) and
    wake the threads asleep on it; returns the job's generation (i64)."""
    b = self.b
    g = b.add(b.load_atomic(region.gen, "monotonic", 4), E.i32(1))
    g64 = b.zext(g, E.I64)
    b.store_atomic(b.or_(b.shl(g64, E.i64(32)), site_bits), region.claim, "seq_cst", 8)
    b.store_atomic(g, region.gen, "seq_cst", 4)
    b.call(self.wake_fn, [region.gen, region.gen_sleepers])
    return g64

  def _claim_pieces(self, region, kernel, gen, done):
    """Claim and run pieces of ``kernel``'s job of generation ``gen`` (i64) until none is
    left (or, for a late thread, another job is out), then branch to ``done``."""
    b = self.b
    chunks = kernel.chunks
    fn = b.function
    head = fn.append_basic_block("job.claim")
    try_ = fn.append_basic_block("job.try")
    run = fn.append_basic_block("job.run")
    mine = self._mine(kernel)
    if mine is None:
      b.branch(head)
    else:
      b.cbranch(mine, head, done)
    b.position_at_end(head)
    w = b.load_atomic(region.claim, "seq_cst", 8)
    cnt = b.and_(w, E.i64(0xFFFF))
    mine = b.and_(b.icmp_unsigned("==", b.lshr(w, E.i64(32)), gen),
                  b.icmp_unsigned("<", cnt, E.i64(chunks)))
    b.cbranch(mine, try_, done)
    b.position_at_end(try_)
    res = b.cmpxchg(region.claim, w, b.add(w, E.i64(1)), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(res, 1), run, head)
    b.position_at_end(run)
    self.call_kernel(kernel, cnt, E.i64(chunks), pieces=True)
    d = b.atomic_rmw("add", region.finished, E.i32(1), "seq_cst")
    with b.if_then(b.icmp_signed("==", d, E.i32(chunks - 1))):
      b.call(self.wake_fn, [region.finished, region.fin_sleepers])
    b.branch(head)

  def emit_job(self, kernel):
    """Thread 0, inside a region's control flow (several threads): run the parallel
    ``kernel`` as a job that the other threads join."""
    b = self.b
    region = self.region
    chunks = kernel.chunks
    site = region.site(kernel)
    fn = b.function
    b.store_atomic(E.i32(0), region.finished, "seq_cst", 4)
    g = self._publish(region, E.i64(site << 16))
    wait = fn.append_basic_block("job.wait")
    self._claim_pieces(region, kernel, g, wait)
    b.position_at_end(wait)
    b.call(self.wait_fn, [region.finished, E.i32(chunks), region.fin_sleepers])

  def emit_worker(self, region):
    """Threads other than 0 during a region: wait for a job newer than the last one served,
    claim its pieces, until the exit job."""
    b = self.b
    fn = b.function
    last = E.alloca_entry(b, E.I64)
    b.store(E.i64(0), last)
    top = fn.append_basic_block("worker.top")
    wait = fn.append_basic_block("worker.wait")
    dispatch = fn.append_basic_block("worker.job")
    out = fn.append_basic_block("worker.exit")
    b.branch(top)
    b.position_at_end(top)
    w = b.load_atomic(region.claim, "seq_cst", 8)
    g = b.lshr(w, E.i64(32))
    b.cbranch(b.icmp_unsigned("==", g, b.load(last)), wait, dispatch)
    b.position_at_end(wait)
    b.call(self.wait_ne_fn, [region.gen, b.trunc(b.load(last), E.I32), region.gen_sleepers])
    b.branch(top)
    b.position_at_end(dispatch)
    b.store(g, last)
    site = b.and_(b.lshr(w, E.i64(16)), E.i64(0xFFFF))
    sw = b.switch(site, out)
    for s, kernel in enumerate(region.kernels):
      blk = fn.append_basic_block(f"worker.site{s}")
      sw.add_case(E.i64(s), blk)
      b.position_at_end(blk)
      self._claim_pieces(region, kernel, g, top)
    b.position_at_end(out)


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
