"""``ourjax.random``: counter-based pseudo-random numbers, bit for bit the ones JAX draws.

Keys come in JAX's two forms: ``key(seed)`` returns a typed key array (shape ``()``, dtype
``key<fry>``; see ``ourjax._keys``), ``PRNGKey(seed)`` the legacy raw ``uint32[2]`` key data.
Every function takes either; ``split``/``fold_in`` return keys of the form they were given, and
``key_data``/``wrap_key_data`` convert.  Every sampler is a pure function of a key: the same key
gives the same numbers, and ``split`` / ``fold_in`` derive new independent keys.

The implementations (``ourjax.prng``): ``threefry2x32`` (the default, bit for bit JAX's with
``jax_threefry_partitionable=True``), ``threefry4x32``, ``philox2x32``, ``philox4x32`` (bit for
bit JAX's too), ``rbg`` and ``unsafe_rbg`` (keys as JAX's, random bits not); ``impl=`` or the
``jax_default_prng_impl`` flag picks one.

Samplers transform the bits exactly as JAX does (uniform: mantissa bits under an exponent of
one; normal: ``sqrt(2) * erfinv(u)``; randint: two bit streams reduced modulo the span; ...).
Integer and uniform outputs are bit-identical to JAX's; outputs that go through transcendental
functions (normal, gumbel, exponential, ...) can differ from JAX's in the last bit or two where
the libm-style approximations (log1p, erf) round differently.  The distributions built from
these (t, chisquare, f, pareto, wald, binomial, multinomial, ...) follow JAX's compositions:
the same key splits and the same operations in the same order.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ourjax import dtypes, lax
from ourjax._eager_replay import replayed
from ourjax import numpy as jnp
from ourjax.config import config
from ourjax._keys import PRNG_IMPLS, KeyDType, PRNGImpl, PRNGKeyArray
from ourjax.core import Tracer, get_aval
from ourjax.prng import threefry2x32, threefry_2x32  # noqa: F401  (public names)

__all__ = [
    "PRNGKey", "key", "key_data", "wrap_key_data", "key_impl", "clone", "split", "fold_in",
    "bits", "threefry2x32", "threefry_2x32", "uniform", "normal", "randint", "bernoulli",
    "categorical", "permutation", "choice", "truncated_normal", "gumbel", "exponential",
    "laplace", "logistic", "cauchy", "rademacher", "lognormal", "gamma", "loggamma", "beta",
    "dirichlet", "poisson", "orthogonal", "multivariate_normal", "pareto", "t", "chisquare",
    "f", "maxwell", "double_sided_maxwell", "weibull_min", "generalized_normal", "ball",
    "rayleigh", "wald", "geometric", "triangular", "binomial", "multinomial", "key_dtype",
]

_U32 = np.dtype(np.uint32)
_UINT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
                64: np.dtype(np.uint64)}

# ---------------------------------------------------------------------------------------------
# Keys


def _is_concrete(x) -> bool:
  return not isinstance(x, Tracer)


def _check_seed(seed, ctor: str):
  """``seed`` checked (an integer scalar) and, with x64 off, narrowed to 32 bits as JAX does."""
  if isinstance(seed, PRNGKeyArray):
    raise TypeError(f"{ctor} accepts a scalar seed, but was given a PRNG key array of shape "
                    f"{seed.shape}.")
  if isinstance(seed, bool) or (hasattr(seed, "dtype") and not dtypes.issubdtype(
      dtypes.dtype(seed), np.integer)) or isinstance(seed, (float, complex)):
    raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
  seed_shape = tuple(get_aval(seed).shape if isinstance(seed, Tracer) else np.shape(seed))
  if seed_shape:
    raise TypeError(f"{ctor} accepts a scalar seed, but was given an array of shape "
                    f"{seed_shape} != (). Use jax.vmap for batching")
  if isinstance(seed, int):
    if not -2 ** 63 <= seed < 2 ** 63:
      raise OverflowError(f"Python int {seed} too large to convert to int64 (a PRNG seed is a "
                          "64- or 32-bit integer)")
    seed = np.int64(seed)
  offset = config.read("jax_random_seed_offset")    # (added to every seed, as JAX)
  if _is_concrete(seed):
    s = np.asarray(seed)
    if not config.x64_enabled:  # as JAX with x64 off: the seed is first narrowed to 32 bits
      s = s.astype(dtypes.canonicalize_dtype(s.dtype))
    if offset:
      with np.errstate(over="ignore"):
        s = (s + np.asarray(offset).astype(s.dtype)).astype(s.dtype)
    return s
  if offset:
    seed = lax.add(seed, lax.convert_element_type(offset, get_aval(seed).dtype))
  return seed


def _resolve_impl(impl) -> PRNGImpl:
  """The ``PRNGImpl`` named by ``impl``: None (the ``jax_default_prng_impl`` flag), a name, a
  key dtype, or a ``PRNGImpl``."""
  if impl is None:
    impl = config.read("jax_default_prng_impl")
  if isinstance(impl, PRNGImpl):
    return impl
  if isinstance(impl, KeyDType):
    return impl._impl
  if isinstance(impl, str):
    got = PRNG_IMPLS.get(impl)
    if got is None:
      raise ValueError(f"unrecognized PRNG implementation {impl!r}; ourjax implements "
                       f"{', '.join(repr(n) for n in PRNG_IMPLS)}")
    return got
  raise TypeError(f"unrecognized type {type(impl)} for specifying PRNG implementation.")


def _impl_or_dtype(name, impl, dtype):
  if dtype is None:
    return impl
  if impl is not None:
    raise ValueError(f"Cannot specify both `impl` and `dtype` arguments to jax.random.{name}")
  return dtype


@replayed(static=("impl",))
def PRNGKey(seed, *, impl=None):  # noqa: N802 (JAX's name)
  """A legacy PRNG key: the raw ``uint32`` key data (``uint32[2]`` for threefry2x32) of an
  integer seed, or a typed key array while ``jax_enable_custom_prng`` is on.

  A 64-bit seed is split into its high and low words; with x64 off the seed is first narrowed
  to 32 bits (so ``PRNGKey(-1)`` is ``[0, 4294967295]``), as JAX does."""
  impl = _resolve_impl(impl)
  data = impl.seed(_check_seed(seed, "PRNGKey"))
  if config.read("jax_enable_custom_prng"):
    return PRNGKeyArray(impl, data)
  return data


def key(seed, *, impl=None, dtype=None):
  """A typed PRNG key array of shape ``()`` (dtype ``key<fry>`` for threefry2x32) from an
  integer seed.  ``impl`` names the implementation (default: ``jax_default_prng_impl``);
  ``dtype`` (a key dtype) is another way to name it."""
  impl = _resolve_impl(_impl_or_dtype("key", impl, dtype))
  return PRNGKeyArray(impl, impl.seed(_check_seed(seed, "key")))


def key_data(keys):
  """The ``uint32`` data of a key array, shape ``(*keys.shape, *key_shape)``; raw key data is
  returned as it is."""
  if isinstance(keys, PRNGKeyArray):
    return keys._base_array
  keys = jnp.asarray(keys)
  _check_key_data("key_data", keys, _resolve_impl(None))
  return keys


def wrap_key_data(key_bits_array, *, impl=None, dtype=None):
  """The key array whose data is ``key_bits_array`` (``uint32``, trailing dimensions the
  implementation's key shape)."""
  impl = _resolve_impl(_impl_or_dtype("wrap_key_data", impl, dtype))
  if isinstance(key_bits_array, PRNGKeyArray):
    raise TypeError("wrap_key_data takes raw uint32 key data, got a key array of dtype "
                    f"{key_bits_array.dtype}")
  data = jnp.asarray(key_bits_array)
  _check_key_data("wrap_key_data", data, impl)
  return PRNGKeyArray(impl, data)


def key_impl(keys):
  """The name of a key array's PRNG implementation (raw key data: the default one's)."""
  if isinstance(keys, PRNGKeyArray):
    return keys._impl.name
  keys = jnp.asarray(keys)
  impl = _resolve_impl(None)
  _check_key_data("key_impl", keys, impl)
  return impl.name


def key_dtype(impl_spec=None):
  """The key dtype of PRNG implementation ``impl_spec`` (default: ``jax_default_prng_impl``)."""
  return KeyDType(_resolve_impl(impl_spec))


def clone(key):
  """A copy of a key (a no-op for ourjax's immutable arrays, as in JAX)."""
  return key


def _check_key_data(name, data, impl):
  aval = get_aval(data)
  n = len(impl.key_shape)
  if aval.dtype != _U32:
    raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype = uint32; "
                    f"got dtype={aval.dtype.name} (in {name})")
  if tuple(aval.shape[len(aval.shape) - n:]) != impl.key_shape or len(aval.shape) < n:
    raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to end "
                    f"with {impl.key_shape}; got shape={tuple(aval.shape)} "
                    f"(dtype {aval.dtype.name}) for impl={impl.name} (in {name})")


def _check_key(name, key, allow_batched=False):
  """``(typed key, was_raw)`` for a key argument: a typed key array, or raw ``uint32`` key
  data of the default implementation (``jax_legacy_prng_key`` says whether that warns)."""
  if isinstance(key, PRNGKeyArray):
    typed = key
    raw = False
  else:
    if not isinstance(key, Tracer):
      if isinstance(key, (list, tuple)) or not hasattr(key, "shape"):
        raise TypeError(f"{name}: unexpected PRNG key type {type(key).__name__}; create keys "
                        "with ourjax.random.key(seed) or ourjax.random.PRNGKey(seed)")
      key = jnp.asarray(key)
    impl = _resolve_impl(None)
    _check_key_data(name, key, impl)
    level = config.read("jax_legacy_prng_key")
    if level != "allow":
      msg = "Legacy uint32 key array passed as key to jax.random function."
      if level == "error":
        raise ValueError(msg + " Please create keys with jax.random.key().")
      import warnings
      warnings.warn(msg + " Please create keys with jax.random.key().", UserWarning,
                    stacklevel=3)
    typed = PRNGKeyArray(impl, key)
    raw = True
  if typed.shape and not allow_batched:
    raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                     f"{typed.shape} != (). Use jax.vmap for batching.")
  return typed, raw


def _out(keys, raw):
  return keys._base_array if raw else keys


def _canonicalize_shape(shape, name="shape"):
  if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
    shape = (shape,)       # JAX accepts an int for a 1-d shape
  if not isinstance(shape, (Sequence, np.ndarray)):
    raise TypeError("Shapes must be 1D sequences of concrete values of integer type, "
                    f"got {shape!r}.")
  try:
    out = tuple(int(operator_index(d)) for d in shape)
  except TypeError:
    raise TypeError("Shapes must be 1D sequences of concrete values of integer type, "
                    f"got {shape!r}.") from None
  if any(d < 0 for d in out):
    raise ValueError(f"{name} must have nonnegative entries, got {out}")
  return out


def operator_index(d):
  import operator
  if isinstance(d, Tracer):
    raise TypeError("traced shape")
  return operator.index(d)


@replayed(static=("num",))
def split(key, num=2):
  """``num`` new keys (an int, or a shape: the result has shape ``num``)."""
  key, raw = _check_key("split", key)
  shape = tuple(num) if isinstance(num, Sequence) else (num,)
  shape = _canonicalize_shape(shape, "split's num")
  impl = key._impl
  return _out(PRNGKeyArray(impl, impl.split(key._base_array, shape)), raw)


@replayed(static=())
def fold_in(key, data):
  """A new key that is a deterministic function of ``key`` and the 32-bit integer ``data``."""
  key, raw = _check_key("fold_in", key)
  if np.ndim(data) if not isinstance(data, Tracer) else get_aval(data).ndim:
    raise TypeError("fold_in accepts a scalar, but was given an array of shape "
                    f"{np.shape(data)} != (). Use jax.vmap for batching.")
  if isinstance(data, int):
    d = jnp.asarray(np.array(data % 2 ** 32, _U32))
  else:
    d = lax.convert_element_type(jnp.asarray(data), _U32)
  impl = key._impl
  return _out(PRNGKeyArray(impl, impl.fold_in(key._base_array, d)), raw)


def _random_bits(key, bit_width: int, shape):
  return key._impl.random_bits(key._base_array, bit_width, shape)


def _unstack(keys, n):
  return [PRNGKeyArray(keys._impl, lax.index_in_dim(keys._base_array, i, 0, keepdims=False))
          for i in range(n)]


@replayed(static=("shape", "dtype"))
def bits(key, shape=(), dtype=None):
  """Uniform random bits as unsigned integers (default ``uint32``; ``uint64`` with x64)."""
  key, _ = _check_key("bits", key)
  if dtype is None:
    dtype = dtypes.default_uint_dtype()
  else:
    dtype = dtypes.check_user_dtype(dtype, "bits")
  if not dtypes.issubdtype(dtype, np.unsignedinteger):
    raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {dtype}")
  shape = _canonicalize_shape(shape)
  return _random_bits(key, dtype.itemsize * 8, shape)


# ---------------------------------------------------------------------------------------------
# Helpers shared by the samplers


def _float_dtype(dtype, name, kinds=(np.floating,)):
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, name)
  if not any(dtypes.issubdtype(dt, k) for k in kinds):
    what = "a float" if kinds == (np.floating,) else "a float or complex"
    raise ValueError(f"dtype argument to `{name}` must be {what} dtype, got {dt}")
  return dt


def _check_shape(name, shape, *param_shapes):
  if param_shapes:
    try:
      b = np.broadcast_shapes(shape, *param_shapes)
    except ValueError:
      b = None
    if b != tuple(shape):
      raise ValueError(
          f"{name} parameter shapes must be broadcast-compatible with shape argument, and the "
          f"result of broadcasting the shapes must equal the shape argument, but got result "
          f"{b} for shape argument {tuple(shape)}.")


def _shape_of(x):
  return get_aval(x).shape if isinstance(x, Tracer) else np.shape(x)


def _as_dtype(x, dt):
  """``x`` (a Python scalar or array) as a strongly typed array of ``dt``."""
  if isinstance(x, (int, float, bool)) or isinstance(x, np.generic):
    return np.array(x, dt)
  return lax.convert_element_type(jnp.asarray(x), dt)


def _bcast(x, shape):
  if _shape_of(x) == tuple(shape):
    return x
  return jnp.broadcast_to(x, shape)


def _take(arr, ind, axis):
  """``jnp.take(arr, ind, axis)`` for in-range integer indices."""
  arr = jnp.asarray(arr)
  ind = jnp.asarray(ind)
  nd = arr.ndim
  moved = jnp.moveaxis(arr, axis, 0) if axis else arr
  flat = lax.reshape(ind, (math.prod(ind.shape),))
  rows = lax.index_take(moved, [flat], (0,))
  rows = lax.reshape(rows, tuple(ind.shape) + tuple(moved.shape[1:]))
  if axis:
    k = ind.ndim
    perm = tuple(range(k, k + axis)) + tuple(range(k)) + tuple(range(k + axis, k + nd - 1))
    rows = lax.transpose(rows, perm)
  return rows


# ---------------------------------------------------------------------------------------------
# uniform, randint, bits-based samplers


@replayed(static=("shape", "dtype"))
def uniform(key, shape=(), dtype=None, minval=0., maxval=1.):
  """Uniform floats in ``[minval, maxval)``.  The random mantissa bits fill a float in
  ``[1, 2)``, which is shifted and scaled (JAX's construction, bit for bit)."""
  key, _ = _check_key("uniform", key)
  dt = _float_dtype(dtype, "uniform")
  shape = _canonicalize_shape(shape)
  return _uniform(key, shape, dt, minval, maxval)


def _uniform(key, shape, dt, minval, maxval):
  _check_shape("uniform", shape, _shape_of(minval), _shape_of(maxval))
  finfo = dtypes.finfo(dt)
  nbits, nmant = finfo.bits, finfo.nmant
  if nbits not in (16, 32, 64):
    raise TypeError(f"uniform only accepts 16-, 32-, or 64-bit dtypes, got {dt}.")
  rng_bits = 8 if nmant < 8 else nbits
  uint_dt = _UINT_DTYPES[nbits]
  b = _random_bits(key, rng_bits, shape)
  if rng_bits != nbits:
    b = lax.convert_element_type(b, uint_dt)
  float_bits = lax.or_(lax.shift_right_logical(b, np.array(rng_bits - nmant, uint_dt)),
                       np.array(1.0, dt).view(uint_dt))
  floats = lax.sub(lax.bitcast_convert_type(float_bits, dt), np.array(1.0, dt))
  lo = _as_dtype(minval, dt)
  hi = _as_dtype(maxval, dt)
  if _shape_of(lo) == () and _shape_of(hi) == ():
    return lax.max(lo, lax.add(lax.mul(floats, lax.sub(hi, lo)), lo))
  lo, hi = _bcast(lo, shape), _bcast(hi, shape)
  return lax.max(lo, lax.add(lax.mul(floats, lax.sub(hi, lo)), lo))


def _convert_and_clip_integer(val, dt):
  """Integer ``val`` converted to the integer dtype ``dt``, clipped to its range (not
  wrapped)."""
  vdt = val.dtype
  lo = max(int(np.iinfo(dt).min), int(np.iinfo(vdt).min))
  hi = min(int(np.iinfo(dt).max), int(np.iinfo(vdt).max))
  return lax.convert_element_type(jnp.clip(val, np.array(lo, vdt), np.array(hi, vdt)), dt)


@replayed(static=("shape", "dtype"))
def randint(key, shape, minval, maxval, dtype=None):
  """Uniform integers in ``[minval, maxval)`` (JAX's algorithm: two 32-bit streams reduced
  modulo the span; 8- and 16-bit dtypes are sampled in 32 bits)."""
  key, _ = _check_key("randint", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "randint")
  if not dtypes.issubdtype(dt, np.integer):
    raise TypeError(f"randint only accepts integer dtypes, got {dt}")
  shape = _canonicalize_shape(shape)
  info = np.iinfo(dt)
  sample_dt = dt
  if info.bits < 32:
    sample_dt = np.dtype(np.int32)
    minval = jnp.clip(jnp.asarray(minval).astype(np.int32), int(info.min), int(info.max))
    maxval = jnp.clip(jnp.asarray(maxval).astype(np.int32), int(info.min), int(info.max) + 1)
  return _randint(key, shape, minval, maxval, sample_dt).astype(dt)


def _randint(key, shape, minval, maxval, dt):
  _check_shape("randint", shape, _shape_of(minval), _shape_of(maxval))
  minval = jnp.asarray(minval)
  maxval = jnp.asarray(maxval)
  if not dtypes.issubdtype(minval.dtype, np.integer):
    minval = minval.astype(int)
  if not dtypes.issubdtype(maxval.dtype, np.integer):
    maxval = maxval.astype(int)
  # maxval above the dtype's range (randint(k, s, 0, 256, uint8)) widens the span by one
  top = _convert_and_clip_integer(jnp.asarray(np.array(np.iinfo(dt).max, dt)), maxval.dtype)
  maxval_out_of_range = maxval > top
  minval = _convert_and_clip_integer(minval, dt)
  maxval = _convert_and_clip_integer(maxval, dt)
  minval = _bcast(minval, shape)
  maxval = _bcast(maxval, shape)
  maxval_out_of_range = _bcast(maxval_out_of_range, shape)
  nbits = np.iinfo(dt).bits
  k1, k2 = _unstack(split(key), 2)
  higher = _random_bits(k1, nbits, shape)
  lower = _random_bits(k2, nbits, shape)
  udt = _UINT_DTYPES[nbits]
  span = lax.convert_element_type(lax.sub(maxval, minval), udt)
  one = np.array(1, udt)
  # maxval <= minval gives span 1, so minval is returned
  span = lax.select_n(lax.le(maxval, minval), span, lax.full(shape, 1, udt))
  span = lax.select_n(lax.and_(maxval_out_of_range, lax.gt(maxval, minval)),
                      span, lax.add(span, one))
  # (hi * 2**nbits + lo) mod span, with 2**nbits mod span computed without overflow
  mult = lax.rem(np.array(2 ** (nbits // 2), udt), span)
  mult = lax.rem(lax.mul(mult, mult), span)
  off = lax.add(lax.mul(lax.rem(higher, span), mult), lax.rem(lower, span))
  off = lax.rem(off, span)
  return lax.add(minval, lax.convert_element_type(off, dt))


@replayed(static=("shape", "mode"))
def bernoulli(key, p=0.5, shape=None, mode="low"):
  """Booleans that are True with probability ``p``."""
  key, _ = _check_key("bernoulli", key)
  if mode not in ("high", "low"):
    raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
  dt = dtypes.dtype(p, canonicalize=True)
  if not dtypes.issubdtype(dt, np.floating):
    raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dt}.")
  p = _as_dtype(p, dt) if not isinstance(p, float) else p
  if shape is None:
    shape = tuple(_shape_of(p))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("bernoulli", shape, _shape_of(p))
  if mode == "high":
    u = _uniform(key, (2, *shape), dt, 0., 1.)
    u1 = lax.index_in_dim(u, 0, 0, keepdims=False)
    u2 = lax.index_in_dim(u, 1, 0, keepdims=False)
    u2 = u2 * np.array(2.0 ** -dtypes.finfo(dt).nmant, dt)
    return u2 < (jnp.asarray(p, dt) - u1)
  return _uniform(key, shape, dt, 0., 1.) < jnp.asarray(p, dt)


@replayed(static=("shape", "dtype"))
def rademacher(key, shape=(), dtype=None):
  """+1 or -1 with equal probability."""
  key, _ = _check_key("rademacher", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "rademacher")
  shape = _canonicalize_shape(shape)
  b = bernoulli(key, 0.5, shape).astype(dt)
  return (2 * b - 1).astype(dt)


# ---------------------------------------------------------------------------------------------
# permutations and choices


def _shuffle(key, x, axis):
  # Sorting by fresh random 32-bit keys, repeated enough times that collisions are
  # negligible (JAX's heuristic: ceil(3 * ln(n) / ln(2**32 - 1)) rounds).
  size = math.prod(x.shape)
  num_rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
  for _ in range(num_rounds):
    key, sub = _unstack(split(key), 2)
    sort_keys = _random_bits(sub, 32, tuple(x.shape))
    _, x = lax.sort_key_val(sort_keys, x, axis)
  return x


@replayed(static=("axis", "independent"))
def permutation(key, x, axis: int = 0, independent: bool = False):
  """A random permutation of ``arange(x)`` (int ``x``) or of ``x`` along ``axis``."""
  key, _ = _check_key("permutation", key)
  if np.ndim(x) == 0 and not isinstance(x, Tracer):
    if not dtypes.issubdtype(dtypes.dtype(x), np.integer):
      raise TypeError("x must be an integer or at least 1-dimensional")
    return _shuffle(key, jnp.arange(int(x)), 0)
  x = jnp.asarray(x)
  if x.ndim == 0:
    raise TypeError("x must be an integer or at least 1-dimensional")
  axis = _canon_axis(axis, x.ndim)
  if independent or x.ndim == 1:
    return _shuffle(key, x, axis)
  ind = _shuffle(key, jnp.arange(x.shape[axis]), 0)
  return _take(x, ind, axis)


def _canon_axis(axis, ndim):
  axis = int(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim


@replayed(static=("shape", "replace", "axis", "mode"))
def choice(key, a, shape=(), replace: bool = True, p=None, axis: int = 0, mode=None):
  """Samples from ``a`` (an array, or ``arange(a)`` for an int), with or without replacement,
  optionally with probabilities ``p``."""
  key, _ = _check_key("choice", key)
  if not isinstance(shape, Sequence):
    raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
  shape = _canonicalize_shape(shape)
  arr = jnp.asarray(a)
  if arr.ndim == 0:
    if isinstance(a, Tracer):
      raise TypeError("choice: an integer `a` must be concrete (a Python int)")
    n_inputs = int(a)
  else:
    axis = _canon_axis(axis, arr.ndim)
    n_inputs = arr.shape[axis]
  n_draws = math.prod(shape)
  if n_draws == 0:
    return jnp.zeros(shape, dtype=arr.dtype)
  if n_inputs <= 0:
    raise ValueError("a must be greater than 0 unless no samples are taken")
  if not replace and n_draws > n_inputs:
    raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size "
                     f"{n_inputs}) when 'replace=False'")
  if p is None:
    if replace:
      ind = randint(key, shape, 0, n_inputs)
      result = ind if arr.ndim == 0 else _take(arr, ind, axis)
    else:
      perm = permutation(key, n_inputs if arr.ndim == 0 else arr, axis)
      result = lax.slice_in_dim(perm, 0, n_draws, axis=0 if arr.ndim == 0 else axis)
  else:
    p_arr = jnp.asarray(p)
    if not dtypes.issubdtype(p_arr.dtype, np.inexact):
      p_arr = p_arr.astype(dtypes.default_float_dtype())
    if p_arr.shape != (n_inputs,):
      raise ValueError("p must be None or a 1D vector with the same size as a.shape[axis]. "
                       f"p has shape {p_arr.shape} and a.shape[axis] is {n_inputs}.")
    if replace:
      p_cuml = jnp.cumsum(p_arr)
      total = lax.index_in_dim(p_cuml, n_inputs - 1, 0, keepdims=False)
      r = total * (1 - uniform(key, shape, dtype=p_cuml.dtype))
      ind = jnp.searchsorted(p_cuml, r).astype(int)
    else:
      g = gumbel(key, (n_inputs,), dtype=p_arr.dtype, mode=mode) + jnp.log(p_arr)
      ind = lax.top_k(g, n_draws)[1].astype(int)
    result = ind if arr.ndim == 0 else _take(arr, ind, axis)
  out_shape = shape if arr.ndim == 0 else (
      tuple(arr.shape[:axis]) + tuple(shape) + tuple(arr.shape[axis + 1:]))
  return jnp.reshape(result, out_shape)


# ---------------------------------------------------------------------------------------------
# Continuous distributions


# Giles' single-precision erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011),
# evaluated as XLA evaluates it for float32, w = -log1p(-x*x): ourjax's own lax.erf_inv is
# refined to the correctly rounded value, which differs from JAX's samples by up to 64 ulp.
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erf_inv(x):
  dt = get_aval(x).dtype
  if dt == np.float64:
    return lax.erf_inv(x)
  if dt != np.float32:  # narrow floats: compute in float32
    return lax.convert_element_type(_erf_inv(lax.convert_element_type(x, np.float32)), dt)
  c = lambda v: np.array(v, np.float32)  # noqa: E731
  w = lax.neg(lax.log1p(lax.neg(lax.mul(x, x))))
  central = w < c(5.0)
  wc = lax.sub(w, c(2.5))
  wt = lax.sub(lax.sqrt(lax.max(w, c(5.0))), c(3.0))
  pc = lax.full_like(x, _GILES_CENTRAL[0])
  pt = lax.full_like(x, _GILES_TAIL[0])
  for a, b in zip(_GILES_CENTRAL[1:], _GILES_TAIL[1:]):
    pc = lax.add(c(a), lax.mul(pc, wc))
    pt = lax.add(c(b), lax.mul(pt, wt))
  p = lax.select_n(central, pt, pc)
  out = lax.mul(p, x)
  inf = lax.mul(c(np.inf), x)
  return lax.select_n(lax.eq(lax.abs(x), c(1.0)), out, inf)


@replayed(static=("shape", "dtype"))
def normal(key, shape=(), dtype=None):
  """Standard normal samples: ``sqrt(2) * erfinv(u)`` with ``u`` uniform in (-1, 1)."""
  key, _ = _check_key("normal", key)
  dt = _float_dtype(dtype, "normal", (np.floating, np.complexfloating))
  shape = _canonicalize_shape(shape)
  return _normal(key, shape, dt)


def _normal(key, shape, dt):
  if dtypes.issubdtype(dt, np.complexfloating):
    rdt = np.dtype(np.float64 if dt == np.complex128 else np.float32)
    k_re, k_im = _unstack(split(key), 2)
    re = _normal_real(k_re, shape, rdt)
    im = _normal_real(k_im, shape, rdt)
    z = lax.add(lax.convert_element_type(re, dt),
                lax.mul(np.array(1j, dt), lax.convert_element_type(im, dt)))
    return lax.div(z, np.array(np.sqrt(2), dt))
  return _normal_real(key, shape, dt)


def _normal_real(key, shape, dt):
  lo = np.nextafter(np.array(-1., dt), np.array(0., dt))
  u = _uniform(key, shape, dt, lo, np.array(1., dt))
  return lax.mul(np.array(np.sqrt(2), dt), _erf_inv(u))


@replayed(static=("shape", "dtype"))
def truncated_normal(key, lower, upper, shape=None, dtype=None):
  """Standard normal samples conditioned on ``lower < x < upper`` (inverse-CDF method)."""
  key, _ = _check_key("truncated_normal", key)
  dt = _float_dtype(dtype, "truncated_normal")
  if shape is None:
    shape = tuple(np.broadcast_shapes(_shape_of(lower), _shape_of(upper)))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("truncated_normal", shape, _shape_of(lower), _shape_of(upper))
  sqrt2 = np.array(np.sqrt(2), dt)
  lower = _as_dtype(lower, dt)
  upper = _as_dtype(upper, dt)
  a = lax.erf(lax.div(lower, sqrt2))
  b = lax.erf(lax.div(upper, sqrt2))
  u = _uniform(key, shape, dt, a, b)
  out = lax.mul(sqrt2, _erf_inv(u))
  lo = lax.nextafter(lax.stop_gradient(lower), np.array(np.inf, dt))
  hi = lax.nextafter(lax.stop_gradient(upper), np.array(-np.inf, dt))
  return jnp.clip(out, lo, hi)


@replayed(static=("shape", "dtype"))
def exponential(key, shape=(), dtype=None):
  """Exponential(1) samples: ``-log1p(-u)``."""
  key, _ = _check_key("exponential", key)
  dt = _float_dtype(dtype, "exponential")
  shape = _canonicalize_shape(shape)
  u = _uniform(key, shape, dt, 0., 1.)
  return lax.neg(lax.log1p(lax.neg(u)))


@replayed(static=("shape", "dtype", "mode"))
def gumbel(key, shape=(), dtype=None, mode=None):
  """Gumbel samples ``-log(-log(u))`` (mode "high" spends two uniforms per sample for a wider
  range of the largest values)."""
  key, _ = _check_key("gumbel", key)
  dt = _float_dtype(dtype, "gumbel")
  shape = _canonicalize_shape(shape)
  mode = "low" if mode is None else mode
  if mode not in ("high", "low"):
    raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
  return _gumbel(key, shape, dt, mode)


def _gumbel(key, shape, dt, mode):
  info = dtypes.finfo(dt)
  if mode == "high":
    u = _uniform(key, (2, *shape), dt, 0., 1.)
    high = lax.index_in_dim(u, 0, 0, keepdims=False)
    low = lax.index_in_dim(u, 1, 0, keepdims=False)
    x = jnp.where(high >= np.array(0.5, dt), high,
                  high + np.array(2.0 ** -info.nmant, dt) * low + np.array(info.tiny, dt))
    return -jnp.log(-jnp.log1p(-x))
  u = _uniform(key, shape, dt, np.array(info.tiny, dt), 1.)
  return lax.neg(lax.log(lax.neg(lax.log(u))))


@replayed(static=("axis", "shape", "replace", "mode"))
def categorical(key, logits, axis: int = -1, shape=None, replace: bool = True, mode=None):
  """Indices drawn from ``softmax(logits, axis)`` (the Gumbel-max trick; without replacement
  the Gumbel-top-k trick)."""
  key, _ = _check_key("categorical", key)
  logits = jnp.asarray(logits)
  nd = logits.ndim
  axis = _canon_axis(axis, nd)
  batch_shape = tuple(np.delete(np.array(logits.shape, dtype=np.int64), axis).tolist())
  if shape is None:
    shape = batch_shape
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("categorical", shape, batch_shape)
  prefix = shape[:len(shape) - len(batch_shape)]
  if replace:
    logits_shape = list(shape[len(shape) - len(batch_shape):])
    logits_shape.insert(axis, logits.shape[axis])
    g = gumbel(key, (*prefix, *logits_shape), logits.dtype, mode=mode)
    z = g + lax.expand_dims(logits, tuple(range(len(prefix))))
    return jnp.argmax(z, axis=axis + len(prefix))
  logits = logits + gumbel(key, logits.shape, logits.dtype, mode=mode)
  k = math.prod(prefix)
  if k > logits.shape[axis]:
    raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number of "
                     f"categories ({logits.shape[axis]}).")
  _, idx = lax.top_k(jnp.moveaxis(logits, axis, -1), k)
  idx = jnp.moveaxis(idx, -1, 0)  # (k, *batch_shape)
  return lax.reshape(idx, shape)


@replayed(static=("shape", "dtype"))
def laplace(key, shape=(), dtype=None):
  """Laplace(0, 1) samples."""
  key, _ = _check_key("laplace", key)
  dt = _float_dtype(dtype, "laplace")
  shape = _canonicalize_shape(shape)
  u = _uniform(key, shape, dt, np.array(-1. + dtypes.finfo(dt).epsneg, dt), 1.)
  return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


@replayed(static=("shape", "dtype"))
def logistic(key, shape=(), dtype=None):
  """Standard logistic samples ``log(u) - log1p(-u)``."""
  key, _ = _check_key("logistic", key)
  dt = _float_dtype(dtype, "logistic")
  shape = _canonicalize_shape(shape)
  x = _uniform(key, shape, dt, np.array(dtypes.finfo(dt).tiny, dt), 1.)
  return lax.sub(lax.log(x), lax.log1p(lax.neg(x)))


@replayed(static=("shape", "dtype"))
def cauchy(key, shape=(), dtype=None):
  """Standard Cauchy samples ``tan(pi * (u - 1/2))``."""
  key, _ = _check_key("cauchy", key)
  dt = _float_dtype(dtype, "cauchy")
  shape = _canonicalize_shape(shape)
  u = _uniform(key, shape, dt, np.array(dtypes.finfo(dt).eps, dt), 1.)
  pi = np.array(np.pi, dt)
  return lax.tan(lax.mul(pi, lax.sub(u, np.array(0.5, dt))))


def lognormal(key, sigma=1., shape=None, dtype=None):
  """``exp(sigma * normal)``."""
  key, _ = _check_key("lognormal", key)
  dt = _float_dtype(dtype, "lognormal")
  if shape is None:
    shape = tuple(_shape_of(sigma))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("lognormal", shape, _shape_of(sigma))
  sigma = _as_dtype(sigma, dt)
  return jnp.exp(_normal_real(key, shape, dt) * sigma)


def orthogonal(key, n: int, shape=(), dtype=None, m=None):
  """Haar-distributed ``n x m`` matrices with orthonormal columns (or rows, for ``n < m``):
  the Q factor of a normal matrix, with the signs that make R's diagonal positive (Mezzadri's
  recipe).  Q comes from Gram-Schmidt, repeated once for orthogonality to working precision;
  with those signs it is the unique Q that JAX's Householder QR gives."""
  key, _ = _check_key("orthogonal", key)
  dt = _float_dtype(dtype, "orthogonal")
  shape = _canonicalize_shape(shape)
  n = operator_index(n)
  m = n if m is None else operator_index(m)
  z = _normal_real(key, (*shape, max(n, m), min(n, m)), dt)
  q = _gram_schmidt(z)
  return jnp.swapaxes(q, -1, -2) if n < m else q


def _gram_schmidt(z):
  k = z.shape[-1]
  last = z.ndim - 1
  cols = []
  for j in range(k):
    v = lax.index_in_dim(z, j, last, keepdims=False)
    if cols:
      q = jnp.stack(cols, -1)
      for _ in range(2):
        c = jnp.sum(q * jnp.expand_dims(v, -1), axis=-2)
        v = v - jnp.sum(q * jnp.expand_dims(c, -2), axis=-1)
    v = v / jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
    cols.append(v)
  return jnp.stack(cols, -1)


# ---------------------------------------------------------------------------------------------
# gamma and friends (Marsaglia-Tsang rejection per element, as JAX samples them)


def _gamma_one(key, alpha, log_space: bool):
  dt = get_aval(alpha).dtype
  c = lambda v: np.array(v, dt)  # noqa: E731
  zero, one = c(0), c(1)
  boost_mask = lax.ge(alpha, one)
  alpha_orig = alpha
  alpha = lax.select_n(boost_mask, lax.add(alpha, one), alpha)
  d = lax.sub(alpha, c(1 / 3))
  cc = lax.div(c(1 / 3), lax.sqrt(d))

  def cond_fn(state):
    _, x2, v3, u = state
    keep = lax.ge(u, lax.sub(one, lax.mul(c(0.0331), lax.mul(x2, x2))))
    keep2 = lax.ge(lax.log(u), lax.add(lax.mul(x2, c(0.5)),
                                       lax.mul(d, lax.add(lax.sub(one, v3), lax.log(v3)))))
    return lax.and_(keep, keep2)

  def body_fn(state):
    k = state[0]
    k, x_key, u_key = _unstack(split(k, 3), 3)

    def next_kxv(kxv):
      kk, _, _ = kxv
      kk, sub = _unstack(split(kk), 2)
      x = _normal_real(sub, (), dt)
      return kk, x, lax.add(one, lax.mul(x, cc))

    _, x, v = lax.while_loop(lambda kxv: lax.le(kxv[2], zero), next_kxv,
                             (x_key, zero + zero, c(-1.)))
    x2 = lax.mul(x, x)
    v3 = lax.mul(lax.mul(v, v), v)
    u = _uniform(u_key, (), dt, 0., 1.)
    return k, x2, v3, u

  key, sub = _unstack(split(key), 2)
  _, _, v, _ = lax.while_loop(cond_fn, body_fn, (key, zero + zero, one + zero, c(2.)))
  if log_space:
    u = _uniform(sub, (), dt, 0., 1.)
    log_samples = lax.log1p(lax.neg(u))  # minus an Exponential(1) draw
    log_boost = lax.select_n(lax.or_(boost_mask, lax.eq(log_samples, zero)),
                             lax.mul(log_samples, lax.div(one, alpha_orig)), zero)
    return lax.add(lax.add(lax.log(d), lax.log(v)), log_boost)
  samples = lax.sub(one, _uniform(sub, (), dt, 0., 1.))
  boost = lax.select_n(boost_mask, lax.pow(samples, lax.div(one, alpha_orig)), one)
  return lax.mul(lax.mul(d, v), boost)


def _gamma(key, a, shape, dt, log_space):
  from ourjax.api import vmap
  if shape is None:
    shape = tuple(_shape_of(a))
  else:
    _check_shape("gamma", shape, _shape_of(a))
  a = _bcast(_as_dtype(a, dt), shape)
  n = math.prod(shape)
  keys = split(key, n)
  alphas = lax.reshape(jnp.asarray(a), (n,))
  samples = vmap(lambda k, al: _gamma_one(k, al, log_space))(keys, alphas)
  return lax.stop_gradient(lax.reshape(samples, shape))


def gamma(key, a, shape=None, dtype=None):
  """Gamma(a, 1) samples (Marsaglia and Tsang's method; not differentiable in ``a`` in
  ourjax)."""
  key, _ = _check_key("gamma", key)
  dt = _float_dtype(dtype, "gamma")
  shape = None if shape is None else _canonicalize_shape(shape)
  return _gamma(key, a, shape, dt, False)


def loggamma(key, a, shape=None, dtype=None):
  """``log`` of Gamma(a, 1) samples, computed in log space (accurate for small ``a``)."""
  key, _ = _check_key("loggamma", key)
  dt = _float_dtype(dtype, "loggamma")
  shape = None if shape is None else _canonicalize_shape(shape)
  return _gamma(key, a, shape, dt, True)


def beta(key, a, b, shape=None, dtype=None):
  """Beta(a, b) samples from two log-gamma draws."""
  key, _ = _check_key("beta", key)
  dt = _float_dtype(dtype, "beta")
  if shape is None:
    shape = tuple(np.broadcast_shapes(_shape_of(a), _shape_of(b)))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("beta", shape, _shape_of(a), _shape_of(b))
  ka, kb = _unstack(split(key), 2)
  a = _bcast(_as_dtype(a, dt), shape)
  b = _bcast(_as_dtype(b, dt), shape)
  la = _gamma(ka, a, shape, dt, True)
  lb = _gamma(kb, b, shape, dt, True)
  m = lax.max(la, lb)
  ga, gb = jnp.exp(la - m), jnp.exp(lb - m)
  return ga / (ga + gb)


def dirichlet(key, alpha, shape=None, dtype=None):
  """Dirichlet(alpha) samples (the last axis of ``alpha`` holds the concentrations)."""
  key, _ = _check_key("dirichlet", key)
  dt = _float_dtype(dtype, "dirichlet")
  alpha_shape = tuple(_shape_of(alpha))
  if len(alpha_shape) < 1:
    raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(alpha_shape)}")
  if shape is None:
    shape = alpha_shape[:-1]
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("dirichlet", shape, alpha_shape[:-1])
  lg = _gamma(key, _as_dtype(alpha, dt), shape + alpha_shape[-1:], dt, True)
  from ourjax.nn import softmax
  return softmax(lg, -1)


def poisson(key, lam, shape=None, dtype=None):
  """Poisson(lam) samples (Knuth's product method for lam < 10, Hormann's transformed
  rejection above)."""
  key, _ = _check_key("poisson", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "poisson")
  if shape is None:
    shape = tuple(_shape_of(lam))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("poisson", shape, _shape_of(lam))
  lam = _bcast(_as_dtype(lam, np.float32), shape)
  lam = jnp.asarray(lam)
  use_knuth = jnp.isnan(lam) | (lam < 10)
  lam_knuth = jnp.where(use_knuth, lam, 0.0)
  lam_rej = jnp.where(use_knuth, 1e5, lam)
  max_iters = int(np.iinfo(dt).max)
  result = jnp.where(use_knuth, _poisson_knuth(key, lam_knuth, shape, dt, max_iters),
                     _poisson_rejection(key, lam_rej, shape, dt, max_iters))
  return jnp.where(lam == 0, jnp.zeros_like(result), result)


def _poisson_knuth(key, lam, shape, dt, max_iters):
  def body(carry):
    i, k, rng, log_prod = carry
    rng, sub = _unstack(split(rng), 2)
    k = jnp.where(log_prod > -lam, k + 1, k)
    u = _uniform(sub, shape, np.dtype(np.float32), 0., 1.)
    return i + 1, k, rng, log_prod + jnp.log(u)

  def cond(carry):
    i, _, _, log_prod = carry
    return jnp.any(log_prod > -lam) & (i < max_iters)

  init = (jnp.asarray(0, dt), jnp.zeros(shape, dt), key, jnp.zeros(shape, np.float32))
  k = lax.while_loop(cond, body, init)[1]
  return (k - 1).astype(dt)


def _poisson_rejection(key, lam, shape, dt, max_iters):
  log_lam = jnp.log(lam)
  b = 0.931 + 2.53 * jnp.sqrt(lam)
  a = -0.059 + 0.02483 * b
  inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
  v_r = 0.9277 - 3.6224 / (b - 2)

  def body(carry):
    i, k_out, accepted, rng = carry
    rng, k0, k1 = _unstack(split(rng, 3), 3)
    u = _uniform(k0, shape, lam.dtype, 0., 1.) - 0.5
    v = _uniform(k1, shape, lam.dtype, 0., 1.)
    u_shifted = 0.5 - jnp.abs(u)
    k = jnp.floor((2 * a / u_shifted + b) * u + lam + 0.43)
    s = jnp.log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
    t = -lam + k * log_lam - lax.lgamma(k + 1)
    accept1 = (u_shifted >= 0.07) & (v <= v_r)
    reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
    accept = accept1 | (~reject & (s <= t))
    return i + 1, jnp.where(accept, k, k_out), accepted | accept, rng

  def cond(carry):
    i, _, accepted, _ = carry
    return jnp.any(~accepted) & (i < max_iters)

  init = (jnp.asarray(0, dt), jnp.full(shape, -1, lam.dtype), jnp.zeros(shape, bool), key)
  return lax.while_loop(cond, body, init)[1].astype(dt)


# ---------------------------------------------------------------------------------------------
# Distributions built from the samplers above (each is JAX's composition: the same key splits,
# the same operations in the same order, so the same numbers)


def _check_broadcast_shapes(name, shape, *args):
  """``shape`` canonicalised and checked against the parameters' shapes, or (``None``) the
  parameters' broadcast shape."""
  arg_shapes = [tuple(_shape_of(a)) for a in args]
  if shape is None:
    return tuple(np.broadcast_shapes(*arg_shapes)) if arg_shapes else ()
  shape = _canonicalize_shape(shape)
  _check_shape(name, shape, *arg_shapes)
  return shape


def _check_all_safe_to_cast(name, dt, *args):
  """The parameters must convert to the sample dtype without promotion (a Python scalar
  always does; a float32 array does not go to float16), as JAX checks."""
  for a in args:
    if dtypes.dtype(a) != dt and dtypes.result_type(a, dt) != dt:
      raise dtypes.TypePromotionError(
          f"In arguments to {name}, cannot safely cast argument of type "
          f"{dtypes.dtype(a, canonicalize=True)} to {dt}")


def _float_param(x, dt):
  return lax.convert_element_type(jnp.asarray(x), dt)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method: str = "cholesky"):
  """Samples of N(mean, cov): ``mean + factor @ z`` with ``z`` standard normal and ``factor``
  the Cholesky factor of ``cov`` (``method='svd'``: ``U sqrt(S)``; ``'eigh'``: ``V sqrt(W)``).
  ``mean`` is ``(..., n)``, ``cov`` ``(..., n, n)``; the batch shapes broadcast against
  ``shape``."""
  from ourjax.numpy import linalg
  from ourjax.numpy._util import promote_dtypes_inexact
  key, _ = _check_key("multivariate_normal", key)
  mean, cov = promote_dtypes_inexact(jnp.asarray(mean), jnp.asarray(cov))
  if method not in {"svd", "eigh", "cholesky"}:
    raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
  dt = mean.dtype if dtype is None else dtypes.check_user_dtype(dtype, "multivariate_normal")
  if not dtypes.issubdtype(dt, np.floating):
    raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, got {dt}")
  if shape is not None:
    shape = _canonicalize_shape(shape)
  if not mean.ndim >= 1:
    raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                     f"{mean.ndim}")
  if not cov.ndim >= 2:
    raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == {cov.ndim}")
  n = mean.shape[-1]
  if tuple(cov.shape[-2:]) != (n, n):
    raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, but "
                     f"got cov.shape == {tuple(cov.shape)}.")
  if shape is None:
    shape = tuple(np.broadcast_shapes(mean.shape[:-1], cov.shape[:-2]))
  else:
    _check_shape("normal", shape, mean.shape[:-1], cov.shape[:-2])
  if method == "svd":
    u, s, _ = linalg.svd(cov)
    factor = u * jnp.sqrt(s[..., None, :])
  elif method == "eigh":
    w, v = linalg.eigh(cov)
    factor = v * jnp.sqrt(w[..., None, :])
  else:
    factor = linalg.cholesky(cov)
  z = normal(key, shape + tuple(mean.shape[-1:]), dt)
  return mean + jnp.einsum("...ij,...j->...i", factor, z)


def pareto(key, b, shape=None, dtype=None):
  """Pareto(b) samples (support ``[1, inf)``): ``exp(e / b)`` with ``e`` Exponential(1)."""
  key, _ = _check_key("pareto", key)
  dt = _float_dtype(dtype, "pareto")
  shape = _check_broadcast_shapes("pareto", shape, b)
  _check_all_safe_to_cast("pareto", dt, b)
  b = _float_param(b, dt)
  e = exponential(key, shape, dt)
  return lax.exp(e / b)


def t(key, df, shape=None, dtype=None):
  """Student's t samples with ``df`` degrees of freedom: ``z * sqrt((df / 2) / g)`` with ``z``
  standard normal and ``g`` Gamma(df / 2)."""
  key, _ = _check_key("t", key)
  dt = _float_dtype(dtype, "t")
  shape = _check_broadcast_shapes("t", shape, df)
  _check_all_safe_to_cast("t", dt, df)
  df = _float_param(df, dt)
  key_n, key_g = _unstack(split(key), 2)
  n = normal(key_n, shape, dt)
  half_df = lax.div(df, np.array(2, dt))
  g = gamma(key_g, half_df, shape, dt)
  return n * jnp.sqrt(half_df / g)


def chisquare(key, df, shape=None, dtype=None):
  """Chi-square samples with ``df`` degrees of freedom: twice a Gamma(df / 2) draw (sampled in
  log space)."""
  key, _ = _check_key("chisquare", key)
  dt = _float_dtype(dtype, "chisquare")
  shape = _check_broadcast_shapes("chisquare", shape, df)
  _check_all_safe_to_cast("chisquare", dt, df)
  return _chisquare(key, _float_param(df, dt), shape, dt)


def _chisquare(key, df, shape, dt):
  two = np.array(2, dt)
  log_g = loggamma(key, lax.div(df, two), shape, dt)
  return lax.mul(jnp.exp(log_g), two)


def f(key, dfnum, dfden, shape=None, dtype=None):
  """F-distribution samples: the ratio of two chi-square draws, each over its degrees of
  freedom."""
  key, _ = _check_key("f", key)
  dt = _float_dtype(dtype, "f")
  shape = _check_broadcast_shapes("f", shape, dfnum, dfden)
  _check_all_safe_to_cast("f", dt, dfnum, dfden)
  dfden = _float_param(dfden, dt)
  dfnum = _float_param(dfnum, dt)
  key_dfd, key_dfn = _unstack(split(key), 2)
  chi2_dfn = _chisquare(key_dfn, dfnum, shape, dt)
  chi2_dfd = _chisquare(key_dfd, dfden, shape, dt)
  return lax.div(lax.div(chi2_dfn, _bcast(dfnum, shape)), lax.div(chi2_dfd, _bcast(dfden, shape)))


def maxwell(key, shape=(), dtype=None):
  """Maxwell samples: the length of a standard normal 3-vector."""
  key, _ = _check_key("maxwell", key)
  dt = _float_dtype(dtype, "maxwell")
  shape = _canonicalize_shape(shape)
  return _maxwell(key, shape, dt)


def _maxwell(key, shape, dt):
  z = normal(key, shape + (3,), dt)
  return jnp.sqrt(jnp.sum(z * z, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
  """Double-sided Maxwell samples ``sign * maxwell * scale + loc``.  As JAX's, the result has
  shape ``shape + broadcast(loc.shape, scale.shape)`` (with ``shape`` defaulting to the
  parameters' shape when empty)."""
  key, _ = _check_key("double_sided_maxwell", key)
  dt = _float_dtype(dtype, "double_sided_maxwell")
  shape = _canonicalize_shape(shape)
  params_shape = tuple(np.broadcast_shapes(_shape_of(loc), _shape_of(scale)))
  if not shape:
    shape = params_shape
  shape = shape + params_shape
  maxwell_key, rademacher_key = _unstack(split(key), 2)
  maxwell_rvs = _maxwell(maxwell_key, shape, dt)
  random_sign = rademacher(rademacher_key, shape, dt)
  return random_sign * maxwell_rvs * scale + loc


def weibull_min(key, scale, concentration, shape=(), dtype=None):
  """Weibull samples by the inverse CDF: ``(-log1p(-u)) ** (1 / concentration) * scale``."""
  key, _ = _check_key("weibull_min", key)
  dt = _float_dtype(dtype, "weibull_min")
  shape = _canonicalize_shape(shape)
  u = _uniform(key, shape, dt, 0, 1)
  return jnp.power(-jnp.log1p(-u), 1.0 / concentration) * scale


def generalized_normal(key, p: float, shape=(), dtype=None):
  """Generalized normal samples (density proportional to ``exp(-|x|**p)``): a random sign times
  ``Gamma(1/p) ** (1/p)``."""
  key, _ = _check_key("generalized_normal", key)
  dt = _float_dtype(dtype, "generalized_normal")
  shape = _canonicalize_shape(shape)
  return _generalized_normal(key, p, shape, dt)


def _generalized_normal(key, p, shape, dt):
  k0, k1 = _unstack(split(key), 2)
  g = gamma(k0, 1 / p, shape, dt)
  r = rademacher(k1, shape, dt)
  return r * g ** (1 / p)


def ball(key, d: int, p: float = 2, shape=(), dtype=None):
  """Points uniform in the unit ``p``-norm ball of dimension ``d`` (shape ``shape + (d,)``)."""
  key, _ = _check_key("ball", key)
  dt = _float_dtype(dtype, "ball")
  shape = _canonicalize_shape(shape)
  from ourjax import core
  d = core.concrete_or_error(operator_index, d, "The error occurred in jax.random.ball()")
  k1, k2 = _unstack(split(key), 2)
  g = _generalized_normal(k1, p, (*shape, d), dt)
  e = exponential(k2, shape, dt)
  return g / (((jnp.abs(g) ** p).sum(-1) + e) ** (1 / p))[..., None]


def rayleigh(key, scale, shape=None, dtype=None):
  """Rayleigh samples ``scale * sqrt(-2 log u)``."""
  key, _ = _check_key("rayleigh", key)
  dt = _float_dtype(dtype, "rayleigh")
  shape = _check_broadcast_shapes("rayleigh", shape, scale)
  _check_all_safe_to_cast("rayleigh", dt, scale)
  u = _uniform(key, shape, dt, 0., 1.)
  scale = _bcast(_float_param(scale, dt), shape)
  return lax.mul(scale, lax.sqrt(lax.mul(lax.log(u), np.array(-2, dt))))


def wald(key, mean, shape=None, dtype=None):
  """Wald (inverse Gaussian, unit shape) samples by Michael, Schucany and Haas' transformation
  of a normal and a uniform draw."""
  key, _ = _check_key("wald", key)
  dt = _float_dtype(dtype, "wald")
  shape = _check_broadcast_shapes("wald", shape, mean)
  _check_all_safe_to_cast("wald", dt, mean)
  k1, k2 = _unstack(split(key), 2)
  mean = _bcast(_float_param(mean, dt), shape)
  v = normal(k1, shape, dt)
  z = _uniform(k2, shape, dt, 0., 1.)
  y = lax.integer_pow(v, 2)
  y_sq = lax.integer_pow(y, 2)
  mean_sq = lax.integer_pow(mean, 2)
  sqrt_term = lax.sqrt(4 * mean * y + mean_sq * y_sq)
  x = mean + mean_sq * y / 2 - mean / 2 * sqrt_term
  return lax.select(lax.le(z, mean / (mean + x)), x, mean_sq / x)


def geometric(key, p, shape=None, dtype=None):
  """Geometric samples (trials up to the first success, ``>= 1``): ``floor(log u / log1p(-p))
  + 1`` in ``p``'s float dtype, converted to the integer ``dtype``."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("geometric", key)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "geometric")
  if not dtypes.issubdtype(dt, np.integer):
    raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dt}")
  shape = _check_broadcast_shapes("geometric", shape, p)
  check_arraylike("geometric", p)
  (p,) = promote_dtypes_inexact(p)
  u = _uniform(key, shape, p.dtype, 0., 1.)
  u = jnp.where(u == 0, 1, u)   # JAX's guard against log(0)
  log_u = lax.log(u)
  log_one_minus_p = jnp.broadcast_to(lax.log1p(-p), shape)
  g = lax.floor(lax.div(log_u, log_one_minus_p)) + 1
  return g.astype(dt)


def triangular(key, left, mode, right, shape=None, dtype=None):
  """Triangular(left, mode, right) samples by the inverse CDF."""
  key, _ = _check_key("triangular", key)
  dt = _float_dtype(dtype, "triangular")
  shape = _check_broadcast_shapes("triangular", shape, left, mode, right)
  _check_all_safe_to_cast("triangular", dt, left, mode, right)
  left = jnp.broadcast_to(_float_param(left, dt), shape)
  right = jnp.broadcast_to(_float_param(right, dt), shape)
  mode = jnp.broadcast_to(_float_param(mode, dt), shape)
  fc = (mode - left) / (right - left)
  u = _uniform(key, shape, dt, 0., 1.)
  out1 = left + lax.sqrt(u * (right - left) * (mode - left))
  out2 = right - lax.sqrt((1 - u) * (right - left) * (right - mode))
  return lax.select(u < fc, out1, out2)


# binomial: inversion (summing geometric gaps) where count * p <= 10, else Hormann's BTRS
# transformed rejection; both use the same key, as in JAX (and TensorFlow) whose algorithm this is

_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                  0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                  0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                  0.00833056343336287)


def _stirling_approx_tail(k):
  """``log(k!) - (k + 1/2) log(k + 1) + (k + 1) - log(sqrt(2 pi))`` (the Stirling series'
  error): tabulated for k <= 9, a three-term series above."""
  dt = k.dtype
  vals = jnp.array(_STIRLING_TAIL, dtype=dt)
  use_tail_values = k <= 9
  k = lax.clamp(np.array(0.0, dt), k, np.array(9.0, dt))
  kp1sq = (k + 1) * (k + 1)
  approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
  k = jnp.floor(k)
  return lax.select(use_tail_values, vals[jnp.asarray(k, dtype="int32")], approx)


def _binomial_inversion(key, count, prob, shape, dt, max_iters):
  log1minusprob = jnp.log1p(-prob)

  def body_fn(carry):
    i, num_geom, geom_sum, key = carry
    subkey, key = _unstack(split(key), 2)
    num_geom_out = lax.select(geom_sum <= count, num_geom + 1, num_geom)
    u = _uniform(subkey, shape, prob.dtype, 0., 1.)
    geom = jnp.ceil(jnp.log(u) / log1minusprob)
    return i + 1, num_geom_out, geom_sum + geom, key

  def cond_fn(carry):
    i, geom_sum = carry[0], carry[2]
    return (geom_sum <= count).any() & (i < max_iters)

  zeros = lax.full(shape, 0, prob.dtype)
  k = lax.while_loop(cond_fn, body_fn, (jnp.asarray(0), zeros, zeros, key))[1]
  return (k - 1).astype(dt)


def _btrs(key, count, prob, shape, dt, max_iters):
  stddev = jnp.sqrt(count * prob * (1 - prob))
  b = 1.15 + 2.53 * stddev
  a = -0.0873 + 0.0248 * b + 0.01 * prob
  c = count * prob + 0.5
  v_r = 0.92 - 4.2 / b
  r = prob / (1 - prob)
  alpha = (2.83 + 5.1 / b) * stddev
  m = jnp.floor((count + 1) * prob)

  def body_fn(carry):
    i, k_out, accepted, key = carry
    key, subkey_0, subkey_1 = _unstack(split(key, 3), 3)
    u = _uniform(subkey_0, shape, prob.dtype, 0., 1.)
    v = _uniform(subkey_1, shape, prob.dtype, 0., 1.)
    u = u - 0.5
    us = 0.5 - jnp.abs(u)
    accept1 = (us >= 0.07) & (v <= v_r)
    k = jnp.floor((2 * a / us + b) * u + c)
    reject = (k < 0) | (k > count)
    v = jnp.log(v * alpha / (a / (us * us) + b))
    ub = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
          + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
          + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
          + _stirling_approx_tail(m)
          + _stirling_approx_tail(count - m)
          - _stirling_approx_tail(k)
          - _stirling_approx_tail(count - k))
    accept2 = v <= ub
    accept = accept1 | (~reject & accept2)
    k_out = lax.select(accept, k, k_out)
    return i + 1, k_out, accepted | accept, key

  def cond_fn(carry):
    i, accepted = carry[0], carry[2]
    return (~accepted).any() & (i < max_iters)

  init = (jnp.asarray(0), lax.full(shape, -1, prob.dtype), jnp.full(shape, False, bool), key)
  return lax.while_loop(cond_fn, body_fn, init)[1].astype(dt)


def binomial(key, n, p, shape=None, dtype=None):
  """Binomial(n, p) samples, as floats (``n`` may be a float; NaN for invalid parameters, inf
  for an infinite ``n``)."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("binomial", key)
  check_arraylike("binomial", n, p)
  dt = _float_dtype(dtype, "binomial")
  if shape is None:
    shape = tuple(np.broadcast_shapes(_shape_of(n), _shape_of(p)))
  else:
    shape = _canonicalize_shape(shape)
    _check_shape("binomial", shape, _shape_of(n), _shape_of(p))
  (prob,) = promote_dtypes_inexact(p)
  count = lax.convert_element_type(jnp.asarray(n), prob.dtype)
  count = jnp.broadcast_to(count, shape)
  prob = jnp.broadcast_to(prob, shape)
  p_lt_half = prob < 0.5
  q = lax.select(p_lt_half, prob, 1.0 - prob)
  count_nan_or_neg = jnp.isnan(count) | (count < 0.0)
  count_inf = jnp.isinf(count)
  q_is_nan = jnp.isnan(q)
  q_l_0 = q < 0.0
  q = lax.select(q_is_nan | q_l_0, lax.full_like(q, 0.01), q)
  use_inversion = count_nan_or_neg | (count * q <= 10.0)
  count = jnp.floor(count)   # as np.random.binomial does with a float count
  count_inv = lax.select(use_inversion, count, lax.full_like(count, 0.0))
  count_btrs = lax.select(use_inversion, lax.full_like(count, 1e4), count)
  q_btrs = lax.select(use_inversion, lax.full_like(q, 0.5), q)
  max_iters = dt.type(dtypes.finfo(dt).max)
  samples = lax.select(use_inversion,
                       _binomial_inversion(key, count_inv, q, shape, dt, max_iters),
                       _btrs(key, count_btrs, q_btrs, shape, dt, max_iters))
  invalid = q_l_0 | q_is_nan | count_nan_or_neg
  samples = lax.select(invalid, jnp.full_like(samples, np.nan, dt), samples)
  samples = lax.select(count_inf & (~invalid), jnp.full_like(samples, np.inf, dt), samples)
  return lax.select(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                    count.astype(dt) - samples)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
  """Multinomial(n, p) counts over the last axis of ``p`` (one binomial draw per category from
  what the previous categories left, scanned over the categories)."""
  from ourjax.numpy._util import check_arraylike, promote_dtypes_inexact
  key, _ = _check_key("multinomial", key)
  check_arraylike("multinomial", n, p)
  n, p = promote_dtypes_inexact(n, p)
  if shape is None:
    shape = tuple(p.shape)
  n = jnp.broadcast_to(n, shape[:-1])
  p = jnp.broadcast_to(p, shape)

  def step(remainder, ratio_key):
    ratio, k = ratio_key
    count = binomial(k, remainder, ratio.clip(0, 1), dtype=remainder.dtype)
    return remainder - count, count

  p = jnp.moveaxis(p, -1, 0)
  remaining_probs = lax.cumsum(p, 0, reverse=True)
  ratios = p / jnp.where(remaining_probs == 0, 1, remaining_probs)
  keys = split(key, ratios.shape[0])
  _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
  out = jnp.moveaxis(counts, 0, -1)
  return out.astype(dtypes.default_float_dtype() if dtype is None else dtype)
