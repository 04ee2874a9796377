"""``pmap``: a function mapped over this process's devices along an axis of its arguments.

The mapped function is traced once for one device (``spmd._trace_per_device``) and run as an
SPMD ``Program`` (``spmd.py``) on the lanes of the devices, its collectives over the axis name
going through the lanes' communicator; under several processes (``ourjax.distributed``) the
axis spans every process's devices.  A call whose arguments have the structure and the types
of the last call with that structure takes a fast path (see ``spmd.py``'s docstring); the
results are ``ShardedArray``s made from the lanes' values.  Under a transformation pmap is
``vmap`` with a named axis.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from ourjax import _donation, core
from ourjax.array import Array
from ourjax.sharding import ShardedArray
from ourjax._pytree import tree_flatten, tree_unflatten
from ourjax.interpreters.spmd import (Lanes, Program, _backend_of, _reshaped, _reshaped_aval,
                                      _trace_per_device)

_pmap_names = itertools.count()


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, backend=None, axis_size=None, donate_argnums=(),
         global_arg_shapes=None):
  """Map ``fun`` over the leading (``in_axes``) axis of its arguments, one device per index,
  running in parallel; collectives over ``axis_name`` communicate between the devices.  The
  result is laid out over the devices (``ShardedArray``) along ``out_axes``."""
  from ourjax import api
  if not callable(fun):
    raise TypeError(f"Expected a callable value, got {fun!r}")
  api._check_axis_spec_leaves("in_axes", in_axes, "pmap")
  api._check_axis_spec_leaves("out_axes", out_axes, "pmap")
  statics = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
             else tuple(static_broadcasted_argnums))
  name = axis_name if axis_name is not None else f"_pmap_axis_{next(_pmap_names)}"
  cache: dict = {}
  donations: dict = {}      # signature -> its _donation.Donation (None: nothing donated)
  plans: dict = {}          # (tree, global avals, ..., devices) -> _pmap_plan's tuple
  fasts: dict = {}          # (tree, nargs, static values) -> the last such call's _fast_entry
  last: list = []           # the last call's [key of fasts, its tree's generated flattener]
  fname = getattr(fun, "__name__", "fun")
  from ourjax import distributed
  donate = ((donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums))

  @functools.wraps(fun)
  def pmapped(*args, **kwargs):
    if statics and max(statics) >= len(args):
      n = len(args)
      raise ValueError(
          f"pmapped function has static_broadcasted_argnums={statics} but was called with only "
          f"{n} positional argument{'s' if n != 1 else ''}. All static broadcasted arguments "
          "must be passed positionally.")
    if kwargs:
      raise NotImplementedError("pmap: keyword arguments are not supported; pass them "
                                "positionally")
    nargs = len(args)
    st = tuple(i % nargs for i in statics) if nargs else ()
    dyn_idx = [i for i in range(nargs) if i not in st]
    dyn = [args[i] for i in dyn_idx]
    static_vals = tuple((i, args[i]) for i in st)
    axes_all = in_axes
    if isinstance(in_axes, (tuple, list)):
      if len(in_axes) != nargs:
        raise ValueError(f"pmap in_axes must be an int, None, or a tuple of entries "
                         f"corresponding to the positional arguments passed to the function, but "
                         f"got len(in_axes)={len(in_axes)}, len(args)={nargs}")
      axes_all = tuple(in_axes[i] for i in dyn_idx)
    dyn = tuple(dyn)
    dist = distributed.state()
    devs = list(devices) if devices is not None else api.devices(backend)
    # the signature seen last with this structure: its leaves checked one by one (the same
    # test as the plan's key: each leaf's type), their lanes' values taken as they are; the
    # last call's structure is tried first by its generated flattener (_pytree_codegen)
    leaves = fast = None
    if last:
      fkey, flat = last
      if flat is not None and fkey[1] == nargs and fkey[2] == static_vals:
        leaves = flat(dyn)
        if leaves is not None:
          tree, fast = fkey[0], fasts.get(fkey)
    generated = leaves is not None
    if leaves is None:
      leaves, tree = tree_flatten(dyn)
      try:
        fast = fasts.get((tree, nargs, static_vals))
      except TypeError:         # (an unhashable static argument)
        fast = None
    cols = uploads = None
    if fast is not None:
      cols, uploads = _fast_columns(fast, leaves, devs, dist)
    if cols is not None:
      plan = fast[0]
      if not generated:
        last[:] = [fast[4], fast[5]]
    else:
      if generated:         # (what stands at its leaf positions was not examined)
        leaves, tree = tree_flatten(dyn)
      if any(isinstance(x, core.Tracer) for x in leaves):
        # under a transformation: pmap is vmap with a named axis, over no more lanes than
        # there are devices (as when it runs)
        axes = _leaf_axes(tree, axes_all, dyn)
        sizes = {core.get_aval(x).shape[a] for x, a in zip(leaves, axes) if a is not None}
        n = max(sizes) if sizes else axis_size
        if n is not None and n > len(devs):
          raise ValueError(f"compiling computation that requires {n} logical devices, but "
                           f"only {len(devs)} XLA devices are available (num_replicas={n})")
        return api.vmap(_caller(args, dyn_idx), in_axes=axes_all, out_axes=out_axes,
                        axis_name=name, axis_size=axis_size)(*dyn)
      asked = devs
      if dist is not None and dist.num_processes > 1 and devices is None:
        from ourjax import backends
        devs = distributed._local_devices(dist, backends)
      avals = tuple(core.get_aval(x) for x in leaves)
      cacheable = all(_hashable(v) for _, v in static_vals)
      pkey = (tree, avals, nargs, static_vals, tuple(devs), dist) if cacheable else None
      plan = plans.get(pkey) if cacheable else None
      if plan is None:
        plan = _pmap_plan(tree, avals, _leaf_axes(tree, axes_all, dyn), devs, dist, nargs,
                          dyn_idx, dyn, static_vals, cacheable, _caller(args, dyn_idx))
        if cacheable:
          plans[pkey] = plan
      if cacheable:
        fkey = (tree, nargs, static_vals)
        fasts[fkey] = fast = _fast_entry(plan, avals, asked, dist, fkey)
        last[:] = [fast[4], fast[5]]
      fast = None
      lanes, axes, in_keys = plan[1], plan[4], plan[6]
      cols = []
      uploads = lanes.uploads()
      for x, a, lkey in zip(leaves, axes, in_keys):
        if a is None:
          cols.append([lanes.put(k, x, uploads) for k in range(len(lanes))])
        else:
          vals = x._lanes(lkey) if type(x) is ShardedArray else None
          cols.append(vals if vals is not None else _pmap_blocks(x, a, lanes, uploads))
    program, lanes, out_tree, outs_how, axes, donation, in_keys = plan
    if uploads is None:
      outs = program.run(lanes, list(zip(*cols)) if cols else [[] for _ in range(len(lanes))])
    else:
      # the batch's large copies run while the step is enqueued (its kernels wait on the
      # devices for them); they are done before this call returns (the arrays may change)
      uploads.start()
      try:
        outs = program.run(lanes, list(zip(*cols)) if cols else
                           [[] for _ in range(len(lanes))])
      finally:
        uploads.finish()
    results = _lane_results(outs, outs_how, program.literal_outs)
    if donation:
      for i in donation.deleted:
        if isinstance(leaves[i], Array):
          leaves[i]._delete()
    build = fast[6] if fast is not None else None
    return build(results) if build is not None else tree_unflatten(out_tree, results)

  def _leaf_axes(tree, axes_all, dyn):
    return api._flatten_axes("pmap in_axes", tree, tuple(axes_all) if isinstance(
        axes_all, (tuple, list)) else axes_all, dyn)

  def _caller(args, dyn_idx):
    def call_fun(*dargs):
      full = list(args)
      for i, v in zip(dyn_idx, dargs):
        full[i] = v
      return fun(*full)
    return call_fun

  def _pmap_plan(tree, avals, axes, devs, dist, nargs, dyn_idx, dyn, static_vals, cacheable,
                 call_fun):
    """What every call of a signature needs: ``(program, lanes, out_tree, outs_how, axes,
    donation, in_keys)``: per argument leaf its mapped axis (None: replicated) and the key of
    the lanes' values a pmap result mapped along that axis holds (``ShardedArray._lanes``);
    per output its sharding, block shape, global type and lanes' key (``_pmap_entry``)."""
    sizes = {a.shape[ax] for a, ax in zip(avals, axes) if ax is not None}
    if len(sizes) > 1:
      raise ValueError(f"pmap got inconsistent sizes for array axes to be mapped: {sorted(sizes)}")
    n = sizes.pop() if sizes else axis_size
    if n is None:
      raise ValueError("pmap requires at least one argument with a mapped axis (or axis_size)")
    if n > len(devs):
      raise ValueError(f"compiling computation that requires {n} logical devices, but only "
                       f"{len(devs)} XLA devices are available (num_replicas={n})")
    devs = devs[:n]
    axes = [None if ax is None else ax % a.ndim for a, ax in zip(avals, axes)]
    lane_avals = [a if ax is None else a.update(shape=a.shape[:ax] + a.shape[ax + 1:])
                  for a, ax in zip(avals, axes)]
    key = (tree, tuple(lane_avals), tuple(axes), n, tuple(d.id for d in devs), static_vals)
    flags = None
    if donate:
      dpos = {i % nargs for i in donate} if nargs else set()
      flags = [dyn_idx[p] in dpos for p, a in enumerate(dyn) for _ in tree_flatten(a)[0]]
    entry = cache.get(key) if cacheable else None
    if entry is None:
      entry = _pmap_entry(call_fun, tree, lane_avals, name, n, devs, out_axes, fname, dist,
                          flags)
      if cacheable:
        cache[key] = entry
    program, lanes, out_tree, outs_how = entry
    donation = donations.get(key, False) if cacheable else False
    if donation is False and donate:
      # JAX's pairing of donated inputs with outputs, per device (``_donation.set_up``): the
      # donated arrays are deleted after the call, unusable ones warned about; each lane's
      # block of a donated input is the buffer of a result of its segment (``Program``)
      donation = _donation.set_up(lane_avals, [v.aval for v in program.jaxpr.outvars], flags,
                                  names=[a.str_short(short_dtypes=False) for a in avals])
      if cacheable:
        donations[key] = donation
    in_keys = [None if ax is None else _lanes_key(ax, lanes) for ax in axes]
    return program, lanes, out_tree, outs_how, axes, donation, in_keys

  pmapped._pmap_cache = cache
  return pmapped


def _lane_results(outs, how, literal):
  """pmap's results from its lanes' outputs ``outs`` (per lane, a list): per output, as
  ``how`` (``_pmap_entry``) says, one device's value or the array laid out over the devices
  whose blocks are the lanes' values (``ShardedArray._from_lanes``, written out here: a
  step's dozens of results are made on every call)."""
  new, cls = object.__new__, ShardedArray
  results = []
  app = results.append
  for j, (vals, (sharding, bshape, gaval, lkey)) in enumerate(zip(zip(*outs), how)):
    if sharding is None:
      app(vals[0])
      continue
    if literal and j in literal:
      vals = [Array(v) for v in vals]
    a = new(cls)
    a._npy = None
    a.weak_type = gaval.weak_type
    a._aval = gaval
    a._device_buf = None
    a._committed = None
    a._shard_list = None
    a._sharding = sharding
    a._lane_info = (lkey, vals, bshape)
    app(a)
  return results


_LANES_KEYS: dict = {}


def _lanes_key(axis, lanes):
  """The key of the lanes' values of a pmap result mapped along ``axis`` over ``lanes`` (one
  object per value: a pmap's fast path compares them by identity first)."""
  key = (axis, lanes.platform, tuple(lanes._ordinals))
  return _LANES_KEYS.setdefault(key, key)


def _fast_entry(plan, avals, devs, dist, key):
  """What ``pmap``'s fast path checks a call against: ``(plan, the leaves' global types,
  devices asked for, distributed state, key, the key's tree's generated flattener, the output
  tree's generated builder)`` (``_pytree_codegen``; None where it has none).  A type equal to
  an output's is that output's object, so that a result passed back is recognised by
  identity."""
  from ourjax import _pytree_codegen
  outs = {h[2]: h[2] for h in plan[3] if h[2] is not None}
  return (plan, tuple(outs.get(a, a) for a in avals), tuple(devs), dist, key,
          _pytree_codegen.leaves_of(key[0]), _pytree_codegen.builder(plan[2]))


def _fast_columns(fast, leaves, devs, dist):
  """``(cols, uploads)``: per leaf, its lanes' values (a list or tuple, one per lane), when
  the call's leaves have the types of ``fast``'s (``_fast_entry``) and are NumPy arrays,
  Arrays or ShardedArrays (a pmap result along the same axis over the same devices gives its
  lanes' values as they are), with the ``Uploads`` of their host data, not run yet (None on
  CPU devices); ``(None, None)`` otherwise (the general path then decides)."""
  plan, want, fdevs, fdist = fast[:4]
  if dist is not fdist or len(leaves) != len(want) or tuple(devs) != fdevs:
    return None, None
  lanes, axes, in_keys = plan[1], plan[4], plan[6]
  get_aval = core.get_aval
  cols = []
  uploads = lanes.uploads()
  for x, aval, a, lkey in zip(leaves, want, axes, in_keys):
    t = type(x)
    if t is ShardedArray:
      xa = x._aval
      if xa is not aval and xa != aval:
        return None, None
      if a is not None:
        info = x._lane_info
        if info is not None and (info[0] is lkey or info[0] == lkey):
          cols.append(info[1])
          continue
    elif t is np.ndarray or t is Array:
      if get_aval(x) != aval:
        return None, None
    else:
      return None, None
    if a is None:
      cols.append([lanes.put(k, x, uploads) for k in range(len(lanes))])
    else:
      cols.append(_pmap_blocks(x, a, lanes, uploads))
  return cols, uploads


def _pmap_entry(call_fun, tree, lane_avals, name, n, devs, out_axes, fname, dist=None,
                donated=None):
  """What a pmap signature needs on every call: the program, the lanes, the output pytree and,
  per output, its sharding over the devices (None: out_axes None, one device's value), its
  blocks' shape, its global type and the key of its lanes' values (``_lanes_key``).  Over
  several processes (``dist``) the axis spans every process's ``n`` devices; the results hold
  this process's blocks."""
  from ourjax import api
  from ourjax.sharding import Mesh, NamedSharding, PartitionSpec
  multi = dist is not None and dist.num_processes > 1
  if multi and len(set(dist.device_counts)) != 1:
    raise ValueError(f"pmap over several processes needs as many devices in each, got "
                     f"{dist.device_counts}")
  size = n * dist.num_processes if multi else n
  closed, out_tree = _trace_per_device(call_fun, tree, lane_avals, {name: size},
                                       f"pmap({fname})")
  mesh = Mesh(np.array(devs, dtype=object), (name,))
  if multi:
    # the axis spans every process's first n devices, process 0's first; the results are
    # laid out over this process's (as JAX's pmap results are)
    every = []
    for q in range(dist.num_processes):
      every.extend(devs if q == dist.process_id else
                   [d for d in dist.global_devices if d.process_index == q][:n])
    lanes = Lanes(Mesh(np.array(every, dtype=object), (name,)))
  else:
    lanes = Lanes(mesh)
  how = []
  types: dict = {}        # (equal global types are one object: see _fast_entry)
  for aval, oa in zip(closed.out_avals, api._flatten_axes("pmap out_axes", out_tree, out_axes)):
    if oa is None:
      how.append((None, None, None, None))
      continue
    oa = oa % (aval.ndim + 1)
    sharding = NamedSharding(mesh, PartitionSpec(*([None] * oa + [name])))
    gaval = aval.update(shape=aval.shape[:oa] + (n,) + aval.shape[oa:])
    how.append((sharding, aval.shape[:oa] + (1,) + aval.shape[oa:],
                types.setdefault(gaval, gaval), _lanes_key(oa, lanes)))
  return Program(closed, _backend_of(devs), donated), lanes, out_tree, how


def _hashable(v) -> bool:
  try:
    hash(v)
    return True
  except TypeError:
    return False


def _one_index_per_lane(sh, shape, axis, lanes) -> bool:
  """Whether ``sh`` puts index k of ``axis`` (and all of the other axes) on lane k's device;
  remembered per sharding, shape and axis."""
  memo = sh.__dict__.setdefault("_pmap_layout", {})
  key = (shape, axis, tuple(lanes._ordinals))
  hit = memo.get(key)
  if hit is None:
    hit = list(sh._device_list) == lanes.devices
    for k, (idx, rep) in enumerate(sh._blocks(shape)):
      for d, sl in enumerate(idx):
        lo, hi, _ = sl.indices(shape[d])
        hit = hit and rep == 0 and (lo, hi) == ((k, k + 1) if d == axis else (0, shape[d]))
    memo[key] = hit
  return hit


def _pmap_blocks(x, axis, lanes: Lanes, uploads=None):
  """Per lane, index ``axis`` of ``x`` (the lane's slice, without that axis; host data is
  copied to GPUs through ``uploads`` when given, see ``Lanes.put``)."""
  aval = core.get_aval(x)
  bshape = aval.shape[:axis] + aval.shape[axis + 1:]
  if isinstance(x, ShardedArray) and _one_index_per_lane(x._sharding, aval.shape, axis, lanes):
    return [lanes.put(k, _reshaped(s, bshape)) for k, s in enumerate(x._shards)]
  host = np.asarray(x._value if isinstance(x, Array) else x)
  if axis:
    host = np.moveaxis(host, axis, 0)
  # (a GPU lane's block is copied to the device, the host data staged before put returns: no
  # host copy first; a CPU lane's block is its own copy)
  copy = np.array if lanes.platform == "cpu" else np.asarray
  baval = _reshaped_aval(aval, bshape)
  return [lanes.put(k, Array._from_result(copy(host[k], order="C"), baval), uploads)
          for k in range(len(lanes))]

