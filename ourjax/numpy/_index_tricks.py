"""Index tricks: ``mgrid`` and ``ogrid`` (dense and open mesh grids written as slices),
``r_`` and ``c_`` (concatenation written as indexing), and ``index_exp``/``s_`` (NumPy's own
objects, as JAX re-exports them).

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
  """The grids' common dtype, by standard promotion whatever jax_numpy_dtype_promotion says
  (as JAX's: a complex-step float range and an int range mix under strict promotion too)."""
  from ourjax.numpy._util import promote_dtypes, internal_promotion
  return internal_promotion(promote_dtypes)(*arrays) if len(arrays) > 1 else list(arrays)


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


class _AxisConcat:
  """``r_``/``c_``: the items of the index (arrays, scalars, slices standing for ranges as in
  ``mgrid``) concatenated along an axis.  A leading string directive sets
  ``"axis[,ndmin[,trans1d]]"``: each item with fewer than ``ndmin`` dimensions gets leading
  size-1 axes, then (unless ``trans1d`` is -1) its axes are rotated so that its last axis lands
  at position ``trans1d``; ``"r"``/``"c"`` make a 1-D result a row/column matrix (2-D)."""

  def __init__(self, name, axis, ndmin, trans1d):
    self._name, self._axis, self._ndmin, self._trans1d = name, axis, ndmin, trans1d

  def __len__(self):
    return 0

  def __getitem__(self, key):
    from ourjax.numpy._creation import asarray
    from ourjax.numpy._shape import concatenate
    from ourjax import lax
    from ourjax.core import get_aval
    key = key if isinstance(key, tuple) else (key,)
    axis, ndmin, trans1d, matrix = self._axis, self._ndmin, self._trans1d, None
    if key and isinstance(key[0], str):
      directive, key = key[0], key[1:]
      if directive in ("r", "c"):
        matrix = directive
      else:
        try:
          vec = [int(v) for v in directive.split(",")]
        except ValueError:
          raise ValueError(f"could not understand directive {directive!r}") from None
        axis = vec[0]
        ndmin = vec[1] if len(vec) > 1 else ndmin
        trans1d = vec[2] if len(vec) > 2 else trans1d
    parts = []
    for item in key:
      if isinstance(item, str):
        raise ValueError(f"jnp.{self._name}: string directive must be placed at the beginning")
      arr = _range(item, self._name) if isinstance(item, slice) else asarray(item)
      shape = get_aval(arr).shape
      if len(shape) < ndmin:
        arr = lax.reshape(arr, (1,) * (ndmin - len(shape)) + shape)
        k = (trans1d + 1) % ndmin      # rotate the axes: the last one moves to ``trans1d``
        if k:
          arr = lax.transpose(arr, tuple((i - k) % ndmin for i in range(ndmin)))
      parts.append(arr)
    if not parts:
      raise ValueError("Need at least one array to concatenate.")
    out = concatenate(parts, axis=axis)
    if matrix is not None and get_aval(out).ndim == 1:
      n = get_aval(out).shape[0]
      out = lax.reshape(out, (1, n) if matrix == "r" else (n, 1))
    return out


r_ = _AxisConcat("r_", 0, 1, -1)
c_ = _AxisConcat("c_", -1, 2, 0)
