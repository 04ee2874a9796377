"""image.resize / scale_and_translate against NumPy references (half-pixel linear sampling,
nearest indexing, area = block means) and values recorded from JAX 0.10.2 (cubic, Lanczos,
PyTorch cubic, antialiased downsampling, scale_and_translate)."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import image


def test_linear_upsampling_is_half_pixel_interpolation():
  x = np.arange(4.)
  got = image.resize(jnp.asarray(x, jnp.float32), (8,), "linear")
  want = np.interp((np.arange(8) + 0.5) / 2 - 0.5, np.arange(4), x)   # clamps at the edges
  np.testing.assert_allclose(got, want, atol=1e-6)
  img = np.random.RandomState(0).randn(3, 5).astype(np.float32)
  got2 = image.resize(img, (6, 10), "bilinear")
  rows = np.array([np.interp((np.arange(10) + 0.5) / 2 - 0.5, np.arange(5), r) for r in img])
  want2 = np.array([np.interp((np.arange(6) + 0.5) / 2 - 0.5, np.arange(3), c) for c in rows.T]).T
  np.testing.assert_allclose(got2, want2, atol=1e-5)


def test_antialiased_downsampling_and_recorded_kernels():
  x = jnp.arange(4.)
  # JAX 0.10.2
  np.testing.assert_allclose(image.resize(x, (2,), "linear"), [0.7142857, 2.2857146], rtol=1e-6)
  np.testing.assert_allclose(image.resize(x, (2,), "linear", antialias=False), [0.5, 2.5])
  y = jnp.array([0., 1., 4., 9., 16.])
  jax_values = {
      "cubic": ([0.16923106, 4.1953497, 13.338462],
                [-0.07195572, 0.24374928, 1.12890625, 2.84765625, 5.34765625, 8.62890625,
                 13.488184, 16.503689]),
      "lanczos3": ([0.10328823, 4.0, 13.530499],
                   [-0.00854646, 0.19520627, 1.1101155, 2.9285474, 5.041241, 8.493007,
                    13.745972, 16.559128]),
      "lanczos5": ([0.18040013, 3.9135952, 13.584051],
                   [-0.00669166, 0.04913476, 1.2119311, 3.4287825, 4.551299, 8.399365,
                    13.849902, 16.600555]),
  }
  for method, (down, up) in jax_values.items():
    np.testing.assert_allclose(image.resize(y, (3,), method), down, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(image.resize(y, (8,), method), up, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      image.resize(y, (8,), image.ResizeMethod.CUBIC_PYTORCH, antialias=False),
      [-0.09283447, 0.18756104, 1.1765137, 2.6193848, 5.4416504, 8.471436, 13.395081,
       16.649841], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      image.scale_and_translate(y, (6,), (0,), jnp.array([1.5]), jnp.array([-0.5]), "linear"),
      [0.16666669, 0.83333337, 2.5, 4.833334, 8.166666, 12.5], rtol=1e-5)


def test_nearest_area_dtypes_and_grad():
  img = np.arange(35).reshape(5, 7)
  got = image.resize(img, (3, 4), "nearest")
  r = np.floor((np.arange(3) + 0.5) * 5 / 3).astype(int)
  c = np.floor((np.arange(4) + 0.5) * 7 / 4).astype(int)
  np.testing.assert_array_equal(got, img[r][:, c])
  assert got.dtype == jnp.int32                    # nearest keeps the dtype
  assert image.resize(img, (3, 4), "linear").dtype == jnp.float32
  x = np.random.RandomState(1).randn(4, 6).astype(np.float32)
  np.testing.assert_allclose(image.resize(x, (2, 3), "area"),
                             x.reshape(2, 2, 3, 2).mean(axis=(1, 3)), rtol=1e-5)
  g = ourjax.grad(lambda v: image.resize(v, (3, 4), "linear").sum())(jnp.asarray(x))
  np.testing.assert_allclose(np.asarray(g).sum(), 12.0, rtol=1e-5)   # each output's weights sum to 1
  np.testing.assert_allclose(ourjax.jit(lambda v: image.resize(v, (9, 4), "cubic"))(x),
                             image.resize(x, (9, 4), "cubic"), rtol=1e-5, atol=1e-6)


def test_errors_and_method_names():
  x = jnp.ones((4, 4))
  with pytest.raises(ValueError, match="Unknown resize method"):
    image.resize(x, (2, 2), "foo")
  with pytest.raises(ValueError, match="length equal to the number of dimensions"):
    image.resize(x, (2,), "linear")
  with pytest.raises(ValueError, match="Nearest neighbor"):
    image.scale_and_translate(x, (2, 2), (0, 1), jnp.ones(2), jnp.zeros(2), "nearest")
  assert image.ResizeMethod.from_string("trilinear") is image.ResizeMethod.LINEAR
  assert image.ResizeMethod.from_string("bicubic") is image.ResizeMethod.CUBIC
