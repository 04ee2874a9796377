"""``ourjax.scipy.signal``: N-dimensional convolution and correlation (direct, through
``lax.conv_general_dilated``, or by FFT), the 2-D variants, ``detrend``, and ``stft``/``csd``/``welch`` (``_spectral``), as
``jax.scipy.signal`` has them."""
from __future__ import annotations

import ourjax.numpy as jnp
from ourjax import lax

__all__ = ["convolve", "correlate", "convolve2d", "correlate2d", "fftconvolve", "detrend", "stft", "istft",
           "csd", "welch"]

_MODES = ("full", "same", "valid")


def _check_mode(mode, fname):
  if mode not in _MODES:
    raise ValueError(f"{fname}: mode must be one of {list(_MODES)}; got {mode!r}")


def _valid_swap(s1, s2, fname):
  """Valid mode needs one operand at least as large as the other in every dimension; the
  result is the same either way round for a convolution, so the larger goes first."""
  if all(a >= b for a, b in zip(s1, s2)):
    return False
  if all(a <= b for a, b in zip(s1, s2)):
    return True
  raise ValueError(f"{fname}: for 'valid' mode, one input must be at least as large as the "
                   f"other in every dimension; got shapes {tuple(s1)} and {tuple(s2)}")


def _crop(full, s1, s2, mode, axes):
  """Slice the full convolution (sizes s1 + s2 - 1 on ``axes``) to ``mode``."""
  if mode == "full":
    return full
  index = [slice(None)] * full.ndim
  for ax, n1, n2 in zip(axes, s1, s2):
    if mode == "same":            # centred, the size of in1
      start = (n2 - 1) // 2 if n1 >= n2 else (n1 + n2 - 1 - n1) // 2
      index[ax] = slice(start, start + n1)
    else:
      lo, hi = min(n1, n2), max(n1, n2)
      index[ax] = slice(lo - 1, hi)
  return full[tuple(index)]


def _convolve_direct(in1, in2, mode, precision):
  if in1.ndim == 0:
    return in1 * in2
  s1, s2 = in1.shape, in2.shape
  if mode == "valid" and _valid_swap(s1, s2, "convolve"):
    in1, in2 = in2, in1
    s1, s2 = s2, s1
  if any(n == 0 for n in (*s1, *s2)):
    raise ValueError("convolve: inputs must be non-empty")
  nd = in1.ndim
  spec = "".join("DHWXYZABCEFGIJKLMPQRSTUV"[i] for i in range(nd))
  dn = lax.conv_dimension_numbers((1, 1) + s1, (1, 1) + s2,
                                  ("NC" + spec, "OI" + spec, "NC" + spec))
  kernel = jnp.flip(in2)
  if jnp.iscomplexobj(in1) or jnp.iscomplexobj(in2):
    def conv(a, b):
      return lax.conv_general_dilated(a[None, None], b[None, None], (1,) * nd,
                                      [(n - 1, n - 1) for n in s2], dimension_numbers=dn,
                                      precision=precision)[0, 0]
    a_r, a_i, b_r, b_i = jnp.real(in1), jnp.imag(in1), jnp.real(kernel), jnp.imag(kernel)
    full = lax.complex(conv(a_r, b_r) - conv(a_i, b_i), conv(a_r, b_i) + conv(a_i, b_r))
  else:
    full = lax.conv_general_dilated(in1[None, None], kernel[None, None], (1,) * nd,
                                    [(n - 1, n - 1) for n in s2], dimension_numbers=dn,
                                    precision=precision)[0, 0]
  return _crop(full, s1, s2, mode, range(nd))


def convolve(in1, in2, mode="full", method="auto", precision=None):
  """The N-dimensional convolution of ``in1`` and ``in2`` (``mode``: full, same, valid;
  ``method``: auto/direct or fft)."""
  _check_mode(mode, "convolve")
  if method not in ("auto", "direct", "fft"):
    raise ValueError(f"convolve: got method={method!r}; expected 'auto', 'direct' or 'fft'")
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  if in1.ndim != in2.ndim:
    raise ValueError(f"convolve: in1 and in2 must have the same number of dimensions; got "
                     f"{in1.ndim} and {in2.ndim}")
  in1, in2 = _promote_inexact(in1, in2)
  if method == "fft":
    return fftconvolve(in1, in2, mode=mode)
  return _convolve_direct(in1, in2, mode, precision)


def _promote_inexact(*xs):
  from ourjax.numpy._util import promote_dtypes_inexact
  return list(promote_dtypes_inexact(*xs))


def correlate(in1, in2, mode="full", method="auto", precision=None):
  """The N-dimensional cross-correlation of ``in1`` and ``in2`` (scipy's definition)."""
  _check_mode(mode, "correlate")
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  return convolve(in1, jnp.flip(jnp.conj(in2)), mode, method=method, precision=precision)


def _check_2d(in1, in2, boundary, fillvalue, fname):
  if in1.ndim != 2 or in2.ndim != 2:
    raise ValueError(f"{fname}() only supports 2-dimensional inputs; got shapes {in1.shape} "
                     f"and {in2.shape}")
  if boundary != "fill":
    raise NotImplementedError(f"{fname}() only supports boundary='fill'")
  if fillvalue != 0:
    raise NotImplementedError(f"{fname}() only supports fillvalue=0")


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
  """The 2-D convolution (``boundary='fill'`` with ``fillvalue=0`` only)."""
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  _check_2d(in1, in2, boundary, fillvalue, "convolve2d")
  return convolve(in1, in2, mode, precision=precision)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
  """The 2-D cross-correlation (``boundary='fill'`` with ``fillvalue=0`` only)."""
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  _check_2d(in1, in2, boundary, fillvalue, "correlate2d")
  _check_mode(mode, "correlate2d")
  # scipy's correlate2d centres 'same' (and orders a swapped 'valid') as a convolution of the
  # flipped first operand, which differs from correlate's centring for even-sized kernels
  if mode == "same":
    return jnp.flip(convolve(jnp.flip(in1), jnp.conj(in2), mode, precision=precision))
  if mode == "valid":
    swap = all(a <= b for a, b in zip(in1.shape, in2.shape))
    if swap and in1.shape != in2.shape:
      return convolve(jnp.flip(in2), jnp.conj(in1), mode, precision=precision)
    return jnp.flip(convolve(jnp.flip(in1), jnp.conj(in2), mode, precision=precision))
  return correlate(in1, in2, mode, precision=precision)


def fftconvolve(in1, in2, mode="full", axes=None):
  """The convolution computed with FFTs over ``axes`` (default all); other axes broadcast."""
  _check_mode(mode, "fftconvolve")
  in1, in2 = _promote_inexact(jnp.asarray(in1), jnp.asarray(in2))
  if in1.ndim != in2.ndim:
    raise ValueError(f"fftconvolve: in1 and in2 must have the same number of dimensions; got "
                     f"{in1.ndim} and {in2.ndim}")
  if in1.size == 0 or in2.size == 0:
    return jnp.array([], dtype=in1.dtype)
  if in1.ndim == 0:
    return in1 * in2
  axes = tuple(range(in1.ndim)) if axes is None else tuple(
      a % in1.ndim for a in ((axes,) if isinstance(axes, int) else axes))
  for ax in range(in1.ndim):
    if ax not in axes and in1.shape[ax] != in2.shape[ax] and 1 not in (in1.shape[ax],
                                                                      in2.shape[ax]):
      raise ValueError(f"fftconvolve: incompatible shapes for in1 and in2: {in1.shape} and "
                       f"{in2.shape}")
  s1 = [in1.shape[a] for a in axes]
  s2 = [in2.shape[a] for a in axes]
  if mode == "valid" and _valid_swap(s1, s2, "fftconvolve"):
    in1, in2, s1, s2 = in2, in1, s2, s1
  fshape = [n1 + n2 - 1 for n1, n2 in zip(s1, s2)]
  if jnp.iscomplexobj(in1):
    full = jnp.fft.ifftn(jnp.fft.fftn(in1, fshape, axes) * jnp.fft.fftn(in2, fshape, axes),
                         axes=axes)
  else:
    full = jnp.fft.irfftn(jnp.fft.rfftn(in1, fshape, axes) * jnp.fft.rfftn(in2, fshape, axes),
                          fshape, axes)
  return _crop(full, s1, s2, mode, axes).astype(in1.dtype)


def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=None):
  """Remove the mean (``type='constant'``) or the least-squares line (``'linear'``, piecewise
  between the breakpoints ``bp``) along ``axis``."""
  if overwrite_data is not None:
    raise NotImplementedError("overwrite_data argument not implemented.")
  if type not in ("constant", "linear"):
    raise ValueError("Trend type must be 'linear' or 'constant'.")
  (data,) = _promote_inexact(jnp.asarray(data))
  if type == "constant":
    return data - data.mean(axis, keepdims=True)
  n = data.shape[axis]
  import numpy as np
  bps = np.sort(np.unique(np.r_[0, np.asarray(bp, dtype=int), n]))
  if np.any(bps > n):
    raise ValueError("Breakpoints must be non-negative and less than length of data along "
                     "given axis.")
  data = jnp.moveaxis(data, axis, 0)
  shape = data.shape
  flat = data.reshape(n, -1)
  pieces = []
  for lo, hi in zip(bps[:-1], bps[1:]):
    if hi <= lo:
      continue
    seg = flat[lo:hi]
    t = jnp.arange(1, hi - lo + 1, dtype=seg.dtype) / (hi - lo)
    A = jnp.stack([t, jnp.ones_like(t)], axis=1)
    coef, *_ = jnp.linalg.lstsq(A, seg)
    pieces.append(seg - A @ coef)
  out = jnp.concatenate(pieces, axis=0).reshape(shape)
  return jnp.moveaxis(out, 0, axis)


from ourjax.scipy._spectral import stft, istft, csd, welch  # noqa: E402,F401
