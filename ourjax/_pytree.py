"""Pytrees: nested containers of arrays, flattened to a list of leaves plus a ``PyTreeDef``.

This module is the implementation that ourjax's transformations use; ``ourjax.tree_util`` is
the public face (the same functions, except that typed PRNG key arrays are leaves there, as in
JAX, while here they are nodes over their ``uint32`` key data, so that jit, vmap, grad, scan,
... carry a key array as its data and rebuild it on the way out).

The behaviour follows ``jax.tree_util``:

* tuples, lists, dicts (children in sorted-key order), ``collections.OrderedDict`` (insertion
  order), ``collections.defaultdict`` (sorted keys) and namedtuples (tuple subclasses with a
  ``_fields`` attribute) are internal nodes; ``None`` is a node with no children; everything
  else is a leaf unless registered with ``register_pytree_node`` and friends.
* A ``PyTreeDef`` is a structure without its leaves.  Two treedefs are equal when their node
  types, dict keys and auxiliary data (compared with ``==``) agree, and equal treedefs hash
  equal, so a treedef can key a cache.

Internally a structure is a nested tuple ``(kind, aux, children)`` where ``kind`` is one
``_NodeKind`` per node type (identity-compared), ``aux`` the node's data (dict keys, namedtuple
type, or custom aux data wrapped in ``_Aux``) and ``children`` a tuple of structures; a leaf is
the ``_LEAF`` sentinel.
Plain nested tuples make equality and hashing run in C, and flattening a tuple/list/dict of
arrays costs one short Python function call per node.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from typing import Any, Callable, Iterable, NamedTuple

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "tree_reduce", "tree_all", "tree_transpose", "all_leaves", "treedef_is_leaf",
    "treedef_is_strict_leaf", "treedef_tuple", "treedef_children", "build_tree",
    "register_pytree_node", "register_pytree_node_class", "register_pytree_with_keys",
    "register_pytree_with_keys_class", "register_dataclass", "register_static",
    "tree_flatten_with_path", "tree_map_with_path", "tree_leaves_with_path", "keystr",
    "SequenceKey", "DictKey", "GetAttrKey", "FlattenedIndexKey", "Partial",
]


# ------------------------------------------------------------------------------------------------
# Key path entries (in _pytree_keys)

from ourjax._pytree_keys import (  # noqa: E402,F401
    DictKey, FlattenedIndexKey, GetAttrKey, KeyEntry, KeyPath, SequenceKey, _simple_str, keystr)


# ------------------------------------------------------------------------------------------------
# Node kinds

def _checked_flatten(flatten):
  """``flatten`` with its result checked: a (children, aux_data) pair with iterable children
  (JAX's errors), so a bad registration fails at the node rather than somewhere later."""
  def checked(x):
    out = flatten(x)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise ValueError(f"The to_iterable function for a custom PyTree node should return a "
                       f"(children, aux_data) tuple, got {out!r}")
    try:
      iter(out[0])
    except TypeError:
      raise ValueError(f"The to_iterable function for a custom PyTree node should return a "
                       f"(children, aux_data) tuple where 'children' is iterable, got "
                       f"{tuple(out)!r}") from None
    return out
  return checked


class _NodeKind:
  """How one node type flattens and unflattens.  Compared by identity inside structures."""
  __slots__ = ("type", "name", "flatten", "unflatten", "flatten_with_keys")

  def __init__(self, nodetype, name, flatten, unflatten, flatten_with_keys=None):
    self.type = nodetype
    self.name = name
    self.flatten = _checked_flatten(flatten)      # x -> (children iterable, aux)
    self.unflatten = unflatten                    # (aux, children tuple) -> x
    self.flatten_with_keys = flatten_with_keys    # x -> (iterable of (key, child), aux)

  def keyed_children(self, x):
    if self.flatten_with_keys is not None:
      keyed, aux = self.flatten_with_keys(x)
      return list(keyed), aux
    children, aux = self.flatten(x)
    return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux

  def __repr__(self):
    return f"<pytree node kind {self.name}>"

  def __reduce__(self):
    # Kinds are singletons (structures compare them by identity): pickling and deep copies
    # refer back to the registered one.
    for name in ("_TUPLE", "_LIST", "_DICT", "_NONE", "_NAMEDTUPLE"):
      if globals()[name] is self:
        return name
    return _registered_kind, (self.type,)


def _registered_kind(nodetype):
  kind = _registry.get(nodetype)
  if kind is None:
    raise ValueError(f"{nodetype!r} is not a registered pytree node type.")
  return kind


class _LeafMarker:
  __slots__ = ()

  def __repr__(self):
    return "*"

  def __reduce__(self):
    return "_LEAF"


_LEAF = _LeafMarker()


class _Aux:
  """Custom-node aux data inside a structure: equal when the data are ``==``, and hashed as a
  constant so that a structure hashes the same whether or not its aux data is hashable (equal
  treedefs must hash equal; the dict keys and node types around it spread the hashes)."""
  __slots__ = ("data",)

  def __init__(self, data):
    self.data = data

  def __eq__(self, other):
    if type(other) is not _Aux:
      return NotImplemented
    a, b = self.data, other.data
    if a is b:
      return True
    try:
      return bool(a == b)
    except Exception as e:   # arrays as static metadata, ...: JAX's error
      raise ValueError("Exception raised while checking equality of metadata fields of pytree. "
                       "Make sure that metadata fields are hashable and have simple equality "
                       "semantics. (Note: arrays cannot be passed as metadata fields!)") from e

  def __hash__(self):
    return 0x5eed

  def __repr__(self):
    return f"_Aux({self.data!r})"

_TUPLE = _NodeKind(tuple, "tuple", None, lambda aux, ch: tuple(ch))
_LIST = _NodeKind(list, "list", None, lambda aux, ch: list(ch))
_DICT = _NodeKind(dict, "dict", None, lambda keys, ch: dict(zip(keys, ch)))
_NONE = _NodeKind(type(None), "None", None, lambda aux, ch: None)
_NAMEDTUPLE = _NodeKind(tuple, "namedtuple", None, lambda cls, ch: cls(*ch))

_NONE_NODE = (_NONE, None, ())
_BUILTIN_NODE_TYPES = frozenset([tuple, list, dict, type(None)])

# Custom node types (exact type -> _NodeKind).  OrderedDict and defaultdict live here too.
_registry: dict[type, _NodeKind] = {}

# Registered node types that ``ourjax.tree_util`` (the public functions) shows as leaves: typed
# PRNG key arrays, which are leaves to users as in JAX but nodes over their data here.
USER_LEAF_TYPES: set = set()


def _sorted_keys(d) -> tuple:
  try:
    return tuple(sorted(d))
  except TypeError as e:
    raise ValueError("Comparator raised exception while sorting pytree dictionary keys: "
                     f"{list(d)!r}. Dict keys must be mutually orderable; use an OrderedDict "
                     "or register a custom node to keep unorderable keys.") from e


def _is_namedtuple_type(t) -> bool:
  return issubclass(t, tuple) and hasattr(t, "_fields")


# ------------------------------------------------------------------------------------------------
# Flattening

def _flatten(x, leaves, is_leaf):
  """Appends the leaves of ``x`` to ``leaves``; returns the structure of ``x``."""
  if is_leaf is not None and is_leaf(x):
    leaves.append(x)
    return _LEAF
  t = type(x)
  if t is tuple:
    return (_TUPLE, None, tuple([_flatten(c, leaves, is_leaf) for c in x]))
  if t is list:
    return (_LIST, None, tuple([_flatten(c, leaves, is_leaf) for c in x]))
  if t is dict:
    keys = _sorted_keys(x)
    return (_DICT, keys, tuple([_flatten(x[k], leaves, is_leaf) for k in keys]))
  if x is None:
    return _NONE_NODE
  kind = _registry.get(t)
  if kind is not None:
    children, aux = kind.flatten(x)
    return (kind, _Aux(aux), tuple([_flatten(c, leaves, is_leaf) for c in children]))
  if isinstance(x, tuple) and hasattr(t, "_fields"):
    return (_NAMEDTUPLE, t, tuple([_flatten(c, leaves, is_leaf) for c in x]))
  leaves.append(x)
  return _LEAF


def _collect_leaves(x, leaves, is_leaf):
  """``_flatten`` without building the structure (for ``tree_leaves``)."""
  if is_leaf is not None and is_leaf(x):
    leaves.append(x)
    return
  t = type(x)
  if t is tuple or t is list:
    for c in x:
      _collect_leaves(c, leaves, is_leaf)
  elif t is dict:
    for k in _sorted_keys(x):
      _collect_leaves(x[k], leaves, is_leaf)
  elif x is None:
    pass
  elif (kind := _registry.get(t)) is not None:
    for c in kind.flatten(x)[0]:
      _collect_leaves(c, leaves, is_leaf)
  elif isinstance(x, tuple) and hasattr(t, "_fields"):
    for c in x:
      _collect_leaves(c, leaves, is_leaf)
  else:
    leaves.append(x)


def _flatten_with_path(x, path, out, is_leaf, is_leaf_takes_path):
  """Like ``_flatten``, appending ``(key_path, leaf)`` pairs to ``out``."""
  if is_leaf is not None and (is_leaf(path, x) if is_leaf_takes_path else is_leaf(x)):
    out.append((path, x))
    return _LEAF
  t = type(x)
  if t is tuple or t is list:
    children = tuple([_flatten_with_path(c, path + (SequenceKey(i),), out, is_leaf,
                                         is_leaf_takes_path) for i, c in enumerate(x)])
    return (_TUPLE if t is tuple else _LIST, None, children)
  if t is dict:
    keys = _sorted_keys(x)
    children = tuple([_flatten_with_path(x[k], path + (DictKey(k),), out, is_leaf,
                                         is_leaf_takes_path) for k in keys])
    return (_DICT, keys, children)
  if x is None:
    return _NONE_NODE
  kind = _registry.get(t)
  if kind is not None:
    keyed, aux = kind.keyed_children(x)
    children = tuple([_flatten_with_path(c, path + (k,), out, is_leaf, is_leaf_takes_path)
                      for k, c in keyed])
    return (kind, _Aux(aux), children)
  if isinstance(x, tuple) and hasattr(t, "_fields"):
    children = tuple([_flatten_with_path(c, path + (GetAttrKey(f),), out, is_leaf,
                                         is_leaf_takes_path) for f, c in zip(t._fields, x)])
    return (_NAMEDTUPLE, t, children)
  out.append((path, x))
  return _LEAF


def _unflatten(node, it):
  if node is _LEAF:
    return next(it)
  kind, aux, children = node
  if type(aux) is _Aux:
    aux = aux.data
  return kind.unflatten(aux, tuple([_unflatten(c, it) for c in children]))


def _count(node) -> tuple[int, int]:
  """(number of leaves, number of nodes including leaves) of a structure."""
  if node is _LEAF:
    return 1, 1
  leaves = nodes = 0
  for c in node[2]:
    l, n = _count(c)
    leaves += l
    nodes += n
  return leaves, nodes + 1


# ------------------------------------------------------------------------------------------------
# Matching a tree against a structure (flatten_up_to)

def _short(x, limit=200) -> str:
  s = repr(x)
  return s if len(s) <= limit else s[:limit] + "..."


def _match_children(node, x):
  """The children of ``x`` if its top node has the type/keys/aux of ``node``, else ValueError."""
  kind, aux, children = node
  arity = len(children)
  if kind is _TUPLE or kind is _LIST:
    if type(x) is not kind.type:
      raise ValueError(f"Expected {kind.name}, got {_short(x)}.")
    if len(x) != arity:
      raise ValueError(f"{kind.name.capitalize()} arity mismatch: {len(x)} != {arity}; "
                       f"{kind.name}: {_short(x)}.")
    return x
  if kind is _DICT:
    if type(x) is not dict:
      raise ValueError(f"Expected dict, got {_short(x)}.")
    keys = _sorted_keys(x)
    if keys != aux:
      raise ValueError(f"Dict key mismatch; expected keys: {list(aux)!r}; "
                       f"got keys: {list(keys)!r}; dict: {_short(x)}.")
    return [x[k] for k in keys]
  if kind is _NONE:
    if x is not None:
      raise ValueError(f"Expected None, got {_short(x)}.")
    return ()
  if kind is _NAMEDTUPLE:
    if not (isinstance(x, tuple) and hasattr(type(x), "_fields")):
      raise ValueError(f"Expected named tuple, got {_short(x)}.")
    if type(x) is not aux:
      raise ValueError(f"Named tuple type mismatch: expected type: {aux.__name__}, "
                       f"got type: {type(x).__name__}; value: {_short(x)}.")
    if len(x) != arity:
      raise ValueError(f"Named tuple arity mismatch: {len(x)} != {arity}; "
                       f"value: {_short(x)}.")
    return x
  # custom node
  if type(x) is not kind.type:
    raise ValueError(f"Custom node type mismatch; expected type: {kind.type!r}; "
                     f"got type: {type(x)!r}; value: {_short(x)}.")
  xs, x_aux = kind.flatten(x)
  xs = list(xs)
  aux = aux.data
  if not (x_aux is aux or x_aux == aux):
    raise ValueError(f"Mismatch custom node data: {_short(aux)} != {_short(x_aux)}; "
                     f"value: {_short(x)}.")
  if len(xs) != arity:
    raise ValueError(f"Custom node arity mismatch: {len(xs)} != {arity}; value: {_short(x)}.")
  return xs


def _flatten_up_to(node, x, out):
  if node is _LEAF:
    out.append(x)
    return
  for c, xc in zip(node[2], _match_children(node, x)):
    _flatten_up_to(c, xc, out)


# ------------------------------------------------------------------------------------------------
# Printing

def _node_str(node) -> str:
  if node is _LEAF:
    return "*"
  kind, aux, children = node
  parts = [_node_str(c) for c in children]
  if kind is _TUPLE:
    return "(" + parts[0] + ",)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"
  if kind is _LIST:
    return "[" + ", ".join(parts) + "]"
  if kind is _DICT:
    return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(aux, parts)) + "}"
  if kind is _NONE:
    return "None"
  if kind is _NAMEDTUPLE:   # JAX's form
    return f"CustomNode(namedtuple[{aux.__name__}], [{', '.join(parts)}])"
  return f"CustomNode({kind.name}[{aux.data}], [{', '.join(parts)}])"


# ------------------------------------------------------------------------------------------------
# PyTreeDef

class PyTreeDef:
  """The structure of a pytree: its containers, dict keys and aux data, without the leaves."""
  __slots__ = ("_node", "_num_leaves", "_num_nodes", "_hash")

  def __init__(self, node, num_leaves: int | None = None):
    self._node = node
    self._num_leaves = num_leaves
    self._num_nodes = None
    self._hash = None

  def _counts(self):
    self._num_leaves, self._num_nodes = _count(self._node)

  @property
  def num_leaves(self) -> int:
    if self._num_leaves is None:
      self._counts()
    return self._num_leaves

  @property
  def num_nodes(self) -> int:
    if self._num_nodes is None:
      self._counts()
    return self._num_nodes

  def unflatten(self, leaves: Iterable[Any]):
    """Builds the tree of this structure with ``leaves`` in flattening order."""
    if not isinstance(leaves, (list, tuple)):
      leaves = list(leaves)
    n = self.num_leaves
    if len(leaves) != n:
      few = "few" if len(leaves) < n else "many"
      raise ValueError(f"Too {few} leaves for PyTreeDef; expected {n}, got {len(leaves)}. "
                       f"Structure: {self!r}")
    return _unflatten(self._node, iter(leaves))

  def walk(self, f_node, f_leaf, leaves):
    """Rebuilds bottom-up: ``f_leaf(leaf)`` for each of ``leaves`` (in order; the leaf itself
    when ``f_leaf`` is None), ``f_node(children_results, node_data)`` at each node, where
    node_data is the sorted key list of a dict, the class of a namedtuple, the aux data of a
    custom node and None for tuples, lists and None."""
    it = iter(leaves)

    def go(node):
      if node is _LEAF:
        leaf = next(it)
        return leaf if f_leaf is None else f_leaf(leaf)
      kind, aux, children = node
      res = tuple(go(c) for c in children)
      data = list(aux) if kind is _DICT else (aux.data if isinstance(aux, _Aux) else aux)
      return f_node(res, data)
    return go(self._node)

  def flatten_up_to(self, xs) -> list:
    """Flattens ``xs`` down to this structure's leaves: a leaf here matches any subtree of
    ``xs``, and every node here must be matched by a node of the same type (and keys/aux)."""
    out = []
    _flatten_up_to(self._node, xs, out)
    return out

  def children(self) -> list[PyTreeDef]:
    if self._node is _LEAF:
      return []
    return [PyTreeDef(c) for c in self._node[2]]

  def node_data(self):
    """``(type, aux_data)`` of the root node; None for a leaf."""
    if self._node is _LEAF:
      return None
    kind, aux, _ = self._node
    if kind is _NAMEDTUPLE:
      return aux, None
    if kind is _DICT:
      return dict, list(aux)
    return kind.type, (aux.data if type(aux) is _Aux else aux)

  def serialize_using_proto(self) -> bytes:
    """These bytes give the structure back through ``deserialize_using_proto`` (built-in
    containers only; see ``_pytree_proto``)."""
    from ourjax._pytree_proto import serialize
    return serialize(self)

  @staticmethod
  def deserialize_using_proto(registry, data) -> "PyTreeDef":
    from ourjax._pytree_proto import deserialize
    return deserialize(registry, data)

  def compose(self, inner: PyTreeDef) -> PyTreeDef:
    """The structure with every leaf of ``self`` replaced by ``inner``."""
    def sub(node):
      if node is _LEAF:
        return inner._node
      kind, aux, children = node
      return (kind, aux, tuple([sub(c) for c in children]))
    return PyTreeDef(sub(self._node))

  def from_iterable_tree(self, xs):
    """See ``build_tree``."""
    def build(node, x):
      if node is _LEAF:
        return x
      kind, aux, children = node
      xs_ = list(x)
      if len(xs_) != len(children):
        raise ValueError(f"Arity mismatch building {_node_str(node)}: expected "
                         f"{len(children)} children, got {len(xs_)}.")
      if type(aux) is _Aux:
        aux = aux.data
      return kind.unflatten(aux, tuple([build(c, v) for c, v in zip(children, xs_)]))
    return build(self._node, xs)

  def __eq__(self, other):
    if not isinstance(other, PyTreeDef):
      return NotImplemented
    return self is other or self._node == other._node

  def __hash__(self):
    h = self._hash
    if h is None:
      h = self._hash = hash(self._node)
    return h

  def __repr__(self):
    return f"PyTreeDef({_node_str(self._node)})"

  __str__ = __repr__


# ------------------------------------------------------------------------------------------------
# Public functions

def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
  """Flattens ``tree`` into ``(leaves, treedef)``; ``is_leaf(x)`` true stops at ``x``."""
  leaves = []
  node = _flatten(tree, leaves, is_leaf)
  return leaves, PyTreeDef(node, len(leaves))


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]):
  """Inverse of ``tree_flatten``."""
  return treedef.unflatten(leaves)


def flatten_fun_nokwargs(f: Callable, in_tree: PyTreeDef):
  """``(flat, out_tree_cell)``: ``flat(*leaves)`` calls ``f(*args)`` with ``args`` the tuple
  ``in_tree`` unflattens the leaves to and returns the output's leaves; ``out_tree_cell[0]`` is
  the output's treedef once ``flat`` has run (what a trace of ``flat`` needs to rebuild it)."""
  out_tree_cell: list = []

  def flat(*xs):
    out_leaves, out_tree = tree_flatten(f(*tree_unflatten(in_tree, list(xs))))
    out_tree_cell[:] = [out_tree]
    return out_leaves
  return flat, out_tree_cell


def tree_leaves(tree, is_leaf: Callable[[Any], bool] | None = None) -> list:
  leaves = []
  _collect_leaves(tree, leaves, is_leaf)
  return leaves


def tree_structure(tree, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
  return tree_flatten(tree, is_leaf)[1]


def _up_to_or_explain(treedef: PyTreeDef, tree, i: int, what: str) -> list:
  try:
    return treedef.flatten_up_to(tree)
  except ValueError as e:
    try:
      other = repr(tree_structure(tree))
    except ValueError:
      other = "(unflattenable)"
    raise ValueError(
        f"pytree structure error: {what}: the tree in argument {i} does not have the structure "
        "of the first tree "
        f"(up to its leaves): {e}\n"
        f"  first tree:  {treedef!r}\n"
        f"  argument {i}: {other}") from None


def tree_map(f: Callable[..., Any], tree, *rest, is_leaf: Callable[[Any], bool] | None = None):
  """``f`` applied to each leaf of ``tree`` (and the matching subtrees of ``rest``)."""
  leaves, treedef = tree_flatten(tree, is_leaf)
  if not rest:
    return _unflatten(treedef._node, iter([f(x) for x in leaves]))
  all_leaves = [leaves] + [_up_to_or_explain(treedef, r, i, "tree_map")
                           for i, r in enumerate(rest, 1)]
  return _unflatten(treedef._node, iter([f(*xs) for xs in zip(*all_leaves)]))


class _NoInitializer:
  def __repr__(self):
    return "<no initializer>"


_no_initializer = _NoInitializer()


def tree_reduce(function: Callable[[Any, Any], Any], tree, initializer: Any = _no_initializer,
                is_leaf: Callable[[Any], bool] | None = None):
  """``functools.reduce(function, tree_leaves(tree), initializer)``."""
  leaves = tree_leaves(tree, is_leaf)
  if initializer is _no_initializer:
    return functools.reduce(function, leaves)
  return functools.reduce(function, leaves, initializer)


def tree_all(tree, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
  return all(tree_leaves(tree, is_leaf))


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose):
  """Turns an outer tree of inner trees into an inner tree of outer trees.

  ``inner_treedef=None`` takes the inner structure from the first outer subtree.
  """
  if inner_treedef is None:
    firsts = outer_treedef.flatten_up_to(pytree_to_transpose)
    if not firsts:
      raise ValueError("tree_transpose: cannot infer inner_treedef from an outer structure "
                       "with no leaves; pass it explicitly.")
    inner_treedef = tree_structure(firsts[0])
  flat, treedef = tree_flatten(pytree_to_transpose)
  inner_size, outer_size = inner_treedef.num_leaves, outer_treedef.num_leaves
  if treedef.num_leaves != inner_size * outer_size:
    expected = outer_treedef.compose(inner_treedef)
    raise TypeError(f"Mismatch\n{treedef}\n != \n{expected}")
  rows = [flat[i * inner_size:(i + 1) * inner_size] for i in range(outer_size)]
  subtrees = [outer_treedef.unflatten(col) for col in zip(*rows)] if outer_size else \
      [outer_treedef.unflatten([]) for _ in range(inner_size)]
  return inner_treedef.unflatten(subtrees)


def _is_plain_leaf(x) -> bool:
  if x is None:
    return False
  t = type(x)
  if t in _BUILTIN_NODE_TYPES or t in _registry:
    return False
  return not (isinstance(x, tuple) and hasattr(t, "_fields"))


def all_leaves(iterable: Iterable[Any], is_leaf: Callable[[Any], bool] | None = None) -> bool:
  """True if every element of ``iterable`` is a leaf (None is not a leaf: it is an empty
  node), with ``is_leaf`` allowed to declare extra leaves."""
  if is_leaf is None:
    return all(_is_plain_leaf(x) for x in iterable)
  return all(is_leaf(x) or _is_plain_leaf(x) for x in iterable)


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
  """True for a single-node structure (a leaf, None or an empty container), as in JAX."""
  return treedef.num_nodes == 1


def treedef_is_strict_leaf(treedef: PyTreeDef) -> bool:
  return treedef._node is _LEAF


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
  """The structure of a tuple whose children have the given structures."""
  return PyTreeDef((_TUPLE, None, tuple([t._node for t in treedefs])))


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
  return treedef.children()


def build_tree(treedef: PyTreeDef, xs):
  """Builds a tree of ``treedef``'s node types from nested iterables ``xs``: each node of
  ``treedef`` takes its children from one iterable, each leaf of ``treedef`` takes the value
  found at its place in ``xs`` (which may itself be anything)."""
  return treedef.from_iterable_tree(xs)


# ------------------------------------------------------------------------------------------------
# Key paths

def tree_flatten_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False):
  """``([(key_path, leaf), ...], treedef)``."""
  out = []
  node = _flatten_with_path(tree, (), out, is_leaf, is_leaf_takes_path)
  return out, PyTreeDef(node, len(out))


def tree_leaves_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list:
  return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree, *rest,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False):
  """Like ``tree_map`` with ``f(key_path, leaf, *others)``."""
  pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
  all_leaves = [[x for _, x in pairs]] + [
      _up_to_or_explain(treedef, r, i, "tree_map_with_path") for i, r in enumerate(rest, 1)]
  paths = [p for p, _ in pairs]
  return _unflatten(treedef._node,
                    iter([f(p, *xs) for p, xs in zip(paths, zip(*all_leaves))]))


# ------------------------------------------------------------------------------------------------
# Registration

def _add(kind: _NodeKind):
  t = kind.type
  if t in _registry or t in _BUILTIN_NODE_TYPES:
    raise ValueError(f"Duplicate custom PyTreeDef type registration for {t!r}.")
  _registry[t] = kind


def register_pytree_node(nodetype: type, flatten_func: Callable, unflatten_func: Callable,
                         flatten_with_keys_func: Callable | None = None) -> None:
  """Makes ``nodetype`` an internal node.

  ``flatten_func(x) -> (children, aux_data)``; ``unflatten_func(aux_data, children) -> x``.
  Key paths name the children ``FlattenedIndexKey(i)`` unless ``flatten_with_keys_func``
  (``x -> ([(key, child), ...], aux_data)``) is given.
  """
  _add(_NodeKind(nodetype, nodetype.__name__, flatten_func, unflatten_func,
                 flatten_with_keys_func))


def register_pytree_with_keys(nodetype: type, flatten_with_keys: Callable,
                              unflatten_func: Callable,
                              flatten_func: Callable | None = None) -> None:
  """Like ``register_pytree_node`` but with a keyed flatten; ``flatten_func`` (optional) is a
  faster keyless version used when no paths are asked for."""
  if flatten_func is None:
    def flatten_func(x):
      keyed, aux = flatten_with_keys(x)
      return [c for _, c in keyed], aux
  _add(_NodeKind(nodetype, nodetype.__name__, flatten_func, unflatten_func, flatten_with_keys))


def register_pytree_node_class(cls: type) -> type:
  """Class decorator: ``cls`` has a method ``tree_flatten() -> (children, aux_data)`` and a
  classmethod ``tree_unflatten(aux_data, children)``."""
  register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
  return cls


def register_pytree_with_keys_class(cls: type) -> type:
  """Class decorator: like ``register_pytree_node_class`` with ``tree_flatten_with_keys()``
  returning ``([(key, child), ...], aux_data)``; ``tree_flatten`` is used if defined."""
  flat = operator.methodcaller("tree_flatten") if hasattr(cls, "tree_flatten") else None
  register_pytree_with_keys(cls, operator.methodcaller("tree_flatten_with_keys"),
                            cls.tree_unflatten, flat)
  return cls


def register_dataclass(nodetype: type, data_fields: Iterable[str] | None = None,
                       meta_fields: Iterable[str] | None = None,
                       drop_fields: Iterable[str] = ()) -> type:
  """Registers a dataclass: ``data_fields`` are children, ``meta_fields`` are aux data.

  With neither given, the dataclass's init fields are used, those with
  ``metadata={'static': True}`` as meta fields.  Usable as a decorator.
  """
  if data_fields is None and meta_fields is None:
    if not dataclasses.is_dataclass(nodetype):
      raise TypeError(f"register_dataclass: data_fields and meta_fields are required when "
                      f"nodetype is not a dataclass. Got nodetype={nodetype!r}.")
    drop = set(drop_fields)
    data_fields, meta_fields = [], []
    for f in dataclasses.fields(nodetype):
      if not f.init or f.name in drop:
        continue
      (meta_fields if f.metadata.get("static", False) else data_fields).append(f.name)
  elif data_fields is None or meta_fields is None:
    raise TypeError(f"register_dataclass: data_fields and meta_fields must both be specified "
                    f"when either is specified. Got data_fields={data_fields} "
                    f"meta_fields={meta_fields}.")
  data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
  if dataclasses.is_dataclass(nodetype):
    # the fields must be exactly the dataclass's init fields (less the dropped ones)
    given, overlap = set(data_fields) | set(meta_fields), set(data_fields) & set(meta_fields)
    if overlap:
      raise ValueError(f"data_fields and meta_fields must not overlap. Overlapping fields: "
                       f"{overlap}.")
    init = {f.name for f in dataclasses.fields(nodetype) if f.init}
    missing = init - given - set(drop_fields)
    if missing:
      raise ValueError(f"data_fields and meta_fields must include all dataclass fields with "
                       f"``init=True`` and only them. Missing fields: {missing}. Add them to "
                       "drop_fields to suppress this error.")
    unexpected = given - init
    if unexpected:
      raise ValueError(f"data_fields and meta_fields must include all dataclass fields with "
                       f"``init=True`` and only them. Unexpected fields: {unexpected}.")
  keys = tuple(GetAttrKey(n) for n in data_fields)

  def flatten(x):
    return ([getattr(x, n) for n in data_fields],
            tuple([getattr(x, n) for n in meta_fields]))

  def flatten_with_keys(x):
    return (list(zip(keys, [getattr(x, n) for n in data_fields])),
            tuple([getattr(x, n) for n in meta_fields]))

  def unflatten(meta, children):
    return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, meta)))

  _add(_NodeKind(nodetype, nodetype.__name__, flatten, unflatten, flatten_with_keys))
  return nodetype


def _static_flatten(x):
  return (), x


def _static_unflatten(x, _):
  return x


def register_static(cls: type) -> type:
  """Makes instances of ``cls`` nodes with no children: the whole value is aux data (so it
  must be hashable and comparable with ==).  Usable as a decorator."""
  register_pytree_node(cls, _static_flatten, _static_unflatten)
  return cls


# OrderedDict: insertion order; defaultdict: sorted keys, default_factory kept.

def _odict_flatten(d):
  return list(d.values()), tuple(d)


def _odict_flatten_with_keys(d):
  return [(DictKey(k), v) for k, v in d.items()], tuple(d)


def _odict_unflatten(keys, children):
  return collections.OrderedDict(zip(keys, children))


def _ddict_flatten(d):
  keys = _sorted_keys(d)
  return [d[k] for k in keys], (d.default_factory, keys)


def _ddict_flatten_with_keys(d):
  keys = _sorted_keys(d)
  return [(DictKey(k), d[k]) for k in keys], (d.default_factory, keys)


def _ddict_unflatten(aux, children):
  factory, keys = aux
  return collections.defaultdict(factory, zip(keys, children))


register_pytree_node(collections.OrderedDict, _odict_flatten, _odict_unflatten,
                     _odict_flatten_with_keys)
register_pytree_node(collections.defaultdict, _ddict_flatten, _ddict_unflatten,
                     _ddict_flatten_with_keys)


# ------------------------------------------------------------------------------------------------
# Partial

class _OpaqueCallable:
  """Holds a ``functools.partial`` given to ``Partial`` so that ``functools.partial`` does not
  merge its arguments into the new one (they must stay aux data, not children)."""
  __slots__ = ("wrapped",)

  def __init__(self, wrapped):
    self.wrapped = wrapped

  def __call__(self, *args, **kwargs):
    return self.wrapped(*args, **kwargs)

  def __eq__(self, other):
    if isinstance(other, _OpaqueCallable):
      return self.wrapped == other.wrapped
    return NotImplemented

  def __hash__(self):
    return hash(self.wrapped)

  def __repr__(self):
    return repr(self.wrapped)


class Partial(functools.partial):
  """A ``functools.partial`` that is a pytree: the function is aux data (compared with ==),
  the bound positional and keyword arguments are children.  Passing one to a jitted function
  traces its arguments and keys the cache on the function."""

  def __new__(cls, func, *args, **kwargs):
    if isinstance(func, functools.partial):
      func = _OpaqueCallable(func)
    return super().__new__(cls, func, *args, **kwargs)

  @property
  def func(self):
    f = functools.partial.func.__get__(self)
    return f.wrapped if type(f) is _OpaqueCallable else f


def _partial_flatten(p):
  return (p.args, p.keywords), p.func


def _partial_unflatten(func, children):
  args, keywords = children
  return Partial(func, *args, **keywords)


register_pytree_node(Partial, _partial_flatten, _partial_unflatten)


# ------------------------------------------------------------------------------------------------
# One-level flattening, broadcasting, associative reduction

def _one_level(tree, with_keys: bool):
  first = [True]

  def stop_below_root(*args):
    if first[0]:
      first[0] = False
      return False
    return True
  out: list = []
  if with_keys:
    node = _flatten_with_path(tree, (), out, stop_below_root, False)
  else:
    node = _flatten(tree, out, stop_below_root)
  if node is _LEAF:
    raise ValueError(f"can't tree-flatten type: {type(tree)}")
  kind, aux, _ = node
  if type(aux) is _Aux:
    aux = aux.data
  if kind is _NONE:
    return (), None
  if with_keys:
    out = [(path[0], x) for path, x in out]
  return (tuple(out) if kind is _DICT or with_keys else out), aux


def flatten_one_level(tree):
  """``(children, aux_data)`` of the root node of ``tree``; ValueError for a leaf."""
  return _one_level(tree, False)


def flatten_one_level_with_keys(tree):
  """``(((key, child), ...), aux_data)`` of the root node of ``tree``; ValueError for a leaf."""
  return _one_level(tree, True)


def is_tree_node(typ) -> bool:
  """True if ``typ`` is a pytree node type: a built-in container, None's type, a registered
  type or a namedtuple class."""
  if not isinstance(typ, type):
    raise TypeError(f"is_tree_node expects a type, got {typ!r}")
  return typ in _BUILTIN_NODE_TYPES or typ in _registry or _is_namedtuple_type(typ)


def tree_broadcast(prefix_tree, full_tree, is_leaf: Callable[[Any], bool] | None = None):
  """``full_tree``'s structure with each leaf taking the value of the ``prefix_tree`` leaf
  above it (``prefix_tree`` must be a prefix of ``full_tree``)."""
  leaves, treedef = tree_flatten(prefix_tree, is_leaf)
  try:
    subtrees = treedef.flatten_up_to(full_tree)
  except ValueError as e:
    raise ValueError(f"pytree structure error: the prefix tree {treedef!r} is not a prefix of "
                     f"the full tree {tree_structure(full_tree, is_leaf)!r}: {e}") from None
  return treedef.unflatten([tree_map(lambda _, v=v: v, sub, is_leaf=is_leaf)
                            for v, sub in zip(leaves, subtrees)])


def broadcast_prefix(prefix_tree, full_tree, is_leaf: Callable[[Any], bool] | None = None
                     ) -> list:
  """One entry per leaf of ``full_tree``: the leaf of ``prefix_tree`` above it (JAX's internal
  helper of the same name; shardings and specs given per argument subtree).  Raises ValueError
  when ``prefix_tree`` is not a prefix of ``full_tree``."""
  leaves, treedef = tree_flatten(prefix_tree, is_leaf)
  out = []
  for v, sub in zip(leaves, treedef.flatten_up_to(full_tree)):
    out.extend([v] * len(tree_leaves(sub)))
  return out


class _Unspecified:
  def __repr__(self):
    return "<unspecified>"


_unspecified = _Unspecified()


def tree_reduce_associative(operation: Callable[[Any, Any], Any], tree, *,
                            identity: Any = _unspecified,
                            is_leaf: Callable[[Any], bool] | None = None):
  """Reduces the leaves of ``tree`` with an associative ``operation`` as a balanced binary
  tree (the first half's result on the left); ``identity`` is the result for no leaves."""
  leaves = tree_leaves(tree, is_leaf)
  if not leaves:
    if identity is _unspecified:
      raise TypeError("Must specify identity for parallel reduction of empty sequence.")
    return identity

  def reduce(xs):
    if len(xs) == 1:
      return xs[0]
    half = len(xs) // 2
    return operation(reduce(xs[:half]), reduce(xs[half:]))
  return reduce(leaves)
