"""What LLVM generates code for on this host, known without starting LLVM: the part of every
CPU disk-cache key that names the target.

    host.target()      # {"llvmlite", "llvm", "name", "features", "triple", "isa"}
    host.tag()         # the same as one string, for cache keys

LLVM's answer (``jit.cpu_name``, ``jit.cpu_features``, ``jit.triple``, ``jit.vector_isa``: the
host's CPU or what ``OURJAX_CPU`` names) needs llvmlite's binding and LLVM's targets started,
~30 ms of a new process, which a warm start (its program found in the disk cache, loaded
without LLVM: ``loader.py``) does not otherwise spend.  So the answer is kept in the cache
directory (``host/<fingerprint>.json``) under a fingerprint of everything it follows from: the
CPU as the kernel reports it (``/proc/cpuinfo``: vendor, family, model, stepping, name and
feature flags), the machine, ``OURJAX_CPU``, and the llvmlite in use (its version, and the path,
size and time of its LLVM library).  A process that has started LLVM anyway uses LLVM's own
answer and stores it when the stored one is missing; a compiling process checks the stored one
against LLVM's before it writes an entry (``consistent``).  Without ``/proc/cpuinfo`` (not
Linux) LLVM is always asked.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys

__all__ = ["target", "tag", "fingerprint"]

_CPUINFO_KEYS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags",
                 "cpu", "isa", "features", "cpu implementer", "cpu part", "cpu variant",
                 "cpu revision")

_fingerprint = None
_target = None
_wrong = False        # the stored target this process used was not LLVM's (``consistent``)


def fingerprint() -> str | None:
  """A digest of what LLVM's target follows from here, or None when the CPU cannot be read
  without LLVM."""
  global _fingerprint
  if _fingerprint is not None:
    return _fingerprint or None
  _fingerprint = ""
  try:
    with open("/proc/cpuinfo", "rb") as f:
      info = f.read(1 << 16).decode("latin-1")
  except OSError:
    return None
  first = info.split("\n\n", 1)[0]
  lines = []
  for line in first.splitlines():
    key, sep, value = line.partition(":")
    if sep and key.strip().lower() in _CPUINFO_KEYS:
      lines.append(f"{key.strip().lower()}={value.strip()}")
  if not lines:
    return None
  from ourjax.backends.cache_keys import llvmlite_stamp
  llvmlite = llvmlite_stamp()
  if llvmlite is None:
    return None
  h = hashlib.sha256("\n".join(lines).encode())
  h.update(f"\n{platform.machine()}/{sys.platform}/{os.environ.get('OURJAX_CPU', '')}/"
           f"{llvmlite}".encode())
  _fingerprint = h.hexdigest()
  return _fingerprint


def _from_llvm() -> dict:
  import llvmlite
  import llvmlite.binding as llvm
  from ourjax.backends.cpu import jit
  return {"llvmlite": llvmlite.__version__, "llvm": list(llvm.llvm_version_info),
          "name": jit.cpu_name(), "features": jit.cpu_features(), "triple": jit.triple(),
          "isa": jit.vector_isa()}


def _path(fp: str) -> str | None:
  from ourjax.backends import disk_cache
  d = disk_cache.cache_dir()
  return os.path.join(d, "host", fp + ".json") if d else None


def _live() -> bool:
  jit = sys.modules.get("ourjax.backends.cpu.jit")
  return jit is not None and jit._state is not None


def target() -> dict:
  """LLVM's target here (see the module's docstring): LLVM's own answer once it has started,
  else the stored one, else LLVM's (started for it, and stored)."""
  global _target
  if _live():
    got = _from_llvm()
    if _target is None:
      _target = got
      _store(got)
    return got
  if _target is not None:
    return _target
  fp = fingerprint()
  path = _path(fp) if fp else None
  if path:
    try:
      with open(path) as f:
        got = json.load(f)
      if isinstance(got, dict) and set(got) == {"llvmlite", "llvm", "name", "features",
                                                 "triple", "isa"}:
        _target = got
        return got
    except (OSError, ValueError):
      pass
  got = _target = _from_llvm()
  _store(got)
  return got


def _store(got: dict) -> None:
  fp = fingerprint()
  path = _path(fp) if fp else None
  if not path:
    return
  try:
    with open(path) as f:
      if json.load(f) == got:
        return
  except (OSError, ValueError):
    pass
  tmp = f"{path}.{os.getpid()}.tmp"
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "w") as f:
      json.dump(got, f)
    os.replace(tmp, path)
  except OSError:
    try:
      os.remove(tmp)
    except OSError:
      pass


def consistent() -> bool:
  """Whether the target this process's keys were made with before LLVM started (the stored
  one) is LLVM's own (checked once it has started; before, True).  A stored answer that
  differs (it cannot, unless the fingerprint misses something) is replaced, and this process
  writes no cache entry from then on (its keys may hold the wrong target)."""
  global _target, _wrong
  if _wrong:
    return False
  if _target is None or not _live():
    return True
  got = _from_llvm()
  if got == _target:
    return True
  _target, _wrong = got, True     # (for good: keys made before may hold the wrong one)
  _store(got)
  return False


def tag() -> str:
  """``target()`` as one string, for cache keys."""
  t = target()
  return (f"{t['llvmlite']}/{tuple(t['llvm'])}/{t['name']}/{t['features']}/{t['triple']}/"
          f"{t['isa']}")
