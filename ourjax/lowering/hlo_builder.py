"""The HLO ``Builder``: emits instructions into a computation, computing and checking each
result shape (``infer_shape``), with one method per operation; ``scalar_computation`` makes
reducers and comparators.  Part of ``hlo`` (``hlo.Builder``, ``hlo.scalar_computation``), split
out of hlo.py."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ourjax.lowering.hlo import (BINARY_OPS, COMPARISON_DIRECTIONS, Computation, Instruction,
                                 Module, Shape, ShapeError, UNARY_OPS, dtype_name, infer_shape,
                                 to_dtype)

__all__ = ["Builder", "scalar_computation"]

def _as_shape(shape_or_dtype, dims=None) -> Shape:
  if isinstance(shape_or_dtype, Shape):
    return shape_or_dtype
  return Shape(shape_or_dtype, dims or ())


class Builder:
  """Emits instructions into a computation, computing and checking each result shape.

  ``Builder(module, "name")`` starts a new computation (finish with ``build(root)``);
  ``Builder.into(computation, before=instr)`` appends to (or inserts into) an existing one,
  which is how passes create replacement instructions."""

  def __init__(self, module: Module | None, name: str = "computation"):
    self.module = module
    self.computation = Computation(name, None)
    if module is not None:
      module.add_computation(self.computation)
    self.before: Instruction | None = None

  @classmethod
  def into(cls, computation: Computation, before: Instruction | None = None) -> "Builder":
    b = cls.__new__(cls)
    b.module = computation.module
    b.computation = computation
    b.before = before
    return b

  def build(self, root: Instruction) -> Computation:
    self.computation.set_root(root)
    return self.computation

  # -- core ------------------------------------------------------------------------------------
  def emit(self, opcode: str, operands: Sequence[Instruction] = (), attrs: dict | None = None,
           shape: Shape | None = None, name: str | None = None) -> Instruction:
    """Create, shape-check and insert one instruction."""
    attrs = dict(attrs or {})
    operands = list(operands)
    for o in operands:
      if not isinstance(o, Instruction):
        raise ShapeError(f"{opcode}: operand {o!r} is not an Instruction")
    try:
      result = infer_shape(opcode, [o.shape for o in operands], attrs, shape)
    except ShapeError as e:
      names = ", ".join(f"{o.shape} %{o.name}" for o in operands)
      raise ShapeError(f"{e} [operands: {names}]") from None
    instr = Instruction(opcode, operands, result, attrs, name)
    return self.computation.add(instr, before=self.before)

  def parameter(self, shape: Shape, name: str | None = None, number: int | None = None):
    if number is None:
      number = len(self.computation.parameters)
    return self.emit("parameter", (), {"parameter_number": number}, shape,
                     name or f"p{number}")

  def constant(self, value, dtype=None) -> Instruction:
    """A constant array (a Python/NumPy scalar gives a rank-0 constant)."""
    if dtype is not None:
      try:
        arr = np.asarray(value, dtype=to_dtype(dtype))
      except OverflowError:  # e.g. -1 as u8: wrap like a C cast (all ones)
        arr = np.asarray(value).astype(to_dtype(dtype))
    elif isinstance(value, (np.ndarray, np.generic)):
      arr = np.asarray(value)
    elif isinstance(value, bool):
      arr = np.asarray(value, np.bool_)
    elif isinstance(value, float):
      arr = np.asarray(value, np.float32)
    elif isinstance(value, int):
      arr = np.asarray(value, np.int32)
    else:
      arr = np.asarray(value)
    arr = np.array(arr, dtype=to_dtype(arr.dtype), copy=True)
    arr.flags.writeable = False
    return self.emit("constant", (), {"value": arr})

  def full(self, value, shape: Shape) -> Instruction:
    """A splat: ``broadcast(constant(value))`` of ``shape``."""
    c = self.constant(value, shape.dtype)
    return c if shape.is_scalar else self.broadcast(c, shape.dims, ())

  # -- elementwise -----------------------------------------------------------------------------
  def compare(self, x, y, direction: str, total_order: bool = False):
    attrs = {"direction": direction}
    if total_order:
      attrs["type"] = "TOTALORDER"
    return self.emit("compare", (x, y), attrs)

  def eq(self, x, y): return self.compare(x, y, "EQ")
  def ne(self, x, y): return self.compare(x, y, "NE")
  def lt(self, x, y): return self.compare(x, y, "LT")
  def le(self, x, y): return self.compare(x, y, "LE")
  def gt(self, x, y): return self.compare(x, y, "GT")
  def ge(self, x, y): return self.compare(x, y, "GE")

  def select(self, pred, on_true, on_false):
    return self.emit("select", (pred, on_true, on_false))

  def clamp(self, lo, x, hi):
    return self.emit("clamp", (lo, x, hi))

  def convert(self, x, dtype):
    return self.emit("convert", (x,), {}, x.shape.with_dtype(dtype))

  def bitcast_convert(self, x, dtype):
    dt = to_dtype(dtype)
    a, b = x.dtype.itemsize, dt.itemsize
    dims = x.dims if a == b else (x.dims + (a // b,) if a > b else x.dims[:-1])
    return self.emit("bitcast-convert", (x,), {}, Shape(dt, dims))

  # -- structural ------------------------------------------------------------------------------
  def broadcast(self, x, dims: Sequence[int], dimensions: Sequence[int] = ()):
    """XLA broadcast: operand dimension i becomes output dimension ``dimensions[i]``."""
    return self.emit("broadcast", (x,), {"dimensions": tuple(dimensions)}, Shape(x.dtype, dims))

  def reshape(self, x, dims: Sequence[int]):
    return self.emit("reshape", (x,), {}, Shape(x.dtype, dims))

  def transpose(self, x, permutation: Sequence[int]):
    return self.emit("transpose", (x,), {"dimensions": tuple(permutation)})

  def slice(self, x, start, limit, strides=None):
    return self.emit("slice", (x,), {"start_indices": tuple(start), "limit_indices": tuple(limit),
                                     "strides": tuple(strides or (1,) * len(start))})

  def dynamic_slice(self, x, start_indices: Sequence[Instruction], sizes: Sequence[int]):
    return self.emit("dynamic-slice", (x, *start_indices), {"dynamic_slice_sizes": tuple(sizes)})

  def dynamic_update_slice(self, x, update, start_indices: Sequence[Instruction]):
    return self.emit("dynamic-update-slice", (x, update, *start_indices))

  def concatenate(self, xs: Sequence[Instruction], dimension: int):
    return self.emit("concatenate", tuple(xs), {"dimensions": (dimension,)})

  def pad(self, x, value, config: Sequence[tuple[int, int, int]]):
    return self.emit("pad", (x, value), {"padding_config": tuple(tuple(c) for c in config)})

  def iota(self, shape: Shape, iota_dimension: int):
    return self.emit("iota", (), {"iota_dimension": iota_dimension}, shape)

  def reverse(self, x, dimensions: Sequence[int]):
    return self.emit("reverse", (x,), {"dimensions": tuple(dimensions)})

  # -- reductions, contractions --------------------------------------------------------------
  def reduce(self, operands, inits, dimensions: Sequence[int], to_apply: Computation):
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    inits = list(inits) if isinstance(inits, (list, tuple)) else [inits]
    return self.emit("reduce", operands + inits,
                     {"dimensions": tuple(dimensions), "to_apply": to_apply})

  def reduce_window(self, operands, inits, to_apply: Computation, window_dimensions,
                    window_strides=None, padding=None, base_dilation=None, window_dilation=None):
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    inits = list(inits) if isinstance(inits, (list, tuple)) else [inits]
    r = len(window_dimensions)
    return self.emit("reduce-window", operands + inits, {
        "window_dimensions": tuple(window_dimensions),
        "window_strides": tuple(window_strides or (1,) * r),
        "padding": tuple(tuple(p) for p in (padding or ((0, 0),) * r)),
        "base_dilation": tuple(base_dilation or (1,) * r),
        "window_dilation": tuple(window_dilation or (1,) * r), "to_apply": to_apply})

  def dot(self, lhs, rhs, lhs_contracting_dims=(), rhs_contracting_dims=(), lhs_batch_dims=(),
          rhs_batch_dims=(), preferred_element_type=None, operand_precision=None):
    """``operand_precision``: None (default) or a pair of names ("default", "high",
    "highest"); a backend may compute a float32 dot in a narrower format (tf32 on tensor cores)
    only when neither operand asks for "highest"."""
    attrs = {"lhs_batch_dims": tuple(lhs_batch_dims), "rhs_batch_dims": tuple(rhs_batch_dims),
             "lhs_contracting_dims": tuple(lhs_contracting_dims),
             "rhs_contracting_dims": tuple(rhs_contracting_dims)}
    if preferred_element_type is not None:
      attrs["preferred_element_type"] = to_dtype(preferred_element_type)
    if operand_precision is not None and any(p != "default" for p in operand_precision):
      attrs["operand_precision"] = tuple(operand_precision)
    return self.emit("dot", (lhs, rhs), attrs)

  def dot_general(self, lhs, rhs, dimension_numbers, preferred_element_type=None,
                  operand_precision=None):
    """lax-style ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``."""
    (lc, rc), (lb, rb) = dimension_numbers
    return self.dot(lhs, rhs, lc, rc, lb, rb, preferred_element_type, operand_precision)

  def convolution(self, lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                  dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                  preferred_element_type=None, operand_precision=None):
    """``operand_precision``: as for ``dot``."""
    nd = lhs.shape.rank - 2
    if dimension_numbers is None:
      spec = tuple(range(nd + 2))
      dimension_numbers = (spec, spec, spec)
    attrs = {"window_strides": tuple(window_strides),
             "padding": tuple(tuple(p) for p in padding),
             "lhs_dilation": tuple(lhs_dilation or (1,) * nd),
             "rhs_dilation": tuple(rhs_dilation or (1,) * nd),
             "dimension_numbers": tuple(tuple(s) for s in dimension_numbers),
             "feature_group_count": feature_group_count,
             "batch_group_count": batch_group_count}
    if preferred_element_type is not None:
      attrs["preferred_element_type"] = to_dtype(preferred_element_type)
    if operand_precision is not None and any(p != "default" for p in operand_precision):
      attrs["operand_precision"] = tuple(operand_precision)
    return self.emit("convolution", (lhs, rhs), attrs)

  def gather(self, operand, indices, *, offset_dims, collapsed_slice_dims, start_index_map,
             slice_sizes, operand_batching_dims=(), start_indices_batching_dims=(),
             mode="clip", fill_value=None):
    attrs = {"offset_dims": tuple(offset_dims), "collapsed_slice_dims": tuple(collapsed_slice_dims),
             "start_index_map": tuple(start_index_map),
             "operand_batching_dims": tuple(operand_batching_dims),
             "start_indices_batching_dims": tuple(start_indices_batching_dims),
             "index_vector_dim": indices.shape.rank - 1, "slice_sizes": tuple(slice_sizes),
             "mode": mode}
    if fill_value is not None:
      attrs["fill_value"] = fill_value
    return self.emit("gather", (operand, indices), attrs)

  def scatter(self, operand, indices, updates, to_apply: Computation, *, update_window_dims,
              inserted_window_dims, scatter_dims_to_operand_dims, input_batching_dims=(),
              scatter_indices_batching_dims=(), mode="drop"):
    return self.emit("scatter", (operand, indices, updates), {
        "update_window_dims": tuple(update_window_dims),
        "inserted_window_dims": tuple(inserted_window_dims),
        "scatter_dims_to_operand_dims": tuple(scatter_dims_to_operand_dims),
        "input_batching_dims": tuple(input_batching_dims),
        "scatter_indices_batching_dims": tuple(scatter_indices_batching_dims),
        "index_vector_dim": indices.shape.rank - 1, "mode": mode, "to_apply": to_apply})

  def sort(self, operands, dimension: int, comparator: Computation, is_stable: bool = True,
           top_k: int | None = None):
    """``top_k``: only the first k positions along ``dimension`` are read (a backend may
    select them instead of sorting; the other positions are then unspecified)."""
    operands = list(operands) if isinstance(operands, (list, tuple)) else [operands]
    attrs = {"dimension": dimension, "is_stable": is_stable, "to_apply": comparator}
    if top_k is not None:
      attrs["top_k"] = int(top_k)
    return self.emit("sort", operands, attrs)

  def fft(self, x, fft_type: str, fft_length: Sequence[int]):
    return self.emit("fft", (x,), {"fft_type": fft_type,
                                   "fft_length": tuple(int(n) for n in fft_length)})

  # -- control flow, tuples, fusion ----------------------------------------------------------
  def while_loop(self, init, condition: Computation, body: Computation):
    return self.emit("while", (init,), {"condition": condition, "body": body})

  def conditional(self, selector, operands: Sequence[Instruction],
                  branches: Sequence[Computation]):
    return self.emit("conditional", (selector, *operands), {"branches": list(branches)})

  def tuple(self, xs: Sequence[Instruction]):
    return self.emit("tuple", tuple(xs))

  def get_tuple_element(self, x, index: int):
    return self.emit("get-tuple-element", (x,), {"index": index})

  def opt_barrier(self, xs: Sequence[Instruction]) -> list:
    """XLA's optimization barrier: ``xs`` unchanged (read through get-tuple-elements), but no
    pass merges or moves work across it (remat's recomputation reads its inputs through one,
    so CSE cannot merge it with the forward pass).  ``passes/barriers.py`` removes it once the
    simplifying passes are done."""
    t = self.emit("opt-barrier", tuple(xs))
    return [self.get_tuple_element(t, i) for i in range(len(xs))]

  def fusion(self, operands: Sequence[Instruction], calls: Computation, kind: str = "kLoop"):
    return self.emit("fusion", tuple(operands), {"kind": kind, "calls": calls})


def _method_name(opcode: str) -> str:
  name = opcode.replace("-", "_")
  return name + "_" if name in ("and", "or", "not") else name


def _make_unary(opcode):
  def method(self, x):
    return self.emit(opcode, (x,))
  method.__name__ = _method_name(opcode)
  method.__doc__ = f"Elementwise ``{opcode}``."
  return method


def _make_binary(opcode):
  def method(self, x, y):
    return self.emit(opcode, (x, y))
  method.__name__ = _method_name(opcode)
  method.__doc__ = f"Elementwise ``{opcode}`` (operands of equal shape)."
  return method


for _op in UNARY_OPS:
  setattr(Builder, _method_name(_op), _make_unary(_op))
for _op in BINARY_OPS:
  setattr(Builder, _method_name(_op), _make_binary(_op))
# Short aliases.
Builder.neg = Builder.negate
Builder.exp = Builder.exponential
Builder.sin = Builder.sine
Builder.cos = Builder.cosine
Builder.sub = Builder.subtract
Builder.mul = Builder.multiply
Builder.div = Builder.divide
Builder.max = Builder.maximum
Builder.min = Builder.minimum
Builder.pow = Builder.power


def scalar_computation(module: Module, opcode: str, dtype, name: str | None = None) -> Computation:
  """A two-scalar-argument computation applying one binary op: a reducer (``add``,
  ``maximum``, ...) or, for ``opcode`` "LT"/"GT"/..., a one-key sort comparator."""
  dt = to_dtype(dtype)
  b = Builder(module, name or f"{opcode.lower()}_{dtype_name(dt)}")
  x = b.parameter(Shape(dt, ()), "lhs")
  y = b.parameter(Shape(dt, ()), "rhs")
  if opcode in COMPARISON_DIRECTIONS:
    return b.build(b.compare(x, y, opcode))
  return b.build(b.emit(opcode, (x, y)))
