"""ourjax's own jnp functions never rely on implicit rank promotion: with
``jax_numpy_rank_promotion='raise'`` (the setting JAX's test suite runs under) they still work
and match NumPy, as JAX's do."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


@pytest.fixture
def rank_raise():
  with ourjax.numpy_rank_promotion("raise"):
    yield


def test_rank_promotion_raise_applies_to_user_code(rank_raise):
  with pytest.raises(ValueError, match="rank_promotion"):
    jnp.ones((2, 3)) * jnp.ones(3)


@pytest.mark.parametrize("kw", [{}, {"fweights": [1, 2, 1, 3, 1]},
                                {"aweights": [0.5, 0.1, 0.9, 0.3, 0.7]},
                                {"fweights": [1, 2, 1, 3, 1], "aweights": [0.5, 0.1, 0.9, 0.3, 0.7],
                                 "ddof": 2}])
def test_cov_weights_without_rank_promotion(rank_raise, kw):
  x = np.random.RandomState(0).randn(3, 5).astype(np.float32)
  kw = {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in kw.items()}
  np.testing.assert_allclose(jnp.cov(x, **kw), np.cov(x, **kw), rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(jnp.cov(x[:1], **kw), np.cov(x[:1], **kw), rtol=2e-5, atol=1e-6)


@pytest.fixture
def strict_raise():
  with ourjax.numpy_dtype_promotion("strict"), ourjax.numpy_rank_promotion("raise"):
    yield


def test_strict_promotion_applies_to_user_code(strict_raise):
  with pytest.raises(ourjax.dtypes.TypePromotionError):
    jnp.ones(2, jnp.float32) + jnp.ones(2, jnp.int32)


def test_functions_under_strict_and_raise_match_numpy(strict_raise):
  # each of these used to promote or rank-promote inside the library (JAX's do not)
  r = np.random.RandomState(0)
  x = np.float32([1, 4, 9, 16])
  out = jnp.ediff1d(x, np.int32([7]), np.float32([2]))            # to_end cast to x's dtype
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, np.ediff1d(x, np.int32([7]), np.float32([2])))

  a = np.int16([1, 2, 3, -4])
  counts, edges = jnp.histogram(a, bins=np.array([-5, 0, 3]))
  ref_counts, ref_edges = np.histogram(a, bins=np.array([-5, 0, 3]))
  assert counts.dtype == edges.dtype == np.float32
  np.testing.assert_array_equal(counts, ref_counts)
  np.testing.assert_array_equal(edges, ref_edges)

  m = r.randn(3, 3).astype(np.float32)
  p = jnp.poly(m)                                     # eigenvalues: complex, as JAX's
  assert p.dtype == np.complex64
  np.testing.assert_allclose(p, np.poly(m.astype(np.float64)), rtol=1e-4, atol=1e-4)

  np.testing.assert_allclose(jnp.outer(np.float32([1, 2]), np.float32([3, 4, 5])),
                             np.outer([1, 2], [3, 4, 5]))
  xs, ys, w = np.float32([1, 2, 3, 4, 5, 6]), r.randn(6, 2).astype(np.float32), np.float32(
      [1, 2, 1, 2, 1, 2])
  c, cov = jnp.polyfit(xs, ys, 2, w=w, cov=True)
  c_ref, cov_ref = np.polyfit(xs.astype(np.float64), ys, 2, w=w, cov=True)
  np.testing.assert_allclose(c, c_ref, rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(cov, cov_ref, rtol=1e-2, atol=1e-3)

  for idx in (np.uint16([1, 5, 7]), np.int8([1, -5, 7])):
    out = jnp.unravel_index(idx, (2, 4))
    assert all(o.dtype == idx.dtype for o in out)
    expected = np.unravel_index(np.where(idx < 0, idx + 8, idx), (2, 4))
    for o, e in zip(out, expected):
      np.testing.assert_array_equal(o, e)


def test_ragged_dot_under_strict_and_raise(strict_raise):
  r = np.random.RandomState(0)
  lhs = r.randn(10, 3).astype(np.float32)
  rhs = r.randn(2, 3, 4).astype(np.float32)
  gs = np.int32([4, 6])
  ref = np.concatenate([lhs[:4] @ rhs[0], lhs[4:] @ rhs[1]])
  np.testing.assert_allclose(ourjax.lax.ragged_dot(lhs, rhs, gs), ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ourjax.jit(ourjax.lax.ragged_dot)(lhs, rhs, gs), ref, rtol=1e-5,
                             atol=1e-5)
  # the flags are back as the user set them afterwards
  with pytest.raises(ValueError, match="rank_promotion"):
    jnp.ones((2, 3)) * jnp.ones(3)


def test_nn_attention_and_complex_initializers_under_strict_and_raise(strict_raise):
  r = np.random.RandomState(0)
  q = r.randn(2, 5, 3, 4).astype(np.float32)
  k = r.randn(2, 6, 3, 4).astype(np.float32)
  v = r.randn(2, 6, 3, 4).astype(np.float32)
  mask = r.rand(2, 1, 5, 6) > 0.3
  mask[..., 0] = True                          # every row keeps a key
  out = ourjax.nn.dot_product_attention(q, k, v, mask=mask)
  logits = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k) / np.sqrt(4)
  logits = np.where(mask, logits, -np.inf)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  np.testing.assert_allclose(out, np.einsum("bnts,bsnh->btnh", p, v), rtol=1e-4, atol=1e-5)

  from ourjax.nn import initializers
  w = initializers.glorot_normal()(ourjax.random.key(0), (256, 128), jnp.complex64)
  assert w.dtype == np.complex64
  np.testing.assert_allclose(np.var(np.asarray(w)), 2 / (256 + 128), rtol=0.1)


def test_linalg_under_strict_and_raise(strict_raise):
  # the compiled decompositions' algorithms, tridiagonal_solve and rsf2csf mixed dtypes / ranks
  import ourjax.scipy.linalg as sl
  r = np.random.RandomState(0)
  a = r.randn(4, 4).astype(np.float32)
  b = r.randn(4, 2).astype(np.float32)
  a64 = a.astype(np.float64)
  np.testing.assert_allclose(ourjax.jit(jnp.linalg.solve)(a, b), np.linalg.solve(a64, b),
                             rtol=2e-3, atol=2e-3)
  np.testing.assert_allclose(ourjax.grad(jnp.linalg.det)(a),
                             np.linalg.det(a64) * np.linalg.inv(a64).T, rtol=2e-3, atol=2e-3)
  dl, d, du = np.float32([0, 1, 2, 3]), np.float32([4, 5, 6, 7]), np.float32([1, 1, 1, 0])
  full = np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)
  np.testing.assert_allclose(ourjax.lax.linalg.tridiagonal_solve(dl, d, du, b),
                             np.linalg.solve(full.astype(np.float64), b), rtol=1e-4, atol=1e-5)
  t, z = sl.schur(a)
  tc, zc = sl.rsf2csf(t, z)
  np.testing.assert_allclose(zc @ tc @ np.conj(zc).T, a, rtol=1e-3, atol=1e-3)


def test_mgrid_ogrid_mixed_ranges_under_strict(strict_raise):
  # as JAX's: a complex-step (float) range and an int range share a dtype by standard promotion
  g = jnp.mgrid[1:6:8j, 2:4]
  assert g.dtype == np.float32
  np.testing.assert_allclose(g, np.mgrid[1:6:8j, 2:4], rtol=1e-6)
  o = jnp.ogrid[1:6:8j, 2:4]
  assert [x.dtype for x in o] == [np.float32, np.float32]
  for x, e in zip(o, np.ogrid[1:6:8j, 2:4]):
    np.testing.assert_allclose(x, e, rtol=1e-6)


def test_linalg_derivatives_under_strict_and_raise(strict_raise):
  # the JVP rules of lu/triangular_solve and det's parity helper rank-promoted
  r = np.random.RandomState(1)
  a = r.randn(3, 4, 4).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
  a64 = a.astype(np.float64)
  sign, logdet = jnp.linalg.slogdet(a)
  ref_sign, ref_logdet = np.linalg.slogdet(a64)
  np.testing.assert_allclose(sign, ref_sign)
  np.testing.assert_allclose(logdet, ref_logdet, rtol=1e-5)
  g = ourjax.grad(lambda x: jnp.sum(jnp.linalg.det(x)))(a)
  np.testing.assert_allclose(g, np.linalg.det(a64)[:, None, None] *
                             np.swapaxes(np.linalg.inv(a64), -1, -2), rtol=2e-3, atol=2e-3)
  b = r.randn(3, 4, 2).astype(np.float32)
  gs = ourjax.grad(lambda x: jnp.sum(jnp.linalg.solve(x, b)))(a)
  eps = 1e-3
  e = np.zeros_like(a64); e[0, 1, 2] = eps
  fd = (np.sum(np.linalg.solve(a64 + e, b)) - np.sum(np.linalg.solve(a64 - e, b))) / (2 * eps)
  np.testing.assert_allclose(gs[0, 1, 2], fd, rtol=2e-3, atol=2e-3)
