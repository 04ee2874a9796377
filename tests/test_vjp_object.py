"""The object ``vjp`` returns (JAX's ``VJP``): residuals split into ``args_res`` (the primal
inputs the backward pass reads, ``NotNeeded()`` elsewhere) and ``opaque_residuals``, read when
it is called; it is a pytree that passes through jit; ``with_refs(DontWant(), ...)`` leaves the
unwanted gradients' computation out."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.ad import DidntWant, DontWant, GradValue, NotNeeded


def _f2(x, w):
  return 2.0 * ((1.0 * x) @ w)


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 4), n=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_args_res_can_be_dropped_and_restored(m, n, seed):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((n, n)), jnp.float32)
  y, f_vjp = ourjax.vjp(_f2, x, w)
  # the backward pass reads w (for x's cotangent) and 1*x (not x itself) as residuals
  assert isinstance(f_vjp.args_res[0], NotNeeded)
  assert f_vjp.args_res[1] is w
  f_vjp.args_res[1] = None
  with pytest.raises(ValueError, match="args_res"):
    f_vjp(jnp.ones_like(y))
  f_vjp.args_res[1] = w
  ct = jnp.asarray(rng.standard_normal(y.shape), jnp.float32)
  gx, gw = f_vjp(ct)
  np.testing.assert_allclose(gx, 2.0 * np.asarray(ct) @ np.asarray(w).T, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gw, 2.0 * np.asarray(x).T @ np.asarray(ct), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="unexpected JAX type"):
    f_vjp(jnp.ones((m + 1, n)))


def test_opaque_residuals_and_pytree_arguments():
  _, f_vjp = ourjax.vjp(jnp.sin, 3.0)
  assert isinstance(f_vjp.args_res[0], NotNeeded)
  np.testing.assert_allclose(f_vjp.opaque_residuals[0], np.cos(3.0), rtol=1e-6)
  _, f_vjp = ourjax.vjp(lambda d: [d["a"] * d["b"]], {"a": 2.0, "b": 3.0})
  assert f_vjp.args_res == [{"a": 2.0, "b": 3.0}]
  (g,) = f_vjp([1.0])
  assert float(g["a"]) == 3.0 and float(g["b"]) == 2.0


def test_scan_forwards_its_scanned_input_as_a_residual():
  def cumprod(x):
    return lax.scan(lambda s, x: (x * s, s), jnp.ones((2, 3)), x)
  x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 2, 3)), jnp.float32)
  _, f_vjp = ourjax.vjp(cumprod, x)
  (res,) = f_vjp.args_res
  assert res is x


def test_vjp_passes_through_jit():
  def f(x, y):
    return x * y

  @ourjax.jit
  def g():
    y, f_vjp = ourjax.vjp(f, 2.0, 3.0)
    f_vjp.args_res = [None, None]
    return y, f_vjp

  @ourjax.jit
  def h(f_vjp):
    f_vjp.args_res = [2.0, 3.0]
    return f_vjp(1.0)
  y, f_vjp = g()
  assert float(y) == 6.0
  assert [float(c) for c in h(f_vjp)] == [3.0, 2.0]


def test_dont_want_leaves_the_unwanted_gradient_out():
  x = y = jnp.arange(3.0)
  z, f_vjp = ourjax.vjp(lambda x, y: x * y, x, y)
  f_vjp = f_vjp.with_refs(DontWant(), GradValue())
  ones = jnp.ones_like(z)
  g = ourjax.jit(lambda: f_vjp(ones))
  x_grad, y_grad = g()
  assert x_grad == DidntWant()
  np.testing.assert_allclose(y_grad, x)
  assert len(g.trace().jaxpr.eqns) == 1


def test_a_vjp_returned_by_jit_holds_no_tracer():
  def apply_fn(inp):
    fn = ourjax.checkpoint(lambda x: ourjax.nn.relu(1.0 * x))
    return ourjax.vjp(fn, inp)
  with ourjax.check_tracer_leaks():
    y, f_vjp = ourjax.jit(apply_fn)(1.5)
  assert float(y) == 1.5
  assert float(f_vjp(2.0)[0]) == 2.0
