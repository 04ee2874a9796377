"""The XLA-style text of HLO instructions (``Instruction.to_string``, ``Module.to_string``):
operands, attributes, constants and windows.  Part of ``hlo``, split out of hlo.py."""
from __future__ import annotations

import math

import numpy as np

from ourjax.lowering.hlo import Instruction, is_complex, is_int, is_pred

__all__ = ["constant_text"]

def _ints(xs) -> str:
  return "{" + ",".join(str(int(x)) for x in xs) + "}"


def _scalar_text(v, dt) -> str:
  if is_pred(dt):
    return "true" if bool(v) else "false"
  if is_int(dt):
    return str(int(v))
  if is_complex(dt):
    return f"({_scalar_text(v.real, np.dtype(np.float64))}, " \
           f"{_scalar_text(v.imag, np.dtype(np.float64))})"
  f = float(v)
  if math.isnan(f):
    return "-nan" if math.copysign(1.0, f) < 0 else "nan"
  if math.isinf(f):
    return "inf" if f > 0 else "-inf"
  if dt == np.float64:
    return repr(f)
  s = str(np.float32(f)) if dt == np.float32 else repr(f)
  return s


def constant_text(value: np.ndarray, limit: int = 16) -> str:
  """XLA-style literal: ``1.5``, ``{1, 2}``, ``{ {1, 2}, {3, 4} }``; ``{...}`` past ``limit``."""
  if value.ndim == 0:
    return _scalar_text(value[()], value.dtype)
  if value.size > limit:
    return "{...}"

  def rec(a):
    if a.ndim == 1:
      return "{" + ", ".join(_scalar_text(x, a.dtype) for x in a) + "}"
    return "{ " + ", ".join(rec(x) for x in a) + " }"
  return rec(value)


def _window_text(sizes, strides, padding, lhs_dil, rhs_dil) -> str:
  parts = ["size=" + "x".join(map(str, sizes))]
  if any(s != 1 for s in strides):
    parts.append("stride=" + "x".join(map(str, strides)))
  if any(p != (0, 0) for p in map(tuple, padding)):
    parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in padding))
  if any(d != 1 for d in lhs_dil):
    parts.append("lhs_dilate=" + "x".join(map(str, lhs_dil)))
  if any(d != 1 for d in rhs_dil):
    parts.append("rhs_dilate=" + "x".join(map(str, rhs_dil)))
  return "{" + " ".join(parts) + "}"


def _dim_labels(specs) -> str:
  lspec, rspec, ospec = specs

  def one(spec, a, b):
    labels = [""] * len(spec)
    labels[spec[0]], labels[spec[1]] = a, b
    for k, d in enumerate(spec[2:]):
      labels[d] = str(k)
    return "".join(labels)
  return f"{one(lspec, 'b', 'f')}_{one(rspec, 'o', 'i')}->{one(ospec, 'b', 'f')}"


def _attrs_text(instr: Instruction) -> list[str]:
  a, op = instr.attrs, instr.opcode
  out = []
  if op in ("broadcast", "transpose", "reverse", "reduce", "concatenate"):
    out.append(f"dimensions={_ints(a.get('dimensions', ()))}")
  elif op == "slice":
    strides = a.get("strides") or (1,) * len(a["start_indices"])
    out.append("slice={" + ", ".join(
        f"[{s}:{l}]" if st == 1 else f"[{s}:{l}:{st}]"
        for s, l, st in zip(a["start_indices"], a["limit_indices"], strides)) + "}")
  elif op == "dynamic-slice":
    out.append(f"dynamic_slice_sizes={_ints(a['dynamic_slice_sizes'])}")
  elif op == "pad":
    out.append("padding=" + "x".join(
        f"{lo}_{hi}" + (f"_{i}" if i else "") for lo, hi, i in a["padding_config"]))
  elif op == "iota":
    out.append(f"iota_dimension={a['iota_dimension']}")
  elif op == "compare":
    out.append(f"direction={a['direction']}")
    if a.get("type"):
      out.append(f"type={a['type']}")
  elif op == "get-tuple-element":
    out.append(f"index={a['index']}")
  elif op == "reduce-window":
    out.append("window=" + _window_text(a["window_dimensions"], a["window_strides"],
                                        a["padding"], a["base_dilation"], a["window_dilation"]))
  elif op == "dot":
    for k in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"):
      if a.get(k) or k.endswith("contracting_dims"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    if a.get("operand_precision"):
      out.append("operand_precision={" + ",".join(a["operand_precision"]) + "}")
  elif op == "convolution":
    nd = len(a["window_strides"])
    lspec, rspec, _ = a["dimension_numbers"]
    sizes = [instr.operands[1].dims[rspec[2 + k]] for k in range(nd)]
    out.append("window=" + _window_text(sizes, a["window_strides"], a["padding"],
                                        a["lhs_dilation"], a["rhs_dilation"]))
    out.append(f"dim_labels={_dim_labels(a['dimension_numbers'])}")
    if a.get("feature_group_count", 1) != 1:
      out.append(f"feature_group_count={a['feature_group_count']}")
    if a.get("batch_group_count", 1) != 1:
      out.append(f"batch_group_count={a['batch_group_count']}")
    if a.get("operand_precision"):
      out.append("operand_precision={" + ",".join(a["operand_precision"]) + "}")
  elif op == "gather":
    for k in ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
              "start_indices_batching_dims"):
      if a.get(k) or k in ("offset_dims", "collapsed_slice_dims", "start_index_map"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    out.append(f"index_vector_dim={a['index_vector_dim']}")
    out.append(f"slice_sizes={_ints(a['slice_sizes'])}")
    if a.get("mode", "clip") != "clip":
      out.append(f"mode={a['mode']}")
    if a.get("fill_value") is not None:
      out.append(f"fill_value={a['fill_value']}")
  elif op == "scatter":
    for k in ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
              "input_batching_dims", "scatter_indices_batching_dims"):
      if a.get(k) or k in ("update_window_dims", "inserted_window_dims",
                           "scatter_dims_to_operand_dims"):
        out.append(f"{k}={_ints(a.get(k, ()))}")
    out.append(f"index_vector_dim={a['index_vector_dim']}")
    if a.get("mode", "drop") != "drop":
      out.append(f"mode={a['mode']}")
  elif op == "fft":
    out.append(f"fft_type={a['fft_type']}, fft_length={_ints(a['fft_length'])}")
  elif op == "sort":
    out.append(f"dimensions={{{a.get('dimension', 0)}}}")
    if a.get("is_stable"):
      out.append("is_stable=true")
    if a.get("top_k") is not None:
      out.append(f"top_k={a['top_k']}")
  elif op == "fusion":
    out.append(f"kind={a['kind']}")
  elif op in ("attention", "attention-grad"):
    out.append(f"scale={_scalar_text(a['scale'], np.dtype(np.float32))}")
  # called computations last, in XLA's spelling
  if op == "while":
    out.append(f"condition=%{a['condition'].name}, body=%{a['body'].name}")
  elif op == "conditional":
    br = a["branches"]
    if instr.operands[0].dtype == np.bool_:
      out.append(f"true_computation=%{br[0].name}, false_computation=%{br[1].name}")
    else:
      out.append("branch_computations={" + ", ".join(f"%{c.name}" for c in br) + "}")
  elif op in ("fusion", "attention", "attention-grad") and (
      a.get("calls") is not None or a.get("grad_calls") is not None):
    if a.get("calls") is not None:
      out.append(f"calls=%{a['calls'].name}")
    if a.get("grad_calls") is not None:
      out.append(f"grad_calls=%{a['grad_calls'].name}")
  elif "to_apply" in a:
    out.append(f"to_apply=%{a['to_apply'].name}")
  return out


def _instruction_text(instr: Instruction, operand_shapes: bool = True) -> str:
  if instr.opcode == "parameter":
    args = str(instr.attrs["parameter_number"])
  elif instr.opcode == "constant":
    args = constant_text(instr.attrs["value"])
  else:
    args = ", ".join(f"{o.shape} %{o.name}" if operand_shapes else f"%{o.name}"
                     for o in instr.operands)
  attrs = _attrs_text(instr)
  tail = (", " + ", ".join(attrs)) if attrs else ""
  return f"%{instr.name} = {instr.shape} {instr.opcode}({args}){tail}"
