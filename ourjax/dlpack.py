"""``ourjax.dlpack``: exchange arrays with other libraries through DLPack, as ``jax.dlpack``.

``from_dlpack(x)`` takes any object with ``__dlpack__`` and ``__dlpack_device__`` (a NumPy
array, a CPU PyTorch tensor, ...); by default the result aliases ``x``'s memory (zero-copy, as
JAX: a later in-place change of ``x`` shows through), ``copy=True`` copies.  An ourjax Array
exports itself with ``Array.__dlpack__`` (its host buffer, read-only under DLPack 1.0; a
consumer of the older protocol, which cannot be told the data is read-only, gets a copy).
Arrays whose value lives on a GPU export their device buffer (``__dlpack_device__`` is
``(kDLCUDA, ordinal)``), and CUDA tensors of other libraries (JAX, PyTorch, CuPy) import as
Arrays on that GPU, zero-copy unless ``copy=True`` (``_dlpack_cuda.py``)."""
from __future__ import annotations

import enum

import numpy as np

from ourjax import dtypes

__all__ = ["from_dlpack", "is_supported_dtype", "DLDeviceType"]


class DLDeviceType(enum.IntEnum):
  kDLCPU = 1
  kDLCUDA = 2


_SUPPORTED = {np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_)}


def is_supported_dtype(dtype) -> bool:
  """Whether arrays of ``dtype`` can be exchanged through DLPack."""
  return np.dtype(dtype) in _SUPPORTED


def from_dlpack(external_array, device=None, copy=None):
  """An Array with the data of ``external_array`` (an object with ``__dlpack__`` and
  ``__dlpack_device__``), aliasing its memory unless ``copy=True``."""
  from ourjax.array import Array
  from ourjax.core import ShapedArray
  if not (hasattr(external_array, "__dlpack__") and
          hasattr(external_array, "__dlpack_device__")):
    raise TypeError("The array passed to from_dlpack must have __dlpack__ and "
                    "__dlpack_device__ methods.")
  if isinstance(external_array, Array):
    return external_array if not copy else Array(np.array(external_array._value))
  dev_type, dev_id = external_array.__dlpack_device__()
  if int(dev_type) == DLDeviceType.kDLCUDA:
    return _from_cuda(external_array, int(dev_id), copy)
  if int(dev_type) != DLDeviceType.kDLCPU:
    raise BufferError(f"from_dlpack: only CPU and CUDA arrays can be imported; got a DLPack "
                      f"device type {int(dev_type)}")
  host = np.from_dlpack(external_array)
  if copy:
    host = np.array(host, copy=True)
  else:
    host = host.view()
  host.flags.writeable = False
  dt = dtypes.canonicalize_dtype(host.dtype)
  if dt != host.dtype:                      # (64-bit data without jax_enable_x64)
    host = host.astype(dt)
  return Array._from_result(host, ShapedArray(host.shape, host.dtype))


def _from_cuda(external_array, ordinal: int, copy):
  from ourjax.array import Array
  from ourjax.core import ShapedArray
  from ourjax._dlpack_cuda import import_capsule
  from ourjax.backends.cuda import driver
  stream = driver.get_device(ordinal).stream_handle
  try:                                   # (the producer orders its work before our stream)
    capsule = external_array.__dlpack__(stream=stream)
  except TypeError:
    capsule = external_array.__dlpack__()
  buf, shape, dtype = import_capsule(capsule, bool(copy))
  if dtypes.canonicalize_dtype(dtype) != dtype:   # (64-bit data without jax_enable_x64)
    host = buf.to_host().astype(dtypes.canonicalize_dtype(dtype))
    return Array._from_result(host, ShapedArray(host.shape, host.dtype))
  return Array._from_device(buf, ShapedArray(shape, dtype))


def _array_dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
  """DLPack export of the array's buffer (see the module docstring)."""
  buf = self._device_buf
  if buf is not None and (dl_device is None or int(dl_device[0]) == DLDeviceType.kDLCUDA):
    from ourjax._dlpack_cuda import export_capsule
    if copy:
      alloc = buf.device.allocator.allocate(buf.nbytes)
      buf.synchronize()
      buf.device.copy_device(alloc.ptr, buf.ptr, buf.nbytes)
      buf = type(buf)(buf.device, alloc, buf.shape, buf.dtype)
    return export_capsule(buf)
  if dl_device is not None and tuple(int(d) for d in dl_device) != (DLDeviceType.kDLCPU, 0):
    raise BufferError(f"__dlpack__: the array is on the CPU; cannot export to device "
                      f"{tuple(dl_device)}")
  v = self._value
  if copy:
    v = np.array(v, copy=True)
  if max_version is not None and tuple(max_version) >= (1, 0):
    return v.__dlpack__(max_version=tuple(max_version))
  if not v.flags.writeable:
    if copy is False:
      raise BufferError("__dlpack__: the array is read-only, which the pre-1.0 DLPack "
                        "protocol cannot signal; pass max_version=(1, 0) or allow a copy")
    v = np.array(v, copy=True)
  return v.__dlpack__()


def _array_dlpack_device(self):
  buf = self._device_buf
  if buf is not None:
    return (DLDeviceType.kDLCUDA, buf.device.ordinal)
  return (DLDeviceType.kDLCPU, 0)
