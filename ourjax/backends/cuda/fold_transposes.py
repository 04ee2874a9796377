"""A dot's result stored transposed by the dot kernel itself: ``fold_output_transposes``, a pass
over the GPU program's planned steps (``planning._plan``).

A grouped convolution runs as one product batched over its groups (``conv_to_dot.
_rewrite_grouped``), [G, rows, Og], whose output is that product with its first two
dimensions swapped, [rows, G * Og].  Planned as it comes, the swap is an elementwise kernel of
its own, one more pass over the result; here the ``WgmmaDot`` writes the swapped layout itself
(``c_layout``: the batch stride and the row stride of C in the output), its fused epilogue (a
scale, shift and relu: ``simplify_sinks.sink_group_transpose`` puts them before the swap) evaluated
at the product's own index and stored at the swapped position."""
from __future__ import annotations

import numpy as np

from ourjax.backends.cuda.codegen import Elementwise
from ourjax.backends.cuda.dots import Epilogue
from ourjax.backends.cuda.horizontal import _within
from ourjax.backends.cuda.wgmma import WgmmaDot
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.kernel_info import same_origin


def _result(c):
  """(dtype, Buf) of the one array dot kernel ``c`` writes, [B, M, N]: C, or its fused
  epilogue's one output of C's shape (``dots.single_result``); None otherwise."""
  from ourjax.backends.cuda.dots import single_result
  found = single_result(c)
  if found is None or len(found[1].dims) != 3:
    return None
  return found


def _transposed_copy_of(k, c):
  """(destination Buf, c_layout) where planned kernel ``k`` (an ``Elementwise``) only writes
  ``c``'s batched result [B, M, N] (C, or its epilogue's output) with its first two
  dimensions swapped -- reshape(transpose(C, 1-0-2)), a grouped convolution's product put
  back in the output's feature order -- else None."""
  if type(k) is not Elementwise or len(k.outputs) != 1:
    return None
  instr, dst = k.outputs[0]
  while instr.opcode == "reshape":
    instr = instr.operands[0]
  if instr.opcode != "transpose" or tuple(instr.attrs["dimensions"]) != (1, 0, 2):
    return None
  src = instr.operands[0]
  dt, res = _result(c)
  if k.leafmap.get(src) is not res or len(k.leafmap) != 1 or not isinstance(dst, K.Buf):
    return None
  B, M, N = (int(d) for d in res.dims)
  if (B, M, N) != (c.spec.B, c.spec.M, c.spec.N) or np.dtype(dst.dtype) != np.dtype(dt) \
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
      res = _result(prev) if type(prev) is WgmmaDot else None
      if res is not None and prev.S == 1 and not prev.c_swapped and \
         not prev.late_epilogue and getattr(res[1], "kind", None) == "temp" and \
         readers.get(id(res[1])) == 1:
        found = _transposed_copy_of(k, prev)
        if found is not None:
          dst, layout = found
          epi = prev.epilogue
          if epi is not None:        # (its one output stored into the copy's destination)
            epi = Epilogue(epi.dot, [(epi.outputs[0][0], dst)], epi.leafmap)
          new = WgmmaDot(prev.name, prev.dot, prev.lhs, prev.rhs,
                         dst if epi is None else prev.out, prev.kind, prev.mode, prev.Q,
                         prev.WG, epilogue=epi, spec=prev.spec, c_layout=layout)
          out[-1] = step_type(same_origin(new, prev))
          continue
      out.append(s)
    return out
  return fold(steps)
