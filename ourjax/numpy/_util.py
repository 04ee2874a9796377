"""What every ``ourjax.numpy`` function does first: check its arguments, promote their dtypes
(JAX's lattice, weak types respected) and broadcast their shapes (NumPy rules)."""
from __future__ import annotations

import functools
import inspect
import warnings

import numpy as np

from ourjax import core, dtypes, lax
from ourjax._keys import PRNGKeyArray
from ourjax.array import Array
from ourjax.config import config, internal_promotion  # noqa: F401 (re-exported)
from ourjax.core import Tracer, get_aval


def is_arraylike(x) -> bool:
  return isinstance(x, (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)) or \
      hasattr(x, "__jax_array__")


def check_arraylike(fun_name: str, *args):
  for pos, arg in enumerate(args):
    if not is_arraylike(arg):
      if type(arg) is PRNGKeyArray:
        _key_operand_error(fun_name, args)
      raise TypeError(f"{fun_name} requires ndarray or scalar arguments, got "
                      f"{type(arg).__name__} at position {pos}.")


_UFUNC_NAMES = {"negative": "neg", "positive": "pos", "absolute": "abs", "invert": "not",
                "bitwise_not": "not", "logical_not": "not"}


def _key_operand_error(fun_name, args):
  """Arithmetic on a typed PRNG key array: JAX's message (``add does not accept dtypes
  key<fry>, int32.``)."""
  from ourjax._keys import operand_dtype_name
  name = _UFUNC_NAMES.get(fun_name, fun_name)
  if len(args) == 1:
    raise TypeError(f"{name} does not accept dtype {args[0].dtype}. Accepted dtypes are "
                    "subtypes of integer, floating, complexfloating.")
  names = [operand_dtype_name(a) for a in args]
  if len(set(names)) == 1:
    raise TypeError(f"{name} does not accept dtype {names[0]} at position 0. Accepted dtypes "
                    "at position 0 are subtypes of integer, floating, complexfloating.")
  raise TypeError(f"{name} does not accept dtypes {', '.join(names)}.")


def _as_operand(x):
  """Python scalars and NumPy values pass through (they bind as weak/strong constants); lists
  are rejected as in JAX."""
  if isinstance(x, (list, tuple)):
    raise TypeError(f"ourjax.numpy functions do not accept {type(x).__name__}s; use "
                    "jnp.asarray(x) or jnp.array(x) first.")
  if hasattr(x, "__jax_array__") and not isinstance(x, (Array, Tracer)):
    return x.__jax_array__()
  return x


def _check_int_range(args, dt):
  """A Python int must fit the default integer dtype (int32, or int64 with x64: an
  OverflowError otherwise); converted to a narrower promoted dtype it wraps, as in JAX
  (``int8_array + 300`` adds 44)."""
  if dtypes.is_integer(dt):
    info = np.iinfo(dtypes.default_int_dtype())
    for a in args:
      if type(a) is int and not info.min <= a <= info.max:
        raise OverflowError(f"Python int {a} too large to convert to {info.dtype.name}")


_F32_MAX = float(np.finfo(np.float32).max)
_f32, _f64 = np.dtype(np.float32), np.dtype(np.float64)
_scalar_avals: dict = {}


def _scalar_fast(a, dt, weak):
  """A Python float or int as a 0-d Array of float32/float64 ``dt`` when NumPy's conversion is
  exactly XLA's (a finite value in range, an int of the default int range); else None."""
  t = type(a)
  if dt is not _f32 and dt is not _f64 and dt != _f32 and dt != _f64:
    return None
  if t is float:
    if dt == _f32 and not -_F32_MAX <= a <= _F32_MAX:
      return None      # overflow, inf, NaN: the general conversion
  elif t is int:
    if not -2 ** 31 <= a < 2 ** 31:
      return None      # the general conversion checks the default int's range
  else:
    return None
  key = (dt, weak)
  aval = _scalar_avals.get(key)
  if aval is None:
    aval = _scalar_avals[key] = core.ShapedArray((), dt, weak)
  return Array._from_result(np.array(a, dt), aval)


def _convert_all(args, dt, weak):
  """Each argument as an Array (or tracer) of dtype ``dt`` and weak type ``weak``; an Array
  that already is one is returned as it is."""
  out = []
  for a in args:
    t = type(a)
    if t is Array:
      av = a.aval
      if av.dtype == dt:
        # the same buffer (read-only) under the other weak type, when that is what differs
        out.append(a if av.weak_type == weak else
                   Array._from_result(a._value, av.update(weak_type=weak)))
        continue
    elif t is float or t is int:
      v = _scalar_fast(a, dt, weak)
      if v is not None:
        out.append(v)
        continue
    out.append(ensure_array(lax._convert_element_type(a, dt, weak)))
  return out


def _has_int(args) -> bool:
  for a in args:
    if type(a) is int:
      return True
  return False


def promote_dtypes(*args):
  """Convert all arguments to their common dtype (JAX's ``result_type``); NumPy values and
  Python scalars become Arrays (of canonical dtype) even when there is only one."""
  if not args:
    return []
  dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if _has_int(args):
    _check_int_range(args, dt)
  return _convert_all(args, dt, weak)


def promote_dtypes_inexact(*args):
  """Promote, then make the common dtype inexact (ints -> default float)."""
  dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  dt = dtypes.to_inexact_dtype(dt)
  return _convert_all(args, dt, weak)


def promote_dtypes_numeric(*args):
  dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if dt == np.bool_:
    dt = np.dtype(np.int32)   # JAX's to_numeric_dtype: int32 also with x64
  if _has_int(args):
    _check_int_range(args, dt)
  return _convert_all(args, dt, weak)


def broadcast_shapes(*shapes, fun_name: str = "broadcast_shapes") -> tuple:
  try:
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
  except ValueError:
    # JAX's words (``fun_name`` kept for the signature's callers)
    raise ValueError(f"Incompatible shapes for broadcasting: shapes="
                     f"{[tuple(s) for s in shapes]}") from None


#: the lax primitive behind a jnp binary function, where the names differ (JAX's shape
#: errors name the primitive)
_LAX_NAMES = {"multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div",
              "maximum": "max", "minimum": "min", "equal": "eq", "not_equal": "ne",
              "less": "lt", "less_equal": "le", "greater": "gt", "greater_equal": "ge",
              "arctan2": "atan2", "power": "pow", "bitwise_and": "and", "bitwise_or": "or",
              "bitwise_xor": "xor", "logical_and": "and", "logical_or": "or", "remainder": "rem",
              "floor_divide": "div",
              "logical_xor": "xor", "left_shift": "shift_left"}


def promote_shapes(fun_name: str, *args):
  """Broadcast non-scalar arguments to a common shape; rank-0 arguments stay rank 0 (lax's
  elementwise ops broadcast those themselves)."""
  if len(args) < 2:
    return list(args)
  shapes = [a.aval.shape if type(a) is Array else
            np.shape(a) if not isinstance(a, Tracer) else a.shape for a in args]
  nonscalar = [s for s in shapes if len(s)]
  if not nonscalar or len(set(nonscalar)) == 1:    # (rank-0 operands broadcast in lax)
    return list(args)
  if len({len(s) for s in nonscalar}) > 1:
    _rank_promotion_check(fun_name, shapes)
  try:
    result = tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
  except ValueError:
    if len({len(s) for s in nonscalar}) > 1:
      # as JAX: operands of different ranks are rank-promoted by a NumPy broadcast first,
      # whose failure is a ValueError
      raise ValueError(f"Incompatible shapes for broadcasting: shapes="
                       f"{[tuple(s) for s in shapes]}") from None
    # equal ranks go to the lax op as they are, which rejects them: a TypeError naming it
    raise TypeError(f"{_LAX_NAMES.get(fun_name, fun_name)} got incompatible shapes for "
                    f"broadcasting: "
                    f"{', '.join(str(tuple(s)) for s in shapes)}.") from None
  return [a if len(s) == 0 or tuple(s) == result else _broadcast_to(a, result)
          for a, s in zip(args, shapes)]


def _rank_promotion_check(fun_name: str, shapes):
  """``jax_numpy_rank_promotion``: operands of different non-zero ranks warn or raise unless
  the option is 'allow' (JAX's words)."""
  mode = config.jax_numpy_rank_promotion
  if mode == "allow":
    return
  shapes_str = " ".join(str(tuple(s)) for s in shapes)
  if mode == "warn":
    warnings.warn(f"Following NumPy automatic rank promotion for {fun_name} on shapes "
                  f"{shapes_str}. Set the jax_numpy_rank_promotion config option to 'allow' to "
                  "disable this warning; for more information, see "
                  "https://docs.jax.dev/en/latest/rank_promotion_warning.html.", stacklevel=4)
  else:
    raise ValueError(f"Operands could not be broadcast together for {fun_name} on shapes "
                     f"{shapes_str} and with the config option jax_numpy_rank_promotion="
                     f"'{mode}'. For more information, see "
                     "https://docs.jax.dev/en/latest/rank_promotion_warning.html.")


def _broadcast_to(x, shape):
  aval = get_aval(x)
  nd = len(shape)
  lead = nd - aval.ndim
  # drop size-1 dims that broadcast, map the rest to their output positions
  keep = [i for i, s in enumerate(aval.shape) if not (s == 1 and shape[lead + i] != 1)]
  if len(keep) != aval.ndim:
    x = lax.reshape(x, tuple(aval.shape[i] for i in keep))
  return lax.broadcast_in_dim(x, tuple(shape), tuple(lead + i for i in keep))


_PLAIN_OPERAND_TYPES = frozenset({Array, float, int, bool, complex})


def _operands(fun_name: str, args):
  """``check_arraylike`` and ``_as_operand`` of each argument (Arrays and Python scalars pass
  as they are)."""
  for a in args:
    if type(a) not in _PLAIN_OPERAND_TYPES:
      check_arraylike(fun_name, *args)
      return [_as_operand(a) for a in args]
  return args


_WIDE = frozenset(map(np.dtype, (np.int64, np.uint64, np.float64, np.complex128)))
_INEXACT = frozenset(map(np.dtype, (np.float16, np.float32, np.float64, np.complex64,
                                    np.complex128))) | {dtypes.dtype("bfloat16")}


def _same_strong_arrays(args, same_shape: bool = True) -> bool:
  """All arguments are Arrays of one shape (unless not ``same_shape``) and one strongly typed
  canonical dtype: promotion leaves them as they are (the common case of eager code, checked
  cheaply)."""
  a0 = args[0]
  if type(a0) is not Array:
    return False
  v0 = a0.aval
  if v0.weak_type or (v0.dtype in _WIDE and not config.x64_enabled):
    return False
  for a in args[1:]:
    if type(a) is not Array:
      return False
    v = a.aval
    if v.weak_type or v.dtype != v0.dtype or (same_shape and v.shape != v0.shape):
      return False
  return True


def _array_and_scalar(args):
  """``x * 2.0``, ``1 - x``: a strongly typed float32/float64 Array and a Python float or int
  promote to the Array's dtype, the scalar a 0-d Array of it; None for anything else."""
  a, b = args
  ta, tb = type(a), type(b)
  if ta is Array and (tb is float or tb is int):
    arr, sc = a, b
  elif tb is Array and (ta is float or ta is int):
    arr, sc = b, a
  else:
    return None
  v = arr.aval
  if v.weak_type or not (v.dtype == _f32 or (v.dtype == _f64 and config.x64_enabled)):
    return None
  s = _scalar_fast(sc, v.dtype, False)
  if s is None:
    return None
  return [arr, s] if arr is a else [s, arr]


def promote_args(fun_name: str, *args):
  if args and _same_strong_arrays(args):
    return list(args)
  if len(args) == 2:
    r = _array_and_scalar(args)
    if r is not None:
      return r
  return promote_shapes(fun_name, *_promoted(fun_name, promote_dtypes, args))


def promote_args_inexact(fun_name: str, *args):
  if args and _same_strong_arrays(args) and args[0].aval.dtype in _INEXACT:
    return list(args)
  if len(args) == 2:
    r = _array_and_scalar(args)
    if r is not None:
      return r
  return promote_shapes(fun_name, *_promoted(fun_name, promote_dtypes_inexact, args))


def promote_args_numeric(fun_name: str, *args):
  return promote_shapes(fun_name, *_promoted(fun_name, promote_dtypes_numeric, args))


def _promoted(fun_name, promote, args):
  ops = _operands(fun_name, args)
  try:
    return promote(*ops)
  except dtypes.TypePromotionError:
    if any(getattr(a, "dtype", None) == dtypes.float0 for a in ops):
      from ourjax.lax._utils import FLOAT0_ERROR
      raise TypeError(f"Called {fun_name} with a float0 array. {FLOAT0_ERROR}") from None
    raise


def ensure_array(x):
  """A concrete non-Array value becomes an Array; tracers and Arrays are returned as they are."""
  if isinstance(x, (Array, Tracer)):
    return x
  return Array(x, weak_type=dtypes.is_weakly_typed(x))


def canonicalize_axis(axis, ndim: int) -> int:
  axis = core.concrete_or_error(int, axis, "The axis argument must be concrete.")
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim


def canonicalize_axes(axis, ndim: int) -> tuple:
  if axis is None:
    return tuple(range(ndim))
  if isinstance(axis, (tuple, list)):
    axes = tuple(canonicalize_axis(a, ndim) for a in axis)
    if len(set(axes)) != len(axes):
      raise ValueError(f"repeated axis in {axis}")
    return axes
  return (canonicalize_axis(axis, ndim),)


def _unhashable_static(fun_name: str, name: str, v, err: TypeError) -> ValueError:
  return ValueError(f"Non-hashable static arguments are not supported. An error occurred while "
                    f"trying to hash an object of type {type(v)}, {v} (static argument "
                    f"{name!r} of {fun_name}). The error was:\nTypeError: {err}\n")


def check_static(fun_name: str, **static):
  """The arguments JAX's function takes as static arguments of a jit (``axis``, ``size``, ...)
  must be hashable; an array is not: the ValueError jit raises for it, as JAX's function
  does, before any other check."""
  for name, v in static.items():
    try:
      hash(v)
    except TypeError as e:
      raise _unhashable_static(fun_name, name, v, e) from None


def static_argnames(*names: str):
  """Decorator naming a function's static arguments, as JAX's
  ``@partial(jit, static_argnames=...)`` on the same ``jax.numpy`` function does: each call first
  hashes those arguments (passed by position or by keyword) and raises jit's ValueError for an
  unhashable one (an array, a tracer, a list), before anything else, even a missing argument.
  Python scalars, None, strings, tuples and dtypes pass and the call is unchanged."""
  def deco(fun):
    params = inspect.signature(fun).parameters
    unknown = [n for n in names if n not in params]
    if unknown:
      raise TypeError(f"static_argnames: {fun.__name__} has no parameter(s) {unknown}")
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    index = {p.name: i for i, p in enumerate(params.values()) if p.kind in positional}
    where = tuple((n, index.get(n, -1)) for n in names)
    fun_name = fun.__name__

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
      for n, i in where:
        if 0 <= i < len(args):
          v = args[i]
        elif n in kwargs:
          v = kwargs[n]
        else:
          continue
        try:
          hash(v)
        except TypeError as e:
          raise _unhashable_static(fun_name, n, v, e) from None
      return fun(*args, **kwargs)

    wrapper.static_argnames = names
    return wrapper
  return deco
