"""Small JAX API behaviours checked against JAX 0.10.2's: fwd_and_bwd, linear_transpose of an
integer -> integer map, the function name in a jitted function's state."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_fwd_and_bwd_matches_vjp(n, seed):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((3, n)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((n, n)), jnp.float32)
  ct = jnp.asarray(rng.standard_normal((3, n)), jnp.float32)
  f = lambda x, w: jnp.tanh(x @ w)                        # noqa: E731
  y0, f_vjp = ourjax.vjp(f, x, w)
  fwd, bwd = ourjax.fwd_and_bwd(f, argnums=(0, 1))
  y, res = fwd(x, w)
  np.testing.assert_allclose(y, y0, rtol=1e-6)
  for got, want in zip(bwd(res, ct), f_vjp(ct)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  fwd1, bwd1 = ourjax.fwd_and_bwd(f, argnums=1)
  _, res1 = fwd1(x, w)
  np.testing.assert_allclose(bwd1(res1, ct), f_vjp(ct)[1], rtol=1e-5, atol=1e-6)


def test_fwd_and_bwd_compile_once():
  f = lambda x, w: x @ w                                  # noqa: E731
  x = w = jnp.ones((4, 4))
  fwd, bwd = ourjax.fwd_and_bwd(f, argnums=(0, 1))
  _, res = fwd(x, w)
  bwd(res, x)
  with ourjax.no_tracing():
    _, res = fwd(x, w)
    gx, gw = bwd(res, x)
  np.testing.assert_allclose(gx, np.ones((4, 4)) @ np.ones((4, 4)).T)


def test_linear_transpose_of_an_integer_map():
  t = ourjax.linear_transpose(lambda x: 3 * x, jnp.arange(3, dtype=jnp.int32))
  (out,) = t(jnp.array([1, 2, 5], jnp.int32))
  assert out.dtype == np.int32
  np.testing.assert_array_equal(out, [3, 6, 15])
  with pytest.raises(TypeError, match="linear_transpose only supports"):
    ourjax.linear_transpose(lambda x: 2.0 * x, 1)


def test_jitted_function_state_names_the_function():
  def my_function():
    return 1
  name = lambda f: ourjax.jit(f).__getstate__()["function_name"]     # noqa: E731
  assert name(my_function) == "my_function"
  assert name(functools.partial(functools.partial(my_function))) == "my_function"
  p = functools.partial(my_function)
  p.__name__ = "my_partial"
  assert name(p) == "my_partial"
  assert name(lambda: 1) == "<lambda>"

  class C:
    def __call__(self):
      return 1
  assert name(C()) == "<unnamed function>"


def test_compiler_ir_hlo_text():
  f = ourjax.jit(lambda x: jnp.sin(jnp.cos(x)))
  hlo = f.lower(2.0).compiler_ir(dialect="hlo").as_hlo_text()
  assert " cosine" in hlo and " sine" in hlo
  stablehlo = str(f.lower(2.0).compiler_ir(dialect="stablehlo"))
  assert "stablehlo.cosine" in stablehlo and "stablehlo.sine" in stablehlo


def test_cond_branches_share_a_closed_over_value():
  # JAX's common consts: a value both branches close over is one operand of the cond
  from ourjax import lax

  def f(x):
    return lax.cond(x >= 0.0, lambda xt, _: xt + x, lambda _, xf: xf - x, x + 1.0, x + 2.0)
  jaxpr = ourjax.make_jaxpr(f)(jnp.float32(3.0))
  (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "cond"]
  assert len(eqn.inputs) == 4          # index, x (once), x + 1, x + 2
  assert all(len(b.jaxpr.invars) == 3 for b in eqn.params["branches"])
  for x, want, dwant in [(3.0, 7.0, 2.0), (-3.0, 2.0, 0.0)]:
    assert float(f(x)) == want and float(ourjax.grad(f)(x)) == dwant


def test_core_eval_context_evaluates_eagerly_under_jit():
  from ourjax import core

  @ourjax.jit
  def f(x):
    with core.eval_context():
      assert jnp.add(1, 1) == 2          # a concrete bool: no tracer inside the context
      y = jnp.arange(3.0) * 2
    return x + y
  np.testing.assert_allclose(f(1.0), [1.0, 3.0, 5.0])


def test_top_level_names_jax_programs_use():
  # jax.debug_nans / debug_infs (context managers with .value), jax.Device (the devices' type),
  # jax.host_count / host_id / host_ids / process_indices, jax.stages; stax's short names
  import ourjax
  from ourjax.example_libraries import stax
  with ourjax.debug_nans(True):
    assert ourjax.debug_nans.value is True
  assert ourjax.debug_nans.value is False
  with ourjax.debug_infs(True):
    assert ourjax.debug_infs.value is True
  assert isinstance(ourjax.devices()[0], ourjax.Device)
  assert ourjax.host_count() == ourjax.process_count() >= 1
  assert ourjax.host_id() == ourjax.process_index()
  assert ourjax.process_indices() == ourjax.host_ids() == list(range(ourjax.process_count()))
  assert ourjax.stages.Lowered is not None
  assert stax.glorot is ourjax.nn.initializers.glorot_normal and stax.logsoftmax is ourjax.nn.log_softmax
  assert stax.randn is ourjax.nn.initializers.normal
