"""Operators and methods shared by ``Array`` and every ``Tracer``, installed on both classes so
that user code cannot tell them apart (JAX's ``_set_array_base_attributes`` idea).  Methods
are the ``jnp`` functions with the array as first argument."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.array import Array
from ourjax.lax.elementwise import _bitcast_convert_type as _bitcast


# Python containers are refused outright, as JAX does: ``x == [0., 1.]`` is a TypeError rather
# than Python's ``False`` (and ``x * [1, 2]`` is not list repetition).
_REJECTED_OPERAND_TYPES = (list, tuple, set, dict)


def _defer_to_unrecognized(binary_op, opchar="op", swap=False):
  """Return NotImplemented for operand types we do not know (so Python tries the other side);
  raise JAX's TypeError for a list, tuple, set or dict operand."""
  from ourjax.numpy._ufunc_api import ufunc
  from ourjax.numpy._util import _PLAIN_OPERAND_TYPES, is_arraylike
  if isinstance(binary_op, ufunc):
    binary_op = binary_op._func      # (the function itself: one call less per operator)

  def op(self, other):
    if type(other) not in _PLAIN_OPERAND_TYPES and not is_arraylike(other):
      if type(other) in _REJECTED_OPERAND_TYPES:
        left, right = (other, self) if swap else (self, other)
        raise TypeError(f"unsupported operand type(s) for {opchar}: "
                        f"{type(left).__name__!r} and {type(right).__name__!r}")
      return NotImplemented
    return binary_op(self, other)
  op.__name__ = getattr(binary_op, "__name__", "op")
  return op


_OPCHARS = {
    "__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "//",
    "__mod__": "%", "__pow__": "**", "__matmul__": "@", "__and__": "&", "__or__": "|",
    "__xor__": "^", "__lshift__": "<<", "__rshift__": ">>", "__eq__": "==", "__ne__": "!=",
    "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=",
}


def _install():
  import ourjax.numpy as jnp

  def swap(f):
    return lambda self, other: f(other, self)

  ops = {
      "__add__": jnp.add, "__sub__": jnp.subtract, "__mul__": jnp.multiply,
      "__truediv__": jnp.true_divide, "__floordiv__": jnp.floor_divide, "__mod__": jnp.remainder,
      "__pow__": jnp.power, "__matmul__": jnp.matmul,
      "__and__": jnp.bitwise_and, "__or__": jnp.bitwise_or, "__xor__": jnp.bitwise_xor,
      "__lshift__": jnp.left_shift, "__rshift__": jnp.right_shift,
      "__eq__": jnp.equal, "__ne__": jnp.not_equal, "__lt__": jnp.less, "__le__": jnp.less_equal,
      "__gt__": jnp.greater, "__ge__": jnp.greater_equal,
  }
  methods = {}
  for name, fn in ops.items():
    opchar = _OPCHARS[name]
    methods[name] = _defer_to_unrecognized(fn, opchar)
    rname = "__r" + name[2:]
    if name not in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
      methods[rname] = _defer_to_unrecognized(swap(fn), opchar, swap=True)
  methods["__divmod__"] = _defer_to_unrecognized(lambda x, y: jnp.divmod(x, y), "divmod()")
  methods["__rdivmod__"] = _defer_to_unrecognized(lambda x, y: jnp.divmod(y, x), "divmod()",
                                                  swap=True)
  methods["__neg__"] = jnp.negative
  methods["__pos__"] = jnp.positive
  methods["__abs__"] = jnp.absolute
  methods["__invert__"] = jnp.invert
  # as JAX's (and Python's for floats): round(x) is an integer (int32), round(x, n) keeps the dtype
  methods["__round__"] = lambda self, ndigits=None: (
      jnp.round(self, ndigits) if ndigits is not None else jnp.round(self).astype(int))
  methods["__iter__"] = _iter
  methods["__contains__"] = _contains
  from ourjax.numpy import _indexing
  methods["__getitem__"] = _indexing._getitem
  methods["__setitem__"] = _indexing._setitem
  methods["__array_namespace__"] = lambda self, *, api_version=None: jnp

  methods.update(
      sum=jnp.sum, prod=jnp.prod, max=jnp.max, min=jnp.min, mean=jnp.mean, all=jnp.all,
      any=jnp.any, var=jnp.var, std=jnp.std, ptp=jnp.ptp, argmax=jnp.argmax,
      argmin=jnp.argmin, cumsum=jnp.cumsum, cumprod=jnp.cumprod, nonzero=_deferred("nonzero"),
      take=_deferred("take"), compress=_compress_method, choose=_deferred("choose"),
      astype=lambda self, dtype, copy=False, device=None: jnp.astype(self, dtype, copy=copy),
      reshape=_reshape_method, transpose=_transpose_method, conj=jnp.conjugate,
      conjugate=jnp.conjugate, round=lambda self, decimals=0, out=None: jnp.round(self,
                                                                                  decimals),
      ravel=jnp.ravel, flatten=jnp.ravel, squeeze=jnp.squeeze, swapaxes=jnp.swapaxes,
      clip=_clip_method, dot=jnp.dot, sort=jnp.sort, argsort=jnp.argsort,
      searchsorted=jnp.searchsorted, repeat=jnp.repeat, diagonal=jnp.diagonal, trace=jnp.trace,
      argpartition=jnp.argpartition, view=_view, copy=lambda self: jnp.array(self, copy=True),
      to_device=lambda self, device, *, stream=None: self, byteswap=_byteswap,
  )
  props = {
      "real": jnp.real, "imag": jnp.imag, "T": lambda self: jnp.transpose(self),
      "mT": jnp.matrix_transpose, "itemsize": lambda self: self.dtype.itemsize,
      "nbytes": lambda self: self.size * self.dtype.itemsize,
      "at": _indexing._IndexUpdateHelper,
  }
  for cls in (Array, core.Tracer):
    for name, fn in methods.items():
      setattr(cls, name, fn)
    for name, fn in props.items():
      setattr(cls, name, property(fn))
  core.Tracer.item = _tracer_item
  core.Tracer.tolist = _tracer_tolist
  core.Tracer.tobytes = lambda self, order="C": _concrete(self, "tobytes()").tobytes(order)
  Array.tobytes = lambda self, order="C": np.asarray(self).tobytes(order)


def _deferred(name):
  """A method whose jnp function comes with the indexing functions (looked up at call time)."""
  def method(self, *args, **kwargs):
    import ourjax.numpy as jnp
    fn = getattr(jnp, name, None)
    if fn is None:
      raise NotImplementedError(f"Array.{name} needs jnp.{name}, which is not available yet")
    return fn(self, *args, **kwargs)
  method.__name__ = name
  return method


def _byteswap(self):
  """The elements with their bytes in reverse order (NumPy's ``byteswap``; the dtype stays, so
  the result read as the same dtype holds the other endianness).  Complex: each part swapped."""
  if dtypes.is_complex(self.dtype):
    return lax.complex(_byteswap(lax.real(self)), _byteswap(lax.imag(self)))
  if self.dtype.itemsize == 1:
    return self
  as_bytes = lax.bitcast_convert_type(self, np.dtype(np.uint8))
  return lax.bitcast_convert_type(lax.rev(as_bytes, (self.ndim,)), self.dtype)


def _compress_method(self, condition, axis=None, *, size=None, fill_value=0, out=None):
  """``x.compress(condition, axis)`` is ``jnp.compress(condition, x, axis)`` (NumPy's order)."""
  import ourjax.numpy as jnp
  return jnp.compress(condition, self, axis, size=size, fill_value=fill_value, out=out)


def _contains(self, value):
  """``value in x``: whether a 1-D ``x`` holds the scalar ``value`` (JAX's rules)."""
  import numbers
  from ourjax.core import Tracer
  if not isinstance(value, (numbers.Number, np.generic, np.ndarray, Array, Tracer)):
    raise TypeError(f"Array.__contains__: unsupported operand type {type(value)}.")
  if self.ndim != 1:
    raise ValueError(f"Array.__contains__: search array must be one-dimensional, got "
                     f"arr.shape={self.shape}.")
  if np.ndim(value) != 0:
    raise ValueError(f"Array.__contains__: query value must be a scalar, got "
                     f"query.shape={np.shape(value)}")
  from ourjax import numpy as jnp
  return bool(jnp.any(jnp.equal(self, value)))


def _iter(self):
  """Iterate over the first axis (0-d arrays are not iterable)."""
  shape = self.shape
  if not shape:
    raise TypeError("iteration over a 0-d array")
  return _rows(self, shape)


def _rows(x, shape):
  rest, nd = shape[1:], len(shape)
  for i in range(shape[0]):
    yield lax.reshape(lax.slice(x, (i,) + (0,) * (nd - 1), (i + 1,) + rest), rest)


def _concrete(self, what):
  v = self.to_concrete_value()
  if v is None:
    aval = getattr(self, "aval", None)
    shape = aval.str_short(short_dtypes=False) if aval is not None else "?"
    raise core.ConcretizationTypeError(
        self, f"The {what} method was called on traced array with shape {shape}.")
  from ourjax.array import to_numpy
  return to_numpy(v)


def _tracer_item(self, *args):
  return _concrete(self, "item()").item(*args)


def _tracer_tolist(self):
  return _concrete(self, "tolist()").tolist()


def _reshape_method(self, *args, order="C", shape=None):
  import ourjax.numpy as jnp
  if shape is not None:
    if args:
      raise TypeError("reshape() got both a positional shape and shape=")
    return jnp.reshape(self, shape, order=order)
  newshape = args[0] if len(args) == 1 else args
  return jnp.reshape(self, newshape, order=order)


def _transpose_method(self, *args):
  import ourjax.numpy as jnp
  if not args or args == (None,):
    return jnp.transpose(self)
  axes = args[0] if len(args) == 1 and not isinstance(args[0], (int, np.integer)) else args
  return jnp.transpose(self, axes)


def _clip_method(self, min=None, max=None, out=None):  # noqa: A002
  import ourjax.numpy as jnp
  if out is not None:
    raise NotImplementedError("The 'out' argument to Array.clip is not supported.")
  return jnp.clip(self, min, max)


def _view(self, dtype=None, type=None):  # noqa: A002
  """Reinterpret the bits as ``dtype`` (the last axis rescales when item sizes differ)."""
  if type is not None:
    raise NotImplementedError("`type` argument of array.view() is not supported.")
  if dtype is None:
    return self
  dt = dtypes.check_user_dtype(dtype, "view")
  src = self.dtype
  x = self
  if src == dt:
    return x
  if src == np.bool_:
    x = lax.convert_element_type(x, np.uint8)
    src = np.dtype(np.uint8)
  target = np.dtype(np.uint8) if dt == np.bool_ else dt
  old, new = dtypes.bit_width(src), dtypes.bit_width(target)     # (int4 is 4 bits)
  if old != new and (not x.shape or (x.shape[-1] * old) % new):
    raise ValueError(f"When changing to a {'smaller' if new < old else 'larger'} dtype, its "
                     f"size must be a divisor of the size of original dtype; cannot view "
                     f"shape {x.shape} of {src.name} as {dt.name}")
  if old == new:
    out = _bitcast(x, target)
  elif old > new:
    out = _bitcast(x, target)
    out = lax.reshape(out, x.shape[:-1] + (x.shape[-1] * (old // new),))
  else:
    k = new // old
    x = lax.reshape(x, x.shape[:-1] + (x.shape[-1] // k, k))
    out = _bitcast(x, target)
  return lax.ne(out, np.uint8(0)) if dt == np.bool_ else out
