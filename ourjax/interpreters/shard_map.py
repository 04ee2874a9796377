"""``shard_map``: a function mapped over the blocks of its arguments on a mesh, each device
running it on its own block; collectives over mesh axis names communicate.  Concrete calls run
as an SPMD ``Program`` over the mesh's lanes (``spmd.py``); under a transformation the function
is evaluated by its definition, ``vmap`` with the mesh axis names over the blocks."""
from __future__ import annotations

import functools

import numpy as np

from ourjax import core
from ourjax._pytree import tree_flatten, tree_unflatten
from ourjax.interpreters.spmd import (Lanes, Program, _assemble, _backend_of, _trace_per_device,
                                      run_on_blocks)


def _spec_leaves(specs, values, what):
  """``specs`` (a tree prefix of ``values`` whose leaves are PartitionSpecs or None) as one
  entry per leaf of ``values``."""
  from ourjax.sharding import PartitionSpec
  from ourjax._pytree import broadcast_prefix
  try:
    return broadcast_prefix(specs, values, lambda x: x is None or isinstance(x, PartitionSpec))
  except Exception as e:
    raise ValueError(f"shard_map {what} must be a tree prefix of the corresponding value: "
                     f"{e}") from None


def shard_map(f=None, /, *, out_specs, in_specs=None, mesh=None, axis_names=frozenset(),
              check_vma: bool = True, check_rep: bool | None = None, auto=frozenset()):
  """Map ``f`` over the blocks of its arguments on ``mesh``: each device runs ``f`` on its own
  block (as ``in_specs`` splits the arguments), collectives over mesh axis names communicate,
  and the per-device results are put together as ``out_specs`` says (a mesh axis an out spec
  does not name means the result is the same along it)."""
  if f is None:
    return lambda g: shard_map(g, out_specs=out_specs, in_specs=in_specs, mesh=mesh,
                               axis_names=axis_names, check_vma=check_vma)
  from ourjax.sharding import Mesh, NamedSharding, PartitionSpec, current_mesh
  cache: dict = {}

  @functools.wraps(f)
  def mapped(*args):
    m = mesh if mesh is not None else current_mesh()
    if not isinstance(m, Mesh):
      raise ValueError("shard_map needs a mesh: pass mesh=... or call it inside `with mesh:`")
    leaves, tree = tree_flatten(args)
    specs = _spec_leaves(in_specs if in_specs is not None else PartitionSpec(), args,
                         "in_specs")
    specs = tuple(PartitionSpec() if s is None else s for s in specs)
    avals = tuple(core.get_aval(x) for x in leaves)
    if any(isinstance(x, core.Tracer) for x in leaves):
      for a, s in zip(avals, specs):
        NamedSharding(m, s)._blocks(a.shape)     # checks divisibility
      return _shard_map_by_vmap(f, m, args, tree, leaves, specs, out_specs)
    key = (tree, avals, specs, m)
    entry = cache.get(key)
    if entry is None:
      entry = cache[key] = _shard_map_entry(f, m, tree, avals, specs, out_specs)
    program, lanes, in_shardings, out_tree, outs_how = entry
    outs = run_on_blocks(program, leaves, in_shardings, lanes)
    return tree_unflatten(out_tree, [
        _assemble([outs[k][j] for k in range(len(lanes))], sh, gaval)
        for j, (sh, gaval) in enumerate(outs_how)])
  return mapped


def _shard_map_entry(f, m, tree, avals, specs, out_specs):
  """What a shard_map signature needs on every call: the program, the lanes, the arguments'
  shardings, the output pytree and, per output, its sharding and global type."""
  from ourjax.sharding import NamedSharding, PartitionSpec
  in_shardings = [NamedSharding(m, s) for s in specs]
  block_avals = [a.update(shape=sh.shard_shape(a.shape)) for a, sh in zip(avals, in_shardings)]
  closed, out_tree = _trace_per_device(f, tree, block_avals, dict(m.shape),
                                       f"shard_map({getattr(f, '__name__', 'f')})")
  ospecs = _spec_leaves(out_specs, tree_unflatten(out_tree, list(closed.out_avals)),
                        "out_specs")
  how = []
  for aval, spec in zip(closed.out_avals, ospecs):
    spec = PartitionSpec() if spec is None else spec
    gshape = tuple(s * int(np.prod([m.shape[n] for n in ax], dtype=np.int64))
                   for s, ax in zip(aval.shape, spec._axes(aval.ndim)))
    how.append((NamedSharding(m, spec), aval.update(shape=gshape)))
  lanes = Lanes(m)
  return (Program(closed, _backend_of(lanes.devices)), lanes, in_shardings, out_tree, how)


def _shard_map_by_vmap(f, m, args, tree, leaves, specs, out_specs):
  """shard_map by its definition, for tracers: the blocks stacked along the mesh axes and
  ``f`` vmapped over them with the mesh axis names."""
  from ourjax import lax
  from ourjax.sharding import PartitionSpec
  names, sizes = m.axis_names, m.axis_sizes

  def split(x, spec):
    # [d0, d1, ...] -> [*mesh axes, block...]: each dim split by its mesh axes (major first)
    aval = core.get_aval(x)
    dim_axes = spec._axes(aval.ndim)
    shape, pos = [], {}
    for d, axes in enumerate(dim_axes):
      for n in axes:
        pos[n] = len(shape)
        shape.append(m.shape[n])
      shape.append(aval.shape[d] // int(np.prod([m.shape[n] for n in axes], dtype=np.int64)))
    x = lax.reshape(x, tuple(shape))
    # move the named mesh axes to the front in mesh order; unnamed ones are broadcast
    order = [pos[n] for n in names if n in pos]
    rest = [i for i in range(len(shape)) if i not in order]
    x = lax.transpose(x, tuple(order + rest))
    return x, [n in pos for n in names]

  splits = [split(x, s) for x, s in zip(leaves, specs)]
  out_tree_cell = []

  def per_block(*blocks):
    out_leaves, out_tree = tree_flatten(f(*tree_unflatten(tree, list(blocks))))
    out_tree_cell.append(out_tree)
    return out_leaves

  fn = per_block
  # vmap innermost over the last mesh axis; every value carries its mapped axes in front
  for i in reversed(range(len(names))):
    in_ax = [0 if mapped[i] else None for _, mapped in splits]
    fn = _vmap_level(fn, in_ax, names[i], sizes[i])
  outs = fn(*[x for x, _ in splits])
  out_tree = out_tree_cell[-1]
  ospecs = _spec_leaves(out_specs, tree_unflatten(out_tree, outs), "out_specs")
  results = []
  for o, spec in zip(outs, ospecs):
    spec = PartitionSpec() if spec is None else spec
    # o: [*mesh axes in order, block...]
    blk_nd = core.get_aval(o).ndim - len(names)
    dim_axes = spec._axes(blk_nd)
    named = {n for axes in dim_axes for n in axes}
    for i in reversed(range(len(names))):     # replicated along unnamed mesh axes: take one
      if names[i] not in named:
        o = lax.squeeze(lax.slice_in_dim(o, 0, 1, axis=i), (i,))
    kept = [n for n in names if n in named]
    # bring each block dim's mesh axes just before it, then merge
    perm = []
    nk = len(kept)
    for d, axes in enumerate(dim_axes):
      perm.extend(kept.index(n) for n in axes)
      perm.append(nk + d)
    o = lax.transpose(o, tuple(perm))
    bshape = core.get_aval(o).shape
    merged, i = [], 0
    for d, axes in enumerate(dim_axes):
      k = len(axes)
      merged.append(int(np.prod(bshape[i:i + k + 1], dtype=np.int64)))
      i += k + 1
    results.append(lax.reshape(o, tuple(merged)))
  return tree_unflatten(out_tree, results)


def _vmap_level(fn, in_axes, name, size):
  from ourjax import api

  def level(*xs):
    return api.vmap(fn, in_axes=tuple(in_axes), out_axes=0, axis_name=name,
                    axis_size=size)(*xs)
  return level
