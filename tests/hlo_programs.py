"""Random HLO programs for property tests.

``programs()`` is a hypothesis strategy of ``(module, args)``: a verified module whose entry is a
DAG of ``min_ops``..``max_ops`` instructions over small shapes and mixed element types
(elementwise ops with scalar broadcasts, reductions, reshapes, transposes, slices, dots, selects,
converts, concatenates, pads, reverses, iotas), salted with the patterns the optimisation passes
look for (``x*1``, ``x+(-0.0)``, division by powers of two, double negation, chains of reshapes
/transposes/slices/converts, constant-only subexpressions, repeated subexpressions, dots with
size-1 contractions or transposed operands, dead code), and arguments full of special values
(NaN, +-inf, +-0, extremes). Any pass that is meant to preserve semantics must leave the
reference result bitwise unchanged on these programs.

``random_array(rng, dtype, shape)`` and ``assert_bitwise_equal(a, b)`` are reusable helpers.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from ourjax.backends import reference_ops as rops
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation, to_dtype

FLOAT_TYPES = ("f32", "bf16", "f16")
INT_TYPES = ("s32", "u8", "s8")
ALL_TYPES = FLOAT_TYPES + INT_TYPES + ("pred",)

_FLOAT_UNARY = ("abs", "negate", "sign", "floor", "ceil", "round-nearest-even",
                "round-nearest-afz", "exponential", "log", "sqrt", "tanh", "sine", "cosine",
                "logistic", "exponential-minus-one", "log-plus-one", "rsqrt", "atan", "cbrt")
_INT_UNARY = ("abs", "negate", "sign", "not", "popcnt", "count-leading-zeros")
_FLOAT_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                 "remainder", "atan2")
_INT_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder",
               "and", "or", "xor", "shift-left", "shift-right-logical",
               "shift-right-arithmetic", "power")
_PRED_BINARY = ("and", "or", "xor", "maximum", "minimum", "add", "multiply")


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------

def random_array(rng: np.random.Generator, dtype, shape) -> np.ndarray:
  """Random values of ``dtype``, about a third of them special (NaN, +-inf, +-0, the extremes
  of the type, tiny and huge magnitudes) for floats, or the extremes for integers."""
  dt = to_dtype(dtype)
  n = math.prod(shape)
  if dt == np.bool_:
    return rng.random(shape) < 0.5
  if rops.is_integer(dt):
    info = np.iinfo(dt)
    vals = rng.integers(-8, 9, n)
    wide = rng.integers(info.min, int(info.max) + 1, n, dtype=np.int64 if dt.itemsize < 8 else dt)
    special = rng.choice(np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2,
                                   dt.itemsize * 8], dtype=np.int64), n)
    pick = rng.random(n)
    out = np.where(pick < 0.5, vals, np.where(pick < 0.75, wide, special))
    return out.astype(np.int64).astype(dt).reshape(shape)
  finfo = ml_dtypes.finfo(dt)
  vals = np.round(rng.standard_normal(n) * 4, 2)
  wide = rng.standard_normal(n) * np.exp(rng.uniform(-10, 10, n))
  special = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5,
                                 float(finfo.max), -float(finfo.max), float(finfo.tiny),
                                 float(finfo.tiny) / 4]), n)
  pick = rng.random(n)
  out = np.where(pick < 0.45, vals, np.where(pick < 0.65, wide, special))
  with np.errstate(all="ignore"):
    return out.astype(np.float64).astype(dt).reshape(shape)


def assert_bitwise_equal(a, b, context: str = "") -> None:
  """Same dtype, shape and bits; any NaN equals any NaN."""
  a, b = np.asarray(a), np.asarray(b)
  assert a.dtype == b.dtype, f"{context}: dtype {a.dtype} != {b.dtype}"
  assert a.shape == b.shape, f"{context}: shape {a.shape} != {b.shape}"
  if rops.is_float(a.dtype) or rops.is_complex(a.dtype):
    an, bn = np.isnan(a), np.isnan(b)
    assert np.array_equal(an, bn), f"{context}: NaN positions differ\n{a}\n{b}"
    ua = np.ascontiguousarray(np.where(an, np.zeros((), a.dtype), a))
    ub = np.ascontiguousarray(np.where(bn, np.zeros((), b.dtype), b))
    bits = f"u{a.dtype.itemsize}" if not rops.is_complex(a.dtype) else f"u{a.dtype.itemsize // 2}"
    ok = np.array_equal(ua.view(bits), ub.view(bits))
  else:
    ok = np.array_equal(a, b)
  assert ok, f"{context}: values differ\n{a!r}\n{b!r}"


# ---------------------------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------------------------

class _Gen:
  def __init__(self, draw, module: Module, b: Builder):
    self.draw = draw
    self.m = module
    self.b = b
    self.values = []
    self.param_shapes = []

  # -- helpers ---------------------------------------------------------------------------------
  def choice(self, xs):
    return self.draw(st.sampled_from(list(xs)))

  def coin(self, p=0.5):
    return self.draw(st.integers(0, 99)) < p * 100

  def dims(self, max_rank=3):
    rank = self.draw(st.integers(0, max_rank))
    d = [self.draw(st.integers(1, 4)) for _ in range(rank)]
    if rank and self.coin(0.05):
      d[self.draw(st.integers(0, rank - 1))] = 0
    return tuple(d)

  def param(self, dtype, dims):
    p = self.b.parameter(Shape(dtype, dims))
    self.param_shapes.append(p.shape)
    self.values.append(p)
    return p

  def pick(self, pred=lambda v: True, recent=True):
    cands = [v for v in self.values if pred(v)]
    if not cands:
      return None
    if recent and self.coin(0.6):
      cands = cands[-6:]
    return self.choice(cands)

  def kind(self, v):
    dt = v.dtype
    return "pred" if dt == np.bool_ else "float" if rops.is_float(dt) else "int"

  def full(self, value, like):
    """A constant shaped like ``like``: a broadcast scalar or a full literal."""
    if like.shape.is_scalar or self.coin(0.6):
      return self.b.full(value, like.shape)
    with np.errstate(all="ignore"):
      arr = np.full(like.dims, np.asarray(value).astype(like.dtype), like.dtype)
    return self.b.constant(arr, like.dtype)

  def same_shape(self, x):
    y = self.pick(lambda v: v.shape == x.shape and v is not x)
    if y is not None and self.coin(0.7):
      return y
    r = self.coin(0.5)
    if r:
      return self.param(x.dtype, x.dims)
    # a broadcast scalar: from a constant, a parameter or a reduction
    s = self.b.constant(random_array(np.random.default_rng(self.draw(st.integers(0, 99))),
                                     x.dtype, ()), x.dtype) if self.coin(0.5) else \
        self.param(x.dtype, ())
    return self.b.broadcast(s, x.dims, ()) if x.dims else s

  def add(self, v):
    if v is not None:
      self.values.append(v)
    return v

  # -- op kinds --------------------------------------------------------------------------------
  def op_unary(self):
    x = self.pick()
    k = self.kind(x)
    if k == "pred":
      return self.b.not_(x)
    ops = _FLOAT_UNARY if k == "float" else _INT_UNARY
    op = self.choice(ops)
    if op == "negate" and self.coin(0.3):
      return self.b.negate(self.b.negate(x))  # --x
    return self.b.emit(op, (x,))

  def op_binary(self):
    x = self.pick()
    k = self.kind(x)
    ops = {"float": _FLOAT_BINARY, "int": _INT_BINARY, "pred": _PRED_BINARY}[k]
    op = self.choice(ops)
    y = self.same_shape(x)
    if self.coin(0.5):
      x, y = y, x
    return self.b.emit(op, (x, y))

  def op_identity_pattern(self):
    """x*1, 1*x, x+(-0.0), x+0.0, x-0, (-0.0)-x, x/1, x/2^k, x/3, pow(x, c), x*-1, x*0, x&~0,
    x|0, x^0, max(x, x), select(const, a, b), select(p, a, a)"""
    x = self.pick(lambda v: v.dtype != np.bool_)
    if x is None:
      return None
    k = self.kind(x)
    b = self.b
    pat = self.choice(["mul1", "mul1l", "addm0", "add0", "sub0", "m0sub", "div1", "divp2", "div3",
                       "pow", "mulm1", "mul0", "and1", "or0", "xor0", "maxself", "select",
                       "selectsame"])
    if pat == "mul1":
      return b.multiply(x, self.full(1, x))
    if pat == "mul1l":
      return b.multiply(self.full(1, x), x)
    if pat == "addm0":
      return b.add(x, self.full(-0.0 if k == "float" else 0, x))
    if pat == "add0":
      return b.add(self.full(0, x), x)
    if pat == "sub0":
      return b.subtract(x, self.full(0, x))
    if pat == "m0sub":
      return b.subtract(self.full(-0.0 if k == "float" else 0, x), x)
    if pat == "div1":
      return b.divide(x, self.full(1, x))
    if pat == "divp2":
      c = self.choice([2.0, 0.5, 4.0, -8.0, 0.25, 2.0 ** 14, 2.0 ** -14]) if k == "float" else 2
      return b.divide(x, self.full(c, x))
    if pat == "div3":
      return b.divide(x, self.full(3, x))
    if pat == "pow":
      c = self.choice([0, 1, 2, 3] + ([0.5, -1.0] if k == "float" else []))
      return b.power(x, self.full(c, x))
    if pat == "mulm1" and not rops.is_unsigned(x.dtype):
      return b.multiply(self.full(-1, x), x)
    if pat == "mul0":
      return b.multiply(x, self.full(0, x))
    if pat in ("and1", "or0", "xor0") and k == "int":
      op = {"and1": "and", "or0": "or", "xor0": "xor"}[pat]
      return b.emit(op, (x, self.full(-1 if pat == "and1" else 0, x)))
    if pat == "maxself":
      return b.maximum(x, x)
    if pat == "select":
      val = self.coin()
      if x.shape.is_scalar or self.coin(0.6):
        p = b.full(val, x.shape.with_dtype(np.bool_))
      else:
        p = b.constant(np.full(x.dims, val, np.bool_))
      return b.select(p, x, self.same_shape(x))
    if pat == "selectsame":
      p = self.pick(lambda v: v.dtype == np.bool_ and v.dims == x.dims)
      if p is None:
        p = b.compare(x, self.same_shape(x), self.choice(["LT", "EQ", "NE", "GE"]))
      return b.select(p, x, x)
    return b.add(x, x)

  def op_compare_select(self):
    x = self.pick(lambda v: v.dtype != np.bool_) or self.pick()
    y = self.same_shape(x)
    p = self.b.compare(x, y, self.choice(["EQ", "NE", "LT", "LE", "GT", "GE"]),
                       total_order=rops.is_float(x.dtype) and self.coin(0.2))
    if self.coin(0.3):
      return p
    if self.coin(0.2):
      p = self.b.not_(p)
    return self.b.select(p, x, self.same_shape(x))

  def op_clamp(self):
    x = self.pick(lambda v: v.dtype != np.bool_)
    if x is None:
      return None
    lo = self.b.constant(random_array(np.random.default_rng(1), x.dtype, ()), x.dtype)
    hi = self.b.constant(random_array(np.random.default_rng(2), x.dtype, ()), x.dtype)
    return self.b.clamp(lo, x, hi)

  def op_convert(self):
    x = self.pick()
    y = self.b.convert(x, self.choice(ALL_TYPES))
    if self.coin(0.5):
      y = self.b.convert(y, self.choice(ALL_TYPES + (x.dtype,)))
    return y

  def op_reshape(self):
    x = self.pick()
    n = x.shape.size
    if n == 0:
      return self.b.reshape(x, (0,) + (1,) * self.draw(st.integers(0, 2)))
    factors = []
    rest = n
    for f in (2, 3, 2, 5, 7):
      while rest % f == 0 and self.coin(0.5):
        factors.append(f)
        rest //= f
    if rest > 1:
      factors.append(rest)
    dims = [d for d in factors] + [1] * self.draw(st.integers(0, 1))
    perm = self.draw(st.permutations(dims))
    y = self.b.reshape(x, tuple(perm))
    if self.coin(0.3):
      y = self.b.reshape(y, x.dims if self.coin(0.5) else (n,))
    return y

  def op_transpose(self):
    x = self.pick(lambda v: v.shape.rank >= 2) or self.pick()
    perm = tuple(self.draw(st.permutations(range(x.shape.rank))))
    y = self.b.transpose(x, perm)
    if self.coin(0.4):
      y = self.b.transpose(y, tuple(self.draw(st.permutations(range(x.shape.rank)))))
    return y

  def _slice_of(self, x):
    start, limit, stride = [], [], []
    for n in x.dims:
      s = self.draw(st.integers(0, n))
      l = self.draw(st.integers(s, n))
      start.append(s)
      limit.append(l)
      stride.append(self.draw(st.integers(1, 3)))
    return self.b.slice(x, start, limit, stride)

  def op_slice(self):
    x = self.pick(lambda v: v.shape.rank >= 1) or self.pick()
    y = self._slice_of(x)
    if self.coin(0.4):
      y = self._slice_of(y)
    return y

  def op_broadcast(self):
    x = self.pick(lambda v: v.shape.rank <= 2)
    if x is None:
      return None
    extra = self.draw(st.integers(0, 2))
    rank = x.shape.rank + extra
    positions = sorted(self.draw(st.permutations(range(rank)))[:x.shape.rank])
    dims = [self.draw(st.integers(1, 3)) for _ in range(rank)]
    for i, p in enumerate(positions):
      dims[p] = x.dims[i]
    return self.b.broadcast(x, dims, positions)

  def op_reduce(self):
    x = self.pick(lambda v: v.shape.rank >= 1)
    if x is None:
      return None
    k = self.kind(x)
    op = self.choice({"float": ["add", "maximum", "minimum", "multiply"],
                      "int": ["add", "maximum", "minimum", "multiply", "or", "xor"],
                      "pred": ["and", "or"]}[k])
    inits = {"add": 0, "multiply": 1, "or": 0, "xor": 0, "and": True,
             "maximum": -np.inf if k == "float" else np.iinfo(x.dtype).min if k == "int" else 0,
             "minimum": np.inf if k == "float" else np.iinfo(x.dtype).max if k == "int" else 1}
    init = inits[op] if self.coin(0.8) else (-0.0 if k == "float" else 3)
    if k == "pred":
      init = bool(init)
    dims = self.draw(st.lists(st.integers(0, x.shape.rank - 1), min_size=1,
                              max_size=x.shape.rank, unique=True))
    comp = scalar_computation(self.m, op, x.dtype)
    with np.errstate(all="ignore"):
      c = self.b.constant(np.asarray(init).astype(x.dtype), x.dtype)
    r = self.b.reduce(x, c, dims, comp)
    if r.shape.rank == 0 and self.coin(0.5):  # sink a scalar into elementwise use
      big = self.pick(lambda v: v.dtype == x.dtype and v.shape.rank >= 1)
      if big is not None:
        return self.b.emit(self.choice(["add", "maximum", "multiply"]),
                           (big, self.b.broadcast(r, big.dims, ())))
    return r

  def op_dot(self):
    x = self.pick(lambda v: v.dtype != np.bool_ and 1 <= v.shape.rank <= 3)
    if x is None:
      return None
    rank = x.shape.rank
    dims = list(range(rank))
    nc = self.draw(st.integers(0, min(2, rank)))
    contract = self.draw(st.permutations(dims))[:nc]
    rest = [d for d in dims if d not in contract]
    nb = self.draw(st.integers(0, min(1, len(rest))))
    batch = rest[:nb]
    rhs_free = [self.draw(st.integers(1, 3)) for _ in range(self.draw(st.integers(0, 2)))]
    # rhs laid out as a random permutation of (batch, contracting, free)
    parts = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
        [("f", i) for i in range(len(rhs_free))]
    order = self.draw(st.permutations(parts))
    rdims, rb, rc = [], [None] * nb, [None] * nc
    for pos, (kind, i) in enumerate(order):
      if kind == "b":
        rdims.append(x.dims[batch[i]])
        rb[i] = pos
      elif kind == "c":
        rdims.append(x.dims[contract[i]])
        rc[i] = pos
      else:
        rdims.append(rhs_free[i])
    y = self.pick(lambda v: v.shape == Shape(x.dtype, rdims) and v is not x) or \
        self.param(x.dtype, rdims)
    lhs, lb, lc = x, batch, contract
    if self.coin(0.4) and rank >= 2:  # feed the dot through a transpose
      perm = tuple(self.draw(st.permutations(range(rank))))
      lhs = self.b.transpose(x, perm)
      inv = [perm.index(d) for d in range(rank)]
      lb, lc = [inv[d] for d in batch], [inv[d] for d in contract]
    pet = None
    if x.dtype in (to_dtype("f16"), to_dtype("bf16")) and self.coin(0.5):
      pet = "f32"
    return self.b.dot(lhs, y, lc, rc, lb, rb, preferred_element_type=pet)

  def op_outer_dot(self):
    """A dot with one size-1 contracting dimension."""
    x = self.pick(lambda v: v.dtype != np.bool_ and v.shape.rank <= 2)
    if x is None:
      return None
    lhs = self.b.reshape(x, x.dims + (1,))
    y = self.param(x.dtype, (1, self.draw(st.integers(1, 3))))
    return self.b.dot(lhs, y, (x.shape.rank,), (0,))

  def op_concatenate(self):
    x = self.pick(lambda v: v.shape.rank >= 1)
    if x is None:
      return None
    d = self.draw(st.integers(0, x.shape.rank - 1))
    others = [v for v in self.values if v.dtype == x.dtype and v.shape.rank == x.shape.rank and
              all(a == b for i, (a, b) in enumerate(zip(v.dims, x.dims)) if i != d)]
    ops = [x] + [self.choice(others) for _ in range(self.draw(st.integers(0, 2)))]
    return self.b.concatenate(ops, d)

  def op_pad(self):
    x = self.pick(lambda v: v.shape.rank >= 1)
    if x is None:
      return None
    cfg = []
    for n in x.dims:
      interior = self.draw(st.integers(0, 2))
      core = n + max(n - 1, 0) * interior
      lo = self.draw(st.integers(-core, 2))
      hi = self.draw(st.integers(-(core + lo) if core + lo > 0 else 0, 2))
      if self.coin(0.3):
        lo, hi, interior = 0, 0, 0
      cfg.append((lo, hi, interior))
    with np.errstate(all="ignore"):
      v = self.b.constant(random_array(np.random.default_rng(3), x.dtype, ()), x.dtype)
    return self.b.pad(x, v, cfg)

  def op_reverse(self):
    x = self.pick(lambda v: v.shape.rank >= 1)
    if x is None:
      return None
    dims = self.draw(st.lists(st.integers(0, x.shape.rank - 1), unique=True, max_size=2))
    y = self.b.reverse(x, dims)
    if self.coin(0.3):
      y = self.b.reverse(y, dims)
    return y

  def op_iota(self):
    d = self.dims(2) or (3,)
    return self.b.iota(Shape(self.choice(FLOAT_TYPES + INT_TYPES), d),
                       self.draw(st.integers(0, len(d) - 1)))

  def op_constant_expr(self):
    """An expression of constants only (constant folding)."""
    dt = self.choice(FLOAT_TYPES + INT_TYPES)
    d = self.dims(2)
    rng = np.random.default_rng(self.draw(st.integers(0, 999)))
    a = self.b.constant(random_array(rng, dt, d), dt)
    c = self.b.constant(random_array(rng, dt, d), dt)
    op = self.choice(["add", "multiply", "maximum", "subtract"])
    e = self.b.emit(op, (a, c))
    x = self.pick(lambda v: v.shape == e.shape)
    return self.b.emit(op, (x, e)) if x is not None and self.coin(0.5) else e

  def op_repeat(self):
    """Re-emit an earlier (non-parameter) instruction with the same operands (CSE)."""
    cands = [v for v in self.values if v.opcode not in ("parameter",)]
    if not cands:
      return None
    v = self.choice(cands[-8:])
    return self.b.emit(v.opcode, v.operands, dict(v.attrs), v.shape)

  def op_dynamic_slice(self):
    x = self.pick(lambda v: v.shape.rank >= 1)
    if x is None:
      return None
    idx = [self.b.constant(self.draw(st.integers(-2, 5)), "s32") for _ in x.dims]
    sizes = [self.draw(st.integers(0, n)) for n in x.dims]
    return self.b.dynamic_slice(x, idx, sizes)

  OPS = [("op_unary", 10), ("op_binary", 14), ("op_identity_pattern", 18),
         ("op_compare_select", 5), ("op_clamp", 2), ("op_convert", 6), ("op_reshape", 5),
         ("op_transpose", 5), ("op_slice", 5), ("op_broadcast", 4), ("op_reduce", 6),
         ("op_dot", 5), ("op_outer_dot", 2), ("op_concatenate", 3), ("op_pad", 3),
         ("op_reverse", 2), ("op_iota", 1), ("op_constant_expr", 3), ("op_repeat", 4),
         ("op_dynamic_slice", 2)]


@st.composite
def programs(draw, min_ops: int = 5, max_ops: int = 40, dtypes=ALL_TYPES):
  """A hypothesis strategy of ``(module, args)``; see the module docstring."""
  m = Module("random")
  b = Builder(m, "main")
  g = _Gen(draw, m, b)
  for _ in range(draw(st.integers(1, 3))):
    g.param(draw(st.sampled_from(list(dtypes))), g.dims())
  names = [n for n, w in _Gen.OPS for _ in range(w)]
  n_ops = draw(st.integers(min_ops, max_ops))
  while len(b.computation.instructions) < n_ops:
    kind = draw(st.sampled_from(names))
    v = getattr(g, kind)()
    g.add(v)
  # Return most unused values, so that most of the program is live (and checked).
  leaves = [v for v in g.values if not v.users and v.opcode != "parameter"] or g.values[-1:]
  k = draw(st.integers(1, min(8, len(leaves))))
  outs = leaves[-k:]
  root = outs[0] if k == 1 and draw(st.booleans()) else b.tuple(outs)
  m.entry = b.build(root)
  seed = draw(st.integers(0, 2 ** 32 - 1))
  rng = np.random.default_rng(seed)
  args = [random_array(rng, s.dtype, s.dims) for s in g.param_shapes]
  return m, args
