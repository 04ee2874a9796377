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

The shape rules live in hlo_shapes.py, the ``Builder`` in hlo_builder.py, the printer in
hlo_text.py and the verifier in hlo_verify.py; their public names are this module's too.
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
    "CALLED_COMPUTATION_KEYS", "FUSION_KINDS", "constant_text",
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
  __slots__ = ("dtype", "dims", "tuple_shapes", "_text", "_hash")

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
    return self is other or (isinstance(other, Shape) and self.dims == other.dims
                             and self.dtype == other.dtype
                             and self.tuple_shapes == other.tuple_shapes)

  def __hash__(self):
    # (made once: shapes key the passes' tables, and hashing a NumPy dtype is not cheap)
    try:
      return self._hash
    except AttributeError:
      pass
    h = hash(self._key())
    object.__setattr__(self, "_hash", h)
    return h

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
    # (a new instruction is in no users list yet: each distinct operand gains it once)
    for op in (instr.operands if len(instr.operands) < 2 else dict.fromkeys(instr.operands)):
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
  ``kernel_fixed_flops``: the work (floating-point operations) a narrow GEMM does in the time
  one more kernel costs on the backend (its launch and ramp): ``conv_to_dot`` splits a grouped
  convolution into one GEMM per group only where each group's product is larger;
  ``dot_epilogues``: the backend runs a dot's elementwise consumers in the dot's kernel (its
  epilogue), so fusion stores such an epilogue's result rather than copying it into its users;
  ``read_stored``: fusion copies no producer stored anyway (a tuple's or a loop's operand) into
  a consumer where the copy reads more than the stored result (the CPU's; the GPU keeps such
  consumers independent of the producer, to launch them side by side);
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
    self.kernel_fixed_flops = 1e6     # (the CPU's: ~10 us of a fork-join at ~100 GFLOP/s)
    self.dot_epilogues = False
    self.read_stored = False
    self.read_moved = False
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

  def as_hlo_text(self) -> str:
    """The module's HLO text (XLA's ``HloModule.as_hlo_text``, what ``compiler_ir("hlo")``
    gives in JAX)."""
    return self.to_string()

  def clone(self, name: str | None = None) -> "Module":
    """A deep copy (constants' values are shared: they are read-only)."""
    new = Module(name or self.name)
    new._name_counts = dict(self._name_counts)
    new._used_names = set(self._used_names)
    new.notes = list(self.notes)
    new.patches_in_place = self.patches_in_place
    new.patch_channel_bytes = self.patch_channel_bytes
    new.kernel_fixed_flops = self.kernel_fixed_flops
    new.dot_epilogues = self.dot_epilogues
    new.read_stored = self.read_stored
    new.read_moved = self.read_moved
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

# the builder, the printer and the verifier live in modules of their own; their names are hlo's
from ourjax.lowering.hlo_builder import Builder, scalar_computation  # noqa: E402,F401
from ourjax.lowering.hlo_text import _instruction_text, constant_text  # noqa: E402,F401
from ourjax.lowering.hlo_verify import verify  # noqa: E402,F401
