"""Operators and methods shared by ``Array`` and every ``Tracer``, installed on both classes so
that user code cannot tell them apart (JAX's ``_set_array_base_attributes`` idea)."""
from __future__ import annotations

import numpy as np

from ourjax import core, lax
from ourjax.array import Array


def _defer_to_unrecognized(binary_op):
  """Return NotImplemented for operand types we do not know (so Python tries the other side)."""
  from ourjax.numpy._util import is_arraylike

  def op(self, other):
    if not is_arraylike(other):
      return NotImplemented
    return binary_op(self, other)
  return op


def _install():
  import ourjax.numpy as jnp

  def swap(f):
    return lambda self, other: f(other, self)

  ops = {
      "__add__": jnp.add, "__sub__": jnp.subtract, "__mul__": jnp.multiply,
      "__truediv__": jnp.true_divide, "__floordiv__": jnp.floor_divide, "__mod__": jnp.remainder,
      "__pow__": jnp.power, "__matmul__": None,
      "__and__": jnp.bitwise_and, "__or__": jnp.bitwise_or, "__xor__": jnp.bitwise_xor,
      "__lshift__": jnp.left_shift, "__rshift__": jnp.right_shift,
      "__eq__": jnp.equal, "__ne__": jnp.not_equal, "__lt__": jnp.less, "__le__": jnp.less_equal,
      "__gt__": jnp.greater, "__ge__": jnp.greater_equal,
  }
  methods = {}
  for name, fn in ops.items():
    if fn is None:
      continue
    methods[name] = _defer_to_unrecognized(fn)
    rname = "__r" + name[2:]
    if name not in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
      methods[rname] = _defer_to_unrecognized(swap(fn))
  methods["__divmod__"] = _defer_to_unrecognized(lambda x, y: jnp.divmod(x, y))
  methods["__rdivmod__"] = _defer_to_unrecognized(lambda x, y: jnp.divmod(y, x))
  methods["__neg__"] = jnp.negative
  methods["__pos__"] = jnp.positive
  methods["__abs__"] = jnp.absolute
  methods["__invert__"] = jnp.invert
  methods["__round__"] = lambda self, ndigits=None: jnp.round(self, ndigits or 0)

  methods.update(
      sum=jnp.sum, prod=jnp.prod, max=jnp.max, min=jnp.min, mean=jnp.mean, all=jnp.all,
      any=jnp.any, var=jnp.var, std=jnp.std,
      astype=lambda self, dtype, copy=False, device=None: jnp.astype(self, dtype),
      reshape=_reshape_method, conj=jnp.conjugate, conjugate=jnp.conjugate,
      round=lambda self, decimals=0, out=None: jnp.round(self, decimals),
  )
  props = {
      "real": jnp.real, "imag": jnp.imag,
  }
  for cls in (Array, core.Tracer):
    for name, fn in methods.items():
      setattr(cls, name, fn)
    for name, fn in props.items():
      setattr(cls, name, property(fn))


def _reshape_method(self, *args, order="C", shape=None):
  import ourjax.numpy as jnp
  if shape is not None:
    return jnp.reshape(self, shape, order=order)
  newshape = args[0] if len(args) == 1 else args
  return jnp.reshape(self, newshape, order=order)
