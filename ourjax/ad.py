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

__all__ = ["DontWant", "DidntWant", "GradRef", "GradValue", "NotNeeded", "VJP"]


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
      wanted = [not isinstance(spec, DontWant) for spec in specs]
      grads = vjp_fn(ct) if all(wanted) else _wanted_grads(vjp_fn, ct, wanted)
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


def _wanted_grads(vjp_fn, ct, wanted):
  """``vjp_fn(ct)`` computing only the wanted arguments' gradients: the backward pass is traced
  and what only unwanted gradients need is dropped (None in their places)."""
  from ourjax import core
  from ourjax._pytree import tree_flatten, tree_unflatten
  from ourjax.interpreters import partial_eval as pe
  ct_leaves, ct_tree = tree_flatten(ct)
  cell = []

  def bwd(*leaves):
    grads = vjp_fn(tree_unflatten(ct_tree, list(leaves)))
    flat = []
    for g, w in zip(grads, wanted):
      if w:
        g_leaves, g_tree = tree_flatten(g)
        cell.append((g_tree, len(g_leaves)))
        flat += g_leaves
    return flat
  closed = pe.trace_to_jaxpr(bwd, [core.get_aval(c) for c in ct_leaves], "vjp_wanted")
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr)
  outs = iter(core.eval_jaxpr(jaxpr, closed.consts, *ct_leaves))
  trees = iter(cell)
  result = []
  for w in wanted:
    if not w:
      result.append(None)
      continue
    g_tree, n = next(trees)
    result.append(tree_unflatten(g_tree, [next(outs) for _ in range(n)]))
  return result


# ------------------------------------------------------------------------------------------------
# The object ``vjp`` returns (JAX's ``VJP``)


@register_dataclass
@dataclasses.dataclass(frozen=True)
class NotNeeded:
  """In ``VJP.args_res``: this primal input is not a residual of the backward pass."""


class VJP:
  """What ``vjp(f, *primals)`` returns: ``vjp_fn(cotangent)`` gives one cotangent per primal.

  The backward pass's residuals are split as JAX's: ``args_res`` has one entry per primal
  argument, the argument itself (leaf by leaf) where the backward pass reads it and
  ``NotNeeded()`` where it does not, and ``opaque_residuals`` the other saved values.  The
  residuals are read from these attributes when it is called, so ``args_res`` may be dropped
  and given back later (as JAX's FSDP-style use does).  A ``VJP`` is a pytree (its residuals
  are the leaves): it passes in and out of ``jit``."""
  __slots__ = ("_fun", "_spec", "_fname", "_n_primals", "_in_tree", "_out_tree", "jaxpr",
               "args_res", "opaque_residuals", "__weakref__")

  def __init__(self, fun, spec, fname, n_primals, in_tree, out_tree, jaxpr, args_res,
               opaque_residuals):
    self._fun, self._spec, self._fname = fun, spec, fname
    self._n_primals, self._in_tree, self._out_tree, self.jaxpr = n_primals, in_tree, out_tree, jaxpr
    self.args_res = list(args_res)
    self.opaque_residuals = list(opaque_residuals)

  in_tree = property(lambda self: self._in_tree)
  out_tree = property(lambda self: self._out_tree)

  def _residuals(self):
    from ourjax._pytree import tree_flatten
    leaves = []
    for i, a in enumerate(self.args_res):
      if a is None:
        leaves.append(None)
        continue
      flat, _ = tree_flatten(a, is_leaf=lambda x: isinstance(x, NotNeeded) or x is None)
      leaves.append(flat)
    out = []
    for where, idx in self._spec:
      if where == "opaque":
        out.append(self.opaque_residuals[idx])
        continue
      arg, leaf = idx
      got = leaves[arg] if arg < len(leaves) else None
      if got is None or leaf >= len(got) or got[leaf] is None or isinstance(got[leaf],
                                                                            NotNeeded):
        raise ValueError(f"The VJP of {self._fname} reads primal argument {arg} as a residual, "
                         f"but args_res[{arg}] does not hold it (set it back before calling)")
      out.append(got[leaf])
    return out

  def __call__(self, ct, *extra):
    return self._fun(ct, *extra, _consts=self._residuals())

  def with_refs(self, *specs):
    return with_refs(self, self._n_primals, self._fname)(*specs)

  def __repr__(self):
    return f"VJP({self._fname})"


def make_vjp(vjp_fn, primals, p_leaves, p_tree, consts, out_tree, jaxpr, fname) -> VJP:
  """The ``VJP`` of ``vjp``: each residual that is (the very object of) a primal input leaf is
  read from ``args_res``, the others from ``opaque_residuals``."""
  from ourjax._pytree import tree_flatten, tree_unflatten
  where = {}
  arg_leaves = []
  for i, a in enumerate(primals):
    flat, tree = tree_flatten(a)
    arg_leaves.append((flat, tree))
    for k, leaf in enumerate(flat):
      where.setdefault(id(leaf), (i, k))
  spec, opaque, needed = [], [], set()
  for c in consts:
    hit = where.get(id(c))
    if hit is not None and arg_leaves[hit[0]][0][hit[1]] is c:
      spec.append(("arg", hit))
      needed.add(hit)
    else:
      spec.append(("opaque", len(opaque)))
      opaque.append(c)
  args_res = [tree_unflatten(tree, [leaf if (i, k) in needed else NotNeeded()
                                    for k, leaf in enumerate(flat)])
              for i, (flat, tree) in enumerate(arg_leaves)]
  return VJP(vjp_fn, tuple(spec), fname, len(primals), p_tree, out_tree, jaxpr, args_res,
             opaque)


def _vjp_flatten(v: VJP):
  return (v.args_res, v.opaque_residuals), (v._fun, v._spec, v._fname, v._n_primals,
                                            v._in_tree, v._out_tree, v.jaxpr)


def _vjp_unflatten(aux, children):
  fun, spec, fname, n, in_tree, out_tree, jaxpr = aux
  args_res, opaque = children
  return VJP(fun, spec, fname, n, in_tree, out_tree, jaxpr, args_res, opaque)


def _register_vjp():
  from ourjax._pytree import register_pytree_node
  register_pytree_node(VJP, _vjp_flatten, _vjp_unflatten)


_register_vjp()
