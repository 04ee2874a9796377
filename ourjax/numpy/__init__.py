"""``ourjax.numpy``: NumPy's API on ourjax arrays, with JAX's semantics (immutable arrays,
``x.at[i].set(v)``, weak types, 32-bit defaults unless x64 is enabled)."""
import numpy as _np

from ourjax import dtypes as _dtypes
from ourjax.array import Array as ndarray  # noqa: F401  (jnp.ndarray is the Array type)
from ourjax.array import Array  # noqa: F401
from ourjax.dtypes import (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,  # noqa
                           float16, bfloat16, float32, float64, complex64, complex128, float0,
                           finfo, iinfo, issubdtype, promote_types, result_type, isdtype)
from ourjax.dtypes import float8_e4m3fn, float8_e5m2  # noqa: F401
from ourjax.numpy._ufuncs import *  # noqa: F401,F403
from ourjax.numpy._ufuncs import abs, round, pow  # noqa: F401,A004
from ourjax.numpy._creation import (array, asarray, zeros, ones, empty, full, zeros_like,  # noqa
                                    ones_like, empty_like, full_like)
from ourjax.numpy._reductions import (sum, prod, max, min, amax, amin, mean, all, any, var,  # noqa
                                      std)

bool = bool_  # noqa: A001
int_ = _dtypes.default_int_dtype().type
float_ = _dtypes.default_float_dtype().type
complex_ = _dtypes.default_complex_dtype().type
inexact, floating, integer, signedinteger, unsignedinteger, number, complexfloating, generic = (
    _np.inexact, _np.floating, _np.integer, _np.signedinteger, _np.unsignedinteger, _np.number,
    _np.complexfloating, _np.generic)
dtype = _np.dtype
pi, e, inf, nan, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, _np.euler_gamma
newaxis = None


def astype(x, dtype, /, *, copy=False, device=None):
  from ourjax import lax
  return lax.convert_element_type(x, _dtypes.check_user_dtype(dtype, "astype"))


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
  """Elementwise choice; the one-argument form (nonzero) lives with the indexing functions."""
  from ourjax import lax
  from ourjax.numpy._util import promote_args, check_arraylike, promote_shapes
  if x is None and y is None:
    raise NotImplementedError("jnp.where(condition) needs jnp.nonzero (not available yet)")
  if x is None or y is None:
    raise ValueError("Either both or neither of the x and y arguments should be provided to "
                     "jnp.where, got one.")
  check_arraylike("where", condition, x, y)
  x, y = promote_args("where", x, y)
  cond = condition if getattr(condition, "dtype", None) == _np.bool_ else not_equal(
      condition, 0)
  cond, x, y = promote_shapes("where", cond, x, y)
  from ourjax.numpy._util import _broadcast_to
  shape = _np.broadcast_shapes(_np.shape(cond) if not hasattr(cond, "shape") else cond.shape,
                               x.shape if hasattr(x, "shape") else (),
                               y.shape if hasattr(y, "shape") else ())
  x = x if _np.shape(x) == shape else _broadcast_to(x, shape)
  y = y if _np.shape(y) == shape else _broadcast_to(y, shape)
  return lax.select_n(cond, y, x)


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
  from ourjax import lax
  from ourjax.core import get_aval
  if shape is None:
    shape = newshape
  a = asarray(a)
  aval = get_aval(a)
  shape = (shape,) if isinstance(shape, int) else tuple(shape)
  if shape.count(-1) > 1:
    raise ValueError("can only specify one unknown dimension")
  if -1 in shape:
    known = int(_np.prod([d for d in shape if d != -1], dtype=_np.int64))
    if known == 0 or aval.size % known:
      raise ValueError(f"cannot reshape array of shape {aval.shape} (size {aval.size}) into "
                       f"shape {shape}")
    shape = tuple(aval.size // known if d == -1 else d for d in shape)
  if int(_np.prod(shape, dtype=_np.int64)) != aval.size:
    raise TypeError(f"cannot reshape array of shape {aval.shape} (size {aval.size}) into shape "
                    f"{shape} (size {int(_np.prod(shape, dtype=_np.int64))})")
  if order == "F":
    rev = tuple(reversed(range(aval.ndim)))
    return lax.transpose(lax.reshape(lax.transpose(a, rev), tuple(reversed(shape))),
                         tuple(reversed(range(len(shape)))))
  return lax.reshape(a, shape)


from ourjax.numpy import _array_methods as _am  # noqa: E402

_am._install()
del _am
