"""Shape rules of the HLO op set: ``infer_shape(opcode, operand shapes, attrs, declared)`` gives
an instruction's result shape or raises ``ShapeError`` naming the operation and its operands
(``SHAPE_RULES``: one rule per opcode).  Split from ``hlo.py``, which re-exports both names."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ourjax.lowering.hlo import (  # noqa: F401  (a module hlo.py imports while it loads)
    BINARY_OPS, COMPARISON_DIRECTIONS, FUSION_KINDS, UNARY_OPS, Computation, Shape, ShapeError,
    _type_ok, dtype_name, is_complex, is_float, is_int, is_pred, to_dtype)

# ---------------------------------------------------------------------------------------------
# shape rules
# ---------------------------------------------------------------------------------------------

def _err(opcode, msg):
  return ShapeError(f"{opcode}: {msg}")


def _require(cond, opcode, msg):
  """Raise ``opcode``'s ShapeError unless ``cond``; ``msg`` may be a function making the
  message (shape rules run for every instruction of every pass: formatting shapes eagerly was
  a tenth of a transformer step's compile time)."""
  if not cond:
    raise _err(opcode, msg() if callable(msg) else msg)


def _array(opcode, s: Shape, what="operand"):
  _require(not s.is_tuple, opcode, lambda: f"{what} must be an array, got tuple {s}")
  return s


def _dims_ok(opcode, dims, rank, what="dimensions", unique=True):
  for d in dims:
    _require(isinstance(d, (int, np.integer)) and 0 <= d < rank, opcode,
             lambda: f"{what} {list(dims)} out of range for rank {rank}")
  if unique:
    _require(len(set(dims)) == len(dims), opcode, lambda: f"{what} {list(dims)} has duplicates")


def _rule_unary(opcode):
  kind = UNARY_OPS[opcode]

  def rule(ops, attrs, declared):
    _require(len(ops) == 1, opcode, lambda: f"takes 1 operand, got {len(ops)}")
    x = _array(opcode, ops[0])
    _require(_type_ok(kind, x.dtype), opcode, lambda: f"unsupported element type {dtype_name(x.dtype)}")
    if opcode == "is-finite":
      return Shape(np.bool_, x.dims)
    if opcode in ("real", "imag"):
      return Shape(np.float32 if x.dtype == np.complex64 else np.float64, x.dims)
    if opcode == "abs" and is_complex(x.dtype):
      return Shape(np.float32 if x.dtype == np.complex64 else np.float64, x.dims)
    return x
  return rule


def _rule_binary(opcode):
  kind = BINARY_OPS[opcode]

  def rule(ops, attrs, declared):
    _require(len(ops) == 2, opcode, lambda: f"takes 2 operands, got {len(ops)}")
    x, y = _array(opcode, ops[0]), _array(opcode, ops[1])
    _require(x.dims == y.dims, opcode, lambda: f"operand shapes {x} and {y} differ (no implicit "
             "broadcasting: broadcast explicitly)")
    _require(x.dtype == y.dtype, opcode, lambda: f"element types differ: {x} and {y}")
    _require(_type_ok(kind, x.dtype), opcode, lambda: f"unsupported element type {dtype_name(x.dtype)}")
    if opcode == "complex":
      _require(x.dtype in (np.float32, np.float64), opcode, "operands must be f32 or f64")
      return Shape(np.complex64 if x.dtype == np.float32 else np.complex128, x.dims)
    return x
  return rule


def _rule_compare(ops, attrs, declared):
  _require(len(ops) == 2, "compare", "takes 2 operands")
  x, y = _array("compare", ops[0]), _array("compare", ops[1])
  _require(x == y, "compare", lambda: f"operand shapes {x} and {y} differ")
  _require(attrs.get("direction") in COMPARISON_DIRECTIONS, "compare",
           lambda: f"direction must be one of {COMPARISON_DIRECTIONS}, got {attrs.get('direction')!r}")
  ct = attrs.get("type")
  _require(ct in (None, "TOTALORDER"), "compare", lambda: f"unknown comparison type {ct!r}")
  _require(ct is None or is_float(x.dtype), "compare", "TOTALORDER applies to floats only")
  _require(not is_complex(x.dtype) or attrs["direction"] in ("EQ", "NE"), "compare",
           "complex numbers compare only EQ/NE")
  return Shape(np.bool_, x.dims)


def _rule_select(ops, attrs, declared):
  _require(len(ops) == 3, "select", "takes (pred, on_true, on_false)")
  p, t, f = (_array("select", s) for s in ops)
  _require(p.dtype == np.bool_, "select", lambda: f"predicate must be pred, got {p}")
  _require(t == f, "select", lambda: f"branch shapes {t} and {f} differ")
  _require(p.dims == t.dims, "select", lambda: f"predicate shape {p} does not match {t}")
  return t


def _rule_clamp(ops, attrs, declared):
  _require(len(ops) == 3, "clamp", "takes (min, operand, max)")
  lo, x, hi = (_array("clamp", s) for s in ops)
  for b in (lo, hi):
    _require(b.dtype == x.dtype, "clamp", lambda: f"bound {b} and operand {x} differ in type")
    _require(b.dims in ((), x.dims), "clamp", lambda: f"bound {b} must be scalar or shaped as {x}")
  _require(not is_pred(x.dtype) and not is_complex(x.dtype), "clamp", "needs an ordered type")
  return x


def _rule_convert(ops, attrs, declared):
  _require(len(ops) == 1, "convert", "takes 1 operand")
  x = _array("convert", ops[0])
  _require(declared is not None and not declared.is_tuple, "convert", "needs a result type")
  _require(declared.dims == x.dims, "convert", lambda: f"result {declared} must keep dims of {x}")
  return declared


def _rule_bitcast_convert(ops, attrs, declared):
  _require(len(ops) == 1, "bitcast-convert", "takes 1 operand")
  x = _array("bitcast-convert", ops[0])
  _require(declared is not None, "bitcast-convert", "needs a result type")
  _require(not is_pred(x.dtype) and not is_pred(declared.dtype), "bitcast-convert",
           "pred has no bit pattern")
  a, b = x.dtype.itemsize, declared.dtype.itemsize
  if a == b:
    expect = x.dims
  elif a > b:
    _require(a % b == 0, "bitcast-convert", "widths must divide")
    expect = x.dims + (a // b,)
  else:
    _require(b % a == 0 and x.dims and x.dims[-1] == b // a, "bitcast-convert",
             lambda: f"from {x} to {dtype_name(declared.dtype)} needs a last dimension of {b // a}")
    expect = x.dims[:-1]
  _require(declared.dims == expect, "bitcast-convert",
           lambda: f"result {declared} should have dims {list(expect)}")
  return declared


def _rule_parameter(ops, attrs, declared):
  _require(not ops, "parameter", "takes no operands")
  _require(declared is not None, "parameter", "needs a shape")
  n = attrs.get("parameter_number")
  _require(isinstance(n, (int, np.integer)) and n >= 0, "parameter",
           lambda: f"bad parameter_number {n!r}")
  return declared


def _rule_constant(ops, attrs, declared):
  _require(not ops, "constant", "takes no operands")
  v = attrs.get("value")
  _require(isinstance(v, np.ndarray), "constant", "value must be a numpy array")
  return Shape(v.dtype, v.shape)


def _rule_iota(ops, attrs, declared):
  _require(not ops, "iota", "takes no operands")
  _require(declared is not None and declared.rank >= 1, "iota", "needs a shape of rank >= 1")
  d = attrs.get("iota_dimension")
  _require(isinstance(d, (int, np.integer)) and 0 <= d < declared.rank, "iota",
           lambda: f"iota_dimension {d!r} out of range for {declared}")
  _require(not is_pred(declared.dtype), "iota", "needs a numeric type")
  return declared


def _rule_broadcast(ops, attrs, declared):
  _require(len(ops) == 1, "broadcast", "takes 1 operand")
  x = _array("broadcast", ops[0])
  _require(declared is not None, "broadcast", "needs a result shape")
  dims = tuple(attrs.get("dimensions", ()))
  _require(len(dims) == x.rank, "broadcast",
           lambda: f"dimensions {list(dims)} must name one output dimension per operand dimension of {x}")
  _dims_ok("broadcast", dims, declared.rank)
  _require(list(dims) == sorted(dims), "broadcast", lambda: f"dimensions {list(dims)} must increase")
  _require(declared.dtype == x.dtype, "broadcast", "cannot change the element type")
  for i, d in enumerate(dims):
    _require(x.dims[i] in (1, declared.dims[d]), "broadcast",
             lambda: f"operand dimension {i} (size {x.dims[i]}) does not fit output dimension {d} of "
             f"{declared}")
  return declared


def _rule_reshape(ops, attrs, declared):
  _require(len(ops) == 1, "reshape", "takes 1 operand")
  x = _array("reshape", ops[0])
  _require(declared is not None, "reshape", "needs a result shape")
  _require(declared.dtype == x.dtype, "reshape", "cannot change the element type")
  _require(declared.size == x.size, "reshape", lambda: f"cannot reshape {x} ({x.size} elements) to "
           f"{declared} ({declared.size} elements)")
  return declared


def _rule_transpose(ops, attrs, declared):
  _require(len(ops) == 1, "transpose", "takes 1 operand")
  x = _array("transpose", ops[0])
  perm = tuple(attrs.get("dimensions", ()))
  _require(sorted(perm) == list(range(x.rank)), "transpose",
           lambda: f"dimensions {list(perm)} is not a permutation of rank {x.rank}")
  return Shape(x.dtype, tuple(x.dims[p] for p in perm))


def _rule_slice(ops, attrs, declared):
  _require(len(ops) == 1, "slice", "takes 1 operand")
  x = _array("slice", ops[0])
  start, limit = tuple(attrs["start_indices"]), tuple(attrs["limit_indices"])
  strides = tuple(attrs.get("strides") or (1,) * x.rank)
  _require(len(start) == len(limit) == len(strides) == x.rank, "slice",
           lambda: f"needs {x.rank} starts/limits/strides")
  out = []
  for d, (s, l, st, n) in enumerate(zip(start, limit, strides, x.dims)):
    _require(0 <= s <= l <= n and st >= 1, "slice",
             lambda: f"bad slice [{s}:{l}:{st}] of dimension {d} (size {n}) of {x}")
    out.append((l - s + st - 1) // st)
  return Shape(x.dtype, out)


def _rule_dynamic_slice(ops, attrs, declared):
  _require(len(ops) >= 1, "dynamic-slice", "needs an operand")
  x = _array("dynamic-slice", ops[0])
  idx = ops[1:]
  sizes = tuple(attrs["dynamic_slice_sizes"])
  _require(len(idx) == x.rank == len(sizes), "dynamic-slice",
           lambda: f"needs {x.rank} scalar start indices and slice sizes")
  for i in idx:
    _require(i.is_scalar and is_int(i.dtype), "dynamic-slice",
             lambda: f"start indices must be integer scalars, got {i}")
  _require(len({i.dtype for i in idx}) <= 1, "dynamic-slice", "start indices differ in type")
  for s, n in zip(sizes, x.dims):
    _require(0 <= s <= n, "dynamic-slice", lambda: f"slice sizes {list(sizes)} do not fit {x}")
  return Shape(x.dtype, sizes)


def _rule_dynamic_update_slice(ops, attrs, declared):
  _require(len(ops) >= 2, "dynamic-update-slice", "needs operand and update")
  x, u = _array("dynamic-update-slice", ops[0]), _array("dynamic-update-slice", ops[1])
  idx = ops[2:]
  _require(u.rank == x.rank and len(idx) == x.rank, "dynamic-update-slice",
           lambda: f"update {u} and {len(idx)} start indices must match the rank of {x}")
  _require(u.dtype == x.dtype, "dynamic-update-slice", "update type differs")
  _require(all(a <= b for a, b in zip(u.dims, x.dims)), "dynamic-update-slice",
           lambda: f"update {u} larger than {x}")
  for i in idx:
    _require(i.is_scalar and is_int(i.dtype), "dynamic-update-slice",
             lambda: f"start indices must be integer scalars, got {i}")
  return x


def _rule_concatenate(ops, attrs, declared):
  _require(len(ops) >= 1, "concatenate", "needs at least one operand")
  xs = [_array("concatenate", s) for s in ops]
  d = attrs["dimensions"][0] if isinstance(attrs.get("dimensions"), (list, tuple)) else \
      attrs.get("dimensions")
  first = xs[0]
  _require(isinstance(d, (int, np.integer)) and 0 <= d < first.rank, "concatenate",
           lambda: f"dimension {d!r} out of range for {first}")
  total = 0
  for s in xs:
    _require(s.dtype == first.dtype and s.rank == first.rank, "concatenate",
             lambda: f"operands {first} and {s} differ in type or rank")
    _require(all(a == b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != d),
             "concatenate", lambda: f"operands {first} and {s} differ outside dimension {d}")
    total += s.dims[d]
  dims = list(first.dims)
  dims[d] = total
  return Shape(first.dtype, dims)


def _rule_pad(ops, attrs, declared):
  _require(len(ops) == 2, "pad", "takes (operand, padding_value)")
  x, v = _array("pad", ops[0]), _array("pad", ops[1])
  _require(v.is_scalar and v.dtype == x.dtype, "pad", lambda: f"padding value {v} must be a scalar of "
           f"{dtype_name(x.dtype)}")
  cfg = attrs["padding_config"]
  _require(len(cfg) == x.rank, "pad", lambda: f"needs {x.rank} (low, high, interior) entries")
  out = []
  for n, (lo, hi, interior) in zip(x.dims, cfg):
    _require(interior >= 0, "pad", "interior padding must be >= 0")
    size = lo + hi + n + max(n - 1, 0) * interior
    _require(size >= 0, "pad", lambda: f"padding {lo}_{hi}_{interior} gives negative size")
    out.append(size)
  return Shape(x.dtype, out)


def _rule_reverse(ops, attrs, declared):
  _require(len(ops) == 1, "reverse", "takes 1 operand")
  x = _array("reverse", ops[0])
  _dims_ok("reverse", attrs.get("dimensions", ()), x.rank)
  return x


def _check_scalar_computation(opcode, comp, param_dtypes, result_dtypes, what):
  _require(isinstance(comp, Computation), opcode, lambda: f"{what} must be a Computation")
  ps = comp.parameter_shapes
  _require(len(ps) == len(param_dtypes) and all(
      p is not None and p.is_scalar and p.dtype == dt for p, dt in zip(ps, param_dtypes)),
      opcode, lambda: f"{what} %{comp.name} must take scalars "
      f"({', '.join(dtype_name(d) + '[]' for d in param_dtypes)}), takes "
      f"({', '.join(str(p) for p in ps)})")
  r = comp.root.shape
  if len(result_dtypes) == 1:
    ok = r.is_scalar and r.dtype == result_dtypes[0]
  else:
    ok = r.is_tuple and len(r.tuple_shapes) == len(result_dtypes) and all(
        s.is_scalar and s.dtype == dt for s, dt in zip(r.tuple_shapes, result_dtypes))
  want = ", ".join(dtype_name(d) + "[]" for d in result_dtypes)
  _require(ok, opcode, lambda: f"{what} %{comp.name} must return ({want}), returns {r}")


def _rule_reduce(ops, attrs, declared):
  _require(len(ops) >= 2 and len(ops) % 2 == 0, "reduce", "takes N operands and N init values")
  n = len(ops) // 2
  xs, inits = [_array("reduce", s) for s in ops[:n]], ops[n:]
  for s in xs:
    _require(s.dims == xs[0].dims, "reduce", lambda: f"operands {xs[0]} and {s} differ in dims")
  for s, i in zip(xs, inits):
    _require(i.is_scalar and i.dtype == s.dtype, "reduce",
             lambda: f"init value {i} must be a scalar of the operand type {dtype_name(s.dtype)}")
  dims = tuple(attrs.get("dimensions", ()))
  _dims_ok("reduce", dims, xs[0].rank)
  dts = [s.dtype for s in xs]
  _check_scalar_computation("reduce", attrs.get("to_apply"), dts + dts, dts, "reducer")
  kept = tuple(d for i, d in enumerate(xs[0].dims) if i not in dims)
  outs = [Shape(dt, kept) for dt in dts]
  return outs[0] if n == 1 else Shape.tuple(outs)


def _window_out(opcode, n, w, s, lo, hi, bd, wd):
  _require(w >= 1 and s >= 1 and bd >= 1 and wd >= 1, opcode,
           "window sizes, strides and dilations must be >= 1")
  padded = (n - 1) * bd + 1 + lo + hi if n > 0 else lo + hi
  dw = (w - 1) * wd + 1
  return 0 if padded < dw else (padded - dw) // s + 1


def _rule_reduce_window(ops, attrs, declared):
  _require(len(ops) >= 2 and len(ops) % 2 == 0, "reduce-window", "takes N operands, N inits")
  n = len(ops) // 2
  xs, inits = [_array("reduce-window", s) for s in ops[:n]], ops[n:]
  for s, i in zip(xs, inits):
    _require(s.dims == xs[0].dims, "reduce-window", "operands differ in dims")
    _require(i.is_scalar and i.dtype == s.dtype, "reduce-window", lambda: f"bad init value {i}")
  r = xs[0].rank
  w = attrs["window_dimensions"]
  st = attrs.get("window_strides") or (1,) * r
  pad = attrs.get("padding") or ((0, 0),) * r
  bd = attrs.get("base_dilation") or (1,) * r
  wd = attrs.get("window_dilation") or (1,) * r
  _require(len(w) == len(st) == len(pad) == len(bd) == len(wd) == r, "reduce-window",
           lambda: f"window attributes need {r} entries each")
  dims = [_window_out("reduce-window", *a) for a in zip(
      xs[0].dims, w, st, [p[0] for p in pad], [p[1] for p in pad], bd, wd)]
  dts = [s.dtype for s in xs]
  _check_scalar_computation("reduce-window", attrs.get("to_apply"), dts + dts, dts, "reducer")
  outs = [Shape(dt, dims) for dt in dts]
  return outs[0] if n == 1 else Shape.tuple(outs)


def _rule_dot(ops, attrs, declared):
  _require(len(ops) == 2, "dot", "takes 2 operands")
  lhs, rhs = _array("dot", ops[0]), _array("dot", ops[1])
  lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
  lc = tuple(attrs.get("lhs_contracting_dims", ()))
  rc = tuple(attrs.get("rhs_contracting_dims", ()))
  _dims_ok("dot", lb + lc, lhs.rank, "lhs batch+contracting dims")
  _dims_ok("dot", rb + rc, rhs.rank, "rhs batch+contracting dims")
  _require(len(lb) == len(rb), "dot", "lhs and rhs need as many batch dims")
  _require(len(lc) == len(rc), "dot", "lhs and rhs need as many contracting dims")
  for a, b in zip(lb, rb):
    _require(lhs.dims[a] == rhs.dims[b], "dot",
             lambda: f"batch dims lhs {a} and rhs {b} differ in size ({lhs} vs {rhs})")
  for a, b in zip(lc, rc):
    _require(lhs.dims[a] == rhs.dims[b], "dot",
             lambda: f"contracting dims lhs {a} and rhs {b} differ in size ({lhs} vs {rhs})")
  pet = attrs.get("preferred_element_type")
  if pet is None:
    _require(lhs.dtype == rhs.dtype, "dot", lambda: f"operand types differ ({lhs} vs {rhs}); "
             "give preferred_element_type")
    dt = lhs.dtype
  else:
    dt = to_dtype(pet)
  lf = [lhs.dims[d] for d in range(lhs.rank) if d not in lb + lc]
  rf = [rhs.dims[d] for d in range(rhs.rank) if d not in rb + rc]
  return Shape(dt, [lhs.dims[d] for d in lb] + lf + rf)


def _rule_convolution(ops, attrs, declared):
  _require(len(ops) == 2, "convolution", "takes (lhs, rhs)")
  lhs, rhs = _array("convolution", ops[0]), _array("convolution", ops[1])
  _require(lhs.rank == rhs.rank and lhs.rank >= 2, "convolution",
           lambda: f"lhs {lhs} and rhs {rhs} must have the same rank >= 2")
  nd = lhs.rank - 2
  lspec, rspec, ospec = (tuple(s) for s in attrs["dimension_numbers"])
  for spec, what in ((lspec, "lhs"), (rspec, "rhs"), (ospec, "out")):
    _require(sorted(spec) == list(range(nd + 2)), "convolution",
             lambda: f"{what} dimension numbers {list(spec)} are not a permutation of rank {nd + 2}")
  strides = tuple(attrs.get("window_strides") or (1,) * nd)
  padding = tuple(attrs.get("padding") or ((0, 0),) * nd)
  ld = tuple(attrs.get("lhs_dilation") or (1,) * nd)
  rd = tuple(attrs.get("rhs_dilation") or (1,) * nd)
  _require(len(strides) == len(padding) == len(ld) == len(rd) == nd, "convolution",
           lambda: f"window attributes need {nd} entries each")
  g = attrs.get("feature_group_count", 1)
  bg = attrs.get("batch_group_count", 1)
  _require(g >= 1 and bg >= 1 and (g == 1 or bg == 1), "convolution",
           "feature_group_count and batch_group_count must be >= 1, and not both > 1")
  n, c = lhs.dims[lspec[0]], lhs.dims[lspec[1]]
  o, i = rhs.dims[rspec[0]], rhs.dims[rspec[1]]
  _require(c == i * g, "convolution", lambda: f"lhs features {c} != rhs input features {i} x "
           f"feature_group_count {g}")
  _require(o % g == 0 and o % bg == 0 and n % bg == 0, "convolution",
           lambda: f"output features {o} / batch {n} not divisible by the group counts")
  pet = attrs.get("preferred_element_type")
  if pet is None:
    _require(lhs.dtype == rhs.dtype, "convolution", "operand types differ")
    dt = lhs.dtype
  else:
    dt = to_dtype(pet)
  spatial = [_window_out("convolution", lhs.dims[lspec[2 + k]], rhs.dims[rspec[2 + k]],
                         strides[k], padding[k][0], padding[k][1], ld[k], rd[k])
             for k in range(nd)]
  out = [0] * (nd + 2)
  out[ospec[0]], out[ospec[1]] = n // bg, o
  for k in range(nd):
    out[ospec[2 + k]] = spatial[k]
  return Shape(dt, out)


def _rule_gather(ops, attrs, declared):
  _require(len(ops) == 2, "gather", "takes (operand, start_indices)")
  x, idx = _array("gather", ops[0]), _array("gather", ops[1])
  _require(is_int(idx.dtype) and idx.rank >= 1, "gather",
           lambda: f"start indices must be integers of rank >= 1, got {idx}")
  ivd = attrs.get("index_vector_dim", idx.rank - 1)
  _require(ivd == idx.rank - 1, "gather", "index_vector_dim must be the last dimension")
  offset = tuple(attrs.get("offset_dims", ()))
  collapsed = tuple(attrs.get("collapsed_slice_dims", ()))
  smap = tuple(attrs.get("start_index_map", ()))
  obatch = tuple(attrs.get("operand_batching_dims", ()))
  ibatch = tuple(attrs.get("start_indices_batching_dims", ()))
  sizes = tuple(attrs["slice_sizes"])
  _require(len(sizes) == x.rank, "gather", lambda: f"slice_sizes needs {x.rank} entries")
  _require(len(smap) == idx.dims[-1], "gather",
           lambda: f"start_index_map {list(smap)} must have one entry per index component "
           f"({idx.dims[-1]})")
  _dims_ok("gather", smap, x.rank, "start_index_map")
  _dims_ok("gather", collapsed + obatch, x.rank, "collapsed_slice_dims+operand_batching_dims")
  _dims_ok("gather", ibatch, idx.rank - 1, "start_indices_batching_dims")
  _require(len(obatch) == len(ibatch), "gather", "batching dims lists differ in length")
  _require(not set(smap) & set(obatch), "gather", "start_index_map overlaps batching dims")
  for d in collapsed + obatch:
    _require(sizes[d] <= 1, "gather", lambda: f"collapsed/batching dim {d} needs slice size 1")
  for od, idim in zip(obatch, ibatch):
    _require(x.dims[od] == idx.dims[idim], "gather", "batching dims differ in size")
  for s, n in zip(sizes, x.dims):
    _require(0 <= s <= n, "gather", lambda: f"slice_sizes {list(sizes)} do not fit {x}")
  _require(list(offset) == sorted(set(offset)), "gather", "offset_dims must be increasing")
  kept = [sizes[d] for d in range(x.rank) if d not in collapsed and d not in obatch]
  out_rank = len(kept) + idx.rank - 1
  _require(len(offset) == len(kept), "gather",
           lambda: f"offset_dims {list(offset)} needs {len(kept)} entries")
  _dims_ok("gather", offset, out_rank, "offset_dims")
  _require(attrs.get("mode", "clip") in ("clip", "fill"), "gather", "mode must be clip or fill")
  batch = iter(idx.dims[:-1])
  kept_it = iter(kept)
  return Shape(x.dtype, [next(kept_it) if i in offset else next(batch) for i in range(out_rank)])


def _rule_scatter(ops, attrs, declared):
  _require(len(ops) == 3, "scatter", "takes (operand, scatter_indices, updates)")
  x, idx, upd = (_array("scatter", s) for s in ops)
  _require(is_int(idx.dtype) and idx.rank >= 1, "scatter", lambda: f"bad scatter indices {idx}")
  _require(upd.dtype == x.dtype, "scatter", "updates must have the operand type")
  ivd = attrs.get("index_vector_dim", idx.rank - 1)
  _require(ivd == idx.rank - 1, "scatter", "index_vector_dim must be the last dimension")
  uwd = tuple(attrs.get("update_window_dims", ()))
  iwd = tuple(attrs.get("inserted_window_dims", ()))
  sd2od = tuple(attrs.get("scatter_dims_to_operand_dims", ()))
  obatch = tuple(attrs.get("input_batching_dims", ()))
  ibatch = tuple(attrs.get("scatter_indices_batching_dims", ()))
  _require(len(sd2od) == idx.dims[-1], "scatter",
           "scatter_dims_to_operand_dims needs one entry per index component")
  _dims_ok("scatter", sd2od, x.rank, "scatter_dims_to_operand_dims")
  _dims_ok("scatter", iwd + obatch, x.rank, "inserted_window_dims+input_batching_dims")
  _dims_ok("scatter", uwd, upd.rank, "update_window_dims")
  _require(list(uwd) == sorted(uwd), "scatter", "update_window_dims must be increasing")
  wdims = [d for d in range(x.rank) if d not in iwd and d not in obatch]
  _require(len(uwd) == len(wdims), "scatter",
           lambda: f"update_window_dims needs {len(wdims)} entries")
  _require(upd.rank == len(uwd) + idx.rank - 1, "scatter",
           lambda: f"updates {upd} must have rank {len(uwd) + idx.rank - 1}")
  sdims = [upd.dims[d] for d in range(upd.rank) if d not in uwd]
  _require(tuple(sdims) == idx.dims[:-1], "scatter",
           lambda: f"update scatter dims {sdims} must equal the index batch dims {list(idx.dims[:-1])}")
  for od, ud in zip(wdims, uwd):
    _require(upd.dims[ud] <= x.dims[od], "scatter", lambda: f"update window larger than {x}")
  _require(attrs.get("mode", "drop") in ("drop", "clip"), "scatter", "mode must be drop or clip")
  _check_scalar_computation("scatter", attrs.get("to_apply"), [x.dtype, x.dtype], [x.dtype],
                            "update computation")
  return x


def _rule_sort(ops, attrs, declared):
  _require(len(ops) >= 1, "sort", "needs operands")
  xs = [_array("sort", s) for s in ops]
  for s in xs:
    _require(s.dims == xs[0].dims, "sort", lambda: f"operands {xs[0]} and {s} differ in dims")
  d = attrs.get("dimension", 0)
  _require(xs[0].rank == 0 or 0 <= d < xs[0].rank, "sort", lambda: f"dimension {d} out of range")
  pdts = [dt for s in xs for dt in (s.dtype, s.dtype)]
  _check_scalar_computation("sort", attrs.get("to_apply"), pdts, [np.dtype(np.bool_)],
                            "comparator")
  return xs[0] if len(xs) == 1 else Shape.tuple(xs)


def _rule_while(ops, attrs, declared):
  _require(len(ops) == 1, "while", "takes one (tuple) operand")
  s = ops[0]
  cond, body = attrs.get("condition"), attrs.get("body")
  _require(isinstance(cond, Computation) and isinstance(body, Computation), "while",
           "needs condition and body computations")
  _require(cond.parameter_shapes == [s], "while", lambda: f"condition %{cond.name} must take {s}")
  _require(cond.root.shape == Shape(np.bool_, ()), "while",
           lambda: f"condition %{cond.name} must return pred[], returns {cond.root.shape}")
  _require(body.parameter_shapes == [s] and body.root.shape == s, "while",
           lambda: f"body %{body.name} must map {s} to {s}")
  return s


def _rule_conditional(ops, attrs, declared):
  branches = attrs.get("branches")
  _require(isinstance(branches, (list, tuple)) and branches, "conditional", "needs branches")
  _require(len(ops) == 1 + len(branches), "conditional",
           "takes the branch index/predicate and one operand per branch")
  p = ops[0]
  _require(p.is_scalar and (p.dtype in (np.dtype(np.bool_), np.dtype(np.int32))), "conditional",
           lambda: f"selector must be pred[] or s32[], got {p}")
  _require(p.dtype != np.bool_ or len(branches) == 2, "conditional",
           "a pred selector needs exactly 2 branches (true, false)")
  out = branches[0].root.shape
  for b, s in zip(branches, ops[1:]):
    _require(b.parameter_shapes == [s], "conditional", lambda: f"branch %{b.name} must take {s}")
    _require(b.root.shape == out, "conditional", lambda: f"branch %{b.name} returns {b.root.shape}, "
             f"expected {out}")
  return out


FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def _rule_fft(ops, attrs, declared):
  """XLA's Fft over the innermost ``len(fft_length)`` dimensions: FFT/IFFT complex to complex,
  RFFT real to complex (the last dimension becomes ``n // 2 + 1``), IRFFT complex to real (the
  last dimension of the operand holds ``n // 2 + 1`` values, the result ``n``)."""
  _require(len(ops) == 1, "fft", "takes one operand")
  x = _array("fft", ops[0])
  kind, lengths = attrs.get("fft_type"), tuple(attrs.get("fft_length", ()))
  _require(kind in FFT_TYPES, "fft", lambda: f"fft_type must be one of {FFT_TYPES}, got {kind!r}")
  k = len(lengths)
  _require(1 <= k <= x.rank, "fft", lambda: f"fft_length {list(lengths)} needs 1 to {x.rank} entries")
  batch, inner = x.dims[:x.rank - k], x.dims[x.rank - k:]
  if kind == "RFFT":
    _require(x.dtype in (np.dtype(np.float32), np.dtype(np.float64)), "fft",
             lambda: f"RFFT takes f32 or f64, got {x}")
    _require(inner == lengths, "fft", lambda: f"RFFT operand {x} does not end in {list(lengths)}")
    return Shape(np.complex64 if x.dtype == np.float32 else np.complex128,
                 batch + lengths[:-1] + (lengths[-1] // 2 + 1,))
  _require(is_complex(x.dtype), "fft", lambda: f"{kind} takes c64 or c128, got {x}")
  if kind == "IRFFT":
    _require(inner == lengths[:-1] + (lengths[-1] // 2 + 1,), "fft",
             lambda: f"IRFFT operand {x} does not end in {list(lengths[:-1] + (lengths[-1] // 2 + 1,))}")
    return Shape(np.float32 if x.dtype == np.complex64 else np.float64, batch + lengths)
  _require(inner == lengths, "fft", lambda: f"{kind} operand {x} does not end in {list(lengths)}")
  return x


def _rule_tuple(ops, attrs, declared):
  return Shape.tuple(ops)


def _rule_opt_barrier(ops, attrs, declared):
  for o in ops:
    _array("opt-barrier", o)
  return Shape.tuple(ops)


def _rule_gte(ops, attrs, declared):
  _require(len(ops) == 1 and ops[0].is_tuple, "get-tuple-element", "needs a tuple operand")
  i = attrs.get("index")
  _require(isinstance(i, (int, np.integer)) and 0 <= i < len(ops[0].tuple_shapes),
           "get-tuple-element", lambda: f"index {i!r} out of range for {ops[0]}")
  return ops[0].tuple_shapes[i]


def _rule_fusion(ops, attrs, declared):
  comp = attrs.get("calls")
  _require(isinstance(comp, Computation), "fusion", "needs a fused computation (calls)")
  _require(attrs.get("kind") in FUSION_KINDS, "fusion", lambda: f"kind must be one of {FUSION_KINDS}")
  _require(comp.parameter_shapes == list(ops), "fusion",
           lambda: f"operands ({', '.join(map(str, ops))}) do not match %{comp.name}'s parameters "
           f"({', '.join(map(str, comp.parameter_shapes))})")
  return comp.root.shape


def _rule_attention(ops, attrs, declared):
  """``attention(q, k, v, arrays...)`` (``passes/attention.py``): q ``[B..., Tq, D]``, k
  ``[B..., Tk, D]``, v ``[B..., Tk, Dv]`` of one element type give ``[B..., Tq, Dv]``; with
  ``calls``, the scores' modification (a computation of the scores and of ``arrays``) returns
  scores."""
  _require(len(ops) >= 3, "attention", "takes q, k and v")
  q, k, v = (_array("attention", s) for s in ops[:3])
  _require(q.rank >= 2 and q.rank == k.rank == v.rank, "attention",
           lambda: f"q {q}, k {k} and v {v} must have one rank, at least 2")
  _require(q.dtype == k.dtype == v.dtype, "attention",
           lambda: f"q {q}, k {k} and v {v} differ in element type")
  _require(q.dims[:-2] == k.dims[:-2] == v.dims[:-2] and q.dims[-1] == k.dims[-1]
           and k.dims[-2] == v.dims[-2], "attention",
           lambda: f"q {q}, k {k} and v {v} do not fit [B..., Tq, D], [B..., Tk, D], [B..., Tk, Dv]")
  _require(isinstance(attrs.get("scale"), float), "attention", "needs a float scale")
  scores = Shape(q.dtype, q.dims[:-1] + (k.dims[-2],))
  comp = attrs.get("calls")
  if comp is None:
    _require(len(ops) == 3, "attention", "reads other arrays only through a scores computation")
  else:
    want = [scores] + list(ops[3:])
    _require(comp.parameter_shapes == want and comp.root.shape == scores, "attention",
             lambda: f"scores computation %{comp.name} takes ({', '.join(map(str, comp.parameter_shapes))}) "
             f"-> {comp.root.shape}, not ({', '.join(map(str, want))}) -> {scores}")
  return Shape(q.dtype, q.dims[:-1] + (v.dims[-1],))


def _rule_attention_grad(ops, attrs, declared):
  """``attention-grad(q, k, v, o, dO, arrays...)`` (``passes/attention_grad.py``): the
  gradients ``(dq, dk, dv)`` of ``o = attention(q, k, v, arrays[:n])`` (``n`` the scores
  computation's arrays) for the cotangent ``dO``; ``grad_calls``, the scores' cotangent's
  modification, takes the cotangent and the remaining arrays."""
  _require(len(ops) >= 5, "attention-grad", "takes q, k, v, o and dO")
  fc, gc = attrs.get("calls"), attrs.get("grad_calls")
  n = 0 if fc is None else len(fc.parameter_shapes) - 1
  o = _rule_attention(list(ops[:3]) + list(ops[5:5 + n]), attrs, None)
  q, k, v, out, do = (_array("attention-grad", s) for s in ops[:5])
  _require(out == o and do == o, "attention-grad",
           lambda: f"o {out} and dO {do} must be the attention's {o}")
  scores = Shape(q.dtype, q.dims[:-1] + (k.dims[-2],))
  rest = list(ops[5 + n:])
  if gc is None:
    _require(not rest, "attention-grad", "reads other arrays only through its computations")
  else:
    want = [scores] + rest
    _require(gc.parameter_shapes == want and gc.root.shape == scores, "attention-grad",
             lambda: f"gradient computation %{gc.name} takes ({', '.join(map(str, gc.parameter_shapes))}) "
             f"-> {gc.root.shape}, not ({', '.join(map(str, want))}) -> {scores}")
  return Shape.tuple([q, k, v])


SHAPE_RULES: dict[str, Callable] = {
    **{op: _rule_unary(op) for op in UNARY_OPS},
    **{op: _rule_binary(op) for op in BINARY_OPS},
    "compare": _rule_compare, "select": _rule_select, "clamp": _rule_clamp,
    "convert": _rule_convert, "bitcast-convert": _rule_bitcast_convert,
    "parameter": _rule_parameter, "constant": _rule_constant, "iota": _rule_iota,
    "broadcast": _rule_broadcast, "reshape": _rule_reshape, "transpose": _rule_transpose,
    "slice": _rule_slice, "dynamic-slice": _rule_dynamic_slice,
    "dynamic-update-slice": _rule_dynamic_update_slice, "concatenate": _rule_concatenate,
    "pad": _rule_pad, "reverse": _rule_reverse, "reduce": _rule_reduce,
    "reduce-window": _rule_reduce_window, "dot": _rule_dot, "convolution": _rule_convolution,
    "gather": _rule_gather, "scatter": _rule_scatter, "sort": _rule_sort, "fft": _rule_fft,
    "while": _rule_while,
    "conditional": _rule_conditional, "tuple": _rule_tuple, "get-tuple-element": _rule_gte,
    "opt-barrier": _rule_opt_barrier,
    "fusion": _rule_fusion, "attention": _rule_attention,
    "attention-grad": _rule_attention_grad,
}


def infer_shape(opcode: str, operand_shapes: Sequence[Shape], attrs: dict,
                declared: Shape | None = None) -> Shape:
  """The result shape of ``opcode`` on operands of ``operand_shapes``; raises ``ShapeError``.
  ``declared`` is the requested result shape for the ops that take one (parameter, convert,
  bitcast-convert, broadcast, reshape, iota)."""
  rule = SHAPE_RULES.get(opcode)
  if rule is None:
    raise ShapeError(f"unknown opcode {opcode!r}")
  return rule(list(operand_shapes), attrs, declared)
