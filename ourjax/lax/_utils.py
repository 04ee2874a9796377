"""Small helpers shared by the primitive families: declaring a primitive with its shape/dtype
rules, and the argument checks whose error messages name the operation, shapes and dtypes."""
from __future__ import annotations

import operator
from typing import Callable, Sequence

import numpy as np

from ourjax import core, dtypes
from ourjax.core import Primitive, ShapedArray

# dtype kinds accepted by elementwise ops
_float = ("float",)
_int = ("int",)
_bool = ("bool",)
_complex = ("complex",)
_num = ("int", "float", "complex")
_any = ("bool", "int", "float", "complex")
_fp = ("float", "complex")


_kinds: dict = {}     # dtype -> dtype_kind (every elementwise op asks, for each operand)


def dtype_kind(dt: np.dtype) -> str:
  dt = np.dtype(dt)
  k = _kinds.get(dt)
  if k is None:
    k = _kinds[dt] = _dtype_kind(dt)
  return k


def _dtype_kind(dt: np.dtype) -> str:
  if dt == np.bool_:
    return "bool"
  if dtypes.is_integer(dt):
    return "int"
  if dtypes.is_complex(dt):
    return "complex"
  if dtypes.is_float(dt):
    return "float"
  return "other"


FLOAT0_ERROR = (
    "float0s do not support any operations by design, because they are not compatible with "
    "non-trivial vector spaces. No implicit dtype conversion is done. You can use "
    "np.zeros_like(arr, dtype=np.float32) to cast a float0 array to a regular zeros array. If "
    "you didn't expect to get a float0 you might have accidentally taken a gradient with respect "
    "to an integer argument.")


#: the NumPy abstract type each kind of ``dtype_kind`` stands for (JAX's error messages)
_KIND_NAMES = {"bool": "bool", "int": "integer", "float": "floating", "complex": "complexfloating"}


def check_dtypes(name: str, avals: Sequence[ShapedArray], kinds: Sequence[str],
                 same: bool = True) -> np.dtype:
  """All operands of an elementwise op must share a dtype of an accepted kind."""
  for pos, a in enumerate(avals):
    if a.dtype == dtypes.float0:
      raise TypeError(f"Called {name} with a float0 at position {pos}. {FLOAT0_ERROR}")
    if a.dtype.kind in "OUSMm":   # strings, objects, dates: not array data at all
      raise TypeError(f"Error interpreting argument to {name} as a JAX value. The problematic "
                      f"value is of type array of {a.dtype} and was passed to {name} at "
                      f"position {pos}.")
    if dtype_kind(a.dtype) not in kinds:
      # JAX's words: NumPy's abstract type names, the position for ops of several operands
      at = f" at position {pos}" if len(avals) > 1 else ""
      accepted = ", ".join(_KIND_NAMES.get(k, k) for k in kinds)
      raise TypeError(f"{name} does not accept dtype {a.dtype.name}{at}. Accepted dtypes{at} "
                      f"are subtypes of {accepted}.")
  if same and len({a.dtype for a in avals}) > 1:
    got = ", ".join(a.dtype.name for a in avals)
    raise TypeError(f"{name} requires arguments to have the same dtypes, got {got}. (Tip: "
                    f"jnp.{name} is a similar function that does automatic type promotion "
                    "on inputs).")
  return avals[0].dtype


def broadcasting_shape(name: str, *avals: ShapedArray) -> tuple:
  """lax's elementwise shape rule: equal shapes, except that rank-0 operands broadcast."""
  shapes = [a.shape for a in avals if a.shape]
  if not shapes:
    return ()
  if len({len(s) for s in shapes}) != 1:
    raise TypeError(f"{name}: arrays must have same number of dimensions, got "
                    f"{', '.join(str(s) for s in shapes)}.")
  if len(set(shapes)) != 1:
    raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                    f"{', '.join(str(s) for s in shapes)}.")
  return shapes[0]


def all_weak(*avals) -> bool:
  return all(a.weak_type for a in avals)


def standard_primitive(name: str, shape_rule: Callable, dtype_rule: Callable,
                       weak_type_rule: Callable = all_weak, impl: Callable | None = None
                       ) -> Primitive:
  """Declare a single-result primitive from its shape, dtype and weak-type rules."""
  p = Primitive(name)

  def abstract_eval(*avals, **params):
    return ShapedArray(shape_rule(*avals, **params), dtype_rule(*avals, **params),
                       weak_type_rule(*avals, **params))

  p.def_abstract_eval(abstract_eval)
  if impl is not None:
    p.def_impl(impl)
  return p


def canonicalize_axis(axis: int, ndim: int, name: str = "axis") -> int:
  axis = int(axis)
  if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
    raise ValueError(f"{name} {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim if ndim else 0


def shape_error(shape, where: str = "") -> TypeError:
  """JAX's TypeError for a shape that is not a sequence of concrete integers (a traced value,
  a float, ...): the same first line, and the hint about jit when a value is traced."""
  msg = f"Shapes must be 1D sequences of concrete values of integer type, got {shape!r}{where}."
  if any(isinstance(d, core.Tracer) for d in (shape if isinstance(shape, (tuple, list))
                                               else (shape,))):
    msg += ("\nIf using `jit`, try using `static_argnums` or applying `jit` to smaller "
            "subfunctions.\nA traced value (computed inside jit, grad, vmap, ...) has no concrete "
            "value while tracing; only its shape and dtype are known.")
  return TypeError(msg)


def as_shape(shape) -> tuple:
  if isinstance(shape, (int, np.integer)):
    return (int(shape),)
  try:
    return tuple(core.concrete_or_error(operator.index, d, "The shape argument must be concrete.")
                 for d in shape)
  except TypeError:
    raise shape_error(tuple(shape) if isinstance(shape, (tuple, list)) else shape) from None


def as_array(x):
  """What a lax operation that has nothing to do returns: ``x`` itself if it is an ourjax value
  (an Array or a tracer), else ``x`` as an Array (NumPy arrays and scalars, Python numbers), as
  JAX's lax returns a jax.Array whatever it was given."""
  from ourjax.array import Array
  if isinstance(x, (core.Tracer, Array)) or not isinstance(
      x, (np.ndarray, np.generic, bool, int, float, complex)):
    return x
  aval = core.get_aval(x)
  # (a copy: the Array must neither alias the caller's NumPy array nor make it read-only)
  return Array._from_result(np.array(x, aval.dtype), aval)
