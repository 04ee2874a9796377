"""Vectorization (vmap) as an interpreter.

A ``BatchTracer`` holds a value with one extra dimension, at position ``batch_dim`` (or
``not_mapped`` when the value is the same for every batch element).  Each primitive's batching
rule, ``rule(vals, dims, **params) -> (out, out_dims)``, computes all batch elements at once
with primitives, so a vmapped function contains no Python loop over the batch.  Rules that need
the size of the batch (to materialize an unbatched operand, or to batch a sub-jaxpr) are
registered with ``register_rule_with_axis_size`` and get it as ``axis_size=``.

The helpers at the bottom cover the common shapes of rule: ``defvectorized`` (elementwise
unary: the batch dimension passes through), ``defbroadcasting`` (elementwise n-ary, whose
rank-0 operands broadcast), ``defreducer`` (reductions over ``axes``).  ``vmap_jaxpr`` batches a
closed jaxpr (for primitives that carry one, like ``pjit``).

The user-facing ``vmap`` (``ourjax/api.py``) flattens pytrees and checks axes and sizes, then
calls ``batch`` here.
"""
from __future__ import annotations

import threading

from typing import Callable, NamedTuple, Sequence

import numpy as np

from ourjax import core
from ourjax.core import Trace, Tracer, full_raise, get_aval, new_main

batch_rules: dict = {}
not_mapped = None


class AxisData(NamedTuple):
  """What a vmap level knows about its axis: its name (or None), its size, and the mesh axis
  name(s) of ``spmd_axis_name`` (accepted for compatibility; ourjax has no SPMD partitioner)."""
  name: object
  size: int
  spmd_name: object = None


class BatchTracer(Tracer):
  __slots__ = ("val", "batch_dim")

  def __init__(self, trace, val, batch_dim):
    self._trace = trace
    self.val = val
    self.batch_dim = batch_dim

  @property
  def aval(self):
    aval = get_aval(self.val)
    if self.batch_dim is not_mapped:
      return aval
    shape = aval.shape[:self.batch_dim] + aval.shape[self.batch_dim + 1:]
    return aval.update(shape=shape)

  def full_lower(self):
    if self.batch_dim is not_mapped:
      return core.full_lower(self.val)
    return self


class BatchTrace(Trace):
  __slots__ = ()

  @property
  def axis_data(self) -> AxisData:
    return self.main.payload

  @property
  def axis_size(self) -> int:
    return self.main.payload.size

  def pure(self, val):
    return BatchTracer(self, val, not_mapped)

  lift = pure

  def process_primitive(self, primitive, tracers, params):
    vals = [t.val for t in tracers]
    dims = [t.batch_dim for t in tracers]
    if primitive in _rules_wanting_axis:
      # named-axis collectives: the rule acts when the collective names this vmap's axis,
      # batched or not
      outs, out_dims = batch_rules[primitive](vals, dims, axis_data=self.axis_data, **params)
    elif all(d is not_mapped for d in dims):
      return primitive.bind(*vals, **params)
    else:
      rule = batch_rules.get(primitive)
      if rule is None:
        raise NotImplementedError(f"Batching rule for '{primitive.name}' not implemented")
      if primitive in _rules_wanting_size:
        # the rules that batch a body (a jit call's, a loop's...) are these: it is batched
        # along this same named axis (_axis_for)
        prev = getattr(_current, "axis", None)
        _current.axis = self.axis_data
        try:
          outs, out_dims = rule(vals, dims, axis_size=self.axis_size, **params)
        finally:
          _current.axis = prev
      else:
        outs, out_dims = rule(vals, dims, **params)
    if primitive.multiple_results:
      return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]
    return BatchTracer(self, outs, out_dims)


# Rules registered here also receive ``axis_size=`` (e.g. to materialize unbatched operands).
_rules_wanting_size: set = set()
# Rules registered here receive ``axis_data=`` and are called even when no operand is batched.
_rules_wanting_axis: set = set()
# The axis of the sized batching rule running now: a jaxpr batched inside it (a jit call's, a
# loop body's) is batched along the same named axis, so that its collectives find it.
_current = threading.local()


def register_rule_with_axis(primitive, rule):
  batch_rules[primitive] = rule
  _rules_wanting_axis.add(primitive)


def _axis_for(axis_size: int) -> AxisData:
  cur = getattr(_current, "axis", None)
  if cur is not None and cur.size == axis_size:
    return cur
  return AxisData(None, axis_size)


def register_rule_with_axis_size(primitive, rule):
  batch_rules[primitive] = rule
  _rules_wanting_size.add(primitive)


# ------------------------------------------------------------------------------------------------
# Running a flat function over a batch


def _check_output_type(x):
  if isinstance(x, Tracer):
    return
  try:
    get_aval(x)
  except TypeError:
    raise TypeError(f"Output from batched function {x!r} with type {type(x)} is not a valid "
                    "JAX type") from None


def trace_batched(f: Callable, in_dims: Sequence, axis: AxisData, args: Sequence,
                  name: str = "vmap"):
  """Run the flat function ``f(*args) -> list`` once on batch tracers (the batch of each
  argument at ``in_dims[i]``, or unbatched for None); returns the outputs' values and batch
  dims (None for an output that does not depend on the batch)."""
  from ourjax.config import config
  leak_check = config.jax_check_tracer_leaks
  where = core.user_frame() if leak_check else None
  with new_main(BatchTrace, axis, name=name) as main:
    trace = BatchTrace(main)
    tracers_in = [BatchTracer(trace, x, d) if d is not not_mapped else x
                  for x, d in zip(args, in_dims)]
    outs = f(*tracers_in)
    o = None
    for o in outs:
      _check_output_type(o)
    outs = [full_raise(trace, o) for o in outs]
    result = [t.val for t in outs], [t.batch_dim for t in outs]
  if leak_check:
    from ourjax import _leaks
    del trace, tracers_in, outs, o
    _leaks.check(main, BatchTracer, "BatchTrace", where)
  return result


def batch(f: Callable, in_dims: Sequence, axis_size: int, args: Sequence,
          out_dims_thunk: Callable[[], Sequence], *, axis_name=None, spmd_axis_name=None,
          name: str = "vmap", out_paths: Callable[[], Sequence[str]] | None = None):
  """``trace_batched``, then each output's batch dimension moved to ``out_dims_thunk()[i]``
  (the thunk is called after ``f`` has run, so that the output axes can depend on the output's
  pytree structure).  ``out_paths()`` names the outputs in errors."""
  vals, dims = trace_batched(f, in_dims, AxisData(axis_name, axis_size, spmd_axis_name), args,
                             name)
  out_dims = list(out_dims_thunk())
  paths = out_paths() if out_paths is not None else [""] * len(vals)
  return [matchaxis(axis_size, d, od, v, axis_name=axis_name, where=p)
          for v, d, od, p in zip(vals, dims, out_dims, paths)]


def vmap_flat(f: Callable, in_dims: Sequence, out_dims: Sequence, axis_size: int, args,
              name: str = "vmap"):
  """Apply the flat function ``f`` over ``axis_size`` batch elements."""
  return batch(f, in_dims, axis_size, args, lambda: out_dims, name=name)


def _batched_avals(avals, in_dims, axis_size):
  out = []
  for a, d in zip(avals, in_dims):
    if d is not_mapped:
      out.append(a)
    else:
      shape = list(a.shape)
      shape.insert(d, axis_size)
      out.append(a.update(shape=tuple(shape)))
  return out


def batch_jaxpr(closed: core.ClosedJaxpr, axis_size: int, in_dims: Sequence,
                instantiate: bool | Sequence[bool] = True):
  """Batch a closed jaxpr whose inputs are batched at ``in_dims`` (None: unbatched).
  Returns ``(new closed jaxpr, out_dims)``: every batched output has its batch dimension at 0;
  an output that does not depend on the batch stays unbatched (out dim None) unless
  ``instantiate`` (one bool, or one per output) asks for it to be broadcast."""
  from ourjax.interpreters import partial_eval as pe
  n_out = len(closed.out_avals)
  inst = [instantiate] * n_out if isinstance(instantiate, bool) else list(instantiate)
  out_dims: list = []

  def batched(*xs):
    vals, dims = trace_batched(lambda *ys: core.closed_call(closed, *ys), in_dims,
                               _axis_for(axis_size), xs)
    out_dims[:] = [0 if (i or d is not not_mapped) else not_mapped for i, d in zip(inst, dims)]
    return [matchaxis(axis_size, d, od, v) for v, d, od in zip(vals, dims, out_dims)]

  new = pe.trace_to_jaxpr(batched, _batched_avals(closed.in_avals, in_dims, axis_size), "vmap")
  return new, list(out_dims)


def vmap_jaxpr(closed: core.ClosedJaxpr, axis_size: int, in_dims: Sequence,
               out_dims: Sequence | None = None):
  """Batch a closed jaxpr; returns (new closed jaxpr, out_dims).  With ``out_dims=None`` every
  output is batched at dimension 0 (``batch_jaxpr`` keeps unbatched outputs unbatched)."""
  from ourjax.interpreters import partial_eval as pe
  if out_dims is None:
    return batch_jaxpr(closed, axis_size, in_dims, instantiate=True)
  od = list(out_dims)
  axis = _axis_for(axis_size)
  new = pe.trace_to_jaxpr(
      lambda *xs: batch(lambda *ys: core.closed_call(closed, *ys), in_dims, axis_size, xs,
                        lambda: od, axis_name=axis.name, spmd_axis_name=axis.spmd_name),
      _batched_avals(closed.in_avals, in_dims, axis_size), "vmap")
  return new, od


# ------------------------------------------------------------------------------------------------
# Moving and materializing batch dimensions


def _ndim(x) -> int:
  return get_aval(x).ndim


def moveaxis(x, src: int, dst: int):
  """``x`` with its axis ``src`` moved to position ``dst`` (both non-negative)."""
  from ourjax import lax
  if src == dst:
    return x
  perm = [i for i in range(_ndim(x)) if i != src]
  perm.insert(dst, src)
  return lax.transpose(x, tuple(perm))


def broadcast(x, size: int, axis: int):
  """Insert a new axis of ``size`` at ``axis``."""
  from ourjax import lax
  aval = get_aval(x)
  shape = list(aval.shape)
  shape.insert(axis, size)
  dims = tuple(i for i in range(len(shape)) if i != axis)
  return lax.broadcast_in_dim(x, tuple(shape), dims)


def matchaxis(axis_size: int, src, dst, x, *, axis_name=None, where: str = ""):
  """Put the batch dimension of ``x`` (at ``src``, or absent) at ``dst``; ``dst`` may be
  negative (counted in the batched rank) or None (the value must then be unbatched).
  ``where`` names the output in errors (``"[1]"`` for ``out_axes[1]``)."""
  if dst is not_mapped:
    if src is not_mapped:
      return x
    if axis_name is not None:
      raise ValueError(f"vmap has mapped output (axis_name={axis_name}) but out_axes is None")
    raise ValueError(f"vmap has mapped output but out_axes is None: at vmap out_axes{where}, "
                     f"got axis spec None but output was batched on axis {src}")
  nd = _ndim(x) + (1 if src is not_mapped else 0)
  if not -nd <= dst < nd:
    shape = get_aval(x).shape if src is not_mapped else shape_without_bdim(x, src)
    raise ValueError(f"vmap out_axes{where} is {dst}, which is out of bounds for an output of "
                     f"rank {nd - 1} (per-example shape {shape}): axis {dst} is out of bounds "
                     f"for the batched array of dimension {nd}")
  dst = dst % nd
  if src is not_mapped:
    return broadcast(x, axis_size, dst)
  return moveaxis(x, src, dst)


def bdim_at_front(x, d, size):
  """Value with the batch dimension first (materialized if x is unbatched)."""
  if d is not_mapped:
    return broadcast(x, size, 0)
  return moveaxis(x, d, 0)


def bdim_at(x, d, size, dst):
  """Value with the batch dimension at ``dst`` (materialized if x is unbatched)."""
  if d is not_mapped:
    return broadcast(x, size, dst)
  return moveaxis(x, d, dst)


def shape_without_bdim(x, d):
  s = get_aval(x).shape
  return s if d is not_mapped else s[:d] + s[d + 1:]


def axis_size_of(vals, dims) -> int:
  """The batch size, read off the first batched operand."""
  return next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not not_mapped)


# ------------------------------------------------------------------------------------------------
# Rule helpers


def defvectorized(primitive):
  """Elementwise unary: the batch dimension passes straight through."""
  def rule(vals, dims, **params):
    (x,), (d,) = vals, dims
    return primitive.bind(x, **params), d
  batch_rules[primitive] = rule


def broadcast_batcher(primitive, vals, dims, **params):
  """Elementwise n-ary ops, whose operands agree in shape except that rank-0 operands broadcast.

  The batch dimension of the result is that of the first batched operand of full (per-example)
  rank, so operands already batched there are used as they are; other batched operands move
  there, unbatched operands of full rank are broadcast along the batch, batched per-example
  scalars are broadcast to the full shape, and unbatched scalars are left to broadcast by the
  primitive itself."""
  from ourjax import lax
  avals = [get_aval(x) for x in vals]
  ex_shapes = [a.shape if d is not_mapped else a.shape[:d] + a.shape[d + 1:]
               for a, d in zip(avals, dims)]
  ex_shape = next((s for s in ex_shapes if s), ())
  rank = len(ex_shape)
  size = axis_size_of(vals, dims)
  full_dims = [d for s, d in zip(ex_shapes, dims) if d is not not_mapped and s]
  od = full_dims[0] if full_dims else 0
  new_vals = []
  for x, a, d, s in zip(vals, avals, dims, ex_shapes):
    if d is not_mapped:
      new_vals.append(x if a.ndim == 0 else broadcast(x, size, od))
    elif not s and rank:
      # a batched per-example scalar meets operands of rank > 0
      new_vals.append(lax.broadcast_in_dim(x, ex_shape[:od] + (size,) + ex_shape[od:], (od,)))
    else:
      new_vals.append(moveaxis(x, d, od))
  out = primitive.bind(*new_vals, **params)
  return (out, [od] * len(out)) if primitive.multiple_results else (out, od)


def defbroadcasting(primitive):
  batch_rules[primitive] = lambda vals, dims, **p: broadcast_batcher(primitive, vals, dims, **p)


def reducer_batcher(primitive, vals, dims, axes, **params):
  """A reduction of one operand over ``axes`` (sorted, non-negative): the axes skip the batch
  dimension, which stays where it is (shifted left by the reduced axes before it)."""
  (x,), (d,) = vals, dims
  new_axes = tuple(a + (a >= d) for a in axes)
  out_d = d - sum(a < d for a in new_axes)
  return primitive.bind(x, axes=new_axes, **params), out_d


def defreducer(primitive):
  batch_rules[primitive] = lambda vals, dims, **p: reducer_batcher(primitive, vals, dims, **p)


# ------------------------------------------------------------------------------------------------
# add_any (the tangent sum of interpreters/ad.py): both operands have one type


def _add_any_batch(vals, dims):
  from ourjax.interpreters.ad import add_any_p
  (x, y), (dx, dy) = vals, dims
  if dx == dy:
    return add_any_p.bind(x, y), dx
  if dx is not_mapped:
    return add_any_p.bind(broadcast(x, get_aval(y).shape[dy], dy), y), dy
  if dy is not_mapped:
    return add_any_p.bind(x, broadcast(y, get_aval(x).shape[dx], dx)), dx
  return add_any_p.bind(moveaxis(x, dx, dy), y), dy


def _register_ad_rules():
  from ourjax.interpreters.ad import add_any_p
  batch_rules[add_any_p] = _add_any_batch


_register_ad_rules()
