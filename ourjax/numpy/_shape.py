"""Shape manipulation: reshape/transpose and friends, joining and splitting, broadcasting,
tile/repeat, flips and rolls, diff/delete/insert (pad lives in ``_pad.py``).  Sizes and axes are static (concrete Python values);
values may be traced."""
from __future__ import annotations

import math
import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax._eager_replay import replayed
from ourjax.array import Array
from ourjax.core import Tracer, get_aval
from ourjax.lax._utils import shape_error
from ourjax.numpy._creation import asarray, canonicalize_shape
from ourjax.numpy._util import (_broadcast_to, _as_operand, _same_strong_arrays, check_arraylike,
                                promote_dtypes, static_argnames)


def _arr(name, a):
  check_arraylike(name, a)
  return asarray(_as_operand(a))


def _axis(axis, ndim, name=""):
  axis = core.concrete_or_error(operator.index, axis, f"The axis argument of jnp.{name} must "
                                "be concrete." if name else "The axis argument must be concrete.")
  if not -ndim <= axis < ndim:
    where = f"{name}: " if name else ""
    # (NumPy's AxisError: a ValueError, and an IndexError as JAX's swapaxes raises)
    raise np.exceptions.AxisError(
        f"{where}axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim


def _axes(axis, ndim, name=""):
  if isinstance(axis, (tuple, list)):
    axes = tuple(_axis(a, ndim, name) for a in axis)
    if len(set(axes)) != len(axes):
      raise ValueError(f"{name}: repeated axis in {tuple(axis)}")
    return axes
  return (_axis(axis, ndim, name),)


# ------------------------------------------------------------------------------------------------
# Shape queries


def _shape_of(a):
  return tuple(get_aval(a).shape) if isinstance(a, (Array, Tracer)) else np.shape(a)


def _warn_sequence(name, a):
  if isinstance(a, (list, tuple)):
    import warnings
    warnings.warn(f"{name} requires ndarray or scalar arguments, got {type(a)} at position 0. "
                  "In a future JAX release this will be an error.", DeprecationWarning,
                  stacklevel=3)


def shape(a):
  """``a``'s shape (a list or tuple argument is deprecated, as in JAX)."""
  _warn_sequence("shape", a)
  return _shape_of(a)


def ndim(a):
  """``a``'s number of dimensions (a list or tuple argument is deprecated, as in JAX)."""
  _warn_sequence("ndim", a)
  return get_aval(a).ndim if isinstance(a, (Array, Tracer)) else np.ndim(a)


def size(a, axis=None):
  """The number of elements, along ``axis`` (an int or a tuple of ints) if given."""
  _warn_sequence("size", a)
  s = _shape_of(a)
  if axis is None:
    return math.prod(s)
  if isinstance(axis, (tuple, list)):
    axes = [_axis(ax, len(s), "size") for ax in axis]
    if len(set(axes)) != len(axes):
      raise ValueError(f"repeated axis: {tuple(axis)}")
    return math.prod(s[ax] for ax in axes)
  return s[_axis(axis, len(s), "size")]


# ------------------------------------------------------------------------------------------------
# Reshaping and transposing


def _compute_newshape(aval, newshape):
  given = newshape        # (the size-mismatch message shows the shape as it was given, as JAX's)
  newshape = canonicalize_shape_allow_neg(newshape)
  neg = [i for i, d in enumerate(newshape) if d == -1]
  # TypeErrors, as JAX's
  if any(d < -1 for d in newshape):
    raise TypeError(f"reshape: invalid shape {newshape}; dimensions must be non-negative or "
                    "-1")
  if len(neg) > 1:
    raise TypeError(f"can only specify one unknown axis size with a `-1` value, got "
                    f"{newshape}")
  if neg:
    others = math.prod(d for d in newshape if d != -1)
    if others == 0 or aval.size % others:
      raise TypeError(f"cannot reshape array of shape {aval.shape} (size {aval.size}) into "
                      f"shape {newshape} because the product of specified axis sizes "
                      f"({others}) does not evenly divide {aval.size}")
    newshape = tuple(aval.size // others if d == -1 else d for d in newshape)
  if math.prod(newshape) != aval.size:
    raise TypeError(f"cannot reshape array of shape {aval.shape} (size {aval.size}) into "
                    f"shape {given} (size {math.prod(newshape)})")
  return newshape


def canonicalize_shape_allow_neg(s):
  if isinstance(s, (int, np.integer)) or (not isinstance(s, (tuple, list)) and np.ndim(s) == 0):
    s = (s,)
  try:
    return tuple(core.concrete_or_error(operator.index, d, "The new shape in jnp.reshape must "
                                        "be concrete.") for d in s)
  except TypeError:  # traced or non-integer sizes: JAX's shape TypeError
    raise shape_error(tuple(s) if isinstance(s, (tuple, list)) else s,
                      " (in jnp.reshape)") from None


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
  """Give ``a`` a new shape with the same size; one dimension may be -1 (inferred).
  ``order='F'`` reads and writes in column-major order."""
  if shape is None:
    if newshape is None:
      raise TypeError("reshape() missing required argument 'shape'")
    shape = newshape
  a = _arr("reshape", a)
  aval = get_aval(a)
  new = _compute_newshape(aval, shape)
  if order == "F":
    rev = tuple(reversed(range(aval.ndim)))
    out = lax.reshape(lax.transpose(a, rev), tuple(reversed(new)))
    return lax.transpose(out, tuple(reversed(range(len(new)))))
  if order not in ("C", "A", None):
    raise ValueError(f"reshape: order must be 'C', 'F' or 'A', got {order!r}")
  return lax.reshape(a, new)


@static_argnames("order")
def ravel(a, order="C"):
  a = _arr("ravel", a)
  return reshape(a, (get_aval(a).size,), order="F" if order == "F" else "C")


def transpose(a, axes=None):
  """Permute the axes (reverse them if ``axes`` is None); negative axes count from the end."""
  a = _arr("transpose", a)
  nd = get_aval(a).ndim
  if axes is None:
    perm = tuple(reversed(range(nd)))
  else:
    axes = tuple(axes) if not isinstance(axes, (int, np.integer)) else (axes,)
    # as lax.transpose (and JAX): a wrong-length or repeated permutation is a TypeError
    if len(axes) != nd:
      raise TypeError(f"transpose: axes {axes} don't match array of dimension {nd}")
    perm = tuple(_axis(ax, nd, "transpose") for ax in axes)
    if len(set(perm)) != nd:
      raise TypeError(f"transpose: repeated axis in axes {axes}")
  return lax.transpose(a, perm)


permute_dims = transpose


def matrix_transpose(x, /):
  x = _arr("matrix_transpose", x)
  nd = get_aval(x).ndim
  if nd < 2:
    raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                     f"ndim={nd}")
  return lax.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


@static_argnames("axis1", "axis2")
def swapaxes(a, axis1, axis2):
  a = _arr("swapaxes", a)
  nd = get_aval(a).ndim
  i, j = _axis(axis1, nd, "swapaxes"), _axis(axis2, nd, "swapaxes")
  perm = list(range(nd))
  perm[i], perm[j] = perm[j], perm[i]
  return lax.transpose(a, tuple(perm))


def moveaxis(a, source, destination):
  """Move axes to new positions; the others keep their order."""
  a = _arr("moveaxis", a)
  nd = get_aval(a).ndim
  src = _axes(source, nd, "moveaxis")
  dst = _axes(destination, nd, "moveaxis")
  if len(src) != len(dst):
    raise ValueError(f"Inconsistent number of elements: {len(src)} vs {len(dst)}")
  perm = [i for i in range(nd) if i not in src]
  for d, s in sorted(zip(dst, src)):
    perm.insert(d, s)
  return lax.transpose(a, tuple(perm))


@static_argnames("axis", "start")
def rollaxis(a, axis, start=0):
  a = _arr("rollaxis", a)
  nd = get_aval(a).ndim
  axis = _axis(axis, nd, "rollaxis")
  start = core.concrete_or_error(operator.index, start, "rollaxis start must be concrete")
  if not -nd <= start <= nd:
    raise ValueError(f"start={start} must satisfy {-nd} <= start <= {nd}")
  if start < 0:
    start += nd
  if axis < start:
    start -= 1
  return moveaxis(a, axis, start)


def expand_dims(a, axis):
  """Insert size-1 axes at the positions ``axis`` (an int or tuple) of the result."""
  a = _arr("expand_dims", a)
  axes = axis if isinstance(axis, (tuple, list)) else (axis,)
  nd_out = get_aval(a).ndim + len(axes)
  canon = _axes(tuple(axes), nd_out, "expand_dims")
  return lax.expand_dims(a, canon)


def squeeze(a, axis=None):
  """Remove size-1 axes (all of them, or those named by ``axis``)."""
  a = _arr("squeeze", a)
  aval = get_aval(a)
  if axis is None:
    axes = tuple(i for i, d in enumerate(aval.shape) if d == 1)
  else:
    axes = _axes(axis, aval.ndim, "squeeze")
    for i in axes:
      if aval.shape[i] != 1:
        raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                         f"one, got shape={aval.shape} and dimensions={axes}")
  return lax.squeeze(a, axes) if axes else a


def atleast_1d(*arys):
  out = [_atleast(a, 1, "atleast_1d") for a in arys]
  return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
  out = [_atleast(a, 2, "atleast_2d") for a in arys]
  return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
  out = [_atleast(a, 3, "atleast_3d") for a in arys]
  return out[0] if len(out) == 1 else out


def _atleast(a, n, name):
  a = _arr(name, a)
  s = get_aval(a).shape
  if len(s) >= n:
    return a
  if n == 3:
    new = {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)]
  else:
    new = (1,) * (n - len(s)) + s
  return lax.reshape(a, new)


# ------------------------------------------------------------------------------------------------
# Broadcasting


def broadcast_shapes(*shapes):
  shapes = [(s,) if isinstance(s, (int, np.integer)) else tuple(s) for s in shapes]
  if not shapes:
    return ()
  try:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))
  except ValueError:
    raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}") from None


def broadcast_to(array, shape):
  """Broadcast to ``shape`` by NumPy's rules (leading axes added, size-1 axes stretched)."""
  a = _arr("broadcast_to", array)
  aval = get_aval(a)
  shape = canonicalize_shape(shape, "broadcast_to")
  if aval.shape == shape:
    return a
  nlead = len(shape) - aval.ndim
  if nlead < 0:
    raise ValueError(f"Cannot broadcast to shape with fewer dimensions: arr_shape={aval.shape} "
                     f"shape={shape}")
  if any(d != 1 and d != s for d, s in zip(aval.shape, shape[nlead:])):
    raise ValueError(f"Incompatible shapes for broadcasting: {aval.shape} and requested "
                     f"shape {shape}")
  return _broadcast_to(a, shape)


def broadcast_arrays(*args):
  arrs = [_arr("broadcast_arrays", a) for a in args]
  if not arrs:
    return []
  s = broadcast_shapes(*[get_aval(a).shape for a in arrs])
  return [a if get_aval(a).shape == s else _broadcast_to(a, s) for a in arrs]


# ------------------------------------------------------------------------------------------------
# Joining


def _check_concat_shapes(name, arrays, axis):
  """As lax.concatenate (and JAX), mismatched shapes are a TypeError."""
  shapes = [get_aval(a).shape for a in arrays]
  if len({len(s) for s in shapes}) != 1:
    raise TypeError(f"{name}: all the input arrays must have the same number of dimensions, "
                     f"got shapes {', '.join(map(str, shapes))}")
  rest = {s[:axis] + s[axis + 1:] for s in shapes}
  if len(rest) != 1:
    raise TypeError(f"{name}: all the input array dimensions except for the concatenation "
                     f"axis {axis} must match exactly, got shapes "
                     f"{', '.join(map(str, shapes))}")


def _concat(arrays, axis):
  """lax.concatenate in chunks of 16 (wide concatenations are slow to compile); empty parts
  are dropped."""
  arrays = [a for a in arrays if get_aval(a).shape[axis] != 0] or arrays[:1]
  while len(arrays) > 1:
    arrays = [lax.concatenate(arrays[i:i + 16], axis) if len(arrays[i:i + 16]) > 1
              else arrays[i] for i in range(0, len(arrays), 16)]
  return arrays[0]


def concatenate(arrays, axis=0, dtype=None):
  """Join arrays along an existing axis (``axis=None``: flatten them first)."""
  if isinstance(arrays, (Array, Tracer, np.ndarray)):
    arrays = asarray(arrays)
    aval = get_aval(arrays)
    if aval.ndim < 2 and axis is not None:
      raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    if axis is None:
      out = ravel(arrays)
    else:
      ax = _axis(axis, aval.ndim - 1, "concatenate")
      out = reshape(moveaxis(arrays, 0, ax), aval.shape[1:ax + 1] + (aval.shape[0] *
                    aval.shape[ax + 1],) + aval.shape[ax + 2:])
    return out if dtype is None else asarray(out, dtype=dtype)
  if dtype is None and type(axis) is int and type(arrays) in (list, tuple) and \
      1 < len(arrays) <= 16 and _same_strong_arrays(arrays, same_shape=False):
    # the common eager call (2-16 arrays of one strong dtype, nothing to promote or drop): one
    # concatenate, bound at once
    s0 = arrays[0].aval.shape
    nd = len(s0)
    if nd and -nd <= axis < nd:
      ax = axis % nd
      rest = s0[:ax] + s0[ax + 1:]
      for a in arrays:
        s = a.aval.shape
        if len(s) != nd or not s[ax] or s[:ax] + s[ax + 1:] != rest:
          break
      else:
        return lax.concatenate(arrays, ax)
  arrays = list(arrays)
  if not arrays:
    raise ValueError("Need at least one array to concatenate.")
  check_arraylike("concatenate", *arrays)
  arrays = [asarray(_as_operand(a)) for a in arrays]
  if axis is None:
    return concatenate([ravel(a) for a in arrays], 0, dtype)
  if get_aval(arrays[0]).ndim == 0:
    raise ValueError("Zero-dimensional arrays cannot be concatenated.")
  axis = _axis(axis, get_aval(arrays[0]).ndim, "concatenate")
  _check_concat_shapes("concatenate", arrays, axis)
  if dtype is None:
    arrays = promote_dtypes(*arrays)
  else:
    dt = dtypes.check_user_dtype(dtype, "concatenate")
    arrays = [lax.convert_element_type(a, dt) for a in arrays]
  return _concat(arrays, axis)


def concat(arrays, /, *, axis=0):
  return concatenate(arrays, axis=axis)


@replayed(static=("axis", "dtype"))
def stack(arrays, axis=0, out=None, dtype=None):
  """Join arrays of one shape along a new axis."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
  if isinstance(arrays, (Array, Tracer, np.ndarray)):
    arrays = asarray(arrays)
    nd = get_aval(arrays).ndim
    return moveaxis(arrays, 0, _axis(axis, nd, "stack")) if dtype is None else \
        asarray(moveaxis(arrays, 0, _axis(axis, nd, "stack")), dtype=dtype)
  arrays = list(arrays)
  if not arrays:
    raise ValueError("Need at least one array to stack.")
  check_arraylike("stack", *arrays)
  arrays = [asarray(_as_operand(a)) for a in arrays]
  shape0 = get_aval(arrays[0]).shape
  axis = _axis(axis, len(shape0) + 1, "stack")
  for a in arrays:
    if get_aval(a).shape != shape0:
      raise ValueError(f"All input arrays must have the same shape; got "
                       f"{', '.join(str(get_aval(b).shape) for b in arrays)}")
  return concatenate([lax.expand_dims(a, (axis,)) for a in arrays], axis, dtype)


def _seq(name, tup):
  if isinstance(tup, (Array, Tracer, np.ndarray)):
    tup = asarray(tup)
    return [_index0(tup, i) for i in range(get_aval(tup).shape[0])]
  return list(tup)


def _index0(x, i):
  return lax.squeeze(_slice_axis(x, i, i + 1, 0), (0,))


@replayed(static=("dtype",))
def vstack(tup, dtype=None):
  return concatenate([_atleast(a, 2, "vstack") for a in _seq("vstack", tup)], 0, dtype)




@replayed(static=("dtype",))
def hstack(tup, dtype=None):
  arrs = [_atleast(a, 1, "hstack") for a in _seq("hstack", tup)]
  axis = 0 if arrs and get_aval(arrs[0]).ndim == 1 else 1
  return concatenate(arrs, axis, dtype)


def dstack(tup, dtype=None):
  return concatenate([_atleast(a, 3, "dstack") for a in _seq("dstack", tup)], 2, dtype)


def column_stack(tup):
  arrs = []
  for a in _seq("column_stack", tup):
    a = _arr("column_stack", a)
    if get_aval(a).ndim < 2:
      a = lax.reshape(a, (get_aval(a).size, 1))
    arrs.append(a)
  return concatenate(arrs, 1)


def append(arr, values, axis=None):
  if axis is None:
    return concatenate([ravel(arr), ravel(values)], 0)
  return concatenate([arr, values], axis)


def block(arrays):
  """Assemble an array from nested lists of blocks (the innermost lists join on the last
  axis)."""
  def depth(x):
    return 1 + depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list) else 0)
  d = depth(arrays)
  if isinstance(arrays, tuple):
    raise TypeError("jnp.block: tuples are not allowed, use lists")

  def rec(x, level):
    if isinstance(x, list):
      if not x:
        raise ValueError("Lists cannot be empty")
      parts = [rec(v, level + 1) for v in x]
      nd = max(d, *(get_aval(p).ndim for p in parts))
      parts = [lax.broadcast_to_rank(p, nd) for p in parts]
      return concatenate(parts, axis=-(d - level))
    return _arr("block", x)
  out = rec(arrays, 0)
  return lax.broadcast_to_rank(out, d) if get_aval(out).ndim < d else out


# ------------------------------------------------------------------------------------------------
# Slicing helpers (static bounds) and splitting


def _slice_axis(x, start, stop, axis, stride=1):
  aval = get_aval(x)
  if start == 0 and stop == aval.shape[axis] and stride == 1:
    return x
  starts = [0] * aval.ndim
  limits = list(aval.shape)
  strides = [1] * aval.ndim
  starts[axis], limits[axis], strides[axis] = start, stop, stride
  return lax.slice(x, tuple(starts), tuple(limits), tuple(strides) if stride != 1 else None)


def _take_static(x, idx, axis):
  """``x`` taken at the concrete in-range indices ``idx`` along ``axis``: the index list is cut
  into runs that step by +1, -1 or 0, each a slice (reversed or broadcast), then joined."""
  idx = np.asarray(idx, dtype=np.int64).ravel()
  aval = get_aval(x)
  if idx.size == 0:
    return _slice_axis(x, 0, 0, axis)
  if idx.size > 8 and np.count_nonzero(np.abs(np.diff(idx)) > 1) > 8:
    return _take_traced(x, idx.astype(np.int32), axis)   # many runs: one gather instead
  pieces = []
  i, n = 0, idx.size
  while i < n:
    j = i + 1
    step = int(idx[j] - idx[i]) if j < n else 1
    if step not in (-1, 0, 1):
      step = 1
    else:
      while j < n and idx[j] - idx[j - 1] == step:
        j += 1
    lo, hi = int(idx[i]), int(idx[j - 1])
    if step == 1:
      piece = _slice_axis(x, lo, hi + 1, axis)
    elif step == -1:
      piece = lax.rev(_slice_axis(x, hi, lo + 1, axis), (axis,))
    else:
      one = _slice_axis(x, lo, lo + 1, axis)
      shape = list(aval.shape)
      shape[axis] = j - i
      piece = lax.broadcast_in_dim(one, tuple(shape), tuple(range(aval.ndim)))
    pieces.append(piece)
    i = j
  return _concat(pieces, axis)


def _split_sizes(op, size, indices_or_sections):
  if isinstance(indices_or_sections, (tuple, list)) or np.ndim(indices_or_sections) > 0:
    bounds = [core.concrete_or_error(operator.index, i, f"jnp.{op}: split indices must be "
                                     "concrete") for i in np.asarray(indices_or_sections)
              .ravel().tolist()] if not isinstance(indices_or_sections, (tuple, list)) else \
        [core.concrete_or_error(operator.index, i, f"jnp.{op}: split indices must be concrete")
         for i in indices_or_sections]
    edges = [0] + bounds + [size]
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
      start, stop, _ = slice(a, b).indices(size)
      out.append((start, max(start, stop)))
    return out
  # a count of sections is truncated to an int, as JAX's (and NumPy's) int(): 2.0 is 2
  sections = core.concrete_or_error(int, indices_or_sections,
                                    f"jnp.{op}: the number of sections must be concrete")
  if sections <= 0:
    raise ValueError("number sections must be larger than 0.")
  part, r = divmod(size, sections)
  if r and op == "split":
    raise ValueError("array split does not result in an equal division")
  sizes = [part + 1] * r + [part] * (sections - r)
  starts = np.cumsum([0] + sizes[:-1]).tolist()
  return [(s, s + z) for s, z in zip(starts, sizes)]


def _split(op, ary, indices_or_sections, axis):
  a = _arr(op, ary)
  aval = get_aval(a)
  axis = _axis(axis, aval.ndim, op)
  return [_slice_axis(a, lo, hi, axis)
          for lo, hi in _split_sizes(op, aval.shape[axis], indices_or_sections)]


def split(ary, indices_or_sections, axis: int = 0):
  """Split into equal sections (an int) or at the given indices."""
  return _split("split", ary, indices_or_sections, axis)


def array_split(ary, indices_or_sections, axis: int = 0):
  """Like ``split``, but sections may differ in size by one."""
  return _split("array_split", ary, indices_or_sections, axis)


def vsplit(ary, indices_or_sections):
  if np.ndim(ary) < 2:
    raise ValueError("vsplit only works on arrays of 2 or more dimensions")
  return _split("vsplit", ary, indices_or_sections, 0)


def hsplit(ary, indices_or_sections):
  if np.ndim(ary) < 1:
    raise ValueError("hsplit only works on arrays of 1 or more dimensions")
  return _split("hsplit", ary, indices_or_sections, 1 if np.ndim(ary) > 1 else 0)


def dsplit(ary, indices_or_sections):
  if np.ndim(ary) < 3:
    raise ValueError("dsplit only works on arrays of 3 or more dimensions")
  return _split("dsplit", ary, indices_or_sections, 2)


def unstack(x, /, *, axis: int = 0):
  x = _arr("unstack", x)
  aval = get_aval(x)
  if aval.ndim == 0:
    raise ValueError("Unstack requires arrays with rank > 0, however a scalar array was given.")
  axis = _axis(axis, aval.ndim, "unstack")
  return tuple(lax.squeeze(_slice_axis(x, i, i + 1, axis), (axis,))
               for i in range(aval.shape[axis]))


# ------------------------------------------------------------------------------------------------
# Tiling and repeating


def tile(A, reps):
  """Repeat the whole array ``reps`` times along each axis (broadcast + reshape)."""
  a = _arr("tile", A)
  reps = (reps,) if isinstance(reps, (int, np.integer)) or np.ndim(reps) == 0 else tuple(reps)
  reps = tuple(core.concrete_or_error(operator.index, r, "jnp.tile: reps must be concrete")
               for r in reps)
  if any(r < 0 for r in reps):
    raise ValueError(f"jnp.tile: negative repetitions are not allowed, got reps={reps}")
  s = get_aval(a).shape
  s = (1,) * (len(reps) - len(s)) + s
  reps = (1,) * (len(s) - len(reps)) + reps
  a = lax.reshape(a, s)
  inter = tuple(d for pair in zip(reps, s) for d in pair)
  b = lax.broadcast_in_dim(a, inter, tuple(range(1, 2 * len(s), 2)))
  return lax.reshape(b, tuple(r * d for r, d in zip(reps, s)))


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
  """Repeat each element ``repeats`` times (a scalar, or one count per element along
  ``axis``).  Under jit the counts must be concrete unless ``total_repeat_length`` is given."""
  a = _arr("repeat", a)
  if axis is None:
    a = ravel(a)
    axis = 0
  aval = get_aval(a)
  if aval.ndim == 0:
    a = lax.reshape(a, (1,))
    aval = get_aval(a)
    axis = 0
  axis = _axis(axis, aval.ndim, "repeat")
  n = aval.shape[axis]
  if total_repeat_length is not None:
    total_repeat_length = core.concrete_or_error(
        operator.index, total_repeat_length, "jnp.repeat: total_repeat_length must be concrete")
  if isinstance(repeats, Tracer) and not core.is_concrete(repeats):
    if total_repeat_length is None:
      raise core.ConcretizationTypeError(
          repeats, "When jit-compiling jnp.repeat, the total number of repeats must be static. "
          "To fix this, either specify a static value for `repeats`, or pass a static value to "
          "`total_repeat_length`.")
    if n == 0:  # nothing to repeat: JAX returns the empty operand whatever the length asked
      return a
    return _repeat_traced(a, repeats, axis, total_repeat_length)
  reps = np.asarray(core.concrete_or_error(None, repeats, "jnp.repeat repeats"))
  if not (dtypes.is_integer(reps.dtype) or reps.dtype == np.bool_ or reps.size == 0):
    raise TypeError(f"jnp.repeat: repeats must be integers, got dtype {reps.dtype}")
  if (reps < 0).any():
    raise ValueError("jnp.repeat: repeats may not contain negative values")
  if reps.ndim == 0 or reps.size == 1:
    r = int(reps.reshape(()))
    if total_repeat_length is None or total_repeat_length == r * n:
      out_shape = list(aval.shape)
      out_shape[axis] *= r
      inter = aval.shape[:axis + 1] + (r,) + aval.shape[axis + 1:]
      dims = tuple(range(axis + 1)) + tuple(range(axis + 2, aval.ndim + 1))
      return lax.reshape(lax.broadcast_in_dim(a, inter, dims), tuple(out_shape))
    reps = np.full((n,), r)
  reps = reps.ravel()
  if reps.shape[0] != n:
    raise ValueError(f"jnp.repeat: repeats has {reps.shape[0]} entries but the array has {n} "
                     f"elements along axis {axis}")
  idx = np.repeat(np.arange(n), reps)
  if total_repeat_length is not None:
    if idx.size >= total_repeat_length:
      idx = idx[:total_repeat_length]
    else:
      idx = np.concatenate([idx, np.full(total_repeat_length - idx.size,
                                         idx[-1] if idx.size else n - 1)])
  if n == 0:
    return a
  return _take_static(a, idx, axis)


def _insert_traced(a, idx, vals, axis):
  """``insert`` at traced indices ``idx`` (k of them, one per entry of ``vals`` along ``axis``):
  the entries of ``a`` and ``vals`` are scattered to their places in the longer result."""
  from ourjax.numpy._sorting import argsort
  n, k = get_aval(a).shape[axis], get_aval(idx).shape[0]
  idx = lax.clamp(np.int32(0), lax.select_n(lax.lt(idx, np.int32(0)), idx,
                                            lax.add(idx, np.int32(n))), np.int32(n))
  # inserted entry j (j-th in stable order of idx) lands at idx_j + j; input entry i moves past
  # every index <= i
  order = lax.convert_element_type(argsort(idx, stable=True), np.int32)
  new_pos = moveaxis(lax.iota(np.int32, k), 0, 0).at[order].set(
      lax.add(_take_traced(idx, order, 0), lax.iota(np.int32, k)))
  i = lax.iota(np.int32, n)
  before = lax.le(lax.broadcast_in_dim(idx, (k, n), (0,)), lax.broadcast_in_dim(i, (k, n), (1,)))
  old_pos = lax.add(i, lax.reduce_sum(lax.convert_element_type(before, np.int32), (0,)))
  out = moveaxis(lax.full_like(a, 0, shape=_with(get_aval(a).shape, axis, n + k)), axis, 0)
  out = out.at[old_pos].set(moveaxis(a, axis, 0), unique_indices=True)
  out = out.at[new_pos].set(moveaxis(vals, axis, 0), unique_indices=True)
  return moveaxis(out, 0, axis)


def _with(shape, axis, size):
  return tuple(size if d == axis else s for d, s in enumerate(shape))


def _repeat_traced(a, repeats, axis, total):
  """Repeat with traced counts: output position p takes element ``#{i : cumsum[i] <= p}``."""
  from ourjax.numpy._reductions import cumsum
  aval = get_aval(a)
  n = aval.shape[axis]
  reps = lax.convert_element_type(_broadcast_to(ravel(repeats), (n,)) if
                                  get_aval(repeats).size == 1 else ravel(repeats), np.int32)
  ends = cumsum(reps)
  pos = lax.broadcasted_iota(np.int32, (total, n), 0)
  src = lax.reduce_sum(lax.convert_element_type(
      lax.le(lax.broadcast_in_dim(ends, (total, n), (1,)), pos), np.int32), (1,))
  src = lax.min(src, np.int32(n - 1))
  return _take_traced(a, src, axis)


def _take_traced(a, idx, axis):
  """``a`` taken at the (possibly traced) 1-D indices ``idx`` along ``axis``."""
  from ourjax.numpy._gathers import take_axis
  return take_axis(a, idx, axis)


# ------------------------------------------------------------------------------------------------
# Flips, rolls, rotations


def flip(m, axis=None):
  m = _arr("flip", m)
  nd = get_aval(m).ndim
  axes = tuple(range(nd)) if axis is None else _axes(axis, nd, "flip")
  return lax.rev(m, axes) if axes else m


def fliplr(m):
  m = _arr("fliplr", m)
  if get_aval(m).ndim < 2:
    raise ValueError(f"Input must be >= 2-d, got shape {get_aval(m).shape}")
  return lax.rev(m, (1,))


def flipud(m):
  m = _arr("flipud", m)
  if get_aval(m).ndim < 1:
    raise ValueError("Input must be >= 1-d, got a 0-d array")
  return lax.rev(m, (0,))


def roll(a, shift, axis=None):
  """Shift elements along axes, wrapping around; ``axis=None`` rolls the flattened array.
  ``shift`` may be traced (then it uses a dynamic slice)."""
  a = _arr("roll", a)
  aval = get_aval(a)
  if axis is None:
    return reshape(roll(ravel(a), shift, 0), aval.shape)
  axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
  traced = isinstance(shift, (Tracer, Array)) and not core.is_concrete(shift)
  if traced:
    shifts = [lax.convert_element_type(shift, np.int32)] if get_aval(shift).ndim == 0 else \
        [lax.convert_element_type(lax.squeeze(_slice_axis(shift, i, i + 1, 0), (0,)),
                                  np.int32) for i in range(get_aval(shift).shape[0])]
  else:
    sh = np.asarray(core.concrete_or_error(None, shift, "roll shift"))
    if sh.ndim > 1:
      raise ValueError("roll: shift and axis must be scalars or 1D arrays")
    shifts = [int(s) for s in np.atleast_1d(sh)]
  if len(shifts) != len(axes):
    if len(shifts) == 1:
      shifts = shifts * len(axes)
    elif len(axes) == 1:
      axes = axes * len(shifts)
    else:
      raise ValueError(f"roll: shift and axis must have the same length, got "
                       f"{len(shifts)} and {len(axes)}")
  for s, ax in zip(shifts, axes):
    ax = _axis(ax, aval.ndim, "roll")
    n = aval.shape[ax]
    if n == 0:
      continue
    if isinstance(s, int):
      s %= n
      if s:
        a = _concat([_slice_axis(a, n - s, n, ax), _slice_axis(a, 0, n - s, ax)], ax)
    else:
      s = lax.rem(lax.add(lax.rem(s, np.int32(n)), np.int32(n)), np.int32(n))
      doubled = _concat([a, a], ax)
      start = lax.sub(np.int32(n), s)
      a = lax.dynamic_slice_in_dim(doubled, start, n, ax)
  return a


@static_argnames("k", "axes")
def rot90(m, k=1, axes=(0, 1)):
  """Rotate by 90 degrees ``k`` times in the plane of ``axes`` (from the first axis towards the
  second)."""
  m = _arr("rot90", m)
  if get_aval(m).ndim < 2:
    raise ValueError(f"rot90 requires its first argument to have ndim at least two, but got "
                     f"first argument of shape {get_aval(m).shape}, which has ndim "
                     f"{get_aval(m).ndim}")
  axes = tuple(axes)
  if len(axes) != 2:
    raise ValueError("len(axes) must be 2.")
  nd = get_aval(m).ndim
  ax1, ax2 = _axis(axes[0], nd, "rot90"), _axis(axes[1], nd, "rot90")
  if ax1 == ax2:
    raise ValueError("Axes must be different.")
  k = core.concrete_or_error(operator.index, k, "rot90 k must be concrete") % 4
  if k == 0:
    return m
  if k == 2:
    return lax.rev(m, (ax1, ax2))
  perm = list(range(nd))
  perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
  if k == 1:
    return lax.transpose(lax.rev(m, (ax2,)), tuple(perm))
  return lax.rev(lax.transpose(m, tuple(perm)), (ax2,))


# ------------------------------------------------------------------------------------------------
# Differences and related


@static_argnames("n", "axis")
def diff(a, n: int = 1, axis: int = -1, prepend=None, append=None):
  """n-th discrete difference along ``axis`` (bool arrays: not-equal)."""
  a = _arr("diff", a)
  n = core.concrete_or_error(operator.index, n, "jnp.diff: n must be concrete")
  if n < 0:
    raise ValueError(f"order must be non-negative but got {n}")
  aval = get_aval(a)
  if aval.ndim == 0:
    raise ValueError(f"diff requires input that is at least one dimensional; got {a}")
  axis = _axis(axis, aval.ndim, "diff")
  if n == 0:
    return a
  combined = []
  if prepend is not None:
    p = asarray(prepend)
    if get_aval(p).ndim == 0:
      s = list(aval.shape)
      s[axis] = 1
      p = lax.broadcast_in_dim(p, tuple(s), ())
    combined.append(p)
  combined.append(a)
  if append is not None:
    p = asarray(append)
    if get_aval(p).ndim == 0:
      s = list(aval.shape)
      s[axis] = 1
      p = lax.broadcast_in_dim(p, tuple(s), ())
    combined.append(p)
  if len(combined) > 1:
    a = concatenate(combined, axis)
  from ourjax.numpy._ufuncs import not_equal, subtract
  op = not_equal if get_aval(a).dtype == np.bool_ else subtract
  for _ in range(n):
    m = get_aval(a).shape[axis]
    if m == 0:
      break
    a = op(_slice_axis(a, 1, m, axis), _slice_axis(a, 0, m - 1, axis))
  return a


def ediff1d(ary, to_end=None, to_begin=None):
  """The differences of the flattened ``ary``; ``to_begin``/``to_end`` are cast to their dtype
  (as JAX's and NumPy's), so no promotion is implied."""
  a = ravel(ary)
  if get_aval(a).dtype == np.bool_:      # (differences of booleans are not defined, as in JAX)
    raise TypeError("jnp.ediff1d does not accept dtype bool: subtraction is not defined for it")
  out = diff(a)
  dt = get_aval(out).dtype
  parts = []
  if to_begin is not None:
    parts.append(ravel(asarray(to_begin, dtype=dt)))
  parts.append(out)
  if to_end is not None:
    parts.append(ravel(asarray(to_end, dtype=dt)))
  return concatenate(parts) if len(parts) > 1 else out


def delete(arr, obj, axis=None, *, assume_unique_indices: bool = False):
  """Remove the entries at the concrete indices (or slice) ``obj`` along ``axis``."""
  a = _arr("delete", arr)
  if axis is None:
    a, axis = ravel(a), 0
  aval = get_aval(a)
  axis = _axis(axis, aval.ndim, "delete")
  n = aval.shape[axis]
  if isinstance(obj, slice):
    drop = np.arange(n)[obj]
  else:
    check_arraylike("delete", obj)
    if (assume_unique_indices and isinstance(obj, Tracer) and not core.is_concrete(obj)
        and dtypes.is_integer(get_aval(obj).dtype)):
      return _delete_traced(a, obj, axis)
    o = np.asarray(core.concrete_or_error(None, obj, "jnp.delete indices must be concrete"))
    if o.dtype == np.bool_:
      if o.shape != (n,):
        raise ValueError(f"boolean array argument obj to delete must be one dimensional and "
                         f"match the axis length of {n}")
      drop = np.nonzero(o)[0]
    else:
      if o.size and ((o < -n).any() or (o >= n).any()):
        raise IndexError(f"index out of bounds for axis {axis} with size {n}")
      drop = o.ravel() % n if n else o.ravel()
  keep = np.setdiff1d(np.arange(n), drop)
  return _take_static(a, keep, axis)


def _delete_traced(a, obj, axis):
  """``delete`` of traced indices known to be unique (JAX's ``assume_unique_indices``): output
  entry ``i`` is input entry ``i + #{j : d_j <= i}``, ``d`` the sorted indices less their rank."""
  from ourjax.numpy._sorting import sort
  n = get_aval(a).shape[axis]
  d = lax.convert_element_type(ravel(obj), np.int32)
  k = get_aval(d).shape[0]
  d = lax.clamp(np.int32(0), lax.select_n(lax.lt(d, np.int32(0)), d,
                                          lax.add(d, np.int32(n))), np.int32(n))
  d = lax.sub(sort(d), lax.iota(np.int32, k))
  i = lax.iota(np.int32, n - k)
  before = lax.le(lax.broadcast_in_dim(d, (k, n - k), (0,)),
                  lax.broadcast_in_dim(i, (k, n - k), (1,)))
  src = lax.add(i, lax.reduce_sum(lax.convert_element_type(before, np.int32), (0,)))
  return _take_traced(a, src, axis)


def insert(arr, obj, values, axis=None):
  """Insert ``values`` before the index/indices ``obj`` (or a slice) along ``axis``, with
  JAX's rules: indices (concrete or traced) are clipped into ``[-n, n]``; ``values`` gets
  leading unit dimensions up to ``arr``'s rank and, for a scalar index, its first axis is
  moved to ``axis``; a one-element index repeats for every inserted slice."""
  a = _arr("insert", arr)
  if axis is None:
    a, axis = ravel(a), 0
  aval = get_aval(a)
  axis = _axis(axis, aval.ndim, "insert")
  n = aval.shape[axis]
  if isinstance(obj, slice):
    idx = np.arange(*obj.indices(n))
  else:
    check_arraylike("insert", obj)
    idx = obj if isinstance(obj, Tracer) and not core.is_concrete(obj) else \
        np.asarray(core.concrete_or_error(None, obj, "jnp.insert indices"))
  traced = isinstance(idx, Tracer)
  if np.ndim(idx) > 1:
    raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                     f"scalar; got {obj}")
  idt = dtypes.dtype(idx)
  if not dtypes.is_integer(idt) or idt == np.bool_:
    if np.size(idx) == 0 and not isinstance(obj, (Array, Tracer)):
      idx = np.zeros((0,), np.int64)
    else:
      raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
  vals = asarray(values, dtype=aval.dtype)
  vnd = get_aval(vals).ndim
  if vnd < aval.ndim:
    vals = lax.reshape(vals, (1,) * (aval.ndim - vnd) + get_aval(vals).shape)
  if np.size(idx) == 1:
    if np.ndim(idx) == 0:
      vals = moveaxis(vals, 0, axis)
    k = get_aval(vals).shape[axis]
    idx = lax.broadcast_in_dim(lax.reshape(idx, ()), (k,), ()) if traced else \
        np.full(k, np.ravel(idx)[0])
  k = np.broadcast_shapes(np.shape(idx), (get_aval(vals).shape[axis],))[0]
  if k == 0:  # nothing to insert (the values are not checked, as in JAX)
    return a
  vals = broadcast_to(vals, tuple(k if d == axis else s for d, s in enumerate(aval.shape)))
  if traced:
    idx = lax.convert_element_type(idx, np.int32)
    if get_aval(idx).shape != (k,):
      idx = lax.broadcast_in_dim(lax.reshape(idx, ()), (k,), ())
    return _insert_traced(a, idx, vals, axis)
  idx = np.clip(np.where(idx < 0, idx + n, idx), 0, n).astype(np.int64)
  idx = np.broadcast_to(idx, (k,))
  order = np.argsort(idx, kind="stable")
  new_pos = idx[order] + np.arange(k)       # where the inserted entries land
  combined = concatenate([a, vals], axis)
  src = np.empty(n + k, np.int64)
  is_new = np.zeros(n + k, bool)
  is_new[new_pos] = True
  src[~is_new] = np.arange(n)
  src[new_pos] = n + order
  return _take_static(combined, src, axis)
