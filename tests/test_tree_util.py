"""Tests of ourjax.tree_util against JAX's pytree rules."""
import collections
import dataclasses
import functools
import operator

import pytest
from hypothesis import given, settings, strategies as st

from ourjax import tree as jtree
from ourjax import tree_util as tu
from ourjax.tree_util import (DictKey, FlattenedIndexKey, GetAttrKey, Partial, PyTreeDef,
                              SequenceKey)

Point = collections.namedtuple("Point", ["x", "y"])
Other = collections.namedtuple("Other", ["x", "y"])


class Box:
  """A custom node with two children and a (possibly unhashable) aux datum."""

  def __init__(self, a, b, tag="t"):
    self.a, self.b, self.tag = a, b, tag

  def __eq__(self, other):
    return (type(other) is Box and self.tag == other.tag and self.a == other.a
            and self.b == other.b)

  def __repr__(self):
    return f"Box({self.a!r}, {self.b!r}, tag={self.tag!r})"


tu.register_pytree_node(Box, lambda b: ((b.a, b.b), b.tag),
                        lambda tag, ch: Box(ch[0], ch[1], tag))


@tu.register_pytree_node_class
class Pair:
  def __init__(self, first, second, meta=0):
    self.first, self.second, self.meta = first, second, meta

  def tree_flatten(self):
    return (self.first, self.second), self.meta

  @classmethod
  def tree_unflatten(cls, meta, children):
    return cls(*children, meta=meta)

  def __eq__(self, other):
    return (type(other) is Pair and (self.first, self.second, self.meta)
            == (other.first, other.second, other.meta))


class Keyed:
  def __init__(self, u, v):
    self.u, self.v = u, v


tu.register_pytree_with_keys(
    Keyed, lambda k: ([(GetAttrKey("u"), k.u), (GetAttrKey("v"), k.v)], None),
    lambda _, ch: Keyed(*ch))


@tu.register_dataclass
@dataclasses.dataclass
class Params:
  w: object
  b: object
  name: str = dataclasses.field(default="p", metadata=dict(static=True))


class Opaque:
  """A plain object: a leaf."""

  def __init__(self, v):
    self.v = v

  def __eq__(self, other):
    return type(other) is Opaque and other.v == self.v

  def __repr__(self):
    return f"Opaque({self.v!r})"


# ------------------------------------------------------------------------------------------------
# Strategies

leaf_values = (st.integers(-50, 50) | st.floats(-1e3, 1e3, allow_nan=False)
               | st.text(max_size=3) | st.builds(Opaque, st.integers(0, 9)))
keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


def _containers(children, *, builtin_only=False):
  options = [
      st.lists(children, max_size=4),
      st.lists(children, max_size=4).map(tuple),
      st.dictionaries(keys, children, max_size=4),
      st.builds(Point, children, children),
  ]
  if not builtin_only:
    options += [
        st.lists(st.tuples(keys, children), max_size=4).map(collections.OrderedDict),
        st.dictionaries(keys, children, max_size=3).map(
            lambda d: collections.defaultdict(list, d)),
        st.builds(Box, children, children, st.sampled_from(["t", "u"])),
        st.builds(Pair, children, children, st.integers(0, 2)),
        st.builds(Params, children, children),
    ]
  return st.one_of(options)


trees = st.recursive(leaf_values | st.none(), _containers, max_leaves=12)
builtin_trees = st.recursive(leaf_values | st.none(),
                             functools.partial(_containers, builtin_only=True), max_leaves=12)


def reference_leaves(x):
  """The leaf order JAX documents, written independently of the implementation."""
  if x is None:
    return []
  if isinstance(x, (tuple, list)) and type(x) in (tuple, list, Point):
    return [l for c in x for l in reference_leaves(c)]
  if type(x) is dict or type(x) is collections.defaultdict:
    return [l for k in sorted(x) for l in reference_leaves(x[k])]
  if type(x) is collections.OrderedDict:
    return [l for v in x.values() for l in reference_leaves(v)]
  if type(x) is Box:
    return reference_leaves(x.a) + reference_leaves(x.b)
  if type(x) is Pair:
    return reference_leaves(x.first) + reference_leaves(x.second)
  if type(x) is Params:
    return reference_leaves(x.w) + reference_leaves(x.b)
  return [x]


def follow(tree, path):
  """The subtree at a key path."""
  for k in path:
    if isinstance(k, SequenceKey):
      tree = tree[k.idx]
    elif isinstance(k, DictKey):
      tree = tree[k.key]
    elif isinstance(k, GetAttrKey):
      tree = getattr(tree, k.name)
    elif isinstance(k, FlattenedIndexKey):
      tree = tu.tree_flatten(tree, is_leaf=lambda y: y is not tree)[0][k.key]
    else:
      raise AssertionError(k)
  return tree


class Star:
  def __repr__(self):
    return "*"


def _jax_repr(x) -> str:
  """Python's repr, except that a namedtuple prints as JAX prints its node,
  ``CustomNode(namedtuple[Name], [children])``."""
  if isinstance(x, tuple) and hasattr(x, "_fields"):
    return f"CustomNode(namedtuple[{type(x).__name__}], [{', '.join(map(_jax_repr, x))}])"
  if type(x) is tuple:
    return "(" + _jax_repr(x[0]) + ",)" if len(x) == 1 else \
        "(" + ", ".join(map(_jax_repr, x)) + ")"
  if type(x) is list:
    return "[" + ", ".join(map(_jax_repr, x)) + "]"
  if type(x) is dict:
    return "{" + ", ".join(f"{k!r}: {_jax_repr(v)}" for k, v in x.items()) + "}"
  return repr(x)


def same(a, b):
  """Structural equality that also checks container types (dict == OrderedDict is True)."""
  if type(a) is not type(b):
    return False
  if isinstance(a, dict):  # unflattened dicts come back in sorted-key order, as in JAX
    keys_agree = list(a) == list(b) if type(a) is collections.OrderedDict else a.keys() == b.keys()
    return keys_agree and all(same(a[k], b[k]) for k in a) and (
        getattr(a, "default_factory", None) is getattr(b, "default_factory", None))
  if isinstance(a, (tuple, list)):
    return len(a) == len(b) and all(map(same, a, b))
  if isinstance(a, (Box, Pair, Params)):
    fa, da = tu.tree_flatten(a, is_leaf=lambda y: y is not a)
    fb, db = tu.tree_flatten(b, is_leaf=lambda y: y is not b)
    return da == db and all(map(same, fa, fb))
  return a == b


# ------------------------------------------------------------------------------------------------
# Properties over drawn trees

@settings(max_examples=150, deadline=None)
@given(trees)
def test_flatten_unflatten_round_trip_and_leaf_order(tree):
  leaves, treedef = tu.tree_flatten(tree)
  assert leaves == reference_leaves(tree)
  assert tu.tree_leaves(tree) == leaves
  assert treedef.num_leaves == len(leaves)
  rebuilt = tu.tree_unflatten(treedef, leaves)
  assert same(rebuilt, tree)
  # the rebuilt tree has an equal (and equally hashed) structure, and is flattened up to it
  again = tu.tree_structure(rebuilt)
  assert again == treedef and hash(again) == hash(treedef) and not (again != treedef)
  assert treedef.flatten_up_to(tree) == leaves
  # build_tree from the children lists reproduces the tree as well
  assert same(tu.build_tree(treedef, _nested_children(tree)), tree)


def _nested_children(tree):
  leaves, treedef = tu.tree_flatten(tree, is_leaf=lambda y: y is not tree)
  if tu.treedef_is_strict_leaf(treedef):
    return tree
  return [_nested_children(c) for c in leaves]


@settings(max_examples=100, deadline=None)
@given(trees)
def test_tree_map_over_several_trees(tree):
  leaves, treedef = tu.tree_flatten(tree)
  marked = tu.tree_map(Opaque, tree)
  assert tu.tree_structure(marked) == treedef
  assert tu.tree_leaves(marked) == [Opaque(x) for x in leaves]
  triples = tu.tree_map(lambda a, b, c: Opaque((a, b, c)), tree, marked, tree)
  assert tu.tree_leaves(triples) == [Opaque((x, Opaque(x), x)) for x in leaves]
  assert tu.tree_structure(triples) == treedef
  assert same(tu.tree_map(lambda x: x, tree), tree)


@settings(max_examples=100, deadline=None)
@given(trees)
def test_key_paths_lead_to_leaves(tree):
  pairs, treedef = tu.tree_flatten_with_path(tree)
  assert treedef == tu.tree_structure(tree)
  assert [x for _, x in pairs] == tu.tree_leaves(tree)
  assert tu.tree_leaves_with_path(tree) == pairs
  for path, leaf in pairs:
    assert follow(tree, path) == leaf
  paths = [p for p, _ in pairs]
  assert len(set(paths)) == len(paths)
  mapped = tu.tree_map_with_path(lambda p, x: tu.keystr(p), tree)
  assert tu.tree_leaves(mapped) == [tu.keystr(p) for p in paths]


@settings(max_examples=100, deadline=None)
@given(builtin_trees)
def test_repr_matches_python_repr_of_structure(tree):
  treedef = tu.tree_structure(tree)
  stars = treedef.unflatten([Star()] * treedef.num_leaves)
  assert repr(treedef) == f"PyTreeDef({_jax_repr(stars)})"
  assert str(treedef) == repr(treedef)


@settings(max_examples=60, deadline=None)
@given(trees, trees)
def test_treedef_equality_agrees_with_structure(t1, t2):
  d1, d2 = tu.tree_structure(t1), tu.tree_structure(t2)
  stars1 = d1.unflatten([0] * d1.num_leaves)
  stars2 = d2.unflatten([0] * d2.num_leaves)
  assert (d1 == d2) == same(stars1, stars2)
  if d1 == d2:
    assert hash(d1) == hash(d2)


# ------------------------------------------------------------------------------------------------
# Node types and leaf order

def test_dict_children_sorted_by_key_and_keys_kept():
  tree = {"b": 1, "a": 2, "c": {"z": 3, "y": 4}}
  leaves, treedef = tu.tree_flatten(tree)
  assert leaves == [2, 1, 4, 3]
  out = treedef.unflatten([10, 20, 30, 40])
  assert out == {"a": 10, "b": 20, "c": {"y": 30, "z": 40}}
  assert list(out) == ["a", "b", "c"]
  assert tu.tree_structure({"x": 1, "y": 2}) == tu.tree_structure({"y": 0, "x": 5})
  assert tu.tree_structure({"x": 1}) != tu.tree_structure({"y": 1})


def test_ordered_dict_keeps_insertion_order_and_defaultdict_its_factory():
  od = collections.OrderedDict([("b", 1), ("a", 2)])
  leaves, treedef = tu.tree_flatten(od)
  assert leaves == [1, 2]
  out = treedef.unflatten([5, 6])
  assert type(out) is collections.OrderedDict and list(out.items()) == [("b", 5), ("a", 6)]
  assert repr(treedef) == "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))"
  # order is part of an OrderedDict's structure, not of a dict's
  assert treedef != tu.tree_structure(collections.OrderedDict([("a", 2), ("b", 1)]))
  assert treedef != tu.tree_structure({"b": 1, "a": 2})

  dd = collections.defaultdict(list, {"y": 1, "x": 2})
  leaves, treedef = tu.tree_flatten(dd)
  assert leaves == [2, 1]
  out = treedef.unflatten([7, 8])
  assert type(out) is collections.defaultdict and out.default_factory is list
  assert dict(out) == {"x": 7, "y": 8}
  assert treedef != tu.tree_structure(collections.defaultdict(dict, {"y": 1, "x": 2}))


def test_namedtuples_are_nodes_typed_by_class():
  leaves, treedef = tu.tree_flatten(Point(1, (2, 3)))
  assert leaves == [1, 2, 3]
  assert repr(treedef) == "PyTreeDef(CustomNode(namedtuple[Point], [*, (*, *)]))"   # JAX's form
  out = treedef.unflatten("abc")
  assert type(out) is Point and out == Point("a", ("b", "c"))
  assert treedef != tu.tree_structure(Other(1, (2, 3)))
  assert treedef != tu.tree_structure((1, (2, 3)))


def test_none_is_an_empty_subtree_and_other_values_are_leaves():
  leaves, treedef = tu.tree_flatten([None, 1, (None,), {"a": None}])
  assert leaves == [1]
  assert repr(treedef) == "PyTreeDef([None, *, (None,), {'a': None}])"
  assert tu.tree_flatten(None) == ([], tu.tree_structure(None))
  assert repr(tu.tree_structure(None)) == "PyTreeDef(None)"
  assert tu.tree_unflatten(tu.tree_structure(None), []) is None
  # strings, objects, subclasses of list/dict and plain tuple subclasses are leaves
  class L(list):
    pass

  class T(tuple):
    pass

  things = ["str", b"bytes", 3.5, Opaque(1), L([1, 2]), T((1, 2)), {1, 2}, object]
  for thing in things:
    ls, td = tu.tree_flatten(thing)
    assert ls == [thing] and repr(td) == "PyTreeDef(*)"
  assert tu.tree_map(lambda x: 0, [None, 1]) == [None, 0]


def test_repr_examples():
  assert repr(tu.tree_structure((1, {"a": 2, "b": None}))) == "PyTreeDef((*, {'a': *, 'b': None}))"
  assert repr(tu.tree_structure(7)) == "PyTreeDef(*)"
  assert repr(tu.tree_structure((7,))) == "PyTreeDef((*,))"
  assert repr(tu.tree_structure(([], (), {}))) == "PyTreeDef(([], (), {}))"
  assert repr(tu.tree_structure(Box(1, [2], "q"))) == "PyTreeDef(CustomNode(Box[q], [*, [*]]))"
  assert repr(tu.tree_structure({1: "a", 0: "b"})) == "PyTreeDef({0: *, 1: *})"


def test_unsortable_dict_keys_raise_value_error():
  with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
    tu.tree_flatten({1: 2, "a": 3})
  # an OrderedDict does not sort, so mixed keys are fine there
  assert tu.tree_leaves(collections.OrderedDict([(1, 2), ("a", 3)])) == [2, 3]


def test_is_leaf_stops_flattening():
  tree = [(1, 2), {"a": (3, 4)}, None]
  is_pair = lambda x: type(x) is tuple and len(x) == 2
  leaves, treedef = tu.tree_flatten(tree, is_leaf=is_pair)
  assert leaves == [(1, 2), (3, 4)]
  assert treedef == tu.tree_structure([0, {"a": 0}, None])
  assert tu.tree_leaves(tree, is_leaf=is_pair) == leaves
  assert tu.tree_map(sum, tree, is_leaf=is_pair) == [3, {"a": 7}, None]
  # the root is offered to is_leaf too, and None can be made a leaf
  assert tu.tree_leaves(tree, is_leaf=lambda x: True) == [tree]
  assert tu.tree_leaves([None, 1], is_leaf=lambda x: x is None) == [None, 1]
  assert tu.tree_map(lambda x: "n" if x is None else x, [None, 1],
                     is_leaf=lambda x: x is None) == ["n", 1]


def test_counts_children_and_node_data():
  treedef = tu.tree_structure((1, (2, None), [3]))
  assert treedef.num_leaves == 3
  assert treedef.num_nodes == 7  # outer tuple, 1, inner tuple, 2, None, list, 3
  kids = treedef.children()
  assert kids == [tu.tree_structure(1), tu.tree_structure((2, None)), tu.tree_structure([3])]
  assert tu.treedef_children(treedef) == kids
  assert kids[1].num_leaves == 1 and kids[1].num_nodes == 3
  assert tu.tree_structure(5).children() == []
  assert treedef.node_data() == (tuple, None)
  assert tu.tree_structure({"b": 1, "a": 2}).node_data() == (dict, ["a", "b"])
  assert tu.tree_structure(Box(1, 2, "k")).node_data() == (Box, "k")
  assert tu.tree_structure(Point(1, 2)).node_data()[0] is Point
  assert tu.tree_structure(3).node_data() is None


def test_treedef_is_leaf_tuple_compose_and_all_leaves():
  assert tu.treedef_is_leaf(tu.tree_structure(1))
  assert tu.treedef_is_leaf(tu.tree_structure(None))
  assert not tu.treedef_is_leaf(tu.tree_structure((1,)))
  assert tu.treedef_is_strict_leaf(tu.tree_structure(1))
  assert not tu.treedef_is_strict_leaf(tu.tree_structure(None))

  parts = [tu.tree_structure(1), tu.tree_structure({"a": 1, "b": 2}), tu.tree_structure(None)]
  assert tu.treedef_tuple(parts) == tu.tree_structure((0, {"a": 0, "b": 0}, None))
  assert tu.treedef_tuple(parts).num_leaves == 3

  outer, inner = tu.tree_structure([1, 2]), tu.tree_structure((1, {"k": 1}))
  assert outer.compose(inner) == tu.tree_structure([(0, {"k": 0}), (0, {"k": 0})])

  assert tu.all_leaves([1, "a", Opaque(2)])
  assert not tu.all_leaves([1, (2,)])
  assert not tu.all_leaves([1, None])
  assert not tu.all_leaves([Box(1, 2)])
  assert tu.all_leaves([1, (2,)], is_leaf=lambda x: type(x) is tuple)


def test_build_tree():
  treedef = tu.tree_structure({"a": 1, "b": (2, [3, 4]), "c": None})
  assert tu.build_tree(treedef, [10, [20, [30, 40]], []]) == \
      {"a": 10, "b": (20, [30, 40]), "c": None}
  # a leaf of the treedef takes whatever value sits at its place
  assert tu.build_tree(treedef, [(1, 2), [3, ("p", "q")], ()]) == \
      {"a": (1, 2), "b": (3, ["p", "q"]), "c": None}
  with pytest.raises(ValueError):
    tu.build_tree(treedef, [1, 2])


def test_reduce_all_transpose():
  tree = {"a": 1, "b": [2, 3]}
  assert tu.tree_reduce(operator.add, tree) == 6
  assert tu.tree_reduce(operator.add, tree, 100) == 106
  assert tu.tree_reduce(lambda acc, x: acc + [x], tree, initializer=[]) == [1, 2, 3]
  with pytest.raises(TypeError):
    tu.tree_reduce(operator.add, [None])
  assert tu.tree_all([True, {"x": 1}]) and not tu.tree_all([True, (0,)])
  assert tu.tree_all([])

  outer = tu.tree_structure([0, 0, 0])
  inner = tu.tree_structure({"p": 0, "q": 0})
  tree = [{"p": 1, "q": 2}, {"p": 3, "q": 4}, {"p": 5, "q": 6}]
  want = {"p": [1, 3, 5], "q": [2, 4, 6]}
  assert tu.tree_transpose(outer, inner, tree) == want
  assert tu.tree_transpose(outer, None, tree) == want
  assert tu.tree_transpose(inner, outer, want) == tree
  with pytest.raises(TypeError, match="Mismatch"):
    tu.tree_transpose(outer, inner, tree[:2])


# ------------------------------------------------------------------------------------------------
# Mismatches and errors

def test_unflatten_wrong_leaf_count_raises():
  treedef = tu.tree_structure((1, [2, 3]))
  assert treedef.unflatten(iter([4, 5, 6])) == (4, [5, 6])
  with pytest.raises(ValueError, match="Too few leaves"):
    treedef.unflatten([1, 2])
  with pytest.raises(ValueError, match="Too many leaves"):
    tu.tree_unflatten(treedef, [1, 2, 3, 4])


@pytest.mark.parametrize("first,other,fragment", [
    ((1, 2), (1, 2, 3), "Tuple arity mismatch"),
    ((1, 2), [1, 2], "Expected tuple"),
    ([1, 2], (1, 2), "Expected list"),
    ({"a": 1, "b": 2}, {"a": 1, "c": 2}, "Dict key mismatch"),
    ({"a": 1}, collections.OrderedDict(a=1), "Expected dict"),
    ((None, 1), (2, 1), "Expected None"),
    (Point(1, 2), Other(1, 2), "Named tuple type mismatch"),
    (Point(1, 2), (1, 2), "Expected named tuple"),
    (Box(1, 2, "t"), Box(1, 2, "u"), "Mismatch custom node data"),
    (Box(1, 2), Pair(1, 2), "Custom node type mismatch"),
    ([1, {"k": 2}], [1, {"k": 2, "j": 3}], "Dict key mismatch"),
])
def test_tree_map_structure_mismatch_raises_value_error(first, other, fragment):
  with pytest.raises(ValueError, match=fragment) as info:
    tu.tree_map(lambda *xs: xs, first, other)
  message = str(info.value)
  assert repr(tu.tree_structure(first)) in message
  assert repr(tu.tree_structure(other)) in message
  with pytest.raises(ValueError, match=fragment):
    tu.tree_structure(first).flatten_up_to(other)
  with pytest.raises(ValueError, match=fragment):
    tu.tree_map_with_path(lambda *xs: xs, first, other)


def test_tree_map_rest_matches_up_to_the_first_trees_leaves():
  # a leaf of the first tree lines up with a whole subtree of the others
  out = tu.tree_map(lambda a, b: (a, b), [1, 2], [(3, 4), {"k": None}])
  assert out == [(1, (3, 4)), (2, {"k": None})]
  assert tu.tree_structure([1, 2]).flatten_up_to([(3, 4), None]) == [(3, 4), None]
  assert tu.tree_map(lambda a, b, c: a + b + c, {"x": 1, "y": [2]}, {"x": 10, "y": [20]},
                     {"y": [200], "x": 100}) == {"x": 111, "y": [222]}
  # the other way round is a mismatch
  with pytest.raises(ValueError, match="Expected tuple"):
    tu.tree_map(lambda a, b: a, [(3, 4), 5], [1, 2])


# ------------------------------------------------------------------------------------------------
# Custom nodes

def test_register_pytree_node_round_trip_and_paths():
  tree = Box([1, 2], {"z": 3}, tag=("meta", 1))
  leaves, treedef = tu.tree_flatten(tree)
  assert leaves == [1, 2, 3]
  assert treedef.unflatten([4, 5, 6]) == Box([4, 5], {"z": 6}, tag=("meta", 1))
  assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(tree)] == \
      ["[<flat index 0>][0]", "[<flat index 0>][1]", "[<flat index 1>]['z']"]
  assert tu.tree_map(lambda x: x * 2, tree) == Box([2, 4], {"z": 6}, tag=("meta", 1))


def test_register_pytree_node_class_and_with_keys_and_dataclass():
  p = Pair(1, (2, 3), meta="m")
  leaves, treedef = tu.tree_flatten(p)
  assert leaves == [1, 2, 3] and treedef.unflatten([7, 8, 9]) == Pair(7, (8, 9), meta="m")
  assert treedef != tu.tree_structure(Pair(1, (2, 3), meta="n"))

  k = Keyed(1, [2])
  assert tu.tree_leaves(k) == [1, 2]
  assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(k)] == [".u", ".v[0]"]
  back = tu.tree_map(lambda x: -x, k)
  assert (back.u, back.v) == (-1, [-2])

  params = Params(w=[1, 2], b=3, name="layer")
  leaves, treedef = tu.tree_flatten(params)
  assert leaves == [1, 2, 3]
  assert treedef.unflatten([4, 5, 6]) == Params([4, 5], 6, "layer")
  assert treedef != tu.tree_structure(Params([1, 2], 3, "other"))
  assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(params)] == [".w[0]", ".w[1]", ".b"]

  @tu.register_static
  class Config:
    def __init__(self, n):
      self.n = n

    def __eq__(self, other):
      return type(other) is Config and other.n == self.n

    def __hash__(self):
      return hash(self.n)

  assert tu.tree_leaves([Config(1), 2]) == [2]
  assert tu.tree_structure(Config(1)) == tu.tree_structure(Config(1))
  assert tu.tree_structure(Config(1)) != tu.tree_structure(Config(2))
  assert tu.tree_map(lambda x: x, [Config(3)])[0].n == 3


def test_register_with_keys_class_and_explicit_dataclass_fields():
  @tu.register_pytree_with_keys_class
  class KC:
    def __init__(self, a, b):
      self.a, self.b = a, b

    def tree_flatten_with_keys(self):
      return ((DictKey("a"), self.a), (DictKey("b"), self.b)), None

    @classmethod
    def tree_unflatten(cls, aux, children):
      return cls(*children)

  assert [(tu.keystr(p), x) for p, x in tu.tree_leaves_with_path(KC(1, 2))] == \
      [("['a']", 1), ("['b']", 2)]
  assert tu.tree_leaves(KC(1, (2, 3))) == [1, 2, 3]

  @dataclasses.dataclass
  class D:
    x: object
    y: object
    k: int

  tu.register_dataclass(D, data_fields=["y", "x"], meta_fields=["k"])
  leaves, treedef = tu.tree_flatten(D(1, 2, 3))
  assert leaves == [2, 1]
  assert treedef.unflatten([5, 6]) == D(6, 5, 3)
  with pytest.raises(TypeError):
    tu.register_dataclass(type("E", (), {}), data_fields=["x"])


def test_duplicate_registration_raises_value_error():
  with pytest.raises(ValueError, match="Duplicate"):
    tu.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box(0, 0))
  with pytest.raises(ValueError, match="Duplicate"):
    tu.register_pytree_node_class(Pair)
  for builtin in (tuple, list, dict, type(None), collections.OrderedDict):
    with pytest.raises(ValueError, match="Duplicate"):
      tu.register_pytree_node(builtin, lambda x: ((), None), lambda a, c: None)


# ------------------------------------------------------------------------------------------------
# Treedefs as cache keys

def test_treedef_equality_and_hash_as_cache_key():
  cache = {}
  t1 = {"w": [1, 2], "b": (3, None)}
  t2 = {"b": ("x", None), "w": ["y", "z"]}
  cache[tu.tree_structure(t1)] = "hit"
  assert cache.get(tu.tree_structure(t2)) == "hit"
  for different in [{"w": [1, 2], "b": (3, 4)}, {"w": [1, 2], "c": (3, None)},
                    {"w": (1, 2), "b": (3, None)}, {"w": [1, 2, 3], "b": (3, None)},
                    [1, 2, 3], (1, 2, 3), Point(1, 2)]:
    assert tu.tree_structure(different) not in cache
  assert tu.tree_structure((1, 2)) != tu.tree_structure([1, 2])
  assert tu.tree_structure((1, 2)) != tu.tree_structure(Point(1, 2))
  assert tu.tree_structure(1) != tu.tree_structure(None)
  assert (tu.tree_structure(1) == "PyTreeDef(*)") is False


def test_custom_aux_data_compared_with_eq_even_if_unhashable():
  # two distinct but equal aux objects; lists are unhashable yet must be usable
  a = tu.tree_structure(Box(1, 2, tag=[1, "x"]))
  b = tu.tree_structure(Box(5, 6, tag=[1, "x"]))
  c = tu.tree_structure(Box(5, 6, tag=[2, "x"]))
  assert a == b and hash(a) == hash(b)
  assert a != c
  assert {a: 1}[b] == 1 and c not in {a: 1}

  class Meta:
    def __init__(self, v):
      self.v = v

    def __eq__(self, other):
      return isinstance(other, Meta) and self.v == other.v

    __hash__ = None

  assert tu.tree_structure(Box(1, 2, Meta(3))) == tu.tree_structure(Box(0, 0, Meta(3)))
  assert tu.tree_structure(Box(1, 2, Meta(3))) != tu.tree_structure(Box(0, 0, Meta(4)))
  # equal aux data of different hashability (frozenset == set) still hash equal
  d1 = tu.tree_structure(Box(1, 2, frozenset({1})))
  d2 = tu.tree_structure(Box(1, 2, {1}))
  assert d1 == d2 and hash(d1) == hash(d2)


def test_treedef_survives_pickle_and_deepcopy():
  import copy
  import pickle
  tree = (1, {"a": [2, None]}, Point(3, 4), collections.OrderedDict(z=5), Box(6, 7, "q"),
          Partial(_affine, 8))
  treedef = tu.tree_structure(tree)
  for other in (pickle.loads(pickle.dumps(treedef)), copy.deepcopy(treedef)):
    assert other == treedef and hash(other) == hash(treedef)
    rebuilt = other.unflatten(tu.tree_leaves(tree))
    assert rebuilt[:5] == tree[:5] and rebuilt[5](1) == 8


# ------------------------------------------------------------------------------------------------
# Key paths

def test_key_classes_repr_str_eq():
  assert repr(SequenceKey(0)) == "SequenceKey(idx=0)" and str(SequenceKey(0)) == "[0]"
  assert repr(DictKey("a")) == "DictKey(key='a')" and str(DictKey("a")) == "['a']"
  assert repr(GetAttrKey("x")) == "GetAttrKey(name='x')" and str(GetAttrKey("x")) == ".x"
  assert repr(FlattenedIndexKey(2)) == "FlattenedIndexKey(key=2)"
  assert str(FlattenedIndexKey(2)) == "[<flat index 2>]"
  assert SequenceKey(1) == SequenceKey(1) and hash(SequenceKey(1)) == hash(SequenceKey(1))
  assert SequenceKey(1) != FlattenedIndexKey(1)
  assert DictKey(1) != SequenceKey(1)
  match DictKey("q"):
    case DictKey(key=k):
      assert k == "q"


def test_flatten_with_path_and_keystr():
  tree = {"a": [10, (20, Point(30, 40))], "b": None, "c": collections.OrderedDict(z=50)}
  pairs, treedef = tu.tree_flatten_with_path(tree)
  assert treedef == tu.tree_structure(tree)
  assert [(tu.keystr(p), x) for p, x in pairs] == [
      ("['a'][0]", 10), ("['a'][1][0]", 20), ("['a'][1][1].x", 30), ("['a'][1][1].y", 40),
      ("['c']['z']", 50)]
  assert pairs[0][0] == (DictKey("a"), SequenceKey(0))
  assert tu.keystr(pairs[2][0], simple=True, separator="/") == "a/1/1/x"
  assert tu.keystr(()) == ""
  out = tu.tree_map_with_path(lambda p, x, y: (tu.keystr(p), x + y), {"a": 1, "b": [2]},
                              {"a": 10, "b": [20]})
  assert out == {"a": ("['a']", 11), "b": [("['b'][0]", 22)]}
  # is_leaf, optionally with the path
  assert tu.tree_leaves_with_path([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple)) == \
      [((SequenceKey(0),), (1, 2)), ((SequenceKey(1),), 3)]
  got = tu.tree_leaves_with_path({"keep": (1, 2), "open": (3, 4)},
                                 is_leaf=lambda p, x: p == (DictKey("keep"),),
                                 is_leaf_takes_path=True)
  assert got == [((DictKey("keep"),), (1, 2)), ((DictKey("open"), SequenceKey(0)), 3),
                 ((DictKey("open"), SequenceKey(1)), 4)]


# ------------------------------------------------------------------------------------------------
# Partial

def _affine(x, a, b=0):
  return a * x + b


def test_partial_is_a_pytree_with_func_as_aux_data():
  p = Partial(_affine, 2, b=3)
  assert isinstance(p, functools.partial)
  assert p(5) == 13
  leaves, treedef = tu.tree_flatten(p)
  assert leaves == [2, 3]
  q = treedef.unflatten([4, 1])
  assert isinstance(q, Partial) and q.func is _affine and q(5) == 21
  assert treedef == tu.tree_structure(Partial(_affine, 7, b=8))
  assert treedef != tu.tree_structure(Partial(max, 7, b=8))
  assert treedef != tu.tree_structure(Partial(_affine, 7))
  doubled = tu.tree_map(lambda v: v * 2, p)
  assert doubled(1) == 10
  assert tu.tree_leaves(Partial(_affine)) == []
  assert Partial(_affine)(1, 2, 3) == 5


def test_partial_of_a_functools_partial_keeps_inner_arguments_static():
  inner = functools.partial(_affine, b=100)
  p = Partial(inner, 3)
  assert p(2) == 106
  assert p.func is inner
  assert tu.tree_leaves(p) == [3]
  assert tu.tree_structure(p) == tu.tree_structure(Partial(inner, 4))
  assert tu.tree_structure(p) != tu.tree_structure(Partial(functools.partial(_affine, b=100), 4))
  assert tu.tree_map(lambda v: v + 1, p)(2) == 108


# ------------------------------------------------------------------------------------------------
# The jax.tree namespace

def test_tree_namespace_reexports():
  assert jtree.map is tu.tree_map and jtree.leaves is tu.tree_leaves
  assert jtree.structure is tu.tree_structure and jtree.flatten is tu.tree_flatten
  assert jtree.unflatten is tu.tree_unflatten and jtree.reduce is tu.tree_reduce
  assert jtree.all is tu.tree_all and jtree.transpose is tu.tree_transpose
  assert jtree.flatten_with_path is tu.tree_flatten_with_path
  assert jtree.map_with_path is tu.tree_map_with_path
  assert jtree.leaves_with_path is tu.tree_leaves_with_path
  assert jtree.map(lambda x, y: x * y, [1, (2,)], [3, (4,)]) == [3, (8,)]
  assert isinstance(jtree.structure([1]), PyTreeDef)


def test_bad_flatten_results_are_reported():
  def make(result):
    class Node:
      def __init__(self, a):
        self.a = a
    tu.register_pytree_node(Node, lambda n: result, lambda aux, ch: Node(*ch))
    return Node(1)
  with pytest.raises(ValueError, match=r"should return a \(children, aux_data\) tuple, got "
                     r"'hello'"):
    tu.tree_flatten(make("hello"))
  with pytest.raises(ValueError, match=r"tuple, got \(2, 3, 4\)"):
    tu.tree_leaves(make((2, 3, 4)))
  with pytest.raises(ValueError, match=r"where 'children' is iterable, got \(7, 7\)"):
    tu.tree_flatten(make((7, 7)))
  leaves, tree = tu.tree_flatten(make(([1, 2], None)))
  assert leaves == [1, 2]


def test_register_dataclass_field_checks():
  @dataclasses.dataclass
  class Foo:
    x: int
    y: int
    z: float = dataclasses.field(init=False)

  with pytest.raises(ValueError, match="Missing fields: {'y'}"):
    tu.register_dataclass(Foo, data_fields=["x"], meta_fields=[])
  with pytest.raises(ValueError, match="Unexpected fields: {'w'}"):
    tu.register_dataclass(Foo, data_fields=["x"], meta_fields=["y", "w"])
  with pytest.raises(ValueError, match="must not overlap. Overlapping fields: {'x'}"):
    tu.register_dataclass(Foo, data_fields=["x", "y"], meta_fields=["x"])
  tu.register_dataclass(Foo, data_fields=["x"], meta_fields=["y"])   # z: not in init
  f = Foo(1, 2)
  assert tu.tree_leaves(f) == [1]
  assert tu.tree_map(lambda v: v * 10, f).x == 10

  class Bar:
    pass
  with pytest.raises(TypeError, match="required when nodetype is not a dataclass"):
    tu.register_dataclass(Bar)
  with pytest.raises(TypeError, match="must both be specified when either is specified"):
    tu.register_dataclass(Bar, data_fields=["x"])
