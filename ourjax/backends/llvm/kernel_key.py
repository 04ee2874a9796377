"""A kernel's key before its IR is emitted: two kernels of equal keys emit the same function.

``dedupe.function_key`` recognises identical kernels from their LLVM IR text, so every kernel
is emitted (in Python) and printed before its duplicates are found; in a transformer step about
two in five kernels are duplicates (the layers, a forward op and its copy in the backward pass).
``kernel_key(kernel, memo)`` keys a planned kernel by what its emission reads, so the CPU
backend emits each key once and calls that function for every kernel of the key.

The key is built from the kernel object itself, generically: its class and every attribute
(``vars``) except its name and labels (``_LABELS``), canonicalised:

* buffers (``Buf``) by their position among the kernel's parameters (``kernel.buffers``), whose
  element types, dims, byte sizes, pointer kinds (``scratch`` or not) and ``donated`` flags
  (an output that may be a donated parameter's buffer: the tiled transpose refuses it) head
  the key: the
  function reads buffers only through its pointer parameters; a buffer the kernel holds but
  takes no pointer to (a dot's B operand where a packed copy is read instead) by those four
  alone;
* HLO instructions by a numbering in the order they are first met, each with its opcode, shape,
  attributes and operands: the key holds the graph (which value feeds which, shared values
  shared).  The walk stops at the kernel's leaves (``leafmap``: values read from buffers or
  scalars; for a kernel without one, the operands of the instructions it holds), whose values
  the kernel reads from its buffers: a leaf is keyed by its shape (and a constant by its
  value), not by its opcode, operands or other attributes (so the same fused computation over
  different producers, or over different elements of one producer's tuple, is one kernel);
* called computations (reducers, comparators) by their own numbered graphs, parameters by
  position;
* scalars tagged by type (``1``, ``1.0`` and ``True`` differ; floats by their bits, so ``-0.0``
  and each NaN payload too), arrays by dtype, shape and bytes, containers in order.

Anything else in a kernel (an object of a class not in ``_OBJECTS``) makes the kernel
unkeyed (``None``): it is emitted and keyed by its IR text as before, so a new kind of field
can cost merges but never merge two different kernels.  A walk past ``MAX_NODES`` instructions
gives up the same way.

What the key leaves out, emission must not read: of a buffer, anything but its element type,
dims, byte size, whether it is scratch and whether it is donated (not its name, place or constant value); of a leaf,
anything but its shape (and a constant's value), nor anything past it; of the kernel, its
labels.  A kernel whose instructions reach past its leaf map to values it never reads says
where to stop (``key_leaves()``: an in-place update's operand).  ``CHECK`` (``OURJAX_CHECK_KERNEL_KEYS=1``; the tests set it) emits every
kernel anyway and raises if two of one key differ in IR text.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from ourjax.lowering import hlo

__all__ = ["kernel_key", "kernel_head", "CHECK", "MAX_NODES"]

#: Emit every kernel even when its key was met before, and raise ``AssertionError`` if its IR
#: text differs from that of the first kernel of the key (a key that merges different kernels).
CHECK = os.environ.get("OURJAX_CHECK_KERNEL_KEYS", "") not in ("", "0")

#: Most instructions a kernel's key walks (beyond: no key, the kernel is emitted).
MAX_NODES = 5000


class _Unkeyable(Exception):
  pass


#: Scalars by exact type, tagged (``1``, ``1.0`` and ``True`` are equal in Python, not here;
#: floats by their bits).
_SCALARS = {
    type(None): lambda v: v, str: lambda v: v, bool: lambda v: ("b", v), int: lambda v: ("i", v),
    float: lambda v: ("f", struct.pack("<d", v)),
    complex: lambda v: ("c", struct.pack("<dd", v.real, v.imag)),
}

_Buf = None        # kernels.Buf (imported on first use)
_OBJECTS = ()      # other classes whose instances are keyed by their attributes


def _setup():
  global _Buf, _OBJECTS
  from ourjax.backends.llvm.dots import DotSpec
  from ourjax.backends.llvm.gemm import Blocking
  from ourjax.backends.llvm.kernels import Buf
  _Buf, _OBJECTS = Buf, (DotSpec, Blocking)


class _Walk:
  """Canonical form of one kernel (or one computation: ``leaves`` None, ``params`` its
  parameters' positions)."""

  def __init__(self, buffers, leaves, memo, params=None):
    self.bufs = {id(b): n for n, b in enumerate(buffers)}
    self.leaves = leaves
    self.params = params or {}
    self.memo = memo
    self.ids = {}        # id(instruction) -> number
    self.todo = []       # instructions numbered, not yet defined
    self.defs = []

  def ref(self, instr):
    n = self.ids.get(id(instr))
    if n is None:
      n = self.ids[id(instr)] = len(self.ids)
      if n >= MAX_NODES:
        raise _Unkeyable
      self.todo.append(instr)
    return ("I", n)

  def finish(self):
    """The definitions of every instruction met, in the order of their numbers."""
    k = 0
    while k < len(self.todo):            # (defining one may number more)
      self.defs.append(self.define(self.todo[k]))
      k += 1
    return tuple(self.defs)

  def define(self, i):
    if i in self.params:
      return ("param", self.params[i], self.shape(i.shape))
    if self.leaves is not None and i in self.leaves:
      if i.opcode == "constant":
        return ("leaf-constant", self.shape(i.shape), self.value(i.attrs["value"]))
      return ("leaf", self.shape(i.shape))
    return (i.opcode, self.shape(i.shape), self.value(i.attrs),
            tuple(self.ref(o) for o in i.operands))

  def shape(self, s):
    if s.tuple_shapes is not None:
      return ("T",) + tuple(self.shape(x) for x in s.tuple_shapes)
    return (s.dtype.str, s.dims)

  def value(self, v):
    t = type(v)
    f = _SCALARS.get(t)
    if f is not None:
      return f(v)
    if t is tuple or t is list:
      return (t.__name__,) + tuple([self.value(x) for x in v])
    if t is _Buf:
      n = self.bufs.get(id(v))
      if n is None:
        # (a buffer the kernel holds but takes no pointer to, a dot's B operand that a packed
        # copy replaces: emission reaches buffers only through its pointer parameters, so it
        # can read no more of this one than what is keyed here)
        return ("b",) + _buf_meta(v)
      return ("B", n)
    if t is hlo.Instruction:
      return self.ref(v)
    if t is dict:
      return ("d",) + tuple([(self.value(k), self.value(x)) for k, x in v.items()])
    if t is hlo.Shape:
      return self.shape(v)
    if t is hlo.Computation:
      return self.computation(v)
    if isinstance(v, np.ndarray):
      return ("a", v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes())
    if isinstance(v, np.generic):
      return ("g", v.dtype.str, v.tobytes())
    if isinstance(v, np.dtype):
      return ("dt", v.str)
    if t is set or t is frozenset:
      return ("s",) + tuple(sorted((self.value(x) for x in v), key=repr))
    if t in _OBJECTS:
      return ("O", t.__qualname__, self.value(dict(vars(v))))
    raise _Unkeyable

  def computation(self, comp):
    key = self.memo.get(id(comp))
    if key is None:
      w = _Walk((), None, self.memo, {p: n for n, p in enumerate(comp.parameters)})
      params = tuple(w.ref(p) for p in comp.parameters)
      root = w.ref(comp.root)
      key = self.memo[id(comp)] = ("C", params, root, w.finish())
    return key


#: Attributes of a kernel that its emission does not read: its function's name and the labels
#: of the instructions it comes from (``kernel_info``).
_LABELS = frozenset({"name", "hlo_group", "hlo_source"})


def _leaves(kernel):
  """Where the walk of ``kernel``'s instructions stops: ``kernel.key_leaves()`` where it has
  one, its leaf map's instructions, or (a kernel without one) the operands of the
  instructions it holds."""
  own = getattr(kernel, "key_leaves", None)
  if own is not None:
    return set(own())
  lm = getattr(kernel, "leafmap", None)
  if isinstance(lm, dict):
    return lm
  out = set()
  stack = list(vars(kernel).values())
  while stack:
    v = stack.pop()
    if isinstance(v, hlo.Instruction):
      out.update(v.operands)
    elif isinstance(v, (list, tuple)):
      stack.extend(v)
    elif isinstance(v, dict):
      stack.extend(v.keys())
      stack.extend(v.values())
  return out


def kernel_head(kernel):
  """The start of ``kernel``'s key, cheap to compute: its class and its buffers' types, dims,
  sizes and kinds (None: the kernel has no key).  Kernels of different heads have different
  keys, so a kernel whose head no other kernel of its program shares needs no key."""
  if _Buf is None:
    _setup()
  bufs = kernel.buffers
  if any(type(b) is not _Buf for b in bufs):
    return None
  return (type(kernel).__module__, type(kernel).__qualname__, tuple([_buf_meta(b) for b in bufs]))


def _buf_meta(b) -> tuple:
  """What emission may read of a buffer (see the module docstring)."""
  return (b.dtype.str, b.dims, b.nbytes, b.kind == "scratch", b.donated)


def kernel_key(kernel, memo: dict | None = None):
  """The key of planned ``kernel`` (see the module docstring), or None when it has none;
  ``memo``: one dict per program (computations' keys by ``id``: the program's computations
  live while it is compiled)."""
  memo = {} if memo is None else memo
  head = kernel_head(kernel)
  if head is None:
    return None
  try:
    w = _Walk(kernel.buffers, _leaves(kernel), memo)
    fields = tuple((k, w.value(v)) for k, v in vars(kernel).items() if k not in _LABELS)
    return head + (fields, w.finish())
  except (_Unkeyable, RecursionError):
    return None
