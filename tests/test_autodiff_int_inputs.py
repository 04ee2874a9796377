"""Integer inputs of grad/vjp/jvp (float0 tangents) reach the function unwrapped, as in JAX:
Python logic on them works, and NumPy inputs keep NumPy's arithmetic."""
import numpy as np

import ourjax as jax
import ourjax.numpy as jnp


def test_grad_allow_int_passes_integer_input_unwrapped():
  seen = []

  def f(x, n):
    seen.append(type(n))
    return x ** int(n)          # needs a concrete n

  gx, gn = jax.grad(f, argnums=(0, 1), allow_int=True)(2.0, 3)
  np.testing.assert_allclose(gx, 3 * 2.0 ** 2, rtol=1e-6)
  assert gn.dtype == jax.dtypes.float0
  assert not any(issubclass(t, jax.core.Tracer) for t in seen)


def test_grad_allow_int_numpy_input_under_strict_promotion():
  # a NumPy integer array stays NumPy inside the function (NumPy arithmetic), so adding a
  # Python float is not a jnp promotion and strict promotion has nothing to refuse
  with jax.numpy_dtype_promotion("strict"):
    g = jax.grad(lambda x: jnp.sum(x + 0.), allow_int=True)(np.ones((2, 4), dtype=int))
  assert g.dtype == jax.dtypes.float0 and g.shape == (2, 4)
  np.testing.assert_array_equal(g.reshape((4, 2)), np.zeros((4, 2), dtype=jax.dtypes.float0))


def test_vjp_mixed_int_float_matches_finite_differences():
  def f(x, k):
    return jnp.sin(x) * k[0] + jnp.cos(x) * k[1]
  x = np.float32(0.7)
  k = np.array([2, 3], np.int32)
  out, vjp = jax.vjp(f, x, k)
  gx, gk = vjp(np.float32(1.0))
  eps = 1e-3
  fd = (np.sin(x + eps) * 2 + np.cos(x + eps) * 3 - np.sin(x - eps) * 2 - np.cos(x - eps) * 3)
  np.testing.assert_allclose(gx, fd / (2 * eps), rtol=1e-3)
  assert gk.dtype == jax.dtypes.float0
