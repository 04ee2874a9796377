"""Vectorization (vmap) as an interpreter.

A ``BatchTracer`` holds a value with one extra dimension, at position ``batch_dim`` (or
``not_mapped`` when the value is the same for every batch element).  Each primitive's batching
rule, ``rule(vals, dims, **params) -> (out, out_dims)``, computes all batch elements at once
with primitives, so a vmapped function contains no Python loop over the batch.  The helpers at
the bottom cover the common shapes of rule: ``defvectorized`` (elementwise unary),
``defbroadcasting`` (elementwise n-ary), ``defreducer``-style rules live with their primitives.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ourjax import core
from ourjax.core import Trace, Tracer, full_raise, get_aval, new_main

batch_rules: dict = {}
not_mapped = None


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
  def axis_size(self) -> int:
    return self.main.payload

  def pure(self, val):
    return BatchTracer(self, val, not_mapped)

  lift = pure

  def process_primitive(self, primitive, tracers, params):
    vals = [t.val for t in tracers]
    dims = [t.batch_dim for t in tracers]
    if all(d is not_mapped for d in dims):
      return primitive.bind(*vals, **params)
    rule = batch_rules.get(primitive)
    if rule is None:
      raise NotImplementedError(f"Batching rule for '{primitive.name}' not implemented")
    outs, out_dims = rule(vals, dims, axis_size=self.axis_size, **params) \
        if primitive in _rules_wanting_size else rule(vals, dims, **params)
    if primitive.multiple_results:
      return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]
    return BatchTracer(self, outs, out_dims)


# Rules registered here also receive ``axis_size=`` (e.g. to materialize unbatched operands).
_rules_wanting_size: set = set()


def register_rule_with_axis_size(primitive, rule):
  batch_rules[primitive] = rule
  _rules_wanting_size.add(primitive)


def vmap_flat(f: Callable, in_dims: Sequence, out_dims: Sequence, axis_size: int, args,
              name: str = "vmap"):
  """Apply the flat function ``f`` over ``axis_size`` batch elements."""
  with new_main(BatchTrace, axis_size, name=name) as main:
    trace = BatchTrace(main)
    tracers_in = [BatchTracer(trace, x, d) if d is not None else x for x, d in zip(args, in_dims)]
    outs = f(*tracers_in)
    tracers_out = [full_raise(trace, o) for o in outs]
    vals = [t.val for t in tracers_out]
    dims = [t.batch_dim for t in tracers_out]
  return [matchaxis(axis_size, d, od, v) for v, d, od in zip(vals, dims, out_dims)]


def vmap_jaxpr(closed: core.ClosedJaxpr, axis_size: int, in_dims: Sequence,
               out_dims: Sequence | None = None):
  """Batch a closed jaxpr; returns (new closed jaxpr, out_dims).  With ``out_dims=None`` every
  output is batched at dimension 0."""
  from ourjax.interpreters import partial_eval as pe
  in_avals = []
  for a, d in zip(closed.in_avals, in_dims):
    if d is None:
      in_avals.append(a)
    else:
      shape = list(a.shape)
      shape.insert(d, axis_size)
      in_avals.append(a.update(shape=tuple(shape)))
  n_out = len(closed.out_avals)
  od = [0] * n_out if out_dims is None else list(out_dims)
  new = pe.trace_to_jaxpr(
      lambda *xs: vmap_flat(lambda *ys: core.closed_call(closed, *ys), in_dims, od, axis_size,
                            xs), in_avals, "vmap")
  return new, od


# ------------------------------------------------------------------------------------------------
# Moving and materializing batch dimensions


def moveaxis(x, src: int, dst: int):
  from ourjax import lax
  if src == dst:
    return x
  nd = np.ndim(x) if not hasattr(x, "ndim") else x.ndim
  perm = [i for i in range(nd) if i != src]
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


def matchaxis(axis_size: int, src, dst, x):
  """Put the batch dimension of ``x`` (at ``src``, or absent) at ``dst`` (None: must be
  unbatched)."""
  if src is dst or src == dst:
    return x
  if dst is None:
    raise ValueError(f"vmap has mapped output but out_axes is None (output shape "
                     f"{get_aval(x).str_short()})")
  if src is not_mapped:
    return broadcast(x, axis_size, dst)
  return moveaxis(x, src, dst)


def bdim_at_front(x, d, size):
  """Value with the batch dimension first (materialized if x is unbatched)."""
  if d is not_mapped:
    return broadcast(x, size, 0)
  return moveaxis(x, d, 0)


def shape_without_bdim(x, d):
  s = get_aval(x).shape
  return s if d is not_mapped else s[:d] + s[d + 1:]


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

  Fast path: every operand that is not an unbatched scalar has the same shape and batch dim, so
  the primitive applies as it is.  Otherwise batch dims move to the front, unbatched non-scalar
  operands are broadcast along the batch, and batched per-example scalars are broadcast to the
  per-example shape of the others."""
  from ourjax import lax
  avals = [get_aval(x) for x in vals]
  keyed = {(a.shape, d) for a, d in zip(avals, dims) if not (d is not_mapped and a.ndim == 0)}
  if len(keyed) == 1:
    (_, d0), = keyed
    if d0 is not not_mapped:
      out = primitive.bind(*vals, **params)
      return (out, [d0] * len(out)) if primitive.multiple_results else (out, d0)
  size = next(a.shape[d] for a, d in zip(avals, dims) if d is not not_mapped)
  example_shape = ()
  for a, d in zip(avals, dims):
    s = a.shape if d is not_mapped else a.shape[:d] + a.shape[d + 1:]
    if s:
      example_shape = s
  new_vals = []
  for x, a, d in zip(vals, avals, dims):
    if d is not_mapped:
      new_vals.append(x if a.ndim == 0 else broadcast(x, size, 0))
    else:
      x = moveaxis(x, d, 0)
      if a.ndim == 1 and example_shape:
        x = lax.broadcast_in_dim(x, (size,) + example_shape, (0,))
      new_vals.append(x)
  out = primitive.bind(*new_vals, **params)
  return (out, [0] * len(out)) if primitive.multiple_results else (out, 0)


def defbroadcasting(primitive):
  batch_rules[primitive] = lambda vals, dims, **p: broadcast_batcher(primitive, vals, dims, **p)
