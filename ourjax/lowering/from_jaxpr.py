"""Lowering: a closed jaxpr becomes an HLO module (``lowering/hlo.py``).

Each primitive has a lowering rule in ``lowering_rules``:

    rule(ctx: LoweringContext, eqn_avals_in, eqn_avals_out, *operands, **params)
        -> Instruction | list[Instruction]

``operands`` are HLO instructions already emitted for the equation's inputs.  Rank-0 operands
of elementwise primitives (which lax broadcasts implicitly) are broadcast explicitly here,
because HLO has no implicit broadcasting.  Elementwise primitives that are one HLO opcode are
listed in ``ELEMENTWISE_OPCODES``; every other rule is registered beside its primitive in
``ourjax/lax/`` (``register_lowering(prim)(rule)``), importing this module.

The entry computation takes the jaxpr's inputs, then its non-scalar constants (hoisted into
parameters so large closed-over arrays are passed at call time instead of being compiled in),
and returns a tuple of the outputs.  A nested ``pjit`` is inlined: jit inside jit is one module.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ourjax import core
from ourjax.core import ClosedJaxpr, Jaxpr, Literal, ShapedArray
from ourjax.lowering import hlo

lowering_rules: dict = {}


def register_lowering(prim):
  def deco(rule):
    lowering_rules[prim] = rule
    return rule
  return deco


class LoweringError(NotImplementedError):
  pass


class LoweringContext:
  """The builder of the computation being emitted, plus small helpers rules share."""

  def __init__(self, module: hlo.Module, builder: hlo.Builder):
    self.module = module
    self.builder = builder
    self._scalar_comps: dict = {}

  def shape(self, aval: ShapedArray) -> hlo.Shape:
    return hlo.Shape(aval.dtype, aval.shape)

  def constant(self, value, dtype) -> hlo.Instruction:
    return self.builder.constant(np.asarray(value, dtype=np.dtype(dtype)))

  def full(self, value, aval: ShapedArray) -> hlo.Instruction:
    return self.builder.full(np.asarray(value, aval.dtype), self.shape(aval))

  def broadcast_scalar(self, x: hlo.Instruction, dims) -> hlo.Instruction:
    if x.shape.dims == tuple(dims):
      return x
    return self.builder.broadcast(x, tuple(dims), ())

  def scalar_computation(self, opcode: str, dtype) -> hlo.Computation:
    """A cached two-scalar computation (reducers, comparators)."""
    key = (opcode, np.dtype(dtype))
    comp = self._scalar_comps.get(key)
    if comp is None:
      comp = hlo.scalar_computation(self.module, opcode, dtype)
      self._scalar_comps[key] = comp
    return comp

  def lower_sub_jaxpr(self, closed: ClosedJaxpr, name: str,
                      param_avals: Sequence[ShapedArray] | None = None) -> hlo.Computation:
    """A jaxpr as a separate computation of the module (while bodies, branches, ...): its
    parameters are the jaxpr's inputs (consts are embedded as constants), its root a tuple."""
    b = hlo.Builder(self.module, self.module.unique_name(name))
    sub = LoweringContext(self.module, b)
    sub._scalar_comps = self._scalar_comps
    params = [b.parameter(self.shape(a)) for a in (param_avals or closed.in_avals)]
    consts = [b.constant(np.asarray(c)) for c in closed.consts]
    outs = lower_eqns(sub, closed.jaxpr, consts, params)
    return b.build(b.tuple(outs))


def _read_literal(ctx: LoweringContext, lit: Literal) -> hlo.Instruction:
  return ctx.constant(lit.val, lit.aval.dtype)


def lower_eqns(ctx: LoweringContext, jaxpr: Jaxpr, consts: Sequence[hlo.Instruction],
               args: Sequence[hlo.Instruction]) -> list[hlo.Instruction]:
  """Emit the equations of ``jaxpr`` given instructions for its constvars and invars."""
  env: dict = {}

  def read(x):
    if isinstance(x, Literal):
      return _read_literal(ctx, x)
    return env[x]

  for v, c in zip(jaxpr.constvars, consts):
    env[v] = c
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    rule = lowering_rules.get(eqn.primitive)
    if rule is None:
      raise LoweringError(f"no lowering rule for primitive '{eqn.primitive.name}' "
                          f"(at {eqn.source_info or 'unknown location'})")
    avals_in = [x.aval for x in eqn.inputs]
    avals_out = [v.aval for v in eqn.out_binders]
    outs = rule(ctx, avals_in, avals_out, *[read(x) for x in eqn.inputs], **eqn.params)
    if not eqn.primitive.multiple_results:
      outs = [outs]
    for v, o in zip(eqn.out_binders, outs):
      env[v] = o
  return [read(x) for x in jaxpr.outvars]


def lower_jaxpr(closed: ClosedJaxpr, name: str = "jit_fn"):
  """Returns ``(module, hoisted_consts)``: call the module with ``(*args, *hoisted_consts)``."""
  module = hlo.Module(_module_name(name))
  b = hlo.Builder(module, "main")
  ctx = LoweringContext(module, b)
  params = [b.parameter(ctx.shape(a)) for a in closed.in_avals]
  hoisted, const_instrs = [], []
  for v, c in zip(closed.jaxpr.constvars, closed.consts):
    arr = np.asarray(c)
    if arr.ndim == 0:
      const_instrs.append(ctx.constant(arr, v.aval.dtype))
    else:
      hoisted.append(c)
      const_instrs.append(b.parameter(ctx.shape(v.aval)))
  outs = lower_eqns(ctx, closed.jaxpr, const_instrs, params)
  module.entry = b.build(b.tuple(outs))
  return module, hoisted


def _module_name(name: str) -> str:
  safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name).strip("_")
  return f"jit_{safe or 'fn'}"


# ------------------------------------------------------------------------------------------------
# Elementwise primitives that are a single HLO opcode


ELEMENTWISE_OPCODES = {
    "neg": "negate", "sign": "sign", "floor": "floor", "ceil": "ceil", "is_finite": "is-finite",
    "exp": "exponential", "exp2": "exp2", "log": "log", "log1p": "log-plus-one",
    "expm1": "exponential-minus-one", "tanh": "tanh", "logistic": "logistic", "sin": "sine",
    "cos": "cosine", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt", "erf": "erf", "erf_inv": "erf-inv",
    "lgamma": "lgamma", "digamma": "digamma", "abs": "abs", "not": "not",
    "population_count": "popcnt", "clz": "count-leading-zeros", "real": "real", "imag": "imag",
    "add": "add", "add_any": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
    "rem": "remainder", "pow": "power", "max": "maximum", "min": "minimum", "atan2": "atan2",
    "and": "and", "or": "or", "xor": "xor", "shift_left": "shift-left",
    "shift_right_arithmetic": "shift-right-arithmetic",
    "shift_right_logical": "shift-right-logical",
}

COMPARISONS = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}


def _bcast_operands(ctx, avals_out, operands):
  dims = avals_out[0].shape
  return [ctx.broadcast_scalar(o, dims) if o.shape.dims != dims else o for o in operands]


def _elementwise_rule(opcode):
  def rule(ctx, avals_in, avals_out, *operands, **params):
    ops = _bcast_operands(ctx, avals_out, operands)
    return ctx.builder.emit(opcode, ops)
  return rule


def _compare_rule(direction):
  def rule(ctx, avals_in, avals_out, x, y):
    dims = avals_out[0].shape
    x, y = (ctx.broadcast_scalar(o, dims) for o in (x, y))
    return ctx.builder.compare(x, y, direction)
  return rule


def _register_elementwise():
  from ourjax.lax import elementwise as ew
  from ourjax.interpreters import ad
  prims = {p.name: p for p in vars(ew).values() if isinstance(p, core.Primitive)}
  prims["add_any"] = ad.add_any_p
  for name, opcode in ELEMENTWISE_OPCODES.items():
    if name in prims:
      lowering_rules[prims[name]] = _elementwise_rule(opcode)
  for name, direction in COMPARISONS.items():
    lowering_rules[prims[name]] = _compare_rule(direction)

  @register_lowering(ew.round_p)
  def _round(ctx, avals_in, avals_out, x, rounding_method):
    op = "round-nearest-even" if rounding_method == ew.RoundingMethod.TO_NEAREST_EVEN else \
        "round-nearest-afz"
    return ctx.builder.emit(op, (x,))

  @register_lowering(ew.square_p)
  def _square(ctx, avals_in, avals_out, x):
    return ctx.builder.multiply(x, x)

  @register_lowering(ew.integer_pow_p)
  def _integer_pow(ctx, avals_in, avals_out, x, y):
    """x**y by repeated squaring (exact for integers; XLA's expansion for floats)."""
    b = ctx.builder
    n = abs(y)
    acc = None
    base = x
    while n:
      if n & 1:
        acc = base if acc is None else b.multiply(acc, base)
      n >>= 1
      if n:
        base = b.multiply(base, base)
    if acc is None:
      return ctx.full(1, avals_out[0])
    if y < 0:
      acc = b.divide(ctx.full(1, avals_out[0]), acc)
    return acc

  @register_lowering(ew.convert_element_type_p)
  def _convert(ctx, avals_in, avals_out, x, new_dtype, weak_type):
    if avals_in[0].dtype == np.dtype(new_dtype):
      return x
    return ctx.builder.convert(x, new_dtype)

  @register_lowering(ew.bitcast_convert_type_p)
  def _bitcast(ctx, avals_in, avals_out, x, new_dtype):
    return ctx.builder.bitcast_convert(x, new_dtype)

  @register_lowering(ew.select_n_p)
  def _select_n(ctx, avals_in, avals_out, which, *cases):
    b = ctx.builder
    dims = avals_out[0].shape
    cases = [ctx.broadcast_scalar(c, dims) for c in cases]
    which = ctx.broadcast_scalar(which, dims)
    if len(cases) == 1:
      return cases[0]
    if avals_in[0].dtype == np.bool_:
      return b.select(which, cases[1], cases[0])
    # which is int32: a chain of selects, case i where which == i (clamped like XLA)
    out = cases[-1]
    for i in reversed(range(len(cases) - 1)):
      idx = ctx.broadcast_scalar(ctx.constant(i, np.int32), dims) if dims else \
          ctx.constant(i, np.int32)
      out = b.select(b.compare(which, idx, "LE"), cases[i], out)
    return out

  @register_lowering(ew.clamp_p)
  def _clamp(ctx, avals_in, avals_out, lo, x, hi):
    dims = avals_out[0].shape
    return ctx.builder.clamp(ctx.broadcast_scalar(lo, dims), x, ctx.broadcast_scalar(hi, dims))

  for p in (ew.stop_gradient_p, ew.copy_p):
    lowering_rules[p] = lambda ctx, ai, ao, x: x

  @register_lowering(ew.nextafter_p)
  def _nextafter(ctx, avals_in, avals_out, x, y):
    raise LoweringError("nextafter has no HLO lowering yet")


def _register_structural():
  from ourjax.lax import structural as st

  @register_lowering(st.broadcast_in_dim_p)
  def _broadcast_in_dim(ctx, avals_in, avals_out, x, shape, broadcast_dimensions, sharding):
    """HLO broadcast maps operand dims to equal-sized output dims; size-1 dims that expand
    are dropped with a reshape first."""
    in_shape = avals_in[0].shape
    keep = [i for i, s in enumerate(in_shape) if s == shape[broadcast_dimensions[i]]]
    b = ctx.builder
    if len(keep) != len(in_shape):
      x = b.reshape(x, tuple(in_shape[i] for i in keep))
    return b.broadcast(x, tuple(shape), tuple(broadcast_dimensions[i] for i in keep))

  @register_lowering(st.reshape_p)
  def _reshape(ctx, avals_in, avals_out, x, new_sizes, dimensions, sharding):
    return ctx.builder.reshape(x, tuple(new_sizes))

  @register_lowering(st.transpose_p)
  def _transpose(ctx, avals_in, avals_out, x, permutation):
    return ctx.builder.transpose(x, tuple(permutation))

  @register_lowering(st.squeeze_p)
  def _squeeze(ctx, avals_in, avals_out, x, dimensions):
    return ctx.builder.reshape(x, avals_out[0].shape)

  @register_lowering(st.iota_p)
  def _iota(ctx, avals_in, avals_out, dtype, shape, dimension, sharding):
    return ctx.builder.iota(hlo.Shape(dtype, shape), dimension)


_REDUCER_OPCODES = {"reduce_sum": "add", "reduce_prod": "multiply", "reduce_max": "maximum",
                    "reduce_min": "minimum", "reduce_and": "and", "reduce_or": "or",
                    "reduce_xor": "xor"}


def _reduction_identity(opcode, dtype):
  dt = np.dtype(dtype)
  if opcode == "add" or opcode in ("or", "xor"):
    return np.zeros((), dt)
  if opcode == "multiply":
    return np.ones((), dt)
  if opcode == "and":
    return np.array(True if dt == np.bool_ else -1).astype(dt)
  if dt == np.bool_:
    return np.array(opcode == "minimum", dt)
  if hlo.is_float(dt):
    return np.array(-np.inf if opcode == "maximum" else np.inf).astype(dt)
  info = np.iinfo(dt)
  return np.array(info.min if opcode == "maximum" else info.max, dt)


def _register_reductions():
  from ourjax.lax import reductions as rd
  for name, opcode in _REDUCER_OPCODES.items():
    prim = getattr(rd, f"{name}_p", None)
    if prim is None:
      continue

    def rule(ctx, avals_in, avals_out, x, axes, opcode=opcode, **_):
      dt = avals_in[0].dtype
      init = ctx.constant(_reduction_identity(opcode, dt), dt)
      return ctx.builder.reduce([x], [init], tuple(axes), ctx.scalar_computation(opcode, dt))
    lowering_rules[prim] = rule


def _register_pjit():
  from ourjax.interpreters.pjit import pjit_p

  @register_lowering(pjit_p)
  def _pjit(ctx, avals_in, avals_out, *args, jaxpr, name, **_):
    consts = [ctx.constant(np.asarray(c), v.aval.dtype)
              for v, c in zip(jaxpr.jaxpr.constvars, jaxpr.consts)]
    return lower_eqns(ctx, jaxpr.jaxpr, consts, args)


_register_elementwise()
_register_structural()
_register_reductions()
_register_pjit()
