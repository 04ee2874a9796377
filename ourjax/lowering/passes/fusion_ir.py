"""The fusion instruction as the fusion passes and the emitters share it: which ops a fusion is
made of (``LOOP_OPS``; the heroes, ``REDUCTION_OPS`` and ``CONTRACTION_OPS``), how one is read
(its kind, an in-place ``dus_root``, ``outputs_of``, the iteration space of a kLoop or kInput
fusion: ``Space`` and ``space_of``), the contract each kind promises an emitter (``check``),
and how fusions are built and edited (``add_fusion``, ``wrap``, ``fuse_into``, ``clone_into``,
``new_parameter``, ``dedupe``, ...).  Not a pass: ``fusion.py`` decides what to fuse and
``multi_output_fusion.py`` and ``recompute_outputs.py`` merge and split fusions with these
helpers; ``fusion`` imports every name here back, so ``fusion.space_of`` and the like still
work.  It holds no settings (those of fusion stay in ``fusion.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ourjax.lowering import hlo
from ourjax.lowering.hlo import Builder, Computation, Instruction, Module

__all__ = ["LOOP_OPS", "REDUCTION_OPS", "CONTRACTION_OPS", "dus_root", "Space", "outputs_of",
           "space_of", "check", "add_fusion", "clone_into", "new_parameter", "wrap", "fuse_into",
           "dedupe", "remove_unreachable_computations"]


#: Ops that compute each result element from operand elements at indices derived from the
#: result index: what a loop fusion is made of.
LOOP_OPS = frozenset(hlo.ELEMENTWISE_OPS | {
    "broadcast", "reshape", "transpose", "slice", "pad", "concatenate", "iota", "reverse",
    "dynamic-slice", "gather", "bitcast-convert", "constant"})
REDUCTION_OPS = frozenset({"reduce", "reduce-window"})
CONTRACTION_OPS = frozenset({"dot", "convolution"})


def _kind(instr: Instruction) -> str | None:
  return instr.attrs.get("kind") if instr.opcode == "fusion" else None


def dus_root(instr: Instruction) -> Instruction | None:
  """The ``dynamic-update-slice`` that ``instr`` is, or that is the root of the fusion
  ``instr`` (an in-place update: its operand 0 is the buffer it writes its window into)."""
  if instr.opcode == "dynamic-update-slice":
    return instr
  if instr.opcode == "fusion" and instr.attrs["calls"].root.opcode == "dynamic-update-slice":
    return instr.attrs["calls"].root
  return None


# ---------------------------------------------------------------------------------------------
# iteration spaces (used by multi_output_fusion, and by the emitters to read a fusion)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Space:
  """How a loop or input fusion iterates.

  ``Space("loop", dims)``: one loop over ``dims``; every output has these dims.

  ``Space("reduce", dims, reduced)``: every reduce in it reduces operands of ``dims`` over the
  dimensions ``reduced``; outputs have ``dims`` (computed at each input index, alongside the
  reduction) or the kept dims (the reductions' results). ``row`` is True when ``reduced`` are
  the trailing dimensions and at least one dimension is kept: then the fusion can be run one
  row (one index of the kept dims) at a time, and values of the kept shape can be used after the
  reductions of their row (a reduction epilogue: softmax's ``e / sum(e)``), through a
  row broadcast (``broadcast`` from the kept dims to ``dims`` with dimensions ``0..k-1``)."""
  kind: str
  dims: tuple
  reduced: tuple = ()

  @cached_property   # (asked for each instruction a merge checks: computed once)
  def kept(self) -> tuple:
    return tuple(n for i, n in enumerate(self.dims) if i not in self.reduced)

  @cached_property
  def row(self) -> bool:
    r, n = len(self.reduced), len(self.dims)
    return (self.kind == "reduce" and 0 < r < n
            and tuple(sorted(self.reduced)) == tuple(range(n - r, n)))

  def __str__(self):
    d = "[" + ",".join(map(str, self.dims)) + "]"
    if self.kind == "loop":
      return f"loop over {d}"
    what = "row reduction" if self.row else "reduction"
    return f"{what} of {d} over {{{','.join(map(str, self.reduced))}}}"


def outputs_of(comp: Computation) -> list[Instruction]:
  """The values a fused computation returns: the root tuple's elements, or the root."""
  root = comp.root
  return list(root.operands) if root.opcode == "tuple" else [root]


def space_of(fusion: Instruction) -> Space | None:
  """The iteration space of a kLoop or kInput fusion; None for kOutput fusions, reduce-window
  fusions and mixtures that fit no single space."""
  if _kind(fusion) == "kOutput":
    return None
  comp = fusion.attrs["calls"]
  reduces = []
  for i in comp.instructions:
    if i.opcode == "reduce":
      reduces.append(i)
    elif i.opcode not in LOOP_OPS and i.opcode not in ("parameter", "tuple",
                                                        "get-tuple-element"):
      return None
  out_dims = set()
  for o in outputs_of(comp):
    shapes = o.shape.tuple_shapes if o.shape.is_tuple else (o.shape,)
    if any(s.is_tuple for s in shapes):
      return None
    out_dims |= {s.dims for s in shapes}
  if not reduces:
    return Space("loop", out_dims.pop()) if len(out_dims) == 1 else None
  keys = {(r.operands[0].dims, tuple(sorted(r.attrs["dimensions"]))) for r in reduces}
  if len(keys) != 1:
    return None
  sp = Space("reduce", *keys.pop())
  allowed = {sp.dims, sp.kept}
  return sp if out_dims <= allowed else None


def check(fusion: Instruction) -> str | None:
  """What is wrong with ``fusion`` for an emitter, or None: the contract each kind promises.

  Every fusion: its instructions are loop ops (free: computable at any index from the
  parameters), plus the kind's heroes and what depends on them:

  kLoop    no heroes; every output has the same dims (one loop).
  kOutput  exactly one dot or convolution, reading parameters; what depends on it is
           elementwise over its dims (or a reshape that is the root: a view of the result),
           and the root does.
  kInput   either one reduce-window, the root; or reduces sharing one ``Space`` (same operand
           dims, same reduced dims). What depends on a reduce is elementwise over the kept dims
           (an epilogue), a get-tuple-element of a variadic reduce, or the root tuple; in a row
           space it may also be elementwise over the full dims, a row broadcast (kept -> full,
           dimensions 0..k-1), or another reduce (the next pass over the same row)."""
  kind, comp = fusion.attrs["kind"], fusion.attrs["calls"]
  dus = dus_root(fusion)
  if dus is not None:
    target = dus.operands[0]
    if kind != "kLoop":
      return "an in-place dynamic-update-slice is the root of a kLoop fusion"
    if target.opcode != "parameter" or target.users != [dus]:
      return f"%{dus.name} updates a value the fusion computes or reads elsewhere"
    bad = [i for i in comp.instructions if i is not dus and i.opcode not in LOOP_OPS
           and i.opcode != "parameter"]
    return f"%{bad[0].name}: {bad[0].opcode} cannot be fused" if bad else None
  heroes = [i for i in comp.instructions if i.opcode in REDUCTION_OPS | CONTRACTION_OPS]
  for i in comp.instructions:
    if i.opcode not in LOOP_OPS and i not in heroes and i.opcode != "parameter" and not (
        i.opcode == "tuple" and i is comp.root) and i.opcode != "get-tuple-element":
      return f"%{i.name}: {i.opcode} cannot be fused"
  if kind == "kLoop":
    if heroes:
      return f"kLoop fusion holds %{heroes[0].name}"
    return None if space_of(fusion) is not None else "outputs differ in dims"
  if kind == "kOutput":
    if len(heroes) != 1 or heroes[0].opcode not in CONTRACTION_OPS:
      return "a kOutput fusion holds exactly one dot or convolution"
    dot = heroes[0]
    if any(o.opcode != "parameter" for o in dot.operands):
      return f"the operands of %{dot.name} are not parameters"
    after = {dot}
    for x in comp.instructions:
      if x is not dot and any(o in after for o in x.operands):
        if not ((x.is_elementwise() and x.dims == dot.dims) or
                (x.opcode == "reshape" and x is comp.root)):   # (a view of the result)
          return f"%{x.name} is not an elementwise epilogue of %{dot.name}"
        after.add(x)
    return None if comp.root in after else "the root does not depend on the dot"
  if any(h.opcode in CONTRACTION_OPS for h in heroes):
    return "a kInput fusion holds a dot"
  windows = [h for h in heroes if h.opcode == "reduce-window"]
  if windows:
    return None if heroes == [comp.root] else "a reduce-window must be the only hero, the root"
  sp = space_of(fusion)
  if sp is None or sp.kind != "reduce":
    return "the reductions do not share one iteration space"
  after = set()
  for x in comp.instructions:
    hits = [k for k, o in enumerate(x.operands) if o in after]
    if x.opcode == "reduce":
      n = len(x.operands) // 2
      if any(k >= n for k in hits):
        return f"the init value of %{x.name} depends on a reduction"
      if hits and not sp.row:
        return f"%{x.name} reduces a value that depends on a reduction (not a row space)"
      after.add(x)
      continue
    if not hits:
      continue
    if x.opcode in ("get-tuple-element", "tuple"):
      ok = True
    elif x.is_elementwise():
      levels = (sp.kept, sp.dims) if sp.row else (sp.kept,)
      ok = x.dims in levels
    elif x.opcode == "broadcast":
      ok = (sp.row and x.operands[0].dims == sp.kept and x.dims == sp.dims
            and tuple(x.attrs["dimensions"]) == tuple(range(len(sp.kept))))
    else:
      ok = False
    if not ok:
      return f"%{x.name} ({x.opcode}) uses a reduction's result outside of {sp}"
    after.add(x)
  return None

# ---------------------------------------------------------------------------------------------
# editing fusions
# ---------------------------------------------------------------------------------------------

def add_fusion(comp: Computation, operands, fused: Computation, kind: str,
               before: Instruction | None) -> Instruction:
  """Insert ``fusion(operands), kind=kind, calls=fused`` into ``comp`` and name the fused
  computation after it (``%fusion.3`` calls ``%fused_computation.3``)."""
  instr = Instruction("fusion", operands, fused.root.shape, {"kind": kind, "calls": fused})
  comp.add(instr, before=before)
  suffix = instr.name[len("fusion"):] if instr.name.startswith("fusion") else "." + instr.name
  fused.name = comp.module.unique_name("fused_computation" + suffix, exact=True)
  return instr


def clone_into(b: Builder, instr: Instruction, operands, from_fused: bool = False) -> Instruction:
  """A copy of ``instr`` (same opcode, attributes, shape) on new ``operands``, named after it:
  ``%exp.3`` becomes ``%exp.3.1``; a copy of that copy (``from_fused``) ``%exp.3.2``."""
  name = instr.name.rsplit(".", 1)[0] if from_fused and "." in instr.name else instr.name
  # (the shape is known: no need to infer it again; the pipeline verifies after the pass)
  return b.computation.add(Instruction(instr.opcode, operands, instr.shape, dict(instr.attrs),
                                       name), before=b.before)


def new_parameter(b: Builder, shape, number: int | None = None) -> Instruction:
  """``b.parameter(shape, name="param", number=number)`` for a ``shape`` taken from an
  instruction of the module (checked already: not inferred again)."""
  comp = b.computation
  if number is None:
    number = len(comp.parameters)
  return comp.add(Instruction("parameter", (), shape, {"parameter_number": number}, "param"),
                  before=b.before)


def wrap(comp: Computation, instr: Instruction, kind: str) -> Instruction:
  """Replace ``instr`` by a fusion of just ``instr`` (one parameter per distinct operand)."""
  operands = list(dict.fromkeys(instr.operands))
  b = Builder(comp.module, "fusion_body")
  params = {o: new_parameter(b, o.shape) for o in operands}
  fused = b.build(clone_into(b, instr, [params[o] for o in instr.operands]))
  fusion = add_fusion(comp, operands, fused, kind, before=instr)
  comp.replace_instruction(instr, fusion)
  return fusion


def _remove_parameter(fusion: Instruction, k: int) -> None:
  """Drop the (now unused) parameter ``k`` of a fusion's computation and the matching operand,
  renumbering the parameters after it."""
  comp = fusion.attrs["calls"]
  p = comp.parameters[k]
  assert not p.users and p is not comp.root, p
  comp.instructions.remove(p)
  p.parent = None
  del comp.parameters[k]
  for n in range(k, len(comp.parameters)):
    comp.parameters[n].attrs["parameter_number"] = n
  old = fusion.operands.pop(k)
  if old not in fusion.operands and fusion in old.users:
    old.users.remove(fusion)


def fuse_into(comp: Computation, fusion: Instruction, producer: Instruction,
              inner: dict | None = None) -> None:
  """Clone ``producer`` (an instruction, or a fusion whose computation is inlined) into
  ``fusion`` in place of the parameter it feeds; the producer stays in ``comp`` while other
  users need it. ``inner`` maps top-level instructions already cloned into ``fusion`` to their
  clones (updated here): a later producer reading one of them reads the clone, instead of a new
  parameter that would bring a second copy in."""
  inner = {} if inner is None else inner
  # (a dot or convolution reads its operands from memory: never from a clone)
  contraction = producer.opcode in CONTRACTION_OPS or _kind(producer) == "kOutput"
  fc = fusion.attrs["calls"]
  k = fusion.operands.index(producer)
  param = fc.parameters[k]
  anchor = next(i for i in fc.instructions if i.opcode != "parameter")
  b = Builder.into(fc, before=anchor)
  outer = {o: fc.parameters[n] for n, o in enumerate(fusion.operands)}

  reused = []

  def param_for(o):
    if o in inner and not contraction:
      reused.append(o)
      return inner[o]
    p = outer.get(o)
    if p is None:
      p = new_parameter(b, o.shape, len(fc.parameters))
      fusion.operands.append(o)
      if fusion not in o.users:
        o.users.append(fusion)
      outer[o] = p
    return p

  if producer.opcode == "fusion":
    sub = producer.attrs["calls"]
    local = {}

    def get(i):
      if i.opcode == "parameter":
        return param_for(producer.operands[i.attrs["parameter_number"]])
      return local[i]
    for i in sub.instructions:
      if i.opcode != "parameter":
        local[i] = clone_into(b, i, [get(o) for o in i.operands], from_fused=True)
    value = get(sub.root)
  else:
    value = clone_into(b, producer, [param_for(o) for o in producer.operands])
  fc.replace_all_uses(param, value)
  inner[producer] = value
  _remove_parameter(fusion, k)
  if reused:  # an earlier clone may sit below the new ones that read it
    fc.topological_sort()
  if producer.opcode == "fusion":
    dedupe(fc)
  _remove_dead(comp, producer)


def _remove_dead(comp: Computation, instr: Instruction) -> None:
  """Remove ``instr`` if nothing uses it any more, and then its operands that died with it."""
  stack = [instr]
  while stack:
    i = stack.pop()
    if i.parent is not comp or i.users or i is comp.root or i.opcode == "parameter":
      continue
    comp.remove(i)
    if i.opcode == "fusion":
      comp.module.remove_computation(i.attrs["calls"])
    stack.extend(set(i.operands))


def _attr_key(v):
  if isinstance(v, np.ndarray):
    return ("array", v.dtype.str, v.shape, v.tobytes())
  if isinstance(v, Computation):
    return ("computation", id(v))
  if isinstance(v, (list, tuple)):
    return tuple(_attr_key(x) for x in v)
  return v


def dedupe(comp: Computation) -> int:
  """Merge identical instructions of a fused computation (copies of one cheap producer that
  several fusions brought in before they were combined); returns how many went."""
  # (keyed first by opcode, shape and operands; the attributes' key, the costly part, only
  # where two instructions share those)
  seen, n = {}, 0
  for i in list(comp.instructions):
    if i.opcode == "parameter":
      continue
    head = (i.opcode, i.shape, tuple(map(id, i.operands)))
    group = seen.get(head)
    if group is None:
      seen[head] = [[None, i]]
      continue
    key = _attrs_key(i)
    for entry in group:
      if entry[0] is None:
        entry[0] = _attrs_key(entry[1])
      if entry[0] == key:
        j = entry[1]
        break
    else:
      group.append([key, i])
      continue
    comp.replace_all_uses(i, j)
    if i is not comp.root:
      comp.remove(i)
    n += 1
  return n


def _attrs_key(i: Instruction) -> tuple:
  return tuple(sorted((k, _attr_key(v)) for k, v in i.attrs.items()))


def remove_unreachable_computations(module: Module) -> None:
  reachable = set(module.reachable_computations())
  for c in list(module.computations):
    if c not in reachable:
      module.remove_computation(c)
