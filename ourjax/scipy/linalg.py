"""``ourjax.scipy.linalg``: SciPy's linear-algebra API on ``lax.linalg`` and ``jnp.linalg``.

Decompositions and solves (``lu``, ``lu_factor``, ``lu_solve``, ``cholesky``, ``cho_factor``,
``cho_solve``, ``solve``, ``solve_triangular``, ``qr``, ``qr_multiply``, ``svd``, ``eigh``,
``det``, ``inv``, ``polar``, ``sqrtm``, ``expm``, ``expm_frechet``) batch over leading
dimensions as JAX's do; the special matrices (``toeplitz``, ``hankel``, ``circulant``,
``leslie``, ``companion``, ``fiedler``, ``fiedler_companion``, ``convolution_matrix``, ``dft``,
``hadamard``, ``helmert``, ``hilbert``, ``invhilbert``, ``pascal``, ``invpascal``,
``block_diag``) are jnp constructions, batched where SciPy >= 1.15 batches them.
"""
from __future__ import annotations

import math

import numpy as np

from ourjax import dtypes
from ourjax.lax import linalg as lax_linalg
from ourjax.numpy import _util
from ourjax.numpy import linalg as jla

__all__ = ["eigh_tridiagonal", "block_diag", "cho_factor", "cho_solve", "cholesky", "circulant", "companion",
           "convolution_matrix", "det", "dft", "eigh", "expm", "expm_frechet", "fiedler",
           "fiedler_companion", "hadamard", "hankel", "helmert", "hilbert", "inv", "invhilbert",
           "invpascal", "leslie", "lu", "lu_factor", "lu_solve", "pascal", "polar", "qr",
           "qr_multiply", "solve", "solve_triangular", "sqrtm", "svd", "toeplitz", "schur",
           "rsf2csf", "funm", "solve_sylvester", "hessenberg"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _H(x):
  jnp = _jnp()
  return jnp.conj(jnp.swapaxes(x, -1, -2))


def _inexact(name, *xs):
  _util.check_arraylike(name, *xs)
  jnp = _jnp()
  out = _util.promote_dtypes_inexact(*[jnp.asarray(x) for x in xs])
  return out[0] if len(xs) == 1 else out


def _rhs(name, a, b):
  """Broadcast ``a`` (..., n, n) and ``b`` ((n,) one vector, else (..., n, k)) to common batch
  dims: (a, b as a matrix, whether b was a vector)."""
  jnp = _jnp()
  n = a.shape[-1]
  vec = b.ndim == 1
  if vec:
    b = b[:, None]
  if b.ndim < 2 or b.shape[-2] != n:
    raise ValueError(f"{name}: incompatible shapes a {a.shape} and b "
                     f"{b.shape[:-1] if vec else b.shape}")
  batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
  return (jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:]),
          vec)


# ------------------------------------------------------------------------------------------------
# Decompositions and solves


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
  """``(lu, piv)``: the packed LU and LAPACK's row swaps."""
  a = _inexact("lu_factor", a)
  lu_, piv, _ = lax_linalg.lu(a)
  return lu_, piv


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
  """``(p, l, u)`` with ``a = p @ l @ u`` (``permute_l``: ``(p @ l, u)``)."""
  jnp = _jnp()
  a = _inexact("lu", a)
  lu_, _, perm = lax_linalg.lu(a)
  m, n = a.shape[-2:]
  k = min(m, n)
  # p[perm[j], j] = 1; real even for complex a (as JAX)
  p = (jnp.arange(m)[:, None] == perm[..., None, :]).astype(jnp.real(a[..., :0, :0]).dtype)
  l = jnp.tril(lu_[..., :, :k], -1) + jnp.eye(m, k, dtype=a.dtype)
  u = jnp.triu(lu_[..., :k, :])
  if permute_l:
    return jnp.matmul(p, l), u
  return p, l, u


def lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False,
             check_finite: bool = True):
  """Solve with ``lu_factor``'s result: ``a x = b`` (trans 0), ``a^T x = b`` (1), ``a^H x = b``
  (2)."""
  jnp = _jnp()
  lu_, piv = lu_and_piv
  lu_, b = _inexact("lu_solve", lu_, b)
  if trans not in (0, 1, 2):
    raise ValueError(f"Invalid 'trans' value {trans}, must be 0, 1 or 2")
  m = lu_.shape[-1]
  perm = lax_linalg.lu_pivots_to_permutation(jnp.asarray(piv), m)
  lu_b, b2, vec = _rhs("lu_solve", lu_, b)
  perm = jnp.broadcast_to(perm, lu_b.shape[:-1])
  x = jla._lu_solve(lu_b, perm, b2, trans)
  return x[..., 0] if vec else x


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
  """Cholesky factor: upper (``a = u^H u``) unless ``lower``."""
  a = _inexact("cholesky", a)
  return jla.cholesky(a, upper=not lower)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
  return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
  """Solve ``a x = b`` with ``a``'s Cholesky factor ``(c, lower)``."""
  c, lower = c_and_lower
  c, b = _inexact("cho_solve", c, b)
  c, b2, vec = _rhs("cho_solve", c, b)
  if lower:    # L L^H x = b
    y = lax_linalg.triangular_solve(c, b2, left_side=True, lower=True)
    x = lax_linalg.triangular_solve(c, y, left_side=True, lower=True, transpose_a=True,
                                    conjugate_a=True)
  else:        # U^H U x = b
    y = lax_linalg.triangular_solve(c, b2, left_side=True, lower=False, transpose_a=True,
                                    conjugate_a=True)
    x = lax_linalg.triangular_solve(c, y, left_side=True, lower=False)
  return x[..., 0] if vec else x


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False,
                     overwrite_b: bool = False, debug=None, check_finite: bool = True):
  """Solve ``op(a) x = b`` for triangular ``a`` (``trans``: 0/'N', 1/'T', 2/'C')."""
  a, b = _inexact("solve_triangular", a, b)
  codes = {0: (False, False), "N": (False, False), 1: (True, False), "T": (True, False),
           2: (True, True), "C": (True, True)}
  if trans not in codes:
    raise ValueError(f"Invalid 'trans' value {trans}")
  transpose_a, conjugate_a = codes[trans]
  a, b2, vec = _rhs("solve_triangular", a, b)
  x = lax_linalg.triangular_solve(a, b2, left_side=True, lower=lower, transpose_a=transpose_a,
                                  conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
  return x[..., 0] if vec else x


def solve(a, b, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          debug: bool = False, check_finite: bool = True, assume_a: str = "gen"):
  """Solve ``a x = b``; ``assume_a`` 'pos' uses the Cholesky factor of the ``lower`` (or upper)
  triangle, 'sym'/'her'/'gen' an LU factorization."""
  jnp = _jnp()
  if assume_a not in ("gen", "sym", "her", "pos"):
    raise ValueError(f"Expected assume_a to be one of 'gen', 'sym', 'her', or 'pos'; got "
                     f"{assume_a!r}")
  a, b = _inexact("solve", a, b)
  if assume_a != "pos":
    return jla.solve(a, b) if b.ndim != a.ndim - 1 or a.ndim == 2 else \
        jla.solve(a, b[..., None])[..., 0]
  # read one triangle (the Cholesky primitive reads the lower one)
  low = a if lower else _H(a)
  fac = lax_linalg.cholesky(jnp.tril(low) + _H(jnp.tril(low, -1)), symmetrize_input=False)
  return cho_solve((fac, True), b)


def det(a, overwrite_a: bool = False, check_finite: bool = True):
  return jla.det(a)


def inv(a, overwrite_a: bool = False, check_finite: bool = True):
  return jla.inv(a)


def eigh(a, b=None, lower: bool = True, eigvals_only: bool = False, overwrite_a: bool = False,
         overwrite_b: bool = False, turbo: bool = True, eigvals=None, type: int = 1,
         check_finite: bool = True):
  """Hermitian eigendecomposition ``(w, v)`` (or ``w``) reading the ``lower`` (or upper)
  triangle; the generalized problem (``b``) is not supported."""
  if b is not None:
    raise NotImplementedError("Only the b=None case of eigh is implemented")
  if type != 1:
    raise NotImplementedError("Only the type=1 case of eigh is implemented.")
  if eigvals is not None:
    raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
  a = _inexact("eigh", a)
  v, w = lax_linalg.eigh(a, lower=lower, symmetrize_input=False)
  return w if eigvals_only else (w, v)


def eigh_tridiagonal(d, e, *, eigvals_only: bool = False, select: str = "a",
                     select_range=None, tol=None, key=None):
  """Eigenvalues (ascending) and, unless ``eigvals_only``, eigenvectors (columns) of the
  Hermitian tridiagonal matrix with diagonal ``d`` and off-diagonal ``e``; ``select='i'`` keeps
  the eigenvalues with indices ``select_range[0] .. select_range[1]``.  Computed as ``eigh`` of
  the dense matrix (differentiable; eigenvector signs are arbitrary, as JAX's are)."""
  jnp = _jnp()
  d, e = _inexact("eigh_tridiagonal", d, e)
  if d.ndim != 1 or e.ndim != 1 or e.shape[0] != max(d.shape[0] - 1, 0):
    raise ValueError(f"eigh_tridiagonal: d must be a vector of length n and e of length "
                     f"n - 1; got shapes {d.shape} and {e.shape}")
  if select == "v":
    raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented")
  if select not in ("a", "i"):
    raise ValueError(f"eigh_tridiagonal: select must be 'a', 'v' or 'i'; got {select!r}")
  H = jnp.diag(d) + jnp.diag(e, -1) + jnp.diag(jnp.conj(e), 1)
  w, v = jnp.linalg.eigh(H)
  if select == "i":
    lo, hi = (int(i) for i in select_range)
    w, v = w[lo:hi + 1], v[:, lo:hi + 1]
  return w if eigvals_only else (w, v)


def svd(a, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
        check_finite: bool = True, lapack_driver: str = "gesdd"):
  a = _inexact("svd", a)
  return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def qr(a, overwrite_a: bool = False, lwork=None, mode: str = "full", pivoting: bool = False,
       check_finite: bool = True):
  """QR: mode 'full' (q m x m), 'economic' (q m x k), 'r' (``(r,)``); ``pivoting`` appends
  LAPACK's column permutation p (``a[:, p] = q r``)."""
  a = _inexact("qr", a)
  if mode not in ("full", "economic", "r"):
    raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
  q, r, *p = lax_linalg.qr(a, full_matrices=mode == "full", pivoting=pivoting)
  if mode == "r":
    if a.shape[-2] > a.shape[-1]:
      _, r, *_ = lax_linalg.qr(a, full_matrices=True, pivoting=pivoting)
    return (r, *p)
  return (q, r, *p)


def qr_multiply(a, c, mode: str = "right", pivoting: bool = False, conjugate: bool = False,
                overwrite_a: bool = False, overwrite_c: bool = False):
  """``(c @ q, r)`` (mode 'right') or ``(q @ c, r)`` ('left') with the economic q of ``a``."""
  jnp = _jnp()
  a, c = _inexact("qr_multiply", a, c)
  if mode not in ("right", "left"):
    raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
  q, r, *p = lax_linalg.qr(a, full_matrices=False, pivoting=pivoting)
  if conjugate:
    q = jnp.conj(q)
  if c.ndim == 1:
    out = (q @ c[:, None])[..., 0] if mode == "left" else (c[None, :] @ q)[..., 0, :]
  else:
    out = q @ c if mode == "left" else c @ q
  return (out, r, *p)


def polar(a, side: str = "right", *, method: str = "qdwh", eps=None, max_iterations=None):
  """``(u, p)``: ``a = u p`` (side 'right') or ``a = p u`` ('left'), from the SVD."""
  a = _inexact("polar", a)
  if side not in ("right", "left"):
    raise ValueError(f"side={side!r} is not understood; it must be 'right' or 'left'")
  if method not in ("qdwh", "svd"):
    raise ValueError(f"Unknown polar decomposition method {method!r}")
  u_, s, vh = lax_linalg.svd(a, full_matrices=False)
  u = u_ @ vh
  sc = s.astype(a.dtype)
  if side == "right":
    p = (_H(vh) * sc[..., None, :]) @ vh
  else:
    p = (u_ * sc[..., None, :]) @ _H(u_)
  return u, p


def sqrtm(A, blocksize: int = 1):
  """Principal square root (complex) from the eigendecomposition ``A = V diag(w) V^{-1}``
  (diagonalizable matrices; host only, as ``eig``)."""
  jnp = _jnp()
  A = _inexact("sqrtm", A)
  if blocksize > 1:
    raise NotImplementedError("Blocked version is not implemented yet.")
  w, v = lax_linalg.eig(A, compute_left_eigenvectors=False)
  # X = V sqrt(W) V^{-1}  <=>  V^T X^T = (V sqrt(W))^T
  vt = jnp.swapaxes(v, -1, -2)
  return jnp.swapaxes(jla.solve(vt, jnp.swapaxes(v * jnp.sqrt(w)[..., None, :], -1, -2)), -1, -2)


def hessenberg(a, *, calc_q: bool = False, overwrite_a: bool = False, check_finite: bool = True):
  """Upper Hessenberg form ``H`` (and ``Q`` with ``a = Q H Q^H`` when ``calc_q``), by LAPACK's
  Householder reduction (host only)."""
  jnp = _jnp()
  a = _inexact("hessenberg", a)
  packed, taus = lax_linalg.hessenberg(a)
  h = jnp.triu(packed, -1)
  if not calc_q:
    return h
  n = a.shape[-1]
  if n <= 1:
    return h, jnp.broadcast_to(jnp.eye(n, dtype=a.dtype), a.shape)
  # Q = H(0) ... H(n-2), reflector i living in rows i + 1: -> a product of size n - 1
  q_sub = lax_linalg.householder_product(packed[..., 1:, :n - 1], taus)
  q = jnp.zeros(a.shape, a.dtype).at[..., 0, 0].set(1).at[..., 1:, 1:].set(q_sub)
  return h, q


def schur(a, output: str = "real"):
  """``(T, Z)`` with ``a = Z T Z^H``: the real Schur form (``output='real'``, real input) or
  the complex one (host only; see ``lax.linalg.schur``)."""
  if output not in ("real", "complex"):
    raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got output={output}.")
  a = _inexact("schur", a)
  if output == "complex":
    a = a.astype(dtypes.to_complex_dtype(a.dtype))
  return lax_linalg.schur(a)


@_util.internal_promotion     # (Givens sweep written with mixed real/complex arithmetic)
def rsf2csf(T, Z, check_finite: bool = True):
  """Real Schur form to complex Schur form: each 2 x 2 block of ``T`` (sub-diagonal entry above
  ``eps`` relative to its diagonal neighbours) is triangularized by a complex Givens rotation,
  applied to ``Z`` too, from the bottom up, as SciPy's."""
  jnp = _jnp()
  T, Z = _inexact("rsf2csf", T, Z)
  if T.ndim < 2 or T.shape[-1] != T.shape[-2] or Z.shape[-2:] != T.shape[-2:]:
    raise ValueError(f"rsf2csf: T and Z must be square matrices of one size, got {T.shape} "
                     f"and {Z.shape}")
  cdt = dtypes.to_complex_dtype(T.dtype)
  batch = jnp.broadcast_shapes(T.shape[:-2], Z.shape[:-2])
  T = jnp.broadcast_to(T, batch + T.shape[-2:]).astype(cdt)
  Z = jnp.broadcast_to(Z, batch + Z.shape[-2:]).astype(cdt)
  n = T.shape[-1]
  eps = jnp.finfo(cdt).eps
  for m in range(n - 1, 0, -1):
    a, b = T[..., m - 1, m - 1], T[..., m - 1, m]
    c, d = T[..., m, m - 1], T[..., m, m]
    # the first eigenvalue of the block, in LAPACK's order (dlanv2 / the 2 x 2 QR step)
    mean, half = (a + d) / 2, (a - d) / 2
    root = jnp.sqrt(half * half + b * c)
    # real blocks: dlanv2's order; complex ones: the eigenvalue farther from d comes first
    # (the QR iteration converges to the one nearer d at the bottom)
    real_in = jnp.all(jnp.imag(T) == 0)
    sgn = jnp.where(real_in, jnp.real(half) >= 0, jnp.real(jnp.conj(half) * root) >= 0)
    sgn = jnp.where(sgn, 1, -1).astype(cdt)
    disc = jnp.real(half * half + b * c)
    first = jnp.where(real_in & (disc < 0), mean + 1j * jnp.abs(jnp.imag(root)),
                      mean + sgn * root)
    first = jnp.where(b == 0, d, first)
    mu = first - d
    r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(c) ** 2).astype(cdt)
    do = jnp.abs(c) > eps * (jnp.abs(a) + jnp.abs(d))
    r = jnp.where(do, r, 1)
    cs, sn = mu / r, c / r
    g = jnp.stack([jnp.stack([jnp.conj(cs), sn], -1), jnp.stack([-sn, cs], -1)], -2)
    eye = jnp.eye(2, dtype=cdt)
    g = jnp.where(do[..., None, None], g, eye)
    gh = _H(g)
    rows = g @ T[..., m - 1:m + 1, m - 1:]
    T = T.at[..., m - 1:m + 1, m - 1:].set(rows)
    T = T.at[..., :m + 1, m - 1:m + 1].set(T[..., :m + 1, m - 1:m + 1] @ gh)
    Z = Z.at[..., :, m - 1:m + 1].set(Z[..., :, m - 1:m + 1] @ gh)
    T = T.at[..., m, m - 1].set(0)
  return T, Z


def funm(A, func, disp: bool = True):
  """``func`` of the matrix ``A`` by Parlett's recurrence on its complex Schur form (host
  only); with ``disp=False`` also SciPy's error estimate."""
  jnp = _jnp()
  A = _inexact("funm", A)
  if A.ndim != 2 or A.shape[0] != A.shape[1]:
    raise ValueError(f"expected square array_like input, got shape {A.shape}")
  T, Z = schur(A, output="complex")
  n = T.shape[-1]
  F = jnp.diag(func(jnp.diagonal(T))).astype(T.dtype)
  diag = jnp.diagonal(T)
  for p in range(1, n):       # one super-diagonal at a time: s = (T F - F T)[i, i + p]
    s = jnp.diagonal(T @ F - F @ T, offset=p)
    den = diag[p:] - diag[:-p]
    s = jnp.where(den != 0, s / jnp.where(den != 0, den, 1), s)
    F = F + jnp.diag(s, k=p)
  F = Z @ F @ _H(Z)
  if disp:
    return F
  tol = jnp.finfo(T.dtype).eps
  gaps = jnp.abs(diag[None, :] - diag[:, None])
  gaps = jnp.where(jnp.eye(n, dtype=bool), jnp.inf, gaps)
  minden = jnp.minimum(jnp.abs(T[0, 0]), jnp.min(gaps)) if n > 1 else jnp.abs(T[0, 0])
  minden = jnp.where(minden == 0, tol, minden)
  err = jnp.minimum(1, jnp.maximum(tol, tol / minden
                                   * jnp.max(jnp.sum(jnp.abs(jnp.triu(T, 1)), axis=0))))
  err = jnp.where(jnp.all(jnp.isfinite(F)), err, jnp.inf)
  return F, err


def solve_sylvester(A, B, C, *, method: str = "schur", tol: float = 1e-8):
  """``X`` with ``A X + X B = C``, from the eigendecompositions ``A = V diag(a) V^{-1}``,
  ``B = W diag(b) W^{-1}``: ``X = V ((V^{-1} C W) / (a_i + b_j)) W^{-1}`` (host only, as
  ``eig``; both methods).  All NaN where some ``|a_i + b_j| < tol`` (no unique solution), as
  JAX's."""
  jnp = _jnp()
  if method not in ("schur", "eigen"):
    raise ValueError(f"method must be 'schur' or 'eigen', got {method!r}")
  A, B, C = _inexact("solve_sylvester", A, B, C)
  batch = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
  A = jnp.broadcast_to(A, batch + A.shape[-2:])
  B = jnp.broadcast_to(B, batch + B.shape[-2:])
  C = jnp.broadcast_to(C, batch + C.shape[-2:])
  wa, va = lax_linalg.eig(A, compute_left_eigenvectors=False)
  wb, vb = lax_linalg.eig(B, compute_left_eigenvectors=False)
  cc = C.astype(va.dtype)
  f = jla.solve(va, cc @ vb)
  den = wa[..., :, None] + wb[..., None, :]
  y = f / den
  x = jnp.swapaxes(jla.solve(jnp.swapaxes(vb, -1, -2), jnp.swapaxes(va @ y, -1, -2)), -1, -2)
  if not jnp.iscomplexobj(C):
    x = jnp.real(x)
  x = x.astype(C.dtype)
  bad = jnp.any(jnp.abs(den) < tol, axis=(-2, -1))
  return jnp.where(bad[..., None, None], jnp.nan, x)


# ------------------------------------------------------------------------------------------------
# Matrix exponential (Pade approximation with scaling and squaring)


_PADE = {
    7: (3.925724783138660, [17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.]),
    13: (5.371920351148152, [64764752532480000., 32382376266240000., 7771770303897600.,
                             1187353796428800., 129060195264000., 10559470521600.,
                             670442572800., 33522128640., 1323241920., 40840800., 960960.,
                             16380., 182., 1.]),
}


def expm(A, *, upper_triangular: bool = False, max_squarings: int = 16):
  """``exp(A)``: the [13/13] Pade approximant (64-bit) or [7/7] (32-bit) of ``A / 2**s`` squared
  ``s`` times, ``s`` from the 1-norm (at most ``max_squarings``); NaN where more would be
  needed."""
  jnp = _jnp()
  from ourjax.lax import control_flow
  A = _inexact("expm", A)
  if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
    raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={A.shape}")
  n = A.shape[-1]
  if n == 0:
    return A
  deg = 7 if np.finfo(A.dtype).bits <= 32 else 13
  theta, b = _PADE[deg]
  norm1 = jnp.max(jnp.sum(jnp.abs(A), axis=-2), axis=-1)
  s = jnp.maximum(0, jnp.ceil(jnp.log2(norm1 / theta)))
  s = jnp.where(jnp.isfinite(s), s, 0).astype(jnp.int32)
  scale = jnp.exp2(-s.astype(jnp.finfo(A.dtype).dtype)).astype(A.dtype)
  X = A * scale[..., None, None]
  eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), A.shape)
  X2 = X @ X
  powers = [eye, X2]
  for _ in range((deg - 1) // 2 - 1):
    powers.append(powers[-1] @ X2)
  if deg == 7:
    U = X @ sum(b[2 * i + 1] * powers[i] for i in range(4))
    V = sum(b[2 * i] * powers[i] for i in range(4))
  else:
    X4, X6 = powers[2], powers[3]
    U = X @ (X6 @ (b[13] * X6 + b[11] * X4 + b[9] * X2)
             + b[7] * X6 + b[5] * X4 + b[3] * X2 + b[1] * eye)
    V = (X6 @ (b[12] * X6 + b[10] * X4 + b[8] * X2)
         + b[6] * X6 + b[4] * X4 + b[2] * X2 + b[0] * eye)
  R = jla.solve(V - U, V + U)
  if upper_triangular:
    R = jnp.triu(R)

  def square(i, R):
    return jnp.where((i < s)[..., None, None], R @ R, R)

  R = control_flow.fori_loop(0, max_squarings, square, R)
  return jnp.where((s > max_squarings)[..., None, None], jnp.nan, R)


def expm_frechet(A, E, *, method=None, compute_expm: bool = True):
  """The Frechet derivative of ``expm`` at ``A`` in direction ``E`` (and ``expm(A)``), from the
  exponential of the block matrix [[A, E], [0, A]]."""
  jnp = _jnp()
  A, E = _inexact("expm_frechet", A, E)
  if method not in (None, "SPS", "blockEnlarge"):
    raise ValueError(f"Unknown implementation {method}")
  if A.shape != E.shape or A.ndim < 2 or A.shape[-1] != A.shape[-2]:
    raise ValueError(f"expected A and E to be square matrices of one shape, got {A.shape} and "
                     f"{E.shape}")
  n = A.shape[-1]
  big = jnp.concatenate([jnp.concatenate([A, E], axis=-1),
                         jnp.concatenate([jnp.zeros_like(A), A], axis=-1)], axis=-2)
  ex = expm(big)
  L = ex[..., :n, n:]
  return (ex[..., :n, :n], L) if compute_expm else L


# ------------------------------------------------------------------------------------------------
# Special matrices


def block_diag(*arrs):
  """The arguments (scalars, vectors as rows, matrices) along the diagonal of one matrix."""
  jnp = _jnp()
  if not arrs:
    return jnp.zeros((1, 0))
  arrs = [jnp.asarray(a) for a in arrs]
  arrs = _util.promote_dtypes(*arrs)
  mats = []
  for a in arrs:
    if a.ndim > 2:
      raise ValueError(f"Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                       f"dimensions, got {a.shape}")
    mats.append(a.reshape((1,) * (2 - a.ndim) + a.shape))
  cols = sum(m.shape[1] for m in mats)
  rows = []
  left = 0
  for m in mats:
    rows.append(jnp.pad(m, ((0, 0), (left, cols - left - m.shape[1]))))
    left += m.shape[1]
  return jnp.concatenate(rows, axis=0)


def _vec(x):
  jnp = _jnp()
  x = jnp.asarray(x)
  return x.reshape(1) if x.ndim == 0 else x


def toeplitz(c, r=None):
  """``out[..., i, j] = c[..., i - j]`` for i >= j, ``r[..., j - i]`` above the diagonal
  (``r`` defaults to ``conj(c)``); leading dims of c and r broadcast."""
  jnp = _jnp()
  _util.check_arraylike("toeplitz", c)
  c = _vec(c)
  if r is None:
    r = jnp.conj(c)
  else:
    _util.check_arraylike("toeplitz", r)
    r = _vec(r)
  c, r, batch, m, n = _column_and_row(c, r)
  if m == 0 or n == 0:
    return jnp.zeros(batch + (m, n), c.dtype)
  # one vector: r reversed (without r[0]) then c; out[i, j] = v[n - 1 + i - j]
  v = jnp.concatenate([jnp.flip(r[..., 1:], axis=-1), c], axis=-1)
  idx = (n - 1) + np.arange(m)[:, None] - np.arange(n)[None, :]
  return v[..., idx]


def _column_and_row(c, r):
  """``c`` and ``r`` of toeplitz/hankel promoted to one dtype and broadcast over their shared
  batch dims: (c, r, batch, m, n)."""
  jnp = _jnp()
  c, r = _util.promote_dtypes(c, r)
  batch = jnp.broadcast_shapes(c.shape[:-1], r.shape[:-1])
  m, n = c.shape[-1], r.shape[-1]
  return jnp.broadcast_to(c, batch + (m,)), jnp.broadcast_to(r, batch + (n,)), batch, m, n


def hankel(c, r=None):
  """``out[..., i, j] = c[..., i + j]`` while ``i + j < m``, then ``r[..., i + j - m + 1]``
  (``r`` defaults to zeros; ``r[0]`` is ignored)."""
  jnp = _jnp()
  _util.check_arraylike("hankel", c)
  c = _vec(c)
  r = jnp.zeros_like(c) if r is None else _vec(r)
  c, r, batch, m, n = _column_and_row(c, r)
  if m == 0 or n == 0:
    return jnp.zeros(batch + (m, n), c.dtype)
  v = jnp.concatenate([c, r[..., 1:]], axis=-1)
  idx = np.arange(m)[:, None] + np.arange(n)[None, :]
  return v[..., idx]


def circulant(c):
  """``out[..., i, j] = c[..., (i - j) % n]``."""
  jnp = _jnp()
  _util.check_arraylike("circulant", c)
  c = _vec(c)
  n = c.shape[-1]
  idx = (np.arange(n)[:, None] - np.arange(n)[None, :]) % max(n, 1)
  return c[..., idx] if n else jnp.zeros(c.shape + (0,), c.dtype)


def leslie(f, s):
  """Leslie matrix: first row ``f`` (fecundities), sub-diagonal ``s`` (survival)."""
  jnp = _jnp()
  _util.check_arraylike("leslie", f, s)
  f, s = jnp.atleast_1d(jnp.asarray(f)), jnp.atleast_1d(jnp.asarray(s))
  n = f.shape[-1]
  if n < 2:
    raise ValueError(f"The length of f along the last axis must be at least 2; got shape "
                     f"{f.shape}.")
  if s.shape[-1] != n - 1:
    raise ValueError(f"Incorrect lengths for f and s. The length of s along the last axis must "
                     f"be one less than the length of f; got f shape {f.shape} and s shape "
                     f"{s.shape}.")
  f, s = _util.promote_dtypes(f, s)
  batch = jnp.broadcast_shapes(f.shape[:-1], s.shape[:-1])
  f = jnp.broadcast_to(f, batch + (n,))
  s = jnp.broadcast_to(s, batch + (n - 1,))
  sub = jnp.eye(n - 1, n, dtype=f.dtype) * s[..., :, None]     # rows 1..n-1: s[i-1] at i-1
  return jnp.concatenate([f[..., None, :], sub], axis=-2)


def companion(a):
  """Companion matrix of the polynomial with coefficients ``a`` (highest degree first)."""
  jnp = _jnp()
  _util.check_arraylike("companion", a)
  a = jnp.atleast_1d(jnp.asarray(a))
  n = a.shape[-1]
  if n < 2:
    raise ValueError(f"The length of `a` along the last axis must be at least 2; got shape "
                     f"{a.shape}.")
  (a,) = _util.promote_dtypes_inexact(a)
  first = -a[..., 1:] / a[..., :1]
  sub = jnp.broadcast_to(jnp.eye(n - 2, n - 1, dtype=a.dtype), a.shape[:-1] + (n - 2, n - 1))
  return jnp.concatenate([first[..., None, :], sub], axis=-2)


def fiedler(a):
  """``out[..., i, j] = |a[..., i] - a[..., j]|``."""
  jnp = _jnp()
  _util.check_arraylike("fiedler", a)
  a = jnp.atleast_1d(jnp.asarray(a))
  return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
  """Fiedler's pentadiagonal companion matrix of the polynomial ``a`` (highest degree
  first)."""
  jnp = _jnp()
  _util.check_arraylike("fiedler_companion", a)
  a = jnp.atleast_1d(jnp.asarray(a))
  if a.shape[-1] == 0:
    raise ValueError(f"fiedler_companion requires the last axis of 'a' to have nonzero "
                     f"length, but got an array of shape {a.shape}.")
  (a,) = _util.promote_dtypes_inexact(a)
  batch = a.shape[:-1]
  size = a.shape[-1] - 1
  if size == 0:
    return jnp.zeros(batch + (0, 0), a.dtype)
  a = a / a[..., :1]
  if size == 1:
    return -a[..., 1:, None]
  # entries (row, col) <- value: build with static index lists
  rows, cols, vals = [], [], []

  def put(r, c, v):
    rows.append(r)
    cols.append(c)
    vals.append(v)
  one = jnp.ones(batch, a.dtype)
  put(0, 0, -a[..., 1])
  put(1, 0, one)
  for i in range(0, size - 1, 2):          # super-diagonal: -a[2], -a[4], ...
    put(i, i + 1, -a[..., i + 2])
  for i in range(0, size - 2, 2):          # second super-diagonal: ones
    put(i, i + 2, one)
  for i in range(2, size, 2):              # sub-diagonal: -a[3], -a[5], ...
    put(i, i - 1, -a[..., i + 1])
  for i in range(3, size, 2):              # second sub-diagonal: ones
    put(i, i - 2, one)
  out = jnp.zeros(batch + (size, size), a.dtype)
  return out.at[..., np.array(rows), np.array(cols)].set(jnp.stack(vals, axis=-1))


def convolution_matrix(a, n: int, mode: str = "full"):
  """The matrix of convolving with ``a``: ``convolution_matrix(a, n) @ v == convolve(a, v)``
  for ``len(v) == n``, modes 'full', 'valid', 'same'."""
  jnp = _jnp()
  _util.check_arraylike("convolution_matrix", a)
  a = jnp.asarray(a)
  if a.ndim == 0:
    raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
  n = int(n)
  if n <= 0:
    raise ValueError(f"n must be a positive integer; got {n}.")
  if mode not in ("full", "valid", "same"):
    raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
  m = a.shape[-1]
  if m == 0:
    raise ValueError(f"len(a) must be at least 1; got shape {a.shape}.")
  zeros = jnp.zeros(a.shape[:-1] + (n - 1,), a.dtype)
  full = toeplitz(jnp.concatenate([a, zeros], axis=-1),
                  jnp.concatenate([a[..., :1], zeros], axis=-1))
  if mode == "full":
    return full
  if mode == "valid":
    length, offset = max(m, n) - min(m, n) + 1, min(m, n) - 1
  else:
    length, offset = max(m, n), (min(n, m) - 1) // 2
  return full[..., offset:offset + length, :]


def dft(n: int, scale=None, *, dtype=None):
  """The n-point DFT matrix ``exp(-2 pi i j k / n)``, divided by ``sqrt(n)`` ('sqrtn') or ``n``
  ('n')."""
  jnp = _jnp()
  if scale not in (None, "sqrtn", "n"):
    raise ValueError(f"scale must be None, 'sqrtn', or 'n'; got {scale!r}.")
  if dtype is None:
    dtype = dtypes.canonicalize_dtype(np.complex128)
  dtype = np.dtype(dtype)
  if not np.issubdtype(dtype, np.complexfloating):
    raise ValueError(f"dtype must be a complex floating-point type; got {dtype}.")
  n = int(n)
  jk = np.outer(np.arange(n), np.arange(n)) % max(n, 1)
  m = np.exp(-2j * np.pi * jk / max(n, 1))
  if scale == "sqrtn":
    m = m / math.sqrt(n)
  elif scale == "n":
    m = m / n
  return jnp.asarray(m.astype(dtype))


def hadamard(n: int, dtype=int):
  """Sylvester's Hadamard matrix of order ``n`` (a power of 2)."""
  jnp = _jnp()
  n = int(n)
  if n < 1 or n & (n - 1):
    raise ValueError(f"n must be a positive power of 2; got {n}.")
  h = np.ones((1, 1), np.int64)
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return jnp.asarray(h, dtype=dtypes.canonicalize_dtype(dtype))


def helmert(n: int, full: bool = False):
  """The Helmert matrix of order ``n`` (without its first row unless ``full``)."""
  jnp = _jnp()
  n = int(n)
  if n < 1:
    raise ValueError(f"n must be a positive integer; got {n}.")
  h = np.tril(np.ones((n, n)), -1) - np.diag(np.arange(n))
  d = np.arange(n) * np.arange(1, n + 1)
  h[0] = 1
  d[0] = n
  out = h / np.sqrt(d)[:, None]
  out = out if full else out[1:]
  return jnp.asarray(out, dtype=dtypes.canonicalize_dtype(np.float64))


def hilbert(n: int):
  """``out[i, j] = 1 / (i + j + 1)``."""
  jnp = _jnp()
  i = np.arange(int(n))
  return jnp.asarray(1.0 / (i[:, None] + i[None, :] + 1),
                     dtype=dtypes.canonicalize_dtype(np.float64))


def invhilbert(n: int):
  """The inverse of ``hilbert(n)`` (in floating point)."""
  jnp = _jnp()
  n = int(n)
  out = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      s = i + j
      out[i, j] = ((-1) ** s * (s + 1) * math.comb(n + i, n - j - 1)
                   * math.comb(n + j, n - i - 1) * math.comb(s, i) ** 2)
  return jnp.asarray(out, dtype=dtypes.canonicalize_dtype(np.float64))


_KINDS = ["symmetric", "lower", "upper"]


def _pascal_lower(n):
  return np.array([[math.comb(i, j) for j in range(n)] for i in range(n)], np.float64) \
      .reshape(n, n)


def pascal(n: int, kind=None):
  """The Pascal matrix: binomial coefficients, 'symmetric' (default), 'lower' or 'upper'."""
  jnp = _jnp()
  kind = "symmetric" if kind is None else kind
  if kind not in _KINDS:
    raise ValueError(f"Expected kind to be one of: {_KINDS}; got {kind}")
  n = int(n)
  low = _pascal_lower(n)
  out = {"lower": low, "upper": low.T, "symmetric": low @ low.T}[kind]
  return jnp.asarray(out, dtype=dtypes.canonicalize_dtype(np.float64))


def invpascal(n: int, kind=None):
  """The inverse of ``pascal(n, kind)``."""
  jnp = _jnp()
  kind = "symmetric" if kind is None else kind
  if kind not in _KINDS:
    raise ValueError(f"Expected kind to be one of: {_KINDS}; got {kind}")
  n = int(n)
  i = np.arange(n)
  sign = (-1.0) ** (i[:, None] + i[None, :])
  inv_low = _pascal_lower(n) * sign
  out = {"lower": inv_low, "upper": inv_low.T, "symmetric": inv_low.T @ inv_low}[kind]
  return jnp.asarray(out, dtype=dtypes.canonicalize_dtype(np.float64))
