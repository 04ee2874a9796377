"""Passes over one row of f32 (``row[0:n]``) in vectors of the code target's width, for the
fused attention's online softmax (``attention.py``): ``_row_pass`` (a vector loop, then the
scalars past the last whole vector), the lane reductions, the row scaling, and
``exp(row * scale - base)`` in place with its sum.

That last one is most of an attention kernel's code (the inline vector ``exp`` of ``math.py``),
so a kernel in a module whose math is shared (``MathLib`` "shared", the CPU backend's kernel
modules) calls it instead as one process-wide function, ``ojx_m_expsum_f32(row, n, scale,
base) -> sum`` (``exp_and_sum_call``): it is compiled once per process (or read from the disk
cache) as a math library (``cpu/libraries.py``, symbol ``math:expsum:f32:4``), on the math
thread from the planning of the first attention kernel on (``prefetch_expsum``), while the
kernel is emitted and its module compiles, and every later attention program of the process
links to it.  Its module costs about as much LLVM time as the kernel's module without it
(~15 ms, 2-core test host), and the kernel's module about 30 % less than with the inline
exponential: the benchmark's attention (4x8x256x64, its GEMM library built) took 36.0 ms for
its first call against 41.0 inline, where the other core was free; where other processes
kept both cores busy, 58 ms against 44.  One call per row of scores (up to ``MAX_BK`` keys) costs nothing measurable; the
function's loop is the one the kernel inlined (the same vectors, sums and rounding).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import gemm as G
from ourjax.backends.llvm import math as M
from ourjax.backends.llvm.emitter import ForLoop, alloca_entry, i64

#: The row functions a ``MathLib`` serves (``math:<name>:f32:<nargs>``), name -> nargs.
ROW_FUNCTIONS = {"expsum": 4}


def _splat(b, c, ty):
  if isinstance(ty, ir.VectorType):
    return ir.Constant(ty, [c.constant] * ty.count) if isinstance(c, ir.Constant) else \
        G._splat(b, c, ty.count)
  return c


def _fmax(b, x, y):
  return E.intrinsic(b, "maxnum", x.type, [x, y])


def _hreduce(b, v, op):
  """``op`` over the lanes of ``v``, halving."""
  n = v.type.count
  while n > 1:
    n //= 2
    lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(E.I32, n), list(range(n))))
    hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(E.I32, n), list(range(n, 2 * n))))
    v = op(b, lo, hi)
  return b.extract_element(v, ir.Constant(E.I32, 0))


def _row_pass(b, row, n, W, step, inits, combine=None):
  """One pass over ``row[0:n]`` (f32): ``step(x, accs) -> (new x or None, accs)`` on W-lane
  vectors, then on the scalars past the last whole vector (their accumulators of their own);
  returns each accumulator as a vector, the scalar one folded into lane 0 by ``combine(b,
  vector, vector)`` (default: maxnum) for the caller's ``_hreduce``."""
  F = ir.FloatType()
  VT = ir.VectorType(F, W)
  vslots = [alloca_entry(b, VT) for _ in inits]
  sslots = [alloca_entry(b, F) for _ in inits]
  for v, s, x in zip(vslots, sslots, inits):
    b.store(ir.Constant(VT, [x] * W), v)
    b.store(ir.Constant(F, x), s)
  nv = b.udiv(n, i64(W))
  with ForLoop(b, i64(0), nv, "vec") as vl:
    p = b.bitcast(b.gep(row, [b.mul(vl.index, i64(W))], inbounds=True), VT.as_pointer())
    x = b.load(p, align=4)
    y, accs = step(x, [b.load(s) for s in vslots])
    if y is not None:
      b.store(y, p, align=4)
    for s, a in zip(vslots, accs):
      b.store(a, s)
  if isinstance(n, ir.Constant) and n.constant % W == 0:
    # (no scalars past the last whole vector: no tail loop, whose scalar copy of ``step``
    # LLVM would only delete again)
    return [b.load(v) for v in vslots]
  # (fewer than W trips: neither vectorized nor unrolled, which only made code, a third of the
  # row function's LLVM time)
  with ForLoop(b, b.mul(nv, i64(W)), n, "tail", unroll=False, vectorize=False) as tl:
    p = b.gep(row, [tl.index], inbounds=True)
    y, accs = step(b.load(p), [b.load(s) for s in sslots])
    if y is not None:
      b.store(y, p)
    for s, a in zip(sslots, accs):
      b.store(a, s)
  combine = combine or _fmax
  return [combine(b, b.load(v), b.insert_element(ir.Constant(VT, [x] * W), b.load(s),
                                                 ir.Constant(E.I32, 0)))
          for v, s, x in zip(vslots, sslots, inits)]


def _exp_and_sum(b, row, n, W, base, scale=1.0):
  """``row[j] = exp(row[j] * scale - base)`` for j < n; returns their sum (``scale`` a float,
  or a value: then always one fused multiply-add, which for 1.0 rounds as ``row[j] - base``)."""
  c = scale if isinstance(scale, ir.Value) else ir.Constant(ir.FloatType(), scale)

  def step(x, acc):
    if not isinstance(scale, ir.Value) and scale == 1.0:
      arg = b.fsub(x, _splat(b, base, x.type))
    else:
      arg = E.intrinsic(b, "fma", x.type, [x, _splat(b, c, x.type),
                                           b.fneg(_splat(b, base, x.type))])
    p = M.emit_unary(b, "exp", arg)
    return p, [b.fadd(acc[0], p, flags=["reassoc", "nsz"])]
  (acc,) = _row_pass(b, row, n, W, step, [0.0], lambda b_, v, t: b_.fadd(v, t))
  return _hreduce(b, acc, lambda b_, x, y: b_.fadd(x, y))


def _scale_row(b, row, n, W, c):
  """``row[0:n] *= c`` (f32)."""
  def step(x, acc):
    return b.fmul(x, _splat(b, c, x.type)), acc
  _row_pass(b, row, i64(n), W, step, [])


def _expsum_type():
  F = ir.FloatType()
  return ir.FunctionType(F, [F.as_pointer(), E.I64, F, F])


def define_row_function(module: ir.Module, fn: str, tag: str, name: str) -> None:
  """Define ``name``, the process-wide copy of row function ``fn`` (``ROW_FUNCTIONS``), with
  external linkage in ``module`` (``MathLib.define_all``)."""
  if fn != "expsum" or tag != "f32":
    raise ValueError(f"row_math: no row function {fn!r} for {tag}")
  f = ir.Function(module, _expsum_type(), name=name)
  for a in ("nounwind", "argmemonly"):
    f.attributes.add(a)
  f.args[0].add_attribute("noalias")
  b = ir.IRBuilder(f.append_basic_block("entry"))
  row, n, scale, base = f.args
  W = G.vector_target().lanes["f32"]
  b.ret(_exp_and_sum(b, row, n, W, base, scale))


def prefetch_expsum() -> None:
  """Start building the process-wide ``expsum`` (``cpu/libraries._prefetch_math``) on the math
  thread, when an attention kernel is planned: it then compiles while the program is emitted
  and its module compiled, not after."""
  from ourjax.backends.cpu import libraries
  libraries._prefetch_math("expsum", "f32", ROW_FUNCTIONS["expsum"])


def exp_and_sum_call(b, row, n, base, scale: float):
  """``row[j] = exp(row[j] * scale - base)`` for j < n and their sum, by a call to the
  process-wide row function where ``b``'s module shares its math (``MathLib`` "shared"),
  else None (the caller inlines ``_exp_and_sum``)."""
  lib = E.MathLib.of(b.module)
  if not lib.shared:
    return None
  f = lib.declare_row(b.module, "expsum", "f32", _expsum_type())
  F = ir.FloatType()
  return b.call(f, [row, n if isinstance(n, ir.Value) else i64(n), ir.Constant(F, scale), base])
