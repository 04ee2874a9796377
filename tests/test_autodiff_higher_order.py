"""High-order derivatives against closed forms: 1/x to the seventh order (the quotient
rule must not square the divisor at each order: 4**64 overflows float32), and the mixed second
derivatives of x**y at y = 0."""
import math

import numpy as np
import pytest

import ourjax
from ourjax import lax


def _nth(f, n, d):
  for _ in range(n):
    f = d(f)
  return f


@pytest.mark.parametrize("x", [1.5, 4.0, 8.0])
@pytest.mark.parametrize("d", [ourjax.grad, ourjax.jacfwd], ids=["rev", "fwd"])
def test_reciprocal_derivatives(x, d):
  for n in range(1, 8):
    want = (-1) ** n * math.factorial(n) / x ** (n + 1)
    got = float(_nth(lambda v: 1 / v, n, d)(np.float32(x)))
    np.testing.assert_allclose(got, want, rtol=2e-5)
  got = float(_nth(lambda v: lax.div(np.float32(3.0), v), 6, d)(np.float32(x)))
  np.testing.assert_allclose(got, 3 * math.factorial(6) / x ** 7, rtol=2e-5)


@pytest.mark.parametrize("jac", [ourjax.jacfwd, ourjax.jacrev])
@pytest.mark.parametrize("x,y", [(4.0, 0.0), (2.5, 1.5), (3.0, 2.0)])
def test_pow_second_derivatives(jac, x, y):
  h = jac(jac(lax.pow, (0, 1)), (0, 1))(x, y)
  want = ((y * (y - 1) * x ** (y - 2), x ** (y - 1) * (1 + y * math.log(x))),
          (x ** (y - 1) * (1 + y * math.log(x)), math.log(x) ** 2 * x ** y))
  np.testing.assert_allclose(np.array(h, np.float64), np.array(want), rtol=1e-5, atol=1e-6)
  # at 0 ** 0 the first derivative in x is JAX's y * x**(y-1) = 0 * inf = nan
  assert np.isnan(float(ourjax.grad(lax.pow)(0.0, 0.0)))
