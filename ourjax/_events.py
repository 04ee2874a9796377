"""Test events: named points in jit's work (a trace-cache miss, a lowering, a call that the fast
path did not serve) reported to ``listener`` when one is set, as JAX's ``util.test_event``
reports them to its test utilities.  The names are JAX's, so that a test counting them (JAX's
``count_jit_tracing_cache_miss``, ``count_jit_and_pmap_lowerings``, ...) can count ourjax's:

  ``trace_to_jaxpr``            a function traced to a jaxpr for jit (a trace-cache miss)
  ``lower_jaxpr_to_module``     a jaxpr lowered to a module to compile (jit or pmap)
  ``pxla_cached_compilation``   a lowered module compiled to an executable
  ``jit_cpp_cache_miss``        a jit call that its fast path did not serve
"""
from __future__ import annotations

from typing import Callable

listener: Callable | None = None


def fire(name: str, *args) -> None:
  f = listener
  if f is not None:
    f(name, *args)
