"""Contractions: ``dot_general`` (with ``dot`` and ``batch_matmul``) and ``conv_general_dilated``
(with ``conv``, ``conv_with_general_padding``, ``conv_transpose`` and the dimension-number
helpers), each primitive followed by all of its rules.

Both primitives are bilinear: the JVP is ``f(dx, y) + f(x, dy)`` and each transpose is another
contraction of the cotangent with the other operand, with the dimension numbers rearranged so
that the result comes out in the operand's layout.
"""
from __future__ import annotations

import enum
import functools
import operator
from typing import NamedTuple, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.config import config
from ourjax.lax import dot_algorithm as _dot_algorithm
from ourjax.core import ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import all_weak, standard_primitive

# ------------------------------------------------------------------------------------------------
# Precision


class Precision(enum.Enum):
  """How precisely a matrix product is computed on accelerators (the reference computes every
  product at full precision); the names and string aliases are JAX's."""
  DEFAULT = 0
  HIGH = 1
  HIGHEST = 2

  @classmethod
  def _missing_(cls, value):
    aliases = {"default": cls.DEFAULT, "bfloat16": cls.DEFAULT, "fastest": cls.DEFAULT,
               "high": cls.HIGH, "bfloat16_3x": cls.HIGH, "tensorfloat32": cls.HIGH,
               "highest": cls.HIGHEST, "float32": cls.HIGHEST}
    if isinstance(value, str) and value.lower() in aliases:
      return aliases[value.lower()]
    return None

  def __repr__(self):
    return f"Precision.{self.name}"

  __str__ = lambda self: self.name  # noqa: E731


def canonicalize_precision(precision):
  """None, or a pair of ``Precision`` values (one per operand)."""
  if precision is None:
    default = config.read("jax_default_matmul_precision")
    if default is None or _dot_algorithm._from_any(default) is not None:
      return None          # (a preset's name: lax.dot_general applies that algorithm)
    return canonicalize_precision(default)
  try:
    if isinstance(precision, (Precision, str)):
      p = Precision(precision)
      return (p, p)
    if isinstance(precision, (list, tuple)) and len(precision) == 2:
      return tuple(Precision(p) for p in precision)
  except ValueError:
    pass
  raise ValueError(f"Precision argument must be one of:\n- None,\n- a Precision enum value,\n"
                   f"- a string, or\n- a tuple of two Precision enums or strings,\n- a "
                   f"lax.DotAlgorithmPreset or the name of one of these presets, or\n- a "
                   f"lax.DotAlgorithm (with dot/dot_general); got {precision}.")


def _preferred(preferred_element_type, name):
  if preferred_element_type is None:
    return None
  if isinstance(preferred_element_type, np.dtype) and preferred_element_type in _BLAS_DTYPES:
    return dtypes.canonicalize_dtype(preferred_element_type)     # (the common case)
  return dtypes.canonicalize_dtype(dtypes.check_user_dtype(preferred_element_type, name))


def _bit_width(dt) -> int:
  dt = np.dtype(dt)
  if dt == np.bool_:
    return 1
  return dt.itemsize * 8


# ------------------------------------------------------------------------------------------------
# dot_general: contract lhs_contract with rhs_contract, pair up lhs_batch with rhs_batch.  The
# result's dimensions are the batch dimensions, then lhs's free ones, then rhs's free ones.


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
  try:
    (lc, rc), (lb, rb) = dimension_numbers
    dims = ((_index_tuple(lc), _index_tuple(rc)), (_index_tuple(lb), _index_tuple(rb)))
  except (TypeError, ValueError):
    raise TypeError(f"dot_general dimension_numbers must be ((lhs_contracting, "
                    f"rhs_contracting), (lhs_batch, rhs_batch)) of integer sequences, got "
                    f"{dimension_numbers!r}") from None
  algorithm = _dot_algorithm._from_any(
      config.read("jax_default_matmul_precision") if precision is None else precision)
  if algorithm is not None:
    return _dot_algorithm._apply(algorithm, lhs, rhs, preferred_element_type,
                                lambda l, r, pt: _bind_dot_general(l, r, dims, None, pt))
  return _bind_dot_general(lhs, rhs, dims, precision, preferred_element_type)


def _bind_dot_general(lhs, rhs, dims, precision, preferred_element_type):
  return dot_general_p.bind(lhs, rhs, dimension_numbers=dims,
                            precision=canonicalize_precision(precision),
                            preferred_element_type=_preferred(preferred_element_type,
                                                              "dot_general"),
                            out_sharding=None)


def _index_tuple(x) -> tuple:
  if type(x) is tuple:
    for i in x:
      if type(i) is not int:
        break
    else:
      return x
  if isinstance(x, (int, np.integer)):
    return (operator.index(x),)
  return tuple(operator.index(i) for i in x)


def dot(lhs, rhs, *, precision=None, preferred_element_type=None, out_sharding=None):
  """Vector/matrix products: (n)·(n), (m,n)·(n), (n)·(n,k), (m,n)·(n,k)."""
  ls, rs = get_aval(lhs).shape, get_aval(rhs).shape
  if 1 <= len(ls) <= 2 and 1 <= len(rs) <= 2 and ls[-1] == rs[0]:
    return dot_general(lhs, rhs, (((len(ls) - 1,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=preferred_element_type)
  raise TypeError(f"Incompatible shapes for dot: got {ls} and {rs}.")


def batch_matmul(lhs, rhs, precision=None):
  """Matrix products over the leading (batch) dimensions of two arrays of equal rank >= 2."""
  ln, rn = get_aval(lhs).ndim, get_aval(rhs).ndim
  if min(ln, rn) < 2:
    raise ValueError(f"Arguments to batch_matmul must be at least 2D, got {ln}, {rn}")
  if ln != rn:
    raise ValueError(f"Arguments to batch_matmul must have same ndim, got {ln}, {rn}")
  batch = tuple(range(ln - 2))
  return dot_general(lhs, rhs, (((ln - 1,), (rn - 2,)), (batch, batch)), precision=precision)


def _free_dims(ndim, contract, batch):
  return [d for d in range(ndim) if d not in contract and d not in batch]


def _dot_general_shape(lhs, rhs, dimension_numbers, precision, preferred_element_type,
                       out_sharding):
  (lc, rc), (lb, rb) = dimension_numbers
  for side, a, c, b in (("lhs", lhs, lc, lb), ("rhs", rhs, rc, rb)):
    if not all(0 <= d < a.ndim for d in c + b):
      raise TypeError(f"dot_general requires {side} dimension numbers to be nonnegative and less "
                      f"than the number of axes of the {side} value, got {side}_batch of {b} and "
                      f"{side}_contracting of {c} for {side} of rank {a.ndim}")
    if len(set(b)) != len(b):
      raise TypeError(f"dot_general requires {side} batch dimensions to be distinct, got "
                      f"{side}_batch {b}.")
    if len(set(c)) != len(c):
      raise TypeError(f"dot_general requires {side} contracting dimensions to be distinct, got "
                      f"{side}_contracting {c}.")
    if set(b) & set(c):
      raise TypeError(f"dot_general requires {side} batch dimensions to be disjoint from "
                      f"contracting dimensions, got {side}_batch {b} and {side}_contracting {c}.")
  if len(lb) != len(rb):
    raise TypeError(f"dot_general requires equal numbers of lhs_batch and rhs_batch dimensions, "
                    f"got lhs_batch {lb} and rhs_batch {rb}.")
  lbs, rbs = tuple(lhs.shape[d] for d in lb), tuple(rhs.shape[d] for d in rb)
  if lbs != rbs:
    raise TypeError(f"dot_general requires lhs batch dimensions and rhs batch dimensions to have "
                    f"the same shape, got {lbs} and {rbs}.")
  lcs, rcs = tuple(lhs.shape[d] for d in lc), tuple(rhs.shape[d] for d in rc)
  if lcs != rcs:
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, got "
                    f"{lcs} and {rcs}.")
  return (lbs + tuple(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb))
          + tuple(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb)))


@functools.lru_cache(maxsize=256)
def _type_rank(dt):
  """XLA's order for picking the result type of a mixed-type product (complex over real, then
  exponent range, mantissa, width, signed over unsigned)."""
  dt = np.dtype(dt)
  real = np.dtype(np.float32 if dt == np.complex64 else np.float64) if dtypes.is_complex(dt) \
      else dt
  is_fp = dtypes.is_float(real)
  fi = dtypes.finfo(real) if is_fp else None
  return (dtypes.is_complex(dt), int(fi.maxexp) if is_fp else -1, int(fi.nmant) if is_fp else -1,
          _bit_width(real), not np.issubdtype(real, np.unsignedinteger))


def _dot_general_dtype(lhs, rhs, dimension_numbers, precision, preferred_element_type,
                       out_sharding, name="lax.dot_general"):
  for a in (lhs, rhs):
    if not (a.dtype == np.bool_ or dtypes.is_integer(a.dtype) or dtypes.is_inexact(a.dtype)):
      raise TypeError(f"{name} does not accept dtype {a.dtype.name}.")
  lr, rr = _type_rank(lhs.dtype), _type_rank(rhs.dtype)
  if lr > rr:
    result = lhs.dtype
  elif rr > lr:
    result = rhs.dtype
  else:
    if lhs.dtype != rhs.dtype:
      raise TypeError(f"{name} argument type error: {lhs.dtype}, {rhs.dtype}")
    result = lhs.dtype
  return _maybe_upcast(result, preferred_element_type)


def _maybe_upcast(result, preferred):
  if preferred is None or result == preferred:
    return np.dtype(result)
  if not dtypes.is_float(result) and _bit_width(preferred) < _bit_width(result):
    raise TypeError(f"`preferred_element_type` must not be narrower than the original type, got "
                    f"preferred_element_type of {np.dtype(preferred).name} for result type of "
                    f"{np.dtype(result).name}.")
  return np.dtype(preferred)


dot_general_p = standard_primitive("dot_general", _dot_general_shape, _dot_general_dtype,
                                   lambda lhs, rhs, **_: all_weak(lhs, rhs))


@functools.lru_cache(maxsize=256)
def _dot_out_dtype(lhs_dtype, rhs_dtype, preferred_element_type):
  """The result dtype of dot_general on operands of these dtypes (``_dot_general_dtype``)."""
  return _dot_general_dtype(ShapedArray((), lhs_dtype), ShapedArray((), rhs_dtype), None, None,
                            preferred_element_type, None)


_BLAS_DTYPES = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _impl_plan(lhs_dtype, rhs_dtype, preferred_element_type, dimension_numbers, nl, nr):
  """(result dtype, transpose lhs, transpose rhs, +0 of the result dtype) when the product is
  one np.matmul of (transposed) operands, else (result dtype, None, None, None)."""
  out = _dot_out_dtype(lhs_dtype, rhs_dtype, preferred_element_type)
  (lc, rc), (lb, _) = dimension_numbers
  if (not lb and nl <= 2 and nr <= 2 and len(lc) == 1 and lhs_dtype == out
      and rhs_dtype == out and out in _BLAS_DTYPES):
    return out, nl == 2 and lc[0] == 0, nr == 2 and rc[0] == 1, _PLUS_ZERO[out]
  return out, None, None, None


_impl_plans: dict = {}     # _impl_plan's arguments -> its result


def _dot_general_impl(lhs, rhs, dimension_numbers, precision, preferred_element_type,
                      out_sharding):
  key = (lhs.dtype, rhs.dtype, preferred_element_type, dimension_numbers, lhs.ndim, rhs.ndim)
  try:
    plan = _impl_plans.get(key)
  except TypeError:        # (dimension numbers given as lists)
    plan = _impl_plan(*key)
  if plan is None:
    if len(_impl_plans) >= 1024:
      _impl_plans.clear()
    plan = _impl_plans[key] = _impl_plan(*key)
  out, ta, tb, zero = plan
  if zero is None:
    return _rops().dot_general(lhs, rhs, dimension_numbers, preferred_element_type=out)
  # a matrix/vector product without batch dimensions in the operands' own (BLAS) type: one
  # np.matmul on (transposed) views, as the reference computes it without its copies, with
  # NumPy's floating-point warnings off (``reference_ops.quietly``, inline)
  rops = _rops()
  if rops._extobj_contextvar is None:
    return rops.quietly(_matmul_from_plus_zero, lhs.T if ta else lhs, rhs.T if tb else rhs, out)
  token = rops._extobj_contextvar.set(rops._IGNORE_ALL)
  try:
    r = np.matmul(lhs.T if ta else lhs, rhs.T if tb else rhs)
  finally:
    rops._extobj_contextvar.reset(token)
  if type(r) is not np.ndarray or not r.ndim:
    if out.kind == "f":    # -0 -> +0 (a comparison of NumPy scalars costs less than a sum)
      return np.zeros((), out) if r == 0 else np.asarray(r)
    return np.asarray(r + zero)      # -0 -> +0: the sum starts from +0
  r += zero
  return r


_PLUS_ZERO = {dt: np.zeros((), dt) for dt in _BLAS_DTYPES}


def _matmul_from_plus_zero(a, b, out):
  r = np.matmul(a, b)
  if type(r) is not np.ndarray or not r.ndim:
    if out.kind == "f":    # -0 -> +0 (a comparison of NumPy scalars costs less than a sum)
      return np.zeros((), out) if r == 0 else np.asarray(r)
    return np.asarray(r + _PLUS_ZERO[out])      # -0 -> +0: the sum starts from +0
  r += _PLUS_ZERO[out]
  return r


@functools.lru_cache(maxsize=1)
def _rops():
  from ourjax.backends import reference_ops
  return reference_ops


dot_general_p.def_impl(_dot_general_impl)


def _dot_general_pp(params):
  # JAX's printing: None-valued params and the sharding are hidden, dimension numbers as lists
  (lc, rc), (lb, rb) = params["dimension_numbers"]
  out = dict(params, dimension_numbers=((list(lc), list(rc)), (list(lb), list(rb))))
  return [(k, v) for k, v in sorted(out.items()) if v is not None and k != "out_sharding"]


core.pp_param_rules[dot_general_p] = _dot_general_pp


def _dot_transpose_lhs(ct, x, y, *, dimension_numbers, precision, preferred_element_type,
                       out_sharding, swap_ans=False):
  """The cotangent of x in dot_general(x, y) (of y in dot_general(y, x) with ``swap_ans``):
  contract the cotangent's y-free dimensions with y's free dimensions, keep the batch pairing,
  and transpose the result, (batch, x-free, x-contracting in y's order), into x's layout."""
  (xc, yc), (xb, yb) = dimension_numbers
  x_aval = x.aval
  y_ndim = get_aval(y).ndim
  x_free = _free_dims(x_aval.ndim, xc, xb)
  y_free = _free_dims(y_ndim, yc, yb)
  nb = len(xb)
  if swap_ans:   # ct dims: batch, y free, x free
    ct_y_free = tuple(range(nb, nb + len(y_free)))
  else:          # ct dims: batch, x free, y free
    ct_y_free = tuple(range(nb + len(x_free), nb + len(x_free) + len(y_free)))
  dims = ((ct_y_free, tuple(y_free)), (tuple(range(nb)), tuple(yb)))
  out = dot_general(ct, y, dims, precision=precision,
                    preferred_element_type=preferred_element_type)
  # out dims: batch (x's order of xb), x free (increasing), then y's contracting dims in
  # increasing order, i.e. x's contracting dims ordered as their partners in y.
  xc_by_y = [xc[i] for i in np.argsort(yc, kind="stable")]
  layout = list(xb) + x_free + xc_by_y
  from ourjax.lax.structural import transpose
  out = transpose(out, tuple(int(i) for i in np.argsort(layout)))
  if get_aval(out).dtype != x_aval.dtype:
    from ourjax.lax.elementwise import _convert_element_type
    out = _convert_element_type(out, x_aval.dtype, x_aval.weak_type)
  return out


def _dot_transpose_rhs(ct, x, y, *, dimension_numbers, precision, preferred_element_type,
                       out_sharding):
  (xc, yc), (xb, yb) = dimension_numbers
  return _dot_transpose_lhs(ct, y, x, dimension_numbers=((yc, xc), (yb, xb)),
                            precision=precision, preferred_element_type=preferred_element_type,
                            out_sharding=out_sharding, swap_ans=True)


ad.defbilinear(dot_general_p, _dot_transpose_lhs, _dot_transpose_rhs)


def _dot_general_batch(vals, dims, dimension_numbers, precision, preferred_element_type,
                       out_sharding):
  """Both operands batched: the batch dims become a new leading batch pair.  One batched: its
  batch dim is just another free dimension, and the output's batch dim sits where that free
  dimension lands."""
  (lhs, rhs), (ld, rd) = vals, dims
  (lc, rc), (lb, rb) = dimension_numbers

  def bump(ds, b):
    return tuple(d + (d >= b) for d in ds)

  if ld is not None and rd is not None:
    new = ((bump(lc, ld), bump(rc, rd)), ((ld,) + bump(lb, ld), (rd,) + bump(rb, rd)))
    out_dim = 0
  elif ld is not None:
    l_ndim = get_aval(lhs).ndim - 1
    l_free = _free_dims(l_ndim, lc, lb)
    out_dim = len(lb) + sum(d < ld for d in l_free)
    new = ((bump(lc, ld), rc), (bump(lb, ld), rb))
  else:
    l_ndim = get_aval(lhs).ndim
    r_free = _free_dims(get_aval(rhs).ndim - 1, rc, rb)
    out_dim = l_ndim - len(lc) + sum(d < rd for d in r_free)
    new = ((lc, bump(rc, rd)), (lb, bump(rb, rd)))
  out = dot_general_p.bind(lhs, rhs, dimension_numbers=new, precision=precision,
                           preferred_element_type=preferred_element_type,
                           out_sharding=out_sharding)
  return out, out_dim


batching.batch_rules[dot_general_p] = _dot_general_batch

# ------------------------------------------------------------------------------------------------
# Convolution


class ConvDimensionNumbers(NamedTuple):
  """Where the batch, feature and spatial dimensions are.

  lhs_spec: (batch dimension, feature dimension, spatial dimensions...)
  rhs_spec: (out feature dimension, in feature dimension, spatial dimensions...)
  out_spec: (batch dimension, feature dimension, spatial dimensions...)
  """
  lhs_spec: Sequence[int]
  rhs_spec: Sequence[int]
  out_spec: Sequence[int]


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
  """Convert ``None`` (NCHW/OIHW/NCHW), a ``ConvDimensionNumbers`` or three spec strings such as
  ``('NHWC', 'HWIO', 'NHWC')`` to a ``ConvDimensionNumbers`` of integer tuples."""
  if isinstance(dimension_numbers, ConvDimensionNumbers):
    return ConvDimensionNumbers(*(tuple(int(d) for d in s) for s in dimension_numbers))
  if len(lhs_shape) != len(rhs_shape):
    raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got {len(lhs_shape)} "
                    f"and {len(rhs_shape)}.")
  if dimension_numbers is None:
    iota = tuple(range(len(lhs_shape)))
    return ConvDimensionNumbers(iota, iota, iota)
  if isinstance(dimension_numbers, (list, tuple)):
    if len(dimension_numbers) != 3:
      raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got "
                      f"{len(dimension_numbers)}.")
    if not all(isinstance(s, str) for s in dimension_numbers):
      raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                      f"{tuple(type(s) for s in dimension_numbers)}.")
    for i, s in enumerate(dimension_numbers):
      if len(s) != len(lhs_shape):
        raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to the ndim of "
                        f"lhs and rhs, got {len(s)} for lhs and rhs shapes {tuple(lhs_shape)} "
                        f"and {tuple(rhs_shape)}.")
    return ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))
  raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got "
                  f"{type(dimension_numbers)}.")


def conv_general_permutations(dimension_numbers):
  """The integer specs of three spec strings.  Spatial dimensions are ordered as they appear in
  the rhs spec (so ``window_strides[0]`` belongs to the first spatial letter of the rhs)."""
  lhs_s, rhs_s, out_s = dimension_numbers
  pairs = (("N", "C"), ("O", "I"), ("N", "C"))
  for i, (a, b) in enumerate(pairs):
    s = dimension_numbers[i]
    if not s.count(a) == s.count(b) == 1:
      raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters '{a}' and "
                      f"'{b}' exactly once, got {s}.")
    if len(s) != len(set(s)):
      raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate characters, "
                      f"got {s}.")
  if not (set(lhs_s) - set("NC") == set(rhs_s) - set("OI") == set(out_s) - set("NC")):
    raise TypeError(f"convolution dimension_numbers elements must each have the same set of "
                    f"spatial characters, got {dimension_numbers}.")
  spatial = [c for c in rhs_s if c not in "OI"]

  def perm(s, pair):
    return (s.index(pair[0]), s.index(pair[1])) + tuple(s.index(c) for c in spatial)
  return tuple(perm(s, p) for s, p in zip(dimension_numbers, pairs))


def _dilate_shape(shape, dilation):
  return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dilation))


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
  """Explicit (low, high) pads for 'SAME', 'SAME_LOWER' or 'VALID' padding: SAME gives
  ceil(in / stride) outputs, the odd unit of padding going at the end (the start for
  SAME_LOWER)."""
  if isinstance(padding, str):
    kind = padding.upper()
    if kind not in ("SAME", "SAME_LOWER", "VALID"):
      raise RuntimeError(f"Unrecognized padding type: expected 'VALID' or 'SAME', got "
                         f"{padding}.")
  else:
    raise TypeError(f"Unknown padding type: {padding}.")
  if kind == "VALID":
    return [(0, 0)] * len(in_shape)
  pads = []
  for n, w, s in zip(in_shape, window_shape, window_strides):
    out = -(-int(n) // int(s))
    total = max((out - 1) * int(s) + int(w) - int(n), 0)
    lo = total // 2 if kind == "SAME" else total - total // 2
    pads.append((lo, total - lo))
  return pads


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
  """The output shape of a convolution whose operands are in (N, C, spatial...) and
  (O, I, spatial...) order."""
  if isinstance(pads, str):
    pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
  if len(pads) != len(lhs_shape) - 2:
    raise TypeError(f"Wrong number of explicit pads for convolution: expected "
                    f"{len(lhs_shape) - 2}, got {len(pads)}.")
  padded = [n + lo + hi for n, (lo, hi) in zip(lhs_shape[2:], pads)]
  if any(p < 0 for p in padded):
    raise ValueError(f"Negative padding is larger than the size of the corresponding "
                     f"dimension: got padding={tuple(pads)} for lhs_shape[2:]="
                     f"{tuple(lhs_shape[2:])}")
  space = tuple(max(0, (p - w) // s + 1) for p, w, s in zip(padded, rhs_shape[2:], strides))
  n = lhs_shape[0] // batch_group_count if batch_group_count > 1 else lhs_shape[0]
  return (n, rhs_shape[0]) + space


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
  lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
  out = conv_shape_tuple(tuple(lhs_shape[i] for i in lhs_perm),
                         tuple(rhs_shape[i] for i in rhs_perm), window_strides, padding)
  return tuple(out[i] for i in np.argsort(out_perm))


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None,
                         out_sharding=None):
  """N-dimensional convolution (a cross-correlation: the kernel is not flipped) with strides,
  padding, input (``lhs_dilation``) and kernel (``rhs_dilation``) dilation, and feature or
  batch groups."""
  ls, rs = get_aval(lhs).shape, get_aval(rhs).shape
  dnums = conv_dimension_numbers(ls, rs, dimension_numbers)
  nsp = len(ls) - 2
  if lhs_dilation is None:
    lhs_dilation = (1,) * nsp
  elif isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
    raise ValueError("String padding is not implemented for transposed convolution using this "
                     "op. Please either exactly specify the required padding or use "
                     "conv_transpose.")
  if rhs_dilation is None:
    rhs_dilation = (1,) * nsp
  window_strides = tuple(operator.index(s) for s in window_strides)
  lhs_dilation = tuple(operator.index(d) for d in lhs_dilation)
  rhs_dilation = tuple(operator.index(d) for d in rhs_dilation)
  if isinstance(padding, str):
    lhs_sp = [ls[i] for i in dnums.lhs_spec[2:]]
    rhs_sp = _dilate_shape([rs[i] for i in dnums.rhs_spec[2:]], rhs_dilation)
    padding = padtype_to_pads(lhs_sp, rhs_sp, window_strides, padding)
  else:
    try:
      padding = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    except (ValueError, TypeError) as e:
      raise ValueError(f"padding argument to conv_general_dilated should be a string or a "
                       f"sequence of (low, high) pairs, got {padding}") from e
  return conv_general_dilated_p.bind(
      lhs, rhs, window_strides=window_strides, padding=tuple(tuple(p) for p in padding),
      lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, dimension_numbers=dnums,
      feature_group_count=operator.index(feature_group_count),
      batch_group_count=operator.index(batch_group_count),
      precision=canonicalize_precision(precision),
      preferred_element_type=_preferred(preferred_element_type, "conv_general_dilated"))


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
  """``conv_general_dilated`` in NCHW/OIHW layout without dilation."""
  return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                              preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
  return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                              rhs_dilation=rhs_dilation, precision=precision,
                              preferred_element_type=preferred_element_type)


def _conv_shape(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                dimension_numbers, feature_group_count, batch_group_count, **_):
  name = "conv_general_dilated"
  if lhs.ndim != rhs.ndim:
    raise ValueError(f"{name} lhs and rhs must have the same number of dimensions, but got "
                     f"{lhs.shape} and {rhs.shape}.")
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  for s in dimension_numbers:
    if sorted(s) != list(range(lhs.ndim)):
      raise ValueError(f"{name} dimension_numbers {tuple(dimension_numbers)} are not "
                       f"permutations of the {lhs.ndim} dimensions of the operands")
  G, B = feature_group_count, batch_group_count
  if G <= 0:
    raise ValueError(f"{name} feature_group_count must be a positive integer, got {G}.")
  c = lhs.shape[lhs_spec[1]]
  if c % G:
    raise ValueError(f"{name} feature_group_count must divide lhs feature dimension size, but "
                     f"{G} does not divide {c}.")
  if c // G != rhs.shape[rhs_spec[1]]:
    raise ValueError(f"{name} lhs feature dimension size divided by feature_group_count must "
                     f"equal the rhs input feature dimension size, but {c} // {G} != "
                     f"{rhs.shape[rhs_spec[1]]}.")
  o = rhs.shape[rhs_spec[0]]
  if o % G:
    raise ValueError(f"{name} rhs output feature dimension size must be a multiple of "
                     f"feature_group_count, but {o} is not a multiple of {G}.")
  if B <= 0:
    raise ValueError(f"{name} batch_group_count must be a positive integer, got {B}.")
  n = lhs.shape[lhs_spec[0]]
  if B > 1 and n % B:
    raise ValueError(f"{name} batch_group_count must divide lhs batch dimension size, but {B} "
                     f"does not divide {n}.")
  if o % B:
    raise ValueError(f"{name} rhs output feature dimension size must be a multiple of "
                     f"batch_group_count, but {o} is not a multiple of {B}.")
  if B > 1 and G > 1:
    raise ValueError(f"At most one of batch_group_count and feature_group_count may be > 1, got "
                     f"batch_group_count={B} and feature_group_count={G}")
  nsp = lhs.ndim - 2
  for nm, v in (("window_strides", window_strides), ("padding", padding),
                ("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
    if len(v) != nsp:
      raise ValueError(f"{name} window and {nm} must have the same number of dimensions, "
                       f"but got {nsp} and {len(v)} (one entry per spatial dimension: "
                       f"{tuple(v)})")
  for nm, v in (("window_strides", window_strides), ("lhs_dilation", lhs_dilation),
                ("rhs_dilation", rhs_dilation)):
    if any(s <= 0 for s in v):
      raise ValueError(f"{name} {nm} must be positive, got {tuple(v)}")
  lhs_t = _dilate_shape([lhs.shape[i] for i in lhs_spec], (1, 1) + tuple(lhs_dilation))
  rhs_t = _dilate_shape([rhs.shape[i] for i in rhs_spec], (1, 1) + tuple(rhs_dilation))
  out_t = conv_shape_tuple(lhs_t, rhs_t, window_strides, padding, B)
  return tuple(out_t[i] for i in np.argsort(out_spec))


def _conv_dtype(lhs, rhs, *, preferred_element_type, **_):
  name = "conv_general_dilated"
  for a in (lhs, rhs):
    if not (a.dtype == np.bool_ or dtypes.is_integer(a.dtype) or dtypes.is_inexact(a.dtype)):
      raise TypeError(f"{name} does not accept dtype {a.dtype.name}.")
  if lhs.dtype != rhs.dtype:
    raise TypeError(f"{name} requires arguments to have the same dtypes, got {lhs.dtype.name}, "
                    f"{rhs.dtype.name}.")
  if preferred_element_type is None:
    return lhs.dtype
  _validate_preferred(lhs.dtype, preferred_element_type)
  return np.dtype(preferred_element_type)


def _validate_preferred(input_dtype, preferred):
  i, p = np.dtype(input_dtype), np.dtype(preferred)
  ok = ((dtypes.is_integer(i) and (dtypes.is_integer(p) or dtypes.is_float(p)))
        or (dtypes.is_float(i) and dtypes.is_float(p))
        or (dtypes.is_complex(i) and dtypes.is_complex(p)) or (i == np.bool_ and p == np.bool_))
  if not ok:
    raise TypeError("Input type is incompatible with `preferred_element_type`. The compatible "
                    "combinations of (input_type, preferred_element_type) are (integral, "
                    "integral), (integral, floating), (floating, floating), (complex, complex).")
  if np.issubdtype(i, np.signedinteger) and np.issubdtype(p, np.unsignedinteger):
    raise TypeError("`preferred_element_type` must have the same signedness as the original "
                    "type.")
  if p.itemsize < i.itemsize:
    raise TypeError("`preferred_element_type` must not be narrower than the original type.")


conv_general_dilated_p = standard_primitive("conv_general_dilated", _conv_shape, _conv_dtype,
                                            lambda lhs, rhs, **_: all_weak(lhs, rhs))


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count, precision,
               preferred_element_type):
  from ourjax.backends import reference_ops
  out = _conv_dtype(ShapedArray(lhs.shape, lhs.dtype), ShapedArray(rhs.shape, rhs.dtype),
                    preferred_element_type=preferred_element_type)
  return reference_ops.conv_general_dilated(
      lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, tuple(dimension_numbers),
      feature_group_count, batch_group_count, preferred_element_type=out)


conv_general_dilated_p.def_impl(_conv_impl)


def _split_axis(x, axis, size):
  """Split dimension ``axis`` of x into (size, rest)."""
  from ourjax.lax.structural import reshape
  shape = list(get_aval(x).shape)
  shape[axis:axis + 1] = [size, shape[axis] // size]
  return reshape(x, tuple(shape))


def _merge_axis(x, src, dst):
  """Move dimension ``src`` of x next to (before) dimension ``dst`` -- numbered as if ``src``
  were removed -- and merge the two, ``src`` being the major part."""
  from ourjax.lax.structural import reshape, transpose
  shape = get_aval(x).shape
  perm = [i for i in range(len(shape)) if i != src]
  perm.insert(dst, src)
  new_shape = [shape[i] for i in range(len(shape)) if i != src]
  new_shape[dst] *= shape[src]
  return reshape(transpose(x, tuple(perm)), tuple(new_shape))


def _swap_spec(spec):
  return (spec[1], spec[0]) + tuple(spec[2:])


def _conv_transpose_lhs(ct, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        dimension_numbers, feature_group_count, batch_group_count, precision,
                        preferred_element_type):
  """The cotangent of the input: a convolution of the output cotangent with the spatially
  reversed kernel, its in/out features swapped, strides and input dilation exchanged, and the
  padding that makes the result the input's size.  Feature (or batch) groups move from the
  kernel's output features to its input features."""
  from ourjax import lax
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  lhs_shape = lhs.aval.shape
  rhs_shape = get_aval(rhs).shape
  groups = feature_group_count
  if feature_group_count > 1 or batch_group_count > 1:
    groups = max(feature_group_count, batch_group_count)
    rhs = _split_axis(rhs, rhs_spec[0], groups)
    rhs = _merge_axis(rhs, rhs_spec[0], rhs_spec[1])
  trans = ConvDimensionNumbers(tuple(out_spec), _swap_spec(rhs_spec), tuple(lhs_spec))
  in_sp = [lhs_shape[i] for i in lhs_spec[2:]]
  k_sp = [rhs_shape[i] for i in rhs_spec[2:]]
  out_sp = [get_aval(ct).shape[i] for i in out_spec[2:]]
  pads = _vjp_lhs_padding(in_sp, k_sp, window_strides, out_sp, padding, lhs_dilation,
                          rhs_dilation)
  kernel = lax.rev(rhs, tuple(rhs_spec[2:]))
  if get_aval(kernel).dtype != get_aval(ct).dtype:
    kernel = lax.convert_element_type(kernel, get_aval(ct).dtype)
  out = conv_general_dilated(ct, kernel, window_strides=lhs_dilation, padding=pads,
                             lhs_dilation=window_strides, rhs_dilation=rhs_dilation,
                             dimension_numbers=trans, feature_group_count=groups,
                             batch_group_count=1, precision=precision,
                             preferred_element_type=preferred_element_type)
  if batch_group_count > 1:
    out = _split_axis(out, lhs_spec[1], batch_group_count)
    out = _merge_axis(out, lhs_spec[1], lhs_spec[0])
  if get_aval(out).dtype != lhs.aval.dtype:
    from ourjax.lax.elementwise import _convert_element_type
    out = _convert_element_type(out, lhs.aval.dtype, lhs.aval.weak_type)
  return out


def _conv_transpose_rhs(ct, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        dimension_numbers, feature_group_count, batch_group_count, precision,
                        preferred_element_type):
  """The cotangent of the kernel: a convolution of the input with the output cotangent as the
  kernel (batch and feature roles swapped); feature groups become batch groups and back."""
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  rhs_aval = rhs.aval
  if get_aval(ct).size == 0:
    return ad.Zero(ad.tangent_aval(rhs_aval))
  lhs_shape = get_aval(lhs).shape
  fg, bg = feature_group_count, batch_group_count
  if bg > 1:
    fg, bg = bg, 1
  elif fg > 1:
    fg, bg = 1, fg
  trans = ConvDimensionNumbers(_swap_spec(lhs_spec), _swap_spec(out_spec), _swap_spec(rhs_spec))
  in_sp = [lhs_shape[i] for i in lhs_spec[2:]]
  k_sp = [rhs_aval.shape[i] for i in rhs_spec[2:]]
  out_sp = [get_aval(ct).shape[i] for i in out_spec[2:]]
  pads = _vjp_rhs_padding(in_sp, k_sp, window_strides, out_sp, padding, lhs_dilation,
                          rhs_dilation)
  if get_aval(lhs).dtype != get_aval(ct).dtype:
    from ourjax import lax
    lhs = lax.convert_element_type(lhs, get_aval(ct).dtype)
  out = conv_general_dilated(lhs, ct, window_strides=rhs_dilation, padding=pads,
                             lhs_dilation=lhs_dilation, rhs_dilation=window_strides,
                             dimension_numbers=trans, feature_group_count=fg,
                             batch_group_count=bg, precision=precision,
                             preferred_element_type=preferred_element_type)
  if get_aval(out).dtype != rhs_aval.dtype:
    from ourjax.lax.elementwise import _convert_element_type
    out = _convert_element_type(out, rhs_aval.dtype, rhs_aval.weak_type)
  return out


def _vjp_lhs_padding(in_shape, window, strides, out_shape, padding, lhs_dilation, rhs_dilation):
  lhs_d = _dilate_shape(in_shape, lhs_dilation)
  rhs_d = _dilate_shape(window, rhs_dilation)
  out_d = _dilate_shape(out_shape, strides)
  pads = []
  for ld, rd, od, (lo, _) in zip(lhs_d, rhs_d, out_d, padding):
    before = rd - lo - 1
    pads.append((before, ld + rd - 1 - od - before))
  return pads


def _vjp_rhs_padding(in_shape, window, strides, out_shape, padding, lhs_dilation, rhs_dilation):
  lhs_d = _dilate_shape(in_shape, lhs_dilation)
  rhs_d = _dilate_shape(window, rhs_dilation)
  out_d = _dilate_shape(out_shape, strides)
  return [(lo, (od - ld) + (rd - lo - 1))
          for ld, rd, od, (lo, _) in zip(lhs_d, rhs_d, out_d, padding)]


ad.defbilinear(conv_general_dilated_p, _conv_transpose_lhs, _conv_transpose_rhs)


def _conv_batch(vals, dims, *, window_strides, padding, lhs_dilation, rhs_dilation,
                dimension_numbers, feature_group_count, batch_group_count, precision,
                preferred_element_type):
  """vmap folds the batch into the convolution: a batched input into its batch dimension, a
  batched kernel into its output features, both into feature (or batch) groups."""
  (lhs, rhs), (ld, rd) = vals, dims
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  params = dict(window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
                rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                precision=precision, preferred_element_type=preferred_element_type)
  size = get_aval(lhs).shape[ld] if ld is not None else get_aval(rhs).shape[rd]
  if size == 0:
    from ourjax.lax.structural import full
    la = get_aval(lhs) if ld is None else ShapedArray(
        batching.shape_without_bdim(lhs, ld), get_aval(lhs).dtype)
    ra = get_aval(rhs) if rd is None else ShapedArray(
        batching.shape_without_bdim(rhs, rd), get_aval(rhs).dtype)
    aval = conv_general_dilated_p.abstract_eval(
        la, ra, feature_group_count=feature_group_count, batch_group_count=batch_group_count,
        **params)
    return full((0,) + aval.shape, 0, aval.dtype), 0
  G, B = feature_group_count, batch_group_count
  bind = conv_general_dilated_p.bind
  if ld is not None and rd is not None:
    if B > 1:
      new_lhs = _merge_axis(lhs, ld, lhs_spec[0])
      B *= size
    else:
      new_lhs = _merge_axis(lhs, ld, lhs_spec[1])
      G *= size
    new_rhs = _merge_axis(rhs, rd, rhs_spec[0])
    out = bind(new_lhs, new_rhs, feature_group_count=G, batch_group_count=B, **params)
    return _split_axis(out, out_spec[1], size), out_spec[1]
  if ld is not None:
    if B == 1:
      new_lhs = _merge_axis(lhs, ld, lhs_spec[0])
    else:   # the vmapped batch goes inside each batch group
      n_at = lhs_spec[0] + (ld <= lhs_spec[0])
      new_lhs = _split_axis(lhs, n_at, B)
      new_lhs = _merge_axis(new_lhs, ld + (lhs_spec[0] < ld), lhs_spec[0] + 1)
      new_lhs = _merge_axis(new_lhs, lhs_spec[0], lhs_spec[0])
    out = bind(new_lhs, rhs, feature_group_count=G, batch_group_count=B, **params)
    return _split_axis(out, out_spec[0], size), out_spec[0]
  if G == 1 and B == 1:
    new_rhs = _merge_axis(rhs, rd, rhs_spec[0])
    out = bind(lhs, new_rhs, feature_group_count=G, batch_group_count=B, **params)
    return _split_axis(out, out_spec[1], size), out_spec[1]
  # groups stay outermost in the kernel's output features: (groups, vmapped batch, per group)
  groups = max(G, B)
  o_at = rhs_spec[0] + (rd <= rhs_spec[0])
  new_rhs = _split_axis(rhs, o_at, groups)
  new_rhs = _merge_axis(new_rhs, rd + (rhs_spec[0] < rd), rhs_spec[0] + 1)
  new_rhs = _merge_axis(new_rhs, rhs_spec[0], rhs_spec[0])
  out = bind(lhs, new_rhs, feature_group_count=G, batch_group_count=B, **params)
  out = _split_axis(out, out_spec[1], groups)
  out = _split_axis(out, out_spec[1] + 1, size)
  out = _merge_axis(out, out_spec[1], out_spec[1] + 1)
  return out, out_spec[1]


batching.batch_rules[conv_general_dilated_p] = _conv_batch


def _conv_transpose_padding(k, s, padding):
  """(before, after) padding of the dilated input for a transposed convolution."""
  if padding == "SAME":
    total = k + s - 2
    before = k - 1 if s > k - 1 else -(-total // 2)
  elif padding == "VALID":
    total = k + s - 2 + max(k - s, 0)
    before = k - 1
  elif isinstance(padding, tuple):
    p = tuple(k - q - 1 for q in padding)
    before, total = p[0], sum(p)
  else:
    raise ValueError(f"Invalid padding mode: {padding}")
  return before, total - before


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel: bool = False, precision=None, preferred_element_type=None,
                   use_consistent_padding: bool = False):
  """A transposed ("fractionally strided") convolution: the input is dilated by ``strides``.
  With ``transpose_kernel`` the kernel is flipped spatially and its in/out features swapped,
  which makes this the gradient of ``conv_general_dilated`` with the same arguments.
  ``padding`` 'SAME'/'VALID' names the forward convolution's padding; explicit (low, high)
  pairs pad the transposed convolution itself, unless ``use_consistent_padding``: then they
  are the forward convolution's too (PyTorch's meaning), so the transposed convolution pads
  ``(k - 1 - low, k - 1 - high + max(stride - k, 0))`` with ``k`` the dilated kernel size."""
  from ourjax import lax
  ls, rs = get_aval(lhs).shape, get_aval(rhs).shape
  nd = len(ls)
  if dimension_numbers is None:
    defaults = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"), 4: ("NHWC", "HWIO", "NHWC"),
                5: ("NHWDC", "HWDIO", "NHWDC")}
    if nd not in defaults:
      raise ValueError("No 4+ dimensional dimension_number defaults.")
    dimension_numbers = defaults[nd]
  dn = conv_dimension_numbers(ls, rs, dimension_numbers)
  k_sp = [rs[i] for i in dn.rhs_spec[2:]]
  if rhs_dilation is None:
    rhs_dilation = (1,) * (nd - 2)
  eff = _dilate_shape(k_sp, rhs_dilation)
  if isinstance(padding, str) and padding in ("SAME", "VALID"):
    pads = [_conv_transpose_padding(k, s, padding) for k, s in zip(eff, strides)]
  elif use_consistent_padding:
    pads = [(k - 1 - lo, k - 1 - hi + max(s - k, 0))
            for k, s, (lo, hi) in zip(eff, strides, padding)]
  else:
    pads = padding
  if transpose_kernel:
    rhs = lax.rev(rhs, tuple(dn.rhs_spec[2:]))
    perm = list(range(nd))
    perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = perm[dn.rhs_spec[1]], perm[dn.rhs_spec[0]]
    rhs = lax.transpose(rhs, tuple(perm))
  return conv_general_dilated(lhs, rhs, (1,) * (nd - 2), pads, strides, rhs_dilation, dn,
                              precision=precision, preferred_element_type=preferred_element_type)


# ------------------------------------------------------------------------------------------------
# Lowerings: one HLO dot / convolution each, typed with the primitive's result type (operands of
# different types are passed as they are; the result type says how they are accumulated).


def _register_lowerings():
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(dot_general_p)
  def _dot_general_lower(ctx, avals_in, avals_out, lhs, rhs, *, dimension_numbers, precision,
                         preferred_element_type, out_sharding=None, **_):
    names = None if precision is None else tuple(str(p).lower() for p in precision)
    return ctx.builder.dot_general(lhs, rhs, dimension_numbers,
                                   preferred_element_type=avals_out[0].dtype,
                                   operand_precision=names)

  @register_lowering(conv_general_dilated_p)
  def _conv_lower(ctx, avals_in, avals_out, lhs, rhs, *, window_strides, padding, lhs_dilation,
                  rhs_dilation, dimension_numbers, feature_group_count, batch_group_count,
                  precision, preferred_element_type, **_):
    return ctx.builder.convolution(
        lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
        tuple(tuple(s) for s in dimension_numbers), feature_group_count, batch_group_count,
        preferred_element_type=avals_out[0].dtype,
        operand_precision=None if precision is None else tuple(str(p).lower()
                                                                for p in precision))


_register_lowerings()
