"""``ourjax.nn``: activation functions, softmax/logsumexp and one-hot encoding, as ``jax.nn``.

Everything is written with ``ourjax.numpy``/``ourjax.lax`` operations, so it traces, jits,
vmaps and differentiates.  The numerically delicate ones:

* ``softmax``/``log_softmax``/``logsumexp`` subtract the maximum first (so ``softmax`` of 1e4
  is finite), and a maximum that is not finite is replaced by 0 (so ``logsumexp`` of all
  ``-inf`` is ``-inf``, not NaN).
* ``relu``'s derivative at 0 is 0 (as JAX's), ``relu6``'s at 0 and 6 too.
* ``gelu(x, approximate=True)`` is the tanh form, ``approximate=False`` the exact erf form.
* ``softplus`` is ``logaddexp(x, 0)``, exact for large ``|x|``.
"""
from __future__ import annotations

import operator
import warnings

import numpy as np

from ourjax import core, dtypes, errors, lax
from ourjax._eager_replay import replayed
from ourjax import numpy as jnp
from ourjax.custom_derivatives import custom_jvp
from ourjax.nn import initializers  # noqa: F401
from ourjax.numpy._util import check_arraylike, promote_args_inexact

__all__ = [
    "identity", "relu", "relu6", "gelu", "silu", "swish", "sigmoid", "softplus", "soft_sign",
    "elu", "celu", "selu", "leaky_relu", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish",
    "log_sigmoid", "mish", "squareplus", "sparse_plus", "sparse_sigmoid", "glu", "log1mexp",
    "tanh", "softmax", "log_softmax", "logsumexp", "logmeanexp", "one_hot", "standardize",
    "initializers", "dot_product_attention",
]


def _arr(name, x):
  check_arraylike(name, x)
  return jnp.asarray(x)


def identity(x):
  """Returns ``x`` (as an array)."""
  return _arr("identity", x)


@custom_jvp
def relu(x):
  """``max(x, 0)``; its derivative at 0 is taken to be 0."""
  return jnp.maximum(x, 0)


relu.defjvps(lambda g, ans, x: lax.select_n(x > 0, jnp.zeros_like(g), g))


@custom_jvp
def relu6(x):
  """``min(max(x, 0), 6)``; the derivative is 0 at 0 and at 6."""
  return jnp.minimum(jnp.maximum(x, 0), 6.)


relu6.defjvps(lambda g, ans, x: lax.select_n((x > 0) & (x < 6), jnp.zeros_like(g), g))


def sigmoid(x):
  """``1 / (1 + exp(-x))`` (``lax.logistic``: an integer ``x`` is refused, as JAX's)."""
  return lax.logistic(_arr("sigmoid", x))


@replayed()
def softplus(x):
  """``log(1 + exp(x))``, computed as ``logaddexp(x, 0)``."""
  return jnp.logaddexp(_arr("softplus", x), 0)


@replayed()
def log_sigmoid(x):
  """``log(sigmoid(x)) = -softplus(-x)``."""
  return -softplus(-_arr("log_sigmoid", x))


def soft_sign(x):
  """``x / (|x| + 1)``."""
  x = _arr("soft_sign", x)
  return x / (jnp.abs(x) + 1)


@replayed()
def silu(x):
  """``x * sigmoid(x)`` (also called swish)."""
  x = _arr("silu", x)
  return x * sigmoid(x)


swish = silu


@replayed()
def mish(x):
  """``x * tanh(softplus(x))``."""
  x = _arr("mish", x)
  return x * jnp.tanh(softplus(x))


@replayed()
def elu(x, alpha=1.0):
  """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
  x = _arr("elu", x)
  return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.where(x > 0, 0., x)))


def celu(x, alpha=1.0):
  """``max(x, 0) + alpha * expm1(min(x, 0) / alpha)``."""
  x = _arr("celu", x)
  return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@replayed()
def selu(x):
  """``scale * elu(x, alpha)`` with the self-normalising constants."""
  return _SELU_SCALE * elu(x, _SELU_ALPHA)


def leaky_relu(x, negative_slope=1e-2):
  """``x`` for ``x >= 0``, else ``negative_slope * x``."""
  x = _arr("leaky_relu", x)
  return jnp.where(x >= 0, x, negative_slope * x)


def hard_tanh(x):
  """``x`` clipped to ``[-1, 1]``."""
  x = _arr("hard_tanh", x)
  return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def hard_sigmoid(x):
  """``relu6(x + 3) / 6``."""
  return relu6(_arr("hard_sigmoid", x) + 3.) / 6.


def hard_silu(x):
  """``x * hard_sigmoid(x)``."""
  x = _arr("hard_silu", x)
  return x * hard_sigmoid(x)


hard_swish = hard_silu


def squareplus(x, b=4):
  """``(x + sqrt(x**2 + b)) / 2``."""
  x = _arr("squareplus", x)
  return (x + jnp.sqrt(jnp.square(x) + b)) / 2


def sparse_plus(x):
  """0 for ``x <= -1``, ``(x + 1)**2 / 4`` in between, ``x`` for ``x >= 1``."""
  x = _arr("sparse_plus", x)
  return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparse_sigmoid(x):
  """``clip((x + 1) / 2, 0, 1)``."""
  return 0.5 * jnp.clip(_arr("sparse_sigmoid", x) + 1.0, 0.0, 2.0)


def tanh(x):
  return jnp.tanh(x)


def log1mexp(x):
  """``log(1 - exp(-x))`` for ``x > 0``, accurate near 0 and for large ``x``."""
  x = _arr("log1mexp", x)
  c = np.log(2.0)
  return jnp.where(x < c, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


@replayed(static=("approximate",))
def gelu(x, approximate: bool = True):
  """Gaussian error linear unit: ``x * Phi(x)``; ``approximate=True`` uses
  ``0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))`` for ``Phi``, ``False`` the exact
  ``erfc(-x / sqrt(2)) / 2``."""
  [x] = promote_args_inexact("gelu", x)
  if approximate:
    k = np.array(np.sqrt(2 / np.pi), x.dtype)
    cdf = 0.5 * (1.0 + jnp.tanh(k * (x + 0.044715 * (x ** 3))))
    return x * cdf
  sqrt_half = np.array(np.sqrt(0.5), x.dtype)
  return (0.5 * x * lax.erfc(-x * sqrt_half)).astype(x.dtype)


@replayed(static=("axis",))
def glu(x, axis: int = -1):
  """Gated linear unit: the first half of ``x`` along ``axis`` times the sigmoid of the
  second half."""
  x = _arr("glu", x)
  size = x.shape[axis]
  if size % 2:
    raise ValueError(f"axis size must be divisible by 2 for glu, got {size}")
  a, b = jnp.split(x, 2, axis)
  return a * sigmoid(b)


# ---------------------------------------------------------------------------------------------
# softmax family


def _reduction_axes(axis, ndim, name="logsumexp"):
  """Sorted non-negative axes; one out of range is an error (as JAX's), not wrapped."""
  from ourjax.numpy._reductions import _reduction_axes as checked
  return tuple(sorted(checked(name, axis, ndim)))


@replayed(static=("axis", "keepdims", "return_sign"))
def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False,
              where=None):
  """``log(sum(b * exp(a), axis))``, stable for large inputs and for ``-inf`` ones.

  With ``b`` the sum may be negative: the result is then NaN, unless ``return_sign=True``,
  which returns ``(log|sum|, sign(sum))``."""
  if where is not None:
    from ourjax.numpy._reductions import _check_where
    where = _check_where("logsumexp", where)
    a = jnp.where(where, a, 0)
  if b is not None:
    a, b = promote_args_inexact("logsumexp", a, b)
    a = jnp.where(b != 0, a, -np.inf)
  else:
    [a] = promote_args_inexact("logsumexp", a)
  dims = _reduction_axes(axis, a.ndim)
  amax = jnp.max(jnp.real(a), axis=dims, keepdims=True, where=where, initial=-np.inf)
  amax = lax.stop_gradient(jnp.where(jnp.isfinite(amax), amax, jnp.zeros_like(amax)))
  exp_a = jnp.exp(a - amax.astype(a.dtype))
  if b is not None:
    exp_a = exp_a * b
  sumexp = jnp.sum(exp_a, axis=dims, keepdims=keepdims, where=where)
  sign = jnp.sign(sumexp)
  if return_sign or not dtypes.issubdtype(a.dtype, np.complexfloating):
    sumexp = jnp.abs(sumexp)
  amax_out = amax if keepdims else jnp.squeeze(amax, dims)
  out = jnp.log(sumexp) + amax_out.astype(sumexp.dtype)
  if return_sign:
    return out, sign
  if b is not None and not dtypes.issubdtype(out.dtype, np.complexfloating):
    out = jnp.where(sign < 0, jnp.array(np.nan, out.dtype), out)
  return out


def logmeanexp(x, axis=None, where=None, keepdims: bool = False):
  """``logsumexp(x) - log(n)``, ``n`` the number of (``where``-selected) elements."""
  x = _arr("logmeanexp", x)
  lse = logsumexp(x, axis=axis, where=where, keepdims=keepdims)
  if where is None:
    dims = _reduction_axes(axis, x.ndim, "logmeanexp")
    n = float(np.prod([x.shape[d] for d in dims]))
    return lse - np.log(n).astype(lse.dtype)
  count = jnp.sum(jnp.broadcast_to(where, x.shape), axis=axis, keepdims=keepdims)
  return lse - jnp.log(count.astype(lse.dtype))


def _softmax_impl(x, where, axis, initial):
  x_max = jnp.max(x, axis, where=where, initial=initial, keepdims=True)
  x_safe = x if where is None else jnp.where(where, x, initial)
  unnormalized = jnp.exp(x_safe - x_max)
  result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
  if where is not None:
    result = jnp.where(where, result, 0)
  return result


# The derivative is written out (y * (t - sum(y * t))) rather than left to autodiff of the
# max-shifted formula, whose tangent through the max cancels only in exact arithmetic.
_softmax_plain = custom_jvp(lambda x, axis, initial: _softmax_impl(x, None, axis, initial),
                            nondiff_argnums=(1, 2))
_softmax_masked = custom_jvp(_softmax_impl, nondiff_argnums=(2, 3))


@_softmax_plain.defjvp
def _softmax_plain_jvp(axis, initial, primals, tangents):
  (x,), (t,) = primals, tangents
  y = _softmax_plain(x, axis, initial)
  return y, y * (t - jnp.sum(y * t, axis, keepdims=True))


@_softmax_masked.defjvp
def _softmax_masked_jvp(axis, initial, primals, tangents):
  (x, where), (t, _) = primals, tangents
  y = _softmax_masked(x, where, axis, initial)
  return y, y * (t - jnp.sum(y * t, axis, where=where, keepdims=True))


@replayed(static=("axis", "initial"))
def softmax(x, axis=-1, where=None, initial=-np.inf):
  """``exp(x) / sum(exp(x), axis)``, computed after subtracting the maximum.  Masked-out
  elements (``where`` False) get 0."""
  # (integers to their inexact type as jnp's ufuncs promote them: int32 is float32 under x64)
  [x] = promote_args_inexact("softmax", _arr("softmax", x))
  if isinstance(axis, list):
    axis = tuple(axis)
  if where is None:
    return _softmax_plain(x, axis, initial)
  return _softmax_masked(x, jnp.asarray(where), axis, initial)


@replayed(static=("axis",))
def log_softmax(x, axis=-1, where=None):
  """``x - logsumexp(x, axis)``, computed stably.  Masked-out elements get ``-inf``."""
  # (integers to their inexact type as jnp's ufuncs promote them: int32 is float32 under x64)
  [x] = promote_args_inexact("log_softmax", _arr("log_softmax", x))
  if isinstance(axis, list):
    axis = tuple(axis)
  x_max = jnp.max(x, axis, where=where, initial=-np.inf, keepdims=True)
  x_safe = x if where is None else jnp.where(where, x, -np.inf)
  shifted = x_safe - lax.stop_gradient(x_max)
  shifted_lse = jnp.log(jnp.sum(jnp.exp(shifted), axis, where=where, keepdims=True))
  result = shifted - shifted_lse
  if where is not None:
    return jnp.where(where, result, -np.inf)
  return result


@replayed(static=("axis", "epsilon", "algorithm"))
def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *,
                algorithm="fast"):
  """``(x - mean) / sqrt(variance + epsilon)`` with the mean and variance over ``axis``
  (computed when not given).  ``algorithm``: 'fast' computes the variance as ``mean(x**2) -
  mean(x)**2`` clipped at 0 (one pass, but it cancels catastrophically when the mean is large
  against the spread); 'stable' as ``mean((x - mean)**2)`` (two passes)."""
  if algorithm not in ("fast", "stable"):
    raise ValueError(f"Unknown algorithm {algorithm!r}. Expected 'fast' or 'stable'.")
  x = _arr("standardize", x)
  if isinstance(axis, list):
    axis = tuple(axis)
  if mean is None:
    mean = jnp.mean(x, axis, keepdims=True, where=where)
  if variance is None:
    if algorithm == "stable":
      variance = jnp.mean(jnp.square(jnp.subtract(x, mean)), axis, keepdims=True, where=where)
    else:
      variance = jnp.mean(jnp.square(x), axis, keepdims=True, where=where) - jnp.square(mean)
      variance = jnp.clip(variance, 0)
  return jnp.subtract(x, mean) * lax.rsqrt(variance + epsilon)


@replayed(static=("num_classes", "dtype", "axis"))
def one_hot(x, num_classes: int, *, dtype=None, axis: int = -1):
  """One-hot encode the integers ``x`` (an array or a nested sequence) along a new axis
  ``axis`` of size ``num_classes``; indices outside ``[0, num_classes)`` encode as all zeros.
  Non-integer ``x`` is deprecated (a DeprecationWarning, as JAX's), compared as it is."""
  if isinstance(num_classes, core.Tracer) and num_classes.to_concrete_value() is None:
    raise errors.ConcretizationTypeError(
        num_classes, "The error arose in jax.nn.one_hot argument `num_classes`.")
  try:
    num_classes = operator.index(num_classes)
  except TypeError:
    raise TypeError("one_hot: num_classes must be a concrete integer (it is the size of "
                    f"the new axis), got {num_classes!r}") from None
  x = jnp.asarray(x)
  if not dtypes.issubdtype(x.dtype, np.integer):
    warnings.warn(f"jax.nn.one_hot input should be integer-typed; got dtype={x.dtype.name}",
                  DeprecationWarning, stacklevel=2)
  dt = dtypes.default_float_dtype() if dtype is None else dtypes.check_user_dtype(
      dtype, "one_hot")
  out_axis = operator.index(axis)
  if not -(x.ndim + 1) <= out_axis < x.ndim + 1:
    raise ValueError(f"one_hot: axis {axis} is out of bounds for an output of rank "
                     f"{x.ndim + 1}")
  out_axis %= x.ndim + 1
  lhs = lax.expand_dims(x, (out_axis,))
  rhs_shape = [1] * x.ndim
  rhs_shape.insert(out_axis, num_classes)
  rhs = lax.broadcasted_iota(x.dtype, tuple(rhs_shape), out_axis)
  return (lhs == rhs).astype(dt)


from ourjax.nn._attention import dot_product_attention  # noqa: E402
