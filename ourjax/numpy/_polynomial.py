"""Polynomials as coefficient arrays (highest degree first), as JAX's ``jax.numpy`` has them:
poly, polyadd, polysub, polymul, polydiv, polyder, polyint, polyfit and roots (polyval lives in
``_misc.py``).

JAX's conventions are kept, including where they differ from NumPy's: results are promoted to
an inexact dtype (polyadd/polysub keep integers), leading zeros are kept unless
``trim_leading_zeros=True`` (which needs concrete values: under ``jit`` it raises a
ConcretizationTypeError, as JAX does), ``roots`` always returns a complex array and
``roots(p, strip_zeros=True)`` needs a concrete ``p``; with ``strip_zeros=False`` it traces and
reports the roots that leading zeros remove as NaN.

Eigenvalues.  ``roots`` takes the eigenvalues of the companion matrix and ``poly`` of a square
matrix takes the matrix's eigenvalues, as JAX does (LAPACK's ``geev`` there).  ``jnp.linalg``
has no general eigensolver, so ``_eigvals`` here is one: the matrix is balanced (diagonal
scaling by powers of two), reduced to Hessenberg form by Householder reflections, and brought to
triangular form by the complex single-shift QR algorithm (Givens rotations, Wilkinson shifts,
an exceptional shift after every ten steps without convergence, deflation at the bottom of the
active block).  Everything is ``lax`` loops over a fixed-size matrix, so it jits and vmaps;
eigenvalues come out as the diagonal of the triangular form, which is LAPACK's order in most
cases but not in all (compare sorted values).
"""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._util import _as_operand, check_arraylike, check_static, promote_dtypes, \
    promote_dtypes_inexact, internal_promotion

__all__ = ["poly", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint", "polyfit",
           "roots"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _arrays(name, *args):
  check_arraylike(name, *args)
  jnp = _jnp()
  return [jnp.asarray(_as_operand(a)) for a in args]


def _trim_leading(name, a, tol=None):
  """``a`` (1-D, concrete) without its leading zeros (``|a| < tol`` with a tolerance); all
  zeros give an empty array.  Needs concrete values (a ConcretizationTypeError under jit)."""
  v = np.asarray(core.concrete_or_error(
      None, a, f"Error arose in the `filt` argument of {name}(): trimming leading zeros needs "
      "concrete values"))
  small = (v == 0) if tol is None else (np.abs(v) < np.asarray(core.concrete_or_error(None, tol)))
  if small.all():
    return a[:0]
  return a[int(np.argmin(small)):]


# ---------------------------------------------------------------------------------------------
# Arithmetic on coefficient arrays


def polyadd(a1, a2):
  """Sum of two polynomials (``a1`` and ``a2`` aligned at their ends; 2-D arrays hold one
  polynomial per column, as NumPy's)."""
  a1, a2 = promote_dtypes(*_arrays("polyadd", a1, a2))
  n1, n2 = _len("polyadd", a1, IndexError), _len("polyadd", a2, IndexError)
  if n2 <= n1:
    return a1.at[-n2:].add(a2)
  return a2.at[-n1:].add(a1)


def _len(name, a, error=TypeError):
  """Number of coefficients; a scalar raises ``error`` (JAX's own code fails on ``len()``, a
  TypeError, or on ``shape[0]``, an IndexError, depending on the function)."""
  shape = get_aval(a).shape
  if not shape:
    raise error(f"{name}: the coefficients must be an array of at least one dimension, "
                f"got a scalar of dtype {get_aval(a).dtype}")
  return shape[0]


def polysub(a1, a2):
  """Difference of two polynomials (``a1 - a2``)."""
  a1, a2 = promote_dtypes(*_arrays("polysub", a1, a2))
  return polyadd(a1, -a2)


def polymul(a1, a2, *, trim_leading_zeros: bool = False):
  """Product of two polynomials (the full convolution of the coefficients).  The result keeps
  leading zeros unless ``trim_leading_zeros`` (which needs concrete inputs)."""
  from ourjax.numpy._misc import convolve
  jnp = _jnp()
  a1, a2 = promote_dtypes_inexact(*_arrays("polymul", a1, a2))
  n1, n2 = _len("polymul", a1), _len("polymul", a2)
  if trim_leading_zeros and (n1 > 1 or n2 > 1):
    a1, a2 = _trim_leading("polymul", a1), _trim_leading("polymul", a2)
  if get_aval(a1).shape[0] == 0:
    a1 = jnp.zeros(1, dtype=a2.dtype)
  if get_aval(a2).shape[0] == 0:
    a2 = jnp.zeros(1, dtype=a1.dtype)
  return convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros: bool = False):
  """Quotient and remainder of ``u / v`` by long division.  The remainder has ``u``'s length
  (its leading entries are the zeros the division leaves) unless ``trim_leading_zeros``, which
  drops leading entries below ``sqrt(eps)`` and needs concrete inputs."""
  jnp = _jnp()
  u, v = promote_dtypes_inexact(*_arrays("polydiv", u, v))
  m = _len("polydiv", u) - 1
  n = _len("polydiv", v) - 1
  scale = 1. / v[0]
  q = jnp.zeros(max(m - n + 1, 1), dtype=u.dtype)
  for k in range(0, m - n + 1):
    d = scale * u[k]
    q = q.at[k].set(d)
    u = u.at[k:k + n + 1].add(-d * v)
  if trim_leading_zeros:
    u = _trim_leading("polydiv", u, jnp.sqrt(jnp.asarray(dtypes.finfo(u.dtype).eps, u.dtype)))
  return q, u


def polyder(p, m: int = 1):
  """Coefficients of the ``m``-th derivative (always inexact)."""
  jnp = _jnp()
  (p,) = _arrays("polyder", p)
  check_static("polyder", m=m)
  m = core.concrete_or_error(operator.index, m, "'m' argument of jnp.polyder")
  (p,) = promote_dtypes_inexact(p)
  if m < 0:
    raise ValueError("Order of derivative must be positive")
  if m == 0:
    return p
  n = _len("polyder", p)
  coeff = (jnp.arange(m, n, dtype=p.dtype)[np.newaxis]
           - jnp.arange(m, dtype=p.dtype)[:, np.newaxis]).prod(0)
  return p[:-m] * coeff[::-1]


def polyint(p, m: int = 1, k=None):
  """Coefficients of the ``m``-th antiderivative; ``k`` holds the integration constants (a
  scalar, or ``m`` values, the first for the innermost integral's highest term)."""
  jnp = _jnp()
  check_static("polyint", m=m)
  m = core.concrete_or_error(operator.index, m, "'m' argument of jnp.polyint")
  k = 0 if k is None else k
  p, k = promote_dtypes_inexact(*_arrays("polyint", p, k))
  if m < 0:
    raise ValueError("Order of integral must be positive (see polyder)")
  k = jnp.atleast_1d(k)
  if get_aval(k).shape[0] == 1:
    k = jnp.full((m,), k[0])
  if get_aval(k).shape != (m,):
    raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
  if m == 0:
    return p
  n = _len("polyint", p)
  grid = (jnp.arange(n + m, dtype=p.dtype)[np.newaxis]
          - jnp.arange(m, dtype=p.dtype)[:, np.newaxis])
  coeff = jnp.maximum(1, grid).prod(0)[::-1]
  return jnp.true_divide(jnp.concatenate((p, k)), coeff)


# ---------------------------------------------------------------------------------------------
# Fitting


def polyfit(x, y, deg: int, rcond=None, full: bool = False, w=None, cov=False):
  """Least-squares fit of a degree-``deg`` polynomial to the points ``(x, y)`` (``y`` of shape
  ``(M,)`` or ``(M, K)``, ``K`` fits at once), optionally weighted by ``w``: the scaled
  Vandermonde system solved by ``jnp.linalg.lstsq``.  ``full`` adds (residuals, rank, singular
  values, rcond); ``cov`` adds the coefficients' covariance (``"unscaled"``: without the
  residual variance factor)."""
  jnp = _jnp()
  check_static("polyfit", deg=deg, rcond=rcond, full=full, cov=cov)
  if w is None:
    x, y = _arrays("polyfit", x, y)
  else:
    x, y, w = _arrays("polyfit", x, y, w)
  deg = core.concrete_or_error(int, deg, "deg must be int")
  order = deg + 1
  if deg < 0:
    raise ValueError("expected deg >= 0")
  if x.ndim != 1:
    raise TypeError("expected 1D vector for x")
  if x.size == 0:
    raise TypeError("expected non-empty vector for x")
  if y.ndim < 1 or y.ndim > 2:
    raise TypeError("expected 1D or 2D array for y")
  if x.shape[0] != y.shape[0]:
    raise TypeError("expected x and y to have same length")
  if rcond is None:
    if not dtypes.issubdtype(x.dtype, np.inexact):
      raise ValueError(f"data type {x.dtype.type} not inexact")
    rcond = len(x) * float(dtypes.finfo(x.dtype).eps)
  rcond = core.concrete_or_error(float, rcond, "rcond must be float")
  lhs = jnp.vander(x, order)
  rhs = y
  if w is not None:
    (w,) = promote_dtypes_inexact(w)
    if w.ndim != 1:
      raise TypeError("expected a 1-d array for weights")
    if w.shape[0] != y.shape[0]:
      raise TypeError("expected w and y to have the same length")
    lhs = lhs * w[:, np.newaxis]
    rhs = rhs * (w[:, np.newaxis] if rhs.ndim == 2 else w)
  scale = jnp.sqrt((lhs * lhs).sum(axis=0))
  lhs = lhs / scale[np.newaxis, :]
  c, resids, rank, s = jnp.linalg.lstsq(lhs, rhs, rcond)
  c = (c.T / scale[np.newaxis, :]).T if c.ndim > 1 else c / scale
  if full:
    return c, resids, rank, s, jnp.asarray(rcond)
  if cov:
    vbase = jnp.linalg.inv(jnp.dot(lhs.T, lhs))
    vbase = vbase / jnp.outer(scale, scale)
    if isinstance(cov, str) and cov == "unscaled":
      fac = jnp.array(1.0)
    else:
      if len(x) <= order:
        raise ValueError("the number of data points must exceed order"
                         " to scale the covariance matrix")
      fac = resids / (len(x) - order)
    if y.ndim == 1:
      return c, vbase * jnp.atleast_1d(fac)[np.newaxis]
    return c, vbase[:, :, np.newaxis] * jnp.atleast_1d(fac)[np.newaxis, np.newaxis, :]
  return c


# ---------------------------------------------------------------------------------------------
# Roots and eigenvalues


def poly(seq_of_zeros):
  """Coefficients of the monic polynomial with the given roots (a scalar is one root; a
  non-empty square matrix stands for its eigenvalues, and the result is then complex)."""
  jnp = _jnp()
  (z,) = _arrays("poly", seq_of_zeros)
  (z,) = promote_dtypes_inexact(z)
  z = jnp.atleast_1d(z)
  sh = z.shape
  if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
    z = _eigvals(z)
  if z.ndim != 1:
    raise ValueError("input must be 1d or non-empty square 2d array.")
  dt = z.dtype
  if len(z) == 0:
    return jnp.ones((), dtype=dt)
  a = jnp.ones((1,), dtype=dt)
  for k in range(len(z)):
    a = jnp.convolve(a, jnp.stack([jnp.ones((), dt), -z[k]]), mode="full")
  return a


def roots(p, *, strip_zeros: bool = True):
  """Roots of the polynomial with coefficients ``p`` (rank 1), as a complex array: the
  eigenvalues of its companion matrix.  ``strip_zeros=True`` drops leading zeros first (so ``p``
  must be concrete); ``strip_zeros=False`` traces, and each leading zero turns one root into
  NaN (placed last)."""
  jnp = _jnp()
  (p,) = _arrays("roots", p)
  (p,) = promote_dtypes_inexact(p)
  p = jnp.atleast_1d(p)
  if p.ndim != 1:
    raise ValueError("Input must be a rank-1 array.")
  if p.size < 2:
    return jnp.array([], dtype=_complex_dtype(p.dtype))
  num_leading_zeros = jnp.where(jnp.all(p == 0), len(p), jnp.argmin(p == 0))
  if strip_zeros:
    num_leading_zeros = core.concrete_or_error(
        int, num_leading_zeros,
        "The error occurred in the jnp.roots() function. To use this within a JIT-compiled "
        "context, pass strip_zeros=False, but be aware that leading zeros will result in some "
        "returned roots being set to NaN.")
    return _roots_no_zeros(p[num_leading_zeros:])
  return _roots_with_zeros(p, num_leading_zeros)


def _complex_dtype(dt):
  return np.dtype(np.complex128) if np.dtype(dt) in (np.float64, np.complex128) \
      else np.dtype(np.complex64)


def _companion(p, num_trailing=None):
  """The companion matrix of ``p`` (first row ``-p[1:] / p[0]``, ones below the diagonal).
  ``num_trailing`` (traced) zero coefficients at the end give exact zero eigenvalues: the ones
  below the diagonal in their columns are dropped, which decouples that block (a nilpotent
  block would otherwise give roots only accurate to eps**(1/k))."""
  jnp = _jnp()
  n = p.size - 1
  sub = jnp.ones((n - 1,), p.dtype)
  if num_trailing is not None:
    sub = jnp.where(jnp.arange(n - 1) < n - 1 - num_trailing, sub, 0)
  a = jnp.diag(sub, -1)
  return a.at[0, :].set(-p[1:] / p[0])


def _roots_no_zeros(p):
  jnp = _jnp()
  if p.size < 2:
    return jnp.array([], dtype=_complex_dtype(p.dtype))
  return _eigvals(_companion(p), hessenberg=True)


def _roots_with_zeros(p, num_leading_zeros):
  jnp = _jnp()
  p = jnp.where(len(p) == num_leading_zeros, 1.0, p)
  # rolled, the leading zeros become trailing ones: as many roots at zero, which are then
  # replaced by NaN (after the nonzero roots, by a stable sort on root == 0)
  rolled = jnp.roll(p, -num_leading_zeros)
  r = _eigvals(_companion(rolled, num_leading_zeros), hessenberg=True)
  r = lax.sort_key_val(r == 0, r)[1]
  return jnp.where(jnp.arange(r.size) < r.size - num_leading_zeros, r, complex(np.nan, np.nan))


@internal_promotion
def _eigvals(a, hessenberg: bool = False):
  """Eigenvalues of the square matrix ``a`` (complex; see the module docstring for the
  algorithm).  ``hessenberg=True`` skips the reduction for a matrix that is already upper
  Hessenberg."""
  dt = get_aval(a).dtype
  if dt not in (np.float32, np.float64, np.complex64, np.complex128):
    raise NotImplementedError(f"eigenvalues of a {dt.name} matrix of shape {a.shape}: "
                              "unsupported dtype (float32/64 and complex64/128 are supported)")
  a = lax.convert_element_type(a, _complex_dtype(dt))
  if a.shape[0] == 0:
    return a[:, 0]
  if a.shape[0] == 1:
    return a[0]
  return _eigvals_jit(a, hessenberg)


def _cabs1(z):
  jnp = _jnp()
  return jnp.abs(jnp.real(z)) + jnp.abs(jnp.imag(z))


def _balance(h):
  """Diagonal similarity by powers of two that evens out the norms of each row and column
  (LAPACK's gebal scaling): exact in floating point, it keeps eigenvalues and improves their
  accuracy for badly scaled matrices such as companion matrices."""
  jnp = _jnp()
  n = h.shape[0]
  rdt = jnp.real(h).dtype
  idx = jnp.arange(n)

  def one(i, h):
    ei = idx == i
    mag = jnp.where(ei[:, None] | ei[None, :], 0, _cabs1(h))
    c = jnp.sum(jnp.where(ei[None, :], mag, 0))
    r = jnp.sum(jnp.where(ei[:, None], mag, 0))
    ok = (c > 0) & (r > 0)
    # f = 2**k with c * f ~ r / f; applied where it lowers c + r by 5% or more
    k = jnp.round(0.5 * jnp.log2(jnp.where(ok, r / jnp.where(ok, c, 1), 1)))
    f = jnp.exp2(k).astype(rdt)
    apply = ok & ((c * f + r / f) < 0.95 * (c + r))
    f = jnp.where(apply, f, 1).astype(rdt)
    scale_cols = jnp.where(ei, f, 1).astype(rdt)
    scale_rows = jnp.where(ei, 1 / f, 1).astype(rdt)
    return h * scale_rows[:, None] * scale_cols[None, :]

  def sweep(_, h):
    return lax.fori_loop(0, n, one, h)

  return lax.fori_loop(0, 10, sweep, h)


def _hessenberg(h):
  """Upper Hessenberg form by Householder reflections from both sides (a similarity)."""
  jnp = _jnp()
  n = h.shape[0]
  idx = jnp.arange(n)

  def body(k, h):
    col = jnp.sum(jnp.where((idx == k)[None, :], h, 0), axis=1)
    x = jnp.where(idx > k, col, 0)
    # the reflector does not depend on x's scale: scaled to a largest entry of about one, the
    # squared norms below neither underflow (a tiny x left by rounding) nor overflow
    big = jnp.max(_cabs1(x))
    x = x / jnp.where(big > 0, big, 1).astype(h.dtype)
    alpha = jnp.sum(jnp.where(idx == k + 1, x, 0))
    nx = jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x))))
    aa = jnp.abs(alpha)
    phase = jnp.where(aa > 0, alpha / jnp.where(aa > 0, aa, 1).astype(h.dtype), 1)
    v = x + jnp.where(idx == k + 1, phase * nx, 0)
    nv2 = jnp.sum(jnp.real(v * jnp.conj(v)))
    tau = jnp.where(nv2 > 0, 2 / jnp.where(nv2 > 0, nv2, 1), 0).astype(h.dtype)
    h = h - tau * jnp.outer(v, jnp.conj(v) @ h)
    return h - tau * jnp.outer(h @ v, jnp.conj(v))

  h = lax.fori_loop(0, n - 2, body, h)
  return jnp.where(idx[:, None] > idx[None, :] + 1, 0, h)


def _givens(a, b):
  """(c, s), c real, with ``[[c, s], [-conj(s), c]] @ [a, b] = [r, 0]``."""
  jnp = _jnp()
  aa, bb = jnp.abs(a), jnp.abs(b)
  r = jnp.hypot(aa, bb)
  nz_a = aa > 0
  c = jnp.where(r > 0, jnp.where(nz_a, aa / jnp.where(r > 0, r, 1), 0), 1)
  ph = jnp.where(nz_a, a / jnp.where(nz_a, aa, 1).astype(a.dtype), 1)
  s = jnp.where(r > 0, ph * jnp.conj(b) / jnp.where(r > 0, r, 1).astype(a.dtype), 0)
  return c.astype(aa.dtype), s.astype(a.dtype)


def _qr_step(h, m, mu):
  """One shifted QR step ``R Q + mu`` with ``h - mu = Q R`` on the leading ``m x m`` block of
  the upper Hessenberg ``h`` (the trailing part is already triangular and stays untouched)."""
  jnp = _jnp()
  n = h.shape[0]
  rdt = jnp.real(h).dtype
  act = jnp.arange(n) < m
  shift = jnp.where(act, mu, 0).astype(h.dtype)
  h = h - jnp.diag(shift)

  def rows(k, carry):
    h, cs, ss = carry
    two = lax.dynamic_slice(h, (k, 0), (2, n))
    ab = lax.dynamic_slice(two, (0, k), (2, 1))
    c, s = _givens(ab[0, 0], ab[1, 0])
    on = k < m - 1
    c = jnp.where(on, c, 1).astype(rdt)
    s = jnp.where(on, s, 0).astype(h.dtype)
    r0 = c * two[0] + s * two[1]
    r1 = -jnp.conj(s) * two[0] + c * two[1]
    h = lax.dynamic_update_slice(h, jnp.stack([r0, r1]), (k, 0))
    cs = lax.dynamic_update_slice(cs, c[None], (k,))
    ss = lax.dynamic_update_slice(ss, s[None], (k,))
    return h, cs, ss

  h, cs, ss = lax.fori_loop(0, n - 1, rows, (h, jnp.ones((n - 1,), rdt),
                                             jnp.zeros((n - 1,), h.dtype)))

  def cols(k, h):
    two = lax.dynamic_slice(h, (0, k), (n, 2))
    c = lax.dynamic_slice(cs, (k,), (1,))
    s = lax.dynamic_slice(ss, (k,), (1,))
    c0 = c * two[:, 0] + jnp.conj(s) * two[:, 1]
    c1 = -s * two[:, 0] + c * two[:, 1]
    return lax.dynamic_update_slice(h, jnp.stack([c0, c1], axis=1), (0, k))

  h = lax.fori_loop(0, n - 1, cols, h)
  return h + jnp.diag(shift)


def _wilkinson(a, b, c, d):
  """The eigenvalue of ``[[a, b], [c, d]]`` nearer to ``d``."""
  jnp = _jnp()
  p = 0.5 * (a - d)
  disc = jnp.sqrt(p * p + b * c)
  disc = jnp.where(_cabs1(p + disc) < _cabs1(p - disc), -disc, disc)
  den = p + disc
  nz = _cabs1(den) > 0
  return jnp.where(nz, d - b * c / jnp.where(nz, den, 1), d)


def _eigvals_single(h, hessenberg):
  jnp = _jnp()
  n = h.shape[0]
  rdt = jnp.real(h).dtype
  eps = np.array(dtypes.finfo(rdt).eps, rdt)
  tiny = np.array(dtypes.finfo(rdt).tiny, rdt) * n / eps
  h = _balance(h)
  if not hessenberg:
    h = _hessenberg(h)
  max_iter = 30 * max(10, n)

  def cond(state):
    _, m, it, _ = state
    return (m > 1) & (it < max_iter)

  def body(state):
    h, m, it, since = state
    blk = lax.dynamic_slice(h, (m - 2, m - 2), (2, 2))
    a, b, c, d = blk[0, 0], blk[0, 1], blk[1, 0], blk[1, 1]
    small = _cabs1(c) <= jnp.maximum(eps * (_cabs1(a) + _cabs1(d)), tiny)

    def deflate():
      z = lax.dynamic_update_slice(h, jnp.zeros((1, 1), h.dtype), (m - 1, m - 2))
      return z, m - 1, jnp.zeros((), np.int32)

    def step():
      exceptional = (since % 10) == 9
      mu = jnp.where(exceptional, d + 0.75 * _cabs1(c), _wilkinson(a, b, c, d))
      return _qr_step(h, m, mu), m, since + 1

    h2, m2, since2 = lax.cond(small, deflate, step)
    return h2, m2, it + 1, since2

  init = (h, jnp.asarray(n, np.int32), jnp.zeros((), np.int32), jnp.zeros((), np.int32))
  h = lax.while_loop(cond, body, init)[0]
  return jnp.diagonal(h)


def _make_eigvals_jit():
  from ourjax.api import jit
  return jit(_eigvals_single, static_argnums=(1,))


class _LazyJit:
  """``jit(_eigvals_single)``, created on first use (ourjax.api imports ourjax.numpy)."""
  fn = None

  def __call__(self, *args):
    if _LazyJit.fn is None:
      _LazyJit.fn = _make_eigvals_jit()
    return _LazyJit.fn(*args)


_eigvals_jit = _LazyJit()
