"""``Array``: ourjax's concrete array value.

An Array holds a read-only host NumPy buffer of a canonical dtype (64-bit types only with x64
enabled) plus the weak-type bit.  Device backends keep the data on the device instead
(``_device_buf``: the CUDA backend's ``DeviceBuffer``, with ``to_host()``, ``synchronize()``,
``shape``, ``dtype``) and the host copy ``_npy`` is made when the value is first read
(printing, ``np.asarray``, eager operations); ``block_until_ready`` waits for the device.
Operators and methods (``+``, ``.sum()``, indexing, ``.at``...)
are installed by ``ourjax.numpy`` on both this class and ``core.Tracer``.
"""
from __future__ import annotations

import numpy as np

from ourjax import dtypes
from ourjax._keys import PRNGKeyArray
from ourjax.core import ShapedArray, Tracer, check_integer_conversion, check_scalar_conversion

_PY_SCALARS = (bool, int, float, complex)


def _int_to_numpy(x: int, dt: np.dtype) -> np.ndarray:
  info = np.iinfo(dt)
  if not info.min <= x <= info.max:
    raise OverflowError(f"Python int {x} too large to convert to {dt.name}")
  return np.asarray(x, dt)


def to_numpy(x) -> np.ndarray:
  """Host NumPy value of a concrete ourjax value, with its canonical dtype."""
  if isinstance(x, Array):
    return x._value
  if isinstance(x, np.ndarray):
    dt = dtypes.canonicalize_dtype(x.dtype)
    return x if x.dtype == dt else x.astype(dt)
  if isinstance(x, _PY_SCALARS):
    dt = dtypes.dtype(x, canonicalize=True)
    if isinstance(x, int) and not isinstance(x, bool):
      return _int_to_numpy(x, dt)
    return np.asarray(x, dt)
  if isinstance(x, np.generic):
    return np.asarray(x, dtypes.canonicalize_dtype(x.dtype))
  if isinstance(x, Tracer):
    v = x.to_concrete_value()
    if v is None:
      from ourjax.errors import TracerArrayConversionError
      raise TracerArrayConversionError(x)
    return to_numpy(v)
  if hasattr(x, "__jax_array__"):
    return to_numpy(x.__jax_array__())
  raise TypeError(f"Value {x!r} of type {type(x).__name__} is not a valid ourjax type")


class Array:
  """A concrete array (the result of eager operations and of jitted calls)."""
  # _committed: the Device that ``device_put(x, device)`` (or a computation on such arrays)
  # committed this array to, else None (JAX's uncommitted arrays: they go where the
  # computation runs)
  __slots__ = ("_npy", "weak_type", "_aval", "_device_buf", "_committed", "__weakref__")
  __array_priority__ = 100

  def __init__(self, value, weak_type: bool = False):
    v = to_numpy(value)
    if v is value and isinstance(value, np.ndarray):
      v = v.copy()          # never alias a caller's mutable buffer
    v.flags.writeable = False
    self._npy = v
    self.weak_type = bool(weak_type)
    self._aval = None
    self._device_buf = None
    self._committed = None

  @classmethod
  def _from_result(cls, value, aval: ShapedArray) -> "Array":
    """Wrap a freshly computed NumPy result (no copy), coercing it to ``aval``'s dtype."""
    v = np.asarray(value)
    if v.dtype != aval.dtype:
      v = v.astype(aval.dtype)
    if v.shape != aval.shape:   # e.g. a 0-d result that NumPy returned as shape (1,)
      v = v.reshape(aval.shape) if v.size == aval.size else np.broadcast_to(v, aval.shape).copy()
    v.setflags(write=False)      # (cheaper than ``v.flags.writeable = False``)
    a = object.__new__(cls)
    a._npy = v
    a.weak_type = aval.weak_type
    a._aval = aval
    a._device_buf = None
    a._committed = None
    return a

  @classmethod
  def _from_device(cls, buf, aval: ShapedArray) -> "Array":
    """Wrap a device buffer (``backends/cuda``: ``DeviceBuffer``) holding a value of ``aval``;
    the host copy is made when the value is first read."""
    a = object.__new__(cls)
    a._npy = None
    a.weak_type = aval.weak_type
    a._aval = aval
    a._device_buf = buf
    a._committed = None
    return a

  @property
  def _value(self) -> np.ndarray:
    if self._npy is None:
      if self._device_buf is None:
        from ourjax._donation import deleted_error
        raise deleted_error(self.aval)
      v = self._device_buf.to_host()
      if self._aval is not None and v.shape != self._aval.shape:
        v = v.reshape(self._aval.shape)
      v.flags.writeable = False
      self._npy = v
    return self._npy

  @property
  def aval(self) -> ShapedArray:
    a = self._aval
    if a is None:
      if self._npy is not None:
        a = ShapedArray(self._npy.shape, self._npy.dtype, self.weak_type)
      else:
        a = ShapedArray(self._device_buf.shape, self._device_buf.dtype, self.weak_type)
      self._aval = a
    return a

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)
  ndim = property(lambda self: self.aval.ndim)
  size = property(lambda self: self.aval.size)

  @property
  def nbytes(self):
    return self.size * self.dtype.itemsize

  # --- conversion ---
  def __array__(self, dtype=None, copy=None):
    v = self._value
    if dtype is not None and np.dtype(dtype) != v.dtype:
      return v.astype(dtype)
    if copy:
      return v.copy()
    return v

  def __bool__(self):
    return bool(self._value)

  def __int__(self):
    check_scalar_conversion(self.aval)
    return int(self._value)

  def __float__(self):
    check_scalar_conversion(self.aval)
    return float(self._value)

  def __complex__(self):
    check_scalar_conversion(self.aval)
    return complex(self._value)

  def __index__(self):
    check_integer_conversion(self.aval)
    return int(self._value)

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]

  def __iter__(self):
    if not self.shape:
      raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.shape[0]))

  def __hash__(self):
    raise TypeError("unhashable type: 'Array'")

  def item(self, *args):
    return self._value.item(*args)

  def tolist(self):
    return self._value.tolist()

  def __format__(self, spec):
    if self.ndim == 0:
      return format(self._value[()], spec)
    if spec:   # NumPy's (and JAX's) TypeError for a format spec on an n-d array
      raise TypeError("unsupported format string passed to numpy.ndarray.__format__")
    return str(self)

  def __repr__(self):
    v = self._value
    extra = ", weak_type=True" if self.weak_type else ""
    if v.size == 0:
      body = f"[], shape={v.shape}"      # JAX's form, also for 1-d
      return f"Array({body}, dtype={v.dtype.name}{extra})"
    body = np.array2string(v, prefix="Array(", separator=", ")
    return f"Array({body}, dtype={v.dtype.name}{extra})"

  def __str__(self):
    return str(self._value)

  # --- runtime / device API ---
  def block_until_ready(self):
    """Wait until the value has been computed (device arrays are produced asynchronously)."""
    if self._device_buf is not None:
      self._device_buf.synchronize()
    elif self._npy is None:
      from ourjax.errors import JaxRuntimeError
      raise JaxRuntimeError("INVALID_ARGUMENT: BlockHostUntilReady() called on deleted or "
                            "donated buffer")
    return self

  def is_ready(self) -> bool:
    buf = self._device_buf
    return buf is None or not hasattr(buf, "is_ready") or buf.is_ready()

  def copy_to_host_async(self):
    return None

  def delete(self):
    """Free the array's memory now (host and device); using it afterwards raises
    ``RuntimeError: Array has been deleted with shape=...`` (its shape and dtype stay)."""
    self._delete()

  def _delete(self):
    self.aval                # (kept: a deleted array still has its shape and dtype)
    self._npy = None
    self._device_buf = None

  def is_deleted(self) -> bool:
    """Whether the array was deleted (``delete()``, or donated to a jitted call)."""
    return self._npy is None and self._device_buf is None

  @property
  def is_fully_replicated(self) -> bool:
    return True

  @property
  def is_fully_addressable(self) -> bool:
    return True            # one process: every device's data is addressable

  def on_device_size_in_bytes(self) -> int:
    return int(self.nbytes)

  def unsafe_buffer_pointer(self) -> int:
    """The address of the array's data (its host buffer; on a GPU, its device buffer)."""
    buf = self._device_buf
    if buf is not None and hasattr(buf, "ptr"):
      return int(buf.ptr)
    return int(self._value.ctypes.data)

  def addressable_data(self, index: int):
    """The data of the ``index``-th addressable shard (the array itself on one device)."""
    return self.addressable_shards[index].data

  def devices(self):
    from ourjax.backends import array_devices
    return array_devices(self)

  @property
  def committed(self) -> bool:
    """Whether the array is committed to its device (``device_put`` to a device, or computed
    from such arrays): a jitted call or an operation on it runs there, as in JAX."""
    return self._committed is not None

  @property
  def device(self):
    return next(iter(self.devices()))

  # DLPack export (ourjax.dlpack): the host buffer
  def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    from ourjax.dlpack import _array_dlpack
    return _array_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                         copy=copy)

  def __dlpack_device__(self):
    from ourjax.dlpack import _array_dlpack_device
    return _array_dlpack_device(self)

  def __reduce__(self):
    return (Array, (np.asarray(self._value), self.weak_type))

  def __copy__(self):
    """A new array with its own buffer (as JAX's; the arrays are immutable either way, but a
    copy survives ``delete()`` of the original)."""
    from ourjax.lax.elementwise import copy_p
    return copy_p.bind(self)

  def __deepcopy__(self, memo):
    return self.__copy__()


dtypes.aval_types.add(Array)


class _PublicArrayMeta(type):
  """``isinstance(x, ourjax.Array)`` holds for concrete Arrays and, as in JAX, for tracers of
  arrays (so ``isinstance(x, jax.Array)`` is True inside jit, grad and vmap too)."""

  def __instancecheck__(cls, x):
    return isinstance(x, Array) or (isinstance(x, Tracer) and isinstance(
        getattr(x, "aval", None), ShapedArray)) or type(x) is PRNGKeyArray

  def __subclasscheck__(cls, sub):
    return isinstance(sub, type) and issubclass(sub, (Array, Tracer))

  def __call__(cls, *args, **kwargs):
    return Array(*args, **kwargs)


class PublicArray(metaclass=_PublicArrayMeta):
  """``ourjax.Array`` and ``jnp.ndarray``: the type of ourjax arrays for ``isinstance`` checks
  and annotations (concrete values are ``ourjax.array.Array`` instances; tracers count too, as
  in JAX).  Calling it makes a concrete Array."""


PublicArray.__name__ = PublicArray.__qualname__ = "Array"
PublicArray.__module__ = "ourjax"
