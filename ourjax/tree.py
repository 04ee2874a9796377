"""The ``jax.tree`` namespace: short names for the functions of ``ourjax.tree_util``."""
from ourjax.tree_util import (
    tree_all as all,
    tree_flatten as flatten,
    tree_flatten_with_path as flatten_with_path,
    tree_leaves as leaves,
    tree_leaves_with_path as leaves_with_path,
    tree_map as map,
    tree_map_with_path as map_with_path,
    tree_reduce as reduce,
    tree_structure as structure,
    tree_transpose as transpose,
    tree_unflatten as unflatten,
)

__all__ = ["all", "flatten", "flatten_with_path", "leaves", "leaves_with_path", "map",
           "map_with_path", "reduce", "structure", "transpose", "unflatten"]
from ourjax.tree_util import (  # noqa: E402
    tree_broadcast as broadcast,
    tree_reduce_associative as reduce_associative,
)

__all__ += ["broadcast", "reduce_associative"]


def static(**kwargs):
  """A ``dataclasses.field`` marked static for ``tree_util.register_dataclass``: its
  ``metadata`` gets ``static=True`` (unless the given metadata says otherwise), as JAX's."""
  import dataclasses
  metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
  return dataclasses.field(metadata=metadata, **kwargs)


__all__ += ["static"]
