"""Window functions (bartlett, blackman, hamming, hanning, kaiser) and the modified Bessel
function ``i0`` that the Kaiser window needs.

As JAX's: ``M`` must be concrete, the result is the default float dtype (float32, float64 with
x64) whatever ``M`` is, strongly typed, and ``M <= 1`` gives ``ones(M)``.  The formulas are
NumPy's, written with the same operations in the same order as JAX writes them.
"""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval
from ourjax.numpy._util import promote_args_inexact

__all__ = ["bartlett", "blackman", "hamming", "hanning", "kaiser", "i0"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _window(name, M):
  """(M, n): the concrete size and ``arange(M)`` in the default float dtype; ``n`` is None for
  ``M <= 1``, whose window is all ones."""
  M = core.concrete_or_error(int, M, f"M argument of jnp.{name}")
  if M < 0:   # NumPy gives an empty window; JAX's lax.full rejects the shape
    raise TypeError(f"jnp.{name}: the window size M must be nonnegative, got {M}")
  dtype = dtypes.default_float_dtype()
  if M <= 1:
    return M, None, lax.full((M,), 1, dtype)
  return M, lax.iota(dtype, M), None


def blackman(M: int):
  """Blackman window of ``M`` points: ``0.42 - 0.5 cos(2 pi n/(M-1)) + 0.08 cos(4 pi n/(M-1))``."""
  cos = _jnp().cos
  M, n, ones = _window("blackman", M)
  if n is None:
    return ones
  return 0.42 - 0.5 * cos(2 * np.pi * n / (M - 1)) + 0.08 * cos(4 * np.pi * n / (M - 1))


def bartlett(M: int):
  """Bartlett (triangular) window of ``M`` points: ``1 - |2n + 1 - M| / (M - 1)``."""
  M, n, ones = _window("bartlett", M)
  if n is None:
    return ones
  return 1 - _jnp().abs(2 * n + 1 - M) / (M - 1)


def hamming(M: int):
  """Hamming window of ``M`` points: ``0.54 - 0.46 cos(2 pi n / (M - 1))``."""
  M, n, ones = _window("hamming", M)
  if n is None:
    return ones
  return 0.54 - 0.46 * _jnp().cos(2 * np.pi * n / (M - 1))


def hanning(M: int):
  """Hann window of ``M`` points: ``0.5 (1 - cos(2 pi n / (M - 1)))``."""
  M, n, ones = _window("hanning", M)
  if n is None:
    return ones
  return 0.5 * (1 - _jnp().cos(2 * np.pi * n / (M - 1)))


def kaiser(M: int, beta):
  """Kaiser window of ``M`` points with shape parameter ``beta``:
  ``i0(beta sqrt(1 - ((n - a) / a)**2)) / i0(beta)`` with ``a = (M - 1) / 2``."""
  jnp = _jnp()
  M, n, ones = _window("kaiser", M)
  if n is None:
    return ones
  alpha = 0.5 * (M - 1)
  return i0(beta * jnp.sqrt(1 - ((n - alpha) / alpha) ** 2)) / i0(beta)


# I0(x) = sum_k (x^2/4)^k / (k!)^2 has only positive terms, but the rounding of x^2/4 grows k-fold
# in the k-th term, and the terms peak near k = x/2: the series is used up to a bound per dtype
# (float32: 10, float64: 30; the terms needed to reach the last bit there are counted below).
# Above it, the asymptotic expansion e^x / sqrt(2 pi x) * sum_k ((2k-1)!!)^2 / (k! (8x)^k), whose
# smallest term at the bound is e^(-2x) relative, far below eps.
_SERIES = {np.dtype(np.float32): (10.0, 28), np.dtype(np.float64): (30.0, 64)}
_ASYMPTOTIC_TERMS = 16


def i0(x):
  """Modified Bessel function of the first kind, order zero (real floating inputs).  Small
  floats (float16, bfloat16) are computed in float32."""
  (x,) = promote_args_inexact("i0", x)
  aval = get_aval(x)
  if not dtypes.issubdtype(aval.dtype, np.floating):
    raise ValueError(f"Unsupported input type to jax.numpy.i0: {aval.dtype}")
  y = _i0(x if aval.dtype in (np.float32, np.float64) else
          lax.convert_element_type(x, np.float32))
  # the result is weakly typed where x is (a Python scalar), as JAX's
  return lax._convert_element_type(y, aval.dtype, aval.weak_type)


def _i0(x):
  jnp = _jnp()
  dt = get_aval(x).dtype
  c = lambda v: np.array(v, dt)  # noqa: E731
  ax = jnp.abs(x)
  bound, n_terms = _SERIES[np.dtype(dt)]
  small = ax <= c(bound)
  # power series, on |x| clamped into its range
  xs = jnp.where(small, x, c(0))
  q = xs * xs * c(0.25)
  term = jnp.ones_like(q)
  total = term
  for k in range(1, n_terms):
    term = term * q * c(1.0 / (k * k))
    total = total + term
  # asymptotic expansion, on |x| clamped into its range
  xl = jnp.where(small, c(bound), ax)
  r = c(1) / (c(8) * xl)
  term = jnp.ones_like(r)
  acc = term
  for k in range(1, _ASYMPTOTIC_TERMS):
    term = term * r * c((2 * k - 1) ** 2 / k)
    acc = acc + term
  # e^x in one piece while it is finite, else in two halves (I0 overflows a little after e^x)
  scale = acc / jnp.sqrt(c(2 * np.pi) * xl)
  whole = xl < c(np.log(dtypes.finfo(dt).max) - 1)
  half = jnp.exp(c(0.5) * jnp.where(whole, c(0), xl))
  large = jnp.where(whole, jnp.exp(jnp.where(whole, xl, c(0))) * scale, half * scale * half)
  return jnp.where(small, total, large)
