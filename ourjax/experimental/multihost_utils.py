"""Helpers for programs that run as several processes (``jax.experimental.multihost_utils``):
``process_allgather``, ``sync_global_devices``.  They move host data through the coordinator
of ``ourjax.distributed`` (in one process they work on this process's data alone)."""
from __future__ import annotations

import zlib

import numpy as np

from ourjax._pytree import tree_map

__all__ = ["process_allgather", "sync_global_devices", "assert_equal"]


def _exchange(kind: str, arrays: list) -> list:
  """Per process (in order), the list of NumPy arrays it gave (``arrays`` here)."""
  from ourjax import distributed
  from ourjax.backends.collectives import _pack, _unpack
  st = distributed.state()
  if st is None or st.num_processes == 1:
    return [list(arrays)]
  key = st.next_key(kind)
  me, n = st.process_id, st.num_processes
  st.client.set(f"{key}/{me}", _pack(arrays), reads=n - 1)
  timeout = distributed.collective_timeout()
  return [list(arrays) if q == me else _unpack(st.client.get(
      f"{key}/{q}", timeout, f"multihost_utils.{kind}: process {me} waited for process {q}"))
      for q in range(n)]


def _global_value(x) -> np.ndarray:
  """The whole value of a global array: every process's blocks gathered."""
  shape = x.shape
  mine = []
  for s in x.addressable_shards:
    bounds = np.array([sl.indices(n)[:2] for sl, n in zip(s.index, shape)], np.int64)
    mine += [bounds.reshape(-1, 2), np.asarray(s.data)]
  out = np.empty(shape, x.dtype)
  for part in _exchange("process_allgather", mine):
    for bounds, data in zip(part[0::2], part[1::2]):
      out[tuple(slice(int(a), int(b)) for a, b in bounds)] = data.reshape(
          tuple(int(b - a) for a, b in bounds))
  return out


def process_allgather(in_tree, tiled: bool = False):
  """NumPy arrays of every process's data: a global array (``ourjax.distributed``, laid out
  over several processes' devices) becomes its whole value; any other array is stacked over
  the processes along a new leading axis (concatenated along its first one with ``tiled``;
  scalars are always stacked)."""
  from ourjax.sharding import ShardedArray

  def one(x):
    if isinstance(x, ShardedArray) and not x.is_fully_addressable:
      return _global_value(x)
    v = np.asarray(x)
    parts = [p[0] for p in _exchange("process_allgather", [v])]
    return np.concatenate(parts) if tiled and v.ndim else np.stack(parts)
  return tree_map(one, in_tree)


def assert_equal(in_tree, fail_message: str = ""):
  """Raise ``AssertionError`` unless every process passes the same values."""
  def one(x):
    parts = [p[0] for p in _exchange("assert_equal", [np.asarray(x)])]
    if any(p.shape != parts[0].shape or not np.array_equal(p, parts[0]) for p in parts[1:]):
      raise AssertionError(f"{fail_message} Expected: {parts[0]}; got: {parts}.")
  tree_map(one, in_tree)


def sync_global_devices(name: str):
  """Wait until every process has come here (with the same ``name``)."""
  assert_equal(np.uint32(zlib.crc32(name.encode())), f"sync_global_devices name mismatch "
               f"('{name}')")
