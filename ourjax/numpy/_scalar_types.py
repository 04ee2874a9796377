"""``jnp.float32`` and friends: objects that name a dtype and, when called, make a 0-d (or
n-d) Array of it -- ourjax has no scalar objects of its own, as JAX has none.

Each is a class whose metaclass gives it a ``dtype`` attribute (so ``np.dtype(jnp.float32)``
works), compares equal to the NumPy scalar type it stands for, and answers ``isinstance`` for
NumPy scalars of that type."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes


class _ScalarMeta(type):
  dtype: np.dtype

  def __hash__(cls):
    return hash(cls.dtype.type)

  def __eq__(cls, other):
    return cls is other or cls.dtype.type == other

  def __ne__(cls, other):
    return not cls == other

  def __call__(cls, x=0):
    from ourjax.numpy._creation import asarray
    return asarray(x, dtype=cls.dtype)

  def __instancecheck__(cls, instance):
    return isinstance(instance, cls.dtype.type)

  def __repr__(cls):
    return f"<class 'ourjax.numpy.{cls.__name__}'>"


def _scalar_type(np_type, name=None) -> _ScalarMeta:
  dt = np.dtype(np_type)
  name = name or dt.name
  return _ScalarMeta(name, (object,), {
      "dtype": dt, "__module__": "ourjax.numpy",
      "__doc__": f"The {dt.name} dtype; calling it makes an ourjax Array of that dtype."})


bool_ = _scalar_type(np.bool_, "bool_")
int8, int16, int32, int64 = (_scalar_type(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (_scalar_type(t) for t in (np.uint8, np.uint16, np.uint32,
                                                            np.uint64))
float16, float32, float64 = (_scalar_type(t) for t in (np.float16, np.float32, np.float64))
bfloat16 = _scalar_type(dtypes.bfloat16)
complex64, complex128 = _scalar_type(np.complex64), _scalar_type(np.complex128)
# the narrow floats (float8_e4m3fn, float8_e5m2, ...) and sub-byte integers (int4, uint2, ...)
# this ml_dtypes offers
narrow_types = {n: _scalar_type(getattr(dtypes, n)) for n in dtypes._SMALL_FLOAT_NAMES
                + dtypes._SUBBYTE_SIGNED_NAMES + dtypes._SUBBYTE_UNSIGNED_NAMES
                if hasattr(dtypes, n)}
globals().update(narrow_types)
single, double, csingle, cdouble = float32, float64, complex64, complex128

# JAX's names for the default types: the 64-bit ones, narrowed when used with x64 off
int_, uint, float_, complex_ = int64, uint64, float64, complex128
