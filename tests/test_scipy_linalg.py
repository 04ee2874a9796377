"""``ourjax.scipy.linalg`` against NumPy references written from the definitions (SciPy is not
a dependency): the special matrices element by element, the solvers through
``numpy.linalg.solve``, ``expm`` through the eigendecomposition of symmetric matrices and a Taylor
series, eager and jitted."""
import math

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
import ourjax.scipy.linalg as sl
from ourjax.config import enable_x64


def _both(f, *args, **kw):
  """f eagerly and jitted (static keyword arguments)."""
  return [f(*args, **kw), ourjax.jit(lambda *a: f(*a, **kw))(*args)]


def test_toeplitz_hankel_circulant_elementwise():
  rng = np.random.default_rng(0)
  c = rng.standard_normal((2, 4)).astype(np.float32)
  r = rng.standard_normal((2, 3)).astype(np.float32)
  t = np.array([[[c[b, i - j] if i >= j else r[b, j - i] for j in range(3)] for i in range(4)]
                for b in range(2)])
  h = np.array([[[c[b, i + j] if i + j < 4 else r[b, i + j - 3] for j in range(3)]
                 for i in range(4)] for b in range(2)])
  circ = np.array([[[c[b, (i - j) % 4] for j in range(4)] for i in range(4)] for b in range(2)])
  for got in _both(sl.toeplitz, c, r):
    np.testing.assert_array_equal(got, t)
  for got in _both(sl.hankel, c, r):
    np.testing.assert_array_equal(got, h)
  for got in _both(sl.circulant, c):
    np.testing.assert_array_equal(got, circ)
  z = np.array([1.0, 2 + 3j, 4 - 1j], np.complex64)
  np.testing.assert_array_equal(sl.toeplitz(z), [[1, 2 - 3j, 4 + 1j], [2 + 3j, 1, 2 - 3j],
                                                 [4 - 1j, 2 + 3j, 1]])
  np.testing.assert_array_equal(sl.hankel(c[0]), [[c[0, i + j] if i + j < 4 else 0
                                                   for j in range(4)] for i in range(4)])


def test_companion_leslie_fiedler():
  a = np.array([2.0, -3.0, 1.0, 5.0], np.float32)
  comp = np.zeros((3, 3))
  comp[0] = -a[1:] / a[0]
  comp[1, 0] = comp[2, 1] = 1
  np.testing.assert_allclose(sl.companion(a), comp)
  # its eigenvalues are the polynomial's roots
  np.testing.assert_allclose(np.sort_complex(np.linalg.eigvals(np.asarray(sl.companion(a)))),
                             np.sort_complex(np.roots(a)), rtol=1e-5)
  f, s = np.array([1.0, 2, 3]), np.array([0.5, 0.25])
  np.testing.assert_array_equal(sl.leslie(f, s), [[1, 2, 3], [0.5, 0, 0], [0, 0.25, 0]])
  np.testing.assert_array_equal(sl.fiedler(a), np.abs(a[:, None] - a[None, :]))
  with pytest.raises(ValueError, match="length of f along the last axis"):
    sl.leslie(jnp.array([1.0]), jnp.array([]))
  with pytest.raises(ValueError, match="length of `a` along the last axis"):
    sl.companion(jnp.zeros((3, 1)))


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6, 7])
def test_fiedler_companion_has_the_polynomials_roots(size):
  rng = np.random.default_rng(size)
  a = rng.standard_normal(size)
  with enable_x64(True):
    fc = np.asarray(sl.fiedler_companion(a))
    assert fc.shape == (size - 1, size - 1)
    np.testing.assert_allclose(np.sort_complex(np.linalg.eigvals(fc)),
                               np.sort_complex(np.roots(a)), rtol=1e-8, atol=1e-8)
    # pentadiagonal
    assert np.all(np.triu(fc, 3) == 0) and np.all(np.tril(fc, -3) == 0)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_convolution_matrix_convolves(mode):
  rng = np.random.default_rng(1)
  a = rng.standard_normal(4)
  for n in (2, 4, 7):
    v = rng.standard_normal(n)
    with enable_x64(True):
      np.testing.assert_allclose(sl.convolution_matrix(a, n, mode) @ v,
                                 np.convolve(a, v, mode), rtol=1e-12)
  with pytest.raises(ValueError, match="n must be a positive integer"):
    sl.convolution_matrix(a, 0)


def test_constant_matrices():
  n = 6
  np.testing.assert_allclose(sl.dft(n, "n"), np.fft.fft(np.eye(n)) / n, rtol=1e-5, atol=1e-6)
  h = np.asarray(sl.hadamard(8))
  np.testing.assert_array_equal(h @ h.T, 8 * np.eye(8))
  with pytest.raises(ValueError, match="positive power of 2"):
    sl.hadamard(6)
  hm = np.asarray(sl.helmert(5, full=True))
  np.testing.assert_allclose(hm @ hm.T, np.eye(5), atol=1e-6)
  np.testing.assert_allclose(hm[0], np.full(5, 1 / math.sqrt(5)), rtol=1e-6)
  with enable_x64(True):
    hil = np.asarray(sl.hilbert(5))
    np.testing.assert_allclose(hil, 1 / (np.arange(5)[:, None] + np.arange(5) + 1))
    np.testing.assert_allclose(np.asarray(sl.invhilbert(5)) @ hil, np.eye(5), atol=1e-7)
    for kind in ("symmetric", "lower", "upper"):
      p = np.asarray(sl.pascal(5, kind))
      np.testing.assert_allclose(np.asarray(sl.invpascal(5, kind)) @ p, np.eye(5), atol=1e-9)
    np.testing.assert_array_equal(sl.pascal(4), [[math.comb(i + j, i) for j in range(4)]
                                                 for i in range(4)])


def test_block_diag():
  out = sl.block_diag(np.ones((2, 2)), np.arange(3), 5)
  want = np.zeros((4, 6))
  want[:2, :2] = 1
  want[2, 2:5] = np.arange(3)
  want[3, 5] = 5
  np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_lu_family(dtype):
  rng = np.random.default_rng(2)
  a = (rng.standard_normal((5, 5)) + (1j if dtype == np.complex64 else 0)
       * rng.standard_normal((5, 5))).astype(dtype)
  p, l, u = sl.lu(a)
  np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, atol=1e-5)
  pl, u2 = sl.lu(a, permute_l=True)
  np.testing.assert_allclose(np.asarray(pl) @ np.asarray(u2), a, atol=1e-5)
  b = rng.standard_normal((5, 2)).astype(dtype)
  ref = a.astype(np.complex128)
  for trans, op in [(0, ref), (1, ref.T), (2, np.conj(ref.T))]:
    for got in _both(lambda a, b, t=trans: sl.lu_solve(sl.lu_factor(a), b, trans=t), a, b):
      np.testing.assert_allclose(got, np.linalg.solve(op, b), rtol=1e-4, atol=1e-4)


def test_cholesky_solves_and_triangular_solves():
  rng = np.random.default_rng(3)
  k = rng.standard_normal((3, 4, 4)).astype(np.float32)
  spd = k @ np.swapaxes(k, -1, -2) + 4 * np.eye(4, dtype=np.float32)
  b = rng.standard_normal((4, 2)).astype(np.float32)
  want = np.linalg.solve(spd.astype(np.float64), b)
  for lower in (True, False):
    c = sl.cho_factor(spd, lower=lower)
    for got in _both(lambda c, b, lo=lower: sl.cho_solve((c, lo), b), c[0], b):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    tri = np.tril(spd) if lower else np.triu(spd)
    np.testing.assert_allclose(sl.solve(tri, b, assume_a="pos", lower=lower), want, rtol=1e-4,
                               atol=1e-5)
    for trans in (0, 1, 2):
      op = np.swapaxes(tri, -1, -2) if trans else tri
      np.testing.assert_allclose(sl.solve_triangular(tri, b[:, 0], trans=trans, lower=lower),
                                 np.linalg.solve(op.astype(np.float64), b[:, 0]), rtol=1e-4,
                                 atol=1e-5)


def test_expm_and_its_frechet_derivative():
  rng = np.random.default_rng(4)
  with enable_x64(True):
    s = rng.standard_normal((2, 4, 4))
    s = s + np.swapaxes(s, -1, -2)
    w, v = np.linalg.eigh(s)
    want = (v * np.exp(w)[..., None, :]) @ np.swapaxes(v, -1, -2)
    for got in _both(sl.expm, s):
      np.testing.assert_allclose(got, want, rtol=1e-10)
    # a small general matrix: the Taylor series
    a = rng.standard_normal((3, 3)) * 0.3
    taylor = sum(np.linalg.matrix_power(a, k) / math.factorial(k) for k in range(30))
    np.testing.assert_allclose(sl.expm(a), taylor, rtol=1e-12)
    e = rng.standard_normal((3, 3))
    ex, frechet = sl.expm_frechet(a, e)
    eps = 1e-6
    fd = (np.asarray(sl.expm(a + eps * e)) - np.asarray(sl.expm(a - eps * e))) / (2 * eps)
    np.testing.assert_allclose(frechet, fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ex, taylor, rtol=1e-12)
  # float32 uses the [7/7] approximant, also after squarings
  a32 = (rng.standard_normal((3, 3)) * 3).astype(np.float32)
  with enable_x64(True):
    ref = np.asarray(sl.expm(a32.astype(np.float64)))
  np.testing.assert_allclose(sl.expm(a32), ref, rtol=1e-4)


def test_polar_sqrtm_qr_multiply():
  rng = np.random.default_rng(5)
  a = rng.standard_normal((4, 4)).astype(np.float32)
  u, p = sl.polar(a)
  np.testing.assert_allclose(np.asarray(u) @ np.asarray(p), a, atol=1e-5)
  np.testing.assert_allclose(np.asarray(u).T @ np.asarray(u), np.eye(4), atol=1e-5)
  assert np.all(np.linalg.eigvalsh(np.asarray(p, np.float64)) > -1e-5)
  spd = a @ a.T + np.eye(4, dtype=np.float32)
  r = np.asarray(sl.sqrtm(spd))
  np.testing.assert_allclose(r @ r, spd, rtol=1e-4, atol=1e-4)
  c = rng.standard_normal((2, 4)).astype(np.float32)
  out, rr = sl.qr_multiply(a, c)
  q, r2 = sl.qr(a, mode="economic")
  np.testing.assert_allclose(out, c @ np.asarray(q), atol=1e-5)
  np.testing.assert_allclose(rr, r2, atol=1e-6)


def test_pivoted_qr_permutes_columns_by_norm():
  rng = np.random.default_rng(6)
  a = rng.standard_normal((5, 4)).astype(np.float32) * np.array([1, 10, 0.1, 3], np.float32)
  q, r, p = sl.qr(a, pivoting=True)
  assert p.dtype == np.int32 and p[0] == 1       # the largest column first
  np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a[:, np.asarray(p)], atol=1e-5)
  d = np.abs(np.diagonal(np.asarray(r)))
  assert np.all(d[:-1] >= d[1:] - 1e-5)          # |R_jj| non-increasing
  out, r2, p2 = sl.qr_multiply(a, np.eye(5, dtype=np.float32)[:2], pivoting=True)
  np.testing.assert_array_equal(p2, p)
