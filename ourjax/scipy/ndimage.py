"""``ourjax.scipy.ndimage``: ``map_coordinates`` (spline orders 0 and 1), as
``jax.scipy.ndimage`` has it."""
from __future__ import annotations

import functools
import itertools
import operator

import ourjax.numpy as jnp
from ourjax import dtypes

__all__ = ["map_coordinates"]

_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")


def _round_half_away_from_zero(x):
  return jnp.where(x < 0, -jnp.floor(-x + 0.5), jnp.floor(x + 0.5))


def _fold_index(index, size, mode):
  """Map an integer index outside [0, size) into it by the boundary mode (all but constant)."""
  if mode == "nearest":
    return jnp.clip(index, 0, size - 1)
  if mode == "wrap":
    return index % size
  if mode == "mirror":         # reflect about the edge samples: period 2 (size - 1)
    if size == 1:
      return jnp.zeros_like(index)
    s = size - 1
    return jnp.abs((index + s) % (2 * s) - s)
  # reflect: about the edges, so the edge samples repeat: period 2 size
  index = index % (2 * size)
  return jnp.where(index < size, index, 2 * size - 1 - index)


def _taps(coordinate, size, order, mode):
  """[(index, weight, valid)] for one dimension."""
  if order == 0:
    index = _round_half_away_from_zero(coordinate).astype(jnp.int32)
    taps = [(index, None)]
  else:
    lower = jnp.floor(coordinate)
    upper_weight = coordinate - lower
    lower = lower.astype(jnp.int32)
    taps = [(lower, 1 - upper_weight), (lower + 1, upper_weight)]
  out = []
  for index, weight in taps:
    valid = (index >= 0) & (index < size) if mode == "constant" else None
    index = jnp.clip(index, 0, size - 1) if mode == "constant" else _fold_index(index, size,
                                                                                mode)
    out.append((index, weight, valid))
  return out


def map_coordinates(input, coordinates, order, mode="constant", cval=0.0):
  """Sample ``input`` at the (fractional) positions ``coordinates`` (one array per input
  dimension) by nearest-neighbour (``order=0``) or linear (``order=1``) interpolation; points
  outside the array follow ``mode`` (constant, nearest, wrap, mirror, reflect).  Integer inputs
  give results rounded half away from zero."""
  input_arr = jnp.asarray(input)
  coordinates = [jnp.asarray(c) for c in coordinates]
  cval = jnp.asarray(cval, input_arr.dtype)
  if len(coordinates) != input_arr.ndim:
    raise ValueError("coordinates must be a sequence of length input.ndim, but "
                     f"{len(coordinates)} != {input_arr.ndim}")
  if order > 1:
    raise NotImplementedError("ourjax.scipy.ndimage.map_coordinates currently requires "
                              "order<=1")
  if mode not in _MODES:
    raise NotImplementedError(f"ourjax.scipy.ndimage.map_coordinates does not yet support mode "
                              f"{mode}. Currently supported modes are {set(_MODES)}.")
  float_dtype = (input_arr.dtype if dtypes.issubdtype(input_arr.dtype, jnp.inexact)
                 else dtypes.canonicalize_dtype(jnp.float64))
  coordinates = [c.astype(float_dtype) if not dtypes.issubdtype(c.dtype, jnp.inexact) else c
                 for c in coordinates]
  per_dim = [_taps(c, size, order, mode) for c, size in zip(coordinates, input_arr.shape)]
  terms = []
  for combo in itertools.product(*per_dim):
    indices = tuple(t[0] for t in combo)
    weights = [t[1] for t in combo if t[1] is not None]
    valids = [t[2] for t in combo if t[2] is not None]
    value = input_arr[indices]
    if valids:
      value = jnp.where(functools.reduce(operator.and_, valids), value, cval)
    terms.append(functools.reduce(operator.mul, weights) * value if weights else value)
  result = functools.reduce(operator.add, terms)
  if dtypes.issubdtype(input_arr.dtype, jnp.integer):
    result = _round_half_away_from_zero(result)
  return result.astype(input_arr.dtype)
