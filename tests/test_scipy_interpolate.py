"""scipy.interpolate.RegularGridInterpolator against NumPy float64 (np.interp for 1-D,
bilinear formulas for 2-D), nearest with JAX's tie rule, fill values and extrapolation."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy.interpolate import RegularGridInterpolator

x = np.linspace(0, 1, 5)
y = np.linspace(0, 2, 4)
V = x[:, None] ** 2 + np.sin(y)[None, :]


def bilinear(px, py):
  i = np.clip(np.searchsorted(x, px) - 1, 0, 3)
  j = np.clip(np.searchsorted(y, py) - 1, 0, 2)
  tx = (px - x[i]) / (x[i + 1] - x[i])
  ty = (py - y[j]) / (y[j + 1] - y[j])
  return ((1 - tx) * (1 - ty) * V[i, j] + tx * (1 - ty) * V[i + 1, j]
          + (1 - tx) * ty * V[i, j + 1] + tx * ty * V[i + 1, j + 1])


def test_linear_nearest_fill_and_extrapolation():
  rng = np.random.RandomState(0)
  p = np.stack([rng.uniform(0, 1, 20), rng.uniform(0, 2, 20)], 1)
  f = RegularGridInterpolator((x, y), V.astype(np.float32))
  np.testing.assert_allclose(f(p.astype(np.float32)), bilinear(p[:, 0], p[:, 1]), rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(ourjax.jit(f)(p.astype(np.float32)), bilinear(p[:, 0], p[:, 1]),
                             rtol=1e-5, atol=1e-6)
  out = np.asarray(f(np.array([[1.2, 0.5], [-0.1, 0.]], np.float32)))
  assert np.isnan(out).all()                                        # fill_value=nan
  ext = RegularGridInterpolator((x, y), V, fill_value=None)(np.array([[1.2, 0.5]]))
  np.testing.assert_allclose(ext, bilinear(np.array([1.2]), np.array([0.5])), rtol=1e-5)
  near = RegularGridInterpolator((x, y), V, method="nearest")
  # ties go to the lower grid point (JAX 0.10.2: 0.0 at (0.125, 1/3))
  np.testing.assert_allclose(near(np.array([[0.125, 1 / 3], [0.2, 1.9]])), [V[0, 0], V[1, 3]],
                             rtol=1e-6)
  assert f(jnp.array([0.3, 0.7])).shape == (1,)                    # one point, as JAX
  f1 = RegularGridInterpolator((x,), x ** 2)
  np.testing.assert_allclose(f1(np.array([0.3, 0.9])), np.interp([0.3, 0.9], x, x ** 2),
                             rtol=1e-6)
  V3 = np.stack([V, 2 * V], -1)
  got = RegularGridInterpolator((x, y), V3)(p[:3])
  np.testing.assert_allclose(got, np.stack([bilinear(p[:3, 0], p[:3, 1])] * 2, -1)
                             * [1, 2], rtol=1e-5)
  with pytest.raises(NotImplementedError, match="bounds_error"):
    RegularGridInterpolator((x, y), V, bounds_error=True)
  with pytest.raises(ValueError, match="method 'cubic' is not defined"):
    RegularGridInterpolator((x, y), V, method="cubic")
