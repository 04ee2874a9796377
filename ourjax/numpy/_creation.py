"""Array creation: array/asarray, the filled constructors, ranges (arange, linspace, logspace,
geomspace), and the structured ones (eye, identity, tri, tril/triu, diag, meshgrid, indices).

Dtype rules follow JAX: Python scalars are weak and take the default dtype of their kind
(int32/float32 with x64 off); ``jnp.array(1.0)`` stays weakly typed, lists do not.  The
placement keywords place the result as ``device_put`` does, as JAX's: ``device`` (a Device or a
Sharding) and ``out_sharding`` (a Sharding); other values (a bare PartitionSpec) place
nothing.  Under a transformation they change nothing (``device_put`` passes tracers through)."""
from __future__ import annotations

import builtins
import functools
import math
import operator
import sys

import numpy as np

from ourjax import core, dtypes, lax
from ourjax._keys import KeyDType, PRNGKeyArray
from ourjax.array import Array, to_numpy
from ourjax.config import config
from ourjax.core import Tracer, get_aval
from ourjax.lax._utils import shape_error
from ourjax.numpy._util import _broadcast_to, check_arraylike, static_argnames

# ------------------------------------------------------------------------------------------------
# array / asarray


def _leaves(obj, out):
  """Leaves of nested lists/tuples, with ``__jax_array__`` objects resolved."""
  if isinstance(obj, (list, tuple)):
    for o in obj:
      _leaves(o, out)
  else:
    if obj is None:
      raise ValueError("None is not a valid value for jnp.array")
    if hasattr(obj, "__jax_array__") and not isinstance(obj, (Array, Tracer)):
      obj = obj.__jax_array__()
    out.append(obj)
  return out


def _host_nested(obj):
  if isinstance(obj, (list, tuple)):
    return [_host_nested(o) for o in obj]
  if hasattr(obj, "__jax_array__") and not isinstance(obj, (Array, Tracer)):
    obj = obj.__jax_array__()
  return to_numpy(obj) if isinstance(obj, Array) else obj


def _check_host_dtype(host: np.ndarray, what) -> None:
  if host.dtype.kind in "OUSMm" or (host.dtype.kind == "V" and
                                    host.dtype not in dtypes._valid_dtypes):
    raise TypeError(f"jnp.array: unsupported input of type {type(what).__name__} (it gives "
                    f"NumPy dtype {host.dtype}); ourjax arrays hold numbers and bools only.")


_UNSET = object()


def _placing(fun):
  """``fun``'s result put where its ``device=`` / ``out_sharding=`` keywords ask (an ourjax
  Device or Sharding; any other value places nothing, as before placement was supported);
  without them, with ``ourjax_arrays_on_default_device`` set and a GPU as the default
  backend, a host result is put on the default device (as JAX places a new array)."""
  @functools.wraps(fun)
  def placed(*args, **kwargs):
    out = fun(*args, **kwargs)
    if kwargs:
      from ourjax._device_api import _is_device_spec, device_put
      where = kwargs.get("device")
      if where is None or not _is_device_spec(where):
        where = kwargs.get("out_sharding")
      if where is not None and _is_device_spec(where):
        return device_put(out, where)
    if (type(out) is Array and out._device_buf is None and
        config.ourjax_arrays_on_default_device and core.nothing_traced()):
      from ourjax import backends
      d = backends.configured_default_device()
      if (d.platform == "gpu") if d is not None else backends.default_backend_name() == "cuda":
        out = backends.put_on(out, None)
    return out
  return placed


@_placing
def array(object, dtype=None, *args, copy=_UNSET, order=_UNSET, ndmin=_UNSET, device=None,
          out_sharding=None):
  """``jnp.array``: an Array from a scalar, array, nested list/tuple (which may hold traced
  values: they are stacked), or anything NumPy can convert.  ``copy`` (default True),
  ``order`` ('K') and ``ndmin`` (0) are keyword arguments; passing them positionally is
  deprecated (a DeprecationWarning, as JAX).  ``device``/``out_sharding`` place the result
  (see the module docstring).

  Only a weakly typed input (a Python scalar, or a weak array) gives a weakly typed result:
  ``jnp.array(1.0)`` is a weak float32, ``jnp.array([1.0])`` a strong one."""
  if args:
    if len(args) > 3:
      raise TypeError(f"array() takes at most 5 positional arguments but {2 + len(args)} were "
                      "given")
    given = {"copy": copy, "order": order, "ndmin": ndmin}
    for name, v in zip(("copy", "order", "ndmin"), args):
      if given[name] is not _UNSET:
        raise TypeError(f"array() got multiple values for argument {name!r}")
      given[name] = v
    copy, order, ndmin = given["copy"], given["order"], given["ndmin"]
    import warnings
    warnings.warn("Passing the copy, order, and ndmin arguments to jnp.array positionally is "
                  "deprecated. Use keyword arguments instead.", DeprecationWarning,
                  stacklevel=2)
  copy = True if copy is _UNSET else copy
  order = "K" if order is _UNSET else order
  ndmin = 0 if ndmin is _UNSET else ndmin
  if order is not None and order != "K":
    raise NotImplementedError("jnp.array: only order='K' is implemented")
  if type(object) is PRNGKeyArray or isinstance(dtype, KeyDType):
    return _key_array(object, dtype, copy)
  ma = sys.modules.get("numpy.ma")   # (looked up, not imported: NumPy imports it lazily, and
  if ma is not None and isinstance(object, ma.MaskedArray):   # threads racing that import saw
    object = np.asarray(object)    # a half-made module) as np.array (and JAX): the data, no mask
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "array")
  if object is None:
    raise ValueError("None is not a valid value for jnp.array")   # JAX's error
  if hasattr(object, "__jax_array__") and not isinstance(object, (Array, Tracer)):
    object = object.__jax_array__()
  weak = dtype is None and dtypes.is_weakly_typed(object)
  if isinstance(object, (Array, Tracer)):
    out = lax._convert_element_type(object, dtype or get_aval(object).dtype, weak)
    if copy and out is object:
      # a new array (a copy primitive when traced), as JAX: jnp.array(x) is not x
      from ourjax.lax.elementwise import copy_p
      out = copy_p.bind(out)
  elif isinstance(object, (list, tuple)):
    leaves = _leaves(object, [])
    dt = dtype
    if dt is None:
      dt = dtypes.result_type(*leaves) if leaves else dtypes.default_float_dtype()
    if any(isinstance(x, Tracer) for x in leaves):
      out = _stack_nested(object, dt)
    else:
      host = np.array(_host_nested(object), dtype=dt)
      _check_host_dtype(host, object)
      out = Array(host)
  elif isinstance(object, (bool, int, float, complex)):
    if dtype is not None and type(object) is int and dtypes.is_integer(dtype):
      value = np.array(object, dtype)  # as JAX: OverflowError where the dtype cannot hold it
    else:
      value = to_numpy(object)         # raises OverflowError for ints out of range
    dt = dtype or value.dtype
    out = lax._convert_element_type(Array(value, weak_type=weak), dt, weak)
  else:
    try:
      host = np.asarray(object)
    except Exception as e:
      raise TypeError(f"jnp.array: unexpected input of type {type(object).__name__}") from e
    _check_host_dtype(host, object)
    dtypes.dtype(host)               # raises for dtypes ourjax does not support
    dt = dtype or dtypes.canonicalize_dtype(host.dtype)
    out = lax._convert_element_type(Array(host), dt, False)
  if ndmin > get_aval(out).ndim:
    out = lax.broadcast_to_rank(out, ndmin)
  return out


def _stack_nested(obj, dtype):
  """Nested lists holding tracers become expand_dims + concatenate of their elements."""
  if isinstance(obj, (list, tuple)):
    if not obj:
      return Array(np.zeros((0,), dtype))
    parts = [lax.expand_dims(_stack_nested(o, dtype), (0,)) for o in obj]
    shapes = {get_aval(p).shape[1:] for p in parts}
    if len(shapes) != 1:
      raise ValueError(f"jnp.array: setting an array element with a sequence; the nested "
                       f"sequence is ragged (element shapes {sorted(shapes)})")
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, 0)
  x = obj if isinstance(obj, (Array, Tracer)) else Array(to_numpy(obj))
  return lax._convert_element_type(x, dtype, False)


@_placing
def asarray(a, dtype=None, order=None, *, copy=None, device=None, out_sharding=None):
  """``jnp.asarray``: like ``array``, but returns an Array or tracer unchanged when no dtype
  change is asked for."""
  if dtype is None and isinstance(a, (Array, Tracer)) and not copy:
    return a
  if type(a) is PRNGKeyArray and (dtype is None or dtype == a.dtype) and not copy:
    return a
  core.check_not_masked(a)     # jnp.array drops a mask, as np.array; asarray refuses (JAX)
  return array(a, dtype=dtype, copy=bool(copy), order=order)


def copy(a, order=None):
  check_arraylike("copy", a)
  return array(a, copy=True, order=order)


# ------------------------------------------------------------------------------------------------
# Filled constructors


def canonicalize_shape(shape, name="shape"):
  """An int or a sequence of ints (concrete) as a tuple of non-negative ints."""
  if isinstance(shape, (int, np.integer)) or (not isinstance(shape, (tuple, list))
                                             and np.ndim(shape) == 0):
    shape = (shape,)
  try:
    shape = tuple(core.concrete_or_error(operator.index, d,
                                         f"The shape argument to jnp.{name} must be concrete.")
                  for d in shape)
  except TypeError:  # a traced or non-integer size: JAX's TypeError (not a concretization one)
    raise shape_error(tuple(shape) if isinstance(shape, (tuple, list)) else shape,
                      f" (in jnp.{name})") from None
  if any(d < 0 for d in shape):
    raise TypeError(f"jnp.{name}: shape must not contain negative dimensions, got {shape}.")
  return shape


def _forgot_tuple(name, shape, dtype):
  if isinstance(dtype, int) and not isinstance(dtype, bool) and isinstance(shape, int):
    raise TypeError(f"Cannot interpret '{dtype}' as a data type.\n\nDid you accidentally "
                    f"write `jax.numpy.{name}({shape}, {dtype})` when you meant "
                    f"`jax.numpy.{name}(({shape}, {dtype}))`, i.e. with a single tuple argument "
                    "for the shape?")


def _filled(name, shape, value, dtype):
  _forgot_tuple(name, shape, dtype)
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, name)
  return lax.full(canonicalize_shape(shape, name), value, dt)


def _key_array(x, dtype, copy):
  """``jnp.array`` of a key array (a copy, or the array itself) or with a key dtype."""
  if type(x) is PRNGKeyArray:
    if dtype is not None and dtype != x.dtype:
      raise TypeError(f"jnp.array: cannot convert a key array of dtype {x.dtype} to {dtype}; "
                      "use jax.random.key_data")
    return x.copy() if copy else x
  raise TypeError(f"jnp.array: cannot make an array of key dtype {dtype} from "
                  f"{type(x).__name__}; use jax.random.wrap_key_data")


def _key_filled(shape, fill_value, dtype):
  """``full(shape, fill_value, dtype=<key dtype>)``: the key data filled with ``fill_value``
  (a number for every word, or a key broadcast to ``shape``)."""
  impl = dtype._impl
  shape = canonicalize_shape(shape, "full")
  if type(fill_value) is PRNGKeyArray:
    if fill_value.dtype != dtype:
      raise TypeError(f"full: fill value of dtype {fill_value.dtype} for dtype {dtype}")
    from ourjax._keys import keywise
    from ourjax.numpy._shape import broadcast_to
    return keywise(lambda v: broadcast_to(v, shape), (fill_value,), {})
  data = lax.full(shape + impl.key_shape, fill_value, np.dtype(np.uint32))
  return PRNGKeyArray(impl, data)


@_placing
def zeros(shape, dtype=None, *, device=None, out_sharding=None):
  if isinstance(dtype, KeyDType):
    return _key_filled(shape, 0, dtype)
  return _filled("zeros", shape, 0, dtype)


@_placing
def ones(shape, dtype=None, *, device=None, out_sharding=None):
  if isinstance(dtype, KeyDType):
    return _key_filled(shape, 1, dtype)
  return _filled("ones", shape, 1, dtype)


@_placing
def empty(shape, dtype=None, *, device=None, out_sharding=None):
  if isinstance(dtype, KeyDType):
    return _key_filled(shape, 0, dtype)
  return _filled("empty", shape, 0, dtype)


@_placing
def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
  """An array of ``shape`` filled with ``fill_value`` (a scalar, or an array that broadcasts)."""
  if isinstance(dtype, KeyDType):
    return _key_filled(shape, fill_value, dtype)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "full")
  check_arraylike("full", fill_value)
  if np.ndim(fill_value) == 0:
    return lax.full(canonicalize_shape(shape, "full"), fill_value, dtype)
  from ourjax.numpy._shape import broadcast_to
  return broadcast_to(asarray(fill_value, dtype=dtype), canonicalize_shape(shape, "full"))


def _like_args(name, a, dtype, shape):
  if not (hasattr(a, "dtype") and hasattr(a, "shape")):
    check_arraylike(name, a)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, name)
  if shape is not None:
    shape = canonicalize_shape(shape, name)
  return dtype, shape


@_placing
def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
  dtype, shape = _like_args("zeros_like", a, dtype, shape)
  return lax.full_like(a, 0, dtype, shape)


@_placing
def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
  dtype, shape = _like_args("ones_like", a, dtype, shape)
  return lax.full_like(a, 1, dtype, shape)


@_placing
def empty_like(prototype, dtype=None, shape=None, *, device=None, out_sharding=None):
  dtype, shape = _like_args("empty_like", prototype, dtype, shape)
  return lax.full_like(prototype, 0, dtype, shape)


@_placing
def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
  dtype, shape = _like_args("full_like", a, dtype, shape)
  check_arraylike("full_like", fill_value)
  if np.ndim(fill_value) == 0:
    return lax.full_like(a, fill_value, dtype, shape)
  from ourjax.numpy._shape import broadcast_to
  shape = get_aval(a).shape if shape is None else shape
  dtype = get_aval(a).dtype if dtype is None else dtype
  return broadcast_to(asarray(fill_value, dtype=dtype), shape)


# ------------------------------------------------------------------------------------------------
# Ranges


def _concrete_scalar(x, argname):
  if x is None:
    return None
  x = core.concrete_or_error(None, x, f"It arose in the jnp.arange argument '{argname}'.")
  if np.ndim(x) != 0:
    raise ValueError(f"jax.numpy.arange: arguments must be scalars; got {argname}={x}")
  return x


@_placing
def arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
  """``jnp.arange``: concrete bounds only (the length is part of the shape).  The dtype is the
  promoted dtype of the arguments, Python ints giving int32 (int64 with x64) and Python floats
  float32; the result is never weakly typed."""
  check_arraylike("arange", start)
  if any(x is not None and dtypes.is_complex(dtypes.dtype(x)) for x in (start, stop, step)):
    raise ValueError("Passing complex start/stop/step to jnp.arange is no longer supported "
                     "starting in JAX v0.10.0.")
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "arange")
  only_stop = stop is None and step is None
  start = _concrete_scalar(start, "stop" if only_stop else "start")
  stop = _concrete_scalar(stop, "stop")
  step = _concrete_scalar(step, "step")
  if dtype is None:
    dtype = dtypes.result_type(start, *(x for x in (stop, step) if x is not None))
  dtype = dtypes.canonicalize_dtype(dtype)
  # the length from the host values (Python numbers in double precision, NumPy scalars in
  # their own): arange(1.2, 4.8, 0.24) has 15 elements, where float32 bounds would give 16
  host = [x if x is None or type(x) in (int, float) else to_numpy(x)[()]
          for x in (start, stop, step)]
  if step is not None and host[2] == 0:
    # (the length's division, as in JAX and NumPy)
    real = any(isinstance(h, (float, np.floating)) for h in host if h is not None)
    raise ZeroDivisionError("float division by zero" if real else "division by zero")
  if stop is None:                       # arange(stop) / arange(stop, step=s): from 0
    host = [0, host[0], host[2]]
  h_start, h_stop, h_step = host
  # As JAX: an iota, times the step and plus the start in the result dtype (float32 for
  # narrower floats), so that a traced arange is an iota, never a constant of its values
  if h_step is not None:
    work = np.dtype(np.float32) if (dtypes.issubdtype(dtype, np.floating) and
                                    dtypes.finfo(dtype).bits < 32) else dtype
    size = max(0, int(np.ceil((h_stop - h_start) / h_step)))
    out = lax.add(lax.convert_element_type(h_start, work),
                  lax.mul(lax.convert_element_type(h_step, work), lax.iota(work, size)))
    return lax.convert_element_type(out, dtype)
  if h_start == 0:
    return lax.iota(dtype, max(0, int(np.ceil(h_stop))))
  size = max(0, int(np.ceil(h_stop - h_start)))
  return lax.add(lax.convert_element_type(h_start, dtype), lax.iota(dtype, size))


@_placing
def linspace(start, stop, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype=None, axis: int = 0, *, device=None):
  """Evenly spaced values from ``start`` to ``stop`` (arrays broadcast; the new axis goes to
  ``axis``).  Computed as ``start * (1 - t) + stop * t`` so both ends are exact."""
  num = core.concrete_or_error(operator.index, num, "The 'num' argument of jnp.linspace.")
  axis = core.concrete_or_error(operator.index, axis, "The 'axis' argument of jnp.linspace.")
  if num < 0:
    raise ValueError(f"Number of samples, {num}, must be non-negative.")
  check_arraylike("linspace", start, stop)
  start, stop = asarray(start), asarray(stop)
  if dtype is None:
    dtype = dtypes.to_inexact_dtype(dtypes.result_type(start, stop))
  else:
    dtype = dtypes.check_user_dtype(dtype, "linspace")
  cdt = dtypes.to_inexact_dtype(dtype)
  start = lax.convert_element_type(start, cdt)
  stop = lax.convert_element_type(stop, cdt)
  from ourjax.numpy._util import broadcast_shapes
  bshape = list(broadcast_shapes(get_aval(start).shape, get_aval(stop).shape,
                                 fun_name="linspace"))
  start_b, stop_b = _broadcast_to(start, tuple(bshape)), _broadcast_to(stop, tuple(bshape))
  if axis < 0:
    axis = len(bshape) + axis + 1
  if not 0 <= axis <= len(bshape):
    raise ValueError(f"axis {axis} is out of bounds for linspace with bounds of shape "
                     f"{tuple(bshape)}")
  out_shape = tuple(bshape[:axis] + [num] + bshape[axis:])
  div = (num - 1) if endpoint else num
  if num > 1:
    delta = lax.div(lax.sub(stop_b, start_b), lax._const(stop, div))
    real = np.dtype(dtypes.finfo(cdt).dtype) if dtypes.is_complex(cdt) else cdt
    t = lax.div(lax.broadcasted_iota(real, out_shape, axis), np.array(div, real))
    t = lax.convert_element_type(t, cdt)
    dims = tuple(i for i in range(len(out_shape)) if i != axis)
    s = lax.broadcast_in_dim(start_b, out_shape, dims)
    e = lax.broadcast_in_dim(stop_b, out_shape, dims)
    if dtypes.is_integer(dtype):
      # start + i * step, as NumPy computes it: integer results then floor as NumPy's do
      step = lax.broadcast_in_dim(delta, out_shape, dims)
      out = lax.add(s, lax.mul(lax.convert_element_type(
          lax.broadcasted_iota(real, out_shape, axis), cdt), step))
    else:
      out = lax.add(lax.mul(s, lax.sub(lax._const(t, 1), t)), lax.mul(e, t))
    if endpoint:   # the last sample is exactly stop
      last = lax.eq(lax.broadcasted_iota(np.int32, out_shape, axis), np.int32(num - 1))
      out = lax.select_n(last, out, e)
  elif num == 1:
    delta = lax.full((), np.nan, cdt) if endpoint else lax.sub(stop_b, start_b)
    out = lax.expand_dims(start_b, (axis,))
  else:
    delta = lax.full((), np.nan, cdt)
    out = lax.full(out_shape, 0, cdt)
  if dtypes.is_integer(dtype) and not dtypes.is_integer(cdt):
    out = lax.floor(out)
  out = lax.convert_element_type(out, dtype)
  return (out, delta) if retstep else out


def logspace(start, stop, num: int = 50, endpoint: bool = True, base=10.0, dtype=None,
             axis: int = 0):
  from ourjax.numpy._ufuncs import power
  num = core.concrete_or_error(operator.index, num, "The 'num' argument of jnp.logspace.")
  check_arraylike("logspace", start, stop)
  if dtype is None:
    dtype = dtypes.to_inexact_dtype(dtypes.result_type(start, stop))
  else:
    dtype = dtypes.check_user_dtype(dtype, "logspace")
  cdt = dtypes.to_inexact_dtype(dtype)
  lin = linspace(asarray(start, dtype=cdt), asarray(stop, dtype=cdt), num, endpoint=endpoint,
                 axis=axis)
  return lax.convert_element_type(power(base, lin), dtype)


def geomspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis: int = 0):
  from ourjax.numpy._ufuncs import sign, log10, divide, multiply
  from ourjax.numpy._shape import moveaxis
  num = core.concrete_or_error(operator.index, num, "The 'num' argument of jnp.geomspace.")
  check_arraylike("geomspace", start, stop)
  if dtype is None:
    dtype = dtypes.to_inexact_dtype(dtypes.result_type(start, stop))
  else:
    dtype = dtypes.check_user_dtype(dtype, "geomspace")
  cdt = dtypes.to_inexact_dtype(dtype)
  start, stop = asarray(start, dtype=cdt), asarray(stop, dtype=cdt)
  s = sign(start)
  res = multiply(s, logspace(log10(divide(start, s)), log10(divide(stop, s)), num,
                             endpoint=endpoint, base=10.0, dtype=cdt, axis=0))
  if axis != 0:
    res = moveaxis(res, 0, axis)
  return lax.convert_element_type(res, dtype)


# ------------------------------------------------------------------------------------------------
# Structured constructors


def _int_arg(x, what):
  """A size argument (eye's/tri's N, M, ...) as an int; a traced one is JAX's shape error."""
  if isinstance(x, Tracer) and not core.is_concrete(x):
    raise shape_error((x,), f" (the '{what}' argument)")
  return core.concrete_or_error(operator.index, x, f"The '{what}' argument must be concrete.")


def _static_offset(k, n, m):
  """A static diagonal offset as int32: offsets past the matrix (on either side) select as the
  nearest one past it does, so eye takes any Python int (2 ** 100 as NumPy and JAX do; JAX's
  tri does not)."""
  return np.int32(builtins.min(builtins.max(operator.index(k), -n - 1), m + 1))


def _diag_mask(n, m, k):
  """Bool (n, m) mask of the k-th diagonal; ``k`` may be traced (a 64-bit one: in int64)."""
  idt = np.dtype(np.int32)
  if isinstance(k, (Array, Tracer)):
    kd = np.dtype(get_aval(k).dtype)
    idt = np.dtype(np.int64) if kd.itemsize == 8 or kd == np.uint32 else idt
    kk = lax.convert_element_type(k, idt)
  else:
    kk = _static_offset(k, n, m)
  i = lax.broadcasted_iota(idt, (n, m), 0)
  j = lax.broadcasted_iota(idt, (n, m), 1)
  return lax.eq(lax.add(i, kk), j)


@_placing
def eye(N, M=None, k=0, dtype=None, *, device=None):
  """Ones on the k-th diagonal of an (N, M) array (k > 0 above the main diagonal)."""
  n = _int_arg(N, "N")
  m = n if M is None else _int_arg(M, "M")
  if n < 0 or m < 0:
    raise ValueError(f"negative dimensions are not allowed, got N={n}, M={m}")
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "eye")
  return lax.convert_element_type(_diag_mask(n, m, k), dt)


def identity(n, dtype=None):
  return eye(n, dtype=dtype)


def _tri_mask(n, m, k):
  """Bool (n, m) mask, true where j <= i + k."""
  # positions in int32, in int64 for a 64-bit offset (JAX's: a 64-bit offset array, or with x64
  # a Python int, int64 there; without x64 an int past int32 is an OverflowError)
  if isinstance(k, (Array, Tracer)):
    kd = np.dtype(get_aval(k).dtype)
    idt = np.dtype(np.int64) if kd.itemsize == 8 or kd == np.uint32 else np.dtype(np.int32)
    kk = lax.convert_element_type(k, idt)
  else:
    k = operator.index(k)
    idt = np.dtype(np.int64 if config.x64_enabled else np.int32)
    kk = idt.type(k)
  i = lax.broadcasted_iota(idt, (n, m), 0)
  j = lax.broadcasted_iota(idt, (n, m), 1)
  return lax.ge(lax.add(i, kk), j)


def tri(N, M=None, k=0, dtype=None):
  n = _int_arg(N, "N")
  m = n if M is None else _int_arg(M, "M")
  # float32 by default, also with x64 (JAX's default for tri)
  dt = dtypes.check_user_dtype(np.float32 if dtype is None else dtype, "tri")
  return lax.convert_element_type(_tri_mask(n, m, k), dt)


def _tril_triu(name, m, k, lower):
  check_arraylike(name, m)
  m = asarray(m)
  aval = get_aval(m)
  if aval.ndim < 2:
    raise ValueError(f"Argument to jax.numpy.{name} must be at least 2D, got shape "
                     f"{aval.shape}")
  n_, m_ = aval.shape[-2:]
  mask = _tri_mask(n_, m_, k) if lower else lax.not_(_tri_mask(n_, m_, lax.sub(k, 1) if
                                                         isinstance(k, (Array, Tracer)) else
                                                         operator.index(k) - 1))
  mask = lax.broadcast_in_dim(mask, aval.shape, (aval.ndim - 2, aval.ndim - 1))
  return lax.select_n(mask, lax.full_like(m, 0), m)


@static_argnames("k")
def tril(m, k=0):
  """Lower triangle of the last two axes (elements above the k-th diagonal zeroed)."""
  return _tril_triu("tril", m, k, True)


@static_argnames("k")
def triu(m, k=0):
  """Upper triangle of the last two axes (elements below the k-th diagonal zeroed)."""
  return _tril_triu("triu", m, k, False)


def diag(v, k=0):
  """A 1-D input becomes a 2-D array with ``v`` on its k-th diagonal; a 2-D input gives its k-th
  diagonal."""
  check_arraylike("diag", v)
  v = asarray(v)
  k = _int_arg(k, "k")
  aval = get_aval(v)
  if aval.ndim == 1:
    length = aval.shape[0]
    n = length + abs(k)
    vp = lax.pad(v, lax._const(v, 0), [(0, abs(k), 0)]) if k else v
    # row i holds v[i] for k >= 0 (column i + k); column j holds v[j] for k < 0
    vb = lax.broadcast_in_dim(vp, (n, n), (0,) if k >= 0 else (1,))
    return lax.select_n(_diag_mask(n, n, k), lax.full_like(vb, 0), vb)
  if aval.ndim == 2:
    from ourjax.numpy._linalg_ops import diagonal
    return diagonal(v, offset=k)
  raise ValueError(f"diag input must be 1d or 2d, got shape {aval.shape}")


def diagflat(v, k=0):
  check_arraylike("diagflat", v)
  from ourjax.numpy._shape import ravel
  return diag(ravel(v), k)


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy"):
  """Coordinate arrays from 1-D coordinate vectors; ``indexing='xy'`` (the default) swaps the
  first two output axes, as for Cartesian plots."""
  check_arraylike("meshgrid", *xi)
  if indexing not in ("xy", "ij"):
    raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing!r}")
  args = [asarray(x) for x in xi]
  for x in args:
    if get_aval(x).ndim != 1:
      raise ValueError(f"Arguments to jax.numpy.meshgrid must be 1D, got shape "
                       f"{get_aval(x).shape}")
  shape = [get_aval(x).shape[0] for x in args]
  if indexing == "xy" and len(args) >= 2:
    shape[0], shape[1] = shape[1], shape[0]
  out = []
  for i, x in enumerate(args):
    d = i
    if indexing == "xy" and len(args) >= 2 and i < 2:
      d = 1 - i
    if sparse:
      s = [1] * len(args)
      s[d] = shape[d]
      out.append(lax.reshape(x, tuple(s)))
    else:
      out.append(lax.broadcast_in_dim(x, tuple(shape), (d,)))
  return out


def indices(dimensions, dtype=None, sparse: bool = False):
  """Index grids: ``out[i]`` holds the i-th index of each position of a ``dimensions`` array."""
  dims = canonicalize_shape(dimensions, "indices")
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "indices")
  if sparse:
    out = []
    for i, d in enumerate(dims):
      s = [1] * len(dims)
      s[i] = d
      out.append(lax.broadcasted_iota(dt, tuple(s), i))
    return tuple(out)
  if not dims:
    return lax.full((0,), 0, dt)
  grids = [lax.broadcasted_iota(dt, (1,) + dims, i + 1) for i in range(len(dims))]
  return lax.concatenate(grids, 0) if len(grids) > 1 else grids[0]


def frombuffer(buffer, dtype=float, count: int = -1, offset: int = 0):
  """The bytes of ``buffer`` (read by NumPy's ``frombuffer``) as an array of ``dtype``
  (``float`` is the default float type)."""
  dt = dtypes.check_user_dtype(dtype, "frombuffer")
  return asarray(np.frombuffer(buffer, dtype=np.dtype(dt), count=count, offset=offset))


def fromstring(string, dtype=float, count: int = -1, *, sep: str):
  """The numbers written in ``string`` separated by ``sep`` (NumPy's ``fromstring`` text
  mode), as an array of ``dtype``."""
  dt = dtypes.check_user_dtype(dtype, "fromstring")
  return asarray(np.fromstring(string, dtype=np.dtype(dt), count=count, sep=sep))


def fromfunction(function, shape, *, dtype=float, **kwargs):
  """``function(*index_grids, **kwargs)`` over a grid of ``shape`` (NumPy's semantics: the
  function sees whole coordinate arrays)."""
  shape = canonicalize_shape(shape, "fromfunction")
  dt = dtypes.check_user_dtype(dtype, "fromfunction")
  grids = [lax.broadcasted_iota(dt, shape, i) for i in range(len(shape))]
  return function(*grids, **kwargs)


def _size(shape):
  return math.prod(shape)
