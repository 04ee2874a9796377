"""Reductions: sum/prod/max/min/all/any (with ``where`` and ``initial``), mean/var/std,
argmax/argmin, cumulative sums and products, NaN-ignoring variants, quantiles, average,
count_nonzero and ptp.

Dtype rules are JAX's: sums and products of bool and narrow integers accumulate in the default
integer type (int32, uint32 for unsigned; 64-bit with x64) unless ``promote_integers=False``;
float16/bfloat16 are accumulated in float32 (sum, prod and mean: unless a ``dtype`` is given,
then in it); mean/var/std of integers are float32."""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax._eager_replay import replayed
from ourjax.array import Array
from ourjax.config import config
from ourjax.core import get_aval
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, _broadcast_to, canonicalize_axis, check_arraylike,
                                static_argnames)

_builtin_max, _builtin_min, _builtin_sum, _builtin_all = (builtins.max, builtins.min,
                                                          builtins.sum, builtins.all)


def _arr(name, a):
  check_arraylike(name, a)
  return asarray(_as_operand(a))


def _reduction_axes(name, axis, ndim):
  """Concrete, non-negative, unique axes (all of them for None)."""
  if axis is None:
    return tuple(range(ndim))
  if type(axis) is int and -ndim <= axis < ndim:      # (the common case)
    return (axis % ndim,)
  axis = core.concrete_or_error(None, axis, f"The axis argument to jnp.{name} must be concrete.")
  axes = tuple(axis) if isinstance(axis, (tuple, list, np.ndarray)) else (axis,)
  out = []
  for a in axes:
    a = operator.index(a)
    if not -ndim <= a < builtins.max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
      raise _axis_error(name, a, ndim)
    out.append(a % ndim if ndim else 0)
  if len(set(out)) != len(out):
    raise ValueError(f"duplicate value in 'axis': {axis}")
  if ndim == 0:
    return ()
  return tuple(out)


def _single_axis(name, axis, ndim):
  """One concrete axis (a tuple is a TypeError, as operator.index makes it), made
  non-negative."""
  ax = core.concrete_or_error(operator.index, axis,
                              f"The axis argument to jnp.{name} must be concrete.")
  if not -builtins.max(ndim, 1) <= ax < builtins.max(ndim, 1):
    raise _axis_error(name, ax, ndim)
  return ax % ndim if ndim else 0


def _axis_error(name, axis, ndim):
  """An axis out of range: NumPy's AxisError, both a ValueError (JAX's ``sum``, ``max``...
  raise one) and an IndexError (JAX's ``mean``, ``var``, ``argmax``... index the shape with it
  first: "tuple index out of range")."""
  return np.exceptions.AxisError(
      f"jnp.{name}: axis {axis} is out of bounds for array of dimension {ndim}")


def _promote_integer_dtype(dt):
  """bool and integers narrower than the default widen to it (uint -> default uint)."""
  dt = np.dtype(dt)
  if dt == np.bool_:
    return dtypes.default_int_dtype()
  if dtypes.issubdtype(dt, np.unsignedinteger):
    u = dtypes.default_uint_dtype()
    return u if dt.itemsize < u.itemsize else dt
  if dtypes.issubdtype(dt, np.integer):
    i = dtypes.default_int_dtype()
    return i if dt.itemsize < i.itemsize else dt
  return dt


def _upcast_f16(dt):
  dt = np.dtype(dt)
  if dtypes.is_float(dt) and dt.itemsize < 4:
    return np.dtype(np.float32)
  return dt


def _keepdims(out, shape, axes):
  return lax.reshape(out, tuple(1 if i in axes else s for i, s in enumerate(shape)))


def _check_where(name, where):
  """``where`` as a bool array (None stays None); any other dtype is an error, as in JAX (each
  public reduction checks it under its own name before delegating to another)."""
  if where is None:
    return None
  check_arraylike(name, where)
  w = asarray(where)
  if get_aval(w).dtype != np.bool_:
    raise ValueError(f"jnp.{name}: where must be None or a boolean array; got "
                     f"where.dtype={get_aval(w).dtype!r}.")
  return w


def _where_mask(name, where, a, fill):
  """``a`` with positions where ``where`` is False replaced by ``fill``."""
  from ourjax.numpy._ufuncs import where as _where
  shape = get_aval(a).shape
  w = _check_where(name, where)
  try:
    np.broadcast_shapes(get_aval(w).shape, shape)
  except ValueError:
    raise ValueError(f"jnp.{name}: where mask of shape {get_aval(w).shape} does not broadcast "
                     f"to the array's shape {shape}") from None
  return _where(w, a, lax.full_like(a, fill)) if shape else _where(w, a, fill)


def _bool_mask(name, where, shape):
  """``where`` as a bool array of ``shape``."""
  w = _check_where(name, where)
  try:
    return _broadcast_to(w, shape) if get_aval(w).shape != tuple(shape) else w
  except TypeError:
    raise ValueError(f"jnp.{name}: where mask of shape {get_aval(w).shape} does not broadcast "
                     f"to the array's shape {tuple(shape)}") from None


def _init_value(name, dt):
  """The identity of a reduction in dtype ``dt`` (max/min use the extreme values)."""
  dt = np.dtype(dt)
  if name == "sum":
    return np.array(0, dt)
  if name == "prod":
    return np.array(1, dt)
  if name in ("max", "min"):
    if dt == np.bool_:
      return np.array(name == "min", dt)
    if dtypes.is_integer(dt):
      info = dtypes.iinfo(dt)
      return np.array(info.min if name == "max" else info.max, dt)
    if dtypes.supports_inf(dt):
      return np.array(-np.inf if name == "max" else np.inf, dt)
    info = dtypes.finfo(dt)
    return np.array(info.min if name == "max" else info.max, dt)
  if name == "all":
    return np.array(True)
  if name == "any":
    return np.array(False)
  raise KeyError(name)


_REDUCE_PRIMS = {"sum": lax.reduce_sum_p, "prod": lax.reduce_prod_p, "max": lax.reduce_max_p,
                 "min": lax.reduce_min_p}
_LAX_REDUCERS = {"sum": lax.reduce_sum, "prod": lax.reduce_prod, "max": lax.reduce_max,
                 "min": lax.reduce_min, "all": lax.reduce_and, "any": lax.reduce_or}


# dtypes whose sum/prod/max/min needs no conversion: computed and returned in the dtype itself
_SAME_DTYPE_REDUCE = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64,
                                              np.complex128)))
_WIDE = frozenset(map(np.dtype, (np.float64, np.complex128)))


def _reduce(name, a, axis, dtype, out, keepdims, initial, where, *, promote_integers=False,
            has_identity=True, upcast_f16=False, bool_op=None):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
  if type(a) is Array:
    aval = a.aval
    if (dtype is None and initial is None and where is None and not aval.weak_type
        and aval.dtype in _SAME_DTYPE_REDUCE and name in ("sum", "prod", "max", "min")
        and (aval.dtype not in _WIDE or config.x64_enabled)):
      # the common case: what follows would convert nothing (eager code spends more time in
      # those checks than in a small reduction)
      axes = _reduction_axes(name, axis, aval.ndim)
      if not has_identity and builtins.any(aval.shape[d] == 0 for d in axes):
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
      if axes:    # (the primitive itself: lax.reduce_* would canonicalize the axes again)
        res = _REDUCE_PRIMS[name].bind(a, axes=tuple(sorted(axes)) if len(axes) > 1 else axes,
                                       out_sharding=None)
      else:
        res = a
      return _keepdims(res, aval.shape, axes) if keepdims else res
  a = _arr(name, a)
  aval = get_aval(a)
  axes = _reduction_axes(name, axis, aval.ndim)
  if initial is None and not has_identity:
    if where is not None:
      raise ValueError(f"reduction operation {name} does not have an identity, so to use a "
                       "where mask one has to specify 'initial'")
    if builtins.any(aval.shape[d] == 0 for d in axes):
      raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
  if name in ("sum", "prod") and aval.dtype == np.bool_ and dtype is None and \
      not promote_integers:
    a = lax.convert_element_type(a, dtypes.default_int_dtype())
    aval = get_aval(a)
  if dtype is not None:
    result_dt = dtypes.check_user_dtype(dtype, name)
  else:
    result_dt = aval.dtype
    if promote_integers:
      result_dt = _promote_integer_dtype(result_dt)
  result_dt = dtypes.canonicalize_dtype(result_dt)
  # float16/bfloat16 accumulate in float32 unless a dtype is asked for (then in it, as JAX)
  comp_dt = _upcast_f16(result_dt) if upcast_f16 and dtype is None else result_dt
  if name in ("all", "any"):
    comp_dt = result_dt = np.dtype(np.bool_)
  if aval.dtype != comp_dt or aval.weak_type:
    a = lax.convert_element_type(a, comp_dt)
  lax_name = name
  if comp_dt == np.bool_ and name in ("sum", "prod", "max", "min"):
    lax_name = {"sum": "any", "prod": "all", "max": "any", "min": "all"}[name]
  if where is not None:
    a = _where_mask(name, where, a, _init_value(lax_name, comp_dt))
  res = _LAX_REDUCERS[lax_name](a, axes) if axes else a
  if initial is not None:
    init = asarray(initial)
    if get_aval(init).ndim:
      raise ValueError(f"initial value must be a scalar. Got array of shape "
                       f"{get_aval(init).shape}")
    init = lax.convert_element_type(init, comp_dt)
    combine = {"sum": lax.add, "prod": lax.mul, "max": lax.max, "min": lax.min,
               "any": lax.or_, "all": lax.and_}[lax_name]
    res = combine(init, res)
  if keepdims:
    res = _keepdims(res, aval.shape, axes)
  r_aval = get_aval(res)
  if r_aval.dtype == result_dt and not r_aval.weak_type:
    return res
  return lax.convert_element_type(res, result_dt)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,  # noqa
        promote_integers=True):
  """Sum over ``axis`` (all axes by default)."""
  return _reduce("sum", a, axis, dtype, out, keepdims, initial, where,
                 promote_integers=promote_integers, upcast_f16=True)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
  """Product over ``axis`` (all axes by default)."""
  return _reduce("prod", a, axis, dtype, out, keepdims, initial, where,
                 promote_integers=promote_integers, upcast_f16=True)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
  """Maximum over ``axis``; NaN propagates.  Empty reductions need ``initial``."""
  return _reduce("max", a, axis, None, out, keepdims, initial, where, has_identity=False)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
  """Minimum over ``axis``; NaN propagates.  Empty reductions need ``initial``."""
  return _reduce("min", a, axis, None, out, keepdims, initial, where, has_identity=False)


amax, amin = max, min


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
  return _reduce("all", a, axis, None, out, keepdims, None, where)


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
  return _reduce("any", a, axis, None, out, keepdims, None, where)


def _axis_count(shape, axes):
  return math.prod(shape[d] for d in axes)


@replayed(static=("axis", "dtype", "keepdims"))
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
  """Arithmetic mean; integers and bools give the default float dtype."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.mean is not supported.")
  a = _arr("mean", a)
  where = _check_where("mean", where)
  aval = get_aval(a)
  axes = _reduction_axes("mean", axis, aval.ndim)
  if dtype is None:
    result_dt = dtypes.to_inexact_dtype(aval.dtype)
  else:
    result_dt = dtypes.check_user_dtype(dtype, "mean")
  comp_dt = _upcast_f16(result_dt) if dtypes.is_inexact(result_dt) and dtype is None else \
      result_dt
  if where is None:
    norm = lax.full((), _axis_count(aval.shape, axes), comp_dt)
  else:
    norm = sum(_bool_mask("mean", where, aval.shape), axes, dtype=comp_dt, keepdims=keepdims)
  s = sum(a, axes, dtype=comp_dt, keepdims=keepdims, where=where)
  return lax.convert_element_type(lax.div(s, norm), result_dt)


def _var_dtypes(a_dt, dtype):
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "var")
    if not dtypes.is_complex(dtype) and dtypes.is_complex(a_dt):
      raise ValueError("jnp.var does not support real dtype parameters when computing the "
                       "variance of an array of complex values.")
    return _upcast_f16(dtype), np.dtype(dtype)
  if not dtypes.is_inexact(a_dt):
    dt = dtypes.to_inexact_dtype(a_dt)
    return _upcast_f16(dt), dt
  real = np.dtype(dtypes.finfo(a_dt).dtype) if dtypes.is_complex(a_dt) else np.dtype(a_dt)
  return _upcast_f16(a_dt), real


_mean = mean      # (var and nanvar take a ``mean`` argument)


@replayed(static=("axis", "dtype", "ddof", "keepdims", "correction"))
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
  """Variance, dividing by ``N - ddof`` (``correction`` is the array-API name of ``ddof``);
  NaN where that is not positive.  ``mean``: the mean to center on (broadcastable against
  ``a``, e.g. computed with ``keepdims=True``) instead of computing it."""
  if correction is None:
    correction = ddof
  elif not isinstance(ddof, int) or ddof != 0:
    raise ValueError("ddof and correction can't be provided simultaneously.")
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.var is not supported.")
  a = _arr("var", a)
  where = _check_where("var", where)
  aval = get_aval(a)
  axes = _reduction_axes("var", axis, aval.ndim)
  comp_dt, result_dt = _var_dtypes(aval.dtype, dtype)
  a = lax.convert_element_type(a, comp_dt)
  if mean is not None:
    m = lax.convert_element_type(asarray(_as_operand(mean)), comp_dt)
    if get_aval(m).shape != aval.shape:
      m = _broadcast_to(m, aval.shape)
  else:
    m = _mean(a, axes, dtype=comp_dt, keepdims=True, where=where)
  centered = lax.sub(a, _broadcast_to(m, aval.shape) if aval.shape and get_aval(m).shape !=
                     aval.shape else m)
  if dtypes.is_complex(comp_dt):
    centered = lax.real(lax.mul(centered, lax.conj(centered)))
    comp_dt = get_aval(centered).dtype
  else:
    centered = lax.square(centered)
  if where is None:
    norm = lax.full((), _axis_count(aval.shape, axes), comp_dt)
  else:
    norm = sum(_bool_mask("var", where, aval.shape), axes, dtype=comp_dt, keepdims=keepdims)
  norm = lax.sub(norm, lax.convert_element_type(asarray(correction), comp_dt))
  s = sum(centered, axes, dtype=comp_dt, keepdims=keepdims, where=where)
  res = lax.convert_element_type(lax.div(s, norm), result_dt)
  from ourjax.numpy._ufuncs import where as _where
  # NaN where nothing is left to divide by; (as JAX) an integer ``dtype`` so gives a weak float
  if dtypes.is_inexact(result_dt):
    return _where(lax.gt(norm, lax._const(norm, 0)), res, lax.full_like(res, np.nan)
                  if get_aval(res).shape else np.array(np.nan, result_dt))
  return _where(lax.gt(norm, lax._const(norm, 0)), res, np.nan)


@replayed(static=("axis", "dtype", "ddof", "keepdims", "correction"))
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
  """Standard deviation: the square root of ``var``."""
  where = _check_where("std", where)
  if dtype is not None and not dtypes.is_inexact(dtypes.check_user_dtype(dtype, "std")):
    raise ValueError(f"dtype argument to jnp.std must be inexact; got {dtype}")
  return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                      correction=correction))


@replayed(static=("axis", "keepdims"))
def ptp(a, axis=None, out=None, keepdims=False):
  """Range (max - min) over ``axis``."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.ptp is not supported.")
  hi = max(a, axis=axis, keepdims=keepdims)
  lo = min(a, axis=axis, keepdims=keepdims)
  from ourjax.numpy._ufuncs import subtract
  return lax.sub(hi, lo) if get_aval(hi).dtype != np.bool_ else subtract(hi, lo)


@static_argnames("axis", "keepdims")
def count_nonzero(a, axis=None, keepdims=False):
  a = _arr("count_nonzero", a)
  nz = lax.ne(a, lax._const(a, 0)) if get_aval(a).dtype != np.bool_ else a
  return sum(nz, axis=axis, dtype=dtypes.default_int_dtype(), keepdims=keepdims)


# ------------------------------------------------------------------------------------------------
# average


@replayed(static=("axis", "returned", "keepdims"))
def average(a, axis=None, weights=None, returned=False, keepdims=False):
  """Weighted mean; 1-D ``weights`` may be given along a single ``axis``."""
  from ourjax.numpy._util import promote_dtypes_inexact
  if weights is None:
    a = _arr("average", a)
    a, = promote_dtypes_inexact(a)
    avg = mean(a, axis=axis, keepdims=keepdims)
    axes = _reduction_axes("average", axis, get_aval(a).ndim)
    wsum = lax.full_like(avg, _axis_count(get_aval(a).shape, axes))
  else:
    check_arraylike("average", a, weights)
    a, weights = promote_dtypes_inexact(asarray(_as_operand(a)), asarray(_as_operand(weights)))
    a_shape, w_shape = get_aval(a).shape, get_aval(weights).shape
    nd = len(a_shape)
    if a_shape != w_shape:
      # (NumPy 2's rule) the weights' shape is a's along ``axis``, in the order given there
      if axis is None:
        raise ValueError("Axis must be specified when shapes of a and weights differ.")
      axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
      axes = tuple(canonicalize_axis(ax, nd) for ax in axes)
      if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in average: {axis}")
      if w_shape != tuple(a_shape[ax] for ax in axes):
        raise ValueError("Shape of weights must be consistent with shape of a along specified "
                         "axis.")
      order = sorted(range(len(axes)), key=lambda k: axes[k])
      if order != list(range(len(axes))):
        weights = lax.transpose(weights, tuple(order))
      weights = lax.broadcast_in_dim(weights, a_shape, tuple(sorted(axes)))
    wsum = sum(weights, axis=axis, keepdims=keepdims)
    avg = lax.div(sum(lax.mul(a, weights), axis=axis, keepdims=keepdims), wsum)
  if returned:
    if get_aval(avg).shape != get_aval(wsum).shape:
      wsum = _broadcast_to(wsum, get_aval(avg).shape)
    return avg, wsum
  return avg


# ------------------------------------------------------------------------------------------------
# argmax / argmin


def _argminmax(name, lax_fn, a, axis, out, keepdims):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
  a = _arr(name, a)
  aval = get_aval(a)
  if axis is None:
    if aval.size == 0:
      raise ValueError(f"attempt to get {name} of an empty sequence")
    flat = lax.reshape(a, (aval.size,))
    res = lax_fn(flat, 0, dtypes.default_int_dtype())
    return lax.reshape(res, (1,) * aval.ndim) if keepdims else res
  ax = _single_axis(name, axis, aval.ndim)
  if aval.ndim == 0:
    raise _axis_error(name, axis, 0)
  if aval.shape[ax] == 0:
    raise ValueError(f"attempt to get {name} of an empty sequence")
  res = lax_fn(a, ax, dtypes.default_int_dtype())
  return _keepdims(res, aval.shape, (ax,)) if keepdims else res


def argmax(a, axis=None, out=None, keepdims=None):
  """Index of the first maximum (of the first NaN, if any) along ``axis``."""
  return _argminmax("argmax", lax.argmax, a, axis, out, keepdims)


def argmin(a, axis=None, out=None, keepdims=None):
  """Index of the first minimum (of the first NaN, if any) along ``axis``."""
  return _argminmax("argmin", lax.argmin, a, axis, out, keepdims)


def nanargmax(a, axis=None, out=None, keepdims=None):
  from ourjax.numpy._ufuncs import isnan, where
  a = _arr("nanargmax", a)
  if not dtypes.is_inexact(get_aval(a).dtype):
    return argmax(a, axis=axis, keepdims=keepdims)
  nan_mask = isnan(a)
  res = argmax(where(nan_mask, -np.inf, a), axis=axis, keepdims=keepdims)
  return where(all(nan_mask, axis=axis, keepdims=keepdims), -1, res)


def nanargmin(a, axis=None, out=None, keepdims=None):
  from ourjax.numpy._ufuncs import isnan, where
  a = _arr("nanargmin", a)
  if not dtypes.is_inexact(get_aval(a).dtype):
    return argmin(a, axis=axis, keepdims=keepdims)
  nan_mask = isnan(a)
  res = argmin(where(nan_mask, np.inf, a), axis=axis, keepdims=keepdims)
  return where(all(nan_mask, axis=axis, keepdims=keepdims), -1, res)


# ------------------------------------------------------------------------------------------------
# Cumulative reductions


def _cumulative(name, lax_fn, a, axis, dtype, out, *, fill_nan=None, promote_integers=False,
                reverse=False):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported")
  a = _arr(name, a)
  aval = get_aval(a)
  if axis is None or aval.ndim == 0:
    a = lax.reshape(a, (aval.size,))
    if axis is None:
      axis = 0
  aval = get_aval(a)
  ax = _single_axis(name, axis, aval.ndim)
  if fill_nan is not None and dtypes.is_inexact(aval.dtype):
    from ourjax.numpy._ufuncs import isnan
    a = lax.select_n(isnan(a), a, lax.full_like(a, fill_nan))
  if dtype is not None:
    result_dt = dtypes.check_user_dtype(dtype, name)
  else:
    result_dt = aval.dtype
  if result_dt == np.bool_ and aval.dtype != np.bool_:
    a = lax.convert_element_type(a, np.bool_)     # as NumPy: 0.1 is True, then the bools add
  if (dtype is None and promote_integers) or result_dt == np.bool_:
    result_dt = _promote_integer_dtype(result_dt)
  a = lax.convert_element_type(a, result_dt)
  res = lax_fn(a, axis=ax, reverse=reverse)
  if dtype is not None and np.dtype(dtypes.check_user_dtype(dtype, name)) == np.bool_:
    res = lax.convert_element_type(res, np.bool_)
  return res


@static_argnames("axis", "dtype")
def cumsum(a, axis=None, dtype=None, out=None):
  """Running sum along ``axis`` (the flattened array for None); the dtype is kept, except that
  bool accumulates in the default int."""
  return _cumulative("cumsum", lax.cumsum, a, axis, dtype, out)


@static_argnames("axis", "dtype")
def cumprod(a, axis=None, dtype=None, out=None):
  """Running product along ``axis`` (the flattened array for None)."""
  return _cumulative("cumprod", lax.cumprod, a, axis, dtype, out)


cumproduct = cumprod


@static_argnames("axis", "dtype")
def nancumsum(a, axis=None, dtype=None, out=None):
  return _cumulative("nancumsum", lax.cumsum, a, axis, dtype, out, fill_nan=0)


@static_argnames("axis", "dtype")
def nancumprod(a, axis=None, dtype=None, out=None):
  return _cumulative("nancumprod", lax.cumprod, a, axis, dtype, out, fill_nan=1)


def _cumulative_api(name, lax_fn, x, axis, dtype, include_initial, init):
  x = _arr(name, x)
  aval = get_aval(x)
  if aval.ndim == 0:
    raise ValueError(f"The input must be non-scalar to take a cumulative {name[11:]}, however "
                     "a scalar value or scalar array was given.")
  if axis is None:
    if aval.ndim > 1:
      raise ValueError(f"The input array has rank {aval.ndim}, however axis was not set to an "
                       "explicit value. The axis argument is only optional for one-dimensional "
                       "arrays.")
    axis = 0
  ax = _single_axis(name, axis, aval.ndim)
  # (cumulative_sum widens small integers as sum does; cumulative_prod keeps them, as JAX)
  out = _cumulative(name, lax_fn, x, ax, dtype, None,
                    promote_integers=name == "cumulative_sum")
  if include_initial:
    s = list(aval.shape)
    s[ax] = 1
    out = lax.concatenate([lax.full(tuple(s), init, get_aval(out).dtype), out], ax)
  return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
  return _cumulative_api("cumulative_sum", lax.cumsum, x, axis, dtype, include_initial, 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
  return _cumulative_api("cumulative_prod", lax.cumprod, x, axis, dtype, include_initial, 1)


# ------------------------------------------------------------------------------------------------
# NaN-ignoring reductions


def _nan_reduction(name, fn, a, init, nan_if_all_nan, axis, keepdims, **kw):
  from ourjax.numpy._ufuncs import isnan, where
  a = _arr(name, a)
  if kw.get("where") is not None:
    kw["where"] = _check_where(name, kw["where"])
  if not dtypes.is_inexact(get_aval(a).dtype):
    return fn(a, axis=axis, keepdims=keepdims, **kw)
  nan_mask = isnan(a)
  out = fn(where(nan_mask, init, a), axis=axis, keepdims=keepdims, **kw)
  if nan_if_all_nan:
    return where(all(nan_mask, axis=axis, keepdims=keepdims), np.nan, out)
  return out


@static_argnames("axis", "dtype", "keepdims")
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
  return _nan_reduction("nansum", sum, a, 0, False, axis, keepdims, dtype=dtype,
                        initial=initial, where=where)


@static_argnames("axis", "dtype", "keepdims")
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
  return _nan_reduction("nanprod", prod, a, 1, False, axis, keepdims, dtype=dtype,
                        initial=initial, where=where)


@static_argnames("axis", "keepdims")
def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
  return _nan_reduction("nanmax", max, a, -np.inf, initial is None, axis, keepdims,
                        initial=initial, where=where)


@static_argnames("axis", "keepdims")
def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
  return _nan_reduction("nanmin", min, a, np.inf, initial is None, axis, keepdims,
                        initial=initial, where=where)


@static_argnames("axis", "dtype", "keepdims")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
  """Mean ignoring NaN (NaN where every element is NaN)."""
  from ourjax.numpy._ufuncs import isnan
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.nanmean is not supported.")
  a = _arr("nanmean", a)
  where = _check_where("nanmean", where)
  if not dtypes.is_inexact(get_aval(a).dtype):
    return mean(a, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
  if dtype is None:
    dtype = dtypes.to_inexact_dtype(get_aval(a).dtype)
  valid = lax.not_(isnan(a))
  if where is not None:
    valid = lax.and_(valid, _bool_mask("nanmean", where, get_aval(a).shape))
  count = sum(valid, axis=axis, dtype=dtype, keepdims=keepdims)
  total = nansum(a, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
  return lax.div(total, count)


@static_argnames("axis", "dtype", "keepdims")
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
  """Variance ignoring NaN (centered on ``mean`` if given, as ``var``)."""
  from ourjax.numpy._ufuncs import isnan, where as _where
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.nanvar is not supported.")
  a = _arr("nanvar", a)
  where = _check_where("nanvar", where)
  comp_dt, result_dt = _var_dtypes(get_aval(a).dtype, dtype)
  a = lax.convert_element_type(a, comp_dt)
  if mean is not None:
    a_mean = lax.convert_element_type(asarray(_as_operand(mean)), comp_dt)
  else:
    a_mean = nanmean(a, axis=axis, dtype=comp_dt, keepdims=True, where=where)
  if get_aval(a).ndim and get_aval(a_mean).shape != get_aval(a).shape:
    a_mean = _broadcast_to(a_mean, get_aval(a).shape)
  centered = _where(isnan(a), lax.full_like(a, 0), lax.sub(a, a_mean))
  if dtypes.is_complex(comp_dt):
    centered = lax.real(lax.mul(centered, lax.conj(centered)))
  else:
    centered = lax.square(centered)
  valid = lax.not_(isnan(a))
  if where is not None:
    valid = lax.and_(valid, _bool_mask("nanvar", where, get_aval(a).shape))
  rdt = get_aval(centered).dtype
  norm = lax.sub(sum(valid, axis=axis, dtype=rdt, keepdims=keepdims), lax._const(centered, ddof))
  s = sum(centered, axis=axis, dtype=rdt, keepdims=keepdims, where=where)
  bad = lax.le(norm, lax._const(norm, 0))
  s = _where(bad, np.nan, s)
  res = lax.div(s, lax.convert_element_type(_where(bad, 1, norm), get_aval(s).dtype))
  return lax.convert_element_type(res, result_dt)


@static_argnames("axis", "dtype", "keepdims")
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
  where = _check_where("nanstd", where)
  return lax.sqrt(nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                         where=where, mean=mean))


# ------------------------------------------------------------------------------------------------
# Quantiles (sort along the axis, then interpolate between neighbouring order statistics)


def _take_last(s, idx):
  """``s[..., idx]`` for an index array ``idx`` with ``s``'s leading shape."""
  from ourjax.numpy._gathers import take_along_last
  return take_along_last(s, idx)


_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _quantile_weights(name, weights, aval, axis, axes):
  """``weights`` checked against ``a`` (its shape, or the reduced axes' sizes in ``axis``'s
  order) as JAX checks them."""
  check_arraylike(name, weights)
  w = asarray(_as_operand(weights))
  w_aval = get_aval(w)
  if dtypes.is_complex(w_aval.dtype):
    raise ValueError("Weights cannot be complex types.")
  red = tuple(aval.shape[i] for i in axes)
  if axis is None:
    if w_aval.shape != aval.shape:
      raise ValueError("Weights shape must match 'a' shape when axis is None.")
  elif w_aval.shape != aval.shape and w_aval.shape != red:
    raise ValueError(f"Weights shape {w_aval.shape} must match reduction axes {red}")
  return w


def _quantile(name, a, q, axis, method, keepdims, squash_nans, weights=None):
  from ourjax.numpy._ufuncs import isnan, where
  from ourjax.numpy._util import promote_dtypes_inexact
  if method not in _QUANTILE_METHODS:
    raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', 'nearest' "
                     f"or 'inverted_cdf'; got {method!r}")
  if weights is not None and method != "inverted_cdf":
    raise NotImplementedError(f"{method} doesn't support weights. Only method 'inverted_cdf' "
                              "supports weights.")
  check_arraylike(name, a, q)
  a, q = asarray(_as_operand(a)), asarray(_as_operand(q))
  if get_aval(q).ndim > 1:
    raise ValueError(f"q must be have rank <= 1, got shape {get_aval(q).shape}")
  aval = get_aval(a)
  axes = _reduction_axes(name, axis, aval.ndim)
  w = None if weights is None else _quantile_weights(name, weights, aval, axis, axes)
  a, w = promote_dtypes_inexact(a) + [None] if w is None else promote_dtypes_inexact(a, w)
  dt = get_aval(a).dtype
  if dtypes.is_complex(dt):
    raise ValueError(f"{name} does not support complex input, as the operation is poorly "
                     "defined.")
  q = lax.convert_element_type(q, dt)
  aval = get_aval(a)
  keep_shape = tuple(1 if i in axes else d for i, d in enumerate(aval.shape))
  w_full = w is not None and get_aval(w).shape == aval.shape
  if aval.ndim == 0:
    a = lax.reshape(a, (1,))
    w = None if w is None else lax.reshape(w, (1,))
    w_full = w is not None
    axes = (0,)
    aval = get_aval(a)
  # move the reduced axes to the end and merge them
  rest = tuple(i for i in range(aval.ndim) if i not in axes)
  a = lax.transpose(a, rest + axes)
  n = _axis_count(aval.shape, axes)
  a = lax.reshape(a, tuple(aval.shape[i] for i in rest) + (n,))
  batch = get_aval(a).shape[:-1]
  if n == 0:
    raise ValueError(f"jnp.{name}: cannot compute a quantile of an empty array")
  if w is not None:
    if w_full:
      w = lax.transpose(w, rest + axes)
    else:                      # the reduced axes' sizes, in the order ``axis`` names them
      red = get_aval(w).shape
      w = lax.broadcast_in_dim(w, batch + red, tuple(range(len(batch), len(batch) + len(red))))
    w = lax.reshape(w, batch + (n,))
  q_shape = get_aval(q).shape
  # results have shape q_shape + batch
  out_shape = q_shape + batch
  if squash_nans:
    counts = sum(lax.not_(isnan(a)), axis=-1, dtype=dt)
  else:
    counts = lax.full(batch, n, dt)
  cb = lax.broadcast_in_dim(counts, out_shape, tuple(range(len(q_shape), len(out_shape))))
  if method == "inverted_cdf":
    res = _inverted_cdf(a, w, q, out_shape, squash_nans)
  else:
    res = _interpolated(a, q, cb, out_shape, method)
  if squash_nans:
    empty = lax.eq(cb, lax._const(cb, 0))
    res = where(empty, np.nan, res)
  else:
    nan_any = any(isnan(a), axis=-1)
    nb = lax.broadcast_in_dim(nan_any, out_shape, tuple(range(len(q_shape), len(out_shape))))
    res = where(nb, np.nan, res)
  if keepdims:
    res = lax.reshape(res, q_shape + keep_shape)
  if get_aval(res).weak_type:      # (JAX's quantiles are never weakly typed: median(3.0))
    res = lax._convert_element_type(res, get_aval(res).dtype, weak_type=False)
  return res


def _interpolated(a, q, cb, out_shape, method):
  """The linear/lower/higher/midpoint/nearest quantiles of the rows of ``a`` (count ``cb``)."""
  q_shape = get_aval(q).shape
  n = get_aval(a).shape[-1]
  s = lax.sort(a, dimension=get_aval(a).ndim - 1)
  qb = lax.broadcast_in_dim(q, out_shape, tuple(range(len(q_shape))))
  pos = lax.mul(qb, lax.sub(cb, lax._const(cb, 1)))
  lo = lax.floor(pos)
  hi = lax.ceil(pos)
  top = lax.max(lax.sub(cb, lax._const(cb, 1)), lax._const(cb, 0))
  lo = lax.min(lax.max(lo, lax._const(lo, 0)), top)
  hi = lax.min(lax.max(hi, lax._const(hi, 0)), top)
  sb = lax.broadcast_in_dim(s, out_shape + (n,), tuple(range(len(q_shape), len(out_shape) + 1)))
  lo_i = lax.convert_element_type(lo, np.int32)
  hi_i = lax.convert_element_type(hi, np.int32)
  v_lo = _take_last(sb, lo_i)
  v_hi = _take_last(sb, hi_i)
  if method == "linear":
    frac = lax.sub(pos, lo)
    return lax.add(lax.mul(v_lo, lax.sub(lax._const(frac, 1), frac)), lax.mul(v_hi, frac))
  if method == "lower":
    return v_lo
  if method == "higher":
    return v_hi
  if method == "midpoint":
    return lax.mul(lax.add(v_lo, v_hi), lax._const(v_lo, 0.5))
  near = lax.round(pos, lax.RoundingMethod.TO_NEAREST_EVEN)
  near = lax.min(lax.max(near, lax._const(near, 0)), top)
  return _take_last(sb, lax.convert_element_type(near, np.int32))


def _inverted_cdf(a, w, q, out_shape, squash_nans):
  """NumPy's 'inverted_cdf' quantile of the rows of ``a`` with weights ``w`` (ones if None):
  the first sorted value whose normalized cumulative weight reaches ``q``.  NaNs weigh nothing
  for the nan-variants; a negative or NaN weight makes the row's result NaN."""
  from ourjax.numpy._ufuncs import isnan, where
  q_shape = get_aval(q).shape
  nd = get_aval(a).ndim
  n = get_aval(a).shape[-1]
  if w is None:
    w = lax.full_like(a, 1)
  s, ws = lax.sort((a, w), dimension=nd - 1, num_keys=1)
  if squash_nans:
    ws = where(isnan(s), lax._const(ws, 0), ws)
  bad = any(lax.or_(lax.lt(ws, lax._const(ws, 0)), isnan(ws)), axis=-1)
  cdf = lax.cumsum(ws, axis=nd - 1)
  total = lax.slice_in_dim(cdf, n - 1, n, axis=nd - 1)
  cdf = lax.div(cdf, lax.broadcast_in_dim(total, get_aval(cdf).shape, tuple(range(nd))))
  batch_dims = tuple(range(len(q_shape), len(out_shape) + 1))
  cdfb = lax.broadcast_in_dim(cdf, out_shape + (n,), batch_dims)
  qb = lax.broadcast_in_dim(q, out_shape + (n,), tuple(range(len(q_shape))))
  # the position of the first cumulative weight >= q: how many fall short of it
  idx = sum(lax.lt(cdfb, qb), axis=-1, dtype=np.int32)
  idx = lax.min(idx, lax._const(idx, n - 1))
  res = _take_last(lax.broadcast_in_dim(s, out_shape + (n,), batch_dims), idx)
  badb = lax.broadcast_in_dim(bad, out_shape, tuple(range(len(q_shape), len(out_shape))))
  return where(badb, np.nan, res)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None):
  """The ``q``-th quantile(s) (``q`` in [0, 1], a scalar or 1-D) over ``axis``; methods
  linear, lower, higher, midpoint, nearest and inverted_cdf, the only one that takes
  ``weights`` (shaped like ``a`` or like the reduced axes, in ``axis``'s order)."""
  if overwrite_input or out is not None:
    raise ValueError("jax.numpy.quantile does not support overwrite_input=True or out != None")
  return _quantile("quantile", a, q, axis, method, keepdims, False, weights)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None):
  if overwrite_input or out is not None:
    raise ValueError("jax.numpy.nanquantile does not support overwrite_input=True or "
                     "out != None")
  return _quantile("nanquantile", a, q, axis, method, keepdims, True, weights)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None):
  from ourjax.numpy._util import promote_dtypes_inexact
  check_arraylike("percentile", a, q)
  q, = promote_dtypes_inexact(asarray(_as_operand(q)))
  return quantile(a, lax.div(q, lax._const(q, 100)), axis=axis, out=out,
                  overwrite_input=overwrite_input, method=method, keepdims=keepdims,
                  weights=weights)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None):
  from ourjax.numpy._util import promote_dtypes_inexact
  check_arraylike("nanpercentile", a, q)
  q, = promote_dtypes_inexact(asarray(_as_operand(q)))
  return nanquantile(a, lax.div(q, lax._const(q, 100)), axis=axis, out=out,
                     overwrite_input=overwrite_input, method=method, keepdims=keepdims,
                     weights=weights)


@static_argnames("axis", "overwrite_input", "keepdims")
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
  """Middle value (mean of the two middle values for an even count); NaN if any is NaN."""
  return quantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                  keepdims=keepdims, method="midpoint")


@static_argnames("axis", "overwrite_input", "keepdims")
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
  return nanquantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                     keepdims=keepdims, method="midpoint")
