"""A small reader of ELF64 relocatable objects, to check object code before LLVM loads it.

LLVM's loader (RuntimeDyld) trusts the object it is given: a relocation pointing past its
section writes outside it, an unknown relocation type or a symbol nothing defines aborts the
process.  Object code read back from the disk cache passed a checksum, but a checksum can be
recomputed over damaged bytes; ``check(obj, ...)`` parses the headers, the section table, the
symbol tables and every relocation and raises ``ValueError`` naming the first inconsistency, so
a damaged entry becomes a cache miss instead of a crash.  (It cannot tell whether the machine
code inside a section is right: that is what the checksum is for.)

    info = check(obj, machine=host_machine())
    info.defined      # global symbols the object defines
    info.undefined    # global symbols it needs from elsewhere
"""
from __future__ import annotations

import platform
import struct
from typing import NamedTuple

import numpy as np

__all__ = ["ObjectInfo", "check", "host_machine"]

_EM = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}
_ET_REL = 1
_SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 3, 4, 8, 9
_SHN_LORESERVE, _SHN_ABS, _SHN_COMMON = 0xFF00, 0xFFF1, 0xFFF2
_STB_LOCAL = 0
#: the largest relocation type number the loader knows, per machine (R_X86_64_REX_GOTPCRELX
#: is 42); others are not range-checked
_MAX_RELOC_TYPE = {62: 42}

_SHDR = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"),
                  ("offset", "<u8"), ("size", "<u8"), ("link", "<u4"), ("info", "<u4"),
                  ("addralign", "<u8"), ("entsize", "<u8")])
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                 ("value", "<u8"), ("size", "<u8")])
_RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
_REL = np.dtype([("offset", "<u8"), ("info", "<u8")])


class ObjectInfo(NamedTuple):
  defined: frozenset
  undefined: frozenset


def host_machine() -> int | None:
  """The ELF ``e_machine`` of this host, or None when unknown (then not checked)."""
  return _EM.get(platform.machine().lower())


def _cstr(table: bytes, off: int, what: str) -> str:
  if off >= len(table):
    raise ValueError(f"{what}: name offset {off} is outside its string table")
  end = table.find(b"\0", off)
  if end < 0:
    raise ValueError(f"{what}: name is not terminated inside its string table")
  return table[off:end].decode("latin-1")


def check(obj: bytes, machine: int | None = None) -> ObjectInfo:
  """Check that ``obj`` is a consistent little-endian ELF64 relocatable object (for
  ``machine``, an ``e_machine`` number, when given); return its global symbols."""
  n = len(obj)
  if n < 64 or obj[:4] != b"\x7fELF":
    raise ValueError("not an ELF object (bad magic or shorter than its header)")
  if obj[4] != 2 or obj[5] != 1 or obj[6] != 1:
    raise ValueError("not a little-endian ELF64 object of version 1")
  (e_type, e_machine, e_version, _entry, _phoff, e_shoff, _flags, e_ehsize, _phentsize,
   _phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", obj, 16)
  if e_type != _ET_REL:
    raise ValueError(f"ELF type {e_type}, not a relocatable object")
  if machine is not None and e_machine != machine:
    raise ValueError(f"ELF machine {e_machine}, not this host's {machine}")
  if e_version != 1 or e_ehsize != 64 or e_shentsize != _SHDR.itemsize or e_shnum == 0:
    raise ValueError("inconsistent ELF header (version, header or section-entry size)")
  if e_shoff + e_shnum * e_shentsize > n:
    raise ValueError(f"the section table ({e_shnum} entries at {e_shoff}) runs past the end "
                     f"of the {n}-byte object")
  sh = np.frombuffer(obj, _SHDR, e_shnum, e_shoff)
  if e_shstrndx >= e_shnum:
    raise ValueError("the section-name table index is out of range")
  for i, s in enumerate(sh):
    if i and s["type"] != _SHT_NOBITS and int(s["offset"]) + int(s["size"]) > n:
      raise ValueError(f"section {i} ({int(s['size'])} bytes at {int(s['offset'])}) runs past "
                       f"the end of the {n}-byte object")
    if s["link"] >= e_shnum:
      raise ValueError(f"section {i} links to section {int(s['link'])} of {e_shnum}")

  def data(i):
    s = sh[i]
    return obj[int(s["offset"]):int(s["offset"]) + int(s["size"])]

  defined, undefined = set(), set()
  symtabs = {}        # section index -> number of symbols
  for i in np.nonzero(sh["type"] == _SHT_SYMTAB)[0]:
    i = int(i)
    s = sh[i]
    if s["entsize"] != _SYM.itemsize or s["size"] % _SYM.itemsize:
      raise ValueError(f"symbol table {i} has entries of {int(s['entsize'])} bytes")
    strtab_i = int(s["link"])
    if sh[strtab_i]["type"] != _SHT_STRTAB:
      raise ValueError(f"symbol table {i} names section {strtab_i}, not a string table")
    strtab = data(strtab_i)
    syms = np.frombuffer(data(i), _SYM)
    symtabs[i] = len(syms)
    shndx = syms["shndx"].astype(np.int64)
    bad = (shndx >= e_shnum) & (shndx < _SHN_LORESERVE)
    if bad.any():
      raise ValueError(f"symbol table {i}: a symbol in section {int(shndx[bad][0])} of "
                       f"{e_shnum}")
    if (syms["name"] >= max(len(strtab), 1)).any():
      raise ValueError(f"symbol table {i}: a name offset outside its string table")
    in_sec = (shndx > 0) & (shndx < e_shnum)
    ends = syms["value"][in_sec].astype(object) + syms["size"][in_sec].astype(object)
    if len(ends) and any(e > int(sh[k]["size"]) for e, k in zip(ends, shndx[in_sec])):
      raise ValueError(f"symbol table {i}: a symbol extends past the end of its section")
    for sym in syms[(syms["info"] >> 4) != _STB_LOCAL]:
      name = _cstr(strtab, int(sym["name"]), f"symbol table {i}")
      if not name:
        continue
      k = int(sym["shndx"])
      (undefined if k == 0 else defined).add(name)
  if not symtabs:
    raise ValueError("the object has no symbol table")

  for i in np.nonzero((sh["type"] == _SHT_RELA) | (sh["type"] == _SHT_REL))[0]:
    i = int(i)
    s = sh[i]
    dt = _RELA if s["type"] == _SHT_RELA else _REL
    if s["entsize"] != dt.itemsize or s["size"] % dt.itemsize:
      raise ValueError(f"relocation section {i} has entries of {int(s['entsize'])} bytes")
    sym_i, target = int(s["link"]), int(s["info"])
    if sym_i not in symtabs:
      raise ValueError(f"relocation section {i} names section {sym_i}, not a symbol table")
    if target == 0 or target >= e_shnum:
      raise ValueError(f"relocation section {i} applies to section {target} of {e_shnum}")
    rel = np.frombuffer(data(i), dt)
    if not len(rel):
      continue
    if int(rel["offset"].max()) + 4 > int(sh[target]["size"]):
      raise ValueError(f"relocation section {i}: an offset past the end of section {target}")
    if int((rel["info"] >> 32).max()) >= symtabs[sym_i]:
      raise ValueError(f"relocation section {i}: a symbol index past its symbol table")
    top = _MAX_RELOC_TYPE.get(e_machine)
    if top is not None and int((rel["info"] & 0xFFFFFFFF).max()) > top:
      raise ValueError(f"relocation section {i}: an unknown relocation type "
                       f"{int((rel['info'] & 0xFFFFFFFF).max())}")
  return ObjectInfo(frozenset(defined), frozenset(undefined - defined))
