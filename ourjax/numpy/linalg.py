"""``jnp.linalg``: norms and dense factorizations written with lax ops and ``lax.fori_loop``.

No new primitives: every routine is a composition of existing ops (static trip counts, one-hot
masks instead of dynamic indexing), so jit, grad (reverse mode through the ``scan`` that a
concrete-bound ``fori_loop`` becomes) and vmap work through the existing rules.  Each
factorization is written for one matrix and mapped with ``ourjax.vmap`` over leading batch
dimensions.

Algorithms: LU with partial pivoting (det, slogdet, solve, inv), Cholesky column by column,
Householder QR, cyclic Jacobi (eigh), one-sided Jacobi (svd) with a fixed number of sweeps.
Real dtypes only.  Like JAX, nothing raises on singular / non-positive-definite inputs: the
results contain inf/nan.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, NamedTuple

import numpy as np

from ourjax import dtypes, lax
from ourjax.numpy import _util
from ourjax.numpy._linalg_ops import (matmul, outer, trace, vecdot, tensordot,  # noqa: F401
                                      diagonal as _diagonal)

__all__ = ["norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "solve", "cholesky",
           "matrix_power", "trace", "outer", "matmul", "vecdot", "tensordot", "qr", "eigh",
           "eigvalsh", "svd", "svdvals", "pinv", "lstsq", "matrix_rank", "matrix_transpose",
           "multi_dot", "diagonal", "cross"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _inexact(name, a):
  _util.check_arraylike(name, a)
  jnp = _jnp()
  (a,) = _util.promote_dtypes_inexact(jnp.asarray(a))
  if np.issubdtype(a.dtype, np.complexfloating):
    raise NotImplementedError(f"jnp.linalg.{name}: complex inputs are not supported "
                              f"(got {a.dtype})")
  return a


def _square(name, a):
  a = _inexact(name, a)
  if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
    raise ValueError(f"jnp.linalg.{name}: argument must be a square matrix or a stack of "
                     f"square matrices, got shape {a.shape}")
  return a


def _batched(fn, a, *rest, core_dims=2):
  """Apply ``fn`` (written for one matrix) over the leading dims of ``a`` (and of ``rest``,
  which must share them)."""
  import ourjax
  nb = a.ndim - core_dims
  for _ in range(nb):
    fn = ourjax.vmap(fn)
  return fn(a, *rest)


def _eye(n, dtype):
  return _jnp().eye(n, dtype=dtype)


def _e(idx, k, dtype):
  """One-hot vector: ``idx == k`` as ``dtype``."""
  return (idx == k).astype(dtype)


# ------------------------------------------------------------------------------------------------
# LU with partial pivoting


def _lu_single(a):
  """Packed LU of one square matrix: returns (lu, perm, parity) with ``a[perm] = L @ U``, L unit
  lower (stored below the diagonal of ``lu``), U upper; ``parity`` is the number of row swaps
  (mod 2) as an int32 0/1."""
  jnp = _jnp()
  n = a.shape[0]
  dt = a.dtype
  idx = jnp.arange(n)
  perm0 = jnp.arange(n, dtype=jnp.int32)

  def body(k, carry):
    a, perm, parity = carry
    ek = _e(idx, k, dt)
    col = a @ ek
    mag = jnp.where(idx >= k, jnp.abs(col), -1.0).astype(dt)
    p = jnp.argmax(mag)
    ep = _e(idx, p, dt)
    rowk, rowp = ek @ a, ep @ a
    a = a + jnp.outer(ek - ep, rowp - rowk)
    eki, epi = (idx == k).astype(jnp.int32), (idx == p).astype(jnp.int32)
    pk = jnp.sum(eki * perm, dtype=jnp.int32)
    pp = jnp.sum(epi * perm, dtype=jnp.int32)
    perm = perm + eki * (pp - pk) + epi * (pk - pp)
    parity = parity ^ (p != k).astype(jnp.int32)
    # eliminate below the pivot
    row = rowp  # the new row k
    pivot = jnp.sum(row * ek)
    col = a @ ek
    below = idx > k
    l = jnp.where(below, col / pivot, 0.0).astype(dt)
    urow = jnp.where(idx > k, row, 0.0).astype(dt)
    a = a - jnp.outer(l, urow)
    a = jnp.where(below[:, None] & (idx == k)[None, :], l[:, None], a)
    return a, perm, parity

  return lax.fori_loop(0, n, body, (a, perm0, jnp.int32(0)))


def _lu(a):
  if a.ndim == 2:
    return _lu_single(a)
  import ourjax
  fn = _lu_single
  for _ in range(a.ndim - 2):
    fn = ourjax.vmap(fn)
  return fn(a)


def _lu_solve_single(lu, perm, b):
  """Solve with a packed LU for ``b`` of shape (n, k)."""
  jnp = _jnp()
  n = lu.shape[0]
  dt = lu.dtype
  idx = jnp.arange(n)
  pm = (perm[:, None] == idx[None, :]).astype(dt)  # permutation matrix: (P b)[i] = b[perm[i]]
  y0 = pm @ b
  lower = jnp.where(idx[:, None] > idx[None, :], lu, 0.0).astype(dt)
  upper = jnp.where(idx[:, None] <= idx[None, :], lu, 0.0).astype(dt)

  def fwd(i, y):
    ei = _e(idx, i, dt)
    yi = ei @ y - (ei @ lower) @ y
    return y + jnp.outer(ei, yi - ei @ y)

  y = lax.fori_loop(0, n, fwd, y0)

  def bwd(t, x):
    i = n - 1 - t
    ei = _e(idx, i, dt)
    urow = ei @ upper
    d = jnp.sum(urow * ei)
    strict = urow * (idx > i).astype(dt)
    xi = (ei @ x - strict @ x) / d
    return x + jnp.outer(ei, xi - ei @ x)

  return lax.fori_loop(0, n, bwd, y)


def det(a):
  """Determinant via LU with partial pivoting."""
  a = _square("det", a)
  jnp = _jnp()
  lu, _, parity = _lu(a)
  d = jnp.prod(_diagonal(lu, axis1=-2, axis2=-1), axis=-1)
  sign = (1 - 2 * parity).astype(a.dtype)
  return sign * d


def slogdet(a, *, method=None):
  """(sign, log|det|) via LU with partial pivoting."""
  a = _square("slogdet", a)
  jnp = _jnp()
  lu, _, parity = _lu(a)
  diag = _diagonal(lu, axis1=-2, axis2=-1)
  sign = (1 - 2 * parity).astype(a.dtype) * jnp.prod(jnp.sign(diag), axis=-1)
  logdet = jnp.sum(jnp.log(jnp.abs(diag)), axis=-1)
  return SlogdetResult(sign, logdet)


class SlogdetResult(NamedTuple):   # a NamedTuple (so a pytree), as JAX's
  sign: Any
  logabsdet: Any


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

  def one(a, b):
    lu, perm, _ = _lu_single(a)
    return _lu_solve_single(lu, perm, b)

  x = _batched(one, a, b)
  return x[..., 0] if vec else x


def inv(a):
  """Inverse via LU solve against the identity."""
  a = _square("inv", a)
  jnp = _jnp()
  eye = jnp.broadcast_to(_eye(a.shape[-1], a.dtype), a.shape)
  return solve(a, eye)


# ------------------------------------------------------------------------------------------------
# Cholesky


def _cholesky_single(a):
  jnp = _jnp()
  n = a.shape[0]
  dt = a.dtype
  idx = jnp.arange(n)

  def body(j, L):
    ej = _e(idx, j, dt)
    rowj = ej @ L                      # L[j, :j] (zeros beyond)
    v = a @ ej - L @ rowj              # A[:, j] - L[:, :j] L[j, :j]
    d = jnp.sqrt(jnp.sum(v * ej))
    colv = jnp.where(idx > j, v / d, jnp.where(idx == j, d, 0.0)).astype(dt)
    return L + jnp.outer(colv, ej)

  return lax.fori_loop(0, n, body, jnp.zeros_like(a))


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True):
  """Lower Cholesky factor (upper=True: its transpose).  Reads the lower triangle after
  symmetrizing like JAX; a non-positive-definite input gives NaNs."""
  a = _square("cholesky", a)
  if symmetrize_input:
    a = (a + matrix_transpose(a)) / 2
  L = _batched(_cholesky_single, a)
  return matrix_transpose(L) if upper else L


# ------------------------------------------------------------------------------------------------
# QR (Householder)


def _qr_single(a, complete):
  jnp = _jnp()
  m, n = a.shape
  dt = a.dtype
  k = builtins.min(m, n)
  idx = jnp.arange(m)

  def body(j, carry):
    q, r = carry
    ej = _e(idx, j, dt)
    ejn = (jnp.arange(n) == j).astype(dt)
    x = jnp.where(idx >= j, r @ ejn, 0.0).astype(dt)
    xj = jnp.sum(x * ej)
    nx = jnp.sqrt(jnp.sum(x * x))
    s = jnp.where(xj >= 0, 1.0, -1.0).astype(dt)
    alpha = -s * nx
    v = x - alpha * ej
    nv = jnp.sqrt(jnp.sum(v * v))
    ok = nv > 0
    v = jnp.where(ok, v / jnp.where(ok, nv, 1.0), 0.0).astype(dt)
    r = r - 2.0 * jnp.outer(v, v @ r)
    q = q - 2.0 * jnp.outer(q @ v, v)
    return q, r

  q, r = lax.fori_loop(0, k, body, (_eye(m, dt), a))
  rows = jnp.arange(m)[:, None]
  cols = jnp.arange(n)[None, :]
  r = jnp.where(rows <= cols, r, 0.0).astype(dt)
  if complete:
    return q, r
  return q[:, :k], r[:k, :]


class QRResult(NamedTuple):
  Q: Any
  R: Any


def qr(a, mode: str = "reduced"):
  """Householder QR; modes 'reduced', 'complete', 'r'."""
  a = _inexact("qr", a)
  if a.ndim < 2:
    raise ValueError(f"jnp.linalg.qr: argument must have at least 2 dimensions, got shape "
                     f"{a.shape}")
  if mode not in ("reduced", "complete", "r"):
    raise ValueError(f"jnp.linalg.qr: unsupported mode {mode!r}")
  q, r = _batched(lambda x: _qr_single(x, mode == "complete"), a)
  if mode == "r":
    return r
  return QRResult(q, r)


# ------------------------------------------------------------------------------------------------
# Jacobi eigen / singular value decompositions


def _pairs(n):
  ps, qs = [], []
  for p in range(n):
    for q in range(p + 1, n):
      ps.append(p)
      qs.append(q)
  return np.array(ps, np.int32), np.array(qs, np.int32)


def _sweeps(dtype):
  return 8 if np.dtype(dtype).itemsize <= 4 else 12


def _eigh_single(a):
  jnp = _jnp()
  n = a.shape[0]
  dt = a.dtype
  if n == 1:
    return a[0], jnp.ones((1, 1), dt)
  idx = jnp.arange(n)
  ps, qs = _pairs(n)
  npairs = len(ps)
  ps, qs = jnp.asarray(ps), jnp.asarray(qs)

  def rot(t, carry):
    a, v = carry
    i = t % npairs
    p = jnp.sum(jnp.where(jnp.arange(npairs) == i, ps, 0))
    q = jnp.sum(jnp.where(jnp.arange(npairs) == i, qs, 0))
    ep, eq = _e(idx, p, dt), _e(idx, q, dt)
    ap, aq = a @ ep, a @ eq
    app, aqq, apq = ep @ ap, eq @ aq, ep @ aq
    nz = apq != 0
    theta = (aqq - app) / (2 * jnp.where(nz, apq, 1.0))
    sgn = jnp.where(theta >= 0, 1.0, -1.0).astype(dt)
    tt = sgn / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1))
    tt = jnp.where(nz, tt, 0.0).astype(dt)
    c = 1 / jnp.sqrt(tt * tt + 1)
    s = tt * c
    # a <- a J ; J = I + (c-1)(ep ep' + eq eq') + s (ep eq' - eq ep')
    u1 = (c - 1) * ep + s * eq
    u2 = (c - 1) * eq - s * ep
    a = a + jnp.outer(ap, u1) + jnp.outer(aq, u2)
    rp, rq = ep @ a, eq @ a
    a = a + jnp.outer(u1, rp) + jnp.outer(u2, rq)
    vp, vq = v @ ep, v @ eq
    v = v + jnp.outer(vp, u1) + jnp.outer(vq, u2)
    return a, v

  a, v = lax.fori_loop(0, _sweeps(dt) * npairs, rot, (a, _eye(n, dt)))
  w = _diagonal(a)
  order = jnp.argsort(w)
  return w[order], v[:, order]


class EighResult(NamedTuple):
  eigenvalues: Any
  eigenvectors: Any


def eigh(a, UPLO=None, symmetrize_input: bool = True):
  """Symmetric eigendecomposition by cyclic Jacobi rotations (fixed sweep count); eigenvalues
  ascending, eigenvectors in columns."""
  a = _square("eigh", a)
  jnp = _jnp()
  if symmetrize_input:
    a = (a + matrix_transpose(a)) / 2
  elif UPLO in (None, "L"):
    a = jnp.tril(a) + matrix_transpose(jnp.tril(a, -1))
  else:
    a = jnp.triu(a) + matrix_transpose(jnp.triu(a, 1))
  w, v = _eigh_symmetric()(a)
  return EighResult(w, v)


_EIGH = []


def _eigh_symmetric():
  """(w, v) of a symmetric matrix (batched), with the JVP of the decomposition instead of the
  derivative of the Jacobi iterations (whose rotation angles have no useful derivative and give
  NaN where an off-diagonal element reaches 0): for dA, with C = V^T dA V,
  dw = diag(C) and dV = V (F * C), F_ij = 1/(w_j - w_i) off the diagonal and 0 on it (the
  diagonal of w_j - w_i is replaced by 1 before the division, then masked, so no 0 * inf)."""
  if not _EIGH:
    from ourjax.custom_derivatives import custom_jvp
    jnp = _jnp()
    f = custom_jvp(lambda a: _batched(_eigh_single, a))

    @f.defjvp
    def _jvp(primals, tangents):
      a, = primals
      da, = tangents
      w, v = f(a)
      n = a.shape[-1]
      eye = jnp.eye(n, dtype=bool)
      gap = w[..., None, :] - w[..., :, None]                    # w_j - w_i
      fmat = jnp.where(eye, 0, 1 / jnp.where(eye, 1, gap)).astype(w.dtype)
      c = matrix_transpose(v) @ da @ v
      dw = jnp.diagonal(c, axis1=-2, axis2=-1)
      return (w, v), (dw, v @ (fmat * c))
    _EIGH.append(f)
  return _EIGH[0]


def eigvalsh(a, UPLO=None):
  return eigh(a, UPLO).eigenvalues


def _svd_tall(a):
  """One-sided Jacobi on the columns of a tall (m >= n) matrix: (u (m,n), s (n,), v (n,n)),
  singular values descending."""
  jnp = _jnp()
  m, n = a.shape
  dt = a.dtype
  idx = jnp.arange(n)
  if n == 1:
    s = jnp.sqrt(jnp.sum(a * a, axis=0))
    u = a / jnp.where(s > 0, s, 1.0)
    return u, s, jnp.ones((1, 1), dt)
  ps, qs = _pairs(n)
  npairs = len(ps)
  ps, qs = jnp.asarray(ps), jnp.asarray(qs)

  def rot(t, carry):
    u, v = carry
    i = t % npairs
    p = jnp.sum(jnp.where(jnp.arange(npairs) == i, ps, 0))
    q = jnp.sum(jnp.where(jnp.arange(npairs) == i, qs, 0))
    ep, eq = _e(idx, p, dt), _e(idx, q, dt)
    up, uq = u @ ep, u @ eq
    alpha, beta, gamma = jnp.sum(up * up), jnp.sum(uq * uq), jnp.sum(up * uq)
    nz = gamma != 0
    zeta = (beta - alpha) / (2 * jnp.where(nz, gamma, 1.0))
    sgn = jnp.where(zeta >= 0, 1.0, -1.0).astype(dt)
    tt = sgn / (jnp.abs(zeta) + jnp.sqrt(1 + zeta * zeta))
    tt = jnp.where(nz, tt, 0.0).astype(dt)
    c = 1 / jnp.sqrt(1 + tt * tt)
    s = c * tt
    u1 = (c - 1) * ep + s * eq
    u2 = (c - 1) * eq - s * ep
    u = u + jnp.outer(up, u1) + jnp.outer(uq, u2)
    vp, vq = v @ ep, v @ eq
    v = v + jnp.outer(vp, u1) + jnp.outer(vq, u2)
    return u, v

  u, v = lax.fori_loop(0, _sweeps(dt) * npairs, rot, (a, _eye(n, dt)))
  s = jnp.sqrt(jnp.sum(u * u, axis=0))
  order = jnp.argsort(-s)
  s, u, v = s[order], u[:, order], v[:, order]
  u = u / jnp.where(s > 0, s, 1.0)
  return u, s, v


class SVDResult(NamedTuple):
  U: Any
  S: Any
  Vh: Any


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False,
        subset_by_index=None):
  """SVD by one-sided Jacobi (fixed sweep count); ``a = U @ diag(S) @ Vh``, S descending.
  ``full_matrices`` completes U (or Vh) with a Householder QR of the thin factor.  Columns of U
  for zero singular values are not orthonormalised (rank-deficient inputs)."""
  a = _inexact("svd", a)
  jnp = _jnp()
  if a.ndim < 2:
    raise ValueError(f"jnp.linalg.svd: argument must have at least 2 dimensions, got shape "
                     f"{a.shape}")
  m, n = a.shape[-2:]

  def one(x):
    wide = m < n
    if wide:
      x = x.T
    u, s, v = _svd_tall(x)
    if full_matrices and compute_uv and u.shape[0] != u.shape[1]:
      qf, _ = _qr_single(u, True)
      u = jnp.concatenate([u, qf[:, u.shape[1]:]], axis=1)
    if wide:
      u, v = v, u
    return u, s, v.T

  u, s, vh = _batched(one, a)
  if not compute_uv:
    return s
  return SVDResult(u, s, vh)


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
  if ord == np.inf:
    return jnp.max(ax, axis=axis, keepdims=keepdims)
  if ord == -np.inf:
    return jnp.min(ax, axis=axis, keepdims=keepdims)
  if ord == 0:
    return jnp.sum(x != 0, dtype=jnp.finfo(ax.dtype).dtype, axis=axis, keepdims=keepdims)
  if ord == 1:
    return jnp.sum(ax, axis=axis, keepdims=keepdims)
  if isinstance(ord, str):
    raise ValueError(f"jnp.linalg.norm: invalid order {ord!r} for vectors")
  ordv = jnp.asarray(ord, dtype=ax.dtype)
  return jnp.sum(ax ** ordv, axis=axis, keepdims=keepdims) ** (1 / ordv)


def _matrix_norm(x, ord, axis, keepdims):
  jnp = _jnp()
  r, c = axis
  if ord is None or ord == "fro":
    return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
  ax = jnp.abs(x)
  if ord in (1, -1):
    s = jnp.sum(ax, axis=r, keepdims=True)
    f = jnp.max if ord == 1 else jnp.min
    out = f(s, axis=c, keepdims=True)
  elif ord in (np.inf, -np.inf):
    s = jnp.sum(ax, axis=c, keepdims=True)
    f = jnp.max if ord == np.inf else jnp.min
    out = f(s, axis=r, keepdims=True)
  elif ord in (2, -2, "nuc"):
    y = jnp.moveaxis(x, (r, c), (-2, -1))
    sv = svd(y, compute_uv=False)
    if ord == 2:
      out = jnp.max(sv, axis=-1)
    elif ord == -2:
      out = jnp.min(sv, axis=-1)
    else:
      out = jnp.sum(sv, axis=-1)
    if keepdims:
      out = jnp.expand_dims(out, tuple(sorted((r, c))))
    return out
  else:
    raise ValueError(f"jnp.linalg.norm: invalid order {ord!r} for matrices")
  if keepdims:
    return out
  return jnp.squeeze(out, axis=axis)


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
  """Pseudo-inverse from the SVD, cutting singular values below ``rtol * max(S)``."""
  jnp = _jnp()
  a = _inexact("pinv", a)
  m, n = a.shape[-2:]
  if rcond is not None:
    rtol = rcond
  if rtol is None:
    rtol = 10 * builtins.max(m, n) * jnp.finfo(a.dtype).eps
  u, s, vh = svd(a, full_matrices=False)
  cut = jnp.asarray(rtol, a.dtype)[..., None] * jnp.max(s, axis=-1, keepdims=True)
  sinv = jnp.where(s > cut, 1 / jnp.where(s > cut, s, 1), 0).astype(a.dtype)
  return matmul(matrix_transpose(vh) * sinv[..., None, :], matrix_transpose(u))


def matrix_rank(M, rtol=None, *, tol=None):
  jnp = _jnp()
  M = _inexact("matrix_rank", M)
  if M.ndim < 2:
    return jnp.any(M != 0).astype(jnp.int32)
  s = svd(M, compute_uv=False)
  if tol is None:
    if rtol is None:
      rtol = builtins.max(M.shape[-2:]) * jnp.finfo(M.dtype).eps
    tol = jnp.max(s, axis=-1, keepdims=True) * jnp.asarray(rtol, M.dtype)[..., None]
  else:
    tol = jnp.asarray(tol, M.dtype)[..., None]
  return jnp.sum(s > tol, axis=-1).astype(jnp.int32)


def lstsq(a, b, rcond=None, *, numpy_resid: bool = False):
  """Least squares via the pseudo-inverse: (x, residuals, rank, singular values).  Residuals are
  the squared norms of each column of b - a x (one for a vector b), as JAX; with
  ``numpy_resid`` they are empty for systems that are not tall, as NumPy."""
  jnp = _jnp()
  a = _inexact("lstsq", a)
  b = _inexact("lstsq", b)
  a, b = _util.promote_dtypes_inexact(a, b)
  if a.ndim != 2:
    raise ValueError(f"jnp.linalg.lstsq: a must be 2-D, got shape {a.shape}")
  if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
    raise ValueError(f"jnp.linalg.lstsq: incompatible shapes a {a.shape} and b {b.shape}")
  m, n = a.shape
  if rcond is None:
    rcond = jnp.finfo(a.dtype).eps * builtins.max(m, n)
  u, s, vh = svd(a, full_matrices=False)
  cut = rcond * jnp.max(s)
  mask = s > cut
  rank = jnp.sum(mask).astype(dtypes.default_int_dtype())   # as JAX
  sinv = jnp.where(mask, 1 / jnp.where(mask, s, 1), 0).astype(a.dtype)
  b2 = b[:, None] if b.ndim == 1 else b            # a vector b is one column (JAX, NumPy)
  x = vh.T @ ((u.T @ b2) * sinv[:, None])
  r = b2 - a @ x
  resid = jnp.sum(r * r, axis=0)                   # JAX: always the squared residual norms
  if numpy_resid and m <= n:
    resid = jnp.zeros((0,), a.dtype)
  return (x[:, 0] if b.ndim == 1 else x), resid, rank, s
