"""Global flags, read from the environment at import and changed with ``config.update``.

Names follow JAX's (``jax_enable_x64`` ...) so that ``ourjax.config.update("jax_enable_x64", True)``
works as in JAX.  Environment variables: ``OURJAX_ENABLE_X64``, ``OURJAX_PLATFORMS``,
``OURJAX_LOG_COMPILES``, ``OURJAX_DEBUG_NANS``, ``OURJAX_CACHE_DIR``, ``OURJAX_DUMP``.
"""
from __future__ import annotations

import contextlib
import os


def _env_bool(name: str, default: bool = False) -> bool:
  v = os.environ.get(name)
  if v is None:
    return default
  return v.strip().lower() in ("1", "true", "yes", "on")


class Config:
  """A small bag of named flags; unknown names raise AttributeError (as JAX's does)."""

  def __init__(self):
    object.__setattr__(self, "_values", {
        "jax_enable_x64": _env_bool("OURJAX_ENABLE_X64"),
        "jax_platforms": os.environ.get("OURJAX_PLATFORMS") or None,
        "jax_log_compiles": _env_bool("OURJAX_LOG_COMPILES"),
        "jax_debug_nans": _env_bool("OURJAX_DEBUG_NANS"),
        "jax_disable_jit": _env_bool("OURJAX_DISABLE_JIT"),
        "jax_default_matmul_precision": None,
        "jax_compilation_cache_dir": os.environ.get("OURJAX_CACHE_DIR") or None,
        "jax_numpy_rank_promotion": "allow",
        "jax_num_cpu_devices": None,     # None: OURJAX_NUM_CPU_DEVICES, else 1 (backends)
    })

  def update(self, name: str, value) -> None:
    if name not in self._values:
      raise AttributeError(f"Unrecognized config option: {name}")
    self._values[name] = value

  def read(self, name: str):
    return self._values[name]

  def __getattr__(self, name):
    try:
      return self._values[name]
    except KeyError:
      raise AttributeError(f"Unrecognized config option: {name}") from None

  @property
  def x64_enabled(self) -> bool:
    return bool(self._values["jax_enable_x64"])

  @contextlib.contextmanager
  def _override(self, name, value):
    old = self._values[name]
    self._values[name] = value
    try:
      yield
    finally:
      self._values[name] = old


config = Config()


def enable_x64(new_val: bool = True):
  """Context manager turning 64-bit types on (or off) inside a block."""
  return config._override("jax_enable_x64", new_val)
