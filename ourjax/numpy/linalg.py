"""``jnp.linalg``: norms and the decompositions' user-facing forms, built on ``lax.linalg``'s
primitives (``ourjax/lax/linalg.py``: NumPy/LAPACK eagerly, lax compositions under jit, their own
derivative rules) and on jnp ops.  Batched over leading dimensions.  Like JAX, nothing raises
on singular / non-positive-definite inputs: the results contain inf/nan.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, NamedTuple

import numpy as np

from ourjax.config import internal_promotion
from ourjax import dtypes
from ourjax._eager_replay import replayed
from ourjax.lax import linalg as lax_linalg
from ourjax.numpy import _util
from ourjax.numpy import _linalg_ops
from ourjax.numpy._linalg_ops import vecdot, diagonal as _diagonal  # noqa: F401

__all__ = ["norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "solve", "cholesky",
           "matrix_power", "trace", "outer", "matmul", "vecdot", "tensordot", "qr", "eigh",
           "eigvalsh", "eig", "eigvals", "svd", "svdvals", "pinv", "lstsq", "matrix_rank",
           "matrix_transpose", "multi_dot", "diagonal", "cross", "cond", "tensorsolve",
           "tensorinv"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _inexact(name, a):
  _util.check_arraylike(name, a)
  jnp = _jnp()
  (a,) = _util.promote_dtypes_inexact(jnp.asarray(a))
  return a


def _square(name, a):
  a = _inexact(name, a)
  if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
    raise ValueError(f"jnp.linalg.{name}: argument must be a square matrix or a stack of "
                     f"square matrices, got shape {a.shape}")
  return a


def _eye(n, dtype):
  return _jnp().eye(n, dtype=dtype)


# ------------------------------------------------------------------------------------------------
# LU-based: det, slogdet, solve, inv


@internal_promotion
def _parity(pivots):
  jnp = _jnp()
  k = pivots.shape[-1]
  return jnp.sum(pivots != jnp.arange(k, dtype=pivots.dtype), axis=-1) % 2


@internal_promotion
def _det_from_lu(a):
  jnp = _jnp()
  lu, piv, _ = lax_linalg.lu(a)
  d = jnp.prod(_diagonal(lu, axis1=-2, axis2=-1), axis=-1)
  return jnp.where(_parity(piv) == 1, -d, d)


@internal_promotion
def _adjugate(a):
  """adj(a) = det(a) a^{-1}, from the SVD so that it stays finite (and correct) for singular
  matrices: a = U S Vh gives adj(a) = det(U) det(Vh) Vh^H adj(S) U^H, adj(S) the diagonal of the
  products of all singular values but one."""
  jnp = _jnp()
  u, s, vh = lax_linalg.svd(a, full_matrices=False)
  n = s.shape[-1]
  eye = jnp.eye(n, dtype=bool)
  others = jnp.prod(jnp.where(eye, 1, s[..., None, :]), axis=-1)      # prod_{j != i} s_j
  scale = (_det_from_lu(u) * _det_from_lu(vh))[..., None, None]
  return scale * (jnp.conj(jnp.swapaxes(vh, -1, -2)) * others[..., None, :].astype(a.dtype)) \
      @ jnp.conj(jnp.swapaxes(u, -1, -2))


_DET = []


def _det_fn():
  if not _DET:
    from ourjax.custom_derivatives import custom_jvp
    f = custom_jvp(_det_from_lu)

    @f.defjvp
    def _jvp(primals, tangents):
      a, = primals
      da, = tangents
      jnp = _jnp()
      # d det = tr(adj(a) da)
      return f(a), jnp.sum(jnp.swapaxes(_adjugate(a), -1, -2) * da, axis=(-2, -1))
    _DET.append(f)
  return _DET[0]


def det(a):
  """Determinant via LU with partial pivoting; its derivative is ``tr(adj(a) da)`` with the
  adjugate from the SVD, finite for singular matrices too."""
  a = _square("det", a)
  return _det_fn()(a)


def slogdet(a, *, method=None):
  """(sign, log|det|) via LU with partial pivoting (``method`` 'lu' or None) or via Householder
  QR (``method='qr'``, real matrices: each reflection made flips the sign)."""
  a = _square("slogdet", a)
  if method == "qr":
    if _jnp().iscomplexobj(a):
      raise NotImplementedError("slogdet method='qr' not implemented for complex inputs")
    return SlogdetResult(*_slogdet_qr_fn()(a))
  if method not in (None, "lu"):
    raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' (`None`), "
                     "and 'qr'.")
  jnp = _jnp()
  lu, piv, _ = lax_linalg.lu(a)
  diag = _diagonal(lu, axis1=-2, axis2=-1)
  absd = jnp.abs(diag)
  sign = jnp.prod(diag / jnp.where(absd == 0, 1, absd).astype(diag.dtype), axis=-1)
  sign = jnp.where(_parity(piv) == 1, -sign, sign)
  logdet = jnp.sum(jnp.log(absd), axis=-1)
  sign = jnp.where(jnp.isneginf(logdet), jnp.zeros_like(sign), sign)
  return SlogdetResult(sign, logdet)


def _slogdet_qr(a):
  jnp = _jnp()
  n = a.shape[-1]
  r, taus = lax_linalg.geqrf(a)
  diag = _diagonal(r, axis1=-2, axis2=-1)
  logdet = jnp.sum(jnp.log(jnp.abs(diag)), axis=-1)
  flips = jnp.sum(taus[..., :builtins.max(n - 1, 0)] != 0, axis=-1)   # det(reflector) = -1
  sign = jnp.prod(jnp.sign(diag), axis=-1) * jnp.where(flips % 2 == 1, -1, 1).astype(a.dtype)
  return sign, logdet


_SLOGDET_QR = []


def _slogdet_qr_fn():
  if not _SLOGDET_QR:
    from ourjax.custom_derivatives import custom_jvp
    f = custom_jvp(_slogdet_qr)

    @f.defjvp
    def _jvp(primals, tangents):
      # d log|det a| = tr(a^-1 da); the sign (of a real matrix) is locally constant
      jnp = _jnp()
      a, = primals
      da, = tangents
      sign, logdet = f(a)
      dlog = jnp.trace(solve(a, da), axis1=-2, axis2=-1)
      return (sign, logdet), (jnp.zeros_like(sign), dlog)
    _SLOGDET_QR.append(f)
  return _SLOGDET_QR[0]


class SlogdetResult(NamedTuple):   # a NamedTuple (so a pytree), as JAX's
  sign: Any
  logabsdet: Any


@internal_promotion
def _lu_solve(lu, perm, b, trans=0):
  """Solve with the packed LU of ``a[perm] = L U``: ``a x = b`` (trans 0), ``a^T x = b`` (1) or
  ``a^H x = b`` (2); ``b`` is (..., n, k) with ``lu``'s batch dims."""
  jnp = _jnp()
  if trans == 0:
    pb = jnp.take_along_axis(b, jnp.broadcast_to(perm[..., :, None], perm.shape + (b.shape[-1],))
                             .astype(jnp.int32), axis=-2)
    y = lax_linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
    return lax_linalg.triangular_solve(lu, y, left_side=True, lower=False)
  conj = trans == 2
  # a^T = U^T L^T P  ->  solve U^T y = b, L^T z = y, x = P^T z
  y = lax_linalg.triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True,
                                  conjugate_a=conj)
  z = lax_linalg.triangular_solve(lu, y, left_side=True, lower=True, transpose_a=True,
                                  conjugate_a=conj, unit_diagonal=True)
  inv_perm = jnp.argsort(perm, axis=-1)
  return jnp.take_along_axis(z, jnp.broadcast_to(inv_perm[..., :, None], inv_perm.shape
                                                 + (b.shape[-1],)).astype(jnp.int32), axis=-2)


def solve(a, b):
  """Solve ``a @ x = b`` by LU with partial pivoting.  As JAX >= 0.5: a 1-D ``b`` of shape
  ``(n,)`` is one right-hand side (broadcast over ``a``'s batch), otherwise ``b`` is ``(..., n, k)``
  with batch dims broadcast against ``a``'s."""
  a = _square("solve", a)
  jnp = _jnp()
  _util.check_arraylike("solve", b)
  a, b = _util.promote_dtypes_inexact(a, jnp.asarray(b))
  n = a.shape[-1]
  vec = b.ndim == 1
  if vec:
    if b.shape[0] != n:
      raise ValueError(f"jnp.linalg.solve: incompatible shapes a {a.shape} and b {b.shape}")
    b = b[:, None]
  if b.shape[-2] != n:
    raise ValueError(f"jnp.linalg.solve: incompatible shapes a {a.shape} and b {b.shape}")
  batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
  a = jnp.broadcast_to(a, batch + a.shape[-2:])
  b = jnp.broadcast_to(b, batch + b.shape[-2:])
  lu, _, perm = lax_linalg.lu(a)
  x = _lu_solve(lu, perm, b)
  return x[..., 0] if vec else x


def inv(a):
  """Inverse via LU solve against the identity."""
  a = _square("inv", a)
  jnp = _jnp()
  eye = jnp.broadcast_to(_eye(a.shape[-1], a.dtype), a.shape)
  return solve(a, eye)


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True):
  """Lower Cholesky factor (upper=True: its conjugate transpose); a non-positive-definite input
  gives NaNs."""
  a = _square("cholesky", a)
  L = lax_linalg.cholesky(a, symmetrize_input=symmetrize_input)
  return _jnp().conj(matrix_transpose(L)) if upper else L


class QRResult(NamedTuple):
  Q: Any
  R: Any


def qr(a, mode: str = "reduced"):
  """QR decomposition; modes 'reduced' (also 'full', NumPy's old name), 'complete', 'r', 'raw'."""
  a = _inexact("qr", a)
  if a.ndim < 2:
    raise ValueError(f"jnp.linalg.qr: argument must have at least 2 dimensions, got shape "
                     f"{a.shape}")
  if mode not in ("reduced", "complete", "r", "raw", "full"):
    raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
  if mode == "raw":     # LAPACK's packed form, transposed as NumPy's (host only)
    h, tau = lax_linalg.geqrf(a)
    return matrix_transpose(h), tau
  q, r = lax_linalg.qr(a, full_matrices=mode == "complete")
  if mode == "r":
    return r
  return QRResult(q, r)


class EighResult(NamedTuple):
  eigenvalues: Any
  eigenvectors: Any


def eigh(a, UPLO=None, symmetrize_input: bool = True):
  """Hermitian eigendecomposition: eigenvalues ascending, eigenvectors in columns."""
  a = _square("eigh", a)
  if UPLO not in (None, "L", "U"):
    raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
  v, w = lax_linalg.eigh(a, lower=UPLO in (None, "L"), symmetrize_input=symmetrize_input)
  return EighResult(w, v)


def eigvalsh(a, UPLO="L", *, symmetrize_input: bool = True):
  return eigh(a, UPLO, symmetrize_input=symmetrize_input).eigenvalues


# The array-API functions of jnp.linalg: positional-only operands and the array API's rules
# (trace over the last two axes, outer of vectors only), unlike their jnp namesakes.

def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
  return _linalg_ops.matmul(x1, x2, precision=precision,
                            preferred_element_type=preferred_element_type)


def outer(x1, x2, /):
  """The outer product of two 1-D arrays."""
  _util.check_arraylike("jnp.linalg.outer", x1, x2)
  n1, n2 = np.ndim(x1), np.ndim(x2)
  if n1 != 1 or n2 != 1:
    raise ValueError(f"Input arrays must be one-dimensional, but they are x1.ndim={n1} "
                     f"x2.ndim={n2}")
  return _linalg_ops.outer(x1, x2)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
  return _linalg_ops.tensordot(x1, x2, axes, precision=precision,
                               preferred_element_type=preferred_element_type)


def trace(x, /, *, offset: int = 0, dtype=None):
  """The sums of the ``offset`` diagonals of the matrices in the last two axes of ``x``."""
  return _linalg_ops.trace(x, offset, axis1=-2, axis2=-1, dtype=dtype)


class EigResult(NamedTuple):
  eigenvalues: Any
  eigenvectors: Any


def eig(a):
  """Eigenvalues and right eigenvectors (complex) of a general square matrix (host only)."""
  a = _square("eig", a)
  w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
  return EigResult(w, v)


def eigvals(a):
  a = _square("eigvals", a)
  return lax_linalg.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0]


class SVDResult(NamedTuple):
  U: Any
  S: Any
  Vh: Any


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False,
        subset_by_index=None):
  """SVD, ``a = U @ diag(S) @ Vh``, S descending."""
  a = _inexact("svd", a)
  if a.ndim < 2:
    raise ValueError(f"jnp.linalg.svd: argument must have at least 2 dimensions, got shape "
                     f"{a.shape}")
  out = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                       subset_by_index=subset_by_index)
  if not compute_uv:
    return out
  return SVDResult(*out)


def svdvals(x):
  return svd(x, compute_uv=False)


# ------------------------------------------------------------------------------------------------
# Norms


def _vector_norm(x, ord, axis, keepdims):
  jnp = _jnp()
  ax = jnp.abs(x)
  if ord is None or ord == 2:
    return jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x,
                            axis=axis, keepdims=keepdims))
  if ord == np.inf:      # (the norm of an empty vector is 0: abs values start from 0)
    return jnp.max(ax, axis=axis, keepdims=keepdims, initial=0)
  if ord == -np.inf:
    return jnp.min(ax, axis=axis, keepdims=keepdims)
  if ord == 0:
    return jnp.sum(x != 0, dtype=jnp.finfo(ax.dtype).dtype, axis=axis, keepdims=keepdims)
  if ord == 1:
    return jnp.sum(ax, axis=axis, keepdims=keepdims)
  if isinstance(ord, str):
    raise ValueError(f"Invalid order '{ord}' for vector norm.")
  ordv = jnp.asarray(ord, dtype=ax.dtype)
  return jnp.sum(ax ** ordv, axis=axis, keepdims=keepdims) ** (1 / ordv)


def _matrix_norm(x, ord, axis, keepdims):
  jnp = _jnp()
  r, c = axis
  if ord is None or ord == "fro":
    return _vector_norm(x, None, axis, keepdims)
  ax = jnp.abs(x)
  if ord in (1, -1):
    s = jnp.sum(ax, axis=r, keepdims=True)
    out = (jnp.max(s, axis=c, keepdims=True, initial=0) if ord == 1 else
           jnp.min(s, axis=c, keepdims=True))
  elif ord in (np.inf, -np.inf):
    s = jnp.sum(ax, axis=c, keepdims=True)
    out = (jnp.max(s, axis=r, keepdims=True, initial=0) if ord == np.inf else
           jnp.min(s, axis=r, keepdims=True))
  elif ord in (2, -2, "nuc"):
    y = jnp.moveaxis(x, (r, c), (-2, -1))
    sv = svd(y, compute_uv=False)
    if ord == 2:
      out = jnp.max(sv, axis=-1, initial=0)
    elif ord == -2:
      out = jnp.min(sv, axis=-1)
    else:
      out = jnp.sum(sv, axis=-1)
    if keepdims:
      out = jnp.expand_dims(out, tuple(sorted((r, c))))
    return out
  else:
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")
  if keepdims:
    return out
  return jnp.squeeze(out, axis=axis)


@replayed(static=("ord", "axis", "keepdims"))
def norm(x, ord=None, axis=None, keepdims: bool = False):
  """Vector or matrix norm, as ``numpy.linalg.norm``."""
  x = _inexact("norm", x)
  nd = x.ndim
  if axis is None:
    if ord is None:
      out = _vector_norm(x.reshape(-1), None, 0, False)
      if keepdims:
        out = out.reshape((1,) * nd)
      return out
    if nd == 1:
      axis = (0,)
    elif nd == 2:
      axis = (0, 1)
    else:
      raise ValueError(f"jnp.linalg.norm: improper number of dimensions to norm: shape "
                       f"{x.shape} with ord={ord!r} needs axis")
  if isinstance(axis, int):
    axis = (axis,)
  axis = tuple(_util.canonicalize_axis(a, nd) for a in axis)
  if len(axis) == 1:
    return _vector_norm(x, ord, axis, keepdims)
  if len(axis) == 2:
    if axis[0] == axis[1]:
      raise ValueError(f"jnp.linalg.norm: duplicate axes {axis}")
    return _matrix_norm(x, ord, axis, keepdims)
  raise ValueError(f"jnp.linalg.norm: improper number of axes {axis} for shape {x.shape}")


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2):
  x = _inexact("vector_norm", x)
  if axis is None:
    out = _vector_norm(x.reshape(-1), ord, 0, False)
    return out.reshape((1,) * x.ndim) if keepdims else out
  if isinstance(axis, int):
    axis = (axis,)
  axis = tuple(_util.canonicalize_axis(a, x.ndim) for a in axis)
  return _vector_norm(x, ord, axis, keepdims)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
  return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


# ------------------------------------------------------------------------------------------------
# Derived routines


def matrix_transpose(x, /):
  jnp = _jnp()
  x = jnp.asarray(x)
  if x.ndim < 2:
    raise ValueError(f"jnp.linalg.matrix_transpose: x must be at least 2-dimensional, got "
                     f"shape {x.shape}")
  return jnp.swapaxes(x, -1, -2)


def diagonal(x, /, *, offset: int = 0):
  return _diagonal(x, offset=offset, axis1=-2, axis2=-1)


def cross(x1, x2, /, *, axis=-1):
  return _jnp().cross(x1, x2, axis=axis)


def matrix_power(a, n: int):
  """``a`` to the integer power ``n`` by repeated squaring (negative n: of ``inv(a)``)."""
  jnp = _jnp()
  _util.check_arraylike("matrix_power", a)
  a = jnp.asarray(a)
  if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
    raise ValueError(f"jnp.linalg.matrix_power: argument must be a square matrix or a stack of "
                     f"square matrices, got shape {a.shape}")
  n = operator.index(n)
  if n == 0:
    return jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
  if n < 0:
    a = inv(a)
    n = -n
  result = None
  z = a
  while n > 0:
    if n & 1:
      result = z if result is None else matmul(result, z)
    n >>= 1
    if n:
      z = matmul(z, z)
  return result


def multi_dot(arrays, *, precision=None):
  out = arrays[0]
  for x in arrays[1:]:
    out = _jnp().dot(out, x)
  return out


def pinv(a, rtol=None, hermitian: bool = False, *, rcond=None):
  """Pseudo-inverse from the SVD, cutting singular values below ``rtol * max(S)``.  Its
  derivative is the pseudo-inverse's own (Golub and Pereyra), not the SVD's, so it is defined
  at repeated singular values too."""
  jnp = _jnp()
  a = _inexact("pinv", a)
  if a.ndim < 2:
    raise ValueError(f"jnp.linalg.pinv: argument must have at least 2 dimensions, got shape "
                     f"{a.shape}")
  m, n = a.shape[-2:]
  if rcond is not None:
    if rtol is not None:
      raise ValueError("pinv: only one of rtol and rcond may be specified.")
    rtol = rcond
  if rtol is None:
    rtol = 10 * builtins.max(m, n) * jnp.finfo(a.dtype).eps
  if builtins.min(m, n) == 0:
    return jnp.zeros(a.shape[:-2] + (n, m), a.dtype)
  return _pinv_fn()(a, jnp.asarray(rtol))


@internal_promotion
def _pinv_core(a, rtol):
  jnp = _jnp()
  u, s, vh = svd(a, full_matrices=False)
  cut = rtol.astype(s.dtype)[..., None] * jnp.max(s, axis=-1, keepdims=True)
  sinv = jnp.where(s > cut, 1 / jnp.where(s > cut, s, 1), 0).astype(a.dtype)
  return matmul(_ct(vh) * sinv[..., None, :], _ct(u))


_PINV = []


def _pinv_fn():
  if not _PINV:
    from ourjax.custom_derivatives import custom_jvp
    f = custom_jvp(_pinv_core, nondiff_argnums=(1,))

    @f.defjvp
    def _jvp(rtol, primals, tangents):
      # dP = -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P  (Golub and Pereyra), each
      # product grouped so that no intermediate is larger than min(m, n)^2 or m n
      a, = primals
      da, = tangents
      p = f(a, rtol)              # (n, m)
      m, n = a.shape[-2:]
      dah, ph = _ct(da), _ct(p)
      if m >= n:
        s = matmul(matmul(p, ph), dah)            # (n, m)
        t = matmul(matmul(dah, ph), p)            # (n, m)
        dp = (-matmul(matmul(p, da), p) + s - matmul(matmul(s, a), p)
              + t - matmul(matmul(p, a), t))
      else:
        s = matmul(p, matmul(ph, dah))
        t = matmul(dah, matmul(ph, p))
        dp = (-matmul(p, matmul(da, p)) + s - matmul(s, matmul(a, p))
              + t - matmul(p, matmul(a, t)))
      return p, dp
    _PINV.append(f)
  return _PINV[0]


def _ct(x):
  return _jnp().conj(matrix_transpose(x))


def matrix_rank(M, rtol=None, *, hermitian: bool = False, tol=None):
  """The number of singular values above ``rtol * max(S)`` (default rtol: max(m, n) * eps);
  ``tol`` is the older name of ``rtol``."""
  jnp = _jnp()
  M = _inexact("matrix_rank", M)
  if tol is not None:
    if rtol is not None:
      raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
    rtol = tol
  if M.ndim < 2:
    return jnp.any(M != 0).astype(jnp.int32)
  if hermitian:
    s = jnp.abs(eigvalsh(M))
  else:
    s = svd(M, compute_uv=False)
  if rtol is None:
    rtol = builtins.max(M.shape[-2:]) * jnp.finfo(M.dtype).eps
  if s.shape[-1] == 0:
    return jnp.zeros(s.shape[:-1], jnp.int32)
  cut = jnp.max(s, axis=-1, keepdims=True) * jnp.asarray(rtol, s.dtype)[..., None]
  return jnp.sum(s > cut, axis=-1).astype(jnp.int32)


def lstsq(a, b, rcond=None, *, numpy_resid: bool = False):
  """Least squares via the pseudo-inverse: (x, residuals, rank, singular values).  Residuals are
  the squared norms of each column of b - a x (one for a vector b), as JAX; with
  ``numpy_resid`` they are empty, as NumPy's, for systems that are not tall or are rank
  deficient (which needs a concrete rank)."""
  from ourjax import core
  jnp = _jnp()
  a = _inexact("lstsq", a)
  b = _inexact("lstsq", b)
  a, b = _util.promote_dtypes_inexact(a, b)
  if a.ndim != 2:
    raise ValueError(f"jnp.linalg.lstsq: a must be 2-D, got shape {a.shape}")
  if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
    raise ValueError(f"jnp.linalg.lstsq: incompatible shapes a {a.shape} and b {b.shape}")
  m, n = a.shape
  b2 = b[:, None] if b.ndim == 1 else b            # a vector b is one column (JAX, NumPy)
  rdt = jnp.finfo(a.dtype).dtype
  if rcond is None:
    rcond = jnp.finfo(a.dtype).eps * builtins.max(m, n)
  elif rcond < 0:
    rcond = jnp.finfo(a.dtype).eps
  u, s, vh = svd(a, full_matrices=False)
  if s.shape[0]:
    mask = s > rcond * jnp.max(s)
  else:
    mask = s > 0
  rank = jnp.sum(mask).astype(dtypes.default_int_dtype())   # as JAX
  sinv = jnp.where(mask, 1 / jnp.where(mask, s, 1), 0).astype(a.dtype)
  x = _ct(vh) @ ((_ct(u) @ b2) * sinv[:, None])
  r = b2 - a @ x
  resid = jnp.sum(jnp.abs(r) ** 2, axis=0).astype(rdt)  # JAX: always the squared norms
  if numpy_resid:
    full = m > n and core.concrete_or_error(
        int, rank, "jnp.linalg.lstsq(numpy_resid=True) needs a concrete rank") == n
    if not full:
      resid = jnp.zeros((0,), rdt)
  return (x[:, 0] if b.ndim == 1 else x), resid, rank, s


def cond(x, p=None):
  """Condition number: ``norm(x, p) * norm(inv(x), p)``; for p None, 2 or -2 the ratio of the
  extreme singular values.  inf where ``x`` is singular."""
  jnp = _jnp()
  x = _inexact("cond", x)
  if x.ndim < 2:
    raise ValueError(f"jnp.linalg.cond: argument must have at least 2 dimensions, got shape "
                     f"{x.shape}")
  if p in (None, 2, -2):
    s = svd(x, compute_uv=False)
    if p == -2:
      r = s[..., -1] / s[..., 0]
    else:
      r = s[..., 0] / s[..., -1]
  else:
    r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
  # a singular matrix: inf (NumPy's convention), also where the inverse came out as nan
  bad = jnp.isnan(r) & ~jnp.any(jnp.isnan(x), axis=(-2, -1))
  return jnp.where(bad, jnp.inf, r)


def tensorinv(a, ind: int = 2):
  """Inverse of ``a`` seen as a linear map from its last dims to its first ``ind`` dims."""
  a = _inexact("tensorinv", a)
  ind = operator.index(ind)
  if ind <= 0:
    raise ValueError(f"ind must be a positive integer, got {ind}.")
  out_shape, in_shape = a.shape[:ind], a.shape[ind:]
  n = int(np.prod(out_shape))
  if int(np.prod(in_shape)) != n:
    raise ValueError(f"tensorinv: a.shape[:ind] ({out_shape}) and a.shape[ind:] ({in_shape}) "
                     f"must have equal products")
  return inv(a.reshape(n, n)).reshape(in_shape + out_shape)


def tensorsolve(a, b, axes=None):
  """``x`` with ``tensordot(a, x, x.ndim) == b``."""
  jnp = _jnp()
  a = _inexact("tensorsolve", a)
  b = _inexact("tensorsolve", b)
  a, b = _util.promote_dtypes_inexact(a, b)
  if axes is not None:
    axes = tuple(_util.canonicalize_axis(i, a.ndim) for i in axes)
    rest = [i for i in range(a.ndim) if i not in axes]
    a = jnp.transpose(a, rest + list(axes))
  out_shape = a.shape[b.ndim:]
  n = int(np.prod(b.shape))
  if int(np.prod(out_shape)) != n:
    raise ValueError(f"tensorsolve: the shapes of a {a.shape} and b {b.shape} do not make a "
                     f"square system")
  return solve(a.reshape(n, n), b.reshape(n)).reshape(out_shape)
