"""custom_batching.custom_vmap / sequential_vmap: the rule runs under vmap (and only there),
with JAX's in_batched (a list per argument), under jit, nested vmap, jvp of vmap and vmap of
jvp (the rule's JVP); values against NumPy float64."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import custom_batching as cb


def make():
  calls = []

  @cb.custom_vmap
  def f(x, y):
    return jnp.sin(x) * y

  @f.def_vmap
  def rule(axis_size, in_batched, x, y):
    calls.append((axis_size, in_batched))
    xb, yb = in_batched
    return jnp.cos(x) * y, xb or yb      # (a different function, so its use is visible)
  return f, calls


def test_rule_runs_only_under_vmap():
  f, calls = make()
  x = np.arange(3.)
  np.testing.assert_allclose(f(1., 2.), np.sin(1.) * 2, rtol=1e-6)
  assert calls == []
  np.testing.assert_allclose(ourjax.vmap(f, (0, None))(x, 2.), np.cos(x) * 2, rtol=1e-6)
  assert calls[-1] == (3, [True, False])
  np.testing.assert_allclose(ourjax.vmap(f)(x, x), np.cos(x) * x, rtol=1e-6)
  assert calls[-1] == (3, [True, True])
  np.testing.assert_allclose(ourjax.jit(ourjax.vmap(f, (0, None)))(x, 2.), np.cos(x) * 2,
                             rtol=1e-6)
  np.testing.assert_allclose(ourjax.vmap(ourjax.jit(f), (0, None))(x, 2.), np.cos(x) * 2,
                             rtol=1e-6)
  np.testing.assert_allclose(ourjax.vmap(ourjax.vmap(f, (0, None)), (0, None))(
      np.ones((2, 3)), 2.), np.full((2, 3), np.cos(1.) * 2), rtol=1e-6)


def test_jvp_uses_the_rules_derivative_under_vmap():
  f, _ = make()
  x = np.arange(3.)
  p, t = ourjax.jvp(ourjax.vmap(f, (0, None)), (x, 2.), (np.ones(3), 1.))
  np.testing.assert_allclose(p, np.cos(x) * 2, rtol=1e-6)
  np.testing.assert_allclose(t, -np.sin(x) * 2 + np.cos(x), rtol=1e-5, atol=1e-6)
  p, t = ourjax.vmap(lambda a: ourjax.jvp(f, (a, 2.), (1., 0.)))(x)
  np.testing.assert_allclose(t, -np.sin(x) * 2, rtol=1e-5, atol=1e-6)
  # outside vmap the function's own derivative
  np.testing.assert_allclose(ourjax.jvp(f, (1., 2.), (1., 0.))[1], np.cos(1.) * 2, rtol=1e-6)
  np.testing.assert_allclose(ourjax.grad(f)(1., 2.), np.cos(1.) * 2, rtol=1e-6)


def test_sequential_vmap_and_errors():
  s = cb.sequential_vmap(lambda a, b: jnp.sum(a) * b)
  assert float(s(jnp.arange(3.), 2.)) == 6.
  np.testing.assert_allclose(ourjax.vmap(s, (0, None))(np.ones((4, 3)), 2.), [6.] * 4)
  np.testing.assert_allclose(ourjax.vmap(s)(np.ones((4, 3)), np.arange(4.)), [0., 3., 6., 9.])
  g = cb.custom_vmap(lambda x: x)
  with pytest.raises(AttributeError, match="No batching rule"):
    g(1.)

  @cb.custom_vmap
  def h(x):
    return x

  @h.def_vmap
  def bad_rule(n, b, x):
    return x[0], True          # says batched, but the batch axis is gone
  with pytest.raises(ValueError, match="batched"):
    ourjax.vmap(h)(jnp.arange(3.))
