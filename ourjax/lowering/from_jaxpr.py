"""Lowering: a closed jaxpr becomes an HLO module (``lowering/hlo.py``).

Each primitive has a lowering rule in ``lowering_rules``:

    rule(ctx: LoweringContext, avals_in, avals_out, *operands, **params)
        -> Instruction | list[Instruction]

``operands`` are HLO instructions already emitted for the equation's inputs.  Rank-0 operands
of elementwise primitives (which lax broadcasts implicitly) are broadcast explicitly here,
because HLO has no implicit broadcasting.  Elementwise primitives that are one HLO opcode are
listed in ``ELEMENTWISE_OPCODES``; every other rule is registered beside its primitive in
``ourjax/lax/`` (``register_lowering(prim)(rule)``), importing this module.  Rules that need a
sub-computation (reducers, comparators, loop bodies, branches) build it with
``ctx.computation`` and lower nested jaxprs into it with ``ctx.inline``.

The entry computation takes the jaxpr's inputs (those it uses, unless ``keep_unused``), then
its non-scalar constants (hoisted into parameters so large closed-over arrays are passed at call
time instead of being compiled in), and returns a tuple of the outputs.  A nested ``pjit`` is
inlined: jit inside jit is one module.
"""
from __future__ import annotations

import contextlib

from typing import Callable, NamedTuple, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import ClosedJaxpr, Jaxpr, Literal, ShapedArray
from ourjax.lowering import hlo

lowering_rules: dict = {}


def register_lowering(prim):
  def deco(rule):
    lowering_rules[prim] = rule
    return rule
  return deco


class LoweringError(NotImplementedError):
  """A primitive has no lowering (yet); ``compile_jaxpr`` then falls back to op-by-op
  evaluation unless ``OURJAX_STRICT_LOWERING=1``."""


class LoweringContext:
  """The builder of the computation being emitted, plus small helpers rules share."""

  def __init__(self, module: hlo.Module, builder: hlo.Builder, cache: dict | None = None):
    self.module = module
    self.builder = builder
    self._scalar_comps: dict = {} if cache is None else cache   # shared by the whole module

  # -- divisions -------------------------------------------------------------------------------
  # (``xla_division`` rewrites the program's divisions as XLA does; not those of the library
  # compositions that stand for JAX's LAPACK calls (``lax/linalg.py``), which XLA never sees)
  _DIVISIONS = ("xla_division", "divisions")
  _LIBRARY = ("xla_division", "library depth")

  def divisions(self) -> list:
    """The program's divisions lowered so far (shared by every sub-context of the module)."""
    return self._scalar_comps.setdefault(self._DIVISIONS, [])

  def record_division(self, instr: hlo.Instruction) -> None:
    if not self._scalar_comps.get(self._LIBRARY, 0):
      self.divisions().append(instr)

  @contextlib.contextmanager
  def library(self):
    """Lower a library composition: its divisions are left as they are."""
    self._scalar_comps[self._LIBRARY] = self._scalar_comps.get(self._LIBRARY, 0) + 1
    try:
      yield
    finally:
      self._scalar_comps[self._LIBRARY] -= 1

  # -- values ----------------------------------------------------------------------------------
  def shape(self, aval: ShapedArray) -> hlo.Shape:
    return hlo.Shape(aval.dtype, aval.shape)

  def constant(self, value, dtype) -> hlo.Instruction:
    return self.builder.constant(np.asarray(value, dtype=np.dtype(dtype)))

  def full(self, value, aval: ShapedArray) -> hlo.Instruction:
    return self.builder.full(np.asarray(value, aval.dtype), self.shape(aval))

  def splat(self, value, dtype, dims) -> hlo.Instruction:
    """``value`` (a Python/NumPy scalar) broadcast to ``dims``."""
    return self.builder.full(np.asarray(value).astype(np.dtype(dtype)), hlo.Shape(dtype, dims))

  def broadcast_scalar(self, x: hlo.Instruction, dims) -> hlo.Instruction:
    if x.shape.dims == tuple(dims):
      return x
    return self.builder.broadcast(x, tuple(dims), ())

  def unpack(self, t: hlo.Instruction) -> list[hlo.Instruction]:
    """The elements of a tuple-shaped instruction."""
    return [self.builder.get_tuple_element(t, i) for i in range(len(t.shape.tuple_shapes))]

  # -- sub-computations ------------------------------------------------------------------------
  def computation(self, name: str, param_shapes: Sequence[hlo.Shape],
                  body: Callable[["LoweringContext", list], hlo.Instruction]) -> hlo.Computation:
    """A new computation of the module: ``body(sub_ctx, parameters)`` emits it and returns its
    root."""
    b = hlo.Builder(self.module, name)
    sub = LoweringContext(self.module, b, self._scalar_comps)
    params = [b.parameter(s) for s in param_shapes]
    return b.build(body(sub, params))

  def cached_computation(self, key, build: Callable[[], hlo.Computation]) -> hlo.Computation:
    """One computation per ``key`` per module (reducers, comparators)."""
    comp = self._scalar_comps.get(key)
    if comp is None:
      comp = self._scalar_comps[key] = build()
    return comp

  def scalar_computation(self, opcode: str, dtype) -> hlo.Computation:
    """A cached two-scalar computation (reducers, one-key comparators)."""
    return self.cached_computation(
        (opcode, np.dtype(dtype)), lambda: hlo.scalar_computation(self.module, opcode, dtype))

  def inline(self, jaxpr: Jaxpr | ClosedJaxpr, args: Sequence[hlo.Instruction],
             consts: Sequence | None = None) -> list[hlo.Instruction]:
    """Emit the equations of a (closed) jaxpr here, on ``args``; the constants of a closed jaxpr
    become constant instructions."""
    if isinstance(jaxpr, ClosedJaxpr):
      consts = [self.constant(np.asarray(c), v.aval.dtype)
                for v, c in zip(jaxpr.jaxpr.constvars, jaxpr.consts)]
      jaxpr = jaxpr.jaxpr
    return lower_eqns(self, jaxpr, list(consts or []), list(args))

  def lower_sub_jaxpr(self, closed: ClosedJaxpr, name: str,
                      param_avals: Sequence[ShapedArray] | None = None,
                      tuple_root: bool = True) -> hlo.Computation:
    """A jaxpr as a separate computation with one parameter per input (reducers, comparators);
    its root is a tuple of the outputs, or the single output when ``tuple_root`` is False."""
    avals = list(param_avals or closed.in_avals)

    def body(sub, params):
      outs = sub.inline(closed, params)
      return sub.builder.tuple(outs) if tuple_root else outs[0]
    return self.computation(name, [self.shape(a) for a in avals], body)

  def lower_tuple_jaxpr(self, name: str, param_avals: Sequence[ShapedArray],
                        body: Callable[["LoweringContext", list], list]) -> hlo.Computation:
    """A computation taking ONE tuple parameter of ``param_avals`` (while bodies, branches):
    ``body(sub_ctx, elements) -> list of results``, returned as a tuple."""
    shape = hlo.Shape.tuple([self.shape(a) for a in param_avals])

    def build(sub, params):
      return sub.builder.tuple(body(sub, sub.unpack(params[0])))
    return self.computation(name, [shape], build)


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
    try:
      outs = rule(ctx, avals_in, avals_out, *[read(x) for x in eqn.inputs], **eqn.params)
    except hlo.ShapeError as e:   # a rule emitted ill-typed HLO: a bug here, name the eqn
      raise hlo.ShapeError(f"lowering '{eqn.primitive.name}' "
                           f"({', '.join(a.str_short() for a in avals_in)}) at "
                           f"{eqn.source_info or 'unknown location'}: {e}") from None
    if not eqn.primitive.multiple_results:
      outs = [outs]
    outs = list(outs)
    if len(outs) != len(avals_out):
      raise AssertionError(f"lowering of {eqn.primitive.name} gave {len(outs)} results for "
                           f"{len(avals_out)} outputs")
    for v, o, a in zip(eqn.out_binders, outs, avals_out):
      s = o.shape      # (the common case first: no Shape made to compare with)
      if not (s.tuple_shapes is None and s.dims == a.shape and s.dtype == a.dtype) \
         and s != ctx.shape(a):
        raise AssertionError(f"lowering of {eqn.primitive.name} gave {o.shape} for an output "
                             f"of type {a.str_short()}")
      env[v] = o
  return [read(x) for x in jaxpr.outvars]


class Lowering(NamedTuple):
  """What ``lower`` returns: the module (call it with the kept arguments, then ``hoisted``),
  the constants hoisted into trailing parameters, and the indices of the jaxpr's inputs that
  are parameters (all of them unless unused ones were pruned)."""
  module: hlo.Module
  hoisted: list
  kept_args: tuple


def lower(closed: ClosedJaxpr, name: str = "jit_fn", *, keep_unused: bool = True) -> Lowering:
  """Lower ``closed`` to a module named ``jit_<name>``.  With ``keep_unused=False`` the inputs
  the outputs do not depend on are not parameters of the module (they are still accepted by a
  jitted function, and dropped before the call)."""
  jaxpr, consts = closed.jaxpr, list(closed.consts)
  kept = tuple(range(len(jaxpr.invars)))
  if not keep_unused:
    from ourjax.interpreters import partial_eval as pe
    new, used = pe.dce_jaxpr(jaxpr, keep_invars=False)
    live_consts = set(new.constvars)
    consts = [c for v, c in zip(jaxpr.constvars, consts) if v in live_consts]
    kept = tuple(i for i, u in enumerate(used) if u)
    jaxpr = new
  module = hlo.Module(_module_name(name))
  b = hlo.Builder(module, "main")
  ctx = LoweringContext(module, b)
  params = [b.parameter(ctx.shape(v.aval)) for v in jaxpr.invars]
  hoisted, const_instrs = [], []
  from ourjax.api import ShapeDtypeStruct
  for v, c in zip(jaxpr.constvars, consts):
    if isinstance(c, core.Tracer):
      raise LoweringError("cannot lower a jaxpr that closes over a tracer")
    if isinstance(c, ShapeDtypeStruct):     # (a jitted call's argument while staging)
      raise TypeError("A ShapeDtypeStruct does not have a value and cannot be used as a "
                      "constant in a JAX function.")
    arr = np.asarray(c)
    if arr.ndim == 0:
      const_instrs.append(ctx.constant(arr, v.aval.dtype))
    else:
      hoisted.append(c)
      const_instrs.append(b.parameter(ctx.shape(v.aval)))
  outs = lower_eqns(ctx, jaxpr, const_instrs, params)
  module.entry = b.build(b.tuple(outs))
  # (XLA's rewrites of division, which JAX's numbers follow: the module as lowered computes
  # them, so the passes that optimise it change no bits)
  from ourjax.lowering import xla_division
  xla_division.run(module, ctx.divisions())
  return Lowering(module, hoisted, kept)


def _module_name(name: str) -> str:
  safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name).strip("_")
  return f"jit_{safe or 'fn'}"


# ------------------------------------------------------------------------------------------------
# Elementwise primitives


ELEMENTWISE_OPCODES = {
    "neg": "negate", "sign": "sign", "floor": "floor", "ceil": "ceil", "is_finite": "is-finite",
    "exp": "exponential", "exp2": "exp2", "log": "log", "log1p": "log-plus-one",
    "expm1": "exponential-minus-one", "tanh": "tanh", "logistic": "logistic", "sin": "sine",
    "cos": "cosine", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt", "erf": "erf", "erfc": "erfc",
    "erf_inv": "erf-inv", "lgamma": "lgamma", "digamma": "digamma", "abs": "abs", "not": "not",
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
    b = ctx.builder
    if hlo.is_complex(hlo.to_dtype(avals_in[0].dtype)) and direction not in ("EQ", "NE"):
      # ordered comparisons of complex numbers are lexicographic (real part, then imaginary),
      # as the eager impl (NumPy) orders them
      xr, yr, xi, yi = b.real(x), b.real(y), b.imag(x), b.imag(y)
      strict = "LT" if direction in ("LT", "LE") else "GT"
      return b.or_(b.compare(xr, yr, strict),
                   b.and_(b.compare(xr, yr, "EQ"), b.compare(xi, yi, direction)))
    return b.compare(x, y, direction)
  return rule


def _int_type_of(dtype) -> np.dtype:
  return np.dtype(f"i{np.dtype(dtype).itemsize}")


def _nextafter(ctx, x, y, dtype, dims):
  """The float after ``x`` in the direction of ``y`` by integer arithmetic on the bits (XLA's
  expansion): NaN if either is NaN; ``y`` if they are equal; the smallest subnormal with the
  sign of ``y`` from zero; else the bits of ``x`` plus or minus one (a step away from zero
  when ``x`` moves away from zero)."""
  b = ctx.builder
  it = _int_type_of(dtype)
  bits = hlo.bit_width(hlo.to_dtype(dtype))
  xi, yi = b.bitcast_convert(x, it), b.bitcast_convert(y, it)
  sign_mask = ctx.splat(np.array(1, it) << np.array(bits - 1, it), it, dims)
  one, zero_i = ctx.splat(1, it, dims), ctx.splat(0, it, dims)
  x_abs = b.and_(xi, b.not_(sign_mask))
  y_sign = b.and_(yi, sign_mask)
  x_sign = b.and_(xi, sign_mask)
  from_zero = b.or_(y_sign, one)                      # smallest subnormal with y's sign
  away = b.or_(b.and_(b.compare(x_sign, y_sign, "NE"), b.compare(x_abs, zero_i, "NE")),
               b.compare(b.and_(xi, b.not_(sign_mask)), b.and_(yi, b.not_(sign_mask)), "GT"))
  # |x| moves towards zero when the signs differ or |x| > |y| (same sign): bits - 1
  stepped = b.select(away, b.subtract(xi, one), b.add(xi, one))
  res = b.select(b.compare(x_abs, zero_i, "EQ"), from_zero, stepped)
  out = b.bitcast_convert(res, dtype)
  nan = ctx.splat(np.nan, dtype, dims)
  either_nan = b.or_(b.compare(x, x, "NE"), b.compare(y, y, "NE"))
  out = b.select(b.compare(x, y, "EQ"), y, out)
  return b.select(either_nan, nan, out)


def _register_elementwise():
  from ourjax.lax import elementwise as ew
  from ourjax.interpreters import ad
  prims = {p.name: p for p in vars(ew).values() if isinstance(p, core.Primitive)}
  prims["add_any"] = ad.add_any_p
  for name, opcode in ELEMENTWISE_OPCODES.items():
    if name in prims:
      lowering_rules[prims[name]] = _elementwise_rule(opcode)
  divide = _elementwise_rule("divide")

  def _div(ctx, avals_in, avals_out, x, y):
    out = divide(ctx, avals_in, avals_out, x, y)
    ctx.record_division(out)
    return out
  lowering_rules[ew.div_p] = _div
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

  @register_lowering(ew.conj_p)
  def _conj(ctx, avals_in, avals_out, x):
    if not hlo.is_complex(hlo.to_dtype(avals_in[0].dtype)):
      return x
    b = ctx.builder
    return b.emit("complex", (b.real(x), b.negate(b.imag(x))))

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
  def _convert(ctx, avals_in, avals_out, x, new_dtype, weak_type, **_):
    if avals_in[0].dtype == np.dtype(new_dtype):
      return x
    return ctx.builder.convert(x, new_dtype)

  @register_lowering(ew.bitcast_convert_type_p)
  def _bitcast(ctx, avals_in, avals_out, x, new_dtype):
    if any(dtypes.bit_width(d) % 8 for d in (avals_in[0].dtype, new_dtype)):
      raise LoweringError("bitcast_convert_type of a sub-byte type (int4, float4_e2m1fn, ...) "
                          "runs on the host (NumPy)")
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
    # which is an integer: a chain of selects, case i where which == i (clamped like XLA)
    wdt = avals_in[0].dtype
    out = cases[-1]
    for i in reversed(range(len(cases) - 1)):
      out = b.select(b.compare(which, ctx.splat(i, wdt, dims), "LE"), cases[i], out)
    return out

  @register_lowering(ew.clamp_p)
  def _clamp(ctx, avals_in, avals_out, lo, x, hi):
    dims = avals_out[0].shape
    return ctx.builder.clamp(ctx.broadcast_scalar(lo, dims), x, ctx.broadcast_scalar(hi, dims))

  for p in (ew.stop_gradient_p, ew.copy_p):
    lowering_rules[p] = lambda ctx, ai, ao, x, **_: x

  @register_lowering(ew.nextafter_p)
  def _nextafter_rule(ctx, avals_in, avals_out, x, y):
    dims = avals_out[0].shape
    x, y = (ctx.broadcast_scalar(o, dims) for o in (x, y))
    return _nextafter(ctx, x, y, avals_out[0].dtype, dims)


# ------------------------------------------------------------------------------------------------
# Structural primitives


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
    if dimensions is not None and tuple(dimensions) != tuple(range(len(avals_in[0].shape))):
      x = ctx.builder.transpose(x, tuple(dimensions))
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


# ------------------------------------------------------------------------------------------------
# Reductions over axes


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
  from ourjax.lax.reductions import _chooser_identity
  return np.asarray(_chooser_identity(opcode == "maximum", dt)).astype(dt)


def is_narrow_float(dtype) -> bool:
  """float16, bfloat16 and the float8s: NumPy-side reductions accumulate them in float32."""
  dt = hlo.to_dtype(dtype)
  return hlo.is_float(dt) and dt.itemsize < 4


def reduce_with(ctx, x, opcode: str, axes, dtype) -> hlo.Instruction:
  """``x`` reduced over ``axes`` with a monoid ``opcode`` from its identity; narrow floats are
  summed/multiplied in float32 and rounded once at the end (as the eager reducers do)."""
  b = ctx.builder
  dims = x.shape.dims
  if x.shape.size and all(dims[a] == 1 for a in axes):
    # one element per result: a reshape, as XLA's simplifier makes it (the identity is not
    # combined in: JAX's sum of [-0.0] is -0.0)
    return b.reshape(x, tuple(d for i, d in enumerate(dims) if i not in axes))
  acc_dt = np.dtype(np.float32) if (is_narrow_float(dtype) and opcode in ("add", "multiply")) \
      else np.dtype(dtype)
  if acc_dt != np.dtype(dtype):
    x = b.convert(x, acc_dt)
  init = ctx.constant(_reduction_identity(opcode, acc_dt), acc_dt)
  out = b.reduce([x], [init], tuple(axes), ctx.scalar_computation(opcode, acc_dt))
  return b.convert(out, dtype) if acc_dt != np.dtype(dtype) else out


def _register_reductions():
  from ourjax.lax import reductions as rd
  for name, opcode in _REDUCER_OPCODES.items():
    prim = getattr(rd, f"{name}_p", None)
    if prim is None:
      continue

    def rule(ctx, avals_in, avals_out, x, axes, opcode=opcode, **_):
      return reduce_with(ctx, x, opcode, axes, avals_in[0].dtype)
    lowering_rules[prim] = rule


def _register_pjit():
  from ourjax.interpreters.pjit import pjit_p

  @register_lowering(pjit_p)
  def _pjit(ctx, avals_in, avals_out, *args, jaxpr, name, composite=None, **_):
    if composite is not None:
      return _lower_composite(ctx, args, jaxpr, composite)
    return ctx.inline(jaxpr, args)


def _lower_composite(ctx, args, jaxpr, composite):
  """A ``lax.composite`` call: its decomposition inlined here (what runs), recorded on the
  module (``module.composites``) with the instructions it emitted, its results and the
  decomposition lowered on its own (a function of a separate module), so that the StableHLO
  text prints one ``stablehlo.composite`` op and a private function, as JAX's does."""
  name, attrs, version = composite
  comp = ctx.builder.computation
  before = set(map(id, comp.instructions))
  outs = ctx.inline(jaxpr, args)
  # each result is an instruction of the call's own (an input passed through gets a copy)
  outs = [o if id(o) not in before else ctx.builder.emit("copy", [o]) for o in outs]
  region = [i for i in comp.instructions if id(i) not in before]
  fn_module = hlo.Module(name)
  b = hlo.Builder(fn_module, name)
  sub = LoweringContext(fn_module, b)
  params = [b.parameter(ctx.shape(a)) for a in jaxpr.in_avals]
  fouts = sub.inline(jaxpr, params)
  fn = b.build(fouts[0] if len(fouts) == 1 else b.tuple(fouts))
  records = ctx.module.__dict__.setdefault("composites", [])
  records.append(dict(name=name, attributes=attrs, version=version, operands=list(args),
                      results=outs, region=region, function=fn, function_module=fn_module))
  return outs


_register_elementwise()
_register_structural()
_register_reductions()
_register_pjit()
