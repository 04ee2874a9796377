"""ourjax's own jnp functions never rely on implicit rank promotion: with
``jax_numpy_rank_promotion='raise'`` (the setting JAX's test suite runs under) they still work
and match NumPy, as JAX's do."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


@pytest.fixture
def rank_raise():
  with ourjax.numpy_rank_promotion("raise"):
    yield


def test_rank_promotion_raise_applies_to_user_code(rank_raise):
  with pytest.raises(ValueError, match="rank_promotion"):
    jnp.ones((2, 3)) * jnp.ones(3)


@pytest.mark.parametrize("kw", [{}, {"fweights": [1, 2, 1, 3, 1]},
                                {"aweights": [0.5, 0.1, 0.9, 0.3, 0.7]},
                                {"fweights": [1, 2, 1, 3, 1], "aweights": [0.5, 0.1, 0.9, 0.3, 0.7],
                                 "ddof": 2}])
def test_cov_weights_without_rank_promotion(rank_raise, kw):
  x = np.random.RandomState(0).randn(3, 5).astype(np.float32)
  kw = {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in kw.items()}
  np.testing.assert_allclose(jnp.cov(x, **kw), np.cov(x, **kw), rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(jnp.cov(x[:1], **kw), np.cov(x[:1], **kw), rtol=2e-5, atol=1e-6)
