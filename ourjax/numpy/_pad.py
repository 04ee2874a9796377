"""``jnp.pad``: NumPy's padding modes (constant, edge, wrap, reflect/symmetric, linear_ramp,
maximum/minimum/mean/median, empty) and a callable mode, one axis after another as NumPy pads.
Pad widths are static; values may be traced."""
from __future__ import annotations

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.numpy._shape import _arr, _concat, _slice_axis, _take_static


def _pairs(values, nd, name, integral=False):
  """NumPy's ways of giving a (before, after) pair per axis, as ``nd`` concrete pairs."""
  try:
    v = np.asarray(core.concrete_or_error(None, values, f"jnp.pad: {name} must be concrete")
                   if not isinstance(values, (list, tuple)) else
                   [core.concrete_or_error(None, x, "") if not isinstance(x, (list, tuple)) else
                    [core.concrete_or_error(None, y, "") for y in x] for x in values])
  except ValueError:
    raise TypeError(f"`{name}` entries must be the same shape: {values}") from None
  if v.dtype == object:
    raise TypeError(f"`{name}` entries must be the same shape: {values}")
  if integral and v.size and not (dtypes.is_integer(v.dtype) or v.dtype == np.bool_):
    raise TypeError(f"`{name}` must be of integral type.")
  if nd == 0:
    return []
  if v.shape == (nd, 2):
    out = [tuple(p) for p in v.tolist()]
  elif v.shape == (1, 2):
    out = [tuple(v[0].tolist())] * nd
  elif v.shape == (2,):
    out = [tuple(v.tolist())] * nd
  elif v.shape in ((1,), (1, 1)):
    out = [(v.ravel()[0].item(),) * 2] * nd
  elif v.shape == ():
    out = [(v.item(),) * 2] * nd
  elif v.shape == (nd, 1):
    out = [(x[0], x[0]) for x in v.tolist()]
  else:
    raise ValueError(f"jnp.pad: {name} with nd={nd} has unsupported shape {v.shape}. Valid "
                     f"shapes are ({nd}, 2), (1, 2), (2,), (1,), or ().")
  return out


_PAD_KWARGS = {
    "constant": {"constant_values"}, "edge": set(), "wrap": set(), "empty": set(),
    "linear_ramp": {"end_values"}, "maximum": {"stat_length"}, "minimum": {"stat_length"},
    "mean": {"stat_length"}, "median": {"stat_length"},
    "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
}


def pad(array, pad_width, mode="constant", **kwargs):
  """Pad with NumPy's modes: constant (``constant_values``), edge, wrap, reflect and symmetric
  (``reflect_type`` 'even' or 'odd'), linear_ramp (``end_values``), maximum/minimum/mean/median
  (``stat_length``) and empty, or a callable ``mode(vector, (before, after), axis, kwargs)``
  that returns each zero-padded 1-D slice filled in (NumPy's protocol, but functional).  Axes
  are padded one after another, as NumPy does."""
  x = _arr("pad", array)
  aval = get_aval(x)
  nd = aval.ndim
  widths = _pairs(pad_width, nd, "pad_width", integral=True)
  widths = [(int(b), int(a)) for b, a in widths]
  if any(b < 0 or a < 0 for b, a in widths):
    raise ValueError("index can't contain negative values")
  if callable(mode):
    return _keep_weak(_pad_func(x, widths, mode, kwargs), aval)
  if not isinstance(mode, str) or mode not in _PAD_KWARGS:
    raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.")
  return _keep_weak(_pad(x, widths, mode, kwargs), aval)


def _keep_weak(out, aval):
  """A weakly typed input pads to a weakly typed result, as in JAX."""
  from ourjax.lax.elementwise import _convert_element_type
  o = get_aval(out)
  if aval.weak_type and not o.weak_type and o.dtype == aval.dtype:
    return _convert_element_type(out, o.dtype, weak_type=True)
  return out


def _pad(x, widths, mode, kwargs):
  nd = len(widths)
  bad = set(kwargs) - _PAD_KWARGS[mode]
  if bad:
    raise ValueError(f"unsupported keyword arguments for mode '{mode}': {bad}")
  if mode in ("constant", "empty"):
    cv = kwargs.get("constant_values", 0) if mode == "constant" else 0
    return _pad_constant(x, widths, cv)
  for ax, (b, a) in enumerate(widths):
    if not (b or a):
      continue
    n = get_aval(x).shape[ax]
    if n == 0:
      raise ValueError(f"can't extend empty axis {ax} using modes other than 'constant' or "
                       f"'empty'")
    if mode == "edge":
      x = _pad_edge(x, ax, b, a)
    elif mode == "wrap":
      idx = (np.arange(-b, n + a) % n)
      x = _take_static(x, idx, ax)
    elif mode in ("reflect", "symmetric"):
      rtype = kwargs.get("reflect_type", "even")
      if rtype not in ("even", "odd"):
        raise ValueError(f"reflect_type must be 'even' or 'odd', got {rtype!r}")
      x = _pad_reflect(x, ax, b, a, mode == "symmetric", rtype == "odd")
    elif mode == "linear_ramp":
      ends = _pairs(kwargs.get("end_values", 0), nd, "end_values")
      x = _pad_linear_ramp(x, ax, b, a, ends[ax])
    else:
      stat = kwargs.get("stat_length")
      lens = _pairs(stat, nd, "stat_length", integral=True) if stat is not None else \
          [(None, None)] * nd
      x = _pad_stat(x, ax, b, a, mode, lens[ax])
  return x


def _pad_func(x, widths, func, kwargs):
  """NumPy's vector-function protocol, functionally: zero-pad, then for each axis in turn call
  ``func(vector, (before, after), axis, kwargs)`` on every 1-D slice along it (vectorized with
  vmap); ``func`` returns the padded vector (ourjax arrays cannot be modified in place)."""
  from ourjax.numpy._misc import apply_along_axis
  x = _pad_constant(x, widths, 0)

  def one(vector, width, axis, kw):
    out = func(vector, width, axis, kw)
    if out is None:
      raise TypeError("jnp.pad: the padding function returned None; it must return the padded "
                      "vector (ourjax arrays are immutable, so NumPy's in-place protocol "
                      "cannot be used)")
    return out
  for ax in range(get_aval(x).ndim):
    x = apply_along_axis(one, ax, x, widths[ax], ax, kwargs)
  return x


def _pad_constant(x, widths, constant_values):
  aval = get_aval(x)
  nd = aval.ndim
  if isinstance(constant_values, Tracer) and not core.is_concrete(constant_values):
    if get_aval(constant_values).ndim:
      raise NotImplementedError("jnp.pad: traced constant_values must be a scalar")
    pv = lax.convert_element_type(constant_values, aval.dtype)
    return lax.pad(x, pv, [(b, a, 0) for b, a in widths])
  vals = _pairs(constant_values, nd, "constant_values") if nd else []
  flat = {v for p in vals for v in p}
  if len(flat) <= 1:
    v = next(iter(flat)) if flat else 0
    return lax.pad(x, _host_scalar(v, aval.dtype), [(b, a, 0) for b, a in widths])
  for ax, ((b, a), (vb, va)) in enumerate(zip(widths, vals)):
    for width, v, before in ((b, vb, True), (a, va, False)):
      if width:
        cfg = [(0, 0, 0)] * nd
        cfg[ax] = (width, 0, 0) if before else (0, width, 0)
        x = lax.pad(x, _host_scalar(v, aval.dtype), cfg)
  return x


def _host_scalar(v, dt):
  from ourjax.lax.elementwise import _convert_impl
  return Array(_convert_impl(np.asarray(v), np.dtype(dt), False))


def _pad_edge(x, ax, b, a):
  aval = get_aval(x)
  n = aval.shape[ax]
  parts = []

  def bcast(piece, width):
    shape = list(aval.shape)
    shape[ax] = width
    return lax.broadcast_in_dim(piece, tuple(shape), tuple(range(aval.ndim)))
  if b:
    parts.append(bcast(_slice_axis(x, 0, 1, ax), b))
  parts.append(x)
  if a:
    parts.append(bcast(_slice_axis(x, n - 1, n, ax), a))
  return _concat(parts, ax)


def _pad_reflect(x, ax, before, after, symmetric, odd):
  """NumPy's iterative reflection: each round mirrors at most one period of what is there."""
  n0 = get_aval(x).shape[ax]
  if n0 == 1:
    return _pad_edge(x, ax, before, after)
  eo = 1 if symmetric else 0
  while before or after:
    cur = get_aval(x).shape[ax]
    if symmetric:
      old = cur // n0 * n0
    else:
      old = (cur - 1) // (n0 - 1) * (n0 - 1)
    left = right = None
    if before:
      c = min(old, before)
      left = lax.rev(_slice_axis(x, 1 - eo, c + 1 - eo, ax), (ax,))
      if odd:
        edge = _slice_axis(x, 0, 1, ax)
        left = lax.sub(lax.mul(_bcast_axis(edge, ax, c), lax._const(edge, 2)), left)
      before -= c
    if after:
      c = min(old, after)
      right = lax.rev(_slice_axis(x, cur - 1 + eo - c, cur - 1 + eo, ax), (ax,))
      if odd:
        edge = _slice_axis(x, cur - 1, cur, ax)
        right = lax.sub(lax.mul(_bcast_axis(edge, ax, c), lax._const(edge, 2)), right)
      after -= c
    x = _concat([p for p in (left, x, right) if p is not None], ax)
  return x


def _bcast_axis(piece, ax, width):
  aval = get_aval(piece)
  shape = list(aval.shape)
  shape[ax] = width
  return lax.broadcast_in_dim(piece, tuple(shape), tuple(range(aval.ndim)))


def _pad_linear_ramp(x, ax, b, a, ends):
  from ourjax.numpy._creation import linspace
  aval = get_aval(x)
  n = aval.shape[ax]
  parts = []
  if b:
    edge = lax.squeeze(_slice_axis(x, 0, 1, ax), (ax,))
    ramp = linspace(lax.full_like(edge, ends[0]), edge, b, endpoint=False, axis=ax,
                    dtype=aval.dtype)
    parts.append(ramp)
  parts.append(x)
  if a:
    edge = lax.squeeze(_slice_axis(x, n - 1, n, ax), (ax,))
    ramp = linspace(lax.full_like(edge, ends[1]), edge, a, endpoint=False, axis=ax,
                    dtype=aval.dtype)
    parts.append(lax.rev(ramp, (ax,)))
  return _concat(parts, ax)


def _pad_stat(x, ax, b, a, mode, lens):
  from ourjax.numpy import _reductions as red
  aval = get_aval(x)
  n = aval.shape[ax]
  fn = {"maximum": red.max, "minimum": red.min, "mean": red.mean, "median": red.median}[mode]

  def stat(lo, hi):
    v = fn(_slice_axis(x, lo, hi, ax), axis=ax, keepdims=True)
    if dtypes.is_integer(aval.dtype) and mode in ("mean", "median"):
      v = lax.round(v, lax.RoundingMethod.TO_NEAREST_EVEN)
    return lax.convert_element_type(v, aval.dtype)
  lb = n if lens[0] is None else max(1, min(int(lens[0]), n))
  la = n if lens[1] is None else max(1, min(int(lens[1]), n))
  parts = []
  if b:
    parts.append(_bcast_axis(stat(0, lb), ax, b))
  parts.append(x)
  if a:
    parts.append(_bcast_axis(stat(n - la, n), ax, a))
  return _concat(parts, ax)
