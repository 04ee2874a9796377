"""``lax.linalg`` and the jnp.linalg routines built on it, against NumPy (float64 / complex128
references), finite differences and the decompositions' defining identities: eager (LAPACK),
jitted (the compiled compositions for real dtypes, the host for complex ones), vmapped, and
with complex operands."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.config import enable_x64

LA = lax.linalg


def _rand(rng, shape, dtype=np.float32):
  x = rng.standard_normal(shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * rng.standard_normal(shape)
  return x.astype(dtype)


def _tol(dtype):
  return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _ct(x):
  return np.conj(np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_lu_reconstructs_and_matches_lapack_pivots(dtype, mode):
  rng = np.random.default_rng(0)
  f = LA.lu if mode == "eager" else ourjax.jit(LA.lu)
  for shape in [(4, 4), (3, 5), (5, 3), (2, 3, 3)]:
    a = _rand(rng, shape, dtype)
    lu, piv, perm = f(a)
    lu, piv, perm = np.asarray(lu), np.asarray(piv), np.asarray(perm)
    m, n = shape[-2:]
    k = min(m, n)
    assert piv.dtype == np.int32 and piv.shape == shape[:-2] + (k,)
    assert perm.shape == shape[:-2] + (m,)
    l = np.tril(lu[..., :, :k], -1) + np.eye(m, k)
    u = np.triu(lu[..., :k, :])
    pa = np.take_along_axis(a, perm[..., :, None], axis=-2)
    np.testing.assert_allclose(l @ u, pa, rtol=_tol(dtype), atol=_tol(dtype))
    # partial pivoting: |L| <= 1 (complex: LAPACK pivots on the largest |re| + |im|, so the
    # modulus of L is only bounded by sqrt(2)); the permutation is the pivots' row swaps
    bound = 1.0 if np.dtype(dtype).kind == "f" else np.sqrt(2.0)
    assert np.all(np.abs(l) <= bound + 1e-6)
    np.testing.assert_array_equal(LA.lu_pivots_to_permutation(piv, m), perm)


def test_lu_pivots_to_permutation_applies_the_swaps():
  piv = np.array([[2, 2, 3], [0, 3, 3]], np.int32)
  want = []
  for row in piv:
    p = list(range(5))
    for i, j in enumerate(row):
      p[i], p[j] = p[j], p[i]
    want.append(p)
  np.testing.assert_array_equal(LA.lu_pivots_to_permutation(piv, 5), want)
  np.testing.assert_array_equal(ourjax.jit(lambda p: LA.lu_pivots_to_permutation(p, 5))(piv),
                                want)


def test_lu_row_swaps_are_exact_under_jit():
  # rows of very different magnitudes: swapping them by arithmetic would round the small
  # row away (L[1, 0] became 0 and U[1, 1] 3 - 0)
  a = np.array([[1e-3, 3.0], [1e8, 1.0]], np.float32)
  for f in (LA.lu, ourjax.jit(LA.lu)):
    lu, piv, perm = (np.asarray(v) for v in f(a))
    np.testing.assert_array_equal(perm, [1, 0])
    l10 = np.float32(1e-3) / np.float32(1e8)
    assert lu[1, 0] == l10 and lu[0, 0] == np.float32(1e8) and lu[0, 1] == 1.0
    assert lu[1, 1] == np.float32(3.0) - l10 * np.float32(1.0)
  # eager and jit agree (as one kernel would): a solve of a tensor system matches too
  rng = np.random.default_rng(3)
  for shape in [(6, 6), (2, 5, 5)]:
    x = _rand(rng, shape) * 3
    for e, j in zip(LA.lu(x), ourjax.jit(LA.lu)(x)):
      np.testing.assert_allclose(np.asarray(e), np.asarray(j), rtol=1e-6, atol=1e-6)
  a4, b2 = _rand(rng, (2, 1, 3, 6)), _rand(rng, (1, 6))
  f = lambda a, b: jnp.linalg.tensorsolve(a, b, axes=(0, 2))     # noqa: E731
  np.testing.assert_allclose(ourjax.jit(f)(a4, b2), f(a4, b2), rtol=1e-6, atol=1e-6)


def test_lu_of_a_zero_matrix_is_zero():
  lu, piv, _ = LA.lu(np.zeros((2, 2), np.float32))
  np.testing.assert_array_equal(lu, 0)
  np.testing.assert_array_equal(ourjax.jit(LA.lu)(np.zeros((2, 2), np.float32))[0], 0)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_triangular_solve_every_option(dtype):
  rng = np.random.default_rng(1)
  a = _rand(rng, (2, 4, 4), dtype) + 4 * np.eye(4, dtype=dtype)
  for left in (True, False):
    b = _rand(rng, (2, 4, 3) if left else (2, 3, 4), dtype)
    for lower in (True, False):
      for trans in (False, True):
        for conj in (False, True):
          for unit in (False, True):
            t = np.tril(a) if lower else np.triu(a)
            if unit:
              t = t * (1 - np.eye(4)) + np.eye(4)
            op = np.swapaxes(t, -1, -2) if trans else t
            op = np.conj(op) if conj else op
            hi = np.result_type(dtype, np.float64)
            want = (np.linalg.solve(op.astype(hi), b) if left else
                    np.swapaxes(np.linalg.solve(np.swapaxes(op, -1, -2).astype(hi),
                                                np.swapaxes(b, -1, -2)), -1, -2))
            kw = dict(left_side=left, lower=lower, transpose_a=trans, conjugate_a=conj,
                      unit_diagonal=unit)
            for f in (LA.triangular_solve, ourjax.jit(LA.triangular_solve,
                                                      static_argnames=tuple(kw))):
              got = f(a, b, **kw)
              np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-4, atol=1e-4,
                                         err_msg=str(kw))


def test_triangular_solve_vector_rhs_and_singular_input():
  a = np.triu(np.arange(1.0, 10.0, dtype=np.float32).reshape(3, 3))
  b = np.ones(3, np.float32)
  np.testing.assert_allclose(LA.triangular_solve(a, b, left_side=True), np.linalg.solve(a, b),
                             rtol=1e-5)
  x = LA.triangular_solve(np.array([[[1, 1], [0, 0]]], np.float32),
                          np.array([[[1], [1]]], np.float32), left_side=True)
  assert not np.all(np.isfinite(x))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_cholesky_eigh_qr_svd_identities(dtype):
  rng = np.random.default_rng(2)
  tol = 2e-4
  for jit in (False, True):
    w = (lambda f: ourjax.jit(f)) if jit else (lambda f: f)
    a = _rand(rng, (2, 4, 6), dtype)
    spd = a @ _ct(a) + np.eye(4, dtype=dtype)
    L = np.asarray(w(LA.cholesky)(spd))
    np.testing.assert_allclose(L @ _ct(L), spd, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.triu(L, 1), 0)
    v, ev = w(LA.eigh)(spd)
    assert ev.dtype == np.finfo(dtype).dtype
    np.testing.assert_allclose(ev, np.linalg.eigvalsh(spd.astype(np.complex128)), rtol=tol)
    np.testing.assert_allclose(np.asarray(v) @ (np.asarray(ev)[..., None] * _ct(v)), spd,
                               rtol=tol, atol=tol)
    x = _rand(rng, (2, 5, 3), dtype)
    for full in (False, True):
      q, r = w(lambda x, f=full: LA.qr(x, full_matrices=f))(x)
      assert q.shape == ((2, 5, 5) if full else (2, 5, 3))
      np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), x, rtol=tol, atol=tol)
      np.testing.assert_allclose(_ct(q) @ np.asarray(q),
                                 np.broadcast_to(np.eye(q.shape[-1]), (2,) + q.shape[-1:] * 2),
                                 atol=tol)
      np.testing.assert_array_equal(np.tril(r, -1), 0)
      u, s, vh = w(lambda x, f=full: LA.svd(x, full_matrices=f))(x)
      np.testing.assert_allclose(s, np.linalg.svd(x.astype(np.complex128), compute_uv=False),
                                 rtol=tol)
      np.testing.assert_allclose((np.asarray(u)[..., :, :3] * np.asarray(s)[..., None, :])
                                 @ np.asarray(vh)[..., :3, :], x, rtol=tol, atol=tol)


def test_failed_cholesky_is_nan_as_jax():
  # JAX 0.10: NaN in the lower triangle, zeros above
  out = np.asarray(LA.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)))
  assert np.isnan(out[0, 0]) and np.isnan(out[1, 0]) and np.isnan(out[1, 1]) and out[0, 1] == 0


def test_eig_eigenvalues_eigenvectors_and_left_vectors():
  rng = np.random.default_rng(3)
  a = rng.standard_normal((2, 4, 4)).astype(np.float32)
  w, vl, vr = LA.eig(a)
  assert w.dtype == np.complex64
  np.testing.assert_allclose(a @ np.asarray(vr), np.asarray(vr) * np.asarray(w)[..., None, :],
                             atol=1e-4)
  np.testing.assert_allclose(_ct(vl) @ a, np.asarray(w)[..., :, None] * _ct(vl), atol=1e-4)
  # jit runs it on the host
  wj = ourjax.jit(lambda x: LA.eig(x, compute_left_eigenvectors=False,
                                   compute_right_eigenvectors=False)[0])(a)
  np.testing.assert_allclose(np.sort_complex(wj), np.sort_complex(np.linalg.eigvals(a)),
                             atol=1e-4)


def test_tridiagonal_solve_matches_dense_and_grad():
  rng = np.random.default_rng(4)
  dl, d, du = (rng.standard_normal((2, 5)) for _ in range(3))
  d = d + 4
  dl[:, 0] = 0
  du[:, -1] = 0
  b = rng.standard_normal((2, 5, 3))

  def dense_of(d):   # row i: dl[i] at column i-1, d[i] at i, du[i] at i+1
    return (np.eye(5) * d[:, :, None] + np.eye(5, k=-1) * dl[:, :, None]
            + np.eye(5, k=1) * du[:, :, None])
  dense = dense_of(d)
  with enable_x64(True):
    got = LA.tridiagonal_solve(dl, d, du, b)
    np.testing.assert_allclose(got, np.linalg.solve(dense, b), rtol=1e-10)
    g = ourjax.grad(lambda d: jnp.sum(LA.tridiagonal_solve(dl, d, du, b) ** 2))(d)
    eps = 1e-6
    e = np.zeros_like(d)
    e[1, 2] = eps
    f = lambda d: np.sum(np.linalg.solve(dense_of(d), b) ** 2)
    np.testing.assert_allclose(g[1, 2], (f(d + e) - f(d - e)) / (2 * eps), rtol=1e-5)


def test_householder_product_builds_q_from_reflectors():
  rng = np.random.default_rng(5)
  m, n, k = 5, 3, 3
  a = rng.standard_normal((m, n))
  taus = rng.standard_normal(k)
  want = np.eye(m)
  for i in range(k):
    v = np.zeros(m)
    v[i] = 1
    v[i + 1:] = a[i + 1:, i]
    want = want @ (np.eye(m) - taus[i] * np.outer(v, v))
  with enable_x64(True):
    np.testing.assert_allclose(LA.householder_product(a, taus), want[:, :n], rtol=1e-12)


# ------------------------------------------------------------------------------------------------
# jnp.linalg on the primitives


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_jnp_linalg_against_numpy(dtype):
  rng = np.random.default_rng(6)
  a = _rand(rng, (3, 4, 4), dtype) + 2 * np.eye(4, dtype=dtype)
  b = _rand(rng, (3, 4, 2), dtype)
  ref = a.astype(np.complex128)
  for f in (lambda g: g, ourjax.jit):
    np.testing.assert_allclose(f(jnp.linalg.solve)(a, b), np.linalg.solve(ref, b), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(f(jnp.linalg.inv)(a), np.linalg.inv(ref), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(f(jnp.linalg.det)(a), np.linalg.det(ref), rtol=1e-4)
    sign, logdet = f(jnp.linalg.slogdet)(a)
    rs, rl = np.linalg.slogdet(ref)
    np.testing.assert_allclose(sign, rs, rtol=1e-4)
    np.testing.assert_allclose(logdet, rl, rtol=1e-4)
    np.testing.assert_allclose(f(jnp.linalg.pinv)(a), np.linalg.pinv(ref), rtol=1e-3, atol=1e-4)
  np.testing.assert_allclose(jnp.linalg.cond(a), np.linalg.cond(ref), rtol=1e-3)
  np.testing.assert_allclose(jnp.linalg.cond(a, 1), np.linalg.cond(ref, 1), rtol=1e-3)
  np.testing.assert_allclose(np.sort_complex(jnp.linalg.eigvals(a[0])),
                             np.sort_complex(np.linalg.eigvals(ref[0])), rtol=1e-4, atol=1e-4)


def test_tensorsolve_and_tensorinv_against_numpy():
  rng = np.random.default_rng(7)
  a = rng.standard_normal((2, 3, 6)) + np.eye(6).reshape(2, 3, 6) * 3
  b = rng.standard_normal((2, 3))
  with enable_x64(True):
    np.testing.assert_allclose(jnp.linalg.tensorsolve(a, b), np.linalg.tensorsolve(a, b),
                               rtol=1e-10)
    a4 = rng.standard_normal((4, 6, 8, 3))
    np.testing.assert_allclose(jnp.linalg.tensorinv(a4, ind=2), np.linalg.tensorinv(a4, ind=2),
                               rtol=1e-8)


def _fd_grad(f, x, eps=1e-6):
  g = np.zeros_like(x)
  for idx in np.ndindex(*x.shape):
    e = np.zeros_like(x)
    e[idx] = eps
    g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
  return g


def test_det_gradient_is_the_adjugate_also_at_singular_matrices():
  rng = np.random.default_rng(8)
  with enable_x64(True):
    for a in [rng.standard_normal((3, 3)),
              np.outer([1.0, 2, 3], [4.0, 5, 6]) + np.outer([0.0, 1, 1], [1.0, 0, 2]),  # rank 2
              np.outer([1.0, 2, 3], [4.0, 5, 6])]:                                       # rank 1
      g = ourjax.grad(jnp.linalg.det)(a)
      np.testing.assert_allclose(g, _fd_grad(np.linalg.det, a), rtol=1e-6, atol=1e-8)


def test_solve_and_inv_gradients_match_finite_differences():
  rng = np.random.default_rng(9)
  a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
  b = rng.standard_normal((3, 2))
  with enable_x64(True):
    for f, ref in [(lambda a: jnp.sum(jnp.sin(jnp.linalg.solve(a, b))),
                    lambda a: np.sum(np.sin(np.linalg.solve(a, b)))),
                   (lambda a: jnp.sum(jnp.linalg.inv(a) ** 2),
                    lambda a: np.sum(np.linalg.inv(a) ** 2)),
                   (lambda a: jnp.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1])]:
      np.testing.assert_allclose(ourjax.grad(f)(a), _fd_grad(ref, a), rtol=1e-6, atol=1e-8)
      np.testing.assert_allclose(ourjax.jit(ourjax.grad(f))(a), _fd_grad(ref, a), rtol=1e-6,
                                 atol=1e-8)


def test_errors_name_the_operation():
  with pytest.raises(ValueError, match="pinv: only one of rtol and rcond"):
    jnp.linalg.pinv(jnp.ones((3, 3)), rtol=1e-2, rcond=1e-2)
  with pytest.raises(ValueError, match="matrix_rank: only one of tol or rtol"):
    jnp.linalg.matrix_rank(jnp.ones((3, 3)), rtol=1e-2, tol=1e-2)
  with pytest.raises(ValueError, match="Invalid order 'inf' for vector norm"):
    jnp.linalg.norm(jnp.ones(3), ord="inf")
  with pytest.raises(ValueError, match=r"cholesky: .*square.*f32\[2,3\]"):
    LA.cholesky(jnp.ones((2, 3)))
  with pytest.raises(TypeError, match="triangular_solve: a and b must have the same dtype"):
    LA.triangular_solve(jnp.eye(2), jnp.ones((2, 2), jnp.int32))


def test_pinv_derivative_also_at_repeated_singular_values():
  # at the identity d pinv = -dA, so the Jacobian is -delta_ik delta_jl (through the SVD, whose
  # singular values are equal there, it would be NaN)
  jac = ourjax.jacobian(jnp.linalg.pinv)(jnp.eye(2, dtype=jnp.float32))
  want = -np.einsum("ik,jl->ijkl", np.eye(2), np.eye(2))
  np.testing.assert_allclose(jac, want, atol=1e-6)
  rng = np.random.default_rng(10)
  with enable_x64(True):
    a = rng.standard_normal((4, 3))
    g = ourjax.grad(lambda a: jnp.sum(jnp.sin(jnp.linalg.pinv(a))))(a)
    np.testing.assert_allclose(g, _fd_grad(lambda a: np.sum(np.sin(np.linalg.pinv(a))), a),
                               rtol=1e-6, atol=1e-8)


def test_tridiagonal_solve_singular_with_and_without_perturbation():
  z = np.zeros(3, np.float32)
  b = np.ones((3, 1), np.float32)
  x = LA.tridiagonal_solve(z, z, z, b)
  assert not np.all(np.isfinite(x))
  x = LA.tridiagonal_solve(z, z, z, b, perturb_singular=True)
  assert np.all(np.isfinite(x)) and np.all(np.abs(x) > 1e6)


def test_narrow_dtypes_as_jax_on_cpu():
  with pytest.raises(NotImplementedError, match="Unsupported dtype float16"):
    jnp.linalg.qr(np.ones((5, 6), np.float16))
  # LU-based routines take them (computed in float32)
  a = (np.eye(3) * 2).astype(np.float16)
  assert jnp.linalg.det(a) == 8 and jnp.linalg.det(a).dtype == np.float16
  np.testing.assert_array_equal(jnp.linalg.solve(a, np.ones(3, np.float16)), 0.5)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_householder_reductions_reconstruct(dtype):
  """geqrf, hessenberg and tridiagonal (LAPACK's packed forms): the reflectors rebuild Q with
  householder_product and Q (R | H | T) Q^H gives the input back."""
  rng = np.random.default_rng(11)
  with enable_x64(True):
    a = _rand(rng, (2, 5, 3), dtype)
    h, tau = LA.geqrf(a)
    q = np.asarray(LA.householder_product(h, tau))
    np.testing.assert_allclose(q @ np.triu(np.asarray(h)[..., :3, :]), a, atol=1e-12)
    s = _rand(rng, (5, 5), dtype)
    packed, taus = LA.hessenberg(s)
    hm = np.triu(np.asarray(packed), -1)
    qs = np.eye(5, dtype=dtype)
    qs[1:, 1:] = LA.householder_product(np.asarray(packed)[1:, :4], taus)
    np.testing.assert_allclose(qs @ hm @ _ct(qs), s, atol=1e-12)
    herm = s + _ct(s)
    for lower in (True, False):
      packed, d, e, taus = (np.asarray(v) for v in LA.tridiagonal(herm, lower=lower))
      t = np.diag(d) + np.diag(e, -1) + np.diag(e, 1)
      if lower:
        qt = np.eye(5, dtype=dtype)
        qt[1:, 1:] = LA.householder_product(packed[1:, :4], taus)
      else:     # reflectors H(n-2) ... H(0), each with its 1 at row i, above it in column i + 1
        qt = np.eye(5, dtype=dtype)
        for i in range(3, -1, -1):
          v = np.zeros(5, dtype)
          v[i] = 1
          v[:i] = packed[:i, i + 1]
          qt = qt @ (np.eye(5) - taus[i] * np.outer(v, np.conj(v)))
      np.testing.assert_allclose(qt @ t @ _ct(qt), herm, atol=1e-12, err_msg=str(lower))


@pytest.mark.parametrize("name", ["cholesky", "lu", "qr", "triangular_solve", "eigh"])
def test_compiled_decompositions_run_their_products_at_full_precision(name):
  """The compositions' products (one-hot row and column selections included) are at the
  highest precision whatever the default: at a GPU's default (TF32) they would round the
  matrices' elements, which JAX's solvers do not."""
  rng = np.random.default_rng(0)
  a = _rand(rng, (5, 5))
  spd = a @ a.T + 5 * np.eye(5, dtype=np.float32)
  fns = {"cholesky": lambda x: LA.cholesky(x), "lu": lambda x: LA.lu(x)[0],
         "qr": lambda x: jnp.linalg.qr(x)[1], "eigh": lambda x: jnp.linalg.eigh(x)[0],
         "triangular_solve": lambda x: LA.triangular_solve(x, x[:, :2], left_side=True,
                                                           lower=True)}
  with ourjax.default_matmul_precision("bfloat16"):
    text = ourjax.jit(fns[name]).lower(spd).as_text("hlo")
    got = ourjax.jit(fns[name])(spd)
  dots = [ln for ln in text.splitlines() if " dot(" in ln]
  assert dots and all("operand_precision={highest,highest}" in ln for ln in dots), dots[:2]
  np.testing.assert_allclose(got, ourjax.jit(fns[name], backend="reference")(spd), rtol=2e-4,
                             atol=2e-4)


def test_default_matmul_precision_is_a_context_manager_of_names():
  x = np.ones((3, 3), np.float32)
  f = lambda a: a @ a  # noqa: E731
  with ourjax.default_matmul_precision(None):
    plain = ourjax.jit(f).lower(x).as_text("hlo")
    assert ourjax.config.jax_default_matmul_precision is None
  with ourjax.default_matmul_precision("highest"):
    inside = ourjax.jit(f).lower(x).as_text("hlo")
    assert ourjax.config.jax_default_matmul_precision == "highest"
  assert "operand_precision={highest,highest}" in inside
  assert "operand_precision" not in plain
  with pytest.raises(ValueError, match="new enum value must be None or in"):
    ourjax.default_matmul_precision("bogus")
  with pytest.raises(ValueError, match="new enum value must be None or in"):
    ourjax.default_matmul_precision(lax.Precision.HIGHEST)     # (JAX takes names only)
