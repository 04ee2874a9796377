"""``vmap``: its argument checks (in_axes/out_axes specs against the arguments' pytrees, the
batch size, and the errors JAX gives for them) and the batched call.  ``api.vmap`` is this."""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np

from ourjax import core
from ourjax import _pytree as tree_util
from ourjax.core import ShapedArray, get_aval
from ourjax.interpreters import batching
from ourjax._pytree import tree_flatten, tree_structure, tree_unflatten
from ourjax.api import _fun_name


def device_put(x):
  from ourjax._device_api import device_put as put
  return put(x)



def _is_axis_spec_leaf(x) -> bool:
  return x is None or type(x) is int


def _describe_tree_node(x) -> str:
  if isinstance(x, _AxisProxy) and x.aval is None:
    return "a leaf"
  if x is None:
    return "None"
  if isinstance(x, (tuple, list)):
    return f"a {type(x).__name__} of length {len(x)}"
  if isinstance(x, dict):
    return f"a dict with keys {sorted(x, key=repr)!r}"
  aval = getattr(x, "aval", None)
  if isinstance(aval, ShapedArray):
    return f"an array of type {aval.str_short()}"
  try:
    return f"an array of type {get_aval(x).str_short()}"
  except TypeError:
    return f"a value of type {type(x).__name__}"


def _expand_axis_spec(spec, value, path: str, out: list) -> str | None:
  """Append one axis per leaf of ``value`` (the spec's int/None leaves broadcast over the
  subtrees they stand for).  Returns where and how ``spec`` fails to be a tree prefix of
  ``value``, or None."""
  if _is_axis_spec_leaf(spec):
    out.extend([spec] * tree_structure(value).num_leaves)
    return None
  level = tree_structure(spec, is_leaf=lambda y: y is not spec)
  try:
    value_children = level.flatten_up_to(value)
  except (ValueError, TypeError):
    return (f"at {path}, the specification is {_describe_tree_node(spec)} but the value is "
            f"{_describe_tree_node(value)}")
  spec_children = tree_util.tree_flatten_with_path(spec, is_leaf=lambda y: y is not spec)[0]
  for (key, s), v in zip(spec_children, value_children):
    err = _expand_axis_spec(s, v, path + tree_util.keystr(key), out)
    if err:
      return err
  return None


def _flatten_axes(what: str, tree, axis_tree, values=None):
  """Broadcast the prefix tree ``axis_tree`` (int or None leaves; None = unmapped) over the
  leaves of the pytree ``values`` whose structure is ``tree``; a flat list of axes."""
  if _is_axis_spec_leaf(axis_tree):
    return [axis_tree] * tree.num_leaves
  if values is None:
    values = tree_unflatten(tree, [_AxisProxy()] * tree.num_leaves)
  out: list = []
  err = _expand_axis_spec(axis_tree, values, what, out)
  if err:
    from ourjax._device_api import _prefix_mismatches
    found = _prefix_mismatches(axis_tree, values, "", [], what, _is_axis_spec_leaf)
    details = "".join(f"\n  {m}" for m in found)
    # JAX's message (the mismatch details as tree_util's prefix errors give them), then ours
    raise ValueError(f"{what} specification must be a tree prefix of the corresponding value; "
                     f"\n  Mismatch details ({len(found)} found):{details}\n"
                     f"got specification {axis_tree} for value tree {tree}. (The mismatch: "
                     f"{err}.)")
  assert len(out) == tree.num_leaves
  return out


class _AxisProxy:
  """A leaf standing for an array whose type is known (or not) while matching axis specs."""
  __slots__ = ("aval",)

  def __init__(self, aval=None):
    self.aval = aval

  def __repr__(self):
    return "*" if self.aval is None else self.aval.str_short()


def _check_axis_spec_leaves(what: str, spec, transform: str = "vmap"):
  leaves = tree_util.tree_leaves(spec, is_leaf=lambda x: x is None)
  if not all(_is_axis_spec_leaf(l) for l in leaves):
    raise TypeError(f"{transform} {what} must be an int, None, or (nested) container with those types "
                    f"as leaves, but got {spec}.")


def _vmap_arg_name(fun, args, kwargs):
  """``name(key_path)``: how the inconsistent-sizes error names an argument's leaf."""
  try:
    params = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
  except (TypeError, ValueError):
    params = None

  def name(path):
    if params is None or path[0].idx >= len(params):
      return f"args{tree_util.keystr(path)}"
    return f"argument {params[path[0].idx]}{tree_util.keystr(path[1:])}"
  return name


def _vmap_axis_size(fun, args, kwargs, leaves, axes, axis_size):
  """The batch size: ``axis_size`` or the common size of the mapped axes (JAX's checks and
  messages)."""
  if not leaves and axis_size is None:
    raise ValueError("vmap wrapped function must be passed at least one argument containing an "
                     f"array or axis_size must be specified, got empty *args={args} and "
                     f"**kwargs={kwargs}")
  sizes = []
  for x, ax in zip(leaves, axes):
    if ax is None:
      sizes.append(None)
      continue
    try:
      aval = get_aval(x)
    except TypeError:
      raise TypeError(f"vmap was requested to map an argument of type {type(x).__name__} along "
                      f"axis {ax}, but only arrays can be mapped (pass None in in_axes for "
                      f"arguments that are not arrays): {x!r}") from None
    if not -aval.ndim <= ax < aval.ndim:
      raise ValueError(f"vmap was requested to map its argument along axis {ax}, which implies "
                       f"that its rank should be at least {ax + 1 if ax >= 0 else -ax}, but is "
                       f"only {aval.ndim} (its shape is {aval.shape})")
    sizes.append(aval.shape[ax])
  distinct = {s for s in sizes if s is not None}
  if axis_size is not None:
    distinct.add(axis_size)
  if len(distinct) == 1:
    return distinct.pop()
  if not distinct:
    raise ValueError("vmap must have at least one non-None value in in_axes or axis_size must "
                     "be specified")
  # Name every mapped argument: "most axes (2 of them) had size 3, e.g. axis 0 of argument x".
  arg_name = _vmap_arg_name(fun, args, kwargs)
  descs = [f"{arg_name(p)} of type {_describe_leaf_type(x)}"
           for p, x in tree_util.tree_flatten_with_path(args)[0]]
  descs += [f"kwargs{tree_util.keystr(p)} of type {_describe_leaf_type(x)}"
            for p, x in tree_util.tree_flatten_with_path(kwargs)[0]]
  counts: dict = {}
  for s in sizes:
    if s is not None:
      counts[s] = counts.get(s, 0) + 1
  order = sorted(counts, key=lambda s: -counts[s])     # stable: ties keep first-seen order
  lines = []
  if axis_size is not None:
    lines.append(f"  * the `axis_size` argument was {axis_size};")
  for k, s in enumerate(order):
    i = sizes.index(s)
    ct = counts[s]
    if ct == 1:
      lines.append(f"  * one axis had size {s}: axis {axes[i]} of {descs[i]};")
    else:
      lead = "most" if k == 0 else "some"
      lines.append(f"  * {lead} axes ({ct} of them) had size {s}, e.g. axis {axes[i]} of "
                   f"{descs[i]};")
  raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n"
                   + "\n".join(lines)[:-1])


def _describe_leaf_type(x) -> str:
  try:
    return get_aval(x).str_short(short_dtypes=False)
  except TypeError:
    return "unknown"


def vmap(fun: Callable, in_axes=0, out_axes=0, axis_name=None, axis_size=None,
         spmd_axis_name=None):
  """Vectorize ``fun`` over an axis of its arguments: ``vmap(f)(xs)`` computes
  ``stack([f(x) for x in xs])`` as one computation on the whole batch.

  ``in_axes`` says, per positional argument, which axis is mapped: an int (negative counts from
  the end), None (the argument is the same for every batch element), or a pytree of those that
  is a prefix of the arguments (a tuple with one entry per positional argument).  Keyword
  arguments are always mapped over their axis 0.  ``out_axes`` places the batch axis in each
  output (a prefix pytree of the output; None for outputs that do not depend on the batch).
  ``axis_size`` gives the batch size when no argument is mapped.  ``axis_name`` and
  ``spmd_axis_name`` are accepted for compatibility (ourjax has no collectives)."""
  if not callable(fun):
    raise TypeError(f"Expected a callable value, got {fun!r}")
  if isinstance(in_axes, list):
    # a list of per-argument axes means the same as the tuple (as in JAX)
    in_axes = tuple(in_axes)
  if not (in_axes is None or type(in_axes) in (int, tuple)):
    raise TypeError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding to "
                    f"the positional arguments passed to the function, but got {in_axes}.")
  _check_axis_spec_leaves("in_axes", in_axes)
  _check_axis_spec_leaves("out_axes", out_axes)
  if axis_size is not None:
    axis_size = core.concrete_or_error(int, axis_size, "The axis_size argument of vmap.")
  if spmd_axis_name is not None and not isinstance(spmd_axis_name, tuple):
    spmd_axis_name = (spmd_axis_name,)
  fname = _fun_name(fun)

  def vmapped(*args, **kwargs):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
      msg = (f"vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
             f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}"
             f", len(args)={len(args)}")
      if kwargs:
        msg += (f". Note that the function was called with keyword arguments {list(kwargs)}, "
                "which the entries of a tuple in_axes never correspond to: keyword arguments "
                "are always mapped along their axis 0")
      raise ValueError(msg)
    arg_leaves, arg_tree = tree_flatten(args)
    kw_leaves, kw_tree = tree_flatten(kwargs)
    axes = _flatten_axes("vmap in_axes", arg_tree, in_axes, args) + [0] * len(kw_leaves)
    leaves = arg_leaves + kw_leaves
    if any(ax is not None and ax < 0 for ax in axes):
      # a negative axis of a typed key array counts from the end of its shape, before its key
      # data's trailing dimensions
      axes = [ax if ax is None or ax >= 0 else ax - t
              for ax, t in zip(axes, _key_data_dims((args, kwargs)))]
    size = _vmap_axis_size(fun, args, kwargs, leaves, axes, axis_size)
    in_dims = [None if ax is None else ax % get_aval(x).ndim for x, ax in zip(leaves, axes)]
    n_args = len(arg_leaves)
    out_tree_cell = []

    def flat(*xs):
      a = tree_unflatten(arg_tree, xs[:n_args])
      k = tree_unflatten(kw_tree, xs[n_args:])
      out_leaves, out_tree = tree_flatten(fun(*a, **k))
      out_tree_cell.append(out_tree)
      return out_leaves

    axis = batching.AxisData(axis_name, size, spmd_axis_name)
    vals, dims = batching.trace_batched(flat, in_dims, axis, leaves, name=f"vmap({fname})")
    out_tree = out_tree_cell[-1]
    proxies = [_AxisProxy(get_aval(v) if d is None else
                          get_aval(v).update(shape=batching.shape_without_bdim(v, d)))
               for v, d in zip(vals, dims)]
    out_dims = _flatten_axes("vmap out_axes", out_tree, out_axes,
                             tree_unflatten(out_tree, proxies))
    spec_paths = _leaf_spec_paths(out_tree, out_axes)
    if any(od is not None and od < 0 for od in out_dims):
      trail = _key_data_dims(tree_unflatten(out_tree, proxies))
      out_dims = [od if od is None or od >= 0 or not t else od % (p.aval.ndim + 1 - t)
                  for od, t, p in zip(out_dims, trail, proxies)]
    outs = [batching.matchaxis(size, d, od, v, axis_name=axis_name, where=p)
            for v, d, od, p in zip(vals, dims, out_dims, spec_paths)]
    # an argument returned as it is comes back as an Array (canonical dtype), as from jit
    outs = [device_put(o) if isinstance(o, (np.ndarray, np.generic)) else o for o in outs]
    return tree_unflatten(out_tree, outs)

  functools.update_wrapper(vmapped, fun)
  doc = (f"Vectorized version of {fname}. Takes similar arguments as {fname} but with "
         f"additional array axes over which {fname} is mapped.")
  if getattr(fun, "__doc__", None):
    doc += "\n\nOriginal documentation:\n\n" + fun.__doc__
  vmapped.__doc__ = doc
  return vmapped


def _key_data_dims(tree) -> list[int]:
  """Per leaf of ``tree`` (as transformations flatten it): the number of trailing key-data
  dimensions (0 for an ordinary array; the key shape's rank for a typed key array's data)."""
  from ourjax._keys import PRNGKeyArray
  out = []
  for x in tree_util.tree_leaves(tree, is_leaf=lambda y: type(y) is PRNGKeyArray):
    if type(x) is PRNGKeyArray:
      out.extend([len(x._impl.key_shape)] * len(tree_util.tree_leaves(x)))
    else:
      out.append(0)
  return out


def _leaf_spec_paths(tree, spec) -> list[str]:
  """For each leaf of ``tree``, the key path (``"[1]['a']"``) of the leaf of the prefix tree
  ``spec`` that covers it."""
  if _is_axis_spec_leaf(spec):
    return [""] * tree.num_leaves
  out: list = []
  values = tree_unflatten(tree, [_AxisProxy()] * tree.num_leaves)
  pairs = tree_util.tree_flatten_with_path(spec, is_leaf=lambda x: x is None)[0]
  paths = [tree_util.keystr(p) for p, _ in pairs]
  # replace each spec leaf by its index, expand over the value tree, then map back to paths
  index_spec = tree_unflatten(tree_structure(spec, is_leaf=lambda x: x is None),
                              list(range(len(pairs))))
  _expand_axis_spec(index_spec, values, "", out)
  return [paths[i] for i in out]

