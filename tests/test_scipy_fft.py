"""scipy.fft.dct/idct/dctn/idctn (type 2) against the DCT-II definition written in NumPy
float64, round trips, padding/truncation and JAX's errors."""
import numpy as np
import pytest

import ourjax.numpy as jnp
from ourjax.scipy import fft


def np_dct2(x, axis=-1, ortho=False):
  x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
  n = x.shape[-1]
  k = np.arange(n)[:, None]
  j = np.arange(n)[None, :]
  M = 2 * np.cos(np.pi * k * (2 * j + 1) / (2 * n))
  if ortho:
    M = M * np.where(k == 0, np.sqrt(1 / (4 * n)), np.sqrt(1 / (2 * n)))
  return np.moveaxis(x @ M.T, -1, axis)


def test_dct_matches_the_definition_and_inverts():
  x = np.random.RandomState(0).randn(5, 6).astype(np.float32)
  for ortho, norm in ((False, None), (False, "backward"), (True, "ortho")):
    np.testing.assert_allclose(fft.dct(x, norm=norm), np_dct2(x, ortho=ortho), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(fft.dct(x, axis=0, norm=norm), np_dct2(x, 0, ortho), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(fft.dctn(x, norm=norm), np_dct2(np_dct2(x, 0, ortho), 1, ortho),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fft.idct(fft.dct(x, norm=norm), norm=norm), x, atol=1e-5)
    np.testing.assert_allclose(fft.idctn(fft.dctn(x, norm=norm), norm=norm), x, atol=1e-5)
  padded = np.concatenate([x, np.zeros((3, 6), np.float32)], 0)
  np.testing.assert_allclose(fft.dct(x, n=8, axis=0), np_dct2(padded, 0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(fft.dct(x, n=3), np_dct2(x[:, :3]), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(fft.dctn(x, s=(3, 4)), np_dct2(np_dct2(x[:3, :4], 0), 1),
                             rtol=1e-5, atol=1e-4)
  assert fft.dct(jnp.arange(4)).dtype == jnp.float32


def test_errors():
  with pytest.raises(NotImplementedError, match="Only DCT type 2"):
    fft.dct(jnp.ones(3), type=3)
  with pytest.raises(ValueError, match="not implemented"):
    fft.dct(jnp.ones(3), norm="forward")
