"""Differential fuzzing: random programs over ourjax's primitives, run every way ourjax can run
them and compared with the reference backend (the NumPy oracle).

    from hypothesis import given
    from ourjax import fuzzing

    @given(fuzzing.programs())
    def test_fuzz(prog):
      fuzzing.check(prog)          # raises Mismatch naming the mode, the output and the values

A ``Program`` is Python source (``prog.source``: ``def f(x0, x1): ...`` over ``jnp``/``lax``)
plus drawn inputs (``prog.inputs``, NumPy arrays), so that a failing draw prints and replays
as it is: ``prog.reproducer()`` is a standalone script.  The generator draws 1-3 inputs of
float32/float16/bfloat16/int32/bool with shapes of rank 0-3 (sizes 0, 1 and more) and values
that include inf, -inf, NaN and -0.0, then 1-8 operations: elementwise (arithmetic,
transcendental, comparisons, select) with broadcasting and Python scalars, reductions,
reshape/transpose/slice/concatenate/pad/flip, dot, gather and scatter through indexing,
sort, cumulative sums and maxima, casts among those dtypes, and cond/scan/while_loop.

``check(prog)`` runs the program

* ``reference``: ``jit(f, backend="reference")``, the oracle;
* ``eager``: op by op;
* ``jit``: ``jit(f, backend="cpu")``;
* ``grad``: the gradient of the sum of its float outputs with respect to its float32
  inputs, on the CPU backend against the reference backend (when differentiable);
* ``vmap``: over a batch of two input sets on the CPU backend, against the reference run on
  each set;

and compares dtypes and shapes exactly, integers and booleans exactly, and floats with NaNs
and infinities in the same places and finite values within a tolerance for the dtype, relative
to the output's scale.  Backends may round differently (a polynomial ``exp``, another
summation order), so the generator applies the operations that turn a last-bit difference into
a different answer (comparisons, floor, sign, float-to-int casts, and for gradients the kinks of
max/abs/sort) only to *exact* values, which every backend computes bit for bit.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

__all__ = ["Program", "programs", "check", "Mismatch", "run_mode", "MODES", "tolerance"]

F32, F16, I32, BOOL = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.bool_))
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = (F32, F16, BF16)
DTYPES = (F32, F32, F32, F16, BF16, I32, I32, BOOL)
_DT_NAME = {F32: "jnp.float32", F16: "jnp.float16", BF16: "jnp.bfloat16", I32: "jnp.int32",
            BOOL: "jnp.bool_"}
MODES = ("eager", "jit", "grad", "vmap")


def tolerance(dtype) -> float:
  dtype = np.dtype(dtype)
  if dtype == BF16:
    return 6e-2
  if dtype == F16:
    return 1e-2
  return 2e-4


class Value(NamedTuple):
  name: str
  shape: tuple
  dtype: np.dtype
  exact: bool


class Program(NamedTuple):
  source: str             # ``def f(x0, ...): ... return (...)``
  inputs: tuple           # NumPy arrays
  differentiable: bool    # the gradient is defined and continuous in what backends round
  ops: tuple              # the operation names, for statistics

  def fn(self):
    import ourjax  # noqa: F401
    import ourjax.numpy as jnp
    from ourjax import lax
    env = {"jnp": jnp, "lax": lax, "ourjax": ourjax, "np": np}
    exec(compile(self.source, "<fuzz program>", "exec"), env)
    return env["f"]

  def __repr__(self):
    ins = ", ".join(f"{_DT_NAME[a.dtype].split('.')[1]}{list(a.shape)}" for a in self.inputs)
    return f"Program({ins}):\n{self.source}"

  def reproducer(self, note: str = "") -> str:
    """A standalone script replaying this program's comparisons."""
    ins = ",\n    ".join(_array_literal(a) for a in self.inputs)
    return (f'"""A differential-fuzzing reproducer (ourjax.fuzzing).\n{note}"""\n'
            "import ml_dtypes\nimport numpy as np\nfrom numpy import array, float32, float16, "
            "int32, inf, nan\nimport ourjax\nimport ourjax.numpy as jnp\nfrom ourjax import lax, "
            "fuzzing\nbfloat16 = ml_dtypes.bfloat16\n\n"
            f"{self.source}\n"
            f"inputs = (\n    {ins},\n)\n\n"
            "prog = fuzzing.Program(SOURCE, inputs, DIFFERENTIABLE, ())\n"
            "for mode in fuzzing.MODES:\n"
            "  try:\n    fuzzing.check(prog, modes=(mode,))\n    print(mode, 'ok')\n"
            "  except fuzzing.Mismatch as e:\n    print(mode, 'MISMATCH:', e)\n"
            ).replace("SOURCE", repr(self.source)).replace("DIFFERENTIABLE",
                                                           repr(self.differentiable))


def _array_literal(a: np.ndarray) -> str:
  if a.dtype == BF16:
    return f"np.array({a.astype(np.float32).tolist()!r}, bfloat16).reshape({a.shape})"
  dt = {F32: "float32", F16: "float16", I32: "int32", BOOL: "bool"}[a.dtype]
  return f"np.array({a.tolist()!r}, {dt}).reshape({a.shape})"


# ---------------------------------------------------------------------------------------------
# Drawing


_SPECIAL = (math.inf, -math.inf, math.nan, -0.0, 0.0, 1.0)


@st.composite
def _array(draw, shape, dtype, specials=True):
  n = int(np.prod(shape, dtype=np.int64))
  if dtype == BOOL:
    vals = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return np.array(vals, np.bool_).reshape(shape)
  if dtype == I32:
    vals = draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n))
    return np.array(vals, np.int32).reshape(shape)
  el = st.floats(-8, 8, width=32).map(lambda v: float(np.float32(round(v, 2))))
  if specials:
    el = st.one_of(el, el, el, el, el, el, st.sampled_from(_SPECIAL))
  vals = draw(st.lists(el, min_size=n, max_size=n))
  return np.array(vals, np.float32).astype(dtype).reshape(shape)


_dims = st.sampled_from((0, 1, 1, 2, 2, 3, 3, 4))
_shape = st.lists(_dims, min_size=0, max_size=3).map(tuple)


class _Gen:
  """The state of one program being drawn: its values and lines."""

  def __init__(self, draw):
    self.draw = draw
    self.values: list[Value] = []
    self.lines: list[str] = []
    self.differentiable = True
    self.ops: list[str] = []

  def new(self, expr, shape, dtype, exact, op):
    name = f"v{len(self.values)}"
    self.lines.append(f"  {name} = {expr}")
    v = Value(name, tuple(int(d) for d in shape), np.dtype(dtype), bool(exact))
    self.values.append(v)
    self.ops.append(op)
    return v

  def pick(self, pred=lambda v: True):
    cands = [v for v in self.values if pred(v)]
    if not cands:
      return None
    return self.draw(st.sampled_from(cands))

  def kink(self, *vals):
    """A kink of the gradient (max, abs, sort...) applied to ``vals``: the gradient then
    depends on last-bit rounding unless they are exact."""
    if not all(v.exact for v in vals):
      self.differentiable = False


def _is_float(v):
  return v.dtype in FLOATS


def _broadcast(a, b):
  try:
    return tuple(np.broadcast_shapes(a, b))
  except ValueError:
    return None


_TRANSCENDENTAL = ("jnp.sin", "jnp.cos", "jnp.exp", "jnp.log", "jnp.tanh", "jnp.sqrt",
                   "lax.logistic", "jnp.expm1", "jnp.log1p", "jnp.arctan", "jnp.sinh")


def _op_unary(g: _Gen):
  a = g.pick()
  if _is_float(a):
    kind = g.draw(st.sampled_from(("neg", "abs", "transcendental", "transcendental",
                                   "floor", "sign", "square")))
    if kind in ("floor", "sign") and not a.exact:
      kind = "transcendental"
    if kind == "transcendental":
      fn = g.draw(st.sampled_from(_TRANSCENDENTAL))
      if fn in ("jnp.log", "jnp.sqrt", "jnp.log1p"):
        g.differentiable = False if not a.exact else g.differentiable   # grad at the pole
      return g.new(f"{fn}({a.name})", a.shape, a.dtype, False, fn)
    if kind == "abs":
      g.kink(a)
    expr = {"neg": f"-{a.name}", "abs": f"jnp.abs({a.name})", "floor": f"jnp.floor({a.name})",
            "sign": f"jnp.sign({a.name})", "square": f"{a.name} * {a.name}"}[kind]
    return g.new(expr, a.shape, a.dtype, a.exact and kind != "square", kind)
  if a.dtype == BOOL:
    return g.new(f"~{a.name}", a.shape, BOOL, a.exact, "not")
  kind = g.draw(st.sampled_from(("neg", "abs")))
  return g.new(f"-{a.name}" if kind == "neg" else f"jnp.abs({a.name})", a.shape, I32, a.exact,
               kind)


def _op_binary(g: _Gen):
  a = g.pick()
  b = g.pick(lambda v: v.dtype == a.dtype and _broadcast(v.shape, a.shape) is not None)
  if a.dtype == BOOL:
    op = g.draw(st.sampled_from(("&", "|", "^")))
    return g.new(f"{a.name} {op} {b.name}", _broadcast(a.shape, b.shape), BOOL, True, op)
  ops = ["+", "-", "*", "max", "min"] + (["/", "atan2"] if _is_float(a) else [])
  op = g.draw(st.sampled_from(ops))
  scalar = g.draw(st.sampled_from((None, None, "2.5", "-1.0", "0.0", "3")))
  if scalar is not None and op in ("+", "-", "*", "/"):
    if not _is_float(a) and "." in scalar:
      scalar = "3"
    exact = a.exact and not _is_float(a)
    return g.new(f"{a.name} {op} {scalar}", a.shape, a.dtype, exact, f"{op} scalar")
  shape = _broadcast(a.shape, b.shape)
  if op in ("max", "min"):
    g.kink(a, b)
    return g.new(f"jnp.{op}imum({a.name}, {b.name})", shape, a.dtype, a.exact and b.exact, op)
  if op == "atan2":
    return g.new(f"jnp.arctan2({a.name}, {b.name})", shape, a.dtype, False, op)
  if op == "/":
    g.differentiable = g.differentiable and a.exact and b.exact
  exact = not _is_float(a) and a.exact and b.exact
  return g.new(f"{a.name} {op} {b.name}", shape, a.dtype, exact, op)


def _op_compare(g: _Gen):
  a = g.pick(lambda v: v.exact and v.dtype != BOOL)
  if a is None:
    return None
  b = g.pick(lambda v: v.exact and v.dtype == a.dtype and
             _broadcast(v.shape, a.shape) is not None)
  op = g.draw(st.sampled_from(("<", "<=", "==", "!=", ">")))
  return g.new(f"{a.name} {op} {b.name}", _broadcast(a.shape, b.shape), BOOL, True, "compare")


def _op_select(g: _Gen):
  c = g.pick(lambda v: v.dtype == BOOL)
  if c is None:
    return None
  a = g.pick(lambda v: _broadcast(v.shape, c.shape) is not None and v.dtype != BOOL)
  if a is None:
    return None
  b = g.pick(lambda v: v.dtype == a.dtype and _broadcast(_broadcast(v.shape, c.shape) or (),
                                                         a.shape) is not None
             and _broadcast(v.shape, c.shape) is not None)
  shape = _broadcast(_broadcast(a.shape, b.shape), c.shape)
  return g.new(f"jnp.where({c.name}, {a.name}, {b.name})", shape, a.dtype, a.exact and b.exact,
               "select")


def _op_reduce(g: _Gen):
  a = g.pick(lambda v: len(v.shape) >= 1 and v.dtype != BOOL)
  if a is None:
    return None
  ax = g.draw(st.integers(0, len(a.shape) - 1))
  kinds = ["sum", "sum", "prod"] + (["max", "min"] if a.shape[ax] > 0 else []) + \
      (["mean"] if _is_float(a) and a.shape[ax] > 0 else [])
  kind = g.draw(st.sampled_from(kinds))
  keep = g.draw(st.booleans())
  shape = tuple(1 if i == ax else d for i, d in enumerate(a.shape)) if keep else \
      tuple(d for i, d in enumerate(a.shape) if i != ax)
  if kind in ("max", "min"):
    g.kink(a)
  exact = a.exact and (kind in ("max", "min") or not _is_float(a))
  return g.new(f"jnp.{kind}({a.name}, axis={ax}, keepdims={keep})", shape, a.dtype, exact,
               f"reduce_{kind}")


def _op_structural(g: _Gen):
  a = g.pick()
  nd = len(a.shape)
  kinds = ["reshape", "transpose", "expand", "broadcast"] + \
      (["slice", "stride", "concat", "pad", "flip"] if nd >= 1 else [])
  kind = g.draw(st.sampled_from(kinds))
  if kind == "reshape":
    n = int(np.prod(a.shape, dtype=np.int64))
    target = g.draw(st.sampled_from(((n,), (1, n), (n, 1)) if n else ((0,), (0, 3), (2, 0))))
    return g.new(f"{a.name}.reshape({target})", target, a.dtype, a.exact, kind)
  if kind == "transpose":
    perm = tuple(g.draw(st.permutations(range(nd))))
    return g.new(f"jnp.transpose({a.name}, {perm})", tuple(a.shape[p] for p in perm), a.dtype,
                 a.exact, kind)
  if kind == "expand":
    ax = g.draw(st.integers(0, nd))
    shape = a.shape[:ax] + (1,) + a.shape[ax:]
    return g.new(f"jnp.expand_dims({a.name}, {ax})", shape, a.dtype, a.exact, kind)
  if kind == "broadcast":
    lead = g.draw(st.sampled_from((0, 1, 2)))
    shape = (lead,) + a.shape
    return g.new(f"jnp.broadcast_to({a.name}, {shape})", shape, a.dtype, a.exact, kind)
  ax = g.draw(st.integers(0, nd - 1))
  d = a.shape[ax]
  idx = ", ".join([":"] * ax)
  pre = f"{idx}, " if idx else ""
  if kind == "slice":
    lo = g.draw(st.integers(0, d))
    hi = g.draw(st.integers(lo, d))
    shape = a.shape[:ax] + (hi - lo,) + a.shape[ax + 1:]
    return g.new(f"{a.name}[{pre}{lo}:{hi}]", shape, a.dtype, a.exact, kind)
  if kind == "stride":
    shape = a.shape[:ax] + (len(range(0, d, 2)),) + a.shape[ax + 1:]
    return g.new(f"{a.name}[{pre}::2]", shape, a.dtype, a.exact, kind)
  if kind == "concat":
    b = g.pick(lambda v: v.dtype == a.dtype and len(v.shape) == nd and
               all(x == y for i, (x, y) in enumerate(zip(v.shape, a.shape)) if i != ax))
    shape = a.shape[:ax] + (d + b.shape[ax],) + a.shape[ax + 1:]
    return g.new(f"jnp.concatenate([{a.name}, {b.name}], axis={ax})", shape, a.dtype,
                 a.exact and b.exact, kind)
  if kind == "pad":
    lo, hi = g.draw(st.integers(0, 2)), g.draw(st.integers(0, 2))
    widths = tuple((lo, hi) if i == ax else (0, 0) for i in range(nd))
    shape = a.shape[:ax] + (d + lo + hi,) + a.shape[ax + 1:]
    return g.new(f"jnp.pad({a.name}, {widths})", shape, a.dtype, a.exact, kind)
  return g.new(f"jnp.flip({a.name}, {ax})", a.shape, a.dtype, a.exact, kind)


def _op_dot(g: _Gen):
  a = g.pick(lambda v: len(v.shape) in (1, 2) and v.dtype in (F32, I32))
  if a is None:
    return None
  if len(a.shape) == 1:
    b = g.pick(lambda v: v.dtype == a.dtype and len(v.shape) == 1 and v.shape == a.shape)
    return g.new(f"jnp.dot({a.name}, {b.name})", (), a.dtype, a.dtype == I32 and a.exact and
                 b.exact, "dot")
  b = g.pick(lambda v: v.dtype == a.dtype and len(v.shape) == 2 and v.shape[0] == a.shape[1])
  if b is None:
    return g.new(f"{a.name} @ {a.name}.T", (a.shape[0], a.shape[0]), a.dtype,
                 a.dtype == I32 and a.exact, "dot")
  return g.new(f"{a.name} @ {b.name}", (a.shape[0], b.shape[1]), a.dtype,
               a.dtype == I32 and a.exact and b.exact, "dot")


def _op_index(g: _Gen):
  a = g.pick(lambda v: len(v.shape) >= 1 and v.shape[0] > 0)
  if a is None:
    return None
  d = a.shape[0]
  idx = g.draw(st.lists(st.integers(-d, d - 1), min_size=0, max_size=4))
  ind = f"jnp.array({idx}, jnp.int32)"
  kind = g.draw(st.sampled_from(("gather", "scatter_add", "scatter_set", "scatter_max")))
  if kind == "gather":
    return g.new(f"{a.name}[{ind}]", (len(idx),) + a.shape[1:], a.dtype, a.exact, kind)
  if a.dtype == BOOL:
    return g.new(f"{a.name}.at[{ind}].set(True)", a.shape, a.dtype, a.exact, "scatter_set")
  if kind == "scatter_set":
    # duplicate indices with different updates are unordered in JAX: set a constant
    return g.new(f"{a.name}.at[{ind}].set(2)", a.shape, a.dtype, a.exact, kind)
  if kind == "scatter_max":
    g.kink(a)
    return g.new(f"{a.name}.at[{ind}].max(1)", a.shape, a.dtype, a.exact, kind)
  return g.new(f"{a.name}.at[{ind}].add(1)", a.shape, a.dtype, a.exact and not _is_float(a),
               kind)


def _op_sort_cumulative(g: _Gen):
  a = g.pick(lambda v: len(v.shape) >= 1 and v.dtype != BOOL)
  if a is None:
    return None
  ax = g.draw(st.integers(0, len(a.shape) - 1))
  kind = g.draw(st.sampled_from(("sort", "cumsum", "cummax")))
  if kind == "sort":
    g.kink(a)
    return g.new(f"jnp.sort({a.name}, axis={ax})", a.shape, a.dtype, a.exact, kind)
  if kind == "cummax":
    g.kink(a)
    return g.new(f"lax.cummax({a.name}, axis={ax})", a.shape, a.dtype, a.exact, kind)
  return g.new(f"jnp.cumsum({a.name}, axis={ax})", a.shape, a.dtype,
               a.exact and not _is_float(a), kind)


def _op_cast(g: _Gen):
  a = g.pick()
  to = g.draw(st.sampled_from((F32, F16, BF16, I32, BOOL)))
  if to == a.dtype:
    return None
  if to in (I32, BOOL) and _is_float(a) and not a.exact:
    return None           # a last-bit difference could change the integer
  g.differentiable = g.differentiable and (to in FLOATS or not _is_float(a))
  if to == I32 and _is_float(a):
    return g.new(f"jnp.clip(jnp.nan_to_num({a.name}), -1000, 1000).astype(jnp.int32)",
                 a.shape, I32, True, "cast")
  exact = a.exact and (to != F32 or True)
  return g.new(f"{a.name}.astype({_DT_NAME[to]})", a.shape, to, exact, "cast")


def _op_control(g: _Gen):
  a = g.pick(lambda v: _is_float(v))
  if a is None:
    return None
  kind = g.draw(st.sampled_from(("cond", "scan", "while", "fori")))
  if kind == "cond":
    p = g.values[0]
    pred = (f"jnp.ravel({p.name})[0] > 0" if p.dtype != BOOL else f"jnp.ravel({p.name})[0]") \
        if int(np.prod(p.shape, dtype=np.int64)) else "True"
    return g.new(f"lax.cond({pred}, lambda t: jnp.sin(t) * 2, lambda t: t - 1, {a.name})",
                 a.shape, a.dtype, False, "cond")
  if kind == "fori":       # static bounds: a scan, differentiable
    return g.new(f"lax.fori_loop(0, 3, lambda i, c: c * 0.5 + 1, {a.name})", a.shape, a.dtype,
                 False, "fori")
  if kind == "while":     # (reverse mode does not go through while_loop, as in JAX)
    g.differentiable = False
    return g.new(f"lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 0.5 + 1), "
                 f"(0, {a.name}))[1]", a.shape, a.dtype, False, "while")
  if not a.shape:
    return None
  carry = f"jnp.zeros({a.shape[1:]}, {a.name}.dtype)"
  return g.new(f"lax.scan(lambda c, r: (c * 0.5 + r, c + r), {carry}, {a.name})[1]", a.shape,
               a.dtype, False, "scan")


_OPS = (_op_unary, _op_unary, _op_binary, _op_binary, _op_compare, _op_select, _op_reduce,
        _op_structural, _op_structural, _op_dot, _op_index, _op_sort_cumulative, _op_cast,
        _op_control)


@st.composite
def programs(draw, min_ops: int = 1, max_ops: int = 8, max_inputs: int = 3):
  """A strategy of ``Program``s (see the module docstring)."""
  g = _Gen(draw)
  n_in = draw(st.integers(1, max_inputs))
  inputs = []
  for k in range(n_in):
    shape = draw(_shape) if k == 0 or draw(st.booleans()) else g.values[0].shape
    dtype = draw(st.sampled_from(DTYPES))
    inputs.append(draw(_array(shape, dtype)))
    g.values.append(Value(f"x{k}", shape, dtype, True))
  n_ops = draw(st.integers(min_ops, max_ops))
  tries = 0
  while len(g.ops) < n_ops and tries < 4 * max_ops:
    tries += 1
    op = draw(st.sampled_from(_OPS))
    op(g)
  n_out = draw(st.integers(1, min(2, len(g.values))))
  outs = g.values[-n_out:]
  args = ", ".join(f"x{k}" for k in range(n_in))
  body = "\n".join(g.lines)
  conv = "".join(f"  x{k} = jnp.asarray(x{k})\n" for k in range(n_in))
  src = (f"def f({args}):\n" + conv + (body + "\n" if body else "") +
         f"  return ({', '.join(v.name for v in outs)},)\n")
  return Program(src, tuple(inputs), g.differentiable, tuple(g.ops))


# ---------------------------------------------------------------------------------------------
# Running and comparing


class Mismatch(AssertionError):
  """A mode's result differs from the reference's (the message says how)."""

  def __init__(self, mode: str, detail: str):
    super().__init__(f"[{mode}] {detail}")
    self.mode = mode


def _float_inputs(prog):
  return tuple(k for k, a in enumerate(prog.inputs) if a.dtype == F32)


def _loss(f, prog):
  import ourjax.numpy as jnp

  def loss(*xs):
    outs = f(*xs)
    total = 0.0
    for o in outs:
      if jnp.issubdtype(o.dtype, jnp.floating):
        total = total + jnp.sum(o.astype(jnp.float32))
    return total
  return loss


def _batch(prog):
  """Two input sets stacked on a new leading axis: the drawn one and a changed copy."""
  out = []
  for a in prog.inputs:
    if a.dtype == BOOL:
      b = ~a
    elif a.dtype == I32:
      b = a + 1
    else:
      b = (a.astype(np.float32) * -0.5).astype(a.dtype)
    out.append(np.stack([a, b]))
  return out


def run_mode(prog: Program, mode: str, backend: str = "cpu"):
  """The flat list of outputs of ``prog`` run in ``mode`` on ``backend`` (for ``eager``, none:
  op by op).  ``grad`` returns the gradients; ``vmap`` the batched outputs."""
  import ourjax
  f = prog.fn()
  if mode == "eager":
    return list(f(*prog.inputs))
  if mode == "jit":
    return list(ourjax.jit(f, backend=backend)(*prog.inputs))
  if mode == "grad":
    argnums = _float_inputs(prog)
    g = ourjax.jit(ourjax.grad(_loss(f, prog), argnums=argnums), backend=backend)
    return list(g(*prog.inputs))
  if mode == "vmap":
    return list(ourjax.jit(ourjax.vmap(f), backend=backend)(*_batch(prog)))
  raise ValueError(f"unknown mode {mode!r}")


def _reference(prog: Program, mode: str):
  import ourjax
  if mode in ("eager", "jit"):
    return run_mode(prog, "jit", "reference")
  if mode == "grad":
    return run_mode(prog, "grad", "reference")
  f = ourjax.jit(prog.fn(), backend="reference")
  per = [list(f(*[b[i] for b in _batch(prog)])) for i in range(2)]
  return [np.stack([np.asarray(p[k]) for p in per]) for k in range(len(per[0]))]


def applicable(prog: Program, mode: str) -> bool:
  if mode == "grad":
    return prog.differentiable and bool(_float_inputs(prog))
  return True


def compare(got, want, mode: str) -> None:
  """Raise ``Mismatch`` unless the outputs agree (see the module docstring)."""
  from ourjax import core
  if len(got) != len(want):
    raise Mismatch(mode, f"{len(got)} outputs, the reference has {len(want)}")
  for k, (a, e) in enumerate(zip(got, want)):
    a_np, e_np = np.asarray(a), np.asarray(e)
    what = f"output {k}"
    if a_np.dtype != e_np.dtype or a_np.shape != e_np.shape:
      raise Mismatch(mode, f"{what}: {a_np.dtype}{list(a_np.shape)}, reference "
                     f"{e_np.dtype}{list(e_np.shape)}")
    if hasattr(a, "aval") and hasattr(e, "aval") and \
        core.get_aval(a).weak_type != core.get_aval(e).weak_type:
      raise Mismatch(mode, f"{what}: weak_type {core.get_aval(a).weak_type}, reference "
                     f"{core.get_aval(e).weak_type}")
    if a_np.dtype not in FLOATS:
      if not np.array_equal(a_np, e_np):
        raise Mismatch(mode, f"{what}: {a_np!r} != reference {e_np!r}")
      continue
    a64, e64 = a_np.astype(np.float64), e_np.astype(np.float64)
    if not np.array_equal(np.isnan(a64), np.isnan(e64)):
      raise Mismatch(mode, f"{what}: NaNs differ: {a_np!r} vs reference {e_np!r}")
    inf = np.isinf(e64)
    if not np.array_equal(np.isinf(a64), inf) or not np.array_equal(a64[inf], e64[inf]):
      raise Mismatch(mode, f"{what}: infinities differ: {a_np!r} vs reference {e_np!r}")
    fin = np.isfinite(e64)
    tol = tolerance(a_np.dtype)
    scale = max(1.0, float(np.max(np.abs(e64[fin]))) if fin.any() else 1.0)
    bad = np.abs(a64[fin] - e64[fin]) > tol * np.abs(e64[fin]) + tol * scale
    if bad.any():
      raise Mismatch(mode, f"{what} ({a_np.dtype}): {a_np!r} vs reference {e_np!r} "
                     f"(tolerance {tol} of the scale {scale:g})")


def check(prog: Program, modes=MODES, backend: str = "cpu") -> int:
  """Run ``prog`` in each of ``modes`` (compiled for ``backend``) and compare with the
  reference backend; returns the number of comparisons made.  Raises ``Mismatch`` (or the
  mode's exception)."""
  n = 0
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for mode in modes:
      n += _check_mode(prog, mode, backend)
  return n


def _check_mode(prog: Program, mode: str, backend: str) -> int:
  """1 when ``mode`` applies to ``prog`` and agrees with the reference, 0 when it does not
  apply."""
  if not applicable(prog, mode):
    return 0
  want = _reference(prog, mode)
  try:
    got = run_mode(prog, mode, backend)
  except Exception as e:     # the reference ran: any failure here is a finding
    raise Mismatch(mode, f"raised {type(e).__name__}: {e}") from e
  compare(got, want, mode)
  return 1
