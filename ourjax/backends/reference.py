"""The reference backend: a NumPy interpreter of HLO modules, and the oracle every other backend
is compared with (DESIGN rule 8).

    exe = compile(module)          # ReferenceExecutable
    outs = exe(x, y)               # tuple of numpy arrays (the root's tuple elements, or 1-tuple)

Each instruction is evaluated in order from its operands' values; a value is a C-contiguous
numpy array of exactly the instruction's shape and element type, or a Python tuple of values.
Fusions run their fused computation; reduce, reduce-window, scatter and sort call their
sub-computations vectorised over arrays (a reducer made only of scalar elementwise ops is
evaluated on whole arrays at once), while and conditional run their sub-computations.
Semantics that take more than one NumPy call live in ``reference_ops``.
"""
from __future__ import annotations

import numpy as np

from ourjax.backends import reference_ops as rops
from ourjax.lowering import hlo
from ourjax.lowering.hlo import Computation, Instruction, Module

__all__ = ["ReferenceExecutable", "compile", "execute", "evaluate_computation",
           "evaluate_instruction", "ReferenceError"]


class ReferenceError(RuntimeError):
  """The reference executor could not run an instruction; the message names it."""


# ---------------------------------------------------------------------------------------------
# elementwise op table: opcode -> function of (already upcast) numpy arrays
# ---------------------------------------------------------------------------------------------

def _rsqrt(x):
  one = np.ones((), x.dtype)
  return one / np.sqrt(x)


def _int_or(fn_int, fn_float):
  return lambda x, y: fn_int(x, y) if rops.is_integer(x.dtype) else fn_float(x, y)


def _logical(fn_bool, fn_int):
  def f(*xs):
    return fn_bool(*xs) if xs[0].dtype == np.bool_ else fn_int(*xs)
  return f


_UNARY = {
    "abs": np.abs, "negate": np.negative, "sign": rops.sign, "floor": np.floor, "ceil": np.ceil,
    "round-nearest-even": rops.round_half_to_even,
    "round-nearest-afz": rops.round_half_away_from_zero, "is-finite": np.isfinite,
    "exponential": np.exp, "exp2": np.exp2, "exponential-minus-one": np.expm1, "log": np.log,
    "log-plus-one": rops.log1p, "tanh": np.tanh, "logistic": rops.logistic, "sine": np.sin,
    "cosine": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sqrt": np.sqrt, "rsqrt": _rsqrt, "cbrt": np.cbrt, "erf": rops.erf,
    "erfc": rops.erfc,
    "erf-inv": rops.erf_inv, "lgamma": rops.lgamma, "digamma": rops.digamma,
    "not": _logical(np.logical_not, np.invert), "popcnt": rops.population_count,
    "count-leading-zeros": rops.count_leading_zeros, "real": np.real, "imag": np.imag,
    "copy": np.copy,
}

_BINARY = {
    "add": _logical(np.logical_or, np.add), "subtract": np.subtract,
    "multiply": _logical(np.logical_and, np.multiply),
    "divide": _int_or(rops.integer_div, np.divide),
    "remainder": _int_or(rops.integer_rem, np.fmod),
    "power": _int_or(rops.integer_pow, rops.float_pow), "atan2": np.arctan2,
    "maximum": rops.maximum, "minimum": rops.minimum,
    "and": _logical(np.logical_and, np.bitwise_and), "or": _logical(np.logical_or, np.bitwise_or),
    "xor": _logical(np.logical_xor, np.bitwise_xor), "shift-left": rops.shift_left,
    "shift-right-arithmetic": rops.shift_right_arithmetic,
    "shift-right-logical": rops.shift_right_logical,
    "complex": lambda x, y: x + 1j * y,
}


def _elementwise(fn, out_dtype, *xs):
  return rops.elementwise(fn, *xs, out_dtype=out_dtype)


# ---------------------------------------------------------------------------------------------
# sub-computations as vectorised functions
# ---------------------------------------------------------------------------------------------

_SCALAR_VECTORISABLE = set(_UNARY) | set(_BINARY) | {
    "parameter", "constant", "compare", "select", "clamp", "convert", "tuple",
    "get-tuple-element"}

_REDUCER_UFUNCS = {
    # (opcode, is_pred) -> ufunc
    ("add", False): np.add, ("multiply", False): np.multiply, ("maximum", False): rops.maximum,
    ("minimum", False): rops.minimum, ("and", False): np.bitwise_and, ("or", False): np.bitwise_or,
    ("xor", False): np.bitwise_xor, ("add", True): np.logical_or,
    ("multiply", True): np.logical_and, ("maximum", True): np.logical_or,
    ("minimum", True): np.logical_and, ("and", True): np.logical_and,
    ("or", True): np.logical_or, ("xor", True): np.logical_xor,
}


def _is_vectorisable(comp: Computation) -> bool:
  return all(i.opcode in _SCALAR_VECTORISABLE and (i.shape.is_tuple or i.shape.is_scalar)
             for i in comp.instructions)


def binary_ufunc(comp: Computation):
  """The NumPy ufunc equivalent to a computation ``op(p0, p1)`` of one commutative-enough
  binary op (add, multiply, max, min, and, or, xor), or None."""
  root = comp.root
  if (len(comp.parameters) == 2 and root.opcode != "parameter"
      and len(root.operands) == 2
      and set(root.operands) == set(comp.parameters) and root.operands[0] is not root.operands[1]):
    return _REDUCER_UFUNCS.get((root.opcode, root.dtype == np.bool_))
  return None


def vectorised(comp: Computation):
  """``fn(*arrays) -> value`` evaluating a computation of scalars on whole arrays at once (all
  parameters broadcast against each other) when its instructions are scalar elementwise ops;
  otherwise an elementwise loop over scalar evaluations."""
  if _is_vectorisable(comp):
    def run(*args):
      return evaluate_computation(comp, args, _vectorised=True)
    return run

  def loop(*args):
    args = np.broadcast_arrays(*[np.asarray(a) for a in args])
    shape = args[0].shape
    outs = None
    for idx in np.ndindex(shape):
      r = evaluate_computation(comp, [np.asarray(a[idx]) for a in args])
      rs = r if isinstance(r, tuple) else (r,)
      if outs is None:
        outs = [np.empty(shape, x.dtype) for x in rs]
      for o, x in zip(outs, rs):
        o[idx] = x
    if outs is None:
      rshape = comp.root.shape
      shapes = rshape.tuple_shapes if rshape.is_tuple else (rshape,)
      outs = [np.empty(shape, s.dtype) for s in shapes]
    return tuple(outs) if comp.root.shape.is_tuple else outs[0]
  return loop


def _reducer(comp: Computation, n: int):
  """A ``reference_ops.reduce``-style computation argument for a reducer of ``n`` operands."""
  if n == 1:
    uf = binary_ufunc(comp)
    if uf is not None:
      return uf
    fn = vectorised(comp)
    return lambda acc, x: fn(acc, x)
  fn = vectorised(comp)

  def combine(accs, xs):
    return fn(*accs, *xs)
  return rops.tuple_combine(combine)


# ---------------------------------------------------------------------------------------------
# instruction evaluation
# ---------------------------------------------------------------------------------------------

def _shape_array(x, shape: hlo.Shape) -> np.ndarray:
  x = np.asarray(x)
  if x.dtype != shape.dtype:
    x = x.astype(shape.dtype)
  if x.shape != shape.dims:
    x = x.reshape(shape.dims)
  return x if x.flags.c_contiguous else np.array(x, order="C")


def _impl_compare(instr, x, y):
  a = instr.attrs
  total = a.get("type") == "TOTALORDER"
  if not total and rops.compute_dtype(x.dtype) != x.dtype:
    x, y = x.astype(np.float32), y.astype(np.float32)
  return rops.compare(x, y, direction=a["direction"], total_order=total)


def _impl_reduce(instr, *vals):
  n = len(vals) // 2
  a = instr.attrs
  r = rops.reduce(list(vals[:n]), list(vals[n:]), computation=_reducer(a["to_apply"], n),
                  dimensions=a["dimensions"])
  return r[0] if n == 1 else tuple(r)


def _impl_reduce_window(instr, *vals):
  n = len(vals) // 2
  a = instr.attrs
  r = rops.reduce_window(list(vals[:n]), list(vals[n:]), computation=_reducer(a["to_apply"], n),
                         window_dimensions=a["window_dimensions"],
                         window_strides=a["window_strides"], padding=a["padding"],
                         base_dilation=a["base_dilation"], window_dilation=a["window_dilation"])
  return r[0] if n == 1 else tuple(r)


def _impl_dot(instr, lhs, rhs):
  a = instr.attrs
  return rops.dot_general(lhs, rhs, ((a["lhs_contracting_dims"], a["rhs_contracting_dims"]),
                                     (a["lhs_batch_dims"], a["rhs_batch_dims"])),
                          preferred_element_type=instr.dtype)


def _impl_attention(instr, q, k, v, *arrays):
  """``softmax(f(q kᵀ * scale)) v`` over the last dims (``lowering/passes/attention.py``;
  ``f`` the scores computation, ``calls``, of the scores and ``arrays``), as the unfused
  instructions compute it: in the operands' type, the max subtracted first."""
  nb = q.ndim - 2
  batch = tuple(range(nb))
  s = rops.dot_general(q, k, (((nb + 1,), (nb + 1,)), (batch, batch)),
                       preferred_element_type=q.dtype)
  s = s * np.asarray(instr.attrs["scale"], s.dtype)
  if instr.attrs.get("calls") is not None:
    s = evaluate_computation(instr.attrs["calls"], [s, *arrays])
  e = np.exp(s - np.max(s, axis=-1, keepdims=True))
  p = (e / np.sum(e, axis=-1, keepdims=True)).astype(q.dtype)
  return rops.dot_general(p, v, (((nb + 1,), (nb,)), (batch, batch)),
                          preferred_element_type=instr.dtype)


def _impl_attention_grad(instr, q, k, v, o, do, *arrays):
  """``(dq, dk, dv)`` of ``attention(q, k, v)`` for the cotangent ``do``
  (``lowering/passes/attention_grad.py``), as the unfused backward computes them: ``P (dP -
  rowsum(P dP))`` through the gradient computation ``grad_calls``, then the three dots."""
  nb = q.ndim - 2
  batch = tuple(range(nb))
  fc, gc = instr.attrs.get("calls"), instr.attrs.get("grad_calls")
  n = 0 if fc is None else len(fc.parameters) - 1
  s = rops.dot_general(q, k, (((nb + 1,), (nb + 1,)), (batch, batch)),
                       preferred_element_type=q.dtype)
  s = s * np.asarray(instr.attrs["scale"], s.dtype)
  if fc is not None:
    s = evaluate_computation(fc, [s, *arrays[:n]])
  e = np.exp(s - np.max(s, axis=-1, keepdims=True))
  p = (e / np.sum(e, axis=-1, keepdims=True)).astype(q.dtype)
  dp = rops.dot_general(do, v, (((nb + 1,), (nb + 1,)), (batch, batch)),
                        preferred_element_type=q.dtype)
  t = p * dp
  wide = np.float32 if t.dtype.itemsize < 4 else t.dtype     # (16-bit types sum in f32)
  w = t + p * (-np.sum(t.astype(wide), axis=-1, keepdims=True)).astype(t.dtype)
  if gc is not None:
    w = evaluate_computation(gc, [w, *arrays[n:]])
  ds = np.asarray(w, q.dtype)
  dq = rops.dot_general(ds, k, (((nb + 1,), (nb,)), (batch, batch)),
                        preferred_element_type=q.dtype)
  dk = rops.dot_general(ds, q, (((nb,), (nb,)), (batch, batch)),
                        preferred_element_type=q.dtype)
  dv = rops.dot_general(p, do, (((nb,), (nb,)), (batch, batch)),
                        preferred_element_type=q.dtype)
  return dq, dk, dv


def _impl_convolution(instr, lhs, rhs):
  a = instr.attrs
  return rops.conv_general_dilated(
      lhs, rhs, a["window_strides"], a["padding"], a["lhs_dilation"], a["rhs_dilation"],
      a["dimension_numbers"], a["feature_group_count"], a["batch_group_count"],
      preferred_element_type=instr.dtype)


def _impl_gather(instr, operand, indices):
  a = instr.attrs
  return rops.gather(operand, indices, offset_dims=a["offset_dims"],
                     collapsed_slice_dims=a["collapsed_slice_dims"],
                     start_index_map=a["start_index_map"], slice_sizes=a["slice_sizes"],
                     operand_batching_dims=a.get("operand_batching_dims", ()),
                     start_indices_batching_dims=a.get("start_indices_batching_dims", ()),
                     mode=a.get("mode", "clip"), fill_value=a.get("fill_value"))


def _impl_scatter(instr, operand, indices, updates):
  a = instr.attrs
  comp = a["to_apply"]
  if comp.root is comp.parameters[1]:
    combine = None
  else:
    combine = binary_ufunc(comp)
    if combine is None or rops.compute_dtype(operand.dtype) != operand.dtype:
      fn = vectorised(comp)
      dt = operand.dtype

      def combine(old, new, fn=fn, dt=dt):
        return np.asarray(fn(np.asarray(old, dt), np.asarray(new, dt)), dt)
  return rops.scatter(operand, indices, updates, update_window_dims=a["update_window_dims"],
                      inserted_window_dims=a["inserted_window_dims"],
                      scatter_dims_to_operand_dims=a["scatter_dims_to_operand_dims"],
                      operand_batching_dims=a.get("input_batching_dims", ()),
                      scatter_indices_batching_dims=a.get("scatter_indices_batching_dims", ()),
                      combine=combine, mode=a.get("mode", "drop"))


def _impl_sort(instr, *vals):
  a = instr.attrs
  fn = vectorised(a["to_apply"])

  def less_than(lhs, rhs):
    args = []
    for l, r in zip(lhs, rhs):
      args += [l, r]
    return fn(*args)
  out = rops.sort_by_comparator(list(vals), dimension=a.get("dimension", 0), less_than=less_than,
                                is_stable=a.get("is_stable", False))
  return out[0] if len(out) == 1 else tuple(out)


def _impl_while(instr, init):
  a = instr.attrs
  cond, body = a["condition"], a["body"]
  state = init
  while bool(evaluate_computation(cond, [state])):
    state = evaluate_computation(body, [state])
  return state


def _impl_conditional(instr, selector, *operands):
  branches = instr.attrs["branches"]
  if selector.dtype == np.bool_:
    k = 0 if bool(selector) else 1
  else:
    k = int(selector)
    if not 0 <= k < len(branches):
      k = len(branches) - 1  # XLA: an out-of-range index runs the last branch
  return evaluate_computation(branches[k], [operands[k]])


def _impl_fusion(instr, *vals):
  return evaluate_computation(instr.attrs["calls"], list(vals))


def _impl_select(instr, p, t, f):
  return np.where(p, t, f)


_IMPLS = {
    "parameter": None, "constant": lambda instr: instr.attrs["value"],
    "compare": _impl_compare, "select": _impl_select,
    "clamp": lambda instr, lo, x, hi: rops.clamp(lo, x, hi),
    "convert": lambda instr, x: rops.convert_element_type(x, instr.dtype),
    "bitcast-convert": lambda instr, x: rops.bitcast_convert_type(x, instr.dtype),
    "iota": lambda instr: rops.iota(instr.dtype, instr.dims, instr.attrs["iota_dimension"]),
    "broadcast": lambda instr, x: rops.broadcast_in_dim(x, instr.dims,
                                                        instr.attrs["dimensions"]),
    "reshape": lambda instr, x: x.reshape(instr.dims),
    "transpose": lambda instr, x: x.transpose(instr.attrs["dimensions"]),
    "slice": lambda instr, x: rops.slice(x, instr.attrs["start_indices"],
                                         instr.attrs["limit_indices"], instr.attrs["strides"]),
    "dynamic-slice": lambda instr, x, *idx: rops.dynamic_slice(
        x, idx, instr.attrs["dynamic_slice_sizes"]),
    "dynamic-update-slice": lambda instr, x, u, *idx: rops.dynamic_update_slice(x, u, idx),
    "concatenate": lambda instr, *xs: rops.concatenate(xs, instr.attrs["dimensions"][0]),
    "pad": lambda instr, x, v: rops.pad(x, v, instr.attrs["padding_config"]),
    "reverse": lambda instr, x: np.flip(x, tuple(instr.attrs["dimensions"])) if
    instr.attrs["dimensions"] else x,
    "reduce": _impl_reduce, "reduce-window": _impl_reduce_window, "dot": _impl_dot,
    "convolution": _impl_convolution, "attention": _impl_attention,
    "attention-grad": _impl_attention_grad, "gather": _impl_gather, "scatter": _impl_scatter,
    "sort": _impl_sort, "while": _impl_while, "conditional": _impl_conditional,
    "fft": lambda instr, x: rops.fft(x, fft_type=instr.attrs["fft_type"],
                                     fft_lengths=instr.attrs["fft_length"]),
    "tuple": lambda instr, *xs: tuple(xs),
    "opt-barrier": lambda instr, *xs: tuple(xs),
    "get-tuple-element": lambda instr, t: t[instr.attrs["index"]],
    "fusion": _impl_fusion,
}


def _finish(value, shape: hlo.Shape):
  if shape.is_tuple:
    return tuple(value)
  return _shape_array(value, shape)


def evaluate_instruction(instr: Instruction, operand_values, *, _vectorised: bool = False):
  """The value of ``instr`` given its operands' values (parameters are not evaluated here)."""
  op = instr.opcode
  try:
    if op in _UNARY:
      (x,) = operand_values
      r = _elementwise(_UNARY[op], instr.dtype, x)
    elif op in _BINARY:
      x, y = operand_values
      r = _elementwise(_BINARY[op], instr.dtype, x, y)
    else:
      impl = _IMPLS[op]
      r = impl(instr, *operand_values)
  except (hlo.HloError, ReferenceError):
    raise
  except Exception as e:  # name the instruction in the error
    raise ReferenceError(f"reference: evaluating {instr.to_string()}: "
                         f"{type(e).__name__}: {e}") from e
  if _vectorised:
    return r if instr.shape.is_tuple else np.asarray(r).astype(instr.dtype, copy=False)
  return _finish(r, instr.shape)


def evaluate_computation(comp: Computation, args, *, _vectorised: bool = False):
  """Run ``comp`` on argument values; returns the root's value."""
  if len(args) != len(comp.parameters):
    raise ReferenceError(f"reference: %{comp.name} takes {len(comp.parameters)} arguments, "
                         f"got {len(args)}")
  env: dict[Instruction, object] = {}
  for p, a in zip(comp.parameters, args):
    env[p] = a
  remaining = {}
  for instr in comp.instructions:
    for o in instr.operands:
      remaining[o] = remaining.get(o, 0) + 1
  for instr in comp.instructions:
    if instr.opcode == "parameter":
      continue
    env[instr] = evaluate_instruction(instr, [env[o] for o in instr.operands],
                                      _vectorised=_vectorised)
    for o in instr.operands:  # free values as soon as their last user has run
      remaining[o] -= 1
      if remaining[o] == 0 and o is not comp.root:
        env.pop(o, None)
  return env[comp.root]


def _check_arg(p: Instruction, a) -> np.ndarray:
  if not isinstance(a, (np.ndarray, np.generic)):
    a = np.asarray(a, dtype=p.dtype)  # Python scalars and lists take the parameter's type
  a = np.asarray(a)
  if a.dtype != p.dtype or a.shape != p.dims:
    raise ReferenceError(f"reference: argument {p.attrs['parameter_number']} (%{p.name}) must be "
                         f"{p.shape}, got {a.dtype}{list(a.shape)}")
  return a if a.flags.c_contiguous else np.array(a, order="C")  # (ascontiguousarray makes 0-d 1-d)


class ReferenceExecutable:
  """A module compiled for the reference backend; calling it interprets the entry computation.
  Returns a tuple of numpy arrays: the elements of a tuple-shaped root, or the single result."""

  def __init__(self, module: Module):
    self.module = module
    entry = module.entry
    self.parameter_shapes = [p.shape for p in entry.parameters]
    self.result_shape = entry.root.shape

  def __call__(self, *args):
    entry = self.module.entry
    if len(args) != len(entry.parameters):
      raise ReferenceError(f"reference: {self.module.name} takes {len(entry.parameters)} "
                           f"arguments, got {len(args)}")
    vals = [_check_arg(p, a) for p, a in zip(entry.parameters, args)]
    out = evaluate_computation(entry, vals)
    outs = tuple(out) if self.result_shape.is_tuple else (out,)
    return tuple(np.array(o, copy=True) for o in outs)  # never alias inputs or constants


def compile(module: Module) -> ReferenceExecutable:  # noqa: A001  (backend API name)
  """Verify ``module`` and return a callable ``(*numpy arrays) -> tuple of numpy arrays``."""
  hlo.verify(module)
  return ReferenceExecutable(module)


def execute(module: Module, *args):
  """``compile(module)(*args)``."""
  return compile(module)(*args)
