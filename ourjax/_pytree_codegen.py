"""Flattening and unflattening specialised to one pytree structure, as generated Python code,
for call paths that see the same structure on every call (``pmap``'s ~100-leaf trees of
parameters and optimiser state: the recursive ``tree_flatten``/``tree_unflatten`` made one
Python call per node).

``leaves_of(treedef)`` -> ``f(tree)``: the leaves of ``tree`` in ``tree_flatten``'s order when
``tree``'s nodes are those of ``treedef`` (same container types, lengths and dict keys), else
None.  What stands at a leaf position is not examined: the caller checks that its leaves are
arrays (a container there means another structure).  ``builder(treedef)`` -> ``g(leaves)``:
``tree_unflatten(treedef, leaves)``.  Both return None for structures with other nodes than
tuples, lists, dicts and None (namedtuples, registered classes: the general functions serve
those) or deeper than ``MAX_DEPTH``.
"""
from __future__ import annotations

from ourjax import _pytree

MAX_DEPTH = 40


class _Unsupported(Exception):
  pass


def _compile(src: str, consts: dict, name: str):
  ns = dict(consts)
  exec(compile(src, f"<pytree {name}>", "exec"), ns)   # noqa: S102 - code generated here
  return ns[name]


def _const(consts: dict, value) -> str:
  name = f"K{len(consts)}"
  consts[name] = value
  return name


def leaves_of(treedef):
  """``f(tree) -> list | None``: see the module docstring."""
  lines, leaves, consts = [], [], {}

  def visit(node, expr, depth):
    if node is _pytree._LEAF:
      leaves.append(expr)
      return
    if depth > MAX_DEPTH:
      raise _Unsupported
    kind, aux, children = node
    v = f"v{len(lines)}"
    lines.append(f"  {v} = {expr}")
    if kind is _pytree._TUPLE or kind is _pytree._LIST:
      t = "tuple" if kind is _pytree._TUPLE else "list"
      lines.append(f"  if type({v}) is not {t} or len({v}) != {len(children)}: return None")
      for i, c in enumerate(children):
        visit(c, f"{v}[{i}]", depth + 1)
    elif kind is _pytree._DICT:
      lines.append(f"  if type({v}) is not dict or len({v}) != {len(children)}: return None")
      for k, c in zip(aux, children):
        visit(c, f"{v}[{_const(consts, k)}]", depth + 1)
    elif kind is _pytree._NONE:
      lines.append(f"  if {v} is not None: return None")
    else:
      raise _Unsupported
  try:
    visit(treedef._node, "t", 0)
  except _Unsupported:
    return None
  body = "\n".join("  " + ln for ln in lines)
  src = (f"def leaves(t):\n  try:\n{body}\n    return [{', '.join(leaves)}]\n"
         "  except KeyError:\n    return None\n")
  return _compile(src, consts, "leaves")


def builder(treedef):
  """``g(leaves) -> tree``: see the module docstring."""
  consts = {}
  count = [0]

  def build(node, depth):
    if node is _pytree._LEAF:
      count[0] += 1
      return f"l[{count[0] - 1}]"
    if depth > MAX_DEPTH:
      raise _Unsupported
    kind, aux, children = node
    parts = [build(c, depth + 1) for c in children]
    if kind is _pytree._TUPLE:
      return "(" + "".join(p + ", " for p in parts) + ")"
    if kind is _pytree._LIST:
      return "[" + ", ".join(parts) + "]"
    if kind is _pytree._DICT:
      return "{" + ", ".join(f"{_const(consts, k)}: {p}" for k, p in zip(aux, parts)) + "}"
    if kind is _pytree._NONE:
      return "None"
    raise _Unsupported
  try:
    expr = build(treedef._node, 0)
  except _Unsupported:
    return None
  return _compile(f"def build(l):\n  return {expr}\n", consts, "build")
