"""lax functions that are compositions of other primitives (no primitive of their own): split,
tile, collapse, reciprocal, complex, broadcast_shapes, empty, optimization_barrier, dce_sink,
platform_dependent, scatter_apply, composite, create_token.  Their derivatives and batching come from the
primitives they are built of."""
from __future__ import annotations

import functools
import operator
from typing import Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import get_aval
from ourjax.lax._utils import canonicalize_axis


def _asarray(x):
  from ourjax import numpy as jnp
  return jnp.asarray(x)


def split(operand, sizes: Sequence[int], axis: int = 0) -> list:
  """Pieces of ``operand`` along ``axis`` of the given ``sizes`` (which must sum to the axis'
  length)."""
  from ourjax.lax.slicing import slice_in_dim
  x = _asarray(operand)
  aval = get_aval(x)
  sizes = [int(core.concrete_or_error(None, s, "lax.split sizes")) for s in sizes]
  if any(s < 0 for s in sizes):
    raise ValueError(f"Sizes passed to split must be nonnegative, got {list(sizes)}")
  if not -aval.ndim <= axis < aval.ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {aval.ndim}")
  axis = canonicalize_axis(axis, aval.ndim)
  if sum(sizes) != aval.shape[axis]:
    raise ValueError(f"Sum of sizes {sum(sizes)} must be equal to dimension {axis} of the "
                     f"operand shape {list(aval.shape)}")
  out, start = [], 0
  for s in sizes:
    out.append(slice_in_dim(x, start, start + s, axis=axis))
    start += s
  return out


def tile(operand, reps: Sequence[int]):
  """``operand`` repeated ``reps[i]`` times along each axis ``i`` (NumPy's ``tile``)."""
  from ourjax.lax.structural import broadcast_in_dim, reshape
  x = _asarray(operand)
  reps = tuple(int(r) for r in reps)
  shape = get_aval(x).shape
  if len(reps) < len(shape):
    reps = (1,) * (len(shape) - len(reps)) + reps
  if len(shape) < len(reps):
    x = reshape(x, (1,) * (len(reps) - len(shape)) + tuple(shape))
    shape = get_aval(x).shape
  big = tuple(d for r, s in zip(reps, shape) for d in (r, s))
  x = broadcast_in_dim(x, big, tuple(range(1, 2 * len(shape), 2)))
  return reshape(x, tuple(r * s for r, s in zip(reps, shape)))


def collapse(operand, start_dimension: int, stop_dimension: int | None = None):
  """``operand`` with dimensions ``start_dimension:stop_dimension`` merged into one."""
  from ourjax.lax.structural import reshape
  x = _asarray(operand)
  shape = get_aval(x).shape
  lo, hi, _ = slice(start_dimension, stop_dimension).indices(len(shape))
  size = int(np.prod(shape[lo:hi], dtype=np.int64))
  return reshape(x, tuple(shape[:lo]) + (size,) + tuple(shape[hi:]))


def reciprocal(x):
  """``1 / x`` elementwise (``integer_pow(x, -1)``)."""
  from ourjax.lax.elementwise import integer_pow
  return integer_pow(x, -1)


def complex(x, y):  # noqa: A001 (lax's name)
  """``x + i y`` for real ``x`` and ``y`` of one floating dtype (float32 -> complex64,
  float64 -> complex128)."""
  from ourjax.lax.elementwise import _const, add, convert_element_type, mul
  xa, ya = get_aval(x), get_aval(y)
  if xa.dtype != ya.dtype or not dtypes.is_float(xa.dtype) or xa.dtype.itemsize < 4:
    raise TypeError("lax.complex requires arguments of the same float32 or float64 dtype, got "
                    f"{xa.dtype.name} and {ya.dtype.name}")
  cdt = np.dtype(np.complex128 if xa.dtype == np.float64 else np.complex64)
  re = convert_element_type(x, cdt)
  im = convert_element_type(y, cdt)
  return add(re, mul(im, _const(im, 1j)))


def broadcast_shapes(*shapes) -> tuple:
  """The shape that arrays of ``shapes`` broadcast to (NumPy's rules)."""
  from ourjax.numpy._shape import broadcast_shapes as b
  return b(*shapes)


def empty(shape, dtype, *, out_sharding=None):
  """An array of ``shape`` and ``dtype`` whose contents are unspecified (zeros here)."""
  from ourjax.lax.structural import full
  return full(shape, 0, dtypes.canonicalize_dtype(np.dtype(dtype)))


def optimization_barrier(operand, /):
  """``operand`` (a pytree of arrays) unchanged.  The compiler reorders nothing across
  XLA's barrier; ourjax's passes have no such reordering to prevent, so this is the
  identity (differentiable and batchable as such)."""
  from ourjax._pytree import tree_map
  return tree_map(_asarray, operand)


def dce_sink(val, *, prevent_mlir_dce: bool = False) -> None:
  """JAX's marker that keeps ``val``'s computation in the jaxpr although nothing uses it.
  ourjax computes values only for their uses and they have no side effects, so dropping an
  unused one changes no result: this checks that ``val`` is a pytree of arrays and returns
  None, as JAX's does."""
  from ourjax._pytree import tree_map
  tree_map(_asarray, val)
  return None


def platform_dependent(*args, default: Callable | None = None, **per_platform: Callable):
  """Calls the function given for the platform ``jit`` compiles for (``cpu``, ``cuda``/
  ``gpu``/``rocm``) with ``args``, else ``default``."""
  from ourjax.backends import default_backend_name
  plat = default_backend_name()
  names = {"cuda": ("cuda", "gpu"), "cpu": ("cpu",)}.get(plat, (plat,))
  for n in names:
    if n in per_platform:
      return per_platform[n](*args)
  if default is None:
    # JAX's words ("translation rule ... not found for platform"), then what is missing
    raise NotImplementedError(
        f"translation rule for lax.platform_dependent not found for platform {plat}: no branch "
        f"for it and no default (branches: {sorted(per_platform)})")
  return default(*args)


def scatter_apply(operand, scatter_indices, func: Callable, dimension_numbers, *,
                  update_shape=(), indices_are_sorted: bool = False,
                  unique_indices: bool = False, mode=None):
  """``operand`` with ``func`` applied to the elements that a scatter with these indices and
  dimension numbers (and updates of ``update_shape``) would write."""
  from ourjax import numpy as jnp
  from ourjax.lax.slicing import scatter
  x = _asarray(operand)
  hit = scatter(jnp.zeros(get_aval(x).shape, np.bool_), scatter_indices,
                jnp.ones(tuple(update_shape), np.bool_), dimension_numbers,
                indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                mode=mode)
  return jnp.where(hit, func(x), x)


def composite(decomposition: Callable, name: str, version: int = 0):
  """``decomposition`` marked as the named composite operation ``name`` (keyword arguments
  are its attributes: NumPy arrays, numbers, strings, dtypes; None ones are left out).  Eagerly
  it runs ``decomposition``; traced (under jit, vmap, ...) it is one call whose lowered module
  shows it as JAX's does: ``stablehlo.composite "name" %arg0 {composite_attributes = {...},
  decomposition = @name}`` with the decomposition as the private function ``@name``
  (``Lowered.as_text()``).  ourjax's compiler has no composite-specific kernels: the compiled
  code runs the decomposition.  As in JAX, it cannot be differentiated (wrap it in
  ``custom_jvp``), and traced values may be neither attributes nor constants it closes over."""
  @functools.wraps(decomposition)
  def call(*args, **attributes):
    from ourjax.interpreters import ad
    from ourjax._pytree import tree_leaves
    if any(isinstance(t, ad.JVPTrace) for t in _traces_of(tree_leaves(args))):
      raise ValueError("JVP rule for composite not implemented. You can use `jax.custom_jvp` "
                       "to add support. See "
                       "https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")
    if any(isinstance(v, core.Tracer) for v in tree_leaves(attributes)):
      from ourjax.errors import UnexpectedTracerError
      raise UnexpectedTracerError(
          "Found a JAX Tracer as an attribute in the decomposition for the composite op "
          f"'{name}'. This means that the decomposition function closes over a value that is "
          "involved in a JAX transformation. Any values that aren't explicitly known at "
          "compile time must be explicitly passed as arguments to the composite.\n\nNote: If "
          "you are passing jax arrays as attributes, use numpy arrays instead.")
    if core.nothing_traced():
      return decomposition(*args, **attributes)
    return _bind_composite(decomposition, name, version, args, attributes)
  call.composite_name, call.composite_version = name, version
  return call


def _bind_composite(decomposition, name, version, args, attributes):
  """The traced call: ``jit``'s primitive over the decomposition's jaxpr, with a ``composite``
  parameter (name, attribute texts, version) that the lowering records (see
  ``lowering/from_jaxpr.py``) and the StableHLO text prints."""
  from ourjax import api
  from ourjax._pytree import tree_flatten, tree_unflatten
  from ourjax.errors import UnexpectedTracerError
  from ourjax.interpreters import partial_eval as pe
  from ourjax.interpreters.pjit import pjit_p
  leaves, in_tree = tree_flatten((args, {}))
  flat, out_tree = api.flatten_fun(functools.partial(decomposition, **attributes), in_tree)
  closed = pe.trace_to_jaxpr(flat, [get_aval(x) for x in leaves], name)
  if any(isinstance(c, core.Tracer) for c in closed.consts):
    raise UnexpectedTracerError(
        f"Found a JAX Tracer as a constant in the decomposition for the composite op '{name}'. "
        "This means that the decomposition function closes over a value that is involved in a "
        "JAX transformation. Any values that aren't explicitly known at compile time must be "
        "explicitly passed as arguments to the composite.")
  from ourjax.lowering.stablehlo_text import attribute_text
  attrs = tuple((k, attribute_text(v)) for k, v in sorted(attributes.items()) if v is not None)
  outs = pjit_p.bind(*leaves, jaxpr=closed, name=name, composite=(name, attrs, int(version)))
  return tree_unflatten(out_tree[0], outs)


def _traces_of(leaves):
  out = []
  for x in leaves:
    while isinstance(x, core.Tracer):
      out.append(x._trace)
      x = getattr(x, "primal", None)
  return out


# bitwise names (JAX's newer spellings of and_/or_/xor/not_)
def bitwise_and(x, y, /):
  from ourjax.lax.elementwise import and_
  return and_(x, y)


def bitwise_or(x, y, /):
  from ourjax.lax.elementwise import or_
  return or_(x, y)


def bitwise_xor(x, y, /):
  from ourjax.lax.elementwise import xor
  return xor(x, y)


def bitwise_not(x, /):
  from ourjax.lax.elementwise import not_
  return not_(x)


def mulhi(x, y, /):
  """The high half of the double-width product of integers ``x`` and ``y`` (signed for signed
  dtypes): ``(x * y) >> bits`` computed without a wider type, from half-width pieces."""
  from ourjax.lax.elementwise import (_const, add, and_, bitcast_convert_type,
                                      convert_element_type, lt, mul, shift_right_logical, sub)
  xa, ya = get_aval(x), get_aval(y)
  if xa.dtype != ya.dtype or not dtypes.is_integer(xa.dtype):
    raise TypeError(f"mulhi requires integer arguments of one dtype, got {xa.dtype.name} and "
                    f"{ya.dtype.name}")
  dt = xa.dtype
  bits = dt.itemsize * 8
  signed = dtypes.issubdtype(dt, np.signedinteger)
  udt = np.dtype(f"uint{bits}")
  u = bitcast_convert_type(x, udt) if signed else x
  v = bitcast_convert_type(y, udt) if signed else y
  h = bits // 2
  mask, half = _const(u, (1 << h) - 1), _const(u, h)
  u_lo, u_hi = and_(u, mask), shift_right_logical(u, half)
  v_lo, v_hi = and_(v, mask), shift_right_logical(v, half)
  lo_lo, hi_lo = mul(u_lo, v_lo), mul(u_hi, v_lo)
  lo_hi, hi_hi = mul(u_lo, v_hi), mul(u_hi, v_hi)
  cross = add(add(shift_right_logical(lo_lo, half), and_(hi_lo, mask)), lo_hi)
  out = add(add(hi_hi, shift_right_logical(hi_lo, half)), shift_right_logical(cross, half))
  if not signed:
    return out
  # two's complement: x_signed * y_signed = x_u * y_u - 2^bits (x<0 ? y_u : 0) - ...
  x_neg = convert_element_type(lt(x, _const(x, 0)), udt)
  y_neg = convert_element_type(lt(y, _const(y, 0)), udt)
  out = sub(sub(out, mul(x_neg, v)), mul(y_neg, u))
  return bitcast_convert_type(out, dt)


def with_sharding_constraint(x, shardings):
  """``x`` (a pytree of arrays) constrained to ``shardings``: a ``Sharding`` or
  ``PartitionSpec`` (read against the mesh of an enclosing ``with mesh:``), or a prefix tree of
  them.  Outside transformations the arrays are laid out by the shardings (``device_put``).
  Inside ``jit`` the constraint is a layout hint that ourjax's partitioner does not use yet:
  the values pass through unchanged (as they do in JAX, where only their layout changes)."""
  from ourjax import _pytree, api
  from ourjax.core import Tracer
  from ourjax.sharding import NamedSharding, PartitionSpec, Sharding, current_mesh

  def is_spec(s):
    return s is None or isinstance(s, (Sharding, PartitionSpec)) or not (
        isinstance(s, (list, tuple, dict)) or _pytree.is_tree_node(type(s)))
  leaves, tree = _pytree.tree_flatten(x)
  specs = _pytree.broadcast_prefix(shardings, x, is_leaf=is_spec)
  out = []
  for v, s in zip(leaves, specs):
    if isinstance(v, Tracer) or s is None:
      out.append(v)
      continue
    if isinstance(s, PartitionSpec):
      mesh = current_mesh()
      if mesh is None:
        raise ValueError("with_sharding_constraint: a PartitionSpec needs a mesh: pass a "
                         "NamedSharding or call it inside `with mesh:`")
      s = NamedSharding(mesh, s)
    out.append(api.device_put(v, s) if isinstance(s, Sharding) else v)
  return _pytree.tree_unflatten(tree, out)


def create_token(*operands):
  """A new ``core.Token`` (the operands only order it after them in JAX's programs; here
  effects run in program order already)."""
  return core.Token()


def _register_token():
  from ourjax import tree_util
  tree_util.register_pytree_node(core.Token, lambda t: ((), None), lambda aux, ch: core.Token())


_register_token()
