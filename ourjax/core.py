"""The core: abstract values, tracers and traces, primitives, and the jaxpr IR.

How a primitive runs (autodidax's design, which JAX's core shares):

* Every value flowing through a user's function is either a concrete value (an ``Array``, a NumPy
  array or a Python scalar) or a ``Tracer`` owned by some ``Trace``.
* ``Primitive.bind(*args)`` picks the *top* trace among the arguments (the one with the highest
  level on the trace stack, or the current dynamic trace when it is higher) and asks it to
  ``process_primitive``.  The bottom trace, ``EvalTrace``, runs the primitive's NumPy
  implementation; the other traces (jvp, vmap, partial evaluation, jaxpr building) are in
  ``interpreters/``.  When no argument is a tracer and the thread has no dynamic trace, ``bind``
  goes to the eager evaluation (``ourjax/_eager.py``) directly.
* Rules live in tables keyed by the primitive: ``abstract_eval_rules`` and ``impl_rules`` here,
  ``jvp_rules``/``transpose_rules`` in ``interpreters/ad.py``, ``batch_rules`` in
  ``interpreters/batching.py``, ``lowering_rules`` in ``lowering/from_jaxpr.py``.  Each primitive's
  rules are registered right beside the primitive in ``ourjax/lax/``.
"""
from __future__ import annotations

import itertools
import math
import operator
import os
import sys
import threading
from contextlib import contextmanager
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ourjax import _nan_check, dtypes
from ourjax.config import config

_config_local, _config_values = config._local, config._values   # (read on every eager bind)
from ourjax.errors import (ConcretizationTypeError, TracerArrayConversionError,
                           TracerBoolConversionError, TracerIntegerConversionError,
                           UnexpectedTracerError)

# ------------------------------------------------------------------------------------------------
# Abstract values


class ShapedArray:
  """What a tracer knows about a value: its shape, dtype and whether its type is *weak*.

  A weak type comes from a Python scalar; it does not widen the dtype of the arrays it meets
  (``f16_array + 1.0`` stays float16)."""
  __slots__ = ("shape", "dtype", "weak_type", "_hash")
  array_abstraction_level = 1

  def __init__(self, shape, dtype, weak_type: bool = False):
    self.shape = tuple(map(int, shape))
    self.dtype = np.dtype(dtype)
    self.weak_type = bool(weak_type)
    self._hash = None

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: math.prod(self.shape))

  def update(self, shape=None, dtype=None, weak_type=None) -> "ShapedArray":
    return ShapedArray(self.shape if shape is None else shape,
                       self.dtype if dtype is None else dtype,
                       self.weak_type if weak_type is None else weak_type)

  def strip_weak_type(self) -> "ShapedArray":
    return self.update(weak_type=False) if self.weak_type else self

  def str_short(self, short_dtypes: bool = True) -> str:
    dt = dtypes.short_name(self.dtype) if short_dtypes else self.dtype.name
    return f"{dt}[{','.join(str(d) for d in self.shape)}]"

  def __eq__(self, other):
    return (type(self) is type(other) and self.shape == other.shape
            and self.dtype == other.dtype and self.weak_type == other.weak_type)

  def __hash__(self):
    h = self._hash      # an aval is not changed once made: its hash is computed once
    if h is None:
      h = self._hash = hash((self.shape, self.dtype, self.weak_type))
    return h

  def __reduce__(self):      # (not the cached hash: another process hashes differently)
    return (ShapedArray, (self.shape, self.dtype, self.weak_type))

  def __repr__(self):
    w = ", weak_type=True" if self.weak_type else ""
    return f"ShapedArray({self.dtype.name}[{','.join(map(str, self.shape))}]{w})"

  def __str__(self):
    # JAX's: the full dtype name, and ``~`` marks a weak type (``~float32[]``); the jaxpr printer
    # uses str_short (``f32[]``)
    return ("~" if self.weak_type else "") + self.str_short(short_dtypes=False)

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]


def raise_to_shaped(aval: ShapedArray, weak_type=None) -> ShapedArray:
  return aval if weak_type is None else aval.update(weak_type=weak_type)


def typematch(a: ShapedArray, b: ShapedArray) -> bool:
  """Same shape and dtype; weak types are ignored (as in JAX)."""
  return a.shape == b.shape and a.dtype == b.dtype


# ------------------------------------------------------------------------------------------------
# Where in the user's code are we?  Used to name the user's line in errors and jaxpr eqns.

_OURJAX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_frame():
  """The innermost stack frame outside the ourjax package, as 'file:line (function)'."""
  f = sys._getframe(1)
  while f is not None:
    fn = f.f_code.co_filename
    if not fn.startswith(_OURJAX_DIR) and not fn.startswith("<frozen"):
      return f"{fn}:{f.f_lineno} ({f.f_code.co_name})"
    f = f.f_back
  return None


def _at_user_line() -> str:
  where = user_frame()
  return f" at {where}" if where else ""


def _with_user_line(e: Exception, prim_name: str) -> Exception:
  """Return an exception of the same type whose message also names the user's line."""
  where = user_frame()
  if where is None or type(e) not in (TypeError, ValueError) or "\n  at " in str(e):
    return e
  return type(e)(f"{e}\n  at {where}")


# ------------------------------------------------------------------------------------------------
# Primitives

abstract_eval_rules: dict["Primitive", Callable] = {}
impl_rules: dict["Primitive", Callable] = {}


class Primitive:
  """A named operation.  Rules are registered in per-transformation tables keyed by it."""
  multiple_results = False
  _custom_impl = False      # True once def_custom_impl replaced ``impl``

  def __init__(self, name: str):
    self.name = name

  def __repr__(self):
    return self.name

  def bind(self, *args, **params):
    # Eager fast path: no tracer among the operands and no dynamic trace in this thread means
    # the top trace is this thread's EvalTrace (what find_top_trace would pick), so run the
    # primitive directly, without building the trace objects.
    if _state.dynamic_trace is None:
      for a in args:
        if isinstance(a, Tracer):
          break
      else:
        outs = (self._custom_fn(*args, **params) if self._custom_impl else
                _eager_apply(self, args, params))
        # jax_debug_nans / jax_debug_infs (``_nan_check.enabled()``, its common case inline)
        if (_nan_check.enabled() if _config_local.overrides else
            _config_values["jax_debug_nans"] or _config_values["jax_debug_infs"]):
          _nan_check.check_outputs(self, outs, args, params)
        return outs
    trace = find_top_trace(args)
    tracers = [full_raise(trace, a) for a in args]
    outs = trace.process_primitive(self, tracers, params)
    if self.multiple_results:
      return [full_lower(o) for o in outs]
    return full_lower(outs)

  # --- registration helpers ---
  def def_abstract_eval(self, rule):
    abstract_eval_rules[self] = rule
    return rule

  def def_impl(self, rule):
    """``rule(*numpy_arrays, **params)`` -> numpy array (or list of them).  A rule may also
    return ourjax Arrays, and may be a previous ``p.impl`` (restoring it, as JAX code does after
    wrapping a primitive's implementation)."""
    if type(rule) is _BoundImpl and rule.prim is self:
      rule = rule.rule
    impl_rules[self] = rule
    return rule

  def def_custom_impl(self, fn):
    """``fn(*values, **params)`` -> ourjax values; for primitives whose eager evaluation is not a
    NumPy function of NumPy arrays (jit calls, control flow, custom derivatives)."""
    self._custom_fn = fn
    self._custom_impl = True
    return fn

  # --- evaluation ---
  def abstract_eval(self, *avals, **params):
    rule = abstract_eval_rules.get(self)
    if rule is None:
      raise NotImplementedError(f"no abstract evaluation rule for primitive '{self.name}'")
    try:
      return rule(*avals, **params)
    except (TypeError, ValueError) as e:
      raise _with_user_line(e, self.name) from None

  @property
  def impl(self):
    """Eager evaluation, ``p.impl(*values, **params)``: abstract-evaluate (for dtypes, weak
    types and errors; the result is cached per operand types and params), then run the NumPy
    implementation on host values and wrap the results as Arrays.

    As JAX's ``Primitive.impl`` it is read as a value: what is read keeps the implementation
    registered at that moment, so ``old = p.impl; p.def_impl(lambda x: ... old(x))`` wraps the
    old implementation instead of calling itself, and ``p.def_impl(old)`` restores it."""
    if self._custom_impl:
      return self._custom_fn
    return _BoundImpl(self, impl_rules.get(self))


class _BoundImpl:
  """``Primitive.impl`` read as a value (see there)."""
  __slots__ = ("prim", "rule")

  def __init__(self, prim, rule):
    self.prim, self.rule = prim, rule

  def __call__(self, *args, **params):
    if impl_rules.get(self.prim) is self.rule:
      return _eager_apply(self.prim, args, params)
    from ourjax._eager import apply_rule
    return apply_rule(self.prim, self.rule, args, params)


def _eager_apply(prim, args, params):
  """Replaced by ``ourjax._eager.apply`` when that module is imported (it needs ``Array``)."""
  from ourjax._eager import apply
  return apply(prim, args, params)


# ------------------------------------------------------------------------------------------------
# The trace stack


class MainTrace:
  """One level of the trace stack.  ``payload`` holds trace-specific data (the jaxpr builder,
  the vmap axis size...). ``active`` turns False when the level is popped, which is how a leaked
  tracer is detected."""
  __slots__ = ("level", "trace_type", "payload", "active", "name")

  def __init__(self, level, trace_type, payload, name):
    self.level, self.trace_type, self.payload, self.name = level, trace_type, payload, name
    self.active = True

  def __repr__(self):
    return f"MainTrace({self.level}, {self.trace_type.__name__}, {self.name})"


class Trace:
  __slots__ = ("main",)

  def __init__(self, main: MainTrace):
    self.main = main

  def pure(self, val):
    raise NotImplementedError

  def lift(self, tracer):
    raise NotImplementedError

  def process_primitive(self, primitive, tracers, params):
    raise NotImplementedError

  def __repr__(self):
    return f"{type(self).__name__}(level={self.main.level})"


class EvalTrace(Trace):
  """The bottom of the stack: values are concrete and primitives run eagerly."""
  pure = lift = lambda self, x: x

  def process_primitive(self, primitive, args, params):
    outs = (primitive._custom_fn(*args, **params) if primitive._custom_impl else
            _eager_apply(primitive, args, params))
    if _nan_check.enabled():          # jax_debug_nans / jax_debug_infs
      _nan_check.check_outputs(primitive, outs, args, params)
    return outs


class _TraceState(threading.local):
  """The trace stack and the dynamic trace, one of each per thread: a thread tracing a jitted
  function does not make another thread's operations traced.  ``trace_stack[0]`` is the
  thread's ``EvalTrace``."""

  def __init__(self):
    self.trace_stack: list[MainTrace] = [MainTrace(0, EvalTrace, None, "eval")]
    self.dynamic_trace: MainTrace | None = None


_state = _TraceState()


def __getattr__(name):
  # ``core.trace_stack`` / ``core.dynamic_trace``: the calling thread's
  if name in ("trace_stack", "dynamic_trace"):
    return getattr(_state, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def nothing_traced() -> bool:
  """True when the calling thread traces nothing (only its EvalTrace is on the stack)."""
  st = _state
  return st.dynamic_trace is None and len(st.trace_stack) == 1


@contextmanager
def new_main(trace_type, payload=None, name: str = ""):
  stack = _state.trace_stack
  level = len(stack)
  main = MainTrace(level, trace_type, payload, name)
  stack.append(main)
  try:
    yield main
  finally:
    main.active = False
    stack.pop()


@contextmanager
def new_dynamic(main: MainTrace):
  """Make ``main`` catch every bind, even of constants (JAX's "omnistaging")."""
  st = _state
  prev, st.dynamic_trace = st.dynamic_trace, main
  try:
    yield
  finally:
    st.dynamic_trace = prev


@contextmanager
def new_base_main():
  """Hide enclosing dynamic traces (used to evaluate concrete things while tracing)."""
  st = _state
  prev, st.dynamic_trace = st.dynamic_trace, None
  try:
    yield
  finally:
    st.dynamic_trace = prev


def _leaked(tracer) -> UnexpectedTracerError:
  main = tracer._trace.main
  where = _creation_line(tracer)
  created = f"The leaked intermediate value was created on line {where}.\n" if where else ""
  return UnexpectedTracerError(
      "Encountered an unexpected tracer. A function transformed by JAX had a side effect, "
      f"allowing for a reference to an intermediate value with type "
      f"{tracer.aval.str_short(short_dtypes=False)} wrapped in a {type(tracer).__name__} to "
      f"escape the scope of the transformation {main.name or main.trace_type.__name__}.\n"
      "JAX transformations require that functions explicitly return their outputs, and "
      "disallow saving intermediate values to global state.\n" + created +
      "Pass values out of a transformed function through its return value, not by assigning "
      "them to outer (global or closed-over) variables.")


def _creation_line(tracer):
  """'file:line (function)' of the equation that made a jaxpr tracer, when known."""
  builder = getattr(tracer._trace.main, "payload", None)
  var = getattr(builder, "tracer_to_var", {}).get(id(tracer))
  if var is None:
    return None
  for eqn in getattr(builder, "eqns", ()):
    if any(v is var for v in eqn.out_binders):
      return eqn.source_info
  return None


def find_top_trace(xs) -> Trace:
  st = _state
  top = st.trace_stack[0]
  for x in xs:
    if isinstance(x, Tracer):
      m = x._trace.main
      if not m.active:
        raise _leaked(x)
      if m.level > top.level:
        top = m
  dyn = st.dynamic_trace
  if dyn is not None and dyn.level > top.level:
    top = dyn
  return top.trace_type(top)


def full_raise(trace: Trace, val):
  if not isinstance(val, Tracer):
    return trace.pure(val)
  m = val._trace.main
  if m is trace.main:
    return val
  if not m.active:
    raise _leaked(val)
  if m.level < trace.main.level:
    return trace.lift(val)
  raise UnexpectedTracerError(
      f"Can't lift a tracer of level {m.level} ({m.name}) into the trace of level "
      f"{trace.main.level} ({trace.main.name}): a tracer escaped its transformation.")


def full_lower(val):
  return val.full_lower() if isinstance(val, Tracer) else val


# ------------------------------------------------------------------------------------------------
# Tracers


class Tracer:
  """A value being traced.  Array methods and operators are installed on this class (and on
  ``Array``) by ``ourjax.numpy``, so user code treats both the same way."""
  __slots__ = ("_trace", "__weakref__")
  __array_priority__ = 1000

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    dtypes.aval_types.add(cls)      # dtypes.result_type reads a tracer's aval directly

  @property
  def aval(self) -> ShapedArray:
    raise NotImplementedError

  def full_lower(self):
    return self

  def to_concrete_value(self):
    """The concrete value behind this tracer, or None if it has none (e.g. inside jit)."""
    return None

  # The following make Python-level use of an abstract value fail with a clear error.
  # (the shape and dtype errors come first: they hold whatever the values, as in JAX)
  def __bool__(self):
    check_bool_conversion(self.aval)
    v = self.to_concrete_value()
    if v is None:
      raise TracerBoolConversionError(self, _at_user_line())
    return bool(v)

  def _scalar_conversion(self, fn):
    check_scalar_conversion(self.aval)
    v = self.to_concrete_value()
    if v is None:
      name = fn.__name__
      raise ConcretizationTypeError(
          self, f"The problem arose with the `{name}` function. If trying to convert the data "
          f"type of a value, try using `x.astype({name})` or `jnp.array(x, {name})` instead.")
    return fn(v)

  def __int__(self):
    return self._scalar_conversion(int)

  def __float__(self):
    return self._scalar_conversion(float)

  def __complex__(self):
    return self._scalar_conversion(complex)

  def __index__(self):
    check_integer_conversion(self.aval)
    v = self.to_concrete_value()
    if v is None:
      raise TracerIntegerConversionError(self, _at_user_line())
    return operator.index(v)

  # a tracer is immutable: copies are the tracer itself
  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  @property
  def sharding(self):
    raise AttributeError(
        "The 'sharding' attribute is not available on tracers of "
        f"{self.aval.str_short(short_dtypes=False)}: while tracing, a value is known by its "
        "type, jax.typeof(x) (JAX's types carry the sharding; ourjax's do not yet).")

  def __array__(self, dtype=None, copy=None):
    # Always an error, as in JAX, even for a tracer with a known value (under grad or jvp):
    # np.exp(x) on it would return a constant, silently dropping x's derivative.  (bool(),
    # .item() and the static-argument paths read known values through to_concrete_value.)
    raise TracerArrayConversionError(self)

  def __hash__(self):
    raise TypeError(f"unhashable type: {type(self).__name__} (a traced array)")

  def __len__(self):
    return len(self.aval)

  def __iter__(self):
    if not self.shape:
      raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.shape[0]))

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)
  ndim = property(lambda self: self.aval.ndim)
  size = property(lambda self: self.aval.size)
  weak_type = property(lambda self: self.aval.weak_type)

  def __repr__(self):
    # JAX 0.10's forms: JitTracer(float32[3]), VmapTracer(aval=..., batched=...),
    # JVPTracer(primal=..., tangent=...), GradTracer(primal=..., typeof(tangent)=f32[])
    kind = type(self).__name__
    if kind == "JaxprTracer":
      return f"JitTracer({self.aval})"
    if kind == "BatchTracer":
      return f"VmapTracer(aval={self.aval}, batched={get_aval(self.val)})"
    if kind == "JVPTracer":
      t = self.tangent
      if type(t).__name__ == "PartialEvalTracer":
        return f"GradTracer(primal={self.primal}, typeof(tangent)={t.aval.str_short()})"
      return f"JVPTracer(primal={self.primal}, tangent={t})"
    if kind == "PartialEvalTracer" and self.pval.is_known:   # a known primal of linearize
      return str(self.pval.const)
    return f"Traced<{self.aval.str_short(short_dtypes=False)}>with<{type(self._trace).__name__}>"


# ------------------------------------------------------------------------------------------------
# Abstract values of concrete things


_python_scalar_types = (bool, int, float, complex)


def check_scalar_conversion(aval) -> None:
  """int()/float()/complex() need a 0-d array (JAX's error otherwise, as NumPy 2.5's)."""
  if aval.ndim:
    raise TypeError("Only scalar arrays can be converted to Python scalars; "
                    f"got arr.ndim={aval.ndim}")


def check_integer_conversion(aval) -> None:
  """``__index__`` (operator.index, hex, list indexing) needs a 0-d integer array."""
  if aval.ndim or not (dtypes.is_integer(aval.dtype) or aval.dtype == np.bool_):
    raise TypeError("Only integer scalar arrays can be converted to a scalar index.")


def check_bool_conversion(aval) -> None:
  """bool() needs exactly one element (NumPy's errors otherwise)."""
  if aval.size == 0:
    raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > 0` to "
                     "check that an array is not empty.")
  if aval.size > 1:
    raise ValueError("The truth value of an array with more than one element is ambiguous. "
                     "Use a.any() or a.all()")


def check_not_masked(x) -> None:
  """NumPy masked arrays are rejected (their mask would be silently dropped), as in JAX.
  (``numpy.ma`` is looked up, not imported: a masked array exists only once it is, and
  importing it cost 10-20 ms of a process's first call.)"""
  ma = sys.modules.get("numpy.ma")
  if ma is not None and isinstance(x, ma.MaskedArray):
    raise ValueError("numpy masked arrays are not supported as direct inputs to JAX functions. "
                     "Use arr.filled() to convert the value to a standard numpy array.")


def get_aval(x) -> ShapedArray:
  if type(x) in dtypes.aval_types:     # an Array or a tracer
    return x.aval
  if isinstance(x, Tracer):
    return x.aval
  aval = getattr(x, "aval", None)   # ourjax.Array
  if aval is not None:
    return aval
  if isinstance(x, (np.ndarray, np.generic)):
    if type(x) is not np.ndarray:
      check_not_masked(x)
    return ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype), False)
  if isinstance(x, _python_scalar_types):
    return ShapedArray((), dtypes.dtype(x, canonicalize=True), not isinstance(x, bool))
  if hasattr(x, "__jax_array__"):
    return get_aval(x.__jax_array__())
  raise TypeError(f"Value {x!r} of type {type(x).__name__} is not a valid ourjax type "
                  "(expected an array, a NumPy array or a Python scalar)")


def is_concrete(x) -> bool:
  return not isinstance(x, Tracer) or x.to_concrete_value() is not None


def concrete_or_error(force, x, context: str = ""):
  """``force(x)`` for a concrete x; a ConcretizationTypeError (naming ``context``) for a tracer."""
  if isinstance(x, Tracer):
    v = x.to_concrete_value()
    if v is None:
      raise ConcretizationTypeError(x, context)
    x = v
  return force(x) if force is not None else x


def ensure_compile_time_eval():
  return new_base_main()


def eval_context():
  """JAX's ``jax.core.eval_context``: inside it, operations on values that are not tracers of
  an enclosing transformation evaluate eagerly (as ``ensure_compile_time_eval``)."""
  return new_base_main()


# ------------------------------------------------------------------------------------------------
# Jaxprs


class Var:
  __slots__ = ("aval", "count")
  _counter = itertools.count()

  def __init__(self, aval: ShapedArray):
    self.aval = aval
    self.count = next(Var._counter)

  def __repr__(self):
    return f"Var({self.count}:{self.aval.str_short()})"


class Literal:
  """A scalar constant written inline in a jaxpr (``1.0:f32[]``)."""
  __slots__ = ("val", "aval")

  def __init__(self, val, aval: ShapedArray):
    self.val = val
    self.aval = aval

  def __repr__(self):
    return f"Literal({self.val})"

  def value(self):
    """The literal as an operand to bind when a jaxpr is evaluated again: a weakly typed literal
    stays weak (its NumPy scalar alone would be strongly typed)."""
    if not self.aval.weak_type:
      return self.val
    from ourjax.array import Array
    return Array._from_result(np.asarray(self.val), self.aval)

  def pp(self) -> str:
    v = self.val
    if isinstance(v, np.ndarray) and v.shape == ():
      v = v[()]
    if self.aval.dtype == np.bool_:
      s = str(bool(v))
    elif dtypes.is_float(self.aval.dtype):
      s = repr(float(v))
      if s in ("inf", "-inf", "nan"):
        s = s
    elif dtypes.is_integer(self.aval.dtype):
      s = str(int(v))
    else:
      s = str(v)
    return f"{s}:{self.aval.str_short()}"


Atom = "Var | Literal"


class JaxprEqn(NamedTuple):
  primitive: Primitive
  inputs: list
  params: dict
  out_binders: list
  source_info: str | None = None

  @property
  def invars(self):
    return self.inputs

  @property
  def outvars(self):
    return self.out_binders

  def __repr__(self):
    """The equation as a jaxpr prints it, with names of its own (JAX's ``a:f32[] = sin b``)."""
    from ourjax._jaxpr_text import _Namer, _pp_eqn
    return _pp_eqn(self, _Namer(), set(self.out_binders), 0, 0)

  __str__ = __repr__


class Jaxpr:
  """A typed SSA function: ``{ lambda constvars ; invars . let eqns in outvars }``."""
  __slots__ = ("constvars", "invars", "eqns", "outvars", "debug_name", "__weakref__")

  def __init__(self, constvars, invars, eqns, outvars, debug_name: str = ""):
    self.constvars = list(constvars)
    self.invars = list(invars)
    self.eqns = list(eqns)
    self.outvars = list(outvars)
    self.debug_name = debug_name

  # JAX spelling
  in_binders = property(lambda self: self.invars)
  outs = property(lambda self: self.outvars)

  @property
  def in_avals(self):
    return [v.aval for v in self.invars]

  @property
  def out_avals(self):
    return [v.aval for v in self.outvars]

  def __str__(self):
    return pp_jaxpr(self)

  __repr__ = __str__

  def pretty_print(self, **_):
    return pp_jaxpr(self)


class ClosedJaxpr:
  """A jaxpr together with the values of its constvars."""
  __slots__ = ("jaxpr", "consts", "__weakref__")

  def __init__(self, jaxpr: Jaxpr, consts: Sequence):
    assert len(jaxpr.constvars) == len(consts)
    self.jaxpr = jaxpr
    self.consts = list(consts)

  in_avals = property(lambda self: self.jaxpr.in_avals)
  out_avals = property(lambda self: self.jaxpr.out_avals)
  eqns = property(lambda self: self.jaxpr.eqns)

  def __str__(self):
    return pp_jaxpr(self.jaxpr)

  __repr__ = __str__

  def pretty_print(self, **_):
    return str(self)

  def map_jaxpr(self, f):
    return ClosedJaxpr(f(self.jaxpr), self.consts)


def jaxpr_as_fun(closed: ClosedJaxpr):
  return lambda *args: eval_jaxpr(closed.jaxpr, closed.consts, *args)


# --- the JAX text format (written by _jaxpr_text.py; its registries live here) ---

PP_WIDTH = 80
# primitive -> fn(params) -> list of (name, value) to print (hides default-valued params)
pp_param_rules: dict = {}
# primitives whose ``jaxpr`` param is called on the equation's operands (jit-like)
call_primitives: set = set()

#: primitives with a side effect (host callbacks): their equations are never dropped for
#: having unused results, and a jaxpr holding one is evaluated rather than compiled.
effectful_primitives: set = set()
#: primitives that call Python on the host (effectful or not): no compiled code can call them
#: yet, so a jaxpr holding one is evaluated rather than compiled.
host_callback_primitives: set = set()


def _sub_jaxprs(params):
  for v in params.values():
    for x in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(x, ClosedJaxpr):
        yield x.jaxpr
      elif isinstance(x, Jaxpr):
        yield x


def eqn_has_effects(eqn) -> bool:
  """True if the equation's primitive is effectful or a jaxpr in its parameters has an
  effectful equation."""
  if eqn.primitive in effectful_primitives:
    return True
  return any(jaxpr_has_effects(j) for j in _sub_jaxprs(eqn.params))


def jaxpr_has_effects(jaxpr) -> bool:
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  if not effectful_primitives:
    return False
  return any(eqn_has_effects(e) for e in jaxpr.eqns)


def jaxpr_calls_host(jaxpr) -> bool:
  """True if ``jaxpr`` (or a jaxpr in an equation's parameters) has a host callback."""
  if isinstance(jaxpr, ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  if not host_callback_primitives:
    return False
  return any(e.primitive in host_callback_primitives or
             any(jaxpr_calls_host(j) for j in _sub_jaxprs(e.params)) for e in jaxpr.eqns)


def pp_jaxpr(jaxpr: Jaxpr) -> str:
  """``jaxpr`` in JAX's text format (``_jaxpr_text``)."""
  from ourjax._jaxpr_text import pp_jaxpr as pp
  return pp(jaxpr)


# --- typechecking and evaluation ---


from ourjax.errors import JaxprTypeError  # noqa: E402  (core.JaxprTypeError, as JAX's)


def typecheck_jaxpr(jaxpr: Jaxpr) -> None:
  """Check that every variable is bound once before use and that each equation's declared
  output types are what its primitive's abstract evaluation gives."""
  env: set = set()

  def bind(v):
    if v in env:
      raise JaxprTypeError(f"variable {v} bound twice")
    env.add(v)

  def read(x):
    if isinstance(x, Literal):
      return x.aval
    if x not in env:
      raise JaxprTypeError(f"variable {x} used before it is bound")
    return x.aval

  for v in jaxpr.constvars:
    bind(v)
  for v in jaxpr.invars:
    bind(v)
  for eqn in jaxpr.eqns:
    in_avals = [read(x) for x in eqn.inputs]
    out = eqn.primitive.abstract_eval(*in_avals, **eqn.params)
    out = out if eqn.primitive.multiple_results else [out]
    if len(out) != len(eqn.out_binders):
      raise JaxprTypeError(f"{eqn.primitive.name}: {len(out)} results but "
                           f"{len(eqn.out_binders)} binders")
    for a, v in zip(out, eqn.out_binders):
      if not typematch(a, v.aval):
        raise JaxprTypeError(f"{eqn.primitive.name}: result type {a.str_short()} does not match "
                             f"binder type {v.aval.str_short()}")
      bind(v)
  for x in jaxpr.outvars:
    read(x)


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence, *args):
  """Evaluate a jaxpr by binding each of its primitives: under a transformation this re-traces
  it, eagerly it runs it."""
  env: dict = {}

  def read(x):
    return x.value() if isinstance(x, Literal) else env[x]

  if len(args) != len(jaxpr.invars):
    raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(args)}")
  for v, c in zip(jaxpr.constvars, consts):
    env[v] = c
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    outs = eqn.primitive.bind(*[read(x) for x in eqn.inputs], **eqn.params)
    if not eqn.primitive.multiple_results:
      outs = [outs]
    for v, o in zip(eqn.out_binders, outs):
      env[v] = o
  return [read(x) for x in jaxpr.outvars]


def closed_call(closed: ClosedJaxpr, *args):
  return eval_jaxpr(closed.jaxpr, closed.consts, *args)


class Token:
  """What ``lax.create_token`` returns (JAX's ``core.Token``): a value with no contents that
  orders effects.  It passes through jit, vmap and grad as an empty pytree (a new Token comes
  out); it has no array buffer."""
  __slots__ = ()

  @property
  def _buf(self):
    return _TokenBuffer()

  def block_until_ready(self):
    return self

  def __repr__(self):
    return "Token()"


class _TokenBuffer:
  @property
  def _value(self):
    raise RuntimeError("Cannot convert a token-shape buffer to a numpy array.")
