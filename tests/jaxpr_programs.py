"""Random jnp/lax programs for property tests of jit.

``programs()`` is a hypothesis strategy of ``Program``s: a DAG of ``min_ops``..``max_ops``
operations over 1-4 inputs of drawn shapes and dtypes -- elementwise ops (with numpy
broadcasting, rank-0 operands and weakly typed Python scalars), comparisons, selects,
reductions, reshapes, transposes, slices, dots, concatenates, broadcasts, cumulative sums and
dtype conversions.  A ``Program`` is a plain Python function of its inputs (``prog(*inputs)``
returns the list of its outputs), so it runs eagerly, under ``jit``, or through
``jit(prog).lower(*inputs).compile()``; ``prog.inputs`` holds drawn input values and
``repr(prog)`` lists its operations.

Eager evaluation and the compiled module compute the same operations in the same types, but
reductions and dots may sum in another order, so float values derived from them can differ in
the last bits.  The generator tracks which values are *exact* (identical in every evaluation:
integers, booleans, and floats computed elementwise from inputs) and applies the operations that
would magnify a last-bit difference into a different result (floor, sign, comparisons, selects,
float-to-integer conversions) only to exact values.  ``assert_outputs_close`` then compares
integers and booleans exactly and floats with a tight tolerance.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

BF16 = np.dtype(ml_dtypes.bfloat16)
F32, I32, U8, BOOL = (np.dtype(t) for t in (np.float32, np.int32, np.uint8, np.bool_))
INPUT_DTYPES = (F32, F32, F32, I32, I32, BF16, U8, BOOL)


class Value(NamedTuple):
  """What the generator knows about a program value."""
  shape: tuple
  dtype: np.dtype
  weak: bool
  exact: bool


class Op(NamedTuple):
  name: str                       # for repr
  args: tuple                     # indices of operand values
  fn: Callable                    # fn(*operand_values) -> value
  exact_out: bool | None = None   # None: exact iff all operands are


def _is_float(dt) -> bool:
  return np.dtype(dt).kind == "f" or np.dtype(dt) == BF16


class Program:
  """A straight-line program: ``ops`` applied in order to a growing list of values that starts
  with the inputs; returns the values listed in ``outputs``."""

  def __init__(self, in_values, ops, outputs, inputs):
    self.in_values, self.ops, self.outputs, self.inputs = in_values, ops, outputs, inputs
    self.__name__ = "random_program"

  def __call__(self, *args):
    env = list(args)
    for op in self.ops:
      env.append(op.fn(*[env[i] for i in op.args]))
    return [env[i] for i in self.outputs]

  def __repr__(self):
    lines = [f"Program({len(self.in_values)} inputs, {len(self.ops)} ops):"]
    for i, (v, x) in enumerate(zip(self.in_values, self.inputs)):
      text = np.array2string(np.asarray(x).astype(np.float64) if v.dtype == BF16 else
                             np.asarray(x), separator=", ", threshold=64)
      lines.append(f"  v{i} = input {np.dtype(v.dtype).name}{list(v.shape)} = "
                   + text.replace("\n", " "))
    n = len(self.in_values)
    for k, op in enumerate(self.ops):
      lines.append(f"  v{n + k} = {op.name}({', '.join(f'v{i}' for i in op.args)})")
    lines.append(f"  return {', '.join(f'v{i}' for i in self.outputs)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Inputs


def input_value(rng: np.random.RandomState, shape, dtype) -> np.ndarray:
  dt = np.dtype(dtype)
  n = int(np.prod(shape))
  if dt == BOOL:
    return rng.randint(0, 2, shape).astype(bool)
  if dt.kind in "iu":
    lo = 0 if dt.kind == "u" else -20
    return rng.randint(lo, 21, shape).astype(dt)
  v = np.round(rng.uniform(-2, 2, n), 3)
  if n:
    v[rng.randint(n)] = 0.0
  return v.astype(dt).reshape(shape)


# ------------------------------------------------------------------------------------------------
# Operations.  Each ``_op_*`` draws one operation on the current values, or returns None when it
# does not apply (the caller then draws another).


_FLOAT_UNARY = {
    "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh, "abs": jnp.abs, "negative": jnp.negative,
    "exp(tanh)": lambda x: jnp.exp(jnp.tanh(x)), "log1p(abs)": lambda x: jnp.log1p(jnp.abs(x)),
    "sqrt(abs)": lambda x: jnp.sqrt(jnp.abs(x)), "square(tanh)": lambda x: jnp.square(jnp.tanh(x)),
    "atan": jnp.arctan,
}
_FLOAT_UNARY_EXACT_ONLY = {"floor": jnp.floor, "sign": jnp.sign, "round": jnp.round}
_INT_UNARY = {"negative": jnp.negative, "abs": jnp.abs, "square": jnp.square,
              "bitwise_not": jnp.bitwise_not, "sign": jnp.sign}
_BOOL_UNARY = {"logical_not": jnp.logical_not}

_NUM_BINARY = {"add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply,
               "maximum": jnp.maximum, "minimum": jnp.minimum}
_FLOAT_BINARY = {"div(1+|y|)": lambda x, y: x / (1 + jnp.abs(y)),
                 "atan2": jnp.arctan2}
_INT_BINARY = {"floor_divide": jnp.floor_divide, "remainder": jnp.remainder,
               "bitwise_and": jnp.bitwise_and, "bitwise_xor": jnp.bitwise_xor}
_BOOL_BINARY = {"logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
                "logical_xor": jnp.logical_xor}
_COMPARE = {"less": jnp.less, "greater_equal": jnp.greater_equal, "equal": jnp.equal,
            "not_equal": jnp.not_equal}


def _broadcastable(a: tuple, b: tuple) -> bool:
  try:
    np.broadcast_shapes(a, b)
    return True
  except ValueError:
    return False


def _pick(draw, vals, pred, label):
  """A value satisfying ``pred``, preferring recent ones (so programs grow deep, and shrink
  towards chains)."""
  idx = [i for i, v in reversed(list(enumerate(vals))) if pred(v)]
  if not idx:
    return None
  return idx[draw(st.integers(0, len(idx) - 1), label=label)]


def _recent(draw, vals, label="operand"):
  return len(vals) - 1 - draw(st.integers(0, len(vals) - 1), label=label)


def _op_unary(draw, vals):
  i = _recent(draw, vals)
  v = vals[i]
  if _is_float(v.dtype):
    table = dict(_FLOAT_UNARY)
    if v.exact:
      table.update(_FLOAT_UNARY_EXACT_ONLY)
  elif v.dtype == BOOL:
    table = _BOOL_UNARY
  else:
    table = _INT_UNARY
  name = draw(st.sampled_from(sorted(table)), label="unary")
  return Op(name, (i,), table[name])


def _python_scalar(draw, dt):
  if _is_float(dt):
    return draw(st.sampled_from([0.5, -1.25, 2.0, 3.0]))
  if dt == BOOL:
    return draw(st.booleans())
  return draw(st.sampled_from([1, 2, 3, -2] if dt.kind != "u" else [1, 2, 3]))


def _op_binary(draw, vals):
  i = _recent(draw, vals, "lhs")
  x = vals[i]
  kind = "bool" if x.dtype == BOOL else ("float" if _is_float(x.dtype) else "int")
  table = dict(_NUM_BINARY) if kind != "bool" else dict(_BOOL_BINARY)
  if kind == "float":
    table.update(_FLOAT_BINARY)
  if kind == "int":
    table.update(_INT_BINARY)
  name = draw(st.sampled_from(sorted(table)), label="binary")
  fn = table[name]

  def same_kind(v):
    k = "bool" if v.dtype == BOOL else ("float" if _is_float(v.dtype) else "int")
    return k == kind and _broadcastable(v.shape, x.shape)
  if draw(st.integers(0, 3), label="scalar?") == 0:
    c = _python_scalar(draw, x.dtype)
    if draw(st.booleans(), label="scalar side"):
      return Op(f"{name}[{c!r}, _]", (i,), lambda a, fn=fn, c=c: fn(c, a))
    return Op(f"{name}[_, {c!r}]", (i,), lambda a, fn=fn, c=c: fn(a, c))
  j = _pick(draw, vals, same_kind, "rhs")
  return Op(name, (i, j), fn)


def _op_compare(draw, vals):
  i = _pick(draw, vals, lambda v: v.exact and v.dtype != BOOL, "lhs")
  if i is None:
    return None
  x = vals[i]
  name = draw(st.sampled_from(sorted(_COMPARE)), label="compare")
  j = _pick(draw, vals, lambda v: v.exact and v.dtype != BOOL
            and _broadcastable(v.shape, x.shape), "rhs")
  return Op(name, (i, j), _COMPARE[name])


def _op_where(draw, vals):
  c = _pick(draw, vals, lambda v: v.dtype == BOOL and v.exact, "condition")
  if c is None:
    return None
  cs = vals[c].shape
  x = _pick(draw, vals, lambda v: _broadcastable(v.shape, cs), "on_true")
  xs = np.broadcast_shapes(cs, vals[x].shape)
  y = _pick(draw, vals, lambda v: _broadcastable(v.shape, xs), "on_false")
  return Op("where", (c, x, y), jnp.where)


def _axes(draw, rank, label):
  if rank == 0:
    return None
  chosen = draw(st.lists(st.integers(0, rank - 1), min_size=0, max_size=rank, unique=True),
                label=label)
  return None if not chosen else tuple(sorted(chosen))


def _op_reduce(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) >= 1, "operand")
  if i is None:
    return None
  v = vals[i]
  if v.dtype == BOOL:
    table = {"any": jnp.any, "all": jnp.all}
  elif _is_float(v.dtype):
    table = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean,
             "prod(tanh)": lambda x, **kw: jnp.prod(jnp.tanh(x), **kw)}
  else:
    table = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "prod": jnp.prod}
  name = draw(st.sampled_from(sorted(table)), label="reduction")
  axes = _axes(draw, len(v.shape), "axes")
  keepdims = draw(st.booleans(), label="keepdims")
  if name in ("max", "min") and any(v.shape[a] == 0 for a in (axes or range(len(v.shape)))):
    return None
  exact = None if name in ("max", "min", "any", "all") else (not _is_float(v.dtype))
  fn = table[name]
  return Op(f"{name}[axis={axes}, keepdims={keepdims}]", (i,),
            lambda x, fn=fn, a=axes, k=keepdims: fn(x, axis=a, keepdims=k), exact)


def _factorizations(n):
  return [d for d in range(1, n + 1) if n % d == 0]


def _op_reshape(draw, vals):
  i = _recent(draw, vals)
  v = vals[i]
  size = int(np.prod(v.shape))
  if size == 0:
    return None
  rank = draw(st.integers(0, 3), label="new rank")
  if rank == 0 and size != 1:
    rank = 1
  shape, rest = [], size
  for _ in range(max(rank - 1, 0)):
    d = draw(st.sampled_from(_factorizations(rest)), label="dim")
    shape.append(d)
    rest //= d
  if rank:
    shape.append(rest)
  shape = tuple(shape)
  if draw(st.booleans(), label="-1") and shape:
    spec = tuple(-1 if k == 0 else d for k, d in enumerate(shape))
  else:
    spec = shape
  return Op(f"reshape[{spec}]", (i,), lambda x, s=spec: jnp.reshape(x, s))


def _op_transpose(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) >= 2, "operand")
  if i is None:
    return None
  perm = tuple(draw(st.permutations(range(len(vals[i].shape))), label="perm"))
  return Op(f"transpose[{perm}]", (i,), lambda x, p=perm: jnp.transpose(x, p))


def _op_slice(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) >= 1, "operand")
  if i is None:
    return None
  shape = vals[i].shape
  starts, limits, strides = [], [], []
  for n in shape:
    s = draw(st.integers(0, max(n - 1, 0)), label="start")
    l = draw(st.integers(min(s + 1, n), n), label="limit")
    starts.append(s)
    limits.append(l)
    strides.append(draw(st.integers(1, 2), label="stride"))
  spec = (tuple(starts), tuple(limits), tuple(strides))
  return Op(f"lax.slice{spec}", (i,), lambda x, sp=spec: lax.slice(x, *sp))


def _op_dot(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) in (1, 2) and v.dtype != BOOL, "lhs")
  if i is None:
    return None
  x = vals[i]
  k = x.shape[-1]
  j = _pick(draw, vals, lambda v: len(v.shape) in (1, 2) and v.shape[0] == k
            and v.dtype != BOOL, "rhs")
  if j is None or draw(st.integers(0, 3), label="self dot") == 0:
    if len(x.shape) == 2:
      return Op("x @ x.T", (i,), lambda a: jnp.matmul(a, jnp.transpose(a)), not _is_float(x.dtype))
    return Op("dot(x, x)", (i,), lambda a: jnp.dot(a, a), not _is_float(x.dtype))
  name = draw(st.sampled_from(["dot", "matmul"]), label="dot kind")
  exact = not (_is_float(x.dtype) or _is_float(vals[j].dtype))
  return Op(name, (i, j), jnp.dot if name == "dot" else jnp.matmul, exact)


def _op_concatenate(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) >= 1, "first")
  if i is None:
    return None
  x = vals[i]
  axis = draw(st.integers(0, len(x.shape) - 1), label="axis")

  def fits(v):
    return (len(v.shape) == len(x.shape) and v.dtype == x.dtype
            and all(a == b for d, (a, b) in enumerate(zip(v.shape, x.shape)) if d != axis))
  others = [j for j, v in enumerate(vals) if fits(v)]
  rest = draw(st.lists(st.sampled_from(others), min_size=1, max_size=2), label="others")
  return Op(f"concatenate[axis={axis}]", (i, *rest),
            lambda *xs, a=axis: jnp.concatenate(xs, axis=a))


def _op_convert(draw, vals):
  i = _recent(draw, vals)
  v = vals[i]
  targets = [F32, BF16, I32, U8, BOOL]
  if not v.exact:
    targets = [F32, BF16]       # float -> int/bool is a step function
  dt = draw(st.sampled_from(targets), label="dtype")
  return Op(f"astype[{dt.name}]", (i,), lambda x, dt=dt: jnp.astype(x, dt))


def _op_broadcast(draw, vals):
  i = _recent(draw, vals)
  lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2), label="lead"))
  shape = lead + vals[i].shape
  return Op(f"broadcast_to[{shape}]", (i,), lambda x, s=shape: jnp.broadcast_to(x, s))


def _op_cumsum(draw, vals):
  i = _pick(draw, vals, lambda v: len(v.shape) >= 1 and v.dtype != BOOL, "operand")
  if i is None:
    return None
  axis = draw(st.integers(0, len(vals[i].shape) - 1), label="axis")
  reverse = draw(st.booleans(), label="reverse")
  exact = not _is_float(vals[i].dtype)
  return Op(f"lax.cumsum[axis={axis}, reverse={reverse}]", (i,),
            lambda x, a=axis, r=reverse: lax.cumsum(x, a, r), exact)


_OPS = [(_op_unary, 5), (_op_binary, 6), (_op_compare, 2), (_op_where, 2), (_op_reduce, 3),
        (_op_reshape, 2), (_op_transpose, 2), (_op_slice, 2), (_op_dot, 2),
        (_op_concatenate, 1), (_op_convert, 2), (_op_broadcast, 1), (_op_cumsum, 1)]
_WEIGHTED = [f for f, w in _OPS for _ in range(w)]

_MAX_ELEMENTS = 4096


def _abstract(v: Value):
  return ourjax.ShapeDtypeStruct(v.shape, v.dtype, weak_type=v.weak)


@st.composite
def programs(draw, min_ops: int = 5, max_ops: int = 40, dtypes=INPUT_DTYPES):
  """A random ``Program`` with its ``inputs`` drawn (see the module docstring)."""
  n_in = draw(st.integers(1, 4), label="inputs")
  in_vals = []
  shape_pool = [(), (3,), (4,), (2, 3), (3, 4), (4, 3), (2, 3, 4), (1, 4), (3, 1), (5,)]
  for _ in range(n_in):
    shape = draw(st.sampled_from(shape_pool), label="input shape")
    dt = draw(st.sampled_from(dtypes), label="input dtype")
    in_vals.append(Value(shape, np.dtype(dt), False, True))
  vals = list(in_vals)
  ops = []
  n_ops = draw(st.integers(min_ops, max_ops), label="ops")
  attempts = 0
  while len(ops) < n_ops and attempts < 8 * n_ops:
    attempts += 1
    maker = draw(st.sampled_from(_WEIGHTED), label="op kind")
    op = maker(draw, vals)
    if op is None:
      continue
    operands = [vals[i] for i in op.args]
    try:
      out = ourjax.eval_shape(op.fn, *[_abstract(v) for v in operands])
    except (TypeError, ValueError):
      continue
    if int(np.prod(out.shape)) > _MAX_ELEMENTS:
      continue
    exact = all(v.exact for v in operands) if op.exact_out is None else (
        op.exact_out and all(v.exact for v in operands))
    if not _is_float(out.dtype) and not all(v.exact for v in operands):
      continue   # (an int/bool computed from an inexact float: only via a safe op, skip)
    vals.append(Value(tuple(out.shape), np.dtype(out.dtype), bool(out.weak_type), exact))
    ops.append(op)
  n = len(vals)
  used = {i for op in ops for i in op.args}
  sinks = [i for i in range(len(in_vals), n) if i not in used]
  outputs = sorted(set(sinks[-3:] + [n - 1]))
  seed = draw(st.integers(0, 2 ** 31 - 1), label="seed")
  rng = np.random.RandomState(seed)
  inputs = [input_value(rng, v.shape, v.dtype) for v in in_vals]
  return Program(in_vals, ops, outputs, inputs)


# ------------------------------------------------------------------------------------------------
# Comparing results


def tolerance(dtype) -> float:
  dt = np.dtype(dtype)
  if dt in (BF16, np.dtype(np.float16)):
    return 2e-2
  if dt == np.dtype(np.float64):
    return 1e-12
  return 1e-5


def assert_outputs_close(actual, expected, context=""):
  """Integers/booleans exactly; floats (same dtype and shape) to a tolerance relative to the
  output's scale, with NaNs and infinities in the same places."""
  assert len(actual) == len(expected), context
  for k, (a, e) in enumerate(zip(actual, expected)):
    what = f"{context} output {k}"
    a_aval, e_aval = ourjax.core.get_aval(a), ourjax.core.get_aval(e)
    assert a_aval == e_aval, f"{what}: {a_aval} != {e_aval}"
    a, e = np.asarray(a), np.asarray(e)
    if not _is_float(a.dtype):
      np.testing.assert_array_equal(a, e, err_msg=what)
      continue
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a64), np.isnan(e64), err_msg=f"{what}: NaNs")
    fin = np.isfinite(e64)
    np.testing.assert_array_equal(a64[~fin & ~np.isnan(e64)], e64[~fin & ~np.isnan(e64)],
                                  err_msg=f"{what}: infinities")
    tol = tolerance(a.dtype)
    scale = max(1.0, float(np.max(np.abs(e64[fin]))) if fin.any() else 1.0)
    np.testing.assert_allclose(a64[fin], e64[fin], rtol=tol, atol=tol * scale, err_msg=what)
