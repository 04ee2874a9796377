"""Eager and jitted float32 linear solves agree (JAX's run the same LAPACK kernels both ways, and
its tests compare them at float32's precision): Cholesky and triangular solves are computed in
double precision and rounded once on both paths, so both are also accurate to float32's
rounding against a float64 reference."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
import ourjax.scipy.linalg as sl
from ourjax.lax import linalg as lax_linalg


def _spd(rng, n):
  a = rng.randn(n, n).astype(np.float32)
  return (a @ a.T + 0.1 * np.eye(n, dtype=np.float32)).astype(np.float32)


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_cholesky_eager_equals_jit_and_is_rounded_float64(n, seed):
  a = _spd(np.random.RandomState(seed), n)
  le = np.asarray(lax_linalg.cholesky(a))
  lj = np.asarray(ourjax.jit(lax_linalg.cholesky)(a))
  np.testing.assert_array_equal(le, lj)
  l64 = np.linalg.cholesky(a.astype(np.float64))
  np.testing.assert_allclose(le, l64, rtol=0, atol=4 * np.finfo(np.float32).eps * np.abs(l64).max())


@pytest.mark.parametrize("lower,transpose_a,left_side", [
    (True, False, True), (False, False, True), (True, True, True), (False, True, False)])
def test_triangular_solve_eager_equals_jit(lower, transpose_a, left_side):
  rng = np.random.RandomState(1)
  a = (rng.randn(9, 9) + 4 * np.eye(9)).astype(np.float32)
  b = rng.randn(9, 9).astype(np.float32)
  f = lambda a, b: lax_linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                               transpose_a=transpose_a)
  xe, xj = np.asarray(f(a, b)), np.asarray(ourjax.jit(f)(a, b))
  np.testing.assert_array_equal(xe, xj)
  t = (np.tril(a) if lower else np.triu(a)).astype(np.float64)
  t = t.T if transpose_a else t
  x64 = np.linalg.solve(t, b.astype(np.float64)) if left_side else \
      np.linalg.solve(t.T, b.astype(np.float64).T).T
  np.testing.assert_allclose(xe, x64, rtol=2 * np.finfo(np.float32).eps, atol=1e-30)


@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_solve_eager_equals_jit(assume_a):
  rng = np.random.RandomState(2)
  for n in (5, 16):
    a = _spd(rng, n) if assume_a == "pos" else rng.randn(n, n).astype(np.float32)
    b = rng.randn(n, 3).astype(np.float32)
    f = lambda a, b: sl.solve(a, b, assume_a=assume_a, lower=True)
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.asarray(ourjax.jit(f)(a, b)))
    g = jnp.linalg.solve
    np.testing.assert_array_equal(np.asarray(g(a, b)), np.asarray(ourjax.jit(g)(a, b)))


# eigh and svd: eager calls run LAPACK (NumPy), jitted ones of real matrices up to
# lax.linalg._JACOBI_MAX_N a compiled Jacobi iteration; both give the vectors the same sign
# convention (the largest-magnitude component of each eigenvector and left singular vector
# positive, each right singular vector its left one's sign), so the two agree to rounding.

def _tol(dt):
  return 2e-4 if dt == np.float32 else 1e-10


def _largest_positive(vecs):
  """Each column's largest-magnitude entry is positive."""
  i = np.argmax(np.abs(vecs), axis=0)
  return bool(np.all(vecs[i, np.arange(vecs.shape[1])] > 0))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 6, 11])
def test_eigh_eager_and_jit_agree_with_one_sign_convention(dt, n, x64):
  rng = np.random.RandomState(n)
  a = rng.randn(n, n).astype(dt)
  a = (a + a.T).astype(dt)
  want_w = np.linalg.eigvalsh(a.astype(np.float64))
  for lower, sort in ((True, True), (False, True), (True, False)):
    f = lambda a: lax_linalg.eigh(a, lower=lower, sort_eigenvalues=sort)
    (ve, we), (vj, wj) = [tuple(map(np.asarray, r)) for r in (f(a), ourjax.jit(f)(a))]
    for v, w in ((ve, we), (vj, wj)):
      assert v.dtype == dt and w.dtype == dt
      np.testing.assert_allclose(w, want_w, atol=_tol(dt) * max(1, np.abs(want_w).max()))
      assert _largest_positive(v), (lower, sort, v)
      np.testing.assert_allclose((v * w) @ v.T, a, atol=_tol(dt) * 10)
    np.testing.assert_allclose(ve, vj, atol=_tol(dt) * 10)
    np.testing.assert_allclose(we, wj, atol=_tol(dt) * max(1, np.abs(want_w).max()))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (7, 3), (3, 7), (12, 9)])
def test_svd_eager_and_jit_agree_with_one_sign_convention(dt, shape, x64):
  rng = np.random.RandomState(sum(shape))
  a = rng.randn(*shape).astype(dt)
  k = min(shape)
  want_s = np.linalg.svd(a.astype(np.float64), compute_uv=False)
  for full in (False, True):
    f = lambda a: jnp.linalg.svd(a, full_matrices=full)
    (ue, se, vhe), (uj, sj, vhj) = [tuple(map(np.asarray, r)) for r in (f(a), ourjax.jit(f)(a))]
    for u, s, vh in ((ue, se, vhe), (uj, sj, vhj)):
      np.testing.assert_allclose(s, want_s, atol=_tol(dt) * want_s.max())
      assert _largest_positive(u[:, :k]), u
      np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], a, atol=_tol(dt) * 10)
    np.testing.assert_allclose(ue[:, :k], uj[:, :k], atol=_tol(dt) * 10)
    np.testing.assert_allclose(vhe[:k], vhj[:k], atol=_tol(dt) * 10)


def test_larger_and_complex_matrices_keep_lapacks_vectors_both_ways(x64):
  """Past the compiled sizes, and for complex matrices, eager and jitted calls both run LAPACK
  on the host: NumPy's vectors exactly (JAX's on a CPU come from LAPACK too)."""
  rng = np.random.RandomState(7)
  n = lax_linalg._JACOBI_MAX_N + 1
  a = rng.randn(n, n)
  a = a + a.T
  c = rng.randn(5, 5) + 1j * rng.randn(5, 5)
  c = c + c.conj().T
  for x in (a, c):
    w, v = np.linalg.eigh(x)
    for got in (jnp.linalg.eigh(x), ourjax.jit(jnp.linalg.eigh)(x)):
      np.testing.assert_array_equal(np.asarray(got[1]), v)
      np.testing.assert_allclose(np.asarray(got[0]), w, rtol=1e-12)
  u, s, vh = np.linalg.svd(a[:, :-3], full_matrices=False)
  for got in (jnp.linalg.svd(a[:, :-3], full_matrices=False),
              ourjax.jit(lambda x: jnp.linalg.svd(x, full_matrices=False))(a[:, :-3])):
    np.testing.assert_array_equal(np.asarray(got[0]), u)
    np.testing.assert_array_equal(np.asarray(got[2]), vh)


def test_cholesky_of_a_non_positive_definite_matrix_is_nan_below_zero_above():
  # as LAPACK through JAX: a failed factorization gives NaN in the whole lower triangle (not the
  # columns before the failing pivot) and zeros above it, eager and jitted, per batch member
  a = np.array([[4., 2., 0.], [2., 1., 3.], [0., 3., 1.]], np.float32)
  b = np.stack([a, 4 * np.eye(3, dtype=np.float32)])
  want_bad = np.where(np.tril(np.ones((3, 3), bool)), np.nan, 0.0)
  for f in (jnp.linalg.cholesky, ourjax.jit(jnp.linalg.cholesky)):
    got = np.asarray(f(b))
    np.testing.assert_array_equal(got[0], want_bad)
    np.testing.assert_array_equal(got[1], 2 * np.eye(3))
