"""Array creation: array/asarray and the filled constructors."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.lax._utils import as_shape


def _flatten_nested(obj):
  """Leaves of nested lists/tuples (which may hold tracers)."""
  if isinstance(obj, (list, tuple)):
    out = []
    for o in obj:
      out.extend(_flatten_nested(o))
    return out
  return [obj]


def array(object, dtype=None, copy: bool = True, order=None, ndmin: int = 0):
  """``jnp.array``: Python scalars keep weak types only through asarray's dtype=None path;
  nested sequences may contain traced values (they are stacked)."""
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "array")
  if isinstance(object, (Array, Tracer)):
    out = object if dtype is None else lax._convert_element_type(object, dtype, False)
    if isinstance(out, Array) and out is object and copy:
      out = Array(np.asarray(out._value), weak_type=out.weak_type)
  elif isinstance(object, (list, tuple)):
    leaves = _flatten_nested(object)
    if any(isinstance(x, Tracer) for x in leaves):
      out = _stack_nested(object, dtype)
    else:
      # Python scalars in the list are weak: [bf16_array, 1.0] stays bfloat16 (as in JAX)
      dt = dtype or (dtypes.result_type(*leaves) if leaves else dtypes.default_float_dtype())
      out = Array(np.array(_to_host_nested(object), dtype=dt))
  elif hasattr(object, "__jax_array__"):
    return array(object.__jax_array__(), dtype, copy, order, ndmin)
  else:
    if isinstance(object, (bool, int, float, complex)) and dtype is None:
      out = Array(object, weak_type=False)
    else:
      host = np.array(object, dtype=dtype) if dtype is not None else np.array(object)
      if host.dtype == object or host.dtype.kind in "USO":
        raise TypeError(f"array: unsupported input of type {type(object).__name__} with dtype "
                        f"{host.dtype}")
      out = Array(host.astype(dtypes.canonicalize_dtype(host.dtype), copy=False))
  if ndmin and get_aval(out).ndim < ndmin:
    out = lax.broadcast_to_rank(out, ndmin)
  return out


def _to_host_nested(obj):
  if isinstance(obj, (list, tuple)):
    return [_to_host_nested(o) for o in obj]
  return np.asarray(obj) if isinstance(obj, Array) else obj


def _stack_nested(obj, dtype):
  from ourjax.numpy._util import promote_dtypes
  if isinstance(obj, (list, tuple)):
    parts = [_stack_nested(o, dtype) for o in obj]
    parts = promote_dtypes(*parts) if len(parts) > 1 else parts
    parts = [lax.expand_dims(p, (0,)) for p in parts]
    from ourjax.lax import concatenate
    return concatenate(parts, 0)
  x = obj if isinstance(obj, (Array, Tracer)) else asarray(obj)
  return x if dtype is None else lax._convert_element_type(x, dtype, False)


def asarray(a, dtype=None, order=None, *, copy=None):
  if dtype is None and isinstance(a, (Array, Tracer)):
    return a
  return array(a, dtype=dtype, copy=bool(copy))


def _fill(shape, value, dtype, name):
  shape = canonicalize_shape(shape, name)
  dt = dtypes.check_user_dtype(dtype, name) if dtype is not None else None
  return lax.full(shape, value, dt if dt is not None else dtypes.default_float_dtype())


def canonicalize_shape(shape, name="shape"):
  if isinstance(shape, (int, np.integer)) or (hasattr(shape, "ndim") and shape.ndim == 0):
    shape = (core.concrete_or_error(int, shape, f"{name}: the shape must be concrete."),)
  return as_shape(shape)


def zeros(shape, dtype=None, *, device=None):
  return _fill(shape, 0, dtype, "zeros")


def ones(shape, dtype=None, *, device=None):
  return _fill(shape, 1, dtype, "ones")


def empty(shape, dtype=None, *, device=None):
  return zeros(shape, dtype)


def full(shape, fill_value, dtype=None, *, device=None):
  shape = canonicalize_shape(shape, "full")
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "full")
  fv = asarray(fill_value) if isinstance(fill_value, (list, tuple)) else fill_value
  aval = get_aval(fv)
  if aval.ndim:
    from ourjax.numpy._util import _broadcast_to
    out = _broadcast_to(fv, shape)
    return out if dtype is None else lax._convert_element_type(out, dtype, False)
  if dtype is None:
    dt = dtypes.canonicalize_dtype(aval.dtype)
    return lax.full(shape, fv, dt, weak_type=False)
  return lax.full(shape, fv, dtype)


def _like(a, dtype, shape):
  aval = get_aval(a)
  dt = dtypes.check_user_dtype(dtype, "like") if dtype is not None else aval.dtype
  shp = aval.shape if shape is None else canonicalize_shape(shape)
  return dt, shp


def zeros_like(a, dtype=None, shape=None, *, device=None):
  dt, shp = _like(a, dtype, shape)
  return lax.full(shp, 0, dt)


def ones_like(a, dtype=None, shape=None, *, device=None):
  dt, shp = _like(a, dtype, shape)
  return lax.full(shp, 1, dt)


def empty_like(a, dtype=None, shape=None, *, device=None):
  return zeros_like(a, dtype, shape)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None):
  dt, shp = _like(a, dtype, shape)
  return lax.full(shp, fill_value, dt)
