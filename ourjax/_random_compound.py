"""``ourjax.random``'s compound samplers: gamma and what is drawn through it (loggamma, beta,
dirichlet, chisquare, t, f), poisson, binomial and multinomial, and the distributions JAX
builds from the basic samplers (multivariate_normal, pareto, maxwell, weibull_min, wald, ...).
Each follows JAX's composition: the same key splits and the same operations in the same order,
so the same numbers.  The public names are ``ourjax.random``'s, which re-exports them; the key
handling and the basic samplers (uniform, normal, exponential, ...) live there."""
from __future__ import annotations

import math

import numpy as np

from ourjax import dtypes, lax
from ourjax import numpy as jnp
from ourjax.core import get_aval
from ourjax.random import (_as_dtype, _bcast, _canonicalize_shape, _check_key, _check_shape,
                           _float_dtype, _normal_real, _shape_of, _uniform, _unstack,
                           exponential, normal, operator_index, rademacher, split)

# ---------------------------------------------------------------------------------------------
# gamma and friends (Marsaglia-Tsang rejection per element, as JAX samples them)


def _gamma_one(key, alpha, log_space: bool):
  dt = get_aval(alpha).dtype
  c = lambda v: np.array(v, dt)  # noqa: E731
  zero, one = c(0), c(1)
  boost_mask = lax.ge(alpha, one)
  alpha_orig = alpha
  alpha = lax.select_n(boost_mask, lax.add(alpha, one), alpha)
  d = lax.sub(alpha, c(1 / 3))
  cc = lax.div(c(1 / 3), lax.sqrt(d))

  def cond_fn(state):
    _, x2, v3, u = state
    keep = lax.ge(u, lax.sub(one, lax.mul(c(0.0331), lax.mul(x2, x2))))
    keep2 = lax.ge(lax.log(u), lax.add(lax.mul(x2, c(0.5)),
                                       lax.mul(d, lax.add(lax.sub(one, v3), lax.log(v3)))))
    return lax.and_(keep, keep2)

  def body_fn(state):
    k = state[0]
    k, x_key, u_key = _unstack(split(k, 3), 3)

    def next_kxv(kxv):
      kk, _, _ = kxv
      kk, sub = _unstack(split(kk), 2)
      x = _normal_real(sub, (), dt)
      return kk, x, lax.add(one, lax.mul(x, cc))

    _, x, v = lax.while_loop(lambda kxv: lax.le(kxv[2], zero), next_kxv,
                             (x_key, zero + zero, c(-1.)))
    x2 = lax.mul(x, x)
    v3 = lax.mul(lax.mul(v, v), v)
    u = _uniform(u_key, (), dt, 0., 1.)
    return k, x2, v3, u

  key, sub = _unstack(split(key), 2)
  _, _, v, _ = lax.while_loop(cond_fn, body_fn, (key, zero + zero, one + zero, c(2.)))
  if log_space:
    u = _uniform(sub, (), dt, 0., 1.)
    log_samples = lax.log1p(lax.neg(u))  # minus an Exponential(1) draw
    log_boost = lax.select_n(lax.or_(boost_mask, lax.eq(log_samples, zero)),
                             lax.mul(log_samples, lax.div(one, alpha_orig)), zero)
    return lax.add(lax.add(lax.log(d), lax.log(v)), log_boost)
  samples = lax.sub(one, _uniform(sub, (), dt, 0., 1.))
  boost = lax.select_n(boost_mask, lax.pow(samples, lax.div(one, alpha_orig)), one)
  return lax.mul(lax.mul(d, v), boost)


def _gamma(key, a, shape, dt, log_space):
  from ourjax.api import vmap
  if shape is None:
    shape = tuple(_shape_of(a))
  else:
    _check_shape("gamma", shape, _shape_of(a))
  a = _bcast(_as_dtype(a, dt), shape)
  n = math.prod(shape)
  keys = split(key, n)
  alphas = lax.reshape(jnp.asarray(a), (n,))
  samples = vmap(lambda k, al: _gamma_one(k, al, log_space))(keys, alphas)
  return lax.stop_gradient(lax.reshape(samples, shape))


def gamma(key, a, shape=None, dtype=None):
  """Gamma(a, 1) samples (Marsaglia and Tsang's method; not differentiable in ``a`` in
  ourjax)."""
  key, _ = _check_key("gamma", key)
  dt = _float_dtype(dtype, "gamma")
  shape = None if shape is None else _canonicalize_shape(shape)
  return _gamma(key, a, shape, dt, False)


def loggamma(key, a, shape=None, dtype=None):
  """``log`` of Gamma(a, 1) samples, computed in log space (accurate for small ``a``)."""
  key, _ = _check_key("loggamma", key)
  dt = _float_dtype(dtype, "loggamma")
  shape = None if shape is None else _canonicalize_shape(shape)
  return _gamma(key, a, shape, dt, True)


def beta(key, a, b, shape=None, dtype=None):
  """Beta(a, b) samples from two log-gamma draws."""
  key, _ = _check_key("beta", key)
  dt = _float_dtype(dtype, "beta")
  if shape is None:
    shape = tuple(np.broadcast_shapes(_shape_of(a), _shape_of(b)))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("beta", shape, _shape_of(a), _shape_of(b))
  ka, kb = _unstack(split(key), 2)
  a = _bcast(_as_dtype(a, dt), shape)
  b = _bcast(_as_dtype(b, dt), shape)
  la = _gamma(ka, a, shape, dt, True)
  lb = _gamma(kb, b, shape, dt, True)
  m = lax.max(la, lb)
  ga, gb = jnp.exp(la - m), jnp.exp(lb - m)
  return ga / (ga + gb)


def dirichlet(key, alpha, shape=None, dtype=None):
  """Dirichlet(alpha) samples (the last axis of ``alpha`` holds the concentrations)."""
  key, _ = _check_key("dirichlet", key)
  dt = _float_dtype(dtype, "dirichlet")
  alpha_shape = tuple(_shape_of(alpha))
  if len(alpha_shape) < 1:
    raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(alpha_shape)}")
  if shape is None:
    shape = alpha_shape[:-1]
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("dirichlet", shape, alpha_shape[:-1])
  lg = _gamma(key, _as_dtype(alpha, dt), shape + alpha_shape[-1:], dt, True)
  from ourjax.nn import softmax
  return softmax(lg, -1)


def poisson(key, lam, shape=None, dtype=None):
  """Poisson(lam) samples (Knuth's product method for lam < 10, Hormann's transformed
  rejection above)."""
  key, _ = _check_key("poisson", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "poisson")
  if shape is None:
    shape = tuple(_shape_of(lam))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("poisson", shape, _shape_of(lam))
  lam = _bcast(_as_dtype(lam, np.float32), shape)
  lam = jnp.asarray(lam)
  use_knuth = jnp.isnan(lam) | (lam < 10)
  lam_knuth = jnp.where(use_knuth, lam, 0.0)
  lam_rej = jnp.where(use_knuth, 1e5, lam)
  max_iters = int(np.iinfo(dt).max)
  result = jnp.where(use_knuth, _poisson_knuth(key, lam_knuth, shape, dt, max_iters),
                     _poisson_rejection(key, lam_rej, shape, dt, max_iters))
  return jnp.where(lam == 0, jnp.zeros_like(result), result)


def _poisson_knuth(key, lam, shape, dt, max_iters):
  def body(carry):
    i, k, rng, log_prod = carry
    rng, sub = _unstack(split(rng), 2)
    k = jnp.where(log_prod > -lam, k + 1, k)
    u = _uniform(sub, shape, np.dtype(np.float32), 0., 1.)
    return i + 1, k, rng, log_prod + jnp.log(u)

  def cond(carry):
    i, _, _, log_prod = carry
    return jnp.any(log_prod > -lam) & (i < max_iters)

  init = (jnp.asarray(0, dt), jnp.zeros(shape, dt), key, jnp.zeros(shape, np.float32))
  k = lax.while_loop(cond, body, init)[1]
  return (k - 1).astype(dt)


def _poisson_rejection(key, lam, shape, dt, max_iters):
  log_lam = jnp.log(lam)
  b = 0.931 + 2.53 * jnp.sqrt(lam)
  a = -0.059 + 0.02483 * b
  inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
  v_r = 0.9277 - 3.6224 / (b - 2)

  def body(carry):
    i, k_out, accepted, rng = carry
    rng, k0, k1 = _unstack(split(rng, 3), 3)
    u = _uniform(k0, shape, lam.dtype, 0., 1.) - 0.5
    v = _uniform(k1, shape, lam.dtype, 0., 1.)
    u_shifted = 0.5 - jnp.abs(u)
    k = jnp.floor((2 * a / u_shifted + b) * u + lam + 0.43)
    s = jnp.log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
    t = -lam + k * log_lam - lax.lgamma(k + 1)
    accept1 = (u_shifted >= 0.07) & (v <= v_r)
    reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
    accept = accept1 | (~reject & (s <= t))
    return i + 1, jnp.where(accept, k, k_out), accepted | accept, rng

  def cond(carry):
    i, _, accepted, _ = carry
    return jnp.any(~accepted) & (i < max_iters)

  init = (jnp.asarray(0, dt), jnp.full(shape, -1, lam.dtype), jnp.zeros(shape, bool), key)
  return lax.while_loop(cond, body, init)[1].astype(dt)


# ---------------------------------------------------------------------------------------------
# Distributions built from the samplers above (each is JAX's composition: the same key splits,
# the same operations in the same order, so the same numbers)


def _check_broadcast_shapes(name, shape, *args):
  """``shape`` canonicalised and checked against the parameters' shapes, or (``None``) the
  parameters' broadcast shape."""
  arg_shapes = [tuple(_shape_of(a)) for a in args]
  if shape is None:
    return tuple(np.broadcast_shapes(*arg_shapes)) if arg_shapes else ()
  shape = _canonicalize_shape(shape)
  _check_shape(name, shape, *arg_shapes)
  return shape


def _check_all_safe_to_cast(name, dt, *args):
  """The parameters must convert to the sample dtype without promotion (a Python scalar
  always does; a float32 array does not go to float16), as JAX checks."""
  for a in args:
    if dtypes.dtype(a) != dt and dtypes.result_type(a, dt) != dt:
      raise dtypes.TypePromotionError(
          f"In arguments to {name}, cannot safely cast argument of type "
          f"{dtypes.dtype(a, canonicalize=True)} to {dt}")


def _float_param(x, dt):
  return lax.convert_element_type(jnp.asarray(x), dt)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method: str = "cholesky"):
  """Samples of N(mean, cov): ``mean + factor @ z`` with ``z`` standard normal and ``factor``
  the Cholesky factor of ``cov`` (``method='svd'``: ``U sqrt(S)``; ``'eigh'``: ``V sqrt(W)``).
  ``mean`` is ``(..., n)``, ``cov`` ``(..., n, n)``; the batch shapes broadcast against
  ``shape``."""
  from ourjax.numpy import linalg
  from ourjax.numpy._util import promote_dtypes_inexact
  key, _ = _check_key("multivariate_normal", key)
  mean, cov = promote_dtypes_inexact(jnp.asarray(mean), jnp.asarray(cov))
  if method not in {"svd", "eigh", "cholesky"}:
    raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
  dt = mean.dtype if dtype is None else dtypes.check_user_dtype(dtype, "multivariate_normal")
  if not dtypes.issubdtype(dt, np.floating):
    raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, got {dt}")
  if shape is not None:
    shape = _canonicalize_shape(shape)
  if not mean.ndim >= 1:
    raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                     f"{mean.ndim}")
  if not cov.ndim >= 2:
    raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == {cov.ndim}")
  n = mean.shape[-1]
  if tuple(cov.shape[-2:]) != (n, n):
    raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, but "
                     f"got cov.shape == {tuple(cov.shape)}.")
  if shape is None:
    shape = tuple(np.broadcast_shapes(mean.shape[:-1], cov.shape[:-2]))
  else:
    _check_shape("normal", shape, mean.shape[:-1], cov.shape[:-2])
  if method == "svd":
    u, s, _ = linalg.svd(cov)
    factor = u * jnp.sqrt(s[..., None, :])
  elif method == "eigh":
    w, v = linalg.eigh(cov)
    factor = v * jnp.sqrt(w[..., None, :])
  else:
    factor = linalg.cholesky(cov)
  z = normal(key, shape + tuple(mean.shape[-1:]), dt)
  return mean + jnp.einsum("...ij,...j->...i", factor, z)


def pareto(key, b, shape=None, dtype=None):
  """Pareto(b) samples (support ``[1, inf)``): ``exp(e / b)`` with ``e`` Exponential(1)."""
  key, _ = _check_key("pareto", key)
  dt = _float_dtype(dtype, "pareto")
  shape = _check_broadcast_shapes("pareto", shape, b)
  _check_all_safe_to_cast("pareto", dt, b)
  b = _float_param(b, dt)
  e = exponential(key, shape, dt)
  return lax.exp(e / b)


def t(key, df, shape=None, dtype=None):
  """Student's t samples with ``df`` degrees of freedom: ``z * sqrt((df / 2) / g)`` with ``z``
  standard normal and ``g`` Gamma(df / 2)."""
  key, _ = _check_key("t", key)
  dt = _float_dtype(dtype, "t")
  shape = _check_broadcast_shapes("t", shape, df)
  _check_all_safe_to_cast("t", dt, df)
  df = _float_param(df, dt)
  key_n, key_g = _unstack(split(key), 2)
  n = normal(key_n, shape, dt)
  half_df = lax.div(df, np.array(2, dt))
  g = gamma(key_g, half_df, shape, dt)
  return n * jnp.sqrt(half_df / g)


def chisquare(key, df, shape=None, dtype=None):
  """Chi-square samples with ``df`` degrees of freedom: twice a Gamma(df / 2) draw (sampled in
  log space)."""
  key, _ = _check_key("chisquare", key)
  dt = _float_dtype(dtype, "chisquare")
  shape = _check_broadcast_shapes("chisquare", shape, df)
  _check_all_safe_to_cast("chisquare", dt, df)
  return _chisquare(key, _float_param(df, dt), shape, dt)


def _chisquare(key, df, shape, dt):
  two = np.array(2, dt)
  log_g = loggamma(key, lax.div(df, two), shape, dt)
  return lax.mul(jnp.exp(log_g), two)


def f(key, dfnum, dfden, shape=None, dtype=None):
  """F-distribution samples: the ratio of two chi-square draws, each over its degrees of
  freedom."""
  key, _ = _check_key("f", key)
  dt = _float_dtype(dtype, "f")
  shape = _check_broadcast_shapes("f", shape, dfnum, dfden)
  _check_all_safe_to_cast("f", dt, dfnum, dfden)
  dfden = _float_param(dfden, dt)
  dfnum = _float_param(dfnum, dt)
  key_dfd, key_dfn = _unstack(split(key), 2)
  chi2_dfn = _chisquare(key_dfn, dfnum, shape, dt)
  chi2_dfd = _chisquare(key_dfd, dfden, shape, dt)
  return lax.div(lax.div(chi2_dfn, _bcast(dfnum, shape)), lax.div(chi2_dfd, _bcast(dfden, shape)))


def maxwell(key, shape=(), dtype=None):
  """Maxwell samples: the length of a standard normal 3-vector."""
  key, _ = _check_key("maxwell", key)
  dt = _float_dtype(dtype, "maxwell")
  shape = _canonicalize_shape(shape)
  return _maxwell(key, shape, dt)


def _maxwell(key, shape, dt):
  z = normal(key, shape + (3,), dt)
  return jnp.sqrt(jnp.sum(z * z, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
  """Double-sided Maxwell samples ``sign * maxwell * scale + loc``.  As JAX's, the result has
  shape ``shape + broadcast(loc.shape, scale.shape)`` (with ``shape`` defaulting to the
  parameters' shape when empty)."""
  key, _ = _check_key("double_sided_maxwell", key)
  dt = _float_dtype(dtype, "double_sided_maxwell")
  shape = _canonicalize_shape(shape)
  params_shape = tuple(np.broadcast_shapes(_shape_of(loc), _shape_of(scale)))
  if not shape:
    shape = params_shape
  shape = shape + params_shape
  maxwell_key, rademacher_key = _unstack(split(key), 2)
  maxwell_rvs = _maxwell(maxwell_key, shape, dt)
  random_sign = rademacher(rademacher_key, shape, dt)
  return random_sign * maxwell_rvs * scale + loc


def weibull_min(key, scale, concentration, shape=(), dtype=None):
  """Weibull samples by the inverse CDF: ``(-log1p(-u)) ** (1 / concentration) * scale``."""
  key, _ = _check_key("weibull_min", key)
  dt = _float_dtype(dtype, "weibull_min")
  shape = _canonicalize_shape(shape)
  u = _uniform(key, shape, dt, 0, 1)
  return jnp.power(-jnp.log1p(-u), 1.0 / concentration) * scale


def generalized_normal(key, p: float, shape=(), dtype=None):
  """Generalized normal samples (density proportional to ``exp(-|x|**p)``): a random sign times
  ``Gamma(1/p) ** (1/p)``."""
  key, _ = _check_key("generalized_normal", key)
  dt = _float_dtype(dtype, "generalized_normal")
  shape = _canonicalize_shape(shape)
  return _generalized_normal(key, p, shape, dt)


def _generalized_normal(key, p, shape, dt):
  k0, k1 = _unstack(split(key), 2)
  g = gamma(k0, 1 / p, shape, dt)
  r = rademacher(k1, shape, dt)
  return r * g ** (1 / p)


def ball(key, d: int, p: float = 2, shape=(), dtype=None):
  """Points uniform in the unit ``p``-norm ball of dimension ``d`` (shape ``shape + (d,)``)."""
  key, _ = _check_key("ball", key)
  dt = _float_dtype(dtype, "ball")
  shape = _canonicalize_shape(shape)
  from ourjax import core
  d = core.concrete_or_error(operator_index, d, "The error occurred in jax.random.ball()")
  k1, k2 = _unstack(split(key), 2)
  g = _generalized_normal(k1, p, (*shape, d), dt)
  e = exponential(k2, shape, dt)
  return g / (((jnp.abs(g) ** p).sum(-1) + e) ** (1 / p))[..., None]


def rayleigh(key, scale, shape=None, dtype=None):
  """Rayleigh samples ``scale * sqrt(-2 log u)``."""
  key, _ = _check_key("rayleigh", key)
  dt = _float_dtype(dtype, "rayleigh")
  shape = _check_broadcast_shapes("rayleigh", shape, scale)
  _check_all_safe_to_cast("rayleigh", dt, scale)
  u = _uniform(key, shape, dt, 0., 1.)
  scale = _bcast(_float_param(scale, dt), shape)
  return lax.mul(scale, lax.sqrt(lax.mul(lax.log(u), np.array(-2, dt))))


def wald(key, mean, shape=None, dtype=None):
  """Wald (inverse Gaussian, unit shape) samples by Michael, Schucany and Haas' transformation
  of a normal and a uniform draw."""
  key, _ = _check_key("wald", key)
  dt = _float_dtype(dtype, "wald")
  shape = _check_broadcast_shapes("wald", shape, mean)
  _check_all_safe_to_cast("wald", dt, mean)
  k1, k2 = _unstack(split(key), 2)
  mean = _bcast(_float_param(mean, dt), shape)
  v = normal(k1, shape, dt)
  z = _uniform(k2, shape, dt, 0., 1.)
  y = lax.integer_pow(v, 2)
  y_sq = lax.integer_pow(y, 2)
  mean_sq = lax.integer_pow(mean, 2)
  sqrt_term = lax.sqrt(4 * mean * y + mean_sq * y_sq)
  x = mean + mean_sq * y / 2 - mean / 2 * sqrt_term
  return lax.select(lax.le(z, mean / (mean + x)), x, mean_sq / x)


def geometric(key, p, shape=None, dtype=None):
  """Geometric samples (trials up to the first success, ``>= 1``): ``floor(log u / log1p(-p))
  + 1`` in ``p``'s float dtype, converted to the integer ``dtype``."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("geometric", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "geometric")
  if not dtypes.issubdtype(dt, np.integer):
    raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dt}")
  shape = _check_broadcast_shapes("geometric", shape, p)
  check_arraylike("geometric", p)
  (p,) = promote_dtypes_inexact(p)
  u = _uniform(key, shape, p.dtype, 0., 1.)
  u = jnp.where(u == 0, 1, u)   # JAX's guard against log(0)
  log_u = lax.log(u)
  log_one_minus_p = jnp.broadcast_to(lax.log1p(-p), shape)
  g = lax.floor(lax.div(log_u, log_one_minus_p)) + 1
  return g.astype(dt)


def triangular(key, left, mode, right, shape=None, dtype=None):
  """Triangular(left, mode, right) samples by the inverse CDF."""
  key, _ = _check_key("triangular", key)
  dt = _float_dtype(dtype, "triangular")
  shape = _check_broadcast_shapes("triangular", shape, left, mode, right)
  _check_all_safe_to_cast("triangular", dt, left, mode, right)
  left = jnp.broadcast_to(_float_param(left, dt), shape)
  right = jnp.broadcast_to(_float_param(right, dt), shape)
  mode = jnp.broadcast_to(_float_param(mode, dt), shape)
  fc = (mode - left) / (right - left)
  u = _uniform(key, shape, dt, 0., 1.)
  out1 = left + lax.sqrt(u * (right - left) * (mode - left))
  out2 = right - lax.sqrt((1 - u) * (right - left) * (right - mode))
  return lax.select(u < fc, out1, out2)


# binomial: inversion (summing geometric gaps) where count * p <= 10, else Hormann's BTRS
# transformed rejection; both use the same key, as in JAX (and TensorFlow) whose algorithm this is

_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                  0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                  0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                  0.00833056343336287)


def _stirling_approx_tail(k):
  """``log(k!) - (k + 1/2) log(k + 1) + (k + 1) - log(sqrt(2 pi))`` (the Stirling series'
  error): tabulated for k <= 9, a three-term series above."""
  dt = k.dtype
  vals = jnp.array(_STIRLING_TAIL, dtype=dt)
  use_tail_values = k <= 9
  k = lax.clamp(np.array(0.0, dt), k, np.array(9.0, dt))
  kp1sq = (k + 1) * (k + 1)
  approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
  k = jnp.floor(k)
  return lax.select(use_tail_values, vals[jnp.asarray(k, dtype="int32")], approx)


def _binomial_inversion(key, count, prob, shape, dt, max_iters):
  log1minusprob = jnp.log1p(-prob)

  def body_fn(carry):
    i, num_geom, geom_sum, key = carry
    subkey, key = _unstack(split(key), 2)
    num_geom_out = lax.select(geom_sum <= count, num_geom + 1, num_geom)
    u = _uniform(subkey, shape, prob.dtype, 0., 1.)
    geom = jnp.ceil(jnp.log(u) / log1minusprob)
    return i + 1, num_geom_out, geom_sum + geom, key

  def cond_fn(carry):
    i, geom_sum = carry[0], carry[2]
    return (geom_sum <= count).any() & (i < max_iters)

  zeros = lax.full(shape, 0, prob.dtype)
  k = lax.while_loop(cond_fn, body_fn, (jnp.asarray(0), zeros, zeros, key))[1]
  return (k - 1).astype(dt)


def _btrs(key, count, prob, shape, dt, max_iters):
  stddev = jnp.sqrt(count * prob * (1 - prob))
  b = 1.15 + 2.53 * stddev
  a = -0.0873 + 0.0248 * b + 0.01 * prob
  c = count * prob + 0.5
  v_r = 0.92 - 4.2 / b
  r = prob / (1 - prob)
  alpha = (2.83 + 5.1 / b) * stddev
  m = jnp.floor((count + 1) * prob)

  def body_fn(carry):
    i, k_out, accepted, key = carry
    key, subkey_0, subkey_1 = _unstack(split(key, 3), 3)
    u = _uniform(subkey_0, shape, prob.dtype, 0., 1.)
    v = _uniform(subkey_1, shape, prob.dtype, 0., 1.)
    u = u - 0.5
    us = 0.5 - jnp.abs(u)
    accept1 = (us >= 0.07) & (v <= v_r)
    k = jnp.floor((2 * a / us + b) * u + c)
    reject = (k < 0) | (k > count)
    v = jnp.log(v * alpha / (a / (us * us) + b))
    ub = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
          + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
          + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
          + _stirling_approx_tail(m)
          + _stirling_approx_tail(count - m)
          - _stirling_approx_tail(k)
          - _stirling_approx_tail(count - k))
    accept2 = v <= ub
    accept = accept1 | (~reject & accept2)
    k_out = lax.select(accept, k, k_out)
    return i + 1, k_out, accepted | accept, key

  def cond_fn(carry):
    i, accepted = carry[0], carry[2]
    return (~accepted).any() & (i < max_iters)

  init = (jnp.asarray(0), lax.full(shape, -1, prob.dtype), jnp.full(shape, False, bool), key)
  return lax.while_loop(cond_fn, body_fn, init)[1].astype(dt)


def binomial(key, n, p, shape=None, dtype=None):
  """Binomial(n, p) samples, as floats (``n`` may be a float; NaN for invalid parameters, inf
  for an infinite ``n``)."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("binomial", key)
  check_arraylike("binomial", n, p)
  dt = _float_dtype(dtype, "binomial")
  if shape is None:
    shape = tuple(np.broadcast_shapes(_shape_of(n), _shape_of(p)))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("binomial", shape, _shape_of(n), _shape_of(p))
  (prob,) = promote_dtypes_inexact(p)
  count = lax.convert_element_type(jnp.asarray(n), prob.dtype)
  count = jnp.broadcast_to(count, shape)
  prob = jnp.broadcast_to(prob, shape)
  p_lt_half = prob < 0.5
  q = lax.select(p_lt_half, prob, 1.0 - prob)
  count_nan_or_neg = jnp.isnan(count) | (count < 0.0)
  count_inf = jnp.isinf(count)
  q_is_nan = jnp.isnan(q)
  q_l_0 = q < 0.0
  q = lax.select(q_is_nan | q_l_0, lax.full_like(q, 0.01), q)
  use_inversion = count_nan_or_neg | (count * q <= 10.0)
  count = jnp.floor(count)   # as np.random.binomial does with a float count
  count_inv = lax.select(use_inversion, count, lax.full_like(count, 0.0))
  count_btrs = lax.select(use_inversion, lax.full_like(count, 1e4), count)
  q_btrs = lax.select(use_inversion, lax.full_like(q, 0.5), q)
  max_iters = dt.type(dtypes.finfo(dt).max)
  samples = lax.select(use_inversion,
                       _binomial_inversion(key, count_inv, q, shape, dt, max_iters),
                       _btrs(key, count_btrs, q_btrs, shape, dt, max_iters))
  invalid = q_l_0 | q_is_nan | count_nan_or_neg
  samples = lax.select(invalid, jnp.full_like(samples, np.nan, dt), samples)
  samples = lax.select(count_inf & (~invalid), jnp.full_like(samples, np.inf, dt), samples)
  return lax.select(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                    count.astype(dt) - samples)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
  """Multinomial(n, p) counts over the last axis of ``p`` (one binomial draw per category from
  what the previous categories left, scanned over the categories)."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("multinomial", key)
  check_arraylike("multinomial", n, p)
  n, p = promote_dtypes_inexact(n, p)
  if shape is None:
    shape = tuple(p.shape)
  n = jnp.broadcast_to(n, shape[:-1])
  p = jnp.broadcast_to(p, shape)

  def step(remainder, ratio_key):
    ratio, k = ratio_key
    count = binomial(k, remainder, ratio.clip(0, 1), dtype=remainder.dtype)
    return remainder - count, count

  p = jnp.moveaxis(p, -1, 0)
  remaining_probs = lax.cumsum(p, 0, reverse=True)
  ratios = p / jnp.where(remaining_probs == 0, 1, remaining_probs)
  keys = split(key, ratios.shape[0])
  _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
  out = jnp.moveaxis(counts, 0, -1)
  return out.astype(dtypes.default_float_dtype() if dtype is None else dtype)
