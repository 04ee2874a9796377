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

Parts that compute the same thing from different windows of the same arrays (the 9 slices of
an im2col matrix: equal trees whose slices differ only in their start indices) are written by
one loop nest with an outer loop over the parts: the starts (and the part's offset in the
concatenation) are values of the part index there (:func:`_part_value`), so LLVM optimises and
generates code for one loop nest instead of nine.  That was most of the compile time of a
convolution network, for the same inner loop.

The output may be read through reshapes (``reshape(concatenate(...))`` is how ``conv_to_dot``
makes its ``[N*H*W, K*C]`` matrix): a reshape keeps the row-major order, so the element at
position ``i`` of the concatenation is at ``i`` of the output buffer.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir
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


def _alike(x, y, leafmap, memo) -> bool:
  """Whether ``x`` and ``y`` compute the same thing except for the start indices of slices
  (same opcodes, shapes, other attributes; the same leaves, parameters and constants)."""
  if x is y:
    return True
  key = (id(x), id(y))
  got = memo.get(key)
  if got is not None:
    return got
  ok = (x not in leafmap and y not in leafmap and x.opcode == y.opcode
        and x.opcode not in ("parameter", "constant") and x.dims == y.dims
        and x.dtype == y.dtype and not x.shape.is_tuple and not y.shape.is_tuple
        and len(x.operands) == len(y.operands))
  if ok:
    ax, ay = x.attrs, y.attrs
    if x.opcode == "slice":
      ax = {k: v for k, v in ax.items() if k not in ("start_indices", "limit_indices")}
      ay = {k: v for k, v in ay.items() if k not in ("start_indices", "limit_indices")}
    try:
      ok = bool(ax == ay)
    except (ValueError, TypeError):     # (an attribute that does not compare as a whole)
      ok = False
  ok = ok and all(_alike(a, b, leafmap, memo) for a, b in zip(x.operands, y.operands))
  memo[key] = ok
  return ok


def _slice_pairs(x, y, out, seen) -> None:
  """The slices of ``x`` (a tree ``_alike`` ``y``) with their counterparts in ``y``:
  ``out[id(slice of x)] = [its starts, ...]``, one entry appended per call (a slice shared by
  ``x`` and ``y`` gives its own starts)."""
  if id(x) in seen:
    return
  seen.add(id(x))
  if x.opcode == "slice":
    out.setdefault(id(x), []).append(tuple(y.attrs["start_indices"]))
  for a, b in zip(x.operands, y.operands):
    _slice_pairs(a, b, out, seen)


def group_parts(parts, leafmap) -> list:
  """``parts`` (``concat_parts``) in groups of parts ``_alike`` each other (in order of their
  first part); a group of one is written on its own."""
  memo: dict = {}
  groups: list = []
  for p in parts:
    for g in groups:
      if _alike(g[0][0], p[0], leafmap, memo):
        g.append(p)
        break
    else:
      groups.append([p])
  return groups


def _part_value(b, j, values):
  """The i64 value ``values[j]`` for the part index ``j`` (an IR value): a constant when they
  are equal, ``v0 + j * step`` when they step evenly, else a chain of selects (all of which
  LLVM computes once per part, outside the part's loops)."""
  v0 = values[0]
  if all(v == v0 for v in values):
    return i64(v0)
  step = values[1] - v0
  if all(v == v0 + k * step for k, v in enumerate(values)):
    return b.add(i64(v0), b.mul(j, i64(step), flags=["nsw"]), flags=["nsw"])
  out = i64(values[-1])
  for k in range(len(values) - 2, -1, -1):
    out = b.select(b.icmp_signed("==", j, i64(k)), i64(values[k]), out)
  return out


class _PartEmitter(Emitter):
  """An ``Emitter`` whose slices named in ``starts`` (id -> one i64 value per dimension) start
  where those values say instead of at their constant start indices."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.starts: dict = {}

  def _op_slice(self, instr, index):
    starts = self.starts.get(id(instr))
    if starts is None:
      return super()._op_slice(instr, index)
    b = self.b
    x = instr.operands[0]
    strides = instr.attrs.get("strides") or (1,) * len(x.dims)
    multi = []
    for m, s, st in zip(index.multi, starts, strides):
      v = m if st == 1 else b.mul(m, i64(st), flags=["nuw", "nsw"])
      multi.append(v if isinstance(s, ir.Constant) and s.constant == 0
                   else b.add(v, s, flags=["nuw", "nsw"]))
    return self.value(x, Index(b, x.dims, multi=multi))


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
    em = _PartEmitter(b, _make_leaves(b, self.leafmap, ptr))
    em.reduce_ok = None
    concat = self.concat
    dims = concat.dims
    rank = len(dims)
    strides = [math.prod(dims[k + 1:]) for k in range(rank)]
    d, parts = E.concat_parts(concat)
    out = ptr(self.buf)
    dt = concat.dtype
    for group in group_parts(parts, self.leafmap):
      part = group[0][0]
      pd = part.dims
      outer = pd[:-1]
      lo, hi = partition(b, math.prod(outer), tid, nthreads)
      if len(group) == 1:
        self._part(b, em, part, i64(group[0][1] * strides[d]), lo, hi, strides, out, dt)
        continue
      pairs: dict = {}
      for other, _, _ in group:
        _slice_pairs(part, other, pairs, set())
      with ForLoop(b, 0, len(group), "part") as pl:
        em.starts = {k: [_part_value(b, pl.index, [s[n] for s in v]) for n in range(len(v[0]))]
                     for k, v in pairs.items()}
        base = _part_value(b, pl.index, [off * strides[d] for _, off, _ in group])
        self._part(b, em, part, base, lo, hi, strides, out, dt)
        em.starts = {}

  @staticmethod
  def _part(b, em, part, start, lo, hi, strides, out, dt):
    """Rows [lo, hi) of ``part``'s leading dimensions, each a loop over its last dimension,
    stored from ``start`` (the part's first element in the concatenation) on."""
    pd = part.dims
    outer = pd[:-1]
    with ForLoop(b, lo, hi, "row") as row:
      omulti = E.delinearize(b, row.index, outer)
      em.push_scope()
      # where the row starts in the concatenation (row-major; part index + offset along d)
      base = start
      for k, m in enumerate(omulti):
        base = b.add(base, b.mul(m, i64(strides[k]), flags=["nuw", "nsw"]),
                     flags=["nuw", "nsw"])
      with ForLoop(b, 0, pd[-1], "col") as col:
        em.push_scope()
        v = em.value(part, Index(b, pd, multi=omulti + [col.index]))
        E.store_element(b, v, out, b.add(base, col.index, flags=["nuw", "nsw"]), dt)
        em.pop_scope()
      em.pop_scope()


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
