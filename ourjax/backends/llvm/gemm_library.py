"""The process-wide shared GEMMs, ``ourjax_gemm_f32`` and ``ourjax_gemm_f64`` (no epilogue;
overwrite, or add to C with ``gemm.ACCUMULATE``; see ``gemm.py``; they also run convolutions
without a patch matrix, ``transA == gemm.IM2COL``), and what they call through a
convolution's descriptor: the packers of implicit-im2col patch matrices, one per layout,
``ourjax_gemm_<dtype>_im2col_<F|W>``, and the direct micro-kernel that reads patch rows in
place, ``ourjax_gemm_<dtype>_im2col_D`` (``gemm_im2col.py``; keyed ``"f32_im2col_F"`` and so
on below), each built once per process, on first use (a program without convolutions builds no
packer and no direct micro-kernel, whose LLVM work was a third of the GEMM's when the GEMM held
it; a forward pass no weight-gradient packer), and registered with LLVM's symbol table, so that
modules which only declare them (``gemm.declare_shared_gemm``) link to them.

    name = prefetch_shared_gemm("f32")   # the name now; the code built on a thread meanwhile
    name = shared_gemm_symbol("f32")     # ready to link (waits for that build, or builds)

A build loads the object code from the disk cache (``disk_cache.cache_dir()/gemm/``) or compiles
it (~0.5 s of LLVM for a GEMM, ~0.3 s for a packer) and stores it there.  A GEMM is compiled
as several modules (``split_module``, ``library_parts``): its driver at O2
(``DRIVER_SPEED_LEVEL``), its helpers at O3; threads take them one at a time (``_Build``): the
builder thread, more threads on hosts of 4 or more cores, and a thread that waits for the
library (``shared_gemm_symbol``), which compiles the modules not yet started.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

_shared_lock = threading.Lock()
_shared: dict = {}
_pending: dict = {}       # dtype -> _Build of (symbol, compiled module): being built
_builder = None           # the thread that builds them (made on first use)
_helpers = None           # threads that join a build's parts where cores are left (4+ cores)


def _before_fork() -> None:
  """A fork waits for the builds under way (the child would inherit whatever locks the
  builder thread held in LLVM, and no thread to release them)."""
  for fut in list(_pending.values()):
    try:
      fut.result()
    except Exception:   # noqa: BLE001  (the child's shared_gemm_symbol raises it again)
      pass


def _after_fork_in_child() -> None:
  global _builder, _helpers
  _builder = _helpers = None   # (their threads are not in the child; finished builds stay)


if hasattr(os, "register_at_fork"):
  # (registered after concurrent.futures' own, which holds its shutdown lock across a fork and
  # runs later therefore: a build under way may start a pool of its own, split_module's)
  __import__("concurrent.futures.thread")
  os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


#: the libraries' keys: the GEMMs' and the implicit-im2col packers'
KEYS = ("f32", "f64") + tuple(f"{d}_im2col_{lay}" for d in ("f32", "f64")
                              for lay in ("F", "W", "D"))


def _check_dtype(dtype: str) -> None:
  if dtype not in KEYS:
    raise ValueError(f"shared_gemm_symbol: dtype must be 'f32' or 'f64' (or an implicit-im2col "
                     f"packer's: 'f32_im2col_F', ...), not {dtype!r}")


def prefetch_shared_gemm(dtype: str) -> str:
  """The name of the shared GEMM of ``dtype`` (see :func:`shared_gemm_symbol`), its IR made here
  (``_prepare_shared``) and its code compiled meanwhile on a thread of its own (LLVM there runs
  outside llvmlite's lock), so that a program's passes, planning, emission and kernel
  compilation overlap with it; whatever links or loads code that calls it first calls
  :func:`shared_gemm_symbol`, which waits for it."""
  global _builder
  _check_dtype(dtype)
  with _shared_lock:
    if dtype in _shared or dtype in _pending:
      return f"ourjax_gemm_{dtype}"
  # (the IR made here, on the caller's thread, outside the lock; only the LLVM work goes to
  # the builder)
  prepared = _prepare_shared(dtype)
  with _shared_lock:
    if dtype not in _shared and dtype not in _pending:
      from concurrent.futures import ThreadPoolExecutor
      from ourjax import _phases
      global _helpers
      cores = os.cpu_count() or 1
      if _builder is None:   # (three libraries at once where cores are left for the caller: a
        # convolution's program waits for the GEMM and its patch matrices' packers)
        _builder = ThreadPoolExecutor(max(1, min(3, cores - 1)),
                                      thread_name_prefix="ourjax-gemm")
      build = _pending[dtype] = _Build(prepared)
      _builder.submit(_phases.bound(build.work))
      if cores >= 4 and len(build.jobs) > 1:   # (its parts at once on threads of their own)
        if _helpers is None:
          _helpers = ThreadPoolExecutor(3, thread_name_prefix="ourjax-gemm-part")
        for _ in range(min(3, len(build.jobs) - 1)):
          _helpers.submit(_phases.bound(build.work))
  return f"ourjax_gemm_{dtype}"


class _Build:
  """A library's build cut into jobs, its LLVM modules (``_jobs``), which any thread may take
  (``work``): the builder thread that ``prefetch_shared_gemm`` starts it on, threads of
  ``_helpers`` on hosts of 4 or more cores, and the thread that waits for it
  (``shared_gemm_symbol``: ``wait``), which compiles the modules nobody has started instead of
  idling (on 2 cores, a program's compile that needed the GEMM waited for all of its LLVM work
  on the builder thread while its own core was idle).  The thread that finishes the last
  module loads the objects (and stores them in the disk cache); ``result`` waits for that, as
  a Future's does."""

  def __init__(self, prepared):
    self.prepared = prepared
    self.jobs = _jobs(prepared)
    self.objs = [None] * len(self.jobs)
    self.next = 0
    self.left = len(self.jobs)
    self.lock = threading.Lock()
    self.finished = threading.Event()
    self.value = self.error = None
    if not self.jobs:                  # (cached object code: only loaded, by the first worker)
      self.left = 1

  def work(self) -> None:
    """Compile the modules no thread has taken yet, one at a time, on this thread; the last
    one done finishes the build."""
    from ourjax import _phases
    with _phases.phase("library"), _phases.collecting(None):
      while True:
        with self.lock:
          if self.error is not None or self.next >= max(1, len(self.jobs)):
            return
          i = self.next
          self.next += 1
        try:
          if self.jobs:
            from ourjax.backends.cpu import jit
            text, level, kw = self.jobs[i]
            self.objs[i] = jit.object_apart(text, level, keep_ir=False, **kw)[0]
          with self.lock:
            self.left -= 1
            last = self.left == 0
          if last:
            self.value = _finish_objects(self.prepared, self.objs)
            self.finished.set()
        except BaseException as e:   # noqa: BLE001  (raised to whoever waits for the build)
          with self.lock:
            self.error = e
          self.finished.set()
          return

  def wait(self, help: bool = True):
    """(symbol, compiled module), once built; ``help``: compiling untaken modules meanwhile."""
    if help:
      self.work()
    self.finished.wait()
    if self.error is not None:
      raise self.error
    return self.value

  def result(self):
    return self.wait(help=False)

  def done(self) -> bool:
    return self.finished.is_set()

  def exception(self):
    return self.error


def _jobs(prepared) -> list:
  """The LLVM modules of a library's build: (IR text, optimisation level, options of
  ``jit.object_apart``); none when its object code came from the disk cache.  (No LLVM unroller: the micro-kernels are unrolled and vectorised as emitted, and its
  unrolling of the rest changed no timing measured, f32 on AVX-512 and AVX2 code, from 7x13x5
  to 512^3, while it took an eighth of the build; no SLP vectorizer: the code is vectorised as
  emitted, and it changed no instruction of the GEMM's helpers and driver, and no vector
  instruction of a packer, for a sixth of the build.)"""
  dtype, sym, path, obj, ir_ = prepared
  if ir_ is None:
    return []
  kw = dict(loop_unrolling=False, slp=False)
  if ir_[0] == "packer":
    return [(ir_[1], 3, kw)]
  _, texts, names, parts = ir_
  kw = dict(kw, provided=names)
  return [(texts[0], DRIVER_SPEED_LEVEL, kw)] + [(t, 3, kw) for t in texts[1:]]


def _finish_objects(prepared, objs):
  """(symbol, compiled module) of a build whose modules compiled to ``objs`` (or of cached
  object code): loaded, and stored in the disk cache when compiled."""
  from ourjax.backends.cpu import loader
  from ourjax.errors import CompileError
  dtype, sym, path, obj, ir_ = prepared
  if path:
    _paths[dtype] = path
  if obj is not None:
    try:
      return sym, loader.load_object(obj, [sym])
    except CompileError:        # (the cached object would not load: compiled again)
      from ourjax.backends.cpu import jit
      fresh = (dtype, sym, path, None, _emit_shared(dtype, sym))
      return _finish_objects(fresh, [jit.object_apart(t, lv, keep_ir=False, **kw)[0]
                                     for t, lv, kw in _jobs(fresh)])
  from ourjax.backends.cpu import jit
  obj = jit.pack_objects(objs)
  cm = loader.load_object(obj, [sym])
  _cache_store(path, obj)
  return sym, cm


def shared_gemm_symbol(dtype: str) -> str:
  """The name of a process-wide compiled GEMM (no epilogue, overwrite) for ``dtype``, ready to
  be linked: on first use it is loaded from the on-disk cache of the CPU backend
  (``ourjax.backends.disk_cache.cache_dir()``, entry ``gemm/<key>.o``) or compiled (~0.75 s of
  LLVM) and stored there, then registered with LLVM's symbol table and the loader's (``loader.define``), so a
  module that only *declares* it (:func:`declare_shared_gemm`) links to it when compiled or
  loaded by ``ourjax.backends.cpu.jit`` and pays no compile time for it.  Waits for a build
  :func:`prefetch_shared_gemm` started."""
  _check_dtype(dtype)
  with _shared_lock:
    if dtype in _shared:
      return _shared[dtype][0]
    fut = _pending.get(dtype)
    if fut is None:
      _register(dtype, *_build_shared(dtype))
      return _shared[dtype][0]
  from ourjax import _phases
  try:
    with _phases.phase("library.wait"):
      sym, cm = fut.wait()
  finally:
    with _shared_lock:
      if _pending.get(dtype) is fut:
        del _pending[dtype]          # (a failed build is tried again by the next call)
  with _shared_lock:
    if dtype not in _shared:
      _register(dtype, sym, cm)
    return _shared[dtype][0]


def is_built(dtype: str) -> bool:
  """Whether the shared GEMM of ``dtype`` is built (registered, or its build finished), so that
  :func:`shared_gemm_symbol` will not wait for LLVM."""
  with _shared_lock:
    if dtype in _shared:
      return True
    fut = _pending.get(dtype)
    return fut is not None and fut.done() and fut.exception() is None


def shared_gemm_address(dtype: str) -> int:
  """The address of the shared GEMM of ``dtype`` (built first if need be), to call it from
  Python (``gemm_tune.py``)."""
  sym = shared_gemm_symbol(dtype)
  with _shared_lock:
    return _shared[dtype][1].address(sym)


def _register(dtype: str, sym: str, cm) -> None:
  from ourjax.backends.cpu import loader
  loader.define(sym, cm.address(sym))
  _shared[dtype] = (sym, cm)  # keeps the machine code alive for the process


_paths: dict = {}         # dtype -> the cache path its library was read from or stored at


def cache_path_of(dtype: str) -> Optional[str]:
  """Where the library of ``dtype`` that this process linked is in the disk cache, relative
  to the cache directory (None: not there), for a program's entry to record
  (``libraries.entries_of``)."""
  path = _paths.get(dtype)
  from ourjax.backends.disk_cache import cache_dir
  d = cache_dir()
  if not path or not d:
    return None
  rel = os.path.relpath(path, d)
  return None if rel.startswith("..") else rel


def load_recorded(dtype: str, rel: str) -> bool:
  """Link the library of ``dtype`` from the cache entry ``rel`` (``cache_path_of``) that a
  cached program recorded, unless linked already; False when it is not there or does not
  load, or a build is under way (the caller then waits for it, ``shared_gemm_symbol``)."""
  _check_dtype(dtype)
  from ourjax.backends.disk_cache import cache_dir
  d = cache_dir()
  if not d or not isinstance(rel, str) or os.path.isabs(rel) or ".." in rel.split(os.sep):
    return False
  with _shared_lock:
    if dtype in _shared:
      return True
    if dtype in _pending:
      return False
    from ourjax import _phases
    from ourjax.backends.cpu import loader
    from ourjax.errors import CompileError
    sym = f"ourjax_gemm_{dtype}"
    path = os.path.join(d, rel)
    with _phases.phase("library"):
      obj = _cache_load(path)
      if obj is None:
        return False
      try:
        cm = loader.load_object(obj, [sym])
      except CompileError:
        return False
    _register(dtype, sym, cm)
    _paths[dtype] = path
    return True


def _build_shared(dtype: str, own_thread: bool = False):
  """(symbol, compiled module) of the shared GEMM of ``dtype`` (or of the packer, for an
  ``"<dtype>_im2col_<layout>"``): from the disk cache, else compiled (``own_thread``: outside
  llvmlite's lock, in a context of its own); its LLVM work shows as one ``library`` phase in
  the compile log."""
  return _finish_shared(_prepare_shared(dtype), own_thread)


def _prepare_shared(dtype: str):
  """The Python part of a build, on the calling thread: (dtype, symbol, cache path, the cached
  object code or None, else the IR to compile: ``_emit_shared``).  ``prefetch_shared_gemm``
  hands only the rest (LLVM, ``_finish_shared``) to the builder thread: there the IR's
  emission (~70 ms of Python for a GEMM) took turns with the caller's passes for the
  interpreter lock, and the library's LLVM work started only once both were through."""
  sym = f"ourjax_gemm_{dtype}"
  path = _cache_path(sym)
  obj = _cache_load(path)
  if obj is not None:
    return dtype, sym, path, obj, None
  from ourjax import _phases
  with _phases.phase("library.emit"):
    return dtype, sym, path, None, _emit_shared(dtype, sym)


def _emit_shared(dtype: str, sym: str):
  """The IR of a library: ``("packer", text)``, or ``("gemm", texts, names, parts)`` (the GEMM
  cut into ``parts`` modules, ``library_parts()``, and its driver's: ``split_module``)."""
  from ourjax.backends.cpu import jit
  from ourjax.backends.llvm import gemm_im2col
  from ourjax.backends.llvm.gemm import emit_gemm
  mod = jit.new_module(sym)
  if dtype.endswith("_im2col_D"):
    gemm_im2col.emit_direct_library(mod, dtype[:3])
    if library_parts() < 2:
      return ("packer", str(mod))
    # (its wide and narrow tiles in modules of their own, compiled at once where cores are
    # left: in one module they were a quarter second of LLVM on one thread, on the critical
    # path of a 16-core host's first convolution program)
    texts, names = split_module(mod, sym, 3, by_function=True)
    return ("gemm", texts, names, len(texts) - 1)
  if "_im2col_" in dtype:
    gemm_im2col.emit_packer_library(mod, dtype[:3], dtype[-1])
    return ("packer", str(mod))
  emit_gemm(mod, sym, dtype, im2col=True)
  parts = library_parts()
  texts, names = split_module(mod, sym, parts)
  return ("gemm", texts, names, parts)


def _finish_shared(prepared, own_thread: bool = False):
  """(symbol, compiled module) from ``_prepare_shared``'s answer, built on this thread: the
  cached object code loaded, or the IR compiled (each module in an LLVM context of its own,
  outside llvmlite's lock), loaded and stored in the disk cache.  ``own_thread`` is kept for
  callers; every build now runs outside the lock."""
  return _Build(prepared).wait()


#: LLVM's optimisation level for the shared GEMM's driver (its loops over blocks, which call the
#: packers and micro-kernels, ``split_module``): 2, without O3's non-trivial loop unswitching,
#: which copied its loops for each invariant condition (789 lines of IR became 1725 at O3,
#: 1283 at O2) and took 45% of the GEMM's build (opt + code generation of the driver 240 ms
#: at O3, 130 ms at O2, 2-core AVX-512 host; the helpers' machine code is the same either way,
#: the driver's only tests its conditions where they are).
DRIVER_SPEED_LEVEL = 2


#: Into how many LLVM modules a shared GEMM's helpers are cut (``split_module``; the driver is
#: a module of its own besides), which threads take one at a time (``_Build``): where cores are
#: idle, a process's first program with a dot waited for the whole GEMM's LLVM work on one
#: thread (about 0.75 s).  ``OURJAX_GEMM_LIBRARY_PARTS`` overrides; default 3 on hosts of at
#: least 4 cores (compiled at once on as many threads), 2 on 2 or 3 cores (the builder thread
#: and the program's thread once it waits for the library share them), 1 on one core.
def library_parts() -> int:
  env = os.environ.get("OURJAX_GEMM_LIBRARY_PARTS", "").strip()
  if env:
    return max(1, min(3, int(env)))
  cores = os.cpu_count() or 1
  return 3 if cores >= 4 else 2 if cores >= 2 else 1


def split_module(mod, sym: str, parts: int, by_function: bool = False):
  """The IR texts of ``mod`` (a shared GEMM ``sym``, ``gemm.emit_gemm``) cut into modules by
  function: the driver first, alone (``DRIVER_SPEED_LEVEL``), then its helpers in ``parts``
  modules (at most three: the micro-kernels; ``pack_b``; ``pack_a`` and the few-rows kernels;
  ``parts`` 2: the micro-kernels with ``pack_a``, and the rest; 1: all), each module defining
  its functions
  (external, named ``sym.<what>``) and declaring the others it calls; and the names they
  define for one another.  The same code as one module: the helpers are ``noinline`` and the
  driver calls them as before.  ``by_function``: each helper in a module of its own (the
  direct micro-kernel's library: its wide and narrow tiles)."""
  import llvmlite.ir as ir
  from ourjax.backends.llvm import dedupe
  fns = [g for g in mod.globals.values() if isinstance(g, ir.Function) and not g.is_declaration]
  # (of about equal LLVM time: the micro-kernels; pack_b; pack_a and the few-rows kernels)
  ukernels = [f for f in fns if ".ukernel" in f.name]
  pack_b = [f for f in fns if f.name == sym + ".pack_b"]
  rest = [f for f in fns if f.name != sym and f not in ukernels and f not in pack_b]
  if by_function:
    groups = [[f] for f in fns if f.name != sym]
  elif parts >= 3:
    groups = [ukernels, pack_b, rest]
  elif parts == 2:
    groups = [ukernels + [f for f in rest if f.name == sym + ".pack_a"],
              pack_b + [f for f in rest if f.name != sym + ".pack_a"]]
  else:
    groups = [ukernels + pack_b + rest]
  groups = [[f for f in fns if f.name == sym]] + groups
  helpers = [f.name for f in fns if f.name != sym]
  for f in fns:
    if f.name != sym:
      f.linkage = ""       # (external: another part calls it)
  scratch = ir.Module()
  decls = {f.name: str(ir.Function(scratch, f.function_type, f.name)) for f in fns}
  texts = []
  for group in groups:
    mine = {f.name for f in group}
    texts.append(dedupe.module_text(mod, {n: t for n, t in decls.items() if n not in mine}))
  return texts, helpers


_OBJ_MAGIC = b"ourjax-gemm-obj-1\n"


def _cache_path(sym: str) -> Optional[str]:
  """Where the object code of ``sym`` is cached (None: caching off), keyed by this file's and
  the JIT engine's source, the LLVM version, the CPU code is generated for (name and features:
  the host's or ``OURJAX_CPU``'s) and the vector target chosen for it (width, FMA, blocking)."""
  import hashlib
  import os
  from ourjax.backends.cpu import host
  try:
    from ourjax.backends.disk_cache import cache_dir
    d = cache_dir()
  except Exception:  # noqa: BLE001 - no backend, no cache
    return None
  if not d:
    return None
  from ourjax.backends import disk_cache
  from ourjax.backends.llvm import gemm, gemm_im2col, gemm_targets
  jit_py = os.path.join(os.path.dirname(host.__file__), "jit.py")
  h = hashlib.sha256(disk_cache.source_digest(gemm.__file__, gemm_im2col.__file__,
                                              gemm_targets.__file__, __file__,
                                              jit_py).encode())
  h.update(repr((sym, host.tag(), gemm.vector_target(host.target()["isa"]))).encode())
  return os.path.join(d, "gemm", f"{sym}-{h.hexdigest()[:32]}.o")


def _cache_load(path: Optional[str]) -> Optional[bytes]:
  """The cached object bytes, or None (missing, or damaged: then it is removed)."""
  import hashlib
  import os
  if not path:
    return None
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError:
    return None
  n = len(_OBJ_MAGIC)
  if data[:n] == _OBJ_MAGIC and hashlib.sha256(data[n + 32:]).digest() == data[n:n + 32]:
    return data[n + 32:]
  try:
    os.remove(path)
  except OSError:
    pass
  return None


def _cache_store(path: Optional[str], obj: bytes) -> None:
  """Write atomically (temporary file + rename); a cache that cannot be written is skipped."""
  import hashlib
  import os
  import tempfile
  from ourjax.backends.cpu import host
  if not path or not host.consistent():     # (a key made with LLVM's own target only)
    return
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(_OBJ_MAGIC + hashlib.sha256(obj).digest() + obj)
    os.replace(tmp, path)
  except OSError:
    pass


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
