"""Convolutions as implicit GEMMs on the GPU: the patch matrix of a convolution is never written.

``lowering/passes/conv_to_dot`` turns a convolution into ``patches @ kernel``, the patches a
fusion of the padded input's shifted slices, concatenated along a new kernel-position axis
before the channels and reshaped to ``[N * out..., taps * C]``.  Written out, that matrix is
``taps`` times the input (a 3x3 convolution: 9x), and building it costs more than the GEMM.

Here the GPU planner (``planning._make_planner``) recognises such a fusion (``match``) whose only
user is a dot that ``WgmmaDot`` takes as it stands (``accepts``) and plans, instead of the
fusion, only what it pads: the input itself when it is a buffer already, else one elementwise
kernel writing it (a previous layer's scale, shift and relu, say).  The dot's A operand becomes
an ``Im2colBuf``: the patch matrix described, not stored.  ``WgmmaDot`` fills its shared-memory
tiles from the input directly (``chunk_source``): for the 16 bytes at row ``m`` (an output
position) and column ``k`` (kernel position ``t = k // C``, channel ``k % C``) it reads the
input element at the output position times the stride plus the kernel position's offset, minus
the padding; positions in the padding are zeros that ``cp.async`` writes without reading
(source size 0).  So the 16 bytes must be one kernel position's consecutive channels: ``C``
a multiple of 16 bytes of the element type.

A grouped convolution (``conv_to_dot._rewrite_grouped``) is one dot batched over its groups:
its patch matrix [G, rows, columns] is matched with ``Geometry.groups`` and the group is the
dot's batch, a grid dimension of ``WgmmaDot``; ``chunk_source`` offsets a feature group's
channels (or a batch group's rows: a weight gradient) by it, and the dot's result, [G, rows,
Og], is stored straight into the output's feature order (``fold_transposes``).

An lhs-dilated convolution (a strided convolution's input gradient) never reaches the matcher
with its dilation (a pad with interior padding, which ``match`` refuses): ``conv_to_dot`` splits
it by output phase into undilated convolutions, each matched here.

Like CUTLASS's implicit-GEMM convolutions (the patch gathered in the GEMM's tile loader), with
cp.async's zero fill standing in for its predicated loads.
"""
from __future__ import annotations

import math
import os

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import kernels as K
from ourjax.backends.llvm.emitter import I32, I64, i64

__all__ = ["Geometry", "Im2colBuf", "match", "accepts", "enabled", "chunk_source"]

# (the matcher and the virtual buffer are shared with the CPU backend)
from ourjax.backends.llvm.im2col import Geometry, Im2colBuf  # noqa: E402,F401
from ourjax.backends.llvm import im2col as _im2col  # noqa: E402


def match(fusion):
  """``im2col.match`` with grouped patch matrices too (feature or batch groups): their group
  is the dot's batch, a grid dimension of ``WgmmaDot`` (``chunk_source``'s ``group``)."""
  return _im2col.match(fusion, grouped=True)


def enabled(info) -> bool:
  """Whether patch matrices can be read in place on the device ``info`` describes (the
  ``WgmmaDot`` kernel: sm_90), unless ``OURJAX_CUDA_MMA`` or ``OURJAX_CUDA_IMPLICIT_GEMM=0``
  turn it off.  The passes are told (``hlo.Module.patches_in_place``)."""
  return (os.environ.get("OURJAX_CUDA_MMA", "wgmma") == "wgmma"
          and os.environ.get("OURJAX_CUDA_IMPLICIT_GEMM", "1") != "0" and info.arch == "90")


def accepts(dot, patches, geo: Geometry, info) -> bool:
  """Whether ``dot`` (an HLO dot reading the patch matrix ``patches`` of geometry ``geo`` as
  its A operand, A = the patch matrix as it is, [M, K] with k along its rows) will run on
  ``WgmmaDot`` with the patches read in place: tensor cores for its types, the layouts
  ``WgmmaDot`` takes, and one kernel position's channels filling whole 16-byte copies."""
  from ourjax.backends.cuda.mma_kinds import _tf32_allowed, mma_kind
  from ourjax.backends.cuda.wgmma import WgmmaDot
  if not enabled(info):
    return False
  if dot.opcode != "dot" or dot.operands[0] is not patches or dot.operands[1] is patches:
    return False
  lhs, rhs = dot.operands
  if not all(E._is_float(x.dtype) for x in (lhs, rhs, dot)) or dot.shape.is_tuple:
    return False
  s = K.DotSpec(dot)
  if not s.ok or s.B != geo.groups or s.a_sk != 1:
    return False
  kind = mma_kind(dot, info, _tf32_allowed(dot))
  if kind is None or np.dtype(lhs.dtype).itemsize == 1:     # (not float8 patches yet)
    return False
  epv = 16 // np.dtype(lhs.dtype).itemsize
  return geo.group_channels % epv == 0 and \
      WgmmaDot.supports(dot, info, kind) is not None


def chunk_source(b, buf: Im2colBuf, m, k, mod, group=None):
  """(element offset into ``buf.source``, i1 in bounds) of the 16 bytes of the patch matrix at
  row ``m``, column ``k`` (i64 values; k a multiple of the 16 bytes' elements) -- of group
  ``group``'s matrix (an i64: the dot's batch) where the convolution has groups: feature
  groups' columns are (tap, channel of the group), batch groups' rows a block of the
  ungrouped matrix's.  A row beyond the matrix is out of bounds too (the
  caller checks k against K)."""
  g = buf.geometry
  C, r = g.group_channels, len(g.strides)
  row_ok = None
  if g.groups > 1 and g.group_rows is not None:     # batch groups: group g's rows
    row_ok = b.icmp_unsigned("<", m, i64(g.group_rows))
    m = b.add(b.mul(group, i64(g.group_rows)), m)
  # (k may be past K in a tile's last slice: the tap is clamped so the table read stays inside;
  # the caller's check of k against K zero-fills that chunk)
  t = b.udiv(k, i64(C))
  t = b.select(b.icmp_unsigned("<", t, i64(g.taps)), t, i64(g.taps - 1))
  ch = b.urem(k, i64(C))
  # per spatial dim, a table of the taps' offsets (start - low) in global memory
  tables = []
  for d in range(r):
    name = f"{buf.name}_im2col_{d}"
    gv = mod.globals.get(name)
    if gv is None:
      ty = ir.ArrayType(I32, g.taps)
      gv = ir.GlobalVariable(mod, ty, name, addrspace=1)
      gv.global_constant = True
      gv.linkage = "internal"
      gv.initializer = ir.Constant(ty, [ir.Constant(I32, s[d] - g.low[d]) for s in g.starts])
    tables.append(gv)

  def unravel(x, dims):
    """(leading index, [the others]) of ``x`` over row-major ``dims``."""
    coords = []
    for n in reversed(dims[1:]):
      coords.append(b.urem(x, i64(n)))
      x = b.udiv(x, i64(n))
    return x, coords[::-1]

  if g.layout == "F":     # m -> (n, o_1..o_r); k -> (tap, c)
    ok = b.icmp_unsigned("<", m, i64(math.prod(g.out_dims)))
    rest, coords = unravel(m, g.out_dims)
  else:                   # m -> (n, tap); k -> (o_1..o_r, c)
    ok = b.icmp_unsigned("<", m, i64(g.out_dims[0] * g.taps))
    rest = b.udiv(m, i64(g.taps))
    t = b.urem(m, i64(g.taps))
    o1, coords = unravel(b.udiv(k, i64(C)), g.out_dims[1:])
    coords = [o1] + coords
  if row_ok is not None:
    ok = b.and_(ok, row_ok)
  off = b.add(rest, i64(g.batch0)) if g.batch0 else rest     # n
  for d in range(r):
    p = b.gep(tables[d], [ir.Constant(I32, 0), t], inbounds=True)
    shift = b.sext(b.load(p), I64)
    pos = b.add(b.mul(coords[d], i64(g.strides[d])), shift)
    ok = b.and_(ok, b.icmp_unsigned("<", pos, i64(g.in_dims[1 + d])))
    off = b.add(b.mul(off, i64(g.in_dims[1 + d])), pos)
  if g.groups > 1 and g.group_rows is None:         # feature groups: group g's channels
    ch = b.add(b.mul(group, i64(C)), ch)
  off = b.add(b.mul(off, i64(g.channels)), ch)
  return off, ok
