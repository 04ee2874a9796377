"""The real Schur decomposition in LAPACK's conventions (ourjax.lax._schur_lapack), through
lax.linalg.schur / scipy.linalg.schur: properties of the real Schur form, checked in float64, and
the building blocks against exact arithmetic."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import ourjax
import ourjax.scipy.linalg as sl
from ourjax.config import enable_x64
from ourjax.lax import _schur_lapack as sk


def _assert_same_spectrum(w1, w2, atol):
  """The multisets w1, w2 agree within atol (matched greedily: sorting would pair conjugates
  whose real parts tie to rounding in the wrong order)."""
  w2 = list(w2)
  for w in w1:
    j = int(np.argmin([abs(w - v) for v in w2]))
    assert abs(w - w2[j]) <= atol, (w, w2)
    w2.pop(j)


def _check_real_schur(a, t, z):
  a64, t64, z64 = (np.asarray(x, np.float64) for x in (a, t, z))
  n = a.shape[0]
  eps = np.finfo(a.dtype).eps
  scale = max(1.0, np.abs(a64).max())
  np.testing.assert_allclose(z64 @ t64 @ z64.T, a64, atol=50 * n * eps * scale)
  np.testing.assert_allclose(z64.T @ z64, np.eye(n), atol=50 * n * eps)
  # quasi upper triangular: nothing below the subdiagonal, no two adjacent subdiagonal entries
  assert np.all(np.tril(t64, -2) == 0)
  sub = np.diag(t64, -1)
  assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))
  # every 2 x 2 block in standard form: equal diagonal, off-diagonal entries of opposite signs
  for j in np.flatnonzero(sub):
    assert t64[j, j] == t64[j + 1, j + 1]
    assert t64[j, j + 1] * t64[j + 1, j] < 0
  # the eigenvalues are those of a
  w = np.linalg.eigvals(a64)
  tw = np.linalg.eigvals(t64)
  _assert_same_spectrum(tw, w, 1e3 * n * eps * scale)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.sampled_from([np.float32, np.float64]), st.integers(0, 2**31 - 1))
def test_real_schur_form_random(n, dtype, seed):
  a = np.random.RandomState(seed).randn(n, n).astype(dtype)
  with enable_x64(dtype == np.float64):
    t, z = sl.schur(a)
  assert t.dtype == dtype and z.dtype == dtype
  _check_real_schur(a, np.asarray(t), np.asarray(z))


@pytest.mark.parametrize("name", ["triu", "tril", "blocks", "sparse", "zeros", "rotation"])
def test_real_schur_form_structured(name):
  """Matrices where ?gebal's permutations isolate eigenvalues, and exact special cases."""
  rng = np.random.RandomState(3)
  a = {
      "triu": np.triu(rng.randn(6, 6)),
      "tril": np.tril(rng.randn(6, 6)),
      "blocks": np.block([[rng.randn(3, 3), rng.randn(3, 3)], [np.zeros((3, 3)), rng.randn(3, 3)]]),
      "sparse": rng.randn(7, 7) * (rng.rand(7, 7) < 0.3),
      "zeros": np.zeros((4, 4)),
      "rotation": np.array([[0., -1.], [1., 0.]]),
  }[name].astype(np.float32)
  t, z = sl.schur(a)
  _check_real_schur(a, np.asarray(t), np.asarray(z))
  if name == "triu":          # already triangular: nothing to do
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_array_equal(np.asarray(z), np.eye(6))


def _check_complex_schur(a, t, z, eig_atol=None):
  a, t, z = (np.asarray(x, np.complex128) for x in (a, t, z))
  n = a.shape[0]
  eps = np.finfo(np.float32).eps if t.dtype == np.complex64 else np.finfo(np.float64).eps
  eps = max(eps, 1e-7)
  scale = max(1.0, np.abs(a).max())
  np.testing.assert_allclose(z @ t @ z.conj().T, a, atol=50 * n * eps * scale)
  np.testing.assert_allclose(z.conj().T @ z, np.eye(n), atol=50 * n * eps)
  assert np.all(np.tril(t, -1) == 0)
  if eig_atol is None:
    _assert_same_spectrum(np.diag(t), np.linalg.eigvals(a), 1e3 * n * eps * scale)
  return np.diag(t)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 10), st.sampled_from([np.complex64, np.complex128]),
       st.integers(0, 2**31 - 1))
def test_complex_schur_form_random(n, dtype, seed):
  rng = np.random.RandomState(seed)
  a = (rng.randn(n, n) + 1j * rng.randn(n, n)).astype(dtype)
  with enable_x64(dtype == np.complex128):
    t, z = sl.schur(a)
  assert t.dtype == dtype and z.dtype == dtype
  _check_complex_schur(a, t, z)


def test_complex_schur_defective_and_real_input():
  """A defective matrix (one Jordan block: no basis of eigenvectors) and output='complex' for
  real input."""
  j = (2 + 1j) * np.eye(5) + np.eye(5, k=1)
  q, _ = np.linalg.qr(np.random.RandomState(0).randn(5, 5) + 1j * np.random.RandomState(1).randn(5, 5))
  a = (q @ j @ q.conj().T).astype(np.complex64)
  t, z = sl.schur(a)
  # a Jordan block's eigenvalues move by ~eps^(1/5) under rounding: ~0.05 in float32
  d = _check_complex_schur(a, t, z, eig_atol=0.2)
  np.testing.assert_allclose(d, np.full(5, 2 + 1j), atol=0.2)
  np.testing.assert_allclose(d.mean(), 2 + 1j, atol=1e-4)    # (their mean is well conditioned)
  r = np.random.RandomState(2).randn(6, 6).astype(np.float32)
  t, z = sl.schur(r, output="complex")
  assert t.dtype == np.complex64
  _check_complex_schur(r, t, z)


def test_schur_batched_and_jit_agree():
  a = np.random.RandomState(1).randn(3, 5, 5).astype(np.float32)
  t, z = ourjax.lax.linalg.schur(a)
  tj, zj = ourjax.jit(ourjax.lax.linalg.schur)(a)
  for i in range(3):
    t1, z1 = sl.schur(a[i])
    np.testing.assert_array_equal(np.asarray(t[i]), np.asarray(t1))
    np.testing.assert_array_equal(np.asarray(z[i]), np.asarray(z1))
  np.testing.assert_array_equal(np.asarray(tj), np.asarray(t))
  np.testing.assert_array_equal(np.asarray(zj), np.asarray(z))


def test_schur_nonfinite_gives_nan():
  a = np.ones((3, 3), np.float32)
  a[1, 2] = np.inf
  t, z = sl.schur(a)
  assert np.all(np.isnan(np.asarray(t))) and np.all(np.isnan(np.asarray(z)))


_f64 = hnp.from_dtype(np.dtype(np.float64), allow_nan=False, allow_infinity=False,
                      min_value=-1e100, max_value=1e100)


@settings(max_examples=200, deadline=None)
@given(_f64, _f64, _f64)
def test_fma_float64_within_one_ulp(a, b, c):
  got = float(sk._fma(np.float64(a), np.float64(b), np.float64(c)))
  exact = Fraction(a) * Fraction(b) + Fraction(c)
  if abs(exact) >= Fraction(1.7e308):
    return
  want = float(exact)
  assert abs(got - want) <= np.spacing(abs(want))


def test_fma_float64_correctly_rounded_off_ties():
  """Away from rounding ties (where its two roundings can differ from one), correctly rounded:
  random operands of mixed magnitudes."""
  rng = np.random.RandomState(0)
  a, b = rng.randn(2, 3000) * np.exp(rng.randn(2, 3000) * 5)
  c = -a * b * (1 + rng.randn(3000) * 1e-9)       # heavy cancellation
  got = sk._fma(a, b, c)
  for x, y, z, g in zip(a, b, c, got):
    assert g == float(Fraction(x) * Fraction(y) + Fraction(z))


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, 3, elements=st.floats(-1e3, 1e3, width=32)))
def test_fma_float32_and_nrm2(x):
  a, b, c = x
  assert sk._fma(a, b, c) == np.float32(Fraction(float(a)) * Fraction(float(b))
                                        + Fraction(float(c)))
  assert sk._nrm2(x[1:]) == np.float32(np.hypot(np.float64(x[1]), np.float64(x[2])))


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float64, 4, elements=st.floats(-10, 10).filter(
    lambda v: v == 0 or abs(v) > 1e-30)))     # (products of tinier entries underflow)
def test_lanv2_standardizes_2x2(x):
  a, b, c, d = (np.float64(v) for v in x)
  aa, bb, cc, dd, cs, sn = sk._lanv2(a, b, c, d, np.finfo(np.float64).eps)
  rot = np.array([[cs, -sn], [sn, cs]])
  np.testing.assert_allclose(rot @ np.array([[aa, bb], [cc, dd]]) @ rot.T,
                             np.array([[a, b], [c, d]]), atol=1e-12 * (1 + np.abs(x).max()))
  np.testing.assert_allclose(cs * cs + sn * sn, 1, rtol=1e-14)
  assert cc == 0 or (aa == dd and bb * cc < 0)


def test_larfg_annihilates():
  rng = np.random.RandomState(0)
  for _ in range(20):
    x = rng.randn(4)
    beta, tau, v = sk._larfg(np.float64(x[0]), x[1:].copy())
    vv = np.concatenate([[1.0], v])
    h = np.eye(4) - tau * np.outer(vv, vv)
    np.testing.assert_allclose(h @ x, [beta, 0, 0, 0], atol=1e-14)
    np.testing.assert_allclose(abs(beta), np.linalg.norm(x), rtol=1e-15)
