"""jnp.linalg against NumPy float64: norms (vector/matrix orders, axis, keepdims), det, slogdet,
inv, solve, cholesky, matrix_power, qr, eigh, svd, pinv, lstsq, matrix_rank; batch dims; jit and
vmap; gradients of det/inv/solve/cholesky vs central finite differences (float64); errors naming
the shape."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.config import enable_x64

LA = jnp.linalg
rng = np.random.default_rng(1234)


def well(n, batch=(), dtype=np.float32):
  """Well-conditioned matrices: identity-dominated plus noise."""
  a = rng.standard_normal(batch + (n, n)) / np.sqrt(n) + 2 * np.eye(n)
  return a.astype(dtype)


def spd(n, batch=(), dtype=np.float32):
  a = rng.standard_normal(batch + (n, n))
  return (a @ np.swapaxes(a, -1, -2) / n + np.eye(n)).astype(dtype)


def close(got, want, rtol=1e-4, atol=1e-5):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=rtol, atol=atol)


def f64(x):
  return np.asarray(x, np.float64)


@pytest.mark.parametrize("ord", [None, 1, 2, np.inf, -np.inf, 0, 3, -1])
def test_vector_norm(ord):
  x = rng.standard_normal((3, 5)).astype(np.float32)
  close(LA.norm(x[0], ord), np.linalg.norm(f64(x[0]), ord))
  close(LA.norm(x, ord, axis=1), np.linalg.norm(f64(x), ord, axis=1))
  close(LA.norm(x, ord, axis=0, keepdims=True), np.linalg.norm(f64(x), ord, axis=0,
                                                               keepdims=True))


@pytest.mark.parametrize("ord", [None, "fro", 1, -1, np.inf, -np.inf, 2, -2, "nuc"])
def test_matrix_norm(ord):
  x = rng.standard_normal((2, 4, 3)).astype(np.float32)
  close(LA.norm(x[0], ord), np.linalg.norm(f64(x[0]), ord))
  close(LA.norm(x, ord, axis=(1, 2)), np.linalg.norm(f64(x), ord, axis=(1, 2)))
  got = LA.norm(x, ord, axis=(2, 0), keepdims=True)
  want = np.linalg.norm(f64(x), ord, axis=(2, 0), keepdims=True)
  assert got.shape == want.shape
  close(got, want)


def test_norm_default_flattens_and_errors():
  x = rng.standard_normal((2, 3, 4)).astype(np.float32)
  close(LA.norm(x), np.linalg.norm(f64(x)))
  assert LA.norm(x, keepdims=True).shape == (1, 1, 1)
  with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
    LA.norm(x, ord=1)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_det_slogdet_inv(n):
  a = well(n, (3,))
  close(LA.det(a), np.linalg.det(f64(a)))
  s, l = LA.slogdet(a)
  sr, lr = np.linalg.slogdet(f64(a))
  close(s, sr)
  close(l, lr)
  close(LA.inv(a), np.linalg.inv(f64(a)), atol=1e-4)
  assert LA.det(a).dtype == np.float32


def test_det_needs_pivoting():
  a = np.array([[0.0, 2.0, 1.0], [1.0, 0.0, 3.0], [4.0, 1.0, 0.0]], np.float32)
  close(LA.det(a), np.linalg.det(f64(a)))
  close(LA.inv(a), np.linalg.inv(f64(a)))
  close(LA.slogdet(-a).sign, np.linalg.slogdet(-f64(a))[0])
  assert LA.det(np.eye(2, dtype=np.int32)).dtype == np.float32


def test_solve_shapes():
  a = well(4, (2,))
  b = rng.standard_normal((2, 4, 3)).astype(np.float32)
  close(LA.solve(a, b), np.linalg.solve(f64(a), f64(b)), atol=1e-4)
  v = rng.standard_normal(4).astype(np.float32)
  close(LA.solve(a[0], v), np.linalg.solve(f64(a[0]), f64(v)), atol=1e-4)
  got = LA.solve(a, v)
  assert got.shape == (2, 4)
  close(got, np.linalg.solve(f64(a), f64(v)[:, None])[..., 0], atol=1e-4)
  with pytest.raises(ValueError, match=r"\(2, 4\)"):
    LA.solve(a, rng.standard_normal((2, 4)))


@pytest.mark.parametrize("name", ["det", "slogdet", "inv", "cholesky", "eigh"])
def test_non_square_error(name):
  with pytest.raises(ValueError, match=r"\(2, 3\)"):
    getattr(LA, name)(np.ones((2, 3), np.float32))


def test_cholesky():
  a = spd(5, (2,))
  close(LA.cholesky(a), np.linalg.cholesky(f64(a)))
  close(LA.cholesky(a, upper=True), np.swapaxes(np.linalg.cholesky(f64(a)), -1, -2))
  assert np.isnan(np.asarray(LA.cholesky(-np.eye(2, dtype=np.float32)))).any()


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 5])
def test_matrix_power(n):
  a = well(3)
  close(LA.matrix_power(a, n), np.linalg.matrix_power(f64(a), n), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 4)])
def test_qr(shape):
  a = rng.standard_normal(shape).astype(np.float32)
  q, r = LA.qr(a)
  qr_, rr = np.linalg.qr(f64(a))
  assert q.shape == qr_.shape and r.shape == rr.shape
  close(q @ r, a, atol=1e-5)
  sgn = np.sign(np.diagonal(rr, axis1=-2, axis2=-1)) * np.sign(np.diagonal(np.asarray(r),
                                                                           axis1=-2, axis2=-1))
  close(r, rr * sgn[..., :, None], atol=1e-4)
  k = min(shape[-2:])
  close(np.swapaxes(np.asarray(q), -1, -2) @ np.asarray(q), np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)), atol=1e-5)
  qc, rc = LA.qr(a, mode="complete")
  assert qc.shape == a.shape[:-2] + (shape[-2], shape[-2])
  close(qc @ rc, a, atol=1e-5)
  close(LA.qr(a, mode="r"), r)


@pytest.mark.parametrize("n", [1, 2, 6])
def test_eigh(n):
  a = spd(n, (2,)) - 1.5 * np.eye(n, dtype=np.float32)
  w, v = LA.eigh(a)
  close(w, np.linalg.eigvalsh(f64(a)), atol=1e-5)
  close(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)), a,
        atol=1e-5)
  close(np.swapaxes(np.asarray(v), -1, -2) @ np.asarray(v), np.broadcast_to(np.eye(n), a.shape),
        atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 2)])
def test_svd(shape):
  a = rng.standard_normal(shape).astype(np.float32)
  u, s, vh = LA.svd(a, full_matrices=False)
  close(s, np.linalg.svd(f64(a), compute_uv=False), atol=1e-5)
  close((np.asarray(u) * np.asarray(s)[..., None, :]) @ np.asarray(vh), a, atol=1e-5)
  uf, sf, vhf = LA.svd(a)
  un, _, vhn = np.linalg.svd(f64(a))
  assert uf.shape == un.shape and vhf.shape == vhn.shape
  m, n = shape[-2:]
  close(np.swapaxes(np.asarray(uf), -1, -2) @ np.asarray(uf), np.broadcast_to(np.eye(m), uf.shape),
        atol=1e-5)
  close(np.asarray(vhf) @ np.swapaxes(np.asarray(vhf), -1, -2),
        np.broadcast_to(np.eye(n), vhf.shape), atol=1e-5)
  close(LA.svd(a, compute_uv=False), s)


def test_pinv_lstsq_rank():
  a = rng.standard_normal((6, 3)).astype(np.float32)
  close(LA.pinv(a), np.linalg.pinv(f64(a)), atol=1e-4)
  b = rng.standard_normal(6).astype(np.float32)
  x, resid, rank, sv = LA.lstsq(a, b)
  xr, rr, rankr, svr = np.linalg.lstsq(f64(a), f64(b), rcond=None)
  close(x, xr, atol=1e-4)
  close(resid, rr, atol=1e-4)
  assert int(rank) == rankr
  low = (a[:, :2] @ rng.standard_normal((2, 4))).astype(np.float32)
  assert int(LA.matrix_rank(low)) == np.linalg.matrix_rank(low) == 2


def test_jit_and_vmap():
  a = well(4, (3,))
  close(ourjax.jit(LA.det)(a), np.linalg.det(f64(a)))
  close(ourjax.vmap(LA.inv)(a), np.linalg.inv(f64(a)), atol=1e-4)
  b = rng.standard_normal((3, 4)).astype(np.float32)
  close(ourjax.jit(ourjax.vmap(LA.solve))(a, b),
        np.linalg.solve(f64(a), f64(b)[..., None])[..., 0], atol=1e-4)
  close(ourjax.jit(lambda x: LA.norm(x, axis=-1))(a), np.linalg.norm(f64(a), axis=-1))


def _fd_grad(f, x, h=1e-6):
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[i] = h
    g[i] = (f(x + e) - f(x - e)) / (2 * h)
  return g


@pytest.mark.parametrize("name", ["det", "logdet", "inv", "solve", "cholesky", "norm2"])
def test_grads_vs_finite_differences(x64, name):
  a = well(3, dtype=np.float64)
  b = rng.standard_normal(3)
  w = rng.standard_normal((3, 3))
  if name == "cholesky":
    a = spd(3, dtype=np.float64)
  fns = {
      "det": lambda x: LA.det(x),
      "logdet": lambda x: LA.slogdet(x)[1],
      "inv": lambda x: jnp.sum(LA.inv(x) * w),
      "solve": lambda x: jnp.sum(LA.solve(x, b) * b),
      # the symmetrized lower factor: perturb symmetrically via x + x.T
      "cholesky": lambda x: jnp.sum(LA.cholesky((x + x.T) / 2) * w),
      "norm2": lambda x: LA.norm(x, 2),
  }
  f = fns[name]
  g = np.asarray(ourjax.grad(f)(a))
  want = _fd_grad(lambda x: float(np.asarray(f(x))), a)
  close(g, want, rtol=1e-5, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 6), seed=st.integers(0, 2 ** 31 - 1))
def test_eigh_grad_matches_finite_differences(n, seed):
  """The gradient of eigh (its JVP rule, JAX's: dw = diag(C), dV = V (F * C), C = V^T dA V,
  F_ij = 1/(w_j - w_i) with the diagonal masked) is finite on ordinary random symmetric
  matrices and matches float64 central differences of NumPy's eigh.  The loss uses the
  eigenvectors only through sign-invariant forms v_k^T B v_k."""
  r = np.random.default_rng(seed)
  a = r.standard_normal((n, n))
  a = a + a.T
  w_np = np.linalg.eigvalsh(a)
  assume(np.min(np.diff(w_np)) > 0.2)
  b = r.standard_normal((n, n))
  c = r.standard_normal(n)

  def loss(x, eigh, xp):
    w, v = eigh((x + x.T) / 2)
    return xp.sum(c * w) + xp.sum(c * xp.sum(v * (b @ v), axis=0)) + xp.sum(w ** 2)

  g = np.asarray(ourjax.grad(lambda x: loss(x, LA.eigh, jnp))(a.astype(np.float32)))
  assert np.all(np.isfinite(g)), g
  want = _fd_grad(lambda x: loss(x, np.linalg.eigh, np), a, h=1e-6)
  scale = np.max(np.abs(want)) + 1
  np.testing.assert_allclose(g, want, rtol=0, atol=2e-3 * scale)


# ------------------------------------------------------------------------------------------------
# empty matrices, slogdet(method='qr'), pinv's derivative of a very wide matrix


@pytest.mark.parametrize("shape", [(0, 2), (2, 0), (0, 0)])
@pytest.mark.parametrize("ord", [1, 2, np.inf, "fro", "nuc"])
def test_the_norm_of_an_empty_matrix_is_zero(shape, ord):
  assert float(LA.matrix_norm(jnp.zeros(shape, np.complex64), ord=ord)) == 0


@pytest.mark.parametrize("ord", [1, 2, np.inf, 0, 3])
def test_the_norm_of_an_empty_vector_is_zero(ord):
  assert float(LA.vector_norm(jnp.zeros(0), ord=ord)) == 0


@pytest.mark.parametrize("batch", [(), (2,)])
def test_empty_square_matrices_eager_jit_and_grad(batch):
  import ourjax.scipy.linalg as sla
  z = np.zeros(batch + (0, 0), np.float32)
  b = np.zeros(batch + (0, 3), np.float32)
  fns = {"inv": LA.inv, "det": LA.det, "slogdet": lambda a: LA.slogdet(a)[1],
         "solve": lambda a: LA.solve(a, b), "lu": lambda a: sla.lu(a)[2],
         "lu_factor": lambda a: sla.lu_factor(a)[0], "eigh": lambda a: LA.eigh(a)[0]}
  for name, f in fns.items():
    expect = {"det": np.linalg.det, "slogdet": lambda a: np.linalg.slogdet(a)[1]}.get(name)
    for fn in (f, ourjax.jit(f)):
      out = fn(z)
      if expect is not None:
        np.testing.assert_array_equal(out, expect(z.astype(np.float64)))
    g = ourjax.grad(lambda a: jnp.sum(f(a)))(z)
    assert g.shape == z.shape, name
  for left in (True, False):
    w, *vs = ourjax.lax.linalg.eig(z.astype(np.complex64), compute_left_eigenvectors=left)
    assert w.shape == batch + (0,) and all(v.shape == z.shape for v in vs)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_slogdet_by_qr_matches_numpy_and_its_derivative_finite_differences(n):
  a = rng.standard_normal((3, n, n))
  for fn in (LA.slogdet, ourjax.jit(LA.slogdet, static_argnames="method")):
    sign, logdet = fn(a.astype(np.float32), method="qr")
    esign, elogdet = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign, esign)
    np.testing.assert_allclose(logdet, elogdet, rtol=1e-4, atol=1e-4)
  with enable_x64(True):
    da = rng.standard_normal(a.shape)
    _, t = ourjax.jvp(lambda x: LA.slogdet(x, method="qr")[1], (a,), (da,))
    eps = 1e-6
    fd = (np.linalg.slogdet(a + eps * da)[1] - np.linalg.slogdet(a - eps * da)[1]) / (2 * eps)
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-6)
  with pytest.raises(NotImplementedError, match="complex"):
    LA.slogdet(a.astype(np.complex64), method="qr")
  with pytest.raises(ValueError, match="Unknown slogdet method 'cholesky'"):
    LA.slogdet(a, method="cholesky")


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 6)])
def test_pinv_jvp_matches_finite_differences(shape):
  with enable_x64(True):
    a, da = rng.standard_normal(shape), rng.standard_normal(shape)
    _, t = ourjax.jvp(LA.pinv, (a,), (da,))
    eps = 1e-6
    fd = (np.linalg.pinv(a + eps * da) - np.linalg.pinv(a - eps * da)) / (2 * eps)
    np.testing.assert_allclose(t, fd, rtol=1e-5, atol=1e-6)


def test_pinv_jvp_of_a_very_wide_matrix_never_forms_an_n_by_n_product():
  a = rng.standard_normal((2, 300_000)).astype(np.float32)   # n x n would be 360 GB
  _, t = ourjax.jvp(LA.pinv, (a,), (a,))
  assert t.shape == (300_000, 2)


def test_complex_lu_pivots_as_lapack_on_the_largest_re_plus_im():
  import ourjax.scipy.linalg as sla
  # the modulus and LAPACK's |re| + |im| pick different rows here: 3+3j (|.| 4.24, 6) vs 5 (5, 5)
  a = np.array([[5.0, 1.0], [3 + 3j, 2.0]], np.complex64)
  lu_, piv = sla.lu_factor(a)
  assert list(np.asarray(piv)) == [1, 1]
  p, l, u = sla.lu(a)
  assert p.dtype == np.float32            # a real permutation, as JAX
  np.testing.assert_allclose(p @ l @ u, a, rtol=1e-6)
  b = rng.standard_normal((2, 3)).astype(np.complex64)
  np.testing.assert_allclose(sla.lu_solve((lu_, piv), b), np.linalg.solve(a, b), rtol=1e-5)
