"""The ``Emitter`` class of the elemental emitter: the value of an HLO instruction at a
multi-index, as LLVM IR (see ``emitter.py``, whose helpers it is built on, for the compute
types, indices, loads, stores and scalar arithmetic).  Split from ``emitter.py`` along that
seam; ``emitter.Emitter`` (and the other names here) stay importable from there."""
from __future__ import annotations

import math as _pymath

import llvmlite.ir as ir
import numpy as np

from ourjax.backends.llvm.emitter import (  # noqa: F401  (the helpers it is built on)
    ANY, BOOL, BRANCHY_CONCAT_PARTS, i64, EmitterError, F32, F64, ForLoop, I1, Index, Leaf,
    PrefetchMiss, _clamp_i64, _fmax, _fmin, _imax, _imin, _index_value, _is_float, _is_signed,
    _window_source, alloca_entry, binary_op, compare_op, const, convert_value, delinearize,
    from_storage, linearize, load_element, reassociating_combine, simple_reducer, storage_type,
    to_storage, unary_op)
from ourjax.lowering import hlo


def concat_parts(instr) -> tuple:
  """(dimension, [(operand, offset, size)]) of a concatenate: its non-empty parts, each with
  its offset along the concatenated dimension."""
  d = instr.attrs["dimensions"][0]
  parts, offset = [], 0
  for x in instr.operands:
    n = x.dims[d]
    if n:
      parts.append((x, offset, n))
    offset += n
  return d, parts


class Emitter:
  """Emits element values of the instructions of one computation.

  ``leaves`` maps instructions (parameters, and any instruction a kernel materialised) to
  ``Leaf``s; everything else is computed from its operands.  ``reduce_ok`` decides whether a
  ``reduce`` reached while evaluating may be emitted as a loop right there: ``ANY`` (the
  default), or the one reduction a kernel is prefetching (any other raises ``PrefetchMiss``,
  so a reduction can never silently be recomputed per element)."""

  def __init__(self, b: ir.IRBuilder, leaves: dict, fast_reductions: bool = True):
    self.b = b
    self.leaves = dict(leaves)
    self.scopes: list[dict] = [{}]
    self.fast_reductions = fast_reductions
    # which reduce may be emitted as a loop here: ANY, or the one instruction being prefetched
    self.reduce_ok = ANY
    # id(instr) -> row_cache.RowCache: stored while it fills, loaded once filled (a rows-mode
    # LoopKernel's; see llvm/row_cache.py)
    self.row_caches: dict = {}
    # id(i64 value) -> (lo, hi): a loop index known to lie in [lo, hi) (a rows-mode LoopKernel's
    # column segment, and the positions slices and concatenate parts move it to: _shifted), so
    # that a concatenate along it evaluates only the part holding [lo, hi)
    self.ranges: dict = {}

  # -- memo scopes -----------------------------------------------------------------------------
  def push_scope(self):
    self.scopes.append({})

  def pop_scope(self):
    self.scopes.pop()

  def _lookup(self, key):
    for s in reversed(self.scopes):
      v = s.get(key)
      if v is not None:
        return v
    return None

  def remember(self, instr, index: Index, value):
    self.scopes[-1][(id(instr), index.key)] = value

  # -- entry point -----------------------------------------------------------------------------
  def value(self, instr: hlo.Instruction, index: Index):
    """The element of ``instr`` at ``index`` (a compute value, or a tuple of them for a
    tuple-shaped instruction)."""
    key = (id(instr), index.key)
    v = self._lookup(key)
    if v is not None:
      return v
    cache = self.row_caches.get(id(instr)) if self.row_caches else None
    if cache is not None and cache.filled:
      v = self.b.load(cache.element(self.b, index))
    else:
      v = self._compute(instr, index)
      if cache is not None and cache.filling:
        self.b.store(v, cache.element(self.b, index))
    self.scopes[-1][key] = v
    return v

  def scalar(self, instr):
    return self.value(instr, Index.scalar(self.b))

  def _compute(self, instr, index):
    b = self.b
    leaf = self.leaves.get(instr)
    if leaf is not None:
      if isinstance(leaf, tuple):
        return tuple(load_element(b, x.ptr, index.linear, x.dtype) for x in leaf)
      if leaf.value is not None:
        return leaf.value
      return load_element(b, leaf.ptr, index.linear if leaf.dims == index.dims else
                          Index(b, leaf.dims, multi=index.multi).linear, leaf.dtype)
    op = instr.opcode
    dt = instr.dtype
    if op in hlo.UNARY_OPS:
      x = self.value(instr.operands[0], index)
      return unary_op(b, op, x, instr.operands[0].dtype)
    if op in hlo.BINARY_OPS:
      x = self.value(instr.operands[0], index)
      y = self.value(instr.operands[1], index)
      return binary_op(b, op, x, y, dt)
    handler = getattr(self, "_op_" + op.replace("-", "_"), None)
    if handler is None:
      raise EmitterError(f"no elemental emitter for {op}")
    return handler(instr, index)

  # -- leaves and constants ----------------------------------------------------------------------
  def _op_parameter(self, instr, index):
    raise EmitterError(f"parameter %{instr.name} is not bound to a buffer or value")

  def _op_constant(self, instr, index):
    v = instr.attrs["value"]
    if v.ndim == 0:
      return const(v.dtype, v[()])
    if v.size and np.all(v == v.flat[0]) and not (
        _is_float(v.dtype) and np.any(np.signbit(v) != np.signbit(v.flat[0]))):
      if not _is_float(v.dtype) or not np.isnan(v.flat[0]):
        return const(v.dtype, v.flat[0])
    raise EmitterError(f"array constant %{instr.name} is not bound to a buffer")

  def _op_iota(self, instr, index):
    d = instr.attrs["iota_dimension"]
    return convert_value(self.b, index.multi[d], np.dtype(np.int64), instr.dtype)

  # -- elementwise -------------------------------------------------------------------------------
  def _op_compare(self, instr, index):
    x, y = (self.value(o, index) for o in instr.operands)
    return compare_op(self.b, instr.attrs["direction"], x, y, instr.operands[0].dtype,
                      instr.attrs.get("type") == "TOTALORDER")

  def _op_select(self, instr, index):
    p, t, f = (self.value(o, index) for o in instr.operands)
    return self.b.select(p, t, f)

  def _op_clamp(self, instr, index):
    lo_i, x_i, hi_i = instr.operands
    x = self.value(x_i, index)
    lo = self.value(lo_i, index if lo_i.dims else Index.scalar(self.b))
    hi = self.value(hi_i, index if hi_i.dims else Index.scalar(self.b))
    dt = instr.dtype
    if _is_float(dt):
      return _fmin(self.b, _fmax(self.b, x, lo), hi)
    s = _is_signed(dt)
    return _imin(self.b, _imax(self.b, x, lo, s), hi, s)

  def _op_convert(self, instr, index):
    x = self.value(instr.operands[0], index)
    return convert_value(self.b, x, instr.operands[0].dtype, instr.dtype)

  def _op_bitcast_convert(self, instr, index):
    b = self.b
    src_i = instr.operands[0]
    src, dst = src_i.dtype, instr.dtype
    a, w = src.itemsize, dst.itemsize
    dty = storage_type(dst)
    if a == w:
      bits = to_storage(b, self.value(src_i, index), src)
      return from_storage(b, b.bitcast(bits, dty), dst)
    ity_src, ity_dst = ir.IntType(8 * a), ir.IntType(8 * w)
    if a > w:   # narrower: one extra trailing dimension
      k = index.multi[-1]
      inner = Index(b, src_i.dims, multi=index.multi[:-1])
      bits = b.bitcast(to_storage(b, self.value(src_i, inner), src), ity_src)
      shift = b.trunc(b.mul(k, i64(8 * w)), ity_src) if a < 8 else b.mul(k, i64(8 * w))
      part = b.trunc(b.lshr(bits, shift), ity_dst)
      return from_storage(b, b.bitcast(part, dty), dst)
    acc = ir.Constant(ity_dst, 0)
    for k in range(w // a):
      inner = Index(b, src_i.dims, multi=list(index.multi) + [i64(k)])
      bits = b.bitcast(to_storage(b, self.value(src_i, inner), src), ity_src)
      acc = b.or_(acc, b.shl(b.zext(bits, ity_dst), ir.Constant(ity_dst, 8 * a * k)))
    return from_storage(b, b.bitcast(acc, dty), dst)

  # -- structural ------------------------------------------------------------------------------
  def _op_broadcast(self, instr, index):
    x = instr.operands[0]
    dims = instr.attrs["dimensions"]
    if x.dims == instr.dims and tuple(dims) == tuple(range(len(x.dims))):
      return self.value(x, index)
    multi = [index.multi[d] if n != 1 else i64(0) for d, n in zip(dims, x.dims)]
    return self.value(x, Index(self.b, x.dims, multi=multi))

  def _op_reshape(self, instr, index):
    """The operand's index group by group (``hlo.reshape_groups``): dimensions a reshape keeps,
    adds or drops (size 1) map directly; only a group it really splits or merges goes
    through that group's linear index (one division per operand dimension of the group, not
    one per dimension of the whole array)."""
    x = instr.operands[0]
    if x.dims == instr.dims:
      return self.value(x, index)
    groups = hlo.reshape_groups(x.dims, instr.dims)
    if groups is None:
      return self.value(x, Index(self.b, x.dims, linear=index.linear))
    b = self.b
    multi = []
    for (s0, s1), (d0, d1) in groups:
      src, dst = x.dims[s0:s1], instr.dims[d0:d1]
      src_real = [k for k in range(s0, s1) if x.dims[k] != 1]
      dst_real = [k for k in range(d0, d1) if instr.dims[k] != 1]
      if [x.dims[k] for k in src_real] == [instr.dims[k] for k in dst_real]:
        real = dict(zip(src_real, (index.multi[k] for k in dst_real)))
        multi.extend(real.get(k, i64(0)) for k in range(s0, s1))
      else:
        lin = linearize(b, index.multi[d0:d1], dst)
        multi.extend(delinearize(b, lin, src))
    # (a reshape keeps the linear index: one the index already has is the operand's too, so
    # an element read at it is not at the linear index rebuilt from the groups' divisions)
    return self.value(x, Index(b, x.dims, linear=index._linear, multi=multi))

  def _op_copy(self, instr, index):
    return self.value(instr.operands[0], index)

  def _op_transpose(self, instr, index):
    x = instr.operands[0]
    perm = instr.attrs["dimensions"]
    multi = [None] * len(perm)
    for i, p in enumerate(perm):
      multi[p] = index.multi[i]
    return self.value(x, Index(self.b, x.dims, multi=multi))

  def _op_slice(self, instr, index):
    b = self.b
    x = instr.operands[0]
    a = instr.attrs
    strides = a.get("strides") or (1,) * len(x.dims)
    multi = []
    for m, s, st in zip(index.multi, a["start_indices"], strides):
      v = m if st == 1 else b.mul(m, i64(st), flags=["nuw", "nsw"])
      if s:
        w = b.add(v, i64(s), flags=["nuw", "nsw"])
        self._shifted(m, w, s if st == 1 else None)
        v = w
      multi.append(v)
    return self.value(x, Index(b, x.dims, multi=multi))

  def _shifted(self, pos, new, shift) -> None:
    """Record that index ``new`` is ``pos + shift`` where ``pos``'s range is known
    (``ranges``); ``shift`` None: unknown."""
    if shift is None or not self.ranges:
      return
    known = self.ranges.get(id(pos))
    if known is not None:
      self.ranges[id(new)] = (known[0] + shift, known[1] + shift)

  def _starts(self, idx_instrs, operand_dims, sizes):
    b = self.b
    out = []
    for ins, n, k in zip(idx_instrs, operand_dims, sizes):
      s = _index_value(b, self.scalar(ins), ins.dtype)
      out.append(_clamp_i64(b, s, 0, n - k))
    return out

  def _op_dynamic_slice(self, instr, index):
    b = self.b
    x = instr.operands[0]
    starts = self._starts(instr.operands[1:], x.dims, instr.attrs["dynamic_slice_sizes"])
    multi = [b.add(m, s, flags=["nsw"]) for m, s in zip(index.multi, starts)]
    return self.value(x, Index(b, x.dims, multi=multi))

  def _op_dynamic_update_slice(self, instr, index):
    b = self.b
    x, u = instr.operands[:2]
    starts = self._starts(instr.operands[2:], x.dims, u.dims)
    inside = ir.Constant(I1, 1)
    umulti = []
    for m, s, k in zip(index.multi, starts, u.dims):
      rel = b.sub(m, s)
      ok = b.and_(b.icmp_signed(">=", rel, i64(0)), b.icmp_signed("<", rel, i64(k)))
      inside = b.and_(inside, ok)
      umulti.append(b.select(ok, rel, i64(0)))
    old = self.value(x, index)
    if u.shape.size == 0:
      return old
    new = self.value(u, Index(b, u.dims, multi=umulti))
    return b.select(inside, new, old)

  def _op_concatenate(self, instr, index):
    b = self.b
    d, parts = concat_parts(instr)
    pos = index.multi[d]
    known = self.ranges.get(id(pos)) if self.ranges else None
    if known is not None:
      for x, off, n in parts:
        if off <= known[0] and known[1] <= off + n:
          multi = list(index.multi)
          if off:
            multi[d] = b.sub(pos, i64(off), flags=["nuw", "nsw"])
            self._shifted(pos, multi[d], -off)
          return self.value(x, Index(b, x.dims, multi=multi))
    result = None
    if len(parts) > BRANCHY_CONCAT_PARTS:
      return self._concatenate_branches(instr, index, d, parts)
    for k, (x, off, n) in enumerate(parts):
      rel = b.sub(pos, i64(off)) if off else pos
      if k != len(parts) - 1 and k != 0:
        rel = _clamp_i64(b, rel, 0, n - 1)
      elif k == 0 and len(parts) > 1:
        rel = b.select(b.icmp_signed(">", rel, i64(n - 1)), i64(n - 1), rel)
      elif k == len(parts) - 1 and len(parts) > 1:
        rel = b.select(b.icmp_signed("<", rel, i64(0)), i64(0), rel)
      multi = list(index.multi)
      multi[d] = rel
      v = self.value(x, Index(b, x.dims, multi=multi))
      if result is None:
        result = v
      else:
        result = b.select(b.icmp_signed(">=", pos, i64(off)), v, result)
    return result

  def _concatenate_branches(self, instr, index, d, parts):
    """A concatenate of many parts: only the part holding the element is evaluated (a chain of
    branches joined by a phi) -- evaluating every part and selecting, which keeps few-part
    concatenations branch-free for the vectorizer, costs a part's work per part (an im2col
    patch matrix has one part per kernel position)."""
    b = self.b
    pos = index.multi[d]
    # (labels not named after the instruction: kernels alike print alike, see llvm/dedupe.py)
    done = b.append_basic_block("cat.done")
    incoming = []
    for k, (x, off, n) in enumerate(parts):
      last = k == len(parts) - 1
      if not last:
        here = b.append_basic_block(f"cat{k}")
        nxt = b.append_basic_block(f"cat{k}.next")
        b.cbranch(b.icmp_signed("<", pos, i64(off + n)), here, nxt)
        b.position_at_end(here)
      multi = list(index.multi)
      multi[d] = b.sub(pos, i64(off)) if off else pos
      self.push_scope()             # values made in this branch are not seen outside it
      v = self.value(x, Index(b, x.dims, multi=multi))
      self.pop_scope()
      incoming.append((v, b.block))
      b.branch(done)
      if not last:
        b.position_at_end(nxt)
    b.position_at_end(done)
    phi = b.phi(incoming[0][0].type, name="cat")
    for v, blk in incoming:
      phi.add_incoming(v, blk)
    return phi

  def _op_pad(self, instr, index):
    b = self.b
    x, pv = instr.operands
    pad_value = self.scalar(pv)
    if x.shape.size == 0:
      return pad_value
    valid = ir.Constant(I1, 1)
    multi = []
    for m, (lo, hi, interior), n in zip(index.multi, instr.attrs["padding_config"], x.dims):
      t = b.sub(m, i64(lo)) if lo else m
      if interior:
        step = interior + 1
        ok = b.and_(b.icmp_signed(">=", t, i64(0)),
                    b.icmp_signed("<=", t, i64((n - 1) * step)))
        tc = b.select(ok, t, i64(0))
        ok = b.and_(ok, b.icmp_unsigned("==", b.urem(tc, i64(step)), i64(0)))
        q = b.udiv(tc, i64(step))
        multi.append(b.select(ok, q, i64(0)))
      else:
        ok = b.and_(b.icmp_signed(">=", t, i64(0)), b.icmp_signed("<", t, i64(n)))
        multi.append(b.select(ok, t, i64(0)))
      valid = b.and_(valid, ok)
    v = self.value(x, Index(b, x.dims, multi=multi))
    return b.select(valid, v, pad_value)

  def _op_reverse(self, instr, index):
    b = self.b
    x = instr.operands[0]
    dims = set(instr.attrs["dimensions"])
    multi = [b.sub(i64(n - 1), m) if d in dims else m
             for d, (m, n) in enumerate(zip(index.multi, x.dims))]
    return self.value(x, Index(b, x.dims, multi=multi))

  def _op_tuple(self, instr, index):
    return tuple(self.value(o, index) for o in instr.operands)

  def _op_get_tuple_element(self, instr, index):
    return self.value(instr.operands[0], index)[instr.attrs["index"]]

  # -- gather ----------------------------------------------------------------------------------
  def _op_gather(self, instr, index):
    b = self.b
    x, ind = instr.operands
    a = instr.attrs
    offset_dims = list(a["offset_dims"])
    collapsed = set(a["collapsed_slice_dims"])
    obatch = list(a.get("operand_batching_dims", ()))
    ibatch = list(a.get("start_indices_batching_dims", ()))
    smap = list(a["start_index_map"])
    sizes = a["slice_sizes"]
    batch = [m for d, m in enumerate(index.multi) if d not in offset_dims]
    starts = [i64(0)] * x.shape.rank
    raw = {}
    for k, d in enumerate(smap):
      v = self.value(ind, Index(b, ind.dims, multi=batch + [i64(k)]))
      raw[d] = _index_value(b, v, ind.dtype)
      starts[d] = raw[d]
    for od, idim in zip(obatch, ibatch):
      starts[od] = batch[idim]
    oob = ir.Constant(I1, 0)
    for d in range(x.shape.rank):
      hi = x.dims[d] - sizes[d]
      if d in raw:
        oob = b.or_(oob, b.or_(b.icmp_signed("<", raw[d], i64(0)),
                               b.icmp_signed(">", raw[d], i64(hi))))
      starts[d] = _clamp_i64(b, starts[d], 0, hi)
    kept = [d for d in range(x.shape.rank) if d not in collapsed and d not in obatch]
    multi = list(starts)
    for j, d in enumerate(kept):
      multi[d] = b.add(starts[d], index.multi[offset_dims[j]], flags=["nsw"])
    if x.shape.size == 0:
      v = const(x.dtype, 0)
    else:
      v = self.value(x, Index(b, x.dims, multi=multi))
    if a.get("mode", "clip") == "fill":
      fill = a.get("fill_value")
      dt = x.dtype
      if fill is None:
        fill = (np.nan if _is_float(dt) else True if dt == BOOL else
                np.iinfo(dt).min if _is_signed(dt) else np.iinfo(dt).max)
      v = b.select(oob, const(dt, fill), v)
    return v

  # -- reductions ------------------------------------------------------------------------------
  def combine(self, comp, accs, xs, dtypes):
    """Apply a reducer computation to accumulators and new values (lists); returns a list."""
    op = simple_reducer(comp) if len(accs) == 1 else None
    if op is not None and self.fast_reductions:
      return [reassociating_combine(self.b, op, accs[0], xs[0], dtypes[0])]
    if op is not None:
      return [binary_op(self.b, op, accs[0], xs[0], dtypes[0])]
    r = self.call(comp, list(accs) + list(xs))
    return list(r) if isinstance(r, tuple) else [r]

  def call(self, comp: hlo.Computation, args):
    """Evaluate a computation of scalars on compute values (a fresh memo)."""
    sub = Emitter(self.b, {p: Leaf(p.dtype, (), value=a) for p, a in zip(comp.parameters, args)},
                  self.fast_reductions)
    return sub.scalar(comp.root)

  def _op_reduce(self, instr, index):
    if self.reduce_ok is not ANY:
      if self.reduce_ok is not instr:
        raise PrefetchMiss(instr)
      self.reduce_ok = None
    b = self.b
    n = len(instr.operands) // 2
    ops, inits = instr.operands[:n], instr.operands[n:]
    comp = instr.attrs["to_apply"]
    dtypes = [o.dtype for o in ops]
    init_vals = [self.scalar(i) for i in inits]
    rdims = sorted(instr.attrs["dimensions"])
    src_dims = ops[0].dims
    kept = [d for d in range(len(src_dims)) if d not in rdims]
    count = _pymath.prod(src_dims[d] for d in rdims)
    if count == 0 or not rdims:
      if not rdims:
        xs = [self.value(o, Index(b, src_dims, linear=index.linear, multi=index.multi))
              for o in ops]
        res = self.combine(comp, init_vals, xs, dtypes)
        return tuple(res) if n > 1 else res[0]
      return tuple(init_vals) if n > 1 else init_vals[0]
    slots = [alloca_entry(b, v.type) for v in init_vals]
    for s, v in zip(slots, init_vals):
      b.store(v, s)
    trailing = rdims == list(range(len(src_dims) - len(rdims), len(src_dims)))
    self.push_scope()
    if trailing:
      base = b.mul(index.linear, i64(count), flags=["nuw", "nsw"]) if kept else i64(0)
      with ForLoop(b, 0, count, "r") as loop:
        lin = b.add(base, loop.index, flags=["nuw", "nsw"]) if kept else loop.index
        red_multi = delinearize(b, loop.index, [src_dims[d] for d in rdims])
        src_index = Index(b, src_dims, linear=lin, multi=list(index.multi) + red_multi)
        self._reduce_step(comp, ops, src_index, slots, dtypes)
    else:
      loops = []
      for d in rdims:
        loop = ForLoop(b, 0, src_dims[d], f"r{d}")
        loop.__enter__()
        loops.append(loop)
      multi = [None] * len(src_dims)
      for d, m in zip(kept, index.multi):
        multi[d] = m
      for d, loop in zip(rdims, loops):
        multi[d] = loop.index
      self._reduce_step(comp, ops, Index(b, src_dims, multi=multi), slots, dtypes)
      for loop in reversed(loops):
        loop.__exit__(None, None, None)
    self.pop_scope()
    res = [b.load(s) for s in slots]
    return tuple(res) if n > 1 else res[0]

  def _reduce_step(self, comp, ops, src_index, slots, dtypes):
    b = self.b
    xs = [self.value(o, src_index) for o in ops]
    accs = [b.load(s) for s in slots]
    new = self.combine(comp, accs, xs, dtypes)
    for s, v in zip(slots, new):
      b.store(v, s)

  def _op_reduce_window(self, instr, index):
    b = self.b
    n = len(instr.operands) // 2
    ops, inits = instr.operands[:n], instr.operands[n:]
    a = instr.attrs
    comp = a["to_apply"]
    dtypes = [o.dtype for o in ops]
    init_vals = [self.scalar(i) for i in inits]
    rank = len(ops[0].dims)
    wdims = a["window_dimensions"]
    if 0 in wdims:
      return tuple(init_vals) if n > 1 else init_vals[0]
    slots = [alloca_entry(b, v.type) for v in init_vals]
    for s, v in zip(slots, init_vals):
      b.store(v, s)
    self.push_scope()
    loops = []
    for d in range(rank):
      loop = ForLoop(b, 0, wdims[d], f"w{d}")
      loop.__enter__()
      loops.append(loop)
    valid = ir.Constant(I1, 1)
    multi = []
    for d in range(rank):
      nd = ops[0].dims[d]
      ok, tc = _window_source(b, index.multi[d], loops[d].index, a["window_strides"][d],
                              a["window_dilation"][d], a["padding"][d][0], nd,
                              a["base_dilation"][d])
      valid = b.and_(valid, ok)
      multi.append(tc)
    # positions on padding or on base-dilation holes are skipped (XLA's semantics), so a
    # window position combines only when it is valid; an empty operand has none
    if ops[0].shape.size:
      src = Index(b, ops[0].dims, multi=multi)
      xs = [self.value(o, src) for o in ops]
      accs = [b.load(s) for s in slots]
      new = self.combine(comp, accs, xs, dtypes) if n > 1 or simple_reducer(comp) is None else \
          [binary_op(b, simple_reducer(comp), accs[0], xs[0], dtypes[0])]
      for s, v, acc in zip(slots, new, accs):
        b.store(b.select(valid, v, acc), s)
    for loop in reversed(loops):
      loop.__exit__(None, None, None)
    self.pop_scope()
    res = [b.load(s) for s in slots]
    return tuple(res) if n > 1 else res[0]

  # -- contractions (elemental forms: correct, simple; dots.py has the fast dot) -------------
  def _op_dot(self, instr, index):
    b = self.b
    lhs, rhs = instr.operands
    lb, lf, lc = hlo.dot_operand_groups(instr, 0)
    rb, rf, rc = hlo.dot_operand_groups(instr, 1)
    acc_dt = _accumulation_dtype(lhs.dtype, rhs.dtype, instr.dtype)
    out = index.multi
    nb = len(lb)
    lmulti, rmulti = [None] * lhs.shape.rank, [None] * rhs.shape.rank
    for k, (l, r) in enumerate(zip(lb, rb)):
      lmulti[l] = rmulti[r] = out[k]
    for k, d in enumerate(lf):
      lmulti[d] = out[nb + k]
    for k, d in enumerate(rf):
      rmulti[d] = out[nb + len(lf) + k]
    csizes = [lhs.dims[d] for d in lc]
    count = _pymath.prod(csizes)
    zero = const(acc_dt, 0)
    if count == 0 or lhs.shape.size == 0 or rhs.shape.size == 0:
      return convert_value(b, zero, acc_dt, instr.dtype)
    slot = alloca_entry(b, zero.type)
    b.store(zero, slot)
    self.push_scope()
    with ForLoop(b, 0, count, "k") as loop:
      kk = delinearize(b, loop.index, csizes)
      for l, r, v in zip(lc, rc, kk):
        lmulti[l] = rmulti[r] = v
      x = convert_value(b, self.value(lhs, Index(b, lhs.dims, multi=lmulti)), lhs.dtype, acc_dt)
      y = convert_value(b, self.value(rhs, Index(b, rhs.dims, multi=rmulti)), rhs.dtype, acc_dt)
      acc = b.load(slot)
      b.store(_mul_add(b, acc, x, y, acc_dt, False, contract=True), slot)
    self.pop_scope()
    return convert_value(b, b.load(slot), acc_dt, instr.dtype)

  def _op_convolution(self, instr, index):
    b = self.b
    lhs, rhs = instr.operands
    a = instr.attrs
    lspec, rspec, ospec = (tuple(s) for s in a["dimension_numbers"])
    nd = len(lspec) - 2
    G, BG = a.get("feature_group_count", 1), a.get("batch_group_count", 1)
    acc_dt = _accumulation_dtype(lhs.dtype, rhs.dtype, instr.dtype)
    N = lhs.dims[lspec[0]]
    O, I = rhs.dims[rspec[0]], rhs.dims[rspec[1]]
    out_b = index.multi[ospec[0]]
    out_f = index.multi[ospec[1]]
    out_sp = [index.multi[ospec[2 + k]] for k in range(nd)]
    ksp = [rhs.dims[rspec[2 + k]] for k in range(nd)]
    zero = const(acc_dt, 0)
    if I == 0 or 0 in ksp or lhs.shape.size == 0 or rhs.shape.size == 0:
      return convert_value(b, zero, acc_dt, instr.dtype)
    # feature group of this output feature; batch group picks the lhs batch block
    o_per_g = O // G
    o_per_bg = O // BG
    g = b.udiv(out_f, i64(o_per_g)) if G > 1 else i64(0)
    bg = b.udiv(out_f, i64(o_per_bg)) if BG > 1 else i64(0)
    lhs_batch = b.add(b.mul(bg, i64(N // BG)), out_b) if BG > 1 else out_b
    # the reference's order: for each kernel position (row-major), a sum over the input
    # features, added to the total
    slot = alloca_entry(b, zero.type)
    part = alloca_entry(b, zero.type)
    b.store(zero, slot)
    self.push_scope()
    loops = []
    for k in range(nd):
      loop = ForLoop(b, 0, ksp[k], f"kw{k}")
      loop.__enter__()
      loops.append(loop)
    b.store(zero, part)
    iloop = ForLoop(b, 0, I, "ci")
    iloop.__enter__()
    valid = ir.Constant(I1, 1)
    lmulti = [None] * (nd + 2)
    lmulti[lspec[0]] = lhs_batch
    lmulti[lspec[1]] = b.add(b.mul(g, i64(I)), iloop.index) if G > 1 else iloop.index
    for k in range(nd):
      ok, tc = _window_source(b, out_sp[k], loops[k].index, a["window_strides"][k],
                              a["rhs_dilation"][k], a["padding"][k][0], lhs.dims[lspec[2 + k]],
                              a["lhs_dilation"][k])
      valid = b.and_(valid, ok)
      lmulti[lspec[2 + k]] = tc
    rmulti = [None] * (nd + 2)
    rmulti[rspec[0]] = out_f
    rmulti[rspec[1]] = iloop.index
    for k in range(nd):
      rmulti[rspec[2 + k]] = loops[k].index
    x = convert_value(b, self.value(lhs, Index(b, lhs.dims, multi=lmulti)), lhs.dtype, acc_dt)
    x = b.select(valid, x, zero)
    y = convert_value(b, self.value(rhs, Index(b, rhs.dims, multi=rmulti)), rhs.dtype, acc_dt)
    b.store(_mul_add(b, b.load(part), x, y, acc_dt, False, contract=True), part)
    iloop.__exit__(None, None, None)
    acc = b.load(slot)
    p = b.load(part)
    b.store(b.fadd(acc, p) if E_is_float(acc_dt) else (b.or_(acc, p) if acc_dt == BOOL
                                                       else b.add(acc, p)), slot)
    for loop in reversed(loops):
      loop.__exit__(None, None, None)
    self.pop_scope()
    return convert_value(b, b.load(slot), acc_dt, instr.dtype)


E_is_float = _is_float


def _mul_add(b, acc, x, y, dt, fast, contract=False):
  if _is_float(dt):
    flags = ["reassoc", "nsz", "contract"] if fast else (["contract"] if contract else [])
    return b.fadd(acc, b.fmul(x, y, flags=flags), flags=flags)
  if dt == BOOL:
    return b.or_(acc, b.and_(x, y))
  return b.add(acc, b.mul(x, y))


def _accumulation_dtype(lhs_dt, rhs_dt, out_dt) -> np.dtype:
  """As ``reference_ops.accumulation_dtype``: floats accumulate in the widest of f32, the
  operand and the result types; other results in their own type."""
  out = np.dtype(out_dt)
  if _is_float(out):
    cands = [F32] + [np.dtype(d) for d in (lhs_dt, rhs_dt, out) if np.dtype(d) == F64]
    return F64 if F64 in cands else F32
  return out


accumulation_dtype = _accumulation_dtype


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
