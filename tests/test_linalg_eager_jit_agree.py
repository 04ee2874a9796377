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
