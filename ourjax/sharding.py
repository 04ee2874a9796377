"""Shardings: how an array's elements are laid out over devices (``jax.sharding``).

* ``Mesh(devices, axis_names)``: an n-d grid of devices with a name per grid axis.
* ``PartitionSpec`` (``P``): per array dimension, the mesh axis (or tuple of axes) that splits it,
  or None (not split).  Mesh axes that no dimension names replicate the array over them.
* ``NamedSharding(mesh, spec)``: an array split into blocks by ``spec`` over ``mesh``.
* ``SingleDeviceSharding(device)``: the whole array on one device.

A value laid out over several devices is a ``ShardedArray``: an ``Array`` that holds one block
(a plain single-device Array) per device of its sharding, in the order of
``sharding._device_list``.  Its global value is assembled on the host only when something reads it
(printing, NumPy, an eager operation); ``pmap``, ``shard_map`` and ``jit`` (``interpreters/spmd.py``)
hand each device its own block without going through the host.
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from ourjax.array import Array
from ourjax.core import ShapedArray

__all__ = ["Mesh", "PartitionSpec", "P", "NamedSharding", "SingleDeviceSharding", "Sharding",
           "Shard", "ShardedArray", "make_mesh", "AxisType", "make_array_from_callback",
           "make_array_from_single_device_arrays", "make_array_from_process_local_data"]


class AxisType:
  """Accepted for compatibility: ourjax's meshes behave like JAX's ``Auto`` axes (shardings are
  propagated by the compiler, not part of the types)."""
  Auto = "Auto"
  Explicit = "Explicit"
  Manual = "Manual"


class PartitionSpec(tuple):
  """Per array dimension: a mesh axis name, a tuple of names, or None.  Trailing dimensions
  that the spec does not reach are not split."""

  UNCONSTRAINED = "unconstrained"

  def __new__(cls, *entries):
    out = []
    for e in entries:
      if isinstance(e, list):
        e = tuple(e)
      if isinstance(e, tuple) and len(e) == 1:
        e = e[0]
      out.append(e)
    return super().__new__(cls, out)

  def __repr__(self):
    return "P(" + ", ".join(repr(e) for e in self) + ("," if len(self) == 1 else "") + ")"

  def _axes(self, ndim: int) -> list[tuple]:
    """For each of ``ndim`` dimensions, the tuple of mesh axes that split it (empty: none)."""
    if len(self) > ndim:
      raise ValueError(f"PartitionSpec {self!r} has {len(self)} entries, more than the array's "
                       f"{ndim} dimensions")
    out = []
    for e in tuple(self) + (None,) * (ndim - len(self)):
      if e is None or e == PartitionSpec.UNCONSTRAINED:
        out.append(())
      else:
        out.append(tuple(e) if isinstance(e, tuple) else (e,))
    return out


P = PartitionSpec
_mesh_context = threading.local()


class Mesh:
  """An n-d array of devices, each axis named.  ``with mesh:`` makes it the mesh that
  ``shard_map`` and ``PartitionSpec``-only shardings use when none is given."""

  def __init__(self, devices, axis_names, axis_types=None):
    devs = np.array(devices, dtype=object)
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if devs.ndim != len(names):
      raise ValueError("Mesh requires the ndim of its first argument (`devices`) to equal the "
                       "length of its second argument (`axis_names`), but got devices.ndim == "
                       f"{devs.ndim} (shape {devs.shape}) and len(axis_names) == {len(names)} "
                       f"({names}).")
    if len(set(names)) != len(names):
      raise ValueError(f"Mesh: duplicate axis names in {names}")
    ids = [d.id for d in devs.flat]
    if len(set(ids)) != len(ids):
      raise ValueError(f"Mesh: a device appears twice in {devs.tolist()}")
    self.devices = devs
    self.axis_names = names
    self.axis_types = tuple(axis_types) if axis_types else (AxisType.Auto,) * len(names)

  @property
  def shape(self):
    return collections.OrderedDict(zip(self.axis_names, self.devices.shape))

  @property
  def axis_sizes(self):
    return tuple(self.devices.shape)

  @property
  def size(self) -> int:
    return int(self.devices.size)

  @property
  def device_ids(self):
    return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

  @property
  def local_devices(self):
    """The mesh's devices that this process addresses (all of them in one process)."""
    me = _process_index()
    return [d for d in self.devices.flat if getattr(d, "process_index", 0) == me]

  @property
  def is_multi_process(self) -> bool:
    return any(getattr(d, "process_index", 0) != _process_index() for d in self.devices.flat)

  @property
  def empty(self) -> bool:
    return self.devices.size == 0

  def _key(self):
    return (self.axis_names, self.devices.shape, tuple((d.platform, d.id) for d in self.devices.flat))

  def __eq__(self, other):
    return isinstance(other, Mesh) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    return "Mesh(" + ", ".join(f"{n!r}: {s}" for n, s in self.shape.items()) + ")"

  def __enter__(self):
    stack = getattr(_mesh_context, "stack", None)
    if stack is None:
      stack = _mesh_context.stack = []
    stack.append(self)
    return self

  def __exit__(self, *exc):
    _mesh_context.stack.pop()
    return False

  def coords(self) -> list[dict]:
    """For each device in ``devices.flat`` order, its coordinate on every axis."""
    return [dict(zip(self.axis_names, idx)) for idx in np.ndindex(*self.devices.shape)]


def current_mesh():
  stack = getattr(_mesh_context, "stack", None)
  return stack[-1] if stack else None


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None) -> Mesh:
  """A mesh of ``prod(axis_shapes)`` devices (the first ones of ``ourjax.devices()`` unless
  ``devices`` is given) with the given axis names."""
  from ourjax import api
  shape = tuple(int(s) for s in axis_shapes)
  n = int(np.prod(shape, dtype=np.int64))
  devs = list(devices) if devices is not None else api.devices()
  if len(devs) < n:
    raise ValueError(f"make_mesh: the mesh {shape} needs {n} devices, but only {len(devs)} are "
                     "available (on the CPU, OURJAX_NUM_CPU_DEVICES=N gives N devices)")
  return Mesh(np.array(devs[:n], dtype=object).reshape(shape), axis_names, axis_types)


class Shard:
  """One device's block of an array: ``device``, ``index`` (a tuple of slices into the global
  array), ``replica_id`` and ``data`` (a single-device Array)."""

  def __init__(self, device, index, replica_id, data):
    self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

  def __repr__(self):
    return (f"Shard(device={self.device!r}, index={self.index}, replica_id={self.replica_id}, "
            f"data={self.data})")


def _process_index() -> int:
  from ourjax import distributed
  st = distributed._state
  return 0 if st is None else st.process_id


class Sharding:
  """The interface every sharding has.  Under ``ourjax.distributed`` a sharding may name
  devices of other processes: its *addressable* devices are this process's."""
  memory_kind = "device"

  @property
  def device_set(self) -> set:
    return set(self._device_list)

  def _addressable(self) -> list:
    """The positions in ``_device_list`` of the devices this process addresses."""
    me = _process_index()
    hit = self.__dict__.get("_addressable_memo")
    if hit is None or hit[0] != me:
      pos = [i for i, d in enumerate(self._device_list)
             if getattr(d, "process_index", 0) == me]
      hit = self.__dict__["_addressable_memo"] = (me, pos)
    return hit[1]

  @property
  def addressable_devices(self) -> set:
    return {self._device_list[i] for i in self._addressable()}

  @property
  def is_fully_addressable(self) -> bool:
    return len(self._addressable()) == len(self._device_list)

  @property
  def num_devices(self) -> int:
    return len(self._device_list)

  def devices_indices_map(self, global_shape) -> dict:
    return {d: idx for d, (idx, _) in zip(self._device_list, self._blocks(global_shape))}

  def addressable_devices_indices_map(self, global_shape) -> dict:
    blocks = self._blocks(global_shape)
    return {self._device_list[i]: blocks[i][0] for i in self._addressable()}

  def shard_shape(self, global_shape) -> tuple:
    idx = self._blocks(global_shape)[0][0]
    return tuple(len(range(*s.indices(n))) for s, n in zip(idx, global_shape))

  def is_equivalent_to(self, other, ndim: int) -> bool:
    if not isinstance(other, Sharding) or self._device_list != other._device_list:
      return False
    shape = (self.num_devices * 2,) * ndim
    return self._blocks(shape) == other._blocks(shape)


class SingleDeviceSharding(Sharding):
  def __init__(self, device, *, memory_kind=None):
    self._device = device
    self._device_list = [device]

  @property
  def is_fully_replicated(self) -> bool:
    return True

  def _blocks(self, shape):
    return [(tuple(slice(None) for _ in shape), 0)]

  def __eq__(self, other):
    return isinstance(other, SingleDeviceSharding) and other._device == self._device

  def __hash__(self):
    return hash(("single", self._device.platform, self._device.id))

  def __repr__(self):
    return f"SingleDeviceSharding(device={self._device!r}, memory_kind=device)"


class NamedSharding(Sharding):
  def __init__(self, mesh: Mesh, spec=None, *, memory_kind=None):
    if spec is None:
      spec = PartitionSpec()
    if not isinstance(spec, PartitionSpec):
      spec = PartitionSpec(*spec)
    seen = set()
    for axes in spec._axes(len(spec)):
      for name in axes:
        if name not in mesh.axis_names:
          raise ValueError(f"Resource axis: {name} of {spec!r} is not found in mesh: "
                           f"{mesh.axis_names}.")
        if name in seen:
          raise ValueError(f"A single NamedSharding spec specification can map every mesh axis "
                           f"to at most one positional dimension, but {spec!r} has duplicate "
                           f"entries for `{name}`")
        seen.add(name)
    self.mesh, self.spec = mesh, spec
    self._device_list = list(mesh.devices.flat)

  @property
  def is_fully_replicated(self) -> bool:
    return all(self.mesh.shape[n] == 1 for axes in self.spec._axes(len(self.spec)) for n in axes)

  def _blocks(self, global_shape):
    """Per device (mesh order): (index tuple of slices, replica id); computed once per shape."""
    shape = tuple(global_shape)
    cache = self.__dict__.setdefault("_block_cache", {})
    hit = cache.get(shape)
    if hit is None:
      hit = cache[shape] = self._compute_blocks(shape)
    return hit

  def _compute_blocks(self, shape):
    dim_axes = self.spec._axes(len(shape))
    sizes = self.mesh.shape
    for d, axes in enumerate(dim_axes):
      parts = int(np.prod([sizes[n] for n in axes], dtype=np.int64))
      if parts > 1 and shape[d] % parts:
        raise ValueError(
            f"Sharding spec {self.spec!r} implies that array axis {d} is partitioned {parts} "
            f"times, but does not evenly divide the dimension size {shape[d]}. Got shape: "
            f"{shape} and sharding {self!r}")
    used = {n for axes in dim_axes for n in axes}
    out = []
    for c in self.mesh.coords():
      idx = []
      for d, axes in enumerate(dim_axes):
        parts, k = 1, 0
        for n in axes:
          k = k * sizes[n] + c[n]
          parts *= sizes[n]
        if parts == 1:
          idx.append(slice(None))
        else:
          b = shape[d] // parts
          idx.append(slice(k * b, (k + 1) * b))
      rep = 0
      for n in self.mesh.axis_names:
        if n not in used:
          rep = rep * sizes[n] + c[n]
      out.append((tuple(idx), rep))
    return out

  def __eq__(self, other):
    if not isinstance(other, NamedSharding) or other.mesh != self.mesh:
      return False
    n = max(len(self.spec), len(other.spec))
    return self.spec._axes(n) == other.spec._axes(n)

  def __hash__(self):
    return hash((self.mesh, tuple(a for a in self.spec._axes(len(self.spec)) if a)))

  def __repr__(self):
    return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r}, memory_kind=device)"


class ShardedArray(Array):
  """An Array whose value lies in blocks on several devices (or on one CPU device other than the
  first).  ``_shards``: one single-device Array per device of ``_sharding._device_list`` that
  this process addresses (all of them, but under ``ourjax.distributed``: a *global* array, of
  which each process holds the blocks of its own devices).

  ``pmap``'s results are made from its lanes' values (``_from_lanes``): each block is a lane's
  value with the mapped axis put back (size 1), made when first asked for; passed to ``pmap``
  again along that axis over the same devices, the lanes' values are used as they are
  (``_lanes``)."""
  __slots__ = ("_shard_list", "_sharding", "_lane_info")

  @classmethod
  def _from_shards(cls, shards, sharding: Sharding, aval: ShapedArray) -> "ShardedArray":
    a = object.__new__(cls)
    a._npy = None
    a.weak_type = aval.weak_type
    a._aval = aval
    a._device_buf = None
    a._committed = None
    a._shard_list = list(shards)
    a._sharding = sharding
    a._lane_info = None
    return a

  @classmethod
  def _from_lanes(cls, values, key, block_shape, sharding: Sharding,
                  aval: ShapedArray) -> "ShardedArray":
    """The array laid out by ``sharding`` whose block on lane k's device is ``values[k]``
    reshaped to ``block_shape``; ``key`` (the mapped axis and the devices' ids) says which
    ``pmap`` calls may take ``values`` as their lanes' values.  (``pmap._lane_results``
    makes pmap's results the same way, written out.)"""
    a = object.__new__(cls)
    a._npy = None
    a.weak_type = aval.weak_type
    a._aval = aval
    a._device_buf = None
    a._committed = None
    a._shard_list = None
    a._sharding = sharding
    a._lane_info = (key, values, block_shape)
    return a

  def _lanes(self, key):
    """The lanes' values this array was made from, when ``key`` is the one it was made with."""
    info = self._lane_info
    return info[1] if info is not None and info[0] == key else None

  @property
  def _shards(self):
    s = self._shard_list
    if s is None:
      from ourjax.interpreters.spmd import _reshaped
      _, values, bshape = self._lane_info
      s = self._shard_list = [_reshaped(v, bshape) for v in values]
    return s

  @_shards.setter
  def _shards(self, shards):
    self._shard_list = list(shards)
    self._lane_info = None

  @property
  def _value(self) -> np.ndarray:
    if self._npy is None:
      # (the lanes' values of a pmap result are read as they are, not through views that
      # would keep them from being donated later)
      parts = self._parts()
      if not parts:
        from ourjax._donation import deleted_error
        raise deleted_error(self._aval)
      aval, sh = self._aval, self._sharding
      blocks = sh._blocks(aval.shape)
      mine = sh._addressable()
      if len(mine) != len(blocks):
        # a global array: readable here only when this process's blocks cover it
        have = {_index_key(blocks[i][0], aval.shape) for i in mine}
        if any(_index_key(idx, aval.shape) not in have for idx, _ in blocks):
          raise RuntimeError(
              f"Fetching value for `jax.Array` that spans non-addressable (non process local) "
              f"devices is not possible: this {aval.str_short()} array is laid out by {sh} "
              f"over the devices of several processes, and process {_process_index()} holds "
              "only some of its blocks. Use `ourjax.experimental.multihost_utils."
              "process_allgather` to gather the global array, or `.addressable_shards` to "
              "inspect this process's blocks.")
      out = np.empty(aval.shape, aval.dtype)
      done = set()
      for i, s in zip(mine, parts):
        idx = blocks[i][0]
        k = _index_key(idx, aval.shape)
        if k not in done:
          done.add(k)
          out[idx] = np.asarray(s._value).reshape(out[idx].shape)
      out.flags.writeable = False
      self._npy = out
    return self._npy

  @property
  def sharding(self):
    return self._sharding

  @property
  def committed(self) -> bool:
    return True         # (laid out by a sharding: committed to its devices, as in JAX)

  @property
  def is_fully_addressable(self) -> bool:
    return self._sharding.is_fully_addressable

  @property
  def addressable_shards(self):
    sh = self._sharding
    blocks = sh._blocks(self._aval.shape)
    return [Shard(sh._device_list[i], blocks[i][0], blocks[i][1], s)
            for i, s in zip(sh._addressable(), self._shards)]

  def addressable_data(self, index: int):
    """This process's block number ``index`` (a single-device array)."""
    return self._shards[index]

  @property
  def global_shards(self):
    """Every device's ``Shard``; those of other processes' devices have ``data`` None."""
    sh = self._sharding
    blocks = sh._blocks(self._aval.shape)
    data = dict(zip(sh._addressable(), self._shards))
    return [Shard(d, idx, rep, data.get(i)) for i, (d, (idx, rep)) in
            enumerate(zip(sh._device_list, blocks))]

  @property
  def is_fully_replicated(self) -> bool:
    return self._sharding.is_fully_replicated

  def devices(self):
    return set(self._sharding._device_list)

  @property
  def device(self):
    devs = self._sharding._device_list
    if len(devs) != 1:
      raise ValueError("Length of devices is greater than 1. Please use `.devices()`.")
    return devs[0]

  def _parts(self):
    """The shards, or the lanes' values they are made from (the same data, not reshaped)."""
    if self._shard_list is None:
      return self._lane_info[1]
    return self._shard_list

  def block_until_ready(self):
    if self.is_deleted():
      from ourjax.errors import JaxRuntimeError
      raise JaxRuntimeError("INVALID_ARGUMENT: BlockHostUntilReady() called on deleted or "
                            "donated buffer")
    for s in self._parts():
      s.block_until_ready()
    return self

  def is_ready(self) -> bool:
    return all(s.is_ready() for s in self._parts())

  def _delete(self):
    if self._shard_list is not None:
      for s in self._shard_list:
        s._delete()
    # (the lanes' values of a pmap result are only dropped: a later result may hold them)
    self._shards = []
    self._npy = None

  def is_deleted(self) -> bool:
    return self._shard_list is not None and not self._shard_list


def _index_key(idx, shape) -> tuple:
  return tuple(sl.indices(n)[:2] for sl, n in zip(idx, shape))


def _base_sharding(self):
  from ourjax.backends import array_devices
  return SingleDeviceSharding(next(iter(array_devices(self))))


def _base_shards(self):
  return [Shard(self.device, tuple(slice(None) for _ in self.shape), 0, self)]


Array.sharding = property(_base_sharding)
Array.addressable_shards = property(_base_shards)
Array.global_shards = property(_base_shards)


def shard_value(value: Array, sharding: Sharding, uploads=None) -> Array:
  """``value`` laid out by ``sharding``: one block per device, put there (host blocks for GPUs
  through ``uploads``, a call's ``backends.cuda.backend.Uploads``, when given: copied when it
  runs)."""
  from ourjax import backends
  devs = sharding._device_list
  if isinstance(sharding, SingleDeviceSharding) or len(devs) == 1:
    return backends.put_on(value, devs[0])
  if isinstance(value, ShardedArray) and value._sharding == sharding:
    return value
  if isinstance(value, ShardedArray) and not value._sharding.is_fully_addressable and \
      not _covers(value):
    raise ValueError(
        f"cannot lay out a {value.aval.str_short()} array of sharding {value._sharding} by "
        f"{sharding}: the array spans the devices of several processes and this process "
        "does not hold all of it (ourjax moves global arrays between processes only inside "
        "a computation: pass the sharding the array has)")
  host = value._value
  shards = []
  blocks = sharding._blocks(host.shape)
  own = None
  if uploads is None and any(devs[i].platform == "gpu" for i in sharding._addressable()):
    # the blocks of all GPUs copied at once (pinned staging for large ones: ``Uploads``)
    from ourjax.backends.cuda.backend import Uploads
    uploads = own = Uploads()
  for i in sharding._addressable():
    d, idx = devs[i], blocks[i][0]
    part = host[idx]
    aval = value.aval.update(shape=part.shape)
    if uploads is not None and d.platform == "gpu":
      from ourjax.backends.cuda import driver
      shards.append(Array._from_device(uploads.put(part, driver.get_device(d.local_hardware_id)), aval))
      continue
    block = Array._from_result(np.array(part, order="C"), aval)
    shards.append(backends.put_on(block, d) if d.platform == "gpu" else block)
  if own is not None:
    own.run()
  return ShardedArray._from_shards(shards, sharding, value.aval)


def _covers(value) -> bool:
  """Whether this process's blocks of the global ``value`` hold all of it."""
  try:
    value._value
  except RuntimeError:
    return False
  return True


# ------------------------------------------------------------------------------------------------
# Arrays assembled from per-device blocks


def make_array_from_callback(shape, sharding: Sharding, data_callback, dtype=None):
  """The array of global ``shape`` laid out by ``sharding`` whose block on each device is
  ``data_callback(index)``, ``index`` a tuple of slices into the global array (JAX's
  ``jax.make_array_from_callback``); called for this process's devices only.  Blocks may be
  NumPy or ourjax arrays, or key arrays."""
  shape = tuple(int(d) for d in shape)
  blocks = [(idx, data_callback(idx))
            for idx in sharding.addressable_devices_indices_map(shape).values()]
  return _assemble(shape, sharding, blocks, dtype)


def make_array_from_single_device_arrays(shape, sharding: Sharding, arrays, *, dtype=None):
  """The array of global ``shape`` laid out by ``sharding`` from one array per device of this
  process (each the block ``sharding`` gives its device; JAX's
  ``jax.make_array_from_single_device_arrays``)."""
  shape = tuple(int(d) for d in shape)
  imap = sharding.addressable_devices_indices_map(shape)
  arrays = list(arrays)
  if len(arrays) != len(imap):
    raise ValueError(f"make_array_from_single_device_arrays: {len(arrays)} arrays for a "
                     f"sharding with {len(imap)} devices in this process "
                     f"({sorted(d.id for d in imap)}) of an array of shape {shape}")
  given = {}
  for a in arrays:
    dev = a.device
    if dev not in imap or dev in given:
      raise ValueError(f"make_array_from_single_device_arrays: an array on {dev}, which "
                       f"{sharding} does not use in this process"
                       + (" (or a second array on it)" if dev in given else ""))
    given[dev] = a
  # (in the order of the sharding's devices)
  return _assemble(shape, sharding, [(idx, given[d]) for d, idx in imap.items()], dtype)


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
  """The global array laid out by ``sharding`` from the data this process holds (JAX's
  ``jax.make_array_from_process_local_data``): along a dimension where ``local_data`` has
  the global size every process gives all of it (the same data); along one where it is
  smaller it holds, in order, the distinct blocks of that dimension that this process's
  devices take.  ``global_shape`` defaults to ``local_data``'s, each dimension multiplied by
  the number of distinct block sets the processes take along it.  Pytrees of data (with a
  tree prefix of shardings and of global shapes) give pytrees of arrays."""
  from ourjax import _pytree as tu
  from ourjax import distributed
  leaves, tree = tu.tree_flatten(local_data)
  shs = tu.broadcast_prefix(sharding, local_data,
                            lambda x: isinstance(x, (Sharding, PartitionSpec)))
  shapes = tu.broadcast_prefix(global_shape, local_data,
                               lambda x: x is None or isinstance(x, tuple))
  shs = [_pspec_sharding(s, "make_array_from_process_local_data") for s in shs]
  if distributed.process_count() == 1:
    from ourjax import api
    for g, d in zip(shapes, leaves):
      if g is not None and tuple(g) != np.shape(d):
        raise ValueError("When calling `make_array_from_process_local_data` on a single "
                         "process, global_shape should be None or equal to local_data.shape."
                         f"Got global_shape={tuple(g)} and local_data.shape={np.shape(d)}.")
    return api.device_put(local_data, sharding if isinstance(sharding, Sharding) else
                          tu.tree_unflatten(tree, shs))
  out = [_from_process_local(d, s, g) for d, s, g in zip(leaves, shs, shapes)]
  return tu.tree_unflatten(tree, out)


def _with_current_mesh(s, what):
  """``s``, or for a bare ``PartitionSpec`` its ``NamedSharding`` over the mesh of ``with
  mesh:`` (``what`` names the caller in the error when there is none)."""
  if isinstance(s, PartitionSpec):
    m = current_mesh()
    if m is None:
      raise RuntimeError(f"{what}: a PartitionSpec ({s!r}) needs a mesh: pass a "
                         "NamedSharding, or call inside `with mesh:`")
    return NamedSharding(m, s)
  return s


def _pspec_sharding(s, what):
  s = _with_current_mesh(s, what)
  if not isinstance(s, Sharding):
    raise TypeError(f"{what}: expected a Sharding, got {s!r}")
  return s


def _process_blocks(sharding, dim: int, ndim: int):
  """``(this process's rank, number of distinct block sets)`` along dimension ``dim``: the
  processes that take the same blocks of it share a rank (JAX's process-uniform layouts);
  a ``ValueError`` when the processes' sets of blocks are not all equal or disjoint."""
  if sharding.is_fully_addressable:
    return 0, 1
  n = len(sharding._device_list)
  blocks = sharding._blocks((n,) * ndim)
  per: dict = {}
  for d, (idx, _) in zip(sharding._device_list, blocks):
    per.setdefault(getattr(d, "process_index", 0), set()).add(idx[dim].indices(n)[:2])
  sets = [frozenset(v) for v in per.values()]
  distinct = list(dict.fromkeys(sets))
  everything = set().union(*sets)
  if len({len(x) for x in sets}) != 1 or sum(len(x) for x in distinct) != len(everything):
    raise ValueError(f"{sharding} lays dimension {dim} out over the processes unevenly; "
                     "pass global_shape")
  return distinct.index(frozenset(per[_process_index()])), len(distinct)


def _from_process_local(data, sharding, global_shape):
  data = data if isinstance(data, Array) else np.asarray(data)
  local = tuple(np.shape(data))
  if global_shape is None:
    global_shape = tuple(n * _process_blocks(sharding, d, len(local))[1]
                         for d, n in enumerate(local))
  global_shape = tuple(int(g) for g in global_shape)
  if len(global_shape) != len(local):
    raise ValueError(f"make_array_from_process_local_data: global_shape {global_shape} and "
                     f"the local data's shape {local} differ in rank")
  imap = sharding.addressable_devices_indices_map(global_shape)
  full = [n == g for n, g in zip(local, global_shape)]
  starts = [sorted({idx[d].indices(global_shape[d])[0] for idx in imap.values()})
            for d in range(len(local))]
  bshape = sharding.shard_shape(global_shape)
  for d, (n, g) in enumerate(zip(local, global_shape)):
    if not full[d] and len(starts[d]) * bshape[d] != n:
      raise ValueError(
          "Invalid host data, each dimension should match either global or process shape. "
          f"In dimension {d}, the process data has {n} elements. Process addresses "
          f"{len(starts[d]) * bshape[d]} elements and global_shape={global_shape}.")
  host = np.asarray(data)

  def block(idx):
    sl = []
    for d, s in enumerate(idx):
      if full[d]:
        sl.append(s)
      else:
        k = starts[d].index(s.indices(global_shape[d])[0])
        sl.append(slice(k * bshape[d], (k + 1) * bshape[d]))
    return host[tuple(sl)]
  return make_array_from_callback(global_shape, sharding, block)


def _assemble(shape, sharding, blocks, dtype):
  from ourjax import api, backends
  from ourjax._keys import PRNGKeyArray
  first = blocks[0][1]
  if type(first) is PRNGKeyArray:       # key arrays: assemble their data
    impl = first._impl
    data = _assemble(shape + impl.key_shape, sharding,
                     [(idx, b._base_array) for idx, b in blocks], None)
    return PRNGKeyArray(impl, data)
  host = [(idx, np.asarray(b)) for idx, b in blocks]
  dt = np.dtype(dtype) if dtype is not None else host[0][1].dtype
  probe = np.empty(shape, dtype=np.bool_) if host else None
  for idx, b in host:
    want = probe[idx].shape
    if want != b.shape:
      raise ValueError(f"a block of shape {b.shape} for index {idx} of an array of shape "
                       f"{shape} (expected {want})")
  if sharding.is_fully_addressable:
    full = np.zeros(shape, dtype=dt)
    for idx, b in host:
      full[idx] = b
    return api.device_put(full, sharding)
  # a global array: this process's blocks only, each put on its device
  from ourjax import dtypes
  aval = ShapedArray(shape, dtypes.canonicalize_dtype(dt))
  devs = sharding._device_list
  shards = []
  for i, (_, b) in zip(sharding._addressable(), host):
    blk = Array._from_result(np.array(b, dtype=aval.dtype, order="C"),
                             aval.update(shape=b.shape))
    shards.append(backends.put_on(blk, devs[i]) if devs[i].platform == "gpu" else blk)
  return ShardedArray._from_shards(shards, sharding, aval)
