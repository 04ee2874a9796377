"""The lax compositions that the linear-algebra primitives (``lax/linalg.py``) lower to.

Each routine is written for ONE real matrix with existing lax/jnp ops (static trip counts, one-hot
masks instead of dynamic indexing, ``lax.fori_loop``) and mapped with ``ourjax.vmap`` over the
leading batch dimensions by ``batched``.  Eager calls never come here: the primitives' NumPy
implementations (LAPACK through ``numpy.linalg``) run then; these compositions are what a jitted
program compiles to (the way JAX lowers some decompositions with ``mlir.lower_fun``).  The
derivatives are the primitives' own rules, never the derivatives of these iterations.

Algorithms: LU with partial pivoting (any m x n), forward/back substitution, Cholesky column by
column, Householder QR, cyclic Jacobi (eigh) and one-sided Jacobi (svd) with a fixed number of
sweeps.  Like LAPACK through JAX, nothing raises on singular / non-positive-definite inputs: the
results contain inf/nan.
"""
from __future__ import annotations

import builtins

import numpy as np

from ourjax.lax import control_flow


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _fori(lo, hi, body, init):
  return control_flow.fori_loop(lo, hi, body, init)


def batched(fn, nbatch: int):
  import ourjax
  for _ in range(nbatch):
    fn = ourjax.vmap(fn)
  return fn


def _e(idx, k, dtype):
  """One-hot vector: ``idx == k`` as ``dtype``."""
  return (idx == k).astype(dtype)


# ------------------------------------------------------------------------------------------------
# LU with partial pivoting


def lu(a):
  """Packed LU of one m x n matrix: (lu, pivots, permutation) as ``lax.linalg.lu``: row
  ``i`` was swapped with row ``pivots[i]`` at step i, ``a[permutation] = L @ U``."""
  jnp = _jnp()
  m, n = a.shape
  k = builtins.min(m, n)
  dt = a.dtype
  idx = jnp.arange(m)
  cidx = jnp.arange(n)

  def body(j, carry):
    a, piv, perm = carry
    ej, ejc = _e(idx, j, dt), _e(cidx, j, dt)
    col = a @ ejc
    mag = jnp.where(idx >= j, jnp.abs(col), -1.0).astype(dt)
    p = jnp.argmax(mag).astype(jnp.int32)
    ep = _e(idx, p, dt)
    rowj, rowp = ej @ a, ep @ a
    # swap rows j and p exactly (a + outer(ej - ep, rowp - rowj) would round: rowj + (rowp -
    # rowj) is not rowp in floating point)
    a = jnp.where((idx == j)[:, None], rowp[None, :],
                  jnp.where((idx == p)[:, None], rowj[None, :], a))
    eji, epi = (idx == j).astype(jnp.int32), (idx == p).astype(jnp.int32)
    pj = jnp.sum(eji * perm, dtype=jnp.int32)
    pp = jnp.sum(epi * perm, dtype=jnp.int32)
    perm = perm + eji * (pp - pj) + epi * (pj - pp)
    piv = jnp.where(jnp.arange(k) == j, p, piv)
    pivot = jnp.sum(rowp * ejc)
    col = a @ ejc
    below = idx > j
    safe = jnp.where(pivot == 0, 1.0, pivot).astype(dt)
    l = jnp.where(below, col / safe, 0.0).astype(dt)
    urow = jnp.where(cidx > j, rowp, 0.0).astype(dt)
    a = a - jnp.outer(l, urow)
    a = jnp.where(below[:, None] & (cidx == j)[None, :], l[:, None], a)
    return a, piv, perm

  piv0 = jnp.zeros((k,), jnp.int32)
  perm0 = jnp.arange(m, dtype=jnp.int32)
  return list(_fori(0, k, body, (a, piv0, perm0)))


# ------------------------------------------------------------------------------------------------
# Triangular solves


def solve_lower(lmat, b, unit_diagonal: bool):
  """``X`` with ``lmat @ X = b`` for a lower-triangular (n, n) ``lmat`` (only its lower triangle
  is read) and ``b`` (n, k), by forward substitution."""
  jnp = _jnp()
  n = lmat.shape[0]
  dt = lmat.dtype
  idx = jnp.arange(n)
  strict = jnp.where(idx[:, None] > idx[None, :], lmat, 0.0).astype(dt)

  def body(i, x):
    ei = _e(idx, i, dt)
    row = ei @ strict
    xi = ei @ b - row @ x
    if not unit_diagonal:
      xi = xi / jnp.sum((ei @ lmat) * ei)
    return x + jnp.outer(ei, xi)

  return _fori(0, n, body, jnp.zeros_like(b))


def triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
  """``lax.linalg.triangular_solve`` for one real matrix (``conjugate_a`` is a no-op)."""
  jnp = _jnp()
  del conjugate_a
  if not left_side:      # x op(a) = b  <=>  op(a)^T x^T = b^T
    return triangular_solve(a, b.T, left_side=True, lower=lower, transpose_a=not transpose_a,
                            conjugate_a=False, unit_diagonal=unit_diagonal).T
  n = a.shape[0]
  tri = jnp.tril(a) if lower else jnp.triu(a)
  op = tri.T if transpose_a else tri
  if lower != transpose_a:     # op is lower triangular
    return solve_lower(op, b, unit_diagonal)
  r = np.arange(n)[::-1]       # reverse rows and columns: an upper matrix becomes lower
  return solve_lower(op[r][:, r], b[r], unit_diagonal)[r]


# ------------------------------------------------------------------------------------------------
# Cholesky


def cholesky(a):
  """Lower Cholesky factor of one matrix (reads its lower triangle); NaN where not positive
  definite."""
  jnp = _jnp()
  n = a.shape[0]
  dt = a.dtype
  idx = jnp.arange(n)
  a = jnp.tril(a) + jnp.tril(a, -1).T

  def body(j, L):
    ej = _e(idx, j, dt)
    rowj = ej @ L
    v = a @ ej - L @ rowj
    d = jnp.sqrt(jnp.sum(v * ej))
    colv = jnp.where(idx > j, v / d, jnp.where(idx == j, d, 0.0)).astype(dt)
    return L + jnp.outer(colv, ej)

  L = _fori(0, n, body, jnp.zeros_like(a))
  # not positive definite (a NaN pivot): the whole lower triangle NaN, as LAPACK through JAX
  failed = jnp.any(jnp.isnan(jnp.diagonal(L)))
  lower = idx[:, None] >= idx[None, :]
  return jnp.where(failed & lower, jnp.array(np.nan, dt), L).astype(dt)


# ------------------------------------------------------------------------------------------------
# QR (Householder)


def qr(a, full_matrices: bool):
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
    # as LAPACK's dlarfg: no reflection when the part below the diagonal is already zero
    ok = (nv > 0) & (jnp.sum(jnp.where(idx > j, x * x, 0.0)) > 0)
    v = jnp.where(ok, v / jnp.where(ok, nv, 1.0), 0.0).astype(dt)
    r = r - 2.0 * jnp.outer(v, v @ r)
    q = q - 2.0 * jnp.outer(q @ v, v)
    return q, r

  q, r = _fori(0, k, body, (jnp.eye(m, dtype=dt), a))
  rows = jnp.arange(m)[:, None]
  cols = jnp.arange(n)[None, :]
  r = jnp.where(rows <= cols, r, 0.0).astype(dt)
  if full_matrices:
    return [q, r]
  return [q[:, :k], r[:k, :]]


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


def _pair_vectors(t, ps, qs, idx, dt):
  """The one-hot vectors (e_p, e_q) of rotation ``t`` of the cyclic order ``(ps, qs)``."""
  jnp = _jnp()
  npairs = ps.shape[0]
  i = t % npairs
  p = jnp.sum(jnp.where(jnp.arange(npairs) == i, ps, 0))
  q = jnp.sum(jnp.where(jnp.arange(npairs) == i, qs, 0))
  return _e(idx, p, dt), _e(idx, q, dt)


def _rotation(app, aqq, apq, ep, eq, dt):
  """The Jacobi rotation zeroing the (p, q) entry of the symmetric 2x2 [[app, apq], [apq, aqq]]
  (no rotation when apq is 0), as the update directions (u1, u2) = ((c-1) e_p + s e_q,
  (c-1) e_q - s e_p): J = I + e_p u1' + e_q u2'."""
  jnp = _jnp()
  nz = apq != 0
  theta = (aqq - app) / (2 * jnp.where(nz, apq, 1.0))
  sgn = jnp.where(theta >= 0, 1.0, -1.0).astype(dt)
  tt = sgn / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1))
  tt = jnp.where(nz, tt, 0.0).astype(dt)
  c = 1 / jnp.sqrt(tt * tt + 1)
  s = tt * c
  return (c - 1) * ep + s * eq, (c - 1) * eq - s * ep


def eigh(a, sort_eigenvalues: bool = True):
  """(v, w) of one symmetric matrix by cyclic Jacobi rotations (fixed sweep count)."""
  jnp = _jnp()
  n = a.shape[0]
  dt = a.dtype
  if n == 0:
    return [a, jnp.zeros((0,), dt)]
  if n == 1:
    return [jnp.ones((1, 1), dt), a[0]]
  idx = jnp.arange(n)
  ps, qs = _pairs(n)
  npairs = len(ps)
  ps, qs = jnp.asarray(ps), jnp.asarray(qs)

  def rot(t, carry):
    a, v = carry
    ep, eq = _pair_vectors(t, ps, qs, idx, dt)
    ap, aq = a @ ep, a @ eq
    # a <- J^T a J ; J = I + (c-1)(ep ep' + eq eq') + s (ep eq' - eq ep')
    u1, u2 = _rotation(ep @ ap, eq @ aq, ep @ aq, ep, eq, dt)
    a = a + jnp.outer(ap, u1) + jnp.outer(aq, u2)
    rp, rq = ep @ a, eq @ a
    a = a + jnp.outer(u1, rp) + jnp.outer(u2, rq)
    vp, vq = v @ ep, v @ eq
    v = v + jnp.outer(vp, u1) + jnp.outer(vq, u2)
    return a, v

  a, v = _fori(0, _sweeps(dt) * npairs, rot, (a, jnp.eye(n, dtype=dt)))
  w = jnp.diagonal(a)
  if sort_eigenvalues:
    order = jnp.argsort(w)
    w, v = w[order], v[:, order]
  return [v, w]


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
    ep, eq = _pair_vectors(t, ps, qs, idx, dt)
    up, uq = u @ ep, u @ eq
    u1, u2 = _rotation(jnp.sum(up * up), jnp.sum(uq * uq), jnp.sum(up * uq), ep, eq, dt)
    u = u + jnp.outer(up, u1) + jnp.outer(uq, u2)
    vp, vq = v @ ep, v @ eq
    v = v + jnp.outer(vp, u1) + jnp.outer(vq, u2)
    return u, v

  u, v = _fori(0, _sweeps(dt) * npairs, rot, (a, jnp.eye(n, dtype=dt)))
  s = jnp.sqrt(jnp.sum(u * u, axis=0))
  order = jnp.argsort(-s)
  s, u, v = s[order], u[:, order], v[:, order]
  u = u / jnp.where(s > 0, s, 1.0)
  return u, s, v


def svd(a, full_matrices: bool, compute_uv: bool):
  """``svd_p``'s results for one matrix: [s] or [s, u, vh].  ``full_matrices`` completes U (or
  Vh) with a Householder QR of the thin factor.  Columns of U for zero singular values are not
  orthonormalised (rank-deficient inputs)."""
  jnp = _jnp()
  m, n = a.shape
  if builtins.min(m, n) == 0:
    s = jnp.zeros((0,), a.dtype)
    if not compute_uv:
      return [s]
    eu = jnp.eye(m, m if full_matrices else 0, dtype=a.dtype)
    ev = jnp.eye(n if full_matrices else 0, n, dtype=a.dtype)
    return [s, eu, ev]
  wide = m < n
  x = a.T if wide else a
  u, s, v = _svd_tall(x)
  if not compute_uv:
    return [s]
  if full_matrices and u.shape[0] != u.shape[1]:
    qf, _ = qr(u, True)
    u = jnp.concatenate([u, qf[:, u.shape[1]:]], axis=1)
  if wide:
    u, v = v, u
  return [s, u, v.T]
