"""``ourjax.debug``: ``print`` and ``callback``, host callbacks that run with concrete values
from eager code and from inside ``jit``, ``grad`` (the forward values) and ``vmap`` (once per
element), through ``debug_print_p`` and ``debug_callback_p`` (``ourjax/_callback.py``; the
first named ``debug_print`` in jaxprs, as JAX's)."""
from __future__ import annotations

import builtins
import string

from ourjax._callback import debug_callback, debug_print_p


def _check_format(fmt: str, args, kwargs) -> None:
  """A str.format check before tracing, so that a bad format fails at the call site."""
  for _, field, _, _ in string.Formatter().parse(fmt):
    if field is None:
      continue
    name = field.split(".")[0].split("[")[0]
    if name.isdigit() and int(name) >= len(args):
      raise ValueError(f"debug.print: format string {fmt!r} refers to positional argument "
                       f"{name}, but only {len(args)} were given")
    if name and not name.isdigit() and name not in kwargs:
      raise ValueError(f"debug.print: format string {fmt!r} refers to {name!r}, which is not "
                       "a keyword argument")


def print(fmt: str, *args, ordered: bool = False, partitioned: bool = False,  # noqa: A001
          skip_format_check: bool = False, _use_logging: bool = False, **kwargs) -> None:
  """Prints ``fmt.format(*args, **kwargs)`` with the run-time values of the arguments."""
  if not skip_format_check:
    _check_format(fmt, args, kwargs)

  def show(*a, **k):
    builtins.print(fmt.format(*a, **k))
  debug_callback(show, *args, ordered=ordered, _primitive=debug_print_p, **kwargs)


def callback(callback, *args, ordered: bool = False, partitioned: bool = False,  # noqa: A002
             **kwargs) -> None:
  """Calls ``callback(*args, **kwargs)`` with the run-time values of the arguments, for its
  side effect (its return value is ignored)."""
  debug_callback(callback, *args, ordered=ordered, **kwargs)


def breakpoint(*args, **kwargs):  # noqa: A001
  raise NotImplementedError("ourjax.debug.breakpoint is not implemented")
