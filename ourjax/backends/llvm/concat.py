"""Concatenations of many parts as one loop nest per part (XLA's concatenate fusion, on the CPU).

A loop kernel evaluates its output element by element over the output's index space, so a
concatenate of many parts (``emitter.BRANCHY_CONCAT_PARTS``) picks its part per element through
a chain of branches: the loop stays scalar, and every element pays the index arithmetic of
every reshape between it and its source.  An im2col patch matrix (``conv_to_dot``: one strided
slice of the padded input per kernel position, 9 for a 3x3 kernel) is such a concatenate, and
building it was half of a CNN training step.

:class:`ConcatKernel` instead walks each part over the part's own index space (rows of its
leading dimensions, then its last dimension) and stores the part's elements at their place in
the concatenation.  No element asks which part it belongs to; inside a row the part is read and
written at consecutive addresses (along the concatenated dimension too, when that is the last
one), so the inner loop vectorizes, and the padding checks of a slice of a pad are per row.

The output may be read through reshapes (``reshape(concatenate(...))`` is how ``conv_to_dot``
makes its ``[N*H*W, K*C]`` matrix): a reshape keeps the row-major order, so the element at
position ``i`` of the concatenation is at ``i`` of the output buffer.
"""
from __future__ import annotations

import math

import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm.emitter import Emitter, ForLoop, Index, i64
from ourjax.backends.llvm.kernels import Kernel, _make_leaves, partition
from ourjax.lowering import hlo

#: Opcodes a part may be computed from: per element, with no reduction or contraction (those
#: need the loop kernel's prefetching or kernels of their own).
_PART_OPS = frozenset(hlo.UNARY_OPS) | frozenset(hlo.BINARY_OPS) | {
    "parameter", "constant", "broadcast", "reshape", "transpose", "slice", "pad", "convert",
    "copy", "reverse", "iota", "concatenate", "bitcast-convert", "select", "compare", "clamp",
}


def concat_root(instr):
  """The concatenate that ``instr`` is (or is a chain of reshapes of), else None."""
  while instr.opcode == "reshape":
    instr = instr.operands[0]
  return instr if instr.opcode == "concatenate" else None


def wants_concat_kernel(root, leafmap, reachable) -> bool:
  """Whether output ``root`` is best written part by part: a concatenate (possibly under
  reshapes) of more than ``BRANCHY_CONCAT_PARTS`` parts, of a real dtype, whose parts are
  computed per element (``reachable``: the instructions the kernel would evaluate)."""
  if root.shape.is_tuple or root in leafmap:
    return False
  concat = concat_root(root)
  if concat is None or concat in leafmap:
    return False
  if np.dtype(concat.dtype).kind == "c" or concat.shape.size == 0:
    return False
  if len(E.concat_parts(concat)[1]) <= E.BRANCHY_CONCAT_PARTS:
    return False
  return all(i in leafmap or i.opcode in _PART_OPS for i in reachable)


class ConcatKernel(Kernel):
  """Writes output ``root`` (a concatenate, or reshapes of one) into ``buf`` one part at a
  time, each part over its own index space (see the module docstring).  Threads split each
  part's rows."""

  def __init__(self, name, root, buf, leafmap, cost: int):
    from ourjax.backends.llvm.kernels import _leaf_bufs
    self.root, self.buf = root, buf
    self.concat = concat_root(root)
    self.leafmap = dict(leafmap)
    super().__init__(name, _leaf_bufs(leafmap), [buf],
                     work=self.concat.shape.size * max(1, cost))

  def body(self, b, ptr, tid, nthreads):
    em = Emitter(b, _make_leaves(b, self.leafmap, ptr))
    em.reduce_ok = None
    concat = self.concat
    dims = concat.dims
    rank = len(dims)
    strides = [math.prod(dims[k + 1:]) for k in range(rank)]
    d, parts = E.concat_parts(concat)
    out = ptr(self.buf)
    dt = concat.dtype
    for part, off, _ in parts:
      pd = part.dims
      outer = pd[:-1]
      lo, hi = partition(b, math.prod(outer), tid, nthreads)
      with ForLoop(b, lo, hi, "row") as row:
        omulti = E.delinearize(b, row.index, outer)
        em.push_scope()
        # where the row starts in the concatenation (row-major; part index + offset along d)
        base = i64(off * strides[d])
        for k, m in enumerate(omulti):
          base = b.add(base, b.mul(m, i64(strides[k]), flags=["nuw", "nsw"]),
                       flags=["nuw", "nsw"])
        with ForLoop(b, 0, pd[-1], "col") as col:
          em.push_scope()
          v = em.value(part, Index(b, pd, multi=omulti + [col.index]))
          E.store_element(b, v, out, b.add(base, col.index, flags=["nuw", "nsw"]), dt)
          em.pop_scope()
        em.pop_scope()
