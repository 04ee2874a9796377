"""Index tricks: ``mgrid`` and ``ogrid`` (dense and open mesh grids written as slices), and
``index_exp``/``s_`` (NumPy's own objects, as JAX re-exports them).

A slice ``start:stop:step`` is ``arange(start, stop, step)``; a complex step ``n * 1j`` asks for
``n`` points from ``start`` to ``stop`` inclusive (``linspace``).  Values are integers when
every bound and step is, else floats (the default types).  The slice bounds must be concrete.
"""
from __future__ import annotations

import numpy as np

from ourjax import core

index_exp = np.index_exp
s_ = np.s_


def _static(v, what, name):
  if v is None or isinstance(v, (int, float, complex, np.number)):
    return v
  return core.concrete_or_error(lambda x: np.asarray(x).item(), v,
                                f"slice {what} of jnp.{name}")


def _range(s: slice, name: str):
  """The 1-D array one slice of an index grid stands for."""
  from ourjax.numpy._creation import arange, linspace
  start = _static(s.start, "start", name)
  stop = _static(s.stop, "stop", name)
  step = _static(s.step, "step", name)
  start = 0 if start is None else start
  stop = 0 if stop is None else stop        # (NumPy's: mgrid[:] is empty)
  step = 1 if step is None else step
  if isinstance(step, complex) or np.iscomplexobj(step):
    return linspace(start, stop, int(abs(step)), endpoint=True)
  return arange(start, stop, step)


def _as_slices(key):
  if isinstance(key, slice):
    return [key], False
  if isinstance(key, tuple):
    if not all(isinstance(k, slice) for k in key):
      raise TypeError("mgrid/ogrid take slices only")
    return list(key), True
  raise TypeError(f"mgrid/ogrid take slices only, got {key!r}")


def _common(arrays):
  from ourjax.numpy._util import promote_dtypes
  return promote_dtypes(*arrays) if len(arrays) > 1 else list(arrays)


class _Mgrid:
  """``mgrid[s0, s1, ...]``: the dense grid, an array of shape ``(n, len0, len1, ...)``
  (``mgrid[s]`` alone is the 1-D range)."""

  def __getitem__(self, key):
    from ourjax.numpy._creation import array
    from ourjax.numpy._creation import meshgrid
    from ourjax.numpy._shape import stack
    slices, many = _as_slices(key)
    if not slices:
      return array([], dtype=int)
    ranges = _common([_range(s, "mgrid") for s in slices])
    if not many:
      return ranges[0]
    return stack(meshgrid(*ranges, indexing="ij"), axis=0)


class _Ogrid:
  """``ogrid[s0, s1, ...]``: the open grid, a list of arrays that broadcast against each other
  (the k-th has its range along axis k); ``ogrid[s]`` alone is the 1-D range."""

  def __getitem__(self, key):
    from ourjax.numpy._creation import array
    from ourjax import lax
    slices, many = _as_slices(key)
    if not slices:
      return array([], dtype=int)
    ranges = _common([_range(s, "ogrid") for s in slices])
    if not many:
      return ranges[0]
    n = len(ranges)
    out = []
    for k, r in enumerate(ranges):
      shape = [1] * n
      shape[k] = r.shape[0]
      out.append(lax.reshape(r, tuple(shape)))
    return out


mgrid = _Mgrid()
ogrid = _Ogrid()
