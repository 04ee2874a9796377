"""DLPack both ways with NumPy (ourjax.dlpack, jnp.from_dlpack, Array.__dlpack__): values,
dtypes (canonicalised as JAX: int64 -> int32 without x64), zero-copy import and export, and
JAX's errors."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import dlpack
from ourjax.backends.cuda import driver


def test_export_to_numpy_is_zero_copy_and_read_only():
  x = jnp.arange(6.).reshape(2, 3)
  assert tuple(x.__dlpack_device__()) == (1, 0)          # kDLCPU, device 0
  a = np.from_dlpack(x)
  np.testing.assert_array_equal(a, np.arange(6.).reshape(2, 3))
  assert a.dtype == np.float32 and not a.flags.writeable
  assert np.shares_memory(a, np.asarray(x))
  # a consumer of the pre-1.0 protocol (no max_version) gets a copy it may write
  legacy = x.__dlpack__()
  assert "dltensor" in repr(legacy)
  with pytest.raises(BufferError):
    x.__dlpack__(copy=False)
  with pytest.raises(BufferError):
    x.__dlpack__(max_version=(1, 0), dl_device=(2, 0))


def test_import_from_numpy():
  src = np.arange(3, dtype=np.float32)
  y = jnp.from_dlpack(src)
  assert isinstance(y, ourjax.Array) and y.dtype == jnp.float32
  np.testing.assert_array_equal(y, [0., 1., 2.])
  src[0] = 9.                    # zero-copy by default: the import aliases the buffer
  assert float(y[0]) == 9.
  src2 = np.arange(3, dtype=np.float32)
  z = dlpack.from_dlpack(src2, copy=True)
  src2[0] = 9.
  assert float(z[0]) == 0.
  w = jnp.from_dlpack(np.arange(3))
  assert w.dtype == jnp.int32 and w.tolist() == [0, 1, 2]     # (as JAX with x64 off)
  np.testing.assert_array_equal(ourjax.jit(lambda v: v * 2)(jnp.from_dlpack(np.ones(3))), 2.)
  x = jnp.arange(4.)
  np.testing.assert_array_equal(jnp.from_dlpack(x), x)        # ourjax to ourjax


def test_errors_and_dtypes():
  with pytest.raises(TypeError, match="__dlpack__ and __dlpack_device__"):
    jnp.from_dlpack(np.arange(3.).__dlpack__())     # a bare capsule, as JAX refuses
  assert dlpack.is_supported_dtype(np.float32) and dlpack.is_supported_dtype(np.bool_)
  assert not dlpack.is_supported_dtype(np.dtype("U3"))


# -- CUDA capsules (ourjax/_dlpack_cuda.py) ------------------------------------------------------

class _FakeBuf:
  """What export_capsule reads of a device buffer (no GPU needed: the capsule only points)."""

  class device:
    ordinal = 1

  def __init__(self, shape, dtype, ptr=0xdead000):
    self.shape, self.dtype, self.ptr, self.waited = shape, np.dtype(dtype), ptr, False

  def synchronize(self):
    self.waited = True


def _tensor(capsule, name=b"dltensor"):
  import ctypes
  from ourjax import _dlpack_cuda as D
  p = D._api.PyCapsule_GetPointer(capsule, name)
  return ctypes.cast(p, ctypes.POINTER(D._DLManagedTensor))


@pytest.mark.parametrize("shape,dtype,code,bits", [((2, 3), np.float32, 2, 32),
                                                   ((5,), np.int8, 0, 8),
                                                   ((), np.bool_, 6, 8),
                                                   ((4, 1, 2), "bfloat16", 4, 16)])
def test_cuda_capsule_describes_the_buffer(shape, dtype, code, bits):
  import ml_dtypes
  from ourjax import _dlpack_cuda as D
  dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
  buf = _FakeBuf(shape, dt)
  cap = D.export_capsule(buf)
  assert buf.waited                      # (the computation is waited for before export)
  t = _tensor(cap).contents.dl_tensor
  assert (t.device.device_type, t.device.device_id) == (D.kDLCUDA, 1)
  assert t.data == buf.ptr and t.byte_offset == 0 and not t.strides
  assert tuple(t.shape[i] for i in range(t.ndim)) == shape
  assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (code, bits, 1)
  assert D._np_dtype(t.dtype) == np.dtype(dt)


def test_cuda_capsule_keeps_the_buffer_until_deleted():
  """A consumer renames the capsule and calls the deleter when done; a capsule never
  consumed deletes its tensor when collected: either way the buffer is let go once."""
  import gc
  from ourjax import _dlpack_cuda as D
  before = len(D._live)
  cap = D.export_capsule(_FakeBuf((3,), np.float32))
  assert len(D._live) == before + 1
  m = _tensor(cap)
  D._api.PyCapsule_SetName(cap, b"used_dltensor")       # what a consumer does
  del cap
  gc.collect()
  assert len(D._live) == before + 1                      # consumed: the consumer owns it
  m.contents.deleter(m)
  assert len(D._live) == before
  cap = D.export_capsule(_FakeBuf((3,), np.float32))
  del cap                                                # never consumed
  gc.collect()
  assert len(D._live) == before


_gpu = pytest.mark.skipif(not driver.available(), reason="no CUDA GPU")


class _Producer:
  """Another library's CUDA tensor, as far as DLPack goes (an ourjax GPU array's capsule)."""

  def __init__(self, x):
    self.x = x

  def __dlpack__(self, stream=None):
    return self.x.__dlpack__(stream=stream)

  def __dlpack_device__(self):
    return self.x.__dlpack_device__()


@_gpu
def test_gpu_arrays_go_through_dlpack_zero_copy():
  x = ourjax.jit(lambda v: v * 2, backend="cuda")(np.arange(12, dtype=np.float32).reshape(3, 4))
  assert tuple(x.__dlpack_device__()) == (2, 0)
  y = dlpack.from_dlpack(_Producer(x))
  assert y._device_buf is not None and y._device_buf.ptr == x._device_buf.ptr
  z = dlpack.from_dlpack(_Producer(x), copy=True)
  assert z._device_buf.ptr != x._device_buf.ptr
  del x                                   # the import keeps the memory alive
  np.testing.assert_array_equal(np.asarray(y), np.arange(12.).reshape(3, 4) * 2)
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda v: v + 1)(y)),
                                np.arange(12.).reshape(3, 4) * 2 + 1)
  np.testing.assert_array_equal(np.asarray(z), np.asarray(y))
