"""Algebraic simplification: local rewrites applied to a fixed point.

Every rule is a function ``rule(instr, ctx) -> replacement | None`` registered for one opcode
(or for every elementwise opcode) in ``RULES``; its first comment line, ``# x*1 -> x`` style, is
the note recorded on the module when it fires. A rule may build new instructions with
``ctx.b`` (they are appended to the computation, which is re-sorted after each sweep) but only
when it returns a replacement.

Rules are bit-exact under IEEE semantics unless ``fast_math`` is on: for example ``x + 0.0`` is
not ``x`` (``-0.0 + 0.0`` is ``+0.0``) but ``x + (-0.0)`` is; ``x * 0`` folds to 0 only for
integers; ``pow(x, 0.5)`` becomes ``sqrt(x)`` only under fast math (they differ at -0 and -inf);
``pow(x, 2)`` becomes ``x * x`` for floats of at most 32 bits, where the reference's ``pow``
(evaluated in float64 and rounded once) is exactly the rounded square.
"""
from __future__ import annotations

import numpy as np

from ourjax.backends import reference_ops as rops
from ourjax.lowering import hlo
from ourjax.lowering.hlo import Builder, Computation, Instruction, Module
# the rules' helpers (what a value is known to be, lossless conversions) and the rules that
# move reshapes, broadcasts and a grouped product's swap below elementwise ops
from ourjax.lowering.passes.simplify_sinks import (  # noqa: F401
    sink_broadcast, sink_group_transpose, sink_reshape)
from ourjax.lowering.passes.simplify_values import (  # noqa: F401
    _FLOAT_DIGITS, _FLOAT_MIN_EXP, _FLOAT_RANGE, _bits, _full, _is_float, _is_int,
    _scalar_operand, _want_bits, is_lossless_conversion, is_splat, splat_value)

#: Allow rewrites that are not bit-exact (x+0.0 -> x, pow(x, 0.5) -> sqrt, ...).
FAST_MATH = False

#: Sweeps over one computation before giving up on reaching the fixed point.
MAX_SWEEPS = 32


class Ctx:
  """What a rule gets besides the instruction: a builder appending to the computation, and the
  fast-math flag."""

  def __init__(self, comp: Computation, fast_math: bool):
    self.comp = comp
    self.b = Builder.into(comp)
    self.fast_math = fast_math


def run(module: Module, fast_math: bool | None = None) -> bool:
  """Simplify every computation of ``module`` to a fixed point; True if anything changed."""
  fast_math = FAST_MATH if fast_math is None else fast_math
  changed = False
  for comp in list(module.computations):
    changed |= _simplify_computation(module, comp, fast_math)
  return changed


def _simplify_computation(module: Module, comp: Computation, fast_math: bool) -> bool:
  changed = False
  ctx = Ctx(comp, fast_math)
  for _ in range(MAX_SWEEPS):
    swept = False
    for instr in list(comp.instructions):
      if instr.parent is not comp or (not instr.users and instr is not comp.root):
        continue  # removed, or dead (DCE's job)
      for rule in RULES.get(instr.opcode, ()) + (
          ELEMENTWISE_RULES if instr.opcode in hlo.ELEMENTWISE_OPS else ()):
        new = rule(instr, ctx)
        if new is None or new is instr:
          continue
        comp.replace_all_uses(instr, new)
        module.note("simplify", f"{instr.name} -> {new.name}: {_doc(rule)}")
        _remove_dead(comp, instr)
        swept = True
        break
    if not swept:
      break
    comp.topological_sort()
    changed = True
  return changed


def _doc(rule) -> str:
  return (rule.__doc__ or rule.__name__).strip().splitlines()[0]


def _remove_dead(comp: Computation, instr: Instruction) -> None:
  stack = [instr]
  while stack:
    i = stack.pop()
    if i.parent is comp and not i.users and i is not comp.root and i.opcode != "parameter":
      ops = list(i.operands)
      comp.remove(i)
      stack.extend(ops)


# ---------------------------------------------------------------------------------------------
# arithmetic rules
# ---------------------------------------------------------------------------------------------

def mul_one(instr, ctx):
  """x*1 -> x"""
  x, y = instr.operands
  if is_splat(y, 1):
    return x
  if is_splat(x, 1):
    return y


def mul_zero_int(instr, ctx):
  """x*0 -> 0 (integers and pred; for floats NaN*0 is NaN and -1*0 is -0)"""
  x, y = instr.operands
  if _is_float(instr.dtype) or rops.is_complex(instr.dtype):
    return None
  for z in (y, x):
    if is_splat(z, 0):
      return z if z.shape == instr.shape else _full(ctx, 0, instr.shape)


def mul_minus_one(instr, ctx):
  """x*(-1) -> -x"""
  x, y = instr.operands
  if instr.dtype == np.bool_ or rops.is_unsigned(instr.dtype):
    return None
  if is_splat(y, -1):
    return ctx.b.negate(x)
  if is_splat(x, -1):
    return ctx.b.negate(y)


def add_zero(instr, ctx):
  """x+(-0.0) -> x (x+0 -> x for integers; x+0.0 -> x only under fast math)"""
  x, y = instr.operands
  dt = instr.dtype
  exact_zero = -0.0 if (_is_float(dt) or rops.is_complex(dt)) else 0
  for a, z in ((x, y), (y, x)):
    if is_splat(z, exact_zero) or (ctx.fast_math and _is_float(dt) and is_splat(z, 0.0)):
      if rops.is_complex(dt):
        return None
      return a


def add_of_disjoint_pads(instr, ctx):
  """sum of zero-padded windows -> concatenate (the gradient of a split: each gate's part)"""
  dt = instr.dtype
  if not (_is_float(dt) or _is_int(dt)) or instr.shape.is_tuple:
    return None
  if len(instr.users) == 1 and instr.users[0].opcode == "add":
    return None                     # (the sum it is part of is rewritten whole)
  leaves, todo = [], [instr]
  while todo:
    x = todo.pop()
    if x.opcode == "add" and (x is instr or len(x.users) == 1):
      todo.extend(x.operands)
    elif x.opcode == "pad":
      leaves.append(x)
    else:
      return None
  if len(leaves) < 2:
    return None
  axis, windows = None, []
  for p in leaves:
    if p.dims != instr.dims or not is_splat(p.operands[1], 0) or (
        _is_float(dt) and np.signbit(np.asarray(splat_value(p.operands[1])))):
      return None
    moved = [d for d, c in enumerate(p.attrs["padding_config"]) if tuple(c) != (0, 0, 0)]
    if len(moved) != 1 or (axis is not None and moved[0] != axis):
      return None
    axis = moved[0]
    lo, hi, interior = p.attrs["padding_config"][axis]
    if lo < 0 or hi < 0 or interior:
      return None
    windows.append((lo, lo + p.operands[0].dims[axis], p.operands[0]))
  windows.sort(key=lambda w: w[0])
  if any(a[1] > b[0] for a, b in zip(windows, windows[1:])):
    return None                                     # overlapping windows: a real sum
  parts, at = [], 0
  for lo, hi, x in windows + [(instr.dims[axis], instr.dims[axis], None)]:
    if lo > at:                                     # no window here: zeros
      dims = list(instr.dims)
      dims[axis] = lo - at
      parts.append(_full(ctx, 0, instr.shape.with_dims(tuple(dims))))
    if x is not None:
      # (x + 0.0 + ... is x but for -0.0, which the sum turns into +0.0: kept bit-exact)
      parts.append(ctx.b.add(x, _full(ctx, 0, x.shape)) if _is_float(dt) else x)
    at = hi
  return parts[0] if len(parts) == 1 else ctx.b.concatenate(parts, axis)


def sub_zero(instr, ctx):
  """x-0 -> x (x-(-0.0) -> x only under fast math)"""
  x, y = instr.operands
  if is_splat(y, 0) and not rops.is_complex(instr.dtype):
    return x
  if ctx.fast_math and _is_float(instr.dtype) and is_splat(y, -0.0):
    return x


def zero_sub(instr, ctx):
  """(-0.0)-x -> -x (0-x -> -x for integers)"""
  x, y = instr.operands
  dt = instr.dtype
  if rops.is_complex(dt):
    return None
  zero = -0.0 if _is_float(dt) else 0
  if is_splat(x, zero) or (ctx.fast_math and _is_float(dt) and is_splat(x, 0.0)):
    return ctx.b.negate(y)


def sub_self_int(instr, ctx):
  """x-x -> 0 (integers only: inf-inf is NaN)"""
  x, y = instr.operands
  if x is y and _is_int(instr.dtype):
    return _full(ctx, 0, instr.shape)


def div_one(instr, ctx):
  """x/1 -> x"""
  x, y = instr.operands
  if is_splat(y, 1):
    return x


def div_pow2(instr, ctx):
  """x/c -> x*(1/c) for c a power of two (1/c exact, so the product rounds like the quotient)"""
  x, y = instr.operands
  dt = instr.dtype
  if not _is_float(dt) or y.opcode not in ("constant", "broadcast"):
    return None
  base = y
  while base.opcode == "broadcast":
    base = base.operands[0]
  if base.opcode != "constant" or base.value.size == 0:
    return None
  c = base.value.astype(np.float64)
  if not np.all(np.isfinite(c)) or np.any(c == 0):
    return None
  mant, _ = np.frexp(np.abs(c))
  if not np.all(mant == 0.5):
    return None
  with np.errstate(all="ignore"):
    recip = 1.0 / c
    back = recip.astype(dt)
  if not np.all(back.astype(np.float64) == recip) or np.any(back.astype(np.float64) == 0):
    return None
  new_base = ctx.b.constant(back, dt)
  r = new_base
  if y.opcode == "broadcast":  # rebuild the same broadcast chain around the reciprocal
    chain = []
    t = y
    while t.opcode == "broadcast":
      chain.append(t)
      t = t.operands[0]
    for bcast in reversed(chain):
      r = ctx.b.broadcast(r, bcast.dims, bcast.attrs["dimensions"])
  return ctx.b.multiply(x, r)


def neg_neg(instr, ctx):
  """--x -> x"""
  (x,) = instr.operands
  if x.opcode == "negate":
    return x.operands[0]


def pow_rules(instr, ctx):
  """pow(x, 1) -> x; pow(x, 0) -> 1; pow(x, 2) -> x*x; pow(x, 0.5) -> sqrt(x) (fast math)"""
  x, y = instr.operands
  dt = instr.dtype
  if rops.is_complex(dt):
    return None
  if is_splat(y, 1):
    return x
  if is_splat(y, 0):
    return _full(ctx, 1, instr.shape)
  if is_splat(y, 2) and (_is_int(dt) or dt.itemsize <= 4 or ctx.fast_math):
    return ctx.b.multiply(x, x)
  if ctx.fast_math and _is_float(dt):
    if is_splat(y, 0.5):
      return ctx.b.sqrt(x)
    if is_splat(y, -1):
      return ctx.b.divide(_full(ctx, 1, instr.shape), x)


def idempotent_self(instr, ctx):
  """max(x, x) -> x; min(x, x) -> x; x&x -> x; x|x -> x"""
  x, y = instr.operands
  if x is y:
    return x


def and_identity(instr, ctx):
  """x & true -> x; x & false -> false (all ones / zero for integers)"""
  x, y = instr.operands
  ones = True if instr.dtype == np.bool_ else -1
  for a, c in ((x, y), (y, x)):
    if is_splat(c, ones):
      return a
    if is_splat(c, 0):
      return c if c.shape == instr.shape else _full(ctx, 0, instr.shape)


def or_identity(instr, ctx):
  """x | false -> x; x | true -> true (zero / all ones for integers)"""
  x, y = instr.operands
  ones = True if instr.dtype == np.bool_ else -1
  for a, c in ((x, y), (y, x)):
    if is_splat(c, 0):
      return a
    if is_splat(c, ones):
      return c


def xor_zero(instr, ctx):
  """x ^ 0 -> x"""
  x, y = instr.operands
  if is_splat(y, 0):
    return x
  if is_splat(x, 0):
    return y


def not_not(instr, ctx):
  """!!x -> x"""
  (x,) = instr.operands
  if x.opcode == "not":
    return x.operands[0]


def abs_abs(instr, ctx):
  """abs(abs(x)) -> abs(x); abs(-x) -> abs(x) (not unsigned: there -x wraps); abs(x) -> x for
  unsigned x"""
  (x,) = instr.operands
  if rops.is_unsigned(x.dtype):
    return x
  if x.opcode == "abs" and x.shape == instr.shape:
    return x
  if x.opcode == "negate":
    return ctx.b.abs(x.operands[0])


# ---------------------------------------------------------------------------------------------
# select / convert
# ---------------------------------------------------------------------------------------------

def select_const(instr, ctx):
  """select(true, a, b) -> a; select(false, a, b) -> b; select(p, a, a) -> a"""
  p, a, b = instr.operands
  if a is b:
    return a
  if is_splat(p, True):
    return a
  if is_splat(p, False):
    return b


def select_not(instr, ctx):
  """select(!p, a, b) -> select(p, b, a)"""
  p, a, b = instr.operands
  if p.opcode == "not":
    return ctx.b.select(p.operands[0], b, a)


def convert_identity(instr, ctx):
  """convert(x) to x's own type -> x"""
  (x,) = instr.operands
  if x.dtype == instr.dtype:
    return x


def convert_convert(instr, ctx):
  """convert(convert(x)) -> convert(x) when the inner conversion is lossless"""
  (inner,) = instr.operands
  if inner.opcode != "convert":
    return None
  x = inner.operands[0]
  src, mid, dst = x.dtype, inner.dtype, instr.dtype
  if not is_lossless_conversion(src, mid):
    return None
  # int -> float -> int saturates where int -> int wraps: equal only if int -> int is exact
  if rops.is_integer(src) and not rops.is_integer(mid) and mid != np.bool_ and \
      rops.is_integer(dst) and not is_lossless_conversion(src, dst):
    return None
  return x if src == dst else ctx.b.convert(x, dst)


# ---------------------------------------------------------------------------------------------
# shape ops
# ---------------------------------------------------------------------------------------------

def reshape_identity(instr, ctx):
  """reshape(x) to x's own shape -> x"""
  (x,) = instr.operands
  if x.shape == instr.shape:
    return x


def reshape_reshape(instr, ctx):
  """reshape(reshape(x)) -> reshape(x)"""
  (x,) = instr.operands
  if x.opcode == "reshape":
    return ctx.b.reshape(x.operands[0], instr.dims)


def broadcast_scalar_through(instr, ctx):
  """reshape/transpose/slice/reverse/broadcast of broadcast(scalar) -> broadcast(scalar)"""
  x = instr.operands[0]
  s = _scalar_operand(x)
  if s is None:
    return None
  if s.shape.rank:
    s = ctx.b.reshape(s, ())
  return ctx.b.broadcast(s, instr.dims, ())


def transpose_identity(instr, ctx):
  """transpose(x, identity) -> x"""
  if list(instr.attrs["dimensions"]) == list(range(instr.shape.rank)):
    return instr.operands[0]


def transpose_transpose(instr, ctx):
  """transpose(transpose(x, p), q) -> transpose(x, p[q])"""
  (x,) = instr.operands
  if x.opcode != "transpose":
    return None
  p, q = x.attrs["dimensions"], instr.attrs["dimensions"]
  composed = tuple(p[i] for i in q)
  if composed == tuple(range(len(composed))):
    return x.operands[0]
  return ctx.b.transpose(x.operands[0], composed)


def transpose_of_dot(instr, ctx):
  """transpose(dot(a, b)) -> dot(b, a) when the transpose swaps the two operands' free
  dimensions and keeps the batch ones ((a b)^T = b^T a^T)"""
  # The product then comes out in the layout its user wants: a weight gradient dW += (x^T g)^T
  # in a scan's backward pass was a strided transposed read of the product every iteration.
  (d,) = instr.operands
  if d.opcode != "dot" or len(d.users) != 1:
    return None
  a = d.attrs
  lhs, rhs = d.operands
  nb = len(a["lhs_batch_dims"])
  nl, nr = len(hlo.dot_operand_groups(d, 0)[1]), len(hlo.dot_operand_groups(d, 1)[1])
  want = (tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)) +
          tuple(range(nb, nb + nl)))
  if tuple(instr.attrs["dimensions"]) != want or nl == 0 or nr == 0:
    return None
  new = dict(a)
  new["lhs_batch_dims"], new["rhs_batch_dims"] = a["rhs_batch_dims"], a["lhs_batch_dims"]
  new["lhs_contracting_dims"] = a["rhs_contracting_dims"]
  new["rhs_contracting_dims"] = a["lhs_contracting_dims"]
  prec = a.get("operand_precision")
  if prec is not None:
    new["operand_precision"] = tuple(reversed(prec))
  return ctx.b.emit("dot", [rhs, lhs], new, instr.shape.with_dtype(d.dtype))


def broadcast_identity(instr, ctx):
  """broadcast(x) to x's own shape -> x"""
  (x,) = instr.operands
  if x.shape == instr.shape and list(instr.attrs["dimensions"]) == list(range(x.shape.rank)):
    return x


def broadcast_broadcast(instr, ctx):
  """broadcast(broadcast(x)) -> broadcast(x)"""
  (x,) = instr.operands
  if x.opcode != "broadcast":
    return None
  inner, outer = x.attrs["dimensions"], instr.attrs["dimensions"]
  return ctx.b.broadcast(x.operands[0], instr.dims, tuple(outer[d] for d in inner))


def slice_identity(instr, ctx):
  """slice covering all of x -> x"""
  (x,) = instr.operands
  if x.shape == instr.shape and all(s == 0 for s in instr.attrs["start_indices"]) and \
      all(st == 1 or n <= 1 for st, n in zip(instr.attrs["strides"], x.dims)):
    return x


def slice_slice(instr, ctx):
  """slice(slice(x)) -> slice(x)"""
  (x,) = instr.operands
  if x.opcode != "slice":
    return None
  a, b = x.attrs, instr.attrs
  start, limit, stride = [], [], []
  for s1, st1, s2, st2, n in zip(a["start_indices"], a["strides"], b["start_indices"],
                                 b["strides"], instr.dims):
    if n == 0:  # empty: any empty slice will do
      start.append(0)
      limit.append(0)
      stride.append(1)
      continue
    s = s1 + s2 * st1
    st = st1 * st2
    start.append(s)
    stride.append(st)
    limit.append(s + (n - 1) * st + 1)
  return ctx.b.slice(x.operands[0], start, limit, stride)


def reverse_rules(instr, ctx):
  """reverse(reverse(x)) -> x; reverse over only size-1 dims -> x"""
  (x,) = instr.operands
  dims = [d for d in instr.attrs["dimensions"] if instr.dims[d] > 1]
  if not dims:
    return x
  if x.opcode == "reverse":
    inner = [d for d in x.attrs["dimensions"] if x.dims[d] > 1]
    if sorted(inner) == sorted(dims):
      return x.operands[0]


def pad_identity(instr, ctx):
  """pad with no padding -> x"""
  x = instr.operands[0]
  if all(tuple(c) == (0, 0, 0) or (c[0] == 0 and c[1] == 0 and n <= 1)
         for c, n in zip(instr.attrs["padding_config"], x.dims)):
    return x


def concat_rules(instr, ctx):
  """concatenate(x) -> x; empty operands of a concatenate are dropped"""
  d = instr.attrs["dimensions"][0]
  ops = instr.operands
  if len(ops) == 1:
    return ops[0]
  keep = [o for o in ops if o.dims[d] > 0]
  if len(keep) < len(ops) and keep:
    return keep[0] if len(keep) == 1 else ctx.b.concatenate(keep, d)


def dynamic_slice_const(instr, ctx):
  """dynamic-slice with constant starts -> slice (starts clamped as dynamic-slice does)"""
  x, *idx = instr.operands
  if not all(i.opcode == "constant" for i in idx):
    return None
  sizes = instr.attrs["dynamic_slice_sizes"]
  starts = [min(max(int(i.value), 0), n - k) for i, n, k in zip(idx, x.dims, sizes)]
  return ctx.b.slice(x, starts, [s + k for s, k in zip(starts, sizes)], [1] * len(sizes))


def gte_of_tuple(instr, ctx):
  """get-tuple-element(tuple(a, b), 1) -> b"""
  (t,) = instr.operands
  if t.opcode == "tuple":
    return t.operands[instr.attrs["index"]]


# ---------------------------------------------------------------------------------------------
# dot
# ---------------------------------------------------------------------------------------------

def dot_fold_transpose(instr, ctx):
  """dot(transpose(a), b) -> dot(a, b) with the dimension numbers mapped through the transpose"""
  a = instr.attrs
  lhs, rhs = instr.operands
  new = dict(a)
  changed = False
  ops = [lhs, rhs]
  for k, side in enumerate(("lhs", "rhs")):
    t = ops[k]
    if t.opcode != "transpose":
      continue
    perm = t.attrs["dimensions"]
    batch, contract = a[f"{side}_batch_dims"], a[f"{side}_contracting_dims"]
    free = [i for i in range(t.shape.rank) if i not in batch and i not in contract]
    mapped = [perm[i] for i in free]
    if mapped != sorted(mapped):
      continue  # the free dims would come out in another order
    new[f"{side}_batch_dims"] = tuple(perm[i] for i in batch)
    new[f"{side}_contracting_dims"] = tuple(perm[i] for i in contract)
    ops[k] = t.operands[0]
    changed = True
  if not changed:
    return None
  return ctx.b.emit("dot", ops, new)


def dot_degenerate(instr, ctx):
  """dot with size-1 (or no) contracting dims -> multiply of broadcasts (+0 so -0 sums to +0)

  Mirrors the dot's arithmetic exactly: operands converted to the accumulation type, one
  product, +0 added (the sum starts from +0), then a conversion to the result type."""
  a = instr.attrs
  lhs, rhs = instr.operands
  lc, rc = a["lhs_contracting_dims"], a["rhs_contracting_dims"]
  if any(lhs.dims[d] != 1 for d in lc):
    return None
  out = instr.dtype
  acc = rops.accumulation_dtype(lhs.dtype, rhs.dtype, out)
  if rops.is_complex(acc):
    return None
  b = ctx.b
  lb, lf, lc = hlo.dot_operand_groups(instr, 0)
  rb, rf, rc = hlo.dot_operand_groups(instr, 1)
  nb, nl, nr = len(lb), len(lf), len(rf)
  acc_shape = instr.shape.with_dtype(acc)

  def prepare(x, batch, free, contract, out_positions):
    if x.dtype != acc:
      x = b.convert(x, acc)
    order = list(batch) + list(free) + list(contract)
    if order != list(range(len(order))):
      x = b.transpose(x, order)
    kept = [x.dims[i] for i in range(len(batch) + len(free))]
    if contract:
      x = b.reshape(x, kept)
    return b.broadcast(x, acc_shape.dims, out_positions)
  l2 = prepare(lhs, lb, lf, lc, tuple(range(nb)) + tuple(range(nb, nb + nl)))
  r2 = prepare(rhs, rb, rf, rc, tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)))
  prod = b.multiply(l2, r2)
  if _is_float(acc):
    prod = b.add(prod, b.full(0.0, acc_shape))
  return prod if acc == out else b.convert(prod, out)


def _reducer_opcode(comp: Computation):
  """The opcode of a reducer ``op(p0, p1)`` (one binary op of its two parameters), else None."""
  root = comp.root
  if (len(comp.parameters) == 2 and len(root.operands) == 2 and not root.shape.is_tuple
      and set(root.operands) == set(comp.parameters)):
    return root.opcode
  return None


def reduce_of_broadcast(instr, ctx):
  """reduce(broadcast(x)) -> reduce(x) (max/min/and/or), reduce(x) * count (add)

  The dimensions a broadcast adds (or expands from size 1) that the reduction then sums carry
  ``count`` copies of each element: an add-reduction of them is the reduction of x times count
  (the multiply in the dtype: exact for integers, which wrap the same way; for floats one
  rounding instead of count - 1, and only where count is finite in the dtype), a max, min, and
  or or of them is the reduction of x alone.  x's remaining dimensions are reduced as before and
  the result broadcast back where the broadcast had added kept dimensions.  The add needs a
  zero init (it would be counted count times)."""
  if len(instr.operands) != 2:
    return None
  src, init = instr.operands
  if src.opcode != "broadcast":
    return None
  op = _reducer_opcode(instr.attrs["to_apply"])
  dt = instr.dtype
  if op not in ("add", "maximum", "minimum", "and", "or") or rops.is_complex(dt):
    return None
  (x,) = src.operands
  bdims = tuple(src.attrs["dimensions"])
  if list(bdims) != sorted(set(bdims)):
    return None
  reduced = set(instr.attrs["dimensions"])
  count, x_reduced = 1, []
  for d in reduced:
    if d not in bdims:
      count *= src.dims[d]
  for i, d in enumerate(bdims):
    if x.dims[i] != src.dims[d]:
      if d not in reduced:
        return None                      # a kept dimension expanded from size 1
      count *= src.dims[d]
    if d in reduced:
      x_reduced.append(i)
  if count == 1 or src.shape.size == 0:
    return None                          # nothing repeated, or init alone (count 0)
  if op == "add":
    zero = splat_value(init)
    if zero is None or zero != 0 or not (_is_float(dt) or _is_int(dt)):
      return None
    if _is_float(dt):
      with np.errstate(over="ignore"):
        if not np.isfinite(np.asarray(count).astype(dt)):
          return None
  b = ctx.b
  r = b.reduce(x, init, tuple(x_reduced), instr.attrs["to_apply"]) if x_reduced else x
  if not x_reduced and op != "add":
    # (the init first, as the reduction combines it; XLA's max and min are symmetric, +0
    # above -0, so the order is only for the reader)
    r = b.emit(op, [b.broadcast(init, r.dims, ()), r])
  if op == "add":
    with np.errstate(over="ignore"):
      c = np.asarray(count % (1 << 64) if _is_int(dt) else count).astype(dt)
    r = b.multiply(r, b.full(c[()], r.shape))
    if not x_reduced:
      r = b.add(r, b.broadcast(init, r.dims, ()))
  kept = [d for d in range(src.shape.rank) if d not in reduced]
  positions = tuple(kept.index(d) for i, d in enumerate(bdims) if d not in reduced)
  if r.shape == instr.shape:
    return r
  return b.broadcast(r, instr.dims, positions)


# ---------------------------------------------------------------------------------------------
# the rule table
# ---------------------------------------------------------------------------------------------

RULES: dict[str, tuple] = {
    "multiply": (mul_one, mul_zero_int, mul_minus_one),
    "add": (add_zero, add_of_disjoint_pads),
    "subtract": (sub_zero, zero_sub, sub_self_int),
    "divide": (div_one, div_pow2),
    "negate": (neg_neg,),
    "power": (pow_rules,),
    "maximum": (idempotent_self,),
    "minimum": (idempotent_self,),
    "and": (idempotent_self, and_identity),
    "or": (idempotent_self, or_identity),
    "xor": (xor_zero,),
    "not": (not_not,),
    "abs": (abs_abs,),
    "select": (select_const, select_not),
    "convert": (convert_identity, convert_convert),
    "reshape": (reshape_identity, reshape_reshape, broadcast_scalar_through),
    "transpose": (transpose_identity, transpose_transpose, transpose_of_dot,
                  broadcast_scalar_through),
    "broadcast": (broadcast_identity, broadcast_broadcast),
    "slice": (slice_identity, slice_slice, broadcast_scalar_through),
    "reverse": (reverse_rules, broadcast_scalar_through),
    "pad": (pad_identity,),
    "concatenate": (concat_rules,),
    "dynamic-slice": (dynamic_slice_const,),
    "get-tuple-element": (gte_of_tuple,),
    "dot": (dot_fold_transpose, dot_degenerate),
    "reduce": (reduce_of_broadcast,),
}

#: Rules tried on every elementwise instruction after its opcode's own rules.
ELEMENTWISE_RULES: tuple = (sink_broadcast, sink_reshape, sink_group_transpose)
