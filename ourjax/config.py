"""Global flags, read from the environment at import and changed with ``config.update``.

Names follow JAX's (``jax_enable_x64`` ...) so that ``ourjax.config.update("jax_enable_x64", True)``
works as in JAX.  Environment variables: ``OURJAX_ENABLE_X64``, ``OURJAX_PLATFORMS``,
``OURJAX_LOG_COMPILES``, ``OURJAX_DEBUG_NANS``, ``OURJAX_DEBUG_INFS``, ``OURJAX_CACHE_DIR``,
``OURJAX_DUMP``, ``OURJAX_CHECK_STATIC_INDICES`` (out-of-bounds static integer indices raise
IndexError in ``x[idx]``, as ``jax_check_static_indices``), ``OURJAX_ARRAYS_ON_DEVICE``
(``ourjax_arrays_on_default_device``: ``jnp`` creation functions place their results on the
default device when it is a GPU, as JAX's do).

As in JAX, ``config.update`` changes a flag for every thread, while the context managers
(``enable_x64(...)``, ``disable_jit()``, ``debug_nans(...)``) change it for the calling thread
only, until the block ends: another thread keeps seeing the global value.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading


def env_switch(name: str) -> bool:
  """A switch that is on unless the environment variable ``name`` is 0, false, no or off (the
  backends' ``OURJAX_CUDA_GRAPHS``, ``OURJAX_CUDA_PDL`` and the like, read where used)."""
  return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def _env_bool(name: str, default: bool = False) -> bool:
  v = os.environ.get(name)
  if v is None:
    return default
  return v.strip().lower() in ("1", "true", "yes", "on")


class _Local(threading.local):
  def __init__(self):
    self.overrides: dict = {}     # this thread's context-manager values, by flag name


class Config:
  """A small bag of named flags; unknown names raise AttributeError (as JAX's does).
  ``_values`` holds the global values, ``_local.overrides`` the calling thread's."""

  def __init__(self):
    object.__setattr__(self, "_local", _Local())
    # counts the updates of the global values: a cache keyed by it (the eager replays') sees a
    # flag change without reading every flag
    object.__setattr__(self, "_version", 0)
    object.__setattr__(self, "_values", {
        "jax_enable_x64": _env_bool("OURJAX_ENABLE_X64"),
        "jax_platforms": os.environ.get("OURJAX_PLATFORMS") or None,
        "jax_log_compiles": _env_bool("OURJAX_LOG_COMPILES"),
        # what a checkpoint saves for the backward pass, logged at WARNING (else DEBUG)
        "jax_log_checkpoint_residuals": False,
        # a warning per jit trace-cache miss, saying why (``_cache_miss.py``)
        "jax_explain_cache_misses": _env_bool("OURJAX_EXPLAIN_CACHE_MISSES"),
        "jax_debug_nans": _env_bool("OURJAX_DEBUG_NANS"),
        "jax_debug_infs": _env_bool("OURJAX_DEBUG_INFS"),
        "jax_disable_jit": _env_bool("OURJAX_DISABLE_JIT"),
        "jax_default_matmul_precision": None,
        "jax_compilation_cache_dir": os.environ.get("OURJAX_CACHE_DIR") or None,
        "jax_numpy_rank_promotion": "allow",
        "jax_random_seed_offset": 0,
        "jax_numpy_dtype_promotion": "standard",
        "jax_num_cpu_devices": None,     # None: OURJAX_NUM_CPU_DEVICES, else 1 (backends)
        "jax_check_tracer_leaks": _env_bool("OURJAX_CHECK_TRACER_LEAKS"),
        "jax_transfer_guard": None,
        "jax_transfer_guard_host_to_device": None,
        "jax_transfer_guard_device_to_host": None,
        "jax_transfer_guard_device_to_device": None,
        "jax_default_prng_impl": os.environ.get("OURJAX_DEFAULT_PRNG_IMPL") or "threefry2x32",
        "jax_enable_custom_prng": _env_bool("OURJAX_ENABLE_CUSTOM_PRNG"),
        "jax_legacy_prng_key": "allow",
        "jax_no_tracing": False,
        "jax_no_execution": False,
        "jax_check_static_indices": _env_bool("OURJAX_CHECK_STATIC_INDICES"),
        # True: jnp's creation functions put their results on the default device when it is
        # a GPU (JAX's placement: eager operations on them then run there, ``_eager_device``);
        # False: they stay host arrays until a jitted call or ``device_put`` moves them
        "ourjax_arrays_on_default_device": _env_bool("OURJAX_ARRAYS_ON_DEVICE"),
        # False: lax.reduce_sum of f16/bf16 over a non-singleton axis raises (jnp.sum sums in
        # f32 and is unaffected)
        "jax_allow_f16_reductions": True,
        # a Device, or a platform name ('cpu', 'gpu'), where uncommitted values go: jitted calls
        # of uncommitted arguments run on its backend, device_put(x) puts x there
        # (``default_device``); None: the default backend's first device
        "jax_default_device": None,
    })

  def update(self, name: str, value) -> None:
    if name not in self._values:
      raise AttributeError(f"Unrecognized config option: {name}")
    _check_value(name, value)
    self._values[name] = value
    object.__setattr__(self, "_version", self._version + 1)

  def read(self, name: str):
    ov = self._local.overrides
    if ov and name in ov:
      return ov[name]
    return self._values[name]

  def __getattr__(self, name):
    if name.startswith("_"):
      raise AttributeError(name)
    ov = self._local.overrides
    if name in ov:
      return ov[name]
    try:
      return self._values[name]
    except KeyError:
      raise AttributeError(f"Unrecognized config option: {name}") from None

  @property
  def x64_enabled(self) -> bool:
    ov = self._local.overrides
    return bool(ov["jax_enable_x64"] if "jax_enable_x64" in ov else
                self._values["jax_enable_x64"])

  @contextlib.contextmanager
  def _override(self, name, value):
    """Set ``name`` to ``value`` in the calling thread for the duration of the block."""
    if name not in self._values:
      raise AttributeError(f"Unrecognized config option: {name}")
    _check_value(name, value)
    ov = self._local.overrides
    missing = object()
    old = ov.get(name, missing)
    ov[name] = value
    try:
      yield
    finally:
      if old is missing:
        del ov[name]
      else:
        ov[name] = old


def internal_promotion(fn):
  """``fn`` (a library-internal algorithm) run with standard dtype promotion and rank
  promotion allowed: its mixed real/complex and broadcast-by-rank arithmetic is the library's,
  not the user's, so ``jax_numpy_dtype_promotion='strict'`` / ``jax_numpy_rank_promotion=
  'raise'`` do not apply inside it (JAX's implementations never trip them either)."""
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with config._override("jax_numpy_dtype_promotion", "standard"), \
        config._override("jax_numpy_rank_promotion", "allow"):
      return fn(*args, **kwargs)
  return wrapped


_DTYPE_PROMOTIONS = ("standard", "strict")
_RANK_PROMOTIONS = ("allow", "warn", "raise")


#: the precision names ``jax_default_matmul_precision`` takes (and, as JAX, the names of the
#: ``lax.DotAlgorithmPreset``s: dots given no precision then use that algorithm)
_MATMUL_PRECISIONS = ("default", "high", "highest", "bfloat16", "tensorfloat32", "float32")


def _dot_algorithm_names() -> list:
  """The names of ``lax.DotAlgorithmPreset``s other than DEFAULT (JAX takes them as a default
  matmul precision too)."""
  from ourjax.lax.dot_algorithm import DotAlgorithmPreset
  return [n for n in DotAlgorithmPreset.__members__ if n != "DEFAULT"]


def _check_value(name, value):
  if name == "jax_default_matmul_precision" and value is not None and (
      not isinstance(value, str) or (value.lower() not in _MATMUL_PRECISIONS and
                                     value not in _dot_algorithm_names())):
    raise ValueError(f"new enum value must be None or in "
                     f"{list(_MATMUL_PRECISIONS) + _dot_algorithm_names()}, got "
                     f"{value!r} of type {type(value)}.")
  if name == "jax_random_seed_offset" and (isinstance(value, bool) or
                                           not hasattr(value, "__index__")):
    raise ValueError(f"jax_random_seed_offset must be an int, got {value!r}")
  if name == "jax_numpy_rank_promotion" and value not in _RANK_PROMOTIONS:
    raise ValueError(f"new enum value must be in {list(_RANK_PROMOTIONS)}, got {value} of type "
                     f"{type(value)}.")
  if name == "jax_default_device" and value is not None and value not in ("cpu", "gpu", "cuda"):
    from ourjax.backends import Device
    if not isinstance(value, Device):
      raise ValueError("jax.default_device must be passed either a Device object (e.g. "
                       "`jax.devices('cpu')[0]`) or a platform name string like 'cpu' or 'gpu'"
                       f", got: {value!r}")
  if name == "jax_numpy_dtype_promotion" and value not in _DTYPE_PROMOTIONS:
    raise ValueError(f"{value!r} is not a valid NumpyDtypePromotion (jax_numpy_dtype_promotion "
                     f"must be one of {_DTYPE_PROMOTIONS})")


config = Config()


def numpy_dtype_promotion(new_val: str):
  """Context manager for ``jax_numpy_dtype_promotion`` inside a block (this thread only):
  'standard' (JAX's promotion lattice) or 'strict' (operands of different dtypes raise
  ``TypePromotionError``, except weakly typed Python scalars of a kind the other dtype holds:
  an int with any number, a float with any float or complex, a complex with any complex)."""
  _check_value("jax_numpy_dtype_promotion", new_val)
  return config._override("jax_numpy_dtype_promotion", new_val)


def numpy_rank_promotion(new_val: str):
  """Context manager for ``jax_numpy_rank_promotion`` inside a block (this thread only): what
  ``jax.numpy`` does when operands of different non-zero ranks broadcast (``ones(2) +
  ones((1, 2))``): 'allow' (NumPy's rule, silently), 'warn' (a UserWarning) or 'raise' (a
  ValueError).  Rank-0 operands never count."""
  _check_value("jax_numpy_rank_promotion", new_val)
  return config._override("jax_numpy_rank_promotion", new_val)


def random_seed_offset(new_val: int):
  """Context manager for ``jax_random_seed_offset`` (this thread only): an integer added to
  every seed ``random.key`` and ``random.PRNGKey`` are given (so a program's random streams
  change without editing its seeds)."""
  return config._override("jax_random_seed_offset", new_val)


def default_matmul_precision(new_val):
  """Context manager for ``jax_default_matmul_precision`` (this thread only): the precision
  of matrix products (``lax.dot_general`` and what uses it) that give none, recorded in their
  ``precision`` parameter; None, or one of 'default'/'bfloat16', 'high'/'tensorfloat32',
  'highest'/'float32'.  jit's cache is keyed on it."""
  _check_value("jax_default_matmul_precision", new_val)
  return config._override("jax_default_matmul_precision", new_val)


def explain_cache_misses(new_val: bool = True):
  """Context manager for ``jax_explain_cache_misses`` (this thread only): each jit trace-cache
  miss logs a warning saying why (``TRACING CACHE MISS at ...``)."""
  return config._override("jax_explain_cache_misses", bool(new_val))


def log_compiles(new_val: bool = True):
  """Context manager for ``jax_log_compiles`` (this thread only): each compilation logs a
  warning naming the function, its argument types and why the cache missed."""
  return config._override("jax_log_compiles", bool(new_val))


def allow_f16_reductions(new_val: bool = True):
  """Context manager for ``jax_allow_f16_reductions`` (this thread only): with False,
  ``lax.reduce_sum`` of a float16/bfloat16 operand over an axis longer than 1 raises."""
  return config._override("jax_allow_f16_reductions", bool(new_val))


def default_device(new_val):
  """Context manager for ``jax_default_device`` (this thread only): inside the block,
  uncommitted values go to ``new_val`` (a Device, or 'cpu' / 'gpu' for that platform's first):
  a jitted call whose arguments are committed nowhere runs on its backend (its results stay
  uncommitted, as in JAX) and ``device_put(x)`` puts ``x`` there; None restores the default
  backend's first device."""
  return config._override("jax_default_device", new_val)


def enable_x64(new_val: bool = True):
  """Context manager turning 64-bit types on (or off) inside a block (this thread only)."""
  return config._override("jax_enable_x64", new_val)


def checking_leaks(new_val: bool = True):
  """Context manager: while on, a jit trace whose tracers are still referenced after it ends
  (stored in a list or a global by the traced function) raises ``UnexpectedTracerError``."""
  return config._override("jax_check_tracer_leaks", new_val)


#: JAX's other name for ``checking_leaks``.
check_tracer_leaks = checking_leaks


_TRANSFER_LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")


def _transfer_guard(name):
  def guard(new_val: str):
    if new_val not in _TRANSFER_LEVELS:
      raise ValueError(f"{name} must be one of {_TRANSFER_LEVELS}, got {new_val!r}")
    return config._override(name, new_val)
  guard.__name__ = name[4:]
  guard.__doc__ = (f"Context manager setting ``{name}`` (one of {', '.join(_TRANSFER_LEVELS)}). "
                   "ourjax records the level; on the CPU, where host and device memory are "
                   "the same, no transfer is ever guarded.")
  return guard


transfer_guard_host_to_device = _transfer_guard("jax_transfer_guard_host_to_device")
transfer_guard_device_to_host = _transfer_guard("jax_transfer_guard_device_to_host")
transfer_guard_device_to_device = _transfer_guard("jax_transfer_guard_device_to_device")


@contextlib.contextmanager
def transfer_guard(new_val: str):
  """Context manager setting the three transfer guards (host to device, device to host, device
  to device) to ``new_val`` at once."""
  with transfer_guard_host_to_device(new_val), transfer_guard_device_to_host(new_val), \
      transfer_guard_device_to_device(new_val), config._override("jax_transfer_guard", new_val):
    yield


def debug_nans(new_val: bool = True):
  """Context manager for ``jax_debug_nans`` inside a block (this thread only)."""
  return config._override("jax_debug_nans", new_val)


def debug_infs(new_val: bool = True):
  """Context manager for ``jax_debug_infs`` inside a block (this thread only)."""
  return config._override("jax_debug_infs", new_val)


def default_prng_impl(new_val: str):
  """Context manager for ``jax_default_prng_impl`` (the PRNG that ``random.key`` and
  ``random.PRNGKey`` use when given no ``impl``: ``threefry2x32``, ``rbg``, ``unsafe_rbg``)."""
  return config._override("jax_default_prng_impl", new_val)


def enable_custom_prng(new_val: bool = True):
  """Context manager for ``jax_enable_custom_prng``: while on, ``random.PRNGKey`` returns a
  typed key array (as ``random.key`` does) instead of raw ``uint32`` key data."""
  return config._override("jax_enable_custom_prng", new_val)


_LEGACY_KEY_LEVELS = ("allow", "warn", "error")


def legacy_prng_key(new_val: str):
  """Context manager for ``jax_legacy_prng_key``: what ``jax.random`` functions do when given
  a raw ``uint32`` key (``allow``, ``warn`` or ``error``)."""
  if new_val not in _LEGACY_KEY_LEVELS:
    raise ValueError(f"jax_legacy_prng_key must be one of {_LEGACY_KEY_LEVELS}, got {new_val!r}")
  return config._override("jax_legacy_prng_key", new_val)


def no_tracing(new_val: bool = True):
  """Context manager: while on, a jit cache miss (a function traced again) raises RuntimeError
  (to check that a loop reuses its compiled functions)."""
  return config._override("jax_no_tracing", new_val)


def no_execution(new_val: bool = True):
  """Context manager: while on, running a jit-compiled function raises RuntimeError."""
  return config._override("jax_no_execution", new_val)


# ------------------------------------------------------------------------------------------------
# User contexts: values that jit's caches are keyed on (JAX's ``jax.make_user_context``)


class UserContext:
  """A value that ``jit``'s caches depend on: a function traced under one value is traced
  again under another.  ``ctx.value`` is the calling thread's value (``with ctx(v):`` sets it
  for a block), else the global one (``get_global``/``set_global``).  Values must be
  hashable."""

  def __init__(self, default_value=None):
    self._global = default_value
    self._local = threading.local()

  @property
  def value(self):
    stack = getattr(self._local, "stack", None)
    return stack[-1] if stack else self._global

  def get_global(self):
    return self._global

  def set_global(self, value) -> None:
    hash(value)
    self._global = value

  @contextlib.contextmanager
  def __call__(self, new_value):
    hash(new_value)
    stack = getattr(self._local, "stack", None)
    if stack is None:
      stack = self._local.stack = []
    stack.append(new_value)
    try:
      yield
    finally:
      stack.pop()

  def __repr__(self):
    return f"UserContext(value={self.value!r})"


_USER_CONTEXTS: list = []


def make_user_context(default_value=None) -> UserContext:
  """A new ``UserContext`` whose value (``default_value`` until set) is part of the cache key
  of every jitted function: ``with ctx(1): f(x)`` and ``with ctx(2): f(x)`` trace ``f`` once
  each."""
  ctx = UserContext(default_value)
  _USER_CONTEXTS.append(ctx)
  return ctx


def user_context_key() -> tuple:
  """The current values of every user context (empty while none was made)."""
  return tuple(c.value for c in _USER_CONTEXTS) if _USER_CONTEXTS else ()


class FlagState:
  """A flag's context manager with JAX's ``State`` reading API: ``flag(v)`` sets the flag in a
  block (this thread only), ``flag.value`` is its current value, ``flag.get_global()`` the
  global one (what ``config.update`` set)."""

  def __init__(self, name: str, fn):
    self._name, self._fn = name, fn
    functools.update_wrapper(self, fn)

  def __call__(self, *args, **kwargs):
    return self._fn(*args, **kwargs)

  @property
  def value(self):
    return config.read(self._name)

  def get_global(self):
    return config._values[self._name]

  def __repr__(self):
    return f"<flag {self._name}={self.value!r}>"


for _fn in (numpy_dtype_promotion, numpy_rank_promotion, default_matmul_precision,
            explain_cache_misses, log_compiles, debug_nans, debug_infs, default_prng_impl,
            enable_custom_prng, legacy_prng_key):
  globals()[_fn.__name__] = FlagState("jax_" + _fn.__name__, _fn)
del _fn
