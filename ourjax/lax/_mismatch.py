"""Explaining how two pytree structures, or two lists of types, differ, in the words of JAX's
control-flow errors (a loop's carry input against its output, one branch's outputs against
another's)."""
from __future__ import annotations

from ourjax._pytree import DictKey, GetAttrKey, SequenceKey, FlattenedIndexKey, keystr


def _describe(node_data):
  """What a node is, for 'X is a <...>'."""
  return "a pytree leaf" if node_data is None else f"a {node_data[0]}"


def _child_keys(node_data, n):
  typ, aux = node_data
  if typ in (tuple, list):
    return [SequenceKey(i) for i in range(n)]
  if typ is dict:
    return [DictKey(k) for k in aux]
  fields = getattr(typ, "_fields", None)
  if fields is not None and len(fields) == n:
    return [GetAttrKey(f) for f in fields]
  return [FlattenedIndexKey(i) for i in range(n)]


def _plural(n):
  return f"{n} child" if n == 1 else f"{n} children"


def structure_diffs(a, b, path=()):
  """``[(key path, description of a, description of b, reason)]``, one per outermost place
  where the structures ``a`` and ``b`` (PyTreeDefs) differ."""
  if a == b:
    return []
  da, db = a.node_data(), b.node_data()
  ca, cb = a.children(), b.children()
  if da is None or db is None or da[0] is not db[0]:
    return [(path, _describe(da), _describe(db), "their Python types differ")]
  typ, aux_a = da
  aux_b = db[1]
  if typ in (tuple, list) and len(ca) != len(cb):
    return [(path, f"a {typ.__name__} of length {len(ca)}",
             f"a {typ.__name__} of length {len(cb)}", "the lengths do not match")]
  if len(ca) != len(cb):
    why = "the numbers of children do not match"
    if typ is dict:
      why += f", with the symmetric difference of key sets: {set(aux_a) ^ set(aux_b)}"
    return [(path, f"a {typ} with {_plural(len(ca))}", f"a {typ} with {_plural(len(cb))}", why)]
  if typ not in (tuple, list) and aux_a != aux_b:
    meta = (lambda x: tuple(x)) if typ is dict else (lambda x: x)
    return [(path, f"a {typ} with pytree metadata {meta(aux_a)!r}",
             f"a {typ} with pytree metadata {meta(aux_b)!r}",
             "the pytree node metadata does not match")]
  out = []
  for key, x, y in zip(_child_keys(da, len(ca)), ca, cb):
    out.extend(structure_diffs(x, y, path + (key,)))
  return out


def type_reason(a, b):
  """Why two avals differ: 'the dtypes do not match', 'the shapes do not match', or both."""
  why = []
  if a.dtype != b.dtype:
    why.append("the dtypes do not match")
  if a.shape != b.shape:
    why.append("the shapes do not match")
  if not why:
    why.append("the weak types do not match")
  return ", and ".join(why)


def join(items, capitalize=True):
  """One difference as a sentence (capitalised unless not ``capitalize``); several as a
  bulleted list, as JAX lays them out."""
  if len(items) == 1:
    s = items[0]
    return (s[0].upper() + s[1:] if capitalize else s) + "."
  return "\n".join(f"  * {s}" + (";" if i < len(items) - 1 else ".")
                   for i, s in enumerate(items))


def aval_str(a):
  return a.str_short(short_dtypes=False)


def path_str(path):
  return keystr(path)


def fun_str(f):
  """``name at file:line`` of a function, as JAX's errors name branches."""
  import inspect
  name = getattr(f, "__name__", None) or type(f).__name__
  code = getattr(inspect.unwrap(f), "__code__", None) if callable(f) else None
  return f"{name} at {code.co_filename}:{code.co_firstlineno}" if code is not None else name


def branch_mismatch(kind, names, funs, tree_a, avals_a, tree_b, avals_b):
  """The TypeError for branches ``names`` (e.g. 'true_fun', 'false_fun') of ``kind`` ('cond',
  'switch') whose outputs differ in structure or types, or None when they agree."""
  from ourjax import core
  from ourjax._pytree import tree_flatten_with_path, tree_unflatten
  a, b = names
  header = f"{a} is {fun_str(funs[0])}\n{b} is {fun_str(funs[1])}"
  if tree_a != tree_b:
    items = []
    for p, da, db, why in structure_diffs(tree_a, tree_b):
      at = f" at path {path_str(p)}" if p else ""
      items.append(f"{a} output{at} is {da} but {b} output{at} is {db}, so {why}")
    return TypeError(f"{kind} branch outputs must have the same pytree structure, but they "
                     f"differ:\n\n{header}\n\n{join(items, capitalize=False)}\n\nRevise {a} "
                     f"and/or {b} so that they have the same pytree structure.")
  paths = [p for p, _ in tree_flatten_with_path(tree_unflatten(tree_a, avals_a))[0]]
  items = []
  for p, x, y in zip(paths, avals_a, avals_b):
    if not core.typematch(x, y):
      at = f" at path {path_str(p)}" if p else ""
      items.append(f"the output of {a}{at} has type {aval_str(x)} but the corresponding output "
                   f"of {b} has type {aval_str(y)}, so {type_reason(x, y)}")
  if not items:
    return None
  return TypeError(f"{kind} branches must have equal output types but they differ.\n\n"
                   f"{header}\n\n{join(items)}\n\nRevise {a} and/or {b} so that all output "
                   "types match.")
