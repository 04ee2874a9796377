"""ourjax.testing: the strategies draw what they promise, and the checks catch what they
should (and pass on correct code)."""
import numpy as np
import pytest
from hypothesis import given, settings

import ourjax
import ourjax.numpy as jnp
from ourjax import testing


@settings(max_examples=30, deadline=None)
@given(testing.shapes(min_dims=1, max_dims=3, min_side=2, max_side=4))
def test_shapes_respect_bounds(shape):
  assert 1 <= len(shape) <= 3 and all(2 <= d <= 4 for d in shape)


@settings(max_examples=40, deadline=None)
@given(testing.arrays(testing.dtypes(("float", "int", "bool")), testing.shapes(max_dims=2)))
def test_arrays_are_numpy_and_finite(x):
  assert isinstance(x, np.ndarray) and x.ndim <= 2
  if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
    assert np.isfinite(x.astype(np.float32)).all() and np.abs(x.astype(np.float32)).max(
        initial=0) <= 1e3
  assert x.dtype.itemsize < 8  # x64 is off: no 64-bit dtypes


def test_dtypes_follow_x64_and_kinds(x64):
  seen = set()

  @settings(max_examples=60, deadline=None)
  @given(testing.dtypes(("int", "float"), narrow=False))
  def draw(dt):
    seen.add(np.dtype(dt).name)
  draw()
  assert "float64" in seen and "int64" in seen
  assert not seen & {"float16", "bfloat16", "bool", "uint8"}


@settings(max_examples=10, deadline=None)
@given(testing.arrays("bfloat16", (3,),
                      min_value=-2, max_value=2, as_ourjax=True))
def test_bfloat16_arrays_as_ourjax(x):
  assert isinstance(x, ourjax.Array) and x.dtype.name == "bfloat16" and x.shape == (3,)
  assert np.abs(np.asarray(x, np.float32)).max() <= 2


@settings(max_examples=15, deadline=None)
@given(testing.arrays(np.float32, testing.shapes(max_dims=2)))
def test_check_jit_matches_eager_passes_on_correct_code(x):
  out = testing.check_jit_matches_eager(
      lambda a: {"soft": ourjax.nn.softplus(a), "sum": jnp.sum(a * a)}, x, check_grads=True)
  assert set(out) == {"soft", "sum"}


def _differs_under_jit(a):
  # eager (jit disabled) and compiled evaluation take different branches on purpose
  return a + (1e-3 if ourjax.config.jax_disable_jit else 0.0)


def test_check_jit_matches_eager_catches_differences():
  x = np.ones(4, np.float32)
  with pytest.raises(AssertionError, match="differ at 4 of 4"):
    testing.check_jit_matches_eager(_differs_under_jit, x)
  testing.check_jit_matches_eager(_differs_under_jit, x, atol=1e-2)  # within a loose tolerance
  with pytest.raises(AssertionError, match="eager gives"):
    testing.check_jit_matches_eager(
        lambda a: a.astype(jnp.int32) if ourjax.config.jax_disable_jit else a, x)
  with pytest.raises(AssertionError, match="eager returns"):
    testing.check_jit_matches_eager(
        lambda a: (a, a) if ourjax.config.jax_disable_jit else [a, a], x)
  with pytest.raises(AssertionError, match="int32"):
    testing.check_jit_matches_eager(
        lambda a: a + (1 if ourjax.config.jax_disable_jit else 0), np.arange(3, dtype=np.int32))


def test_check_grads():
  testing.check_grads(lambda a: jnp.sin(a) * a, (jnp.array([0.3, -1.2, 2.0]),), order=2)
  with ourjax.enable_x64():
    testing.check_grads(lambda a, b: jnp.exp(a) * b, (jnp.array([0.3, -1.2], jnp.float64),
                                                      jnp.array([2.0, 0.5], jnp.float64)))

  wrong = ourjax.custom_jvp(lambda a: a * a)
  wrong.defjvps(lambda g, ans, a: 3 * a * g)  # the derivative of a^2 is 2a, not 3a
  with pytest.raises(AssertionError, match="forward mode"):
    testing.check_grads(wrong, (jnp.array([1.0, 2.0]),))

  bad_vjp = ourjax.custom_vjp(lambda a: 2 * a)
  bad_vjp.defvjp(lambda a: (2 * a, None), lambda _, ct: (3 * ct,))
  with pytest.raises(AssertionError, match="reverse mode"):
    testing.check_grads(bad_vjp, (jnp.array([1.0, 2.0]),), modes=("rev",))


def test_default_tolerance():
  assert testing.default_tolerance(np.float32)[0] > testing.default_tolerance(np.float64)[0]
  assert testing.default_tolerance(np.int32) == (0.0, 0.0)
