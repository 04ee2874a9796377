"""The host-only primitives of ``lax.linalg`` (re-exported there): ``eig``, ``schur`` and the
Householder reductions in LAPACK's conventions (``geqrf``, ``hessenberg``, ``tridiagonal``).

They have NumPy implementations (LAPACK through ``numpy.linalg``, or LAPACK's algorithms written
out in NumPy where NumPy has no binding), batching rules, and no lowering: a jitted function
holding one runs op by op (``backends.compile_jaxpr`` falls back to the jaxpr evaluator), as one
with a host callback does.  Only ``eig`` has a derivative, as in JAX: of its eigenvalues, and of
its eigenvectors when asked for (``enable_eigvec_derivs``).
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from ourjax import dtypes
from ourjax.core import Primitive, ShapedArray
from ourjax.interpreters import ad
from ourjax.lax._schur_lapack import gees
from ourjax.lax.linalg import (_check_lapack_dtype, _check_matrix, _flat_batch, _front_batcher,
                               _jnp, _real_dtype)

# ------------------------------------------------------------------------------------------------
# eig (general matrices; host only)


def eig(x, *, compute_left_eigenvectors: bool = True, compute_right_eigenvectors: bool = True,
        enable_eigvec_derivs: bool = False, implementation=None, use_magma=None):
  """Eigenvalues (complex) of (a batch of) square matrices, then the left and/or right
  eigenvectors (columns, unit norm, largest component real, as LAPACK's) as asked:
  ``[w, vl, vr]``.  Eigenvectors are differentiable only with ``enable_eigvec_derivs`` (as
  JAX; their derivative grows like 1 / min |w_i - w_j|)."""
  x = _jnp().asarray(x)
  return eig_p.bind(x, compute_left_eigenvectors=bool(compute_left_eigenvectors),
                    compute_right_eigenvectors=bool(compute_right_eigenvectors),
                    enable_eigvec_derivs=bool(enable_eigvec_derivs))


def _complex_dtype(dtype):
  return dtypes.to_complex_dtype(np.dtype(dtype))


def _eig_abstract_eval(x, *, compute_left_eigenvectors, compute_right_eigenvectors,
                       enable_eigvec_derivs):
  _check_matrix("eig", x, square=True)
  _check_lapack_dtype("eig", x)
  c = _complex_dtype(x.dtype)
  out = [ShapedArray(x.shape[:-1], c)]
  out += [ShapedArray(x.shape, c)] * (int(compute_left_eigenvectors)
                                      + int(compute_right_eigenvectors))
  return out


def _unit_phase(v):
  """Columns scaled to unit norm with their largest-magnitude component real and positive."""
  if v.size == 0:
    return v
  v = v / np.linalg.norm(v, axis=-2, keepdims=True)
  p = np.argmax(np.abs(v), axis=-2)[..., None, :]
  top = np.take_along_axis(v, p, axis=-2)
  return v * (np.conj(top) / np.where(top == 0, 1, np.abs(top)))


def _eig_impl(x, *, compute_left_eigenvectors, compute_right_eigenvectors,
              enable_eigvec_derivs):
  c = _complex_dtype(x.dtype)
  if x.shape[-1] == 0:
    w, vr = np.zeros(x.shape[:-1], c), np.zeros(x.shape, c)
  elif not np.all(np.isfinite(x)):    # LAPACK's geev gives NaNs for non-finite inputs
    w, vr = np.full(x.shape[:-1], np.nan, c), np.full(x.shape, np.nan, c)
  else:
    w, vr = np.linalg.eig(x)
  w, vr = w.astype(c), _unit_phase(vr).astype(c)
  out = [w]
  if compute_left_eigenvectors:
    with np.errstate(all="ignore"):
      try:
        vl = np.conj(np.swapaxes(np.linalg.inv(vr), -1, -2))
      except np.linalg.LinAlgError:
        vl = np.full(x.shape, np.nan, c)
      vl = _unit_phase(vl)
    out.append(vl.astype(c))
  if compute_right_eigenvectors:
    out.append(vr)
  return out


def _eigvec_tangent(v, w, m):
  """Tangent of eigenvectors ``v`` (columns; unit norm, largest component real) of a matrix with
  eigenvalues ``w``, given ``m = V^{-1} dA V``: V (F * m), F_ij = 1 / (w_j - w_i) off the
  diagonal, plus the multiple of each v that keeps its norm (Re v^H dv = 0) and keeps its
  largest component real."""
  jnp = _jnp()
  from ourjax import lax
  n = w.shape[-1]
  eye = jnp.eye(n, dtype=bool)
  gap = w[..., None, :] - w[..., :, None]
  f = jnp.where(eye, 0, 1 / jnp.where(eye, 1, gap)).astype(v.dtype)
  dv = v @ (f * m)
  alpha = -jnp.real(jnp.sum(jnp.conj(v) * dv, axis=-2))
  p = lax.stop_gradient(jnp.argmax(jnp.abs(v), axis=-2))[..., None, :]
  top = jnp.real(jnp.take_along_axis(v, p, axis=-2))[..., 0, :]
  beta = -jnp.imag(jnp.take_along_axis(dv, p, axis=-2))[..., 0, :] / top
  return dv + v * lax.complex(alpha, beta)[..., None, :]


def _eig_jvp(primals, tangents, *, compute_left_eigenvectors, compute_right_eigenvectors,
             enable_eigvec_derivs):
  jnp = _jnp()
  (x,), (dx,) = primals, tangents
  params = dict(compute_left_eigenvectors=compute_left_eigenvectors,
                compute_right_eigenvectors=compute_right_eigenvectors,
                enable_eigvec_derivs=enable_eigvec_derivs)
  outs = eig_p.bind(x, **params)
  if type(dx) is ad.Zero:
    return outs, [ad.Zero.from_primal_value(o) for o in outs]
  if (compute_left_eigenvectors or compute_right_eigenvectors) and not enable_eigvec_derivs:
    raise NotImplementedError(
        "Derivatives of non-symmetric eigenvectors are only valid under assumptions on the "
        "input that ourjax cannot check (see the enable_eigvec_derivs argument to "
        "lax.linalg.eig). Pass enable_eigvec_derivs=True to lax.linalg.eig to opt in. See "
        "https://github.com/jax-ml/jax/issues/2748 for discussion.")
  from ourjax.numpy import linalg as jla
  w, vr = eig_p.bind(x, compute_left_eigenvectors=False, compute_right_eigenvectors=True,
                     enable_eigvec_derivs=True)
  c = vr.dtype
  da = dx.astype(c)
  m = jla.solve(vr, da @ vr)                                   # V^{-1} dA V
  tans = [jnp.diagonal(m, axis1=-2, axis2=-1)]                 # dw_i = m_ii
  if compute_left_eigenvectors:
    # the left eigenvectors are the right ones of A^H, whose eigenvalues are conj(w)
    vl = outs[1]
    dah = jnp.conj(jnp.swapaxes(da, -1, -2))
    tans.append(_eigvec_tangent(vl, jnp.conj(w), jla.solve(vl, dah @ vl)))
  if compute_right_eigenvectors:
    tans.append(_eigvec_tangent(vr, w, m))
  return outs, tans


eig_p = Primitive("eig")
eig_p.multiple_results = True
eig_p.def_abstract_eval(_eig_abstract_eval)
eig_p.def_impl(_eig_impl)
ad.jvp_rules[eig_p] = _eig_jvp
_front_batcher(eig_p)


# ------------------------------------------------------------------------------------------------
# Schur (host only): from the eigendecomposition


def schur(x, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable=None):
  """Schur decomposition ``x = S T S^H``: ``(T, S)``.  Real input gives the real Schur form
  (T quasi upper triangular, 2 x 2 blocks for complex conjugate eigenvalue pairs), complex input
  the complex one (T upper triangular), both by LAPACK's ``?gees`` algorithm written out in
  NumPy on the host (``_schur_lapack``: the same T and S as JAX's for small and medium
  matrices)."""
  if sort_eig_vals or select_callable is not None:
    raise NotImplementedError("lax.linalg.schur: sorting/selecting eigenvalues is not "
                              "supported by ourjax")
  x = _jnp().asarray(x)
  t, s = schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors))
  return (t, s) if compute_schur_vectors else t


def _schur_abstract_eval(x, *, compute_schur_vectors):
  _check_matrix("schur", x, square=True)
  _check_lapack_dtype("schur", x)
  return [ShapedArray(x.shape, x.dtype), ShapedArray(x.shape, x.dtype)]


def _schur_impl(x, *, compute_schur_vectors):
  flat, _ = _flat_batch(x)
  ts, ss = np.empty_like(flat), np.empty_like(flat)
  for i, a in enumerate(flat):
    ts[i], ss[i] = gees(a)
  return [ts.reshape(x.shape), ss.reshape(x.shape)]


schur_p = Primitive("schur")
schur_p.multiple_results = True
schur_p.def_abstract_eval(_schur_abstract_eval)
schur_p.def_impl(_schur_impl)
_front_batcher(schur_p)


# ------------------------------------------------------------------------------------------------
# Householder reductions in LAPACK's conventions (host only): geqrf, Hessenberg, tridiagonal


def _larfg(alpha, x):
  """LAPACK's elementary reflector: (beta, tau, v_tail) with (I - tau v v^H)^H [alpha; x] =
  [beta; 0], v = [1; v_tail], beta real; tau = 0 (no reflection) when x is zero and alpha
  real."""
  xnorm = np.linalg.norm(x) if x.size else 0.0
  if xnorm == 0 and np.imag(alpha) == 0:
    return alpha, np.zeros((), x.dtype), np.zeros_like(x)
  beta = -math.copysign(math.hypot(abs(alpha), xnorm), np.real(alpha))
  tau = (beta - alpha) / beta
  return beta, tau, x / (alpha - beta)


def _geqrf_one(a):
  a = a.copy()
  m, n = a.shape
  k = builtins.min(m, n)
  taus = np.zeros(k, a.dtype)
  for i in range(k):
    beta, tau, v = _larfg(a[i, i], a[i + 1:, i])
    a[i, i], a[i + 1:, i], taus[i] = beta, v, tau
    vv = np.concatenate([[1], v]).astype(a.dtype)
    a[i:, i + 1:] -= np.conj(tau) * np.outer(vv, np.conj(vv) @ a[i:, i + 1:])
  return a, taus


def _gehrd_one(a):
  a = a.copy()
  n = a.shape[0]
  taus = np.zeros(builtins.max(n - 1, 0), a.dtype)
  for i in range(n - 1):     # (the last step makes a complex sub-diagonal entry real)
    beta, tau, v = _larfg(a[i + 1, i], a[i + 2:, i])
    a[i + 1, i], a[i + 2:, i], taus[i] = beta, v, tau
    vv = np.concatenate([[1], v]).astype(a.dtype)
    a[:, i + 1:] -= tau * np.outer(a[:, i + 1:] @ vv, np.conj(vv))
    a[i + 1:, i + 1:] -= np.conj(tau) * np.outer(vv, np.conj(vv) @ a[i + 1:, i + 1:])
  return a, taus


def _sytrd_one(a, lower):
  """Hermitian tridiagonal reduction as LAPACK's sytd2/hetd2: (packed a, d, e, taus); the
  triangle not named by ``lower`` is returned as given."""
  a = a.copy()
  n = a.shape[0]
  rdt = _real_dtype(a.dtype)
  d, e = np.zeros(n, rdt), np.zeros(builtins.max(n - 1, 0), rdt)
  taus = np.zeros(builtins.max(n - 1, 0), a.dtype)
  if n == 0:
    return a, d, e, taus
  idx = np.arange(n)
  if np.iscomplexobj(a):
    a[idx, idx] = a[idx, idx].real

  def herm(m):      # the Hermitian matrix that the named triangle stands for
    if lower:
      return np.tril(m) + np.conj(np.tril(m, -1)).T
    return np.triu(m) + np.conj(np.triu(m, 1)).T

  def update(sub, vv, tau):   # sub - v w^H - w v^H, w = x - tau/2 (x^H v) v, x = tau sub v
    x = tau * (sub @ vv)
    w = x - 0.5 * tau * (np.conj(x) @ vv) * vv
    return sub - np.outer(vv, np.conj(w)) - np.outer(w, np.conj(vv))

  if lower:
    for i in range(n - 1):
      beta, tau, v = _larfg(a[i + 1, i], a[i + 2:, i])
      e[i] = np.real(beta)
      vv = np.concatenate([[1], v]).astype(a.dtype)
      if tau != 0:
        sub = update(herm(a[i + 1:, i + 1:]), vv, tau)
        keep = np.tril(np.ones(sub.shape, bool))
        blk = a[i + 1:, i + 1:]
        blk[keep] = sub[keep]
      a[i + 1, i], a[i + 2:, i] = e[i], v
      d[i], taus[i] = np.real(a[i, i]), tau
    d[n - 1] = np.real(a[n - 1, n - 1])
  else:
    for i in range(n - 2, -1, -1):
      # annihilate a[:i, i + 1]; the reflector's 1 sits at row i
      beta, tau, v = _larfg(a[i, i + 1], a[:i, i + 1])
      e[i] = np.real(beta)
      vv = np.concatenate([v, [1]]).astype(a.dtype)
      if tau != 0:
        sub = update(herm(a[:i + 1, :i + 1]), vv, tau)
        keep = np.triu(np.ones(sub.shape, bool))
        blk = a[:i + 1, :i + 1]
        blk[keep] = sub[keep]
      a[i, i + 1], a[:i, i + 1] = e[i], v
      d[i + 1], taus[i] = np.real(a[i + 1, i + 1]), tau
    d[0] = np.real(a[0, 0])
  return a, d, e, taus


def _householder_prim(name, one, shapes):
  """A host-only primitive mapping ``one`` (one matrix -> tuple of arrays) over the batch;
  ``shapes(aval, **params)`` gives the results' (shape without batch, dtype)."""
  p = Primitive(name)
  p.multiple_results = True

  def abstract_eval(x, **params):
    _check_matrix(name, x, square=name in ("hessenberg", "tridiagonal"))
    _check_lapack_dtype(name, x)
    return [ShapedArray(x.shape[:-2] + sh, dt) for sh, dt in shapes(x, **params)]

  def impl(x, **params):
    flat, batch = _flat_batch(x)
    specs = shapes(ShapedArray(x.shape, x.dtype), **params)
    outs = [one(a, **params) for a in flat]
    return [np.stack([o[j] for o in outs]).reshape(batch + sh) if outs else
            np.zeros(batch + sh, dt) for j, (sh, dt) in enumerate(specs)]

  p.def_abstract_eval(abstract_eval)
  p.def_impl(impl)
  _front_batcher(p)
  return p


def _k(n):
  return builtins.max(n - 1, 0)


geqrf_p = _householder_prim(
    "geqrf", _geqrf_one,
    lambda x: [(x.shape[-2:], x.dtype), ((builtins.min(x.shape[-2:]),), x.dtype)])
hessenberg_p = _householder_prim(
    "hessenberg", _gehrd_one,
    lambda x: [(x.shape[-2:], x.dtype), ((_k(x.shape[-1]),), x.dtype)])
tridiagonal_p = _householder_prim(
    "tridiagonal", _sytrd_one,
    lambda x, lower: [(x.shape[-2:], x.dtype), (x.shape[-1:], _real_dtype(x.dtype)),
                      ((_k(x.shape[-1]),), _real_dtype(x.dtype)),
                      ((_k(x.shape[-1]),), x.dtype)])


def _qr_pivots_one(a):
  """The column order of LAPACK's QR with column pivoting (geqp3): at each step the remaining
  column of largest norm below the current row (the first of equal ones)."""
  a = a.copy()
  m, n = a.shape
  perm = np.arange(n, dtype=np.int32)
  for j in range(builtins.min(m, n)):
    norms = np.linalg.norm(a[j:, j:], axis=0)
    k = j + int(np.argmax(norms))
    if k != j:
      a[:, [j, k]] = a[:, [k, j]]
      perm[[j, k]] = perm[[k, j]]
    beta, tau, v = _larfg(a[j, j], a[j + 1:, j])
    a[j, j], a[j + 1:, j] = beta, 0
    vv = np.concatenate([[1], v]).astype(a.dtype)
    a[j:, j + 1:] -= np.conj(tau) * np.outer(vv, np.conj(vv) @ a[j:, j + 1:])
  return (perm,)


qr_pivots_p = _householder_prim("qr_pivots", _qr_pivots_one,
                                lambda x: [(x.shape[-1:], np.dtype(np.int32))])
ad.defjvp_zero(qr_pivots_p)


def qr_pivots(a):
  """The column permutation ``p`` of the pivoted QR ``a[..., p] = q r`` (LAPACK's geqp3)."""
  return qr_pivots_p.bind(_jnp().asarray(a))[0]


def geqrf(a):
  """LAPACK's packed QR: (R on and above the diagonal with the reflectors below it, taus)."""
  return tuple(geqrf_p.bind(_jnp().asarray(a)))


def hessenberg(a):
  """Upper Hessenberg reduction (LAPACK's gehrd): (packed a, taus), H on and above the first
  sub-diagonal and the reflectors below it."""
  return tuple(hessenberg_p.bind(_jnp().asarray(a)))


def tridiagonal(a, *, lower: bool = True):
  """Hermitian tridiagonal reduction (LAPACK's sytrd/hetrd): (packed a, d, e, taus)."""
  return tuple(tridiagonal_p.bind(_jnp().asarray(a), lower=bool(lower)))


#: Primitives with no lowering: a jitted function holding one runs op by op on the host
#: (``backends.compile_jaxpr`` falls back to the jaxpr evaluator), as host callbacks do.
HOST_ONLY = frozenset({eig_p, schur_p, geqrf_p, hessenberg_p, tridiagonal_p, qr_pivots_p})
