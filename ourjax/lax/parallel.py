"""Named-axis collectives: ``psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``pshuffle``, ``all_to_all``, ``pbroadcast``, ``axis_index`` and
``axis_size``, as ``jax.lax`` offers them.

Each collective is a primitive (``psum_p``, ``all_gather_p``, ...) with the axis names it runs
over (``axes``) and the product of their sizes (``size``).  A name is bound by

* a **vmap** (``vmap(..., axis_name=...)``): the collective's batching rule, run at the vmap
  level of that name, computes the result across the batch (a sum over the batch dimension, a
  transpose, ...) and passes any other names on.  Values are raised to that level first, so the
  collective also works on values that do not vary along the axis, under jvp/grad and inner
  vmaps, and inside a jit called in the vmap (a jaxpr batched inside a batching rule keeps the
  axis name: ``batching._axis_for``).
* a **pmap** or **shard_map** (``interpreters/spmd.py``), whose function is traced once for one
  device while ``spmd_axes`` says the axis sizes: the primitive stays in the per-device jaxpr,
  and the SPMD executor runs it over the devices through a communicator (NCCL on GPUs, in
  process between CPU devices).

The primitives work on the leading axis (the layout NCCL's collectives take): ``all_gather_p``
stacks the members' values along a new leading axis, ``reduce_scatter_p`` and ``all_to_all_p``
split theirs along it; the functions below move the user's axis there and back with ordinary
lax operations.  All but pmax/pmin are linear (grad goes through them: the transpose of psum is
psum, of all_gather reduce_scatter, of a ppermute the inverse permutation, of all_to_all itself).

A value that no traced computation produced is the same everywhere, so its collective is
computed directly (``psum(1, 'i')`` is the axis size).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ourjax import core
from ourjax._pytree import tree_map

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "axis_size",
           "psum_scatter", "ppermute", "pshuffle", "all_to_all", "pbroadcast"]


def _axis_names(axis_name) -> tuple:
  return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


# ------------------------------------------------------------------------------------------------
# Where names are bound: vmap levels on the trace stack, SPMD axes of pmap/shard_map tracing

_spmd = threading.local()


def _spmd_env() -> dict:
  stack = getattr(_spmd, "stack", None)
  return stack[-1] if stack else {}


@contextlib.contextmanager
def spmd_axes(sizes: dict):
  """Trace a per-device function under these named SPMD axes (``{name: size}``; inner
  ``pmap``s add theirs to the outer ones)."""
  stack = getattr(_spmd, "stack", None)
  if stack is None:
    stack = _spmd.stack = []
  stack.append({**_spmd_env(), **sizes})
  try:
    yield
  finally:
    stack.pop()


def _vmap_main(name):
  from ourjax.interpreters.batching import BatchTrace
  for main in reversed(core._state.trace_stack):
    if main.trace_type is BatchTrace and main.payload is not None and \
        main.payload.name == name:
      return main
  return None


def _name_size(name, what) -> int:
  main = _vmap_main(name)
  if main is not None:
    return main.payload.size
  env = _spmd_env()
  if name in env:
    return env[name]
  raise NameError(f"unbound axis name: {name}. lax.{what} names an axis that no enclosing "
                  "vmap(axis_name=...), pmap(axis_name=...) or shard_map mesh binds.")


def _size(axes, what) -> int:
  return int(np.prod([_name_size(n, what) for n in axes], dtype=np.int64))


def _check_groups(axis_index_groups, what):
  if axis_index_groups is not None:
    raise NotImplementedError(f"lax.{what}: axis_index_groups is not supported by ourjax")


def _bind(prim, vals, axes, size, **params):
  """Bind a collective, the values raised to the innermost vmap level that the axes name
  (so that its batching rule sees them even where they do not vary along that axis)."""
  from ourjax.interpreters.batching import BatchTrace
  mains = [m for m in (_vmap_main(n) for n in axes) if m is not None]
  if mains:
    top = max(mains, key=lambda m: m.level)
    trace = BatchTrace(top)
    vals = [v if isinstance(v, core.Tracer) and v._trace.main.level >= top.level
            else core.full_raise(trace, v) for v in vals]
  return prim.bind(*vals, axes=tuple(axes), size=size, **params)


# ------------------------------------------------------------------------------------------------
# The primitives


def _collective(name, multiple=False):
  p = core.Primitive(name)
  p.multiple_results = multiple

  def impl(*args, axes, **params):
    raise NameError(f"unbound axis name: {axes[0]}: lax.{name} outside the vmap, pmap or "
                    "shard_map that binds it")
  p.def_custom_impl(impl)
  return p


psum_p = _collective("psum", multiple=True)
pmax_p = _collective("pmax", multiple=True)
pmin_p = _collective("pmin", multiple=True)
all_gather_p = _collective("all_gather")          # x -> [size, *x.shape]
reduce_scatter_p = _collective("reduce_scatter")  # [size, *s] -> s (summed over the group)
all_to_all_p = _collective("all_to_all")          # out[i] at position p = x[p] at position i
ppermute_p = _collective("ppermute")              # perm: ((src, dst), ...) group positions
axis_index_p = _collective("axis_index")          # () -> int32 position in the group

COLLECTIVES = (psum_p, pmax_p, pmin_p, all_gather_p, reduce_scatter_p, all_to_all_p,
               ppermute_p, axis_index_p)


def _leading(aval, size, what):
  if aval.ndim == 0 or aval.shape[0] != size:
    raise TypeError(f"lax.{what}: the operand's leading axis must have the group size {size}, "
                    f"got {aval.str_short()}")


def _reduce_scatter_aval(x, axes, size):
  _leading(x, size, "psum_scatter")
  return x.update(shape=x.shape[1:], weak_type=False)


def _all_to_all_aval(x, axes, size):
  _leading(x, size, "all_to_all")
  return x.update(weak_type=False)


core.abstract_eval_rules[psum_p] = lambda *xs, axes, size: list(xs)
core.abstract_eval_rules[pmax_p] = lambda *xs, axes, size: list(xs)
core.abstract_eval_rules[pmin_p] = lambda *xs, axes, size: list(xs)
core.abstract_eval_rules[all_gather_p] = \
    lambda x, axes, size: x.update(shape=(size,) + x.shape, weak_type=False)
core.abstract_eval_rules[reduce_scatter_p] = _reduce_scatter_aval
core.abstract_eval_rules[all_to_all_p] = _all_to_all_aval
core.abstract_eval_rules[ppermute_p] = lambda x, axes, size, perm: x
core.abstract_eval_rules[axis_index_p] = \
    lambda axes, size: core.ShapedArray((), np.dtype(np.int32))


# ------------------------------------------------------------------------------------------------
# Differentiation and batching rules


def _register_rules():
  from ourjax.interpreters import ad, batching
  from ourjax.interpreters.batching import not_mapped

  def rebind(prim, vals, p):
    # bind again, the values raised to the named vmap levels (a tangent or cotangent may be
    # a constant there)
    p = dict(p)
    return _bind(prim, vals, p.pop("axes"), p.pop("size"), **p)

  def linear(prim, transpose):
    def jvp(primals, tangents, **p):
      out = rebind(prim, primals, p)
      if all(type(t) is ad.Zero for t in tangents):
        zs = [ad.Zero.from_primal_value(o) for o in out] if prim.multiple_results else \
            ad.Zero.from_primal_value(out)
        return out, zs
      return out, rebind(prim, [ad.instantiate_zeros(t) for t in tangents], p)
    ad.jvp_rules[prim] = jvp
    ad.transpose_rules[prim] = ad._zero_aware_transpose(transpose)
    ad.linear_primitives.add(prim)

  linear(psum_p, lambda cts, *xs, **p: rebind(psum_p, [ad.instantiate_zeros(c) for c in cts],
                                               p))
  linear(all_gather_p, lambda ct, x, **p: [rebind(reduce_scatter_p, [ct], p)])
  linear(reduce_scatter_p, lambda ct, x, **p: [rebind(all_gather_p, [ct], p)])
  linear(all_to_all_p, lambda ct, x, **p: [rebind(all_to_all_p, [ct], p)])
  linear(ppermute_p, lambda ct, x, **p: [
      rebind(ppermute_p, [ct], {**p, "perm": tuple((d, s) for s, d in p["perm"])})])
  ad.defjvp_zero(axis_index_p)

  def minmax_jvp(prim):
    # the tangent where the extreme value is (the mean over ties)
    def rule(primals, tangents, **p):
      from ourjax import lax
      outs = rebind(prim, primals, p)
      touts = []
      for x, t, o in zip(primals, tangents, outs):
        if type(t) is ad.Zero:
          touts.append(ad.Zero.from_primal_value(o))
          continue
        hit = lax.convert_element_type(lax.eq(x, o), core.get_aval(x).dtype)
        count, tsum = rebind(psum_p, [hit, lax.mul(t, hit)], p)
        touts.append(lax.div(tsum, count))
      return outs, touts
    ad.jvp_rules[prim] = rule
  minmax_jvp(pmax_p)
  minmax_jvp(pmin_p)

  # -- batching along an axis the collective does not name: the data of each batch element
  # takes part alike
  def other_axis(prim, vals, dims, p):
    if prim in (psum_p, pmax_p, pmin_p):
      return prim.bind(*vals, **p), list(dims)
    (x,), (d,) = vals, dims
    if prim is ppermute_p:
      return prim.bind(x, **p), d
    if prim is all_gather_p:
      return prim.bind(x, **p), d + 1
    if d == 0:   # the leading axis is the collective's: the batch dimension goes behind it
      x, d = batching.moveaxis(x, 0, 1), 1
    return prim.bind(x, **p), (d - 1 if prim is reduce_scatter_p else d)

  # -- batching along the named axis: the collective across the batch
  def this_axis(prim, vals, dims, n, p):
    from ourjax import lax
    if prim in (psum_p, pmax_p, pmin_p):
      outs = []
      for v, d in zip(vals, dims):
        if d is not_mapped:
          outs.append(lax.mul(v, lax.convert_element_type(n, core.get_aval(v).dtype))
                      if prim is psum_p else v)
        else:
          red = {psum_p: lax.reduce_sum, pmax_p: lax.reduce_max, pmin_p: lax.reduce_min}[prim]
          outs.append(red(v, (d,)))
      return outs
    if len(p["axes"]) != 1:
      raise NotImplementedError(f"lax.{prim.name} over several axes one of which is a vmap "
                                "axis is not supported by ourjax")
    (v,), (d,) = vals, dims
    x = batching.bdim_at_front(v, d, n)      # [member, ...member's value...]
    if prim is all_gather_p:
      return x
    if prim is reduce_scatter_p:
      return lax.reduce_sum(x, (0,))          # [position, ...]: batched along 0
    if prim is all_to_all_p:
      nd = core.get_aval(x).ndim
      return lax.transpose(x, (1, 0) + tuple(range(2, nd)))
    if prim is ppermute_p:
      from ourjax import numpy as jnp
      src = np.zeros(n, np.int32)
      hit = np.zeros(n, bool)
      for s, dst in p["perm"]:
        src[dst], hit[dst] = s, True
      moved = jnp.take(x, jnp.asarray(src), axis=0)
      mask = jnp.asarray(hit).reshape((n,) + (1,) * (core.get_aval(x).ndim - 1))
      return jnp.where(mask, moved, jnp.zeros_like(moved))
    raise AssertionError(prim)

  def make_rule(prim):
    def rule(vals, dims, *, axis_data, **p):
      name = axis_data.name
      if name is None or name not in p["axes"]:
        if all(d is not_mapped for d in dims):
          out = prim.bind(*vals, **p)
          return out, ([not_mapped] * len(out) if prim.multiple_results else not_mapped)
        return other_axis(prim, vals, dims, p)
      n = axis_data.size
      out = this_axis(prim, vals, dims, n, p)
      rest = tuple(a for a in p["axes"] if a != name)
      if prim.multiple_results:
        if rest:
          out = _bind(prim, out, rest, p["size"] // n)
        return out, [not_mapped] * len(out)
      return out, (not_mapped if prim is all_gather_p else 0)
    batching.register_rule_with_axis(prim, rule)

  for prim in (psum_p, pmax_p, pmin_p, all_gather_p, reduce_scatter_p, all_to_all_p,
               ppermute_p):
    make_rule(prim)


_register_rules()


# ------------------------------------------------------------------------------------------------
# The public functions


def _traced(x) -> bool:
  return isinstance(x, core.Tracer)


def _reduction(x, axis_name, groups, what, prim, replicated):
  from ourjax._pytree import tree_flatten, tree_unflatten
  _check_groups(groups, what)
  axes = _axis_names(axis_name)
  size = _size(axes, what)
  leaves, tree = tree_flatten(x)
  traced = [i for i, v in enumerate(leaves) if _traced(v)]
  outs = [v if i in traced else replicated(v, size) for i, v in enumerate(leaves)]
  if traced:
    res = _bind(prim, [leaves[i] for i in traced], axes, size)
    for i, r in zip(traced, res):
      outs[i] = r
  return tree_unflatten(tree, outs)


def psum(x, axis_name, *, axis_index_groups=None):
  """The sum of ``x`` over the named axes (a value that does not vary along them is multiplied
  by the axis size: ``psum(1, 'i')`` is the axis size)."""
  from ourjax.numpy import multiply
  return _reduction(x, axis_name, axis_index_groups, "psum", psum_p,
                    lambda v, n: multiply(v, n))


def pmax(x, axis_name, *, axis_index_groups=None):
  """The maximum of ``x`` over the named axes."""
  return _reduction(x, axis_name, axis_index_groups, "pmax", pmax_p, lambda v, n: v)


def pmin(x, axis_name, *, axis_index_groups=None):
  """The minimum of ``x`` over the named axes."""
  return _reduction(x, axis_name, axis_index_groups, "pmin", pmin_p, lambda v, n: v)


def pmean(x, axis_name, *, axis_index_groups=None):
  """The mean of ``x`` over the named axes."""
  from ourjax.numpy import divide
  n = axis_size(axis_name)
  return tree_map(lambda s: divide(s, n), psum(x, axis_name,
                                               axis_index_groups=axis_index_groups))


def axis_size(axis_name) -> int:
  """The size of the named axes (a Python int; the product for several names)."""
  return _size(_axis_names(axis_name), "axis_size")


def axis_index(axis_name):
  """The position along the named axes (an int32 that varies along them; row-major over
  several names)."""
  from ourjax import lax
  from ourjax.interpreters.batching import BatchTrace, BatchTracer
  out = None
  for name in _axis_names(axis_name):
    size = _name_size(name, "axis_index")
    main = _vmap_main(name)
    if main is not None:
      if main is core._state.trace_stack[-1]:
        pos = lax.iota(np.int32, size)
      else:
        # inside a trace opened under the vmap (a loop body, a cond_fun): an iota would be
        # bound there and leak into the vmap's tracer; the positions are a constant instead
        from ourjax.array import Array
        pos = Array(np.arange(size, dtype=np.int32))
      idx = BatchTracer(BatchTrace(main), pos, 0)
    else:
      idx = axis_index_p.bind(axes=(name,), size=size)
    out = idx if out is None else out * np.int32(size) + idx
  return out


def _moveaxis(x, src, dst):
  from ourjax.interpreters import batching
  return x if src == dst else batching.moveaxis(x, src, dst)


def _materialize(v):
  """A traced copy of a value that no computation traced (the same everywhere), so that a
  collective that moves data has something to move."""
  from ourjax import lax
  return v if _traced(v) else lax.add(v, lax.full_like(v, 0))


def _to_front(v, d, size, tiled, what):
  """``v`` laid out for a leading-axis collective: dimension ``d`` split into ``size`` blocks
  (``tiled``; else it must have the axis size) and that axis moved to the front."""
  from ourjax import lax
  aval = core.get_aval(v)
  if tiled:
    if aval.ndim == 0 or aval.shape[d] % size:
      raise ValueError(f"lax.{what}: dimension {d} of {aval.str_short()} is not a multiple of "
                       f"the axis size {size}")
    shape = list(aval.shape)
    shape[d:d + 1] = [size, aval.shape[d] // size]
    v = lax.reshape(v, tuple(shape))
  elif aval.ndim == 0 or aval.shape[d] != size:
    raise ValueError(f"lax.{what}: dimension {d} of {aval.str_short()} must equal the axis size "
                     f"{size} (or pass tiled=True)")
  return _materialize(_moveaxis(v, d, 0))


def _from_front(g, ax, tiled):
  """The leading axis of a collective's result moved to ``ax``, and with ``tiled`` merged with
  the dimension after it."""
  from ourjax import lax
  g = _moveaxis(g, 0, ax)
  if not tiled:
    return g
  shape = list(core.get_aval(g).shape)
  shape[ax:ax + 2] = [shape[ax] * shape[ax + 1]]
  return lax.reshape(g, tuple(shape))


def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False):
  """The values of ``x`` at every position of the named axes, stacked along a new ``axis``
  (or concatenated along ``axis`` with ``tiled``)."""
  from ourjax import lax
  _check_groups(axis_index_groups, "all_gather")
  axes = _axis_names(axis_name)
  size = _size(axes, "all_gather")

  def one(v):
    aval = core.get_aval(v)
    nd = aval.ndim
    ax = axis + (nd if tiled else nd + 1) if axis < 0 else axis
    if not 0 <= ax <= (nd - 1 if tiled else nd):
      raise ValueError(f"lax.all_gather: axis {axis} is out of range for {aval.str_short()}")
    if _traced(v):
      g = _bind(all_gather_p, [v], axes, size)
    else:
      g = lax.broadcast_in_dim(v, (size,) + aval.shape, tuple(range(1, nd + 1)))
    return _from_front(g, ax, tiled)
  return tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, axis_index_groups=None,
                 tiled: bool = False):
  """``psum`` whose result is split along ``scatter_dimension``: each position of the named
  axes keeps its own block (``tiled``) or its own index of a dimension of the axis size."""
  _check_groups(axis_index_groups, "psum_scatter")
  axes = _axis_names(axis_name)
  size = _size(axes, "psum_scatter")

  def one(v):
    d = scatter_dimension % max(core.get_aval(v).ndim, 1)
    # the member's block (tiled: the [d / size] dimension) is already back at position d
    return _bind(reduce_scatter_p, [_to_front(v, d, size, tiled, "psum_scatter")], axes, size)
  return tree_map(one, x)


def ppermute(x, axis_name, perm):
  """Send ``x`` from position ``src`` to ``dst`` for each ``(src, dst)`` of ``perm``; a position
  that receives nothing gets zeros."""
  axes = _axis_names(axis_name)
  size = _size(axes, "ppermute")
  perm = tuple((int(s), int(d)) for s, d in perm)
  srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
  if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
    raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")
  if any(not 0 <= i < size for i in srcs + dsts):
    raise ValueError(f"ppermute: the permutation {perm} names positions outside the axis of size "
                     f"{size}")
  return tree_map(lambda v: _bind(ppermute_p, [_materialize(v)], axes, size, perm=perm), x)


def pshuffle(x, axis_name, perm):
  """``ppermute`` with ``perm[i]`` the source of position i."""
  return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None,
               tiled: bool = False):
  """Split ``x`` along ``split_axis`` into one chunk per position of the named axes, send
  chunk i to position i, and put the chunks received along ``concat_axis`` (a new axis of the
  axis size, or concatenated there with ``tiled``)."""
  _check_groups(axis_index_groups, "all_to_all")
  axes = _axis_names(axis_name)
  size = _size(axes, "all_to_all")

  def one(v):
    nd = core.get_aval(v).ndim
    sa, ca = split_axis % nd, concat_axis % nd
    out = _bind(all_to_all_p, [_to_front(v, sa, size, tiled, "all_to_all")], axes, size)
    return _from_front(out, ca, tiled)          # out: [source, ...chunk...]
  return tree_map(one, x)


def pbroadcast(x, axis_name, source: int):
  """The value of ``x`` at position ``source`` of the named axes, everywhere."""
  from ourjax import lax
  idx = axis_index(axis_name)

  def one(v):
    keep = lax.eq(idx, np.int32(source))
    return psum(lax.select(lax.broadcast_in_dim(keep, core.get_aval(v).shape, ()), v,
                           lax.full_like(v, 0)), axis_name)
  return tree_map(one, x)
