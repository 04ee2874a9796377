"""``jax.tree_util``: pytrees (see ``ourjax._pytree`` for the behaviour).

ourjax's transformations flatten with ``ourjax._pytree``, where a typed PRNG key array
(``ourjax.random.key``) is a node whose one child is its ``uint32`` key data: jit, vmap, grad,
scan, cond, ... carry the data and rebuild the key array on the way out.  Users see key arrays
as leaves, as in JAX: the functions here that look at leaves treat every type in
``_pytree.USER_LEAF_TYPES`` as a leaf.
"""
from __future__ import annotations

from typing import Any, Callable

from ourjax import _pytree
from ourjax._pytree import (  # noqa: F401  (re-exports)
    USER_LEAF_TYPES, DictKey, FlattenedIndexKey, GetAttrKey, KeyEntry, KeyPath, Partial,
    PyTreeDef, SequenceKey, all_leaves, build_tree, flatten_one_level,
    flatten_one_level_with_keys, is_tree_node, keystr, register_dataclass,
    register_pytree_node, register_pytree_node_class, register_pytree_with_keys,
    register_pytree_with_keys_class, register_static, tree_transpose, tree_unflatten,
    treedef_children, treedef_is_leaf, treedef_is_strict_leaf, treedef_tuple)

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "tree_reduce", "tree_all", "tree_transpose", "all_leaves", "treedef_is_leaf",
    "treedef_is_strict_leaf", "treedef_tuple", "treedef_children", "build_tree",
    "register_pytree_node", "register_pytree_node_class", "register_pytree_with_keys",
    "register_pytree_with_keys_class", "register_dataclass", "register_static",
    "tree_flatten_with_path", "tree_map_with_path", "tree_leaves_with_path", "keystr",
    "SequenceKey", "DictKey", "GetAttrKey", "FlattenedIndexKey", "Partial", "KeyEntry",
    "KeyPath", "flatten_one_level", "flatten_one_level_with_keys", "is_tree_node",
    "tree_broadcast", "broadcast_prefix", "tree_reduce_associative",
]


def _user(is_leaf, takes_path=False):
  """``is_leaf`` extended so that key arrays are leaves."""
  if not USER_LEAF_TYPES:
    return is_leaf
  if is_leaf is None:
    return (lambda p, x: type(x) in USER_LEAF_TYPES) if takes_path else \
        (lambda x: type(x) in USER_LEAF_TYPES)
  if takes_path:
    return lambda p, x: type(x) in USER_LEAF_TYPES or is_leaf(p, x)
  return lambda x: type(x) in USER_LEAF_TYPES or is_leaf(x)


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
  """Flattens ``tree`` into ``(leaves, treedef)``; ``is_leaf(x)`` true stops at ``x``."""
  return _pytree.tree_flatten(tree, _user(is_leaf))


def tree_leaves(tree, is_leaf: Callable[[Any], bool] | None = None) -> list:
  return _pytree.tree_leaves(tree, _user(is_leaf))


def tree_structure(tree, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
  return _pytree.tree_structure(tree, _user(is_leaf))


def tree_map(f: Callable[..., Any], tree, *rest, is_leaf: Callable[[Any], bool] | None = None):
  """``f`` applied to each leaf of ``tree`` (and the matching subtrees of ``rest``)."""
  return _pytree.tree_map(f, tree, *rest, is_leaf=_user(is_leaf))


def tree_reduce(function: Callable[[Any, Any], Any], tree, initializer: Any = _pytree._no_initializer,
                is_leaf: Callable[[Any], bool] | None = None):
  """``functools.reduce(function, tree_leaves(tree), initializer)``."""
  return _pytree.tree_reduce(function, tree, initializer, _user(is_leaf))


def tree_all(tree, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
  return _pytree.tree_all(tree, is_leaf=_user(is_leaf))


def tree_flatten_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False):
  """``([(key_path, leaf), ...], treedef)``."""
  return _pytree.tree_flatten_with_path(tree, _user(is_leaf, is_leaf_takes_path),
                                        is_leaf_takes_path)


def tree_leaves_with_path(tree, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list:
  return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree, *rest,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False):
  """Like ``tree_map`` with ``f(key_path, leaf, *others)``."""
  return _pytree.tree_map_with_path(f, tree, *rest,
                                    is_leaf=_user(is_leaf, is_leaf_takes_path),
                                    is_leaf_takes_path=is_leaf_takes_path)


def tree_broadcast(prefix_tree, full_tree, is_leaf: Callable[[Any], bool] | None = None):
  """``full_tree``'s structure with each leaf taking the value of the ``prefix_tree`` leaf
  above it (``prefix_tree`` must be a prefix of ``full_tree``)."""
  return _pytree.tree_broadcast(prefix_tree, full_tree, _user(is_leaf))


def broadcast_prefix(prefix_tree, full_tree, is_leaf: Callable[[Any], bool] | None = None
                     ) -> list:
  return _pytree.broadcast_prefix(prefix_tree, full_tree, _user(is_leaf))


def tree_reduce_associative(operation: Callable[[Any, Any], Any], tree, *,
                            identity: Any = _pytree._unspecified,
                            is_leaf: Callable[[Any], bool] | None = None):
  return _pytree.tree_reduce_associative(operation, tree, identity=identity,
                                         is_leaf=_user(is_leaf))


from ourjax._pytree_proto import default_registry  # noqa: E402,F401


def __getattr__(name):  # everything else (private helpers included) is ``_pytree``'s
  try:
    return getattr(_pytree, name)
  except AttributeError:
    raise AttributeError(f"module 'ourjax.tree_util' has no attribute {name!r}") from None
