"""The algebraic simplifier's rules that move reshapes, broadcasts and (on the GPU) a grouped
product's swap below elementwise ops (XLA's ReshapeMover), tried on every elementwise
instruction (``simplify.ELEMENTWISE_RULES``)."""
from __future__ import annotations

from ourjax.lowering import hlo
from ourjax.lowering.passes.simplify_values import _scalar_operand, splat_value

def sink_broadcast(instr, ctx):
  """op(broadcast(s), broadcast(t)) -> broadcast(op(s, t))"""
  ops = instr.operands
  if not ops or any(o.opcode != "broadcast" for o in ops):
    return None
  first = ops[0]
  dims = first.attrs["dimensions"]
  inner = first.operands[0].shape.dims
  if any(o.attrs["dimensions"] != dims or o.operands[0].shape.dims != inner for o in ops):
    return None
  if first.operands[0].shape.size >= instr.shape.size:
    return None
  small = ctx.b.emit(instr.opcode, [o.operands[0] for o in ops], instr.attrs,
                     instr.shape.with_dims(inner))
  return ctx.b.broadcast(small, instr.dims, dims)


def _kept_broadcast_dims(o, src, dst):
  """For ``o`` = broadcast(v) of shape ``dst``: the dimensions of ``src`` its operand maps to
  when each dimension it broadcasts along is one a reshape ``src -> dst`` keeps as it is (a
  group of one dimension of the same size on both sides), else None."""
  if o.opcode != "broadcast":
    return None
  groups = hlo.reshape_groups(src, dst)
  if groups is None:
    return None
  kept = {}
  for (s0, s1), (d0, d1) in groups:
    real_s = [k for k in range(s0, s1) if src[k] != 1]
    real_d = [k for k in range(d0, d1) if dst[k] != 1]
    if len(real_s) == len(real_d) == 1 and src[real_s[0]] == dst[real_d[0]]:
      kept[real_d[0]] = real_s[0]
  out = []
  for d, n in zip(o.attrs["dimensions"], o.operands[0].dims):
    if n == 1:
      continue
    if d not in kept:
      return None
    out.append(kept[d])
  return out if out == sorted(out) else None


def _epilogue_module(ctx) -> bool:
  """Whether the module's backend runs dots' elementwise consumers in the dot's kernel and reads
  convolution patches in place (the GPU): the rules that bring a grouped convolution's
  per-channel epilogue next to its product apply there (``sink_reshape``'s whole-group
  broadcasts, ``sink_group_transpose``)."""
  m = ctx.comp.module
  return bool(getattr(m, "dot_epilogues", False) and getattr(m, "patches_in_place", False))


def _group_broadcast_dims(o, src, dst):
  """For ``o`` = broadcast(v) of shape ``dst``: the dimensions of ``src`` that v, reshaped to
  them, maps to when ``o`` broadcasts along whole groups of a reshape ``src -> dst`` (each
  group holding one of v's dimensions has all its dimensions of size > 1 in v, in order: a
  per-channel vector of [N, H, W, G * Og] seen over [N * H * W, G, Og]), else None."""
  if o.opcode != "broadcast":
    return None
  groups = hlo.reshape_groups(src, dst)
  if groups is None:
    return None
  dims = [d for d, n in zip(o.attrs["dimensions"], o.operands[0].dims) if n != 1]
  if dims != sorted(dims):
    return None
  out = []
  used = set()
  for (s0, s1), (d0, d1) in groups:
    real_d = [k for k in range(d0, d1) if dst[k] != 1]
    mine = [k for k in real_d if k in dims]
    if not mine:
      continue
    if mine != real_d:
      return None
    out.extend(k for k in range(s0, s1) if src[k] != 1)
    used.update(mine)
  if used != set(dims):
    return None
  return out


def sink_group_transpose(instr, ctx):
  """op(transpose(d, 1-0-2), broadcast(v)) -> transpose(op(d, broadcast(v)), 1-0-2) where d is
  a batched dot's [G, rows, Og] result (or an elementwise value of it read only here), in a
  module whose backend runs dots' consumers as their epilogues (``_epilogue_module``)."""
  # A grouped convolution's product (conv_to_dot._rewrite_grouped) is [G, rows, Og], its
  # output that with the first two dimensions swapped: with the swap below the scale, shift
  # and relu, those are the dot's epilogue, and the GPU's dot stores its result in the swapped
  # order itself (cuda/fold_transposes.py), one pass over the output instead of two.
  if not _epilogue_module(ctx):
    return None
  src = None
  for o in instr.operands:
    if o.opcode == "transpose":
      if tuple(o.attrs["dimensions"]) != (1, 0, 2) or src is not None or len(o.users) != 1:
        return None
      src = o.operands[0]
  if src is None or not _of_batched_dot(src):
    return None
  perm = (1, 0, 2)
  ops = []
  for o in instr.operands:
    if o.opcode == "transpose":
      ops.append(src)
    elif splat_value(o) is not None:
      ops.append(ctx.b.full(splat_value(o), o.shape.with_dims(src.dims)))
    elif o.opcode == "broadcast":
      dims = tuple(perm[d] for d in o.attrs["dimensions"])
      if list(dims) != sorted(dims):
        return None
      ops.append(ctx.b.broadcast(o.operands[0], src.dims, dims))
    else:
      return None
  inner = ctx.b.emit(instr.opcode, ops, instr.attrs, instr.shape.with_dims(src.dims))
  return ctx.b.transpose(inner, perm)


def _of_batched_dot(x, depth: int = 8) -> bool:
  """Whether ``x`` is a dot with one batch dimension and one free dimension each side, or an
  elementwise value of one (within ``depth`` steps, each step read only by the next)."""
  if x.opcode == "dot":
    a = x.attrs
    return len(x.dims) == 3 and len(a["lhs_batch_dims"]) == 1
  if depth <= 0 or not x.is_elementwise():
    return False
  return any(o.dims == x.dims and len(o.users) == 1 and _of_batched_dot(o, depth - 1)
             for o in x.operands)


def sink_reshape(instr, ctx):
  """op(reshape(a), reshape(b)) -> reshape(op(a, b)) for a, b of one shape (scalar operands too,
  and broadcasts along dimensions the reshape keeps)"""
  # Moves reshapes below elementwise ops (XLA's ReshapeMover), so that chains such as
  # mean(x, keepdims=True) -> rsqrt(var + eps) compute on the reduction's own shape and the
  # reshapes on both sides meet and cancel; a row reduction then feeds its consumers directly,
  # and a GEMM (a convolution's, through its [N*H*W, O] -> [N, H, W, O] reshape) its
  # per-channel scale, shift and activation as its epilogue.
  src = None
  for o in instr.operands:
    if o.opcode == "reshape":
      dims = o.operands[0].dims
      if src is not None and dims != src:
        return None
      src = dims
  if src is None:
    return None
  kept = {}         # broadcast operand -> the dimensions of src it maps to
  for o in instr.operands:
    if o.opcode != "reshape" and splat_value(o) is None and _scalar_operand(o) is None:
      kept[o] = _kept_broadcast_dims(o, src, instr.dims)
      if kept[o] is None and _epilogue_module(ctx):
        kept[o] = _group_broadcast_dims(o, src, instr.dims)
      if kept[o] is None:
        return None
  ops = []
  for o in instr.operands:
    if o.opcode == "reshape":
      ops.append(o.operands[0])
    elif o in kept:
      v = o.operands[0]
      keep = [src[d] for d in kept[o]]
      if list(v.dims) != keep:
        v = ctx.b.reshape(v, keep)
      ops.append(ctx.b.broadcast(v, src, tuple(kept[o])))
    elif splat_value(o) is not None:
      ops.append(ctx.b.full(splat_value(o), o.shape.with_dims(src)))
    else:
      s = _scalar_operand(o)
      s = ctx.b.reshape(s, ()) if s.shape.rank else s
      ops.append(ctx.b.broadcast(s, src, ()))
  inner = ctx.b.emit(instr.opcode, ops, instr.attrs, instr.shape.with_dims(src))
  return ctx.b.reshape(inner, instr.dims)
