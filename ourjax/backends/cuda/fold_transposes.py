"""A dot's result stored transposed by the dot kernel itself: ``fold_output_transposes``, a pass
over the GPU program's planned steps (``planning._plan``).

A grouped convolution runs as one product batched over its groups (``conv_to_dot.
_rewrite_grouped``), [G, rows, Og], whose output is that product with its first two
dimensions swapped, [rows, G * Og].  Planned as it comes, the swap is an elementwise kernel of
its own, one more pass over the result; here the ``WgmmaDot`` writes the swapped layout itself
(``c_layout``: the batch stride and the row stride of C in the output)."""
from __future__ import annotations

import numpy as np

from ourjax.backends.cuda.codegen import Elementwise
from ourjax.backends.cuda.horizontal import _within
from ourjax.backends.cuda.wgmma import WgmmaDot
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.kernel_info import same_origin


def _transposed_copy_of(k, c):
  """(destination Buf, c_layout) where planned kernel ``k`` (an ``Elementwise``) only writes
  ``c``'s batched result [B, M, N] with its first two dimensions swapped -- reshape(transpose(C,
  1-0-2)), a grouped convolution's product put back in the output's feature order -- else
  None."""
  if type(k) is not Elementwise or len(k.outputs) != 1:
    return None
  instr, dst = k.outputs[0]
  while instr.opcode == "reshape":
    instr = instr.operands[0]
  if instr.opcode != "transpose" or tuple(instr.attrs["dimensions"]) != (1, 0, 2):
    return None
  src = instr.operands[0]
  if k.leafmap.get(src) is not c.out or len(k.leafmap) != 1 or not isinstance(dst, K.Buf):
    return None
  B, M, N = (int(d) for d in c.out.dims) if len(c.out.dims) == 3 else (0, 0, 0)
  if (B, M, N) != (c.spec.B, c.spec.M, c.spec.N) or np.dtype(dst.dtype) != np.dtype(c.out.dtype) \
     or dst.size != B * M * N:
    return None
  return dst, (N, B * N)


def fold_output_transposes(steps, step_type, kernels_in):
  """``steps`` with each ``WgmmaDot`` (no epilogue, unsplit) whose result only the next step
  reads, an ``Elementwise`` swapping its batch and row dimensions, writing that step's output
  itself (``c_layout``: C's batch stride N, row stride B N): one pass over the result fewer (a
  grouped convolution's product [G, N * H * W, Og] stored as [N, H, W, G * Og]).  Loops' and
  conditionals' steps are folded inside.  ``kernels_in(steps)``: every kernel of ``steps``."""
  readers = {}
  for k in kernels_in(steps):
    for x in k.reads:
      readers[id(x)] = readers.get(id(x), 0) + 1

  def fold(steps):
    out = []
    for s in steps:
      k = getattr(s, "kernel", None)
      if k is None:
        _within(s, fold)
        out.append(s)
        continue
      prev = getattr(out[-1], "kernel", None) if out else None
      if type(prev) is WgmmaDot and prev.epilogue is None and prev.S == 1 and \
         prev.c_sm == prev.spec.N and prev.c_sb == prev.spec.M * prev.spec.N and \
         getattr(prev.out, "kind", None) == "temp" and readers.get(id(prev.out)) == 1:
        found = _transposed_copy_of(k, prev)
        if found is not None:
          dst, layout = found
          new = WgmmaDot(prev.name, prev.dot, prev.lhs, prev.rhs, dst, prev.kind, prev.mode,
                         prev.Q, prev.WG, spec=prev.spec, c_layout=layout)
          out[-1] = step_type(same_origin(new, prev))
          continue
      out.append(s)
    return out
  return fold(steps)
