"""Backends: where a jitted function's jaxpr is compiled and run.

``compile_jaxpr(closed_jaxpr, backend)`` returns a callable over concrete values.  Until the
HLO lowering and the native backends are wired in, every backend name resolves to the jaxpr
evaluator (each primitive's NumPy implementation), which stays the oracle afterwards."""
from __future__ import annotations

from ourjax import core

_cache: dict = {}


class _JaxprEvaluator:
  """Runs a closed jaxpr eagerly, op by op."""

  def __init__(self, closed: core.ClosedJaxpr):
    self.closed = closed

  def __call__(self, *args):
    with core.new_base_main():
      return core.eval_jaxpr(self.closed.jaxpr, self.closed.consts, *args)


def compile_jaxpr(closed: core.ClosedJaxpr, backend=None, name: str = ""):
  key = (id(closed), backend)
  hit = _cache.get(key)
  if hit is not None and hit[0] is closed:
    return hit[1]
  exe = _JaxprEvaluator(closed)
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
