"""NumPy's file and interchange functions as ``jax.numpy`` has them: ``save``/``savez`` are
NumPy's own (they read the array's values), ``load`` returns ourjax arrays, ``from_dlpack``
takes any DLPack producer NumPy can read, and ``fromfile``/``fromiter`` are refused (as in JAX:
consuming a file or an iterator is a side effect)."""
from __future__ import annotations

import numpy as np

save = np.save
savez = np.savez

_IMPURE = ("jnp.{0}() is not implemented because it may be non-pure and thus unsafe for use with "
           "JIT and other JAX transformations. Consider using jnp.asarray(np.{0}(...)) instead, "
           "although care should be taken if np.{0} is used within a transformation because of "
           "its potential side-effect of consuming the {1}.")


def load(file, *args, **kwargs):
  """``np.load``, with an array result (not an ``.npz`` archive) returned as an ourjax Array.
  bfloat16 data, which NumPy saves as raw 2-byte void, comes back as bfloat16."""
  from ourjax.numpy._creation import asarray
  out = np.load(file, *args, **kwargs)
  if isinstance(out, np.ndarray):
    if out.dtype == np.dtype("V2"):
      import ml_dtypes
      out = out.view(ml_dtypes.bfloat16)
    try:
      return asarray(out)
    except (TypeError, ValueError):   # object or structured data: NumPy's array, as JAX
      return out
  return out


def fromfile(*args, **kwargs):
  raise NotImplementedError(_IMPURE.format("fromfile", "file object"))


def fromiter(*args, **kwargs):
  raise NotImplementedError(_IMPURE.format("fromiter", "iterable object"))


def from_dlpack(x, /, *, device=None, copy=None):
  """An Array with the data of ``x``, any object with ``__dlpack__`` and ``__dlpack_device__``
  (a NumPy array, a CPU torch tensor, ...): zero-copy unless ``copy=True`` (``ourjax.dlpack``)."""
  from ourjax.dlpack import from_dlpack as _from_dlpack
  return _from_dlpack(x, device=device, copy=copy)
