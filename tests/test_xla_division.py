"""Division as JAX computes it (XLA's rewrites, ``lowering/xla_division.py``): under ``jit`` a
division by a constant or a broadcast is a product with the reciprocal rounded to the type,
chains of divisions are one division of products; eager divisions by a scalar likewise.  The
expected values are built in NumPy from those formulas (and checked to differ from the plain
quotient, so the tests see the rewrite)."""
import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.lowering import xla_division
from ourjax.lowering.hlo import Module, Shape
from ourjax.lowering.hlo_builder import Builder

f32 = np.float32
BF16 = ml_dtypes.bfloat16


def _x(n=2000, seed=0):
  return (np.random.default_rng(seed).standard_normal(n) * 10).astype(f32)


def _bits_equal(a, b):
  a, b = np.asarray(a), np.asarray(b)
  assert a.dtype == b.dtype and a.shape == b.shape
  assert np.array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


@pytest.mark.parametrize("c", [3.0, 7.0, 0.1, 1e-3])
def test_jit_division_by_python_scalar_is_product_with_rounded_reciprocal(c):
  x = _x()
  want = x * (f32(1) / f32(c))
  assert not np.array_equal(want, x / f32(c))          # (the two differ on these values)
  _bits_equal(ourjax.jit(lambda a: a / c)(x), want)
  _bits_equal(jnp.asarray(x) / c, want)                 # eager: JAX's jnp ops are compiled too
  _bits_equal(lax.div(jnp.asarray(x), f32(c)), want)


def test_division_by_runtime_scalar_and_by_broadcast_row():
  x = _x(3000).reshape(100, 30)
  s = (np.random.default_rng(1).random(100) + 0.5).astype(f32)
  _bits_equal(ourjax.jit(lambda a, b: a / b)(x, s[3]), x * (f32(1) / s[3]))
  _bits_equal(ourjax.jit(lambda a, b: a / b[:, None])(x, s), x * (f32(1) / s)[:, None])
  # mean along the minor axis: sum times 1/n
  sums = np.asarray(ourjax.jit(lambda a: a.sum(axis=1))(x))
  _bits_equal(ourjax.jit(lambda a: a.mean(axis=1))(x), sums * f32(1 / 30))


def test_division_by_broadcast_used_elsewhere_too():
  x = _x(3000).reshape(100, 30)
  s = (np.random.default_rng(1).random(100) + 0.5).astype(f32)
  q, t = ourjax.jit(lambda a, b: (a / b[:, None], b * 2))(x, s)   # (b used twice: as JAX)
  _bits_equal(q, x * (f32(1) / s)[:, None])
  _bits_equal(t, s * 2)


def test_elementwise_divisor_is_an_exact_division():
  x, y = _x(), (_x(seed=3) + 40).astype(f32)
  _bits_equal(ourjax.jit(lambda a, b: a / b)(x, y), x / y)
  _bits_equal(jnp.asarray(x) / jnp.asarray(y), x / y)


def test_chains_of_divisions_are_one_division():
  rng = np.random.default_rng(2)
  x, y, z, w = ((rng.random(2000) + 0.5).astype(f32) * 3 for _ in range(4))
  jit = ourjax.jit
  _bits_equal(jit(lambda a, b, c: a / b / c)(x, y, z), x / (y * z))
  _bits_equal(jit(lambda a, b, c: a / (b / c))(x, y, z), (x * z) / y)
  _bits_equal(jit(lambda a, b, c, d: (a / b) / (c / d))(x, y, z, w), (x * w) / (y * z))
  # the range changes with it: 1e30 / 1e30 / 1e30 is 0 (1e30 * 1e30 overflows), as in JAX
  big = f32(1e30)
  assert float(jit(lambda a, b, c: a / b / c)(big, big, big)) == 0.0


def test_exp_ratio_is_exp_of_difference():
  # exp(100) / exp(99) overflows to inf / inf = nan as written; JAX's program gives e
  got = ourjax.jit(lambda a, b: jnp.exp(a) / jnp.exp(b))(np.full(3, 100, f32), np.full(3, 99, f32))
  np.testing.assert_allclose(np.asarray(got), np.e, rtol=1e-6)
  x, y = _x(), _x(seed=5) / 4
  exp_neg = np.asarray(ourjax.jit(lambda b: jnp.exp(-b))(y))
  _bits_equal(ourjax.jit(lambda a, b: a / jnp.exp(b))(x, y), x * exp_neg)


def test_narrow_floats():
  x = _x()
  h = x.astype(np.float16)
  # float16: the reciprocal rounded to float16, the product rounded once
  want_h = (h.astype(f32) * f32(np.float16(1 / 3))).astype(np.float16)
  _bits_equal(ourjax.jit(lambda a: a / 3.0)(h), want_h)
  _bits_equal(jnp.asarray(h) / 3.0, want_h)
  # bfloat16: computed in float32, the reciprocal unrounded
  bx = x.astype(BF16)
  want_b = (bx.astype(f32) * (f32(1) / f32(3))).astype(BF16)
  _bits_equal(ourjax.jit(lambda a: a / 3.0)(bx), want_b)
  _bits_equal(ourjax.jit(lambda a, s: a / s)(bx, np.asarray(3, BF16)), want_b)
  _bits_equal(jnp.asarray(bx) / jnp.asarray(3, BF16), want_b)


def test_integer_division_is_untouched():
  x = np.arange(-20, 20, dtype=np.int32)
  np.testing.assert_array_equal(ourjax.jit(lambda a: lax.div(a, np.int32(3)))(x),
                                np.trunc(x / 3).astype(np.int32))


def test_pass_keeps_a_constant_numerator_division():
  m = Module("m")
  b = Builder(m, "main")
  c = b.constant(np.arange(1, 5, dtype=f32))
  b.parameter(Shape(np.dtype(f32), ()))
  three = b.constant(np.full(4, 3, f32))
  m.entry = b.build(b.divide(c, three))     # constant / constant: left to be folded exactly
  assert not xla_division.run(m)
