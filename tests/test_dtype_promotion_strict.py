"""jax_numpy_dtype_promotion='strict' (``ourjax.numpy_dtype_promotion`` and the config flag), as
JAX 0.10.2: operands of different dtypes raise TypePromotionError; equal dtypes and weakly typed
Python scalars of a kind the other dtype holds still work."""
import itertools

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import dtypes

_DTYPES = ["bool", "uint8", "uint32", "int8", "int16", "int32", "float16", "bfloat16", "float32",
           "complex64"]
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "V": 2, "c": 3}    # (bfloat16 has kind V)


def _strict_ok(a, b):
  """The reference rule of JAX's strict lattice for an array of dtype ``a`` and either an
  array of dtype ``b`` or (b a Python type) a weakly typed scalar of that type."""
  if isinstance(b, type):
    if b is bool:
      return a == "bool"
    rank = {int: 1, float: 2, complex: 3}[b]
    return a != "bool" and _KIND_RANK[np.dtype(jnp.dtype(a)).kind] >= rank
  return a == b


def test_binary_ops_follow_the_strict_lattice():
  with ourjax.numpy_dtype_promotion("strict"):
    for a, b in itertools.chain(itertools.product(_DTYPES, _DTYPES),
                                itertools.product(_DTYPES, [bool, int, float, complex])):
      x = jnp.ones(3, a)
      y = b(1) if isinstance(b, type) else jnp.ones(3, b)
      if _strict_ok(a, b):
        out = jnp.multiply(x, y)
        assert out.dtype == np.dtype(jnp.dtype(a)) and not out.weak_type, (a, b)
      else:
        with pytest.raises(dtypes.TypePromotionError, match="jax_numpy_dtype_promotion=strict"):
          jnp.multiply(x, y)
  # standard promotion is back after the block
  assert jnp.multiply(jnp.ones(3, "int32"), jnp.ones(3, "float32")).dtype == np.float32


def test_strict_promotion_functions_and_weak_scalars():
  i32, f32 = jnp.ones(2, "int32"), jnp.ones(2, "float32")
  with ourjax.numpy_dtype_promotion("strict"):
    for f in [lambda: jnp.result_type(i32, f32), lambda: jnp.promote_types("int32", "float32"),
              lambda: jnp.where(True, i32, f32), lambda: jnp.concatenate([i32, f32]),
              lambda: ourjax.jit(lambda a, b: a + b)(i32, f32), lambda: i32 + 1.5]:
      with pytest.raises(dtypes.TypePromotionError):
        f()
    out = jnp.add(1, 2.0)           # weak scalars promote with each other
    assert out.dtype == np.float32 and out.weak_type
    assert jnp.result_type("float32", "float32") == np.float32
    # as JAX: result_type sees canonical dtypes (a NumPy float64 is float32 without x64)
    assert (f32 + np.float64(1)).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(i32.astype("float32") + f32), [2., 2.])
    assert jnp.sum(i32, dtype="float32").dtype == np.float32


def test_config_flag_and_jit_cache():
  assert ourjax.config.jax_numpy_dtype_promotion == "standard"
  with pytest.raises(ValueError, match="not a valid NumpyDtypePromotion"):
    ourjax.numpy_dtype_promotion("foo")
  with pytest.raises(ValueError, match="not a valid NumpyDtypePromotion"):
    ourjax.config.update("jax_numpy_dtype_promotion", "foo")
  f = ourjax.jit(lambda a, b: a + b)
  i32, f32 = jnp.ones(2, "int32"), jnp.ones(2, "float32")
  assert f(i32, f32).dtype == np.float32
  ourjax.config.update("jax_numpy_dtype_promotion", "strict")
  try:
    with pytest.raises(dtypes.TypePromotionError):
      f(i32, f32)          # the cached standard trace is not reused
  finally:
    ourjax.config.update("jax_numpy_dtype_promotion", "standard")
  assert f(i32, f32).dtype == np.float32
