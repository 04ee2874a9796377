"""``ourjax.nn.initializers``: parameter initializers with JAX's signatures.

Each builder returns ``init(key, shape, dtype=None) -> Array``; ``zeros``/``ones`` are
initializers themselves.  ``variance_scaling`` is the common core: a distribution (truncated
normal, normal or uniform) scaled to variance ``scale / n`` with ``n`` the fan-in, fan-out, their
mean or their geometric mean.  The numbers equal JAX's for the same key (same samplers, same
order of operations).
"""
from __future__ import annotations

import math

import numpy as np

from ourjax import dtypes
from ourjax import numpy as jnp
from ourjax import random
from ourjax.config import internal_promotion

__all__ = [
    "Initializer", "zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
    "variance_scaling", "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal",
    "lecun_uniform", "lecun_normal", "he_uniform", "he_normal", "kaiming_uniform",
    "kaiming_normal", "orthogonal", "delta_orthogonal",
]


class Initializer:
  """The protocol: ``init(key, shape, dtype=None) -> Array`` (for type annotations)."""

  def __call__(self, key, shape, dtype=None):
    raise NotImplementedError


def _dtype(dtype):
  return dtypes.default_float_dtype() if dtype is None else dtypes.check_user_dtype(dtype)


def _shape(shape):
  if isinstance(shape, (int, np.integer)):
    return (int(shape),)
  return tuple(int(d) for d in shape)


def zeros(key, shape, dtype=None):
  """An array of zeros (the key is ignored)."""
  return jnp.zeros(_shape(shape), _dtype(dtype))


def ones(key, shape, dtype=None):
  """An array of ones (the key is ignored)."""
  return jnp.ones(_shape(shape), _dtype(dtype))


def constant(value, dtype=None):
  """An initializer filling arrays with ``value``."""
  def init(key, shape, dtype=dtype):
    return jnp.full(_shape(shape), value, dtype=_dtype(dtype))
  return init


def uniform(scale=1e-2, dtype=None):
  """Uniform in ``[0, scale)``."""
  def init(key, shape, dtype=dtype):
    dt = _dtype(dtype)
    return random.uniform(key, _shape(shape), dt) * jnp.array(scale, dt)
  return init


def normal(stddev=1e-2, dtype=None):
  """Normal with mean 0 and standard deviation ``stddev``."""
  def init(key, shape, dtype=dtype):
    dt = _dtype(dtype)
    return random.normal(key, _shape(shape), dt) * jnp.array(stddev, dt)
  return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
  """A standard normal truncated to ``(lower, upper)``, then scaled by ``stddev``."""
  def init(key, shape, dtype=dtype):
    dt = _dtype(dtype)
    return random.truncated_normal(key, lower, upper, _shape(shape), dt) * jnp.array(stddev, dt)
  return init


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
  """(fan_in, fan_out) of a weight shape: the in/out sizes times the receptive field (the
  product of the axes that are neither in, out nor batch)."""
  if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
    raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional "
                     "weights tensor with default in_axis. Must be at least 2D or specify "
                     "in_axis explicitly.")

  def size(axes):
    if isinstance(axes, int):
      return shape[axes]
    return math.prod(shape[i] for i in axes)

  in_size, out_size, batch_size = size(in_axis), size(out_axis), size(batch_axis)
  receptive_field = math.prod(shape) / in_size / out_size / batch_size
  return in_size * receptive_field, out_size * receptive_field


def variance_scaling(scale, mode: str, distribution: str, in_axis=-2, out_axis=-1,
                     batch_axis=(), dtype=None):
  """Samples with variance ``scale / n``, ``n`` chosen by ``mode`` ("fan_in", "fan_out",
  "fan_avg", "fan_geo_avg"); ``distribution`` is "truncated_normal" (cut at two standard
  deviations, rescaled to keep the variance), "normal" or "uniform"."""
  if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
    raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
  if distribution not in ("truncated_normal", "normal", "uniform"):
    raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

  def init(key, shape, dtype=dtype):
    shape = _shape(shape)
    dt = _dtype(dtype)
    fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
    denominator = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                   "fan_geo_avg": (fan_in * fan_out) ** 0.5}[mode]
    variance = jnp.array(scale / denominator, dtype=dt)
    if dtypes.issubdtype(dt, np.complexfloating):
      return _complex_variance_scaling(key, shape, dt, distribution, variance)
    if distribution == "truncated_normal":
      # .8796... is the standard deviation of a standard normal truncated to (-2, 2)
      stddev = jnp.sqrt(variance) / jnp.array(.87962566103423978, dt)
      return random.truncated_normal(key, -2, 2, shape, dt) * stddev
    if distribution == "normal":
      return random.normal(key, shape, dt) * jnp.sqrt(variance)
    return random.uniform(key, shape, dt, -1) * jnp.sqrt(3 * variance)

  return init


def _complex_polar(key, shape, dt, radius):
  """``radius(u) * exp(i theta)``: ``u`` uniform in [0, 1), the angle uniform in [0, 2 pi)."""
  real = np.finfo(dt).dtype
  key_r, key_theta = random.split(key)
  r = radius(random.uniform(key_r, shape, real))
  theta = jnp.array(2 * np.pi, real) * random.uniform(key_theta, shape, real)
  return (r * jnp.exp(jnp.array(1j, dt) * theta.astype(dt))).astype(dt)


@internal_promotion     # (a composition of jnp ops relying on promotion)
def _complex_variance_scaling(key, shape, dt, distribution, variance):
  """Complex samples with ``E|z|^2 = variance``: 'normal' is the circular complex normal,
  'uniform' is uniform on a disk (radius ``sqrt(2 u)`` before scaling), 'truncated_normal' is
  the circular complex normal cut at modulus 2 (the radius by the inverse of its CDF
  ``1 - exp(-r^2)``), scaled as JAX scales it (by ``1 / sqrt(1 - 5 exp(-4))``, which leaves
  the variance about 1.9% above ``variance``; the numbers equal JAX's)."""
  if distribution == "normal":
    return random.normal(key, shape, dt) * jnp.sqrt(variance)
  real = np.finfo(dt).dtype
  if distribution == "uniform":
    z = _complex_polar(key, shape, dt, lambda u: jnp.sqrt(jnp.array(2, real) * u))
    return z * jnp.sqrt(variance)
  cut = jnp.array(1 - math.exp(-4.0), real)        # P(|z| < 2) for a unit complex normal
  z = _complex_polar(key, shape, dt, lambda u: jnp.sqrt(-jnp.log1p(-cut * u)))
  return z * (jnp.sqrt(variance) / jnp.array(.95311164380491208, dt))


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """Glorot/Xavier uniform: ``variance_scaling(1, "fan_avg", "uniform")``."""
  return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """Glorot/Xavier normal: ``variance_scaling(1, "fan_avg", "truncated_normal")``."""
  return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                          dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """LeCun uniform: ``variance_scaling(1, "fan_in", "uniform")``."""
  return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """LeCun normal: ``variance_scaling(1, "fan_in", "truncated_normal")``."""
  return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                          dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """He/Kaiming uniform: ``variance_scaling(2, "fan_in", "uniform")``."""
  return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
  """He/Kaiming normal: ``variance_scaling(2, "fan_in", "truncated_normal")``."""
  return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                          dtype)


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def orthogonal(scale=1.0, column_axis: int = -1, dtype=None):
  """A (semi-)orthogonal matrix, reshaped so that ``column_axis`` holds the columns."""
  def init(key, shape, dtype=dtype):
    shape = _shape(shape)
    dt = _dtype(dtype)
    if len(shape) < 2:
      raise ValueError("orthogonal initializer requires at least a 2D shape")
    if any(d == 0 for d in shape):
      return jnp.zeros(shape, dtype=dt)
    n_cols = shape[column_axis]
    n_rows = math.prod(shape) // n_cols
    q = random.orthogonal(key, n_rows, (), dt, n_cols)
    rest = tuple(np.delete(np.array(shape), column_axis).tolist())
    q = jnp.reshape(q, rest + (n_cols,))
    q = jnp.moveaxis(q, -1, column_axis)
    return jnp.array(scale, dt) * q
  return init


def delta_orthogonal(scale=1.0, column_axis: int = -1, dtype=None):
  """For convolution kernels of shape ``spatial + (in, out)`` (1 to 3 spatial dims, ``in <=
  out``): zero except at the spatial centre (index ``(k - 1) // 2`` per axis), which holds an
  ``orthogonal(scale, column_axis)`` matrix, so the convolution preserves norms at init."""
  def init(key, shape, dtype=dtype):
    shape = _shape(shape)
    dt = _dtype(dtype)
    if len(shape) not in (3, 4, 5):
      raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
    if shape[-2] > shape[-1]:
      raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
    ortho = orthogonal(scale, column_axis, dt)(key, shape[-2:])
    centre = tuple((k - 1) // 2 for k in shape[:-2])
    return jnp.zeros(shape, dt).at[centre].set(ortho)
  return init
