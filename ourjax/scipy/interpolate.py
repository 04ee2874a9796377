"""``ourjax.scipy.interpolate``: ``RegularGridInterpolator`` (linear and nearest), as
``jax.scipy.interpolate`` has it."""
from __future__ import annotations

import itertools

import numpy as np

__all__ = ["RegularGridInterpolator"]


class RegularGridInterpolator:
  """Interpolate ``values`` given on the rectilinear grid ``points`` (one increasing 1-D array
  per dimension).  ``method``: 'linear' or 'nearest'; points outside the grid get
  ``fill_value`` (None: extrapolate from the edge cells).  ``bounds_error=True`` is refused (it
  cannot be checked under jit), as in JAX.  ``values`` may have trailing dimensions beyond the
  grid's."""

  def __init__(self, points, values, method="linear", bounds_error=False, fill_value=np.nan):
    import ourjax.numpy as jnp
    from ourjax.numpy import _util
    if method not in ("linear", "nearest"):
      raise ValueError(f"method {method!r} is not defined")
    self.method = method
    self.bounds_error = bounds_error
    if self.bounds_error:
      raise NotImplementedError("`bounds_error` takes no effect under JIT")
    _util.check_arraylike("RegularGridInterpolator", values)
    if len(points) > np.ndim(values):
      raise ValueError(f"there are {len(points)} point arrays, but values has "
                       f"{np.ndim(values)} dimensions")
    values, = _util.promote_dtypes_inexact(jnp.asarray(values))
    if fill_value is not None:
      _util.check_arraylike("RegularGridInterpolator", fill_value)
      fill_value = jnp.asarray(fill_value)
      if not np.can_cast(fill_value.dtype, values.dtype, casting="same_kind"):
        raise ValueError("fill_value must be either 'None' or of a type compatible with "
                         "values")
    self.fill_value = fill_value
    self.grid = tuple(jnp.asarray(p) for p in points)
    self.values = values

  def __call__(self, xi, method=None):
    import ourjax.numpy as jnp
    from ourjax.numpy import _util
    method = self.method if method is None else method
    if method not in ("linear", "nearest"):
      raise ValueError(f"method {method!r} is not defined")
    ndim = len(self.grid)
    xi = jnp.asarray(xi)
    if ndim == 1 and (xi.ndim == 0 or xi.shape[-1] != 1):
      xi = xi[..., None]
    elif xi.ndim == 1:
      xi = xi[None]                  # one point: a batch of one (as JAX)
    if xi.shape[-1] != ndim:
      raise ValueError(f"the requested sample points xi have dimension {xi.shape[-1]}, but "
                       f"this RegularGridInterpolator has dimension {ndim}")
    xi, = _util.promote_dtypes_inexact(xi)
    lead = xi.shape[:-1]
    xi = xi.reshape(-1, ndim)
    indices, distances, out_of_bounds = [], [], jnp.zeros(xi.shape[0], bool)
    for d, grid in enumerate(self.grid):
      x = xi[:, d]
      i = jnp.clip(jnp.searchsorted(grid, x) - 1, 0, grid.shape[0] - 2)
      dist = (x - grid[i]) / (grid[i + 1] - grid[i])
      indices.append(i)
      distances.append(dist)
      out_of_bounds = out_of_bounds | (x < grid[0]) | (x > grid[-1])
    extra = (None,) * (self.values.ndim - ndim)
    if method == "linear":
      result = 0
      for corner in itertools.product((0, 1), repeat=ndim):
        idx = tuple(i + c for i, c in zip(indices, corner))
        weight = 1
        for c, dist in zip(corner, distances):
          weight = weight * (dist if c else 1 - dist)
        result = result + self.values[idx] * weight[(slice(None),) + extra]
    else:
      idx = tuple(jnp.where(dist <= 0.5, i, i + 1) for i, dist in zip(indices, distances))
      result = self.values[idx]
    if self.fill_value is not None:
      result = jnp.where(out_of_bounds[(slice(None),) + extra], self.fill_value, result)
    return result.reshape(lead + self.values.shape[ndim:]).astype(self.values.dtype)
