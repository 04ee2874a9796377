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
from typing import Iterable, Sequence

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
    # 4-bit integers: one value per byte in memory (ml_dtypes' layout)
    ("s4", ml_dtypes.int4), ("u4", ml_dtypes.uint4),
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


_INT4 = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))


def is_int(dt) -> bool:
  return dt.kind in "iu" or dt in _INT4


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
CALLED_COMPUTATION_KEYS = ("to_apply", "condition", "body", "branches", "calls", "grad_calls")


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
  epilogue), so fusion stores such an epilogue's result rather than copying it into its users;
  ``fused_attention``: None, or ``refuses(dtype, q_dims, k_dims, v_dims, dots) -> reason |
  None`` when the backend
  computes ``attention`` instructions in one kernel (``passes/attention.py`` makes them where
  it does not refuse); ``fused_attention_grad``: the same for ``attention-grad``, an
  attention's backward (``passes/attention_grad.py``)."""

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
    self.fused_attention = None
    self.fused_attention_grad = None

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
    new.fused_attention = self.fused_attention
    new.fused_attention_grad = self.fused_attention_grad
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



# the shape rules (``infer_shape``) live in hlo_shapes.py; their names are hlo's too
from ourjax.lowering.hlo_shapes import SHAPE_RULES, infer_shape  # noqa: E402,F401


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
  elif op in ("attention", "attention-grad"):
    out.append(f"scale={_scalar_text(a['scale'], np.dtype(np.float32))}")
  # called computations last, in XLA's spelling
  if op == "while":
    out.append(f"condition=%{a['condition'].name}, body=%{a['body'].name}")
  elif op == "conditional":
    br = a["branches"]
    if instr.operands[0].dtype == np.bool_:
      out.append(f"true_computation=%{br[0].name}, false_computation=%{br[1].name}")
    else:
      out.append("branch_computations={" + ", ".join(f"%{c.name}" for c in br) + "}")
  elif op in ("fusion", "attention", "attention-grad") and (
      a.get("calls") is not None or a.get("grad_calls") is not None):
    if a.get("calls") is not None:
      out.append(f"calls=%{a['calls'].name}")
    if a.get("grad_calls") is not None:
      out.append(f"grad_calls=%{a['grad_calls'].name}")
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
