"""Reductions: sum, prod, max, min, mean, all, any, var, std (more in later modules)."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._util import _as_operand, canonicalize_axes, check_arraylike, ensure_array


def _reduction(name, lax_fn, *, bool_to_int=False, to_bool=False, init=None):
  def fn(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    if out is not None:
      raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
    check_arraylike(name, a)
    a = ensure_array(_as_operand(a))
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    dt = aval.dtype
    if to_bool:
      if dt != np.bool_:
        a = lax.ne(a, lax._const(a, 0))
    elif dtype is not None:
      a = lax.convert_element_type(a, dtypes.check_user_dtype(dtype, name))
    elif bool_to_int and (dt == np.bool_ or (promote_integers and dtypes.is_integer(dt)
                                              and dt.itemsize < dtypes.default_int_dtype().itemsize)):
      target = dtypes.default_int_dtype()
      if dtypes.issubdtype(dt, np.unsignedinteger):
        target = dtypes.default_uint_dtype()
      a = lax.convert_element_type(a, target)
    if where is not None:
      from ourjax.numpy import where as _where, broadcast_to
      ident = _identity(name, get_aval(a).dtype)
      if ident is None:
        raise ValueError(f"reduction operation {name} does not have an identity, so to use a "
                         "where mask one has to specify 'initial'" if initial is None else "")
      a = _where(where, a, ident)
    if name in ("max", "min") and aval.size == 0 and initial is None:
      raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    out_ = lax_fn(a, axes) if axes else a
    if initial is not None:
      from ourjax.numpy._ufuncs import add, multiply, maximum, minimum
      comb = {"sum": add, "prod": multiply, "max": maximum, "min": minimum}[name]
      out_ = comb(out_, initial)
    if keepdims:
      shape = tuple(1 if i in axes else s for i, s in enumerate(aval.shape))
      out_ = lax.reshape(out_, shape)
    return out_
  fn.__name__ = fn.__qualname__ = name
  return fn


def _identity(name, dt):
  if name == "sum":
    return 0
  if name == "prod":
    return 1
  if name in ("max", "min"):
    return None
  return None


sum = _reduction("sum", lax.reduce_sum, bool_to_int=True)  # noqa: A001
prod = _reduction("prod", lax.reduce_prod, bool_to_int=True)
max = amax = _reduction("max", lax.reduce_max)  # noqa: A001
min = amin = _reduction("min", lax.reduce_min)  # noqa: A001
_all = _reduction("all", lax.reduce_and, to_bool=True)
_any = _reduction("any", lax.reduce_or, to_bool=True)


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
  return _all(a, axis=axis, keepdims=keepdims)


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
  return _any(a, axis=axis, keepdims=keepdims)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
  check_arraylike("mean", a)
  a = ensure_array(_as_operand(a))
  aval = get_aval(a)
  axes = canonicalize_axes(axis, aval.ndim)
  n = int(np.prod([aval.shape[i] for i in axes], dtype=np.int64))
  if dtype is None:
    dtype = dtypes.to_inexact_dtype(aval.dtype)
  dtype = dtypes.check_user_dtype(dtype, "mean")
  s = sum(lax.convert_element_type(a, dtype), axis=axes, keepdims=keepdims)
  return lax.div(s, lax._const(s, n))


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
  if correction is not None:
    ddof = correction
  check_arraylike("var", a)
  a = ensure_array(_as_operand(a))
  aval = get_aval(a)
  axes = canonicalize_axes(axis, aval.ndim)
  dt = dtypes.check_user_dtype(dtype, "var") if dtype else dtypes.to_inexact_dtype(aval.dtype)
  a = lax.convert_element_type(a, dt)
  centered = lax.sub(a, mean(a, axis=axes, keepdims=True))
  from ourjax.numpy._util import promote_shapes
  centered = lax.mul(centered, centered)
  n = int(np.prod([aval.shape[i] for i in axes], dtype=np.int64))
  s = sum(centered, axis=axes, keepdims=keepdims)
  return lax.div(s, lax._const(s, max_(n - ddof, 0)))


def max_(a, b):
  return a if a > b else b


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
  return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, correction=correction))
