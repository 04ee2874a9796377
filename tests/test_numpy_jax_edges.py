"""Edges of jnp functions where JAX's results follow from its implementation rather than from
NumPy's (found by ``scripts/diff_jax.py``, a differential check against JAX); each reference
here is NumPy code stating JAX's rule."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp

from test_numpy_helpers import check


def _jax_int_power(x, y):
  """JAX's integer ** integer: binary exponentiation over y's low 6 bits read as unsigned,
  from 0 where x == 0 and y != 0 (else 1), wrapping in x's dtype."""
  x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
  acc = np.where((x == 0) & (y != 0), 0, 1).astype(x.dtype)
  bits = y.astype(np.uint64) if y.dtype.kind == "u" else y.astype(np.int64).view(np.uint64)
  x = x.copy()
  with np.errstate(over="ignore"):
    for _ in range(6):
      acc = np.where(bits & 1, acc * x, acc).astype(x.dtype)
      x = (x * x).astype(x.dtype)
      bits = bits >> np.uint64(1)
  return acc


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint8, np.uint32, np.int64])
def test_integer_power_is_binary_exponentiation_over_six_bits(dt, x64):
  rng = np.random.default_rng(0)
  info = np.iinfo(dt)
  x = np.concatenate([np.array([0, 1, 2, 3, 5, 7, 0, 2], dt),
                      rng.integers(max(info.min, -9), 10, 24).astype(dt)])
  y = np.concatenate([np.array([0, 64, 40, 33, 200 if info.max >= 200 else 100, 63, 3, 65],
                               dt), rng.integers(0 if info.min == 0 else -70, 127, 24).astype(dt)])
  want = _jax_int_power(x, y)
  for f in (jnp.power, ourjax.jit(jnp.power)):
    check(f(x, y), want, dt)
  # a traced scalar exponent too (eagerly a concrete one is an exact integer_pow, as JAX's)
  check(ourjax.jit(jnp.power)(x, dt(200 if info.max >= 200 else 100)),
        _jax_int_power(x, np.array(200 if info.max >= 200 else 100, dt)), dt)


def test_gcd_and_lcm_take_integers_only_and_lcm_multiplies_absolute_values():
  for f in (jnp.gcd, jnp.lcm):
    with pytest.raises(ValueError, match="must be integers"):
      f(np.array([True, False]), np.array([True, True]))
    with pytest.raises(ValueError, match="must be integers"):
      f(np.array([1.0]), np.array([2]))
  check(jnp.lcm(True, 2), np.int32(2), weak=True)     # (a Python bool and int: weak int32)
  a = np.array([4, -6, 0, 7, -3, 12], np.int32)
  b = np.array([6, 4, 5, 0, -9, -18], np.int32)
  check(jnp.lcm(a, b), np.lcm(a, b))
  check(jnp.gcd(a, b), np.gcd(a, b))
  # |x1| * (|x2| // gcd), wrapping in the dtype
  x, y = np.array([-100, 100, 96], np.int8), np.array([3, 3, 80], np.int8)
  ax, ay = np.abs(x), np.abs(y)
  d = np.gcd(ax.astype(np.int64), ay.astype(np.int64))
  with np.errstate(over="ignore"):
    want = (ax.astype(np.int64) * (ay.astype(np.int64) // d)).astype(np.int8)
  check(jnp.lcm(x, y), want)


def test_fmod_of_bools_is_an_int32_remainder_keeping_x_over_zero():
  """Integer fmod(x, 0) is 0, but bools (int32 after promotion, as in JAX) are not integers
  there: their x % 0 is the integer remainder's x."""
  check(jnp.fmod(True, np.array([False, True, False])), np.array([1, 0, 1], np.int32))
  check(jnp.fmod(np.array([5, -5], np.int32), np.array([0, 0], np.int32)),
        np.array([0, 0], np.int32))


def test_heaviside_of_nan_is_nan():
  x1 = np.array([np.nan, -1.0, 0.0, 2.0, -0.0], np.float32)
  for x2 in (np.float32(0.5), np.array([7, 7, 7, 7, 7], np.uint8)):
    want = np.where(np.isnan(x1), np.nan, np.where(x1 < 0, 0.0, np.where(x1 > 0, 1.0, x2)))
    check(jnp.heaviside(x1, x2), want.astype(np.float32))


def test_ldexp_takes_bool_exponents_and_refuses_inexact_ones():
  check(jnp.ldexp(np.array([1.5, 3.0], np.float32), np.array([True, False])),
        np.array([3.0, 3.0], np.float32))
  with pytest.raises(ValueError, match="ldexp not supported for input types"):
    jnp.ldexp(np.float32(1.0), np.float32(2.0))
  with pytest.raises(ValueError, match="ldexp not supported for input types"):
    jnp.ldexp(np.complex64(1.0), 2)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest",
                                    "inverted_cdf"])
def test_quantiles_of_python_scalars_are_not_weakly_typed(method):
  check(jnp.quantile(-2, 0.5, method=method), np.float32(-2), weak=False)
  check(jnp.nanquantile(2.5, 0.5, method=method), np.float32(2.5), weak=False)
  check(jnp.median(3.0), np.float32(3.0), weak=False)
  check(ourjax.jit(jnp.nanmedian)(3.0), np.float32(3.0), weak=False)


def test_lax_abs_refuses_unsigned_integers_and_jnp_abs_passes_them_through():
  from ourjax import lax
  for dt in (np.uint8, np.uint32):
    with pytest.raises(TypeError, match=f"abs does not accept dtype {np.dtype(dt).name}"):
      lax.abs(np.array([1, 2], dt))
    check(jnp.abs(np.array([1, 200], dt)), np.array([1, 200], dt))
  check(lax.abs(np.array([-3, 4], np.int8)), np.array([3, 4], np.int8))


def _mask_product(b, x):
  """JAX's bool-array times inexact x: x where b, +0 where not (even for inf, NaN, -x)."""
  return np.where(b, x, np.zeros((), x.dtype))


def test_bool_array_times_inexact_is_a_select():
  b = np.array([False, True, False, True])
  x = np.array([-5.0, -2.0, np.nan, np.inf], np.float32)
  for f in (jnp.multiply, lambda p, q: jnp.asarray(p) * q, ourjax.jit(jnp.multiply)):
    got = np.asarray(f(b, x))
    np.testing.assert_array_equal(got, _mask_product(b, x))
    assert not np.signbit(got[0])
    np.testing.assert_array_equal(np.asarray(f(x, b)), _mask_product(b, x))
  check(jnp.multiply(b, 2.0), np.array([0, 2, 0, 2], np.float32), weak=True)
  c = np.array([1 + 1j, np.nan, 2, 3], np.complex64)
  check(jnp.multiply(b, c), _mask_product(b, c))
  # a broadcast bool operand is a plain product (IEEE: -0 and NaN), as JAX's
  got = np.asarray(jnp.multiply(b[:, None], x))
  with np.errstate(invalid="ignore"):
    want = b[:, None].astype(np.float32) * x
  np.testing.assert_array_equal(got, want)
  assert np.array_equal(np.signbit(got), np.signbit(want))


def test_shifts_of_bools_are_int32_shifts():
  b = np.array([True, False, True])
  check(jnp.left_shift(b, False), np.array([1, 0, 1], np.int32))
  check(jnp.left_shift(b, np.array([True, True, False])), np.array([2, 0, 1], np.int32))
  check(jnp.right_shift(True, np.array(True)), np.int32(0))
  check(jnp.bitwise_left_shift(b, 2), np.array([4, 0, 4], np.int32))
  with pytest.raises(TypeError, match="shift_left does not accept dtype float32"):
    jnp.left_shift(np.array([1.0], np.float32), 1)
