"""The IR builder of GPU kernels: ``llvmlite``'s ``IRBuilder`` that folds integer constants and
reuses an identical pure instruction of the block it appends to.

Kernel emitters compute indices with plain builder calls, the same expression many times over
(a tensor-core dot's epilogue recomputes a row's offset for each of a thread's 128
accumulators, a stencil chain clamps the same neighbour index in every stage) and often on
constants (``mul 0, 336``, ``icmp sgt 0, 0``).  LLVM removes all of it again in its first
passes, but only after Python has made an ``Instruction`` object of each, printed it, and LLVM
has parsed it: on the 56x56x128 convolution's dot a third of its instructions, on RK4's
time-blocked chain four in five.  ``FoldingBuilder`` answers such a call at once:

* an integer operation, comparison, ``select`` or cast whose operands are all constants is a
  constant (two's-complement arithmetic in the operand's width; a division or remainder by
  zero and a shift by the width or more, poison or undefined in LLVM, are emitted as they
  are);
* an operation with an identity operand (``x + 0``, ``x * 1``, ``x | 0``, shifts by 0,
  ``x / 1``, ``select c, x, x``, ``select true, x, y``) is its other operand, and ``x * 0``,
  ``x & 0``, ``x % 1`` are 0;
* an integer operation, comparison, ``select``, cast or ``getelementptr`` that was already made
  with the same operands (and flags) in the block the builder appends to is that instruction.

Only while the builder appends at the end of its block (an earlier instruction of the block
dominates the insertion point): a builder positioned elsewhere (``position_at_start`` for a
phi, ``position_before``) makes new instructions as ``IRBuilder`` does.  Loads, stores, calls
and floating-point arithmetic are never merged or folded.  The optimised code is what LLVM
made of the unfolded IR (its own constant folding and CSE do the same); ``OURJAX_CUDA_FOLD=0``
turns this off, to compare.
"""
from __future__ import annotations

from llvmlite import ir

from ourjax.config import env_switch

_INT_BINOPS = ("add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr",
               "and_", "or_", "xor")


def enabled() -> bool:
  return env_switch("OURJAX_CUDA_FOLD")


def new_builder(block) -> ir.IRBuilder:
  """The builder a GPU kernel's body is emitted with (``FoldingBuilder`` unless switched
  off)."""
  return FoldingBuilder(block) if enabled() else ir.IRBuilder(block)


def _int_value(v):
  """The Python int of an integer constant (None for anything else)."""
  if type(v) is ir.Constant and isinstance(v.type, ir.IntType) and type(v.constant) is int:
    return v.constant
  return None


def _signed(v: int, width: int) -> int:
  v &= (1 << width) - 1
  return v - (1 << width) if v >> (width - 1) else v


def _const(ty, v: int) -> ir.Constant:
  """An integer constant of ``ty`` (``v`` taken modulo 2**width; i1 as 0 or 1)."""
  return ir.Constant(ty, v & 1 if ty.width == 1 else _signed(v, ty.width))


def _key(v):
  c = _int_value(v)
  return ("c", v.type.width, _signed(c, v.type.width)) if c is not None else id(v)


def _fold(op: str, a: int, b: int, width: int):
  """``a op b`` on ``width``-bit integers (None: not folded)."""
  mask = (1 << width) - 1
  ua, ub = a & mask, b & mask
  sa, sb = _signed(a, width), _signed(b, width)
  if op == "add":
    r = ua + ub
  elif op == "sub":
    r = ua - ub
  elif op == "mul":
    r = ua * ub
  elif op == "and_":
    r = ua & ub
  elif op == "or_":
    r = ua | ub
  elif op == "xor":
    r = ua ^ ub
  elif op in ("shl", "lshr", "ashr"):
    if ub >= width:
      return None                         # (poison in LLVM: leave it to LLVM)
    r = ua << ub if op == "shl" else (ua >> ub if op == "lshr" else sa >> ub)
  elif op in ("udiv", "urem"):
    if ub == 0:
      return None
    r = ua // ub if op == "udiv" else ua % ub
  elif op in ("sdiv", "srem"):
    if sb == 0 or (sa == -(1 << (width - 1)) and sb == -1):
      return None
    q = abs(sa) // abs(sb) * (1 if (sa < 0) == (sb < 0) else -1)       # (truncating)
    r = q if op == "sdiv" else sa - q * sb
  else:
    return None
  return _signed(r, width)


_ICMP = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
         "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


class FoldingBuilder(ir.IRBuilder):
  """``ir.IRBuilder`` with the folding and reuse of the module docstring."""

  def __init__(self, block=None):
    super().__init__(block)
    self._made: dict = {}       # (block, op, operand keys, flags) -> instruction

  # -- the memo --------------------------------------------------------------------------------
  def _at_end(self) -> bool:
    blk = self._block
    return blk is not None and self._anchor == len(blk.instructions)

  def _reuse(self, key, make):
    if not self._at_end():
      return make()
    key = (id(self._block),) + key
    hit = self._made.get(key)
    if hit is not None and hit[1] is self._block:
      return hit[0]
    v = make()
    self._made[key] = (v, self._block)
    return v

  # -- integer arithmetic ----------------------------------------------------------------------
  def _int_binop(self, op, lhs, rhs, name, flags):
    base = getattr(ir.IRBuilder, op)
    if isinstance(lhs.type, ir.IntType) and lhs.type == rhs.type:
      w = lhs.type.width
      a, c = _int_value(lhs), _int_value(rhs)
      a = None if a is None else _signed(a, w)
      c = None if c is None else _signed(c, w)
      if a is not None and c is not None:
        r = _fold(op, a, c, w)
        if r is not None:
          return _const(lhs.type, r)
      same = self._identity(op, lhs, rhs, a, c, w)
      if same is not None:
        return same
      return self._reuse((op, _key(lhs), _key(rhs), tuple(flags)),
                         lambda: base(self, lhs, rhs, name=name, flags=flags))
    return base(self, lhs, rhs, name=name, flags=flags)

  @staticmethod
  def _identity(op, lhs, rhs, a, c, w):
    if c == 0 and op in ("add", "sub", "or_", "xor", "shl", "lshr", "ashr"):
      return lhs
    if a == 0 and op in ("add", "or_", "xor"):
      return rhs
    if (c == 0 or a == 0) and op in ("mul", "and_"):
      return ir.Constant(lhs.type, 0)
    if c == 1 and op in ("mul", "udiv", "sdiv") and w > 1:
      return lhs
    if a == 1 and op == "mul" and w > 1:
      return rhs
    if c == 1 and op in ("urem", "srem") and w > 1:
      return ir.Constant(lhs.type, 0)
    return None

  def add(self, lhs, rhs, name="", flags=()):
    return self._int_binop("add", lhs, rhs, name, flags)

  def sub(self, lhs, rhs, name="", flags=()):
    return self._int_binop("sub", lhs, rhs, name, flags)

  def mul(self, lhs, rhs, name="", flags=()):
    return self._int_binop("mul", lhs, rhs, name, flags)

  def udiv(self, lhs, rhs, name="", flags=()):
    return self._int_binop("udiv", lhs, rhs, name, flags)

  def sdiv(self, lhs, rhs, name="", flags=()):
    return self._int_binop("sdiv", lhs, rhs, name, flags)

  def urem(self, lhs, rhs, name="", flags=()):
    return self._int_binop("urem", lhs, rhs, name, flags)

  def srem(self, lhs, rhs, name="", flags=()):
    return self._int_binop("srem", lhs, rhs, name, flags)

  def shl(self, lhs, rhs, name="", flags=()):
    return self._int_binop("shl", lhs, rhs, name, flags)

  def lshr(self, lhs, rhs, name="", flags=()):
    return self._int_binop("lshr", lhs, rhs, name, flags)

  def ashr(self, lhs, rhs, name="", flags=()):
    return self._int_binop("ashr", lhs, rhs, name, flags)

  def and_(self, lhs, rhs, name="", flags=()):
    return self._int_binop("and_", lhs, rhs, name, flags)

  def or_(self, lhs, rhs, name="", flags=()):
    return self._int_binop("or_", lhs, rhs, name, flags)

  def xor(self, lhs, rhs, name="", flags=()):
    return self._int_binop("xor", lhs, rhs, name, flags)

  # -- comparisons, select ---------------------------------------------------------------------
  def _icmp(self, prefix, cmpop, lhs, rhs, name):
    if isinstance(lhs.type, ir.IntType) and lhs.type == rhs.type:
      a, c = _int_value(lhs), _int_value(rhs)
      if a is not None and c is not None and cmpop in _ICMP:
        w = lhs.type.width
        if prefix == "s" or cmpop in ("==", "!="):
          x, y = _signed(a, w), _signed(c, w)
        else:
          x, y = a & ((1 << w) - 1), c & ((1 << w) - 1)
        return ir.Constant(ir.IntType(1), int(_ICMP[cmpop](x, y)))
      return self._reuse(("icmp", prefix, cmpop, _key(lhs), _key(rhs)),
                         lambda: super(FoldingBuilder, self)._icmp(prefix, cmpop, lhs, rhs,
                                                                   name))
    return super()._icmp(prefix, cmpop, lhs, rhs, name)

  def select(self, cond, lhs, rhs, name="", flags=()):
    c = _int_value(cond)
    if c is not None and cond.type.width == 1:
      return lhs if c & 1 else rhs
    if lhs is rhs:
      return lhs
    if isinstance(lhs.type, (ir.IntType, ir.PointerType)) and not flags:
      return self._reuse(("select", _key(cond), _key(lhs), _key(rhs)),
                         lambda: super(FoldingBuilder, self).select(cond, lhs, rhs, name=name))
    return super().select(cond, lhs, rhs, name=name, flags=flags)

  # -- casts -----------------------------------------------------------------------------------
  def _int_cast(self, op, value, typ, name):
    base = getattr(ir.IRBuilder, op)
    if isinstance(value.type, ir.IntType) and isinstance(typ, ir.IntType):
      if value.type == typ:
        return base(self, value, typ, name=name)
      c = _int_value(value)
      if c is not None:
        w = value.type.width
        v = _signed(c, w) if op == "sext" else c & ((1 << w) - 1)
        return _const(typ, v)
      return self._reuse((op, _key(value), typ.width),
                         lambda: base(self, value, typ, name=name))
    return base(self, value, typ, name=name)

  def zext(self, value, typ, name=""):
    return self._int_cast("zext", value, typ, name)

  def sext(self, value, typ, name=""):
    return self._int_cast("sext", value, typ, name)

  def trunc(self, value, typ, name=""):
    return self._int_cast("trunc", value, typ, name)

  # -- addresses -------------------------------------------------------------------------------
  def gep(self, ptr, indices, inbounds=False, name="", source_etype=None):
    key = ("gep", id(ptr), inbounds, str(source_etype) if source_etype is not None else None)
    key += tuple(_key(i) for i in indices)
    return self._reuse(key, lambda: super(FoldingBuilder, self).gep(
        ptr, indices, inbounds=inbounds, name=name, source_etype=source_etype))
