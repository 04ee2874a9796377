"""tree_util behaviours JAX's tree_util_test checks: key-entry hashes, treedef.walk, metadata
equality errors, jax.tree.static, ravel_pytree's unravel as a static argument."""
import collections
import dataclasses

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import flatten_util, tree_util
from ourjax.tree_util import DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey


def test_key_entries_hash_by_kind_and_value():
  for k in (SequenceKey(1), DictKey("a"), GetAttrKey("a"), FlattenedIndexKey(1)):
    same = type(k)(*dataclasses.astuple(k))
    assert k == same and hash(k) == hash(same)
  assert hash(FlattenedIndexKey(1)) != hash(SequenceKey(1))
  assert hash(DictKey("a")) != hash(GetAttrKey("a"))
  assert len({SequenceKey(1), FlattenedIndexKey(1), SequenceKey(1)}) == 2


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize("tree", [{"b": 2, "a": 1, "c": {"b": 2, "a": 1}}, (1, [2, 3]), 5, None,
                                  (None, 1), Point(1, 2), [(1,), {}], ()])
def test_walk_rebuilds_bottom_up(tree):
  leaves, treedef = tree_util.tree_flatten(tree)

  def expect(t):       # the walk written out over the Python containers themselves
    if t is None:
      return ("N", (), None)
    if isinstance(t, dict):
      keys = sorted(t)
      return ("N", tuple(expect(t[k]) for k in keys), keys)
    if isinstance(t, (tuple, list)):
      data = type(t) if hasattr(t, "_fields") else None
      return ("N", tuple(expect(c) for c in t), data)
    return ("L", t)

  out = treedef.walk(lambda kids, data: ("N", kids, data), lambda leaf: ("L", leaf), leaves)
  assert out == expect(tree)


def test_array_metadata_equality_error_is_jaxs():
  @tree_util.register_dataclass
  @dataclasses.dataclass
  class Tree:
    x: object = dataclasses.field(metadata={"static": True})

  f = ourjax.jit(lambda t: t)
  f(Tree(jnp.arange(4)))
  with pytest.raises(ValueError, match="Exception raised while checking equality of metadata "
                     "fields of pytree"):
    f(Tree(jnp.arange(4)))


def test_tree_static_is_a_static_dataclass_field():
  s = ourjax.tree.static()
  assert s.default is dataclasses.MISSING and dict(s.metadata) == {"static": True}
  assert ourjax.tree.static(default="abc").default == "abc"
  assert dict(ourjax.tree.static(metadata={"k": 1}).metadata) == {"static": True, "k": 1}
  assert dict(ourjax.tree.static(metadata={"static": False}).metadata) == {"static": False}

  @tree_util.register_dataclass
  @dataclasses.dataclass
  class Op:
    x: object
    name: str = ourjax.tree.static(default="add")

  leaves, treedef = tree_util.tree_flatten(Op(np.ones(2)))
  assert len(leaves) == 1 and tree_util.tree_unflatten(treedef, leaves).name == "add"


def test_unravel_functions_of_equal_structures_are_equal():
  x = (jnp.array([1.0, 2.0]), jnp.array([[3.0]]))
  flat1, un1 = flatten_util.ravel_pytree(x)
  flat2, un2 = flatten_util.ravel_pytree(x)
  assert un1 == un2 and hash(un1) == hash(un2)
  assert un1 != flatten_util.ravel_pytree((jnp.ones(3),))[1]
  traces = []

  def run(flat, unravel):
    traces.append(1)
    return unravel(flat + 1)

  run = ourjax.jit(run, static_argnums=1)
  out1, out2 = run(flat1, un1), run(flat2, un2)
  assert len(traces) == 1
  for a, b in zip(out1, (np.array([2.0, 3.0]), np.array([[4.0]]))):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(out2[1], [[4.0]])


def test_treedef_serialization_round_trip():
  import collections
  import pytest
  from ourjax import tree_util as tu
  trees = [[1, [2], (3,), {'a': 4, 'b': 5}, None], {7: (1, 2)}, (), 5, [None, {}]]
  for tree in trees:
    t = tu.tree_structure(tree)
    back = tu.PyTreeDef.deserialize_using_proto(tu.default_registry, t.serialize_using_proto())
    assert back == t
    leaves = tu.tree_leaves(tree)
    assert back.unflatten(leaves) == tree
  leaves, t = tu.default_registry.flatten({'a': 1, 'b': [2, 3]})
  assert leaves == [1, 2, 3] and t == tu.tree_structure({'a': 0, 'b': [0, 0]})
  with pytest.raises(TypeError, match="cannot be serialized"):
    tu.tree_structure(collections.namedtuple("P", "x")(1)).serialize_using_proto()
