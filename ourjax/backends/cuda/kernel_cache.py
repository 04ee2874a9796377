"""How an executable's kernel modules become PTX and cubins: once per process for a module seen
before, and overlapped with the rest of the compile.

``backend.emit`` hands each kernel's LLVM module to a ``ModuleBuilder`` as soon as it is emitted:

* modules whose code is the same within the executable (kernels that differ only in their
  names) are compiled once, as before;
* a module some earlier executable of the process compiled already (the same IR apart from its
  own function names and the module's name) takes that one's PTX, whose entry keeps the first
  kernel's name (``OURJAX_CUDA_KERNEL_CACHE=0``: off): a program compiled again at a new shape
  whose layers did not change, a training step and its evaluation step, recompile only what
  changed;
* the others go to LLVM on worker threads (one per core) at once, while Python emits the next
  kernels: the emitter holds the interpreter lock, LLVM does not (``OURJAX_CUDA_PIPELINE=0``:
  all of them after the emission, as ``codegen.compile_ptx_modules``);
* where a GPU is present, each new module's PTX is also compiled by the driver's linker right
  away, on the thread that made it, and its cubin kept by the device (``precompiled``), so the
  first call's module load finds it instead of starting the driver's JIT only then
  (``OURJAX_CUDA_LINK_AT_COMPILE=0``: off).  A link that fails is remembered as failed and the
  load reports the module's error as before.

None of this changes a kernel's code: the PTX of a module is what ``codegen.compile_ptx`` makes
of it, whichever path made it.  ``clear()`` (``ourjax.clear_caches``) forgets the PTX.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict

from ourjax import _phases
from ourjax.config import env_switch

log = logging.getLogger("ourjax")

PTX_CACHE_BYTES = 64 << 20
"""The most PTX text the process keeps for reuse (the oldest modules are forgotten first)."""

_ptx: OrderedDict = OrderedDict()      # key -> (PTX, entry name of its kernel)
_ptx_bytes = 0
_lock = threading.Lock()


def cache_enabled() -> bool:
  return env_switch("OURJAX_CUDA_KERNEL_CACHE")


def pipelined() -> bool:
  return env_switch("OURJAX_CUDA_PIPELINE")


def link_at_compile() -> bool:
  return env_switch("OURJAX_CUDA_LINK_AT_COMPILE")


def clear() -> None:
  """Forget the PTX of earlier executables and the cubins linked for the devices."""
  global _ptx_bytes
  with _lock:
    _ptx.clear()
    _ptx_bytes = 0
  from ourjax.backends.cuda import driver
  for dev in list(driver._devices.values()):
    cubins = getattr(dev, "_ourjax_cubins", None)
    if cubins is not None:
      cubins.clear()


def _process_key(key: str, arch: str) -> str:
  """The key of a module's PTX across executables: its IR without the names of its own
  functions (``key``, as ``emit`` made it) and without the module's name line."""
  if key.startswith("; ModuleID"):
    key = key.split("\n", 1)[1] if "\n" in key else ""
  h = hashlib.sha256(b"ourjax-ptx-1\0")
  h.update(arch.encode() + b"\0")
  h.update(key.encode())
  return h.hexdigest()


def _get(pkey: str):
  with _lock:
    hit = _ptx.get(pkey)
    if hit is not None:
      _ptx.move_to_end(pkey)
    return hit


def _put(pkey: str, ptx: str, name: str) -> None:
  global _ptx_bytes
  with _lock:
    if pkey in _ptx:
      return
    _ptx[pkey] = (ptx, name)
    _ptx_bytes += len(ptx)
    while _ptx_bytes > PTX_CACHE_BYTES and len(_ptx) > 1:
      _, (old, _) = _ptx.popitem(last=False)
      _ptx_bytes -= len(old)


# ---------------------------------------------------------------------------------------------
# cubins made at compile time (kept by the device they were linked for)

_FAILED = b""


def precompiled(dev, key: str):
  """The cubin the linker made in this process of the module whose cache key is ``key``, for
  ``dev`` or another GPU of its architecture (the key holds it), ``_FAILED`` (b"") if that
  failed, or None."""
  from ourjax.backends.cuda import driver
  for d in [dev] + [d for d in list(driver._devices.values()) if d is not dev]:
    cubins = getattr(d, "_ourjax_cubins", None)
    if cubins is not None and key in cubins:
      return cubins[key]
  return None


def keep(dev, key: str, cubin) -> None:
  cubins = getattr(dev, "_ourjax_cubins", None)
  if cubins is None:
    cubins = {}
    try:
      dev._ourjax_cubins = cubins
    except AttributeError:      # pragma: no cover  (a device object that takes no attributes)
      return
  cubins[key] = cubin


def forget_precompiled(dev, key: str) -> None:
  cubins = getattr(dev, "_ourjax_cubins", None)
  if cubins is not None:
    cubins.pop(key, None)


def _link_device(arch: str):
  """The GPU to link new modules for at compile time (device 0, when present and of the
  architecture the code is made for), or None."""
  if not link_at_compile():
    return None
  from ourjax.backends.cuda import driver
  try:
    if not driver.available():
      return None
    dev = driver.get_device(0)
    return dev if str(dev.arch) == str(arch) else None
  except Exception as e:    # pragma: no cover
    log.debug("cuda: no device to link at compile time (%s)", e)
    return None


def _prelink(dev, ptx: str, name: str) -> None:
  from ourjax.backends.cuda import backend
  from ourjax.backends import disk_cache
  key = backend._cubin_keys([ptx], dev)[0]
  if precompiled(dev, key) is not None or disk_cache.read(key) is not None:
    return                         # (the load takes the one on disk)
  try:
    with _phases.phase("link"):
      cubin = dev.link_ptx(ptx, name)
  except Exception as e:     # (the load links again or loads the PTX, and reports it)
    log.debug("cuda: linking %s at compile time failed: %s", name, e)
    cubin = _FAILED
  keep(dev, key, cubin)


# ---------------------------------------------------------------------------------------------
# the builder

class ModuleBuilder:
  """Collects an executable's kernel modules (``add``) and gives their PTX (``results``)."""

  def __init__(self, arch: str, module_name: str, expected: int):
    self.arch, self.module_name = arch, module_name
    self.texts: list = []          # IR text of each distinct module
    self.names: list = []          # the entry name of each module's kernel
    self.first: dict = {}          # key -> module index
    self.pkeys: list = []          # the process-wide key of each module (None: cache off)
    self.ptx: list = []            # PTX text, or a future of it, per module
    self.cache = cache_enabled()
    self.dev = _link_device(arch)
    self.pool = None
    if pipelined() and expected > 1:
      from concurrent.futures import ThreadPoolExecutor
      self.pool = ThreadPoolExecutor(max(1, min(expected, os.cpu_count() or 1)),
                                     thread_name_prefix="ourjax-ptx")
    self._later: list = []         # (module index) compiled in ``results`` (no pool)

  def add(self, key: str, text: str, name: str) -> tuple:
    """(module index, entry name) of a kernel whose module is ``text`` (``key``: the text
    without its own function names)."""
    n = self.first.get(key)
    if n is not None:
      return n, self.names[n]
    n = self.first[key] = len(self.texts)
    self.texts.append(text)
    pkey = _process_key(key, self.arch) if self.cache else None
    self.pkeys.append(pkey)
    hit = _get(pkey) if pkey is not None else None
    if hit is not None:
      ptx, name = hit
      self.names.append(name)
      self.ptx.append(ptx)
      if self.dev is not None and self.pool is not None:
        self.ptx[-1] = self.pool.submit(_phases.bound(self._linked), ptx, name)
      elif self.dev is not None:
        self._later.append(n)
      return n, name
    self.names.append(name)
    if self.pool is not None:
      self.ptx.append(self.pool.submit(_phases.bound(self._compile), text, pkey, name))
    else:
      self.ptx.append(None)
      self._later.append(n)
    return n, name

  def _compile(self, text, pkey, name):
    from ourjax.backends.cuda import codegen
    ptx = codegen.compile_ptx_own(text, self.arch)
    if pkey is not None:
      _put(pkey, ptx, name)
    return self._linked(ptx, name)

  def _linked(self, ptx, name):
    if self.dev is not None:
      _prelink(self.dev, ptx, f"{self.module_name}.{name}")
    return ptx

  def results(self) -> list:
    """The PTX of every module, in order (waits for the workers)."""
    from ourjax.backends.cuda import codegen
    try:
      todo = [n for n in self._later if self.ptx[n] is None]
      if todo:
        made = codegen.compile_ptx_modules([self.texts[n] for n in todo], self.arch)
        for n, ptx in zip(todo, made):
          self.ptx[n] = ptx
          if self.pkeys[n] is not None:
            _put(self.pkeys[n], ptx, self.names[n])
      if self.dev is not None and self._later:
        for n in self._later:
          self._linked(self.ptx[n], self.names[n])
      return [p.result() if hasattr(p, "result") else p for p in self.ptx]
    finally:
      self.close()

  def close(self) -> None:
    if self.pool is not None:
      self.pool.shutdown(wait=True, cancel_futures=True)
      self.pool = None


def entry_key(text: str, own_names) -> str:
  """``text`` with the kernel's own function names replaced (``emit``'s key of a module)."""
  key = text
  for own in own_names:
    key = re.sub(re.escape(own) + r"(?![0-9])", "\x00", key)
  return key
