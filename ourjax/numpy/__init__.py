"""``ourjax.numpy``: NumPy's API on ourjax arrays, with JAX's semantics (immutable arrays,
weak types, 32-bit defaults unless x64 is enabled).  Re-exports only; the functions live in:

  _creation.py     array, asarray, zeros/ones/full/empty(+_like), arange, linspace, eye, tri,
                   tril/triu, diag, meshgrid, indices
  _ufuncs.py       elementwise math, where, clip, isclose/allclose, nan_to_num, frexp/ldexp, ...
  _reductions.py   sum ... std, argmax/argmin, cumsum/cumprod, nan*, quantile/median, average
  _shape.py        reshape, transpose, stack/concatenate/split, broadcast_*, tile/repeat,
                   flip/roll/rot90, diff, delete/insert
  _pad.py          pad (all of NumPy's modes and a callable mode)
  _linalg_ops.py   dot, matmul, einsum, tensordot, inner/outer/vdot, matvec/vecmat, kron, trace,
                   diagonal
  _sorting.py      sort, argsort, lexsort, searchsorted, digitize, isin
  _indexing.py     x[idx], x.at[idx]
  _index_functions.py  take/take_along_axis, put/put_along_axis/place, nonzero/argwhere,
                   compress/extract, choose, ix_, unravel_index/ravel_multi_index
  _setops.py       unique, unique_values/_counts/_inverse/_all, union1d, intersect1d, setdiff1d,
                   setxor1d
  _misc.py         select, piecewise, trapezoid, cross, cov/corrcoef, polyval, vander,
                   convolve/correlate, bincount, histogram/histogram2d/histogramdd,
                   packbits/unpackbits, trim_zeros, unwrap, mask_indices, ...
  _polynomial.py   poly, polyadd/polysub/polymul/polydiv, polyder/polyint, polyfit, roots
  _windows.py      bartlett, blackman, hamming, hanning, kaiser, i0
  _index_tricks.py mgrid, ogrid, r_, c_, index_exp, s_
  _gathers.py      the internal gathers the functions above use
  _ufunc_api.py    the ufunc objects (jnp.add.reduce/.accumulate/.outer/.at)
  _scalar_types.py jnp.float32 & co., int4 & co. (callable dtype objects)
  _array_methods.py  operators and methods of Array and Tracer
"""
import numpy as _np

from ourjax import dtypes as _dtypes
from ourjax.array import PublicArray as ndarray  # noqa: F401  (jnp.ndarray is ourjax.Array)
from ourjax.array import Array  # noqa: F401
from ourjax.dtypes import (float0, finfo, iinfo)  # noqa: F401


def issubdtype(arg1, arg2) -> bool:
  """``np.issubdtype`` (NumPy's parameter names), with ourjax's dtypes: see ``dtypes``."""
  return _dtypes.issubdtype(arg1, arg2)


def isdtype(dtype, kind) -> bool:
  """Array-API ``isdtype``: whether ``dtype`` is of ``kind`` (a kind name such as 'real
  floating', a dtype, or a tuple of these)."""
  return _dtypes.isdtype(dtype, kind)


from ourjax.numpy._scalar_types import (  # noqa: F401
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
    float32, float64, complex64, complex128, single, double, csingle, cdouble, int_, uint,
    float_, complex_, narrow_types as _narrow_types)
from ourjax.numpy._ufuncs import *  # noqa: F401,F403
from ourjax.numpy._ufuncs import (abs, round, pow, where, clip, isclose, allclose,  # noqa
                                  array_equal, array_equiv, nan_to_num, fabs, fmax, fmin,
                                  frexp, ldexp, modf, gcd, lcm, angle, iscomplexobj,
                                  isrealobj, iscomplex, isreal, isscalar, bitwise_count,
                                  interp, divmod)
from ourjax.numpy._creation import (array, asarray, copy, zeros, ones, empty, full,  # noqa
                                    zeros_like, ones_like, empty_like, full_like, arange,
                                    linspace, logspace, geomspace, eye, identity, tri, tril,
                                    triu, diag, diagflat, meshgrid, indices, fromfunction,
                                    frombuffer, fromstring)
from ourjax.numpy._reductions import (sum, prod, max, min, amax, amin, mean, all, any,  # noqa
                                      var, std, ptp, count_nonzero, average, argmax, argmin,
                                      nanargmax, nanargmin, cumsum, cumprod, cumproduct,
                                      nancumsum, nancumprod, cumulative_sum, cumulative_prod,
                                      nansum, nanprod, nanmax, nanmin, nanmean, nanvar, nanstd,
                                      quantile, nanquantile, percentile, nanpercentile, median,
                                      nanmedian)
from ourjax.numpy._shape import (shape, ndim, size, reshape, ravel, transpose,  # noqa: F401
                                 permute_dims, matrix_transpose, swapaxes, moveaxis, rollaxis,
                                 expand_dims, squeeze, atleast_1d, atleast_2d, atleast_3d,
                                 broadcast_shapes, broadcast_to, broadcast_arrays, concatenate,
                                 concat, stack, vstack, hstack, dstack,
                                 column_stack, append, block, split, array_split, vsplit,
                                 hsplit, dsplit, unstack, tile, repeat, flip, fliplr, flipud,
                                 roll, rot90, diff, ediff1d, delete, insert)
from ourjax.numpy._pad import pad  # noqa: F401
from ourjax.numpy._linalg_ops import (dot, matmul, vdot, vecdot, inner, outer,  # noqa: F401
                                      tensordot, kron, diagonal, trace, einsum, einsum_path,
                                      matvec, vecmat)
from ourjax.numpy._sorting import (sort, argsort, lexsort, partition, argpartition,  # noqa
                                   sort_complex, searchsorted, digitize, isin)
from ourjax.numpy._index_functions import (take, take_along_axis, put, nonzero,  # noqa
                                           flatnonzero, argwhere, compress, extract, choose,
                                           ix_, unravel_index, ravel_multi_index,
                                           put_along_axis, place)
from ourjax.numpy._setops import (unique, unique_values, unique_counts,  # noqa: F401
                                  unique_inverse, unique_all, union1d, intersect1d, setdiff1d,
                                  setxor1d)
from ourjax.numpy._misc import (select, trapezoid, cross, cov, corrcoef, polyval,  # noqa: F401
                                vander, convolve, correlate, bincount, histogram,
                                histogram_bin_edges, tril_indices, triu_indices,
                                tril_indices_from, triu_indices_from, diag_indices,
                                diag_indices_from, fill_diagonal, resize, apply_along_axis,
                                apply_over_axes, gradient, vectorize, piecewise, histogram2d,
                                histogramdd, mask_indices, packbits, unpackbits, trim_zeros,
                                unwrap)
from ourjax.numpy._polynomial import (poly, polyadd, polysub, polymul, polydiv,  # noqa: F401
                                      polyder, polyint, polyfit, roots)
from ourjax.numpy._windows import bartlett, blackman, hamming, hanning, kaiser, i0  # noqa: F401

globals().update(_narrow_types)

# the binary functions become ufunc objects (jnp.add.reduce, .accumulate, .outer, .at)
from ourjax.numpy import _ufuncs as _ufuncs_module  # noqa: E402
from ourjax.numpy._ufunc_api import ufunc, frompyfunc, _make as _make_ufuncs  # noqa: E402,F401
from ourjax.numpy._io import save, savez, load, fromfile, fromiter, from_dlpack  # noqa: E402,F401
globals().update(_make_ufuncs(_ufuncs_module))
del _make_ufuncs
bool = bool_  # noqa: A001
inexact, floating, integer, signedinteger, unsignedinteger, number, complexfloating, generic = (
    _np.inexact, _np.floating, _np.integer, _np.signedinteger, _np.unsignedinteger, _np.number,
    _np.complexfloating, _np.generic)
character, flexible, object_ = _np.character, _np.flexible, _np.object_
dtype = _np.dtype
pi, e, inf, nan, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, _np.euler_gamma
newaxis = None
printoptions, set_printoptions, get_printoptions = (_np.printoptions, _np.set_printoptions,
                                                     _np.get_printoptions)
array_str, array_repr = _np.array_str, _np.array_repr
ComplexWarning = _np.exceptions.ComplexWarning


def result_type(*args):
  """The dtype JAX's promotion rules give ``args`` (canonicalised; Python scalars weak)."""
  return _dtypes.result_type(*args)


def promote_types(a, b):
  """The dtype two dtypes promote to (JAX's lattice).  As JAX's, not canonicalised for the x64
  setting: ``promote_types(int32, int64)`` is int64 (array results are canonicalised)."""
  return _dtypes.promote_types(a, b)


def can_cast(from_, to, casting="safe"):
  """NumPy's casting rules on the dtypes (a value ``from_`` is taken by its dtype)."""
  frm = from_ if isinstance(from_, (str, type, _np.dtype)) else _dtypes.dtype(from_)
  return _np.can_cast(_np.dtype(frm), _np.dtype(to), casting=casting)


def astype(x, dtype, /, *, copy: bool = False, device=None):
  """Convert to ``dtype`` (NumPy's casts; float to int truncates toward zero; None is the
  default float type).  Complex to real keeps the real part, with JAX's DeprecationWarning.
  ``copy=True`` always gives a new buffer (a ``copy`` after the conversion, as JAX); with
  False, a conversion to the array's own dtype returns the array itself."""
  import warnings as _warnings
  from ourjax import lax as _lax
  from ourjax.numpy._util import check_arraylike
  check_arraylike("astype", x)
  x = asarray(x)
  dt = _dtypes.default_float_dtype() if dtype is None else \
      _dtypes.check_user_dtype(dtype, "astype")
  if _dtypes.is_complex(x.dtype) and not _dtypes.is_complex(dt):
    _warnings.warn("Casting from complex to real dtypes will soon raise a ValueError. Please "
                   "first use jnp.real or jnp.imag to take the real/imaginary component of "
                   "your input.", DeprecationWarning, stacklevel=2)
    x = real(x)  # noqa: F405
  out = _lax.convert_element_type(x, dt)
  if copy:
    from ourjax.lax.elementwise import copy_p
    out = copy_p.bind(out)
  from ourjax._device_api import _is_device_spec, device_put
  if device is not None and _is_device_spec(device):    # (placed as device_put does, as JAX's)
    out = device_put(out, device)
  return out


def iterable(y) -> bool:
  try:
    iter(y)
  except TypeError:
    return False
  return True


from ourjax.numpy import _array_methods as _am  # noqa: E402

_am._install()
del _am
from ourjax.numpy import linalg  # noqa: E402,F401
from ourjax.numpy import fft  # noqa: E402,F401
from ourjax.numpy._index_tricks import c_, index_exp, mgrid, ogrid, r_, s_  # noqa: E402,F401


# names NumPy had and JAX removed (JAX 0.10): an AttributeError that says what to use instead
_REMOVED = {"fix": "jnp.trunc", "in1d": "jnp.isin", "row_stack": "jnp.vstack"}


def __getattr__(name):
  if name in _REMOVED:
    raise AttributeError(f"ourjax.numpy.{name} was removed, as in JAX (v0.10); use "
                         f"{_REMOVED[name]} instead.")
  raise AttributeError(f"module 'ourjax.numpy' has no attribute {name!r}")
