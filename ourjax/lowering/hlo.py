"""ourjax's HLO-like IR: shapes, instructions, computations and modules, a builder that checks
every operation's shape, an XLA-style text printer, and a verifier.

The op set and its semantics follow XLA's HLO (see XLA's "operation semantics"): no implicit
broadcasting, one element type per operation, explicit ``broadcast``/``convert``. Shape rules
live in one table, ``SHAPE_RULES``, used both by the ``Builder`` (to compute the result shape of
a new instruction) and by ``verify`` (to recompute and compare every instruction's shape).

Building a module::

    m = Module("f")
    b = Builder(m, "main")
    x = b.parameter(Shape("f32", (2, 3)))
    y = b.multiply(x, b.broadcast(b.constant(2.0, "f32"), (2, 3), ()))
    add = scalar_computation(m, "add", "f32")
    m.entry = b.build(b.reduce(y, b.constant(0.0, "f32"), (1,), add))
    print(m)            # XLA-style text
    verify(m)

Sub-computations (reducers, comparators, while condition/body, conditional branches, fused
computations) are ordinary ``Computation``s of the module, referenced from an instruction's
attributes (``to_apply``, ``condition``, ``body``, ``branches``, ``calls``).
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import ml_dtypes
import numpy as np

__all__ = [
    "HloError", "ShapeError", "VerifyError", "Shape", "Instruction", "Computation", "Module",
    "Builder", "verify", "infer_shape", "SHAPE_RULES", "UNARY_OPS", "BINARY_OPS",
    "ELEMENTWISE_OPS", "COMPARISON_DIRECTIONS", "scalar_computation", "dtype_name", "to_dtype",
    "CALLED_COMPUTATION_KEYS", "FUSION_KINDS",
]


class HloError(Exception):
  """Base class of the IR's errors."""


class ShapeError(HloError, TypeError):
  """An operation was given operands or attributes its shape rule rejects."""


class VerifyError(HloError):
  """A module is not well formed; the message names the instruction."""


# ---------------------------------------------------------------------------------------------
# element types
# ---------------------------------------------------------------------------------------------

_ELEMENT_TYPES = [
    ("pred", np.bool_), ("s8", np.int8), ("s16", np.int16), ("s32", np.int32),
    ("s64", np.int64), ("u8", np.uint8), ("u16", np.uint16), ("u32", np.uint32),
    ("u64", np.uint64), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
    ("f32", np.float32), ("f64", np.float64), ("c64", np.complex64), ("c128", np.complex128),
    ("f8e4m3fn", ml_dtypes.float8_e4m3fn), ("f8e5m2", ml_dtypes.float8_e5m2),
]
_NAME_TO_DTYPE = {n: np.dtype(t) for n, t in _ELEMENT_TYPES}
_DTYPE_TO_NAME = {np.dtype(t): n for n, t in _ELEMENT_TYPES}
_FLOAT_NAMES = {"f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2"}


_CANONICAL = {np.dtype(t): _NAME_TO_DTYPE[n] for n, t in _ELEMENT_TYPES}


def to_dtype(dtype) -> np.dtype:
  """Canonical numpy dtype for an XLA type name ('f32'), a numpy dtype or a scalar type."""
  if type(dtype) is not str:
    try:
      c = _CANONICAL.get(dtype)     # (a supported dtype: the common case, one lookup)
    except TypeError:               # (unhashable: np.dtype says what it is, below)
      c = None
    if c is not None:
      return c
  elif dtype in _NAME_TO_DTYPE:
    return _NAME_TO_DTYPE[dtype]
  dt = np.dtype(dtype)
  name = _DTYPE_TO_NAME.get(dt)
  if name is None:
    raise ShapeError(f"unsupported element type {dt}")
  return _NAME_TO_DTYPE[name]


def dtype_name(dtype) -> str:
  return _DTYPE_TO_NAME[to_dtype(dtype)]


def is_float(dt) -> bool:
  return _DTYPE_TO_NAME[dt] in _FLOAT_NAMES


def is_complex(dt) -> bool:
  return dt.kind == "c"


def is_int(dt) -> bool:
  return dt.kind in "iu"


def is_pred(dt) -> bool:
  return dt == np.bool_


def is_inexact(dt) -> bool:
  return is_float(dt) or is_complex(dt)


def bit_width(dt) -> int:
  return 1 if is_pred(dt) else dt.itemsize * 8


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------

class Shape:
  """An array shape (element type + dimensions) or a tuple of shapes."""
  __slots__ = ("dtype", "dims", "tuple_shapes", "_text")

  def __init__(self, dtype=None, dims: Sequence[int] = (), tuple_shapes=None):
    if tuple_shapes is not None:
      object.__setattr__(self, "dtype", None)
      object.__setattr__(self, "dims", ())
      object.__setattr__(self, "tuple_shapes", tuple(tuple_shapes))
      return
    dims = tuple(map(int, dims))
    for d in dims:
      if d < 0:
        raise ShapeError(f"negative dimension in {dims}")
    object.__setattr__(self, "dtype", to_dtype(dtype))
    object.__setattr__(self, "dims", dims)
    object.__setattr__(self, "tuple_shapes", None)

  def __setattr__(self, *_):
    raise AttributeError("Shape is immutable")

  @classmethod
  def tuple(cls, shapes: Iterable["Shape"]) -> "Shape":
    return cls(tuple_shapes=tuple(shapes))

  @classmethod
  def of(cls, array) -> "Shape":
    array = np.asarray(array)
    return cls(array.dtype, array.shape)

  @property
  def is_tuple(self) -> bool:
    return self.tuple_shapes is not None

  @property
  def rank(self) -> int:
    return len(self.dims)

  @property
  def size(self) -> int:
    return math.prod(self.dims)

  @property
  def is_scalar(self) -> bool:
    return not self.is_tuple and not self.dims

  def with_dtype(self, dtype) -> "Shape":
    return Shape(dtype, self.dims)

  def with_dims(self, dims) -> "Shape":
    return Shape(self.dtype, dims)

  def _key(self):
    return (self.dtype, self.dims, self.tuple_shapes)

  def __eq__(self, other):
    return self is other or (isinstance(other, Shape) and self._key() == other._key())

  def __hash__(self):
    return hash(self._key())

  def __str__(self):
    # (made once: every instruction's text names its shape and its operands'; the disk
    # cache's key is the module's text)
    try:
      return self._text
    except AttributeError:
      pass
    if self.is_tuple:
      text = "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
    else:
      text = f"{dtype_name(self.dtype)}[{','.join(map(str, self.dims))}]"
    object.__setattr__(self, "_text", text)
    return text

  __repr__ = __str__


# ---------------------------------------------------------------------------------------------
# op set
# ---------------------------------------------------------------------------------------------

# Unary elementwise ops -> the element types they accept:
#   "num": any but pred; "float": real floats (and complex where NumPy has it);
#   "real": real floats only; "int": integers; "intpred": integers and pred; "any": everything.
UNARY_OPS = {
    "abs": "num", "negate": "num", "sign": "num", "floor": "real", "ceil": "real",
    "round-nearest-even": "real", "round-nearest-afz": "real", "is-finite": "real",
    "exponential": "float", "exp2": "float", "exponential-minus-one": "float", "log": "float",
    "log-plus-one": "float", "tanh": "float", "logistic": "float", "sine": "float",
    "cosine": "float", "tan": "float", "asin": "float", "acos": "float", "atan": "float",
    "sinh": "float", "cosh": "float", "asinh": "float", "acosh": "float", "atanh": "float",
    "sqrt": "float", "rsqrt": "float", "cbrt": "real", "erf": "real", "erfc": "real",
    "erf-inv": "real", "lgamma": "real", "digamma": "real", "not": "intpred", "popcnt": "int",
    "count-leading-zeros": "int", "real": "complex", "imag": "complex", "copy": "any",
}

BINARY_OPS = {
    "add": "any", "subtract": "num", "multiply": "any", "divide": "num", "remainder": "num",
    "power": "num", "atan2": "real", "maximum": "any", "minimum": "any", "and": "intpred",
    "or": "intpred", "xor": "intpred", "shift-left": "int", "shift-right-arithmetic": "int",
    "shift-right-logical": "int", "complex": "real",
}

COMMUTATIVE_OPS = {"add", "multiply", "and", "or", "xor"}

COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

# Ops computing each output element from the same-index elements of their operands
# (bitcast-convert is not one when it changes the width).
ELEMENTWISE_OPS = set(UNARY_OPS) | set(BINARY_OPS) | {"compare", "select", "clamp", "convert"}

FUSION_KINDS = ("kLoop", "kInput", "kOutput")

# Attributes that hold called computations (a Computation, or a list of them for "branches").
CALLED_COMPUTATION_KEYS = ("to_apply", "condition", "body", "branches", "calls")


def _type_ok(kind: str, dt: np.dtype) -> bool:
  if kind == "any":
    return True
  if kind == "num":
    return not is_pred(dt)
  if kind == "float":
    return is_inexact(dt)
  if kind == "real":
    return is_float(dt)
  if kind == "int":
    return is_int(dt)
  if kind == "intpred":
    return is_int(dt) or is_pred(dt)
  if kind == "complex":
    return is_complex(dt)
  raise AssertionError(kind)


# ---------------------------------------------------------------------------------------------
# instructions, computations, modules
# ---------------------------------------------------------------------------------------------

class Instruction:
  """One operation: ``opcode`` applied to ``operands`` (Instructions) with ``attrs``, producing
  a value of ``shape``. ``users`` lists the instructions that have this one as an operand (each
  once); ``parent`` is the owning Computation. Create instructions with a ``Builder``."""
  __slots__ = ("opcode", "operands", "shape", "attrs", "name", "users", "parent")

  def __init__(self, opcode: str, operands: Sequence["Instruction"], shape: Shape,
               attrs: dict | None = None, name: str | None = None):
    self.opcode = opcode
    self.operands = list(operands)
    self.shape = shape
    self.attrs = dict(attrs or {})
    self.name = name
    self.users: list[Instruction] = []
    self.parent: Computation | None = None

  @property
  def called_computations(self) -> list["Computation"]:
    a = self.attrs
    if not a:
      return []
    out = []
    for k in CALLED_COMPUTATION_KEYS:
      v = a.get(k)
      if v is None:
        continue
      out.extend(v if isinstance(v, (list, tuple)) else [v])
    return out

  @property
  def dtype(self) -> np.dtype:
    return self.shape.dtype

  @property
  def dims(self) -> tuple:
    return self.shape.dims

  @property
  def value(self) -> np.ndarray:
    """The value of a constant."""
    return self.attrs["value"]

  def is_elementwise(self) -> bool:
    return self.opcode in ELEMENTWISE_OPS

  def replace_operand(self, index: int, new: "Instruction") -> None:
    old = self.operands[index]
    self.operands[index] = new
    if old not in self.operands and self in old.users:
      old.users.remove(self)
    if self not in new.users:
      new.users.append(self)

  def to_string(self, operand_shapes: bool = True) -> str:
    return _instruction_text(self, operand_shapes)

  def __repr__(self):
    return f"<{self.to_string(operand_shapes=False)}>"


class Computation:
  """A function of ``parameters`` whose instructions are kept in a topological order (operands
  before users) and whose result is ``root``."""

  def __init__(self, name: str, module: "Module | None" = None):
    self.name = name
    self.module = module
    self.parameters: list[Instruction] = []
    self.instructions: list[Instruction] = []
    self.root: Instruction | None = None

  # -- editing ---------------------------------------------------------------------------------
  def add(self, instr: Instruction, before: Instruction | None = None) -> Instruction:
    """Insert ``instr`` (at the end, or just before ``before``), naming it uniquely and
    registering it as a user of its operands."""
    if instr.parent is not None:
      raise HloError(f"{instr.name} already belongs to {instr.parent.name}")
    for op in instr.operands:
      if op.parent is not self:
        raise HloError(f"operand {op.name} of new {instr.opcode} is not in computation {self.name}")
    instr.parent = self
    if self.module is not None:
      instr.name = (self.module.unique_name(instr.name, exact=True) if instr.name
                    else self.module.unique_name(instr.opcode))
    elif instr.name is None:
      instr.name = f"{instr.opcode}.{len(self.instructions)}"
    for op in instr.operands:
      if instr not in op.users:
        op.users.append(instr)
    if before is None:
      self.instructions.append(instr)
    else:
      self.instructions.insert(self.instructions.index(before), instr)
    if instr.opcode == "parameter":
      n = instr.attrs["parameter_number"]
      while len(self.parameters) <= n:
        self.parameters.append(None)
      if self.parameters[n] is not None:
        raise HloError(f"computation {self.name} already has parameter {n}")
      self.parameters[n] = instr
    return instr

  def remove(self, instr: Instruction) -> None:
    """Remove an instruction that has no users and is not the root."""
    if instr.users:
      raise HloError(f"cannot remove {instr.name}: still used by "
                     f"{', '.join(u.name for u in instr.users)}")
    if instr is self.root:
      raise HloError(f"cannot remove the root {instr.name} of {self.name}")
    if instr.opcode == "parameter":
      raise HloError(f"cannot remove parameter {instr.name} of {self.name}")
    self.instructions.remove(instr)
    for op in set(instr.operands):
      if instr in op.users:
        op.users.remove(instr)
    instr.parent = None

  def replace_all_uses(self, old: Instruction, new: Instruction) -> None:
    """Make every user of ``old`` (and the root, if it is ``old``) use ``new`` instead. The shapes
    must be equal. ``new`` itself keeps using ``old`` if it did."""
    if old is new:
      return
    if old.shape != new.shape:
      raise HloError(f"replace_all_uses: {old.name} has shape {old.shape} but {new.name} has "
                     f"{new.shape}")
    for user in list(old.users):
      if user is new:
        continue
      user.operands = [new if o is old else o for o in user.operands]
      old.users.remove(user)
      if user not in new.users:
        new.users.append(user)
    if self.root is old:
      self.root = new

  def replace_instruction(self, old: Instruction, new: Instruction) -> None:
    """``replace_all_uses`` then remove ``old`` if it is now unused (and not a parameter)."""
    self.replace_all_uses(old, new)
    if not old.users and old is not self.root and old.opcode != "parameter":
      self.remove(old)

  def set_root(self, instr: Instruction) -> None:
    if instr.parent is not self:
      raise HloError(f"root {instr.name} is not in {self.name}")
    self.root = instr

  def topological_sort(self) -> None:
    """Reorder the instructions so that operands come before users, moving as little as
    possible (instructions appended by a pass move up to just before their first user)."""
    order, state = [], {}
    for start in self.instructions:
      if start in state:
        continue
      # (the common case, one already in order: every operand placed, or from elsewhere; what
      # the walk below would do, without its stack)
      for op in start.operands:
        if op not in state and op.parent is self:
          break
      else:
        state[start] = 2
        order.append(start)
        continue
      stack = [(start, 0)]
      while stack:
        node, i = stack.pop()
        if i == 0:
          if state.get(node) == 2:
            continue
          state[node] = 1
        if i < len(node.operands):
          stack.append((node, i + 1))
          op = node.operands[i]
          if state.get(op) == 1:
            raise HloError(f"cycle through {op.name} in {self.name}")
          if op not in state and op.parent is self:
            stack.append((op, 0))
        else:
          state[node] = 2
          order.append(node)
    self.instructions = order

  # -- queries ---------------------------------------------------------------------------------
  @property
  def parameter_shapes(self) -> list[Shape]:
    return [p.shape for p in self.parameters]

  @property
  def result_shape(self) -> Shape:
    return self.root.shape

  def __iter__(self):
    return iter(self.instructions)

  def __len__(self):
    return len(self.instructions)

  def to_string(self, operand_shapes: bool = True, entry: bool = False) -> str:
    params = ", ".join(f"{p.name}: {p.shape}" for p in self.parameters)
    head = f"{'ENTRY ' if entry else ''}%{self.name} ({params}) -> {self.root.shape} {{"
    lines = [head]
    for instr in self.instructions:
      prefix = "ROOT " if instr is self.root else ""
      lines.append("  " + prefix + instr.to_string(operand_shapes))
    lines.append("}")
    return "\n".join(lines)

  def __repr__(self):
    return f"<Computation %{self.name}>"


class Module:
  """An entry computation plus the sub-computations its instructions call. ``notes`` collects
  the reason strings that passes record (``note``).  ``patches_in_place``: the backend reads
  convolutions' patch matrices in place from their input (the GPU's implicit GEMM), so
  ``conv_to_dot`` need not cut them into batch chunks and fusion keeps their input in memory;
  ``patch_channel_bytes``: what a kernel position's channels must fill there (the GPU's
  16-byte copies: ``conv_to_dot`` zero-pads fewer channels);
  ``dot_epilogues``: the backend runs a dot's elementwise consumers in the dot's kernel (its
  epilogue), so fusion stores such an epilogue's result rather than copying it into its users."""

  def __init__(self, name: str = "module"):
    self.name = name
    self.computations: list[Computation] = []
    self._entry: Computation | None = None
    self._name_counts: dict[str, int] = {}
    self._used_names: set[str] = set()
    self.notes: list[str] = []
    self.patches_in_place = False
    self.patch_channel_bytes = 1
    self.dot_epilogues = False

  @property
  def entry(self) -> Computation:
    return self._entry

  @entry.setter
  def entry(self, comp: Computation) -> None:
    if comp not in self.computations:
      self.add_computation(comp)
    self._entry = comp

  def unique_name(self, base: str, exact: bool = False) -> str:
    """A name not used yet in this module: ``base`` itself when ``exact`` and free, else
    ``base.N`` with the next free N (XLA's ``add.3`` style)."""
    if exact and base not in self._used_names:
      self._used_names.add(base)
      return base
    n = self._name_counts.get(base, 0)
    while True:
      n += 1
      name = f"{base}.{n}"
      if name not in self._used_names:
        break
    self._name_counts[base] = n
    self._used_names.add(name)
    return name

  def add_computation(self, comp: Computation) -> Computation:
    if comp.module not in (None, self):
      raise HloError(f"computation {comp.name} belongs to another module")
    if comp not in self.computations:
      comp.name = self.unique_name(comp.name, exact=True)
      comp.module = self
      self.computations.append(comp)
    return comp

  def remove_computation(self, comp: Computation) -> None:
    if comp is self._entry:
      raise HloError("cannot remove the entry computation")
    self.computations.remove(comp)

  def note(self, pass_name: str, message: str) -> None:
    """Record why a pass changed something (printed with ``OURJAX_DUMP``)."""
    self.notes.append(f"{pass_name}: {message}")

  def reachable_computations(self) -> list[Computation]:
    """Computations reachable from the entry, callees before callers, the entry last."""
    order, seen = [], set()

    def visit(c):
      if c in seen:
        return
      seen.add(c)
      for instr in c.instructions:
        for sub in instr.called_computations:
          visit(sub)
      order.append(c)
    if self._entry is not None:
      visit(self._entry)
    return order

  def computation_post_order(self) -> list[Computation]:
    """All computations, callees before callers (unreachable ones first)."""
    reach = self.reachable_computations()
    rest = [c for c in self.computations if c not in reach]
    order, seen = [], set()

    def visit(c):
      if c in seen:
        return
      seen.add(c)
      for instr in c.instructions:
        for sub in instr.called_computations:
          visit(sub)
      order.append(c)
    for c in rest:
      visit(c)
    return order + [c for c in reach if c not in seen]

  def to_string(self, operand_shapes: bool = True) -> str:
    head = f"HloModule {self.name}"
    alias = getattr(self, "input_output_alias", None)
    if alias:
      # (XLA's text: output {j} is written into parameter k's buffer, ``jit``'s donation)
      head += ", input_output_alias={ " + ", ".join(
          f"{{{j}}}: ({k}, {{}}, may-alias)" for j, k in sorted(alias.items())) + " }"
    parts = [head, ""]
    for comp in self.computation_post_order():
      parts.append(comp.to_string(operand_shapes, entry=comp is self._entry))
      parts.append("")
    return "\n".join(parts)

  def __str__(self):
    return self.to_string()

  def clone(self, name: str | None = None) -> "Module":
    """A deep copy (constants' values are shared: they are read-only)."""
    new = Module(name or self.name)
    new._name_counts = dict(self._name_counts)
    new._used_names = set(self._used_names)
    new.notes = list(self.notes)
    new.patches_in_place = self.patches_in_place
    new.patch_channel_bytes = self.patch_channel_bytes
    new.dot_epilogues = self.dot_epilogues
    comp_map: dict[Computation, Computation] = {}
    for comp in self.computation_post_order():
      c2 = Computation(comp.name, new)
      new.computations.append(c2)
      comp_map[comp] = c2
      imap: dict[Instruction, Instruction] = {}
      for instr in comp.instructions:
        attrs = {}
        for k, v in instr.attrs.items():
          if isinstance(v, Computation):
            v = comp_map[v]
          elif k in CALLED_COMPUTATION_KEYS and isinstance(v, (list, tuple)):
            v = [comp_map[x] for x in v]
          attrs[k] = v
        i2 = Instruction(instr.opcode, [imap[o] for o in instr.operands], instr.shape, attrs,
                         instr.name)
        i2.parent = c2
        for o in i2.operands:
          if i2 not in o.users:
            o.users.append(i2)
        c2.instructions.append(i2)
        imap[instr] = i2
      c2.parameters = [imap[p] for p in comp.parameters]
      c2.root = imap[comp.root] if comp.root is not None else None
    new._entry = comp_map.get(self._entry)
    return new


def dot_operand_groups(dot: "Instruction", k: int) -> tuple:
  """(batch, free, contracting) dimensions of operand ``k`` (0: lhs, 1: rhs) of ``dot``: batch
  and contracting ones in the order of the dimension numbers (they pair with the other
  operand's), free ones in increasing order (the result's)."""
  side = ("lhs", "rhs")[k]
  a = dot.attrs
  batch = list(a[f"{side}_batch_dims"])
  contract = list(a[f"{side}_contracting_dims"])
  free = [d for d in range(dot.operands[k].shape.rank) if d not in batch and d not in contract]
  return batch, free, contract


def reshape_groups(src: Sequence[int], dst: Sequence[int]):
  """The shortest consecutive groups of ``src`` and ``dst`` dimensions with equal element
  counts, as ``((s0, s1), (d0, d1))`` ranges (a reshape maps each group to its partner and
  keeps the order of the groups), or None when a size is 0.  Size-1 dimensions join a
  neighbouring group (or make a group of their own with nothing on the other side)."""
  src, dst = tuple(src), tuple(dst)
  if 0 in src or 0 in dst:
    return None
  groups, i, j = [], 0, 0
  while i < len(src) or j < len(dst):
    si, dj, ps, pd = i, j, 1, 1
    if i < len(src):
      ps, i = src[i], i + 1
    if j < len(dst):
      pd, j = dst[j], j + 1
    while ps != pd:
      if ps < pd:
        ps, i = ps * src[i], i + 1
      else:
        pd, j = pd * dst[j], j + 1
    # a following size-1 dimension joins this group
    while i < len(src) and src[i] == 1 and (j == len(dst) or dst[j] != 1):
      i += 1
    while j < len(dst) and dst[j] == 1 and (i == len(src) or src[i] != 1):
      j += 1
    groups.append(((si, i), (dj, j)))
  return groups



# ---------------------------------------------------------------------------------------------
# shape rules
# ---------------------------------------------------------------------------------------------

def _err(opcode, msg):
  return ShapeError(f"{opcode}: {msg}")


def _require(cond, opcode, msg):
  """Raise ``opcode``'s ShapeError unless ``cond``; ``msg`` may be a function making the
  message (shape rules run for every instruction of every pass: formatting shapes eagerly was
  a tenth of a transformer step's compile time)."""
  if not cond:
    raise _err(opcode, msg() if callable(msg) else msg)


def _array(opcode, s: Shape, what="operand"):
  _require(not s.is_tuple, opcode, lambda: f"{what} must be an array, got tuple {s}")
  return s


def _dims_ok(opcode, dims, rank, what="dimensions", unique=True):
  for d in dims:
    _require(isinstance(d, (int, np.integer)) and 0 <= d < rank, opcode,
             lambda: f"{what} {list(dims)} out of range for rank {rank}")
  if unique:
    _require(len(set(dims)) == len(dims), opcode, lambda: f"{what} {list(dims)} has duplicates")


def _rule_unary(opcode):
  kind = UNARY_OPS[opcode]

  def rule(ops, attrs, declared):
    _require(len(ops) == 1, opcode, lambda: f"takes 1 operand, got {len(ops)}")
    x = _array(opcode, ops[0])
    _require(_type_ok(kind, x.dtype), opcode, lambda: f"unsupported element type {dtype_name(x.dtype)}")
    if opcode == "is-finite":
      return Shape(np.bool_, x.dims)
    if opcode in ("real", "imag"):
      return Shape(np.float32 if x.dtype == np.complex64 else np.float64, x.dims)
    if opcode == "abs" and is_complex(x.dtype):
      return Shape(np.float32 if x.dtype == np.complex64 else np.float64, x.dims)
    return x
  return rule


def _rule_binary(opcode):
  kind = BINARY_OPS[opcode]

  def rule(ops, attrs, declared):
    _require(len(ops) == 2, opcode, lambda: f"takes 2 operands, got {len(ops)}")
    x, y = _array(opcode, ops[0]), _array(opcode, ops[1])
    _require(x.dims == y.dims, opcode, lambda: f"operand shapes {x} and {y} differ (no implicit "
             "broadcasting: broadcast explicitly)")
    _require(x.dtype == y.dtype, opcode, lambda: f"element types differ: {x} and {y}")
    _require(_type_ok(kind, x.dtype), opcode, lambda: f"unsupported element type {dtype_name(x.dtype)}")
    if opcode == "complex":
      _require(x.dtype in (np.float32, np.float64), opcode, "operands must be f32 or f64")
      return Shape(np.complex64 if x.dtype == np.float32 else np.complex128, x.dims)
    return x
  return rule


def _rule_compare(ops, attrs, declared):
  _require(len(ops) == 2, "compare", "takes 2 operands")
  x, y = _array("compare", ops[0]), _array("compare", ops[1])
  _require(x == y, "compare", lambda: f"operand shapes {x} and {y} differ")
  _require(attrs.get("direction") in COMPARISON_DIRECTIONS, "compare",
           lambda: f"direction must be one of {COMPARISON_DIRECTIONS}, got {attrs.get('direction')!r}")
  ct = attrs.get("type")
  _require(ct in (None, "TOTALORDER"), "compare", lambda: f"unknown comparison type {ct!r}")
  _require(ct is None or is_float(x.dtype), "compare", "TOTALORDER applies to floats only")
  _require(not is_complex(x.dtype) or attrs["direction"] in ("EQ", "NE"), "compare",
           "complex numbers compare only EQ/NE")
  return Shape(np.bool_, x.dims)


def _rule_select(ops, attrs, declared):
  _require(len(ops) == 3, "select", "takes (pred, on_true, on_false)")
  p, t, f = (_array("select", s) for s in ops)
  _require(p.dtype == np.bool_, "select", lambda: f"predicate must be pred, got {p}")
  _require(t == f, "select", lambda: f"branch shapes {t} and {f} differ")
  _require(p.dims == t.dims, "select", lambda: f"predicate shape {p} does not match {t}")
  return t


def _rule_clamp(ops, attrs, declared):
  _require(len(ops) == 3, "clamp", "takes (min, operand, max)")
  lo, x, hi = (_array("clamp", s) for s in ops)
  for b in (lo, hi):
    _require(b.dtype == x.dtype, "clamp", lambda: f"bound {b} and operand {x} differ in type")
    _require(b.dims in ((), x.dims), "clamp", lambda: f"bound {b} must be scalar or shaped as {x}")
  _require(not is_pred(x.dtype) and not is_complex(x.dtype), "clamp", "needs an ordered type")
  return x


def _rule_convert(ops, attrs, declared):
  _require(len(ops) == 1, "convert", "takes 1 operand")
  x = _array("convert", ops[0])
  _require(declared is not None and not declared.is_tuple, "convert", "needs a result type")
  _require(declared.dims == x.dims, "convert", lambda: f"result {declared} must keep dims of {x}")
  return declared


def _rule_bitcast_convert(ops, attrs, declared):
  _require(len(ops) == 1, "bitcast-convert", "takes 1 operand")
  x = _array("bitcast-convert", ops[0])
  _require(declared is not None, "bitcast-convert", "needs a result type")
  _require(not is_pred(x.dtype) and not is_pred(declared.dtype), "bitcast-convert",
           "pred has no bit pattern")
  a, b = x.dtype.itemsize, declared.dtype.itemsize
  if a == b:
    expect = x.dims
  elif a > b:
    _require(a % b == 0, "bitcast-convert", "widths must divide")
    expect = x.dims + (a // b,)
  else:
    _require(b % a == 0 and x.dims and x.dims[-1] == b // a, "bitcast-convert",
             lambda: f"from {x} to {dtype_name(declared.dtype)} needs a last dimension of {b // a}")
    expect = x.dims[:-1]
  _require(declared.dims == expect, "bitcast-convert",
           lambda: f"result {declared} should have dims {list(expect)}")
  return declared


def _rule_parameter(ops, attrs, declared):
  _require(not ops, "parameter", "takes no operands")
  _require(declared is not None, "parameter", "needs a shape")
  n = attrs.get("parameter_number")
  _require(isinstance(n, (int, np.integer)) and n >= 0, "parameter",
           lambda: f"bad parameter_number {n!r}")
  return declared


def _rule_constant(ops, attrs, declared):
  _require(not ops, "constant", "takes no operands")
  v = attrs.get("value")
  _require(isinstance(v, np.ndarray), "constant", "value must be a numpy array")
  return Shape(v.dtype, v.shape)


def _rule_iota(ops, attrs, declared):
  _require(not ops, "iota", "takes no operands")
  _require(declared is not None and declared.rank >= 1, "iota", "needs a shape of rank >= 1")
  d = attrs.get("iota_dimension")
  _require(isinstance(d, (int, np.integer)) and 0 <= d < declared.rank, "iota",
           lambda: f"iota_dimension {d!r} out of range for {declared}")
  _require(not is_pred(declared.dtype), "iota", "needs a numeric type")
  return declared


def _rule_broadcast(ops, attrs, declared):
  _require(len(ops) == 1, "broadcast", "takes 1 operand")
  x = _array("broadcast", ops[0])
  _require(declared is not None, "broadcast", "needs a result shape")
  dims = tuple(attrs.get("dimensions", ()))
  _require(len(dims) == x.rank, "broadcast",
           lambda: f"dimensions {list(dims)} must name one output dimension per operand dimension of {x}")
  _dims_ok("broadcast", dims, declared.rank)
  _require(list(dims) == sorted(dims), "broadcast", lambda: f"dimensions {list(dims)} must increase")
  _require(declared.dtype == x.dtype, "broadcast", "cannot change the element type")
  for i, d in enumerate(dims):
    _require(x.dims[i] in (1, declared.dims[d]), "broadcast",
             lambda: f"operand dimension {i} (size {x.dims[i]}) does not fit output dimension {d} of "
             f"{declared}")
  return declared


def _rule_reshape(ops, attrs, declared):
  _require(len(ops) == 1, "reshape", "takes 1 operand")
  x = _array("reshape", ops[0])
  _require(declared is not None, "reshape", "needs a result shape")
  _require(declared.dtype == x.dtype, "reshape", "cannot change the element type")
  _require(declared.size == x.size, "reshape", lambda: f"cannot reshape {x} ({x.size} elements) to "
           f"{declared} ({declared.size} elements)")
  return declared


def _rule_transpose(ops, attrs, declared):
  _require(len(ops) == 1, "transpose", "takes 1 operand")
  x = _array("transpose", ops[0])
  perm = tuple(attrs.get("dimensions", ()))
  _require(sorted(perm) == list(range(x.rank)), "transpose",
           lambda: f"dimensions {list(perm)} is not a permutation of rank {x.rank}")
  return Shape(x.dtype, tuple(x.dims[p] for p in perm))


def _rule_slice(ops, attrs, declared):
  _require(len(ops) == 1, "slice", "takes 1 operand")
  x = _array("slice", ops[0])
  start, limit = tuple(attrs["start_indices"]), tuple(attrs["limit_indices"])
  strides = tuple(attrs.get("strides") or (1,) * x.rank)
  _require(len(start) == len(limit) == len(strides) == x.rank, "slice",
           lambda: f"needs {x.rank} starts/limits/strides")
  out = []
  for d, (s, l, st, n) in enumerate(zip(start, limit, strides, x.dims)):
    _require(0 <= s <= l <= n and st >= 1, "slice",
             lambda: f"bad slice [{s}:{l}:{st}] of dimension {d} (size {n}) of {x}")
    out.append((l - s + st - 1) // st)
  return Shape(x.dtype, out)


def _rule_dynamic_slice(ops, attrs, declared):
  _require(len(ops) >= 1, "dynamic-slice", "needs an operand")
  x = _array("dynamic-slice", ops[0])
  idx = ops[1:]
  sizes = tuple(attrs["dynamic_slice_sizes"])
  _require(len(idx) == x.rank == len(sizes), "dynamic-slice",
           lambda: f"needs {x.rank} scalar start indices and slice sizes")
  for i in idx:
    _require(i.is_scalar and is_int(i.dtype), "dynamic-slice",
             lambda: f"start indices must be integer scalars, got {i}")
  _require(len({i.dtype for i in idx}) <= 1, "dynamic-slice", "start indices differ in type")
  for s, n in zip(sizes, x.dims):
    _require(0 <= s <= n, "dynamic-slice", lambda: f"slice sizes {list(sizes)} do not fit {x}")
  return Shape(x.dtype, sizes)


def _rule_dynamic_update_slice(ops, attrs, declared):
  _require(len(ops) >= 2, "dynamic-update-slice", "needs operand and update")
  x, u = _array("dynamic-update-slice", ops[0]), _array("dynamic-update-slice", ops[1])
  idx = ops[2:]
  _require(u.rank == x.rank and len(idx) == x.rank, "dynamic-update-slice",
           lambda: f"update {u} and {len(idx)} start indices must match the rank of {x}")
  _require(u.dtype == x.dtype, "dynamic-update-slice", "update type differs")
  _require(all(a <= b for a, b in zip(u.dims, x.dims)), "dynamic-update-slice",
           lambda: f"update {u} larger than {x}")
  for i in idx:
    _require(i.is_scalar and is_int(i.dtype), "dynamic-update-slice",
             lambda: f"start indices must be integer scalars, got {i}")
  return x


def _rule_concatenate(ops, attrs, declared):
  _require(len(ops) >= 1, "concatenate", "needs at least one operand")
  xs = [_array("concatenate", s) for s in ops]
  d = attrs["dimensions"][0] if isinstance(attrs.get("dimensions"), (list, tuple)) else \
      attrs.get("dimensions")
  first = xs[0]
  _require(isinstance(d, (int, np.integer)) and 0 <= d < first.rank, "concatenate",
           lambda: f"dimension {d!r} out of range for {first}")
  total = 0
  for s in xs:
    _require(s.dtype == first.dtype and s.rank == first.rank, "concatenate",
             lambda: f"operands {first} and {s} differ in type or rank")
    _require(all(a == b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != d),
             "concatenate", lambda: f"operands {first} and {s} differ outside dimension {d}")
    total += s.dims[d]
  dims = list(first.dims)
  dims[d] = total
  return Shape(first.dtype, dims)


def _rule_pad(ops, attrs, declared):
  _require(len(ops) == 2, "pad", "takes (operand, padding_value)")
  x, v = _array("pad", ops[0]), _array("pad", ops[1])
  _require(v.is_scalar and v.dtype == x.dtype, "pad", lambda: f"padding value {v} must be a scalar of "
           f"{dtype_name(x.dtype)}")
  cfg = attrs["padding_config"]
  _require(len(cfg) == x.rank, "pad", lambda: f"needs {x.rank} (low, high, interior) entries")
  out = []
  for n, (lo, hi, interior) in zip(x.dims, cfg):
    _require(interior >= 0, "pad", "interior padding must be >= 0")
    size = lo + hi + n + max(n - 1, 0) * interior
    _require(size >= 0, "pad", lambda: f"padding {lo}_{hi}_{interior} gives negative size")
    out.append(size)
  return Shape(x.dtype, out)


def _rule_reverse(ops, attrs, declared):
  _require(len(ops) == 1, "reverse", "takes 1 operand")
  x = _array("reverse", ops[0])
  _dims_ok("reverse", attrs.get("dimensions", ()), x.rank)
  return x


def _check_scalar_computation(opcode, comp, param_dtypes, result_dtypes, what):
  _require(isinstance(comp, Computation), opcode, lambda: f"{what} must be a Computation")
  ps = comp.parameter_shapes
  _require(len(ps) == len(param_dtypes) and all(
      p is not None and p.is_scalar and p.dtype == dt for p, dt in zip(ps, param_dtypes)),
      opcode, lambda: f"{what} %{comp.name} must take scalars "
      f"({', '.join(dtype_name(d) + '[]' for d in param_dtypes)}), takes "
      f"({', '.join(str(p) for p in ps)})")
  r = comp.root.shape
  if len(result_dtypes) == 1:
    ok = r.is_scalar and r.dtype == result_dtypes[0]
  else:
    ok = r.is_tuple and len(r.tuple_shapes) == len(result_dtypes) and all(
        s.is_scalar and s.dtype == dt for s, dt in zip(r.tuple_shapes, result_dtypes))
  want = ", ".join(dtype_name(d) + "[]" for d in result_dtypes)
  _require(ok, opcode, lambda: f"{what} %{comp.name} must return ({want}), returns {r}")


def _rule_reduce(ops, attrs, declared):
  _require(len(ops) >= 2 and len(ops) % 2 == 0, "reduce", "takes N operands and N init values")
  n = len(ops) // 2
  xs, inits = [_array("reduce", s) for s in ops[:n]], ops[n:]
  for s in xs:
    _require(s.dims == xs[0].dims, "reduce", lambda: f"operands {xs[0]} and {s} differ in dims")
  for s, i in zip(xs, inits):
    _require(i.is_scalar and i.dtype == s.dtype, "reduce",
             lambda: f"init value {i} must be a scalar of the operand type {dtype_name(s.dtype)}")
  dims = tuple(attrs.get("dimensions", ()))
  _dims_ok("reduce", dims, xs[0].rank)
  dts = [s.dtype for s in xs]
  _check_scalar_computation("reduce", attrs.get("to_apply"), dts + dts, dts, "reducer")
  kept = tuple(d for i, d in enumerate(xs[0].dims) if i not in dims)
  outs = [Shape(dt, kept) for dt in dts]
  return outs[0] if n == 1 else Shape.tuple(outs)


def _window_out(opcode, n, w, s, lo, hi, bd, wd):
  _require(w >= 1 and s >= 1 and bd >= 1 and wd >= 1, opcode,
           "window sizes, strides and dilations must be >= 1")
  padded = (n - 1) * bd + 1 + lo + hi if n > 0 else lo + hi
  dw = (w - 1) * wd + 1
  return 0 if padded < dw else (padded - dw) // s + 1


def _rule_reduce_window(ops, attrs, declared):
  _require(len(ops) >= 2 and len(ops) % 2 == 0, "reduce-window", "takes N operands, N inits")
  n = len(ops) // 2
  xs, inits = [_array("reduce-window", s) for s in ops[:n]], ops[n:]
  for s, i in zip(xs, inits):
    _require(s.dims == xs[0].dims, "reduce-window", "operands differ in dims")
    _require(i.is_scalar and i.dtype == s.dtype, "reduce-window", lambda: f"bad init value {i}")
  r = xs[0].rank
  w = attrs["window_dimensions"]
  st = attrs.get("window_strides") or (1,) * r
  pad = attrs.get("padding") or ((0, 0),) * r
  bd = attrs.get("base_dilation") or (1,) * r
  wd = attrs.get("window_dilation") or (1,) * r
  _require(len(w) == len(st) == len(pad) == len(bd) == len(wd) == r, "reduce-window",
           lambda: f"window attributes need {r} entries each")
  dims = [_window_out("reduce-window", *a) for a in zip(
      xs[0].dims, w, st, [p[0] for p in pad], [p[1] for p in pad], bd, wd)]
  dts = [s.dtype for s in xs]
  _check_scalar_computation("reduce-window", attrs.get("to_apply"), dts + dts, dts, "reducer")
  outs = [Shape(dt, dims) for dt in dts]
  return outs[0] if n == 1 else Shape.tuple(outs)


def _rule_dot(ops, attrs, declared):
  _require(len(ops) == 2, "dot", "takes 2 operands")
  lhs, rhs = _array("dot", ops[0]), _array("dot", ops[1])
  lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
  lc = tuple(attrs.get("lhs_contracting_dims", ()))
  rc = tuple(attrs.get("rhs_contracting_dims", ()))
  _dims_ok("dot", lb + lc, lhs.rank, "lhs batch+contracting dims")
  _dims_ok("dot", rb + rc, rhs.rank, "rhs batch+contracting dims")
  _require(len(lb) == len(rb), "dot", "lhs and rhs need as many batch dims")
  _require(len(lc) == len(rc), "dot", "lhs and rhs need as many contracting dims")
  for a, b in zip(lb, rb):
    _require(lhs.dims[a] == rhs.dims[b], "dot",
             lambda: f"batch dims lhs {a} and rhs {b} differ in size ({lhs} vs {rhs})")
  for a, b in zip(lc, rc):
    _require(lhs.dims[a] == rhs.dims[b], "dot",
             lambda: f"contracting dims lhs {a} and rhs {b} differ in size ({lhs} vs {rhs})")
  pet = attrs.get("preferred_element_type")
  if pet is None:
    _require(lhs.dtype == rhs.dtype, "dot", lambda: f"operand types differ ({lhs} vs {rhs}); "
             "give preferred_element_type")
    dt = lhs.dtype
  else:
    dt = to_dtype(pet)
  lf = [lhs.dims[d] for d in range(lhs.rank) if d not in lb + lc]
  rf = [rhs.dims[d] for d in range(rhs.rank) if d not in rb + rc]
  return Shape(dt, [lhs.dims[d] for d in lb] + lf + rf)


def _rule_convolution(ops, attrs, declared):
  _require(len(ops) == 2, "convolution", "takes (lhs, rhs)")
  lhs, rhs = _array("convolution", ops[0]), _array("convolution", ops[1])
  _require(lhs.rank == rhs.rank and lhs.rank >= 2, "convolution",
           lambda: f"lhs {lhs} and rhs {rhs} must have the same rank >= 2")
  nd = lhs.rank - 2
  lspec, rspec, ospec = (tuple(s) for s in attrs["dimension_numbers"])
  for spec, what in ((lspec, "lhs"), (rspec, "rhs"), (ospec, "out")):
    _require(sorted(spec) == list(range(nd + 2)), "convolution",
             lambda: f"{what} dimension numbers {list(spec)} are not a permutation of rank {nd + 2}")
  strides = tuple(attrs.get("window_strides") or (1,) * nd)
  padding = tuple(attrs.get("padding") or ((0, 0),) * nd)
  ld = tuple(attrs.get("lhs_dilation") or (1,) * nd)
  rd = tuple(attrs.get("rhs_dilation") or (1,) * nd)
  _require(len(strides) == len(padding) == len(ld) == len(rd) == nd, "convolution",
           lambda: f"window attributes need {nd} entries each")
  g = attrs.get("feature_group_count", 1)
  bg = attrs.get("batch_group_count", 1)
  _require(g >= 1 and bg >= 1 and (g == 1 or bg == 1), "convolution",
           "feature_group_count and batch_group_count must be >= 1, and not both > 1")
  n, c = lhs.dims[lspec[0]], lhs.dims[lspec[1]]
  o, i = rhs.dims[rspec[0]], rhs.dims[rspec[1]]
  _require(c == i * g, "convolution", lambda: f"lhs features {c} != rhs input features {i} x "
           f"feature_group_count {g}")
  _require(o % g == 0 and o % bg == 0 and n % bg == 0, "convolution",
           lambda: f"output features {o} / batch {n} not divisible by the group counts")
  pet = attrs.get("preferred_element_type")
  if pet is None:
    _require(lhs.dtype == rhs.dtype, "convolution", "operand types differ")
    dt = lhs.dtype
  else:
    dt = to_dtype(pet)
  spatial = [_window_out("convolution", lhs.dims[lspec[2 + k]], rhs.dims[rspec[2 + k]],
                         strides[k], padding[k][0], padding[k][1], ld[k], rd[k])
             for k in range(nd)]
  out = [0] * (nd + 2)
  out[ospec[0]], out[ospec[1]] = n // bg, o
  for k in range(nd):
    out[ospec[2 + k]] = spatial[k]
  return Shape(dt, out)


def _rule_gather(ops, attrs, declared):
  _require(len(ops) == 2, "gather", "takes (operand, start_indices)")
  x, idx = _array("gather", ops[0]), _array("gather", ops[1])
  _require(is_int(idx.dtype) and idx.rank >= 1, "gather",
           lambda: f"start indices must be integers of rank >= 1, got {idx}")
  ivd = attrs.get("index_vector_dim", idx.rank - 1)
  _require(ivd == idx.rank - 1, "gather", "index_vector_dim must be the last dimension")
  offset = tuple(attrs.get("offset_dims", ()))
  collapsed = tuple(attrs.get("collapsed_slice_dims", ()))
  smap = tuple(attrs.get("start_index_map", ()))
  obatch = tuple(attrs.get("operand_batching_dims", ()))
  ibatch = tuple(attrs.get("start_indices_batching_dims", ()))
  sizes = tuple(attrs["slice_sizes"])
  _require(len(sizes) == x.rank, "gather", lambda: f"slice_sizes needs {x.rank} entries")
  _require(len(smap) == idx.dims[-1], "gather",
           lambda: f"start_index_map {list(smap)} must have one entry per index component "
           f"({idx.dims[-1]})")
  _dims_ok("gather", smap, x.rank, "start_index_map")
  _dims_ok("gather", collapsed + obatch, x.rank, "collapsed_slice_dims+operand_batching_dims")
  _dims_ok("gather", ibatch, idx.rank - 1, "start_indices_batching_dims")
  _require(len(obatch) == len(ibatch), "gather", "batching dims lists differ in length")
  _require(not set(smap) & set(obatch), "gather", "start_index_map overlaps batching dims")
  for d in collapsed + obatch:
    _require(sizes[d] <= 1, "gather", lambda: f"collapsed/batching dim {d} needs slice size 1")
  for od, idim in zip(obatch, ibatch):
    _require(x.dims[od] == idx.dims[idim], "gather", "batching dims differ in size")
  for s, n in zip(sizes, x.dims):
    _require(0 <= s <= n, "gather", lambda: f"slice_sizes {list(sizes)} do not fit {x}")
  _require(list(offset) == sorted(set(offset)), "gather", "offset_dims must be increasing")
  kept = [sizes[d] for d in range(x.rank) if d not in collapsed and d not in obatch]
  out_rank = len(kept) + idx.rank - 1
  _require(len(offset) == len(kept), "gather",
           lambda: f"offset_dims {list(offset)} needs {len(kept)} entries")
  _dims_ok("gather", offset, out_rank, "offset_dims")
  _require(attrs.get("mode", "clip") in ("clip", "fill"), "gather", "mode must be clip or fill")
  batch = iter(idx.dims[:-1])
  kept_it = iter(kept)
  return Shape(x.dtype, [next(kept_it) if i in offset else next(batch) for i in range(out_rank)])


def _rule_scatter(ops, attrs, declared):
  _require(len(ops) == 3, "scatter", "takes (operand, scatter_indices, updates)")
  x, idx, upd = (_array("scatter", s) for s in ops)
  _require(is_int(idx.dtype) and idx.rank >= 1, "scatter", lambda: f"bad scatter indices {idx}")
  _require(upd.dtype == x.dtype, "scatter", "updates must have the operand type")
  ivd = attrs.get("index_vector_dim", idx.rank - 1)
  _require(ivd == idx.rank - 1, "scatter", "index_vector_dim must be the last dimension")
  uwd = tuple(attrs.get("update_window_dims", ()))
  iwd = tuple(attrs.get("inserted_window_dims", ()))
  sd2od = tuple(attrs.get("scatter_dims_to_operand_dims", ()))
  obatch = tuple(attrs.get("input_batching_dims", ()))
  ibatch = tuple(attrs.get("scatter_indices_batching_dims", ()))
  _require(len(sd2od) == idx.dims[-1], "scatter",
           "scatter_dims_to_operand_dims needs one entry per index component")
  _dims_ok("scatter", sd2od, x.rank, "scatter_dims_to_operand_dims")
  _dims_ok("scatter", iwd + obatch, x.rank, "inserted_window_dims+input_batching_dims")
  _dims_ok("scatter", uwd, upd.rank, "update_window_dims")
  _require(list(uwd) == sorted(uwd), "scatter", "update_window_dims must be increasing")
  wdims = [d for d in range(x.rank) if d not in iwd and d not in obatch]
  _require(len(uwd) == len(wdims), "scatter",
           lambda: f"update_window_dims needs {len(wdims)} entries")
  _require(upd.rank == len(uwd) + idx.rank - 1, "scatter",
           lambda: f"updates {upd} must have rank {len(uwd) + idx.rank - 1}")
  sdims = [upd.dims[d] for d in range(upd.rank) if d not in uwd]
  _require(tuple(sdims) == idx.dims[:-1], "scatter",
           lambda: f"update scatter dims {sdims} must equal the index batch dims {list(idx.dims[:-1])}")
  for od, ud in zip(wdims, uwd):
    _require(upd.dims[ud] <= x.dims[od], "scatter", lambda: f"update window larger than {x}")
  _require(attrs.get("mode", "drop") in ("drop", "clip"), "scatter", "mode must be drop or clip")
  _check_scalar_computation("scatter", attrs.get("to_apply"), [x.dtype, x.dtype], [x.dtype],
                            "update computation")
  return x


def _rule_sort(ops, attrs, declared):
  _require(len(ops) >= 1, "sort", "needs operands")
  xs = [_array("sort", s) for s in ops]
  for s in xs:
    _require(s.dims == xs[0].dims, "sort", lambda: f"operands {xs[0]} and {s} differ in dims")
  d = attrs.get("dimension", 0)
  _require(xs[0].rank == 0 or 0 <= d < xs[0].rank, "sort", lambda: f"dimension {d} out of range")
  pdts = [dt for s in xs for dt in (s.dtype, s.dtype)]
  _check_scalar_computation("sort", attrs.get("to_apply"), pdts, [np.dtype(np.bool_)],
                            "comparator")
  return xs[0] if len(xs) == 1 else Shape.tuple(xs)


def _rule_while(ops, attrs, declared):
  _require(len(ops) == 1, "while", "takes one (tuple) operand")
  s = ops[0]
  cond, body = attrs.get("condition"), attrs.get("body")
  _require(isinstance(cond, Computation) and isinstance(body, Computation), "while",
           "needs condition and body computations")
  _require(cond.parameter_shapes == [s], "while", lambda: f"condition %{cond.name} must take {s}")
  _require(cond.root.shape == Shape(np.bool_, ()), "while",
           lambda: f"condition %{cond.name} must return pred[], returns {cond.root.shape}")
  _require(body.parameter_shapes == [s] and body.root.shape == s, "while",
           lambda: f"body %{body.name} must map {s} to {s}")
  return s


def _rule_conditional(ops, attrs, declared):
  branches = attrs.get("branches")
  _require(isinstance(branches, (list, tuple)) and branches, "conditional", "needs branches")
  _require(len(ops) == 1 + len(branches), "conditional",
           "takes the branch index/predicate and one operand per branch")
  p = ops[0]
  _require(p.is_scalar and (p.dtype in (np.dtype(np.bool_), np.dtype(np.int32))), "conditional",
           lambda: f"selector must be pred[] or s32[], got {p}")
  _require(p.dtype != np.bool_ or len(branches) == 2, "conditional",
           "a pred selector needs exactly 2 branches (true, false)")
  out = branches[0].root.shape
  for b, s in zip(branches, ops[1:]):
    _require(b.parameter_shapes == [s], "conditional", lambda: f"branch %{b.name} must take {s}")
    _require(b.root.shape == out, "conditional", lambda: f"branch %{b.name} returns {b.root.shape}, "
             f"expected {out}")
  return out


FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def _rule_fft(ops, attrs, declared):
  """XLA's Fft over the innermost ``len(fft_length)`` dimensions: FFT/IFFT complex to complex,
  RFFT real to complex (the last dimension becomes ``n // 2 + 1``), IRFFT complex to real (the
  last dimension of the operand holds ``n // 2 + 1`` values, the result ``n``)."""
  _require(len(ops) == 1, "fft", "takes one operand")
  x = _array("fft", ops[0])
  kind, lengths = attrs.get("fft_type"), tuple(attrs.get("fft_length", ()))
  _require(kind in FFT_TYPES, "fft", lambda: f"fft_type must be one of {FFT_TYPES}, got {kind!r}")
  k = len(lengths)
  _require(1 <= k <= x.rank, "fft", lambda: f"fft_length {list(lengths)} needs 1 to {x.rank} entries")
  batch, inner = x.dims[:x.rank - k], x.dims[x.rank - k:]
  if kind == "RFFT":
    _require(x.dtype in (np.dtype(np.float32), np.dtype(np.float64)), "fft",
             lambda: f"RFFT takes f32 or f64, got {x}")
    _require(inner == lengths, "fft", lambda: f"RFFT operand {x} does not end in {list(lengths)}")
    return Shape(np.complex64 if x.dtype == np.float32 else np.complex128,
                 batch + lengths[:-1] + (lengths[-1] // 2 + 1,))
  _require(is_complex(x.dtype), "fft", lambda: f"{kind} takes c64 or c128, got {x}")
  if kind == "IRFFT":
    _require(inner == lengths[:-1] + (lengths[-1] // 2 + 1,), "fft",
             lambda: f"IRFFT operand {x} does not end in {list(lengths[:-1] + (lengths[-1] // 2 + 1,))}")
    return Shape(np.float32 if x.dtype == np.complex64 else np.float64, batch + lengths)
  _require(inner == lengths, "fft", lambda: f"{kind} operand {x} does not end in {list(lengths)}")
  return x


def _rule_tuple(ops, attrs, declared):
  return Shape.tuple(ops)


def _rule_opt_barrier(ops, attrs, declared):
  for o in ops:
    _array("opt-barrier", o)
  return Shape.tuple(ops)


def _rule_gte(ops, attrs, declared):
  _require(len(ops) == 1 and ops[0].is_tuple, "get-tuple-element", "needs a tuple operand")
  i = attrs.get("index")
  _require(isinstance(i, (int, np.integer)) and 0 <= i < len(ops[0].tuple_shapes),
           "get-tuple-element", lambda: f"index {i!r} out of range for {ops[0]}")
  return ops[0].tuple_shapes[i]


def _rule_fusion(ops, attrs, declared):
  comp = attrs.get("calls")
  _require(isinstance(comp, Computation), "fusion", "needs a fused computation (calls)")
  _require(attrs.get("kind") in FUSION_KINDS, "fusion", lambda: f"kind must be one of {FUSION_KINDS}")
  _require(comp.parameter_shapes == list(ops), "fusion",
           lambda: f"operands ({', '.join(map(str, ops))}) do not match %{comp.name}'s parameters "
           f"({', '.join(map(str, comp.parameter_shapes))})")
  return comp.root.shape


SHAPE_RULES: dict[str, Callable] = {
    **{op: _rule_unary(op) for op in UNARY_OPS},
    **{op: _rule_binary(op) for op in BINARY_OPS},
    "compare": _rule_compare, "select": _rule_select, "clamp": _rule_clamp,
    "convert": _rule_convert, "bitcast-convert": _rule_bitcast_convert,
    "parameter": _rule_parameter, "constant": _rule_constant, "iota": _rule_iota,
    "broadcast": _rule_broadcast, "reshape": _rule_reshape, "transpose": _rule_transpose,
    "slice": _rule_slice, "dynamic-slice": _rule_dynamic_slice,
    "dynamic-update-slice": _rule_dynamic_update_slice, "concatenate": _rule_concatenate,
    "pad": _rule_pad, "reverse": _rule_reverse, "reduce": _rule_reduce,
    "reduce-window": _rule_reduce_window, "dot": _rule_dot, "convolution": _rule_convolution,
    "gather": _rule_gather, "scatter": _rule_scatter, "sort": _rule_sort, "fft": _rule_fft,
    "while": _rule_while,
    "conditional": _rule_conditional, "tuple": _rule_tuple, "get-tuple-element": _rule_gte,
    "opt-barrier": _rule_opt_barrier,
    "fusion": _rule_fusion,
}


def infer_shape(opcode: str, operand_shapes: Sequence[Shape], attrs: dict,
                declared: Shape | None = None) -> Shape:
  """The result shape of ``opcode`` on operands of ``operand_shapes``; raises ``ShapeError``.
  ``declared`` is the requested result shape for the ops that take one (parameter, convert,
  bitcast-convert, broadcast, reshape, iota)."""
  rule = SHAPE_RULES.get(opcode)
  if rule is None:
    raise ShapeError(f"unknown opcode {opcode!r}")
  return rule(list(operand_shapes), attrs, declared)


# ---------------------------------------------------------------------------------------------
# builder
# ---------------------------------------------------------------------------------------------

def _as_shape(shape_or_dtype, dims=None) -> Shape:
  if isinstance(shape_or_dtype, Shape):
    return shape_or_dtype
  return Shape(shape_or_dtype, dims or ())


class Builder:
  """Emits instructions into a computation, computing and checking each result shape.

  ``Builder(module, "name")`` starts a new computation (finish with ``build(root)``);
  ``Builder.into(computation, before=instr)`` appends to (or inserts into) an existing one,
  which is how passes create replacement instructions."""

  def __init__(self, module: Module | None, name: str = "computation"):
    self.module = module
    self.computation = Computation(name, None)
    if module is not None:
      module.add_computation(self.computation)
    self.before: Instruction | None = None

  @classmethod
  def into(cls, computation: Computation, before: Instruction | None = None) -> "Builder":
    b = cls.__new__(cls)
    b.module = computation.module
    b.computation = computation
    b.before = before
    return b

  def build(self, root: Instruction) -> Computation:
    self.computation.set_root(root)
    return self.computation

  # -- core ------------------------------------------------------------------------------------
  def emit(self, opcode: str, operands: Sequence[Instruction] = (), attrs: dict | None = None,
           shape: Shape | None = None, name: str | None = None) -> Instruction:
    """Create, shape-check and insert one instruction."""
    attrs = dict(attrs or {})
    operands = list(operands)
    for o in operands:
      if not isinstance(o, Instruction):
        raise ShapeError(f"{opcode}: operand {o!r} is not an Instruction")
    try:
      result = infer_shape(opcode, [o.shape for o in operands], attrs, shape)
    except ShapeError as e:
      names = ", ".join(f"{o.shape} %{o.name}" for o in operands)
      raise ShapeError(f"{e} [operands: {names}]") from None
    instr = Instruction(opcode, operands, result, attrs, name)
    return self.computation.add(instr, before=self.before)

  def parameter(self, shape: Shape, name: str | None = None, number: int | None = None):
    if number is None:
      number = len(self.computation.parameters)
    return self.emit("parameter", (), {"parameter_number": number}, shape,
                     name or f"p{number}")

  def constant(self, value, dtype=None) -> Instruction:
    """A constant array (a Python/NumPy scalar gives a rank-0 constant)."""
    if dtype is not None:
      try:
        arr = np.asarray(value, dtype=to_dtype(dtype))
      except OverflowError:  # e.g. -1 as u8: wrap like a C cast (all ones)
        arr = np.asarray(value).astype(to_dtype(dtype))
    elif isinstance(value, (np.ndarray, np.generic)):
      arr = np.asarray(value)
    elif isinstance(value, bool):
      arr = np.asarray(value, np.bool_)
    elif isinstance(value, float):
      arr = np.asarray(value, np.float32)
    elif isinstance(value, int):
      arr = np.asarray(value, np.int32)
    else:
      arr = np.asarray(value)
    arr = np.array(arr, dtype=to_dtype(arr.dtype), copy=True)
    arr.flags.writeable = False
    return self.emit("constant", (), {"value": arr})

  def full(self, value, shape: Shape) -> Instruction:
    """A splat: ``broadcast(constant(value))`` of ``shape``."""
    c = self.constant(value, shape.dtype)
    return c if shape.is_scalar else self.broadcast(c, shape.dims, ())

  # -- elementwise -----------------------------------------------------------------------------
  def compare(self, x, y, direction: str, total_order: bool = False):
    attrs = {"direction": direction}
    if total_order:
      attrs["type"] = "TOTALORDER"
    return self.emit("compare", (x, y), attrs)

  def eq(self, x, y): return self.compare(x, y, "EQ")
  def ne(self, x, y): return self.compare(x, y, "NE")
  def lt(self, x, y): return self.compare(x, y, "LT")
  def le(self, x, y): return self.compare(x, y, "LE")
  def gt(self, x, y): return self.compare(x, y, "GT")
  def ge(self, x, y): return self.compare(x, y, "GE")

  def select(self, pred, on_true, on_false):
    return self.emit("select", (pred, on_true, on_false))

  def clamp(self, lo, x, hi):
    return self.emit("clamp", (lo, x, hi))

  def convert(self, x, dtype):
    return self.emit("convert", (x,), {}, x.shape.with_dtype(dtype))

  def bitcast_convert(self, x, dtype):
    dt = to_dtype(dtype)
    a, b = x.dtype.itemsize, dt.itemsize
    dims = x.dims if a == b else (x.dims + (a // b,) if a > b else x.dims[:-1])
    return self.emit("bitcast-convert", (x,), {}, Shape(dt, dims))

  # -- structural ------------------------------------------------------------------------------
  def broadcast(self, x, dims: Sequence[int], dimensions: Sequence[int] = ()):
    """XLA broadcast: operand dimension i becomes output dimension ``dimensions[i]``."""
    return self.emit("broadcast", (x,), {"dimensions": tuple(dimensions)}, Shape(x.dtype, dims))

  def reshape(self, x, dims: Sequence[int]):
    return self.emit("reshape", (x,), {}, Shape(x.dtype, dims))

  def transpose(self, x, permutation: Sequence[int]):
    return self.emit("transpose", (x,), {"dimensions": tuple(permutation)})

  def slice(self, x, start, limit, strides=None):
    return self.emit("slice", (x,), {"start_indices": tuple(start), "limit_indices": tuple(limit),
                                     "strides": tuple(strides or (1,) * len(start))})

  def dynamic_slice(self, x, start_indices: Sequence[Instruction], sizes: Sequence[int]):
    return self.emit("dynamic-slice", (x, *start_indices), {"dynamic_slice_sizes": tuple(sizes)})

  def dynamic_update_slice(self, x, update, start_indices: Sequence[Instruction]):
    return self.emit("dynamic-update-slice", (x, update, *start_indices))

  def concatenate(self, xs: Sequence[Instruction], dimension: int):
    return self.emit("concatenate", tuple(xs), {"dimensions": (dimension,)})

  def pad(self, x, value, config: Sequence[tuple[int, int, int]]):
    return self.emit("pad", (x, value), {"padding_config": tuple(tuple(c) for c in config)})

  def iota(self, shape: Shape, iota_dimension: int):
    return self.emit("iota", (), {"iota_dimension": iota_dimension}, shape)

  def reverse(self, x, dimensions: Sequence[int]):
    return self.emit("reverse", (x,), {"dimensions": tuple(dimensions)})

  # -- reductions, contractions --------------------------------------------------------------
  def reduce(self, operands, inits, dimensions: Sequence[int], to_apply: Computation):
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    inits = list(inits) if isinstance(inits, (list, tuple)) else [inits]
    return self.emit("reduce", operands + inits,
                     {"dimensions": tuple(dimensions), "to_apply": to_apply})

  def reduce_window(self, operands, inits, to_apply: Computation, window_dimensions,
                    window_strides=None, padding=None, base_dilation=None, window_dilation=None):
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    inits = list(inits) if isinstance(inits, (list, tuple)) else [inits]
    r = len(window_dimensions)
    return self.emit("reduce-window", operands + inits, {
        "window_dimensions": tuple(window_dimensions),
        "window_strides": tuple(window_strides or (1,) * r),
        "padding": tuple(tuple(p) for p in (padding or ((0, 0),) * r)),
        "base_dilation": tuple(base_dilation or (1,) * r),
        "window_dilation": tuple(window_dilation or (1,) * r), "to_apply": to_apply})

  def dot(self, lhs, rhs, lhs_contracting_dims=(), rhs_contracting_dims=(), lhs_batch_dims=(),
          rhs_batch_dims=(), preferred_element_type=None, operand_precision=None):
    """``operand_precision``: None (default) or a pair of names ("default", "high",
    "highest"); a backend may compute a float32 dot in a narrower format (tf32 on tensor cores)
    only when neither operand asks for "highest"."""
    attrs = {"lhs_batch_dims": tuple(lhs_batch_dims), "rhs_batch_dims": tuple(rhs_batch_dims),
             "lhs_contracting_dims": tuple(lhs_contracting_dims),
             "rhs_contracting_dims": tuple(rhs_contracting_dims)}
    if preferred_element_type is not None:
      attrs["preferred_element_type"] = to_dtype(preferred_element_type)
    if operand_precision is not None and any(p != "default" for p in operand_precision):
      attrs["operand_precision"] = tuple(operand_precision)
    return self.emit("dot", (lhs, rhs), attrs)

  def dot_general(self, lhs, rhs, dimension_numbers, preferred_element_type=None,
                  operand_precision=None):
    """lax-style ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``."""
    (lc, rc), (lb, rb) = dimension_numbers
    return self.dot(lhs, rhs, lc, rc, lb, rb, preferred_element_type, operand_precision)

  def convolution(self, lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                  dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                  preferred_element_type=None, operand_precision=None):
    """``operand_precision``: as for ``dot``."""
    nd = lhs.shape.rank - 2
    if dimension_numbers is None:
      spec = tuple(range(nd + 2))
      dimension_numbers = (spec, spec, spec)
    attrs = {"window_strides": tuple(window_strides),
             "padding": tuple(tuple(p) for p in padding),
             "lhs_dilation": tuple(lhs_dilation or (1,) * nd),
             "rhs_dilation": tuple(rhs_dilation or (1,) * nd),
             "dimension_numbers": tuple(tuple(s) for s in dimension_numbers),
             "feature_group_count": feature_group_count,
             "batch_group_count": batch_group_count}
    if preferred_element_type is not None:
      attrs["preferred_element_type"] = to_dtype(preferred_element_type)
    if operand_precision is not None and any(p != "default" for p in operand_precision):
      attrs["operand_precision"] = tuple(operand_precision)
    return self.emit("convolution", (lhs, rhs), attrs)

  def gather(self, operand, indices, *, offset_dims, collapsed_slice_dims, start_index_map,
             slice_sizes, operand_batching_dims=(), start_indices_batching_dims=(),
             mode="clip", fill_value=None):
    attrs = {"offset_dims": tuple(offset_dims), "collapsed_slice_dims": tuple(collapsed_slice_dims),
             "start_index_map": tuple(start_index_map),
             "operand_batching_dims": tuple(operand_batching_dims),
             "start_indices_batching_dims": tuple(start_indices_batching_dims),
             "index_vector_dim": indices.shape.rank - 1, "slice_sizes": tuple(slice_sizes),
             "mode": mode}
    if fill_value is not None:
      attrs["fill_value"] = fill_value
    return self.emit("gather", (operand, indices), attrs)

  def scatter(self, operand, indices, updates, to_apply: Computation, *, update_window_dims,
              inserted_window_dims, scatter_dims_to_operand_dims, input_batching_dims=(),
              scatter_indices_batching_dims=(), mode="drop"):
    return self.emit("scatter", (operand, indices, updates), {
        "update_window_dims": tuple(update_window_dims),
        "inserted_window_dims": tuple(inserted_window_dims),
        "scatter_dims_to_operand_dims": tuple(scatter_dims_to_operand_dims),
        "input_batching_dims": tuple(input_batching_dims),
        "scatter_indices_batching_dims": tuple(scatter_indices_batching_dims),
        "index_vector_dim": indices.shape.rank - 1, "mode": mode, "to_apply": to_apply})

  def sort(self, operands, dimension: int, comparator: Computation, is_stable: bool = True):
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    return self.emit("sort", operands, {"dimension": dimension, "is_stable": is_stable,
                                        "to_apply": comparator})

  def fft(self, x, fft_type: str, fft_length: Sequence[int]):
    return self.emit("fft", (x,), {"fft_type": fft_type,
                                   "fft_length": tuple(int(n) for n in fft_length)})

  # -- control flow, tuples, fusion ----------------------------------------------------------
  def while_loop(self, init, condition: Computation, body: Computation):
    return self.emit("while", (init,), {"condition": condition, "body": body})

  def conditional(self, selector, operands: Sequence[Instruction],
                  branches: Sequence[Computation]):
    return self.emit("conditional", (selector, *operands), {"branches": list(branches)})

  def tuple(self, xs: Sequence[Instruction]):
    return self.emit("tuple", tuple(xs))

  def get_tuple_element(self, x, index: int):
    return self.emit("get-tuple-element", (x,), {"index": index})

  def opt_barrier(self, xs: Sequence[Instruction]) -> list:
    """XLA's optimization barrier: ``xs`` unchanged (read through get-tuple-elements), but no
    pass merges or moves work across it (remat's recomputation reads its inputs through one,
    so CSE cannot merge it with the forward pass).  ``passes/barriers.py`` removes it once the
    simplifying passes are done."""
    t = self.emit("opt-barrier", tuple(xs))
    return [self.get_tuple_element(t, i) for i in range(len(xs))]

  def fusion(self, operands: Sequence[Instruction], calls: Computation, kind: str = "kLoop"):
    return self.emit("fusion", tuple(operands), {"kind": kind, "calls": calls})


def _method_name(opcode: str) -> str:
  name = opcode.replace("-", "_")
  return name + "_" if name in ("and", "or", "not") else name


def _make_unary(opcode):
  def method(self, x):
    return self.emit(opcode, (x,))
  method.__name__ = _method_name(opcode)
  method.__doc__ = f"Elementwise ``{opcode}``."
  return method


def _make_binary(opcode):
  def method(self, x, y):
    return self.emit(opcode, (x, y))
  method.__name__ = _method_name(opcode)
  method.__doc__ = f"Elementwise ``{opcode}`` (operands of equal shape)."
  return method


for _op in UNARY_OPS:
  setattr(Builder, _method_name(_op), _make_unary(_op))
for _op in BINARY_OPS:
  setattr(Builder, _method_name(_op), _make_binary(_op))
# Short aliases.
Builder.neg = Builder.negate
Builder.exp = Builder.exponential
Builder.sin = Builder.sine
Builder.cos = Builder.cosine
Builder.sub = Builder.subtract
Builder.mul = Builder.multiply
Builder.div = Builder.divide
Builder.max = Builder.maximum
Builder.min = Builder.minimum
Builder.pow = Builder.power


def scalar_computation(module: Module, opcode: str, dtype, name: str | None = None) -> Computation:
  """A two-scalar-argument computation applying one binary op: a reducer (``add``,
  ``maximum``, ...) or, for ``opcode`` "LT"/"GT"/..., a one-key sort comparator."""
  dt = to_dtype(dtype)
  b = Builder(module, name or f"{opcode.lower()}_{dtype_name(dt)}")
  x = b.parameter(Shape(dt, ()), "lhs")
  y = b.parameter(Shape(dt, ()), "rhs")
  if opcode in COMPARISON_DIRECTIONS:
    return b.build(b.compare(x, y, opcode))
  return b.build(b.emit(opcode, (x, y)))


# ---------------------------------------------------------------------------------------------
# printer
# ---------------------------------------------------------------------------------------------

def _ints(xs) -> str:
  return "{" + ",".join(str(int(x)) for x in xs) + "}"


def _scalar_text(v, dt) -> str:
  if is_pred(dt):
    return "true" if bool(v) else "false"
  if is_int(dt):
    return str(int(v))
  if is_complex(dt):
    return f"({_scalar_text(v.real, np.dtype(np.float64))}, " \
           f"{_scalar_text(v.imag, np.dtype(np.float64))})"
  f = float(v)
  if math.isnan(f):
    return "-nan" if math.copysign(1.0, f) < 0 else "nan"
  if math.isinf(f):
    return "inf" if f > 0 else "-inf"
  if dt == np.float64:
    return repr(f)
  s = str(np.float32(f)) if dt == np.float32 else repr(f)
  return s


def constant_text(value: np.ndarray, limit: int = 16) -> str:
  """XLA-style literal: ``1.5``, ``{1, 2}``, ``{ {1, 2}, {3, 4} }``; ``{...}`` past ``limit``."""
  if value.ndim == 0:
    return _scalar_text(value[()], value.dtype)
  if value.size > limit:
    return "{...}"

  def rec(a):
    if a.ndim == 1:
      return "{" + ", ".join(_scalar_text(x, a.dtype) for x in a) + "}"
    return "{ " + ", ".join(rec(x) for x in a) + " }"
  return rec(value)


def _window_text(sizes, strides, padding, lhs_dil, rhs_dil) -> str:
  parts = ["size=" + "x".join(map(str, sizes))]
  if any(s != 1 for s in strides):
    parts.append("stride=" + "x".join(map(str, strides)))
  if any(p != (0, 0) for p in map(tuple, padding)):
    parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in padding))
  if any(d != 1 for d in lhs_dil):
    parts.append("lhs_dilate=" + "x".join(map(str, lhs_dil)))
  if any(d != 1 for d in rhs_dil):
    parts.append("rhs_dilate=" + "x".join(map(str, rhs_dil)))
  return "{" + " ".join(parts) + "}"


def _dim_labels(specs) -> str:
  lspec, rspec, ospec = specs

  def one(spec, a, b):
    labels = [""] * len(spec)
    labels[spec[0]], labels[spec[1]] = a, b
    for k, d in enumerate(spec[2:]):
      labels[d] = str(k)
    return "".join(labels)
  return f"{one(lspec, 'b', 'f')}_{one(rspec, 'o', 'i')}->{one(ospec, 'b', 'f')}"


def _attrs_text(instr: Instruction) -> list[str]:
  a, op = instr.attrs, instr.opcode
  out = []
  if op in ("broadcast", "transpose", "reverse", "reduce", "concatenate"):
    out.append(f"dimensions={_ints(a.get('dimensions', ()))}")
  elif op == "slice":
    strides = a.get("strides") or (1,) * len(a["start_indices"])
    out.append("slice={" + ", ".join(
        f"[{s}:{l}]" if st == 1 else f"[{s}:{l}:{st}]"
        for s, l, st in zip(a["start_indices"], a["limit_indices"], strides)) + "}")
  elif op == "dynamic-slice":
    out.append(f"dynamic_slice_sizes={_ints(a['dynamic_slice_sizes'])}")
  elif op == "pad":
    out.append("padding=" + "x".join(
        f"{lo}_{hi}" + (f"_{i}" if i else "") for lo, hi, i in a["padding_config"]))
  elif op == "iota":
    out.append(f"iota_dimension={a['iota_dimension']}")
  elif op == "compare":
    out.append(f"direction={a['direction']}")
    if a.get("type"):
      out.append(f"type={a['type']}")
  elif op == "get-tuple-element":
    out.append(f"index={a['index']}")
  elif op == "reduce-window":
    out.append("window=" + _window_text(a["window_dimensions"], a["window_strides"],
                                        a["padding"], a["base_dilation"], a["window_dilation"]))
  elif op == "dot":
    for k in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"):
      if a.get(k) or k.endswith("contracting_dims"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    if a.get("operand_precision"):
      out.append("operand_precision={" + ",".join(a["operand_precision"]) + "}")
  elif op == "convolution":
    nd = len(a["window_strides"])
    lspec, rspec, _ = a["dimension_numbers"]
    sizes = [instr.operands[1].dims[rspec[2 + k]] for k in range(nd)]
    out.append("window=" + _window_text(sizes, a["window_strides"], a["padding"],
                                        a["lhs_dilation"], a["rhs_dilation"]))
    out.append(f"dim_labels={_dim_labels(a['dimension_numbers'])}")
    if a.get("feature_group_count", 1) != 1:
      out.append(f"feature_group_count={a['feature_group_count']}")
    if a.get("batch_group_count", 1) != 1:
      out.append(f"batch_group_count={a['batch_group_count']}")
    if a.get("operand_precision"):
      out.append("operand_precision={" + ",".join(a["operand_precision"]) + "}")
  elif op == "gather":
    for k in ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
              "start_indices_batching_dims"):
      if a.get(k) or k in ("offset_dims", "collapsed_slice_dims", "start_index_map"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    out.append(f"index_vector_dim={a['index_vector_dim']}")
    out.append(f"slice_sizes={_ints(a['slice_sizes'])}")
    if a.get("mode", "clip") != "clip":
      out.append(f"mode={a['mode']}")
    if a.get("fill_value") is not None:
      out.append(f"fill_value={a['fill_value']}")
  elif op == "scatter":
    for k in ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
              "input_batching_dims", "scatter_indices_batching_dims"):
      if a.get(k) or k in ("update_window_dims", "inserted_window_dims",
                           "scatter_dims_to_operand_dims"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    out.append(f"index_vector_dim={a['index_vector_dim']}")
    if a.get("mode", "drop") != "drop":
      out.append(f"mode={a['mode']}")
  elif op == "fft":
    out.append(f"fft_type={a['fft_type']}, fft_length={_ints(a['fft_length'])}")
  elif op == "sort":
    out.append(f"dimensions={{{a.get('dimension', 0)}}}")
    if a.get("is_stable"):
      out.append("is_stable=true")
  elif op == "fusion":
    out.append(f"kind={a['kind']}")
  # called computations last, in XLA's spelling
  if op == "while":
    out.append(f"condition=%{a['condition'].name}, body=%{a['body'].name}")
  elif op == "conditional":
    br = a["branches"]
    if instr.operands[0].dtype == np.bool_:
      out.append(f"true_computation=%{br[0].name}, false_computation=%{br[1].name}")
    else:
      out.append("branch_computations={" + ", ".join(f"%{c.name}" for c in br) + "}")
  elif op == "fusion":
    out.append(f"calls=%{a['calls'].name}")
  elif "to_apply" in a:
    out.append(f"to_apply=%{a['to_apply'].name}")
  return out


def _instruction_text(instr: Instruction, operand_shapes: bool = True) -> str:
  if instr.opcode == "parameter":
    args = str(instr.attrs["parameter_number"])
  elif instr.opcode == "constant":
    args = constant_text(instr.attrs["value"])
  else:
    args = ", ".join(f"{o.shape} %{o.name}" if operand_shapes else f"%{o.name}"
                     for o in instr.operands)
  attrs = _attrs_text(instr)
  tail = (", " + ", ".join(attrs)) if attrs else ""
  return f"%{instr.name} = {instr.shape} {instr.opcode}({args}){tail}"


# ---------------------------------------------------------------------------------------------
# verifier
# ---------------------------------------------------------------------------------------------

def _verify_fail(comp, instr, msg):
  where = f"%{instr.name} ({instr.opcode}) in %{comp.name}" if instr is not None else \
      f"computation %{comp.name}"
  raise VerifyError(f"verify: {where}: {msg}")


def verify(module: Module) -> None:
  """Check that ``module`` is well formed; raise ``VerifyError`` naming the instruction.

  Checks: an entry exists; names are unique; every computation has its parameters numbered
  0..n-1 and a root inside it; operands are defined earlier in the same computation; operand
  and user lists agree; every instruction's shape equals what its shape rule computes from its
  operands and attributes (which also checks the signatures of called computations); called
  computations belong to the module; constants hold read-only arrays of their shape."""
  if module.entry is None:
    raise VerifyError(f"verify: module {module.name} has no entry computation")
  names: dict[str, Instruction] = {}
  comp_names = set()
  in_module = set(module.computations)
  for comp in module.computations:
    if comp.name in comp_names:
      raise VerifyError(f"verify: duplicate computation name %{comp.name}")
    comp_names.add(comp.name)
    if comp.module is not module:
      _verify_fail(comp, None, "computation does not point back to its module")
    if comp.root is None:
      _verify_fail(comp, None, "no root")
    if comp.root.parent is not comp:
      _verify_fail(comp, comp.root, "the root is not in this computation")
    listed = set(comp.instructions) if comp.parameters else ()
    for i, p in enumerate(comp.parameters):
      if p is None or p.opcode != "parameter" or p.attrs["parameter_number"] != i:
        _verify_fail(comp, p, f"parameter {i} missing or misnumbered")
      if p.parent is not comp or p not in listed:
        _verify_fail(comp, p, "parameter not in the instruction list")
    position = {}
    for k, instr in enumerate(comp.instructions):
      if instr.parent is not comp:
        _verify_fail(comp, instr, "parent is not this computation")
      if instr.name in names:
        _verify_fail(comp, instr, f"duplicate instruction name %{instr.name}")
      names[instr.name] = instr
      if instr.opcode == "parameter" and (
          instr.attrs["parameter_number"] >= len(comp.parameters)
          or comp.parameters[instr.attrs["parameter_number"]] is not instr):
        _verify_fail(comp, instr, "parameter not registered in the parameter list")
      for op in instr.operands:
        if op not in position:
          _verify_fail(comp, instr, f"operand %{op.name} is not defined before use in this "
                       "computation")
        if instr not in op.users:
          _verify_fail(comp, instr, f"missing from the users of its operand %{op.name}")
      for u in instr.users:
        if instr not in u.operands or u.parent is not comp:
          _verify_fail(comp, instr, f"dangling user %{u.name}")
      if len(set(map(id, instr.users))) != len(instr.users):
        _verify_fail(comp, instr, "duplicate entries in users")
      for sub in instr.called_computations:
        if sub not in in_module:
          _verify_fail(comp, instr, f"calls %{sub.name}, which is not in the module")
        if sub is comp:
          _verify_fail(comp, instr, "calls its own computation")
      if instr.opcode == "constant":
        v = instr.attrs.get("value")
        if not isinstance(v, np.ndarray) or v.flags.writeable:
          _verify_fail(comp, instr, "constant value must be a read-only numpy array")
      declared = instr.shape
      try:
        expect = infer_shape(instr.opcode, [o.shape for o in instr.operands], instr.attrs,
                             declared)
      except ShapeError as e:
        _verify_fail(comp, instr, str(e))
      if expect != declared:
        _verify_fail(comp, instr, f"shape {declared} but its operands and attributes give "
                     f"{expect}")
      position[instr] = k
    if comp.root not in position:
      _verify_fail(comp, comp.root, "root not in the instruction list")
