"""More of ``jax.scipy.special``: relative entropy and KL divergence, factorial/comb/poch,
Box-Cox transforms, the sign and logarithm of gamma, Bernoulli numbers, and the Hurwitz zeta
function (with polygamma of any order built on it).  Re-exported by ``ourjax.scipy.special``."""
from __future__ import annotations

from fractions import Fraction
from math import factorial as _py_factorial

import numpy as np

from ourjax import lax
from ourjax.scipy.special import _f, _jnp    # (defined before special imports this module)


def rel_entr(p, q):
  """``p log(p/q)`` for p, q > 0; 0 where p = 0 and q >= 0; inf otherwise."""
  jnp = _jnp()
  p, q = _f("rel_entr", p, q)
  both = (p > 0) & (q > 0)
  safe_p, safe_q = jnp.where(both, p, 1), jnp.where(both, q, 1)
  out = jnp.where(both, safe_p * jnp.log(safe_p / safe_q),
                  jnp.where((p == 0) & (q >= 0), 0, np.inf))
  return out.astype(p.dtype)


def kl_div(p, q):
  """``p log(p/q) - p + q`` for p, q > 0; q where p = 0 and q >= 0; inf otherwise."""
  jnp = _jnp()
  p, q = _f("kl_div", p, q)
  both = (p > 0) & (q > 0)
  safe_p, safe_q = jnp.where(both, p, 1), jnp.where(both, q, 1)
  out = jnp.where(both, safe_p * jnp.log(safe_p / safe_q) - safe_p + safe_q,
                  jnp.where((p == 0) & (q >= 0), q, np.inf))
  return out.astype(p.dtype)


def factorial(n, exact: bool = False):
  """``n!`` as ``exp(gammaln(n + 1))`` (0 for negative n)."""
  if exact:
    raise NotImplementedError("factorial with exact=True")
  jnp = _jnp()
  n = _f("factorial", n)
  return jnp.where(n < 0, 0, jnp.exp(lax.lgamma(n + 1))).astype(n.dtype)


def comb(N, k, *, repetition: bool = False):
  """The number of ways to choose ``k`` of ``N`` (with repetition: of ``N + k - 1``), as
  ``exp(gammaln)``; 0 where k < 0 or k > N."""
  jnp = _jnp()
  N, k = _f("comb", N, k)
  if repetition:
    N = N + k - 1
  valid = (k >= 0) & (k <= N) & (N >= 0)
  n_, k_ = jnp.where(valid, N, 1), jnp.where(valid, k, 0)
  out = jnp.exp(lax.lgamma(n_ + 1) - lax.lgamma(k_ + 1) - lax.lgamma(n_ - k_ + 1))
  return jnp.where(valid, out, 0).astype(N.dtype)


def poch(z, m):
  """The Pochhammer symbol ``gamma(z + m) / gamma(z)`` (1 where m = 0)."""
  from ourjax.scipy.special import gamma
  jnp = _jnp()
  z, m = _f("poch", z, m)
  return jnp.where(m == 0, 1, gamma(z + m) / gamma(z)).astype(z.dtype)


def boxcox(x, lmbda):
  """The Box-Cox transform: ``log(x)`` for lmbda = 0, else ``(x**lmbda - 1) / lmbda``."""
  jnp = _jnp()
  x, lmbda = _f("boxcox", x, lmbda)
  logx = jnp.log(x)
  safe = jnp.where(lmbda == 0, 1, lmbda)
  return jnp.where(lmbda == 0, logx, jnp.expm1(lmbda * logx) / safe).astype(x.dtype)


def boxcox1p(x, lmbda):
  """The Box-Cox transform of ``1 + x``."""
  jnp = _jnp()
  x, lmbda = _f("boxcox1p", x, lmbda)
  logx = jnp.log1p(x)
  safe = jnp.where(lmbda == 0, 1, lmbda)
  return jnp.where(lmbda == 0, logx, jnp.expm1(lmbda * logx) / safe).astype(x.dtype)


def gammasgn(x):
  """The sign of gamma(x): 1 for x > 0, +-1 between the negative poles, nan at the poles,
  the sign of zero at +-0."""
  jnp = _jnp()
  x = _f("gammasgn", x)
  neg = jnp.where(jnp.floor(x) % 2 == 0, 1.0, -1.0)
  out = jnp.where(x > 0, 1.0, jnp.where(x == 0, jnp.copysign(1.0, x), neg))
  out = jnp.where((x < 0) & (x == jnp.floor(x)), np.nan, out)
  return jnp.where(jnp.isnan(x), np.nan, out).astype(x.dtype)


def loggamma(x):
  """The logarithm of gamma for real x > 0 (nan elsewhere, as the principal branch's real
  part is not defined there)."""
  jnp = _jnp()
  x = _f("loggamma", x)
  if jnp.iscomplexobj(x):
    raise NotImplementedError("loggamma of complex arguments is not implemented")
  return jnp.where(x > 0, lax.lgamma(jnp.where(x > 0, x, 1)), np.nan).astype(x.dtype)


def _bernoulli_fractions(n):
  B = [Fraction(1)]
  for m in range(1, n + 1):
    B.append(-sum(Fraction(_py_factorial(m + 1), _py_factorial(k) * _py_factorial(m + 1 - k))
                  * B[k] for k in range(m)) / (m + 1))
  return B


def bernoulli(n: int):
  """The Bernoulli numbers B_0 ... B_n (B_1 = -1/2)."""
  n = int(n)
  if n < 0:
    raise ValueError("n must be a non-negative integer.")
  from ourjax.numpy import asarray
  return asarray(np.array([float(b) for b in _bernoulli_fractions(n)],
                          dtype=np.float64).astype(_jnp().result_type(float)))


# Euler-Maclaurin: B_2j / (2j)! for j = 1..12
_EM_COEFFS = [float(b / _py_factorial(2 * j))
              for j, b in enumerate(_bernoulli_fractions(24)[2::2], start=1)]
_EM_DIRECT = 10        # terms summed directly before the asymptotic tail


def zeta(x, q=None):
  """The Hurwitz zeta function ``sum_k (k + q)**-x`` (Riemann's for q = 1): inf at x = 1 and at
  non-positive integer q, nan for x < 1 and for negative q with non-integer x."""
  jnp = _jnp()
  if q is None:
    raise NotImplementedError("Riemann zeta function not implemented; pass q=1 for the "
                              "Hurwitz zeta at q = 1")
  x, q = _f("zeta", x, q)
  x, q = jnp.broadcast_arrays(x, q)
  total = jnp.zeros_like(x)
  for k in range(_EM_DIRECT):
    total = total + jnp.power(q + k, -x)
  a = q + _EM_DIRECT
  xm1 = jnp.where(x == 1, 2, x) - 1
  total = total + jnp.power(a, 1 - x) / xm1 + 0.5 * jnp.power(a, -x)
  rising = x                                   # x (x+1) ... (x+2j-2)
  term_pow = jnp.power(a, -x - 1)
  for j, c in enumerate(_EM_COEFFS, start=1):
    total = total + c * rising * term_pow
    rising = rising * (x + 2 * j - 1) * (x + 2 * j)
    term_pow = term_pow / (a * a)
  pole_q = (q <= 0) & (q == jnp.floor(q))
  out = jnp.where(x == 1, np.inf, total)
  out = jnp.where(x < 1, np.nan, out)
  out = jnp.where(pole_q, np.inf, out)
  out = jnp.where((q < 0) & ~pole_q & (x != jnp.floor(x)), np.nan, out)
  return out.astype(x.dtype)


def polygamma(n, x):
  """The n-th derivative of digamma: ``(-1)**(n+1) n! zeta(n + 1, x)`` for n >= 1."""
  from ourjax.scipy.special import digamma
  jnp = _jnp()
  n_arr = np.asarray(n)
  x = _f("polygamma", x)
  if n_arr.ndim == 0 and float(n_arr) == 0:
    return digamma(x)
  n = jnp.asarray(n, x.dtype)
  sign = jnp.where(n % 2 == 0, -1.0, 1.0)
  out = sign * jnp.exp(lax.lgamma(n + 1)) * zeta(n + 1, x)
  return jnp.where(n == 0, digamma(x), out).astype(x.dtype)


def _erfcx_raw(x):
  from ourjax.scipy.special import erfc
  jnp = _jnp()
  big = jnp.maximum(x, 2.0)
  k = big
  for n in range(60, 0, -1):
    k = big + (n / 2) / k
  cf = 1 / (float(np.sqrt(np.pi)) * k)
  small = jnp.minimum(x, 2.0)
  direct = jnp.exp(small * small) * erfc(small)
  return jnp.where(x >= 2, cf, direct).astype(x.dtype)


_erfcx_jvp = None


def erfcx(x):
  """The scaled complementary error function ``exp(x**2) erfc(x)``: directly below 2, by
  Laplace's continued fraction above (no overflow or cancellation for large x); derivative
  ``2 x erfcx(x) - 2/sqrt(pi)``."""
  global _erfcx_jvp
  if _erfcx_jvp is None:
    from ourjax.custom_derivatives import custom_jvp
    _erfcx_jvp = custom_jvp(_erfcx_raw)

    def rule(primals, tangents):
      (x,), (t,) = primals, tangents
      y = _erfcx_jvp(x)
      return y, (t * (2 * x * y - float(2 / np.sqrt(np.pi)))).astype(y.dtype)
    _erfcx_jvp.defjvp(rule)
  x = _f("erfcx", x)
  return _erfcx_jvp(x)
