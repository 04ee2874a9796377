"""What the native backends' disk-cache keys are made of, shared by the CPU (``cpu/cache.py``)
and the CUDA backend (``cuda/cache.py``), computed without importing the compiler.

    h = hashlib.sha256(b"...")
    hash_module(h, module)                      # the module's text and its constants' bytes
    files_digest(sources("llvm", "cpu"), base)  # the code that makes code from it
    pipeline_digest(backend_digest)             # ... and the HLO IR, the pipeline, the passes
    llvmlite_stamp()                            # the llvmlite (and LLVM) in use, not imported

A program found by its module as lowered (its *source key*: the module before the passes,
the sources of everything that compiles it, the settings that differ from their modules'
import and the ``OURJAX_*`` environment, ``settings.py``, and the target) is loaded without
the passes, the planner, the emitter or LLVM: nothing here imports them.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from ourjax.backends import disk_cache

__all__ = ["BACKENDS", "sources", "files_digest", "pipeline_digest", "hash_module",
           "llvmlite_stamp"]

#: The ``ourjax/backends`` directory.
BACKENDS = os.path.dirname(os.path.abspath(__file__))


def sources(*subdirs: str) -> list:
  """The ``.py`` files under ``backends/<subdir>`` (or the directory given whole), sorted."""
  paths = []
  for sub in subdirs:
    root = sub if os.path.isabs(sub) else os.path.join(BACKENDS, sub)
    for d, dirs, files in os.walk(root):
      dirs[:] = sorted(x for x in dirs if x != "__pycache__")
      paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
  return paths


def files_digest(paths, base: str) -> str:
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


_lowering_digest = None


def pipeline_digest(backend_digest: str) -> str:
  """``backend_digest`` (the sources of a backend) with those of everything between a lowered
  module and the backend (the HLO IR, the pipeline and its passes: ``ourjax/lowering``)."""
  global _lowering_digest
  if _lowering_digest is None:
    lowering = os.path.join(os.path.dirname(BACKENDS), "lowering")
    _lowering_digest = files_digest(sources(lowering), lowering)
  h = hashlib.sha256(backend_digest.encode())
  h.update(_lowering_digest.encode())
  return h.hexdigest()


def hash_module(h, module) -> None:
  """Feed ``module``'s text and its constants' bytes to the hash ``h``.  (The text without each
  operand's shape, which its definition already shows: half the time of the full text.)"""
  h.update(module.to_string(operand_shapes=False).encode())
  for comp in module.computations:     # (every computation, as the text has them)
    for i in comp.instructions:
      if i.opcode == "constant":
        v = np.ascontiguousarray(i.attrs["value"])
        h.update(f"{i.name}:{v.dtype.str}:{v.shape}".encode())
        h.update(v.tobytes())


_llvmlite = None


def llvmlite_stamp() -> str | None:
  """The llvmlite in use, without importing it: its path, its LLVM library's size and time,
  and the digest of its version file; None when it cannot be read."""
  global _llvmlite
  if _llvmlite is None:
    _llvmlite = ""
    try:
      import importlib.util
      spec = importlib.util.find_spec("llvmlite")
      root = os.path.dirname(spec.origin)
      lib = [f for f in os.listdir(os.path.join(root, "binding")) if f.startswith("libllvmlite")]
      st = os.stat(os.path.join(root, "binding", sorted(lib)[0]))
      with open(os.path.join(root, "_version.py"), "rb") as f:
        version = hashlib.sha256(f.read()).hexdigest()
      _llvmlite = f"{root}/{st.st_size}/{st.st_mtime_ns}/{version}"
    except (OSError, AttributeError, IndexError, ImportError, TypeError):
      pass
  return _llvmlite or None
