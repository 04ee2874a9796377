"""DLPack both ways with NumPy (ourjax.dlpack, jnp.from_dlpack, Array.__dlpack__): values,
dtypes (canonicalised as JAX: int64 -> int32 without x64), zero-copy import and export, and
JAX's errors."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import dlpack


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
