"""Cumulative reductions along one axis -- cumsum, cumprod, cummax, cummin, cumlogsumexp -- each
primitive followed by all of its rules, and ``associative_scan``, the parallel prefix scan their
derivatives are taken through.

``out[..., i, ...] = x[..., 0, ...] op ... op x[..., i, ...]`` along ``axis`` (from the other end
with ``reverse=True``).  cumsum is linear: its transpose is the cumsum in the other direction.
The JVPs of the others are, as in JAX, the JVPs of ``associative_scan`` with the binary op, so
ties in cummax/cummin split the tangent the way ``lax.max``'s JVP does inside that scan.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ourjax import dtypes
from ourjax.backends import reference_ops as rops
from ourjax.core import get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import check_dtypes, standard_primitive

# ------------------------------------------------------------------------------------------------
# associative_scan: a prefix scan with an associative binary function, in O(log n) steps of
# strided slices, one application of ``fn`` to whole arrays per step, and interleaving.


def associative_scan(fn, elems, reverse: bool = False, axis: int = 0):
  """``[e0, fn(e0, e1), fn(fn(e0, e1), e2), ...]`` along ``axis`` of every leaf of ``elems``
  (a pytree of arrays of equal length along ``axis``); ``fn`` must be associative and act
  elementwise on pytrees shaped like ``elems``."""
  from ourjax import _pytree as tree_util
  from ourjax.lax._utils import canonicalize_axis
  if not callable(fn):
    raise TypeError("lax.associative_scan: fn argument should be callable.")
  flat, tree = tree_util.tree_flatten(elems)
  if not flat:
    return elems
  ndim = get_aval(flat[0]).ndim
  axis = canonicalize_axis(axis, ndim)
  n = get_aval(flat[0]).shape[axis]
  for x in flat[1:]:
    if get_aval(x).shape[axis] != n:
      raise ValueError(f"Array inputs to associative_scan must have the same first dimension. "
                       f"(saw: {[get_aval(x).shape for x in flat]})")
  if reverse:
    flat = [_rev(x, axis) for x in flat]

  def combine(a, b):
    out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
    out_flat, out_tree = tree_util.tree_flatten(out)
    if out_tree != tree:
      raise ValueError(f"associative_scan: fn must return the structure of its inputs {tree}, "
                       f"got {out_tree}")
    return out_flat

  out = _scan(combine, flat, axis)
  if reverse:
    out = [_rev(x, axis) for x in out]
  return tree_util.tree_unflatten(tree, out)


def _scan(combine, xs, axis):
  from ourjax import lax
  n = get_aval(xs[0]).shape[axis]
  if n < 2:
    return xs
  # pair up neighbours: (x0 op x1), (x2 op x3), ...; their scan gives the odd-position results
  pairs = combine([_strided(x, 0, n - 1, axis) for x in xs],
                  [_strided(x, 1, n, axis) for x in xs])
  odd = _scan(combine, pairs, axis)
  # even positions 2, 4, ...: (result at the odd position before) op x_even
  m = get_aval(odd[0]).shape[axis]
  prev = odd if n % 2 else [lax.slice_in_dim(o, 0, m - 1, axis=axis) for o in odd]
  even = combine(prev, [_strided(x, 2, n, axis) for x in xs])
  even = [lax.concatenate([lax.slice_in_dim(x, 0, 1, axis=axis), e], axis)
          for x, e in zip(xs, even)]
  return [_interleave(e, o, axis) for e, o in zip(even, odd)]


def _strided(x, start, stop, axis):
  """Every second element of x[start:stop] along axis."""
  from ourjax import lax
  return lax.slice_in_dim(x, start, stop, stride=2, axis=axis)


def _interleave(a, b, axis):
  """[a0, b0, a1, b1, ...] along ``axis``; ``a`` has as many elements as ``b`` or one more.
  Exact (no arithmetic): both go side by side on a new axis, which is then merged."""
  from ourjax import lax
  na, nb = get_aval(a).shape[axis], get_aval(b).shape[axis]
  last = None
  if na == nb + 1:
    last = lax.slice_in_dim(a, nb, na, axis=axis)
    a = lax.slice_in_dim(a, 0, nb, axis=axis)
  shape = get_aval(a).shape
  wide = shape[:axis + 1] + (1,) + shape[axis + 1:]
  both = lax.concatenate([lax.reshape(a, wide), lax.reshape(b, wide)], axis + 1)
  out = lax.reshape(both, shape[:axis] + (2 * nb,) + shape[axis + 1:])
  if last is not None:
    out = lax.concatenate([out, last], axis)
  return out


def _rev(x, axis):
  from ourjax import lax
  return lax.rev(x, (axis,))


# ------------------------------------------------------------------------------------------------
# The primitives


def cumsum(operand, axis: int = 0, reverse: bool = False):
  return cumsum_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cumprod(operand, axis: int = 0, reverse: bool = False):
  return cumprod_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cummax(operand, axis: int = 0, reverse: bool = False):
  return cummax_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cummin(operand, axis: int = 0, reverse: bool = False):
  return cummin_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cumlogsumexp(operand, axis: int = 0, reverse: bool = False):
  aval = get_aval(operand)
  if aval.size == 0 and dtypes.is_integer(aval.dtype):
    # as JAX's: an empty integer array has nothing to accumulate and comes back as it is (a
    # non-empty one is an error: integers have no -inf)
    _cumulative_shape(aval, axis=int(axis), reverse=bool(reverse))
    from ourjax import lax
    return lax.full(aval.shape, 0, aval.dtype)
  return cumlogsumexp_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def _cumulative_shape(x, axis, reverse):
  if not 0 <= axis < x.ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of shape {x.shape}")
  return x.shape


def _accumulate(ufunc):
  """``ufunc.accumulate`` along ``axis``, from the end with ``reverse``; narrow floats are
  accumulated in float32 (as the reducers do)."""
  def impl(x, axis, reverse):
    dt = x.dtype
    if x.shape[axis] == 1:
      return x      # (one element: itself, as XLA gives it; JAX's cumsum of [-0.0] is -0.0)
    if dtypes.is_float(dt) and dt.itemsize < 4:
      x = x.astype(np.float32)
    if reverse:
      x = np.flip(x, axis)
    if x.size:      # (quietly: np.errstate costs more than a small accumulation)
      out = rops.quietly(ufunc.accumulate, x, axis=axis, dtype=x.dtype)
      if ufunc is np.add and x.dtype.kind in "fc":
        out += x.dtype.type(0)   # (XLA's sums start from +0: -0.0 sums to +0.0, as JAX)
    else:
      out = x.copy()
    if reverse:
      out = np.flip(out, axis)
    out = np.ascontiguousarray(out)
    return out if out.dtype == dt else out.astype(dt)
  return impl


def _cumulative_primitive(name, kinds, ufunc):
  p = standard_primitive(name, _cumulative_shape,
                         lambda x, axis, reverse: check_dtypes(name, [x], kinds),
                         lambda x, **_: x.weak_type)
  p.def_impl(_accumulate(ufunc))

  def batch(vals, dims, axis, reverse):
    (x,), (d,) = vals, dims
    return p.bind(x, axis=axis + (d <= axis), reverse=reverse), d
  batching.batch_rules[p] = batch
  return p


cumsum_p = _cumulative_primitive("cumsum", ("int", "float", "complex"), np.add)
cumprod_p = _cumulative_primitive("cumprod", ("int", "float", "complex"), np.multiply)
cummax_p = _cumulative_primitive("cummax", ("int", "float"), rops.maximum)
cummin_p = _cumulative_primitive("cummin", ("int", "float"), rops.minimum)
cumlogsumexp_p = _cumulative_primitive("cumlogsumexp", ("float",), np.logaddexp)

# cumsum is linear; the transpose sums the cotangents from the other end.
ad.deflinear(cumsum_p, lambda ct, x, axis, reverse: [cumsum(ct, axis, not reverse)])


def _logaddexp(a, b):
  """log(exp(a) + exp(b)) from lax ops, differentiable everywhere: at equal infinities (where
  a - b is NaN) it is a + b, whose derivative 1 + 1 is what JAX's logaddexp gives there."""
  from ourjax.lax import elementwise as ew
  amax = ew.max(a, b)
  delta = ew.sub(a, b)
  is_nan = ew.ne(delta, delta)
  # -|delta| written as min(delta, -delta) so that at a tie the gradient splits 0.5/0.5
  return ew.select_n(is_nan, ew.add(amax, ew.log1p(ew.exp(ew.min(delta, ew.neg(delta))))),
                     ew.add(a, b))


def _combine_fns():
  from ourjax.lax import elementwise as ew
  return {cumprod_p: ew.mul, cummax_p: ew.max, cummin_p: ew.min, cumlogsumexp_p: _logaddexp}


def _cumulative_jvp(primals, tangents, axis, reverse, prim):
  from ourjax.api import jvp
  (x,), (t,) = primals, tangents
  if type(t) is ad.Zero:
    out = prim.bind(x, axis=axis, reverse=reverse)
    return out, ad.Zero.from_primal_value(out)
  scan = partial(associative_scan, _combine_fns()[prim], axis=axis, reverse=reverse)
  return jvp(scan, (x,), (t,))


for _p in (cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
  ad.jvp_rules[_p] = partial(_cumulative_jvp, prim=_p)
del _p


# ------------------------------------------------------------------------------------------------
# Lowering: a scan by blocks.  A reduce-window whose window covers the whole axis, padded in
# front with the identity, gives output i as elements 0..i combined in order -- but each output
# element then reads all of the ones before it: n^2 / 2 steps a row (a cumsum along the rows of
# a 1024 x 1024 array took 3.3 s on one core, against 7 ms for XLA's scan).  Axes longer than
# ``DIRECT_MAX`` are cut into blocks of ``BLOCK``: the window scan within each block, the
# scan of the blocks' totals (the same way, recursively), and each block's elements combined
# with the total of the blocks before it -- about ``BLOCK`` steps an element.  Narrow floats
# accumulate in float32 like the impl; ``reverse`` reverses around a forward scan so the
# elements combine in the impl's order (within a block; the blocks' totals are combined with
# each block's running values, a reassociation, as in XLA's parallel scan).

#: The longest axis scanned by one window (its n^2/2 steps a row are few).
DIRECT_MAX = 16
#: The block of the longer axes: the CPU's window loop of 8 steps is unrolled and vectorizes
#: across elements, one of 16 is not (a cumsum along the rows of 1024 x 1024 f32, one AMD EPYC
#: core: 0.68 ms by blocks of 8, 9.3 ms by blocks of 16, 28 ms by 32; XLA 7.3 ms).
BLOCK = 8


def _register_lowering():
  from ourjax.lowering import hlo
  from ourjax.lowering.from_jaxpr import (_reduction_identity, is_narrow_float,
                                          register_lowering)

  def logaddexp(b, a, c):
    amax = b.maximum(a, c)
    delta = b.subtract(a, c)
    # log(exp(a) + exp(c)) = max + log1p(exp(-|a - c|)); a + c where a - c is NaN
    # (equal infinities, or a NaN operand)
    smooth = b.add(amax, b.log_plus_one(b.exponential(b.negate(b.abs(delta)))))
    return b.select(b.compare(delta, delta, "NE"), b.add(a, c), smooth)

  def logaddexp_computation(ctx, dt):
    def body(sub, params):
      return logaddexp(sub.builder, *params)
    scalar = hlo.Shape(dt, ())
    return ctx.cached_computation(("logaddexp", dt), lambda: ctx.computation(
        f"logaddexp_{hlo.dtype_name(dt)}", [scalar, scalar], body))

  def rule_for(prim):
    opcode = {cumsum_p: "add", cumprod_p: "multiply", cummax_p: "maximum",
              cummin_p: "minimum"}.get(prim)

    def rule(ctx, avals_in, avals_out, x, axis, reverse):
      b = ctx.builder
      aval = avals_in[0]
      dt = np.dtype(aval.dtype)
      acc = np.dtype(np.float32) if is_narrow_float(dt) else dt
      n = aval.shape[axis]
      if n <= 1:     # (one element: itself, as XLA gives it; JAX's cumsum of [-0.0] is -0.0)
        return x
      if acc != dt:
        x = b.convert(x, acc)
      if reverse:
        x = b.reverse(x, (axis,))
      if opcode is None:
        comp, init = logaddexp_computation(ctx, acc), np.array(-np.inf, acc)
        combine = lambda u, v: logaddexp(b, u, v)            # noqa: E731
      else:
        comp, init = ctx.scalar_computation(opcode, acc), _reduction_identity(opcode, acc)
        combine = getattr(b, opcode)        # (the builder's elementwise op of that name)

      def identity(dims):
        return b.broadcast(ctx.constant(init, acc), tuple(dims), ())

      def window(v, ax, w):
        rank = len(v.dims)
        wd = [1] * rank
        wd[ax] = w
        padding = [(0, 0)] * rank
        padding[ax] = (w - 1, 0)
        return b.reduce_window([v], [ctx.constant(init, acc)], comp, wd, padding=padding)

      def scan(v, ax):
        dims = tuple(v.dims)
        length = dims[ax]
        if length <= DIRECT_MAX:
          return window(v, ax, length)
        m = -(-length // BLOCK)
        if m * BLOCK != length:       # (the identity after the end changes no result)
          v = b.pad(v, ctx.constant(init, acc),
                    [(0, m * BLOCK - length, 0) if d == ax else (0, 0, 0)
                     for d in range(len(dims))])
        blocked = dims[:ax] + (m, BLOCK) + dims[ax + 1:]
        inner = window(b.reshape(v, blocked), ax + 1, BLOCK)
        start = [0] * len(blocked)
        start[ax + 1] = BLOCK - 1
        totals = b.reshape(b.slice(inner, start, blocked), dims[:ax] + (m,) + dims[ax + 1:])
        before = scan(totals, ax)     # the totals of blocks 0..k
        head = list(dims[:ax] + (1,) + dims[ax + 1:])
        limit = list(dims[:ax] + (m - 1,) + dims[ax + 1:])
        excl = b.concatenate([identity(head), b.slice(before, [0] * len(dims), limit)], ax)
        spread = b.broadcast(excl, blocked, [d for d in range(len(blocked)) if d != ax + 1])
        out = b.reshape(combine(spread, inner), dims[:ax] + (m * BLOCK,) + dims[ax + 1:])
        if m * BLOCK != length:
          out = b.slice(out, [0] * len(dims), dims)
        return out
      out = scan(x, axis)
      if reverse:
        out = b.reverse(out, (axis,))
      return b.convert(out, dt) if acc != dt else out
    return rule

  for p in (cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
    register_lowering(p)(rule_for(p))


_register_lowering()
