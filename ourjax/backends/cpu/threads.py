"""The CPU backend's thread pool: native worker threads that never touch Python.

A parallel executable's entry (``cpu/entry.py``) is called at once on every thread of the pool
with its ``tid`` of ``n``.  The workers are POSIX threads started through ``pthread_create``
(ctypes) on a small function of our own, compiled once per process by llvmlite:

* ``ourjax_pool_worker(arg)``: wait until the control block's *generation* word changes, call
  the published entry ``fn(slots, tid, n)``, count itself *done*, and wait again; a job whose
  ``fn`` is null ends the thread (``set_num_threads`` retires a pool that way).
* ``ourjax_pool_run(ctl, fn, slots, n)``: publish the job, bump the generation and wake the
  sleepers, run thread 0's part, then wait until the ``n - 1`` workers are done (a null ``fn``
  only publishes: the workers end).

Waiting (``waiting._emit_sync``): spin a little, then yield the CPU between checks, then sleep on
a futex; so a training loop that calls the same executable back to back finds its workers still
awake, and an idle process has them asleep.  The three waiting helpers (``ourjax_wait``,
``ourjax_wait_ne``, ``ourjax_wake``) live in the pool's module, which is the process's *runtime
library*: built once per process (read from the disk cache, or compiled and stored there) and
registered with LLVM's symbol table (``runtime_library``), so that an entry declares them
instead of compiling its own copy (about 20 ms of LLVM per parallel program).

Why not Python threads: a worker that is a Python thread must take the GIL to return from its
semaphore and again to report back, one worker after another; on 16 cores that cost
0.5-1 ms per call (the profiler's *thread pool* row), more than many whole kernels.  Here
``pool_run`` is one ctypes call (it drops the GIL once) and the wake-up is one futex call.

A call that finds the pool busy (another Python thread is in it) runs on its caller's thread
alone, as does every call where the native pool cannot be built (no ``pthread_create``).

The entry's own dispatch words (``entry.py``'s control block: the gate, each parallel step's
claimed and finished pieces, the loop regions' jobs) are runtime state of the pool, not
buffers of the program: ``run`` puts the pool's block (grown to the largest a program has
asked for, zeroed) in the call's slot for it.  Calls take the pool one at a time (``_busy``);
a call that runs alone beside a busy pool (or a reentrant one) takes a spare block of its own
(``_spare_control``), kept for the next such call.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

import numpy as np

__all__ = ["num_threads", "set_num_threads", "get_pool", "Pool"]

log = logging.getLogger("ourjax.cpu")

#: Control block layout (bytes): each word on its own cache line, so that workers polling the
#: generation do not share a line with the done counter they bump.
_GEN, _GEN_SLEEPERS, _DONE, _DONE_SLEEPERS, _JOB = 0, 64, 128, 192, 256
_CTL_BYTES = 320          # job: fn (i64 at 256), slots (i64 at 264), n (i64 at 272)
_ARG_BYTES = 64           # per worker: ctl pointer (i64 at 0), tid (i64 at 8)

_retired = []             # control blocks of closed pools (kept: see Pool.close)
_spare = []               # entries' control blocks of calls that ran alone (_spare_control)
_native = None            # (module, worker address, run, pthread_create, pthread_detach)
_native_lock = threading.Lock()


def _build():
  """Compile the pool's two functions (once per process); None when threads cannot start."""
  global _native
  with _native_lock:
    if _native is not None:
      return _native or None
    try:
      libc = ctypes.CDLL(None, use_errno=True)
      create = libc.pthread_create
      detach = libc.pthread_detach
    except (OSError, AttributeError):
      log.debug("no pthread_create in this process: the CPU backend runs on one thread")
      _native = False
      return None
    create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
    create.restype = ctypes.c_int
    detach.argtypes = [ctypes.c_ulong]
    detach.restype = ctypes.c_int
    cm = runtime_library()
    if cm is None:
      _native = False
      return None
    run = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_int64)(cm.address("ourjax_pool_run"))
    _native = (cm, cm.address("ourjax_pool_worker"), run, create, detach)
    return _native


#: What the runtime library defines: the pool's two functions and the entries' waiting helpers.
SYNC_SYMBOLS = ("ourjax_wait", "ourjax_wait_ne", "ourjax_wake")
RUNTIME_SYMBOLS = ("ourjax_pool_worker", "ourjax_pool_run") + SYNC_SYMBOLS

_runtime = None           # the runtime library's CompiledModule (False: it failed)
_runtime_lock = threading.Lock()


def runtime_library():
  """The process's runtime library (a ``jit.CompiledModule`` defining ``RUNTIME_SYMBOLS``),
  built on first use: its object code read from the disk cache (``disk_cache``, keyed by the
  sources that emit it, LLVM and the CPU), or compiled (O3) and stored there; its waiting
  helpers registered (``loader.define``) so that entries which declare them link
  to them.  None when it cannot be built (the entries then define their own helpers)."""
  global _runtime, _runtime_pending
  if _runtime is not None:
    return _runtime or None
  with _runtime_lock:
    if _runtime is not None:
      return _runtime or None
    fut, _runtime_pending = _runtime_pending, None
    try:
      cm = None
      if fut is not None:             # (started by prefetch_runtime)
        from ourjax import _phases
        with _phases.phase("library.wait"):
          try:
            cm = fut.result()
          except Exception:   # noqa: BLE001  (built again here, where it raises)
            cm = None
      if cm is None:
        cm = _load_or_compile()
      from ourjax.backends.cpu import loader
      for name in SYNC_SYMBOLS:
        loader.define(name, cm.address(name))
      _runtime = cm
    except Exception as e:   # noqa: BLE001  (no runtime library: each entry has its helpers)
      log.warning("ourjax: the CPU runtime library could not be built (%s)", e)
      _runtime = False
  return _runtime or None


_runtime_pending = None   # the Future of the build that prefetch_runtime started


def prefetch_runtime() -> None:
  """Start building the runtime library (``runtime_library``): its IR made here (``_prepare``),
  its LLVM work on a thread of its own, outside llvmlite's lock, so that it overlaps with the
  passes and the emission of the first program that runs kernels in parallel (built when that
  program's entry is emitted, it cost a process's first such compile ~35 ms of LLVM on its
  critical path, a sixth of a small program's compile); ``runtime_library`` then waits for
  it."""
  global _runtime_pending
  if _runtime is not None or _runtime_pending is not None:
    return
  with _runtime_lock:
    if _runtime is not None or _runtime_pending is not None:
      return
    from concurrent.futures import Future
    try:
      prepared = _prepare()
    except Exception:   # noqa: BLE001  (runtime_library builds it, and warns)
      return
    fut = Future()

    def build():
      try:
        fut.set_result(_finish(*prepared, own_thread=True))
      except BaseException as e:   # noqa: BLE001  (runtime_library builds it again, and warns)
        fut.set_exception(e)
    _runtime_pending = fut
    threading.Thread(target=build, name="ourjax-runtime", daemon=True).start()


def _runtime_before_fork() -> None:
  """A fork waits for the build under way (the child would inherit the locks its thread
  holds, and no thread to release them)."""
  fut = _runtime_pending
  if fut is not None:
    try:
      fut.result()
    except Exception:   # noqa: BLE001  (runtime_library builds it again)
      pass


def _runtime_key() -> str:
  import hashlib

  import os

  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import host
  here = os.path.dirname(__file__)
  h = hashlib.sha256(disk_cache.source_digest(__file__, os.path.join(here, "entry.py"),
                                              os.path.join(here, "jit.py")).encode())
  h.update(host.tag().encode())
  return "runtime-" + h.hexdigest()


def _prepare():
  """The Python part of the runtime library's build, on the calling thread: (its disk cache
  key or None, the cached object code or None, else its IR text).  (On a thread of its own
  beside the passes, this part only took turns with them for the interpreter lock.)"""
  from ourjax.backends import disk_cache
  key = _runtime_key() if disk_cache.cache_dir() else None
  hit = disk_cache.read(key) if key else None
  if hit is not None:
    return key, hit[1], None       # (loaded without LLVM where it can be: cpu/loader.py)
  from ourjax.backends.cpu import jit
  from ourjax.backends.cpu.libraries import _ensure_runtime_symbols
  jit._setup()
  _ensure_runtime_symbols()       # (its helpers call syscall and sched_yield)
  return key, None, str(_emit())


def _finish(key, cached, text, own_thread: bool = False):
  """The runtime library from ``_prepare``'s answer: the cached object code loaded, or the IR
  text compiled (``own_thread``: outside llvmlite's lock), loaded and stored."""
  from ourjax import _phases
  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import loader
  from ourjax.errors import CompileError
  with _phases.phase("library"), _phases.collecting(None):
    if cached is not None:
      try:
        return loader.load_object(cached, RUNTIME_SYMBOLS)
      except CompileError as e:   # pragma: no cover
        log.warning("ourjax: cached CPU runtime library could not be loaded (%s)", e)
        text = str(_emit())
    from ourjax.backends.cpu import jit
    from ourjax.backends.cpu.libraries import _ensure_runtime_symbols
    _ensure_runtime_symbols()
    obj, _ = jit.compile_to_object(text, keep_ir=False, own_thread=own_thread)
    cm = loader.load_object(obj, RUNTIME_SYMBOLS)
    from ourjax.backends.cpu import host
    if key and host.consistent():     # (its key was made with LLVM's own target)
      disk_cache.write(key, {"runtime": list(RUNTIME_SYMBOLS)}, obj, "")
    return cm


def _load_or_compile():
  return _finish(*_prepare())


def _emit():
  """The runtime library's LLVM module: the pool's worker and run functions, and the waiting
  helpers (external, for the entries)."""
  import llvmlite.ir as ir

  from ourjax.backends.cpu import jit
  from ourjax.backends.cpu.waiting import _emit_sync
  from ourjax.backends.llvm import emitter as E
  i8p, i32, i64 = E.I8.as_pointer(), E.I32, E.I64
  mod = jit.new_module("ourjax_pool")
  wait_ge, wait_ne, wake = _emit_sync(mod)
  for f in (wait_ge, wait_ne, wake):
    f.linkage = ""          # (external: the entries call them)
  entry_t = ir.FunctionType(i32, [i8p, i64, i64])

  def word(b, ctl, off, ty=i32):
    return b.bitcast(b.gep(ctl, [E.i64(off)]), ty.as_pointer())

  # void* ourjax_pool_worker(void* arg)
  worker = ir.Function(mod, ir.FunctionType(i8p, [i8p]), name="ourjax_pool_worker")
  b = ir.IRBuilder(worker.append_basic_block("entry"))
  arg = worker.args[0]
  ctl = b.inttoptr(b.load(word(b, arg, 0, i64)), i8p)
  tid = b.load(word(b, arg, 8, i64))
  seen = b.alloca(i32)
  b.store(ir.Constant(i32, 0), seen)
  loop, call, stop = (worker.append_basic_block(n) for n in ("loop", "call", "stop"))
  b.branch(loop)
  b.position_at_end(loop)
  gen = word(b, ctl, _GEN)
  b.call(wait_ne, [gen, b.load(seen), word(b, ctl, _GEN_SLEEPERS)])
  b.store(b.load_atomic(gen, "seq_cst", 4), seen)
  fn = b.load_atomic(word(b, ctl, _JOB, i64), "seq_cst", 8)
  b.cbranch(b.icmp_unsigned("==", fn, E.i64(0)), stop, call)
  b.position_at_end(call)
  slots = b.inttoptr(b.load(word(b, ctl, _JOB + 8, i64)), i8p)
  n = b.load(word(b, ctl, _JOB + 16, i64))
  b.call(b.inttoptr(fn, entry_t.as_pointer()), [slots, tid, n])
  done = word(b, ctl, _DONE)
  d = b.atomic_rmw("add", done, ir.Constant(i32, 1), "seq_cst")
  with b.if_then(b.icmp_signed("==", b.add(d, ir.Constant(i32, 2)), b.trunc(n, i32))):
    b.call(wake, [done, word(b, ctl, _DONE_SLEEPERS)])
  b.branch(loop)
  b.position_at_end(stop)
  b.ret(ir.Constant(i8p, None))

  # i32 ourjax_pool_run(void* ctl, entry* fn, void* slots, i64 n); a null fn ends the workers
  run = ir.Function(mod, ir.FunctionType(i32, [i8p, i8p, i8p, i64]), name="ourjax_pool_run")
  ctl, fnp, slots, n = run.args
  b = ir.IRBuilder(run.append_basic_block("entry"))
  done = word(b, ctl, _DONE)
  b.store_atomic(ir.Constant(i32, 0), done, "seq_cst", 4)
  b.store(b.ptrtoint(slots, i64), word(b, ctl, _JOB + 8, i64))
  b.store(n, word(b, ctl, _JOB + 16, i64))
  b.store_atomic(b.ptrtoint(fnp, i64), word(b, ctl, _JOB, i64), "seq_cst", 8)
  gen = word(b, ctl, _GEN)
  b.atomic_rmw("add", gen, ir.Constant(i32, 1), "seq_cst")
  b.call(wake, [gen, word(b, ctl, _GEN_SLEEPERS)])
  with b.if_then(b.icmp_unsigned("==", b.ptrtoint(fnp, i64), E.i64(0))):
    b.ret(ir.Constant(i32, 0))              # (the null job: the workers end, nobody waits)
  rc = b.call(b.bitcast(fnp, entry_t.as_pointer()), [slots, E.i64(0), n])
  b.call(wait_ge, [done, b.trunc(b.sub(n, E.i64(1)), i32), word(b, ctl, _DONE_SLEEPERS)])
  b.ret(rc)
  return mod


def _control_block(nbytes: int):
  """A zeroed, 64-byte aligned block of ``nbytes`` for an entry's control words."""
  raw = np.zeros(nbytes + 64, np.uint8)
  skip = -raw.ctypes.data % 64
  return raw[skip:skip + nbytes]


def _spare_control(nbytes: int):
  """A zeroed control block of at least ``nbytes`` for a call that runs alone beside the
  pool: a spare one if there is one (each call takes its own: ``list.pop`` is atomic), else a
  new one; the caller gives it back to ``_spare``."""
  try:
    block = _spare.pop()
  except IndexError:
    return _control_block(nbytes)
  if block.nbytes < nbytes:
    return _control_block(nbytes)
  block[:nbytes] = 0
  return block


class Pool:
  """``nthreads - 1`` native workers; ``run(fn, slots)`` calls the entry ``fn`` (a ctypes
  function of the entry's type) on every thread, the caller being thread 0, and returns thread
  0's result once all have returned."""

  def __init__(self, nthreads: int):
    self.nthreads = self.wanted = nthreads
    self._busy = threading.Lock()
    self._words = _control_block(64)    # (the entries' control block: run)
    self._ctl = np.zeros(_CTL_BYTES, np.uint8)
    self._args = np.zeros((max(nthreads - 1, 1), _ARG_BYTES), np.uint8)
    self._native = _build() if nthreads > 1 else None
    if self._native is None:
      self.nthreads = 1
      return
    _cm, worker, self._run, create, detach = self._native
    ctl = self._ctl_addr = self._ctl.ctypes.data
    for t in range(1, nthreads):
      a = self._args[t - 1]
      a[:16].view(np.int64)[:] = (ctl, t)
      th = ctypes.c_ulong()
      err = create(ctypes.byref(th), None, worker, a.ctypes.data)
      if err:
        # (the pool runs with the t - 1 workers started so far)
        self.nthreads = t
        log.warning("pthread_create failed (error %d): the CPU backend uses %d thread(s)",
                     err, t)
        break
      detach(th.value)

  def run(self, fn, slots, addr: int | None = None, control=None) -> int:
    """``fn(slots, tid, n)`` on every thread (``addr``: ``fn``'s address, when the caller
    knows it); thread 0's result.  ``control``: (slot table, slot, bytes) of the entry's
    control block: the pool's own (or a spare one, for a call that runs alone beside a busy
    pool), zeroed, is put in that slot first."""
    if not self._busy.acquire(blocking=False):
      if control is None:
        return fn(slots, 0, 1)
      block = _spare_control(control[2])
      try:
        control[0][control[1]] = block.ctypes.data
        return fn(slots, 0, 1)
      finally:
        _spare.append(block)
    try:
      if control is not None:
        table, slot, nbytes = control
        words = self._words
        if words.nbytes < nbytes:
          words = self._words = _control_block(nbytes)
        else:
          words[:nbytes] = 0      # (before any thread starts)
        table[slot] = words.ctypes.data
      n = self.nthreads
      if n == 1:
        return fn(slots, 0, 1)
      if addr is None:
        addr = ctypes.cast(fn, ctypes.c_void_p).value
      return self._run(self._ctl_addr, addr, slots, n)
    finally:
      self._busy.release()

  def close(self) -> None:
    """End the workers: publish a job with a null entry (they exit once they see it)."""
    if self.nthreads > 1:
      with self._busy:
        self._run(self._ctl_addr, None, None, self.nthreads)
        _retired.append((self._ctl, self._args))   # (a worker may still be reading them)
      self.nthreads = 1


# ---------------------------------------------------------------------------------------------
# the process's pool
# ---------------------------------------------------------------------------------------------

_pool: Pool | None = None
_pool_lock = threading.Lock()
_num_threads = None


def _default_threads() -> int:
  env = os.environ.get("OURJAX_CPU_THREADS")
  if env:
    return max(1, int(env))
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # pragma: no cover
    return max(1, os.cpu_count() or 1)


def num_threads() -> int:
  """Threads the CPU backend uses for large kernels (``OURJAX_CPU_THREADS``, default: the CPUs
  this process may run on)."""
  global _num_threads
  if _num_threads is None:
    _num_threads = _default_threads()
  return _num_threads


def set_num_threads(n: int) -> None:
  """Change the thread count for later calls (1 = everything on the caller's thread)."""
  global _num_threads, _pool
  with _pool_lock:
    _num_threads = max(1, int(n))
    old, _pool = _pool, None
  if old is not None:
    old.close()


def get_pool() -> Pool:
  """The process's pool for the current thread count (started on first use)."""
  global _pool
  p = _pool
  if p is None or p.wanted != num_threads():
    with _pool_lock:
      if _pool is None or _pool.wanted != num_threads():
        old, _pool = _pool, Pool(num_threads())
        if old is not None:
          old.close()
      p = _pool
  return p


def _after_fork() -> None:
  """A forked child has none of its parent's workers: it starts a pool of its own."""
  global _pool
  _pool = None


if hasattr(os, "register_at_fork"):
  os.register_at_fork(before=_runtime_before_fork, after_in_child=_after_fork)
