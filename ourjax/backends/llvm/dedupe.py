"""Identical kernels emitted once: ``function_key(fn)`` says when two LLVM functions behave alike.

A whole program often has kernels of the same body on the same shapes (the layers of a
transformer, a forward op and its copy in the backward pass).  The CPU backend first keys
each planned kernel before emitting it (``kernel_key.py``: one met before is not emitted at
all), then keys each kernel it emits with ``function_key`` and keeps the first of each key;
the others are dropped before LLVM sees them and their calls go to the one kept, so LLVM
optimises and generates code for each distinct kernel once.

The key is the function's IR text with its own name blanked, followed by the text of every
definition of its module that it reaches (helper functions, constant tables), so two functions
of equal keys compute the same thing in any module of the program.  A helper that another of
the program's modules defines (``gemm_im2col.HELPERS_ATTR``) counts with its definition there.
Other declarations (shared GEMMs, math functions, intrinsics, ``syscall``) stand for the same
code everywhere and are keyed by name.
"""
from __future__ import annotations

import re

import llvmlite.ir as ir

from ourjax.backends.llvm import irtext

__all__ = ["function_key", "drop_function", "module_text"]

#: a global's name where the IR text refers to it: ``@"name"`` (llvmlite quotes every name)
_REF = re.compile(r'@"((?:[^"\\]|\\.)*)"')


def function_key(fn: ir.Function, memo: dict | None = None, text: str | None = None) -> str:
  """The key of ``fn`` (see the module docstring); ``memo`` caches the text of the module's
  other definitions between calls (one dict per module); ``text``: ``str(fn)`` when the caller
  has it."""
  module = fn.module
  shared = getattr(module, "_ojx_shared_helpers", None) or {}   # (gemm_im2col.HELPERS_ATTR)
  memo = {} if memo is None else memo
  own = fn.name
  text = str(fn) if text is None else text
  deps, seen, todo = [], {own}, [text]
  while todo:
    for m in _REF.finditer(todo.pop()):
      name = m.group(1)
      if name in seen:
        continue
      seen.add(name)
      g = module.globals.get(name)
      if (g is None or (isinstance(g, ir.Function) and g.is_declaration)) and name in shared:
        g = shared[name].globals.get(name)
      if g is None or (isinstance(g, ir.Function) and g.is_declaration):
        continue
      t = memo.get(name)
      if t is None:
        t = memo[name] = str(g)
      deps.append(t)
      todo.append(t)
  body = text.replace(f'@"{own}"', '@"<self>"')
  return "\n".join([body] + sorted(deps))


class _Text:
  __slots__ = ("text",)

  def __init__(self, text):
    self.text = text

  def __str__(self):
    return self.text


def module_text(module: ir.Module, known: dict, finalize=str) -> str:
  """``finalize(module)`` (its IR text) with the functions whose text is ``known`` (name ->
  ``str(fn)``, taken when they were keyed) not printed again, and the others' printed by
  ``irtext.function_text``."""
  g = module.globals
  saved = {n: g[n] for n in known if n in g}
  saved.update((n, v) for n, v in g.items()
               if n not in saved and isinstance(v, ir.Function) and v.blocks)
  try:
    for n, v in saved.items():
      g[n] = _Text(known[n] if n in known else irtext.function_text(v))
    return finalize(module)
  finally:
    g.update(saved)


def drop_function(fn: ir.Function) -> None:
  """Take ``fn`` out of its module (what it alone used stays, and LLVM drops it)."""
  del fn.module.globals[fn.name]
