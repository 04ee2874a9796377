"""Devices and synchronization (the ``ourjax.device_put`` family, re-exported by ``api`` and
the top-level package): placing values on devices and shardings, reading them back, waiting
for them, and the device queries."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes
from ourjax import _pytree as tree_util
from ourjax._pytree import tree_map, tree_structure
from ourjax.array import Array




def _is_device_spec(d) -> bool:
  from ourjax.sharding import Sharding
  return isinstance(d, Sharding) or (hasattr(d, "platform") and hasattr(d, "id"))


def _prefix_mismatches(prefix, full, path: str, out: list, name: str = "device_put device",
                       is_spec=_is_device_spec) -> list:
  """Where ``prefix`` (a pytree whose leaves are device specifications) fails to be a tree
  prefix of ``full``: one description per mismatching key path, all of them (JAX lists every
  mismatch of a device_put device tree).  ``None`` in ``prefix`` is an empty subtree, as in a
  pytree; it matches only an empty subtree of ``full``."""
  if is_spec(prefix):
    return out
  where = f"{name}{path}"
  full_leaves = tree_util.tree_leaves(full)
  full_is_leaf = len(full_leaves) == 1 and full_leaves[0] is full
  if full_is_leaf or type(prefix) is not type(full):
    full_t = "a pytree leaf" if full_is_leaf else str(type(full))
    out.append(f"pytree structure error: different types at key path\n    {where}\nAt that key "
               f"path, the prefix pytree {name} has a subtree of type\n    "
               f"{type(prefix)}\nbut at the same key path the full pytree has a subtree of "
               f"different type\n    {full_t}.")
    return out
  level = tree_structure(prefix, is_leaf=lambda y: y is not prefix)
  try:
    full_children = level.flatten_up_to(full)
  except (ValueError, TypeError):
    full_level = tree_structure(full, is_leaf=lambda y: y is not full)
    out.append(f"pytree structure error: different numbers of pytree children at key path\n"
               f"    {where}\nAt that key path, the prefix pytree {name} has a "
               f"subtree {level} but the full pytree has {full_level}.")
    return out
  prefix_children = tree_util.tree_flatten_with_path(prefix, is_leaf=lambda y: y is not prefix)[0]
  for (key, p), f in zip(prefix_children, full_children):
    _prefix_mismatches(p, f, path + tree_util.keystr(key), out, name, is_spec)
  return out


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
  """Arrays of the leaves of ``x`` on ``device``: a ``Device`` from ``ourjax.devices()``, a
  ``Sharding`` (``ourjax.sharding``: the array is split into blocks over its devices), a pytree
  of those that is a tree prefix of ``x``, or None for the default backend's first device (the
  GPU when one is present).  Tracers pass through unchanged.

  As in JAX: an array already where it is asked to be is returned itself unless
  ``may_alias=False`` (then it is copied); ``may_alias`` and ``donate`` cannot both be True.
  Put on a device (not None), the result is *committed* to it: jitted calls and operations
  on it run there (see ``JitWrapped``)."""
  from ourjax import backends
  from ourjax.api import _jax_array_error
  from ourjax.sharding import Sharding, shard_value
  if may_alias and donate:
    raise ValueError("may_alias and donate cannot be True at the same time.")

  def put(v, dev):
    if isinstance(v, core.Tracer):
      return v
    if isinstance(v, Array) and v.is_deleted():     # (donated to a jitted call, or deleted)
      from ourjax._donation import deleted_error
      raise deleted_error(v.aval)
    if not isinstance(v, Array):
      if hasattr(v, "__jax_array__"):
        raise _jax_array_error("device_put")
      core.check_not_masked(v)
      v = Array(v, weak_type=dtypes.is_weakly_typed(v))
    if isinstance(dev, Sharding):
      out = shard_value(v, dev)
    else:
      out = backends.put_on(v, dev)
    if out is v and may_alias is False:
      from ourjax.lax.elementwise import copy_p
      out = copy_p.bind(v)
    if isinstance(dev, Sharding) and type(out) is Array and len(dev._device_list) == 1:
      dev = dev._device_list[0]        # (laid out on one device: committed to it, as in JAX)
    if dev is not None and not isinstance(dev, Sharding):
      # put on a device: committed to it, as in JAX (a new array: the argument stays as it was)
      if out is not v and type(out) is Array and out._committed is None:
        out._committed = dev
      else:
        out = backends.commit(out, dev)
    return out
  if device is None or _is_device_spec(device):
    return tree_map(lambda v: put(v, device), x)
  leaves = tree_util.tree_leaves(device)
  bad = [d for d in leaves if not _is_device_spec(d)]
  if bad or not isinstance(device, (tuple, list, dict)) and not leaves:
    raise ValueError("`jax.device_put` only accepts `None`, `jax.sharding.Sharding`, "
                     "`jax.Device`, or a pytree of these values. Received invalid value: "
                     f"{(bad or [device])[0]}")
  mismatches = _prefix_mismatches(device, x, "", [])
  if mismatches:
    details = "\n".join("  " + m for m in mismatches)
    raise ValueError("device_put device specification must be a tree prefix of the "
                     f"corresponding value; \n  Mismatch details ({len(mismatches)} found):\n"
                     f"{details}")
  return tree_util.tree_map(put, x, tree_util.tree_broadcast(device, x))


def device_get(x):
  """Host NumPy copies of the Arrays in ``x`` (other leaves unchanged)."""
  return tree_map(lambda v: np.asarray(v) if isinstance(v, Array) else v, x)


def block_until_ready(x):
  """Wait until every Array in ``x`` has been computed; returns ``x``."""
  def block(v):
    if hasattr(v, "block_until_ready"):
      v.block_until_ready()
    return v
  return tree_map(block, x)


def copy_to_host_async(x):
  """Start copying every array in ``x`` to the host (a no-op where device memory is host
  memory); returns ``x`` itself.  Leaves without ``copy_to_host_async`` are skipped."""
  from ourjax import tree_util as public_tree_util
  for v in public_tree_util.tree_leaves(x):
    try:
      start = v.copy_to_host_async
    except AttributeError:
      continue
    start()
  return x


def devices(backend=None):
  """The devices of every process (``ourjax.distributed``: process 0's first; the others'
  cannot be addressed from here), or of this one when it runs alone."""
  from ourjax import backends, distributed
  st = distributed.state()
  if st is not None and st.global_devices is not None:
    return list(st.global_devices)
  return backends.devices(backend)


def default_backend():
  from ourjax import backends
  return backends.default_backend()


def device_count(backend=None):
  """The number of devices of all processes (``ourjax.distributed``), as JAX counts them."""
  from ourjax import distributed
  st = distributed.state()
  if st is not None:
    return sum(st.device_counts)
  return len(devices(backend))


def local_devices(process_index=None, backend=None):
  """The devices of process ``process_index`` (this one by default)."""
  from ourjax import backends, distributed
  st = distributed.state()
  if st is None or st.global_devices is None:
    return backends.devices(backend)
  me = st.process_id if process_index is None else int(process_index)
  return [d for d in st.global_devices if d.process_index == me]


def local_device_count(backend=None) -> int:
  from ourjax import distributed
  st = distributed.state()
  if st is not None:
    return st.device_counts[st.process_id]
  return len(local_devices(backend=backend))


def process_index(backend=None) -> int:
  """This process's index (0 unless ``ourjax.distributed.initialize`` joined several)."""
  from ourjax import distributed
  return distributed.process_index()


def process_count(backend=None) -> int:
  from ourjax import distributed
  return distributed.process_count()


def live_arrays(platform=None) -> list:
  """Every array not yet deleted or garbage collected (``jax.live_arrays``), optionally only
  those on ``platform`` ('cpu', 'gpu').  A debugging aid: it walks the garbage collector's
  objects, so its cost grows with the heap."""
  import gc
  from ourjax.backends import array_devices
  out = []
  for x in gc.get_objects():
    if isinstance(x, Array) and not x.is_deleted():
      if platform is None or any(d.platform == platform for d in array_devices(x)):
        out.append(x)
  return out


def print_environment_info(return_string: bool = False):
  """The versions of ourjax, its dependencies and Python, the devices and the platform, as
  ``jax.print_environment_info``: printed, or returned as a string with ``return_string``."""
  import platform
  import sys
  import textwrap
  import ourjax
  try:
    import llvmlite
    llvm = llvmlite.__version__
  except Exception:        # (llvmlite is a dependency; its absence is reported, not raised)
    llvm = "not installed"
  devs = devices()
  kinds = sorted({d.platform for d in devs})
  info = textwrap.dedent(f"""\
  ourjax:   {ourjax.__version__}
  llvmlite: {llvm}
  numpy:    {np.__version__}
  python:   {sys.version.replace(chr(10), ' ')}
  device info: {'/'.join(kinds)}-{len(devs)}, {len(local_devices())} local devices
  process_count: {process_count()}
  platform: {platform.uname()}
  """)
  if return_string:
    return info
  print(info)
