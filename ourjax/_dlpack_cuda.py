"""DLPack for arrays in GPU memory (``ourjax.dlpack``): a DLPack capsule of a CUDA device's
buffer, made and read with ctypes (the legacy ``DLManagedTensor`` layout, which every DLPack
consumer takes: JAX, PyTorch, CuPy).

Export: the capsule points at the array's device buffer (zero-copy); the array's computation
is waited for first (the consumer's stream then sees finished data), and the buffer is kept
alive until the consumer calls the tensor's deleter (or, never consumed, until the capsule is
collected).  Import: a producer's CUDA tensor becomes an Array on that GPU whose buffer is the
producer's memory (zero-copy, kept alive by holding the producer's tensor until the Array is
collected), or a device-to-device copy with ``copy=True``; the producer is asked to make the data
ready on ourjax's stream."""
from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["export_capsule", "import_capsule", "DLPACK_CODES"]

kDLCUDA = 2


class _DLDevice(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
  _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
              ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
              ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
  pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]

#: DLPack's type codes (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6)
DLPACK_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_BF16 = 4

_NAME = b"dltensor"
_USED = b"used_dltensor"
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# exported tensors alive until their deleter runs: address of the DLManagedTensor -> what it
# keeps (the struct, its shape array, the device buffer)
_live: dict = {}


@_DELETER
def _delete(managed):
  _live.pop(ctypes.addressof(managed.contents), None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
  # a capsule never consumed still owns its tensor: delete it (a consumed one was renamed)
  obj = ctypes.cast(capsule, ctypes.py_object)
  if _api.PyCapsule_IsValid(obj, _NAME):
    ptr = _api.PyCapsule_GetPointer(obj, _NAME)
    _live.pop(ptr, None)


def _dl_dtype(dt: np.dtype) -> _DLDataType:
  import ml_dtypes
  if dt == np.dtype(ml_dtypes.bfloat16):
    return _DLDataType(_BF16, 16, 1)
  code = DLPACK_CODES.get(dt.kind)
  if code is None:
    raise BufferError(f"__dlpack__: no DLPack type for {dt}")
  return _DLDataType(code, dt.itemsize * 8, 1)


def _np_dtype(t: _DLDataType) -> np.dtype:
  import ml_dtypes
  if t.lanes != 1:
    raise BufferError(f"from_dlpack: vector types (lanes={t.lanes}) are not supported")
  if t.code == _BF16 and t.bits == 16:
    return np.dtype(ml_dtypes.bfloat16)
  kinds = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
  if t.code not in kinds:
    raise BufferError(f"from_dlpack: unsupported DLPack type code {t.code}")
  if t.code == 6:
    return np.dtype(np.bool_)
  return np.dtype(f"{kinds[t.code]}{t.bits // 8}")


def export_capsule(buf):
  """A DLPack capsule of the device buffer ``buf`` (``backends.cuda.backend.DeviceBuffer``)."""
  buf.synchronize()
  managed = _DLManagedTensor()
  shape = (ctypes.c_int64 * max(1, len(buf.shape)))(*buf.shape)
  t = managed.dl_tensor
  t.data = buf.ptr
  t.device = _DLDevice(kDLCUDA, buf.device.ordinal)
  t.ndim = len(buf.shape)
  t.dtype = _dl_dtype(buf.dtype)
  t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
  t.strides = None                       # (row-major, contiguous)
  t.byte_offset = 0
  managed.deleter = _delete
  addr = ctypes.addressof(managed)
  _live[addr] = (managed, shape, buf)
  return _api.PyCapsule_New(addr, _NAME,
                            ctypes.cast(_capsule_destructor, ctypes.c_void_p).value)


class _Foreign:
  """A producer's device memory in the place of an ourjax allocation: the producer's tensor
  is deleted (its deleter called) when the last array using it is collected."""
  __slots__ = ("ptr", "nbytes", "size", "_managed", "_capsule")

  def __init__(self, ptr, nbytes, managed, capsule):
    self.ptr, self.nbytes, self.size = ptr, nbytes, nbytes
    self._managed, self._capsule = managed, capsule

  def free(self) -> None:
    m, self._managed = self._managed, None
    if m is not None and m.contents.deleter:
      m.contents.deleter(m)

  def __del__(self):
    try:
      self.free()
    except Exception:   # pragma: no cover - never raise from a finaliser
      pass


def import_capsule(capsule, copy: bool):
  """(device buffer, shape, dtype) of a consumed DLPack capsule of CUDA memory."""
  from ourjax.backends.cuda import backend as cb
  from ourjax.backends.cuda import driver
  if not _api.PyCapsule_IsValid(capsule, _NAME):
    raise BufferError("from_dlpack: not an unconsumed DLPack capsule ('dltensor')")
  managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule, _NAME),
                        ctypes.POINTER(_DLManagedTensor))
  _api.PyCapsule_SetName(capsule, _USED)         # (ours now: the capsule will not delete it)
  t = managed.contents.dl_tensor
  if t.device.device_type != kDLCUDA:
    raise BufferError(f"from_dlpack: a DLPack device type {t.device.device_type} tensor is "
                      "not CUDA memory")
  shape = tuple(int(t.shape[i]) for i in range(t.ndim))
  dtype = _np_dtype(t.dtype)
  if t.strides:
    want, step = [], 1
    for n in reversed(shape):
      want.append(step)
      step *= n
    got = [int(t.strides[i]) for i in range(t.ndim)]
    if any(n > 1 and g != w for g, w, n in zip(got, reversed(want), shape)):
      managed.contents.deleter(managed)
      raise BufferError(f"from_dlpack: only row-major contiguous CUDA tensors are supported "
                        f"(shape {shape}, strides {tuple(got)})")
  dev = driver.get_device(t.device.device_id)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  ptr = int(t.data or 0) + int(t.byte_offset)
  foreign = _Foreign(ptr, nbytes, managed, capsule)
  if copy:
    alloc = dev.allocator.allocate(nbytes)
    dev.copy_device(alloc.ptr, ptr, nbytes)
    dev.synchronize("a DLPack import's copy")
    foreign.free()
    return cb.DeviceBuffer(dev, alloc, shape, dtype), shape, dtype
  return cb.DeviceBuffer(dev, foreign, shape, dtype, cb._COMPUTED), shape, dtype
