"""``ourjax.debug``: ``print`` and ``callback``.

Gap against JAX: ``jax.debug.print`` prints at run time from inside compiled code.  ourjax has no
host-callback primitive, so ``debug.print`` formats and prints only when every argument is a
concrete value (eager code, ``disable_jit``).  When any argument is a tracer (inside ``jit``,
``grad``, ``vmap``, loops) it prints nothing and raises nothing: it does not print at trace
time either, since that would print shapes instead of values and only once.
"""
from __future__ import annotations

import builtins

from ourjax import core, tree_util


def _has_tracer(tree) -> bool:
  return any(isinstance(x, core.Tracer) for x in tree_util.tree_leaves(tree))


def print(fmt: str, *args, ordered: bool = False, **kwargs) -> None:  # noqa: A001
  """``print(fmt.format(*args, **kwargs))`` for concrete arguments (arrays show their values);
  a no-op when any argument is traced (see the module docstring)."""
  if _has_tracer((args, kwargs)):
    return
  builtins.print(fmt.format(*args, **kwargs))


def callback(callback, *args, ordered: bool = False, **kwargs) -> None:
  """Calls ``callback(*args, **kwargs)`` with concrete values; a no-op under tracing (same gap as
  ``print``)."""
  if _has_tracer((args, kwargs)):
    return
  callback(*args, **kwargs)


def breakpoint(*args, **kwargs):  # noqa: A001
  raise NotImplementedError("ourjax.debug.breakpoint is not implemented")
