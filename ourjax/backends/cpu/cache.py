"""The CPU backend's disk-cache keys, and warm starts: a program an earlier process compiled,
found by its module as lowered and loaded without the compiler.

    key = source_key(module)            # the module before the passes, and all the code follows
    exe = load_by_source(key, make)     # a CpuExecutable, or None (then compile and:)
    store_by_source(key, exe)

    cache_key(module)                   # the key of an optimised module (cpu.backend.compile)

A key holds the module's text and constants' bytes; the sources of everything that makes code
from it (the passes, the planner, the emitter, this backend: ``_pipeline_source_hash``); the
settings that differ from their modules' import and the ``OURJAX_*`` environment
(``backends/settings.py``); the target (``host.tag``: llvmlite, LLVM, the CPU's name and
features, the vector ISA, known without starting LLVM), the thread counts, the NumPy object
layout and the tuning mode; the donated parameters (``input_output_alias``) are in the module's
text.  A program's entry (``store_by_source``) holds its object code, the meta its executable
needs (outputs, constants' values, parameters, arena), the GEMM blockings it chose and the tuned
results they came from, and the disk-cache entries of the process-wide libraries it calls (the
GEMM, math functions, the runtime: ``libraries``).

A warm start (``load_by_source``) reads the entry, checks the blockings still hold, loads the
libraries from the entries it names and the program's objects (``loader.py``: without LLVM),
and builds the executable from the meta: it imports neither the passes nor the planner, the
emitter or llvmlite's binding (together ~60 ms of a new process's first call).  Its optimised
module is made again only when something asks for it (``CpuExecutable.module``).  A library
entry that is missing or damaged sends it the long way (``libraries._link_symbols``: built or
read by its own key), a program entry that does not load is a miss.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os

import numpy as np

from ourjax import _phases
from ourjax.backends import disk_cache, settings
from ourjax.backends.cpu import host, loader
from ourjax.backends.cpu.executable import ENTRY, OBJECT_MODE, CpuExecutable
from ourjax.backends.cpu.threads import num_threads
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")

__all__ = ["source_key", "cache_key", "load_by_source", "store_by_source", "library_entries",
           "tuned_entries"]

_BACKENDS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sources(*subdirs: str) -> list:
  """The ``.py`` files under ``backends/<subdir>`` (or the directory given whole), sorted."""
  paths = []
  for sub in subdirs:
    root = sub if os.path.isabs(sub) else os.path.join(_BACKENDS, sub)
    for d, dirs, files in os.walk(root):
      dirs[:] = sorted(x for x in dirs if x != "__pycache__")
      paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
  return paths


def _files_digest(paths, base: str) -> str:
  """The SHA-256 of the files ``paths`` (named relative to ``base``).  The digest is kept in
  the cache directory under the files' sizes and modification times (as Python's own bytecode
  cache is), so a new process stats the files instead of reading and hashing them all."""
  listing = hashlib.sha256()
  for path in paths:
    st = os.stat(path)
    listing.update(f"{os.path.relpath(path, base)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
  d = disk_cache.cache_dir()
  memo = os.path.join(d, "sources", listing.hexdigest()[:40]) if d else None
  if memo:
    try:
      with open(memo) as f:
        got = f.read().strip()
      if len(got) == 64:
        return got
    except OSError:
      pass
  h = hashlib.sha256()
  for path in paths:
    with open(path, "rb") as f:
      h.update(os.path.relpath(path, base).encode() + b"\0" + f.read())
  digest = h.hexdigest()
  if memo:
    tmp = f"{memo}.{os.getpid()}.tmp"
    try:
      os.makedirs(os.path.dirname(memo), exist_ok=True)
      with open(tmp, "w") as f:
        f.write(digest)
      os.replace(tmp, memo)
    except OSError:
      pass
  return digest


_source_hash = None


def _backend_source_hash() -> str:
  """The SHA-256 of the sources that make the object code: the shared LLVM emitter and planner
  (``backends/llvm``, its math library included), this backend (``backends/cpu``), the
  donation planner and the settings' rules.  Listed by directory, not by importing them: a
  warm start that finds its program in the disk cache loads only what running it needs."""
  global _source_hash
  if _source_hash is None:
    paths = _sources("llvm", "cpu") + [os.path.join(_BACKENDS, "donation.py"),
                                       os.path.join(_BACKENDS, "settings.py")]
    _source_hash = _files_digest(paths, _BACKENDS)
  return _source_hash


_pipeline_hash = None


def _pipeline_source_hash() -> str:
  """The backend's source hash and that of everything between a lowered module and the
  backend (the HLO IR, the pipeline and its passes: ``ourjax/lowering``)."""
  global _pipeline_hash
  if _pipeline_hash is None:
    lowering = os.path.join(os.path.dirname(_BACKENDS), "lowering")
    h = hashlib.sha256(_backend_source_hash().encode())
    h.update(_files_digest(_sources(lowering), lowering).encode())
    _pipeline_hash = h.hexdigest()
  return _pipeline_hash


def _hash_module(h, module: hlo.Module) -> None:
  """Feed ``module``'s text and its constants' bytes to the hash ``h``.  (The text without each
  operand's shape, which its definition already shows: half the time of the full text.)"""
  h.update(module.to_string(operand_shapes=False).encode())
  for comp in module.computations:     # (every computation, as the text has them)
    for i in comp.instructions:
      if i.opcode == "constant":
        v = np.ascontiguousarray(i.attrs["value"])
        h.update(f"{i.name}:{v.dtype.str}:{v.shape}".encode())
        h.update(v.tobytes())


def _gemm_mode() -> str:
  from ourjax.backends.llvm import gemm_table
  return gemm_table.mode()


def _host_tag(profile: bool) -> bytes:
  """What the object code depends on besides the module and the settings: LLVM and the CPU
  code is generated for, the thread count, the NumPy object layout, profiling, the tuning
  mode."""
  return (f"{host.tag()}/{num_threads()}/{OBJECT_MODE}/{bool(profile)}/"
          f"{_gemm_mode()}").encode()


def cache_key(module: hlo.Module, profile: bool = False) -> str:
  """The key of an optimised module (``cpu.backend.compile``)."""
  h = hashlib.sha256()
  _hash_module(h, module)
  h.update(_backend_source_hash().encode())
  h.update(repr(sorted((getattr(module, "input_output_alias", None) or {}).items())).encode())
  h.update(settings.digest(passes=False).encode())
  h.update(_host_tag(profile))
  return h.hexdigest()


def source_key(module: hlo.Module, profile: bool = False) -> str:
  """The disk-cache key of ``module`` as lowered (before the passes): its text and constants,
  the sources and settings of the passes and the backend, and what ``cache_key`` adds."""
  h = hashlib.sha256(b"source\n")
  _hash_module(h, module)
  h.update(_pipeline_source_hash().encode())
  h.update(settings.digest().encode())
  h.update(_host_tag(profile))
  return "src-" + h.hexdigest()


# ---------------------------------------------------------------------------------------------
# what an entry records besides its code
# ---------------------------------------------------------------------------------------------

def tuned_entries(chosen) -> dict | None:
  """The tuned results (or None, none: the default) that the GEMM classes a program chose
  blockings for had when it was compiled (``gemm_table``), for ``_blockings_hold``."""
  if not chosen:
    return None
  from ourjax.backends.llvm import gemm_table
  table = gemm_table.results()
  return {cls: table.get(cls) for cls in chosen}


def _blockings_hold(meta: dict) -> bool:
  """Whether a cached program's GEMM blockings are still the ones its classes would get: the
  classes' tuned results are those it was compiled with (``gemm_tuned``; a class tuned since
  makes it again), or else, for entries that do not record them, ``gemm_tune.choices_hold``."""
  chosen = meta.get("gemm_blockings")
  if not chosen:
    return True
  tuned = meta.get("gemm_tuned")
  if not isinstance(tuned, dict) or set(tuned) != set(chosen):
    from ourjax.backends.llvm import gemm_tune
    return gemm_tune.choices_hold(chosen)
  from ourjax.backends.llvm import gemm_table
  how = gemm_table.mode()
  if how == "off":
    return True
  table = gemm_table.results()
  for cls, was in tuned.items():
    now = table.get(cls)
    if now != was or (now is None and how == "force"):
      return False
  return True


def library_entries(symbols) -> dict:
  """The disk-cache entries of the process-wide libraries that ``symbols`` (a program's
  ``meta["symbols"]``) name, as they were linked: {symbol: [kind, key]}."""
  from ourjax.backends.cpu import libraries
  return libraries.entries_of(symbols)


def _link_recorded(meta: dict) -> bool:
  """Load the libraries a cached program calls from the entries it recorded (``libraries``);
  False when one is missing or does not load (then ``_link_symbols`` links them)."""
  from ourjax.backends.cpu import libraries
  recorded = meta.get("libraries")
  if not isinstance(recorded, dict):
    return False
  return libraries.link_recorded(meta.get("symbols", ()), recorded)


def load_by_source(key: str, make_module):
  """The executable cached under source key ``key`` (None: no such entry, or it would not
  load); ``make_module()`` makes its optimised module when something asks for it."""
  with _phases.phase("cache_read"):
    hit = disk_cache.read(key)
  if hit is None or not _blockings_hold(hit[0]):
    return None
  meta, obj, ir_text = hit
  try:
    if not _link_recorded(meta):
      from ourjax.backends.cpu.libraries import _link_symbols
      _link_symbols(meta.get("symbols", ()))
    with _phases.phase("load"):
      cm = loader.load_object(obj, [ENTRY])
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
  if obj is None or not host.consistent():
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

