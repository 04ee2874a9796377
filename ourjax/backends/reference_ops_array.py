"""The reference semantics of the ops over whole arrays and windows of them: reduce,
reduce-window, dot, convolution, gather, scatter, fft and sort.  Split from
``reference_ops`` (which re-exports every name here: callers keep using ``rops.reduce`` & co.);
its docstring's conventions hold here too."""
from __future__ import annotations

import builtins
import functools
import itertools
from typing import Callable

import numpy as np

from ourjax.backends.reference_ops import (
    MinMax, _contiguous, _ignore_fp_errors, broadcast_in_dim, compute_dtype,
    convert_element_type, iinfo_max, iinfo_min, is_bool, is_complex, is_float, is_signed, pad,
    round_to, total_order_key)

# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def _as_tuple_combine(combine, n):
  """Wrap a binary function/ufunc of single arrays as a function of tuples."""
  if n == 1 and not getattr(combine, "_takes_tuples", False):
    return lambda accs, xs: (combine(accs[0], xs[0]),)
  return combine


def tuple_combine(fn):
  """Mark ``fn(accs, xs) -> tuple`` as taking tuples (needed only for a single operand)."""
  fn._takes_tuples = True
  return fn


@_ignore_fp_errors
def reduce(operands, init_values, *, computation, dimensions):
  """XLA reduce. ``computation`` is a NumPy ufunc or a vectorised binary function for one
  operand, or ``fn(accs, xs) -> tuple`` (see ``tuple_combine``) for several. The accumulator
  starts at the init value and takes the elements in row-major order of the reduced dimensions,
  one at a time. A ufunc on a type NumPy computes natively (not the narrow floats) instead uses
  NumPy's reduction (pairwise for floats) over the reduced elements made contiguous."""
  single = isinstance(operands, np.ndarray)
  ops = [np.asarray(operands)] if single else [np.asarray(o) for o in operands]
  inits = [np.asarray(init_values)] if single else [np.asarray(v) for v in init_values]
  dims = sorted(set(dimensions))
  shape = ops[0].shape
  kept = [d for d in range(len(shape)) if d not in dims]
  kept_shape = tuple(shape[d] for d in kept)
  count = int(np.prod([shape[d] for d in dims], dtype=np.int64))
  flat = [_contiguous(o.transpose(kept + dims).reshape(kept_shape + (count,)))
          for o in ops]
  dtypes = [i.dtype for i in inits]
  if (len(ops) == 1 and isinstance(computation, (np.ufunc, MinMax))
      and compute_dtype(dtypes[0]) == dtypes[0] and count > 0):
    part = computation.reduce(flat[0], axis=-1, dtype=dtypes[0])
    res = (computation(inits[0], part).astype(dtypes[0]),)
  else:
    fn = _as_tuple_combine(computation, len(ops))
    res = tuple(np.full(kept_shape, v, v.dtype) for v in inits)
    for k in range(count):
      res = tuple(np.asarray(r, dt) for r, dt in
                  zip(fn(res, tuple(f[..., k] for f in flat)), dtypes))
  res = tuple(_contiguous(np.asarray(r, dt).reshape(kept_shape))
              for r, dt in zip(res, dtypes))
  return res[0] if single else list(res)


def _window_output_size(n, window, stride, lo, hi, base_dilation, window_dilation):
  padded = (n - 1) * base_dilation + 1 + lo + hi if n > 0 else lo + hi
  dilated_window = (window - 1) * window_dilation + 1
  if padded < dilated_window:
    return 0
  return (padded - dilated_window) // stride + 1


@_ignore_fp_errors
def reduce_window(operands, init_values, *, computation, window_dimensions, window_strides=None,
                  padding=None, base_dilation=None, window_dilation=None):
  """XLA reduce-window: each output element starts from the init value and combines, in
  row-major window order, the operand elements its window covers in the base-dilated, padded
  operand. Window positions on padding or on the holes of base dilation are skipped (XLA's
  semantics; it matters when the init value is not the computation's identity).
  ``computation`` as for ``reduce``."""
  single = isinstance(operands, np.ndarray)
  ops = [np.asarray(operands)] if single else [np.asarray(o) for o in operands]
  inits = [np.asarray(init_values)] if single else [np.asarray(v) for v in init_values]
  rank = ops[0].ndim
  strides = tuple(window_strides or (1,) * rank)
  padding = tuple(padding or ((0, 0),) * rank)
  base_dilation = tuple(base_dilation or (1,) * rank)
  window_dilation = tuple(window_dilation or (1,) * rank)
  out_shape = tuple(_window_output_size(n, w, s, lo, hi, bd, wd) for n, w, s, (lo, hi), bd, wd in
                    zip(ops[0].shape, window_dimensions, strides, padding, base_dilation,
                        window_dilation))
  acc = tuple(np.full(out_shape, v, v.dtype) for v in inits)
  if 0 in out_shape:
    return acc[0] if single else list(acc)
  config = [(lo, hi, bd - 1) for (lo, hi), bd in zip(padding, base_dilation)]
  padded = [pad(o, v, config) for o, v in zip(ops, inits)]
  real = pad(np.ones(ops[0].shape, np.bool_), np.bool_(False), config)   # not padding, not a hole
  fn = _as_tuple_combine(computation, len(ops))
  dtypes = [v.dtype for v in inits]
  for offset in itertools.product(*[range(w) for w in window_dimensions]):
    idx = tuple(builtins.slice(k * wd, k * wd + (n - 1) * s + 1, s)
                for k, wd, n, s in zip(offset, window_dilation, out_shape, strides))
    new = fn(acc, tuple(p[idx] for p in padded))
    acc = tuple(np.where(real[idx], np.asarray(r, dt), a) for r, a, dt in zip(new, acc, dtypes))
  acc = tuple(_contiguous(a) for a in acc)
  return acc[0] if single else list(acc)


# ---------------------------------------------------------------------------------------------
# dot and convolution
# ---------------------------------------------------------------------------------------------

def accumulation_dtype(lhs_dtype, rhs_dtype, out_dtype) -> np.dtype:
  """The type a dot/convolution multiplies and sums in: for float/complex results the widest
  of the float operand types and the result type (float32 at least); else the result type."""
  out = np.dtype(out_dtype)
  if is_float(out) or is_complex(out):
    cands = [compute_dtype(out)] + [compute_dtype(d) for d in (lhs_dtype, rhs_dtype)
                                    if is_float(d) or is_complex(d)]
    return functools.reduce(np.promote_types, cands)
  return out


@_ignore_fp_errors
def dot_general(lhs, rhs, dimension_numbers, *, preferred_element_type=None):
  """``lax.dot_general``. ``dimension_numbers = ((lhs_contracting, rhs_contracting),
  (lhs_batch, rhs_batch))``. The result has the batch dimensions, then the lhs free, then the rhs
  free dimensions, each group in increasing order. Both operands are brought into a contiguous
  canonical (batch, free, contracting) form before one ``matmul``, so the result depends only on
  the values, and every sum starts from +0."""
  lhs, rhs = np.asarray(lhs), np.asarray(rhs)
  (lc, rc), (lb, rb) = dimension_numbers
  lc, rc, lb, rb = (list(map(int, d)) for d in (lc, rc, lb, rb))
  out_dtype = np.dtype(preferred_element_type) if preferred_element_type is not None else \
      np.promote_types(lhs.dtype, rhs.dtype)
  acc = accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
  lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
  rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
  batch_shape = [lhs.shape[d] for d in lb]
  lf_shape = [lhs.shape[d] for d in lf]
  rf_shape = [rhs.shape[d] for d in rf]
  B = int(np.prod(batch_shape, dtype=np.int64))
  M = int(np.prod(lf_shape, dtype=np.int64))
  N = int(np.prod(rf_shape, dtype=np.int64))
  K = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
  a = _contiguous(convert_element_type(lhs, acc).transpose(lb + lf + lc).reshape(B, M, K))
  b = _contiguous(convert_element_type(rhs, acc).transpose(rb + rc + rf).reshape(B, K, N))
  if K == 0:
    r = np.zeros((B, M, N), acc)
  else:
    r = np.matmul(a, b)
    if is_float(acc) or is_complex(acc):
      r = r + np.zeros((), acc)  # -0 -> +0: the sum starts from +0
  return round_to(convert_element_type(r, out_dtype).reshape(batch_shape + lf_shape + rf_shape),
                  out_dtype)


@_ignore_fp_errors
def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                         preferred_element_type=None):
  """``lax.conv_general_dilated`` with explicit ``padding`` pairs (negative allowed) and
  ``dimension_numbers = (lhs_spec, rhs_spec, out_spec)``, each a tuple of dimension indices:
  lhs (batch, feature, spatial...), rhs (out feature, in feature, spatial...), out (batch,
  feature, spatial...); ``None`` means NCHW/OIHW/NCHW. A cross-correlation (no kernel flip).
  Feature groups split the lhs features and the rhs output features into contiguous groups;
  batch groups split the lhs batch and the rhs output features; results are concatenated along
  the output features. Accumulation as ``dot_general``: kernel positions in row-major order,
  each a matmul over the input features."""
  lhs, rhs = np.asarray(lhs), np.asarray(rhs)
  nd = lhs.ndim - 2
  if dimension_numbers is None:
    spec = tuple(range(nd + 2))
    dimension_numbers = (spec, spec, spec)
  lhs_spec, rhs_spec, out_spec = (tuple(map(int, s)) for s in dimension_numbers)
  lhs_dilation = tuple(lhs_dilation or (1,) * nd)
  rhs_dilation = tuple(rhs_dilation or (1,) * nd)
  window_strides = tuple(window_strides or (1,) * nd)
  padding = tuple(tuple(p) for p in padding)
  out_dtype = np.dtype(preferred_element_type) if preferred_element_type is not None else \
      np.promote_types(lhs.dtype, rhs.dtype)
  acc = accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
  x = convert_element_type(lhs, acc).transpose(lhs_spec)    # N C spatial
  w = convert_element_type(rhs, acc).transpose(rhs_spec)    # O I spatial
  N, C = x.shape[:2]
  O, I = w.shape[:2]
  G, BG = feature_group_count, batch_group_count
  if C != I * G or O % G or N % BG or O % BG:
    raise ValueError(f"conv_general_dilated: incompatible shapes lhs {lhs.shape} rhs {rhs.shape} "
                     f"with feature_group_count={G} batch_group_count={BG}")
  x = pad(x, np.zeros((), acc), [(0, 0, 0), (0, 0, 0)] +
          [(lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dilation)])
  ksp = w.shape[2:]
  out_sp = []
  for n, k, s, d in zip(x.shape[2:], ksp, window_strides, rhs_dilation):
    dk = (k - 1) * d + 1
    out_sp.append(max(0, (n - dk) // s + 1) if n >= dk else 0)
  P = int(np.prod(out_sp, dtype=np.int64))
  outs = []
  for bg in range(BG):
    xb = x[bg * (N // BG):(bg + 1) * (N // BG)]
    wb = w[bg * (O // BG):(bg + 1) * (O // BG)]
    ob = wb.shape[0]
    group_outs = []
    for g in range(G):
      xg = xb[:, g * I:(g + 1) * I]
      wg = wb[g * (ob // G):(g + 1) * (ob // G)]
      res = np.zeros((xg.shape[0], wg.shape[0], P), acc)
      for kpos in itertools.product(*[range(k) for k in ksp]):
        idx = (builtins.slice(None), builtins.slice(None)) + tuple(
            builtins.slice(kk * d, kk * d + (n - 1) * s + 1, s)
            for kk, d, n, s in zip(kpos, rhs_dilation, out_sp, window_strides))
        slab = _contiguous(xg[idx].reshape(xg.shape[0], I, P))
        kern = _contiguous(wg[(builtins.slice(None), builtins.slice(None)) + kpos])
        if P:
          res = res + np.matmul(kern, slab)
      group_outs.append(res)
    outs.append(np.concatenate(group_outs, axis=1))
  r = np.concatenate(outs, axis=1).reshape((N // BG, O) + tuple(out_sp))
  if is_float(acc) or is_complex(acc):
    r = r + np.zeros((), acc)
  perm = [0] * (nd + 2)
  for j, p in enumerate(out_spec):
    perm[p] = j
  return round_to(convert_element_type(r.transpose(perm), out_dtype), out_dtype)


# ---------------------------------------------------------------------------------------------
# gather / scatter
# ---------------------------------------------------------------------------------------------

def _full_starts(indices, operand_rank, index_map, operand_batching_dims,
                 indices_batching_dims):
  """Per batch element (every index of ``indices`` but the last dimension), the start index in
  every operand dimension: from the index vector through ``index_map``, from the batch position
  for the batching dimensions, 0 elsewhere."""
  batch_shape = indices.shape[:-1]
  starts = np.zeros(batch_shape + (operand_rank,), np.int64)
  for k, d in enumerate(index_map):
    starts[..., d] = indices[..., k].astype(np.int64)
  for od, idim in zip(operand_batching_dims, indices_batching_dims):
    starts[..., od] = broadcast_in_dim(np.arange(batch_shape[idim]), batch_shape, (idim,))
  return starts


def gather(operand, indices, *, offset_dims, collapsed_slice_dims, start_index_map,
           slice_sizes, operand_batching_dims=(), start_indices_batching_dims=(),
           mode="clip", fill_value=None):
  """XLA gather with the index vector in the last dimension of ``indices``.

  The output has one batch dimension per leading dimension of ``indices`` and, at the positions
  ``offset_dims``, the slice dimensions that are neither collapsed nor operand batching
  dimensions. ``mode='clip'`` (also for 'promise_in_bounds') clamps each start so the slice lies
  inside the operand (XLA's semantics); ``mode='fill'`` returns ``fill_value`` for every slice
  whose start is out of bounds (default: NaN for inexact types, the minimum for signed, the
  maximum for unsigned, True for bool), as lax's FILL_OR_DROP."""
  operand, indices = np.asarray(operand), np.asarray(indices)
  slice_sizes = tuple(int(s) for s in slice_sizes)
  starts = _full_starts(indices, operand.ndim, start_index_map, operand_batching_dims,
                        start_indices_batching_dims)
  batch_shape = indices.shape[:-1]
  max_start = np.array([n - s for n, s in zip(operand.shape, slice_sizes)], np.int64)
  oob = None
  if str(mode).lower().endswith("fill") or str(mode).lower() == "fill_or_drop":
    oob = np.zeros(batch_shape, bool)
    for d in start_index_map:
      oob |= (starts[..., d] < 0) | (starts[..., d] > max_start[d])
  starts = np.clip(starts, 0, max_start)
  nb = len(batch_shape)
  grid = []
  for d in range(operand.ndim):
    off = broadcast_in_dim(np.arange(slice_sizes[d]), batch_shape + slice_sizes, (nb + d,))
    st = broadcast_in_dim(starts[..., d], batch_shape + slice_sizes, tuple(range(nb)))
    grid.append(st + off)
  r = operand[tuple(grid)] if operand.size else np.zeros(batch_shape + slice_sizes, operand.dtype)
  dropped = sorted(set(collapsed_slice_dims) | set(operand_batching_dims))
  r = r.reshape(batch_shape + tuple(s for d, s in enumerate(slice_sizes) if d not in dropped))
  out_rank = r.ndim
  perm, b = [], 0
  offset_dims = list(offset_dims)
  for i in range(out_rank):
    if i in offset_dims:
      perm.append(nb + offset_dims.index(i))
    else:
      perm.append(b)
      b += 1
  r = r.transpose(perm)
  if oob is not None:
    if fill_value is None:
      dt = operand.dtype
      fill_value = (np.nan if is_float(dt) or is_complex(dt) else True if is_bool(dt) else
                    iinfo_min(dt) if is_signed(dt) else iinfo_max(dt))
    mask = oob.reshape(batch_shape + (1,) * (r.ndim - nb)).transpose(perm)
    r = np.where(mask, np.asarray(fill_value).astype(operand.dtype), r)
  return _contiguous(r.astype(operand.dtype, copy=False))


def scatter(operand, indices, updates, *, update_window_dims, inserted_window_dims,
            scatter_dims_to_operand_dims, operand_batching_dims=(),
            scatter_indices_batching_dims=(), combine=None, mode="drop"):
  """XLA scatter with the index vector in the last dimension of ``indices``.

  ``combine`` is None (overwrite), a NumPy ufunc (applied with ``ufunc.at``, in order), or a
  binary function of scalars. Updates are applied in row-major order of the update array, so
  with ``combine=None`` the last duplicate wins. ``mode='drop'`` (XLA's semantics, lax's
  FILL_OR_DROP) skips every update window whose start is out of bounds; ``mode='clip'`` clamps
  the starts as ``gather`` does."""
  result = np.array(operand, copy=True)
  indices, updates = np.asarray(indices), np.asarray(updates, result.dtype)
  update_window_dims = list(update_window_dims)
  scatter_dims = [d for d in range(updates.ndim) if d not in update_window_dims]
  window_operand_dims = [d for d in range(result.ndim)
                         if d not in inserted_window_dims and d not in operand_batching_dims]
  window_size = [1] * result.ndim
  for od, ud in zip(window_operand_dims, update_window_dims):
    window_size[od] = updates.shape[ud]
  u = updates.transpose(scatter_dims + update_window_dims)
  batch_shape = indices.shape[:-1]
  nb = len(batch_shape)
  wshape = u.shape[nb:]
  starts = _full_starts(indices, result.ndim, scatter_dims_to_operand_dims, operand_batching_dims,
                        scatter_indices_batching_dims)
  max_start = np.array([n - s for n, s in zip(result.shape, window_size)], np.int64)
  if u.size == int(np.prod(wshape, dtype=np.int64)) and (
      combine is None or isinstance(combine, (np.ufunc, MinMax))):
    # one update window (a single index vector, as x.at[i].set(v) makes): a slice assignment
    start = starts.reshape(-1, result.ndim)[0] if starts.size else np.zeros(result.ndim, np.int64)
    if str(mode).lower() == "clip":
      if np.any(max_start < 0):
        return result
      start = np.clip(start, 0, max_start)
    elif not np.all((start >= 0) & (start <= max_start)):
      return result
    if u.size == 0:
      return result
    idx = tuple(builtins.slice(int(b), int(b) + w) for b, w in zip(start, window_size))
    block = u.reshape(window_size)
    if combine is None:
      result[idx] = block
    else:
      with np.errstate(all="ignore"):
        result[idx] = combine(result[idx], block)
    return result
  if str(mode).lower() == "clip":
    # a window that cannot fit at all (an inserted dimension of size 0) is dropped
    starts = np.clip(starts, 0, np.maximum(max_start, 0))
    valid = np.full(batch_shape, bool(np.all(max_start >= 0)))
  else:
    valid = np.all((starts >= 0) & (starts <= max_start), axis=-1)
  full = batch_shape + wshape
  grid = []
  for d in range(result.ndim):
    st = broadcast_in_dim(starts[..., d], full, tuple(range(nb)))
    if d in window_operand_dims:
      k = window_operand_dims.index(d)
      st = st + broadcast_in_dim(np.arange(wshape[k]), full, (nb + k,))
    grid.append(st.reshape(-1))
  vals = u.reshape(-1)
  keep = broadcast_in_dim(valid, full, tuple(range(nb))).reshape(-1)
  grid = tuple(g[keep] for g in grid)
  vals = vals[keep]
  if not vals.size:
    return result
  if combine is None:
    lin = np.ravel_multi_index(grid, result.shape)
    # keep the last occurrence of each target
    _, first_in_reversed = np.unique(lin[::-1], return_index=True)
    last = len(lin) - 1 - first_in_reversed
    result[tuple(g[last] for g in grid)] = vals[last]
  elif isinstance(combine, (np.ufunc, MinMax)):
    with np.errstate(all="ignore"):
      combine.at(result, grid, vals)
  else:
    for pos in range(len(vals)):
      idx = tuple(int(g[pos]) for g in grid)
      result[idx] = combine(result[idx], vals[pos])
  return result


# ---------------------------------------------------------------------------------------------
# fft
# ---------------------------------------------------------------------------------------------

def fft(x, *, fft_type: str, fft_lengths):
  """XLA's Fft over the last ``len(fft_lengths)`` dimensions (``fft_type``: "FFT", "IFFT",
  "RFFT", "IRFFT"; IFFT and IRFFT scale by 1/n), computed with ``numpy.fft`` in the operand's
  precision as XLA does: complex64 in, complex64 out (float32 for IRFFT). IRFFT reads the
  Hermitian half along the last dimension and transforms the others as IFFT. A transform with
  no elements to read or write gives zeros."""
  x = np.asarray(x)
  k = len(fft_lengths)
  axes = tuple(range(x.ndim - k, x.ndim))
  lengths = tuple(int(n) for n in fft_lengths)
  batch = x.shape[:x.ndim - k]
  single = np.dtype(np.complex64) if x.dtype in (np.float32, np.complex64) else \
      np.dtype(np.complex128)
  if fft_type == "RFFT":
    out_shape, out_dtype = batch + lengths[:-1] + (lengths[-1] // 2 + 1,), single
  elif fft_type == "IRFFT":
    out_shape, out_dtype = batch + lengths, np.dtype(np.float32 if single == np.complex64
                                                     else np.float64)
  else:
    out_shape, out_dtype = x.shape, single
  if x.size == 0 or 0 in out_shape:
    return np.zeros(out_shape, out_dtype)
  if fft_type == "FFT":
    out = np.fft.fftn(x, axes=axes)
  elif fft_type == "IFFT":
    out = np.fft.ifftn(x, axes=axes)
  elif fft_type == "RFFT":
    out = np.fft.rfftn(x, axes=axes)
  elif fft_type == "IRFFT":
    out = np.fft.irfftn(x, s=lengths, axes=axes)
  else:
    raise ValueError(f"fft: unknown fft_type {fft_type!r}")
  return _contiguous(np.asarray(out).astype(out_dtype, copy=False))


# ---------------------------------------------------------------------------------------------
# sort
# ---------------------------------------------------------------------------------------------

def _lax_sort_keys(x):
  """Keys for lax.sort's order: -0 is canonicalised to +0 and every NaN to +NaN before the
  total order, so NaNs sort last and -0 ties with +0."""
  x = np.asarray(x)
  if is_complex(x.dtype):
    return _lax_sort_keys(x.real) + _lax_sort_keys(x.imag)
  if is_float(x.dtype):
    x = np.where(x == 0, np.zeros((), x.dtype), x)
    x = np.where(np.isnan(x), np.abs(np.array(np.nan, x.dtype)), x).astype(x.dtype)
  return [total_order_key(x)]


def sort(operands, *, dimension=-1, is_stable=True, num_keys=1):
  """``lax.sort``: sort ``operands`` (same shape) along ``dimension`` lexicographically by the
  first ``num_keys`` of them, ascending, NaNs last, -0 equal to +0; stable (a stable sort is
  also a valid unstable one)."""
  single = isinstance(operands, np.ndarray)
  ops = [np.asarray(operands)] if single else [np.asarray(o) for o in operands]
  if not ops[0].ndim:
    return ops[0].copy() if single else [o.copy() for o in ops]
  moved = [np.moveaxis(o, dimension, -1) for o in ops]
  keys = []
  for o in moved[:num_keys]:
    keys.extend(_lax_sort_keys(o))
  perm = np.lexsort(keys[::-1], axis=-1) if keys[0].size else np.zeros(keys[0].shape, np.intp)
  out = [_contiguous(np.moveaxis(np.take_along_axis(o, perm, axis=-1), -1, dimension))
         for o in moved]
  return out[0] if single else out


def sort_by_comparator(operands, *, dimension, less_than: Callable, is_stable=True):
  """Sort ``operands`` along ``dimension`` by a comparator ``less_than(lhs_list, rhs_list) ->
  bool array``, evaluated elementwise on whole arrays (vectorised).

  A bitonic sorting network over the indices, padded to a power of two: every stage compares
  disjoint pairs, all rows at once. Ties (neither element less than the other) are broken by
  the original position, so for a strict weak order the result is the stable sort (which is
  also a valid unstable one)."""
  ops = [np.asarray(o) for o in operands]
  if not ops[0].ndim:
    return [o.copy() for o in ops]
  moved = [_contiguous(np.moveaxis(o, dimension, -1)) for o in ops]
  n = moved[0].shape[-1]
  rows = int(np.prod(moved[0].shape[:-1], dtype=np.int64))
  flat = [m.reshape(rows, n) for m in moved]
  size = 1
  while size < n:
    size *= 2
  perm = np.broadcast_to(np.arange(size), (rows, size)).copy()
  row_idx = np.arange(rows)[:, None]

  def before(a, c):
    """Whether index a goes before index c (both (rows, m) arrays)."""
    va, vc = a < n, c < n
    sa, sc = np.minimum(a, n - 1), np.minimum(c, n - 1)
    xa = [f[row_idx, sa] for f in flat]
    xc = [f[row_idx, sc] for f in flat]
    with np.errstate(all="ignore"):
      lt = np.asarray(less_than(xa, xc), bool)
      gt = np.asarray(less_than(xc, xa), bool)
    real = lt | (~gt & (a < c))
    return np.where(va & vc, real, np.where(va != vc, va, a < c))

  lanes = np.arange(size)
  k = 2
  while k <= size:
    j = k // 2
    while j >= 1:
      partner = lanes ^ j
      lo = lanes[lanes < partner]
      hi = partner[lanes < partner]
      ascending = (lo & k) == 0
      a, c = perm[:, lo], perm[:, hi]
      a_first = before(a, c)
      swap = np.where(ascending, ~a_first, a_first)
      perm[:, lo] = np.where(swap, c, a)
      perm[:, hi] = np.where(swap, a, c)
      j //= 2
    k *= 2
  perm = perm[:, :n] if size else perm
  out = []
  for m in moved:
    s_ = np.take_along_axis(m.reshape(rows, n), perm, axis=-1).reshape(m.shape)
    out.append(_contiguous(np.moveaxis(s_, -1, dimension)))
  return out
