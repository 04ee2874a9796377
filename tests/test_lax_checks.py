"""lax's argument checks raise JAX's exception types with JAX's words (the messages that JAX's
own tests match), and the reductions over pytrees return pytrees."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


@pytest.mark.parametrize("inshape,outshape,dims,msg", [
    ([2], [2, 2], [0, 1], "broadcast_dimensions must have length equal to operand ndim"),
    ([2, 2], [2], [0, 1], "target broadcast shape must have equal or higher rank to the operand"),
    ([2], [2, 3], [2], "broadcast_dimensions must be a subset of output dimensions"),
    ([2], [3], [0], "operand dimension sizes must either be 1, or be equal"),
    ([2, 2], [2, 2], [0, 0], "broadcast_dimensions must not contain duplicates"),
    ([2], [2], [-1], "must have every element be nonnegative"),
])
def test_broadcast_in_dim_checks(inshape, outshape, dims, msg):
  with pytest.raises(TypeError, match=msg):
    lax.broadcast_in_dim(np.ones(inshape, np.float32), outshape, dims)


def test_broadcast_in_dim_valid():
  x = np.arange(3.0, dtype=np.float32)
  np.testing.assert_array_equal(np.asarray(lax.broadcast_in_dim(x, (2, 3), (1,))),
                                np.broadcast_to(x, (2, 3)))


@pytest.mark.parametrize("dims,err,msg", [
    ((0, 0), ValueError, "dimensions are not unique"),
    ((3,), ValueError, "axis 3 is out of bounds"),
    ((-4,), ValueError, "axis -4 is out of bounds"),
    ((1,), ValueError, "cannot select an axis to squeeze out"),
    ((None,), TypeError, "cannot be interpreted as an integer"),
])
def test_squeeze_checks(dims, err, msg):
  with pytest.raises(err, match=msg):
    lax.squeeze(np.ones((1, 2, 3), np.float32), dims)
  assert lax.squeeze(np.ones((1, 2, 1), np.float32), (0, -1)).shape == (2,)


def test_shapes_must_be_integers():
  assert lax.reshape(np.ones((3,), np.float32), (lax.add(1, 2), 1)).shape == (3, 1)
  for bad in [(1.5, 2.0), (np.array([3, 1]),), (3.0,)]:
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values of "
                       "integer type"):
      lax.reshape(np.ones(3), bad)
  assert lax.reshape(np.ones(3), (np.int64(3),)).shape == (3,)


def test_dynamic_slice_index_types():
  x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  with pytest.raises(TypeError, match="index arguments to dynamic_slice must be integers of "
                     "the same type"):
    lax.dynamic_slice(x, (np.int32(1), np.int16(2)), (2, 2))
  with pytest.raises(TypeError, match="index arguments to dynamic_update_slice must be "
                     "integers of the same type"):
    lax.dynamic_update_slice(x, np.zeros((2, 2), np.float32), (np.int32(1), np.int16(2)))
  # one typed dtype, or weakly typed values with Python ints, are fine
  for idx in [(jnp.int16(1), np.int16(2)), (1, jnp.asarray(2)), (1, 2)]:
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, idx, (2, 2))), x[1:3, 2:4])
  np.testing.assert_array_equal(
      np.asarray(lax.dynamic_update_slice(x, np.zeros((2, 2), np.float32),
                                          (np.int16(1), np.int16(2)))),
      np.where((np.arange(3)[:, None] >= 1) & (np.arange(4) >= 2), 0, x))


def test_reduce_checks_and_pytrees():
  ops = {"x": np.arange(5.0, dtype=np.float32)}
  with pytest.raises(ValueError, match="reduce found non-scalar initial value"):
    lax.reduce(ops, {"x": np.ones(5)}, lambda a, b: {"x": a["x"] + b["x"]}, [0])
  out = lax.reduce(ops, {"x": 0.0}, lambda a, b: {"x": a["x"] + b["x"]}, [0])
  assert isinstance(out, dict) and float(out["x"]) == 10.0
  out = lax.reduce([ops["x"]], [0.0], lambda a, b: [a[0] + b[0]], [0])
  assert isinstance(out, list) and float(out[0]) == 10.0
  with pytest.raises(ValueError, match="reduce_window output must have the same tree "
                     "structure as the operands"):
    lax.reduce_window(np.ones((1,)), 0., lambda x, y: [x + y], padding="VALID",
                      window_dimensions=(1,), window_strides=(1,))
  for dims, strides in [((0,), (1,)), ((1,), (0,))]:
    with pytest.raises(TypeError, match="must have every element be"):
      lax.reduce_window(np.ones((1,)), 0., lax.add, dims, strides, "VALID")


def test_pad_checks():
  with pytest.raises(ValueError, match="padding_value must be a scalar"):
    lax.pad(np.zeros(2), np.zeros(2), [(0, 0, 0)])
  with pytest.raises(ValueError, match="padding_config"):
    lax.pad(np.zeros(2), 0., [(0, 1, 0), (0, 1, 0)])
  with pytest.raises(ValueError, match="interior padding in padding_config must be nonneg"):
    lax.pad(np.zeros(2), 0., [(0, 1, -1)])
  with pytest.raises(ValueError, match="Dimension size after padding is not at least 0"):
    lax.pad(np.zeros(2), 0., [(-3, 0, 0)])


def test_top_k_int32_overflow():
  x = ourjax.ShapeDtypeStruct((2 ** 31 + 1,), np.dtype("bfloat16"))
  with pytest.raises(ValueError, match="top_k returns int32 indices, which will overflow"):
    ourjax.eval_shape(lambda x: lax.top_k(x, 100), x)


def test_conv_window_strides_rank():
  with pytest.raises(ValueError, match="conv_general_dilated window and window_strides must "
                     "have the same number of dimensions"):
    lax.conv_general_dilated(jnp.zeros((1, 1, 3, 3)), np.zeros((1, 1, 1, 1), np.float32),
                             window_strides=(1,), padding="SAME")


def test_dtype_acceptance():
  with pytest.raises(TypeError, match="rem does not accept dtype complex64"):
    lax.rem(np.complex64(2 + 3j), np.complex64(4 + 5j))
  np.testing.assert_array_equal(np.asarray(lax.rem(np.float32([7, -7]), np.float32(3))),
                                np.fmod(np.float32([7, -7]), 3))
  for dt in ["int4", "uint4"]:
    with pytest.raises(TypeError, match=f"abs does not accept dtype {dt}."):
      lax.abs(lax.iota(dt, 3))
  assert lax.abs(np.int8(-3)) == 3


def test_dot_precision_is_keyword_only():
  a = jnp.arange(5.0)
  with pytest.raises(TypeError, match=r"dot\(\) takes 2 positional arguments"):
    lax.dot(a, a, lax.Precision.DEFAULT)
  assert float(lax.dot(a, a, precision=lax.Precision.HIGHEST)) == 30.0


def test_gather_scatter_checks_in_jax_order():
  x, idx = np.ones((10, 9, 8, 7, 6), np.float32), np.zeros((5, 4, 3, 2, 3), np.int32)
  dn = lax.GatherDimensionNumbers(offset_dims=(4, 5, 6), collapsed_slice_dims=(0, 1, 2),
                                  start_index_map=(0, 1, 4), operand_batching_dims=(2, 3))
  with pytest.raises(TypeError, match="collapsed_slice_dims and operand_batching_dims in "
                     "gather op must be disjoint"):
    lax.gather(x, idx, dn, (1, 1, 1, 1, 1))
  dn = lax.GatherDimensionNumbers(offset_dims=(4, 5, 6), collapsed_slice_dims=(0, 1),
                                  start_index_map=(0, 1, 4), operand_batching_dims=(2, 7))
  with pytest.raises(TypeError, match="Invalid operand_batching_dims set in gather op"):
    lax.gather(x, idx, dn, (1, 1, 1, 1, 1))
  upd = np.ones((10, 9, 8, 7, 3, 2, 4), np.float32)
  sdn = lax.ScatterDimensionNumbers(update_window_dims=(4, 5, 6), inserted_window_dims=(0, 1),
                                    scatter_dims_to_operand_dims=(0, 1, 2, 4),
                                    operand_batching_dims=(2, 3))
  with pytest.raises(TypeError, match="scatter_dims_to_operand_dims and operand_batching_dims "
                     "in scatter op must be disjoint"):
    lax.scatter(np.ones((50, 49, 48, 47, 46), np.float32),
                np.zeros((10, 9, 8, 7, 4), np.int32), upd, sdn)


# ------------------------------------------------------------------------------------------------
# values: out_dtype products, Python ints converted as JAX converts them, complex log1p, expm1


def test_mul_out_dtype():
  a, b = np.int8([100, -100, 7]), np.int8([100, 3, -2])
  out = lax.mul(a, b, out_dtype=np.int32)
  assert out.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(out), a.astype(np.int64) * b)
  h = np.float16([1.1, 2.3])
  out = ourjax.jit(lambda x, y: lax.mul(x, y, out_dtype=np.float32))(h, h)
  assert out.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(out), h.astype(np.float32) * h.astype(np.float32))


def test_convert_python_int_wraps():
  # through a 64-bit integer, as JAX: 2**32 -> int32 0
  for v, dt in [(2 ** 32, np.int32), (2 ** 31, np.int32), (-2 ** 31 - 1, np.int32),
                (2 ** 32 + 5, np.uint8), (300, np.int8), (-1, np.uint32), (5, np.int32)]:
    out = lax.convert_element_type(v, dt)
    assert out.dtype == dt
    assert int(out) == int(np.array(v % 2 ** (8 * np.dtype(dt).itemsize),
                                    f"uint{8 * np.dtype(dt).itemsize}").view(dt))
  with pytest.raises(OverflowError):
    lax.convert_element_type(2 ** 64, np.int32)
  assert float(lax.convert_element_type(2 ** 40, np.float32)) == 2.0 ** 40


def test_complex_log1p_is_accurate_near_zero():
  z = np.array([1e-5, 1e-5 + 1e-5j, -0.5 + 0.2j, 3 + 4j, 1e-30j, -1 + 1e-3j, 2e-8 - 3e-8j],
               np.complex64)
  # float64 reference: re = log|1+z| via log1p of 2x + x^2 + y^2, im = atan2(y, 1+x)
  x, y = z.real.astype(np.float64), z.imag.astype(np.float64)
  want = 0.5 * np.log1p(x * (2 + x) + y * y) + 1j * np.arctan2(y, 1 + x)
  for f in (lax.log1p, ourjax.jit(lax.log1p)):
    got = np.asarray(f(z)).astype(np.complex128)
    np.testing.assert_allclose(got.real, want.real, rtol=2e-7, atol=1e-37)
    np.testing.assert_allclose(got.imag, want.imag, rtol=2e-7, atol=1e-37)
  e = np.log1p(np.float32(1e-5))
  np.testing.assert_array_almost_equal_nulp(e.astype(np.complex64),
                                            np.asarray(lax.log1p(np.complex64(1e-5))))


def test_expm1_derivative_is_exp():
  x = np.arange(-80.0, 80.0, 1.0, dtype=np.float32)
  d_expm1 = ourjax.vmap(ourjax.grad(lax.expm1))(x)
  np.testing.assert_array_equal(np.asarray(d_expm1), np.asarray(lax.exp(x)))
  np.testing.assert_allclose(np.asarray(d_expm1), np.exp(x.astype(np.float64)), rtol=1e-6)


def test_full_with_large_python_int_in_float_dtypes():
  assert float(lax.full((), 2 ** 32, np.float32)) == 2.0 ** 32
  assert complex(lax.full((), 2 ** 40, np.complex64)) == 2.0 ** 40
  assert float(lax.full((), 2 ** 70, np.float32)) == np.float32(2.0 ** 70)
  # a mean over 2**32 elements: its count is such a value (shapes only)
  out = ourjax.eval_shape(jnp.mean, ourjax.ShapeDtypeStruct((1 << 32,), np.float32))
  assert out.shape == () and out.dtype == np.float32


def test_ordered_comparisons_reject_complex():
  # as JAX's: lax.lt/le/gt/ge take no complex operands (eq/ne do); jnp's comparisons order
  # complex numbers by real part, then imaginary part, as NumPy does
  z = np.array([1 + 2j, 3 + 0j, 2 + 1j, 2 + 1j], np.complex64)
  w = np.array([1 + 3j, 2 + 0j, 2 + 1j, 2 + 0j], np.complex64)
  for op in (lax.lt, lax.le, lax.gt, lax.ge):
    with pytest.raises(TypeError, match=f"{op.__name__} does not accept dtype complex64"):
      op(z, w)
  np.testing.assert_array_equal(np.asarray(lax.eq(z, w)), z == w)
  for jop, nop in [(jnp.less, np.less), (jnp.less_equal, np.less_equal),
                   (jnp.greater, np.greater), (jnp.greater_equal, np.greater_equal)]:
    np.testing.assert_array_equal(np.asarray(jop(z, w)), nop(z, w))
    np.testing.assert_array_equal(np.asarray(ourjax.jit(jop)(z, w)), nop(z, w))
  np.testing.assert_array_equal(np.asarray(jnp.fmax(z, w)), np.fmax(z, w))
  np.testing.assert_array_equal(np.asarray(jnp.fmin(z, w)), np.fmin(z, w))
  np.testing.assert_array_equal(np.asarray(jnp.sort(w)), np.sort(w))
  np.testing.assert_array_equal(np.asarray(jnp.asarray(z) < w), z < w)


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([np.int8, np.int32, np.uint8, np.uint32]),
       st.lists(st.integers(0, 3), max_size=3), st.integers(-5, -1))
def test_negative_integer_pow_of_integers_raises_everywhere(dt, shape, y):
  # JAX checks the exponent in integer_pow's type rule: eagerly, under jit and while tracing
  x = np.ones(shape, dt)
  want = (r"Integers cannot be raised to negative powers, got "
          rf"integer_pow\({np.dtype(dt).name}\[{','.join(map(str, shape))}\], {y}\)")
  for f in (lambda v: lax.integer_pow(v, y), ourjax.jit(lambda v: lax.integer_pow(v, y)),
            lambda v: ourjax.make_jaxpr(lambda w: lax.integer_pow(w, y))(v),
            lambda v: jnp.asarray(v) ** y, lambda v: jnp.power(v, y)):
    with pytest.raises(TypeError, match=want):
      f(x)
  # non-negative exponents and float bases still compute NumPy's power
  np.testing.assert_array_equal(np.asarray(lax.integer_pow(x, -y)), x ** -y)
  xf = np.full(shape, 2, np.float32)
  np.testing.assert_allclose(np.asarray(ourjax.jit(lambda v: lax.integer_pow(v, y))(xf)),
                             xf.astype(np.float64) ** y, rtol=1e-6)


@pytest.mark.parametrize("op,args,msg", [
    (lax.add, (np.bool_([1]), np.bool_([1])), "add does not accept dtype bool at position 0. "
     "Accepted dtypes at position 0 are subtypes of integer, floating, complexfloating."),
    (lax.sin, (np.int32([1]),), "sin does not accept dtype int32. Accepted dtypes are subtypes "
     "of floating, complexfloating."),
    (lax.bitwise_or, (np.float32([1]), np.float32([1])), "or does not accept dtype float32 at "
     "position 0. Accepted dtypes at position 0 are subtypes of integer, bool."),
    (lax.population_count, (np.float32(1),), "population_count does not accept dtype float32. "
     "Accepted dtypes are subtypes of integer."),
    (lax.igamma, (np.int32(1), np.int32(1)), "igamma does not accept dtype int32 at position 0. "
     "Accepted dtypes at position 0 are subtypes of floating."),
    (lax.bessel_i0e, (np.int32(1),), "bessel_i0e does not accept dtype int32. Accepted dtypes "
     "are subtypes of floating."),
])
def test_dtype_rejections_in_jax_words(op, args, msg):
  import re
  for f in (op, ourjax.jit(op)):
    with pytest.raises(TypeError, match=re.escape(msg)):
      f(*args)
