"""Shape-changing primitives: broadcast_in_dim, reshape, transpose, squeeze, expand_dims, iota,
and the constant creators built on them.  Each primitive is followed by all of its rules."""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes
from ourjax.core import ShapedArray, get_aval
from ourjax.interpreters import ad, batching
from ourjax.lax._utils import as_array, as_shape, canonicalize_axis, standard_primitive


def _weak(x, **_):
  return x.weak_type


# ------------------------------------------------------------------------------------------------
# broadcast_in_dim: operand dim i becomes output dim broadcast_dimensions[i]


def broadcast_in_dim(operand, shape, broadcast_dimensions):
  shape = as_shape(shape)
  broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
  aval = get_aval(operand)
  if aval.shape == shape and broadcast_dimensions == tuple(range(len(shape))):
    return as_array(operand)
  if (len(broadcast_dimensions) == aval.ndim and
      len(set(broadcast_dimensions)) == aval.ndim and
      list(broadcast_dimensions) != sorted(broadcast_dimensions)):
    # JAX takes the operand's dimensions to the output's in any order: the primitive (and every
    # rule of it) keeps them in order, the operand is transposed to match
    perm = tuple(sorted(range(aval.ndim), key=lambda i: broadcast_dimensions[i]))
    operand = transpose(operand, perm)
    broadcast_dimensions = tuple(sorted(broadcast_dimensions))
  return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=broadcast_dimensions,
                                 sharding=None)


def broadcast(operand, sizes):
  """Prepend dimensions of the given sizes."""
  sizes = as_shape(sizes)
  aval = get_aval(operand)
  return broadcast_in_dim(operand, sizes + aval.shape,
                          tuple(range(len(sizes), len(sizes) + aval.ndim)))


def broadcast_to_rank(x, rank: int):
  aval = get_aval(x)
  if aval.ndim >= rank:
    return as_array(x)
  return broadcast(x, (1,) * (rank - aval.ndim))


def _broadcast_in_dim_shape(x, shape, broadcast_dimensions, sharding):
  if len(broadcast_dimensions) != x.ndim:
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must have length equal to operand "
                    f"ndim; got broadcast_dimensions {broadcast_dimensions} for operand ndim "
                    f"{x.ndim}.")
  if len(shape) < x.ndim:
    raise TypeError(f"broadcast_in_dim target broadcast shape must have equal or higher rank "
                    f"to the operand shape; got operand ndim {x.ndim} and target broadcast "
                    f"ndim {len(shape)}.")
  if any(d < 0 for d in broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must have every element be "
                    f"nonnegative, got {broadcast_dimensions}.")
  if any(d >= len(shape) for d in broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must be a subset of output "
                    f"dimensions, got {broadcast_dimensions} for operand ndim {x.ndim} and "
                    f"shape {shape}.")
  if len(set(broadcast_dimensions)) != len(broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must not contain duplicates, got "
                    f"broadcast_dimensions {broadcast_dimensions}")
  if list(broadcast_dimensions) != sorted(broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must be strictly increasing; got "
                    f"broadcast_dimensions {broadcast_dimensions}")
  for i, d in enumerate(broadcast_dimensions):
    if x.shape[i] != 1 and x.shape[i] != shape[d]:
      raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be equal "
                      f"to their corresponding dimensions in the target broadcast shape; got "
                      f"operand of shape {x.shape}, target broadcast shape {shape}, "
                      f"broadcast_dimensions {broadcast_dimensions} ")
  return tuple(shape)


def _broadcast_in_dim_impl(x, shape, broadcast_dimensions, sharding):
  """A read-only broadcast view of ``x`` (no copy: an eager ``x + row`` then reads the row
  where it is, as a fused executable would), copied only where ``x`` is a caller's writable
  buffer (an Array never aliases one)."""
  expanded = [1] * len(shape)
  for i, d in enumerate(broadcast_dimensions):
    expanded[d] = x.shape[i]
  xr = x.reshape(expanded)
  if type(x) is np.ndarray and not x.flags.writeable:
    if xr.flags.c_contiguous:      # (the view made directly: half of np.broadcast_to's time)
      strides = tuple([0 if n == 1 and m != 1 else s
                       for n, m, s in zip(xr.shape, shape, xr.strides)])
      return np.ndarray(shape, xr.dtype, xr, 0, strides)
    return np.broadcast_to(xr, shape)
  return np.broadcast_to(xr, shape).copy()


broadcast_in_dim_p = standard_primitive("broadcast_in_dim", _broadcast_in_dim_shape,
                                        lambda x, **_: x.dtype, _weak)
broadcast_in_dim_p.def_impl(_broadcast_in_dim_impl)
# printed like JAX: the shape is in the result type; empty dims and a None sharding are hidden
core.pp_param_rules[broadcast_in_dim_p] = lambda params: [
    (k, v) for k, v in sorted(params.items())
    if k != "shape" and not (k == "broadcast_dimensions" and v == ())
    and not (k == "sharding" and v is None)]


def _broadcast_in_dim_transpose(ct, x, shape, broadcast_dimensions, sharding):
  from ourjax.lax.reductions import reduce_sum
  in_shape = x.aval.shape
  unit = tuple(d for i, d in enumerate(broadcast_dimensions)
               if in_shape[i] == 1 and shape[d] != 1)
  summed = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
  out = reduce_sum(ct, summed + unit) if summed or unit else ct
  return [reshape(out, in_shape)]


ad.deflinear(broadcast_in_dim_p, _broadcast_in_dim_transpose)


def _broadcast_in_dim_batch(vals, dims, shape, broadcast_dimensions, sharding):
  # The batch dimension goes right after the output dimension of the operand dimension before
  # it, so the operand is used as it is and broadcast_dimensions stays increasing.
  (x,), (d,) = vals, dims
  size = get_aval(x).shape[d]
  out_d = broadcast_dimensions[d - 1] + 1 if d else 0
  new_shape = tuple(shape[:out_d]) + (size,) + tuple(shape[out_d:])
  new_dims = broadcast_dimensions[:d] + (out_d,) + tuple(b + 1 for b in broadcast_dimensions[d:])
  return broadcast_in_dim(x, new_shape, new_dims), out_d


batching.batch_rules[broadcast_in_dim_p] = _broadcast_in_dim_batch

# ------------------------------------------------------------------------------------------------
# reshape (row-major; `dimensions` is not supported: transpose first)


def reshape(operand, new_sizes, dimensions=None):
  new_sizes = as_shape(new_sizes)
  aval = get_aval(operand)
  if dimensions is not None and tuple(dimensions) != tuple(range(aval.ndim)):
    operand = transpose(operand, dimensions)
  if aval.shape == new_sizes:
    return as_array(operand)
  return reshape_p.bind(operand, new_sizes=new_sizes, dimensions=None, sharding=None)


def _reshape_shape(x, new_sizes, dimensions, sharding):
  if any(d < 0 for d in new_sizes):
    raise TypeError(f"reshape new_sizes must all be positive, got {new_sizes}.")
  if int(np.prod(new_sizes, dtype=np.int64)) != x.size:
    raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} (of total "
                    f"size {int(np.prod(new_sizes))}) for shape {x.shape} (of total size "
                    f"{x.size}).")
  return tuple(new_sizes)


reshape_p = standard_primitive("reshape", _reshape_shape, lambda x, **_: x.dtype, _weak)
reshape_p.def_impl(lambda x, new_sizes, dimensions, sharding: x.reshape(new_sizes))
ad.deflinear(reshape_p, lambda ct, x, **_: [reshape(ct, x.aval.shape)])


def _reshape_batch(vals, dims, new_sizes, dimensions, sharding):
  (x,), (d,) = vals, dims
  x = batching.moveaxis(x, d, 0)
  return reshape(x, (get_aval(x).shape[0],) + tuple(new_sizes)), 0


batching.batch_rules[reshape_p] = _reshape_batch

# ------------------------------------------------------------------------------------------------
# transpose


def transpose(operand, permutation):
  permutation = tuple(int(p) for p in permutation)
  if permutation == tuple(range(len(permutation))) and get_aval(operand).ndim == len(permutation):
    return as_array(operand)
  return transpose_p.bind(operand, permutation=permutation)


def _transpose_shape(x, permutation):
  if sorted(permutation) != list(range(x.ndim)):
    raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                    f"permutation {permutation} for operand shape {x.shape}.")
  return tuple(x.shape[p] for p in permutation)


transpose_p = standard_primitive("transpose", _transpose_shape, lambda x, **_: x.dtype, _weak)
def _transpose_impl(x, permutation):
  """The transposed copy.  When the last axis moves and the array is large, the copy goes tile
  by tile: NumPy's one strided copy misses the cache on every element of one side, the tiles stay
  in it.  A tile is 256 bytes of the output's rows (64 float32) by up to 1024 elements of the
  input's rows, the fastest of the shapes measured (2-core Xeon, 1024x1024 float32: 1.3 ms a
  copy against 1.6 ms with 128x128 tiles and 6-10 ms for the one strided copy; float64: 1.9
  against 2.1 ms)."""
  v = np.transpose(x, permutation)
  nd = x.ndim
  if nd < 2 or v.size < 1 << 16 or permutation[-1] == nd - 1:
    return v.copy()
  a, b = nd - 1, permutation.index(nd - 1)    # the output's last axis; the input's last axis
  tile_a, tile_b = max(1, 256 // v.dtype.itemsize), 1024
  if v.shape[a] < 2 * tile_a:
    return v.copy()
  out = np.empty(v.shape, v.dtype)
  idx = [slice(None)] * nd
  for i in range(0, v.shape[a], tile_a):
    idx[a] = slice(i, i + tile_a)
    for j in range(0, v.shape[b], tile_b):
      idx[b] = slice(j, j + tile_b)
      t = tuple(idx)
      out[t] = v[t]
  return out


transpose_p.def_impl(_transpose_impl)
ad.deflinear(transpose_p,
             lambda ct, x, permutation: [transpose(ct, tuple(np.argsort(permutation)))])


def _transpose_batch(vals, dims, permutation):
  # one transpose that also brings the batch dimension to the front
  (x,), (d,) = vals, dims
  return transpose(x, (d,) + tuple(p + (p >= d) for p in permutation)), 0


batching.batch_rules[transpose_p] = _transpose_batch

# ------------------------------------------------------------------------------------------------
# squeeze / expand_dims


def squeeze(array, dimensions):
  aval = get_aval(array)
  dims = [canonicalize_axis(operator.index(d), aval.ndim) for d in dimensions]
  if len(set(dims)) != len(dims):
    raise ValueError(f"dimensions are not unique: {tuple(dimensions)}")
  dims = tuple(sorted(dims))
  if not dims:
    return as_array(array)
  return squeeze_p.bind(array, dimensions=dims)


def _squeeze_shape(x, dimensions):
  for d in dimensions:
    if x.shape[d] != 1:
      raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one, "
                       f"got shape={x.shape} and dimensions={dimensions}")
  return tuple(s for i, s in enumerate(x.shape) if i not in dimensions)


squeeze_p = standard_primitive("squeeze", _squeeze_shape, lambda x, **_: x.dtype, _weak)
squeeze_p.def_impl(lambda x, dimensions: x.reshape(_squeeze_shape(x, dimensions)))
ad.deflinear(squeeze_p, lambda ct, x, dimensions: [reshape(ct, x.aval.shape)])


def _squeeze_batch(vals, dims, dimensions):
  (x,), (d,) = vals, dims
  dimensions = tuple(k + (k >= d) for k in dimensions)
  return squeeze(x, dimensions), d - sum(k < d for k in dimensions)


batching.batch_rules[squeeze_p] = _squeeze_batch


def expand_dims(array, dimensions):
  """Insert size-1 dimensions (positions in the result)."""
  aval = get_aval(array)
  ndim_out = aval.ndim + len(dimensions)
  dims = sorted(canonicalize_axis(d, ndim_out) for d in dimensions)
  shape = list(aval.shape)
  for d in dims:
    shape.insert(d, 1)
  return broadcast_in_dim(array, tuple(shape), tuple(i for i in range(ndim_out) if i not in dims))


# ------------------------------------------------------------------------------------------------
# iota and constants


def iota(dtype, size: int):
  return broadcasted_iota(dtype, (size,), 0)


def broadcasted_iota(dtype, shape, dimension: int):
  shape = as_shape(shape)
  dtype = dtypes.canonicalize_dtype(dtype)
  if dtype == np.bool_:
    raise TypeError("iota does not accept dtype bool. Accepted dtypes are subtypes of integer, "
                    "floating, complexfloating.")
  return iota_p.bind(dtype=dtype, shape=shape, dimension=canonicalize_axis(dimension, len(shape)),
                     sharding=None)


def _iota_impl(dtype, shape, dimension, sharding):
  idx = np.arange(shape[dimension], dtype=np.int64)
  bshape = [1] * len(shape)
  bshape[dimension] = shape[dimension]
  return np.broadcast_to(idx.reshape(bshape), shape).astype(dtype)


iota_p = core.Primitive("iota")
iota_p.def_abstract_eval(lambda dtype, shape, dimension, sharding: ShapedArray(shape, dtype))
iota_p.def_impl(_iota_impl)


def full(shape, fill_value, dtype=None, *, sharding=None, weak_type: bool = False):
  """An array of ``shape`` filled with a scalar (``broadcast_in_dim`` of a 0-d value), put
  where ``sharding`` (an ourjax Device or Sharding) asks, committed there, as JAX's."""
  return _placed(_full(shape, fill_value, dtype, weak_type), sharding)


def _placed(out, sharding):
  """``out`` put on ``sharding`` (a Device or Sharding; anything else places nothing)."""
  if sharding is None or isinstance(out, core.Tracer):
    return out
  from ourjax._device_api import _is_device_spec, device_put
  return device_put(out, sharding) if _is_device_spec(sharding) else out


def _full(shape, fill_value, dtype, weak_type):
  from ourjax.lax.elementwise import _convert_element_type
  shape = as_shape(shape)
  fill_aval = get_aval(fill_value)
  if fill_aval.ndim:
    raise TypeError(f"full must be called with scalar fill_value, got fill_value.shape "
                    f"{fill_aval.shape}.")
  if dtype is None:
    dtype, weak_type = fill_aval.dtype, fill_aval.weak_type
  dtype = dtypes.canonicalize_dtype(dtype)
  if not isinstance(fill_value, core.Tracer):
    from ourjax.array import Array, to_numpy
    from ourjax.lax.elementwise import _convert_impl
    if type(fill_value) is int and dtype.kind in "iu":
      # a Python int wraps to an integer dtype as in JAX (full((2,), 2**32 - 1, uint32),
      # full((2,), -1, uint8)), whatever the default integer dtype could hold
      bits = dtype.itemsize * 8
      v = np.asarray(fill_value & ((1 << bits) - 1), np.dtype(f"u{dtype.itemsize}")).view(dtype)
      return broadcast_in_dim(Array._from_result(v, ShapedArray((), dtype, weak_type)), shape, ())
    if type(fill_value) is int and dtype.kind in "fc":
      fill_value = float(fill_value) if dtype.kind == "f" else complex(fill_value)  # (2**32)
    v = _convert_impl(np.asarray(to_numpy(fill_value)), dtype, weak_type)
    return broadcast_in_dim(Array._from_result(v, ShapedArray((), dtype, weak_type)), shape, ())
  fill_value = _convert_element_type(fill_value, dtype, weak_type)
  return broadcast_in_dim(fill_value, shape, ())


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
  """An array like ``x`` (its shape and dtype unless given) filled with ``fill_value``.  ``x``
  may be anything with ``shape`` and ``dtype`` (a ``ShapeDtypeStruct``, ...), as JAX's.  Put
  where ``sharding`` asks; without it, as JAX's, a strongly typed result goes where a
  committed concrete ``x`` is (its sharding: when the shape is x's or x is replicated)."""
  out = _full_like(x, fill_value, dtype, shape)
  if sharding is None and not isinstance(x, core.Tracer) and not isinstance(out, core.Tracer) \
     and not getattr(out, "weak_type", False):
    from ourjax.backends import committed_device
    xs = getattr(x, "_sharding", None)
    if xs is not None and (tuple(out.shape) == tuple(x.shape) or xs.is_fully_replicated):
      sharding = xs
    elif xs is None:
      sharding = committed_device(x)
  return _placed(out, sharding)


def _full_like(x, fill_value, dtype, shape):
  try:
    aval = get_aval(x)
  except TypeError:
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
      raise
    x_shape, x_dtype, weak = tuple(x.shape), x.dtype, getattr(x, "weak_type", False)
  else:
    x_shape, x_dtype, weak = aval.shape, aval.dtype, aval.weak_type
  return full(x_shape if shape is None else shape, fill_value,
              x_dtype if dtype is None else dtype, weak_type=weak if dtype is None else False)


def shape_as_value(shape):
  """A shape as an integer array (int32, int64 for sizes past int32): an empty Array for (),
  otherwise a NumPy array, as JAX's for static shapes (ourjax has no symbolic dimensions)."""
  shape = tuple(operator.index(d) for d in shape)
  dt = np.dtype(np.int64 if any(d > np.iinfo(np.int32).max for d in shape) else np.int32)
  if not shape:
    return full((0,), np.array(0, dt))
  return np.asarray(shape, dtype=dt)


def zeros_like_array(x):
  return full_like(x, 0)


# ------------------------------------------------------------------------------------------------
# rev: reverse the order of elements along `dimensions`


def rev(operand, dimensions):
  dimensions = tuple(int(d) for d in dimensions)
  if not dimensions:
    return as_array(operand)
  return rev_p.bind(operand, dimensions=dimensions)


def _rev_shape(x, dimensions):
  if len(set(dimensions)) != len(dimensions):
    raise TypeError(f"rev dimensions must be unique, got {dimensions}.")
  if dimensions and not all(0 <= d < x.ndim for d in dimensions):
    raise TypeError(f"rev dimensions must all be in the range [0, {x.ndim}) for operand of "
                    f"shape {x.shape}, got dimensions {dimensions}.")
  return x.shape


rev_p = standard_primitive("rev", _rev_shape, lambda x, **_: x.dtype, _weak)
rev_p.def_impl(lambda x, dimensions: np.flip(x, dimensions).copy())
ad.deflinear(rev_p, lambda ct, x, dimensions: [rev(ct, dimensions)])


def _rev_batch(vals, dims, dimensions):
  (x,), (d,) = vals, dims
  return rev(x, tuple(k + (k >= d) for k in dimensions)), d


batching.batch_rules[rev_p] = _rev_batch

# ------------------------------------------------------------------------------------------------
# pad: (low, high, interior) per dimension; low/high may be negative (they then crop)


def pad(operand, padding_value, padding_config):
  try:
    config = tuple((int(lo), int(hi), int(i)) for lo, hi, i in padding_config)
  except (TypeError, ValueError):
    raise TypeError(f"pad padding_config must be a sequence of (low, high, interior) integer "
                    f"triples, got {padding_config!r}.") from None
  return pad_p.bind(operand, padding_value, padding_config=config)


def _pad_shape(x, padding_value, padding_config):
  if padding_value.ndim != 0:
    raise ValueError(f"pad padding_value must be a scalar; got padding_value of shape "
                     f"{padding_value.shape}")
  if len(padding_config) != x.ndim:
    raise ValueError(f"length of padding_config must equal the number of axes of operand, got "
                     f"padding_config {padding_config} for operand shape {x.shape}")
  if any(i < 0 for _, _, i in padding_config):
    raise ValueError(f"interior padding in padding_config must be nonnegative, got "
                     f"padding_config {padding_config}")
  out = tuple(lo + hi + n + max(n - 1, 0) * i for (lo, hi, i), n in zip(padding_config, x.shape))
  if any(d < 0 for d in out):
    raise ValueError(f"Dimension size after padding is not at least 0, got result shape {out}, "
                     f"for padding_config {padding_config} and operand shape {x.shape}")
  return out


def _pad_dtype(x, padding_value, padding_config):
  if x.dtype != padding_value.dtype:
    raise TypeError(f"pad operand and padding_value must be same dtype: got {x.dtype.name} and "
                    f"{padding_value.dtype.name}.")
  return x.dtype


def _pad_impl(x, padding_value, padding_config):
  from ourjax.backends import reference_ops
  return reference_ops.pad(x, padding_value, padding_config)


pad_p = standard_primitive("pad", _pad_shape, _pad_dtype,
                           lambda x, pv, **_: x.weak_type and pv.weak_type)
pad_p.def_impl(_pad_impl)


def _pad_transpose(ct, x, padding_value, padding_config):
  # The operand's cotangent is the strided slice of ct that the operand was placed at; the
  # padding value's is the sum of everything else.
  from ourjax.lax.reductions import reduce_sum
  from ourjax.lax.slicing import slice as slice_
  from ourjax.lax.elementwise import sub
  ct_aval = get_aval(ct)
  lo, hi, interior = zip(*padding_config) if padding_config else ((), (), ())
  unpadded = pad(ct, np.zeros((), ct_aval.dtype), [(-l, -h, 0) for l, h in zip(lo, hi)])
  t_x = slice_(unpadded, (0,) * len(lo), get_aval(unpadded).shape, tuple(i + 1 for i in interior))
  t_pv = None
  if ad.is_undefined_primal(padding_value):
    axes = tuple(range(ct_aval.ndim))
    t_pv = sub(reduce_sum(ct, axes), reduce_sum(t_x, axes))
  return [t_x if ad.is_undefined_primal(x) else None, t_pv]


ad.deflinear(pad_p, _pad_transpose)


def _pad_batch(vals, dims, padding_config):
  from ourjax.lax.elementwise import select_n
  (x, pv), (dx, dpv) = vals, dims
  if dpv is None:
    config = list(padding_config)
    config.insert(dx, (0, 0, 0))
    return pad(x, pv, config), dx
  # A batched padding value: pad with zeros, then select the padding value where a mask
  # (the operand's positions, padded with False) is False.
  size = get_aval(pv).shape[dpv]
  x = batching.bdim_at_front(x, dx, size)
  x_aval = get_aval(x)
  padded = pad(x, np.zeros((), x_aval.dtype), ((0, 0, 0),) + tuple(padding_config))
  out_shape = get_aval(padded).shape
  mask = pad(full(x_aval.shape[1:], True, np.bool_), np.array(False), padding_config)
  mask = broadcast_in_dim(mask, out_shape, tuple(range(1, len(out_shape))))
  pv = broadcast_in_dim(batching.moveaxis(pv, dpv, 0), out_shape, (0,))
  return select_n(mask, pv, padded), 0


batching.batch_rules[pad_p] = _pad_batch

# ------------------------------------------------------------------------------------------------
# concatenate


def concatenate(operands, dimension):
  operands = list(operands)
  if not operands:
    raise ValueError("concatenate requires a non-empty sequences of arrays")
  if len(operands) == 1:
    return operands[0]
  return concatenate_p.bind(*operands, dimension=int(dimension))


def _concatenate_shape(*xs, dimension):
  if not xs:
    raise TypeError("concatenate op requires at least one operand, got none.")
  shapes = ", ".join(str(x.shape) for x in xs)
  if len({x.ndim for x in xs}) != 1:
    raise TypeError(f"Cannot concatenate arrays with different numbers of dimensions: got "
                    f"{shapes}.")
  if not 0 <= dimension < xs[0].ndim:
    raise TypeError(f"concatenate dimension out of bounds: dimension {dimension} for shapes "
                    f"{shapes}.")
  others = {x.shape[:dimension] + x.shape[dimension + 1:] for x in xs}
  if len(others) != 1:
    raise TypeError(f"Cannot concatenate arrays with shapes that differ in dimensions other than "
                    f"the one being concatenated: concatenating along dimension {dimension} for "
                    f"shapes {shapes}.")
  s = list(xs[0].shape)
  s[dimension] = sum(x.shape[dimension] for x in xs)
  return tuple(s)


def _concatenate_dtype(*xs, dimension):
  if len({x.dtype for x in xs}) != 1:
    raise TypeError(f"concatenate requires arguments to have the same dtypes, got "
                    f"{', '.join(x.dtype.name for x in xs)}. (Tip: jnp.concatenate is a similar "
                    "function that does automatic type promotion on inputs).")
  return xs[0].dtype


def _concatenate_impl(*xs, dimension):
  from ourjax.backends import reference_ops
  return reference_ops.concatenate(xs, dimension)


concatenate_p = standard_primitive("concatenate", _concatenate_shape, _concatenate_dtype,
                                   lambda *xs, **_: all(x.weak_type for x in xs))
concatenate_p.def_impl(_concatenate_impl)


def _concatenate_transpose(ct, *xs, dimension):
  from ourjax.lax.slicing import slice_in_dim
  out, start = [], 0
  for x in xs:
    n = (x.aval if ad.is_undefined_primal(x) else get_aval(x)).shape[dimension]
    out.append(slice_in_dim(ct, start, start + n, axis=dimension)
               if ad.is_undefined_primal(x) else None)
    start += n
  return out


ad.deflinear(concatenate_p, _concatenate_transpose)


def _concatenate_batch(vals, dims, dimension):
  size = next(get_aval(x).shape[d] for x, d in zip(vals, dims) if d is not None)
  xs = [batching.bdim_at_front(x, d, size) for x, d in zip(vals, dims)]
  return concatenate_p.bind(*xs, dimension=dimension + 1), 0


batching.batch_rules[concatenate_p] = _concatenate_batch


# ------------------------------------------------------------------------------------------------
# Lowerings of rev, pad and concatenate (one HLO instruction each)


def _register_rev_pad_concatenate_lowerings():
  from ourjax.lowering.from_jaxpr import register_lowering

  @register_lowering(rev_p)
  def _rev_lower(ctx, avals_in, avals_out, x, dimensions):
    return ctx.builder.reverse(x, tuple(dimensions))

  @register_lowering(pad_p)
  def _pad_lower(ctx, avals_in, avals_out, x, padding_value, padding_config):
    return ctx.builder.pad(x, padding_value, padding_config)

  @register_lowering(concatenate_p)
  def _concatenate_lower(ctx, avals_in, avals_out, *xs, dimension):
    return ctx.builder.concatenate(xs, dimension)


_register_rev_pad_concatenate_lowerings()
