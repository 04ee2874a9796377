"""The process-wide code compiled programs call, linked once per process: the shared GEMMs
(``llvm/gemm_library.py``), the out-of-line math functions (``math:<fn>:<f32|f64>:<nargs>``:
exp, log, tanh, pow, ... in scalar and vector versions, ``emitter.MathLib``), the runtime
library (``RUNTIME``: the thread pool and the entries' waiting helpers, ``threads.py``) and the
C library.

    _link_symbols(meta["symbols"], wait=False)   # start building what a program calls
    ...                                          # (compile its kernels meanwhile)
    _link_symbols(meta["symbols"])               # linked: load code that calls them

A library is built on a thread of its own, its LLVM work outside llvmlite's lock, while the
program's kernels compile; a module that calls one compiles with its names provided
(``_provided_symbols``) and is loaded after it is linked.  Each library is read from the disk
cache when there (``disk_cache``), compiled and stored otherwise.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading

from ourjax import _phases
from ourjax.backends import disk_cache
from ourjax.backends.cpu import loader

log = logging.getLogger("ourjax")

_runtime_ready = False

#: The name under which a program's ``symbols`` list the process's runtime library (the thread
#: pool and the waiting helpers its entry calls: ``threads.runtime_library``).
RUNTIME = "ourjax_runtime"


def _link_symbols(symbols, wait: bool = True) -> None:
  """Compile and register the process-wide code a module calls: the shared GEMMs and the
  out-of-line math functions (``math:<fn>:<f32|f64>:<nargs>``).  ``wait`` False: they are only
  started, on threads of their own (``gemm.prefetch_shared_gemm``, ``_prefetch_math``), and
  the caller links them (``wait`` True) before loading code that calls them."""
  for sym in symbols:
    if sym.startswith("ourjax_gemm_"):
      from ourjax.backends.llvm import gemm
      dtype = sym[len("ourjax_gemm_"):]
      gemm.shared_gemm_symbol(dtype) if wait else gemm.prefetch_shared_gemm(dtype)
    elif sym.startswith("math:"):
      _, fn, tag, nargs = sym.split(":")
      _shared_math(fn, tag, int(nargs)) if wait else _prefetch_math(fn, tag, int(nargs))
    elif sym == RUNTIME:
      from ourjax.backends.cpu import threads
      if threads.runtime_library() is None:
        raise RuntimeError("the CPU runtime library (threads.runtime_library) is unavailable")


#: Least multiply-adds of a dot (or any convolution) for which ``prefetch_for`` starts the
#: shared GEMM's build (smaller dots run in their kernels, ``dots.fast_dot_ok``).
PREFETCH_MIN_MACS = 4096


#: Least elements of an array in a module as lowered for which ``prefetch_for`` starts the
#: runtime library's build (``threads.prefetch_runtime``): smaller programs run no kernel in
#: parallel (``kernels.PARALLEL_MIN_WORK``), and need none.
RUNTIME_MIN_ELEMENTS = 4096


def prefetch_for(module) -> None:
  """Start building the shared GEMMs that a module as lowered (before the passes) will likely
  call: those of its float dots and convolutions (and the packers of the convolutions'
  implicit-im2col patch matrices, of each layout they will have: ``conv_to_dot.patch_layout``,
  or the direct micro-kernel of those likely read in place: ``gemm_im2col.likely_direct``).
  The build is the longest piece of a
  process's first compilations (about a second of LLVM on the 2-core test host); started
  after the program's emission, it ran mostly beside the program's own LLVM work, while the
  passes and the emission before it left the other cores idle.  A guess that misses costs a
  build that later programs may use.  The runtime library (the thread pool and the waiting
  helpers of parallel entries) starts building too, once, when the module has large arrays."""
  from ourjax.backends.llvm import emitter as E
  want = set()
  runtime = False
  for comp in module.computations:
    for i in comp.instructions:
      if not runtime and not i.shape.is_tuple and i.shape.size >= RUNTIME_MIN_ELEMENTS:
        runtime = True
      if i.opcode not in ("dot", "convolution") or i.shape.is_tuple:
        continue
      tag = "f64" if i.dtype == E.F64 else "f32" if i.dtype in (E.F32, E.F16, E.BF16) else None
      if tag is None:
        continue
      if i.opcode == "dot":
        lhs = i.operands[0]
        k = 1
        for d in i.attrs.get("lhs_contracting_dims", ()):
          k *= lhs.dims[d]
        if i.shape.size * k < PREFETCH_MIN_MACS:
          continue
      elif i.dtype in (E.F32, E.F64) and os.environ.get("OURJAX_CPU_IMPLICIT_GEMM", "1") != "0":
        from ourjax.backends.llvm.gemm_im2col import likely_direct
        from ourjax.lowering.passes.conv_to_dot import patch_layout
        # (its patch matrix's packer, gemm_im2col.accepts, or the direct micro-kernel)
        want.add(f"{tag}_im2col_{'D' if likely_direct(i) else patch_layout(i)}")
      want.add(tag)
  if want:
    _link_symbols([f"ourjax_gemm_{t}" for t in sorted(want)], wait=False)
  if runtime:
    from ourjax.backends.cpu import threads
    if threads.num_threads() > 1:
      threads.prefetch_runtime()


def _provided_symbols(symbols) -> list:
  """The function names that the process-wide code of ``symbols`` (``_link_symbols``)
  defines: a module that calls them compiles before they are linked."""
  from ourjax.backends.llvm import emitter as E
  out = []
  for sym in symbols:
    if sym.startswith("ourjax_gemm_"):
      out.append(sym)
    elif sym.startswith("math:"):
      _, fn, tag, _n = sym.split(":")
      out.extend(E.MathLib.symbols(fn, tag))
    elif sym == RUNTIME:
      from ourjax.backends.cpu import threads
      out.extend(threads.SYNC_SYMBOLS)
  return out


_math_lock = threading.Lock()
_math_done: dict = {}
_math_prefetch_lock = threading.Lock()
_math_pending: dict = {}    # (fn, tag) -> Future of its build on the math thread
_math_builder = None        # that thread (made on first use)


def _prefetch_math(fn: str, tag: str, nargs: int) -> None:
  """Start building a math function's library (``_shared_math``) on a thread of its own, its
  LLVM work outside llvmlite's lock, so that it overlaps with the program's own LLVM work (a
  process's first programs spent 20-65 ms per function waiting for it, before their kernels'
  compilation began); ``_shared_math`` then waits for it (or builds it again, if it failed)."""
  global _math_builder
  key = (fn, tag)
  if key in _math_done:
    return
  with _math_prefetch_lock:
    fut = _math_pending.get(key)
    if fut is not None and not fut.done():
      return
    from concurrent.futures import ThreadPoolExecutor
    if _math_builder is None:
      _math_builder = ThreadPoolExecutor(1, thread_name_prefix="ourjax-math")
    _math_pending[key] = _math_builder.submit(_shared_math, fn, tag, nargs, True)


def _math_before_fork() -> None:
  """A fork waits for the math builds under way (the child would inherit the locks their
  thread holds, and no thread to release them)."""
  for fut in list(_math_pending.values()):
    try:
      fut.result()
    except Exception:   # noqa: BLE001  (the child's _shared_math builds it again)
      pass


def _math_after_fork_in_child() -> None:
  global _math_builder
  _math_builder = None
  _math_pending.clear()


if hasattr(os, "register_at_fork"):
  os.register_at_fork(before=_math_before_fork, after_in_child=_math_after_fork_in_child)


def _shared_math(fn: str, tag: str, nargs: int, own_thread: bool = False) -> None:
  """Compile (or load from the disk cache) one math function's scalar and vector versions and
  register them with LLVM's symbol table, once per process (``own_thread``: the math thread's
  build, ``_prefetch_math``; another caller waits for that build, or for one under way on
  ``_math_lock``)."""
  key = (fn, tag)
  if key in _math_done:
    return
  fut = None if own_thread else _math_pending.pop(key, None)
  if fut is not None:
    with _phases.phase("library.wait"):
      try:
        fut.result()
      except Exception:   # noqa: BLE001  (built again below, where it raises)
        pass
    if key in _math_done:
      return
  with _math_lock, _phases.phase("library"), _phases.collecting(None):
    if key in _math_done:
      return
    from ourjax.backends.llvm import emitter as E
    ckey = _math_key(fn, tag, nargs)
    names = E.MathLib.symbols(fn, tag)
    cm = None
    hit = disk_cache.read(ckey)
    if hit is not None:
      try:
        cm = loader.load_object(hit[1], names)
      except Exception as e:   # pragma: no cover
        log.warning("ourjax: cached math library %s could not be loaded (%s)", ckey, e)
    if cm is None:
      from ourjax.backends.cpu import jit
      mod = jit.new_module(f"ojx_math_{fn}_{tag}")
      E.MathLib(mod).define_all(fn, tag, nargs)
      obj, _ = jit.compile_to_object(str(mod), keep_ir=False, own_thread=own_thread)
      cm = loader.load_object(obj, names)
      from ourjax.backends.cpu import host
      if host.consistent():    # (its key was made with LLVM's own target)
        disk_cache.write(ckey, {"math": [fn, tag, nargs], "names": list(names)}, obj, "")
    for n in names:
      loader.define(n, cm.address(n))
    _math_done[key] = cm     # keeps the machine code alive for the process
    _math_keys[key] = ckey


_math_keys: dict = {}       # (fn, tag) -> the disk-cache key its library was read or stored by


def _math_key(fn: str, tag: str, nargs: int) -> str:
  from ourjax.backends.cpu import host
  from ourjax.backends.llvm import emitter as E
  from ourjax.backends.llvm import math as llmath
  from ourjax.backends.llvm import row_math
  h = hashlib.sha256(disk_cache.source_digest(*llmath.SOURCES, E.__file__,
                                              row_math.__file__).encode())
  h.update(f"{fn}/{tag}/{nargs}/{host.tag()}".encode())
  return "math-" + h.hexdigest()


# ---------------------------------------------------------------------------------------------
# a warm start's libraries: the entries a cached program recorded (cpu/cache.py)
# ---------------------------------------------------------------------------------------------

def entries_of(symbols) -> dict:
  """The disk-cache entries the libraries of ``symbols`` (linked: ``_link_symbols``) were read
  from or stored in, {symbol: [kind, key]}: a program's entry records them so that a warm
  start loads them by these keys (``link_recorded``), without the code that builds them or
  makes their keys.  A library linked without the disk cache is left out."""
  out = {}
  for sym in symbols:
    if sym.startswith("ourjax_gemm_"):
      from ourjax.backends.llvm import gemm_library
      path = gemm_library.cache_path_of(sym[len("ourjax_gemm_"):])
      if path:
        out[sym] = ["gemm", path]
    elif sym.startswith("math:"):
      _, fn, tag, _n = sym.split(":")
      key = _math_keys.get((fn, tag))
      if key:
        out[sym] = ["math", key]
    elif sym == RUNTIME:
      out[sym] = ["runtime", ""]     # (its key is made without its builder: threads.py)
  return out


def link_recorded(symbols, recorded: dict) -> bool:
  """Link the libraries of ``symbols`` from the entries ``recorded`` names (``entries_of``),
  those not linked yet; False when one is not recorded, missing or does not load (the caller
  then links them the long way, ``_link_symbols``, which builds what it must)."""
  for sym in symbols:
    kind_key = recorded.get(sym)
    if not isinstance(kind_key, list) or len(kind_key) != 2:
      return False
    kind, key = kind_key
    try:
      if kind == "gemm" and sym.startswith("ourjax_gemm_"):
        from ourjax.backends.llvm import gemm_library
        if not gemm_library.load_recorded(sym[len("ourjax_gemm_"):], key):
          return False
      elif kind == "math" and sym.startswith("math:"):
        _, fn, tag, nargs = sym.split(":")
        if not _load_recorded_math(fn, tag, int(nargs), key):
          return False
      elif kind == "runtime" and sym == RUNTIME:
        from ourjax.backends.cpu import threads
        if threads.runtime_library() is None:
          return False
      else:
        return False
    except Exception as e:   # noqa: BLE001  (the long way)
      log.debug("ourjax: library %s not loaded from its recorded entry (%s)", sym, e)
      return False
  return True


def _load_recorded_math(fn: str, tag: str, nargs: int, ckey: str) -> bool:
  """A math function's library loaded from the entry ``ckey`` (``link_recorded``)."""
  key = (fn, tag)
  if key in _math_done:
    return True
  with _math_lock, _phases.phase("library"), _phases.collecting(None):
    if key in _math_done:
      return True
    if not ckey.startswith("math-"):
      return False
    hit = disk_cache.read(ckey)
    if hit is None or hit[0].get("math") != [fn, tag, nargs] or \
       not isinstance(hit[0].get("names"), list):
      return False
    names = hit[0]["names"]
    cm = loader.load_object(hit[1], names)
    for n in names:
      loader.define(n, cm.address(n))
    _math_done[key] = cm
    _math_keys[key] = ckey
    return True


def _ensure_runtime_symbols() -> None:
  """Make the C library and libm visible to LLVM's symbol resolution (waiting threads call
  ``syscall`` (futex) or ``sched_yield``; ``frem`` becomes ``fmod``/``fmodf``): in some
  processes nothing has loaded them into LLVM's search path, and an unresolved symbol would
  abort MCJIT."""
  global _runtime_ready
  if _runtime_ready:
    return
  import llvmlite.binding as llvm
  for lib in ("c", "m"):
    # (glibc's sonames first: find_library runs ldconfig, a few ms of a new process's first
    # call)
    if sys.platform.startswith("linux"):
      try:
        llvm.load_library_permanently(f"lib{lib}.so.6")
        continue
      except RuntimeError:
        pass
    path = _find_library(lib)
    if path:
      try:
        llvm.load_library_permanently(path)
      except RuntimeError as e:   # pragma: no cover
        log.debug("cpu backend: could not load %s for the JIT: %s", path, e)
  _runtime_ready = True


def _find_library(name: str):
  import ctypes.util
  return ctypes.util.find_library(name)
