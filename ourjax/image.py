"""``ourjax.image``: image resampling, as ``jax.image``: ``resize`` and ``scale_and_translate``
with nearest, linear, cubic (Keys, a=-0.5; CUBIC_PYTORCH a=-0.75), Lanczos (radius 3 and 5)
and area kernels.

Every resampled dimension is a dense (input size x output size) weight matrix, contracted with
the image by ``einsum``: output sample ``j`` sits at input position
``(j + 0.5) / scale - translation / scale - 0.5``, its weights are the kernel at the distances
to the input samples (the kernel stretched by 1/scale when downsampling with ``antialias``),
normalised to sum to one, and zero for samples outside the input."""
from __future__ import annotations

import enum

import numpy as np

from ourjax import lax
import ourjax.numpy as jnp

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
  """Image resize methods (``from_string`` accepts JAX's names and aliases)."""
  NEAREST = 0
  LINEAR = 1
  LANCZOS3 = 2
  LANCZOS5 = 3
  CUBIC = 4
  CUBIC_PYTORCH = 5
  AREA = 6

  @staticmethod
  def from_string(s: str):
    names = {"nearest": ResizeMethod.NEAREST, "linear": ResizeMethod.LINEAR,
             "bilinear": ResizeMethod.LINEAR, "trilinear": ResizeMethod.LINEAR,
             "triangle": ResizeMethod.LINEAR, "lanczos3": ResizeMethod.LANCZOS3,
             "lanczos5": ResizeMethod.LANCZOS5, "cubic": ResizeMethod.CUBIC,
             "bicubic": ResizeMethod.CUBIC, "tricubic": ResizeMethod.CUBIC,
             "area": ResizeMethod.AREA}
    if s not in names:
      raise ValueError(f'Unknown resize method "{s}"')
    return names[s]


def _triangle(x):
  return jnp.maximum(0, 1 - jnp.abs(x))


def _keys_cubic(a):
  def kernel(x):
    x = jnp.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return jnp.where(x >= 2, 0.0, jnp.where(x >= 1, far, near))
  return kernel


def _lanczos(radius):
  def kernel(x):
    x = jnp.abs(x)
    y = radius * jnp.sin(np.pi * x) * jnp.sin(np.pi * x / radius)
    safe = jnp.where(x > 1e-3, x, 1.0)
    out = jnp.where(x > 1e-3, y / (np.pi ** 2 * safe ** 2), 1.0)
    return jnp.where(x > radius, 0.0, out)
  return kernel


_KERNELS = {
    ResizeMethod.LINEAR: _triangle,
    ResizeMethod.LANCZOS3: _lanczos(3.0),
    ResizeMethod.LANCZOS5: _lanczos(5.0),
    ResizeMethod.CUBIC: _keys_cubic(-0.5),
    ResizeMethod.CUBIC_PYTORCH: _keys_cubic(-0.75),
}


def _weight_matrix(in_size, out_size, scale, translation, method, antialias):
  """The (in_size, out_size) resampling weights of one dimension."""
  dtype = jnp.result_type(scale, translation)
  inv_scale = 1.0 / scale
  sample = ((jnp.arange(out_size, dtype=dtype) + 0.5) * inv_scale - translation * inv_scale
            - 0.5)
  pos = jnp.arange(in_size, dtype=dtype)[:, None]
  if method == ResizeMethod.CUBIC_PYTORCH:
    # PyTorch's bicubic (JAX 0.10.2 uses it without antialias; with antialias it is CUBIC):
    # the four taps around each sample, a=-0.75; taps within two samples of the edges are
    # clamped to the edge sample, farther ones dropped (as JAX: no inside-the-image mask)
    base = jnp.floor(sample)
    taps = base[None, :] + jnp.arange(-1, 3, dtype=dtype)[:, None]           # (4, out)
    tap_w = jnp.where((taps >= -2) & (taps <= in_size + 1),
                      _keys_cubic(-0.75)(sample[None, :] - taps), 0)
    idx = jnp.clip(taps, 0, in_size - 1)
    weights = jnp.sum(jnp.where(idx[:, None, :] == pos[None], tap_w[:, None, :], 0), axis=0)
  elif method == ResizeMethod.AREA:
    # the overlap of input pixel [i, i+1) with the output pixel's footprint
    lo = (sample + 0.5)[None, :] - 0.5 * inv_scale
    hi = lo + inv_scale
    weights = jnp.maximum(0, jnp.minimum(pos + 1, hi) - jnp.maximum(pos, lo))
  else:
    kernel_scale = jnp.maximum(inv_scale, 1.0) if antialias else 1.0
    weights = _KERNELS[method](jnp.abs(sample[None, :] - pos) / kernel_scale)
  total = jnp.sum(weights, axis=0, keepdims=True)
  weights = jnp.where(jnp.abs(total) > 1000.0 * float(np.finfo(np.float32).eps),
                      weights / jnp.where(total != 0, total, 1), 0)
  if method == ResizeMethod.CUBIC_PYTORCH:
    return weights
  inside = (sample >= -0.5) & (sample <= in_size - 0.5)
  return jnp.where(inside[None, :], weights, 0)


def _scale_and_translate(x, shape, spatial_dims, scale, translation, method, antialias,
                         precision):
  if not spatial_dims:
    return x
  letters = [chr(ord("a") + i) for i in range(x.ndim)]
  out_letters = list(letters)
  operands, specs = [x], ["".join(letters)]
  for i, d in enumerate(spatial_dims):
    new = chr(ord("A") + i)
    w = _weight_matrix(x.shape[d], shape[d], scale[i], translation[i], method, antialias)
    operands.append(w.astype(x.dtype))
    specs.append(letters[d] + new)
    out_letters[d] = new
  spec = ",".join(specs) + "->" + "".join(out_letters)
  return jnp.einsum(spec, *operands, precision=precision)


def _resize_nearest(x, shape):
  for d, (n_in, n_out) in enumerate(zip(x.shape, shape)):
    if n_in == n_out:
      continue
    offsets = (np.arange(n_out, dtype=np.float32) + 0.5) * np.float32(n_in / n_out)
    indices = np.minimum(np.floor(offsets).astype(np.int32), n_in - 1)
    x = jnp.take(x, jnp.asarray(indices), axis=d)
  return x


def _as_method(method, antialias):
  method = method if isinstance(method, ResizeMethod) else ResizeMethod.from_string(method)
  if method == ResizeMethod.CUBIC_PYTORCH and antialias:
    return ResizeMethod.CUBIC          # (as JAX 0.10.2)
  return method


def _check_shape(x, shape, fname):
  if len(shape) != x.ndim:
    raise ValueError(f"shape must have length equal to the number of dimensions of x;  "
                     f"{tuple(shape)} vs {x.shape}")


def resize(image, shape, method, antialias=True, precision=lax.Precision.HIGHEST):
  """Resize ``image`` to ``shape`` (one entry per dimension; the dimensions whose size changes
  are resampled) with ``method``: nearest, linear (bilinear, trilinear, triangle), cubic
  (bicubic, tricubic), lanczos3, lanczos5, area, or a ``ResizeMethod``.  With ``antialias``
  (default) downsampling widens the kernel.  Integer images give float results except with
  nearest, which keeps the dtype."""
  method = _as_method(method, antialias)
  image = jnp.asarray(image)
  shape = tuple(int(s) for s in shape)
  _check_shape(image, shape, "resize")
  if method == ResizeMethod.NEAREST:
    return _resize_nearest(image, shape)
  if not jnp.issubdtype(image.dtype, jnp.inexact):
    image = image.astype(jnp.result_type(image.dtype, jnp.float32))
  spatial_dims = tuple(i for i in range(len(shape)) if image.shape[i] != shape[i])
  scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in spatial_dims]
  return _scale_and_translate(image, shape, spatial_dims, scale, [0.0] * len(spatial_dims),
                              method, antialias, precision)


def scale_and_translate(image, shape, spatial_dims, scale, translation, method,
                        antialias=True, precision=lax.Precision.HIGHEST):
  """Resample ``image`` to ``shape`` along ``spatial_dims``: output position ``o`` samples input
  position ``(o + 0.5 - translation) / scale - 0.5`` (``scale`` and ``translation`` are arrays
  with one entry per spatial dimension, and may be traced)."""
  method = _as_method(method, antialias)
  if method == ResizeMethod.NEAREST:
    raise ValueError("Nearest neighbor resampling is not currently supported for "
                     "scale_and_translate.")
  image = jnp.asarray(image)
  shape = tuple(int(s) for s in shape)
  _check_shape(image, shape, "scale_and_translate")
  if not jnp.issubdtype(image.dtype, jnp.inexact):
    image = image.astype(jnp.result_type(image.dtype, jnp.float32))
  scale, translation = jnp.asarray(scale), jnp.asarray(translation)
  return _scale_and_translate(image, shape, tuple(spatial_dims),
                              [scale[i] for i in range(len(spatial_dims))],
                              [translation[i] for i in range(len(spatial_dims))], method,
                              antialias, precision)


