"""Convolutions as matrix products (im2col): a ``convolution`` becomes the slices of its padded
input that each kernel position reads, stacked into a patch matrix, times the kernel reshaped to
a matrix -- one ``dot`` that the backends run on their GEMM (packed AVX-512 on the CPU, tensor
cores on the GPU) instead of the elemental loop nest of a direct convolution.

For lhs ``[N, spatial..., C]`` (after a transpose to channels-last), kernel ``[K..., C, O]``:

    padded  = pad(lhs, low/high padding, interior = lhs_dilation - 1)   (negative low/high
              padding crops: the slices start later)
    slice_k = padded[:, k*rhs_dilation : ... : window_strides, :]  -> [N, out..., C]
              for each kernel position k (row-major over the kernel's spatial dims), or, when
              there are fewer output positions p (weight gradients), the window of each p,
              padded[:, p*window_strides : ... : rhs_dilation, :] -> [N, K..., C]
    patches = concatenate(slices) -> [N * prod(out), K_total * C]
    result  = patches @ reshape(kernel, [K_total * C, O])  -> [N, out..., O], transposed to the
              convolution's output layout

The backends mostly never write the patch matrix: the CPU's GEMM packs its panels straight from
the input (``backends/llvm/gemm_im2col.py``), the GPU's tensor-core kernel fills its tiles from
it (``backends/cuda/implicit_gemm.py``); both recognise the slices and concatenation below
(``backends/llvm/im2col.py``).

The products and sums are the convolution's own; only the order of the sums changes (as any
GEMM's blocking does).  Rewritten: real types, at most ``MAX_SLICES`` slices; a patch matrix
larger than ``MAX_PATCH_BYTES`` is built and multiplied in batch chunks that fit (only a
convolution whose patch matrix of one batch element is larger stays direct), except where the
backend reads the patches in place and never writes them (``Module.patches_in_place``,
``_read_in_place``); every decision is noted.  A grouped convolution (feature or batch groups)
becomes, where the backend reads patches in place (the GPU) and its groups fill whole copies,
one product batched over its groups (``_grouped_in_place``, ``_rewrite_grouped``: one kernel
for every group); elsewhere it is first split into one ungrouped convolution per group, each
rewritten as above, where each group's product fills a GEMM's tiles (``_group_refusal``);
narrower groups (a depthwise forward or input gradient) stay direct.  A batch-grouped
convolution whose groups' products are matrix-vector ones (a depthwise weight gradient: a few
outputs, each a long sum) becomes, on every backend and before the above, one reduction of
products of the input's windows and the kernel per output position, which the fusion passes
merge into one pass over both operands read in place (``_reduction_refusal``,
``_rewrite_as_reductions``).

Where the backend reads patches in place, an lhs-dilated convolution (the input gradient of a
strided one, a transposed convolution) is first split by output phase (``_phase_refusal``,
``_split_phases``): the output positions of one remainder modulo the dilation meet input
elements only at every d-th kernel position, so each phase is an undilated convolution of a
strided slice of the kernel, its patches gathered in place, and the phases' results are
interleaved; the dilated input's zeros (3/4 of a stride-2 3x3 input gradient's patch matrix)
are neither written nor multiplied.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ourjax.lowering import hlo
from ourjax.lowering.hlo import Builder, Instruction, Module
from ourjax.lowering.hlo_builder import scalar_computation

PASS = "conv_to_dot"

#: The patch matrix is built from one slice per kernel position or, when there are fewer, one
#: window per output position (a weight gradient, whose "kernel" is the output gradient);
#: convolutions needing more slices than this stay direct.
MAX_SLICES = 64
#: Largest patch matrix (bytes) rewritten; bigger ones keep the direct convolution.
MAX_PATCH_BYTES = 1 << 29
#: A grouped convolution becomes one GEMM per group where each group's contraction is at least
#: this long and it has at least ``MIN_GROUP_COLUMNS`` output features (``_group_refusal``).
MIN_GROUP_CONTRACTION = 32
MIN_GROUP_COLUMNS = 8


def run(module: Module) -> bool:
  changed = False
  for comp in list(module.computations):
    work = list(comp.instructions)
    for instr in work:       # (the phases of a split convolution are appended)
      if instr.opcode != "convolution" or instr.parent is not comp:
        continue
      why_not = _reduction_refusal(instr)
      if module.patches_in_place and _phase_refusal(instr, module.patch_channel_bytes) is None:
        new, phases = _split_phases(Builder.into(comp), instr)
        work.extend(phases)
        module.note(PASS, f"%{instr.name} -> {len(phases)} convolutions of its output phases "
                    f"(lhs dilation {tuple(instr.attrs['lhs_dilation'])}), interleaved "
                    f"(%{new.name})")
      elif why_not is None:
        new = _rewrite_as_reductions(Builder.into(comp), instr)
        module.note(PASS, f"%{instr.name} -> {_groups(instr)} batch groups of "
                    f"{_group_outputs(instr)} outputs each as reductions of products of its "
                    f"windows and its kernel (%{new.name})")
      elif _groups(instr) > 1 and module.patches_in_place and _grouped_in_place(
          instr, module.patch_channel_bytes):
        new = _rewrite_grouped(Builder.into(comp), instr, module.patch_channel_bytes)
        kind = "feature" if instr.attrs.get("feature_group_count", 1) > 1 else "batch"
        module.note(PASS, f"%{instr.name} -> patches @ kernel batched over its "
                    f"{_groups(instr)} {kind} groups (%{new.name})")
      elif _groups(instr) > 1:
        why = _group_refusal(instr, module.kernel_fixed_flops)
        if why is not None:
          module.note(PASS, f"%{instr.name} stays a convolution: {why}")
          continue
        b = Builder.into(comp)
        parts = []
        for part in _split_groups(b, instr):
          new = _lower(module, comp, part)
          if new is not None:
            comp.remove(part)
          parts.append(new or part)
        new = b.concatenate(parts, instr.attrs["dimension_numbers"][2][1])
        module.note(PASS, f"%{instr.name} -> {len(parts)} ungrouped convolutions, one per group "
                    f"(%{new.name})")
      else:
        new = _lower(module, comp, instr)
        if new is None:
          continue
      comp.replace_all_uses(instr, new)
      comp.remove(instr)
      changed = True
    if changed:
      comp.topological_sort()
  return changed


def _lower(module: Module, comp, conv: Instruction) -> Instruction | None:
  """The ungrouped ``conv`` rewritten as patches @ kernel (its uses are the caller's to move),
  or None, its refusal noted."""
  in_place = module.patches_in_place and _read_in_place(conv)
  why = _refusal(conv, in_place)
  if why is not None:
    module.note(PASS, f"%{conv.name} stays a convolution: {why}")
    return None
  per = _batch(conv) if in_place else _batch_per_chunk(conv)
  new = _rewrite_chunks(Builder.into(comp), conv, per, _padded_channels(
      conv, _gathered_bytes(module.patches_in_place, conv, module.patch_channel_bytes)))
  chunks = -(-_batch(conv) // per)
  module.note(PASS, f"%{conv.name} -> patches @ kernel (%{new.name})" + (
      f" in {chunks} batch chunks (a patch matrix of {_patch_bytes(conv)} bytes > "
      f"MAX_PATCH_BYTES)" if chunks > 1 else ""))
  return new


def _groups(conv: Instruction) -> int:
  a = conv.attrs
  return max(a.get("feature_group_count", 1), a.get("batch_group_count", 1))


def _group_refusal(conv: Instruction, kernel_flops: float = 0.0) -> str | None:
  """Why the grouped ``conv`` is not split into one ungrouped convolution per group, or None.

  Each group's product is a GEMM of ``contraction`` (kernel positions x the group's input
  channels) by ``columns`` (the group's output features).  A GEMM earns its patch matrix and
  its packing only where its tiles are filled: its micro-kernel (and a tensor-core
  instruction) spans at least ``MIN_GROUP_COLUMNS`` columns and a vector of ``MIN_GROUP_
  CONTRACTION`` steps along k.  Narrower groups (a depthwise convolution: one channel in, a
  few out) do the same products with less traffic as a direct convolution, which reads each
  input element once per kernel position and keeps the group's few sums in registers.  Each
  group is a kernel of its own: its product must also outweigh ``kernel_flops``, the work a
  kernel's fixed cost is worth on the backend (``Module.kernel_fixed_flops``), or many small
  groups spend more on launches than the direct convolution takes."""
  a = conv.attrs
  rhs, rspec = conv.operands[1], a["dimension_numbers"][1]
  g, bg = a.get("feature_group_count", 1), a.get("batch_group_count", 1)
  if g > 1 and bg > 1:
    return "both feature and batch groups"
  why = _refusal(conv, in_place=True)    # (each group's patch size: checked as it is lowered)
  if why is not None:
    return why
  groups = max(g, bg)
  positions = math.prod(rhs.dims[d] for d in rspec[2:])
  contraction = positions * rhs.dims[rspec[1]]        # (the kernel's input features: C / g)
  columns = rhs.dims[rspec[0]] // groups
  if contraction < MIN_GROUP_CONTRACTION or columns < MIN_GROUP_COLUMNS:
    return (f"{'feature' if g > 1 else 'batch'} groups ({groups}) of a {contraction}-long "
            f"contraction into {columns} outputs each: narrower than a GEMM's tiles "
            f"(MIN_GROUP_CONTRACTION {MIN_GROUP_CONTRACTION}, MIN_GROUP_COLUMNS "
            f"{MIN_GROUP_COLUMNS})")
  flops = 2 * math.prod(conv.dims) // groups * contraction
  if flops < kernel_flops:
    return (f"{groups} groups of {flops} flops each, less than a kernel's fixed cost "
            f"(kernel_fixed_flops {kernel_flops:g})")
  return None


def _group_outputs(conv: Instruction) -> tuple[int, int]:
  """A batch-grouped ``conv``'s group product's sides: (batch elements, output features) of
  each group."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, _ = a["dimension_numbers"]
  g = _groups(conv)
  return lhs.dims[lspec[0]] // g, rhs.dims[rspec[0]] // g


def _reduction_refusal(conv: Instruction) -> str | None:
  """Why the batch-grouped ``conv`` is not rewritten by ``_rewrite_as_reductions``, or None.

  A batch-grouped convolution (the weight gradient of a feature-grouped one: ``nb`` batch
  elements and ``og`` output features a group, a depthwise convolution's both 1) is, for
  each of its few output positions, a product per group of a [nb, L] window by an [L, og]
  kernel, L long (the input's spatial extent times its features).  Where one side is 1 (a
  matrix-vector product or a dot product) no operand element is used by both several rows
  and several columns: a GEMM saves at most half the reads of a reduction of elementwise
  products (which reads the larger operand once, the smaller ``nb * og`` times from cache) and
  fills at most ``max(nb, og)`` of its ``MIN_GROUP_COLUMNS``-wide tiles, the rest padding,
  after writing the patch matrix (on the GPU: a ``SimtDot`` over 231 MB for the 32x56x56x64
  depthwise 3x3 weight gradient, 8.70 ms on an H100) or looping over every output (the direct
  convolution: 51.55 ms there, 1168 ms on the CPU).  The products reduced over (batch,
  spatial, feature) read the input and the kernel in place, each output position's reduction
  a sibling of the others (``multi_output_fusion`` merges them into one pass): that weight
  gradient took 0.078 ms a call on an H100 (one ``ColumnReduce`` of all 9 taps, 50 us, and
  its finishes; JAX 0.09-0.12 ms) and 12.9 ms on the CPU (JAX 170-190 ms)."""
  a = conv.attrs
  lhs, rhs = conv.operands
  if a.get("batch_group_count", 1) <= 1 or a.get("feature_group_count", 1) > 1:
    return "not batch-grouped"
  if not all(hlo.is_float(np.dtype(x.dtype)) for x in (lhs, rhs, conv)):
    return "not real floats"
  if conv.shape.size == 0 or lhs.shape.size == 0 or rhs.shape.size == 0:
    return "empty"
  _, _, ospec = a["dimension_numbers"]
  if math.prod(conv.dims[d] for d in ospec[2:]) > MAX_SLICES:
    return "more output positions than MAX_SLICES"
  nb, og = _group_outputs(conv)
  if min(nb, og) > 1 or max(nb, og) >= MIN_GROUP_COLUMNS:
    return f"groups' products of {nb} x {og} outputs fill a GEMM's tiles"
  return None


def _rewrite_as_reductions(b: Builder, conv: Instruction) -> Instruction:
  """The batch-grouped ``conv`` (G groups of ``nb`` batch elements and ``og`` output features)
  as, for each output position p, the window of the padded input that p reads (a strided
  slice, in the input's own layout) times the kernel (transposed to that layout: its output
  features where the input has its batch, its input features where the input has its
  features), reduced over all but the batch dimension: [G] (nb = og = 1) or, both split into
  groups and broadcast to [..., G, nb, og, ...], [G, nb, og]; stacked over p, transposed to
  the convolution's output [nb, out..., G * og].  Products and sums in float32 at least (the
  operands converted), the result converted to the convolution's type."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, ospec = a["dimension_numbers"]
  nd = len(lspec) - 2
  strides, padding = a["window_strides"], a["padding"]
  ld, rd = a["lhs_dilation"], a["rhs_dilation"]
  G = a["batch_group_count"]
  nb, og = _group_outputs(conv)
  ksizes = [rhs.dims[rspec[2 + i]] for i in range(nd)]
  osizes = [conv.dims[ospec[2 + i]] for i in range(nd)]
  acc = np.dtype(np.float64 if np.float64 in (lhs.dtype, rhs.dtype, conv.dtype) else np.float32)
  x = lhs if np.dtype(lhs.dtype) == acc else b.convert(lhs, acc)
  w = rhs if np.dtype(rhs.dtype) == acc else b.convert(rhs, acc)
  rank = nd + 2
  config = [(0, 0, 0)] * rank
  for i, ((lo, hi), d) in enumerate(zip(padding, ld)):
    config[lspec[2 + i]] = (max(lo, 0), max(hi, 0), d - 1)
  if any(cfg != (0, 0, 0) for cfg in config):
    x = b.pad(x, b.constant(0, acc), config)
  crop = [-min(lo, 0) for lo, _ in padding]
  perm = [0] * rank                  # the kernel in the input's layout
  for j in range(rank):
    perm[lspec[j]] = rspec[j]
  if perm != list(range(rank)):
    w = b.transpose(w, perm)
  lb = lspec[0]
  split = nb > 1 or og > 1
  if split:                          # [..., G, nb, og, ...]: both split and broadcast
    full = list(w.dims[:lb]) + [G, nb, og] + list(w.dims[lb + 1:])
    keep = [d for d in range(rank + 2) if d not in (lb + 1, lb + 2)]
    w = b.reshape(w, list(w.dims[:lb]) + [G, og] + list(w.dims[lb + 1:]))
    w = b.broadcast(w, full, keep[:lb] + [lb, lb + 2] + keep[lb + 1:])
  kept = (lb, lb + 1, lb + 2) if split else (lb,)
  add = scalar_computation(b.computation.module, "add", acc)
  zero = b.constant(0, acc)
  parts = []
  for p in itertools.product(*(range(s) for s in osizes)):
    start, limit, step = [0] * rank, list(x.dims), [1] * rank
    for i in range(nd):
      d = lspec[2 + i]
      start[d] = p[i] * strides[i] + crop[i]
      limit[d] = start[d] + (ksizes[i] - 1) * rd[i] + 1
      step[d] = rd[i]
    win = b.slice(x, start, limit, step)
    if split:
      win = b.reshape(win, list(win.dims[:lb]) + [G, nb] + list(win.dims[lb + 1:]))
      win = b.broadcast(win, full, keep[:lb] + [lb, lb + 1] + keep[lb + 1:])
    prod = b.multiply(win, w)
    r = b.reduce(prod, zero, [d for d in range(len(prod.dims)) if d not in kept], add)
    parts.append(b.reshape(r, [1, G, nb, og]))
  y = parts[0] if len(parts) == 1 else b.concatenate(parts, 0)      # [P, G, nb, og]
  y = b.reshape(b.transpose(y, [2, 0, 1, 3]), [nb] + osizes + [G * og])
  if np.dtype(conv.dtype) != acc:
    y = b.convert(y, conv.dtype)
  return _to_output_layout(b, y, ospec, nd)


def _grouped_in_place(conv: Instruction, channel_bytes: int) -> bool:
  """Whether the grouped ``conv`` becomes one product batched over its groups whose patches a
  backend that reads them in place (``Module.patches_in_place``: the GPU's implicit GEMM,
  ``backends/cuda/implicit_gemm.py``) gathers for every group in one kernel: real floats, and
  feature groups (a forward convolution, an input gradient) with a slice per kernel position
  (``patch_layout`` "F") whose group's input channels fill whole ``channel_bytes`` (the
  16-byte copies; groups are not padded), or batch groups (a weight gradient: each group's
  rows of the patch matrix are consecutive, either layout).  Any group width: a narrow one
  fills a tensor-core tile poorly, but one kernel of poor tiles beats the direct loop (and the
  split's kernel per group).  Batch groups whatever their width, except matrix-vector ones,
  which ``run`` gives to ``_rewrite_as_reductions`` first (a depthwise weight gradient, one
  output feature a group, took 8.70 ms here as a ``SimtDot`` over a written patch matrix on an
  H100).  Feature groups too narrow for whole copies (a depthwise forward) are left to
  ``_group_refusal``."""
  a = conv.attrs
  lhs, rhs = conv.operands
  g, bg = a.get("feature_group_count", 1), a.get("batch_group_count", 1)
  if (g > 1) == (bg > 1):
    return False
  if not _gathered_type(lhs.dtype) or not hlo.is_float(np.dtype(conv.dtype)):
    return False
  in_place = _read_in_place(conv)
  if _refusal(conv, in_place=True) is not None or \
     (not in_place and _patch_bytes(conv) > MAX_PATCH_BYTES):
    return False
  if bg > 1:
    return True
  cg = rhs.dims[a["dimension_numbers"][1][1]]
  return patch_layout(conv) == "F" and (cg * np.dtype(lhs.dtype).itemsize) % channel_bytes == 0


def _rewrite_grouped(b: Builder, conv: Instruction, channel_bytes: int) -> Instruction:
  """The grouped ``conv`` (G groups) as one product batched over the groups, [G, rows, Og]
  from patches [G, rows, K] and the kernel as [G, Og, K] or [K, G, Og], transposed to the
  convolution's [N', out..., G * Og] (the output features group by group, as the convolution
  orders them).  Feature groups (Cg input features each): the patches of all channels
  (``_rewrite``'s slices, [N * out..., taps, C]) split into [G, N * out..., taps * Cg], the
  kernel into [G, Og, taps * Cg] (K-major).  Batch groups (N / G batch elements each): the
  patch matrix's rows, batch element first, split into G consecutive blocks (a reshape), the
  kernel's output features into [K, G, Og]."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, ospec = a["dimension_numbers"]
  nd = len(lspec) - 2
  feature = a.get("feature_group_count", 1) > 1
  G = a["feature_group_count"] if feature else a["batch_group_count"]
  n, c0 = lhs.dims[lspec[0]], lhs.dims[lspec[1]]
  ci, o = rhs.dims[rspec[1]], rhs.dims[rspec[0]]
  og = o // G
  ksizes = [rhs.dims[rspec[2 + i]] for i in range(nd)]
  osizes = [conv.dims[ospec[2 + i]] for i in range(nd)]
  taps, nb = math.prod(ksizes), n if feature else n // G
  m = nb * math.prod(osizes)               # rows of a group's matrix
  w = b.transpose(rhs, [rspec[2 + i] for i in range(nd)] + [rspec[1], rspec[0]])
  if feature:
    stacked = _stacked_slices(b, conv, c0)                     # [N, out..., taps, C]
    p = b.reshape(stacked, [m, taps, G, ci])
    patches = b.reshape(b.transpose(p, [2, 0, 1, 3]), [G, m, taps * ci])
    w = b.reshape(w, [taps, ci, G, og])
    w = b.reshape(b.transpose(w, [2, 3, 0, 1]), [G, og, taps * ci])   # (K-major per group)
    dims = ((2,), (2,), (0,), (0,))
  else:
    channels = _padded_channels(conv, _gathered_bytes(True, conv, channel_bytes))
    c = max(c0, channels)
    patches = b.reshape(_stacked_slices(b, conv, channels), [G, m, taps * c])
    if c > c0:
      w = b.pad(w, b.constant(0, rhs.dtype), [(0, 0, 0)] * nd + [(0, c - c0, 0), (0, 0, 0)])
    w = b.reshape(w, [taps * c, G, og])
    dims = ((2,), (0,), (0,), (1,))
  y = b.dot(patches, w, *dims, preferred_element_type=conv.dtype,
            operand_precision=a.get("operand_precision"))
  y = b.reshape(b.transpose(y, [1, 0, 2]), [nb] + osizes + [o])
  return _to_output_layout(b, y, ospec, nd)


def _split_groups(b: Builder, conv: Instruction) -> list[Instruction]:
  """One ungrouped convolution per group of ``conv`` (feature groups: a slice of the input's
  features; batch groups: a slice of its batch; each with its slice of the kernel's output
  features), in group order: their results, concatenated along the output features, are
  ``conv``'s."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, _ = a["dimension_numbers"]
  g = a.get("feature_group_count", 1)
  groups = _groups(conv)
  split = lspec[1] if g > 1 else lspec[0]
  per_in, per_out = lhs.dims[split] // groups, rhs.dims[rspec[0]] // groups
  attrs = dict(a, feature_group_count=1, batch_group_count=1)
  parts = []
  for i in range(groups):
    lo, llim = [0] * len(lhs.dims), list(lhs.dims)
    lo[split], llim[split] = i * per_in, (i + 1) * per_in
    ro, rlim = [0] * len(rhs.dims), list(rhs.dims)
    ro[rspec[0]], rlim[rspec[0]] = i * per_out, (i + 1) * per_out
    parts.append(b.emit("convolution", [b.slice(lhs, lo, llim), b.slice(rhs, ro, rlim)], attrs))
  return parts


def patch_layout(conv: Instruction) -> str:
  """How ``conv``'s patch matrix is built: ``"F"``, one slice per kernel position (rows the
  output positions, columns (kernel position, channel)), or ``"W"``, one window per output
  position where there are fewer of those than kernel positions (a weight gradient)."""
  rhs = conv.operands[1]
  _, rspec, ospec = conv.attrs["dimension_numbers"]
  positions = math.prod(rhs.dims[d] for d in rspec[2:])
  return "F" if positions <= math.prod(conv.dims[d] for d in ospec[2:]) else "W"


def _read_in_place(conv: Instruction) -> bool:
  """Whether a backend that reads patch matrices in place (``Module.patches_in_place``: the
  GPU's implicit GEMM) will read this one so: a forward layout (a slice per kernel position)
  of real values whose channels fill whole 16-byte copies.  Its patch matrix is never written,
  so its size does not matter."""
  lhs, rhs = conv.operands
  lspec, rspec, ospec = conv.attrs["dimension_numbers"]
  positions = math.prod(rhs.dims[d] for d in rspec[2:])
  out_spatial = math.prod(conv.dims[d] for d in ospec[2:])
  return _gathered_type(lhs.dtype) and positions <= out_spatial


def _gathered_type(dt) -> bool:
  """Whether patches of element type ``dt`` can be gathered in place: floats of 2 bytes or
  more (bfloat16, whose NumPy kind is not "f", included; not float8 yet)."""
  dt = np.dtype(dt)
  return hlo.is_float(dt) and dt.itemsize >= 2


def _gathered_bytes(in_place_backend: bool, conv: Instruction, channel_bytes: int) -> int:
  """What a kernel position's channels of ``conv``'s patches must fill (``_padded_channels``):
  ``channel_bytes`` where a backend that reads patches in place (``in_place_backend``) will
  gather them, either layout -- a forward one (``_read_in_place``) or a weight gradient's,
  whose channels are the batch (a bfloat16 batch of 4 padded to 8 with zeros, in the output
  gradient too: its patch matrix, 9 times the input for a 3x3 kernel, was written where the
  batch did not fill the copies) -- else 1 (no padding)."""
  if not in_place_backend or not _gathered_type(conv.operands[0].dtype):
    return 1
  return channel_bytes


def _padded_channels(conv: Instruction, multiple_bytes: int) -> int:
  """The input channels the patches are built with: a kernel position's channels must fill
  whole ``multiple_bytes`` (``Module.patch_channel_bytes`` where the patches are read in
  place: the GPU's 16-byte copies), so a few channels (an image's 3) are padded with zeros (in
  the weights too: the products they add are zeros)."""
  lhs = conv.operands[0]
  c = lhs.dims[conv.attrs["dimension_numbers"][0][1]]
  per = max(1, multiple_bytes // np.dtype(lhs.dtype).itemsize)
  return -(-c // per) * per


def _refusal(conv: Instruction, in_place: bool = False) -> str | None:
  """Why the ungrouped ``conv`` is not rewritten, or None (``in_place``: its patches are never
  written)."""
  a = conv.attrs
  lhs, rhs = conv.operands
  if any(np.dtype(x.dtype).kind == "c" for x in (lhs, rhs, conv)):
    return "complex"
  lspec, rspec, ospec = a["dimension_numbers"]
  positions = math.prod(rhs.dims[d] for d in rspec[2:])
  out_spatial = math.prod(conv.dims[d] for d in ospec[2:])
  if min(positions, out_spatial) > MAX_SLICES:
    return (f"{positions} kernel positions and {out_spatial} output positions, both > "
            f"MAX_SLICES")
  patch = _patch_bytes(conv) // max(1, _batch(conv))
  if patch > MAX_PATCH_BYTES and not in_place:
    return f"a patch matrix of {patch} bytes per batch element > MAX_PATCH_BYTES"
  if conv.shape.size == 0 or lhs.shape.size == 0 or rhs.shape.size == 0:
    return "empty"
  return None


def _patch_bytes(conv: Instruction) -> int:
  """Bytes of the patch matrix of the whole convolution."""
  lhs, rhs = conv.operands
  lspec, rspec, ospec = conv.attrs["dimension_numbers"]
  positions = math.prod(rhs.dims[d] for d in rspec[2:])
  out_spatial = math.prod(conv.dims[d] for d in ospec[2:])
  return (lhs.dims[lspec[0]] * out_spatial * positions * lhs.dims[lspec[1]]
          * np.dtype(lhs.dtype).itemsize)


def _batch(conv: Instruction) -> int:
  return conv.operands[0].dims[conv.attrs["dimension_numbers"][0][0]]


def _batch_per_chunk(conv: Instruction) -> int:
  """Batch elements per chunk, so that each chunk's patch matrix fits MAX_PATCH_BYTES (the
  batch dimension is independent: out[n] depends on lhs[n] alone); the whole batch when the
  patch matrix fits as it is."""
  n = _batch(conv)
  chunks = min(n, max(1, -(-_patch_bytes(conv) // MAX_PATCH_BYTES)))
  return -(-n // chunks)


def _rewrite_chunks(b: Builder, conv: Instruction, per: int, channels: int) -> Instruction:
  """``_rewrite`` of the convolution, or of slices of ``per`` batch elements (each a
  convolution of its own, rewritten, the results concatenated along the output's batch
  dimension: each chunk's patch matrix is a temporary of its own, built just before its
  product)."""
  lhs, rhs = conv.operands
  lspec, _, ospec = conv.attrs["dimension_numbers"]
  n = _batch(conv)
  if per >= n:
    return _rewrite(b, conv, channels)
  outs = []
  for i0 in range(0, n, per):
    start = [0] * len(lhs.dims)
    limit = list(lhs.dims)
    start[lspec[0]], limit[lspec[0]] = i0, min(n, i0 + per)
    part = b.emit("convolution", [b.slice(lhs, start, limit), rhs], dict(conv.attrs))
    outs.append(_rewrite(b, part, channels))
    b.computation.remove(part)
  return b.concatenate(outs, ospec[0])


def _rewrite(b: Builder, conv: Instruction, channels: int) -> Instruction:
  """``conv`` as patches @ kernel, its input channels zero-padded to ``channels``."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, ospec = a["dimension_numbers"]
  nd = len(lspec) - 2
  n, c0 = lhs.dims[lspec[0]], lhs.dims[lspec[1]]
  c = max(c0, channels)
  o = rhs.dims[rspec[0]]
  osizes = [conv.dims[ospec[2 + i]] for i in range(nd)]
  positions = math.prod(rhs.dims[rspec[2 + i]] for i in range(nd))
  stacked = _stacked_slices(b, conv, channels)
  patches = b.reshape(stacked, [n * math.prod(osizes), positions * c])
  w = b.transpose(rhs, [rspec[2 + i] for i in range(nd)] + [rspec[1], rspec[0]])
  if c > c0:
    w = b.pad(w, b.constant(0, rhs.dtype), [(0, 0, 0)] * nd + [(0, c - c0, 0), (0, 0, 0)])
  w = b.reshape(w, [positions * c, o])
  y = b.dot(patches, w, (1,), (0,), preferred_element_type=conv.dtype,
            operand_precision=a.get("operand_precision"))
  y = b.reshape(y, [n] + osizes + [o])
  return _to_output_layout(b, y, ospec, nd)


def _stacked_slices(b: Builder, conv: Instruction, channels: int) -> Instruction:
  """The patch matrix before its final reshape: the input made channels-last, its channels
  zero-padded to ``channels``, padded and dilated, then one strided slice per kernel position
  (layout "F": [N, out..., taps, C]) or one window per output position (layout "W":
  [N, out positions, taps * C]), concatenated."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, ospec = a["dimension_numbers"]
  nd = len(lspec) - 2
  strides, padding = a["window_strides"], a["padding"]
  ld, rd = a["lhs_dilation"], a["rhs_dilation"]
  n, c = lhs.dims[lspec[0]], lhs.dims[lspec[1]]
  ksizes = [rhs.dims[rspec[2 + i]] for i in range(nd)]
  osizes = [conv.dims[ospec[2 + i]] for i in range(nd)]
  # channels-last input, padded and dilated (negative padding: cropped by the slices); the
  # channels padded first, so that the transpose (a weight gradient's, which makes the batch
  # the channels) writes the padded input in one pass
  c0, c = c, max(c, channels)
  x = lhs
  if c > c0:
    cfg = [(0, 0, 0)] * (nd + 2)
    cfg[lspec[1]] = (0, c - c0, 0)
    x = b.pad(x, b.constant(0, lhs.dtype), cfg)
  x = b.transpose(x, [lspec[0]] + [lspec[2 + i] for i in range(nd)] + [lspec[1]])
  config = [(0, 0, 0)] + [(max(lo, 0), max(hi, 0), d - 1)
                          for (lo, hi), d in zip(padding, ld)] + [(0, 0, 0)]
  if any(cfg != (0, 0, 0) for cfg in config):
    x = b.pad(x, b.constant(0, lhs.dtype), config)
  crop = [-min(lo, 0) for lo, _ in padding]
  positions = math.prod(ksizes)
  if patch_layout(conv) == "F":
    # one strided slice per kernel position k: every output position's element k
    parts = []
    for k in itertools.product(*(range(s) for s in ksizes)):
      start = [0] + [k[i] * rd[i] + crop[i] for i in range(nd)] + [0]
      limit = [n] + [start[1 + i] + (osizes[i] - 1) * strides[i] + 1 for i in range(nd)] + [c]
      part = b.slice(x, start, limit, [1] + list(strides) + [1])
      parts.append(b.reshape(part, [n] + osizes + [1, c]))
    axis = nd + 1
  else:
    # (a weight gradient: the kernel is the big operand) one window per output position p
    parts = []
    for p in itertools.product(*(range(s) for s in osizes)):
      start = [0] + [p[i] * strides[i] + crop[i] for i in range(nd)] + [0]
      limit = [n] + [start[1 + i] + (ksizes[i] - 1) * rd[i] + 1 for i in range(nd)] + [c]
      part = b.slice(x, start, limit, [1] + list(rd) + [1])
      parts.append(b.reshape(part, [n, 1, positions * c]))
    axis = 1
  return parts[0] if len(parts) == 1 else b.concatenate(parts, axis)


def _to_output_layout(b: Builder, y: Instruction, ospec, nd: int) -> Instruction:
  """``y`` [N, out..., O] transposed to the convolution's output layout ``ospec``."""
  perm = [0] * (nd + 2)
  perm[ospec[0]], perm[ospec[1]] = 0, nd + 1
  for i in range(nd):
    perm[ospec[2 + i]] = 1 + i
  return b.transpose(y, perm)


def _phase_refusal(conv: Instruction, channel_bytes: int) -> str | None:
  """Why the lhs-dilated ``conv`` is not split by output phase (``_split_phases``), or None.

  An lhs-dilated convolution (the input gradient of a strided one, a transposed convolution)
  reads an input with ``d - 1`` zeros between neighbours along each dilated dimension: written
  as a patch matrix, ``1 - 1/d`` of each dilated dimension's columns are those zeros (3/4 of a
  stride-2 3x3 convolution's input gradient), multiplied like any other; the GPU's implicit
  GEMM cannot gather them either (the matcher takes no interior padding), so the zeros were
  written too.  Split by the output position's remainder modulo ``d`` (its phase), each phase
  reads only the kernel positions that meet input elements, from the undilated input: a plain
  convolution of a strided slice of the kernel, whose patches are read in place.  Refused: no
  lhs dilation, window strides on a dilated dimension (the phases' positions would not be
  one strided slice), batch groups, complex values, feature groups that would not be gathered
  in place (``_grouped_in_place``: a depthwise input gradient stays one direct
  convolution)."""
  a = conv.attrs
  lhs, rhs = conv.operands
  ld, strides = a["lhs_dilation"], a["window_strides"]
  if all(d == 1 for d in ld):
    return "no lhs dilation"
  if any(d > 1 and s != 1 for d, s in zip(ld, strides)):
    return "window strides on an lhs-dilated dimension"
  if a.get("batch_group_count", 1) > 1:
    return "batch groups"
  if not all(hlo.is_float(np.dtype(x.dtype)) for x in (lhs, rhs, conv)):
    return "not real floats"
  if conv.shape.size == 0 or lhs.shape.size == 0 or rhs.shape.size == 0:
    return "empty"
  if a.get("feature_group_count", 1) > 1:
    cg = rhs.dims[a["dimension_numbers"][1][1]]
    if not _gathered_type(lhs.dtype) or (cg * np.dtype(lhs.dtype).itemsize) % channel_bytes:
      return "feature groups whose patches are not gathered in place"
  return None


def _dim_phases(size, k, rd, d, lo, out):
  """Per output phase r (0 <= r < d) of one spatial dimension of an lhs-dilated convolution
  (input ``size`` long, kernel ``k`` positions at dilation ``rd``, lhs dilation ``d``, low
  padding ``lo``, ``out`` output positions, window stride 1): None where no kernel position
  meets an input element (or the phase has no output position), else (first kernel position,
  kernel step, taps, the phase's rhs dilation, its low and high padding, its output
  positions).  Output position ``o = d q + r`` and kernel position ``k`` read dilated position
  ``o + k rd - lo``, an input element where that is a multiple of ``d``: the kernel positions
  ``ks`` of the phase are every ``step``-th from the first, and they read input ``q + e0 +
  j rd'`` (tap ``j``), a convolution of the undilated input padded by ``-e0`` at the low end."""
  phases = []
  for r in range(d):
    q = -(-(out - r) // d)
    ks = [t for t in range(k) if (r + t * rd - lo) % d == 0]
    if q <= 0 or not ks:
      phases.append(None)
      continue
    step = ks[1] - ks[0] if len(ks) > 1 else 1
    rd2 = step * rd // d if len(ks) > 1 else 1
    e0 = (r + ks[0] * rd - lo) // d
    taps = len(ks)
    phases.append((ks[0], step, taps, rd2, -e0, q + (taps - 1) * rd2 - size + e0, q))
  return phases


def _split_phases(b: Builder, conv: Instruction) -> tuple[Instruction, list[Instruction]]:
  """``conv`` (lhs-dilated, ``_phase_refusal`` None) as one undilated convolution per output
  phase (``_dim_phases`` per dimension; a phase no kernel position meets is zeros), their
  results interleaved into the convolution's: each padded to ``ceil(out / d)`` positions along
  each dilated dimension, given a unit axis after it, concatenated along those axes
  ([..., ceil(out / d), d, ...]), reshaped to [..., ceil(out / d) * d, ...] (position q d + r:
  phase r's q) and sliced to ``out``.  Returns (the result, the phases' convolutions)."""
  a = conv.attrs
  lhs, rhs = conv.operands
  lspec, rspec, ospec = a["dimension_numbers"]
  nd = len(lspec) - 2
  ld, rd, padding = a["lhs_dilation"], a["rhs_dilation"], a["padding"]
  strides = a["window_strides"]
  per_dim = []
  for i in range(nd):
    size, k = lhs.dims[lspec[2 + i]], rhs.dims[rspec[2 + i]]
    out = conv.dims[ospec[2 + i]]
    if ld[i] == 1:
      per_dim.append([(0, 1, k, rd[i], padding[i][0], padding[i][1], out)])
    else:
      per_dim.append(_dim_phases(size, k, rd[i], ld[i], padding[i][0], out))
  qmax = [-(-conv.dims[ospec[2 + i]] // ld[i]) for i in range(nd)]
  results, convs = {}, []
  for phase in itertools.product(*(range(len(p)) for p in per_dim)):
    dims = list(conv.dims)
    for i in range(nd):
      dims[ospec[2 + i]] = qmax[i]
    parts = [per_dim[i][r] for i, r in enumerate(phase)]
    if any(p is None for p in parts):
      results[phase] = b.full(0, conv.shape.with_dims(dims))
      continue
    start, limit, step = [0] * len(rhs.dims), list(rhs.dims), [1] * len(rhs.dims)
    for i, (k0, kstep, taps, *_) in enumerate(parts):
      d = rspec[2 + i]
      start[d], limit[d], step[d] = k0, k0 + (taps - 1) * kstep + 1, kstep
    w = rhs if limit == list(rhs.dims) and all(s == 1 for s in step) and not any(start) \
        else b.slice(rhs, start, limit, step)
    attrs = dict(a, lhs_dilation=(1,) * nd, rhs_dilation=tuple(p[3] for p in parts),
                 padding=tuple((p[4], p[5]) for p in parts),
                 window_strides=tuple(strides[i] if ld[i] == 1 else 1 for i in range(nd)))
    y = b.emit("convolution", [lhs, w], attrs)
    convs.append(y)
    short = [(0, 0, 0)] * len(dims)
    for i, p in enumerate(parts):
      short[ospec[2 + i]] = (0, qmax[i] - p[6], 0)
    if any(c != (0, 0, 0) for c in short):
      y = b.pad(y, b.constant(0, conv.dtype), short)
    results[phase] = y
  # interleave: a unit axis after each dilated spatial axis of the output, concatenated
  axes = sorted(ospec[2 + i] for i in range(nd) if ld[i] > 1)
  wide = []
  for ax in range(len(conv.dims)):
    wide.append(qmax[ospec.index(ax) - 2] if ax in axes else conv.dims[ax])
    if ax in axes:
      wide.append(1)
  unit = {ax: ax + 1 + axes.index(ax) for ax in axes}    # the unit axis after each

  def join(prefix, level):
    if level == nd:
      return b.reshape(results[prefix], wide)
    i = level
    pieces = [join(prefix + (r,), level + 1) for r in range(len(per_dim[i]))]
    if ld[i] == 1:
      return pieces[0]
    return b.concatenate(pieces, unit[ospec[2 + i]])
  full = join((), 0)
  dims = []
  for ax in range(len(conv.dims)):
    dims.append(qmax[ospec.index(ax) - 2] * ld[ospec.index(ax) - 2] if ax in axes
                else conv.dims[ax])
  y = b.reshape(full, dims)
  if tuple(dims) != tuple(conv.dims):
    y = b.slice(y, [0] * len(dims), conv.dims)
  return y, convs
