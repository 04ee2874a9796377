"""Assorted NumPy functions built from the others: select, piecewise, trapezoid, cross,
cov/corrcoef, polyval, vander, convolve/correlate, bincount, histogram/histogram2d/histogramdd,
packbits/unpackbits, trim_zeros, unwrap, the index helpers (tril_indices & co., mask_indices),
fill_diagonal, resize, apply_along_axis, gradient and vectorize."""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._creation import asarray
from ourjax.numpy._util import (_as_operand, canonicalize_axis, check_arraylike,
                                check_static, promote_dtypes, promote_dtypes_inexact,
                                static_argnames)


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


def piecewise(x, condlist, funclist, *args, **kw):
  """Elementwise, the function (or constant) of ``funclist`` whose condition of ``condlist``
  holds, the last one that does winning; one extra function is the default (0 otherwise).
  Each function gets a scalar element (and ``args``, ``kw``) and its result is cast to
  ``x``'s dtype: JAX's ``vectorize`` over ``lax.switch``, in a jit that holds the functions as
  static arguments (calling piecewise again with the same functions does not trace them again;
  the constants, ``args`` and ``kw`` are traced)."""
  check_arraylike("piecewise", x)
  x = asarray(_as_operand(x))
  nc, nf = len(condlist), len(funclist)
  if nf == nc + 1:
    funclist = list(funclist[-1:]) + list(funclist[:-1])
  elif nf == nc:
    funclist = [0] + list(funclist)
  else:
    raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are expected; "
                     f"got {nf}")
  dt = get_aval(x).dtype
  conds = asarray(condlist, dtype=np.bool_)
  funcs = tuple(f if callable(f) else None for f in funclist)
  consts = tuple(None if callable(f) else lax.convert_element_type(asarray(_as_operand(f)), dt)
                 for f in funclist)
  global _piecewise_jit
  if _piecewise_jit is None:
    from ourjax.api import jit
    _piecewise_jit = jit(_piecewise, static_argnums=(3,))
  return _piecewise_jit(x, conds, consts, funcs, args, kw)


_piecewise_jit = None


def _piecewise(x, conds, consts, funcs, args, kw):
  from ourjax.numpy._reductions import argmax, cumsum
  dt = get_aval(x).dtype
  # the branch: 1 + the last condition that holds, 0 for none
  counts = cumsum(lax.concatenate([lax.full((1,) + get_aval(conds).shape[1:], False, np.bool_),
                                   conds], 0), axis=0)
  index = argmax(counts, axis=0)

  def branch(f, c):
    if f is not None:
      return lambda v: lax.convert_element_type(asarray(f(v, *args, **kw)), dt)
    return lambda v: lax.broadcast_in_dim(c, get_aval(v).shape, ())
  branches = [branch(f, c) for f, c in zip(funcs, consts)]
  return vectorize(lambda i, v: lax.switch(i, branches, v))(index, x)


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
  """Integral of ``y`` by the trapezoidal rule, along ``axis`` (samples at ``x``, or spaced
  ``dx`` apart)."""
  from ourjax.numpy._shape import diff, moveaxis, _slice_axis
  from ourjax.numpy._ufuncs import add, multiply
  from ourjax.numpy._reductions import sum as _sum
  if x is None:
    check_arraylike("trapezoid", y)
    y, = promote_dtypes_inexact(_as_operand(y))
    dx = _as_operand(dx)
    if np.ndim(dx) > 0:  # an array of spacings broadcasts against y, as NumPy's
      dx = asarray(dx)
      nd_y, nd_dx = get_aval(y).ndim, get_aval(dx).ndim
      dx = moveaxis(lax.expand_dims(dx, tuple(range(nd_y - nd_dx))), axis, -1)
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


def _inexact_dtype_arg(name, dtype):
  if dtype is None:
    return None
  dt = dtypes.canonicalize_dtype(dtypes.check_user_dtype(dtype, name))
  if not dtypes.is_inexact(dt):
    raise ValueError(f"{name}: dtype must be a subclass of float or complex; got {dtype}")
  return dt


def cov(m, y=None, rowvar: bool = True, bias: bool = False, ddof=None, fweights=None,
        aweights=None, dtype=None):
  """Covariance matrix of the variables in the rows (``rowvar``) or columns of ``m`` (NumPy
  2.2's rule: with ``rowvar=False`` a 2-D ``m`` is always transposed), computed in ``dtype``
  (inexact) if given.  ``fweights`` (integer) and ``aweights`` weigh the observations."""
  dtype = _inexact_dtype_arg("cov", dtype)
  from ourjax.numpy._shape import atleast_2d, concatenate, squeeze
  from ourjax.numpy._reductions import average, sum as _sum
  from ourjax.numpy._linalg_ops import dot
  from ourjax.numpy._ufuncs import abs as _abs, conjugate, multiply, subtract, true_divide
  check_arraylike("cov", m, *([] if y is None else [y]))
  if y is None:
    m, = promote_dtypes_inexact(_as_operand(m))
  else:
    m, y = promote_dtypes_inexact(_as_operand(m), _as_operand(y))
    if get_aval(y).ndim > 2:
      raise ValueError("y has more than 2 dimensions")
  if get_aval(m).ndim > 2:
    raise ValueError("m has more than 2 dimensions")
  x = atleast_2d(m)
  if not rowvar and get_aval(m).ndim != 1:
    x = lax.transpose(x, (1, 0))
  if get_aval(x).shape[0] == 0:
    return lax.full((0, 0), 0, get_aval(x).dtype if dtype is None else dtype)
  if y is not None:
    yy = atleast_2d(y)
    if not rowvar and get_aval(yy).shape[0] != 1:
      yy = lax.transpose(yy, (1, 0))
    x = concatenate([x, yy], 0)
  nvar, n = get_aval(x).shape
  if dtype is not None:
    x = lax.convert_element_type(x, dtype)
  if n == 0:
    return lax.full(() if nvar == 1 else (nvar, nvar), np.nan, get_aval(x).dtype)
  if ddof is None:
    ddof = 0 if bias else 1

  def weights(name, v):
    check_arraylike("cov", v)
    v = asarray(v)
    if get_aval(v).ndim > 1:
      raise RuntimeError(f"cannot handle multidimensional {name}")
    if get_aval(v).shape[0] != n:
      raise RuntimeError(f"incompatible numbers of samples and {name}")
    return _abs(v)     # (NumPy raises on negative weights; a traced check is not possible)

  w = None
  if fweights is not None:
    w = weights("fweights", fweights)
    if not dtypes.issubdtype(get_aval(w).dtype, np.integer):
      raise TypeError("fweights must be integer.")
  if aweights is not None:
    aweights = weights("aweights", aweights)
    w = aweights if w is None else multiply(w, aweights)
  if dtype is not None and w is not None:
    w = lax.convert_element_type(w, dtype)
  avg, w_sum = average(x, axis=1, weights=w, returned=True)
  if w is None:
    fact = n - ddof
  else:
    w_sum = lax.index_in_dim(w_sum, 0, keepdims=False)
    if ddof == 0:
      fact = w_sum
    elif aweights is None:
      fact = subtract(w_sum, ddof)
    else:
      fact = subtract(w_sum, true_divide(multiply(ddof, _sum(multiply(w, aweights))), w_sum))
  xc = lax.sub(x, lax.broadcast_in_dim(avg, get_aval(x).shape, (0,)))
  if w is not None:     # (broadcast explicitly: no rank promotion inside the library)
    xw = multiply(xc, lax.broadcast_in_dim(w, get_aval(xc).shape, (1,)))
  else:
    xw = xc
  return squeeze(true_divide(dot(xc, conjugate(lax.transpose(xw, (1, 0)))), fact))


def corrcoef(x, y=None, rowvar: bool = True, dtype=None):
  """Pearson correlation coefficients (the covariance normalised by the deviations), computed
  in ``dtype`` (inexact) if given."""
  from ourjax.numpy._creation import diag
  from ourjax.numpy._ufuncs import sqrt, real, clip, divide, iscomplexobj, imag
  c = cov(x, y, rowvar, dtype=_inexact_dtype_arg("corrcoef", dtype))
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
  # as JAX's: the common dtype of p and x (integers stay integers), and y starts as strongly
  # typed zeros of the broadcast shape, so the result is never weakly typed
  p, x = promote_dtypes(_as_operand(p), _as_operand(x))
  if get_aval(p).ndim == 0:
    raise ValueError("polyval: p must be at least 1-dimensional")
  shape = tuple(np.broadcast_shapes(get_aval(p).shape[1:], get_aval(x).shape))
  y = lax.full(shape, 0, get_aval(x).dtype)
  for c in unstack(p, axis=0):
    y = add(multiply(y, x), c)
  return y


@static_argnames("N", "increasing")
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
  """Counts (or summed ``weights``) of each integer value in ``x``, negative values clipped to
  0 (as JAX); under jit the number of bins must be given as ``length``."""
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
    length = max(minlength, max(int(xv.max()), 0) + 1 if xv.size else 0)
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
  # negative values count in bin 0 (clipped), as JAX's
  idx = lax.max(idx, np.int32(0))
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
  if np.ndim(bins) != 1:
    raise ValueError("bins must be 1-dimensional")
  # explicit edges take the (inexact) dtype of the values, as JAX's
  return asarray(bins, dtype=get_aval(a).dtype)


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
  # the edges have a's inexact dtype: a is cast to it (no promotion, so strict promotion holds)
  a = lax.convert_element_type(a, get_aval(edges).dtype)
  # as JAX's: a value's slot is searchsorted(edges, value, 'right') in 0..n+1, the last edge
  # itself counting in the last bin; slot 0 (below the range) and slot n+1 (above it, or NaN,
  # which sorts last) are dropped -- and with NaN edges every value falls outside
  idx = searchsorted(edges, a, side="right")
  from ourjax.numpy._gathers import take_1d
  last = take_1d(edges, np.full((), n, np.int32))
  idx = where(lax.eq(a, last), n, idx)
  # the counts have the (inexact) dtype of the weights, ones like a by default
  w = lax.full_like(a, 1) if weights is None else ravel(asarray(weights,
                                                               dtype=get_aval(a).dtype))
  counts = bincount(idx, w, length=n + 2)
  from ourjax.numpy._shape import _slice_axis
  counts = _slice_axis(counts, 1, n + 1, 0)
  if density:
    widths = diff(edges)
    counts = divide(divide(counts, widths), _sum(counts))
  return counts, edges


def histogramdd(sample, bins=10, range=None, weights=None, density=None):  # noqa: A002
  """The D-dimensional histogram of the (N, D) ``sample``: counts (or summed ``weights``) per
  cell, and the list of each dimension's bin edges.  ``bins`` and ``range`` are one value for
  all dimensions or one per dimension, as ``histogram``'s (each value's last bin includes its
  right edge; values outside the range are dropped)."""
  from ourjax.numpy._index_functions import ravel_multi_index, ix_
  from ourjax.numpy._reductions import sum as _sum
  from ourjax.numpy._shape import diff, reshape
  from ourjax.numpy._sorting import searchsorted
  from ourjax.numpy._ufuncs import where, divide
  from ourjax.numpy._gathers import take_1d
  check_arraylike("histogramdd", sample)
  if weights is None:
    sample, = promote_dtypes_inexact(asarray(_as_operand(sample)))
  else:
    check_arraylike("histogramdd", weights)
    sample, weights = (asarray(_as_operand(sample)), asarray(_as_operand(weights)))
    if get_aval(weights).shape != get_aval(sample).shape[:1]:
      raise ValueError(f"should have one weight for each sample: weights of shape "
                       f"{get_aval(weights).shape} for a sample of shape "
                       f"{get_aval(sample).shape}")
    sample, weights = promote_dtypes_inexact(sample, weights)
  if get_aval(sample).ndim != 2:
    raise ValueError(f"histogramdd: sample must be 2-dimensional (N, D), got shape "
                     f"{get_aval(sample).shape}")
  N, D = get_aval(sample).shape
  if range is not None and (len(range) != D or any(
      r is not None and np.shape(r)[0] != 2 for r in range)):
    raise ValueError(f"For sample.shape={(N, D)}, range must be a sequence of {D} pairs or "
                     f"Nones; got range={range!r}")
  try:
    per_dim = list(bins)
  except TypeError:
    per_dim = [bins] * D
  else:
    if len(per_dim) != D:
      raise ValueError(f"should be a bin for each dimension: {len(per_dim)} bins for "
                       f"{D} dimensions")
  # each value's bin per dimension, counting an underflow bin 0 and an overflow bin n + 1
  cells, edges = [], []
  for d, b in enumerate(per_dim):
    col = lax.reshape(lax.slice_in_dim(sample, d, d + 1, 1, 1), (N,))
    e = histogram_bin_edges(col, b, None if range is None else range[d], weights)
    last = take_1d(e, np.full((), get_aval(e).shape[0] - 1, np.int32))
    i = searchsorted(e, col, side="right")
    cells.append(where(lax.eq(col, last), lax.sub(i, lax._const(i, 1)), i))
    edges.append(e)
  nbins = tuple(get_aval(e).shape[0] + 1 for e in edges)
  flat = ravel_multi_index(tuple(cells), nbins, mode="clip")
  hist = reshape(bincount(flat, weights, length=int(np.prod(nbins))), nbins)
  hist = hist[(slice(1, -1),) * D]
  if density:
    hist = lax.convert_element_type(hist, get_aval(sample).dtype)
    hist = divide(hist, _sum(hist))
    for width in ix_(*[diff(e) for e in edges]):
      hist = divide(hist, width)
  return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):  # noqa: A002
  """The 2-D histogram of the points (``x``, ``y``): (counts, x edges, y edges).  ``bins`` is
  one count or edge array for both, or a pair."""
  from ourjax.numpy._shape import stack
  check_arraylike("histogram2d", x, y)
  try:
    n = len(bins)
  except TypeError:
    n = 1
  if n not in (1, 2):          # one array of edges, for both
    bins = [asarray(bins)] * 2
  hist, edges = histogramdd(stack([asarray(_as_operand(x)), asarray(_as_operand(y))], axis=1),
                            bins, range, weights, density)
  return hist, edges[0], edges[1]


# ------------------------------------------------------------------------------------------------
# Bits, trimming, phase unwrapping


def _bitorder(bitorder):
  if bitorder not in ("little", "big"):
    raise ValueError(f"'order' must be either 'little' or 'big', got {bitorder!r}")
  shifts = np.arange(8, dtype=np.uint8)
  return shifts[::-1].copy() if bitorder == "big" else shifts


def packbits(a, axis=None, bitorder="big"):
  """The elements of ``a`` (nonzero or not) packed eight to a uint8 along ``axis`` (the
  flattened ``a`` for None), the last byte padded with zero bits."""
  from ourjax.numpy._shape import ravel, swapaxes
  check_static("packbits", axis=axis, bitorder=bitorder)
  check_arraylike("packbits", a)
  a = asarray(_as_operand(a))
  dt = get_aval(a).dtype
  if not (dtypes.is_integer(dt) or dt == np.bool_):
    raise TypeError(f"Expected an input array of integer or boolean data type, got {dt.name}")
  shifts = _bitorder(bitorder)
  bits = lax.convert_element_type(lax.ne(a, lax.full((), 0, dt)), np.uint8)
  if axis is None:
    bits, axis = ravel(bits), 0
  axis = canonicalize_axis(axis, get_aval(bits).ndim)
  bits = swapaxes(bits, axis, -1)
  *lead, n = get_aval(bits).shape
  if n % 8:
    bits = lax.pad(bits, np.uint8(0), [(0, 0, 0)] * len(lead) + [(0, 8 - n % 8, 0)])
  shape = tuple(lead) + (-(-n // 8), 8)
  bits = lax.reshape(bits, shape)
  packed = lax.reduce_sum(lax.shift_left(bits, lax.broadcast_in_dim(shifts, shape,
                                                                    (len(shape) - 1,))),
                          (len(shape) - 1,))
  return swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
  """The bits of the uint8 array ``a`` as a uint8 array of 0s and 1s, eight per element along
  ``axis`` (the flattened ``a`` for None); ``count`` keeps that many of them (a negative
  count drops as many from the end; a larger one pads with zeros)."""
  from ourjax.numpy._shape import ravel, swapaxes
  check_static("unpackbits", axis=axis, count=count, bitorder=bitorder)
  check_arraylike("unpackbits", a)
  a = asarray(_as_operand(a))
  if get_aval(a).dtype != np.uint8:
    raise TypeError(f"Expected an input array of unsigned byte data type, got "
                    f"{get_aval(a).dtype.name}")
  shifts = _bitorder(bitorder)
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(axis, get_aval(a).ndim)
  a = swapaxes(a, axis, -1)
  *lead, n = get_aval(a).shape
  shape = tuple(lead) + (n, 8)
  nd = len(shape)
  one = np.uint8(1)
  bits = lax.and_(
      lax.shift_right_logical(lax.broadcast_in_dim(a, shape, tuple(range(nd - 1))),
                              lax.broadcast_in_dim(shifts, shape, (nd - 1,))),
      lax.full(shape, one, np.uint8))
  bits = lax.reshape(bits, tuple(lead) + (8 * n,))
  if count is not None:
    count = _static_int(count, "count")
    keep = len(range(8 * n)[:count])
    if count > 8 * n:
      bits = lax.pad(bits, np.uint8(0), [(0, 0, 0)] * len(lead) + [(0, count - 8 * n, 0)])
    else:
      bits = lax.slice_in_dim(bits, 0, keep, 1, len(lead))
  return swapaxes(bits, axis, -1)


def trim_zeros(filt, trim="fb", axis=None):
  """``filt`` without its leading ('f' in ``trim``) and trailing ('b') zeros; along each of
  ``axis`` (all axes for None) the slices that are all zero are trimmed.  The result's shape
  depends on the values, so ``filt`` must be concrete."""
  from ourjax.numpy._util import canonicalize_axes
  check_arraylike("trim_zeros", filt)
  filt = asarray(_as_operand(filt))
  value = np.asarray(core.concrete_or_error(None, filt, "The error arose in the `filt` argument "
                                            "of trim_zeros(): the result's shape depends on "
                                            "its values."))
  trim = trim.lower()
  front, back = "f" in trim, "b" in trim
  axes = canonicalize_axes(axis, value.ndim)
  if not axes or not (front or back):
    return filt
  index = []
  for ax in range(value.ndim):
    if ax not in axes:
      index.append(slice(None))
      continue
    nonzero = np.any(value != 0, axis=tuple(d for d in range(value.ndim) if d != ax))
    if not nonzero.any():
      index.append(slice(0, 0))
      continue
    start = int(np.argmax(nonzero)) if front else None
    stop = value.shape[ax] - int(np.argmax(nonzero[::-1])) if back else None
    index.append(slice(start, stop))
  return filt[tuple(index)]


def unwrap(p, discont=None, axis: int = -1, period=2 * np.pi):
  """``p`` with the jumps between neighbours along ``axis`` of more than ``discont`` (by
  default ``period / 2``) reduced modulo ``period``: the phase unwrapped, as NumPy's."""
  from ourjax.numpy._reductions import cumsum
  from ourjax.numpy._shape import concatenate, diff, _slice_axis
  from ourjax.numpy._ufuncs import (abs as _abs, floor_divide, logical_and, mod, subtract,
                                    true_divide, where, add, greater, less, equal)
  check_arraylike("unwrap", p)
  p, period = promote_dtypes(_as_operand(p), _as_operand(period))
  if dtypes.is_complex(get_aval(p).dtype):
    raise ValueError("jnp.unwrap does not support complex inputs.")
  if get_aval(p).ndim == 0:        # JAX's error: p.shape[axis] of a 0-d p
    raise IndexError("jnp.unwrap: a 0-d input has no axis to unwrap along")
  axis = canonicalize_axis(axis, get_aval(p).ndim)
  n = get_aval(p).shape[axis]
  if n == 0:
    return p
  if discont is None:
    discont = true_divide(period, 2)
  half = (floor_divide if dtypes.is_integer(get_aval(p).dtype) else true_divide)(period, 2)
  step = diff(p, axis=axis)
  wrapped = subtract(mod(add(step, half), period), half)
  # a step of exactly +period/2 stays positive (NumPy's rule)
  wrapped = where(logical_and(equal(wrapped, -half), greater(step, 0)), half, wrapped)
  correction = where(less(_abs(step), discont), 0, subtract(wrapped, step))
  return concatenate([_slice_axis(p, 0, 1, axis),
                      add(_slice_axis(p, 1, n, axis), cumsum(correction, axis=axis))], axis)


# ------------------------------------------------------------------------------------------------
# Index helpers, fill_diagonal, resize


def _static_int(x, what):
  return core.concrete_or_error(operator.index, x, f"jnp: the {what} argument must be "
                                "concrete.")


def tril_indices(n, k=0, m=None):
  """Row and column indices of the lower triangle of an (n, m) array (static)."""
  r, c = np.tril_indices(_static_int(n, "n"), _static_int(k, "k"),
                         None if m is None else _static_int(m, "m"))
  dt = dtypes.default_int_dtype()   # int64 with x64, as JAX's
  return asarray(r.astype(dt)), asarray(c.astype(dt))


def triu_indices(n, k=0, m=None):
  r, c = np.triu_indices(_static_int(n, "n"), _static_int(k, "k"),
                         None if m is None else _static_int(m, "m"))
  dt = dtypes.default_int_dtype()   # int64 with x64, as JAX's
  return asarray(r.astype(dt)), asarray(c.astype(dt))


def tril_indices_from(arr, k=0):
  s = get_aval(asarray(arr)).shape
  if len(s) != 2:
    raise ValueError("Only 2-D inputs are accepted")
  return tril_indices(s[0], k, s[1])


def triu_indices_from(arr, k=0):
  s = get_aval(asarray(arr)).shape
  if len(s) != 2:
    raise ValueError("Only 2-D inputs are accepted")
  return triu_indices(s[0], k, s[1])


def diag_indices(n, ndim: int = 2):
  n, ndim = _static_int(n, "n"), _static_int(ndim, "ndim")
  if n < 0 or ndim < 0:
    raise ValueError(f"n and ndim must be non-negative, got n={n}, ndim={ndim}")
  idx = lax.iota(dtypes.default_int_dtype(), n)
  return (idx,) * ndim


def diag_indices_from(arr):
  s = get_aval(asarray(arr)).shape
  if len(s) < 2 or len(set(s)) != 1:
    raise ValueError(f"All dimensions of input must be of equal length, got shape {s}")
  return diag_indices(s[0], len(s))


def mask_indices(n, mask_func, k=0, *, size=None):
  """The (row, column) indices of the nonzero entries of ``mask_func(ones((n, n)), k)``, e.g.
  ``mask_indices(n, jnp.triu)``; ``size`` as ``nonzero``'s."""
  from ourjax.numpy._creation import ones
  from ourjax.numpy._index_functions import nonzero
  rows, cols = nonzero(mask_func(ones((_static_int(n, "n"),) * 2), k), size=size)
  return rows, cols


def fill_diagonal(a, val, wrap: bool = False, *, inplace: bool = True):
  """A copy of ``a`` with its main diagonal set to ``val`` (``inplace=False`` is required, as
  ourjax arrays are immutable)."""
  from ourjax.numpy._ufuncs import where
  from ourjax.numpy._shape import ravel, reshape
  if inplace:
    raise ValueError("JAX arrays are immutable, must use inplace=False")
  a = asarray(a)
  s = get_aval(a).shape
  if len(s) < 2:
    raise ValueError("array must be at least 2-d")
  if len(s) > 2 and len(set(s)) != 1:
    raise ValueError("All dimensions of input must be of equal length")
  if len(s) == 2:
    n, m = s
    rows = n if wrap else min(n, m)
    # positions k * (m + 1) of the flattened array, for the first rows (or all, with wrap)
    pos = np.arange(0, n * m if wrap else rows * m, m + 1)
  else:
    n = s[0]
    step = sum(n ** i for i in range(len(s)))
    pos = np.arange(0, n * step, step)[:n]
  mask = np.zeros(int(np.prod(s)), bool)
  mask[pos] = True
  v = ravel(asarray(val, dtype=get_aval(a).dtype))
  nv = get_aval(v).shape[0]
  if nv == 0:
    return a
  vals = np.zeros(int(np.prod(s)), np.int32)
  vals[pos] = np.arange(pos.size) % nv
  from ourjax.numpy._gathers import take_1d
  filled = take_1d(v, vals)
  return reshape(where(mask, filled, ravel(a)), s)


@static_argnames("new_shape")
def resize(a, new_shape):
  """The flattened ``a`` repeated (or cut) to fill ``new_shape``."""
  from ourjax.numpy._shape import ravel, reshape, tile, _slice_axis
  from ourjax.numpy._creation import canonicalize_shape
  a = ravel(asarray(a))
  shape = canonicalize_shape(new_shape, "resize")
  total = int(np.prod(shape))
  n = get_aval(a).shape[0]
  if n == 0 or total == 0:
    return lax.full(shape, 0, get_aval(a).dtype)
  reps = -(-total // n)
  return reshape(_slice_axis(tile(a, reps), 0, total, 0), shape)


# ------------------------------------------------------------------------------------------------
# Functions of functions


def apply_along_axis(func1d, axis: int, arr, *args, **kwargs):
  """``func1d`` applied to every 1-D slice along ``axis`` (vectorized with vmap)."""
  from ourjax import api
  arr = asarray(arr)
  nd = get_aval(arr).ndim
  axis = _static_int(axis, "axis")
  if not -nd <= axis < nd:
    raise ValueError(f"apply_along_axis: axis {axis} is out of bounds for array of dimension "
                     f"{nd}")
  axis %= nd
  fn = lambda x: func1d(x, *args, **kwargs)  # noqa: E731
  for i in range(1, nd - axis):
    fn = api.vmap(fn, in_axes=i, out_axes=-1)
  for _ in range(axis):
    fn = api.vmap(fn, in_axes=0, out_axes=0)
  return fn(arr)


def apply_over_axes(func, a, axes):
  """``func(a, axis)`` applied for each axis in turn, keeping the number of dimensions."""
  from ourjax.numpy._shape import expand_dims
  a = asarray(a)
  nd = get_aval(a).ndim
  for ax in (axes if isinstance(axes, (tuple, list)) else (axes,)):
    b = func(a, ax)
    if get_aval(b).ndim == nd - 1:
      b = expand_dims(b, ax)
    elif get_aval(b).ndim != nd:
      raise ValueError("function is not returning an array of the correct shape")
    a = b
  return a


def gradient(f, *varargs, axis=None, edge_order=None):
  """Second-order central differences inside, one-sided differences at the edges
  (``edge_order`` 1 only); spacings are scalars or coordinate arrays."""
  from ourjax.numpy._shape import _slice_axis, concatenate
  from ourjax.numpy._ufuncs import subtract, divide, multiply, add
  if edge_order is not None and edge_order != 1:
    raise NotImplementedError("jnp.gradient only supports edge_order=1")
  check_arraylike("gradient", f)
  f, = promote_dtypes_inexact(_as_operand(f))
  nd = get_aval(f).ndim
  axes = tuple(range(nd)) if axis is None else (
      tuple(a % nd for a in axis) if isinstance(axis, (tuple, list)) else (axis % nd,))
  if not varargs:
    spacing = [1.0] * len(axes)
  elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
    spacing = list(varargs) * len(axes)
  elif len(varargs) == len(axes):
    spacing = list(varargs)
  else:
    raise TypeError("Invalid number of spacing arguments")
  outs = []
  for ax, h in zip(axes, spacing):
    n = get_aval(f).shape[ax]
    if n < 2:
      raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                       "(edge_order + 1) elements are required.")
    sl = lambda lo, hi: _slice_axis(f, lo, hi, ax)  # noqa: E731
    if np.ndim(h) == 0:
      inner = divide(subtract(sl(2, n), sl(0, n - 2)), multiply(2.0, h))
      first = divide(subtract(sl(1, 2), sl(0, 1)), h)
      last = divide(subtract(sl(n - 1, n), sl(n - 2, n - 1)), h)
    else:
      x, = promote_dtypes_inexact(asarray(h))
      if get_aval(x).shape != (n,):
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
      dx = subtract(_slice_axis(x, 1, n, 0), _slice_axis(x, 0, n - 1, 0))
      shape = [1] * nd
      shape[ax] = n - 1
      dx = lax.reshape(dx, tuple(shape))
      d1, d2 = _slice_axis(dx, 0, n - 2, ax), _slice_axis(dx, 1, n - 1, ax)
      # non-uniform second-order formula (NumPy's)
      a_ = divide(-d2, multiply(d1, add(d1, d2)))
      b_ = divide(subtract(d2, d1), multiply(d1, d2))
      c_ = divide(d1, multiply(d2, add(d1, d2)))
      inner = add(add(multiply(a_, sl(0, n - 2)), multiply(b_, sl(1, n - 1))),
                  multiply(c_, sl(2, n)))
      first = divide(subtract(sl(1, 2), sl(0, 1)), _slice_axis(dx, 0, 1, ax))
      last = divide(subtract(sl(n - 1, n), sl(n - 2, n - 1)), _slice_axis(dx, n - 2, n - 1, ax))
    outs.append(concatenate([first, inner, last], ax) if n > 2 else
                concatenate([first, last], ax))
  return outs[0] if len(outs) == 1 else outs


def _parse_gufunc_signature(signature):
  import re
  sig = signature.replace(" ", "")
  m = re.fullmatch(r"((?:\((?:\w+(?:,\w+)*)?\),?)*)->((?:\((?:\w+(?:,\w+)*)?\),?)*)", sig)
  if not m:
    raise ValueError(f"not a valid gufunc signature: {signature}")

  def parse(part):
    return [tuple(d for d in g.split(",") if d) for g in re.findall(r"\(([^)]*)\)", part)]
  return parse(m.group(1)), parse(m.group(2))


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
  """A function that maps ``pyfunc`` over the leading (loop) dimensions of its arguments,
  which broadcast; ``signature`` ('(m,n),(n)->(m)') names the core dimensions each argument
  keeps.  Positional indices or keyword names in ``excluded`` (and all keyword arguments)
  are passed through unchanged.  Built on vmap."""
  import functools
  from ourjax import api
  from ourjax.numpy._shape import broadcast_to, broadcast_shapes
  if any(not isinstance(e, (int, str)) for e in excluded):
    raise TypeError("jax.numpy.vectorize can only exclude integer or string arguments, but "
                    f"excluded={excluded!r}")
  if any(isinstance(e, int) and e < 0 for e in excluded):
    raise ValueError(f"excluded={excluded!r} contains negative numbers")
  in_core, out_core = (_parse_gufunc_signature(signature) if signature is not None
                       else (None, None))

  @functools.wraps(pyfunc)
  def wrapped(*args, **kwargs):
    fixed = {i: a for i, a in enumerate(args) if i in excluded}
    free_idx = [i for i in range(len(args)) if i not in excluded]
    free = [asarray(args[i]) for i in free_idx]

    def call(*vals):
      full = list(args)
      for i, v in zip(free_idx, vals):
        full[i] = v
      for i, a in fixed.items():
        full[i] = a
      return pyfunc(*full, **kwargs)
    cores = in_core if in_core is not None else [()] * len(free)
    if len(cores) != len(free):
      raise TypeError(f"wrong number of positional arguments: expected {len(cores)}, got "
                      f"{len(free)}")
    sizes = {}
    loop_shapes = []
    for x, dims in zip(free, cores):
      s = get_aval(x).shape
      if len(s) < len(dims):
        raise ValueError(f"input with shape {s} does not have enough dimensions for its core "
                         f"dimensions {dims} in signature {signature}")
      for name, d in zip(dims, s[len(s) - len(dims):]):
        if sizes.setdefault(name, d) != d:
          raise ValueError(f"inconsistent size for core dimension {name!r}: {sizes[name]} vs "
                           f"{d}")
      loop_shapes.append(s[:len(s) - len(dims)])
    loop = broadcast_shapes(*loop_shapes) if loop_shapes else ()
    free = [broadcast_to(x, loop + get_aval(x).shape[len(ls):])
            for x, ls in zip(free, loop_shapes)]
    fn = call
    for _ in loop:
      fn = api.vmap(fn, in_axes=0, out_axes=0)
    out = fn(*free)
    if out_core is not None and len(out_core) > 1 and not isinstance(out, tuple):
      raise ValueError(f"vectorize: the signature expects {len(out_core)} outputs")
    return out
  return wrapped
