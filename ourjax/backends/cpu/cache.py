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
from ourjax.backends import cache_keys, disk_cache, settings
from ourjax.backends.cpu import host, loader
from ourjax.backends.cpu.executable import ENTRY, OBJECT_MODE, CpuExecutable
from ourjax.backends.cpu.threads import num_threads
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")

__all__ = ["source_key", "cache_key", "load_by_source", "store_by_source", "library_entries",
           "tuned_entries"]

_source_hash = None


def _backend_source_hash() -> str:
  """The SHA-256 of the sources that make the object code: the shared LLVM emitter and planner
  (``backends/llvm``, its math library included), this backend (``backends/cpu``), the
  donation planner and the settings' rules.  Listed by directory, not by importing them: a
  warm start that finds its program in the disk cache loads only what running it needs."""
  global _source_hash
  if _source_hash is None:
    base = cache_keys.BACKENDS
    paths = cache_keys.sources("llvm", "cpu") + [os.path.join(base, "donation.py"),
                                                 os.path.join(base, "settings.py")]
    _source_hash = cache_keys.files_digest(paths, base)
  return _source_hash


_pipeline_hash = None


def _pipeline_source_hash() -> str:
  """The backend's source hash and that of everything between a lowered module and the
  backend (``cache_keys.pipeline_digest``)."""
  global _pipeline_hash
  if _pipeline_hash is None:
    _pipeline_hash = cache_keys.pipeline_digest(_backend_source_hash())
  return _pipeline_hash


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
  cache_keys.hash_module(h, module)
  h.update(_backend_source_hash().encode())
  h.update(repr(sorted((getattr(module, "input_output_alias", None) or {}).items())).encode())
  h.update(settings.digest(passes=False).encode())
  h.update(_host_tag(profile))
  return h.hexdigest()


def source_key(module: hlo.Module, profile: bool = False) -> str:
  """The disk-cache key of ``module`` as lowered (before the passes): its text and constants,
  the sources and settings of the passes and the backend, and what ``cache_key`` adds."""
  h = hashlib.sha256(b"source\n")
  cache_keys.hash_module(h, module)
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

