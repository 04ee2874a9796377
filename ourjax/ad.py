"""``ourjax.ad`` (JAX's ``jax.ad``): what ``vjp_fn.with_refs(*specs)`` takes and returns, one
spec per primal argument of ``vjp``:

* ``DontWant()``: that gradient is not wanted; ``DidntWant()`` comes back in its place;
* ``GradValue()`` (or None): the gradient is returned, as by ``vjp_fn`` itself;
* a mutable reference (``ourjax.new_ref``), or a pytree of them shaped as the argument: the
  gradient is added into it (``ref[...] += grad``); ``GradRef()`` comes back.
"""
from __future__ import annotations

import dataclasses

from ourjax.tree_util import register_dataclass

__all__ = ["DontWant", "DidntWant", "GradRef", "GradValue"]


@dataclasses.dataclass(frozen=True)
class DontWant:
  pass


@dataclasses.dataclass(frozen=True)
class GradValue:
  pass


@register_dataclass
@dataclasses.dataclass(frozen=True)
class DidntWant:
  pass


@register_dataclass
@dataclasses.dataclass(frozen=True)
class GradRef:
  pass


def with_refs(vjp_fn, n_primals: int, fname: str):
  """``vjp_fn.with_refs``: see the module docstring."""
  def bind(*specs):
    if len(specs) != n_primals:
      raise TypeError(f"with_refs of the VJP of {fname} takes one spec per primal argument "
                      f"({n_primals}), got {len(specs)}")

    def call(ct):
      from ourjax import ref as _ref
      from ourjax.tree_util import tree_leaves, tree_map
      grads = vjp_fn(ct)
      out = []
      for spec, g in zip(specs, grads):
        if isinstance(spec, DontWant):
          out.append(DidntWant())
        elif spec is None or isinstance(spec, GradValue):
          out.append(g)
        else:
          refs = tree_leaves(spec, is_leaf=lambda x: isinstance(x, _ref.Ref))
          if not refs or not all(isinstance(r, _ref.Ref) for r in refs):
            raise TypeError(f"with_refs: a spec is DontWant(), GradValue(), None or a "
                            f"(pytree of) mutable reference(s), got {spec!r}")
          tree_map(lambda r, gi: _ref.addupdate(r, (), gi), spec, g,
                   is_leaf=lambda x: isinstance(x, _ref.Ref))
          out.append(GradRef())
      return tuple(out)
    return call
  return bind
