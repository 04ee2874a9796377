"""scipy.signal (convolve/correlate in N-D, direct and FFT, the 2-D variants, detrend) and
scipy.ndimage.map_coordinates against NumPy float64 references written here (scipy's
definitions) and values recorded from JAX 0.10.2."""
import itertools

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy import ndimage, signal


def np_convolve_full(a, b):
  out = np.zeros(tuple(n1 + n2 - 1 for n1, n2 in zip(a.shape, b.shape)), np.result_type(a, b))
  for idx in itertools.product(*[range(n) for n in b.shape]):
    out[tuple(slice(i, i + n) for i, n in zip(idx, a.shape))] += b[idx] * a
  return out


def np_convolve(a, b, mode):
  full = np_convolve_full(a, b)
  if mode == "full":
    return full
  if mode == "same":           # scipy: centred on the full result, the size of a
    starts = [(f - n) // 2 for f, n in zip(full.shape, a.shape)]
    return full[tuple(slice(s, s + n) for s, n in zip(starts, a.shape))]
  big, small = (a, b) if all(x >= y for x, y in zip(a.shape, b.shape)) else (b, a)
  return full[tuple(slice(m - 1, n) for n, m in zip(big.shape, small.shape))]


def np_correlate(a, b, mode):
  return np_convolve(a, np.conj(np.flip(b)), mode)


CASES = [((7,), (3,)), ((3,), (7,)), ((6,), (4,)), ((5, 6), (2, 3)), ((2, 3), (5, 6)),
         ((4, 5, 3), (2, 2, 2))]


@pytest.mark.parametrize("s1,s2", CASES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_and_correlate_match_numpy(s1, s2, mode):
  rng = np.random.RandomState(0)
  a, b = rng.randn(*s1), rng.randn(*s2)
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  for method in ("direct", "fft"):
    got = signal.convolve(a32, b32, mode, method=method)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, np_convolve(a, b, mode), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(signal.correlate(a32, b32, mode, method=method),
                               np_correlate(a, b, mode), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(signal.fftconvolve(a32, b32, mode), np_convolve(a, b, mode),
                             rtol=1e-4, atol=1e-5)


def test_convolve_dtypes_complex_grad_and_errors():
  got = signal.convolve(jnp.arange(5), jnp.array([1, 2]))
  assert got.dtype == jnp.float32          # JAX: integers promote to the default float
  np.testing.assert_allclose(got, np.convolve(np.arange(5), [1, 2]))
  a = np.arange(5.) * (1 + 1j)
  np.testing.assert_allclose(signal.correlate(a.astype(np.complex64), jnp.array([1j, 2.])),
                             np.correlate(a, np.array([1j, 2.]), "full"), rtol=1e-6)
  g = ourjax.grad(lambda x: signal.convolve(x, jnp.array([1., 2, 3]), "same").sum())(
      jnp.arange(5.))
  np.testing.assert_allclose(g, [5., 6., 6., 6., 3.])    # column sums of the 'same' operator
  with pytest.raises(ValueError, match="at least as large"):
    signal.convolve(jnp.ones((2, 5)), jnp.ones((3, 3)), "valid")
  with pytest.raises(ValueError, match="same number of dimensions"):
    signal.convolve(jnp.ones((2, 5)), jnp.ones(3))


def test_2d_variants():
  a = np.arange(12.).reshape(3, 4)
  b = np.array([[1., 2.], [3., 5.]])
  np.testing.assert_allclose(signal.convolve2d(a, b, "same"), np_convolve(a, b, "same"))
  # JAX 0.10.2 (as scipy.signal.correlate2d): 'same' is centred differently from correlate's
  # for an even-sized kernel
  np.testing.assert_allclose(signal.correlate2d(a, b, "same"),
                             [[39., 50., 61., 24.], [83., 94., 105., 40.], [26., 29., 32., 11.]])
  np.testing.assert_allclose(signal.correlate2d(b, a, "valid"),
                             [[105., 94., 83.], [61., 50., 39.]])
  np.testing.assert_allclose(signal.correlate2d(a, b, "full"), np_correlate(a, b, "full"))
  with pytest.raises(NotImplementedError):
    signal.convolve2d(a, b, boundary="wrap")
  with pytest.raises(ValueError):
    signal.convolve2d(a[0], b[0])


def test_fftconvolve_axes_and_detrend():
  got = signal.fftconvolve(jnp.ones((3, 4)), jnp.ones((3, 2)), axes=1)
  np.testing.assert_allclose(got, np.tile([1., 2., 2., 2., 1.], (3, 1)), atol=1e-5)
  rng = np.random.RandomState(1)
  x = rng.randn(3, 10)
  t = np.arange(10.)
  lin = 2.0 * t - 1.0
  np.testing.assert_allclose(signal.detrend((x * 0 + lin).astype(np.float32)), 0, atol=1e-4)
  np.testing.assert_allclose(signal.detrend(x.astype(np.float32), axis=0, type="constant"),
                             x - x.mean(0), atol=1e-6)
  # piecewise: each piece's least-squares line removed
  got = np.asarray(signal.detrend(x.astype(np.float32), bp=[4]))
  for lo, hi in ((0, 4), (4, 10)):
    A = np.stack([np.arange(hi - lo), np.ones(hi - lo)], 1)
    res = x[:, lo:hi].T - A @ np.linalg.lstsq(A, x[:, lo:hi].T, rcond=None)[0]
    np.testing.assert_allclose(got[:, lo:hi], res.T, atol=1e-5)


# -- map_coordinates: JAX 0.10.2's values on arange(5.), cval=-1 -------------------------------
POINTS0 = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 4.5, 5.5, 7.2]
POINTS1 = [-2.5, -1.3, -0.5, 0.5, 3.7, 4.5, 5.5, 7.2]
JAX_ORDER0 = {
    "constant": [-1, -1, -1, 1, 2, 3, -1, -1, -1], "nearest": [0, 0, 0, 1, 2, 3, 4, 4, 4],
    "wrap": [2, 3, 4, 1, 2, 3, 0, 1, 2], "mirror": [3, 2, 1, 1, 2, 3, 3, 2, 1],
    "reflect": [2, 1, 0, 1, 2, 3, 4, 3, 2]}
JAX_ORDER1 = {
    "constant": [-1, -1, -0.5, 0.5, 3.7, 1.5, -1, -1], "nearest": [0, 0, 0, 0.5, 3.7, 4, 4, 4],
    "wrap": [2.5, 3.7, 2, 0.5, 3.7, 2, 0.5, 2.2], "mirror": [2.5, 1.3, 0.5, 0.5, 3.7, 3.5, 2.5, 0.8],
    "reflect": [1.5, 0.3, 0, 0.5, 3.7, 4, 3.5, 1.8]}


@pytest.mark.parametrize("mode", sorted(JAX_ORDER0))
def test_map_coordinates_modes_match_jax(mode):
  x = jnp.arange(5.)
  np.testing.assert_allclose(
      ndimage.map_coordinates(x, [jnp.array(POINTS0)], order=0, mode=mode, cval=-1),
      JAX_ORDER0[mode])
  np.testing.assert_allclose(
      ndimage.map_coordinates(x, [jnp.array(POINTS1)], order=1, mode=mode, cval=-1),
      JAX_ORDER1[mode], atol=1e-5)


def test_map_coordinates_2d_linear_against_numpy_and_grad():
  img = np.arange(12.).reshape(3, 4) ** 1.5
  rng = np.random.RandomState(0)
  r, c = rng.uniform(0, 2, 7), rng.uniform(0, 3, 7)
  r0, c0 = np.floor(r).astype(int), np.floor(c).astype(int)
  fr, fc = r - r0, c - c0
  want = ((1 - fr) * (1 - fc) * img[r0, c0] + (1 - fr) * fc * img[r0, c0 + 1]
          + fr * (1 - fc) * img[r0 + 1, c0] + fr * fc * img[r0 + 1, c0 + 1])
  coords = [jnp.asarray(r, jnp.float32), jnp.asarray(c, jnp.float32)]
  np.testing.assert_allclose(ndimage.map_coordinates(img.astype(np.float32), coords, 1), want,
                             rtol=1e-5)
  np.testing.assert_allclose(
      ourjax.jit(lambda i, cc: ndimage.map_coordinates(i, cc, 1))(img.astype(np.float32),
                                                                  coords), want, rtol=1e-5)
  g = ourjax.grad(lambda i: ndimage.map_coordinates(i, coords, 1).sum())(
      jnp.asarray(img, jnp.float32))
  np.testing.assert_allclose(np.asarray(g).sum(), 7.0, rtol=1e-5)   # weights sum to 1 per point
  # integer input: rounded half away from zero (JAX: [1, 2, 3, 0])
  got = ndimage.map_coordinates(jnp.arange(5), [jnp.array([0.5, 1.5, 2.5, 0.25])], order=1)
  assert got.dtype == jnp.int32 and got.tolist() == [1, 2, 3, 0]
  with pytest.raises(NotImplementedError, match="order"):
    ndimage.map_coordinates(img, coords, order=3)
  with pytest.raises(NotImplementedError, match="mode"):
    ndimage.map_coordinates(img, coords, order=1, mode="grid-wrap")
  with pytest.raises(ValueError, match="input.ndim"):
    ndimage.map_coordinates(img, coords[:1], order=1)


# -- stft / welch / csd ------------------------------------------------------------------------

def test_stft_segments_are_scaled_rffts():
  rng = np.random.RandomState(0)
  x = rng.randn(2, 96)
  f, t, Z = signal.stft(x.astype(np.float32), fs=4., window="boxcar", nperseg=32, noverlap=0,
                        boundary=None, padded=False)
  np.testing.assert_allclose(f, np.fft.rfftfreq(32, 1 / 4.), rtol=1e-6)
  np.testing.assert_allclose(t, (np.arange(3) * 32 + 16) / 4., rtol=1e-6)
  want = np.stack([np.fft.rfft(x[:, m * 32:(m + 1) * 32]) / 32 for m in range(3)], -1)
  assert Z.shape == (2, 17, 3)
  np.testing.assert_allclose(Z, want, rtol=1e-4, atol=1e-5)
  # the default: a periodic Hann window, half overlap, zero boundaries, times from 0
  f, t, Z = signal.stft(x[0].astype(np.float32), nperseg=32)
  win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(32) / 32)
  xp = np.concatenate([np.zeros(16), x[0], np.zeros(16)])
  np.testing.assert_allclose(Z[:, 2], np.fft.rfft(xp[32:64] * win) / win.sum(), rtol=1e-4,
                             atol=1e-5)
  np.testing.assert_allclose(t[:3], [0., 16., 32.])


def test_welch_density_integrates_to_the_variance_and_csd_of_itself():
  rng = np.random.RandomState(1)
  x = rng.randn(128)
  f, P = signal.welch(x.astype(np.float32), fs=2., window="boxcar")    # one segment (JAX)
  assert P.shape == (65,)
  np.testing.assert_allclose(np.sum(np.asarray(P, np.float64)) * (f[1] - f[0]), x.var(),
                             rtol=1e-4)
  # a sinusoid on a frequency bin: power A**2 / 2 there in the (one-sided) power spectrum
  n = np.arange(256)
  s = 3 * np.cos(2 * np.pi * 8 * n / 64)
  f, P = signal.welch(s.astype(np.float32), nperseg=64, window="boxcar", scaling="spectrum")
  np.testing.assert_allclose(P[8], 4.5, rtol=1e-4)
  assert float(np.max(np.delete(np.asarray(P), 8))) < 1e-4
  f1, Pxx = signal.welch(x.astype(np.float32), nperseg=32)
  f2, Pxy = signal.csd(x.astype(np.float32), x.astype(np.float32), nperseg=32)
  np.testing.assert_allclose(np.real(Pxy), Pxx, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(np.imag(Pxy), 0, atol=1e-6)


def test_istft_inverts_stft():
  rng = np.random.RandomState(2)
  x = rng.randn(256).astype(np.float32)
  for kw in (dict(nperseg=64), dict(nperseg=64, noverlap=48, window="hamming"),
             dict(nperseg=50, nfft=64)):
    _, _, Z = signal.stft(x, **kw)
    t, xr = signal.istft(Z, **kw)
    np.testing.assert_allclose(np.asarray(xr)[:256], x, atol=1e-5)
    np.testing.assert_allclose(t[:3], [0., 1., 2.])
  xb = rng.randn(2, 128).astype(np.float32)
  _, _, Zb = signal.stft(xb, nperseg=32)
  _, xbr = signal.istft(jnp.swapaxes(Zb, -1, -2), nperseg=32, time_axis=-2, freq_axis=-1)
  np.testing.assert_allclose(np.asarray(xbr)[:, :128], xb, atol=1e-5)
  with pytest.raises(ValueError, match="differing time and frequency"):
    signal.istft(Zb, time_axis=-1, freq_axis=-1)
