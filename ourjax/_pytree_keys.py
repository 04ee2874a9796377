"""Key path entries of pytrees (``SequenceKey``, ``DictKey``, ``GetAttrKey``,
``FlattenedIndexKey``) and ``keystr``, as ``jax.tree_util`` has them; ``ourjax._pytree``
re-exports them."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceKey:
  """Path entry for the ``idx``-th child of a tuple or list; prints as ``[idx]``."""
  idx: int

  def __str__(self):
    return f"[{self.idx!r}]"

  def __hash__(self):   # the kind of entry counts: SequenceKey(1) and FlattenedIndexKey(1) differ
    return hash(('SequenceKey', self.idx))


@dataclasses.dataclass(frozen=True, slots=True)
class DictKey:
  """Path entry for the child of a dict under ``key``; prints as ``['key']``."""
  key: Any

  def __str__(self):
    return f"[{self.key!r}]"

  def __hash__(self):   # the kind of entry counts: SequenceKey(1) and FlattenedIndexKey(1) differ
    return hash(('DictKey', self.key))


@dataclasses.dataclass(frozen=True, slots=True)
class GetAttrKey:
  """Path entry for an attribute (namedtuple field, dataclass field); prints as ``.name``."""
  name: str

  def __str__(self):
    return f".{self.name}"

  def __hash__(self):   # the kind of entry counts: SequenceKey(1) and FlattenedIndexKey(1) differ
    return hash(('GetAttrKey', self.name))


@dataclasses.dataclass(frozen=True, slots=True)
class FlattenedIndexKey:
  """Path entry for the ``key``-th child of a custom node registered without keys."""
  key: int

  def __str__(self):
    return f"[<flat index {self.key}>]"

  def __hash__(self):   # the kind of entry counts: SequenceKey(1) and FlattenedIndexKey(1) differ
    return hash(('FlattenedIndexKey', self.key))


KeyEntry = Any
KeyPath = tuple


def _simple_str(entry) -> str:
  if isinstance(entry, SequenceKey):
    return str(entry.idx)
  if isinstance(entry, DictKey):
    return str(entry.key)
  if isinstance(entry, GetAttrKey):
    return entry.name
  if isinstance(entry, FlattenedIndexKey):
    return str(entry.key)
  return str(entry)


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
  """Renders a key path: ``keystr((DictKey('a'), SequenceKey(0)))`` is ``"['a'][0]"``.

  With ``simple=True`` each entry is printed bare (``a``, ``0``) and the entries are joined
  with ``separator``.
  """
  to_str = _simple_str if simple else str
  return separator.join(to_str(k) for k in keys)
