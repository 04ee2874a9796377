"""The fused epilogue of a GPU dot: the elementwise consumer of a dot that runs inside the dot's
kernel instead of as a kernel of its own reading C.  Planning: ``fuse_dot_epilogues`` turns a
planned dot and its one elementwise reader into a ``FusedDot`` carrying an ``Epilogue`` (the
consumer's outputs and leaves; ``_gpu_dot_ok`` says which dots run as matrix kernels).
Emission: the dot kernels (``dots.py``, ``wgmma.py``) store each element of C through
``dot_writer`` (into C, or through the epilogue, evaluated by the shared emitter with the dot's
element handed in), ``dot_evaluator`` and ``single_result`` give the one value an epilogue
makes of an element, and ``_dot_buffers`` a dot kernel's reads and writes.  ``dots`` imports
these names back (``dots.Epilogue``, ``dots.dot_writer`` ... still work); this module holds no
settings."""
from __future__ import annotations

import math

import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import Emitter, Index
from ourjax.lowering import hlo

__all__ = ["Epilogue", "FusedDot", "fuse_dot_epilogues", "dot_writer", "dot_evaluator",
           "single_result"]


# ---------------------------------------------------------------------------------------------
# emitting: where a dot kernel puts C's elements
# ---------------------------------------------------------------------------------------------


class Epilogue:
  """Elementwise consumers of a dot fused into the dot's kernel (a kOutput fusion's bias add and
  activation, a gradient's mask): ``outputs`` ((instr, Buf) pairs over the dot's dims) are
  evaluated by the shared emitter where each accumulator is stored, with the dot's element
  handed to it (``Emitter.remember``) instead of going through memory.  ``leafmap`` holds the
  consumers' other leaves.  Planned by ``fuse_dot_epilogues``."""

  def __init__(self, dot, outputs, leafmap):
    self.dot, self.outputs = dot, list(outputs)
    self.leafmap = {k: v for k, v in leafmap.items() if k is not dot}
    self.reads = K._leaf_bufs(self.leafmap)
    self.writes = K.output_bufs(self.outputs)


def _dot_buffers(lhs, rhs, out, epilogue):
  """(reads, writes) of a dot kernel: C, or in its place the fused epilogue's outputs."""
  if epilogue is None:
    return [lhs, rhs], [out]
  return [lhs, rhs] + epilogue.reads, epilogue.writes


class _LazyLinear(Index):
  """An ``Index`` given by its ``multi`` whose linear position, if the epilogue asks for it in
  the block the index was made in, is made by the caller's ``make()`` (the IR the caller would
  have made up front) rather than from ``multi``."""
  __slots__ = ("_make",)

  def __init__(self, b, dims, make, multi):
    super().__init__(b, dims, multi=multi)
    self._make = make

  @property
  def linear(self):
    if self._linear is None and self._b.block is self._block:
      self._linear = self._make()
    return Index.linear.fget(self)


def _epilogue_at(b, ptr, kernel):
  """(emitter, at) for a dot kernel's fused epilogue: ``at(v, linear, (batch, m, n))`` opens
  a scope of the emitter in which C's element at ``linear`` (its row-major position) is ``v``
  and returns its ``Index``; the caller evaluates the epilogue there, then closes the scope
  (``em.pop_scope()``).  ``linear`` may be a function that makes it: it is then called only
  where (batch, m, n) does not give the index already (the index computes its linear position
  from them if the epilogue asks for it)."""
  dot, epi = kernel.dot, kernel.epilogue
  em = Emitter(b, K._make_leaves(b, epi.leafmap, ptr))
  dims = tuple(dot.dims)
  plain = len(dims) == 2 and kernel.spec.B == 1
  batched = len(dims) == 3 and dims[0] == kernel.spec.B
  swapped = getattr(kernel, "c_swapped", False)   # (``linear`` is C's stored position then)

  def at(v, linear, where):
    em.push_scope()
    multi = list(where[1:]) if plain else list(where) if batched else None
    if swapped:
      assert multi is not None
      idx = Index(b, dims, multi=multi)
    elif callable(linear):
      idx = (_LazyLinear(b, dims, linear, multi) if multi is not None
             else Index(b, dims, linear=linear()))
    else:
      idx = Index(b, dims, linear=linear, multi=multi)
    em.remember(dot, idx, v)
    return idx
  return em, at


def dot_writer(b, ptr, kernel):
  """``store(v, linear, (batch, m, n))``: where a dot kernel (``dot``, ``out``, ``epilogue``,
  ``spec`` attributes) puts element ``v`` of C (a compute value of the dot's type; ``linear``
  its row-major position): into C, or through the fused epilogue."""
  dot, epi = kernel.dot, kernel.epilogue
  if epi is None:
    C, dt = ptr(kernel.out), dot.dtype
    return lambda v, linear, where: E.store_element(b, v, C, linear, dt)
  em, at = _epilogue_at(b, ptr, kernel)
  swapped = getattr(kernel, "c_swapped", False)

  def store(v, linear, where):
    idx = at(v, linear, where)
    if swapped:      # (evaluated at (batch, m, n), stored at ``linear`` of C's layout)
      vals = [em.value(instr, idx) for instr, _ in epi.outputs]
      dest = Index(b, idx.dims, linear=linear, multi=idx.multi)
      for (instr, buf), x in zip(epi.outputs, vals):
        K.store_output(b, instr, buf, x, dest, ptr)
    else:
      # (every output evaluated before any is stored: an output may be written over a
      # donated argument that another one reads at this index, ``backends/donation.py``)
      K.store_outputs(b, em, epi.outputs, idx, ptr, evaluate_first=True)
    em.pop_scope()
  return store


def single_result(kernel):
  """``(dtype, Buf)`` of the one array of the dot's shape a dot kernel's results go to: C
  itself, or the one output of its fused epilogue (its buffer may hold a row-major reshape of
  C, a convolution's ``[N*H*W, C]`` product stored as ``[N, H, W, C]``: an element's linear
  position is the same); None for an epilogue of several outputs or of another shape."""
  dot, epi = kernel.dot, kernel.epilogue
  if epi is None:
    return dot.dtype, kernel.out
  if len(epi.outputs) != 1:
    return None
  instr, buf = epi.outputs[0]
  dims = tuple(dot.dims)
  if tuple(instr.dims) != dims or not isinstance(buf, K.Buf) or \
     math.prod(buf.dims) != math.prod(dims):
    return None
  return np.dtype(instr.dtype), buf


def dot_evaluator(b, ptr, kernel):
  """``(value(v, linear, where), dtype, Buf)`` of a dot kernel with a ``single_result``:
  ``value`` evaluates it at the element, C's element ``v`` handed in, as ``dot_writer`` would
  before storing it."""
  dt, buf = single_result(kernel)
  if kernel.epilogue is None:
    return (lambda v, linear, where: v), dt, buf
  instr = kernel.epilogue.outputs[0][0]
  em, at = _epilogue_at(b, ptr, kernel)

  def value(v, linear, where):
    out = em.value(instr, at(v, linear, where))
    em.pop_scope()
    return out
  return value, dt, buf



# ---------------------------------------------------------------------------------------------
# planning: which dots take which consumer in
# ---------------------------------------------------------------------------------------------

class FusedDot(K.Kernel):
  """A planned dot with its elementwise consumer fused in (``fuse_dot_epilogues``); ``out``
  is the dot's own buffer, which the GPU kernels need only where they cannot fuse."""

  def __init__(self, name, dot, lhs, rhs, out, epilogue: Epilogue):
    self.dot, self.lhs, self.rhs, self.out, self.epilogue = dot, lhs, rhs, out, epilogue
    super().__init__(name, [lhs, rhs] + epilogue.reads, epilogue.writes)


def _dot_producer(k):
  """(dot, lhs, rhs, out) of a planned kernel computing one dot into a buffer, or None."""
  if isinstance(k, K.DotKernel):
    return k.dot, k.lhs, k.rhs, k.out
  if (isinstance(k, K.LoopKernel) and len(k.outputs) == 1 and k.outputs[0][0].opcode == "dot"
          and isinstance(k.outputs[0][1], K.Buf)):
    dot, buf = k.outputs[0]
    specs = [k.leafmap.get(o) for o in dot.operands]
    if all(isinstance(x, K.Buf) for x in specs) and _gpu_dot_ok(dot):
      return dot, specs[0], specs[1], buf
  return None


def _peeled(outputs, dims) -> list:
  """``outputs`` ((instr, Buf) pairs) with each reshape of a value over ``dims`` replaced by
  that value: a reshape keeps the row-major order, so the value's element at a linear position
  is the reshape's there (an epilogue stores by linear position: a convolution's product
  ``[N*H*W, C]`` stored as the ``[N, H, W, C]`` it is reshaped to)."""
  return [(i.operands[0] if i.opcode == "reshape" and not i.shape.is_tuple
           and tuple(i.operands[0].dims) == dims else i, buf) for i, buf in outputs]


def _epilogue_ok(c, dot, out) -> bool:
  """Whether planned kernel ``c`` can run as ``dot``'s epilogue: an elementwise kernel over the
  dot's shape reading the dot's buffer ``out`` only as the dot, through elementwise ops at its
  own index (a broadcast or slice of the dot would need other elements)."""
  if not isinstance(c, K.LoopKernel) or c.prefetch_outer or c.prefetch_elem:
    return False
  dims = tuple(dot.dims)
  outs = _peeled(c.outputs, dims)
  if math.prod(c.dims) != math.prod(dims) or \
     any(i.shape.is_tuple or K._dims(i) != dims for i, _ in outs):
    return False
  if c.leafmap.get(dot) is not out or sum(v is out for v in c.leafmap.values()) != 1:
    return False
  seen, stack = set(), [i for i, _ in outs]
  while stack:
    x = stack.pop()
    if id(x) in seen or x is dot or x in c.leafmap:
      continue
    seen.add(id(x))
    if x.opcode in hlo.ELEMENTWISE_OPS and tuple(x.dims) == dims:
      stack.extend(x.operands)
    elif id(dot) in K._reachable(list(x.operands), c.leafmap):
      return False
  return True


def fuse_dot_epilogues(kernels, outputs) -> list:
  """One group's planned ``kernels`` with every dot whose result feeds exactly one elementwise
  kernel of the dot's shape (and is not an output of the group, ``outputs``: (instr, Buf)
  pairs) turned, with that kernel, into a ``FusedDot`` placed where the consumer was (after
  everything it reads)."""
  out_bufs = set()
  for _, buf in outputs:
    out_bufs.update(id(x) for x in (buf if isinstance(buf, tuple) else (buf,)))
  kernels = list(kernels)
  for i, k in enumerate(kernels):
    prod = _dot_producer(k)
    if prod is None or id(prod[3]) in out_bufs:
      continue
    dot, lhs, rhs, out = prod
    readers = [j for j, c in enumerate(kernels)
               if j != i and c is not None and any(x is out for x in c.reads)]
    if len(readers) != 1 or readers[0] < i or not _epilogue_ok(kernels[readers[0]], dot, out):
      continue
    c = kernels[readers[0]]
    kernels[readers[0]] = FusedDot(k.name, dot, lhs, rhs, out,
                                   Epilogue(dot, _peeled(c.outputs, tuple(dot.dims)),
                                            c.leafmap))
    kernels[i] = None
  return [k for k in kernels if k is not None]


def _gpu_dot_ok(dot) -> bool:
  """Whether ``dot`` runs as a matrix kernel (never as a sum per output element inside an
  elementwise kernel): float operands and result, or integer ones (summed in the result's
  integer type, as the reference does; 8-bit operands on the tensor cores, ``mma_kind``)."""
  lhs, rhs = dot.operands
  ts = (lhs.dtype, rhs.dtype, dot.dtype)
  return (K.DotSpec(dot).ok and not dot.shape.is_tuple
          and (all(E._is_float(t) for t in ts)
               or (all(E._is_int(t) for t in ts) and lhs.dtype == rhs.dtype)))
