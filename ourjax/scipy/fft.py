"""``ourjax.scipy.fft``: the type-2 discrete cosine transform and its inverse (``dct``,
``idct``, ``dctn``, ``idctn``), as ``jax.scipy.fft`` has them (``norm``: None/'backward' or
'ortho'; other types raise NotImplementedError, as JAX).  Each transform is a product with the
(n x n) cosine matrix along the axis, computed in float64 and applied at full precision."""
from __future__ import annotations

import numpy as np

from ourjax import lax

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check(type, norm, fname):
  if type != 2:
    raise NotImplementedError("Only DCT type 2 is implemented.")
  if norm is not None and norm not in ("backward", "ortho"):
    raise ValueError(f"jax.scipy.fft.{fname}: norm={norm!r} is not implemented")


def _matrix(n, norm, inverse):
  k = np.arange(n)[:, None]
  j = np.arange(n)[None, :]
  M = 2 * np.cos(np.pi * k * (2 * j + 1) / (2 * n))          # DCT-II, scipy's scaling
  if norm == "ortho":
    M = M * np.where(k == 0, np.sqrt(1 / (4 * n)), np.sqrt(1 / (2 * n)))
    return M.T if inverse else M
  return np.linalg.inv(M) if inverse else M


def _resize(x, n, axis):
  import ourjax.numpy as jnp
  size = x.shape[axis]
  if n is None or n == size:
    return x
  if n < size:
    return lax.slice_in_dim(x, 0, n, axis=axis)
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, n - size)
  return jnp.pad(x, pad)


def _apply(x, n, axis, norm, inverse):
  import ourjax.numpy as jnp
  from ourjax.numpy import _util
  x, = _util.promote_dtypes_inexact(jnp.asarray(x))
  axis = axis % x.ndim
  x = _resize(x, n, axis)
  size = x.shape[axis]
  M = jnp.asarray(_matrix(size, norm, inverse).astype(jnp.finfo(x.dtype).dtype))
  out = jnp.tensordot(jnp.moveaxis(x, axis, -1), M.T, axes=1,
                      precision=lax.Precision.HIGHEST)
  return jnp.moveaxis(out, -1, axis)


def dct(x, type=2, n=None, axis=-1, norm=None):
  """The type-2 DCT of ``x`` along ``axis`` (zero-padded or truncated to ``n``)."""
  _check(type, norm, "dct")
  return _apply(x, n, axis, norm, inverse=False)


def idct(x, type=2, n=None, axis=-1, norm=None):
  """The inverse of ``dct`` along ``axis``."""
  _check(type, norm, "idct")
  return _apply(x, n, axis, norm, inverse=True)


def _axes_sizes(x, s, axes):
  import ourjax.numpy as jnp
  nd = jnp.ndim(x)
  if axes is None:
    axes = tuple(range(nd)) if s is None else tuple(range(nd - len(s), nd))
  if s is None:
    s = [None] * len(axes)
  if len(s) != len(axes):
    raise ValueError("Shape and axes have different lengths.")
  return axes, s


def dctn(x, type=2, s=None, axes=None, norm=None):
  """The type-2 DCT over several axes (all by default), each resized to ``s``."""
  _check(type, norm, "dctn")
  axes, s = _axes_sizes(x, s, axes)
  for ax, n in zip(axes, s):
    x = _apply(x, n, ax, norm, inverse=False)
  return x


def idctn(x, type=2, s=None, axes=None, norm=None):
  """The inverse of ``dctn``."""
  _check(type, norm, "idctn")
  axes, s = _axes_sizes(x, s, axes)
  for ax, n in zip(axes, s):
    x = _apply(x, n, ax, norm, inverse=True)
  return x
