"""example_libraries.stax against NumPy float64 forward passes and JAX 0.10.2's recorded
initial parameters (the same PRNG key gives the same parameters as JAX's stax)."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import random
from ourjax.example_libraries import stax


def test_serial_init_matches_jax_and_forward_matches_numpy():
  init, apply = stax.serial(stax.Dense(2), stax.Relu, stax.Dense(1))
  shape, params = init(random.PRNGKey(0), (3, 2))
  assert shape == (3, 1)
  # jax.example_libraries.stax, JAX 0.10.2, PRNGKey(0)
  np.testing.assert_allclose(params[0][0], [[0.152530699968338, -0.5852099061012268],
                                            [-0.9362367987632751, -0.31423044204711914]],
                             rtol=1e-6)
  np.testing.assert_allclose(params[0][1], [-0.013356249779462814, -0.0035256301052868366],
                             rtol=1e-6)
  np.testing.assert_allclose(params[2][0], [[0.03280113264918327], [-1.1987627744674683]],
                             rtol=1e-6)
  assert params[1] == ()
  x = np.random.RandomState(0).randn(3, 2).astype(np.float32)
  W1, b1 = (np.asarray(a, np.float64) for a in params[0])
  W2, b2 = (np.asarray(a, np.float64) for a in params[2])
  want = np.maximum(x @ W1 + b1, 0) @ W2 + b2
  np.testing.assert_allclose(apply(params, x), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ourjax.jit(apply)(params, x), want, rtol=1e-5, atol=1e-6)


def test_conv_pool_flatten_shapes_and_values():
  init, apply = stax.serial(stax.Conv(3, (2, 2), padding="SAME"), stax.MaxPool((2, 2), strides=(2, 2)),
                            stax.Flatten)
  shape, params = init(random.PRNGKey(1), (2, 6, 6, 1))
  assert shape == (2, 27)
  x = np.random.RandomState(1).randn(2, 6, 6, 1).astype(np.float32)
  W, b = (np.asarray(a, np.float64) for a in params[0])
  assert W.shape == (2, 2, 1, 3) and b.shape == (1, 1, 1, 3)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 1), (0, 1), (0, 0)))   # SAME for a 2x2 filter
  conv = np.zeros((2, 6, 6, 3))
  for i in range(2):
    for j in range(2):
      conv += np.einsum("nhwc,co->nhwo", xp[:, i:i + 6, j:j + 6, :], W[i, j])
  conv += b
  pooled = conv.reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4))
  np.testing.assert_allclose(apply(params, x), pooled.reshape(2, -1), rtol=1e-5, atol=1e-5)


def test_avgpool_same_divides_by_the_valid_window_size():
  init, apply = stax.AvgPool((2, 2), strides=(1, 1), padding="SAME")
  shape, _ = init(None, (1, 3, 3, 1))
  assert shape == (1, 3, 3, 1)
  x = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
  got = np.asarray(apply((), x))[0, :, :, 0]
  xs = x[0, :, :, 0]
  want = np.array([[xs[i:i + 2, j:j + 2].mean() for j in range(3)] for i in range(3)])
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fanout_parallel_concat_and_conv_transpose_shape():
  init, apply = stax.serial(stax.FanOut(2), stax.parallel(stax.Dense(3), stax.Identity),
                            stax.FanInConcat())
  shape, params = init(random.PRNGKey(2), (4, 3))
  assert shape == (4, 6)
  x = np.ones((4, 3), np.float32)
  out = np.asarray(apply(params, x))
  W, b = params[1][0]
  np.testing.assert_allclose(out[:, :3], x @ np.asarray(W) + np.asarray(b), rtol=1e-5)
  np.testing.assert_allclose(out[:, 3:], x)
  # JAX 0.10.2: ConvTranspose(2, (3, 3), strides=(2, 2)) on (1, 4, 4, 2) gives (1, 9, 9, 2)
  init_t, apply_t = stax.ConvTranspose(2, (3, 3), strides=(2, 2))
  shape_t, params_t = init_t(random.PRNGKey(0), (1, 4, 4, 2))
  assert shape_t == (1, 9, 9, 2)
  assert apply_t(params_t, jnp.ones((1, 4, 4, 2))).shape == (1, 9, 9, 2)


def test_dropout_needs_a_key_and_scales_kept_values():
  init, apply = stax.Dropout(0.5)
  x = jnp.ones((100,))
  with pytest.raises(ValueError, match="PRNG key"):
    apply((), x)
  out = np.asarray(apply((), x, rng=random.PRNGKey(0)))
  assert set(np.unique(out)) <= {0.0, 2.0} and 20 < (out == 2).sum() < 80
  _, apply_test = stax.Dropout(0.5, mode="test")
  np.testing.assert_array_equal(apply_test((), x, rng=random.PRNGKey(0)), x)
