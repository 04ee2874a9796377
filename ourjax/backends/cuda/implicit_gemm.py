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


class Geometry:
  """A patch matrix [N * prod(out), taps * C] over input ``v`` [N, in..., C]: tap ``t`` reads
  input position ``o * stride + starts[t] - low`` at output position ``o`` (per spatial dim)."""

  def __init__(self, v, in_dims, out_dims, starts, strides, low, batch0=0, layout="F"):
    self.v = v                          # the padded instruction's operand (an HLO instruction)
    # "F": rows (n, out...), columns (tap, c): a convolution's (or an input gradient's) patches;
    # "W": rows (n, tap), columns (out..., c): a weight gradient's, whose convolution has the
    # input's channels as its batch and the batch as its channels
    self.layout = layout
    self.batch0 = batch0                # the first batch element of v the matrix reads (a
                                        # batch chunk of a larger convolution)
    self.in_dims = tuple(in_dims)       # [N, spatial..., C]
    self.out_dims = tuple(out_dims)     # [N, out spatial...]
    self.starts = [tuple(s) for s in starts]   # per tap, per spatial dim
    self.strides = tuple(strides)
    self.low = tuple(low)

  @property
  def channels(self) -> int:
    return self.in_dims[-1]

  @property
  def taps(self) -> int:
    return len(self.starts)


class Im2colBuf(K.Buf):
  """The patch matrix of ``geometry`` over the buffer ``source`` (the input, row-major
  [N, in..., C]): never allocated or written; only ``WgmmaDot`` reads it, through
  ``chunk_source``."""
  __slots__ = ("source", "geometry")

  def __init__(self, source: K.Buf, geometry: Geometry, dims, name: str):
    super().__init__(source.dtype, dims, name, kind="virtual", nbytes=0)
    self.source, self.geometry = source, geometry


def _peel_reshapes(x):
  while x.opcode == "reshape":
    x = x.operands[0]
  return x


def _is_zero(c) -> bool:
  if c.opcode != "constant":
    return False
  v = np.asarray(c.attrs["value"])
  return v.ndim == 0 and float(v) == 0.0


def match(fusion) -> list | None:
  """The geometries of the patch matrices a fusion computes (see the module docstring): one,
  or one per element of a tuple-rooted fusion (sibling batch chunks merged into one), or None
  when it computes anything else."""
  if fusion.opcode != "fusion":
    return None
  root = fusion.attrs["calls"].root
  roots = root.operands if root.opcode == "tuple" else [root]
  geos = [match_root(r) for r in roots]
  return geos if all(g is not None for g in geos) else None


def match_root(root) -> Geometry | None:
  """The geometry of the patch matrix ``root`` (an instruction of a fused computation)
  computes, or None."""
  if len(root.dims) != 2 or root.opcode != "reshape" or \
     root.operands[0].opcode != "concatenate":
    return None
  cat = root.operands[0]
  cdims = cat.dims
  axis = cat.attrs["dimensions"][0]
  T = len(cat.operands)
  if len(cdims) >= 4 and axis == len(cdims) - 2:
    # a convolution's patches: [N, out..., taps, C] -> rows (n, out...), columns (tap, c)
    layout, r = "F", len(cdims) - 3
    N, out, C = cdims[0], cdims[1:1 + r], cdims[-1]
    if tuple(root.dims) != (N * math.prod(out), T * C):
      return None
  elif len(cdims) == 3 and axis == 1 and cat.operands and \
      cat.operands[0].opcode == "reshape" and len(cat.operands[0].operands[0].dims) >= 3:
    # a weight gradient's: [C, taps, out... x N] -> rows (c, tap), columns (out..., n)
    layout = "W"
    sdims = cat.operands[0].operands[0].dims
    r = len(sdims) - 2
    N, out, C = sdims[0], sdims[1:1 + r], sdims[-1]
    if tuple(root.dims) != (N * T, math.prod(out) * C) or cdims != (N, T, math.prod(out) * C):
      return None
  else:
    return None
  if r < 1 or cdims[axis] != T:
    return None
  source, starts, strides = None, [], None
  for piece in cat.operands:
    if piece.opcode != "reshape" or piece.operands[0].opcode != "slice":
      return None
    sl = piece.operands[0]
    if tuple(sl.dims) != (N, *out, C):
      return None
    src = sl.operands[0]
    if source is None:
      source = src
    elif src is not source:
      return None
    st = tuple(sl.attrs.get("strides") or (1,) * len(sl.dims))
    start = sl.attrs["start_indices"]
    if start[0] != 0 or start[-1] != 0 or st[0] != 1 or st[-1] != 1:
      return None
    if strides is None:
      strides = st[1:-1]
    elif st[1:-1] != strides:
      return None
    starts.append(tuple(start[1:-1]))
  if source.opcode == "pad":
    v, pv = source.operands
    cfg = source.attrs["padding_config"]
    if not _is_zero(pv) or any(i for _, _, i in cfg) or cfg[0][:2] != (0, 0) or \
       cfg[-1][:2] != (0, 0):
      return None
    low = tuple(lo for lo, _, _ in cfg[1:-1])
  else:
    v, low = source, (0,) * r
  batch0 = 0
  if v.opcode == "slice" and len(v.dims) == r + 2:   # a batch chunk: read the whole in place
    whole = v.operands[0]
    st = v.attrs.get("strides") or (1,) * len(v.dims)
    if all(x == 1 for x in st) and tuple(v.dims[1:]) == tuple(whole.dims[1:]) and \
       all(x == 0 for x in v.attrs["start_indices"][1:]):
      v, batch0 = whole, v.attrs["start_indices"][0]
  if len(v.dims) != r + 2 or v.dims[0] < batch0 + N or v.dims[-1] != C or \
     (batch0 and layout != "F"):
    return None
  return Geometry(v, v.dims, (N, *out), starts, strides, low, batch0, layout)


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
  from ourjax.backends.cuda.dots import _tf32_allowed, mma_kind
  from ourjax.backends.cuda.wgmma import WgmmaDot
  if not enabled(info):
    return False
  if dot.opcode != "dot" or dot.operands[0] is not patches or dot.operands[1] is patches:
    return False
  lhs, rhs = dot.operands
  if not all(E._is_float(x.dtype) for x in (lhs, rhs, dot)) or dot.shape.is_tuple:
    return False
  s = K.DotSpec(dot)
  if not s.ok or s.B != 1 or s.a_sk != 1:
    return False
  kind = mma_kind(dot, info, _tf32_allowed(dot))
  if kind is None:
    return False
  epv = 16 // np.dtype(lhs.dtype).itemsize
  return geo.channels % epv == 0 and \
      WgmmaDot.supports(dot, info, kind) is not None


def chunk_source(b, buf: Im2colBuf, m, k, mod):
  """(element offset into ``buf.source``, i1 in bounds) of the 16 bytes of the patch matrix at
  row ``m``, column ``k`` (i64 values; k a multiple of the 16 bytes' elements).  A row beyond
  the matrix is out of bounds too (the caller checks k against K)."""
  g = buf.geometry
  C, r = g.channels, len(g.strides)
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
  off = b.add(rest, i64(g.batch0)) if g.batch0 else rest     # n
  for d in range(r):
    p = b.gep(tables[d], [ir.Constant(I32, 0), t], inbounds=True)
    shift = b.sext(b.load(p), I64)
    pos = b.add(b.mul(coords[d], i64(g.strides[d])), shift)
    ok = b.and_(ok, b.icmp_unsigned("<", pos, i64(g.in_dims[1 + d])))
    off = b.add(b.mul(off, i64(g.in_dims[1 + d])), pos)
  off = b.add(b.mul(off, i64(C)), ch)
  return off, ok
