"""Behaviours JAX's own test files check (jaxsuite, issue #18) that ourjax lacked: each against
NumPy or JAX's documented semantics."""
import warnings

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp


# -- jax_numpy_rank_promotion -----------------------------------------------------------------

def test_rank_promotion_allow_broadcasts_as_numpy():
  with ourjax.numpy_rank_promotion("allow"):
    out = jnp.ones(2) + jnp.ones((1, 2))
  np.testing.assert_array_equal(out, np.ones(2) + np.ones((1, 2)))


def test_rank_promotion_raise_refuses_different_ranks_but_not_scalars():
  with ourjax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match=r"add on shapes \(2,\) \(1, 2\).*"
                                         r"jax_numpy_rank_promotion='raise'"):
      jnp.ones(2) + jnp.ones((1, 2))
    # rank 0 never counts, nor do operands of one rank that broadcast
    np.testing.assert_array_equal(jnp.ones(2) + 3, np.full(2, 4.0))
    np.testing.assert_array_equal(jnp.ones((3, 1)) * jnp.ones((1, 2)), np.ones((3, 2)))
  # the option is part of jit's cache key: a function traced under 'allow' raises under 'raise'
  f = ourjax.jit(lambda a, b: a - b)
  assert f(jnp.ones(2), jnp.ones((1, 2))).shape == (1, 2)
  with ourjax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match="subtract"):
      f(jnp.ones(2), jnp.ones((1, 2)))


def test_rank_promotion_warn_and_decorator_use():
  with ourjax.numpy_rank_promotion("warn"):
    with pytest.warns(UserWarning, match=r"rank promotion for multiply on shapes \(2,\) "
                                         r"\(4, 1, 2\)"):
      out = jnp.ones(2) * jnp.ones((4, 1, 2))
    assert out.shape == (4, 1, 2)
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      jnp.ones(2) + 3.0

  @ourjax.numpy_rank_promotion("raise")
  def g():
    return jnp.ones(2) * jnp.ones((3, 2))
  for _ in range(2):   # the decorator applies on every call
    with pytest.raises(ValueError):
      g()
  with pytest.raises(ValueError, match="allow"):
    ourjax.config.update("jax_numpy_rank_promotion", "sometimes")
