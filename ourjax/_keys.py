"""Typed PRNG key arrays: ``random.key(seed)`` returns an array of dtype ``key<fry>``.

A ``PRNGKeyArray`` holds its key data, a ``uint32`` array of shape ``(*shape, *key_shape)``
(``key_shape`` is the implementation's: ``(2,)`` for threefry2x32, ``(4,)`` for rbg), and its
implementation (a ``PRNGImpl``).  Its ``shape`` is the batch shape only, its ``dtype`` a
``KeyDType``; ``key_data`` unwraps it and ``wrap_key_data`` makes one.

How key arrays meet the rest of ourjax:

* Transformations (jit, vmap, grad, scan, cond, while_loop, custom_jvp/vjp, eval_shape, ...)
  flatten their arguments with ``ourjax._pytree``, where a key array is a pytree node over its
  key data: they carry the data and rebuild the key array on the way out.  The public
  ``ourjax.tree_util`` shows key arrays as leaves, as JAX does.  A key's tangent or cotangent
  is a key array over ``float0`` data, whose ``dtype`` is ``float0`` (JAX's key tangent type).
* Structural operations (reshape, indexing, ``.at[]``, concatenate, stack, broadcast, select,
  slicing, transpose, ``*_like``, ...) on key arrays run the array operation on the key data
  under ``vmap`` over the trailing key-data axis (``keywise``): the operation only ever sees
  the batch dimensions, whatever its axis arguments.  The ``ourjax.numpy`` and ``ourjax.lax``
  functions listed in ``STRUCTURAL_NUMPY``/``STRUCTURAL_LAX`` are wrapped by ``key_aware``.
* Arithmetic on key arrays raises ``TypeError`` (``add does not accept dtypes key<fry>,
  int32``), and converting one to a NumPy array raises too, as in JAX.
"""
from __future__ import annotations

import functools
import math

import numpy as np


class PRNGImpl:
  """A PRNG implementation: its key shape, dtype tag, and the functions on one key's data
  (``seed(seed) -> data``, ``split(data, shape) -> data[*shape, *key_shape]``,
  ``fold_in(data, d) -> data``, ``random_bits(data, bit_width, shape) -> uint array``)."""
  __slots__ = ("name", "key_shape", "tag", "seed", "split", "fold_in", "random_bits")

  def __init__(self, name, key_shape, tag, seed, split, fold_in, random_bits):
    self.name = name
    self.key_shape = tuple(key_shape)
    self.tag = tag
    self.seed, self.split, self.fold_in, self.random_bits = seed, split, fold_in, random_bits

  def __repr__(self):
    return f"PRNGImpl({self.name}, key_shape={self.key_shape})"

  def __str__(self):
    return self.name


PRNG_IMPLS: dict[str, PRNGImpl] = {}     # by name; filled by ourjax.random


class extended(np.generic):  # noqa: N801 (JAX's name)
  """Scalar type above every extended dtype (``jax.dtypes.extended``)."""


class prng_key(extended):  # noqa: N801 (JAX's name)
  """Scalar type of PRNG key dtypes (``jax.dtypes.prng_key``): ``jnp.issubdtype(k.dtype,
  jax.dtypes.prng_key)`` tells a typed key array from raw key data."""


class KeyDType:
  """The dtype of a typed key array (``key<fry>`` for threefry2x32).  Equal for one
  implementation; ``itemsize`` is the size of one key's data."""
  __slots__ = ("_impl",)
  type = prng_key

  def __init__(self, impl: PRNGImpl):
    self._impl = impl

  name = property(lambda self: f"key<{self._impl.tag}>")
  itemsize = property(lambda self: 4 * math.prod(self._impl.key_shape))

  def __repr__(self):
    return self.name

  __str__ = __repr__

  def __eq__(self, other):
    return isinstance(other, KeyDType) and other._impl is self._impl

  def __ne__(self, other):
    return not self == other

  def __hash__(self):
    return hash(("key", self._impl.name))


def is_key_dtype(dt) -> bool:
  return isinstance(dt, KeyDType)


def key_issubdtype(a, b) -> bool | None:
  """``issubdtype(a, b)`` when ``a`` or ``b`` is a key dtype or one of the key scalar types;
  None when neither is (ordinary NumPy rules apply).  JAX's own ``prng_key``/``extended``
  classes (as used by code written against JAX) are recognised by name."""
  def cat(x):
    if isinstance(x, KeyDType):
      return x
    if isinstance(x, type) and issubclass(x, np.generic) and x.__module__ != "numpy" and \
        x.__name__ in ("prng_key", "extended"):
      return prng_key if x.__name__ == "prng_key" else extended
    return None
  ca, cb = cat(a), cat(b)
  if ca is None and cb is None:
    return None
  if isinstance(a, PRNGKeyArray):   # an array is not a dtype (NumPy's error, by version)
    if tuple(int(v) for v in np.__version__.split(".")[:2]) < (2, 4):
      raise TypeError(f"Cannot interpret '{a!r}' as a data type")
    raise ValueError(f"Could not convert {a!r} to a NumPy dtype.")
  if isinstance(ca, KeyDType):
    if isinstance(cb, KeyDType):
      return ca == cb
    if cb is not None:
      return True
    return isinstance(b, type) and b is np.generic
  if ca is not None:   # a key scalar type
    if cb is None:
      return isinstance(b, type) and b is np.generic
    return not isinstance(cb, KeyDType) and issubclass(ca, cb)
  return False          # an ordinary dtype is never under a key type


_FLOAT0 = np.dtype([("float0", np.void, 0)])     # dtypes.float0 (dtypes imports this module)


class PRNGKeyArray:
  """An array of PRNG keys (see the module docstring)."""
  __slots__ = ("_impl", "_base_array", "__weakref__")
  __array_priority__ = 100

  def __init__(self, impl: PRNGImpl, key_data):
    self._impl = impl
    self._base_array = key_data

  # -- array attributes
  @property
  def shape(self):
    s = tuple(self._base_array.shape)
    return s[:len(s) - len(self._impl.key_shape)]

  @property
  def dtype(self):
    bd = getattr(self._base_array, "dtype", None)
    if bd is not None and bd == _FLOAT0:   # a key's tangent: float0 (JAX's)
      return bd
    return KeyDType(self._impl)

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: math.prod(self.shape))
  itemsize = property(lambda self: 4 * math.prod(self._impl.key_shape))
  nbytes = property(lambda self: self.itemsize * self.size)
  weak_type = False

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]

  def __iter__(self):
    if not self.shape:
      raise TypeError("iteration over a 0-d key array")
    return (self[i] for i in range(self.shape[0]))

  def __repr__(self):
    return (f"Array({self.shape}, dtype={self.dtype}) overlaying:\n"
            f"{np.asarray(self._base_array) if _is_concrete(self._base_array) else self._base_array}")

  __str__ = __repr__
  __hash__ = None        # unhashable, as arrays are

  def __array__(self, dtype=None, copy=None):
    raise TypeError("JAX array with PRNGKey dtype cannot be converted to a NumPy array. Use "
                    "jax.random.key_data(arr) if you wish to extract the underlying integer "
                    "array.")

  def __bool__(self):
    raise TypeError("The truth value of a key array is ambiguous.")

  # -- structural operations: on the key data, over the batch dimensions
  def __getitem__(self, idx):
    if self.ndim == 0 and _indexes_dims(idx):
      raise IndexError(f"Too many indices: array is 0-dimensional, but "
                       f"{_indexes_dims(idx)} were indexed")
    return keywise(lambda k: k[idx], (self,), {})

  @property
  def at(self):
    return _KeyAt(self)

  T = property(lambda self: self.transpose())
  mT = property(lambda self: self.swapaxes(-1, -2))

  def reshape(self, *shape, order="C"):
    if len(shape) == 1 and not isinstance(shape[0], int):
      shape = tuple(shape[0])
    return keywise(lambda k: k.reshape(shape, order=order), (self,), {})

  def transpose(self, *axes):
    axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
    return keywise(lambda k: k.transpose(*axes) if axes else k.T, (self,), {})

  def _jnp(name):  # noqa: N805
    def method(self, *args, **kwargs):
      from ourjax import numpy as jnp
      return keywise(getattr(jnp, name), (self,) + args, kwargs)
    method.__name__ = name
    return method

  squeeze, ravel, swapaxes, take, flatten = (_jnp("squeeze"), _jnp("ravel"), _jnp("swapaxes"),
                                             _jnp("take"), _jnp("ravel"))
  del _jnp

  def copy(self):
    return PRNGKeyArray(self._impl, self._base_array.copy() if hasattr(self._base_array, "copy")
                        else self._base_array)

  def __copy__(self):
    return self.copy()

  def __deepcopy__(self, memo):
    return self.copy()

  def __eq__(self, other):
    return _key_equal(self, other)

  def __ne__(self, other):
    from ourjax import lax
    return lax.bitwise_not(_key_equal(self, other))

  # -- device and buffer attributes: those of the key data
  def _base(name):  # noqa: N805
    return property(lambda self: getattr(self._base_array, name))

  device, sharding, is_fully_addressable, is_fully_replicated, committed = map(
      _base, ("device", "sharding", "is_fully_addressable", "is_fully_replicated", "committed"))
  addressable_shards = _base("addressable_shards")
  global_shards = _base("global_shards")
  del _base

  def devices(self):
    return self._base_array.devices()

  def on_device_size_in_bytes(self):
    return self._base_array.on_device_size_in_bytes()

  def unsafe_buffer_pointer(self):
    return self._base_array.unsafe_buffer_pointer()

  def addressable_data(self, index):
    return PRNGKeyArray(self._impl, self._base_array.addressable_data(index))

  def block_until_ready(self):
    b = self._base_array
    if hasattr(b, "block_until_ready"):
      b.block_until_ready()
    return self

  def copy_to_host_async(self):
    b = self._base_array
    if hasattr(b, "copy_to_host_async"):
      b.copy_to_host_async()

  def is_deleted(self):
    return self._base_array.is_deleted()

  def delete(self):
    self._base_array.delete()


def _arith_error(name, unary=False):
  def method(self, *other):
    if unary:
      raise TypeError(f"{name} does not accept dtype {self.dtype}. Accepted dtypes are "
                      "subtypes of integer, floating, complexfloating.")
    if isinstance(other[0], PRNGKeyArray) and other[0].dtype == self.dtype:
      raise TypeError(f"{name} does not accept dtype {self.dtype} at position 0. Accepted "
                      "dtypes at position 0 are subtypes of integer, floating, complexfloating.")
    raise TypeError(f"{name} does not accept dtypes {operand_dtype_name(self)}, "
                    f"{operand_dtype_name(other[0])}.")
  return method


for _dunder, _name in [("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                       ("truediv", "true_divide"), ("floordiv", "floor_divide"),
                       ("mod", "remainder"), ("pow", "power"), ("matmul", "matmul"),
                       ("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                       ("lshift", "left_shift"), ("rshift", "right_shift"), ("lt", "less"),
                       ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal")]:
  setattr(PRNGKeyArray, f"__{_dunder}__", _arith_error(_name))
  if _dunder not in ("lt", "le", "gt", "ge"):
    setattr(PRNGKeyArray, f"__r{_dunder}__", _arith_error(_name))
for _dunder, _name in [("neg", "neg"), ("pos", "pos"), ("abs", "abs"), ("invert", "not")]:
  setattr(PRNGKeyArray, f"__{_dunder}__", _arith_error(_name, unary=True))


def operand_dtype_name(x) -> str:
  """The dtype name JAX reports for an operand (Python scalars at their default dtypes)."""
  if isinstance(x, PRNGKeyArray):
    return str(x.dtype)
  from ourjax import dtypes
  try:
    return dtypes.dtype(x, canonicalize=True).name
  except Exception:
    return type(x).__name__


def _is_concrete(x) -> bool:
  from ourjax.core import Tracer
  return not isinstance(x, Tracer)


def _indexes_dims(idx) -> int:
  """How many array dimensions ``idx`` indexes (None and Ellipsis index none)."""
  items = idx if isinstance(idx, tuple) else (idx,)
  n = 0
  for i in items:
    if i is None or i is Ellipsis:
      continue
    n += np.ndim(i) if getattr(i, "dtype", None) == np.bool_ else 1
  return n


class _KeyAt:
  __slots__ = ("keys",)

  def __init__(self, keys):
    self.keys = keys

  def __getitem__(self, idx):
    return _KeyAtIndex(self.keys, idx)


class _KeyAtIndex:
  __slots__ = ("keys", "idx")

  def __init__(self, keys, idx):
    self.keys, self.idx = keys, idx

  def get(self, **kwargs):
    return keywise(lambda k: k.at[self.idx].get(**kwargs), (self.keys,), {})

  def set(self, values, **kwargs):
    return keywise(lambda k, v: k.at[self.idx].set(v, **kwargs), (self.keys, values), {})


def _key_equal(a, b):
  from ourjax import lax
  if not (isinstance(a, PRNGKeyArray) and isinstance(b, PRNGKeyArray)):
    raise TypeError(f"eq does not accept dtypes {operand_dtype_name(a)}, "
                    f"{operand_dtype_name(b)}.")
  if a._impl is not b._impl:
    raise TypeError(f"eq does not accept dtypes {a.dtype}, {b.dtype}.")
  from ourjax import numpy as jnp
  nd = len(a._impl.key_shape)
  eq = lax.eq(*jnp.broadcast_arrays(jnp.asarray(a._base_array), jnp.asarray(b._base_array)))
  return jnp.all(eq, axis=tuple(range(-nd, 0)))


# ---------------------------------------------------------------------------------------------
# Structural operations on key arrays


def _is_key(x) -> bool:
  return type(x) is PRNGKeyArray


def has_key(args, kwargs) -> bool:
  for a in args:
    t = type(a)
    if t is PRNGKeyArray or ((t is list or t is tuple) and any(type(e) is PRNGKeyArray
                                                              for e in a)):
      return True
  return bool(kwargs) and any(type(v) is PRNGKeyArray for v in kwargs.values())


def keywise(fn, args, kwargs):
  """``fn(*args, **kwargs)`` where the key arrays among the arguments (at any depth) are
  replaced by their key data, run under ``vmap`` over the key-data axis, so that ``fn`` sees
  arrays of the keys' batch shape; the array results are wrapped back into key arrays."""
  from ourjax import _pytree
  from ourjax.api import vmap
  leaves, tree = _pytree.tree_flatten((args, kwargs), is_leaf=_is_key)
  pos = [i for i, x in enumerate(leaves) if type(x) is PRNGKeyArray]
  impls = {leaves[i]._impl for i in pos}
  if len(impls) != 1:
    names = ", ".join(sorted(str(KeyDType(i)) for i in impls))
    raise TypeError(f"{getattr(fn, '__name__', 'operation')}: key arrays of different PRNG "
                    f"implementations ({names}) cannot be combined.")
  impl = impls.pop()

  def on_data(*datas):
    xs = list(leaves)
    for i, d in zip(pos, datas):
      xs[i] = d
    a, k = _pytree.tree_unflatten(tree, xs)
    return fn(*a, **k)

  f = on_data
  for _ in impl.key_shape:
    f = vmap(f, in_axes=-1, out_axes=-1)
  out = f(*[leaves[i]._base_array for i in pos])
  return _pytree.tree_map(lambda o: PRNGKeyArray(impl, o), out)


def key_aware(fn):
  """``fn`` that runs ``keywise`` when any argument is a key array (a structural operation:
  reshape, concatenate, indexing, ...)."""
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if has_key(args, kwargs):
      return keywise(fn, args, kwargs)
    return fn(*args, **kwargs)
  wrapper.__wrapped_key_aware__ = True
  return wrapper


STRUCTURAL_NUMPY = (
    "reshape", "ravel", "transpose", "swapaxes", "moveaxis", "squeeze", "expand_dims",
    "broadcast_to", "broadcast_arrays", "tile", "repeat", "concatenate", "stack", "hstack",
    "vstack", "dstack", "column_stack", "append", "take", "take_along_axis", "flip", "fliplr",
    "flipud", "roll", "rot90", "where", "select", "atleast_1d", "atleast_2d", "atleast_3d",
    "zeros_like", "ones_like", "empty_like", "full_like", "split", "array_split", "insert",
    "delete", "resize", "unstack", "permute_dims", "matrix_transpose", "copy", "diagonal",
    "triu", "tril", "pad", "compress", "extract", "place", "put")
STRUCTURAL_LAX = (
    "reshape", "transpose", "squeeze", "expand_dims", "broadcast", "broadcast_in_dim",
    "broadcast_to_rank", "concatenate", "slice", "slice_in_dim", "index_in_dim",
    "dynamic_slice", "dynamic_slice_in_dim", "dynamic_index_in_dim", "dynamic_update_slice",
    "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim", "select", "select_n", "rev",
    "pad", "gather", "scatter", "index_take", "collapse", "full_like", "zeros_like_array")


def wrap_module(module, names):
  """Replace each of ``names`` in ``module`` by its ``key_aware`` version."""
  for n in names:
    f = getattr(module, n, None)
    if f is not None and callable(f) and not getattr(f, "__wrapped_key_aware__", False):
      setattr(module, n, key_aware(f))


def key_from_struct(s):
  """An input ShapeDtypeStruct of key dtype, as a key array over a struct of its data."""
  from ourjax.api import ShapeDtypeStruct
  impl = s.dtype._impl
  return PRNGKeyArray(impl, ShapeDtypeStruct(tuple(s.shape) + impl.key_shape, np.uint32))


def _unflatten(impl, children):
  (data,) = children
  if type(data).__name__ == "ShapeDtypeStruct" and getattr(data, "dtype", None) == np.uint32:
    from ourjax.api import ShapeDtypeStruct
    n = len(impl.key_shape)
    return ShapeDtypeStruct(tuple(data.shape)[:len(data.shape) - n], KeyDType(impl))
  return PRNGKeyArray(impl, data)


def _register():
  from ourjax import _pytree
  _pytree.register_pytree_node(PRNGKeyArray, lambda k: ((k._base_array,), k._impl), _unflatten)
  _pytree.USER_LEAF_TYPES.add(PRNGKeyArray)


_register()
