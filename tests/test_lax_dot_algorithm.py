"""``precision=`` as a dot algorithm (``lax.DotAlgorithmPreset``, its name, or a
``lax.DotAlgorithm``): operands the algorithm does not take are converted to its input type,
products accumulate in its accumulation type, and the result keeps the dtype it would have
without the algorithm; against float64 NumPy products of the converted operands."""
import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((3, 4)).astype(np.float32)
_B = _RNG.standard_normal((4, 5)).astype(np.float32)


def _ref(a, b, storage):
  return a.astype(storage).astype(np.float64) @ b.astype(storage).astype(np.float64)


@pytest.mark.parametrize("preset,in_dtype,storage,tol", [
    ("DEFAULT", np.float32, np.float32, 1e-6),
    ("F32_F32_F32", np.float32, np.float32, 1e-6),
    ("F32_F32_F32", np.float16, np.float16, 2e-3),     # f16 inputs, float32 products
    ("F16_F16_F16", np.float32, np.float16, 3e-3),     # f32 inputs rounded to float16
    ("F16_F16_F32", np.float16, np.float16, 2e-3),
    ("BF16_BF16_F32", ml_dtypes.bfloat16, ml_dtypes.bfloat16, 2e-2),
    ("BF16_BF16_F32", np.float32, np.float32, 1e-6),   # float32 operands taken as they are
    ("BF16_BF16_F32_X3", np.float32, np.float32, 1e-6),
    ("BF16_BF16_F32_X6", np.float32, np.float32, 1e-6),
])
@pytest.mark.parametrize("by_name", [True, False])
def test_presets(preset, in_dtype, storage, tol, by_name):
  algorithm = preset if by_name else lax.DotAlgorithmPreset[preset]
  a, b = _A.astype(in_dtype), _B.astype(in_dtype)
  want = _ref(a, b, storage)
  for f in (lambda a, b: lax.dot(a, b, precision=algorithm),
            ourjax.jit(lambda a, b: lax.dot(a, b, precision=algorithm)),
            lambda a, b: jnp.matmul(a, b, precision=algorithm)):
    out = f(a, b)
    assert out.dtype == np.dtype(in_dtype)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=tol, atol=tol)


def test_custom_algorithm_and_preferred_type():
  alg = lax.DotAlgorithm(lhs_precision_type=np.float16, rhs_precision_type=np.float16,
                         accumulation_type=np.float32)
  out = lax.dot(_A, _B, precision=alg)
  assert out.dtype == np.float32
  np.testing.assert_allclose(np.asarray(out), _ref(_A, _B, np.float16), rtol=1e-5, atol=1e-5)
  out = lax.dot(_A.astype(np.float16), _B.astype(np.float16), precision="F32_F32_F32",
                preferred_element_type=np.float32)
  assert out.dtype == np.float32
  # the gradient flows through the converts
  g = ourjax.grad(lambda a: lax.dot(a, _B, precision="F32_F32_F32").sum())(_A)
  np.testing.assert_allclose(np.asarray(g), np.broadcast_to(_B.sum(1), (3, 4)), rtol=1e-6)


def test_preset_names_and_errors():
  p = lax.DotAlgorithmPreset.F32_F32_F32
  assert str(p) == "F32_F32_F32" and repr(p) == "DotAlgorithmPreset.F32_F32_F32"
  assert p.accumulation_type == np.float32
  assert lax.DotAlgorithmPreset.BF16_BF16_F32.supported_lhs_types == (ml_dtypes.bfloat16,
                                                                       np.float32)
  with pytest.raises(ValueError, match="Precision argument must be one of"):
    lax.dot(_A, _B, precision="NOT_A_PRESET")
