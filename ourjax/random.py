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


# (the compound samplers, after the helpers above that they import)
from ourjax._random_compound import (  # noqa: E402
    ball, beta, binomial, chisquare, dirichlet, double_sided_maxwell, f, gamma, generalized_normal,
    geometric, loggamma, maxwell, multinomial, multivariate_normal, pareto, poisson, rayleigh, t,
    triangular, wald, weibull_min)
