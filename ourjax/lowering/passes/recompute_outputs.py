"""Recompute cheap outputs: an output of a multi-output fusion that is a cheap function of one
array the fusion reads or stores anyway (twice another output, half its square) is not
stored; the fusions that read it compute it from that array instead, as XLA leaves a cheap
elementwise producer unmaterialized where its consumers can recompute it.  Runs after
``multi_output_fusion``; every decision is noted with its reason.

An RK4 step of ``lax.scan`` shows why: instruction fusion stores the intermediate states that
the next stage reads at several positions (its ``roll``), and with them ``2*x`` and
``0.5*x*x`` of one of them and the two rolls of another, which sibling merging puts into the
same fusions; four of the loop's ten arrays were such copies.  Twice x and half its square are
recomputed from x; the two rolls are read from the intermediate state another fusion stores, at
moved positions (``_MOVES``).  Its arena went from 8 rows of the state to 6 (98368 bytes for
4096 oscillators, JAX's 98464), and its loop from 24.4k to 22.9k cycles a step on an EPYC core
(the rows-mode kernel's column loop cut where the moved positions wrap around,
``llvm/row_cache.py``: uncut, the rolls read at the moved positions were vector gathers, and
the step 2.4x slower).

Legality: every reader of the output is a loop fusion (it evaluates its operands wherever its
own computation asks, so the recomputed expression needs no iteration space of its own); the
expression reaches only the fusion's parameters, its other outputs (which stay) and, where the
backend asks (``Module.read_moved``: the CPU, ``row_cache.READ_MOVED`` says why),
values another loop fusion stores (the
same expression of the same arrays, stored before every reader; then the expression only moves
elements: no arithmetic is done again), one array among them
(scalars aside), through at most ``MAX_OPS`` instructions of the cheap kinds (elementwise but
not ``fusion.EXPENSIVE_OPS``, broadcast, constant, slice, reshape, bitcast: an LSTM's gates,
``logistic`` and ``tanh`` of its products, recomputed by two readers each, made its step 4x
slower); a reader ends with at most ``fusion.MAX_FUSION_PARAMETERS`` operands.
"""
from __future__ import annotations

import numpy as np

from ourjax.lowering.hlo import Instruction, Module, Shape
from ourjax.lowering.passes import fusion as fz

__all__ = ["run"]

PASS = "recompute_outputs"

#: Most instructions (constants and parameters aside) an output's expression may have.
MAX_OPS = 6
#: Opcodes an output's expression may have besides elementwise ones (no concatenate: a
#: concatenate of computed parts evaluates every part where it is read; see ``_MOVES``).
_CHEAP = {"broadcast", "constant", "slice", "reshape", "bitcast"}
#: Opcodes that only move elements (an index remap of their operand).  An output made of these
#: alone from a value another fusion stores (a roll of an intermediate state: a concatenate of
#: two slices) is read by its readers from that value at the remapped index: no arithmetic is
#: recomputed, so concatenate is allowed there.
_MOVES = {"slice", "reshape", "bitcast", "concatenate", "transpose", "reverse"}


def _expression(fc, v, others, stored=None):
  """The instructions of fused computation ``fc`` computing ``v`` in topological order, and
  its leaves (parameters of ``fc``, values in ``others``: outputs that stay, and values that
  ``stored(x)`` finds stored by another fusion), or None if ``v`` is not cheap (see the module
  docstring).  With ``stored``, the expression may only move elements (``_MOVES``)."""
  seen, order, leaves = set(), [], []

  def visit(x):
    if x in seen:
      return True
    seen.add(x)
    if x.opcode == "parameter" or (x in others and x is not v) or \
       (x is not v and stored is not None and stored(x) is not None):
      leaves.append(x)
      return True
    if stored is not None:
      if x.opcode not in _MOVES or x.shape.is_tuple:
        return False
    elif not (x.opcode in _CHEAP or x.is_elementwise()) or x.opcode in fz.EXPENSIVE_OPS \
       or x.shape.is_tuple:
      return False
    if not all(visit(o) for o in x.operands):
      return False
    order.append(x)
    return True
  if not visit(v):
    return None
  if sum(x.opcode not in ("constant", "parameter") for x in order) > MAX_OPS:
    return None
  if sum(x.shape.size > 1 for x in leaves) > 1:
    return None       # (reading two arrays for one: more traffic than storing it)
  return order, leaves


class _Values:
  """The values of a computation that loop fusions store, by what they compute: a key per
  instruction of a fused computation (its opcode, shape, attributes and operands' keys, a
  parameter keyed by the fusion's operand), so that a fusion's intermediate that another
  fusion stores is found (the same expression of the same arrays)."""

  def __init__(self, comp):
    self.comp = comp
    self.ids: dict = {}
    self.memo: dict = {}
    self.pos = {i: n for n, i in enumerate(comp.instructions)}
    self.by_key: dict = {}
    for g in comp.instructions:
      if g.opcode != "fusion" or g.attrs["kind"] != "kLoop":
        continue
      root = g.attrs["calls"].root
      if g.shape.is_tuple:
        for u in g.users:
          if u.opcode == "get-tuple-element":
            self.by_key.setdefault(self.key(root.operands[u.attrs["index"]], g), u)
      else:
        self.by_key.setdefault(self.key(root, g), g)

  def key(self, x, f):
    k = self.memo.get((f, x))
    if k is None:
      if x.opcode == "parameter":
        t = ("operand", id(f.operands[x.attrs["parameter_number"]]))
      else:
        t = (x.opcode, str(x.shape), tuple(sorted((a, _attr_key(v)) for a, v in
                                                  x.attrs.items())),
             tuple(self.key(o, f) for o in x.operands))
      k = self.memo[(f, x)] = self.ids.setdefault(t, len(self.ids))
    return k

  def finder(self, f, readers):
    """``stored(x)`` for instructions ``x`` of ``f``'s computation: the value of the
    computation another fusion stores that equals ``x``, defined before all ``readers``."""
    def stored(x):
      if x.opcode in ("parameter", "constant"):
        return None
      s = self.by_key.get(self.key(x, f))
      if s is None or s is f or s.parent is not self.comp or \
         (s.opcode == "get-tuple-element" and s.operands[0] is f):
        return None
      if not all(self.pos.get(s, 1 << 60) < self.pos.get(u, -1) for u in readers):
        return None
      return s
    return stored


def _attr_key(v):
  if isinstance(v, np.ndarray):
    return (v.dtype.str, v.shape, v.tobytes()) if v.size <= 64 else ("array", id(v))
  if isinstance(v, (list, tuple)):
    return tuple(_attr_key(x) for x in v)
  if v is None or isinstance(v, (bool, int, float, str)):
    return v
  return ("object", id(v))


def _gte(comp, f: Instruction, k: int) -> Instruction:
  """A get-tuple-element of output ``k`` of ``f`` in ``comp`` (made after ``f`` if none)."""
  for g in f.users:
    if g.opcode == "get-tuple-element" and g.attrs["index"] == k:
      return g
  at = comp.instructions[comp.instructions.index(f) + 1]
  return comp.add(Instruction("get-tuple-element", [f], f.shape.tuple_shapes[k], {"index": k},
                              f.name + ".out"), before=at)


def _recompute_in(reader: Instruction, param: Instruction, order, sources) -> None:
  """Replace ``param`` of ``reader``'s computation by the expression ``order`` over
  ``sources`` ({leaf: the value of ``reader``'s computation's caller it stands for})."""
  rc = reader.attrs["calls"]
  # (after the last parameter: a computation's parameters need not all come first, and the
  # expression may read any of them; where ``param`` is read before the last parameter, the
  # parameters move to the front first, legal as they have no operands: jnp.pad's symmetric
  # 'odd' mode read a recomputed slice before it was defined)
  last = max(rc.instructions.index(p) for p in rc.parameters)
  if any(rc.instructions.index(u) < last for u in param.users):
    rc.instructions[:] = ([x for x in rc.instructions if x.opcode == "parameter"] +
                          [x for x in rc.instructions if x.opcode != "parameter"])
    last = max(rc.instructions.index(p) for p in rc.parameters)
  first = rc.instructions[last + 1] if last + 1 < len(rc.instructions) else None
  local = {}
  for leaf, outer in sources.items():
    if outer in reader.operands:
      local[leaf] = rc.parameters[reader.operands.index(outer)]
    else:
      n = len(rc.parameters)
      local[leaf] = rc.add(Instruction("parameter", (), outer.shape, {"parameter_number": n},
                                       "param"), before=first)
      reader.operands.append(outer)
      if reader not in outer.users:
        outer.users.append(reader)
  for x in order:
    local[x] = rc.add(Instruction(x.opcode, [local[o] for o in x.operands], x.shape,
                                  dict(x.attrs), x.name), before=first)
  rc.replace_all_uses(param, local[order[-1]])
  k = rc.parameters.index(param)
  fz._remove_parameter(reader, k)


def _drop_port(comp, f: Instruction, j: int) -> None:
  """Remove output ``j`` of ``f`` (no longer read): its root tuple loses the element and the
  get-tuple-elements of later outputs are renumbered (one output left: ``f`` returns it)."""
  fc = f.attrs["calls"]
  root = fc.root
  values = [o for k, o in enumerate(root.operands) if k != j]
  for g in [g for g in f.users if g.opcode == "get-tuple-element" and g.attrs["index"] == j]:
    comp.remove(g)
  if len(values) == 1:
    fc.root = values[0]
  else:
    new_root = fc.add(Instruction("tuple", values, Shape.tuple([v.shape for v in values]), {},
                                  root.name))
    fc.root = new_root
  fc.remove(root)
  f.shape = fc.root.shape
  for g in list(f.users):
    if g.opcode != "get-tuple-element":
      continue
    k = g.attrs["index"]
    if len(values) == 1:
      comp.replace_instruction(g, f)
    elif k > j:
      g.attrs["index"] = k - 1


def _try(comp, f: Instruction, module: Module, cache: dict) -> bool:
  """Drop one output of ``f`` that its readers can recompute; whether one was.  ``cache``:
  this computation's ``_Values`` once made (emptied when an output is dropped: a fusion left
  with one output is read without its get-tuple-element)."""
  fc = f.attrs["calls"]
  outs = list(fc.root.operands)
  if any(g.opcode != "get-tuple-element" for g in f.users):
    return False
  for j, v in enumerate(outs):
    gtes = [g for g in f.users if g.attrs["index"] == j]
    if any(g is comp.root for g in gtes):
      continue
    readers = {u for g in gtes for u in g.users}
    if not readers or not all(u.opcode == "fusion" and u.attrs["kind"] == "kLoop"
                              and u is not comp.root for u in readers):
      continue
    expr = _expression(fc, v, set(outs))
    stored = None
    if expr is None and getattr(module, "read_moved", False):
      if "values" not in cache:
        cache["values"] = _Values(comp)
      stored = cache["values"].finder(f, readers)
      expr = _expression(fc, v, set(outs), stored)
    if expr is None:
      continue
    order, leaves = expr
    if not order:
      continue        # (an output that is an operand or another output: left alone)
    sources = {}
    for leaf in leaves:
      if leaf.opcode == "parameter":
        sources[leaf] = f.operands[leaf.attrs["parameter_number"]]
      elif leaf in outs:
        sources[leaf] = _gte(comp, f, outs.index(leaf))
      else:
        sources[leaf] = stored(leaf)
    if any(len(set(u.operands) | set(sources.values())) > fz.MAX_FUSION_PARAMETERS
           for u in readers):
      continue
    # (readers after the sources: a new get-tuple-element is made right after f)
    for g in gtes:
      for u in list(g.users):
        rc = u.attrs["calls"]
        for k in [k for k, o in enumerate(u.operands) if o is g][::-1]:
          _recompute_in(u, rc.parameters[k], order, sources)
    for g in gtes:
      assert not g.users, g
    _drop_port(comp, f, j)
    cache.clear()
    how = (f"read at moved positions of {', '.join(sorted(s.name for s in sources.values()))}"
           f": {len(order)} slice/concatenate/reshape instruction(s)"
           if stored is not None else
           f"recomputed from {', '.join(sorted(s.name for s in sources.values()))}: "
           f"{len(order)} cheap instruction(s)")
    module.note(PASS, f"{v.name} of {f.name} {how} by its readers "
                f"({', '.join(sorted(u.name for u in readers))}), not stored")
    return True
  return False


def run(module: Module) -> bool:
  changed = False
  for comp in fz.fusible_computations(module):
    cache: dict = {}
    for f in list(comp.instructions):
      if f.opcode != "fusion" or f.parent is not comp or not f.shape.is_tuple \
         or f.attrs["kind"] != "kLoop":
        continue
      while f.shape.is_tuple and _try(comp, f, module, cache):
        changed = True
  return changed
