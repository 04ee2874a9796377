"""Named-axis collectives for ``vmap(..., axis_name=...)``: ``psum``, ``pmean``, ``pmax``,
``pmin``, ``all_gather``, ``axis_index`` and ``axis_size``, as ``jax.lax`` offers them.

ourjax has no pmap or SPMD partitioner, so a named axis is always a vmap axis.  A collective is
not a primitive here: it finds the vmap level of its axis name on the trace stack and computes
its result there directly (a reduction over the batch dimension, or the axis size for a value
that does not vary along the axis).  The result does not vary along the axis, so it is an
ordinary (unbatched) value at that level, and the transformations around it (jit, grad, vmap)
see plain lax operations.

Limitation: between that vmap and the collective there may be other vmaps (and, for psum and
pmean, jvps), but not grad or jit; those cases raise NotImplementedError.
"""
from __future__ import annotations

import numpy as np

from ourjax import core
from ourjax.tree_util import tree_map

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "axis_size"]


def _axis_names(axis_name) -> tuple:
  return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _axis_main(name):
  from ourjax.interpreters.batching import BatchTrace
  for main in reversed(core._state.trace_stack):
    if main.trace_type is BatchTrace and main.payload is not None and \
        main.payload.name == name:
      return main
  raise NameError(f"unbound axis name: {name}")


def _nested_error(what, name):
  return NotImplementedError(
      f"lax.{what} of a value traced by a transformation nested inside vmap(axis_name="
      f"{name!r}) (other than vmap, or jvp for psum/pmean) is not supported by ourjax; apply "
      "the collective directly in the vmapped function.")


def _at_axis(x, name, what):
  """``(trace, value, batch_dim, size)`` of ``x`` at the vmap level named ``name``."""
  from ourjax.interpreters.batching import BatchTrace
  main = _axis_main(name)
  if isinstance(x, core.Tracer) and x._trace.main.level > main.level:
    raise _nested_error(what, name)
  trace = BatchTrace(main)
  t = core.full_raise(trace, x)
  return trace, t.val, t.batch_dim, main.payload.size


def _apply_at(x, main, name, what, fn, linear):
  """``fn(value, batch_dim, size)`` at the vmap level ``main``, through the levels of inner
  vmaps (the collective acts on each of their lanes alike) and, for a linear collective, of
  inner jvps (it applies to the primal and the tangent alike)."""
  from ourjax.interpreters import ad
  from ourjax.interpreters.batching import BatchTrace, BatchTracer
  if isinstance(x, core.Tracer) and x._trace.main.level > main.level:
    if isinstance(x, BatchTracer):
      return BatchTracer(x._trace, _apply_at(x.val, main, name, what, fn, linear), x.batch_dim)
    if linear and isinstance(x, ad.JVPTracer):
      t = x.tangent
      t = t if type(t) is ad.Zero else _apply_at(t, main, name, what, fn, linear)
      return ad.JVPTracer(x._trace, _apply_at(x.primal, main, name, what, fn, linear), t)
    raise _nested_error(what, name)
  t = core.full_raise(BatchTrace(main), x)
  return fn(t.val, t.batch_dim, main.payload.size)


def _reduce(x, axis_name, what, reduce_fn, unmapped_fn, linear=False):
  for name in _axis_names(axis_name):
    x = _apply_at(x, _axis_main(name), name, what,
                  lambda v, d, n: unmapped_fn(v, n) if d is None else reduce_fn(v, d, n),
                  linear)
  return x


def psum(x, axis_name, *, axis_index_groups=None):
  """The sum of ``x`` over the named vmap axis (a value that does not vary along it is
  multiplied by the axis size: ``psum(1, 'i')`` is the axis size)."""
  from ourjax import lax
  from ourjax.numpy import multiply
  if axis_index_groups is not None:
    raise NotImplementedError("lax.psum: axis_index_groups is not supported")

  return tree_map(lambda x: _reduce(x, axis_name, "psum",
                                    lambda v, d, n: lax.reduce_sum(v, (d,)),
                                    lambda v, n: multiply(v, n), linear=True), x)


def _total_size(axis_name) -> int:
  n = 1
  for name in _axis_names(axis_name):
    n *= _axis_main(name).payload.size
  return n


def pmean(x, axis_name, *, axis_index_groups=None):
  """The mean of ``x`` over the named vmap axis."""
  from ourjax.numpy import divide
  n = _total_size(axis_name)
  return tree_map(lambda s: divide(s, n), psum(x, axis_name,
                                               axis_index_groups=axis_index_groups))


def pmax(x, axis_name, *, axis_index_groups=None):
  """The maximum of ``x`` over the named vmap axis."""
  from ourjax import lax
  return tree_map(lambda x: _reduce(x, axis_name, "pmax", lambda v, d, n: lax.reduce_max(v, (d,)),
                                    lambda v, n: v), x)


def pmin(x, axis_name, *, axis_index_groups=None):
  """The minimum of ``x`` over the named vmap axis."""
  from ourjax import lax
  return tree_map(lambda x: _reduce(x, axis_name, "pmin", lambda v, d, n: lax.reduce_min(v, (d,)),
                                    lambda v, n: v), x)


def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False):
  """The values of ``x`` at every position of the named vmap axis, stacked along ``axis`` (or
  concatenated there with ``tiled``)."""
  from ourjax import lax
  from ourjax.interpreters import batching

  def one(x):
    for name in _axis_names(axis_name):
      _, v, d, size = _at_axis(x, name, "all_gather")
      nd = core.get_aval(v).ndim - (0 if d is None else 1)
      ax = axis + nd + 1 if axis < 0 else axis
      if d is None:
        v = batching.broadcast(v, size, ax)
      else:
        v = batching.moveaxis(v, d, ax)
      if tiled:
        shape = list(core.get_aval(v).shape)
        shape[ax:ax + 2] = [shape[ax] * shape[ax + 1]]
        v = lax.reshape(v, tuple(shape))
      x = v
    return x
  return tree_map(one, x)


def axis_index(axis_name):
  """The position along the named vmap axis (an int32 that varies along it)."""
  from ourjax import lax
  from ourjax.interpreters.batching import BatchTrace, BatchTracer
  names = _axis_names(axis_name)
  out = None
  for name in names:   # row-major over several names, as JAX
    main = _axis_main(name)
    idx = BatchTracer(BatchTrace(main), lax.iota(np.int32, main.payload.size), 0)
    out = idx if out is None else out * main.payload.size + idx
  return out


def axis_size(axis_name) -> int:
  """The size of the named vmap axis (a Python int)."""
  return _total_size(axis_name)
