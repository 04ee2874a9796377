"""The CUDA backend's warm starts: a whole executable an earlier process compiled, found by its
module as lowered and rebuilt without the compiler (the CPU's are ``cpu/cache.py``).

    key = source_key(module)            # None without a GPU (nothing is cached then)
    exe = load_by_source(key, make)     # a CudaExecutable, or None (then compile and:)
    store_by_source(key, exe)

The key (``backends/cache_keys.py``, as the CPU's): the module's text and constants' bytes (its
donated parameters, ``input_output_alias``, in the text); the sources of everything that makes
code from it (the HLO IR, the pipeline and its passes; the shared planner and emitter,
``backends/llvm``; the CPU backend's planner that this backend's subclasses; this backend; the
options ``backends/__init__`` gives the pipeline); the settings that differ from their modules'
import, this backend's included (``settings.CUDA_MODULES``), and the ``OURJAX_*`` environment;
the GPU (device 0's name, compute capability, SM count, shared memory a block may opt into,
the driver's version: its linker makes the cubins), llvmlite (its NVPTX target makes the PTX),
known without importing it, and the CPU thread count (the shared planner cuts kernels by it).

An entry holds what running the executable needs (``describe``): its launch program
(``program.py``: launches, copies, loops, conditionals over the slot table), each kernel's
module, entry point and launch (grid, block, dynamic shared memory, made for the recorded
GPU) and the profiler's description of it, the PTX of each module and its cubin (the one the
driver's linker made while the program compiled, ``kernel_cache``), the constants' bytes, the
parameters' and results' types, the arena's size, the slot count and donation's aliases.

A hit (``load_by_source``) rebuilds the ``CudaExecutable`` from the entry (``rebuild``) and its
first call loads the cubins: it imports neither the passes, the planner, the code generator
nor llvmlite.  Its optimised module and LLVM IR are made again only when asked for.  Run on a
GPU other than the one recorded (another GPU of the process), it compiles again there; a cubin
that the driver refuses drops the entry and its PTX is loaded instead; an entry that does not
rebuild is a miss.
"""
from __future__ import annotations

import hashlib
import logging
import os

import numpy as np

from ourjax import _phases
from ourjax.backends import cache_keys, disk_cache, settings
from ourjax.backends.cuda import driver
from ourjax.lowering import hlo

log = logging.getLogger("ourjax")

__all__ = ["source_key", "load_by_source", "store_by_source", "describe", "rebuild",
           "encode_program", "decode_program", "RecordedKernel", "FORMAT"]

#: The layout of an entry's meta (a change makes every older entry a miss).
FORMAT = "ourjax-cuda-executable-1"

_source_hash = None


def _backend_source_hash() -> str:
  """The SHA-256 of the sources that make a module's GPU code (listed by directory, not by
  importing them)."""
  global _source_hash
  if _source_hash is None:
    base = cache_keys.BACKENDS
    paths = cache_keys.sources("llvm", "cpu", "cuda") + [
        os.path.join(base, f) for f in ("__init__.py", "donation.py", "settings.py")]
    _source_hash = cache_keys.pipeline_digest(cache_keys.files_digest(paths, base))
  return _source_hash


def device_tag(dev) -> str:
  """What of GPU ``dev`` its code and cubins follow."""
  return (f"{dev.name}/sm_{dev.arch}/{dev.multiprocessor_count}/"
          f"{getattr(dev, 'max_shared_per_block_optin', '')}/{dev.driver_version}")


def _target_tag() -> str | None:
  """The GPU code is made for (device 0, as ``backend.device_info``), llvmlite and the CPU
  thread count; None without a GPU."""
  if not driver.available():
    return None
  from ourjax.backends.cpu.threads import num_threads
  return f"{device_tag(driver.get_device(0))}/{cache_keys.llvmlite_stamp()}/{num_threads()}"


def source_key(module: hlo.Module) -> str | None:
  """The disk-cache key of ``module`` as lowered (before the passes) for the GPU here, or None
  when there is no GPU (see the module's docstring)."""
  target = _target_tag()
  if target is None:
    return None
  h = hashlib.sha256(b"cuda-source\n")
  cache_keys.hash_module(h, module)
  h.update(_backend_source_hash().encode())
  h.update(settings.digest(cuda=True).encode())
  h.update(target.encode())
  return "gpusrc-" + h.hexdigest()


# ---------------------------------------------------------------------------------------------
# the launch program as JSON
# ---------------------------------------------------------------------------------------------

def _spec(s) -> tuple:
  return (int(s[0]), int(s[1]))


def encode_program(program) -> list:
  """``program`` (``program.py``'s ops) as JSON values."""
  out = []
  for op in program:
    kind = op[0]
    if kind == "k":
      out.append(["k", int(op[1]), [int(i) for i in op[2]], [int(o) for o in op[3]]])
    elif kind == "copy":
      out.append(["copy", list(_spec(op[1])), list(_spec(op[2])), int(op[3])])
    elif kind == "repeat":
      out.append(["repeat", int(op[1]), encode_program(op[2]),
                  None if op[3] is None else encode_program(op[3]), encode_program(op[4])])
    elif kind == "while":
      out.append(["while", encode_program(op[1]), list(_spec(op[2])), encode_program(op[3]),
                  op[4], None if op[5] is None else encode_program(op[5]),
                  None if op[6] is None else encode_program(op[6]), encode_program(op[7])])
    elif kind == "cond":
      out.append(["cond", list(_spec(op[1])), hlo.dtype_name(np.dtype(op[2])),
                  [encode_program(b) for b in op[3]], op[4]])
    else:
      raise ValueError(f"cuda cache: unknown launch op {kind!r}")
  return out


def decode_program(data) -> list:
  """The launch program ``encode_program`` wrote."""
  out = []
  for op in data:
    kind = op[0]
    if kind == "k":
      out.append(("k", int(op[1]), np.array(op[2], np.int64), np.array(op[3], np.uint64)))
    elif kind == "copy":
      out.append(("copy", _spec(op[1]), _spec(op[2]), int(op[3])))
    elif kind == "repeat":
      out.append(("repeat", int(op[1]), decode_program(op[2]),
                  None if op[3] is None else decode_program(op[3]), decode_program(op[4])))
    elif kind == "while":
      out.append(("while", decode_program(op[1]), _spec(op[2]), decode_program(op[3]),
                  str(op[4]), None if op[5] is None else decode_program(op[5]),
                  None if op[6] is None else decode_program(op[6]), decode_program(op[7])))
    elif kind == "cond":
      out.append(("cond", _spec(op[1]), np.dtype(hlo.to_dtype(op[2])),
                  [decode_program(b) for b in op[3]], str(op[4])))
    else:
      raise ValueError(f"cuda cache: unknown launch op {kind!r}")
  return out


# ---------------------------------------------------------------------------------------------
# kernels as recorded
# ---------------------------------------------------------------------------------------------

class RecordedKernel:
  """A kernel of an executable from the disk cache: what launching it needs (its module and
  entry point, ``ptx_entry``, and its launch on the GPU recorded), and the profiler's
  description of the kernel it stands for (``described``: ``llvm/kernel_info.describe``)."""
  __slots__ = ("name", "ptx_entry", "described", "_launch", "_made_for")

  def __init__(self, name, ptx_entry, launch, made_for, described):
    self.name, self.ptx_entry, self.described = name, ptx_entry, described
    self._launch, self._made_for = launch, made_for

  def launch(self, info):
    """(grid, block, shared bytes) on the GPU ``info`` describes: the recorded GPU's only."""
    if (str(info.arch), int(info.sm_count)) != self._made_for:
      raise ValueError(f"kernel {self.name} was made for sm_{self._made_for[0]} with "
                       f"{self._made_for[1]} SMs, not sm_{info.arch} with {info.sm_count}")
    return self._launch

  def __repr__(self):
    return f"<RecordedKernel {self.name} ({self.described.get('kind')})>"


# ---------------------------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------------------------

class _Parts:
  """Byte strings laid end to end (an entry's object part), each named by [offset, length]."""

  def __init__(self):
    self.chunks, self.size = [], 0

  def add(self, data: bytes) -> list:
    at = [self.size, len(data)]
    self.chunks.append(data)
    self.size += len(data)
    return at

  def blob(self) -> bytes:
    return b"".join(self.chunks)


def _part(blob, at) -> bytes:
  off, n = int(at[0]), int(at[1])
  if off < 0 or n < 0 or off + n > len(blob):
    raise ValueError(f"part [{off}, {n}] outside the entry's {len(blob)} bytes")
  return bytes(blob[off:off + n])


def _described(kernel, kernel_info) -> dict:
  """The profiler's description of ``kernel``: the one recorded with it when it came from the
  disk cache (a ``RecordedKernel`` has no instructions to describe), else ``kernel_info``'s."""
  if isinstance(kernel, RecordedKernel):
    return kernel.described
  return kernel_info.describe(kernel)


def describe(exe, dev, cubins=None) -> tuple:
  """(meta, object bytes) of the ``CudaExecutable`` ``exe`` fresh from ``compile`` for GPU
  ``dev`` (its launches as they are there), ``cubins`` the cubin of each of its PTX modules
  (None or b"": none, its first call links it)."""
  from ourjax.backends.cuda.target import DeviceInfo
  from ourjax.backends.llvm import kernel_info
  info = DeviceInfo(dev.arch, dev.multiprocessor_count)
  parts = _Parts()
  ptx = [parts.add(p.encode()) for p in exe._ptx_modules]
  cubins = list(cubins) if cubins is not None else [None] * len(exe._ptx_modules)
  kernels = []
  for k in exe._kernels:
    grid, block, shared = k.launch(info)
    g, entry = k.ptx_entry
    kernels.append([k.name, int(g), entry, [int(x) for x in grid], [int(x) for x in block],
                    int(shared), _described(k, kernel_info)])
  consts = []
  for slot, value in exe._consts:
    v = np.ascontiguousarray(value)
    consts.append([int(slot), hlo.dtype_name(v.dtype), list(v.shape), parts.add(v.tobytes())])
  meta = {
      "kind": FORMAT, "name": exe.name, "made_for": [str(dev.arch), int(dev.multiprocessor_count)],
      "ptx": ptx, "cubins": [parts.add(bytes(c)) if c else None for c in cubins],
      "program": encode_program(exe._program), "kernels": kernels, "consts": consts,
      "params": [[hlo.dtype_name(np.dtype(d)), [int(x) for x in s]] for d, s in exe.param_specs],
      "outputs": [[hlo.dtype_name(np.dtype(d)), [int(x) for x in s]] for d, s in exe.out_specs],
      "arena_bytes": int(exe.arena_bytes), "nslots": int(exe.nslots),
      "aliases": [[int(j), int(k)] for j, k in exe.aliases]}
  return meta, parts.blob()


def rebuild(meta: dict, blob: bytes, make_module):
  """The ``CudaExecutable`` that ``describe`` described (``make_module()`` makes its optimised
  module when something asks for it); raises ValueError for an entry it cannot read."""
  from ourjax.backends.cuda.backend import CudaExecutable
  if meta.get("kind") != FORMAT:
    raise ValueError(f"an entry of kind {meta.get('kind')!r}, not {FORMAT!r}")
  made_for = (str(meta["made_for"][0]), int(meta["made_for"][1]))
  ptx = [_part(blob, at).decode() for at in meta["ptx"]]
  cubins = [_part(blob, at) if at else None for at in meta["cubins"]]
  if len(cubins) != len(ptx):
    raise ValueError(f"{len(cubins)} cubins for {len(ptx)} PTX modules")
  kernels = []
  for name, g, entry, grid, block, shared, described in meta["kernels"]:
    if not 0 <= int(g) < len(ptx):
      raise ValueError(f"kernel {name} in module {g} of {len(ptx)}")
    kernels.append(RecordedKernel(name, (int(g), entry), (tuple(grid), tuple(block),
                                                           int(shared)), made_for, described))
  consts = []
  for slot, dt, shape, at in meta["consts"]:
    v = np.frombuffer(_part(blob, at), hlo.to_dtype(dt)).reshape(shape)
    consts.append((int(slot), v))
  params = [(np.dtype(hlo.to_dtype(d)), tuple(s)) for d, s in meta["params"]]
  outs = [(np.dtype(hlo.to_dtype(d)), tuple(s)) for d, s in meta["outputs"]]
  program = decode_program(meta["program"])
  _check_program(program, len(kernels), int(meta["nslots"]))
  exe = CudaExecutable(make_module, ptx, None, program, kernels, consts, params, outs,
                       int(meta["arena_bytes"]), int(meta["nslots"]),
                       [(int(j), int(k), None) for j, k in meta["aliases"]], name=meta["name"])
  exe._images, exe._made_for = cubins, made_for
  return exe


def _check_program(program, nkernels: int, nslots: int) -> None:
  """Raise ValueError unless every launch names a kernel and every spec a slot there is."""
  from ourjax.backends.cuda.program import _walk
  ok = lambda s: 0 <= s[0] < nslots     # noqa: E731
  for op in _walk(program):
    if op[0] == "k":
      if not 0 <= op[1] < nkernels or not all(0 <= i < nslots for i in op[2].tolist()) or \
         len(op[2]) != len(op[3]):
        raise ValueError(f"a launch of kernel {op[1]} outside the executable")
    elif not (ok(op[1]) and ok(op[2])):
      raise ValueError("a copy outside the slot table")


def load_by_source(key: str, make_module):
  """The executable cached under source key ``key`` (None: no such entry, or it would not
  rebuild); ``make_module()`` makes its optimised module when something asks for it."""
  with _phases.phase("cache_read"):
    hit = disk_cache.read(key)
  if hit is None:
    return None
  meta, blob, _ = hit
  try:
    with _phases.phase("load"):
      exe = rebuild(meta, blob, make_module)
  except Exception as e:   # noqa: BLE001  (compiled again by the caller)
    log.warning("ourjax: compilation cache entry %s could not be loaded (%s: %s); recompiling",
                key, type(e).__name__, e)
    disk_cache.remove(key)
    return None
  exe._entry_key = key
  return exe


def store_by_source(key: str, exe) -> None:
  """Cache ``exe`` (fresh from ``compile``: a ``CudaExecutable``, else nothing is stored)
  under source key ``key``, with the cubins the driver's linker made for device 0 while it
  compiled (or found in the disk cache)."""
  from ourjax.backends.cuda.backend import CudaExecutable, _cubin_keys
  from ourjax.backends.cuda import kernel_cache
  if type(exe) is not CudaExecutable or exe._made_for is not None or not disk_cache.cache_dir():
    return
  try:
    dev = driver.get_device(0)
    cubins = []
    for ckey in _cubin_keys(exe._ptx_modules, dev):
      made = kernel_cache.precompiled(dev, ckey)
      if not made:
        hit = disk_cache.read(ckey)
        made = hit[1] if hit is not None else None
      cubins.append(made or None)
    meta, blob = describe(exe, dev, cubins)
  except Exception as e:   # noqa: BLE001  (the program runs; only the entry is missing)
    log.debug("ourjax: %s is not cached (%s: %s)", exe.name, type(e).__name__, e)
    return
  with _phases.phase("cache_write"):
    disk_cache.write(key, meta, blob, "")
