"""Assorted NumPy functions built from the others: select, trapezoid, cross, cov/corrcoef,
polyval, vander, convolve/correlate, bincount and histogram."""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, check_arraylike, promote_dtypes,
                                promote_dtypes_inexact)


def select(condlist, choicelist, default=0):
  """The first choice whose condition holds, elementwise (``default`` where none does)."""
  from ourjax.numpy._ufuncs import where
  condlist, choicelist = list(condlist), list(choicelist)
  if len(condlist) != len(choicelist):
    raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs "
                     f"{len(choicelist)})")
  if not condlist:
    raise ValueError("condlist must be non-empty")
  check_arraylike("select", *condlist, *choicelist, default)
  vals = promote_dtypes(_as_operand(default), *[_as_operand(c) for c in choicelist])
  out = vals[0]
  for cond, val in zip(reversed(condlist), reversed(vals[1:])):
    c = asarray(cond)
    if get_aval(c).dtype != np.bool_:
      c = lax.ne(c, lax._const(c, 0))
    out = where(c, val, out)
  return out


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
  """Integral of ``y`` by the trapezoidal rule, along ``axis`` (samples at ``x``, or spaced
  ``dx`` apart)."""
  from ourjax.numpy._shape import diff, moveaxis, _slice_axis
  from ourjax.numpy._ufuncs import add, multiply
  from ourjax.numpy._reductions import sum as _sum
  if x is None:
    check_arraylike("trapezoid", y)
    y, = promote_dtypes_inexact(_as_operand(y))
  else:
    check_arraylike("trapezoid", y, x)
    y, x = promote_dtypes_inexact(_as_operand(y), _as_operand(x))
    dx = diff(x) if get_aval(x).ndim == 1 else moveaxis(diff(x, axis=axis), axis, -1)
  y = moveaxis(y, axis, -1)
  n = get_aval(y).shape[-1]
  nd = get_aval(y).ndim
  mid = add(_slice_axis(y, min(1, n), n, nd - 1), _slice_axis(y, 0, max(n - 1, 0), nd - 1))
  return multiply(0.5, _sum(multiply(dx, mid), axis=-1))


def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis=None):
  """Cross product of 2- or 3-vectors along the given axes (others broadcast)."""
  from ourjax.numpy._shape import moveaxis, unstack, stack, broadcast_arrays
  from ourjax.numpy._ufuncs import multiply, subtract
  check_arraylike("cross", a, b)
  a, b = promote_dtypes(asarray(_as_operand(a)), asarray(_as_operand(b)))
  if axis is not None:
    axisa = axisb = axisc = axis
  a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
  na, nb = get_aval(a).shape[-1], get_aval(b).shape[-1]
  if na not in (2, 3) or nb not in (2, 3):
    raise ValueError(f"incompatible dimensions for cross product (dimension must be 2 or 3), "
                     f"got shapes {get_aval(a).shape} and {get_aval(b).shape}")
  a0, a1, *ra = unstack(a, axis=-1)
  b0, b1, *rb = unstack(b, axis=-1)
  if na == 2 and nb == 2:
    return subtract(multiply(a0, b1), multiply(a1, b0))
  a2 = ra[0] if ra else lax.full_like(a0, 0)
  b2 = rb[0] if rb else lax.full_like(b0, 0)
  c = broadcast_arrays(subtract(multiply(a1, b2), multiply(a2, b1)),
                       subtract(multiply(a2, b0), multiply(a0, b2)),
                       subtract(multiply(a0, b1), multiply(a1, b0)))
  return moveaxis(stack(c, axis=-1), -1, axisc)


def cov(m, y=None, rowvar: bool = True, bias: bool = False, ddof=None, fweights=None,
        aweights=None):
  """Covariance matrix of the variables in the rows (``rowvar``) or columns of ``m``."""
  from ourjax.numpy._shape import atleast_2d, concatenate, squeeze
  from ourjax.numpy._reductions import average, sum as _sum
  from ourjax.numpy._linalg_ops import dot
  from ourjax.numpy._ufuncs import conjugate, multiply
  check_arraylike("cov", m)
  x, = promote_dtypes_inexact(atleast_2d(_as_operand(m)))
  if get_aval(x).ndim > 2:
    raise ValueError("m has more than 2 dimensions")
  if not rowvar and get_aval(x).shape[0] != 1:
    x = lax.transpose(x, (1, 0))
  if y is not None:
    check_arraylike("cov", y)
    yy = atleast_2d(_as_operand(y))
    if not rowvar and get_aval(yy).shape[0] != 1:
      yy = lax.transpose(yy, (1, 0))
    x = concatenate([x, yy], 0)
  if ddof is None:
    ddof = 0 if bias else 1
  n = get_aval(x).shape[1]
  w = None
  if fweights is not None:
    f = asarray(fweights)
    if get_aval(f).ndim != 1 or get_aval(f).shape[0] != n:
      raise ValueError(f"fweights must be 1-D with length {n}")
    w = f
  if aweights is not None:
    aw = asarray(aweights)
    if get_aval(aw).ndim != 1 or get_aval(aw).shape[0] != n:
      raise ValueError(f"aweights must be 1-D with length {n}")
    w = aw if w is None else multiply(w, aw)
  avg, w_sum = average(x, axis=1, weights=w, returned=True)
  if w is None:
    fact = lax.full((), n - ddof, get_aval(avg).dtype)
  elif ddof == 0:
    fact = w_sum
  elif aweights is None:
    fact = lax.sub(w_sum, lax._const(w_sum, ddof))
  else:
    fact = lax.sub(w_sum, lax.div(lax.mul(lax._const(w_sum, ddof), _sum(multiply(w, aweights))),
                                  w_sum))
  fact = lax.max(fact, lax._const(fact, 0))
  if get_aval(fact).ndim:
    from ourjax.numpy._gathers import take_1d
    fact = take_1d(fact, np.zeros((), np.int32))
  xc = lax.sub(x, lax.broadcast_in_dim(avg, get_aval(x).shape, (0,)))
  xt = lax.transpose(xc if w is None else multiply(xc, w), (1, 0))
  c = lax.div(dot(xc, conjugate(xt)), lax.convert_element_type(fact, get_aval(xc).dtype))
  return squeeze(c)


def corrcoef(x, y=None, rowvar: bool = True):
  """Pearson correlation coefficients (the covariance normalised by the deviations)."""
  from ourjax.numpy._creation import diag
  from ourjax.numpy._ufuncs import sqrt, real, clip, divide, iscomplexobj, imag
  c = cov(x, y, rowvar)
  if get_aval(c).ndim == 0:
    return divide(c, c)
  d = diag(c)
  s = sqrt(real(d))
  n = get_aval(s).shape[0]
  c = divide(divide(c, lax.broadcast_in_dim(s, (n, n), (0,))),
             lax.broadcast_in_dim(s, (n, n), (1,)))
  if iscomplexobj(c):
    return lax.add(lax.convert_element_type(clip(real(c), -1, 1), get_aval(c).dtype),
                   lax.mul(lax.convert_element_type(clip(imag(c), -1, 1), get_aval(c).dtype),
                           np.array(1j, get_aval(c).dtype)))
  return clip(c, -1, 1)


def polyval(p, x, *, unroll=16):
  """Evaluate the polynomial with coefficients ``p`` (highest degree first) at ``x`` (Horner's
  scheme)."""
  from ourjax.numpy._shape import unstack
  from ourjax.numpy._ufuncs import add, multiply
  check_arraylike("polyval", p, x)
  p, x = promote_dtypes_inexact(_as_operand(p), _as_operand(x))
  if get_aval(p).ndim == 0:
    raise ValueError("polyval: p must be at least 1-dimensional")
  y = None
  for c in unstack(p, axis=0):
    y = c if y is None else add(multiply(y, x), c)
  if y is None:
    return lax.full_like(x, 0)
  return add(y, lax.full_like(x, 0))   # the result has x's (broadcast) shape


def vander(x, N=None, increasing: bool = False):
  """Columns are powers of ``x`` (decreasing unless ``increasing``)."""
  from ourjax.numpy._ufuncs import power
  check_arraylike("vander", x)
  x = asarray(_as_operand(x))
  if get_aval(x).ndim != 1:
    raise ValueError("x must be a one-dimensional array")
  n = get_aval(x).shape[0]
  N = n if N is None else core.concrete_or_error(operator.index, N, "vander N must be concrete")
  if N < 0:
    raise ValueError("N must be nonnegative")
  dt = get_aval(x).dtype
  iota = lax.iota(dt if dt != np.bool_ else np.int32, N)
  if not increasing:
    iota = lax.rev(iota, (0,))
  return power(lax.broadcast_in_dim(x, (n, N), (0,)), lax.broadcast_in_dim(iota, (n, N), (1,)))


def _conv(name, x, y, mode, precision, preferred_element_type):
  from ourjax.numpy._ufuncs import conjugate
  check_arraylike(name, x, y)
  x, y = asarray(_as_operand(x)), asarray(_as_operand(y))
  if get_aval(x).ndim != 1 or get_aval(y).ndim != 1:
    raise ValueError(f"{name}() only support 1-dimensional inputs.")
  if preferred_element_type is None:
    x, y = promote_dtypes_inexact(x, y)
  else:
    x, y = promote_dtypes(x, y)
  nx, ny = get_aval(x).shape[0], get_aval(y).shape[0]
  if nx == 0 or ny == 0:
    raise ValueError(f"{name}: inputs cannot be empty, got shapes {get_aval(x).shape} and "
                     f"{get_aval(y).shape}.")
  reverse_out = False
  if name == "correlate":
    y = conjugate(y)
    if nx < ny:
      x, y, reverse_out = y, x, True
  else:
    if nx < ny:
      x, y = y, x
    y = lax.rev(y, (0,))
  m = get_aval(y).shape[0]
  if mode == "valid":
    padding = [(0, 0)]
  elif mode == "same":
    padding = [(m // 2, m - m // 2 - 1)]
  elif mode == "full":
    padding = [(m - 1, m - 1)]
  else:
    raise ValueError("mode must be one of ['full', 'same', 'valid']")
  pref = None if preferred_element_type is None else dtypes.check_user_dtype(
      preferred_element_type, name)
  out = lax.conv_general_dilated(lax.reshape(x, (1, 1, get_aval(x).shape[0])),
                                 lax.reshape(y, (1, 1, m)), (1,), padding,
                                 precision=precision, preferred_element_type=pref)
  out = lax.reshape(out, (get_aval(out).shape[-1],))
  return lax.rev(out, (0,)) if reverse_out else out


def convolve(a, v, mode: str = "full", *, precision=None, preferred_element_type=None):
  """Discrete linear convolution of two 1-D arrays."""
  return _conv("convolve", a, v, mode, precision, preferred_element_type)


def correlate(a, v, mode: str = "valid", *, precision=None, preferred_element_type=None):
  """Cross-correlation of two 1-D arrays (``v`` conjugated)."""
  return _conv("correlate", a, v, mode, precision, preferred_element_type)


def bincount(x, weights=None, minlength: int = 0, *, length=None):
  """Counts (or summed ``weights``) of each non-negative integer value in ``x``; under jit the
  number of bins must be given as ``length``."""
  from ourjax.numpy._shape import ravel
  check_arraylike("bincount", x)
  x = asarray(_as_operand(x))
  if not (dtypes.is_integer(get_aval(x).dtype) or get_aval(x).dtype == np.bool_):
    raise TypeError(f"x argument to bincount must have an integer type; got "
                    f"{get_aval(x).dtype}")
  if get_aval(x).ndim != 1:
    raise ValueError("only 1-dimensional input supported.")
  minlength = core.concrete_or_error(operator.index, minlength,
                                     "The error occurred because of argument 'minlength' of "
                                     "jnp.bincount.")
  if length is None:
    xv = core.concrete_or_error(None, x, "The error occurred because of argument 'length' of "
                                "jnp.bincount: with traced x, give a static length.")
    xv = np.asarray(xv)
    if xv.size and xv.min() < 0:
      raise ValueError("jnp.bincount: x must be non-negative")
    length = max(minlength, int(xv.max()) + 1 if xv.size else 0)
  else:
    length = core.concrete_or_error(operator.index, length, "jnp.bincount length must be "
                                    "concrete")
  if weights is None:
    w = lax.full(get_aval(x).shape, 1, dtypes.default_int_dtype())
  else:
    check_arraylike("bincount", weights)
    w, = promote_dtypes(asarray(_as_operand(weights)))
    w = ravel(w)
    if get_aval(w).shape != get_aval(x).shape:
      raise ValueError(f"bincount: weights shape {get_aval(w).shape} does not match x shape "
                       f"{get_aval(x).shape}")
  idx = lax.convert_element_type(x, np.int32)
  # negative values are dropped (as out of range), as JAX does
  idx = lax.select_n(lax.lt(idx, np.int32(0)), idx, lax.full_like(idx, length))
  dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))
  return lax.scatter_add(lax.full((length,), 0, get_aval(w).dtype),
                         lax.reshape(idx, (get_aval(idx).shape[0], 1)), w, dn,
                         mode=lax.GatherScatterMode.FILL_OR_DROP)


def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002
  from ourjax.numpy._creation import linspace
  from ourjax.numpy._reductions import min as _min, max as _max
  check_arraylike("histogram_bin_edges", a)
  a, = promote_dtypes_inexact(_as_operand(a))
  if isinstance(bins, (int, np.integer)) or np.ndim(bins) == 0:
    bins = core.concrete_or_error(operator.index, bins, "histogram bins must be concrete")
    if range is None:
      lo, hi = _min(a), _max(a)
    else:
      lo, hi = (asarray(range[0], dtype=get_aval(a).dtype),
                asarray(range[1], dtype=get_aval(a).dtype))
    # a degenerate range widens to +-0.5, as NumPy's does
    same = lax.eq(lo, hi)
    lo = lax.select_n(same, lo, lax.sub(lo, lax._const(lo, 0.5)))
    hi = lax.select_n(same, hi, lax.add(hi, lax._const(hi, 0.5)))
    return linspace(lo, hi, bins + 1)
  bins = asarray(bins)
  if get_aval(bins).ndim != 1:
    raise ValueError("bins must be 1-dimensional")
  return bins


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002
  """Counts of ``a`` in ``bins`` (the last bin includes its right edge), and the edges."""
  from ourjax.numpy._shape import ravel
  from ourjax.numpy._sorting import searchsorted
  from ourjax.numpy._ufuncs import where, divide
  from ourjax.numpy._reductions import sum as _sum
  from ourjax.numpy._shape import diff
  check_arraylike("histogram", a)
  a = ravel(_as_operand(a))
  edges = histogram_bin_edges(a, bins, range, weights)
  n = get_aval(edges).shape[0] - 1
  a, edges = promote_dtypes_inexact(a, edges)
  idx = lax.sub(searchsorted(edges, a, side="right"), np.int32(1))
  # values equal to the last edge go into the last bin; values outside are dropped
  from ourjax.numpy._gathers import take_1d
  last = take_1d(edges, np.full((), n, np.int32))
  first = take_1d(edges, np.zeros((), np.int32))
  idx = where(lax.eq(a, last), n - 1, idx)
  outside = lax.or_(lax.lt(a, first), lax.gt(a, last))
  idx = where(outside, n, idx)
  w = None if weights is None else ravel(asarray(weights, dtype=get_aval(a).dtype))
  counts = bincount(idx, w, length=n + 1)
  from ourjax.numpy._shape import _slice_axis
  counts = _slice_axis(counts, 0, n, 0)
  if density:
    widths = diff(edges)
    counts = divide(divide(counts, widths), _sum(counts))
  return counts, edges
