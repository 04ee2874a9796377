"""XLA's rewrites of floating-point division, applied to a module as it is lowered.

XLA's algebraic simplifier rewrites divisions before the code is made, and a JAX program's
numbers are those of the rewritten program: ``x / 3.0`` under ``jit`` is ``x * 0.33333334``
(the reciprocal rounded to the type, then the product), ``a / b / c`` is ``a / (b * c)``, which
overflows where the two divisions would not, and on the CPU every division by a broadcast (a
Python scalar, a ``keepdims`` sum: softmax, ``mean``) multiplies by the broadcast reciprocal.
Ours makes the same rewrites, once, right after lowering (``from_jaxpr.lower``), so the module
as lowered already computes JAX's values: the optimisation passes stay exact with respect to
it (``passes/simplify.py`` changes no bits), and every backend runs the same program.

The rules, in XLA's order, for a division ``x / y`` of a float type:

* ``exp(a) / exp(b) -> exp(a - b)``; ``x / exp(b) -> x * exp(-b)``
* ``x / pow(b, c) -> x * pow(b, -c)``
* ``x / sqrt(b) -> x * rsqrt(b)``; ``x / rsqrt(b) -> x * sqrt(b)`` (the root used once; XLA's
  rsqrt is not ours, so these products can still differ from JAX's by an ulp)
* ``x / c -> x * (1 / c)`` for ``c`` a constant or a broadcast of one and ``x`` not a constant
  (the reciprocal folded, in the type)
* ``x / broadcast(y) -> x * broadcast(1 / y)`` (XLA's CPU; also where ``y`` has other uses, as
  JAX 0.10's programs show)
* ``(a / b) / (c / d) -> (a * d) / (b * c)``; ``(a / b) / c -> a / (b * c)``;
  ``a / (b / c) -> (a * c) / b``

and then again on what they made, to a fixed point.  XLA's CPU computes bfloat16 (and the
float8 types) in float32 before the simplifier runs, so there only the two reciprocal rules
apply, with a float32 reciprocal; float16 is computed as float16 (the reciprocal rounded to
it).  Not followed: the divisions by a non-scalar constant that ours passes as a parameter (a
closed-over array; XLA sees a constant).  Complex divisions keep their own formula except in the
exponential, power and chain rules.
"""
from __future__ import annotations

import collections

import numpy as np

from ourjax.lowering import hlo
from ourjax.lowering.hlo_builder import Builder

_NATIVE = tuple(hlo.to_dtype(t) for t in ("f16", "f32", "f64"))
_F32 = hlo.to_dtype("f32")


def run(module: hlo.Module, divisions=None) -> bool:
  """Rewrite the divisions of every computation of ``module`` (only ``divisions``, and what
  the rules make of them, when given: the program's, not a library composition's); True if any
  changed.  Operands first (the computation's order, as XLA's post-order visit), what a rule
  makes after, to a fixed point; the new instructions are appended and the computation sorted
  once at the end."""
  only = None if divisions is None else set(divisions)
  if only is not None and not only:
    return False
  changed = False
  for comp in list(module.computations):
    work = collections.deque(i for i in comp.instructions if i.opcode == "divide"
                             and (only is None or i in only))
    if not work:
      continue
    b = _Recorder.into(comp)
    budget = 8 * len(work) + 64          # (each rule removes a pattern; a guard all the same)
    touched = False
    dead: set = set()
    while work and budget:
      instr = work.popleft()
      if instr.parent is not comp:
        continue                         # (removed: dead after an earlier rewrite)
      b.made = []
      new = _rewrite(instr, b)
      if new is None:
        continue
      budget -= 1
      comp.replace_all_uses(instr, new)
      _remove_dead(comp, instr, dead)
      work.extend(i for i in b.made if i.opcode == "divide" and i.parent is comp)
      touched = True
    if touched:
      comp.instructions[:] = [i for i in comp.instructions if i not in dead]
      comp.topological_sort()
      changed = True
  return changed


class _Recorder(Builder):
  """A builder that lists what it emits (``made``)."""

  def emit(self, *args, **kwargs):
    instr = super().emit(*args, **kwargs)
    self.made.append(instr)
    return instr


def _remove_dead(comp, instr, dead: set):
  """Unlink ``instr`` and what only it used from their operands' users (the computation's list
  drops them once, at the end: ``dead``)."""
  stack = [instr]
  while stack:
    i = stack.pop()
    if i.parent is comp and not i.users and i is not comp.root and i.opcode != "parameter":
      ops = list(i.operands)
      for op in set(ops):
        if i in op.users:
          op.users.remove(i)
      i.parent = None
      dead.add(i)
      stack.extend(ops)


def _rewrite(instr, b):
  x, y = instr.operands
  dt = instr.dtype
  real = hlo.is_float(dt)
  if not (real or hlo.is_complex(dt)):
    return None
  chains = dt in _NATIVE or hlo.is_complex(dt)
  if chains and y.opcode == "exponential":
    if x.opcode == "exponential":
      return b.exponential(b.subtract(x.operands[0], y.operands[0]))
    return b.multiply(x, b.exponential(b.negate(y.operands[0])))
  if chains and y.opcode == "power":
    base, power = y.operands
    return b.multiply(x, b.power(base, b.negate(power)))
  if chains and y.opcode in ("sqrt", "rsqrt") and len(y.users) == 1:
    root = b.rsqrt if y.opcode == "sqrt" else b.sqrt
    return b.multiply(x, root(y.operands[0]))
  if real:
    denom = y.operands[0] if y.opcode == "broadcast" else y
    if denom.opcode == "constant" and x.opcode != "constant" and denom.value.size:
      return _times_reciprocal(b, instr, x, denom, y)
    if y.opcode == "broadcast":
      return _times_reciprocal(b, instr, x, denom, y)
  if not chains:
    return None
  if x.opcode == "divide" and y.opcode == "divide":
    return b.divide(b.multiply(x.operands[0], y.operands[1]),
                    b.multiply(x.operands[1], y.operands[0]))
  if x.opcode == "divide":
    return b.divide(x.operands[0], b.multiply(x.operands[1], y))
  if y.opcode == "divide":
    return b.divide(b.multiply(x, y.operands[1]), y.operands[0])
  return None


def _times_reciprocal(b, instr, x, denom, y):
  """``x * (1 / denom)``, the reciprocal put through ``y``'s broadcast when ``y`` is one;
  computed in float32 for the types XLA's CPU computes in float32 (the reciprocal unrounded),
  else in the type.  A constant's reciprocal is a constant."""
  dt = instr.dtype
  wide = dt if dt in _NATIVE else _F32
  if denom.opcode == "constant":
    with np.errstate(all="ignore"):
      v = np.asarray(denom.value).astype(wide)
      recip = b.constant(np.divide(np.ones((), wide), v).astype(wide), wide)
  else:
    d = denom if denom.dtype == wide else b.convert(denom, wide)
    one = b.constant(np.ones((), wide), wide)
    recip = b.divide(one if d.shape.is_scalar else b.broadcast(one, d.shape.dims, ()), d)
  if y is not denom:
    recip = b.broadcast(recip, y.shape.dims, y.attrs["dimensions"])
  if wide == dt:
    return b.multiply(x, recip)
  return b.convert(b.multiply(b.convert(x, wide), recip), dt)
