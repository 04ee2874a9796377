"""Buffer assignment: where each array of the entry computation lives while it runs.

    ba = module.buffer_assignment          # after the pipeline (or ``assign(module)``)
    slot, offset = ba.assignment[instr]    # (a tuple of pairs for a tuple-shaped instr)
    ba.temp_bytes                          # the arena to allocate once per call

Values. Every top-level instruction of the entry produces one array per element of its shape
(a multi-output fusion, a while or a variadic reduce produce several); a ``tuple`` or a
``get-tuple-element`` produces none, it names arrays of other instructions, and gets their
places. The schedule is the entry's instruction order: a value is live from the instruction that
defines it to the last instruction that reads it (through tuples and get-tuple-elements).

Places. Each value gets a slot of one kind:

``parameter``  the caller's argument buffer (``slot.number`` is the parameter number);
``constant``   the constant's own read-only storage;
``output``     the caller's result buffer ``slot.number`` (results are allocated by the caller),
               or, for a result written in place of a donated parameter, that parameter's slot
               (``output_aliases[j] = k``; the caller returns argument ``k``'s buffer as result
               ``j``);
``temp``       a slot of the arena of ``temp_bytes`` (``slot.offset`` bytes from its start).

Temporaries are planned greedily in definition order: a slot becomes free once every reader of
its last value has run; a new value takes the smallest free slot it fits in, else grows the
largest free slot, else opens a new one. Slot sizes and offsets are multiples of ``ALIGNMENT``.
A value may also take the slot of an operand that dies at the very instruction defining it when
that instruction reads the operand only at the index it writes (an elementwise op, or a loop
fusion reading that operand elementwise; same shape and element size): such pairs are listed in
``in_place``, so that an emitter knows those two pointers may be equal.

Donation: ``module.donated`` (or ``module.donated_params``), a set of parameter numbers whose
buffers the caller gives up. A result of the same shape and element type as a donated parameter
is written into it when the parameter is not read after the result's instruction starts (or only
by that instruction, in place).

Results that no kernel writes (a parameter or a constant returned as is, or one value returned
twice) are filled by copies after the run: ``output_copies`` lists ``(j, (slot, offset))``.

``assignment[instr] = (slot_index, offset)``: ``offset`` is in bytes from the start of the
memory the slot's kind names (the arena for temporaries, so it equals ``slot.offset``; 0 for
the others). Only the entry computation is planned: the bodies of while loops and conditional
branches are left to the emitter.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ourjax.lowering.hlo import Instruction, Module, Shape

__all__ = ["run", "assign", "BufferAssignment", "Slot", "Value", "ALIGNMENT", "nbytes"]

PASS = "buffer_assignment"

#: Alignment of every slot (offset and size), in bytes.
ALIGNMENT = 64


def nbytes(shape: Shape) -> int:
  return shape.size * shape.dtype.itemsize


def _align(n: int) -> int:
  return -(-n // ALIGNMENT) * ALIGNMENT


def _leaves(shape: Shape, prefix=()):
  """Shape indices of the arrays in ``shape``: ``()`` for an array, ``(k, ...)`` in tuples."""
  if not shape.is_tuple:
    yield prefix
    return
  for k, s in enumerate(shape.tuple_shapes):
    yield from _leaves(s, prefix + (k,))


def _subshape(shape: Shape, index) -> Shape:
  for k in index:
    shape = shape.tuple_shapes[k]
  return shape


@dataclass(eq=False)
class Value:
  """One array: element ``index`` of ``instr``'s result, live over ``[start, end]`` (positions
  in the schedule; parameters start at -1, results end after the last instruction)."""
  instr: Instruction
  index: tuple
  shape: Shape
  start: int
  end: int

  @property
  def name(self) -> str:
    return f"%{self.instr.name}" + ("{" + ",".join(map(str, self.index)) + "}"
                                   if self.index else "")

  @property
  def bytes(self) -> int:
    return nbytes(self.shape)

  def __repr__(self):
    return f"<Value {self.name} {self.shape} [{self.start},{self.end}]>"


@dataclass(eq=False)
class Slot:
  """A piece of memory: ``kind`` is "temp", "parameter", "output" or "constant"; ``number`` is
  the parameter number or result index; ``offset`` the arena offset of a temp slot."""
  index: int
  kind: str
  size: int
  offset: int = 0
  number: int | None = None
  values: list = field(default_factory=list)

  def __repr__(self):
    return f"<Slot {self.index} {self.kind} {self.size}B @{self.offset}>"


class BufferAssignment:
  """The plan for one entry computation (see the module docstring)."""

  def __init__(self, module: Module):
    self.module = module
    self.schedule: list[Instruction] = list(module.entry.instructions)
    self.values: list[Value] = []
    self.slots: list[Slot] = []
    self.value_slot: dict[Value, tuple[int, int]] = {}
    self.assignment: dict[Instruction, tuple] = {}
    self.temp_bytes = 0
    self.output_aliases: dict[int, int] = {}
    self.output_copies: list[tuple[int, tuple[int, int]]] = []
    self.in_place: list[tuple[Instruction, Instruction]] = []
    self.outputs: list[Value] = []

  def slot_of(self, instr: Instruction, index=()) -> Slot:
    """The slot of element ``index`` of ``instr``'s result."""
    place = self.assignment[instr]
    for k in index:
      place = place[k]
    return self.slots[place[0]]

  @property
  def temp_values_bytes(self) -> int:
    """What the temporaries would take without any reuse."""
    return sum(_align(v.bytes) for v in self.values if self.slots[self.value_slot[v][0]].kind
               == "temp")

  def to_string(self) -> str:
    temps = [s for s in self.slots if s.kind == "temp"]
    lines = [f"BufferAssignment %{self.module.entry.name}: arena {self.temp_bytes} bytes in "
             f"{len(temps)} slot(s) (temporaries alone: {self.temp_values_bytes} bytes)"]
    for s in self.slots:
      where = {"temp": f"@{s.offset}", "parameter": f"parameter {s.number}",
               "output": f"output {s.number}", "constant": "constant"}[s.kind]
      vals = ", ".join(f"{v.name} [{v.start},{v.end}]" for v in s.values)
      lines.append(f"  slot {s.index}: {s.kind} {s.size} bytes {where}: {vals}")
    for j, k in sorted(self.output_aliases.items()):
      lines.append(f"  output {j} is written into donated parameter {k}")
    for j, (si, off) in self.output_copies:
      lines.append(f"  output {j} is copied from slot {si}")
    for a, b in self.in_place:
      lines.append(f"  %{a.name} writes its result over %{b.name} (in place)")
    return "\n".join(lines)

  __str__ = to_string


# ---------------------------------------------------------------------------------------------
# in-place analysis
# ---------------------------------------------------------------------------------------------

def _reads_elementwise(instr: Instruction, k: int) -> bool:
  """Whether ``instr`` (array-shaped) reads operand ``k`` only at the index of the element it
  writes, with the same element size: then it may write its result over that operand."""
  o = instr.operands[k]
  if instr.shape.is_tuple or o.shape.is_tuple or o.dims != instr.dims or \
      o.dtype.itemsize != instr.dtype.itemsize:
    return False
  if instr.is_elementwise():
    return True
  if instr.opcode != "fusion" or instr.attrs["kind"] != "kLoop":
    return False
  fc = instr.attrs["calls"]
  tainted = {fc.parameters[k]}
  for x in fc.instructions:
    if x in tainted or not any(op in tainted for op in x.operands):
      continue
    if not (x.is_elementwise() and x.dims == instr.dims and all(
        op.dims == x.dims for op in x.operands if op in tainted)):
      return False
    tainted.add(x)
  return True


# ---------------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------------

def assign(module: Module, donated=None) -> BufferAssignment:
  """Plan the buffers of ``module``'s entry computation (see the module docstring)."""
  if donated is None:
    donated = getattr(module, "donated", None) or getattr(module, "donated_params", None) or ()
  donated = set(donated)
  ba = BufferAssignment(module)
  entry = module.entry
  sched = ba.schedule
  n = len(sched)
  values: dict[tuple, Value] = {}

  # 1. values and live ranges
  for t, instr in enumerate(sched):
    if instr.opcode in ("tuple", "get-tuple-element"):
      continue
    start = -1 if instr.opcode == "parameter" else t
    for idx in _leaves(instr.shape):
      v = Value(instr, idx, _subshape(instr.shape, idx), start, start)
      values[(instr, idx)] = v
      ba.values.append(v)

  def value_of(instr, index=()):
    while True:
      if instr.opcode == "tuple" and index:
        instr, index = instr.operands[index[0]], index[1:]
      elif instr.opcode == "get-tuple-element":
        instr, index = instr.operands[0], (instr.attrs["index"],) + tuple(index)
      else:
        return values[(instr, tuple(index))]

  for t, instr in enumerate(sched):
    if instr.opcode in ("tuple", "get-tuple-element"):
      continue
    for o in instr.operands:
      for idx in _leaves(o.shape):
        v = value_of(o, idx)
        v.end = max(v.end, t)
  root = entry.root
  ba.outputs = [value_of(root, idx) for idx in _leaves(root.shape)]
  for v in ba.outputs:
    v.end = n

  # 2. parameters and constants keep their own memory
  def new_slot(kind, size, number=None):
    s = Slot(len(ba.slots), kind, size, number=number)
    ba.slots.append(s)
    return s

  def put(v, slot, offset=0):
    ba.value_slot[v] = (slot.index, offset)
    slot.values.append(v)

  for v in ba.values:
    if v.instr.opcode == "parameter":
      put(v, new_slot("parameter", v.bytes, v.instr.attrs["parameter_number"]))
    elif v.instr.opcode == "constant":
      put(v, new_slot("constant", v.bytes))
  param_slot = {v.instr.attrs["parameter_number"]: ba.value_slot[v][0]
                for v in ba.values if v.instr.opcode == "parameter" and not v.index}

  # 3. results: the caller's buffers, a donated parameter's buffer, or copies
  out_of: dict[Value, int] = {}
  used_donors = set()
  for j, v in enumerate(ba.outputs):
    if v.instr.opcode in ("parameter", "constant") or v in out_of:
      continue  # a copy, below
    donor = None
    for k in sorted(donated):
      p = entry.parameters[k] if k < len(entry.parameters) else None
      if p is None or k in used_donors or p.shape != v.shape or k not in param_slot:
        continue
      pv = values[(p, ())]
      if pv in ba.outputs:
        continue
      t = v.start
      if pv.end < t or (pv.end == t and not v.index and any(
          o is p and _reads_elementwise(v.instr, i) for i, o in enumerate(v.instr.operands))):
        donor = k
        break
    if donor is not None:
      used_donors.add(donor)
      ba.output_aliases[j] = donor
      put(v, ba.slots[param_slot[donor]])
      if pv.end == v.start:
        ba.in_place.append((v.instr, entry.parameters[donor]))
    else:
      put(v, new_slot("output", v.bytes, j))
    out_of[v] = j
  for j, v in enumerate(ba.outputs):
    if out_of.get(v) != j:
      ba.output_copies.append((j, ba.value_slot[v]))

  # 4. temporaries: greedy reuse over live ranges
  busy: dict[Slot, int] = {}        # temp slot -> end of its latest value
  last: dict[Slot, Value] = {}      # temp slot -> its latest value
  for v in ba.values:
    if v in ba.value_slot:
      continue
    size = _align(v.bytes)
    slot = None
    if not v.index:
      for i, o in enumerate(v.instr.operands):
        if o.shape.is_tuple or not _reads_elementwise(v.instr, i):
          continue
        ov = value_of(o)
        s = ba.slots[ba.value_slot[ov][0]] if ov in ba.value_slot else None
        if s is not None and s.kind == "temp" and last.get(s) is ov and ov.end == v.start:
          slot = s
          ba.in_place.append((v.instr, o))
          break
    if slot is None:
      free = [s for s, end in busy.items() if end < v.start]
      fits = [s for s in free if s.size >= size]
      if fits:
        slot = min(fits, key=lambda s: (s.size, s.index))
      elif free:
        slot = max(free, key=lambda s: (s.size, -s.index))
        slot.size = size
      else:
        slot = new_slot("temp", size)
    put(v, slot)
    busy[slot] = v.end
    last[slot] = v

  offset = 0
  for s in ba.slots:
    if s.kind == "temp":
      s.offset = offset
      offset += s.size
  ba.temp_bytes = offset
  for v, (si, _) in list(ba.value_slot.items()):
    if ba.slots[si].kind == "temp":
      ba.value_slot[v] = (si, ba.slots[si].offset)

  # 5. every instruction's place (tuples and get-tuple-elements: their elements' places)
  def place(instr, index=()):
    shape = _subshape(instr.shape, index)
    if shape.is_tuple:
      return tuple(place(instr, index + (k,)) for k in range(len(shape.tuple_shapes)))
    return ba.value_slot[value_of(instr, index)]
  for instr in sched:
    ba.assignment[instr] = place(instr)
  return ba


def run(module: Module) -> bool:
  """Attach ``module.buffer_assignment``; notes a one-line summary. Returns True (it adds the
  plan to the module) so that ``OURJAX_DUMP`` shows it."""
  ba = assign(module)
  module.buffer_assignment = ba
  temps = sum(1 for s in ba.slots if s.kind == "temp")
  extra = "".join(f"; output {j} in donated parameter {k}"
                  for j, k in sorted(ba.output_aliases.items()))
  module.note(PASS, f"arena of {ba.temp_bytes} bytes in {temps} slot(s) for "
              f"{ba.temp_values_bytes} bytes of temporaries; {len(ba.in_place)} in place"
              + extra)
  return True
