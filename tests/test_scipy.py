"""ourjax.scipy.special / stats against float64 references built from the standard library
(math.erf/erfc/lgamma, statistics.NormalDist) and hand formulas; gradients vs finite
differences; debug.print, typing, named_scope shims."""
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy import special as sp
from ourjax.scipy.stats import norm, logistic, bernoulli

ND = statistics.NormalDist()
vec = np.vectorize


def close(got, want, rtol=2e-5, atol=1e-6):
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                             rtol=rtol, atol=atol)


X = np.linspace(-4, 4, 33).astype(np.float32)


def test_erf_erfc_tail():
  close(sp.erf(X), vec(math.erf)(X.astype(np.float64)))
  x = np.float32([-3, -1, 0, 0.5, 1.4, 1.6, 2, 4, 6, 9])
  # relative precision in the upper tail (1 - erf would round to 0 beyond ~4)
  close(sp.erfc(x), vec(math.erfc)(x.astype(np.float64)), rtol=1e-5, atol=0)


_ERFC_BACKENDS = {"eager": lambda f: f, "cpu": ourjax.jit,
                  "reference": lambda f: ourjax.jit(f, backend="reference")}


@pytest.mark.parametrize("backend", sorted(_ERFC_BACKENDS))
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@settings(max_examples=25, deadline=None)
@given(xs=st.lists(st.floats(-6, 30), min_size=1, max_size=8))
def test_lax_erfc_keeps_relative_precision_in_the_tail(backend, dt, xs):
  """lax.erfc is its own function, not 1 - erf (which is 0 from erfc(4) in float32 and erfc(3)
  in float16/bfloat16): relative error of a few ulp of the dtype against math.erfc in float64,
  wherever the result is a normal number of the dtype."""
  dtype = jnp.dtype(dt)
  x = np.array(xs, np.float64).astype(dtype)
  got = np.asarray(_ERFC_BACKENDS[backend](ourjax.lax.erfc)(x)).astype(np.float64)
  want = vec(math.erfc)(x.astype(np.float64))
  fi = jnp.finfo(dtype)
  normal = want >= float(fi.tiny)
  np.testing.assert_allclose(got[normal], want[normal], rtol=4 * float(fi.eps), atol=0,
                             err_msg=f"erfc({x[normal]}) [{dt}, {backend}]")
  assert np.all(np.abs(got[~normal]) <= 2 * float(fi.tiny)), (x, got)


def test_erfinv():
  p = np.linspace(-0.99, 0.99, 23).astype(np.float32)
  y = np.asarray(sp.erfinv(p), np.float64)
  close(vec(math.erf)(y), p, rtol=1e-5, atol=1e-6)


def test_gammaln_gamma_digamma_betaln(x64):
  x = np.array([0.3, 1.0, 2.5, 7.0, 20.0, -0.5, -1.5])
  close(sp.gammaln(x), vec(math.lgamma)(x), rtol=1e-12)
  close(sp.gamma(x), vec(math.gamma)(x), rtol=1e-12)
  h = 1e-5
  fd = (vec(math.lgamma)(x + h) - vec(math.lgamma)(x - h)) / (2 * h)
  close(sp.digamma(x), fd, rtol=1e-7)
  a, b = np.array([0.5, 2.0, 3.5]), np.array([1.5, 0.25, 4.0])
  ref = vec(math.lgamma)(a) + vec(math.lgamma)(b) - vec(math.lgamma)(a + b)
  close(sp.betaln(a, b), ref, rtol=1e-12)
  assert np.isnan(np.asarray(sp.gamma(-2.0)))


def test_expit_logit_xlogy_entr():
  close(sp.expit(X), 1 / (1 + np.exp(-X.astype(np.float64))))
  p = np.linspace(0.01, 0.99, 17).astype(np.float32)
  close(sp.logit(p), np.log(p / (1 - p.astype(np.float64))), rtol=1e-4)
  x = np.float32([0, 0, 1.5, 2])
  y = np.float32([0, 3, 2, 0.5])
  close(sp.xlogy(x, y), [0, 0, 1.5 * np.log(2), 2 * np.log(0.5)])
  close(sp.xlog1py(x, np.float32([-1, 3, 2, 0.5])), [0, 0, 1.5 * np.log(3), 2 * np.log(1.5)])
  e = np.asarray(sp.entr(np.float32([-1, 0, 0.5, 2])))
  assert e[0] == -np.inf
  close(e[1:], [0, -0.5 * np.log(0.5), -2 * np.log(2)])


def test_ndtr_log_ndtr_tails():
  x = np.float32([-37, -20, -10, -5, -1, 0, 0.5, 3, 6, 9])
  ref_log = [math.log(0.5 * math.erfc(-t / math.sqrt(2))) if t > -35 else
             -t * t / 2 - math.log(-t) - 0.5 * math.log(2 * math.pi) + math.log1p(-1 / t**2)
             for t in x.astype(np.float64)]
  close(sp.log_ndtr(x), ref_log, rtol=1e-5, atol=1e-12)
  xs = x[x > -12]
  close(sp.ndtr(xs), [0.5 * math.erfc(-t / math.sqrt(2)) for t in xs.astype(np.float64)],
        rtol=1e-5, atol=0)


def test_ndtri(x64):
  p = np.array([1e-300, 1e-30, 1e-10, 1e-3, 0.1, 0.3, 0.5, 0.7, 0.95, 1 - 1e-9])
  close(sp.ndtri(p), [ND.inv_cdf(v) for v in p], rtol=1e-9, atol=1e-9)
  out = np.asarray(sp.ndtri(np.array([0.0, 1.0, -0.1, 1.1])))
  assert out[0] == -np.inf and out[1] == np.inf and np.isnan(out[2:]).all()


def test_ndtri_float32():
  p = np.float32([1e-20, 1e-6, 0.02, 0.5, 0.8, 0.999])
  close(sp.ndtri(p), [ND.inv_cdf(float(v)) for v in p], rtol=1e-5, atol=1e-5)


def test_logsumexp_softmax_delegate():
  a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  close(sp.logsumexp(a, axis=1), np.log(np.exp(a.astype(np.float64)).sum(1)))
  sm = np.exp(a) / np.exp(a).sum(-1, keepdims=True)
  close(sp.softmax(a, axis=-1), sm)
  close(sp.log_softmax(a, axis=-1), np.log(sm), rtol=1e-4)


def test_norm(x64):
  x = np.linspace(-6, 6, 25)
  loc, scale = 0.5, 2.0
  z = (x - loc) / scale
  lp = -z**2 / 2 - np.log(scale) - 0.5 * np.log(2 * np.pi)
  close(norm.logpdf(x, loc, scale), lp, rtol=1e-12)
  close(norm.pdf(x, loc, scale), np.exp(lp), rtol=1e-12)
  cdf = np.array([ND.cdf(t) for t in z])
  close(norm.cdf(x, loc, scale), cdf, rtol=1e-12, atol=1e-15)
  close(norm.logcdf(x, loc, scale), np.log(cdf), rtol=1e-12)
  q = np.array([0.001, 0.2, 0.5, 0.9])
  close(norm.ppf(q, loc, scale), [loc + scale * ND.inv_cdf(v) for v in q], rtol=1e-10)
  close(norm.sf(x, loc, scale), 1 - cdf, rtol=1e-10, atol=1e-15)


def test_logistic_bernoulli(x64):
  x = np.linspace(-30, 30, 13)
  close(logistic.logpdf(x), -x - 2 * np.log1p(np.exp(-x)), rtol=1e-10)
  close(logistic.cdf(x), 1 / (1 + np.exp(-x)), rtol=1e-12)
  close(logistic.ppf(np.array([0.1, 0.5, 0.9])), np.log(np.array([1 / 9, 1, 9])), atol=1e-12)
  k = np.array([0.0, 1.0, 2.0])
  close(bernoulli.pmf(k, 0.3), [0.7, 0.3, 0.0], rtol=1e-12)


def test_bernoulli_logpmf_is_strongly_typed_as_jax():
  # JAX forms 1 - x with a 1 of x's type: integer counts and a Python p give a strongly typed
  # result; all Python scalars, a weakly typed one (JAX 0.10.2)
  r = bernoulli.logpmf(np.array([0, 1]), 0.3)
  assert r.dtype == np.float32 and not r.weak_type
  np.testing.assert_allclose(np.asarray(r), np.log([0.7, 0.3]), rtol=1e-6)
  assert not bernoulli.logpmf(jnp.array([0, 1, 2]), 0.3).weak_type
  assert bernoulli.logpmf(1, 0.3).weak_type


def test_grads_vs_finite_differences(x64):
  def fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)
  for f, ref in [(sp.erfc, lambda t: math.erfc(t)), (sp.log_ndtr, None), (sp.ndtri, None),
                 (sp.gammaln, math.lgamma), (sp.entr, None)]:
    for x0 in ([0.3, 0.6] if f is sp.ndtri else [0.4, 2.5, 3.0]):
      if f is sp.log_ndtr:
        x0 = -x0 * 3
      g = float(np.asarray(ourjax.grad(f)(x0)))
      want = fd(lambda t: float(np.asarray(f(t))), x0)
      assert abs(g - want) <= 1e-5 * max(1, abs(want)), (f.__name__, x0, g, want)


def test_jit_vmap():
  x = np.float32([-7, -1, 0.5, 3])
  close(ourjax.jit(sp.log_ndtr)(x), sp.log_ndtr(x), rtol=1e-5)
  close(ourjax.vmap(norm.cdf)(x), norm.cdf(x))


def test_debug_print_eager_and_traced(capsys):
  ourjax.debug.print("x={} y={y}", jnp.arange(3), y=2.5)
  assert capsys.readouterr().out == "x=[0 1 2] y=2.5\n"

  def f(x):
    ourjax.debug.print("traced {}", x)
    return x * 2
  close(ourjax.jit(f)(1.0), 2.0)
  close(ourjax.grad(f)(1.0), 2.0)
  # as JAX: the run-time value, under jit and (the forward value) under grad
  assert capsys.readouterr().out == "traced 1.0\ntraced 1.0\n"


def test_shims():
  with ourjax.named_scope("block"):
    y = ourjax.named_call(lambda x: x + 1, name="inc")(1.0)
  close(y, 2.0)
  with ourjax.ensure_compile_time_eval():
    pass
  from ourjax.typing import Array, ArrayLike, DTypeLike  # noqa: F401
  assert isinstance(jnp.ones(2), Array)


def test_ndtri_is_accurate_at_the_centre():
  # float64 reference: the standard library's inverse normal CDF
  from statistics import NormalDist
  p = np.concatenate([np.linspace(0.001, 0.999, 2001), [0.5, 0.5 + 2 ** -20, 0.5 - 2 ** -24,
                                                        0.074, 0.076, 0.924, 0.926]]).astype(np.float32)
  want = np.array([NormalDist().inv_cdf(float(v)) for v in p])
  got = np.asarray(ourjax.scipy.special.ndtri(p), np.float64)
  assert float(ourjax.scipy.special.ndtri(np.float32(0.5))) == 0.0
  np.testing.assert_allclose(got, want, rtol=4e-7, atol=0)


def test_entr_of_zero_is_negative_zero():
  got = np.asarray(ourjax.scipy.special.entr(np.array([0.0, 0.5, -1.0], np.float32)))
  assert got[0] == 0 and np.signbit(got[0])          # JAX's -0.0
  np.testing.assert_allclose(got[1], -0.5 * np.log(0.5), rtol=1e-6)
  assert got[2] == -np.inf
