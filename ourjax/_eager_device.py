"""Eager operations on GPU arrays: one cached, compiled single-primitive executable per signature.

An eager primitive (``_eager.apply``) with an operand whose data lives on a GPU (an Array with a
CUDA ``DeviceBuffer``: ``device_put`` to a GPU, a result of a jitted call or of an earlier eager
operation on the GPU) runs there, as JAX runs each eager operation: the primitive is traced
alone (its operands' avals and its params), compiled by the CUDA backend once per (primitive,
x64 flag, operand avals, params, GPU), and called through the executable's dispatch fast path
(``ModuleExecutable.fast_path``: the slot table, one allocation of the outputs, the launch and
an event; no ``jit`` wrapper, no pytree, no signature beyond this module's key).  The results
are Arrays whose data stays on that GPU: nothing is copied to the host until the value is read
(``np.asarray``, printing, ``float()``).

Placement follows JAX's rules for committed arrays: operands on one GPU run there, host operands
(NumPy arrays, Python scalars, host Arrays: JAX's uncommitted values) are copied to it for the
call (a host Array keeps its device copy; small ones, the ``2.0`` of ``x * 2.0``, are kept on
the device per value: ``_scalars_on``), and operands on two different GPUs raise
``ValueError`` naming the primitive and the devices.  Operations whose operands are all on the
host never come here (``_eager`` keeps them in NumPy), so a machine without a GPU runs exactly
what it ran before.

A primitive compiled for ``CHURN_SIGNATURES`` signatures already (shapes that change at every
call) runs a new signature's first call on the host, its results put back on the GPU, and
compiles it at its second.

Primitives holding a jaxpr whose own eager evaluation loops on the host (``scan``,
``while_loop``: ``apply_custom``) run that evaluation at the first call of a signature (its
operations on the GPU one by one) and compile from the second (a body traced anew at every call
would otherwise compile at every call).  ``jnp`` functions of several primitives compile whole
(``_eager_replay._DeviceEntry`` through ``compiled``).

A primitive the CUDA backend cannot compile alone (no lowering rule; a jaxpr evaluated op by op)
runs in NumPy on host copies of the operands, its results put back on the GPU (a round trip, but
the results stay where JAX would have them); so does a signature whose params cannot be hashed.
"""
from __future__ import annotations

import numpy as np

from ourjax.array import Array, to_numpy
from ourjax.config import config

_PY_SCALARS = (bool, int, float, complex)

_cache: dict = {}
_CACHE_MAX = 4096      # signatures; cleared when full
_HOST = object()       # a cache entry: this signature runs in NumPy, results uploaded
_SEEN = object()       # a cache entry: seen once (a primitive holding a jaxpr, see ``apply``)
_compiles: dict = {}   # primitive -> how many of its signatures were compiled
#: signatures of one primitive compiled at their first call; past this, a new signature runs on
#: the host at its first call (results put back on the GPU) and compiles at its second: a loop
#: over ever new shapes (``x[:i]``) does not compile at every step (tens of milliseconds each)
CHURN_SIGNATURES = 64


def clear_cache() -> None:
  _cache.clear()
  _scalars.clear()
  _compiles.clear()


def gpu_of(args, prim=None):
  """The CUDA device (``driver.Device``) holding an operand of ``args`` (of primitive
  ``prim``), or None when every operand is on the host.  Operands on two different GPUs raise
  ValueError."""
  dev = None
  for a in args:
    if type(a) is Array:
      buf = a._device_buf
      if buf is not None and getattr(buf, "platform", None) == "gpu":
        d = buf.device
        if dev is None:
          dev = d
        elif d is not dev:
          return _two_gpus(args, prim)
  return dev


def _two_gpus(args, prim):
  what = f"'{prim.name}'" if prim is not None else "operation"
  raise ValueError(f"eager {what}: its operands are committed to different devices: "
                   + ", ".join(f"{a.aval.str_short()} on gpu:{a._device_buf.device.ordinal}"
                               for a in args if type(a) is Array and a._device_buf is not None
                               and getattr(a._device_buf, "platform", None) == "gpu"))


def apply(prim, args, params, avals, x64, dev, host_impl=None):
  """Run ``prim`` on ``args`` (abstract values ``avals``) on GPU ``dev``; the results are
  Arrays on ``dev``.  (A signature is cached only once its abstract evaluation passed, so a
  bad call raises every time.)  ``host_impl``: the primitive's own eager evaluation (a
  primitive with a custom implementation, ``apply_custom``), else its NumPy rule."""
  try:
    key = (prim, x64, avals, dev,
           tuple([(k, v, type(v)) for k, v in params.items()]) if params else ())
    call = _cache.get(key)
  except TypeError:      # an unhashable param
    return _on_host(prim, args, params, avals, dev, host_impl)
  if call is None or call is _SEEN:
    from ourjax import _eager
    _eager.abstract_eval(prim, avals, params)      # (the errors of a bad call)
    if len(_cache) >= _CACHE_MAX:
      _cache.clear()
      _compiles.clear()
    if call is None and (host_impl is not None or
                         _compiles.get(prim, 0) >= CHURN_SIGNATURES):
      # a primitive holding a jaxpr (scan): compiled once the same jaxpr comes again (a body
      # traced anew at every call, a fresh lambda, would compile at every call); so is a
      # primitive already compiled for many signatures (shapes that change at every call)
      _cache[key] = _SEEN
      return _on_host(prim, args, params, avals, dev, host_impl)
    call = _cache[key] = _build(prim, params, avals, dev)
    _compiles[prim] = _compiles.get(prim, 0) + 1
  if call is _HOST:
    return _on_host(prim, args, params, avals, dev, host_impl)
  for a in args:
    if type(a) is not Array or a._device_buf is None:
      args = _scalars_on(args, dev)
      break
  outs = call(args)
  return outs if prim.multiple_results else outs[0]


_scalars: dict = {}     # (device, dtype, shape, weak type, bytes) -> that value on the device
_SCALARS_MAX = 1024
_SMALL_BYTES = 256      # host operands up to this size are kept on the device per value


def _scalars_on(args, dev):
  """``args`` with their small host operands (Python and NumPy scalars, small host Arrays and
  NumPy arrays: the ``2.0`` of ``x * 2.0``, the index of ``x.at[1].set(0)``) replaced by copies
  on ``dev``, kept per value: a call reuses the copy instead of copying the value to the GPU
  again (a copy from host memory costs tens of microseconds; larger host operands are copied by
  the call, a host Array's copy kept with it)."""
  out = list(args)
  for i, a in enumerate(args):
    t = type(a)
    if t is Array:
      v = a._npy
      if a._device_buf is not None or v is None or v.nbytes > _SMALL_BYTES:
        continue
      weak = a.weak_type
    elif t in _PY_SCALARS or isinstance(a, np.generic):
      v, weak = to_numpy(a), t in _PY_SCALARS
    elif t is np.ndarray and a.nbytes <= _SMALL_BYTES:
      v, weak = to_numpy(a), False
    else:
      continue
    key = (dev, v.dtype, v.shape, weak, v.tobytes())
    r = _scalars.get(key)
    if r is None:
      from ourjax.backends.cuda.backend import DeviceBuffer
      from ourjax.core import ShapedArray
      r = Array._from_device(DeviceBuffer.from_host(v, dev), ShapedArray(v.shape, v.dtype, weak))
      if len(_scalars) >= _SCALARS_MAX:
        _scalars.clear()
      _scalars[key] = r
    out[i] = r
  return out


def _bind_flat(prim, params, *args):
  r = prim.bind(*args, **params)
  return list(r) if prim.multiple_results else [r]


def _build(prim, params, avals, dev):
  """``call(args) -> list of Arrays`` running ``prim`` compiled for GPU ``dev``, or ``_HOST``
  when the CUDA backend does not compile it alone."""
  import functools
  from ourjax.interpreters import partial_eval as pe
  fun = functools.partial(_bind_flat, prim, params)
  closed = pe.trace_to_jaxpr(fun, list(avals), prim.name)
  call = compiled(closed, prim.name, dev)
  return _HOST if call is None else call


def compiled(closed, name, dev):
  """``call(args) -> list of Arrays`` running the jaxpr ``closed`` (flat arguments, flat
  results) compiled for GPU ``dev`` (``args``: Arrays on ``dev``, host arrays or scalars), or
  None when the CUDA backend does not compile it (a primitive without a lowering rule)."""
  from ourjax import backends
  try:
    exe = backends.compile_jaxpr(closed, "cuda", name, cache=False)
  except Exception as e:   # noqa: BLE001  (OURJAX_STRICT_LOWERING's LoweringError, a backend
    # that cannot build it: the operation runs on the host, as it did before GPUs ran it)
    backends.log.debug("eager %s on the GPU: not compiled (%s: %s); it runs on the host",
                       name, type(e).__name__, e)
    return None
  if not (isinstance(exe, backends.ModuleExecutable) and
          getattr(exe.compiled, "device_resident", False)):
    return None             # (evaluated op by op: each op would come back here)
  exe = backends.for_device(exe, backends.gpu_of_ordinal(dev.ordinal))
  fast = exe.fast_path()
  if fast is None:
    return lambda args: exe(*args)

  def call(args):
    # (the general call while the profiler records: it goes through the profiler's hook)
    outs = fast(args) if backends._profile_hook is None else None
    return exe(*args) if outs is None else outs
  return call


def apply_custom(prim, args, params, dev, host_impl):
  """``apply`` for a primitive with its own eager evaluation ``host_impl`` (``scan``'s), called
  by that evaluation when an operand is on GPU ``dev``."""
  from ourjax import core
  avals = tuple([core.get_aval(a) for a in args])
  return apply(prim, args, params, avals, config.x64_enabled, dev, host_impl)


def _on_host(prim, args, params, avals, dev, host_impl=None):
  """The result of the primitive's NumPy rule on host copies of the operands (or of its own
  eager evaluation ``host_impl``), put on ``dev``."""
  from ourjax import _eager
  from ourjax.backends.cuda.backend import DeviceBuffer
  if host_impl is not None:      # (its operations on device operands run there one by one)
    r = host_impl(*args, **params)
  else:
    r = _eager._run_numpy(prim, args, params, _eager.abstract_eval(prim, avals, params))
  rs = r if prim.multiple_results else [r]
  res = [Array._from_device(DeviceBuffer.from_host(x._value, dev), x.aval)
         if type(x) is Array and x._device_buf is None else x for x in rs]
  return res if prim.multiple_results else res[0]
