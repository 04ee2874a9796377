"""``ourjax.numpy.fft``: NumPy's discrete Fourier transforms with JAX's semantics.

Every transform is one ``lax.fft`` over the innermost axes: the requested axes are moved to the
end (and back afterwards), cropped or zero-padded to ``s``/``n``, transformed, and scaled for
``norm`` ("backward", the default, scales the inverse transforms by 1/n; "ortho" both ways by
1/sqrt(n); "forward" the forward ones by 1/n).  Results are complex64 (float32 for the real
inverse transforms) unless the input is 64-bit with x64 enabled, as in JAX.  ``hfft`` and
``ihfft`` are ``irfft`` and ``rfft`` of the conjugate, as NumPy defines them.
"""
from __future__ import annotations

import operator

from ourjax import dtypes
from ourjax.lax.fft import FftType

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _norm_factor(s, func_name: str, norm: str, dtype):
  """What the transformed array is multiplied by for ``norm`` (a scalar of ``dtype``)."""
  jnp = _jnp()
  if norm == "backward":
    return jnp.array(1)
  n = jnp.prod(jnp.array(s, dtype=dtype))
  if norm == "ortho":
    return jnp.sqrt(n) if func_name.startswith("i") else 1 / jnp.sqrt(n)
  if norm == "forward":
    return n if func_name.startswith("i") else 1 / n
  raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')


def _fft_core(func_name: str, fft_type: FftType, a, s, axes, norm):
  from ourjax import lax
  from ourjax.numpy._util import check_arraylike
  jnp = _jnp()
  full_name = f"jax.numpy.fft.{func_name}"
  check_arraylike(full_name, a)
  arr = jnp.asarray(a)
  if s is not None:
    s = tuple(map(operator.index, s))
    if any(n <= 0 for n in s):
      raise ValueError("Shape should be positive.")
  if s is not None and axes is not None and len(s) != len(axes):
    raise ValueError("Shape and axes have different lengths.")
  orig_axes = axes
  if axes is None:
    axes = tuple(range(arr.ndim)) if s is None else tuple(range(arr.ndim - len(s), arr.ndim))
  axes = tuple(axes)
  if len(axes) != len(set(axes)):
    raise ValueError(f"{full_name} does not support repeated axes. Got axes {axes}.")
  if orig_axes is not None:   # the transformed axes go last
    axes = tuple(range(arr.ndim - len(axes), arr.ndim))
    arr = jnp.moveaxis(arr, orig_axes, axes)
  if s is not None:
    in_s = list(arr.shape)
    for axis, n in zip(axes, s):
      in_s[axis] = n
    if fft_type == FftType.IRFFT:
      in_s[-1] = in_s[-1] // 2 + 1
    arr = arr[tuple(slice(n) for n in in_s)]
    arr = jnp.pad(arr, [(0, n - m) for n, m in zip(in_s, arr.shape)])
  else:
    s = [arr.shape[axis] for axis in axes]
    if fft_type == FftType.IRFFT and axes:
      s[-1] = max(0, 2 * (arr.shape[axes[-1]] - 1))
  out = lax.fft(arr, fft_type, tuple(s))
  if norm is not None:
    out = out * _norm_factor(s, func_name, norm, out.dtype)
  if orig_axes is not None:
    out = jnp.moveaxis(out, axes, orig_axes)
  return out


def _axis_check_1d(func_name: str, axis):
  full_name = f"jax.numpy.fft.{func_name}"
  if isinstance(axis, (list, tuple)):
    raise ValueError(f"{full_name} does not support multiple axes. Please use {full_name}n. "
                     f"Got axis = {axis!r}.")


def _fft_core_1d(func_name, fft_type, a, n, axis, norm):
  _axis_check_1d(func_name, axis)
  return _fft_core(func_name, fft_type, a, None if n is None else [n],
                   None if axis is None else [axis], norm)


def _fft_core_2d(func_name, fft_type, a, s, axes, norm):
  if len(axes) != 2:
    raise ValueError(f"jax.numpy.fft.{func_name} only supports 2 axes. Got axes = {axes!r}.")
  return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft(a, n=None, axis: int = -1, norm=None):
  """One-dimensional discrete Fourier transform along ``axis`` (``numpy.fft.fft``)."""
  return _fft_core_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a, n=None, axis: int = -1, norm=None):
  """One-dimensional inverse discrete Fourier transform (``numpy.fft.ifft``)."""
  return _fft_core_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a, n=None, axis: int = -1, norm=None):
  """Transform of a real input: the ``n // 2 + 1`` non-negative frequencies."""
  return _fft_core_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a, n=None, axis: int = -1, norm=None):
  """Inverse of ``rfft``: ``n`` real values (default ``2 * (m - 1)``) from ``m`` frequencies."""
  return _fft_core_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a, n=None, axis: int = -1, norm=None):
  """Transform of a Hermitian-symmetric signal given by its first half: real output."""
  conj_a = _jnp().conj(a)
  _axis_check_1d("hfft", axis)
  nn = (conj_a.shape[axis] - 1) * 2 if n is None else n
  return _fft_core_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm) * nn


def ihfft(a, n=None, axis: int = -1, norm=None):
  """Inverse of ``hfft``: the first half of the Hermitian-symmetric spectrum of a real input."""
  _axis_check_1d("ihfft", axis)
  jnp = _jnp()
  arr = jnp.asarray(a)
  nn = arr.shape[axis] if n is None else n
  out = _fft_core_1d("ihfft", FftType.RFFT, arr, n, axis, norm)
  return jnp.conj(out) * (1 / nn)


def fft2(a, s=None, axes=(-2, -1), norm=None):
  return _fft_core_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
  return _fft_core_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
  return _fft_core_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
  return _fft_core_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a, s=None, axes=None, norm=None):
  """Discrete Fourier transform over ``axes`` (default: all, or the last ``len(s)``)."""
  return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
  return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
  return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
  return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


for _f in (fft2, ifft2, rfft2, irfft2, ifftn, rfftn, irfftn):
  _f.__doc__ = (f"``numpy.fft.{_f.__name__}``: the {'2-D ' if _f.__name__.endswith('2') else ''}"
                f"form of ``{_f.__name__.rstrip('2n')}`` (see ``fftn`` for ``s``, ``axes``).")
del _f


def _check_freq_args(name, n, d):
  if isinstance(n, (list, tuple)):
    raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. Got n = "
                     f"{list(n)}.")
  if isinstance(d, (list, tuple)):
    raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. Got "
                     f"d = {list(d)}.")


def fftfreq(n: int, d=1.0, *, dtype=None, device=None):
  """The sample frequencies of an ``n``-point transform with sample spacing ``d``:
  ``[0, 1, ..., (n-1)//2, -(n//2), ..., -1] / (d * n)``."""
  jnp = _jnp()
  _check_freq_args("fftfreq", n, d)
  dtype = dtype or dtypes.default_float_dtype()
  out_dtype = dtype
  dtype = dtypes.finfo(dtypes.to_inexact_dtype(dtype)).dtype
  i = jnp.arange(n, dtype=dtype)
  k = (i + n // 2) % n - n // 2
  return jnp.astype(k.astype(dtype) / jnp.array(d * n, dtype=dtype), out_dtype, device=device)


def rfftfreq(n: int, d=1.0, *, dtype=None, device=None):
  """The non-negative sample frequencies of an ``n``-point ``rfft``: ``[0, ..., n//2] / (d*n)``."""
  jnp = _jnp()
  _check_freq_args("rfftfreq", n, d)
  dtype = dtype or dtypes.default_float_dtype()
  k = jnp.arange(0, n // 2 + 1 if n % 2 == 0 else (n - 1) // 2 + 1, dtype=dtype)
  out = k / jnp.array(d * n, dtype=dtype)
  if device is not None:
    from ourjax._device_api import device_put
    out = device_put(out, device)
  return out


def _shifts(x, axes, sign):
  if axes is None:
    return tuple(range(x.ndim)), [sign * (n // 2) for n in x.shape]
  if isinstance(axes, int):
    return axes, sign * (x.shape[axes] // 2)
  return axes, [sign * (x.shape[ax] // 2) for ax in axes]


def fftshift(x, axes=None):
  """Roll the zero frequency to the middle of ``axes`` (default: all)."""
  from ourjax.numpy._util import check_arraylike
  check_arraylike("fftshift", x)
  jnp = _jnp()
  x = jnp.asarray(x)
  axes, shift = _shifts(x, axes, 1)
  return jnp.roll(x, shift, axes)


def ifftshift(x, axes=None):
  """The inverse of ``fftshift``."""
  from ourjax.numpy._util import check_arraylike
  check_arraylike("ifftshift", x)
  jnp = _jnp()
  x = jnp.asarray(x)
  axes, shift = _shifts(x, axes, -1)
  return jnp.roll(x, shift, axes)
