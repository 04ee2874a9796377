"""Backends: where a jitted function's jaxpr is compiled and run.

``compile_jaxpr(closed_jaxpr, backend)`` lowers the jaxpr to an HLO module
(``lowering/from_jaxpr.py``), optimizes it (``lowering/pipeline.py``) and hands it to a backend's
``compile(module)``, whose executable maps NumPy arrays to a tuple of NumPy arrays.  Backends:

* ``reference``: the NumPy interpreter of HLO modules (``backends/reference.py``), the oracle.
* ``cpu``, ``cuda``: native code through llvmlite (when available; until then ``cpu`` means the
  reference backend).

A jaxpr holding a primitive that has no lowering rule yet runs through the jaxpr evaluator (each
primitive's NumPy implementation) instead, so programs stay correct while the compiler grows;
``OURJAX_STRICT_LOWERING=1`` turns that fallback into an error (the tests use it).
"""
from __future__ import annotations

import logging
import os

from ourjax import core

log = logging.getLogger("ourjax")
_cache: dict = {}


class JaxprEvaluator:
  """Runs a closed jaxpr eagerly, op by op (the fallback executable)."""

  def __init__(self, closed: core.ClosedJaxpr):
    self.closed = closed

  def __call__(self, *args):
    with core.new_base_main():
      return core.eval_jaxpr(self.closed.jaxpr, self.closed.consts, *args)


class ModuleExecutable:
  """A compiled module plus the constants hoisted out of it; returns ourjax Arrays typed like
  the jaxpr's outputs (weak types included).  ``kept_args`` are the indices of the arguments
  the module takes (unused ones are dropped before the call), None for all of them."""

  def __init__(self, module, compiled, hoisted, out_avals, backend: str, kept_args=None):
    self.module, self.compiled, self.backend = module, compiled, backend
    self.hoisted = [_host(c) for c in hoisted]
    self.out_avals = list(out_avals)
    self.kept_args = None if kept_args is None else tuple(kept_args)

  def __call__(self, *args):
    from ourjax.array import Array, to_numpy
    if self.kept_args is not None:
      args = [args[i] for i in self.kept_args]
    outs = self.compiled(*[to_numpy(a) for a in args], *self.hoisted)
    return [Array._from_result(o, a) for o, a in zip(outs, self.out_avals)]

  def fast_path(self):
    """``call(args) -> list of Arrays | None`` for ``jit``'s dispatch fast path (arguments of
    the compiled types, as NumPy arrays or Arrays; None means "take the general path"), or
    None when the backend has none."""
    from ourjax.array import Array
    maker = getattr(self.compiled, "fast_caller", None)
    if maker is None or getattr(self.compiled, "device_resident", False):
      return None
    inner = maker(self.kept_args, self.hoisted, Array)
    if inner is None:
      return None
    avals = self.out_avals
    wrap = Array._from_result
    if len(avals) == 1:
      aval = avals[0]

      def call1(args):
        outs = inner(args)
        return None if outs is None else [wrap(outs[0], aval)]
      return call1

    def call(args):
      outs = inner(args)
      return None if outs is None else [wrap(o, a) for o, a in zip(outs, avals)]
    return call



def _host(c):
  from ourjax.array import to_numpy
  return to_numpy(c)


def default_backend_name() -> str:
  """The backend ``jit`` uses when none is named: the first of ``OURJAX_PLATFORMS``
  (``config.jax_platforms``, comma separated) that is known, else ``'cpu'`` (native)."""
  from ourjax.config import config
  plats = config.jax_platforms
  if plats:
    for p in str(plats).split(","):
      p = p.strip().lower()
      if p in ("cpu", "reference"):
        return p
  return "cpu"


def _backend_module(name: str):
  name = name or default_backend_name()
  if name == "cpu":
    from ourjax.backends.cpu import backend as cpu
    return cpu
  if name == "reference":
    from ourjax.backends import reference
    return reference
  raise ValueError(f"Unknown backend {name!r}: expected one of 'cpu', 'reference'")


def lower_and_optimize(closed: core.ClosedJaxpr, name: str = ""):
  from ourjax.lowering import from_jaxpr, pipeline
  module, hoisted = from_jaxpr.lower_jaxpr(closed, name)
  pipeline.optimize(module)
  return module, hoisted


def _log_compile(name: str, in_avals, reason: str | None) -> None:
  from ourjax.config import config
  if not config.jax_log_compiles:
    return
  shapes = ", ".join(a.str_short() + (" (weak)" if a.weak_type else "") for a in in_avals)
  msg = f"Compiling {name or 'jit'} for arguments ({shapes})."
  if reason:
    msg += "\n" + reason
  log.warning(msg)


def compile_lowering(lowering, closed: core.ClosedJaxpr, backend=None, name: str = "",
                     log_reason: str | None = None) -> ModuleExecutable:
  """Optimize a copy of a lowered module (``from_jaxpr.lower``; the lowering itself stays as it
  was) and compile it with ``backend``."""
  from ourjax.lowering import pipeline
  _log_compile(name, closed.in_avals, log_reason)
  module = lowering.module.clone()
  pipeline.optimize(module)
  kept = lowering.kept_args
  return ModuleExecutable(module, _backend_module(backend).compile(module), lowering.hoisted,
                          closed.out_avals, backend or default_backend_name(),
                          None if len(kept) == len(closed.in_avals) else kept)


def compile_jaxpr(closed: core.ClosedJaxpr, backend=None, name: str = "", *,
                  keep_unused: bool = True, log_reason: str | None = None, cache: bool = True):
  """The executable of ``closed`` (cached per jaxpr object, backend and ``keep_unused`` unless
  ``cache=False``, for callers that keep it themselves): a ``ModuleExecutable``, or, when some
  primitive has no lowering rule and ``OURJAX_STRICT_LOWERING`` is not set, a
  ``JaxprEvaluator``."""
  key = (id(closed), backend, keep_unused)
  hit = _cache.get(key) if cache else None
  if hit is not None and hit[0] is closed:
    return hit[1]
  from ourjax.lowering import from_jaxpr
  try:
    lowering = from_jaxpr.lower(closed, name, keep_unused=keep_unused)
    exe = compile_lowering(lowering, closed, backend, name, log_reason)
  except from_jaxpr.LoweringError as e:
    if os.environ.get("OURJAX_STRICT_LOWERING"):
      raise
    log.debug("jit(%s): %s; running the jaxpr op by op", name, e)
    exe = JaxprEvaluator(closed)
  if cache:
    _cache[key] = (closed, exe)
  return exe


class Device:
  def __init__(self, platform: str, id: int = 0):
    self.platform, self.id = platform, id
    self.device_kind = platform

  def __repr__(self):
    return f"{'CpuDevice' if self.platform == 'cpu' else 'CudaDevice'}(id={self.id})"


_CPU = Device("cpu", 0)


def devices(backend=None):
  return [_CPU]


def default_backend() -> str:
  return "cpu"


def array_devices(array):
  return {_CPU}
