"""``PyTreeDef.serialize_using_proto`` / ``deserialize_using_proto`` and ``default_registry``
(JAX's names).  A structure of built-in containers (tuple, list, dict with str or int keys,
None) and leaves becomes bytes and back; custom nodes and namedtuples are refused, as JAX's
serialization refuses them.  The bytes are ourjax's own encoding (JSON), not JAX's protobuf."""
from __future__ import annotations

import json

from ourjax import _pytree
from ourjax._pytree import PyTreeDef

_VERSION = 1


def _encode(node):
  if node is _pytree._LEAF:
    return "*"
  kind, aux, children = node
  kids = [_encode(c) for c in children]
  if kind is _pytree._NONE:
    return ["None"]
  if kind is _pytree._TUPLE:
    return ["tuple", kids]
  if kind is _pytree._LIST:
    return ["list", kids]
  if kind is _pytree._DICT:
    keys = []
    for k in aux:
      if type(k) not in (str, int):
        raise TypeError(f"serialize_using_proto: a dict key of type {type(k).__name__} cannot "
                        "be serialized (str and int keys can)")
      keys.append([type(k).__name__, k])
    return ["dict", keys, kids]
  name = aux.__name__ if kind is _pytree._NAMEDTUPLE else getattr(kind.type, "__name__", kind)
  raise TypeError(f"serialize_using_proto: the node type {name} cannot be serialized (only "
                  "tuple, list, dict and None nodes can)")


def _decode(x):
  if x == "*":
    return _pytree._LEAF
  tag = x[0]
  if tag == "None":
    return _pytree._NONE_NODE
  if tag == "tuple":
    return (_pytree._TUPLE, None, tuple(_decode(c) for c in x[1]))
  if tag == "list":
    return (_pytree._LIST, None, tuple(_decode(c) for c in x[1]))
  if tag == "dict":
    keys = tuple(int(v) if t == "int" else str(v) for t, v in x[1])
    return (_pytree._DICT, keys, tuple(_decode(c) for c in x[2]))
  raise ValueError(f"deserialize_using_proto: unknown node {tag!r}")


def serialize(treedef: PyTreeDef) -> bytes:
  return json.dumps({"ourjax_pytreedef": _VERSION, "tree": _encode(treedef._node)},
                    separators=(",", ":")).encode()


def deserialize(registry, data: bytes) -> PyTreeDef:
  try:
    obj = json.loads(bytes(data).decode())
    tree = obj["tree"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError("deserialize_using_proto: not a serialized PyTreeDef") from e
  return PyTreeDef(_decode(tree))


class PyTreeRegistry:
  """The registry of pytree node types (``tree_util.default_registry``): ``flatten`` with it
  is ``tree_flatten``.  Node types are registered with ``register_pytree_node`` and friends."""

  def flatten(self, tree, leaf_predicate=None):
    return _pytree.tree_flatten(tree, leaf_predicate)

  def __repr__(self):
    return "<PyTreeRegistry default>"


default_registry = PyTreeRegistry()
