"""Convolution patch matrices described, not stored (implicit im2col), shared by the CPU and
GPU backends.

``lowering/passes/conv_to_dot`` turns a convolution into ``patches @ kernel``, the patches a
fusion of the padded input's shifted slices, concatenated along a new kernel-position axis
before the channels and reshaped to ``[N * out..., taps * C]``.  Written out, that matrix is
``taps`` times the input (a 3x3 convolution: 9x), and building it can cost as much as the GEMM.

``match`` recognises such a fusion and returns its ``Geometry``: which input element each
element of the patch matrix is (or a zero of the padding).  A planner that finds one read only
by a dot that can gather its patches itself plans, instead of the fusion, only what it pads,
and an ``Im2colBuf`` stands for the matrix: the GPU's ``WgmmaDot`` fills its shared-memory tiles
from the input (``cuda/implicit_gemm.py``), the CPU's GEMM packs its A panels from it
(``llvm/gemm_im2col.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ourjax.backends.llvm import kernels as K
from ourjax.lowering import hlo

__all__ = ["Geometry", "Im2colBuf", "match", "match_root", "plan_sources"]


class Geometry:
  """A patch matrix [N * prod(out), taps * C] over input ``v`` [N, in..., C]: tap ``t`` reads
  input position ``o * stride + starts[t] - low`` at output position ``o`` (per spatial dim)."""

  def __init__(self, v, in_dims, out_dims, starts, strides, low, batch0=0, layout="F",
               groups=1, group_rows=None):
    self.v = v                          # the padded instruction's operand (an HLO instruction)
    # grouped convolutions (``conv_to_dot._rewrite_grouped``): the matrix is [groups, rows,
    # columns]; feature groups (``group_rows`` None): rows N * out..., group g's columns
    # (tap, c) reading input channel g * C / groups + c; batch groups: group g's rows are rows
    # g * group_rows... of the ungrouped matrix, its columns all of them
    self.groups, self.group_rows = groups, group_rows
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
  def group_channels(self) -> int:
    """Input channels of a group's columns per kernel position (all of them for batch
    groups)."""
    return self.in_dims[-1] // (self.groups if self.group_rows is None else 1)

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


def match(fusion, one_tap: bool = False, grouped: bool = False) -> list | None:
  """The geometries of the patch matrices a fusion computes (see the module docstring): one,
  or one per element of a tuple-rooted fusion (sibling batch chunks merged into one), or None
  when it computes anything else.  ``one_tap``: also the patches of a kernel of one position
  (a 1x1 convolution with strides or padding: one slice, no concatenation); ``grouped``: also
  a feature-grouped convolution's [G, N * out..., taps * C / G] (``_grouped_root``)."""
  if fusion.opcode != "fusion":
    return None
  root = fusion.attrs["calls"].root
  roots = root.operands if root.opcode == "tuple" else [root]
  geos = [match_root(r, one_tap, grouped) for r in roots]
  return geos if all(g is not None for g in geos) else None


def _grouped_root(root):
  """(G, rows of a group for batch groups or None for feature groups, the ungrouped patch
  matrix [rows, columns] it is made of) where ``root`` is ``conv_to_dot._rewrite_grouped``'s
  patches, else None: feature groups, reshape([G, M, taps * Cg]) of transpose([G, M, taps,
  Cg], 2-0-1-3) of reshape([M, taps, G, Cg]) of the slices' concatenation; batch groups,
  reshape([G, rows, columns]) of the concatenation."""
  if root.opcode != "reshape" or len(root.dims) != 3:
    return None
  tr = root.operands[0]
  if tr.opcode == "concatenate":
    G, rows, cols = root.dims
    flat = hlo.Instruction("reshape", [tr], root.shape.with_dims((G * rows, cols)),
                           name=f"{root.name}.ungrouped")
    return G, rows, flat
  if tr.opcode != "transpose" or tuple(tr.attrs["dimensions"]) != (2, 0, 1, 3):
    return None
  split = tr.operands[0]
  if split.opcode != "reshape" or split.operands[0].opcode != "concatenate":
    return None
  m, taps, G, cg = split.dims
  if tuple(root.dims) != (G, m, taps * cg):
    return None
  cat = split.operands[0]
  flat = hlo.Instruction("reshape", [cat], root.shape.with_dims((m, taps * G * cg)),
                         name=f"{root.name}.ungrouped")
  return G, None, flat


def match_root(root, one_tap: bool = False, grouped: bool = False) -> Geometry | None:
  """The geometry of the patch matrix ``root`` (an instruction of a fused computation)
  computes, or None (``one_tap``, ``grouped``: see ``match``)."""
  if grouped and len(root.dims) == 3:
    found = _grouped_root(root)
    if found is None:
      return None
    G, rows, flat = found
    geo = match_root(flat)
    if geo is None or geo.batch0 or (rows is None and (geo.layout != "F" or geo.channels % G)):
      return None
    geo.groups, geo.group_rows = G, rows
    return geo
  if len(root.dims) != 2 or root.opcode != "reshape":
    return None
  if root.operands[0].opcode != "concatenate":
    if not one_tap:
      return None
    # one kernel position: reshape([N * out..., C]) of reshape([N, out..., 1, C]) of a slice
    sl = _peel_reshapes(root)
    if sl.opcode == "pad" and len(sl.dims) >= 3:   # (the slice of all of it, simplified away)
      sl = hlo.Instruction("slice", [sl], sl.shape, {"start_indices": (0,) * len(sl.dims),
                                                     "limit_indices": tuple(sl.dims)},
                           name=f"{sl.name}.all")
    if sl.opcode != "slice" or len(sl.dims) < 3 or \
       tuple(root.dims) != (math.prod(sl.dims[:-1]), sl.dims[-1]):
      return None
    piece = hlo.Instruction("reshape", [sl], sl.shape.with_dims(
        tuple(sl.dims[:-1]) + (1, sl.dims[-1])), name=f"{sl.name}.tap")
    cat = hlo.Instruction("concatenate", [piece], piece.shape, {"dimensions": (len(sl.dims) - 1,)},
                          name=f"{sl.name}.taps")
    root = hlo.Instruction("reshape", [cat], root.shape, name=f"{root.name}.patches")
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


def plan_sources(planner, instr, geos, vals, steps, others=(), dying=None) -> dict:
  """Plan what the patch matrices ``geos`` (``Geometry``s of the fusion ``instr``) are read
  from, for a GEMM that reads them in place: ``{id(geo.v): Buf}``, the input's own buffer
  where it is one already (the previous layer's activation, say), else a temporary that
  kernels planned here (with ``planner``, into ``steps``) write, together with ``others``
  ((value of the fused computation, Buf) pairs also written: a tuple's other elements).
  ``vals`` maps ``instr``'s operands to their buffers.  ``dying(operand)``: None when that
  operand's buffer dies at ``instr``, else its later readers (a list; False: it does not
  die); given, an input computed elementwise from such an operand of its size (a
  convolution's output through its batch norm, residual add and relu) is computed over it in
  place (``_dying_homes``; checked on the kernels planned)."""
  from ourjax.backends.llvm.group_planner import overwrites_in_place
  fc = instr.attrs["calls"]
  leafmap = {p: vals[o] for p, o in zip(fc.parameters, instr.operands)}
  # (with reuse_buffers, values that earlier groups wrote are read, not computed again, and the
  # inputs written here are noted for later groups: llvm/reuse.py)
  keys = None
  if planner.reuse_buffers:
    from ourjax.backends.llvm import reuse
    operand = dict(zip(fc.parameters, instr.operands))
    keys = reuse.value_keys(fc, operand.__getitem__)
    reuse.seed_computed(planner, keys, leafmap)
  srcs, pending = {}, []
  for geo in geos:
    src = leafmap.get(_peel_reshapes(geo.v))
    if isinstance(src, K.Buf) and not isinstance(src, Im2colBuf):
      srcs[id(geo.v)] = src
    elif id(geo.v) not in srcs:
      srcs[id(geo.v)] = None
      pending.append(geo.v)
  if not pending and not others:
    return srcs
  needed = K._reachable(pending + [v for v, _ in others], leafmap)
  instrs = [i for i in fc.instructions if id(i) in needed]
  for i in instrs:
    if i.opcode == "constant" and i.attrs["value"].ndim > 0:
      leafmap[i] = planner.const_buf(i)
  if keys is not None:
    reuse.check_clobbered(planner, fc, leafmap, pending + [v for v, _ in others])
  homes = {}
  if dying is not None:
    homes = _dying_homes(planner, instr, instrs, pending, vals, dying, keys,
                         {id(b) for _, b in others})

  def plan(homes):
    for v in pending:
      srcs[id(v)] = homes.get(id(v)) or planner.temp(v.dtype, v.dims, f"{instr.name}.input")
    todo = [(v, srcs[id(v)]) for v in pending] + list(others)
    return planner._group_kernels(instrs, todo, leafmap)
  kernels = plan(homes)
  if homes and not all(overwrites_in_place(kernels, srcs[id(v)], [v], False)
                       for v in pending if id(v) in homes):
    kernels = plan({})
  for v in pending:
    if keys is not None:
      reuse.remember_computed(planner, keys, v, srcs[id(v)])
    if id(v) in homes and srcs[id(v)] is homes[id(v)]:
      planner.clobbered.add(id(homes[id(v)]))
  for kern in kernels:
    planner._add_kernel(steps, kern)
  return srcs


def _dying_homes(planner, instr, instrs, pending, vals, dying, keys, taken) -> dict:
  """{id(input value): the buffer of an operand of the fusion ``instr`` that dies there (or
  whose later readers read it only through that input or values computed before, which they
  will read instead: ``reuse.read_only_through``), of the input's size and type, which the
  needed ``instrs`` read only elementwise on the way to that input
  (``reuse.outputs_reached``)}: the input may be computed over it."""
  from ourjax.backends.llvm import reuse
  fc = instr.attrs["calls"]
  homes = {}
  for v in pending:
    own = reuse.peeled_key(keys, v) if keys is not None else None
    known = set(planner.computed) | ({own} if own is not None else set())
    for p, x in zip(fc.parameters, instr.operands):
      buf = vals.get(x)
      if type(buf) is not K.Buf or buf.kind != "temp" or id(buf) in taken or \
         buf.size != v.shape.size or buf.dtype != K.np.dtype(v.dtype) or \
         sum(1 for o in instr.operands if vals.get(o) is buf) != 1:
        continue
      later = dying(x)
      if later is None:         # (it dies here)
        pass
      elif later is False or own is None or not reuse.read_only_through(
          later, x, known, lambda u: dict(zip(u.attrs["calls"].parameters, u.operands))):
        continue
      found = reuse.outputs_reached([p], instrs, lambda u: u is v or u in pending)
      if found == [v]:
        homes[id(v)] = buf
        taken.add(id(buf))
        break
  return homes
