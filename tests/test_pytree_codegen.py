"""``_pytree_codegen``: generated flatten/unflatten of one structure against ``tree_flatten``
and ``tree_unflatten`` (the reference), on random trees of tuples, lists, dicts and None."""
import collections

from hypothesis import given, settings, strategies as st

from ourjax import _pytree_codegen as cg
from ourjax._pytree import tree_flatten, tree_unflatten

leaves = st.integers(0, 9)
trees = st.recursive(
    leaves | st.none(),
    lambda c: (st.lists(c, max_size=3) | st.lists(c, max_size=3).map(tuple)
               | st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), c, max_size=3)),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(trees, trees)
def test_generated_code_matches_tree_flatten_and_unflatten(t, other):
  want, td = tree_flatten(t)
  flat, build = cg.leaves_of(td), cg.builder(td)
  assert flat(t) == want
  rebuilt = build(want)
  assert rebuilt == tree_unflatten(td, want)
  assert [type(x) for x in tree_flatten(rebuilt)[0]] == [type(x) for x in want]
  # another tree: the same leaves when its nodes are td's (containers at leaf positions are
  # the caller's to reject), else None
  got = flat(other)
  o_leaves, o_td = tree_flatten(other)
  if o_td == td:
    assert got == o_leaves
  elif got is not None:
    assert any(type(x) in (list, tuple, dict) or x is None for x in got)
    assert tree_flatten(got)[0] == o_leaves


def test_other_node_types_and_deep_trees_have_no_generated_code():
  NT = collections.namedtuple("NT", "a b")
  assert cg.leaves_of(tree_flatten(NT(1, 2))[1]) is None
  assert cg.builder(tree_flatten([NT(1, 2)])[1]) is None
  deep = 1
  for _ in range(cg.MAX_DEPTH + 2):
    deep = [deep]
  td = tree_flatten(deep)[1]
  assert cg.leaves_of(td) is None and cg.builder(td) is None
