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
           "Shard", "ShardedArray", "make_mesh", "AxisType"]


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
    return list(self.devices.flat)

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


class Sharding:
  """The interface every sharding has."""
  memory_kind = "device"

  @property
  def device_set(self) -> set:
    return set(self._device_list)

  @property
  def addressable_devices(self) -> set:
    return self.device_set

  @property
  def is_fully_addressable(self) -> bool:
    return True

  @property
  def num_devices(self) -> int:
    return len(self._device_list)

  def devices_indices_map(self, global_shape) -> dict:
    return {d: idx for d, (idx, _) in zip(self._device_list, self._blocks(global_shape))}

  def addressable_devices_indices_map(self, global_shape) -> dict:
    return self.devices_indices_map(global_shape)

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
  first).  ``_shards``: one single-device Array per device of ``_sharding._device_list``.

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
    a._shard_list = list(shards)
    a._sharding = sharding
    a._lane_info = None
    return a

  @classmethod
  def _from_lanes(cls, values, key, block_shape, sharding: Sharding,
                  aval: ShapedArray) -> "ShardedArray":
    """The array laid out by ``sharding`` whose block on lane k's device is ``values[k]``
    reshaped to ``block_shape``; ``key`` (the mapped axis and the devices' ids) says which
    ``pmap`` calls may take ``values`` as their lanes' values."""
    a = object.__new__(cls)
    a._npy = None
    a.weak_type = aval.weak_type
    a._aval = aval
    a._device_buf = None
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
      if not self._shards:
        from ourjax._donation import deleted_error
        raise deleted_error(self._aval)
      aval = self._aval
      out = np.empty(aval.shape, aval.dtype)
      for (idx, rep), s in zip(self._sharding._blocks(aval.shape), self._shards):
        if rep == 0:
          out[idx] = np.asarray(s._value).reshape(out[idx].shape)
      out.flags.writeable = False
      self._npy = out
    return self._npy

  @property
  def sharding(self):
    return self._sharding

  @property
  def addressable_shards(self):
    blocks = self._sharding._blocks(self._aval.shape)
    return [Shard(d, idx, rep, s) for d, (idx, rep), s in
            zip(self._sharding._device_list, blocks, self._shards)]

  global_shards = addressable_shards

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
  host = value._value
  shards = []
  for d, (idx, _) in zip(devs, sharding._blocks(host.shape)):
    part = host[idx]
    aval = value.aval.update(shape=part.shape)
    if uploads is not None and d.platform == "gpu":
      from ourjax.backends.cuda import driver
      shards.append(Array._from_device(uploads.put(part, driver.get_device(d.id)), aval))
      continue
    block = Array._from_result(np.array(part, order="C"), aval)
    shards.append(backends.put_on(block, d) if d.platform == "gpu" else block)
  return ShardedArray._from_shards(shards, sharding, value.aval)


# ------------------------------------------------------------------------------------------------
# Arrays assembled from per-device blocks


def make_array_from_callback(shape, sharding: Sharding, data_callback, dtype=None):
  """The array of global ``shape`` laid out by ``sharding`` whose block on each device is
  ``data_callback(index)``, ``index`` a tuple of slices into the global array (JAX's
  ``jax.make_array_from_callback``).  Blocks may be NumPy or ourjax arrays, or key arrays."""
  shape = tuple(int(d) for d in shape)
  blocks = [(idx, data_callback(idx))
            for idx in sharding.devices_indices_map(shape).values()]
  return _assemble(shape, sharding, blocks, dtype)


def make_array_from_single_device_arrays(shape, sharding: Sharding, arrays, *, dtype=None):
  """The array of global ``shape`` laid out by ``sharding`` from one array per device (each
  the block ``sharding`` gives its device; JAX's ``jax.make_array_from_single_device_arrays``)."""
  shape = tuple(int(d) for d in shape)
  imap = sharding.devices_indices_map(shape)
  arrays = list(arrays)
  if len(arrays) != len(imap):
    raise ValueError(f"make_array_from_single_device_arrays: {len(arrays)} arrays for a "
                     f"sharding over {len(imap)} devices")
  blocks = []
  for a in arrays:
    dev = a.device
    if dev not in imap:
      raise ValueError(f"make_array_from_single_device_arrays: an array on {dev}, which "
                       f"{sharding} does not use")
    blocks.append((imap[dev], a))
  return _assemble(shape, sharding, blocks, dtype)


def _assemble(shape, sharding, blocks, dtype):
  from ourjax import api
  from ourjax._keys import PRNGKeyArray
  first = blocks[0][1]
  if type(first) is PRNGKeyArray:       # key arrays: assemble their data
    impl = first._impl
    data = _assemble(shape + impl.key_shape, sharding,
                     [(idx, b._base_array) for idx, b in blocks], None)
    return PRNGKeyArray(impl, data)
  host = [(idx, np.asarray(b)) for idx, b in blocks]
  full = np.zeros(shape, dtype=dtype if dtype is not None else host[0][1].dtype)
  for idx, b in host:
    if full[idx].shape != b.shape:
      raise ValueError(f"a block of shape {b.shape} for index {idx} of an array of shape "
                       f"{shape} (expected {full[idx].shape})")
    full[idx] = b
  return api.device_put(full, sharding)
