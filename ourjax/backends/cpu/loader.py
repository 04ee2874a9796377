"""Loads the CPU backend's object code into executable memory without LLVM, and keeps the
process's table of the symbols that loaded code defines for other code.

    cm = load_object(obj, ["ourjax_entry"])    # what jit.load_object gives, minus LLVM
    cm.address("ourjax_entry")                 # the entry's address
    define("ourjax_gemm_f32", addr)            # code loaded later links to it

Object code is what LLVM emits for this host (``jit.compile_to_object``): ELF64 relocatable
x86-64 objects of the large code model, whose code (``.ltext``) reaches everything through
absolute 64-bit relocations.  Loading one is a small job: lay its allocated sections out in one
mapping (code, read-only data, writable data, a page apart), resolve its symbols (its own, those
of the objects loaded with it, those of the process's libraries of code (``define``), then the
C library's), apply the relocations, and make the code pages executable and no longer writable.
That is what a warm start needs: a program found in the disk cache is loaded without importing
llvmlite's binding (~25 ms of a new process), starting LLVM, or an MCJIT engine per object.

Anything outside that small job (another architecture or relocation type, a symbol nobody
defines, ``OURJAX_CPU_LOADER=0``) falls back to LLVM's MCJIT loader (``jit.load_object``), which
also defines everything this table holds (``mirror``).  Unwind tables (``.eh_frame``) are not
loaded: no exception unwinds through the backend's code.  The objects are checked first
(``elf.check``) either way, so a damaged cache entry is a miss, never a crash.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import sys
import threading
import weakref

import numpy as np

from ourjax.backends.cpu import elf

__all__ = ["load_object", "define", "lookup", "mirror", "LoadedCode", "Unsupported", "enabled",
           "unpack_objects", "MULTI"]

_lock = threading.Lock()
SYMBOLS: dict = {}        # name -> address: what the process's loaded libraries define
_llvm = None              # llvmlite.binding, once something uses MCJIT (``mirror``)


class Unsupported(Exception):
  """This loader cannot load the object (LLVM's can, perhaps)."""


def define(name: str, addr: int) -> None:
  """Make ``name`` resolve to ``addr`` for code loaded from now on (by this loader, and by LLVM
  once it is in use)."""
  with _lock:
    SYMBOLS[name] = addr
    if _llvm is not None:
      _llvm.add_symbol(name, addr)


def mirror(llvm) -> None:
  """Define the table's symbols in LLVM's symbol table, and those defined later too (called
  when the JIT starts: code it compiles or loads calls the libraries loaded here)."""
  global _llvm
  with _lock:
    for name, addr in SYMBOLS.items():
      llvm.add_symbol(name, addr)
    _llvm = llvm


_libc = None


def lookup(name: str) -> int | None:
  """The address of ``name``: the table's, else the process's (the C and math libraries)."""
  global _libc
  addr = SYMBOLS.get(name)
  if addr is not None:
    return addr
  if _libc is None:
    _libc = [ctypes.CDLL(None)]
    for lib in ("libm.so.6", "libc.so.6"):
      try:
        _libc.append(ctypes.CDLL(lib))
      except OSError:
        pass
  for lib in _libc:
    try:
      return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
      continue
  return None


def enabled() -> bool:
  """Whether this loader is tried first: on x86-64 Linux, unless ``OURJAX_CPU_LOADER=0``."""
  return (sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
          and os.environ.get("OURJAX_CPU_LOADER", "1") != "0")


def load_object(obj: bytes, entry_names=(), optimized_ir: str | None = None):
  """``obj`` (one object, or several packed by ``jit.pack_objects``) loaded, its
  ``entry_names`` resolved: a ``LoadedCode`` from this loader, or LLVM's ``CompiledModule``
  when this one cannot load it.  Raises ``jit.CompileError`` (``ourjax.errors.CompileError``)
  for object code that fails its check or lacks an entry point."""
  from ourjax.errors import CompileError
  if enabled():
    try:
      parts = unpack_objects(bytes(obj))
    except ValueError as e:
      raise CompileError(f"object code failed its check: {e}") from None
    machine = elf.host_machine()
    for k, part in enumerate(parts):
      try:
        elf.check(part, machine)
      except ValueError as e:
        raise CompileError(f"object code failed its check: object {k} of {len(parts)}: "
                           f"{e}") from None
    try:
      return LoadedCode(parts, entry_names, obj, optimized_ir)
    except Unsupported:
      pass
    except (ValueError, IndexError, struct.error) as e:   # (what elf.check does not read)
      raise CompileError(f"object code failed its check: {e}") from None
  from ourjax.backends.cpu import jit
  from ourjax.backends.cpu.libraries import _ensure_runtime_symbols
  _ensure_runtime_symbols()
  return jit.load_object(obj, entry_names, optimized_ir)


MULTI = b"OURJAXOBJS1\n"     # (the head of jit.pack_objects' blobs)


def unpack_objects(blob: bytes) -> list:
  """The objects of a ``jit.pack_objects`` blob (ValueError: a damaged one)."""
  if not blob.startswith(MULTI):
    return [blob]
  k = len(MULTI)
  n = int.from_bytes(blob[k:k + 4], "little")
  sizes = [int.from_bytes(blob[k + 4 + 8 * i:k + 12 + 8 * i], "little") for i in range(n)]
  pos, out = k + 4 + 8 * n, []
  for size in sizes:
    out.append(blob[pos:pos + size])
    pos += size
  if pos != len(blob):
    raise ValueError("a multi-object blob of the wrong length")
  return out


_SHF_WRITE, _SHF_ALLOC, _SHF_EXEC = 1, 2, 4
_SHT_NOBITS, _SHT_RELA, _SHT_SYMTAB, _SHT_X86_64_UNWIND = 8, 4, 2, 0x70000001
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS = 0, 0xFF00, 0xFFF1
_STB_LOCAL, _STB_WEAK = 0, 2
# x86-64 relocation types (System V ABI)
_R_64, _R_PC32, _R_PLT32, _R_GOTPCREL, _R_32, _R_32S, _R_PC64 = 1, 2, 4, 9, 10, 11, 24
_R_GOTPCRELX, _R_REX_GOTPCRELX = 41, 42
_GOT_TYPES = (_R_GOTPCREL, _R_GOTPCRELX, _R_REX_GOTPCRELX)
_KNOWN = {_R_64, _R_PC32, _R_PLT32, _R_32, _R_32S, _R_PC64} | set(_GOT_TYPES)

_PAGE = mmap.PAGESIZE


class _Object:
  """One object's sections, symbols and relocations, as the layout needs them."""

  def __init__(self, data: bytes):
    self.data = data
    (_t, _m, _v, _e, _p, shoff, _f, _eh, _pe, _pn, _se, shnum, shstrndx) = \
        struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    self.sh = sh = np.frombuffer(data, elf._SHDR, shnum, shoff)
    names = self.section_data(shstrndx)
    self.loaded = {}      # section index -> (group, size, alignment)
    for i in range(1, shnum):
      s = sh[i]
      flags, size = int(s["flags"]), int(s["size"])
      if not flags & _SHF_ALLOC or size == 0 or int(s["type"]) == _SHT_X86_64_UNWIND:
        continue
      name = elf._cstr(names, int(s["name"]), "section")
      if name == ".eh_frame":
        continue
      group = 0 if flags & _SHF_EXEC else 2 if flags & _SHF_WRITE else 1
      self.loaded[i] = (group, size, max(int(s["addralign"]), 1))
    tabs = np.nonzero(sh["type"] == _SHT_SYMTAB)[0]
    if len(tabs) != 1:
      raise Unsupported(f"{len(tabs)} symbol tables")
    self.symtab = int(tabs[0])
    self.syms = np.frombuffer(self.section_data(self.symtab), elf._SYM)
    self.strtab = self.section_data(int(sh[self.symtab]["link"]))
    self.relocs = []      # (target section, rela entries)
    for i in np.nonzero(sh["type"] == _SHT_RELA)[0]:
      target = int(sh[i]["info"])
      if target in self.loaded:
        if int(sh[i]["link"]) != self.symtab:
          raise Unsupported("relocations against another symbol table")
        self.relocs.append((target, np.frombuffer(self.section_data(int(i)), elf._RELA)))
    if np.any(sh["type"] == 9):       # SHT_REL: not what LLVM emits on x86-64
      raise Unsupported("REL relocations")

  def section_data(self, i: int) -> bytes:
    s = self.sh[i]
    return self.data[int(s["offset"]):int(s["offset"]) + int(s["size"])]

  def name(self, k: int) -> str:
    return elf._cstr(self.strtab, int(self.syms[k]["name"]), "symbol")


class CodeAccess:
  """What executables use of loaded code besides ``address``, for this loader's ``LoadedCode``
  and LLVM's ``jit.CompiledModule`` alike: ``ctypes_function`` and ``asm`` (needs ``address``,
  ``optimized_ir`` and ``_asm``)."""

  def ctypes_function(self, name: str, restype, argtypes):
    """A ctypes callable for ``name``; it keeps this object (and its code) alive."""
    fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
    fn._ourjax_owner = self
    return fn

  @property
  def asm(self) -> str:
    """Host assembly of the optimised module, when it is known (LLVM makes it, on first
    access)."""
    if self._asm is None:
      self._asm = ""
      if self.optimized_ir:
        from ourjax.backends.cpu import jit
        with jit._lock:
          self._asm = jit.host_target_machine().emit_assembly(
              jit.llvm.parse_assembly(self.optimized_ir))
    return self._asm


class LoadedCode(CodeAccess):
  """Object code loaded by this module: the machine code lives as long as this object (the
  interface of ``jit.CompiledModule`` that executables use: ``address``, ``ctypes_function``,
  ``entry_names``, ``optimized_ir``, ``asm``)."""

  def __init__(self, parts, entry_names, obj: bytes, optimized_ir: str | None = None):
    self._object = obj
    self.optimized_ir = optimized_ir or ""
    objs = [_Object(p) for p in parts]
    # (layout: each group's sections in a row, the groups a page apart, then the GOT)
    ends = [0, 0, 0]
    place = []
    for o in objs:
      offs = {}
      for i, (group, size, align) in o.loaded.items():
        at = -(-ends[group] // align) * align
        offs[i] = (group, at)
        ends[group] = at + size
      place.append(offs)
    got_index = {}        # (object, symbol index) -> GOT slot
    for n, o in enumerate(objs):
      for _t, rel in o.relocs:
        types = (rel["info"] & 0xFFFFFFFF).tolist()
        unknown = set(types) - _KNOWN
        if unknown:
          raise Unsupported(f"relocation type(s) {sorted(unknown)}")
        if not set(types).isdisjoint(_GOT_TYPES):
          for t, k in zip(types, (rel["info"] >> 32).tolist()):
            if t in _GOT_TYPES:
              got_index.setdefault((n, k), len(got_index))
    starts = [0] * 3
    pos = 0
    for g in range(3):
      starts[g] = pos
      pos += -(-ends[g] // _PAGE) * _PAGE
    got_at = pos if got_index else None
    pos += -(-8 * len(got_index) // _PAGE) * _PAGE
    total = max(pos, _PAGE)
    base = _map(total)
    # (unmapped when this object dies; not at exit, while the pool's threads may still be in
    # the runtime library's code)
    self._finalizer = weakref.finalize(self, _unmap, base, total)
    self._finalizer.atexit = False
    image = np.zeros(total, np.uint8)
    sec_addr = []
    for o, offs in zip(objs, place):
      addrs = {}
      for i, (group, at) in offs.items():
        off = starts[group] + at
        addrs[i] = base + off
        s = o.sh[i]
        if int(s["type"]) != _SHT_NOBITS:
          image[off:off + int(s["size"])] = np.frombuffer(o.section_data(i), np.uint8)
      sec_addr.append(addrs)
    # the global symbols the objects define (the first definition of a name wins; a weak one
    # gives way to a strong one)
    defined, strong = {}, set()
    for o, addrs in zip(objs, sec_addr):
      for k in np.nonzero((o.syms["info"] >> 4) != _STB_LOCAL)[0].tolist():
        shndx = int(o.syms[k]["shndx"])
        if shndx == _SHN_UNDEF:
          continue
        name = o.name(k)
        if shndx == _SHN_ABS:
          addr = int(o.syms[k]["value"])
        elif shndx in addrs:
          addr = addrs[shndx] + int(o.syms[k]["value"])
        else:
          continue
        weak = (int(o.syms[k]["info"]) >> 4) == _STB_WEAK
        if name not in defined or (name not in strong and not weak):
          defined[name] = addr
          if not weak:
            strong.add(name)
    self._addresses = defined
    # the relocations
    for n, (o, addrs) in enumerate(zip(objs, sec_addr)):
      if not o.relocs:
        continue
      values = np.zeros(len(o.syms), np.uint64)
      resolved = np.zeros(len(o.syms), bool)
      resolved[0] = True          # (the null symbol: S = 0)
      for k in range(1, len(o.syms)):
        shndx = int(o.syms[k]["shndx"])
        if shndx == _SHN_UNDEF:
          name = o.name(k)
          addr = defined.get(name)
          if addr is None:
            addr = lookup(name)
          if addr is None:
            if name.startswith("_GLOBAL_OFFSET_TABLE_"):
              raise Unsupported("position-independent code")
            raise Unsupported(f"symbol {name!r} is not defined here")
        elif shndx == _SHN_ABS:
          addr = int(o.syms[k]["value"])
        elif shndx in addrs:
          addr = addrs[shndx] + int(o.syms[k]["value"])
        else:
          continue        # (a symbol of a section not loaded: only unwind tables use them)
        values[k] = addr
        resolved[k] = True
      for target, rel in o.relocs:
        sec_off = addrs[target] - base
        size = int(o.sh[target]["size"])
        types = (rel["info"] & 0xFFFFFFFF).astype(np.int64)
        symk = (rel["info"] >> 32).astype(np.int64)
        if not resolved[symk].all():
          raise Unsupported("a relocation against a section that is not loaded")
        off = rel["offset"].astype(np.int64)
        wide = (types == _R_64) | (types == _R_PC64)
        if len(off) and int((off + np.where(wide, 8, 4)).max()) > size:
          raise Unsupported("a relocation past the end of its section")
        S = values[symk]
        A = rel["addend"].astype(np.uint64)
        where = off + sec_off
        if wide.any():
          v = S[wide] + A[wide]
          pc = types[wide] == _R_PC64
          v[pc] -= (where[wide][pc] + base).astype(np.uint64)
          idx = where[wide][:, None] + np.arange(8)
          image[idx] = v.astype("<u8").view(np.uint8).reshape(-1, 8)
        for j in np.nonzero(~wide)[0].tolist():
          t, at, a = int(types[j]), int(where[j]), int(rel["addend"][j])
          p = base + at
          if t in _GOT_TYPES:
            slot = got_at + 8 * got_index[(n, int(symk[j]))]
            image[slot:slot + 8] = np.frombuffer(struct.pack("<Q", int(S[j])), np.uint8)
            v = base + slot + a - p
          elif t in (_R_PC32, _R_PLT32):
            v = int(S[j]) + a - p
          else:
            v = int(S[j]) + a
          if t == _R_32:
            ok = 0 <= v < 1 << 32
          else:
            ok = -(1 << 31) <= v < 1 << 31
          if not ok:
            raise Unsupported(f"relocation type {t} out of range")
          image[at:at + 4] = np.frombuffer(struct.pack("<I", v & 0xFFFFFFFF), np.uint8)
    for name in entry_names:
      if name not in defined:
        from ourjax.errors import CompileError
        raise CompileError(f"object code failed its check: entry point {name!r} is not "
                           f"defined in the object code")
    ctypes.memmove(base, image.ctypes.data, total)
    # code: read and execute; read-only data: read; the rest stays writable
    code_bytes = starts[1] - starts[0]
    ro_bytes = starts[2] - starts[1]
    if code_bytes:
      _protect(base, code_bytes, mmap.PROT_READ | mmap.PROT_EXEC)
    if ro_bytes:
      _protect(base + starts[1], ro_bytes, mmap.PROT_READ)
    self._entry_names = tuple(entry_names)
    self._asm = None

  @property
  def entry_names(self):
    return self._entry_names

  def __copy__(self):       # (one mapping, unmapped once: copies are this object)
    return self

  def __deepcopy__(self, memo):
    return self

  def address(self, name: str) -> int:
    """The address of the global symbol ``name`` the objects define."""
    addr = self._addresses.get(name)
    if addr is None:
      raise KeyError(f"function {name!r} is not defined in the loaded object code")
    return addr



_libc_fns = None


def _fns():
  global _libc_fns
  if _libc_fns is None:
    libc = ctypes.CDLL(None, use_errno=True)
    mm, mu, mp = libc.mmap, libc.munmap, libc.mprotect
    mm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_long]
    mm.restype = ctypes.c_void_p
    mu.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    mp.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    mu.restype = mp.restype = ctypes.c_int
    _libc_fns = (mm, mu, mp)
  return _libc_fns


def _map(size: int) -> int:
  addr = _fns()[0](None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                   mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  if addr is None or addr == ctypes.c_void_p(-1).value:
    raise MemoryError(f"could not map {size} bytes for object code "
                      f"(errno {ctypes.get_errno()})")
  return addr


def _unmap(addr: int, size: int) -> None:
  _fns()[1](addr, size)


def _protect(addr: int, size: int, prot: int) -> None:
  if _fns()[2](addr, size, prot):
    raise Unsupported(f"mprotect failed (errno {ctypes.get_errno()})")
