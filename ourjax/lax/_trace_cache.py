"""The traced jaxprs of control-flow functions (``while_loop``'s cond and body, ``scan``'s body,
``cond``/``switch``'s branches), cached by function identity, as JAX caches them: calling
``lax.while_loop(cond, body, x)`` again with the same functions and operands of the same types
(shape, dtype, weak type, pytree structure) under the same tracing flags reuses the jaxprs
without running the Python functions again.  As with ``jit``, a function's Python side effects
and the globals it reads are seen once per signature.

A result is kept only while every function it was traced from is alive (one weak-keyed level
per function), and only if its constants are concrete: a function that closes over a tracer of
an enclosing transformation is traced again each time (its jaxpr would leak that tracer)."""
import threading
import weakref

from ourjax import core
from ourjax.config import config, user_context_key

_CACHE = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_MAX_PER_FUNS = 64      # signatures kept per tuple of functions (oldest dropped first)


def _state_key() -> tuple:
  """The flags a trace may read (as in jit's cache key)."""
  from ourjax._jit import _axis_env_key, _trace_flags
  return (config.x64_enabled, config.jax_default_matmul_precision,
          config.jax_numpy_dtype_promotion, _axis_env_key(), user_context_key(),
          _trace_flags(config))


def _leaf(funs, create: bool):
  """The signature dict of ``funs`` (None if absent and not ``create``); TypeError for a
  function that cannot be weakly referenced or hashed."""
  d = _CACHE
  for i, f in enumerate(funs):
    nxt = d.get(f)
    if nxt is None:
      if not create:
        return None
      nxt = d[f] = {} if i == len(funs) - 1 else weakref.WeakKeyDictionary()
    d = nxt
  return d


def lookup(kind: str, funs, key):
  """``(hit, store)``: the result cached for ``kind``, the functions ``funs``, ``key`` (operand
  trees and avals) and the tracing flags, or None; and ``store(out, closeds)``, which caches a
  new result (``closeds``: its ClosedJaxprs, checked for tracer constants) and returns it.
  (The caller traces between the two itself: no extra frames around the user's function.)"""
  funs = tuple(funs)
  if config.jax_disable_jit:
    return None, _no_store
  try:
    full = (kind, key, _state_key())
    hash(full)
    with _LOCK:
      leaf = _leaf(funs, create=False)
      hit = leaf.get(full) if leaf is not None else None
  except TypeError:       # a function without weak references / hash, or an unhashable key
    return None, _no_store

  def store(out, closeds):
    if any(isinstance(c, core.Tracer) for closed in closeds for c in closed.consts):
      return out
    try:
      with _LOCK:
        leaf = _leaf(funs, create=True)
        if len(leaf) >= _MAX_PER_FUNS:
          del leaf[next(iter(leaf))]
        leaf[full] = out
    except TypeError:
      pass
    return out
  return hit, store


def _no_store(out, closeds):
  return out


def clear() -> None:
  with _LOCK:
    _CACHE.clear()
