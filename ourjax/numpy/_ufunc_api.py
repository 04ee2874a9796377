"""``jnp.add`` and the other binary ufuncs as objects with NumPy's ufunc methods: ``reduce``,
``accumulate``, ``outer`` and ``at`` (``reduceat`` is not provided).  Methods with a direct
counterpart use it (``add.reduce`` is ``sum``, ``maximum.accumulate`` is ``lax.cummax``);
the others fold left to right with ``lax.scan``, as NumPy's loops do."""
from __future__ import annotations

import operator

import numpy as np

from ourjax import core, dtypes, lax
from ourjax.core import get_aval


def frompyfunc(func, /, nin, nout, *, identity=None):
  """A ``ufunc`` from a function of ``nin`` scalars (vectorized over arrays, as
  ``jnp.vectorize``); ``nout > 1`` gives a tuple of arrays."""
  from ourjax.numpy._misc import vectorize
  return ufunc(vectorize(func), getattr(func, "__name__", "<ufunc>"), operator.index(nin),
               operator.index(nout), identity=identity)


class ufunc:
  """A callable elementwise function with NumPy's ufunc methods."""

  def __init__(self, func, name: str, nin: int = 2, nout: int = 1, identity=None,
               reduce=None, accumulate=None, at_method=None, reorderable: bool = False):
    self._func = func
    self._reorderable = reorderable or reduce is not None
    self.__name__ = name
    self.__qualname__ = name
    self.__doc__ = func.__doc__
    self.nin, self.nout, self.nargs = nin, nout, nin + nout
    self.identity = identity
    self._reduce = reduce
    self._accumulate = accumulate
    self._at_method = at_method

  def __call__(self, *args, **kwargs):
    return self._func(*args, **kwargs)

  def __repr__(self):
    return f"<ourjax.numpy.ufunc '{self.__name__}'>"

  def __hash__(self):
    return hash((ufunc, self.__name__))

  def __eq__(self, other):
    return isinstance(other, ufunc) and other.__name__ == self.__name__

  # --- methods ---
  def _check_binary(self, method):
    if self.nin != 2 or self.nout != 1:
      raise ValueError(f"{method} only supported for functions with nin=2 and nout=1; "
                       f"{self.__name__} has nin={self.nin}, nout={self.nout}")

  def reduce(self, a, axis=0, dtype=None, out=None, keepdims: bool = False, initial=None,
             where=None):
    """Combine the elements along ``axis`` (a tuple, or None for all axes) with the function."""
    from ourjax.numpy._creation import asarray
    from ourjax.numpy._shape import moveaxis, reshape
    self._check_binary("reduce")
    if out is not None:
      raise NotImplementedError(f"The 'out' argument to {self.__name__}.reduce is not "
                                "supported.")
    if self._reduce is not None:
      return self._reduce(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial,
                          where=where)
    a = asarray(a)
    if where is not None:
      raise NotImplementedError(f"{self.__name__}.reduce with where= is not supported")
    if dtype is not None:
      a = lax.convert_element_type(a, dtypes.check_user_dtype(dtype, f"{self.__name__}.reduce"))
    aval = get_aval(a)
    axes = tuple(range(aval.ndim)) if axis is None else (
        tuple(axis) if isinstance(axis, (tuple, list)) else (axis,))
    axes = tuple(core.concrete_or_error(operator.index, x, "reduce axis must be concrete")
                 % max(aval.ndim, 1) for x in axes)
    if not axes:
      return a
    if len(axes) > 1 and not self._reorderable:
      raise ValueError(f"reduction operation '{self.__name__}' is not reorderable, so at most "
                       "one axis may be specified")
    # merge the reduced axes into one leading axis, in order
    kept = tuple(i for i in range(aval.ndim) if i not in axes)
    moved = moveaxis(a, axes, tuple(range(len(axes))))
    n = int(np.prod([aval.shape[i] for i in axes]))
    flat = reshape(moved, (n,) + tuple(aval.shape[i] for i in kept))
    if initial is None and self.identity is not None:
      initial = self.identity      # as NumPy: fold from the identity (hypot.reduce([-1]) is 1)
    if initial is None:
      if n == 0:
        raise ValueError(f"zero-size array to reduction operation {self.__name__} which has "
                         "no identity")
      else:
        first = lax.squeeze(lax.slice_in_dim(flat, 0, 1, axis=0), (0,))
        res = _fold(self._func, first, lax.slice_in_dim(flat, 1, n, axis=0))
    else:
      res = _fold(self._func, lax.full(get_aval(flat).shape[1:], initial, aval.dtype), flat)
    if keepdims:
      res = reshape(res, tuple(1 if i in axes else d for i, d in enumerate(aval.shape)))
    return res

  def accumulate(self, a, axis: int = 0, dtype=None, out=None):
    """Running combination along ``axis``."""
    from ourjax.numpy._creation import asarray
    from ourjax.numpy._shape import moveaxis
    self._check_binary("accumulate")
    if out is not None:
      raise NotImplementedError(f"The 'out' argument to {self.__name__}.accumulate is not "
                                "supported.")
    if self._accumulate is not None:
      return self._accumulate(a, axis=axis, dtype=dtype)
    a = asarray(a)
    if dtype is not None:
      a = lax.convert_element_type(a, dtypes.check_user_dtype(dtype,
                                                              f"{self.__name__}.accumulate"))
    aval = get_aval(a)
    if aval.ndim == 0:
      raise ValueError("accumulate does not allow multiple axes or a 0-d input")
    axis = operator.index(axis) % aval.ndim
    x = moveaxis(a, axis, 0)
    n = get_aval(x).shape[0]
    if n == 0:
      return a
    first = lax.slice_in_dim(x, 0, 1, axis=0)
    rest = lax.slice_in_dim(x, 1, n, axis=0)

    def step(c, v):
      c = self._func(c, v)
      return c, c
    _, ys = lax.scan(step, lax.squeeze(first, (0,)), rest)
    return moveaxis(lax.concatenate([first, ys], 0), 0, axis)

  def outer(self, A, B, /):
    """``f(A[i..., None...], B[None..., j...])``: every pair of elements."""
    from ourjax.numpy._creation import asarray
    from ourjax.numpy._util import check_arraylike
    self._check_binary("outer")
    check_arraylike(f"{self.__name__}.outer", A, B)
    A, B = asarray(A), asarray(B)
    a_shape = get_aval(A).shape
    return self._func(lax.reshape(A, a_shape + (1,) * get_aval(B).ndim), B)

  def at(self, a, indices, b=None, /, *, inplace: bool = True):
    """``a`` with ``f(a[indices], b)`` written at ``indices`` (a new array: pass
    ``inplace=False``)."""
    from ourjax.numpy._creation import asarray
    if inplace:
      raise NotImplementedError("jax.numpy.ufunc.at does not support inplace=True; use "
                                "inplace=False and the returned array")
    a = asarray(a)
    if b is None:
      if self.nin != 1:
        raise ValueError(f"{self.__name__}.at needs a second operand")
      return a.at[indices].apply(self._func)
    if self._at_method is not None:
      return getattr(a.at[indices], self._at_method)(b)
    return a.at[indices].set(self._func(a[indices], b))

  def reduceat(self, a, indices, axis=0, dtype=None, out=None):
    raise NotImplementedError(f"{self.__name__}.reduceat is not implemented")


def _fold(fn, init, xs):
  """Left fold of ``fn`` over the leading axis of ``xs``, starting from ``init``."""
  if get_aval(xs).shape[0] == 0:
    return init
  out, _ = lax.scan(lambda c, v: (fn(c, v), None), init, xs)
  return out


def _make(module):
  """The ufunc objects for the binary functions of ``module`` (``_ufuncs``)."""
  from ourjax.numpy import _reductions as red

  def r(fn):
    return lambda a, axis=0, dtype=None, keepdims=False, initial=None, where=None: fn(
        a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)

  def r_nodtype(fn):
    def reduce(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
      if dtype is not None:
        from ourjax.numpy._creation import asarray
        a = asarray(a, dtype=dtype)
      return fn(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    return reduce

  def r_bool(fn):
    def reduce(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
      out = fn(a, axis=axis, keepdims=keepdims, where=where)
      if initial is not None:
        out = module.logical_and(out, initial) if fn is red.all else module.logical_or(
            out, initial)
      return out
    return reduce

  def acc(fn):
    return lambda a, axis=0, dtype=None: fn(a, axis=axis, dtype=dtype)

  def lax_acc(fn):
    def accumulate(a, axis=0, dtype=None):
      from ourjax.numpy._creation import asarray
      a = asarray(a) if dtype is None else asarray(a, dtype=dtype)
      nd = get_aval(a).ndim
      return fn(a, axis=operator.index(axis) % max(nd, 1))
    return accumulate

  special = {
      "add": dict(identity=0, reduce=r(red.sum), accumulate=acc(red.cumsum), at_method="add"),
      "multiply": dict(identity=1, reduce=r(red.prod), accumulate=acc(red.cumprod),
                       at_method="multiply"),
      "maximum": dict(reduce=r_nodtype(red.max), accumulate=lax_acc(lax.cummax),
                      at_method="max"),
      "minimum": dict(reduce=r_nodtype(red.min), accumulate=lax_acc(lax.cummin),
                      at_method="min"),
      "logical_and": dict(identity=True, reduce=r_bool(red.all)),
      "logical_or": dict(identity=False, reduce=r_bool(red.any)),
      "logaddexp": dict(identity=-np.inf, accumulate=lax_acc(lax.cumlogsumexp),
                        reorderable=True),
      "logaddexp2": dict(identity=-np.inf, reorderable=True),
      "bitwise_or": dict(identity=0, reorderable=True),
      "bitwise_xor": dict(identity=0, reorderable=True),
      "bitwise_and": dict(identity=-1, reorderable=True),
      "logical_xor": dict(identity=False, reorderable=True),
      "fmax": dict(reorderable=True), "fmin": dict(reorderable=True),
      "hypot": dict(identity=0, reorderable=True), "gcd": dict(identity=0, reorderable=True),
      "subtract": dict(at_method="subtract"), "divide": dict(at_method="divide"),
      "true_divide": dict(at_method="divide"), "power": dict(at_method="power"),
  }
  # comparisons are not ufuncs with reduce in NumPy's sense, but their call and outer work
  names = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide",
           "remainder", "mod", "fmod", "power", "float_power", "maximum", "minimum", "fmax",
           "fmin", "logaddexp", "logaddexp2", "arctan2", "atan2", "hypot", "copysign",
           "nextafter", "heaviside", "gcd", "lcm", "ldexp", "bitwise_and", "bitwise_or",
           "bitwise_xor", "left_shift", "right_shift", "bitwise_left_shift",
           "bitwise_right_shift", "logical_and", "logical_or", "logical_xor", "equal",
           "not_equal", "less", "less_equal", "greater", "greater_equal"]
  out = {}
  for name in names:
    fn = getattr(module, name)
    out[name] = ufunc(fn, name, **special.get(name, {}))
  return out
