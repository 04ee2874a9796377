"""``lax.fft``: discrete Fourier transforms over the innermost dimensions, one primitive
(``fft_p``, parameters ``fft_type`` and ``fft_lengths``) followed by all of its rules.

The four types are XLA's: FFT and IFFT complex to complex (IFFT scaled by 1/n), RFFT real to
complex (the last transformed dimension keeps ``n // 2 + 1`` values, the others are Hermitian
redundant), IRFFT complex to real (reads those ``n // 2 + 1`` values).  Results have the input's
precision: complex64 from float32/complex64 (and from integers, bool and narrow floats, which
``lax.fft`` converts first, as JAX's does), complex128 from 64-bit inputs.

The transform is linear, so its JVP is itself.  Transposes, as JAX's: FFT and IFFT are symmetric
matrices, their own transposes.  RFFT maps reals to complex numbers, and (JAX's convention for
such maps) its transpose takes the real part of the complex transpose, which is an IRFFT of the
conjugated cotangent scaled by ``n`` with the values that stand for two conjugate frequencies
halved.  IRFFT's transpose is the RFFT of the cotangent scaled by ``1/n`` and doubled on those
values, conjugated.

The HLO ``fft`` op runs on the reference backend (NumPy's pocketfft in the input's precision);
the native backends, which have no complex numbers, hand modules with it to the reference.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from ourjax import dtypes
from ourjax.core import Primitive, ShapedArray, get_aval
from ourjax.interpreters import ad, batching


class FftType(enum.IntEnum):
  """Which transform ``lax.fft`` computes."""
  FFT = 0     #: forward, complex to complex
  IFFT = 1    #: inverse, complex to complex
  RFFT = 2    #: forward, real to complex
  IRFFT = 3   #: inverse, complex to real


def _fft_type(fft_type) -> FftType:
  if isinstance(fft_type, FftType):
    return fft_type
  if isinstance(fft_type, str):
    for t in FftType:
      if fft_type in (t.name, t.name.lower()):
        return t
    raise ValueError(f"Unknown FFT type '{fft_type}'")
  raise TypeError(f"Unknown FFT type value '{fft_type}'")


def fft(x, fft_type: FftType | str, fft_lengths):
  """The ``fft_type`` transform of ``x`` over its last ``len(fft_lengths)`` dimensions."""
  from ourjax.lax.elementwise import convert_element_type
  typ = _fft_type(fft_type)
  dt = get_aval(x).dtype
  if typ == FftType.RFFT:
    if dtypes.is_complex(dt):
      raise ValueError("only real valued inputs supported for rfft")
    x = convert_element_type(x, dtypes.to_inexact_dtype(dt))
  else:
    x = convert_element_type(x, dtypes.to_complex_dtype(dt))
  fft_lengths = tuple(int(n) for n in fft_lengths)
  if not fft_lengths:   # (XLA has no rank-0 transform)
    return x
  return fft_p.bind(x, fft_type=typ, fft_lengths=fft_lengths)


def _complex_of(dtype):
  return np.dtype(np.complex128 if np.dtype(dtype) == np.float64 else np.complex64)


def _real_of(dtype):
  return np.dtype(np.float64 if np.dtype(dtype) == np.complex128 else np.float32)


def _fft_abstract_eval(x, fft_type, fft_lengths):
  k = len(fft_lengths)
  if k > x.ndim:
    raise ValueError(f"FFT input shape {x.shape} must have at least as many input dimensions "
                     f"as fft_lengths {fft_lengths}.")
  inner = x.shape[x.ndim - k:]
  if fft_type == FftType.RFFT:
    if x.dtype not in (np.float32, np.float64):
      raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
    if inner != fft_lengths:
      raise ValueError(f"RFFT input shape {x.shape} minor dimensions must be equal to "
                       f"fft_lengths {fft_lengths}")
    shape = x.shape[:x.ndim - k] + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
    return ShapedArray(shape, _complex_of(x.dtype))
  if not dtypes.is_complex(x.dtype):
    raise ValueError(f"{fft_type.name} input must be complex64 or complex128, got {x.dtype}")
  if fft_type == FftType.IRFFT:
    if inner[:-1] != fft_lengths[:-1]:
      raise ValueError(f"IRFFT input shape {x.shape} minor dimensions must be equal to all "
                       f"except the last fft_length, got fft_lengths={fft_lengths}")
    return ShapedArray(x.shape[:x.ndim - k] + fft_lengths, _real_of(x.dtype))
  if inner != fft_lengths:
    raise ValueError(f"FFT input shape {x.shape} minor dimensions must be equal to fft_lengths "
                     f"{fft_lengths}")
  return ShapedArray(x.shape, x.dtype)


def _fft_impl(x, fft_type, fft_lengths):
  from ourjax.backends import reference_ops
  return reference_ops.fft(x, fft_type=fft_type.name, fft_lengths=fft_lengths)


fft_p = Primitive("fft")
fft_p.def_abstract_eval(_fft_abstract_eval)
fft_p.def_impl(_fft_impl)


def _hermitian_weights(shape, n, dtype, scale=1.0):
  """Along the last axis: 1 for the values that stand for one frequency (zero, and n/2 when n
  is even), 2 for the others, which also stand for their conjugates; times ``scale``, as a
  constant broadcast to ``shape``."""
  from ourjax.lax.structural import broadcast_in_dim
  m = shape[-1]
  w = np.full((m,), 2.0)
  w[0] = 1.0
  if n % 2 == 0 and m > 1:
    w[-1] = 1.0
  return broadcast_in_dim((w * scale).astype(dtype), shape, (len(shape) - 1,))


def _fft_transpose(ct, x, fft_type, fft_lengths):
  from ourjax.lax import elementwise as ew
  n = math.prod(fft_lengths)
  if fft_type == FftType.RFFT:
    aval = get_aval(ct)
    w = _hermitian_weights(aval.shape, fft_lengths[-1], aval.dtype)
    out = fft(ew.div(ew.conj(ct), w), FftType.IRFFT, fft_lengths)
    return [ew.mul(out, np.array(n, _real_of(aval.dtype)))]
  if fft_type == FftType.IRFFT:
    y = fft(ct, FftType.RFFT, fft_lengths)
    aval = get_aval(y)
    w = _hermitian_weights(aval.shape, fft_lengths[-1], aval.dtype, 1.0 / n if n else 1.0)
    return [ew.conj(ew.mul(y, w))]
  return [fft(ct, fft_type, fft_lengths)]


ad.deflinear2(fft_p, _fft_transpose)


def _fft_batch(vals, dims, fft_type, fft_lengths):
  (x,), (d,) = vals, dims
  return fft_p.bind(batching.moveaxis(x, d, 0), fft_type=fft_type, fft_lengths=fft_lengths), 0


batching.batch_rules[fft_p] = _fft_batch


def _register_lowering():
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(fft_p)
  def _lower(ctx, avals_in, avals_out, x, fft_type, fft_lengths):
    return ctx.builder.fft(x, fft_type.name, fft_lengths)


_register_lowering()
