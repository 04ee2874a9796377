"""The LLVM IR text of an llvmlite function, as ``str(fn)`` gives it, printed faster.

llvmlite prints each instruction through a chain of ``str.format`` calls, string caches
that first raise ``AttributeError`` and a strip of the joined pieces: printing the kernels
and the entry function was a third of the CPU backend's Python emission time.
``function_text(fn)`` writes the instructions the emitters make most (arithmetic, compares,
casts, loads, stores, GEPs, selects, phis, branches, plain calls) directly, with the same pieces in the
same order, and asks llvmlite (``str(instr)``) for everything else: any other class, and any
instruction with metadata, flags it does not expect or a field it does not know.  The text is
the same as llvmlite's, byte for byte (the tests compare them); LLVM parses it.
"""
from __future__ import annotations

import llvmlite.ir as ir
from llvmlite.ir import _utils, instructions as _ins, types as _types, values as _values

__all__ = ["function_text"]


_REF_CACHE = "_StringReferenceCaching__cached_refstr"      # (llvmlite's cache of the text)
_CACHED_GET = _utils._StringReferenceCaching.get_reference
_NAMED_REF = _values.NamedValue._get_reference
_NAMED_NAME = _values.NamedValue.name
_CONSTANT = _values.Constant
_INT = _types.IntType


def _ref(v) -> str:
  """``v.get_reference()``: a named value's (``%"name"``) made here and kept in llvmlite's
  cache, without the exception its cache raises the first time."""
  d = getattr(v, "__dict__", None)
  if d is None:
    return v.get_reference()
  r = d.get(_REF_CACHE)
  if r is not None:
    return r
  cls = type(v)
  if cls is _CONSTANT:
    c = v.constant
    if type(c) is int and type(v.type) is _INT:     # (an integer's text is its digits)
      r = d[_REF_CACHE] = str(c)
      return r
    return v.get_reference()
  if cls.get_reference is _CACHED_GET and cls._get_reference is _NAMED_REF and \
      cls.name is _NAMED_NAME:
    name = v._name
    if "\\" in name or '"' in name:
      name = name.replace("\\", "\\5c").replace('"', "\\22")
    r = d[_REF_CACHE] = f'{v.name_prefix}"{name}"'
    return r
  return v.get_reference()


def _generic(i) -> str:
  # Instruction.descr: "{opname}{ flags} {type} {operands}"
  op = i.opname
  if i.flags:
    op = " ".join([op] + i.flags)
  return f"{op} {i.type} {', '.join([_ref(o) for o in i.operands])}"


def _gep(i) -> str:
  indices = ", ".join([f"{x.type} {_ref(x)}" for x in i.indices])
  op = "getelementptr inbounds" if i.inbounds else "getelementptr"
  p = i.pointer
  return f"{op} {i.source_etype}, {p.type} {_ref(p)}, {indices}"


def _compare(i) -> str:
  a, b = i.operands
  flags = "".join(" " + f for f in i.flags)
  return f"{i.opname}{flags} {i.op} {a.type} {_ref(a)}, {_ref(b)}"


def _terminator(i) -> str:
  ops = ", ".join([f"{o.type} {_ref(o)}" for o in i.operands])
  return f"{i.opname} {ops}"


def _cast(i) -> str:
  a = i.operands[0]
  return f"{i.opname} {a.type} {_ref(a)} to {i.type}"


def _load(i) -> str:
  [p] = i.operands
  align = "" if i.align is None else ", align %d" % i.align
  return f"load {i.type}, {p.type} {_ref(p)}{align}"


def _store(i) -> str:
  v, p = i.operands
  align = "" if i.align is None else ", align %d" % i.align
  return f"store {v.type} {_ref(v)}, {p.type} {_ref(p)}{align}"


def _select(i) -> str:
  c, a, b = i.operands
  return (f"select {' '.join(i.flags)} {c.type} {_ref(c)}, {a.type} "
          f"{_ref(a)}, {b.type} {_ref(b)}")


def _phi(i) -> str:
  incs = ", ".join([f"[{_ref(v)}, {_ref(b)}]" for v, b in i.incomings])
  return f"phi {' '.join(i.flags)} {i.type} {incs}"


def _call(i):
  # (a plain call: no attributes, fast-math flags, calling convention, tail marker or
  # variadic callee; None for the others, which llvmlite prints)
  if i.arg_attributes or i.attributes or i.fastmath or i.cconv or i.tail:
    return None
  callee = i.operands[0]
  fnty = callee.function_type
  if fnty.var_arg:
    return None
  args = ", ".join([f"{a.type} {_ref(a)}" for a in i.operands[1:]])
  return f"call {fnty.return_type} {_ref(callee)}({args})"


def _ret(i) -> str:
  if i.operands:
    v = i.operands[0]
    return f"{i.opname} {v.type} {_ref(v)}"
  return i.opname


#: exact class -> the text of its ``descr`` (without metadata), for the classes whose
#: ``descr`` is the one written here (a subclass with its own ``descr`` is not listed)
_WRITERS = {
    _ins.Instruction: _generic,
    _ins.GEPInstr: _gep,
    _ins.ICMPInstr: _compare,
    _ins.FCMPInstr: _compare,
    _ins.Branch: _terminator,
    _ins.ConditionalBranch: _terminator,
    _ins.CastInstr: _cast,
    _ins.LoadInstr: _load,
    _ins.StoreInstr: _store,
    _ins.SelectInstr: _select,
    _ins.PhiInstr: _phi,
    _ins.Ret: _ret,
    _ins.CallInstr: _call,
}

# (the descr each writer stands for: a different llvmlite makes every instruction go through
# llvmlite's own printing)
_DESCRS = {
    _ins.Instruction: _ins.Instruction.descr, _ins.GEPInstr: _ins.GEPInstr.descr,
    _ins.ICMPInstr: _ins.CompareInstr.descr, _ins.FCMPInstr: _ins.CompareInstr.descr,
    _ins.Branch: _ins.Terminator.descr, _ins.ConditionalBranch: _ins.Terminator.descr,
    _ins.CastInstr: _ins.CastInstr.descr, _ins.LoadInstr: _ins.LoadInstr.descr,
    _ins.StoreInstr: _ins.StoreInstr.descr, _ins.SelectInstr: _ins.SelectInstr.descr,
    _ins.PhiInstr: _ins.PhiInstr.descr, _ins.Ret: _ins.Ret.descr,
    _ins.CallInstr: _ins.CallInstr.descr,
}
_WRITERS = {c: w for c, w in _WRITERS.items() if c.descr is _DESCRS[c]}

_VOID = _types.VoidType


def instruction_text(i) -> str:
  """``str(i)`` (see the module docstring)."""
  try:
    return i._StrCaching__cached_str      # (printed before: llvmlite's text, kept)
  except AttributeError:
    pass
  w = _WRITERS.get(type(i))
  if w is None or i.metadata:
    return str(i)
  text = w(i)
  if text is None:
    return str(i)
  if not isinstance(i.type, _VOID):
    text = f"{_ref(i)} = {text}"
  # (llvmlite strips the joined text on the right: its descr ends in " \n" or "\n")
  return text.rstrip()


def function_text(fn: ir.Function) -> str:
  """``str(fn)`` (see the module docstring)."""
  if not fn.blocks or type(fn).descr is not _values.Function.descr:
    return str(fn)
  buf = []
  fn.descr_prototype(buf)
  buf.append("{\n")
  for blk in fn.blocks:
    if type(blk).descr is not _values.Block.descr:
      blk.descr(buf)
      continue
    buf.append(f"{blk._format_name()}:\n")
    buf.extend([f"  {instruction_text(i)}\n" for i in blk.instructions])
  buf.append("}\n")
  return "".join(buf)
