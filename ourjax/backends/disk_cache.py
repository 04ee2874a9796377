"""The on-disk compilation cache of the native backends: entries of compiled code by key.

    d = cache_dir()                       # None when disabled (OURJAX_CACHE_DIR=off)
    write(key, meta, obj, ir_text)        # atomically (temporary file + os.replace)
    read(key) -> (meta, obj, ir_text) | None

The key is the backend's (``cpu.cache.cache_key``: the module text, its constants, the
backend's source, LLVM and the target CPU; or ``cpu.cache.source_key``, that of the module
before the optimisation passes, whose entries also hold the optimised module's parameters and
constants; or ``cuda.cache.source_key``, whose entries hold a whole GPU executable; the parts
of keys are ``cache_keys.py``'s).  An entry is ``MAGIC``, the payload's length and
SHA-256, then the payload: the entry's own key, the JSON meta, the object code and the
compressed LLVM IR.  A read checks all of it: a truncated, damaged or foreign entry (one whose
recorded key is not the key it was read under, e.g. copied from another program's path) is
logged, removed and reported as a miss, so the program is compiled again; nothing runs code that
an entry does not vouch for.  The object code itself is checked again when it is loaded
(``cpu/loader.load_object`` -> ``cpu/elf.check``: ELF headers, section table, symbols, relocations,
entry points, symbols it needs), so that a damaged object under a recomputed checksum is a
miss too, never a crash of the loader.  The GEMM's shared objects live under ``gemm/`` in the same
directory (``llvm/gemm.py``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import zlib

log = logging.getLogger("ourjax")

__all__ = ["MAGIC", "cache_dir", "entry_path", "pack", "unpack", "read", "write", "remove",
           "source_digest"]

MAGIC = b"OURJAXCPU2\n"


_digests: dict = {}


def source_digest(*paths: str) -> str:
  """The SHA-256 of the files at ``paths`` (the sources that emit a library's code: part of its
  cache key), read and hashed once per process: a process runs the code it imported, whatever
  the files say later, and reading and hashing them again cost each library load of a new
  process 5-20 ms."""
  d = _digests.get(paths)
  if d is None:
    h = hashlib.sha256()
    for path in paths:
      with open(path, "rb") as f:
        h.update(f.read())
    d = _digests[paths] = h.hexdigest()
  return d


def cache_dir() -> str | None:
  """The on-disk compilation cache directory, or None when disabled."""
  from ourjax.config import config
  d = config.jax_compilation_cache_dir or os.environ.get("OURJAX_CACHE_DIR")
  if d and d.strip().lower() in ("off", "none", "0", "false", "disabled"):
    return None
  return d or os.path.join(os.path.expanduser("~"), ".cache", "ourjax")


def entry_path(key: str, d: str) -> str:
  return os.path.join(d, key[:2], key + ".bin")


def pack(key: str, meta: dict, obj: bytes, ir_text: str) -> bytes:
  k = key.encode()
  m = json.dumps(meta).encode()
  ir_z = zlib.compress(ir_text.encode(), 1)
  payload = (struct.pack("<Q", len(k)) + k + struct.pack("<Q", len(m)) + m +
             struct.pack("<Q", len(obj)) + obj + ir_z)
  return MAGIC + struct.pack("<Q", len(payload)) + hashlib.sha256(payload).digest() + payload


def unpack(data: bytes, key: str | None = None):
  """(meta, obj, ir) of an entry, or raises ValueError naming what is wrong (with ``key``: also
  when the entry was written under another key)."""
  if not data.startswith(MAGIC):
    raise ValueError("bad magic")
  off = len(MAGIC)
  if len(data) < off + 40:
    raise ValueError("truncated header")
  (n,) = struct.unpack_from("<Q", data, off)
  digest = data[off + 8:off + 40]
  payload = data[off + 40:]
  if len(payload) != n:
    raise ValueError(f"payload is {len(payload)} bytes, header says {n}")
  if hashlib.sha256(payload).digest() != digest:
    raise ValueError("checksum mismatch")
  (klen,) = struct.unpack_from("<Q", payload, 0)
  own = payload[8:8 + klen].decode()
  if key is not None and own != key:
    raise ValueError(f"it holds the program of key {own[:16]}..., not {key[:16]}...")
  p = 8 + klen
  (mlen,) = struct.unpack_from("<Q", payload, p)
  meta = json.loads(payload[p + 8:p + 8 + mlen].decode())
  p += 8 + mlen
  (olen,) = struct.unpack_from("<Q", payload, p)
  obj = payload[p + 8:p + 8 + olen]
  ir_text = zlib.decompress(payload[p + 8 + olen:]).decode()
  return meta, obj, ir_text


def read(key: str):
  """The entry of ``key`` as (meta, obj, ir_text), or None (disabled, missing, or damaged or
  foreign: then logged and removed)."""
  d = cache_dir()
  if not d:
    return None
  path = entry_path(key, d)
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError:
    return None
  try:
    return unpack(data, key)
  except Exception as e:   # damaged entry: say so, drop it, recompile
    log.warning("ourjax: compilation cache entry %s is damaged (%s); recompiling", path, e)
    try:
      os.remove(path)
    except OSError:
      pass
    return None


def remove(key: str) -> None:
  """Drop the entry of ``key`` (one that read back intact but does not work), if any."""
  d = cache_dir()
  if d:
    try:
      os.remove(entry_path(key, d))
    except OSError:
      pass


def write(key: str, meta: dict, obj: bytes, ir_text: str) -> None:
  """Store an entry atomically; a failure to write is logged (debug) and otherwise ignored."""
  d = cache_dir()
  if not d:
    return
  path = entry_path(key, d)
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "wb") as f:
      f.write(pack(key, meta, obj, ir_text))
    os.replace(tmp, path)
  except OSError as e:
    log.debug("ourjax: could not write the compilation cache entry %s: %s", path, e)
    try:
      os.remove(tmp)
    except OSError:
      pass
