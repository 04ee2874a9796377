"""Short-time Fourier analysis for ``ourjax.scipy.signal``: ``stft``, ``csd`` and ``welch``
(scipy's definitions, as ``jax.scipy.signal`` has them): the signal is cut into windowed,
overlapping segments (optionally extended at the boundaries and padded to whole segments), each
segment's FFT is taken, and the results are scaled (stft: by the window's sum; csd/welch: to a
power spectral density or a power spectrum, averaged over the segments)."""
from __future__ import annotations

import numpy as np

__all__ = ["stft", "istft", "csd", "welch"]


def _jnp():
  import ourjax.numpy as jnp
  return jnp


def _window(window, nperseg, dtype):
  """The periodic window of length nperseg (scipy.signal.get_window with fftbins=True)."""
  jnp = _jnp()
  if not isinstance(window, str) and not (isinstance(window, tuple)):
    win = jnp.asarray(window)
    if win.ndim != 1 or win.shape[0] != nperseg:
      raise ValueError("window must be 1-D and of length nperseg")
    return win.astype(dtype)
  name = window[0] if isinstance(window, tuple) else window
  n = np.arange(nperseg)
  ang = 2 * np.pi * n / nperseg
  if name in ("hann", "hanning"):
    w = 0.5 - 0.5 * np.cos(ang)
  elif name in ("hamming", "hamm"):
    w = 0.54 - 0.46 * np.cos(ang)
  elif name in ("blackman", "black"):
    w = 0.42 - 0.5 * np.cos(ang) + 0.08 * np.cos(2 * ang)
  elif name in ("boxcar", "box", "ones", "rect", "rectangular"):
    w = np.ones(nperseg)
  elif name in ("bartlett", "triang"):
    w = 1 - np.abs(2 * n / nperseg - 1) if name == "bartlett" else \
        1 - np.abs((n - (nperseg - 1) / 2) / ((nperseg + 1) / 2 if nperseg % 2 else nperseg / 2))
  else:
    raise ValueError(f"window {window!r} is not supported (hann, hamming, blackman, boxcar, "
                     "bartlett, triang, or an array of length nperseg)")
  return jnp.asarray(w.astype(np.dtype(dtype)))


def _extend(x, n, kind):
  jnp = _jnp()
  if kind == "zeros":
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(n, n)])
  if kind == "constant":
    return jnp.concatenate([jnp.repeat(x[..., :1], n, -1), x,
                            jnp.repeat(x[..., -1:], n, -1)], -1)
  if kind == "even":
    return jnp.concatenate([jnp.flip(x[..., 1:n + 1], -1), x, jnp.flip(x[..., -n - 1:-1], -1)],
                           -1)
  if kind == "odd":
    left = 2 * x[..., :1] - jnp.flip(x[..., 1:n + 1], -1)
    right = 2 * x[..., -1:] - jnp.flip(x[..., -n - 1:-1], -1)
    return jnp.concatenate([left, x, right], -1)
  raise ValueError(f"Unknown boundary option '{kind}', must be one of: ['even', 'odd', "
                   "'constant', 'zeros', None]")


def _detrend(seg, kind):
  jnp = _jnp()
  if kind is False or kind is None:
    return seg
  if callable(kind):
    return kind(seg)
  if kind == "constant":
    return seg - jnp.mean(seg, axis=-1, keepdims=True)
  if kind == "linear":
    from ourjax.scipy.signal import detrend
    return detrend(seg, axis=-1, type="linear")
  raise ValueError(f"Unknown detrend type {kind!r}")


def _spectral(x, y, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling,
              axis, mode, boundary, padded):
  jnp = _jnp()
  from ourjax.numpy import _util
  same = y is None
  if same:
    x, = _util.promote_dtypes_inexact(jnp.asarray(x))
    y = x
  else:
    x, y = _util.promote_dtypes_inexact(jnp.asarray(x), jnp.asarray(y))
  if scaling not in ("density", "spectrum"):
    raise ValueError(f"Unknown scaling: {scaling!r}")
  x = jnp.moveaxis(x, axis, -1)
  y = jnp.moveaxis(y, axis, -1) if not same else x
  if x.shape[-1] == 0:
    raise ValueError("input of zero length")
  nperseg = int(nperseg)
  if nperseg < 1:
    raise ValueError("nperseg must be a positive integer")
  nfft = nperseg if nfft is None else int(nfft)
  if nfft < nperseg:
    raise ValueError("nfft must be greater than or equal to nperseg.")
  noverlap = nperseg // 2 if noverlap is None else int(noverlap)
  if noverlap >= nperseg:
    raise ValueError("noverlap must be less than nperseg.")
  nstep = nperseg - noverlap
  if boundary is not None:
    x = _extend(x, nperseg // 2, boundary)
    y = _extend(y, nperseg // 2, boundary) if not same else x
  if padded:
    nadd = (-(x.shape[-1] - nperseg) % nstep) % nperseg
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nadd)])
    y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, nadd)]) if not same else x
  length = x.shape[-1]
  real_dtype = jnp.finfo(x.dtype).dtype
  win = _window(window, nperseg, real_dtype)
  if scaling == "density":
    scale = 1.0 / (fs * jnp.sum(win * win))
  else:
    scale = 1.0 / jnp.sum(win) ** 2
  if mode == "stft":
    scale = jnp.sqrt(scale)
  complex_input = jnp.iscomplexobj(x) or jnp.iscomplexobj(y)
  onesided = return_onesided and not complex_input
  nseg = (length - nperseg) // nstep + 1
  idx = np.arange(nseg)[:, None] * nstep + np.arange(nperseg)[None, :]

  def spectrum(v):
    seg = _detrend(v[..., idx], detrend) * win
    return jnp.fft.rfft(seg, n=nfft) if onesided else jnp.fft.fft(seg, n=nfft)

  rx = spectrum(x)
  if mode == "stft":
    result = rx * scale.astype(real_dtype)
  else:
    ry = rx if same else spectrum(y)
    result = jnp.conj(rx) * ry * scale.astype(real_dtype)
    if onesided:
      factor = np.full(result.shape[-1], 2.0)
      factor[0] = 1.0
      if nfft % 2 == 0:
        factor[-1] = 1.0
      result = result * jnp.asarray(factor.astype(real_dtype))
  freqs = (np.fft.rfftfreq(nfft, 1 / fs) if onesided else np.fft.fftfreq(nfft, 1 / fs))
  time = np.arange(nperseg / 2, length - nperseg / 2 + 1, nstep) / fs
  if boundary is not None:
    time = time - (nperseg / 2) / fs
  if same and mode != "stft":
    result = jnp.real(result)
  result = jnp.swapaxes(result, -1, -2)                      # (..., freq, segment)
  out_axis = axis if axis >= 0 else axis - 1
  result = jnp.moveaxis(result, -2, out_axis) if out_axis != -2 else result
  return (jnp.asarray(freqs.astype(real_dtype)), jnp.asarray(time.astype(real_dtype)), result)


def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False,
         return_onesided=True, boundary="zeros", padded=True, axis=-1):
  """The short-time Fourier transform: ``(frequencies, segment times, Zxx)``."""
  return _spectral(x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided,
                   "spectrum", axis, "stft", boundary, padded)


def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
        detrend="constant", return_onesided=True, scaling="density", axis=-1, average="mean"):
  """The cross power spectral density of ``x`` and ``y`` by Welch's method:
  ``(frequencies, Pxy)`` (``y=None``: of ``x`` with itself)."""
  jnp = _jnp()
  n = jnp.shape(x)[axis]
  if nperseg is None:
    nperseg = n                   # (JAX 0.10.2: one segment of the whole signal)
  elif nperseg > n:
    nperseg = n
  freqs, _, Pxy = _spectral(x, y, fs, window, nperseg, noverlap, nfft, detrend,
                            return_onesided, scaling, axis, "psd", None, False)
  if Pxy.ndim >= 2 and Pxy.size > 0:
    if Pxy.shape[-1] > 1:
      if average == "median":
        k = Pxy.shape[-1]
        ii = 2 * np.arange(1.0, (k - 1) // 2 + 1)
        bias = 1 + np.sum(1.0 / (ii + 1) - 1.0 / ii)
        if jnp.iscomplexobj(Pxy):
          Pxy = (jnp.median(jnp.real(Pxy), axis=-1) + 1j * jnp.median(jnp.imag(Pxy), axis=-1))
        else:
          Pxy = jnp.median(Pxy, axis=-1)
        Pxy = Pxy / bias
      elif average == "mean":
        Pxy = Pxy.mean(axis=-1)
      else:
        raise ValueError(f"average must be 'median' or 'mean', got {average}")
    else:
      Pxy = jnp.reshape(Pxy, Pxy.shape[:-1])
  return freqs, Pxy


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          detrend="constant", return_onesided=True, scaling="density", axis=-1,
          average="mean"):
  """The power spectral density by Welch's method: ``(frequencies, Pxx)``."""
  freqs, Pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                   nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                   scaling=scaling, axis=axis, average=average)
  return freqs, _jnp().real(Pxx)


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          input_onesided=True, boundary=True, time_axis=-1, freq_axis=-2):
  """The inverse of ``stft`` by weighted overlap-add: ``(times, x)``."""
  jnp = _jnp()
  Zxx = jnp.asarray(Zxx)
  if Zxx.ndim < 2:
    raise ValueError("Input stft must be at least 2d!")
  time_axis, freq_axis = time_axis % Zxx.ndim, freq_axis % Zxx.ndim
  if time_axis == freq_axis:
    raise ValueError("Must specify differing time and frequency axes!")
  nseg = Zxx.shape[time_axis]
  n_default = 2 * (Zxx.shape[freq_axis] - 1) if input_onesided else Zxx.shape[freq_axis]
  nperseg = n_default if nperseg is None else int(nperseg)
  if nperseg < 1:
    raise ValueError("nperseg must be a positive integer")
  if nfft is None:
    nfft = nperseg if (input_onesided and nperseg == n_default + 1) else n_default
  elif nfft < nperseg:
    raise ValueError("nfft must be greater than or equal to nperseg.")
  noverlap = nperseg // 2 if noverlap is None else int(noverlap)
  if noverlap >= nperseg:
    raise ValueError("noverlap must be less than nperseg.")
  nstep = nperseg - noverlap
  # (..., time, freq)
  Z = jnp.moveaxis(Zxx, (time_axis, freq_axis), (-2, -1))
  frames = (jnp.fft.irfft(Z, n=nfft, axis=-1) if input_onesided
            else jnp.fft.ifft(Z, n=nfft, axis=-1))[..., :nperseg]
  real_dtype = jnp.finfo(frames.dtype).dtype
  win = _window(window, nperseg, real_dtype)
  frames = frames * jnp.sum(win) * win
  out_len = nperseg + (nseg - 1) * nstep
  idx = (np.arange(nseg)[:, None] * nstep + np.arange(nperseg)[None, :]).ravel()
  x = jnp.zeros(frames.shape[:-2] + (out_len,), frames.dtype)
  x = x.at[..., idx].add(frames.reshape(frames.shape[:-2] + (-1,)))
  w = np.asarray(win, np.float64)
  norm = np.zeros(out_len)
  np.add.at(norm, idx, np.tile(w * w, nseg))
  if boundary:
    cut = nperseg // 2
    x = x[..., cut:out_len - cut]
    norm = norm[cut:out_len - cut]
  x = x / jnp.asarray(np.where(norm > 1e-10, norm, 1.0).astype(real_dtype))
  if input_onesided:
    x = jnp.real(x)
  # (scipy's and JAX's times: the length of x's first axis, which for a batch is the batch)
  times = np.arange(x.shape[0]) / float(fs)
  return jnp.asarray(times.astype(real_dtype)), x
